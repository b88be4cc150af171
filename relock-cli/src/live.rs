//! The live views: `watch NAME` (one name: holders with their lease draining, waiters, releases
//! per second) and `top` (the busiest names; Enter watches one). Both redraw every interval,
//! quit on `q`, Esc or Ctrl-C, and give the terminal back as they found it (ratatui's `init` /
//! `restore`, also on a panic). With `--json`, `watch` prints one NDJSON line per interval
//! instead, and `top` one JSON document of the ranking.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::time::{Duration, Instant};

use crossterm::event::{Event, EventStream, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use futures::StreamExt;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState};
use ratatui::{DefaultTerminal, Frame};
use relock::fred::clients::SubscriberClient;
use relock::fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use relock::inspect::{Inspection, Kind};
use relock::{Client, Config};

use crate::{failed, json, text, Failure, Outcome};

/// Release messages seen on a name's channels, for a rate over the last few seconds.
struct Releases {
    subscriber: Option<SubscriberClient>,
    messages: Option<tokio::sync::broadcast::Receiver<relock::fred::types::Message>>,
    seen: VecDeque<Instant>,
}

/// How far back the release rate looks.
const RATE_WINDOW: Duration = Duration::from_secs(5);

impl Releases {
    /// Subscribes (by pattern) to every channel a release of `name` publishes on: the lock's,
    /// each fair waiter's, the read-write lock's, the semaphore's and the latch's. On a cluster
    /// (sharded pub/sub, which has no patterns) it counts nothing and says so.
    async fn start(url: &str, name: &str) -> Releases {
        let none = Releases {
            subscriber: None,
            messages: None,
            seen: VecDeque::new(),
        };
        let Ok(config) = Config::from_url(url) else {
            return none;
        };
        if config.redis().server.is_clustered() {
            return none;
        }
        let Ok(subscriber) = relock::fred::types::Builder::from_config(config.redis().clone())
            .build_subscriber_client()
        else {
            return none;
        };
        if subscriber.init().await.is_err() {
            return none;
        }
        let messages = subscriber.message_rx();
        let patterns = relock::inspect::release_patterns(name);
        if subscriber.psubscribe(patterns).await.is_err() {
            return none;
        }
        Releases {
            subscriber: Some(subscriber),
            messages: Some(messages),
            seen: VecDeque::new(),
        }
    }

    /// Releases per second over the last [`RATE_WINDOW`]; `None` when not counted.
    fn rate(&mut self) -> Option<f64> {
        let messages = self.messages.as_mut()?;
        let now = Instant::now();
        while let Ok(_message) = messages.try_recv() {
            self.seen.push_back(now);
        }
        while self.seen.front().is_some_and(|t| now - *t > RATE_WINDOW) {
            self.seen.pop_front();
        }
        Some(self.seen.len() as f64 / RATE_WINDOW.as_secs_f64())
    }

    async fn stop(self) {
        if let Some(subscriber) = self.subscriber {
            let _ = subscriber.quit().await;
        }
    }
}

/// What the watch view remembers between refreshes.
struct Watched {
    name: String,
    seen: Option<Inspection>,
    /// The longest lease seen, the full length of the lease bar.
    longest_ms: i64,
    releases: Releases,
    error: Option<String>,
    /// The holders last seen, and since when they have held as far as this view saw.
    held: Option<(Vec<String>, Instant)>,
}

