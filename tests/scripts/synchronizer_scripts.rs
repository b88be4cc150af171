//! The branches of the semaphores' and the latch's scripts (`lua/semaphore/`, `lua/permit/`,
//! `lua/latch/`, `lua/counter.lua`) that the types' tests cannot reach on demand, run directly
//! with `EVAL` on a real server: a retry after a lost reply replays instead of counting twice,
//! a cancelled acquire is undone once, leases that ended are reclaimed and never renewed, and a
//! key of another type fails every script before it writes.

use crate::common;

use common::{leases_key, raw_count, raw_exists, resp, semaphore_channel, RawSubscriber};
use common::{RedisServer, Resp};
use relock::testing::scripts::{
    COUNTER, LATCH_COUNT_DOWN, PERMIT_ACQUIRE, PERMIT_RELEASE, PERMIT_RENEW, PERMIT_STATE,
    SEMAPHORE_ACQUIRE, SEMAPHORE_ADD, SEMAPHORE_RELEASE, SEMAPHORE_TRY_SET, SEMAPHORE_UNDO,
};

const NO_LEASE: &str = "922337203685477";
/// Two permit ids of 16 bytes, readable as text so the raw connection can send them.
const ID_A: &str = "aaaaaaaaaaaaaaaa";
const ID_B: &str = "bbbbbbbbbbbbbbbb";

/// `EVAL` of `script` with `keys` and `args`, as the raw RESP reply.
fn eval(server: &RedisServer, script: &str, keys: &[&str], args: &[&str]) -> Resp {
    let numkeys = keys.len().to_string();
    let mut command = vec!["EVAL", script, &numkeys];
    command.extend_from_slice(keys);
    command.extend_from_slice(args);
    resp(&server.cmd(&command))
}

/// A fresh server with the semaphore named after `test` set to `count`: the server, the name
/// and its channel.
fn semaphore(test: &str, count: &str) -> (RedisServer, String, String) {
    let server = RedisServer::start();
    let name = common::prefix(test);
    server.cmd(&["SET", &name, count]);
    let channel = semaphore_channel(&name);
    (server, name, channel)
}

/// The replay key of client request `n` on `name`.
fn request(name: &str, n: u32) -> String {
    format!("relock_request:{{{name}}}:c:{n}")
}

/// Runs `script` as a first send and then as its retry (`args` and then the sent-before flag, 0
/// and then 1): both integer replies.
fn sent_and_retried(
    server: &RedisServer,
    script: &str,
    keys: &[&str],
    args: &[&str],
) -> (i64, i64) {
    let send = |sent_before| {
        int(&eval(
            server,
            script,
            keys,
            &[args, &[sent_before]].concat(),
        ))
    };
    (send("0"), send("1"))
}

