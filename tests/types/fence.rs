//! `Fence`: writes and reads of Redis data that pass only with a fencing token at least as new as
//! any the resource has seen. Every check reads what Redis holds (the data keys and the fence key)
//! with raw commands that bypass relock, so a check that let a stale token through shows up as
//! data that changed.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::topology::Cluster;
use common::{raw_get, RedisServer};
use fred::interfaces::KeysInterface;
use fred::types::Value;
use rand::Rng;
use relock::{Client, Error, Fence};

/// The fence key of `resource`, as the docs name it: `relock_fence:{<resource>}`, or
/// `relock_fence:<resource>` when the resource holds a `{tag}` of its own.
fn fence_key(resource: &str) -> String {
    if resource.contains('{') {
        format!("relock_fence:{resource}")
    } else {
        format!("relock_fence:{{{resource}}}")
    }
}

/// A server, a client and a fresh resource whose fence guards the key named like it.
struct Fixture {
    server: RedisServer,
    client: Client,
    fence: Fence,
    /// The resource, which is also the data key it guards.
    key: String,
    /// The fence key of the resource.
    fence_key: String,
}

impl Fixture {
    async fn new(test: &str) -> Fixture {
        let server = RedisServer::start();
        let client = common::client(&server, Duration::from_secs(30)).await;
        let key = common::prefix(test);
        Fixture {
            fence: client.fence(key.clone()),
            fence_key: fence_key(&key),
            server,
            client,
            key,
        }
    }

    fn data(&self) -> Option<String> {
        raw_get(&self.server, &self.key)
    }

    fn seen_raw(&self) -> Option<String> {
        raw_get(&self.server, &self.fence_key)
    }

    /// A key beside the resource's, in its slot.
    fn beside(&self, what: &str) -> String {
        format!("{{{}}}:{what}", self.key)
    }
}

/// Asserts that `result` is a refusal of `presented` by `fence_key`, which had seen `seen`.
#[track_caller]
fn assert_stale<T: std::fmt::Debug>(
    result: relock::Result<T>,
    fence_key: &str,
    seen: u64,
    presented: u64,
) {
    match result {
        Err(Error::StaleToken {
            resource,
            seen: s,
            presented: p,
        }) => {
            assert_eq!(
                (resource.as_str(), s, p),
                (fence_key, seen, presented),
                "the refusal names the wrong fence or tokens"
            );
        }
        other => panic!("expected StaleToken(seen {seen}, presented {presented}), got {other:?}"),
    }
}

#[tokio::test]
async fn a_stale_write_is_refused_and_changes_nothing() {
    let f = Fixture::new("fence-stale").await;
    f.fence.set(7, &f.key, "from 7").await.unwrap();
    assert_eq!(f.data().as_deref(), Some("from 7"));
    assert_eq!(f.seen_raw().as_deref(), Some("7"));

    let refused = f.fence.set(5, &f.key, "from 5").await;
    let message = refused.as_ref().unwrap_err().to_string();
    assert!(refused.as_ref().unwrap_err().is_stale_token());
    assert!(
        message.contains("token 5") && message.contains("token 7"),
        "{message}"
    );
    assert_stale(refused, &f.fence_key, 7, 5);
    assert_eq!(
        f.data().as_deref(),
        Some("from 7"),
        "the stale write changed the data"
    );
    assert_eq!(
        f.seen_raw().as_deref(),
        Some("7"),
        "the stale write changed the fence"
    );
}

#[tokio::test]
async fn an_equal_token_passes_so_one_holder_writes_many_times() {
    let f = Fixture::new("fence-equal").await;
    f.fence.set(3, &f.key, "first").await.unwrap();
    f.fence.set(3, &f.key, "second").await.unwrap();
    assert_eq!(f.data().as_deref(), Some("second"));
    assert_eq!(f.fence.seen().await.unwrap(), 3);
}

#[tokio::test]
async fn a_newer_token_passes_and_raises_seen() {
    let f = Fixture::new("fence-newer").await;
    assert_eq!(
        f.fence.seen().await.unwrap(),
        0,
        "a fresh resource has seen nothing"
    );
    assert!(f.seen_raw().is_none());
    f.fence.set(4, &f.key, "from 4").await.unwrap();
    f.fence.set(9, &f.key, "from 9").await.unwrap();
    assert_eq!(f.data().as_deref(), Some("from 9"));
    assert_eq!(f.fence.seen().await.unwrap(), 9);
    assert_eq!(f.seen_raw().as_deref(), Some("9"));
    // The fence key lasts as long as the data: no TTL.
    assert_eq!(common::raw_pttl(&f.server, &f.fence_key), -1);
}

