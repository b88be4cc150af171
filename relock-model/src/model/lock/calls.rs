//! The scripts a client sends, with the keys and arguments relock's `scripts::plain` passes, run
//! on the simulated server; each call can be recorded for a counterexample's trace.

use crate::server::{Reply, Server};

use super::state::{CHANNEL, CLAIM, LOCK};
use super::Scripts;

/// What the steps of one transition sent, for a trace (`None`: not recorded).
pub type Log = Option<Vec<String>>;

/// Runs `script` (named `name` in the log) and forgets it was loaded, so that a state never
/// carries the script cache (every step sends its script with EVAL's text anyway).
fn run(
    server: &mut Server,
    log: &mut Log,
    name: &str,
    script: &str,
    keys: &[&str],
    args: &[&str],
) -> Reply {
    let reply = server.eval(script, keys, args);
    server.command(&["SCRIPT", "FLUSH"]);
    if let Some(lines) = log {
        lines.push(format!("{name} KEYS={keys:?} ARGV={args:?} -> {reply:?}"));
    }
    reply
}

/// `scripts::plain::acquire`: LOCK_ACQUIRE with the lease, the holder field, the claim priority
/// (0: no claim) and the claim window. `Nil` when taken, else the retry hint in ms.
pub fn acquire(
    scripts: &Scripts,
    server: &mut Server,
    log: &mut Log,
    field: &str,
    priority: u32,
) -> Reply {
    let (lease, window) = (scripts.lease_ms.to_string(), scripts.window_ms.to_string());
    let priority = priority.to_string();
    let args = [lease.as_str(), field, &priority, &window];
    run(
        server,
        log,
        "LOCK_ACQUIRE",
        &scripts.acquire,
        &[LOCK, CLAIM],
        &args,
    )
}

/// `scripts::plain::inspect` of the plain lock (the read-back after a lost acquire reply, and
/// the orphan check): INSPECT; the owner's hold count on Redis.
pub fn inspect(scripts: &Scripts, server: &mut Server, log: &mut Log, field: &str) -> u64 {
    let reply = run(
        server,
        log,
        "INSPECT",
        &scripts.inspect,
        &[LOCK],
        &[field, ""],
    );
    match reply {
        Reply::Array(items) => match items.get(2) {
            Some(Reply::Int(holds)) => (*holds).max(0) as u64,
            other => panic!("INSPECT answered holds {other:?}"),
        },
        other => panic!("INSPECT answered {other:?}"),
    }
}

/// How one release is sent (`scripts::plain::ReleaseHow`).
pub struct ReleaseArgs {
    /// The request id (its replay key).
    pub request: u8,
    /// ARGV\[7\]: a retry, so its replay key is read first.
    pub sent_before: bool,
    /// ARGV\[8\]: a last release writes a replay key too.
    pub replay_last: bool,
    /// ARGV\[2\]: the TTL the owner's remaining live holds need (`Registry::need`).
    pub keep_ms: u64,
    /// ARGV\[5\]: how long the replay key lives.
    pub replay_ttl: u64,
}

/// `scripts::plain::release`: LOCK_RELEASE with message `0`, the remaining holds' lease, the
/// field, PUBLISH, the replay key's TTL, the claim window, the retry flag and the replay rule.
pub fn release(
    scripts: &Scripts,
    server: &mut Server,
    log: &mut Log,
    field: &str,
    replay: &str,
    how: &ReleaseArgs,
) -> Reply {
    let keys = [LOCK, CHANNEL, replay, CLAIM];
    let (lease, ttl, window) = (
        how.keep_ms.to_string(),
        how.replay_ttl.to_string(),
        scripts.window_ms.to_string(),
    );
    let flag = |on: bool| if on { "1" } else { "0" };
    let args = [
        "0",
        lease.as_str(),
        field,
        "PUBLISH",
        &ttl,
        &window,
        flag(how.sent_before),
        flag(how.replay_last),
    ];
    run(server, log, "LOCK_RELEASE", &scripts.release, &keys, &args)
}

/// The sweeper's delete of a spent replay key, once its release has its reply.
pub fn sweep(server: &mut Server, log: &mut Log, key: &str) {
    let reply = server.command(&["DEL", key]);
    if let Some(lines) = log {
        lines.push(format!("DEL {key} -> {reply:?}"));
    }
}

/// `scripts::plain::renew` for one lock: LOCK_RENEW; whether the hold was still there.
pub fn renew(scripts: &Scripts, server: &mut Server, log: &mut Log, field: &str) -> bool {
    let lease = scripts.lease_ms.to_string();
    let reply = run(
        server,
        log,
        "LOCK_RENEW",
        &scripts.renew,
        &[LOCK],
        &[lease.as_str(), field],
    );
    reply == Reply::Array(vec![Reply::Int(1)])
}

/// `scripts::plain::unclaim` of the plain lock (no wake): UNCLAIM.
pub fn unclaim(scripts: &Scripts, server: &mut Server, log: &mut Log, field: &str) -> Reply {
    run(server, log, "UNCLAIM", &scripts.unclaim, &[CLAIM], &[field])
}
