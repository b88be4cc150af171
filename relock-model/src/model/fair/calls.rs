//! The scripts a client sends, with the keys and arguments relock's `scripts::fair` passes (no
//! lock-delay), run on the simulated server; each call can be recorded for a trace.

use crate::server::{Reply, Server};

use super::state::{
    field, replay_key, ALIVE, CHANNEL, LEASE, LOCK, QUEUE, REDISSON_WAIT, REPLAY_TTL, TIMEOUT,
    WAITER,
};
use super::Scripts;

/// What the steps of one transition sent, for a trace (`None`: not recorded).
pub type Log = Option<Vec<String>>;

/// Runs `script` (named `name` in the log) and forgets it was loaded, so that a state never
/// carries the script cache.
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

/// `scripts::fair::acquire` with `queue` (a waiting `lock()`, `Ask::Queue`): FAIR_ACQUIRE with
/// the lease, the field, W, "wait" and Q. `Nil` when taken, else the retry hint in ms.
pub fn acquire(scripts: &Scripts, server: &mut Server, log: &mut Log, i: usize) -> Reply {
    let (lease, field, w, q) = (
        LEASE.to_string(),
        field(i),
        WAITER.to_string(),
        REDISSON_WAIT.to_string(),
    );
    let args = [lease.as_str(), &field, &w, "wait", &q];
    let keys = [LOCK, QUEUE, TIMEOUT, ALIVE];
    run(server, log, "FAIR_ACQUIRE", &scripts.acquire, &keys, &args)
}

/// `scripts::plain::inspect` of the fair lock's hash (`Sending::read_back` after a lost acquire
/// reply, and the orphan check): INSPECT with KEYS = [lock hash], ARGV = [field, ""]; the
/// owner's hold count on Redis.
pub fn inspect(scripts: &Scripts, server: &mut Server, log: &mut Log, i: usize) -> u64 {
    let field = field(i);
    let args = [field.as_str(), ""];
    let reply = run(server, log, "INSPECT", &scripts.inspect, &[LOCK], &args);
    match reply {
        Reply::Array(items) => match items.get(2) {
            Some(Reply::Int(holds)) => (*holds).max(0) as u64,
            other => panic!("INSPECT answered holds {other:?}"),
        },
        other => panic!("INSPECT answered {other:?}"),
    }
}

/// How one release is sent (`scripts::ReleaseHow`).
pub struct ReleaseArgs {
    /// The request id (its replay key).
    pub request: u8,
    /// ARGV\[2\]: the TTL the remaining holds need.
    pub keep: u64,
    /// ARGV\[6\]: a retry, so its replay key is read first.
    pub sent_before: bool,
    /// ARGV\[8\]: a last release writes a replay key too.
    pub replay_last: bool,
}

/// `scripts::fair::release`: FAIR_RELEASE with message `0`, the keep TTL, the field, PUBLISH,
/// the replay key's TTL, the retry flag, no lock-delay and the replay rule.
pub fn release(
    scripts: &Scripts,
    server: &mut Server,
    log: &mut Log,
    i: usize,
    how: &ReleaseArgs,
) -> Reply {
    let replay = replay_key(i, how.request);
    let keys = [LOCK, QUEUE, TIMEOUT, CHANNEL, replay.as_str(), ALIVE];
    // `Hold::outgoing`: the replay key outlives the retries' window by the longer of the TTL
    // the release leaves and the lease.
    let ttl = REPLAY_TTL + how.keep.max(LEASE);
    let (keep, field, ttl) = (how.keep.to_string(), field(i), ttl.to_string());
    let flag = |on: bool| if on { "1" } else { "0" };
    let args = [
        "0",
        keep.as_str(),
        &field,
        "PUBLISH",
        &ttl,
        flag(how.sent_before),
        "0",
        flag(how.replay_last),
    ];
    run(server, log, "FAIR_RELEASE", &scripts.release, &keys, &args)
}

/// `scripts::fair::leave`: FAIR_LEAVE with the field, PUBLISH, message `0` and Q.
pub fn leave(scripts: &Scripts, server: &mut Server, log: &mut Log, i: usize) -> Reply {
    let (field, q) = (field(i), REDISSON_WAIT.to_string());
    let keys = [LOCK, QUEUE, TIMEOUT, CHANNEL, ALIVE];
    let args = [field.as_str(), "PUBLISH", "0", &q];
    run(server, log, "FAIR_LEAVE", &scripts.leave, &keys, &args)
}

/// The sweeper's delete of a spent replay key, once its release has its reply.
pub fn sweep(server: &mut Server, log: &mut Log, i: usize, request: u8) {
    let key = replay_key(i, request);
    let reply = server.command(&["DEL", key.as_str()]);
    if let Some(lines) = log {
        lines.push(format!("DEL {key} -> {reply:?}"));
    }
}