#[tokio::test]
async fn seen_never_lowers() {
    let f = Fixture::new("fence-never-lowers").await;
    f.fence.set(9, &f.key, "from 9").await.unwrap();
    for older in [8, 4, 1] {
        assert_stale(
            f.fence.set(older, &f.key, "old").await,
            &f.fence_key,
            9,
            older,
        );
        assert_stale(
            f.fence.get::<Option<String>>(older, &f.key).await,
            &f.fence_key,
            9,
            older,
        );
        assert_eq!(f.fence.seen().await.unwrap(), 9);
    }
    assert_eq!(f.seen_raw().as_deref(), Some("9"));
    assert_eq!(f.data().as_deref(), Some("from 9"));
}

#[tokio::test]
async fn tokens_compare_as_numbers_over_the_whole_u64_range() {
    let f = Fixture::new("fence-u64").await;
    // 10 after 9: longer is newer (as text, "10" < "9").
    f.fence.set(9, &f.key, "9").await.unwrap();
    f.fence.set(10, &f.key, "10").await.unwrap();
    assert_stale(f.fence.set(9, &f.key, "9").await, &f.fence_key, 10, 9);

    // Beyond 2^53, where a Lua number can no longer tell neighbours apart.
    let big = (1u64 << 53) + 1;
    f.fence.set(big, &f.key, "big").await.unwrap();
    assert_stale(
        f.fence.set(big - 1, &f.key, "big - 1").await,
        &f.fence_key,
        big,
        big - 1,
    );
    f.fence.set(u64::MAX - 1, &f.key, "max - 1").await.unwrap();
    assert_stale(
        f.fence.set(u64::MAX - 2, &f.key, "max - 2").await,
        &f.fence_key,
        u64::MAX - 1,
        u64::MAX - 2,
    );
    f.fence.set(u64::MAX, &f.key, "max").await.unwrap();
    assert_eq!(f.fence.seen().await.unwrap(), u64::MAX);
    assert_eq!(f.data().as_deref(), Some("max"));
}

#[tokio::test]
async fn a_fenced_read_records_its_token_so_an_older_write_is_refused() {
    let f = Fixture::new("fence-read").await;
    f.fence.set(5, &f.key, "10").await.unwrap();

    // A (token 5) reads 10 and pauses; B (token 6) reads 10 too.
    let a: Option<i64> = f.fence.get(5, &f.key).await.unwrap();
    let b: Option<i64> = f.fence.get(6, &f.key).await.unwrap();
    assert_eq!((a, b), (Some(10), Some(10)));
    assert_eq!(
        f.seen_raw().as_deref(),
        Some("6"),
        "the read did not record its token"
    );

    // A wakes and writes first: refused, though no write of B's came before it.
    assert_stale(
        f.fence.set(5, &f.key, a.unwrap() + 1).await,
        &f.fence_key,
        6,
        5,
    );
    assert_eq!(f.data().as_deref(), Some("10"));
    f.fence.set(6, &f.key, b.unwrap() + 1).await.unwrap();
    assert_eq!(f.data().as_deref(), Some("11"));

    // A missing key reads as nil, and the read still records its token.
    let missing: Option<String> = f.fence.get(7, &f.beside("missing")).await.unwrap();
    assert_eq!(missing, None);
    assert_eq!(f.fence.seen().await.unwrap(), 7);
}

#[tokio::test]
async fn hset_is_fenced() {
    let f = Fixture::new("fence-hset").await;
    let hash = f.beside("hash");
    f.fence.hset(2, &hash, "status", "paid").await.unwrap();
    f.fence.hset(2, &hash, "total", 42).await.unwrap();
    assert_eq!(
        common::raw_hgetall(&f.server, &hash),
        vec![
            ("status".into(), "paid".into()),
            ("total".into(), "42".into())
        ]
    );
    f.fence.hset(3, &hash, "status", "shipped").await.unwrap();
    assert_stale(
        f.fence.hset(2, &hash, "status", "refunded").await,
        &f.fence_key,
        3,
        2,
    );
    assert_eq!(
        common::raw_hgetall(&f.server, &hash),
        vec![
            ("status".into(), "shipped".into()),
            ("total".into(), "42".into())
        ]
    );
}

