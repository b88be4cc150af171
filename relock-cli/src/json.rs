//! `--json`: what the library read, as documented JSON (field names in relock-cli/README.md;
//! they do not change within a major version).

use relock::inspect::{ClientConnection, Inspection, Party};
use serde_json::{json, Value};

/// One name, as `show --json` prints it and `ls --json` lists it.
pub(crate) fn inspection(seen: &Inspection) -> Value {
    json!({
        "name": seen.name,
        "type": seen.kind.label(),
        "pttl_ms": seen.pttl_ms,
        "mode": seen.mode,
        "holders": seen.holders.iter().map(|h| {
            let mut v = party(&h.party);
            v["holds"] = json!(h.holds);
            v["writer"] = json!(h.writer);
            v["live"] = json!(h.live);
            v
        }).collect::<Vec<_>>(),
        "queue": seen.queue.iter().map(|q| {
            let mut v = party(&q.party);
            v["deadline_ms"] = json!(q.deadline_ms);
            v["left_ms"] = json!(q.left_ms);
            v["subscribers"] = json!(q.subscribers);
            v
        }).collect::<Vec<_>>(),
        "queue_len": seen.queue_len,
        "subscribers": seen.subscribers,
        "token": seen.token,
        "delay_ms": seen.delay_ms,
        "count": seen.count,
        "leases": seen.leases.iter().map(|l| json!({"id": l.id, "left_ms": l.left_ms})).collect::<Vec<_>>(),
        "leases_len": seen.leases_len,
        "server_time_ms": seen.server_time_ms,
    })
}

fn party(p: &Party) -> Value {
    json!({
        "field": p.field,
        "client_id": p.client_id,
        "owner": p.owner,
        "redisson": p.redisson,
        "gone": p.is_gone(),
        "process": p.process().map(|proc_| json!({
            "pid": proc_.pid,
            "host": proc_.host,
            "program": proc_.program,
        })),
        "connections": p.connections.iter().map(connection).collect::<Vec<_>>(),
    })
}

fn connection(c: &ClientConnection) -> Value {
    json!({
        "node": c.node,
        "id": c.id,
        "addr": c.addr,
        "role": c.process.as_ref().map(|p| p.role.as_str()),
        "age_s": c.age.as_secs(),
        "idle_s": c.idle.as_secs(),
    })
}
