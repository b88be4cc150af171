//! A counterexample as a readable trace: each step, the scripts it sent with their keys,
//! arguments and replies, how the keyspace changed, and each client's state.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::server::{Data, Entry, Server};

use super::state::FairState;
use super::steps::Action;
use super::FairModel;

/// The trace of `path` (states and the actions between them), which violates `property`.
pub fn render(model: &FairModel, property: &str, path: &[(FairState, Option<Action>)]) -> String {
    let mut out = String::new();
    let steps = path.len().saturating_sub(1);
    writeln!(out, "counterexample to \"{property}\" ({steps} steps):").unwrap();
    let Some((first, _)) = path.first() else {
        return out;
    };
    writeln!(out, "  start at t={}", first.server.now()).unwrap();
    clients(&mut out, first);
    for (k, pair) in path.windows(2).enumerate() {
        let (before, Some(action)) = (&pair[0].0, pair[0].1) else {
            continue;
        };
        let mut log = Some(Vec::new());
        let after = model.step(before, action, &mut log);
        let at = before.server.now();
        writeln!(out, "step {}: {action:?} at t={at}", k + 1).unwrap();
        for line in log.unwrap_or_default() {
            writeln!(out, "    sent {line}").unwrap();
        }
        if after.server.now() != at {
            writeln!(out, "    clock {at} -> {}", after.server.now()).unwrap();
        }
        keyspace_change(&mut out, &before.server, &after.server);
        clients(&mut out, &after);
        if after.faults != before.faults {
            writeln!(out, "    faults spent: {}", after.faults).unwrap();
        }
    }
    out
}

fn clients(out: &mut String, s: &FairState) {
    for (i, c) in s.clients.iter().enumerate() {
        writeln!(out, "    client {i}: {c}").unwrap();
    }
    if let Some((head, since, busy)) = s.head {
        let held = if busy { "held" } else { "free" };
        writeln!(
            out,
            "    client {head} heads the queue since t={since} (lock {held} then)"
        )
        .unwrap();
    }
    if let Some(free) = s.free_since {
        writeln!(out, "    lock free since t={free}").unwrap();
    }
    if let Some((taker, passed)) = s.overtaken {
        writeln!(
            out,
            "    client {taker} took the lock past waiting client {passed}"
        )
        .unwrap();
    }
}

/// The keys that changed between `before` and `after`.
fn keyspace_change(out: &mut String, before: &Server, after: &Server) {
    let (old, new) = (&before.keyspace.keys, &after.keyspace.keys);
    let names: BTreeSet<&Vec<u8>> = old.keys().chain(new.keys()).collect();
    for name in names {
        let (a, b) = (old.get(name), new.get(name));
        if a != b {
            let name = String::from_utf8_lossy(name);
            writeln!(out, "    key {name}: {} -> {}", show(a), show(b)).unwrap();
        }
    }
}

fn show(entry: Option<&Entry>) -> String {
    let Some(entry) = entry else {
        return "(none)".into();
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let value = match &entry.data {
        Data::String(s) => format!("{:?}", text(s)),
        Data::Hash(h) => {
            let fields: Vec<String> =
                h.0.iter()
                    .map(|(f, v)| format!("{}={}", text(f), text(v)))
                    .collect();
            format!("{{{}}}", fields.join(", "))
        }
        Data::List(l) => {
            let items: Vec<String> = l.iter().map(|f| text(f)).collect();
            format!("[{}]", items.join(", "))
        }
        Data::ZSet(z) => {
            let items: Vec<String> = z
                .ordered()
                .into_iter()
                .map(|(m, s)| format!("{}:{s}", text(m)))
                .collect();
            format!("zset{{{}}}", items.join(", "))
        }
        other => format!("({})", other.type_name()),
    };
    match entry.expires_at {
        Some(at) => format!("{value} expires t={at}"),
        None => value,
    }
}