/// A user's body that reports what it sees of KEYS and ARGV, and writes both keys.
const REPORTING_BODY: &str = r#"
redis.call('set', KEYS[1], ARGV[1])
redis.call('hset', KEYS[2], 'f', ARGV[2])
return {#KEYS, #ARGV, KEYS[1], KEYS[2], ARGV[1], ARGV[2]}
"#;

#[tokio::test]
async fn eval_runs_a_body_that_sees_its_own_keys_and_args() {
    let f = Fixture::new("fence-eval").await;
    let hash = f.beside("hash");
    let reply: Vec<Value> = f
        .fence
        .eval(
            4,
            REPORTING_BODY,
            &[&f.key, &hash],
            &["one".into(), 2.into()],
        )
        .await
        .unwrap();
    let reply: Vec<String> = reply.into_iter().map(|v| v.as_string().unwrap()).collect();
    assert_eq!(
        reply,
        vec!["2", "2", f.key.as_str(), hash.as_str(), "one", "2"]
    );
    assert_eq!(f.data().as_deref(), Some("one"));
    assert_eq!(
        common::raw_hgetall(&f.server, &hash),
        vec![("f".into(), "2".into())]
    );
    assert_eq!(f.fence.seen().await.unwrap(), 4);

    // A body without keys of its own sees none, not the fence key.
    let counts: Vec<i64> = f
        .fence
        .eval(4, "return {#KEYS, #ARGV}", &[], &[])
        .await
        .unwrap();
    assert_eq!(counts, vec![0, 0]);

    // A read-modify-write in one step, returning its result.
    let left: i64 = f
        .fence
        .eval(
            5,
            "return redis.call('incrby', KEYS[1], ARGV[1])",
            &[&f.beside("stock")],
            &[(-3).into()],
        )
        .await
        .unwrap();
    assert_eq!(left, -3);
}

#[tokio::test]
async fn a_stale_eval_does_not_run_its_body() {
    let f = Fixture::new("fence-eval-stale").await;
    let counter = f.beside("counter");
    let body = "redis.call('incr', KEYS[1]) return 'ran'";
    let ran: String = f.fence.eval(9, body, &[&counter], &[]).await.unwrap();
    assert_eq!(ran, "ran");
    assert_eq!(raw_get(&f.server, &counter).as_deref(), Some("1"));

    assert_stale(
        f.fence.eval::<String>(8, body, &[&counter], &[]).await,
        &f.fence_key,
        9,
        8,
    );
    assert_eq!(
        raw_get(&f.server, &counter).as_deref(),
        Some("1"),
        "the body ran for a stale token"
    );
}

#[tokio::test]
async fn bad_arguments_are_refused_before_any_io() {
    let f = Fixture::new("fence-bad-args").await;
    let evalsha_before = common::raw_script_calls(&f.server);
    let get_before = common::raw_command_calls(&f.server, "get");

    let invalid = |result: relock::Result<()>, what: &str| {
        let e = result.unwrap_err();
        assert!(e.is_invalid_argument(), "{what}: {e:?}");
    };
    invalid(f.fence.set(0, &f.key, "x").await, "set with token 0");
    invalid(f.fence.hset(0, &f.key, "f", "x").await, "hset with token 0");
    invalid(f.fence.get::<()>(0, &f.key).await, "get with token 0");
    invalid(
        f.fence.eval::<()>(0, "return 1", &[], &[]).await,
        "eval with token 0",
    );
    invalid(f.fence.set(1, "", "x").await, "set of an empty key");
    invalid(f.fence.hset(1, "", "f", "x").await, "hset of an empty key");
    invalid(f.fence.get::<()>(1, "").await, "get of an empty key");
    invalid(
        f.fence.eval::<()>(1, "return 1", &[&f.key, ""], &[]).await,
        "eval with an empty key",
    );
    for resource in ["", "a{b", "x{}y"] {
        let fence = f.client.fence(resource);
        invalid(
            fence.set(1, "k", "x").await,
            &format!("set on {resource:?}"),
        );
        invalid(
            fence.seen().await.map(drop),
            &format!("seen of {resource:?}"),
        );
    }

    assert_eq!(common::raw_script_calls(&f.server), evalsha_before);
    assert_eq!(common::raw_command_calls(&f.server, "get"), get_before);
    assert!(f.data().is_none() && f.seen_raw().is_none());
}

#[tokio::test]
async fn a_data_key_of_another_type_gives_wrong_type() {
    let f = Fixture::new("fence-wrongtype").await;
    let hash = f.beside("hash");
    f.server.cmd(&["SET", &f.key, "a string"]);
    f.server.cmd(&["HSET", &hash, "f", "v"]);

    let e = f.fence.hset(3, &f.key, "f", "x").await.unwrap_err();
    assert!(
        matches!(&e, Error::WrongType { key } if key == &f.key),
        "{e:?}"
    );
    let e = f.fence.get::<Option<String>>(3, &hash).await.unwrap_err();
    assert!(
        matches!(&e, Error::WrongType { key } if key == &hash),
        "{e:?}"
    );
    let e = f
        .fence
        .eval::<()>(3, "return redis.call('get', KEYS[1])", &[&hash], &[])
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::WrongType { key } if key == &hash),
        "{e:?}"
    );
    assert!(e.to_string().contains("another type"), "{e}");
    assert_eq!(f.data().as_deref(), Some("a string"));
    // The token passed, so it was recorded, though the operation then failed.
    assert_eq!(f.fence.seen().await.unwrap(), 3);
    assert_eq!(
        common::raw_hgetall(&f.server, &hash),
        vec![("f".into(), "v".into())]
    );
}