impl Watched {
    fn new(name: String, seen: Inspection, releases: Releases) -> Watched {
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

/// What a key asks of a view.
enum Asked {
    Nothing,
    Quit,
    Back,
    Up,
    Down,
    Pick,
}

fn asked(key: KeyEvent) -> Asked {
    if key.kind != KeyEventKind::Press {
        return Asked::Nothing;
    }
    match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Asked::Quit,
        KeyCode::Char('q') => Asked::Quit,
        KeyCode::Esc | KeyCode::Char('b') | KeyCode::Backspace => Asked::Back,
        KeyCode::Up | KeyCode::Char('k') => Asked::Up,
        KeyCode::Down | KeyCode::Char('j') => Asked::Down,
        KeyCode::Enter => Asked::Pick,
        _ => Asked::Nothing,
    }
}

/// Runs the watch view until a key ends it: `Ok(true)` to quit, `Ok(false)` to go back.
async fn watch_loop(
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

/// One row of `top`: a name and how busy it is.
struct Busy {
    seen: Inspection,
    /// Since when it has been held by the same holders, as far as this view saw.
    held_since: Option<Instant>,
}

impl Busy {
    fn waiters(&self) -> u64 {
        self.seen.queue_len.max(self.seen.subscribers)
    }
}

/// Ranks what `find` returned: most waiters first, then held longest.
fn rank(
    found: Vec<Inspection>,
    holders_since: &mut HashMap<String, (Vec<String>, Instant)>,
) -> Vec<Busy> {
    let now = Instant::now();
    let mut rows: Vec<Busy> = found
        .into_iter()
        .map(|seen| {
            let fields: Vec<String> = seen.holders.iter().map(|h| h.party.field.clone()).collect();
            let held_since = if fields.is_empty() {
                holders_since.remove(&seen.name);
                None
            } else {
                let entry = holders_since
                    .entry(seen.name.clone())
                    .or_insert_with(|| (fields.clone(), now));
                if entry.0 != fields {
                    *entry = (fields, now);
                }
                Some(entry.1)
            };
            Busy { seen, held_since }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.waiters()
            .cmp(&a.waiters())
            // Held longest first (the earliest start); never held last.
            .then_with(|| match (a.held_since, b.held_since) {
                (Some(x), Some(y)) => x.cmp(&y),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
            .then_with(|| a.seen.name.cmp(&b.seen.name))
    });
    rows
}

/// `relock top`.
pub(crate) async fn top(
    client: &Client,
    url: &str,
    pattern: &str,
    limit: usize,
    interval: Duration,
    json: bool,
) -> Outcome {
    let mut holders_since = HashMap::new();
    let found = client.find(pattern, limit).await.map_err(failed)?;
    let mut rows = rank(found.items, &mut holders_since);
    if json {
        let doc: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| {
                let mut v = json::inspection(&row.seen);
                v["waiters"] = serde_json::json!(row.waiters());
                v
            })
            .collect();
        println!("{}", serde_json::Value::Array(doc));
        return Ok(());
    }
    let mut terminal = ratatui::init();
    let result = async {
        let mut keys = EventStream::new();
        let mut tick = tokio::time::interval(interval);
        let mut state = TableState::default().with_selected(Some(0));
        let mut error: Option<String> = None;
        loop {
            terminal
                .draw(|frame| draw_top(frame, pattern, &rows, &mut state, error.as_deref(), interval))
                .map_err(|e| Failure::Error(format!("cannot draw: {e}")))?;
            tokio::select! {
                event = keys.next() => match event {
                    Some(Ok(Event::Key(key))) => match asked(key) {
                        Asked::Quit | Asked::Back => return Ok(()),
                        Asked::Up => state.select_previous(),
                        Asked::Down => state.select_next(),
                        Asked::Pick => {
                            let picked = state.selected().and_then(|i| rows.get(i));
                            if let Some(row) = picked {
                                let name = row.seen.name.clone();
                                let releases = Releases::start(url, &name).await;
                                let mut watched = Watched::new(name, row.seen.clone(), releases);
                                let quit =
                                    watch_loop(&mut terminal, client, &mut watched, interval.min(Duration::from_millis(250))).await;
                                watched.releases.stop().await;
                                if quit? {
                                    return Ok(());
                                }
                            }
                        }
                        Asked::Nothing => {}
                    },
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(Failure::Error(format!("cannot read keys: {e}"))),
                    None => return Ok(()),
                },
                _ = tick.tick() => match client.find(pattern, limit).await {
                    Ok(found) => {
                        rows = rank(found.items, &mut holders_since);
                        error = None;
                    }
                    Err(e) => error = Some(e.to_string()),
                },
            }
        }
    }
    .await;
    ratatui::restore();
    result
}

fn draw_top(
    frame: &mut Frame<'_>,
    pattern: &str,
    rows: &[Busy],
    state: &mut TableState,
    error: Option<&str>,
    interval: Duration,
) {
    let [main, status] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(frame.area());
    let header = Row::new(["NAME", "TYPE", "WAIT", "HELD", "LEASE", "HOLDER"])
        .style(Style::default().add_modifier(Modifier::BOLD));
    let now = Instant::now();
    let body: Vec<Row<'_>> = rows
        .iter()
        .map(|row| {
            let held = row
                .held_since
                .map_or("-".into(), |since| text::age(now - since));
            let holder = match row.seen.holders.as_slice() {
                [] => "-".to_owned(),
                [one] => text::short(&one.party),
                many => format!("{} holders", many.len()),
            };
            Row::new([
                row.seen.name.clone(),
                row.seen.kind.label().to_owned(),
                row.waiters().to_string(),
                held,
                text::lease(&row.seen),
                holder,
            ])
        })
        .collect();
    let widths = [
        Constraint::Fill(3),
        Constraint::Length(9),
        Constraint::Length(5),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Fill(2),
    ];
    let table = Table::new(body, widths)
        .header(header)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .highlight_symbol("> ")
        .block(Block::bordered().title(format!(
            " relock top {pattern} · {} names · every {} ms ",
            rows.len(),
            interval.as_millis()
        )));
    frame.render_stateful_widget(table, main, state);
    let line = match error {
        Some(error) => format!("error: {error}"),
        None => "↑/↓ select · Enter watch · q quit".to_owned(),
    };
    frame.render_widget(Paragraph::new(line), status);
}
