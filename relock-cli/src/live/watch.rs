//! `relock watch NAME`: one name, its holders with their lease draining, its waiters and its
//! releases per second.

use std::io::Write;
use std::time::{Duration, Instant};

use crossterm::event::{Event, EventStream};
use futures::StreamExt;
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};
use ratatui::{DefaultTerminal, Frame};
use relock::inspect::{Inspection, Kind};
use relock::Client;

use crate::{failed, json, text, Failure, Outcome};

use super::{asked, Asked, Releases};

/// What the watch view remembers between refreshes.
pub(super) struct Watched {
    name: String,
    seen: Option<Inspection>,
    /// The longest lease seen, the full length of the lease bar.
    longest_ms: i64,
    pub(super) releases: Releases,
    error: Option<String>,
    /// The holders last seen, and since when they have held as far as this view saw.
    held: Option<(Vec<String>, Instant)>,
}

impl Watched {
    pub(super) fn new(name: String, seen: Inspection, releases: Releases) -> Watched {
        let mut watched = Watched {
            name,
            longest_ms: seen.pttl_ms,
            seen: None,
            releases,
            error: None,
            held: None,
        };
        watched.saw(seen);
        watched
    }

    fn saw(&mut self, seen: Inspection) {
        self.longest_ms = self.longest_ms.max(seen.pttl_ms);
        let fields: Vec<String> = seen.holders.iter().map(|h| h.party.field.clone()).collect();
        self.held = match self.held.take() {
            _ if fields.is_empty() => None,
            Some((same, since)) if same == fields => Some((same, since)),
            _ => Some((fields, Instant::now())),
        };
        self.seen = Some(seen);
        self.error = None;
    }

    async fn refresh(&mut self, client: &Client) {
        match client.inspect(&self.name).await {
            Ok(seen) => self.saw(seen),
            Err(e) => self.error = Some(e.to_string()),
        }
    }
}

/// `relock watch NAME`.
pub(crate) async fn watch(
    client: &Client,
    url: &str,
    name: &str,
    interval: Duration,
    json: bool,
) -> Outcome {
    let first = client.inspect(name).await.map_err(failed)?;
    if let Kind::Other(kind) = &first.kind {
        return Err(Failure::NotFound(format!(
            "`{name}` is a {kind}, not a lock or synchronizer relock knows"
        )));
    }
    let releases = Releases::start(url, name).await;
    let mut watched = Watched::new(name.to_owned(), first, releases);
    if json {
        let mut out = std::io::stdout();
        loop {
            if let Some(seen) = &watched.seen {
                let mut line = json::inspection(seen);
                line["releases_per_s"] = serde_json::json!(watched.releases.rate());
                if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                    break; // the reader went away
                }
            }
            tokio::time::sleep(interval).await;
            watched.refresh(client).await;
            if let Some(error) = &watched.error {
                return Err(Failure::Error(error.clone()));
            }
        }
        watched.releases.stop().await;
        return Ok(());
    }
    let mut terminal = ratatui::init();
    let result = watch_loop(&mut terminal, client, &mut watched, interval).await;
    ratatui::restore();
    watched.releases.stop().await;
    result.map(|_| ())
}

/// Runs the watch view until a key ends it: `Ok(true)` to quit, `Ok(false)` to go back.
pub(super) async fn watch_loop(
    terminal: &mut DefaultTerminal,
    client: &Client,
    watched: &mut Watched,
    interval: Duration,
) -> Result<bool, Failure> {
    let mut keys = EventStream::new();
    let mut tick = tokio::time::interval(interval);
    loop {
        let rate = watched.releases.rate();
        terminal
            .draw(|frame| draw_watch(frame, watched, rate, interval))
            .map_err(|e| Failure::Error(format!("cannot draw: {e}")))?;
        tokio::select! {
            event = keys.next() => match event {
                Some(Ok(Event::Key(key))) => match asked(key) {
                    Asked::Quit => return Ok(true),
                    Asked::Back => return Ok(false),
                    _ => {}
                },
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(Failure::Error(format!("cannot read keys: {e}"))),
                None => return Ok(true),
            },
            _ = tick.tick() => watched.refresh(client).await,
        }
    }
}