#[tokio::test]
async fn a_fence_key_of_another_type_or_value_is_reported_and_nothing_is_written() {
    let f = Fixture::new("fence-bad-fence-key").await;
    f.server.cmd(&["HSET", &f.fence_key, "f", "v"]);
    let e = f.fence.set(3, &f.key, "x").await.unwrap_err();
    assert!(
        matches!(&e, Error::WrongType { key } if key == &f.fence_key),
        "{e:?}"
    );
    let e = f.fence.seen().await.unwrap_err();
    assert!(
        matches!(&e, Error::WrongType { key } if key == &f.fence_key),
        "{e:?}"
    );

    for not_a_token in ["abc", "07", "-1", "0", "123456789012345678901"] {
        f.server.cmd(&["DEL", &f.fence_key]);
        f.server.cmd(&["SET", &f.fence_key, not_a_token]);
        let e = f.fence.set(u64::MAX, &f.key, "x").await.unwrap_err();
        assert!(e.is_redis(), "{not_a_token}: {e:?}");
        assert!(e.to_string().contains("not a token"), "{not_a_token}: {e}");
        assert_eq!(f.seen_raw().as_deref(), Some(not_a_token));
    }
    assert!(f.fence.seen().await.unwrap_err().is_redis());
    assert!(
        f.data().is_none(),
        "a write passed a fence key that holds no token"
    );
}

#[tokio::test]
async fn scripts_are_loaded_again_after_script_flush() {
    let f = Fixture::new("fence-flush").await;
    f.fence.set(1, &f.key, "before").await.unwrap();
    let _: i64 = f.fence.eval(1, "return 1", &[], &[]).await.unwrap();
    let loads = common::raw_script_loads(&f.server, 0);

    assert!(f.server.cmd(&["SCRIPT", "FLUSH"]).starts_with("+OK"));
    f.fence.set(2, &f.key, "after").await.unwrap();
    let read: Option<String> = f.fence.get(2, &f.key).await.unwrap();
    let one: i64 = f.fence.eval(2, "return 1", &[], &[]).await.unwrap();
    assert_eq!((read.as_deref(), one), (Some("after"), 1));
    assert_stale(f.fence.set(1, &f.key, "stale").await, &f.fence_key, 2, 1);
    assert_eq!(f.data().as_deref(), Some("after"));
    // By EVALSHA, the set's, the get's and the user script's; as functions, the user script
    // alone (a script made at run time goes by EVALSHA), SCRIPT FLUSH leaving the library.
    let functions = f.client.stats().scripts == relock::ScriptCalls::Functions;
    let reloaded = if functions { 1 } else { 3 };
    assert!(
        common::raw_script_loads(&f.server, 1) >= loads + reloaded,
        "the scripts were not loaded again"
    );
}

