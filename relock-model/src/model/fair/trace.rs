//! A counterexample as a readable trace: each step, the scripts it sent with their keys,
//! arguments and replies, how the keyspace changed, and each client's state.

use std::fmt::Write as _;

use super::super::trace::keyspace_change;
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
        keyspace_change(
            &mut out,
            "key",
            &before.server.keyspace,
            &after.server.keyspace,
        );
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