/// A lease bar `width` cells wide: full for `longest` ms, empty at 0.
fn bar(left_ms: i64, longest_ms: i64, width: usize) -> String {
    let filled = if longest_ms <= 0 || left_ms <= 0 {
        0
    } else {
        ((left_ms as f64 / longest_ms as f64) * width as f64).round() as usize
    }
    .min(width);
    format!("{}{}", "█".repeat(filled), "░".repeat(width - filled))
}

fn draw_watch(frame: &mut Frame<'_>, watched: &Watched, rate: Option<f64>, interval: Duration) {
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut lines: Vec<Line<'_>> = Vec::new();
    let title = match &watched.seen {
        Some(seen) => format!(
            " relock watch {} · {} · {} ",
            watched.name,
            seen.kind.label(),
            if seen.holders.is_empty() {
                "free"
            } else {
                "held"
            }
        ),
        None => format!(" relock watch {} ", watched.name),
    };
    if let Some(seen) = &watched.seen {
        let lease = text::lease(seen);
        lines.push(Line::from(vec![
            Span::styled("Lease  ", bold),
            Span::raw(format!(
                "{} {lease}",
                bar(seen.pttl_ms, watched.longest_ms, 30)
            )),
        ]));
        if let Some(mode) = &seen.mode {
            lines.push(Line::from(vec![
                Span::styled("Mode   ", bold),
                Span::raw(mode.clone()),
            ]));
        }
        if let Some(token) = seen.token {
            lines.push(Line::from(vec![
                Span::styled("Token  ", bold),
                Span::raw(token.to_string()),
            ]));
        }
        if let Some(count) = seen.count {
            lines.push(Line::from(vec![
                Span::styled("Count  ", bold),
                Span::raw(count.to_string()),
            ]));
        }
        let held = match &watched.held {
            Some((_, since)) => format!(", seen held for {}", text::age(since.elapsed())),
            None => String::new(),
        };
        lines.push(Line::from(Span::styled(
            format!("Holders ({}){held}", seen.holders.len()),
            bold,
        )));
        if seen.holders.is_empty() {
            lines.push(Line::from("  nobody"));
        }
        for holder in &seen.holders {
            let mut who = format!("  {} ×{}", text::short(&holder.party), holder.holds);
            if holder.writer {
                who.push_str(" (writer)");
            }
            lines.push(Line::from(who));
            lines.push(Line::from(format!(
                "    {}",
                text::who(&holder.party, seen.pttl_ms)
            )));
        }
        lines.push(Line::from(vec![
            Span::styled("Waiting ", bold),
            Span::raw(format!(
                "{} connection{} subscribed",
                seen.subscribers,
                if seen.subscribers == 1 { "" } else { "s" }
            )),
            Span::raw(if seen.queue_len > 0 {
                format!(", {} queued", seen.queue_len)
            } else {
                String::new()
            }),
        ]));
        for (i, place) in seen.queue.iter().enumerate().take(8) {
            let left = place.left_ms.map_or("-".into(), text::ms);
            lines.push(Line::from(format!(
                "  {}. {}  place lapses in {left}",
                i + 1,
                text::short(&place.party)
            )));
        }
        lines.push(Line::from(vec![
            Span::styled("Releases/s ", bold),
            Span::raw(match rate {
                Some(rate) => format!("{rate:.1} (unlock messages, last 5 s)"),
                None => "not counted (sharded pub/sub has no patterns)".into(),
            }),
        ]));
    }
    if let Some(error) = &watched.error {
        lines.push(Line::from(format!("error: {error}")));
    }
    let footer = format!(" q quit · Esc back · every {} ms ", interval.as_millis());
    let block = Block::bordered().title(title).title_bottom(footer);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(ratatui::widgets::Wrap { trim: false }),
        frame.area(),
    );
}
