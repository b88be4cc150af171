//! What `ls` and `show` print for a person.

use std::fmt::Write;
use std::time::Duration;

use relock::inspect::{Inspection, Kind, Party};

/// A duration in ms as a person reads it: `850 ms`, `12.4 s`, `3 min 20 s`, `2 h 5 min`.
pub(crate) fn ms(ms: i64) -> String {
    let abs = ms.unsigned_abs();
    if abs < 1_000 {
        format!("{abs} ms")
    } else if abs < 60_000 {
        format!("{:.1} s", abs as f64 / 1000.0)
    } else {
        age(Duration::from_millis(abs))
    }
}

/// A longer duration: `45 s`, `3 min 20 s`, `2 h 5 min`, `3 d 4 h`.
pub(crate) fn age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        3600..=86_399 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The lease column: `27.4 s`, `no expiry`, `-`.
pub(crate) fn lease(seen: &Inspection) -> String {
    match seen.pttl_ms {
        -2 => match seen.delay_ms {
            Some(delay) => format!("delay {}", ms(delay as i64)),
            None => "-".into(),
        },
        -1 => "no expiry".into(),
        left => ms(left),
    }
}

/// Who a party is, in one line: the process behind it, or why there is none.
pub(crate) fn who(p: &Party, pttl_ms: i64) -> String {
    if p.redisson {
        return format!(
            "Redisson client, thread {}: Redisson names no connection, so its process is unknown",
            p.owner
        );
    }
    match p.process() {
        Some(process) => {
            let cmd = p
                .connections
                .iter()
                .find(|c| c.process.as_ref().is_some_and(|pr| pr.role == "cmd"))
                .or(p.connections.first());
            let mut line = format!(
                "pid {} on {} ({})",
                process.pid.map_or("?".into(), |pid| pid.to_string()),
                process.host,
                process.program
            );
            if let Some(c) = cmd {
                let _ = write!(line, ", connected {} from {}", age(c.age), c.addr);
            }
            line
        }
        None if pttl_ms > 0 => format!(
            "holder's connection is gone: the lock frees in {}",
            ms(pttl_ms)
        ),
        None => "its relock client has no connection left: the process is gone".to_owned(),
    }
}

/// `show`'s report of one name.
pub(crate) fn show(seen: &Inspection) -> String {
    let mut out = String::new();
    let state = if seen.holders.is_empty() {
        match (&seen.kind, seen.delay_ms) {
            (_, Some(_)) => "free, in its lock-delay",
            (k, _) if k.is_lock() => "free",
            _ => "",
        }
    } else {
        "held"
    };
    let _ = write!(out, "{}: {}", seen.name, seen.kind.words());
    if !state.is_empty() {
        let _ = write!(out, ", {state}");
    }
    out.push('\n');
    let row = |out: &mut String, label: &str, value: String| {
        let _ = writeln!(out, "  {label:<12} {value}");
    };
    if let Some(mode) = &seen.mode {
        row(&mut out, "mode", mode.clone());
    }
    if seen.kind.is_lock() || seen.kind == Kind::PermitSemaphore {
        let lease = match seen.pttl_ms {
            -1 => "no expiry: this lock never frees by itself".to_owned(),
            _ => lease(seen),
        };
        if seen.pttl_ms != -2 || seen.delay_ms.is_some() {
            row(&mut out, "lease left", lease);
        }
    }
    if let Some(delay) = seen.delay_ms {
        row(&mut out, "lock-delay", format!("{} left", ms(delay as i64)));
    }
    for holder in &seen.holders {
        let mut what = who(&holder.party, seen.pttl_ms);
        if holder.writer {
            what = format!("writer: {what}");
        }
        let mut value = format!("{} ×{}", holder.party.field, holder.holds);
        if !holder.live {
            value.push_str(" (lease ran out: holds nothing)");
        }
        row(&mut out, "holder", value);
        let _ = writeln!(out, "  {:<12} {what}", "");
    }
    if let Some(token) = seen.token {
        row(&mut out, "token", token.to_string());
    }
    if let Some(count) = seen.count {
        let label = match seen.kind {
            Kind::CountDownLatch => "count",
            Kind::Counter => "count",
            _ => "available",
        };
        row(&mut out, label, count.to_string());
    }
    if seen.leases_len > 0 {
        row(&mut out, "on lease", seen.leases_len.to_string());
        for lease in &seen.leases {
            let _ = writeln!(
                out,
                "  {:<12} permit {} ({} left)",
                "",
                lease.id,
                ms(lease.left_ms)
            );
        }
    }
    if seen.queue_len > 0 {
        row(&mut out, "queue", format!("{} waiting", seen.queue_len));
        for (i, place) in seen.queue.iter().enumerate() {
            let deadline = match place.left_ms {
                Some(left) if left >= 0 => format!("place lapses in {}", ms(left)),
                Some(left) => format!("stale: lapsed {} ago", ms(left)),
                None => "no deadline".into(),
            };
            let _ = writeln!(
                out,
                "  {:<12} {}. {}  {deadline}, {} subscribed",
                "",
                i + 1,
                place.party.field,
                place.subscribers
            );
            let _ = writeln!(out, "  {:<12}    {}", "", who(&place.party, -2));
        }
    }
    if seen.kind.is_known() {
        row(
            &mut out,
            "waiting",
            format!(
                "{} connection{} subscribed to {} (processes, not tasks)",
                seen.subscribers,
                if seen.subscribers == 1 { "" } else { "s" },
                if seen.kind == Kind::FairLock {
                    "its waiters' channels"
                } else {
                    "its channel"
                }
            ),
        );
    }
    out
}

/// `ls`'s table.
pub(crate) fn table(items: &[&Inspection]) -> String {
    let rows: Vec<[String; 5]> = items
        .iter()
        .map(|i| {
            let holders = match i.holders.as_slice() {
                [] => "-".to_owned(),
                [one] => format!("{} ×{}", short(&one.party), one.holds),
                many => format!("{} holders", many.len()),
            };
            let waiters = if i.queue_len > 0 {
                format!("{} queued", i.queue_len)
            } else {
                i.subscribers.to_string()
            };
            let lease = if i.kind.is_lock() || i.kind == Kind::PermitSemaphore {
                lease(i)
            } else {
                i.count.map_or("-".into(), |c| format!("count {c}"))
            };
            [
                i.name.clone(),
                i.kind.label().to_owned(),
                holders,
                lease,
                waiters,
            ]
        })
        .collect();
    let header = ["NAME", "TYPE", "HOLDERS", "LEASE", "WAITING"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: [&str; 5]| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let _ = write!(text, "{cell:<w$}  ", w = widths[i]);
        }
        let _ = writeln!(out, "{}", text.trim_end());
    };
    line(&mut out, header);
    for row in &rows {
        line(&mut out, row.each_ref().map(String::as_str));
    }
    out
}

/// A holder in a few characters: `task-7@4242` (owner at pid), `task-7 (gone)`, or the
/// Redisson thread.
pub(crate) fn short(p: &Party) -> String {
    if p.redisson {
        return format!("redisson:{}", p.owner);
    }
    match p.process().and_then(|pr| pr.pid) {
        Some(pid) => format!("{}@{pid}", p.owner),
        None if p.is_gone() => format!("{} (gone)", p.owner),
        None => p.owner.clone(),
    }
}
