//! What every model's counterexample trace prints of the keyspace: the keys a step changed,
//! each shown with its value and expiry.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::server::{Data, Entry, Keyspace};

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
