//! A script that fails must fail with nothing written: Redis keeps the writes a script made
//! before an error, so every lock script reads each key it could fail on (a key of another type,
//! a counter or hold count that is not a number) before its first write. Each case sets up a
//! state that reaches a write, puts a bad value in one key, and checks the script fails, names
//! that key (`[key <i>]`, or `[part <i>]` for a multi-lock's part) and leaves every key of the
//! server as it was (its type, value and TTL). A sweep then puts each wrong type in each key of
//! each script in turn: whatever fails, fails with nothing written.

use crate::common;

use common::{claim_key, fair_queue_key, fair_timeout_key, lock_channel, resp};
use common::{RedisServer, Resp};
use relock::testing::scripts::{
    FAIR_ACQUIRE, FAIR_FORCE_RELEASE, FAIR_LEAVE, FAIR_RELEASE, FENCE_GET, FENCE_HSET,
    LOCK_ABANDON, LOCK_ACQUIRE, LOCK_FORCE_RELEASE, LOCK_RELEASE, MULTI_ACQUIRE, MULTI_RELEASE,
    PERMIT_RENEW, RW_ABANDON, RW_READ_ACQUIRE, RW_READ_RELEASE, RW_WRITE_ACQUIRE, RW_WRITE_RELEASE,
    SEMAPHORE_UNDO, UNCLAIM,
};

const FIELD: &str = "c:1";
const READER: &str = "c:1";
const WRITER: &str = "c:1:write";

/// `EVAL` of `script` with `keys` and `args`, as the raw RESP reply.
fn eval(server: &RedisServer, script: &str, keys: &[String], args: &[String]) -> Resp {
    let numkeys = keys.len().to_string();
    let mut command = vec!["EVAL", script, &numkeys];
    command.extend(keys.iter().map(String::as_str));
    command.extend(args.iter().map(String::as_str));
    resp(&server.cmd(&command))
}

/// One key as the server holds it: its type, its value read by its type, and its TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    kind: String,
    value: String,
    pttl: i64,
}