fn int(reply: &Resp) -> i64 {
    match reply {
        Resp::Int(n) => *n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

#[tokio::test]
async fn a_retried_release_and_count_down_replay_instead_of_counting_twice() {
    let (server, name, channel) = semaphore("scripts-replay", "1");
    let request = request(&name, 1);
    let (first, retry) = sent_and_retried(
        &server,
        SEMAPHORE_RELEASE,
        &[&name, &channel, &request],
        &["2", "PUBLISH", "8000"],
    );
    assert_eq!(first, 3);
    // The reply was lost: the retry (sent before = 1) replays 3 and adds nothing.
    assert_eq!(retry, 3);
    assert_eq!(raw_count(&server, &name), Some(3));
    let ttl = common::raw_pttl(&server, &request);
    assert!(ttl > 0 && ttl <= 8000, "the replay key lives {ttl} ms");

    let latch = common::prefix("scripts-latch");
    let latch_channel = common::latch_channel(&latch);
    let latch_request = self::request(&latch, 2);
    server.cmd(&["SET", &latch, "2"]);
    let keys = [&*latch, &*latch_channel, &*latch_request];
    let replies = sent_and_retried(&server, LATCH_COUNT_DOWN, &keys, &["PUBLISH", "8000"]);
    assert_eq!(replies, (1, 1));
    assert_eq!(
        raw_count(&server, &latch),
        Some(1),
        "a retried count-down counted twice"
    );
}

#[tokio::test]
async fn a_cancelled_acquire_is_undone_once_and_one_that_took_nothing_not_at_all() {
    let (server, name, channel) = semaphore("scripts-undo", "3");
    let request = request(&name, 1);
    // The undo of `request`'s acquire: the permits it gave back.
    let undo = |request: &str| {
        let keys = [&*name, &*channel, request];
        int(&eval(&server, SEMAPHORE_UNDO, &keys, &["PUBLISH"]))
    };
    let mut messages = RawSubscriber::subscribe(&server, &[&channel]).await;

    let taken = eval(
        &server,
        SEMAPHORE_ACQUIRE,
        &[&name, &request],
        &["2", "8000"],
    );
    assert_eq!(taken, Resp::Array(Some(vec![Resp::Int(1), Resp::Int(1)])));
    assert_eq!(
        resp(&server.cmd(&["GET", &request])),
        Resp::Bulk(Some("2".into()))
    );
    assert_eq!(undo(&request), 2);
    assert_eq!(raw_count(&server, &name), Some(3));
    assert_eq!(
        messages
            .next_message(std::time::Duration::from_secs(5))
            .await,
        Some((channel.clone(), "3".into()))
    );
    assert_eq!(undo(&request), 0);
    assert_eq!(raw_count(&server, &name), Some(3), "undone twice");

    // Not enough: nothing written, so nothing to undo.
    let other = self::request(&name, 2);
    let busy = eval(&server, SEMAPHORE_ACQUIRE, &[&name, &other], &["4", "8000"]);
    assert_eq!(busy, Resp::Array(Some(vec![Resp::Int(0), Resp::Int(3)])));
    assert!(!raw_exists(&server, &other));
    assert_eq!(undo(&other), 0);
    messages.assert_quiet(&server, &channel).await;
    // A semaphore nobody set answers nil.
    let missing = common::prefix("scripts-missing");
    assert_eq!(
        eval(
            &server,
            SEMAPHORE_ACQUIRE,
            &[&missing, &other],
            &["1", "8000"]
        ),
        Resp::Bulk(None)
    );
}

#[tokio::test]
async fn ended_leases_are_reclaimed_published_and_never_renewed() {
    let (server, name, channel) = semaphore("scripts-leases", "0");
    let leases = leases_key(&name);
    // A's lease ended a second ago; B is Redisson's permit without a lease.
    let ended = (common::raw_time_ms(&server) - 1000).to_string();
    server.cmd(&["ZADD", &leases, &ended, ID_A, NO_LEASE, ID_B]);
    let mut messages = RawSubscriber::subscribe(&server, &[&channel]).await;

    // Renewing A does not bring it back.
    let renewed = eval(&server, PERMIT_RENEW, &[&leases], &["5000", ID_A]);
    assert_eq!(renewed, Resp::Array(Some(vec![Resp::Int(0)])));
    assert_eq!(
        common::raw_zscore(&server, &leases, ID_A),
        Some(ended.parse().unwrap())
    );

    // The state script reclaims A (one permit back, published) and counts B as out.
    let state = eval(
        &server,
        PERMIT_STATE,
        &[&name, &leases, &channel],
        &["PUBLISH"],
    );
    assert_eq!(state, Resp::Array(Some(vec![Resp::Int(1), Resp::Int(1)])));
    assert_eq!(
        messages
            .next_message(std::time::Duration::from_secs(5))
            .await,
        Some((channel.clone(), "1".into()))
    );
    assert_eq!(raw_count(&server, &name), Some(1));

    // An acquire takes the reclaimed permit; the next finds none and the earliest lease end.
    let args = ["20000", "cccccccccccccccc", "PUBLISH", NO_LEASE];
    let taken = eval(&server, PERMIT_ACQUIRE, &[&name, &leases, &channel], &args);
    assert_eq!(taken, Resp::Array(Some(vec![Resp::Int(1), Resp::Int(0)])));
    let args = ["20000", "dddddddddddddddd", "PUBLISH", NO_LEASE];
    let busy = eval(&server, PERMIT_ACQUIRE, &[&name, &leases, &channel], &args);
    let Resp::Array(Some(busy)) = busy else {
        panic!("{busy:?}")
    };
    assert_eq!(busy[0], Resp::Int(0));
    let wait = int(&busy[1]);
    assert!(
        (15_000..=20_000).contains(&wait),
        "the earliest lease ends in {wait} ms"
    );

    // A release of an id whose lease ended gives it back and says it had lapsed (2).
    let lapsed = (common::raw_time_ms(&server) - 1).to_string();
    server.cmd(&["ZADD", &leases, "XX", &lapsed, "cccccccccccccccc"]);
    let release = || {
        let keys = [&*name, &*channel, &*leases];
        int(&eval(
            &server,
            PERMIT_RELEASE,
            &keys,
            &["cccccccccccccccc", "PUBLISH"],
        ))
    };
    assert_eq!(release(), 2);
    assert_eq!(release(), 0, "given back twice");
    assert_eq!(raw_count(&server, &name), Some(1));
}

#[tokio::test]
async fn a_key_of_another_type_fails_every_script_before_it_writes() {
    let (server, name, channel) = semaphore("scripts-types", "5");
    let leases = leases_key(&name);
    let request = request(&name, 1);
    server.cmd(&["HSET", &leases, "f", "v"]);
    let failing = [
        (
            PERMIT_ACQUIRE,
            vec![&*name, &*leases, &*channel],
            vec!["1000", ID_A, "PUBLISH", NO_LEASE],
            "[key 2]",
        ),
        (
            PERMIT_RELEASE,
            vec![&*name, &*channel, &*leases],
            vec![ID_A, "PUBLISH"],
            "[key 3]",
        ),
        (
            PERMIT_STATE,
            vec![&*name, &*leases, &*channel],
            vec!["PUBLISH"],
            "[key 2]",
        ),
        (
            SEMAPHORE_TRY_SET,
            vec![&*name, &*channel, &*leases],
            vec!["1", "PUBLISH"],
            "[key 3]",
        ),
        (
            SEMAPHORE_ADD,
            vec![&*name, &*channel, &*leases],
            vec!["1", "PUBLISH"],
            "[key 3]",
        ),
    ];
    for (script, keys, args, blamed) in failing {
        match eval(&server, script, &keys, &args) {
            Resp::Error(error) => {
                assert!(error.starts_with("WRONGTYPE"), "{error}");
                assert!(error.contains(blamed), "{error}");
            }
            other => panic!("expected WRONGTYPE, got {other:?}"),
        }
        assert_eq!(raw_count(&server, &name), Some(5), "a failing script wrote");
    }
    // A counter that is not a number fails the counter's scripts, named as key 1.
    server.cmd(&["SET", &name, "1.5"]);
    for reply in [
        eval(&server, COUNTER, &[&name], &[]),
        eval(
            &server,
            SEMAPHORE_ACQUIRE,
            &[&name, &request],
            &["1", "8000"],
        ),
        eval(
            &server,
            SEMAPHORE_RELEASE,
            &[&name, &channel, &request],
            &["1", "PUBLISH", "8000", "0"],
        ),
    ] {
        match reply {
            Resp::Error(error) => assert!(error.contains("[key 1]"), "{error}"),
            other => panic!("expected WRONGTYPE, got {other:?}"),
        }
    }
    assert!(
        !raw_exists(&server, &request),
        "a failing script wrote its request key"
    );
    assert_eq!(
        resp(&server.cmd(&["GET", &name])),
        Resp::Bulk(Some("1.5".into()))
    );
}
