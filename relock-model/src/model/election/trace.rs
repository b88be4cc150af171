//! A counterexample as a readable trace: each step, the scripts it sent with their keys,
//! arguments and replies, how the primary's keyspace changed (history entry by entry), the
//! replica, and each candidate's and the watcher's state.

use std::fmt::Write as _;

use crate::server::Keyspace;

use super::super::trace::keyspace_change;
use super::state::ElectionState;
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