/// Every key of the server, by name.
fn snapshot(server: &RedisServer) -> Vec<(String, Held)> {
    let Resp::Array(Some(names)) = resp(&server.cmd(&["KEYS", "*"])) else {
        panic!("KEYS did not answer an array");
    };
    let mut all: Vec<(String, Held)> = names
        .into_iter()
        .map(|name| {
            let Resp::Bulk(Some(name)) = name else {
                panic!("a key name that is not a string: {name:?}");
            };
            let Resp::Simple(kind) = resp(&server.cmd(&["TYPE", &name])) else {
                panic!("TYPE did not answer");
            };
            let value = match kind.as_str() {
                "string" => server.cmd(&["GET", &name]),
                "hash" => server.cmd(&["HGETALL", &name]),
                "list" => server.cmd(&["LRANGE", &name, "0", "-1"]),
                "zset" => server.cmd(&["ZRANGE", &name, "0", "-1", "WITHSCORES"]),
                "set" => server.cmd(&["SMEMBERS", &name]),
                other => panic!("a key of type {other}"),
            };
            let pttl = common::raw_pttl(server, &name);
            (name, Held { kind, value, pttl })
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// Whether `after` is `before`, a TTL allowed to have run down by up to a second (never up).
fn unchanged(before: &[(String, Held)], after: &[(String, Held)]) -> bool {
    before.len() == after.len()
        && before.iter().zip(after).all(|((a, x), (b, y))| {
            a == b
                && x.kind == y.kind
                && x.value == y.value
                && if x.pttl > 0 {
                    y.pttl > 0 && y.pttl <= x.pttl && x.pttl - y.pttl < 1000
                } else {
                    x.pttl == y.pttl
                }
        })
}

/// A value of another type in `key`: `kind` is "string" (not a number), "list", "hash" or
/// "zset".
fn spoil(server: &RedisServer, key: &str, kind: &str) {
    server.cmd(&["DEL", key]);
    match kind {
        "string" => server.cmd(&["SET", key, "not-a-number"]),
        "list" => server.cmd(&["RPUSH", key, "x"]),
        "hash" => server.cmd(&["HSET", key, "x", "y"]),
        "zset" => server.cmd(&["ZADD", key, "1", "x"]),
        other => panic!("no such kind {other}"),
    };
}

/// A script run: its keys and arguments, the commands that set up the state it meets, and
/// which of its keys are channels (never read, so never spoiled).
struct Case {
    what: &'static str,
    script: &'static str,
    keys: Vec<String>,
    args: Vec<String>,
    setup: Vec<Vec<String>>,
    channels: Vec<usize>,
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn setup(server: &RedisServer, case: &Case) {
    server.cmd(&["FLUSHALL"]);
    for command in &case.setup {
        let command: Vec<&str> = command.iter().map(String::as_str).collect();
        server.cmd(&command);
    }
}

/// Runs `case` with `bad` put in KEYS[i] (by `spoil`, or as the string `bad` itself when it is
/// not a kind), and returns the reply and whether the server's keys were left as they were.
fn run_spoiled(server: &RedisServer, case: &Case, i: usize, bad: &str) -> (Resp, bool) {
    setup(server, case);
    let key = &case.keys[i - 1];
    if ["string", "list", "hash", "zset"].contains(&bad) {
        spoil(server, key, bad);
    } else {
        server.cmd(&["SET", key, bad]);
    }
    let before = snapshot(server);
    let reply = eval(server, case.script, &case.keys, &case.args);
    let after = snapshot(server);
    (reply, unchanged(&before, &after))
}

/// The time in ms a minute from now on the server's clock: a live waiter's deadline.
fn live_deadline(server: &RedisServer) -> String {
    (common::raw_time_ms(server) + 60_000).to_string()
}

/// The cases: each reaches a write on its path, for the sweep below and the targeted checks.
fn cases(server: &RedisServer, name: &str) -> Vec<Case> {
    let claim = claim_key(name);
    let channel = lock_channel(name);
    let queue = fair_queue_key(name);
    let timeouts = fair_timeout_key(name);
    let alive = common::fair_alive_key(name);
    let token = format!("redisson_lock_token:{{{name}}}");
    let latch = format!("redisson_unlock_latch:{{{name}}}:r1");
    let other = format!("{name}-b");
    let other_claim = claim_key(&other);
    let deadline = live_deadline(server);
    let held = |count: &str| {
        vec![
            strings(&["HSET", name, FIELD, count]),
            strings(&["PEXPIRE", name, "30000"]),
        ]
    };
    let read_held = vec![
        strings(&["HSET", name, "mode", "read", READER, "1"]),
        strings(&["PEXPIRE", name, "30000"]),
    ];
    vec![
        Case {
            what: "a fenced acquire of a free lock",
            script: LOCK_ACQUIRE,
            keys: vec![name.into(), claim.clone(), token.clone()],
            args: strings(&["30000", FIELD, "0", "5000"]),
            setup: vec![],
            channels: vec![],
        },
        Case {
            what: "a fenced re-entry",
            script: LOCK_ACQUIRE,
            keys: vec![name.into(), claim.clone(), token.clone()],
            args: strings(&["30000", FIELD, "0", "5000"]),
            setup: [held("1"), vec![strings(&["SET", &token, "7"])]].concat(),
            channels: vec![],
        },
        Case {
            what: "an acquire that claims a busy lock",
            script: LOCK_ACQUIRE,
            keys: vec![name.into(), claim.clone()],
            args: strings(&["30000", "c:2", "3", "5000"]),
            setup: held("1"),
            channels: vec![],
        },
        Case {
            what: "a release that leaves holds",
            script: LOCK_RELEASE,
            keys: vec![name.into(), channel.clone(), latch.clone(), claim.clone()],
            args: strings(&["0", "30000", FIELD, "PUBLISH", "10000", "5000", "1", "1"]),
            setup: held("2"),
            channels: vec![2],
        },
        Case {
            what: "a last release",
            script: LOCK_RELEASE,
            keys: vec![name.into(), channel.clone(), latch.clone(), claim.clone()],
            args: strings(&["0", "30000", FIELD, "PUBLISH", "10000", "5000", "1", "1"]),
            setup: held("1"),
            channels: vec![2],
        },
        Case {
            what: "a force release",
            script: LOCK_FORCE_RELEASE,
            keys: vec![name.into(), channel.clone(), claim.clone()],
            args: strings(&["0", "PUBLISH", "5000"]),
            setup: held("1"),
            channels: vec![2],
        },
        Case {
            what: "an abandon that frees the lock",
            script: LOCK_ABANDON,
            keys: vec![name.into(), channel.clone(), claim.clone(), queue.clone()],
            args: strings(&["0", FIELD, "PUBLISH", "5000"]),
            setup: held("1"),
            channels: vec![2],
        },
        Case {
            what: "an unclaim",
            script: UNCLAIM,
            keys: vec![claim.clone()],
            args: strings(&[FIELD]),
            setup: vec![strings(&["SET", &claim, "1:c:1", "PX", "5000"])],
            channels: vec![],
        },
        Case {
            what: "a queued waiter's fair acquire",
            script: FAIR_ACQUIRE,
            keys: vec![name.into(), queue.clone(), timeouts.clone(), alive.clone()],
            args: strings(&["30000", FIELD, "60000", "wait", "300000"]),
            setup: vec![
                strings(&["RPUSH", &queue, FIELD]),
                strings(&["ZADD", &timeouts, &deadline, FIELD]),
            ],
            channels: vec![],
        },
        Case {
            what: "a fair release behind a dead head",
            script: FAIR_RELEASE,
            keys: vec![
                name.into(),
                queue.clone(),
                timeouts.clone(),
                channel.clone(),
                latch.clone(),
                alive.clone(),
            ],
            args: strings(&["0", "30000", FIELD, "PUBLISH", "10000", "0", "0", "1"]),
            setup: [held("2"), vec![strings(&["RPUSH", &queue, "dead"])]].concat(),
            channels: vec![4],
        },
        Case {
            what: "a fair force release behind a dead head",
            script: FAIR_FORCE_RELEASE,
            keys: vec![
                name.into(),
                queue.clone(),
                timeouts.clone(),
                channel.clone(),
                alive.clone(),
            ],
            args: strings(&["0", "PUBLISH"]),
            setup: [held("1"), vec![strings(&["RPUSH", &queue, "dead"])]].concat(),
            channels: vec![4],
        },
        Case {
            what: "a queued waiter leaving",
            script: FAIR_LEAVE,
            keys: vec![
                name.into(),
                queue.clone(),
                timeouts.clone(),
                channel.clone(),
                alive.clone(),
            ],
            args: strings(&[FIELD, "PUBLISH", "0", "300000"]),
            setup: vec![
                strings(&["RPUSH", &queue, FIELD]),
                strings(&["ZADD", &timeouts, &deadline, FIELD]),
            ],
            channels: vec![4],
        },
        Case {
            what: "a read acquire after the reader's holds lapsed",
            script: RW_READ_ACQUIRE,
            keys: vec![name.into(), claim.clone()],
            args: strings(&["30000", READER, WRITER, "5000"]),
            setup: read_held.clone(),
            channels: vec![],
        },
        Case {
            what: "a write acquire after the owner's read holds lapsed",
            script: RW_WRITE_ACQUIRE,
            keys: vec![name.into(), claim.clone()],
            args: strings(&["30000", WRITER, READER, "0", "5000"]),
            setup: read_held.clone(),
            channels: vec![],
        },
        Case {
            what: "a read release",
            script: RW_READ_RELEASE,
            keys: vec![name.into(), channel.clone(), latch.clone(), claim.clone()],
            args: strings(&["0", "30000", READER, "PUBLISH", "10000", "5000", "0"]),
            setup: [
                read_held.clone(),
                vec![strings(&[
                    "SET",
                    &format!("{{{name}}}:{READER}:rwlock_timeout:1"),
                    "1",
                    "PX",
                    "30000",
                ])],
            ]
            .concat(),
            channels: vec![2],
        },
        Case {
            what: "a write release",
            script: RW_WRITE_RELEASE,
            keys: vec![name.into(), channel.clone(), latch.clone(), claim.clone()],
            args: strings(&["1", "30000", WRITER, "PUBLISH", "10000", "5000", "0"]),
            setup: vec![
                strings(&["HSET", name, "mode", "write", WRITER, "1"]),
                strings(&["PEXPIRE", name, "30000"]),
            ],
            channels: vec![2],
        },
        Case {
            what: "a writer abandoning",
            script: RW_ABANDON,
            keys: vec![name.into(), channel.clone(), claim.clone()],
            args: strings(&[WRITER, "PUBLISH", "5000"]),
            setup: vec![
                strings(&["HSET", name, "mode", "write", WRITER, "1"]),
                strings(&["PEXPIRE", name, "30000"]),
            ],
            channels: vec![2],
        },
        Case {
            what: "a multi-lock acquire",
            script: MULTI_ACQUIRE,
            keys: vec![
                name.into(),
                claim.clone(),
                other.clone(),
                other_claim.clone(),
            ],
            args: strings(&["30000", FIELD, "5000"]),
            setup: vec![],
            channels: vec![],
        },
        Case {
            what: "a multi-lock release",
            script: MULTI_RELEASE,
            keys: vec![
                name.into(),
                channel.clone(),
                latch.clone(),
                claim.clone(),
                other.clone(),
                lock_channel(&other),
                format!("{latch}-b"),
                other_claim.clone(),
            ],
            args: strings(&[
                "0", FIELD, "PUBLISH", "10000", "5000", "0", "1", "30000", "30000",
            ]),
            setup: [
                held("2"),
                vec![
                    strings(&["HSET", &other, FIELD, "2"]),
                    strings(&["PEXPIRE", &other, "30000"]),
                ],
            ]
            .concat(),
            channels: vec![2, 6],
        },
        Case {
            what: "a fenced GET",
            script: FENCE_GET,
            keys: vec![format!("{name}-data"), format!("relock_fence:{{{name}}}")],
            args: strings(&["5"]),
            setup: vec![strings(&["SET", &format!("relock_fence:{{{name}}}"), "3"])],
            channels: vec![],
        },
        Case {
            what: "a fenced HSET",
            script: FENCE_HSET,
            keys: vec![format!("{name}-data"), format!("relock_fence:{{{name}}}")],
            args: strings(&["f", "v", "5"]),
            setup: vec![strings(&["SET", &format!("relock_fence:{{{name}}}"), "3"])],
            channels: vec![],
        },
        Case {
            what: "a semaphore's undo",
            script: SEMAPHORE_UNDO,
            keys: vec![
                name.into(),
                format!("redisson_sc:{{{name}}}"),
                format!("relock_request:{{{name}}}:c:1"),
            ],
            args: strings(&["PUBLISH"]),
            setup: vec![
                strings(&["SET", name, "5"]),
                strings(&["SET", &format!("relock_request:{{{name}}}:c:1"), "2"]),
            ],
            channels: vec![2],
        },
    ]
}

/// Whether a failed script named KEYS[i] (1-based) of `case`: by its place in KEYS, or, for a
/// multi-lock script, by its part (each part has `per_part` keys).
fn names_key(error: &str, case: &Case, i: usize) -> bool {
    let per_part = match case.script {
        s if s == MULTI_ACQUIRE => 2,
        s if s == MULTI_RELEASE => 4,
        _ => 0,
    };
    error.contains(&format!("[key {i}]"))
        || (per_part > 0 && error.contains(&format!("[part {}]", (i - 1) / per_part + 1)))
}

/// The failures the issue list names, each with the key the error must name: a bad token
/// counter, a fair queue or deadlines key of another type, a claim of another type, a hold
/// count that is not a number, and the fence's data key.
#[tokio::test]
async fn a_bad_key_fails_each_lock_script_named_and_with_nothing_written() {
    let server = RedisServer::start();
    let name = common::prefix("write-after-error");
    let cases = cases(&server, &name);
    let case = |what: &str| {
        cases
            .iter()
            .find(|c| c.what == what)
            .unwrap_or_else(|| panic!("no case {what}"))
    };
    // (case, the key spoiled, the value put there, whether the error must name the key)
    let expected: &[(&str, usize, &str, bool)] = &[
        ("a fenced acquire of a free lock", 3, "string", true),
        ("a fenced acquire of a free lock", 3, "hash", true),
        ("a fenced acquire of a free lock", 2, "list", true),
        ("a fenced re-entry", 3, "string", true),
        ("a fenced re-entry", 3, "1.5", true),
        ("a fenced re-entry", 3, "zset", true),
        ("an acquire that claims a busy lock", 2, "hash", true),
        ("an abandon that frees the lock", 4, "string", true),
        ("an unclaim", 1, "list", true),
        ("a queued waiter's fair acquire", 1, "string", true),
        ("a queued waiter's fair acquire", 2, "string", true),
        ("a queued waiter's fair acquire", 3, "string", true),
        ("a queued waiter's fair acquire", 4, "string", true),
        ("a fair release behind a dead head", 1, "string", true),
        (
            "a fair force release behind a dead head",
            1,
            "string",
            false,
        ),
        ("a queued waiter leaving", 2, "string", true),
        ("a queued waiter leaving", 3, "string", true),
        ("a queued waiter leaving", 5, "string", true),
        ("a fair release behind a dead head", 6, "string", true),
        (
            "a read acquire after the reader's holds lapsed",
            2,
            "list",
            true,
        ),
        (
            "a write acquire after the owner's read holds lapsed",
            2,
            "list",
            true,
        ),
        ("a multi-lock acquire", 4, "hash", true),
        ("a fenced GET", 1, "hash", false),
        ("a fenced HSET", 1, "string", false),
        ("a semaphore's undo", 3, "2.5", true),
    ];
    let mut wrong = Vec::new();
    for &(what, i, bad, named) in expected {
        let case = case(what);
        let (reply, kept) = run_spoiled(&server, case, i, bad);
        match reply {
            Resp::Error(error) => {
                if !error.starts_with("WRONGTYPE") {
                    wrong.push(format!("{what}, key {i} {bad}: not a WRONGTYPE: {error}"));
                }
                if named && !names_key(&error, case, i) {
                    wrong.push(format!("{what}, key {i} {bad}: does not name it: {error}"));
                }
                if !kept {
                    wrong.push(format!("{what}, key {i} {bad}: wrote before failing"));
                }
            }
            other => wrong.push(format!("{what}, key {i} {bad}: did not fail: {other:?}")),
        }
    }
    // A hold count that is not a number, read before the fair queue's dead head is dropped.
    let fair = case("a fair release behind a dead head");
    setup(&server, fair);
    server.cmd(&["HSET", &name, FIELD, "x"]);
    let before = snapshot(&server);
    match eval(&server, fair.script, &fair.keys, &fair.args) {
        Resp::Error(error) if error.contains("[key 1]") => {}
        other => wrong.push(format!("a fair release of a bad count: {other:?}")),
    }
    if !unchanged(&before, &snapshot(&server)) {
        wrong.push("a fair release of a bad count wrote before failing".into());
    }
    // One part's hold count that is not a number fails a multi-lock release before any part.
    let multi = case("a multi-lock release");
    setup(&server, multi);
    server.cmd(&["HSET", &format!("{name}-b"), FIELD, "1.5"]);
    let before = snapshot(&server);
    match eval(&server, multi.script, &multi.keys, &multi.args) {
        Resp::Error(error) if error.contains("[part 2]") => {}
        other => wrong.push(format!("a multi-lock release of a bad count: {other:?}")),
    }
    if !unchanged(&before, &snapshot(&server)) {
        wrong.push("a multi-lock release of a bad count wrote before failing".into());
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Every key of every case, spoiled with every other type in turn: a script may ignore a key it
/// does not read on its path, but whatever fails, fails with nothing written, and a WRONGTYPE on
/// a key other than the lock's own names it.
#[tokio::test]
async fn every_key_of_every_lock_script_spoiled_in_turn_fails_with_nothing_written() {
    let server = RedisServer::start();
    let name = common::prefix("write-after-error-sweep");
    let cases = cases(&server, &name);
    let mut wrong = Vec::new();
    let mut failed = 0;
    for case in &cases {
        for i in 1..=case.keys.len() {
            if case.channels.contains(&i) {
                continue;
            }
            for bad in ["string", "list", "hash", "zset"] {
                let (reply, kept) = run_spoiled(&server, case, i, bad);
                let Resp::Error(error) = reply else {
                    continue;
                };
                failed += 1;
                if !kept {
                    wrong.push(format!(
                        "{}, key {i} {bad}: wrote before: {error}",
                        case.what
                    ));
                }
                let own = i == 1 || case.script == FENCE_GET || case.script == FENCE_HSET;
                if error.starts_with("WRONGTYPE") && !own && !names_key(&error, case, i) {
                    wrong.push(format!("{}, key {i} {bad}: not named: {error}", case.what));
                }
            }
        }
    }
    assert!(
        failed > 40,
        "only {failed} runs failed: the cases reach too little"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The permit watchdog's renewal of many permits at once: one semaphore's leases of another type
/// renew nothing of it, and fail nothing (the permits before it were renewed already).
#[tokio::test]
async fn a_permit_renewal_skips_leases_of_another_type_instead_of_failing_after_writing() {
    let server = RedisServer::start();
    let name = common::prefix("write-after-error-renew");
    let a = format!("{{{name}-a}}:timeout");
    let b = format!("{{{name}-b}}:timeout");
    let id = "aaaaaaaaaaaaaaaa";
    let later = (common::raw_time_ms(&server) + 10_000).to_string();
    server.cmd(&["ZADD", &a, &later, id]);
    server.cmd(&["SET", &b, "x"]);
    let reply = eval(
        &server,
        PERMIT_RENEW,
        &[a.clone(), b.clone()],
        &strings(&["60000", id, id]),
    );
    assert_eq!(
        reply,
        Resp::Array(Some(vec![Resp::Int(1), Resp::Int(0)])),
        "{reply:?}"
    );
    assert_eq!(
        resp(&server.cmd(&["GET", &b])),
        Resp::Bulk(Some("x".into()))
    );
}