#[tokio::test]
async fn a_resource_with_a_tag_keeps_it() {
    let f = Fixture::new("fence-tag").await;
    let resource = format!("{{{}}}:profile", f.key);
    let fence = f.client.fence(resource.clone());
    assert_eq!(fence.resource(), resource);
    assert_eq!(
        format!("{fence:?}"),
        format!("Fence {{ resource: {resource:?} }}")
    );
    fence.set(1, &resource, "x").await.unwrap();
    let key = format!("relock_fence:{resource}");
    assert_eq!(raw_get(&f.server, &key).as_deref(), Some("1"));
    assert_eq!(
        fred::util::redis_keyslot(key.as_bytes()),
        fred::util::redis_keyslot(resource.as_bytes())
    );
    // A plain resource's fence key hashes like the resource itself.
    assert_eq!(
        fred::util::redis_keyslot(f.fence_key.as_bytes()),
        fred::util::redis_keyslot(f.key.as_bytes())
    );
}

#[tokio::test]
async fn a_closed_client_refuses() {
    let f = Fixture::new("fence-closed").await;
    f.client.shutdown().await.unwrap();
    assert!(f.fence.set(1, &f.key, "x").await.unwrap_err().is_closed());
    assert!(f.fence.seen().await.unwrap_err().is_closed());
}

#[tokio::test]
async fn fences_and_their_futures_are_send() {
    fn send<T: Send>(_: &T) {}
    fn sync_clone<T: Send + Sync + Clone + 'static>() {}
    sync_clone::<Fence>();
    let f = Fixture::new("fence-send").await;
    send(&f.fence.seen());
    send(&f.fence.set(1, &f.key, "x"));
    send(&f.fence.hset(1, &f.key, "f", "x"));
    send(&f.fence.get::<Option<String>>(1, &f.key));
    send(&f.fence.eval::<()>(1, "return 1", &[], &[]));
}

/// What the increments of many tasks came to: how many fenced writes passed and how many
/// operations were refused as stale.
#[derive(Clone, Default)]
struct Tally {
    passed: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

impl Tally {
    /// One fenced increment of the counter `key` with `token`: read it through `fence`, wait
    /// `pause` (a stall, if long), write it plus one; counts a stale refusal of either, and fails
    /// on any other error.
    async fn increment(&self, fence: &Fence, token: u64, key: &str, pause: Duration) {
        let stale = |e: Error| {
            assert!(e.is_stale_token(), "{e:?}");
            self.refused.fetch_add(1, Ordering::Relaxed);
        };
        let count: Option<u64> = match fence.get(token, key).await {
            Ok(count) => count,
            Err(e) => return stale(e),
        };
        tokio::time::sleep(pause).await;
        match fence.set(token, key, (count.unwrap_or(0) + 1) as i64).await {
            Ok(()) => {
                self.passed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => stale(e),
        }
    }

    /// Checks that the counter of `f` ends equal to the increments that passed; returns how many
    /// passed and how many operations were refused.
    fn settle(&self, f: &Fixture) -> (u64, u64) {
        let passed = self.passed.load(Ordering::Relaxed);
        let refused = self.refused.load(Ordering::Relaxed);
        eprintln!("{passed} increments passed, {refused} operations refused");
        let counter: u64 = f.data().expect("the counter exists").parse().unwrap();
        assert_eq!(counter, passed, "increments were lost or doubled");
        (passed, refused)
    }
}

/// Tasks that each take a new token (an `INCR`, as a fenced lock does), read a counter through
/// the fence, pause, and write it plus one: whatever the interleaving, the counter ends equal to
/// the number of writes that passed. A write-only fence (or none) loses increments here.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_fenced_increments_are_never_lost() {
    const TASKS: usize = 16;
    const ROUNDS: usize = 25;
    let f = Fixture::new("fence-concurrent").await;
    let tokens = f.beside("tokens");
    let tally = Tally::default();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (client, fence) = (f.client.clone(), f.fence.clone());
        let (key, tokens, tally) = (f.key.clone(), tokens.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let token: u64 = client.redis().incr(tokens.as_str()).await.unwrap();
                let pause = Duration::from_millis(rand::thread_rng().gen_range(0..3));
                tally.increment(&fence, token, &key, pause).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (passed, refused) = tally.settle(&f);
    assert!(passed > 0, "no increment passed");
    assert!(
        refused > 0,
        "no operation was refused: the tasks did not interleave"
    );
    let last_token: u64 = raw_get(&f.server, &tokens).unwrap().parse().unwrap();
    assert_eq!(last_token, (TASKS * ROUNDS) as u64);
    assert!(f.fence.seen().await.unwrap() <= last_token);
}

/// Holders of a real lock with a short fixed lease, each on a client of its own (as processes
/// are), some of which pause past their lease between their fenced read and their fenced write,
/// as a stalled process does. Each takes its token (an `INCR`) once it holds the lock. The paused
/// holders are refused once a newer holder has read, and no increment is lost: the counter ends
/// equal to the writes that passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holders_paused_past_their_lease_lose_no_increment() {
    const HOLDERS: usize = 8;
    const ROUNDS: usize = 12;
    const LEASE: Duration = Duration::from_millis(30);
    const STALL: Duration = Duration::from_millis(90);
    let f = Fixture::new("fence-paused").await;
    let tokens = f.beside("tokens");
    let lock_name = f.beside("lock");
    let tally = Tally::default();
    let mut holders = Vec::new();
    for holder in 0..HOLDERS {
        let client = common::client(&f.server, Duration::from_secs(30)).await;
        let (fence, lock) = (client.fence(f.key.clone()), client.lock(lock_name.clone()));
        let (key, tokens, tally) = (f.key.clone(), tokens.clone(), tally.clone());
        holders.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let guard =
                    tokio::time::timeout(Duration::from_secs(20), lock.lock_with_lease(LEASE))
                        .await
                        .expect("the lock was never free")
                        .unwrap();
                let token: u64 = client.redis().incr(tokens.as_str()).await.unwrap();
                let stalls = (holder + round) % 3 == 0;
                let pause = if stalls { STALL } else { Duration::ZERO };
                tally.increment(&fence, token, &key, pause).await;
                // A holder that stalled finds its lease lost: that is the point.
                let _ = guard.unlock().await;
            }
            client.shutdown().await.unwrap();
        }));
    }
    for holder in holders {
        holder.await.unwrap();
    }
    let (passed, refused) = tally.settle(&f);
    assert!(refused > 0, "no stalled holder was refused");
    assert!(
        passed > refused,
        "most holders did not stall, yet most were refused"
    );
}

