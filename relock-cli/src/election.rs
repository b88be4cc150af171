//! Elections on the command line: what `show` adds for one (the leader's metadata, since when it
//! leads) and `watch` on one (its changes, a line each, from its history).

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use relock::{Candidate, Change, Client, Leader};
use serde_json::{json, Value};

use crate::{failed, Failure, Outcome};

/// What an election's lock name starts with.
const PREFIX: &str = "relock_election:";

/// The election whose lock is `name`, if it is one.
pub(crate) fn of(name: &str) -> Option<&str> {
    name.strip_prefix(PREFIX).filter(|e| !e.is_empty())
}

/// Who leads election `election` now, as `show` adds it.
pub(crate) async fn leader(client: &Client, election: &str) -> Result<Option<Leader>, Failure> {
    client.election(election).leader().await.map_err(failed)
}

/// The rows `show` adds for a leader: its metadata and since when it leads.
pub(crate) fn rows(leader: &Leader, now: SystemTime) -> String {
    let mut out = String::new();
    if let Some(since) = leader.since {
        let ago = now.duration_since(since).unwrap_or_default();
        let _ = writeln!(
            out,
            "  {:<12} {} ({:.1} s ago)",
            "leads since",
            clock(since),
            ago.as_secs_f64()
        );
    }
    let metadata = leader.metadata.as_deref().unwrap_or("(none proclaimed)");
    let _ = writeln!(out, "  {:<12} {metadata}", "metadata");
    out
}

/// A leader's fields as `show --json` adds them.
pub(crate) fn json_of(leader: Option<&Leader>) -> Value {
    json!({
        "epoch": leader.map(|l| l.epoch),
        "metadata": leader.and_then(|l| l.metadata.clone()),
        "since_ms": leader.and_then(|l| l.since).map(millis),
    })
}

/// `relock watch relock_election:E`: every change of the election, a line each (NDJSON with
/// `--json`), from its newest one or after place `after`, until interrupted.
pub(crate) async fn watch(
    client: &Client,
    election: &str,
    after: Option<u64>,
    json: bool,
) -> Outcome {
    let election = client.election(election);
    let mut changes = match after {
        Some(seq) => election.watch_after(seq),
        None => election.watch(),
    };
    let mut out = std::io::stdout();
    // Until interrupted (Ctrl-C ends the process: a watch holds nothing to give back).
    while let Some(next) = changes.next().await {
        let line = match next {
            Ok(change) if json => change_json(&change).to_string(),
            Ok(change) => change_text(&change),
            // A failed read: said, and the watch goes on (it reads again when it can).
            Err(e) => {
                eprintln!("relock: {e}");
                continue;
            }
        };
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            return Ok(()); // the reader went away
        }
    }
    Ok(())
}

fn who(leader: &Candidate) -> String {
    format!(
        "{} (pid {} on {}, {})",
        leader.field, leader.pid, leader.host, leader.program
    )
}

/// A change in one line of text.
fn change_text(change: &Change) -> String {
    match change {
        Change::Elected {
            seq,
            epoch,
            leader,
            metadata,
            at,
            ..
        } => format!(
            "#{seq} {} elected    epoch {epoch}  {}{}",
            clock(*at),
            who(leader),
            metadata
                .as_deref()
                .map(|m| format!("  {m}"))
                .unwrap_or_default()
        ),
        Change::Proclaimed {
            seq,
            epoch,
            metadata,
            at,
            ..
        } => format!("#{seq} {} proclaimed epoch {epoch}  {metadata}", clock(*at)),
        Change::Vacant {
            seq,
            epoch,
            reason,
            at,
            ..
        } => format!(
            "#{seq} {} vacant     epoch {epoch}  {}",
            clock(*at),
            match reason {
                relock::Vacancy::Resigned => "resigned",
                relock::Vacancy::Forced => "forced (unlock --force)",
                _ => "lapsed: its lease ran out, or its key was deleted",
            }
        ),
        Change::Gap { after, next } => {
            format!("#{next} history lost after #{after}: changes between are gone")
        }
        other => format!("{other:?}"),
    }
}

/// A change as one JSON line.
fn change_json(change: &Change) -> Value {
    let leader = |l: &Candidate| json!({"field": l.field, "pid": l.pid, "host": l.host, "program": l.program});
    match change {
        Change::Elected {
            seq,
            epoch,
            leader: l,
            metadata,
            at,
            ..
        } => {
            json!({"seq": seq, "event": "elected", "epoch": epoch, "leader": leader(l), "metadata": metadata, "at_ms": millis(*at)})
        }
        Change::Proclaimed {
            seq,
            epoch,
            leader: l,
            metadata,
            at,
            ..
        } => {
            json!({"seq": seq, "event": "proclaimed", "epoch": epoch, "leader": leader(l), "metadata": metadata, "at_ms": millis(*at)})
        }
        Change::Vacant {
            seq,
            epoch,
            reason,
            at,
            ..
        } => json!({"seq": seq, "event": "vacant", "epoch": epoch, "reason": match reason {
            relock::Vacancy::Resigned => "resigned",
            relock::Vacancy::Forced => "forced",
            _ => "lapsed",
        }, "at_ms": millis(*at)}),
        Change::Gap { after, next } => json!({"seq": next, "event": "gap", "after": after}),
        other => json!({"event": format!("{other:?}")}),
    }
}

/// Milliseconds since the Unix epoch.
fn millis(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
}

/// The time of day of `at`, UTC, to the millisecond: `hh:mm:ss.mmmZ`.
fn clock(at: SystemTime) -> String {
    let ms = millis(at);
    let day = (ms / 1000) % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}Z",
        day / 3600,
        day / 60 % 60,
        day % 60,
        ms % 1000
    )
}
