//! A counterexample as a readable trace: each step, the scripts it sent with their keys,
//! arguments and replies, how the primary's keyspace changed (history entry by entry), the
//! replica, and each candidate's and the watcher's state.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::server::{Data, Entry, Keyspace};

use super::state::{describe, ElectionState};
use super::steps::Action;
use super::ElectionModel;

/// The trace of `path` (states and the actions between them), which violates `property`.
pub fn render(
    model: &ElectionModel,
    property: &str,
    path: &[(ElectionState, Option<Action>)],
) -> String {
    let mut out = String::new();
    let steps = path.len().saturating_sub(1);
    writeln!(
        out,
        "[{}] counterexample to \"{property}\" ({steps} steps):",
        model.name
    )
    .unwrap();
    let Some((first, _)) = path.first() else {
        return out;
    };
    writeln!(out, "  start at t={}", first.server.now()).unwrap();
    actors(&mut out, first);
    for (k, pair) in path.windows(2).enumerate() {
        let (before, action) = (&pair[0].0, pair[0].1);
        let Some(action) = action else { continue };
        let mut log = Some(Vec::new());
        let after = model.step(before, action, &mut log);
        writeln!(
            out,
            "step {}: {action:?} at t={}",
            k + 1,
            before.server.now()
        )
        .unwrap();
        for line in log.unwrap_or_default() {
            writeln!(out, "    sent {line}").unwrap();
        }
        if after.server.now() != before.server.now() {
            let (a, b) = (before.server.now(), after.server.now());
            writeln!(out, "    clock {a} -> {b}").unwrap();
        }
        keyspace_change(
            &mut out,
            "key",
            &before.server.keyspace,
            &after.server.keyspace,
        );
        if let (Some(a), Some(b)) = (&before.replica, &after.replica) {
            if a != b {
                writeln!(out, "    replica now:").unwrap();
                keyspace_change(&mut out, "  replica key", &Keyspace::default(), b);
            }
        }
        actors(&mut out, &after);
        if after.faults != before.faults {
            writeln!(out, "    faults spent: {}", after.faults).unwrap();
        }
    }
    if let Some((last, _)) = path.last() {
        writeln!(out, "  epochs granted: {:?}", last.epochs).unwrap();
        if let Some(failed) = &last.failed {
            writeln!(out, "  failed: {failed}").unwrap();
        }
        if let Some(broken) = &last.watcher.broken {
            writeln!(out, "  watch: {broken}").unwrap();
        }
    }
    out
}

fn actors(out: &mut String, s: &ElectionState) {
    for (i, c) in s.candidates.iter().enumerate() {
        writeln!(out, "    candidate {i}: {c}").unwrap();
    }
    writeln!(out, "    watcher: {}", s.watcher).unwrap();
}

/// The keys that changed between `before` and `after`.
fn keyspace_change(out: &mut String, label: &str, before: &Keyspace, after: &Keyspace) {
    let (old, new) = (&before.keys, &after.keys);
    let names: BTreeMap<&Vec<u8>, ()> = old.keys().chain(new.keys()).map(|k| (k, ())).collect();
    for name in names.keys() {
        let (a, b) = (old.get(*name), new.get(*name));
        if a != b {
            let name = String::from_utf8_lossy(name);
            writeln!(out, "    {label} {name}: {} -> {}", show(a), show(b)).unwrap();
        }
    }
}

fn show(entry: Option<&Entry>) -> String {
    let Some(entry) = entry else {
        return "(none)".into();
    };
    let value = match &entry.data {
        Data::String(s) => format!("{:?}", String::from_utf8_lossy(s)),
        Data::Hash(h) => {
            let fields: Vec<String> =
                h.0.iter()
                    .map(|(f, v)| {
                        let (f, v) = (String::from_utf8_lossy(f), String::from_utf8_lossy(v));
                        format!("{f}={v}")
                    })
                    .collect();
            format!("{{{}}}", fields.join(", "))
        }
        Data::Stream(stream) => {
            let entries: Vec<String> = stream
                .entries
                .iter()
                .map(|(id, fields)| format!("{id} [{}]", describe(fields)))
                .collect();
            format!("stream({}; last id {})", entries.join("; "), stream.last_id)
        }
        other => format!("({})", other.type_name()),
    };
    match entry.expires_at {
        Some(at) => format!("{value} expires t={at}"),
        None => value,
    }
}
