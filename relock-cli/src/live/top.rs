//! `relock top`: the busiest names, ranked; Enter watches one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crossterm::event::{Event, EventStream};
use futures::StreamExt;
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState};
use ratatui::Frame;
use relock::inspect::Inspection;
use relock::Client;

use crate::{failed, json, text, Failure, Outcome};

use super::watch::{watch_loop, Watched};
use super::{asked, Asked, Releases};

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
