//! The scripts a client sends, with the keys and arguments relock's `scripts::rw` (and
//! `scripts::plain::{renew, unclaim}`) pass, run on the simulated server; each call can be
//! recorded for a counterexample's trace.

use crate::server::{Reply, Server};

use super::state::{field, replay_key, Side, CHANNEL, CLAIM, LEASE, LOCK, REPLAY_TTL, WINDOW};
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

/// `scripts::rw::read_acquire` (RW_READ_ACQUIRE) or `write_acquire` (RW_WRITE_ACQUIRE, with
/// `claim`: `RwTurns::ask` claims on every attempt of a waiting `lock()`). `Nil` when taken,
/// else the retry hint in ms, or the `RELOCK_UPGRADE` error.
pub fn acquire(
    scripts: &Scripts,
    server: &mut Server,
    log: &mut Log,
    i: usize,
    side: Side,
) -> Reply {
    let (lease, window) = (LEASE.to_string(), WINDOW.to_string());
    let (reader, writer) = (field(i, Side::Read), field(i, Side::Write));
    match side {
        Side::Read => {
            let args = [lease.as_str(), &reader, &writer, &window];
            let keys = [LOCK, CLAIM];
            run(
                server,
                log,
                "RW_READ_ACQUIRE",
                &scripts.read_acquire,
                &keys,
                &args,
            )
        }
        Side::Write => {
            let args = [lease.as_str(), &writer, &reader, "1", &window];
            let keys = [LOCK, CLAIM];
            run(
                server,
                log,
                "RW_WRITE_ACQUIRE",
                &scripts.write_acquire,
                &keys,
                &args,
            )
        }
    }
}

/// `scripts::plain::inspect` as `Sending::read_back` and `OrphanCheck`'s drop ask it, for an
/// rw lock too: INSPECT on the lock hash with `side`'s field and the view `""` (not the side's
/// own `LockType::view`); the field's count on Redis (a reader's as the hash has it, its
/// timeout keys unread).
pub fn inspect(scripts: &Scripts, server: &mut Server, log: &mut Log, i: usize, side: Side) -> u64 {
    let field = field(i, side);
    let reply = run(
        server,
        log,
        "INSPECT",
        &scripts.inspect,
        &[LOCK],
        &[field.as_str(), ""],
    );
    match reply {
        Reply::Array(items) => match items.get(2) {
            Some(Reply::Int(holds)) => (*holds).max(0) as u64,
            other => panic!("INSPECT answered holds {other:?}"),
        },
        other => panic!("INSPECT answered {other:?}"),
    }
}

/// `scripts::rw::release`: RW_READ_RELEASE (message `0`) or RW_WRITE_RELEASE (message `1`) with
/// the remaining holds' lease (`keep`, 0 on the owner's last), the field, PUBLISH, the replay
/// key's TTL, the claim window and the retry flag.
#[allow(clippy::too_many_arguments)]
pub fn release(
    scripts: &Scripts,
    server: &mut Server,
    log: &mut Log,
    i: usize,
    side: Side,
    request: u8,
    keep: u64,
    sent_before: bool,
) -> Reply {
    let replay = replay_key(i, side, request);
    let keys = [LOCK, CHANNEL, replay.as_str(), CLAIM];
    let (lease, field, ttl, window) = (
        keep.to_string(),
        field(i, side),
        // `Hold::outgoing`: the retries' window plus the longer of the TTL left and the lease.
        (REPLAY_TTL + keep.max(LEASE)).to_string(),
        WINDOW.to_string(),
    );
    let (name, script, message) = match side {
        Side::Read => ("RW_READ_RELEASE", &scripts.read_release, "0"),
        Side::Write => ("RW_WRITE_RELEASE", &scripts.write_release, "1"),
    };
    let flag = if sent_before { "1" } else { "0" };
    let args = [
        message,
        lease.as_str(),
        &field,
        "PUBLISH",
        &ttl,
        &window,
        flag,
    ];
    run(server, log, name, script, &keys, &args)
}

/// The sweeper's delete of a spent replay key, once its release has its reply.
pub fn sweep(server: &mut Server, log: &mut Log, i: usize, side: Side, request: u8) {
    let key = replay_key(i, side, request);
    let reply = server.command(&["DEL", key.as_str()]);
    if let Some(lines) = log {
        lines.push(format!("DEL {key} -> {reply:?}"));
    }
}

/// The watchdog's renewal of one side (`scripts::plain::renew`): RW_RENEW_READ for a reader
/// (`Read::renew_all`), LOCK_RENEW for the writer (the default `renew_all`); whether it was
/// still held.
pub fn renew(scripts: &Scripts, server: &mut Server, log: &mut Log, i: usize, side: Side) -> bool {
    let (lease, field) = (LEASE.to_string(), field(i, side));
    let (name, script) = match side {
        Side::Read => ("RW_RENEW_READ", &scripts.renew_read),
        Side::Write => ("LOCK_RENEW", &scripts.renew),
    };
    let reply = run(
        server,
        log,
        name,
        script,
        &[LOCK],
        &[lease.as_str(), &field],
    );
    reply == Reply::Array(vec![Reply::Int(1)])
}

/// `Write::unclaim` (`scripts::plain::unclaim` with a wake): UNCLAIM of the writer's claim,
/// publishing `0` on the lock's channel when it was there.
pub fn unclaim(scripts: &Scripts, server: &mut Server, log: &mut Log, i: usize) -> Reply {
    let field = field(i, Side::Write);
    run(
        server,
        log,
        "UNCLAIM",
        &scripts.unclaim,
        &[CLAIM, CHANNEL],
        &[field.as_str(), "PUBLISH", "0"],
    )
}
