//! A counterexample as a readable trace: each step, the scripts it sent with their keys,
//! arguments and replies, how the keyspace changed, and each client's state.

use std::fmt::Write as _;

use super::super::trace::keyspace_change;
use super::state::LockState;
use super::steps::Action;
use super::LockModel;

/// The trace of `path` (states and the actions between them), which violates `property`.
pub fn render(model: &LockModel, property: &str, path: &[(LockState, Option<Action>)]) -> String {
    let mut out = String::new();
    let steps = path.len().saturating_sub(1);
    writeln!(out, "counterexample to \"{property}\" ({steps} steps):").unwrap();
    let Some((first, _)) = path.first() else {
        return out;
    };
    writeln!(out, "  start at t={}", first.server.now()).unwrap();
    clients(&mut out, first);
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
            writeln!(
                out,
                "    clock {} -> {}",
                before.server.now(),
                after.server.now()
            )
            .unwrap();
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

fn clients(out: &mut String, s: &LockState) {
    for (i, c) in s.clients.iter().enumerate() {
        writeln!(out, "    client {i}: {c}").unwrap();
    }
    if let Some(free) = s.free_since {
        writeln!(out, "    lock free since t={free}").unwrap();
    }
}