/// On a 3-master cluster: a fence guards its resource's key and the keys tagged with it, each on
/// the master that owns the resource's slot. A key in another slot is refused and nothing is
/// written: by fred when it lives on another master, by Redis (`CROSSSLOT`) when it is another
/// slot of the same master.
#[tokio::test]
async fn on_a_cluster_keys_in_the_fence_slot_pass_and_others_are_refused() {
    let cluster = Cluster::start(3);
    let config = common::config(&cluster.url()).with_command_timeout(Duration::from_secs(3));
    let client = tokio::time::timeout(Duration::from_secs(10), Client::new(config))
        .await
        .expect("the cluster client did not connect within 10 s")
        .expect("connect to the cluster");
    let prefix = common::prefix("fence-cluster");
    // Two names per master; the first of each is a resource, the second a key in another slot
    // of the same master.
    let per_master = cluster.keys_per_master(&prefix, 2);
    let resources: Vec<&String> = per_master.iter().map(|(_, keys)| &keys[0]).collect();
    for (i, (node, keys)) in per_master.iter().enumerate() {
        let resource = &keys[0];
        let fence = client.fence(resource.clone());
        let lines = format!("{{{resource}}}:lines");
        fence.set(2, resource, "v").await.unwrap();
        fence.hset(2, &lines, "1", "x").await.unwrap();
        let read: Option<String> = fence.get(3, resource).await.unwrap();
        assert_eq!(read.as_deref(), Some("v"));
        assert_stale(
            fence.set(2, resource, "stale").await,
            &fence_key(resource),
            3,
            2,
        );
        assert_eq!(raw_get(node, resource).as_deref(), Some("v"));
        assert_eq!(raw_get(node, &fence_key(resource)).as_deref(), Some("3"));
        assert_eq!(
            common::raw_hgetall(node, &lines),
            vec![("1".into(), "x".into())]
        );

        let same_node = &keys[1];
        let e = fence.set(4, same_node, "cross").await.unwrap_err();
        assert!(e.is_redis() && e.to_string().contains("CROSSSLOT"), "{e:?}");
        assert!(raw_get(node, same_node).is_none());

        let other_node = resources[(i + 1) % resources.len()];
        let e = fence.set(4, other_node, "cross").await.unwrap_err();
        assert!(e.is_redis(), "{e:?}");
        assert_ne!(
            raw_get(cluster.node_for_key(other_node), other_node).as_deref(),
            Some("cross")
        );
        assert_eq!(
            fence.seen().await.unwrap(),
            3,
            "a refused script recorded its token"
        );
    }
    client.shutdown().await.unwrap();
}
