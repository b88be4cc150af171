//! A counterexample as a readable trace, the same for every model that implements [`Traced`]:
//! each step, the scripts it sent with their keys, arguments and replies, the keys it changed
//! (each with its value and expiry), and each client's state.

use std::collections::BTreeSet;
use std::fmt::{Debug, Write as _};

use stateright::Model;

use crate::server::{Data, Entry, Keyspace, Server};

/// What [`render`] needs of a model.
pub trait Traced: Model {
    /// The simulated server in `state`.
    fn server(state: &Self::State) -> &Server;
    /// The faults spent in `state`.
    fn faults(state: &Self::State) -> u8;
    /// The state after `action` in `state`, with what it sent in `log`.
    fn replay(
        &self,
        state: &Self::State,
        action: Self::Action,
        log: &mut Option<Vec<String>>,
    ) -> Self::State;
    /// Writes one indented line per client (and anything else the model shows of a state).
    fn describe(out: &mut String, state: &Self::State);
}

/// The trace of `path` (states and the actions between them), which violates `property`.
pub fn render<M>(model: &M, property: &str, path: &[(M::State, Option<M::Action>)]) -> String
where
    M: Traced,
    M::Action: Debug + Clone,
{
    let mut out = String::new();
    let steps = path.len().saturating_sub(1);
    writeln!(out, "counterexample to \"{property}\" ({steps} steps):").unwrap();
    let Some((first, _)) = path.first() else {
        return out;
    };
    writeln!(out, "  start at t={}", M::server(first).now()).unwrap();
    M::describe(&mut out, first);
    for (k, pair) in path.windows(2).enumerate() {
        let (before, action) = (&pair[0].0, &pair[0].1);
        let Some(action) = action.clone() else {
            continue;
        };
        let mut log = Some(Vec::new());
        let (then, label) = (M::server(before).now(), format!("{action:?}"));
        let after = model.replay(before, action, &mut log);
        writeln!(out, "step {}: {label} at t={then}", k + 1).unwrap();
        for line in log.unwrap_or_default() {
            writeln!(out, "    sent {line}").unwrap();
        }
        let now = M::server(&after).now();
        if now != then {
            writeln!(out, "    clock {then} -> {now}").unwrap();
        }
        let (old, new) = (&M::server(before).keyspace, &M::server(&after).keyspace);
        keyspace_change(&mut out, "key", old, new);
        M::describe(&mut out, &after);
        if M::faults(&after) != M::faults(before) {
            writeln!(out, "    faults spent: {}", M::faults(&after)).unwrap();
        }
    }
    out
}

/// Writes one line per key that differs between `before` and `after`: `    <label> <key>:
/// <before> -> <after>`.
pub fn keyspace_change(out: &mut String, label: &str, before: &Keyspace, after: &Keyspace) {
    let (old, new) = (&before.keys, &after.keys);
    let names: BTreeSet<&Vec<u8>> = old.keys().chain(new.keys()).collect();
    for name in names {
        let (a, b) = (old.get(name), new.get(name));
        if a != b {
            let name = String::from_utf8_lossy(name);
            writeln!(out, "    {label} {name}: {} -> {}", show(a), show(b)).unwrap();
        }
    }
}

/// A key's value and expiry on one line; `(none)` for no key.
pub fn show(entry: Option<&Entry>) -> String {
    let Some(entry) = entry else {
        return "(none)".into();
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let pairs = |pairs: &[(Vec<u8>, Vec<u8>)]| {
        let items: Vec<String> = pairs
            .iter()
            .map(|(f, v)| format!("{}={}", text(f), text(v)))
            .collect();
        items.join(", ")
    };
    let value = match &entry.data {
        Data::String(s) => format!("{:?}", text(s)),
        Data::Hash(h) => format!("{{{}}}", pairs(&h.0)),
        Data::List(l) => {
            let items: Vec<String> = l.iter().map(|item| text(item)).collect();
            format!("[{}]", items.join(", "))
        }
        Data::Set(s) => {
            let items: Vec<String> = s.iter().map(|m| text(m)).collect();
            format!("set{{{}}}", items.join(", "))
        }
        Data::ZSet(z) => {
            let items: Vec<String> = z
                .ordered()
                .into_iter()
                .map(|(m, s)| format!("{}:{s}", text(m)))
                .collect();
            format!("zset{{{}}}", items.join(", "))
        }
        Data::Stream(stream) => {
            let entries: Vec<String> = stream
                .entries
                .iter()
                .map(|(id, fields)| format!("{id} [{}]", pairs(fields)))
                .collect();
            format!("stream({}; last id {})", entries.join("; "), stream.last_id)
        }
    };
    match entry.expires_at {
        Some(at) => format!("{value} expires t={at}"),
        None => value,
    }
}
