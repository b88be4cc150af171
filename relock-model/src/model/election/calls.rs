//! The scripts a candidate or the watcher sends, with the keys and arguments relock's
//! `election::office`, `election::history` and `scripts::plain::renew` pass, run on the
//! simulated primary; each call can be recorded for a counterexample's trace.

use crate::server::{Reply, Server};

use super::state::{
    field, replay_key, CHANGES, CHANNEL, CLAIM, EPOCH, HISTORY, LEASE, LOCK, READ_AT_ONCE,
    REPLAY_TTL, WINDOW,
};
use super::Scripts;

/// What the steps of one transition sent, for a trace (`None`: not recorded).
pub type Log = Option<Vec<String>>;

/// Runs `script` (named `name` in the log) and forgets it was loaded, so a state never carries
/// the script cache.
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
        lines.push(format!(
            "{name} KEYS={keys:?} ARGV={args:?} -> {}",
            show(&reply)
        ));
    }
    reply
}

/// A reply as text, bulk strings as strings.
pub fn show(reply: &Reply) -> String {
    match reply {
        Reply::Bulk(bytes) => format!("{:?}", String::from_utf8_lossy(bytes)),
        Reply::Array(items) => {
            let items: Vec<String> = items.iter().map(show).collect();
            format!("[{}]", items.join(", "))
        }
        other => format!("{other:?}"),
    }
}

/// `Office::take`: ELECTION_ACQUIRE with the lease, the field, the claim priority, the claim
/// window, PUBLISH, and the process (pid, host, program); no lock-delay.
pub fn acquire(
    scripts: &Scripts,
    server: &mut Server,
    log: &mut Log,
    i: usize,
    priority: u32,
) -> Reply {
    let (lease, field, priority, window, pid) = (
        LEASE.to_string(),
        field(i),
        priority.to_string(),
        WINDOW.to_string(),
        (100 + i).to_string(),
    );
    let args = [
        lease.as_str(),
        &field,
        &priority,
        &window,
        "PUBLISH",
        &pid,
        "host",
        "prog",
    ];
    let keys = [LOCK, CLAIM, EPOCH, HISTORY, CHANGES];
    run(
        server,
        log,
        "ELECTION_ACQUIRE",
        &scripts.acquire,
        &keys,
        &args,
    )
}

/// `Office::give_back`: ELECTION_RELEASE of candidate `i`'s term, request `request`.
pub fn release(
    scripts: &Scripts,
    server: &mut Server,
    log: &mut Log,
    i: usize,
    request: u8,
    sent_before: bool,
    replay_last: bool,
) -> Reply {
    let replay = replay_key(i, request);
    let keys = [
        LOCK,
        CHANNEL,
        replay.as_str(),
        CLAIM,
        EPOCH,
        HISTORY,
        CHANGES,
    ];
    let (field, ttl, window) = (field(i), REPLAY_TTL.to_string(), WINDOW.to_string());
    let flag = |on: bool| if on { "1" } else { "0" };
    let args = [
        "0",
        "PUBLISH",
        field.as_str(),
        &ttl,
        &window,
        flag(sent_before),
        flag(replay_last),
    ];
    run(
        server,
        log,
        "ELECTION_RELEASE",
        &scripts.release,
        &keys,
        &args,
    )
}

/// The sweeper's delete of a spent replay key, once its release has its reply.
pub fn sweep(server: &mut Server, log: &mut Log, i: usize, request: u8) {
    let key = replay_key(i, request);
    let reply = server.command(&["DEL", key.as_str()]);
    if let Some(lines) = log {
        lines.push(format!("DEL {key} -> {reply:?}"));
    }
}

/// `history::proclaim`: ELECTION_PROCLAIM of `metadata` for candidate `i`'s term.
pub fn proclaim(
    scripts: &Scripts,
    server: &mut Server,
    log: &mut Log,
    i: usize,
    metadata: &str,
) -> Reply {
    let (field, pid) = (field(i), (100 + i).to_string());
    let args = [field.as_str(), metadata, "PUBLISH", &pid, "host", "prog"];
    let keys = [LOCK, EPOCH, HISTORY, CHANGES];
    run(
        server,
        log,
        "ELECTION_PROCLAIM",
        &scripts.proclaim,
        &keys,
        &args,
    )
}

/// `history::observe`: ELECTION_OBSERVE after `after` (`None`: the newest entry only), the
/// stream IDs as text as relock counts them: from `after + 1` (nothing when that passes
/// `u64::MAX`), and the entry at `after` (none at 0).
pub fn observe(scripts: &Scripts, server: &mut Server, log: &mut Log, after: Option<u64>) -> Reply {
    let (from, count, at) = match after {
        None => (String::new(), 0, String::new()),
        Some(after) => match after.checked_add(1) {
            Some(next) => (format!("{next}-0"), READ_AT_ONCE, format!("{after}-0")),
            None => ("0-0".to_string(), 0, format!("{after}-0")),
        },
    };
    let at = if at == "0-0" { String::new() } else { at };
    let count = count.to_string();
    let keys = [LOCK, EPOCH, HISTORY, CHANGES];
    let args = ["PUBLISH", from.as_str(), &count, at.as_str()];
    run(
        server,
        log,
        "ELECTION_OBSERVE",
        &scripts.observe,
        &keys,
        &args,
    )
}

/// `scripts::plain::renew` for the election's lock: LOCK_RENEW; whether the term was there.
pub fn renew(scripts: &Scripts, server: &mut Server, log: &mut Log, i: usize) -> bool {
    let (lease, field) = (LEASE.to_string(), field(i));
    let reply = run(
        server,
        log,
        "LOCK_RENEW",
        &scripts.renew,
        &[LOCK],
        &[lease.as_str(), &field],
    );
    reply == Reply::Array(vec![Reply::Int(1)])
}

/// An operator's (or a fault's) deletion of history's newest entry: `XDEL` of its id
/// (wave5.md C5).
pub fn delete_newest(server: &mut Server, log: &mut Log) -> Reply {
    let newest = server.command(&["XREVRANGE", HISTORY, "+", "-", "COUNT", "1"]);
    let Reply::Array(items) = newest else {
        return Reply::Int(0);
    };
    let Some(Reply::Array(entry)) = items.first() else {
        return Reply::Int(0);
    };
    let Some(Reply::Bulk(id)) = entry.first() else {
        return Reply::Int(0);
    };
    let id = String::from_utf8_lossy(id).into_owned();
    let reply = server.command(&["XDEL", HISTORY, id.as_str()]);
    if let Some(lines) = log {
        lines.push(format!("XDEL {HISTORY} {id} -> {reply:?}"));
    }
    reply
}
