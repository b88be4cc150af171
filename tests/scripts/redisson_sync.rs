//! The Redisson peer for `RSemaphore`, `RPermitExpirableSemaphore` and `RCountDownLatch`
//! (`common::redisson_sync`) on a real server: the wire facts it must reproduce (keys, types,
//! TTL effects, replies, what is published where) and its wait loops, one Java process waking
//! another's waiters.

use crate::common;

use std::time::{Duration, Instant};

use common::redisson_sync::{
    id_bytes, latch_channel, new_permit_id, now_ms, semaphore_channel, timeout_key, Attempt,
    Redisson, NO_LEASE,
};
use common::{
    eventually, raw_command_calls, raw_exists, raw_numsub, raw_pttl, resp, stays, RawSubscriber,
    RedisServer, Resp, HANG, PROMPT,
};
use fred::interfaces::LuaInterface;
use fred::types::Value;

/// How long a test waits for a message it expects.
const MESSAGE: Duration = Duration::from_secs(5);

/// How long a test waits for a state it expects.
const SOON: Duration = Duration::from_secs(5);

/// The string value of `key`, `None` when missing (`GET`).
fn raw_get(server: &RedisServer, key: &str) -> Option<String> {
    match resp(&server.cmd(&["GET", key])) {
        Resp::Bulk(value) => value,
        other => panic!("bad GET reply {other:?}"),
    }
}

/// The type of `key` (`TYPE`).
fn raw_type(server: &RedisServer, key: &str) -> String {
    match resp(&server.cmd(&["TYPE", key])) {
        Resp::Simple(kind) => kind,
        other => panic!("bad TYPE reply {other:?}"),
    }
}

/// The members of the sorted set `key` as raw bytes with their scores as Redis prints them,
/// lowest score first.
async fn zset(process: &Redisson, key: &str) -> Vec<(Vec<u8>, String)> {
    let reply: Value = process
        .redis()
        .eval(
            "return redis.call('zrange', KEYS[1], 0, -1, 'withscores')",
            vec![key.to_owned()],
            Vec::<Value>::new(),
        )
        .await
        .expect("ZRANGE");
    let Value::Array(items) = reply else {
        panic!("bad ZRANGE reply {reply:?}");
    };
    items
        .chunks(2)
        .map(|pair| {
            let member = pair[0].as_bytes().expect("a member").to_vec();
            let score = pair[1].as_str().expect("a score").into_owned();
            (member, score)
        })
        .collect()
}

/// The score of permit `id` in `key`, as Redis prints it; `None` when not there.
async fn score_of(process: &Redisson, key: &str, id: &str) -> Option<String> {
    let member = id_bytes(id);
    zset(process, key)
        .await
        .into_iter()
        .find(|(m, _)| *m == member)
        .map(|(_, score)| score)
}

/// The next message on `sub`, which must come within [`MESSAGE`].
async fn next(sub: &mut RawSubscriber) -> (String, String) {
    sub.next_message(MESSAGE)
        .await
        .expect("a message was published")
}

/// Publishes `payload` on `channel` by hand.
fn publish(server: &RedisServer, channel: &str, payload: &str) {
    let reply = server.cmd(&["PUBLISH", channel, payload]);
    assert!(reply.starts_with(':'), "PUBLISH failed: {reply}");
}

/// Waits until `connections` connections are subscribed to `channel`.
async fn until_numsub(server: &RedisServer, channel: &str, connections: i64) {
    assert!(
        eventually(SOON, || async {
            raw_numsub(server, channel) == connections
        })
        .await,
        "{channel} never had {connections} subscriber connection(s): {}",
        raw_numsub(server, channel)
    );
}

/// Waits until wall-clock time is past `epoch_ms` (a lease end).
async fn until_past(epoch_ms: i64) {
    assert!(
        eventually(SOON, || async { now_ms() > epoch_ms }).await,
        "the clock never passed {epoch_ms}"
    );
}

/// Awaits a spawned waiter for at most [`HANG`].
async fn join<T>(waiter: tokio::task::JoinHandle<T>, what: &str) -> T {
    tokio::time::timeout(HANG, waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}: the waiter hung"))
        .unwrap_or_else(|e| panic!("{what}: the waiter failed: {e}"))
}

/// Whether `id` is 32 lowercase hex chars.
fn is_permit_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

// ---- Names ----

#[test]
fn names_follow_redissons_prefix_and_suffix_rules() {
    assert_eq!(semaphore_channel("jobs"), "redisson_sc:{jobs}");
    assert_eq!(semaphore_channel("{tag}:jobs"), "redisson_sc:{tag}:jobs");
    assert_eq!(timeout_key("jobs"), "{jobs}:timeout");
    assert_eq!(timeout_key("{tag}:jobs"), "{tag}:jobs:timeout");
    assert_eq!(
        latch_channel("jobs"),
        "redisson_countdownlatch__channel__{jobs}"
    );
    // The latch always adds braces, a hash tag or not.
    assert_eq!(
        latch_channel("{tag}:jobs"),
        "redisson_countdownlatch__channel__{{tag}:jobs}"
    );
    let id = new_permit_id();
    assert!(is_permit_id(&id), "{id}");
    assert_eq!(id_bytes(&id).len(), 16);
    assert_ne!(new_permit_id(), id);
}

// ---- RSemaphore ----

/// `trySetPermits` creates a STRING count without a TTL and publishes the count, once.
#[tokio::test]
async fn semaphore_try_set_permits_sets_once_and_publishes_the_count() {
    let (server, java, name) = Redisson::setup("sem-set").await;
    let sem = java.semaphore(name.clone());
    assert_eq!(sem.channel(), format!("redisson_sc:{{{name}}}"));
    let channel = sem.channel().to_owned();
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;

    assert!(sem.try_set_permits(3).await);
    assert_eq!(next(&mut sub).await, (channel.clone(), "3".into()));
    assert_eq!(raw_get(&server, &name).as_deref(), Some("3"));
    assert_eq!(raw_type(&server, &name), "string");
    assert_eq!(raw_pttl(&server, &name), -1);

    assert!(!sem.try_set_permits(5).await, "already set");
    assert_eq!(raw_get(&server, &name).as_deref(), Some("3"));
    sub.assert_quiet(&server, &channel).await;
    assert_eq!(sem.available_permits().await, 3);
}

/// `tryAcquire` takes quietly (or writes nothing), `release` publishes the new count, 0 permits
/// send nothing, and a missing count is 0 permits that `release` creates.
#[tokio::test]
async fn semaphore_acquire_is_quiet_and_release_publishes_the_new_count() {
    let (server, java, name) = Redisson::setup("sem-acquire").await;
    let sem = java.semaphore(name.clone());
    let channel = sem.channel().to_owned();
    assert!(sem.try_set_permits(3).await);
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;

    assert!(sem.try_acquire(2).await);
    assert_eq!(raw_get(&server, &name).as_deref(), Some("1"));
    assert!(!sem.try_acquire(2).await, "only 1 left");
    assert_eq!(raw_get(&server, &name).as_deref(), Some("1"));
    sub.assert_quiet(&server, &channel).await;

    let evals = raw_command_calls(&server, "eval");
    assert!(sem.try_acquire(0).await, "0 permits always succeed");
    sem.release(0).await;
    assert!(!sem.release_if_exists(0).await);
    assert_eq!(
        raw_command_calls(&server, "eval"),
        evals,
        "0 permits sent nothing"
    );

    sem.release(2).await;
    assert_eq!(raw_get(&server, &name).as_deref(), Some("3"));
    assert_eq!(next(&mut sub).await, (channel.clone(), "3".into()));
    assert!(sem.release_if_exists(1).await);
    assert_eq!(next(&mut sub).await, (channel.clone(), "4".into()));
    assert_eq!(sem.available_permits().await, 4);
    // No upper bound: a release adds permits nobody took.
    sem.release(1).await;
    assert_eq!(next(&mut sub).await, (channel.clone(), "5".into()));
    assert!(sem.delete().await);
    assert!(!raw_exists(&server, &name));
    sub.assert_quiet(&server, &channel).await;

    // A missing count: 0 permits; nothing is created by reads or failed takes.
    let missing = java.semaphore(common::prefix("sem-missing"));
    let missing_channel = missing.channel().to_owned();
    let mut sub = RawSubscriber::subscribe(&server, &[&missing_channel]).await;
    assert!(!missing.try_acquire(1).await);
    assert_eq!(missing.available_permits().await, 0);
    assert_eq!(missing.drain_permits().await, 0);
    assert!(!missing.release_if_exists(2).await);
    assert!(!raw_exists(&server, missing.name()));
    sub.assert_quiet(&server, &missing_channel).await;
    // ... which `release` creates, without a TTL, publishing the count.
    missing.release(2).await;
    assert_eq!(raw_get(&server, missing.name()).as_deref(), Some("2"));
    assert_eq!(raw_pttl(&server, missing.name()), -1);
    assert_eq!(next(&mut sub).await, (missing_channel, "2".into()));
}

/// Acquire and release keep the count's TTL; `addPermits` and `drainPermits` SET it (the TTL
/// goes). `addPermits` publishes the new total, negative included; `drainPermits` publishes
/// nothing and returns what was there, negative included.
#[tokio::test]
async fn semaphore_ttl_and_negative_counts() {
    let (server, java, name) = Redisson::setup("sem-ttl").await;
    let sem = java.semaphore(name.clone());
    let channel = sem.channel().to_owned();
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;

    assert!(
        sem.try_set_permits_with_ttl(5, Duration::from_secs(60))
            .await
    );
    assert_eq!(next(&mut sub).await, (channel.clone(), "5".into()));
    let ttl = raw_pttl(&server, &name);
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
    assert!(
        !sem.try_set_permits_with_ttl(9, Duration::from_secs(60))
            .await
    );

    assert!(sem.try_acquire(1).await);
    sem.release(1).await;
    assert_eq!(next(&mut sub).await, (channel.clone(), "5".into()));
    assert!(
        raw_pttl(&server, &name) > 0,
        "acquire and release keep the TTL"
    );

    sem.add_permits(2).await;
    assert_eq!(next(&mut sub).await, (channel.clone(), "7".into()));
    assert_eq!(raw_get(&server, &name).as_deref(), Some("7"));
    assert_eq!(
        raw_pttl(&server, &name),
        -1,
        "addPermits SETs: the TTL goes"
    );

    server.cmd(&["PEXPIRE", &name, "60000"]);
    sem.add_permits(-10).await;
    assert_eq!(next(&mut sub).await, (channel.clone(), "-3".into()));
    assert_eq!(raw_get(&server, &name).as_deref(), Some("-3"));
    assert_eq!(raw_pttl(&server, &name), -1);
    assert!(!sem.try_acquire(1).await);
    sem.release(1).await;
    assert_eq!(next(&mut sub).await, (channel.clone(), "-2".into()));

    server.cmd(&["PEXPIRE", &name, "60000"]);
    assert_eq!(sem.drain_permits().await, -2);
    assert_eq!(raw_get(&server, &name).as_deref(), Some("0"));
    assert_eq!(
        raw_pttl(&server, &name),
        -1,
        "drainPermits SETs: the TTL goes"
    );
    assert_eq!(sem.drain_permits().await, 0);
    assert_eq!(raw_get(&server, &name).as_deref(), Some("0"));
    sub.assert_quiet(&server, &channel).await;
}

/// A Java waiter in one process is woken by a release in another; a release smaller than its
/// need wakes it to try again and fail; it leaves the channel once it has its permits.
#[tokio::test]
async fn semaphore_java_waiter_woken_by_java_release() {
    let server = RedisServer::start();
    let (a, b) = (
        Redisson::connect(&server).await,
        Redisson::connect(&server).await,
    );
    let name = common::prefix("sem-wake");
    let (sem_a, sem_b) = (a.semaphore(name.clone()), b.semaphore(name.clone()));
    let channel = sem_a.channel().to_owned();
    assert!(sem_a.try_set_permits(0).await);

    let waiter = tokio::spawn({
        let sem = sem_b.clone();
        async move {
            sem.acquire(2).await;
            Instant::now()
        }
    });
    until_numsub(&server, &channel, 1).await;

    // One permit: B is woken (one wake-up), tries, fails, and waits on.
    sem_a.release(1).await;
    assert!(eventually(SOON, || async { b.wakeups(&channel) == 1 }).await);
    assert!(!waiter.is_finished());
    assert_eq!(raw_get(&server, &name).as_deref(), Some("1"));

    // A waiter in A as well: one more subscription, one per process.
    let other = tokio::spawn({
        let sem = sem_a.clone();
        async move { sem.try_acquire_for(2, HANG).await }
    });
    until_numsub(&server, &channel, 2).await;
    assert_eq!(a.local_waiters(&channel), 1);
    assert_eq!(b.local_waiters(&channel), 1);

    let released = Instant::now();
    sem_a.release(3).await;
    let acquired = join(waiter, "B's acquire(2)").await;
    assert!(
        acquired.duration_since(released) < PROMPT,
        "woken by the message"
    );
    assert!(join(other, "A's tryAcquire").await);
    assert_eq!(raw_get(&server, &name).as_deref(), Some("0"));
    until_numsub(&server, &channel, 0).await;
    assert_eq!(b.local_waiters(&channel), 0);
}

/// `addPermits` publishes the new total, which wakes a waiter too.
#[tokio::test]
async fn semaphore_add_permits_wakes_a_java_waiter() {
    let server = RedisServer::start();
    let (a, b) = (
        Redisson::connect(&server).await,
        Redisson::connect(&server).await,
    );
    let name = common::prefix("sem-add-wake");
    let sem = a.semaphore(name.clone());
    assert!(sem.try_set_permits(0).await);
    let waiter = tokio::spawn({
        let sem = b.semaphore(name.clone());
        async move { sem.acquire(1).await }
    });
    until_numsub(&server, sem.channel(), 1).await;
    sem.add_permits(1).await;
    join(waiter, "acquire after addPermits").await;
    assert_eq!(raw_get(&server, &name).as_deref(), Some("0"));
}

/// One subscription per process and channel; a message `m` wakes `min(local waiters, m)` of
/// them (nothing for a negative or undecodable one), and each woken waiter runs its acquire
/// script once more.
#[tokio::test]
async fn semaphore_message_wakes_at_most_its_value_of_local_waiters() {
    let (server, java, name) = Redisson::setup("sem-min").await;
    let sem = java.semaphore(name.clone());
    let channel = sem.channel().to_owned();
    assert!(sem.try_set_permits(0).await);

    let base = raw_command_calls(&server, "eval");
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let sem = sem.clone();
            tokio::spawn(async move { sem.acquire(1).await })
        })
        .collect();
    // Each waiter tries once, subscribes, tries again, and parks.
    let parked = || async {
        java.local_waiters(&channel) == 3 && raw_command_calls(&server, "eval") == base + 6
    };
    assert!(eventually(SOON, parked).await, "three parked waiters");
    assert_eq!(raw_numsub(&server, &channel), 1, "one subscription");

    publish(&server, &channel, "2");
    let after = |wakeups: u64, evals: u64| {
        let (java, server, channel) = (&java, &server, &channel);
        move || async move {
            java.wakeups(channel) == wakeups && raw_command_calls(server, "eval") == base + evals
        }
    };
    assert!(eventually(SOON, after(2, 8)).await, "two woken, two tries");
    assert!(stays(Duration::from_millis(300), after(2, 8)).await);

    publish(&server, &channel, "-5");
    publish(&server, &channel, "sentinel");
    publish(&server, &channel, "10");
    assert!(
        eventually(SOON, after(5, 11)).await,
        "nothing for -5 or text, three for 10"
    );
    assert!(stays(Duration::from_millis(300), after(5, 11)).await);
    assert!(waiters.iter().all(|w| !w.is_finished()));

    // A release of 3 from another process lets all three through.
    let other = Redisson::connect(&server).await;
    other.semaphore(name.clone()).release(3).await;
    for waiter in waiters {
        join(waiter, "acquire(1)").await;
    }
    assert_eq!(raw_get(&server, &name).as_deref(), Some("0"));
    until_numsub(&server, &channel, 0).await;
}

/// `tryAcquire(n, wait)` gives up when `wait` runs out, and a cancelled `acquire` leaves the
/// channel: either way the process unsubscribes.
#[tokio::test]
async fn semaphore_waits_give_up_and_unsubscribe() {
    let server = RedisServer::start();
    let java = Redisson::connect(&server).await;
    let sem = java.semaphore(common::prefix("sem-give-up"));
    let channel = sem.channel().to_owned();
    assert!(sem.try_set_permits(0).await);

    assert!(!sem.try_acquire_for(1, Duration::from_millis(200)).await);
    until_numsub(&server, &channel, 0).await;
    assert!(!sem.try_acquire_for(1, Duration::ZERO).await);

    let cancelled = tokio::time::timeout(Duration::from_millis(200), sem.acquire(1)).await;
    assert!(cancelled.is_err(), "no permit to take");
    until_numsub(&server, &channel, 0).await;
    assert_eq!(java.local_waiters(&channel), 0);
    assert_eq!(sem.available_permits().await, 0);

    // The timed form is woken by a release as well.
    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move { sem.try_acquire_for(1, HANG).await }
    });
    until_numsub(&server, &channel, 1).await;
    sem.release(1).await;
    assert!(join(waiter, "tryAcquire(1, wait)").await);
}

/// Names with a hash tag: the channel is `redisson_sc:<name>`, not re-braced.
#[tokio::test]
async fn semaphore_with_hash_tag_publishes_on_the_unbraced_channel() {
    let server = RedisServer::start();
    let java = Redisson::connect(&server).await;
    let tag = common::prefix("sem-tag");
    let name = format!("{{{tag}}}:x");
    let right = format!("redisson_sc:{{{tag}}}:x");
    let wrong = format!("redisson_sc:{{{name}}}");
    let mut sub = RawSubscriber::subscribe(&server, &[&right, &wrong]).await;
    java.semaphore(name.clone()).release(1).await;
    assert_eq!(next(&mut sub).await, (right, "1".into()));
    sub.assert_quiet(&server, &wrong).await;
    let pes = java.permit_semaphore(name.clone());
    assert_eq!(pes.timeout_key(), format!("{name}:timeout"));
}

// ---- RPermitExpirableSemaphore ----

/// Acquire stores each permit's 16 raw id bytes in `{<name>}:timeout` scored `now + lease`, or
/// 922337203685477 without a lease; it publishes nothing. A failed attempt replies the earliest
/// lease end, or nil when only permits without a lease are held.
#[tokio::test]
async fn pes_acquire_stores_raw_ids_and_lease_deadlines() {
    let (server, java, name) = Redisson::setup("pes-acquire").await;
    let pes = java.permit_semaphore(name.clone());
    assert_eq!(pes.timeout_key(), format!("{{{name}}}:timeout"));
    assert_eq!(pes.channel(), format!("redisson_sc:{{{name}}}"));
    let (timeouts, channel) = (pes.timeout_key().to_owned(), pes.channel().to_owned());
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;
    assert!(pes.try_set_permits(3).await);
    assert_eq!(next(&mut sub).await, (channel.clone(), "3".into()));
    assert!(!pes.try_set_permits(3).await);

    let before = now_ms();
    let leased = pes.acquire_with_lease(Duration::from_secs(10)).await;
    let after = now_ms();
    assert!(is_permit_id(&leased), "{leased}");
    let members = zset(&java, &timeouts).await;
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].0, id_bytes(&leased), "the raw 16 bytes");
    let score: i64 = members[0].1.parse().expect("an integral score");
    assert!(
        (before + 10_000..=after + 10_000).contains(&score),
        "{score}"
    );

    let unleased = pes.acquire().await;
    let tried = pes.try_acquire().await.expect("a third permit");
    for id in [&unleased, &tried] {
        assert_eq!(
            score_of(&java, &timeouts, id).await.as_deref(),
            Some("922337203685477")
        );
    }
    assert_eq!(raw_get(&server, &name).as_deref(), Some("0"));
    assert_eq!(raw_type(&server, &name), "string");
    assert_eq!(raw_type(&server, &timeouts), "zset");
    assert_eq!(raw_pttl(&server, &timeouts), -1);
    sub.assert_quiet(&server, &channel).await;

    // Busy: the reply names the earliest lease end.
    assert_eq!(pes.try_acquire().await, None);
    assert_eq!(
        pes.attempt(1, Some(Duration::from_secs(1))).await,
        Attempt::EarliestExpiry(score)
    );
    assert_eq!(pes.available_permits().await, 0);
    assert_eq!(pes.acquired_permits().await, 3);
    assert_eq!(pes.permits().await, 3);
    let left = pes.lease_time(&leased).await;
    assert!(left > 0 && left <= 10_000, "{left}");
    assert_eq!(pes.lease_time(&unleased).await, -1);
    assert_eq!(pes.lease_time(&new_permit_id()).await, 0);

    // Only permits without a lease held: nil.
    assert!(pes.release(&leased).await);
    assert_eq!(next(&mut sub).await, (channel.clone(), "1".into()));
    assert_eq!(pes.try_acquire().await.map(|id| id.len()), Some(32));
    assert_eq!(pes.attempt(1, None).await, Attempt::NoExpiry);
    assert_eq!(zset(&java, &timeouts).await.len(), 3);
    sub.assert_quiet(&server, &channel).await;

    assert!(pes.delete().await);
    assert!(!raw_exists(&server, &name) && !raw_exists(&server, &timeouts));
    assert!(!pes.delete().await);
    assert_eq!(pes.permits().await, 0, "0 without a count");
}

/// Acquire copies a positive TTL of the count onto the lease set, and leaves the lease set's
/// TTL alone when the count has none.
#[tokio::test]
async fn pes_acquire_copies_the_count_ttl_onto_the_lease_set() {
    let (server, java, name) = Redisson::setup("pes-ttl").await;
    let pes = java.permit_semaphore(name.clone());
    let timeouts = pes.timeout_key().to_owned();
    assert!(pes.try_set_permits(3).await);
    server.cmd(&["PEXPIRE", &name, "60000"]);
    pes.acquire().await;
    let ttl = raw_pttl(&server, &timeouts);
    assert!(ttl > 5_000 && ttl <= 60_000, "{ttl}");

    server.cmd(&["PERSIST", &name]);
    server.cmd(&["PEXPIRE", &timeouts, "5000"]);
    pes.acquire().await;
    let ttl = raw_pttl(&server, &timeouts);
    assert!(ttl > 0 && ttl <= 5_000, "left as it was: {ttl}");
}

/// `tryRelease(id)` publishes the new count and is false for an unknown id (quietly) or a lapsed
/// one (which still goes back to the pool, with its message).
#[tokio::test]
async fn pes_release_publishes_the_new_count() {
    let (server, java, name) = Redisson::setup("pes-release").await;
    let pes = java.permit_semaphore(name.clone());
    let (timeouts, channel) = (pes.timeout_key().to_owned(), pes.channel().to_owned());
    assert!(pes.try_set_permits(2).await);
    let id = pes.acquire().await;
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;

    assert!(pes.release(&id).await);
    assert_eq!(next(&mut sub).await, (channel.clone(), "2".into()));
    assert_eq!(raw_get(&server, &name).as_deref(), Some("2"));
    assert!(!raw_exists(&server, &timeouts));
    assert!(!pes.release(&id).await, "already released");
    assert_eq!(raw_get(&server, &name).as_deref(), Some("2"));
    sub.assert_quiet(&server, &channel).await;

    // A lapsed lease, not yet reclaimed: false, but the permit goes back and is announced.
    let id = pes.acquire_with_lease(Duration::from_millis(50)).await;
    let score: i64 = score_of(&java, &timeouts, &id)
        .await
        .unwrap()
        .parse()
        .unwrap();
    until_past(score).await;
    assert!(!pes.release(&id).await, "its lease had run out");
    assert_eq!(next(&mut sub).await, (channel.clone(), "2".into()));
    assert_eq!(raw_get(&server, &name).as_deref(), Some("2"));
    assert!(zset(&java, &timeouts).await.is_empty());
}

/// `tryRelease(ids)` is all or nothing and publishes how many it released, not the new count.
#[tokio::test]
async fn pes_list_release_publishes_how_many_it_released() {
    let (server, java, name) = Redisson::setup("pes-list").await;
    let pes = java.permit_semaphore(name.clone());
    let (timeouts, channel) = (pes.timeout_key().to_owned(), pes.channel().to_owned());
    assert!(pes.try_set_permits(5).await);
    let ids = pes.acquire_many(3, None).await;
    assert_eq!(ids.len(), 3);
    assert_eq!(raw_get(&server, &name).as_deref(), Some("2"));
    assert_eq!(zset(&java, &timeouts).await.len(), 3);
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;

    assert_eq!(pes.release_many(&ids[..2]).await, 2);
    assert_eq!(next(&mut sub).await, (channel.clone(), "2".into()));
    assert_eq!(raw_get(&server, &name).as_deref(), Some("4"));

    let with_unknown = vec![ids[2].clone(), new_permit_id()];
    assert_eq!(pes.release_many(&with_unknown).await, 0, "all or nothing");
    assert_eq!(raw_get(&server, &name).as_deref(), Some("4"));
    assert!(score_of(&java, &timeouts, &ids[2]).await.is_some());
    sub.assert_quiet(&server, &channel).await;

    assert_eq!(pes.release_many(&ids[2..]).await, 1);
    assert_eq!(next(&mut sub).await, (channel.clone(), "1".into()));
    assert_eq!(raw_get(&server, &name).as_deref(), Some("5"));

    // A lapsed id anywhere in the list: nothing.
    let id = pes.acquire_with_lease(Duration::from_millis(50)).await;
    let score: i64 = score_of(&java, &timeouts, &id)
        .await
        .unwrap()
        .parse()
        .unwrap();
    until_past(score).await;
    assert_eq!(pes.release_many(&[id]).await, 0);
    assert_eq!(raw_get(&server, &name).as_deref(), Some("4"));
    sub.assert_quiet(&server, &channel).await;
}

/// `addPermits` publishes the delta, and only when positive; `setPermits` publishes the new
/// maximum when it changes anything.
#[tokio::test]
async fn pes_add_permits_publishes_a_positive_delta_only() {
    let (server, java, name) = Redisson::setup("pes-add").await;
    let pes = java.permit_semaphore(name.clone());
    let channel = pes.channel().to_owned();
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;
    assert!(pes.try_set_permits(2).await);
    assert_eq!(next(&mut sub).await, (channel.clone(), "2".into()));

    server.cmd(&["PEXPIRE", &name, "60000"]);
    pes.add_permits(3).await;
    assert_eq!(
        next(&mut sub).await,
        (channel.clone(), "3".into()),
        "the delta"
    );
    assert_eq!(raw_get(&server, &name).as_deref(), Some("5"));
    assert_eq!(raw_pttl(&server, &name), -1, "SET: the TTL goes");

    pes.add_permits(-4).await;
    assert_eq!(raw_get(&server, &name).as_deref(), Some("1"));
    sub.assert_quiet(&server, &channel).await;

    // setPermits: count + held becomes the maximum; the message is the maximum.
    pes.acquire().await;
    pes.set_permits(4).await;
    assert_eq!(next(&mut sub).await, (channel.clone(), "4".into()));
    assert_eq!(raw_get(&server, &name).as_deref(), Some("3"));
    assert_eq!(pes.permits().await, 4);
    pes.set_permits(4).await;
    sub.assert_quiet(&server, &channel).await;
}

/// Lapsed permits are reclaimed by the next script that reclaims; the new count is published
/// only when positive. A lapsed permit cannot be renewed.
#[tokio::test]
async fn pes_reclaim_publishes_a_positive_count_only() {
    let (server, java, name) = Redisson::setup("pes-reclaim").await;
    let pes = java.permit_semaphore(name.clone());
    let (timeouts, channel) = (pes.timeout_key().to_owned(), pes.channel().to_owned());
    assert!(pes.try_set_permits(2).await);
    let lapsing = pes.acquire_with_lease(Duration::from_millis(50)).await;
    let kept = pes.acquire().await;
    let score: i64 = score_of(&java, &timeouts, &lapsing)
        .await
        .unwrap()
        .parse()
        .unwrap();
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;
    until_past(score).await;
    sub.assert_quiet(&server, &channel).await;

    assert_eq!(pes.available_permits().await, 1);
    assert_eq!(next(&mut sub).await, (channel.clone(), "1".into()));
    let members = zset(&java, &timeouts).await;
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].0, id_bytes(&kept));
    assert_eq!(pes.acquired_permits().await, 1);
    assert_eq!(pes.permits().await, 2);
    assert!(!pes.update_lease_time(&lapsing, None).await, "reclaimed");
    sub.assert_quiet(&server, &channel).await;

    // A count at or below 0 after reclaiming: no message.
    let lapsing = pes.acquire_with_lease(Duration::from_millis(50)).await;
    pes.add_permits(-3).await;
    let score: i64 = score_of(&java, &timeouts, &lapsing)
        .await
        .unwrap()
        .parse()
        .unwrap();
    until_past(score).await;
    assert_eq!(pes.available_permits().await, -2);
    assert_eq!(raw_get(&server, &name).as_deref(), Some("-2"));
    sub.assert_quiet(&server, &channel).await;
}

/// `updateLeaseTime` rescores a held permit (`now + lease`, or 922337203685477 without one),
/// publishes nothing, and is false for an id not held.
#[tokio::test]
async fn pes_update_lease_time_rescores_a_held_permit() {
    let (server, java, name) = Redisson::setup("pes-update").await;
    let pes = java.permit_semaphore(name.clone());
    let (timeouts, channel) = (pes.timeout_key().to_owned(), pes.channel().to_owned());
    assert!(pes.try_set_permits(1).await);
    let id = pes.acquire_with_lease(Duration::from_secs(1)).await;
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;

    let before = now_ms();
    assert!(
        pes.update_lease_time(&id, Some(Duration::from_secs(60)))
            .await
    );
    let after = now_ms();
    let score: i64 = score_of(&java, &timeouts, &id)
        .await
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (before + 60_000..=after + 60_000).contains(&score),
        "{score}"
    );

    assert!(pes.update_lease_time(&id, None).await);
    assert_eq!(
        score_of(&java, &timeouts, &id).await.unwrap(),
        NO_LEASE.to_string()
    );
    assert_eq!(pes.lease_time(&id).await, -1);
    assert!(!pes.update_lease_time(&new_permit_id(), None).await);
    assert_eq!(raw_get(&server, &name).as_deref(), Some("0"));
    sub.assert_quiet(&server, &channel).await;
}

/// A Java `acquire()` waiting with only unleased permits held (nil reply: no time limit) is
/// woken by another process's release.
#[tokio::test]
async fn pes_java_waiter_woken_by_java_release() {
    let server = RedisServer::start();
    let (a, b) = (
        Redisson::connect(&server).await,
        Redisson::connect(&server).await,
    );
    let name = common::prefix("pes-wake");
    let (pes_a, pes_b) = (
        a.permit_semaphore(name.clone()),
        b.permit_semaphore(name.clone()),
    );
    let (timeouts, channel) = (pes_a.timeout_key().to_owned(), pes_a.channel().to_owned());
    assert!(pes_a.try_set_permits(1).await);
    let held = pes_a.acquire().await;

    let waiter = tokio::spawn({
        let pes = pes_b.clone();
        async move {
            let id = pes.acquire().await;
            (Instant::now(), id)
        }
    });
    until_numsub(&server, &channel, 1).await;

    let released = Instant::now();
    assert!(pes_a.release(&held).await);
    let (acquired, id) = join(waiter, "B's acquire()").await;
    assert!(
        acquired.duration_since(released) < PROMPT,
        "woken by the message"
    );
    assert_eq!(
        score_of(&b, &timeouts, &id).await.as_deref(),
        Some("922337203685477")
    );
    assert_eq!(raw_get(&server, &name).as_deref(), Some("0"));
    until_numsub(&server, &channel, 0).await;
}

/// A waiter whose attempt named a lease end sleeps until then (nobody announces a lapse) and
/// takes the lapsed permit itself; its own reclaim is the first message.
#[tokio::test]
async fn pes_waiter_sleeps_until_the_earliest_lease_ends() {
    let server = RedisServer::start();
    let (a, b) = (
        Redisson::connect(&server).await,
        Redisson::connect(&server).await,
    );
    let name = common::prefix("pes-nearest");
    let pes_a = a.permit_semaphore(name.clone());
    let (timeouts, channel) = (pes_a.timeout_key().to_owned(), pes_a.channel().to_owned());
    assert!(pes_a.try_set_permits(1).await);
    let lapsing = pes_a.acquire_with_lease(Duration::from_millis(400)).await;
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;

    let started = Instant::now();
    let got = b
        .permit_semaphore(name.clone())
        .try_acquire_for(HANG, Some(Duration::from_secs(30)))
        .await
        .expect("the lapsed permit");
    assert!(
        started.elapsed() < HANG / 2,
        "took {:?}: it did not wake at the lease end",
        started.elapsed()
    );
    assert_eq!(next(&mut sub).await, (channel.clone(), "1".into()));
    sub.assert_quiet(&server, &channel).await;
    assert!(score_of(&a, &timeouts, &lapsing).await.is_none());
    assert!(score_of(&a, &timeouts, &got).await.is_some());
    assert_eq!(raw_get(&server, &name).as_deref(), Some("0"));
    until_numsub(&server, &channel, 1).await; // only the raw subscriber is left
}

/// `tryAcquire(wait, lease)` gives up when `wait` runs out and unsubscribes.
#[tokio::test]
async fn pes_try_acquire_for_gives_up_and_unsubscribes() {
    let server = RedisServer::start();
    let java = Redisson::connect(&server).await;
    let pes = java.permit_semaphore(common::prefix("pes-give-up"));
    assert!(pes.try_set_permits(0).await);
    assert_eq!(
        pes.try_acquire_for(Duration::from_millis(200), None).await,
        None
    );
    assert_eq!(
        pes.try_acquire_many_for(2, Duration::ZERO, None).await,
        Vec::<String>::new()
    );
    until_numsub(&server, pes.channel(), 0).await;
    assert_eq!(pes.available_permits().await, 0);
    assert!(!raw_exists(&server, pes.timeout_key()));
}

// ---- RCountDownLatch ----

/// `trySetCount` creates the count without a TTL and publishes `1`, once.
#[tokio::test]
async fn latch_try_set_count_publishes_one() {
    let (server, java, name) = Redisson::setup("latch-set").await;
    let latch = java.count_down_latch(name.clone());
    assert_eq!(
        latch.channel(),
        format!("redisson_countdownlatch__channel__{{{name}}}")
    );
    let channel = latch.channel().to_owned();
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;

    assert_eq!(latch.count().await, 0);
    assert!(latch.try_set_count(2).await);
    assert_eq!(next(&mut sub).await, (channel.clone(), "1".into()));
    assert_eq!(raw_get(&server, &name).as_deref(), Some("2"));
    assert_eq!(raw_type(&server, &name), "string");
    assert_eq!(raw_pttl(&server, &name), -1);
    assert!(!latch.try_set_count(5).await);
    sub.assert_quiet(&server, &channel).await;
    assert_eq!(latch.count().await, 2);
}

/// `countDown` publishes `0` only when it reaches 0, deletes the count at or below 0, keeps a
/// TTL otherwise; the latch can then be set again.
#[tokio::test]
async fn latch_count_down_publishes_zero_only_at_zero_and_deletes() {
    let (server, java, name) = Redisson::setup("latch-down").await;
    let latch = java.count_down_latch(name.clone());
    let channel = latch.channel().to_owned();
    assert!(latch.try_set_count(2).await);
    server.cmd(&["PEXPIRE", &name, "60000"]);
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;

    latch.count_down().await;
    assert_eq!(raw_get(&server, &name).as_deref(), Some("1"));
    assert!(raw_pttl(&server, &name) > 0, "DECR keeps the TTL");
    sub.assert_quiet(&server, &channel).await;

    latch.count_down().await;
    assert_eq!(next(&mut sub).await, (channel.clone(), "0".into()));
    assert!(!raw_exists(&server, &name));
    assert_eq!(latch.count().await, 0);

    latch.count_down().await;
    assert!(!raw_exists(&server, &name), "-1 is deleted");
    sub.assert_quiet(&server, &channel).await;

    assert!(latch.try_set_count(1).await, "reusable once open");
    assert_eq!(next(&mut sub).await, (channel.clone(), "1".into()));
}

/// `delete` publishes `1` when it deleted the count, nothing otherwise.
#[tokio::test]
async fn latch_delete_publishes_one() {
    let (server, java, name) = Redisson::setup("latch-delete").await;
    let latch = java.count_down_latch(name.clone());
    let channel = latch.channel().to_owned();
    assert!(latch.try_set_count(1).await);
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;
    assert!(latch.delete().await);
    assert_eq!(next(&mut sub).await, (channel.clone(), "1".into()));
    assert!(!raw_exists(&server, &name));
    assert!(!latch.delete().await);
    sub.assert_quiet(&server, &channel).await;
}

/// Java waiters (one subscription for the process) are woken by another process's last
/// `countDown`, not before; a missing latch does not wait at all.
#[tokio::test]
async fn latch_java_waiters_woken_by_java_count_down() {
    let server = RedisServer::start();
    let (a, b) = (
        Redisson::connect(&server).await,
        Redisson::connect(&server).await,
    );
    let name = common::prefix("latch-wake");
    let (latch_a, latch_b) = (
        a.count_down_latch(name.clone()),
        b.count_down_latch(name.clone()),
    );
    let channel = latch_a.channel().to_owned();
    assert!(latch_a.try_set_count(2).await);

    let plain = tokio::spawn({
        let latch = latch_b.clone();
        async move { latch.wait().await }
    });
    let timed = tokio::spawn({
        let latch = latch_b.clone();
        async move { latch.wait_for(HANG).await }
    });
    assert!(eventually(SOON, || async { b.local_waiters(&channel) == 2 }).await);
    assert_eq!(
        raw_numsub(&server, &channel),
        1,
        "one subscription for both"
    );
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;

    latch_a.count_down().await;
    sub.assert_quiet(&server, &channel).await;
    assert!(!plain.is_finished() && !timed.is_finished());

    let released = Instant::now();
    latch_a.count_down().await;
    assert_eq!(next(&mut sub).await, (channel.clone(), "0".into()));
    join(plain, "await()").await;
    assert!(join(timed, "await(timeout)").await);
    assert!(released.elapsed() < PROMPT, "woken by the message");
    until_numsub(&server, &channel, 1).await; // only the raw subscriber is left

    // Count 0 (the key is gone): no wait, no subscription.
    latch_b.wait().await;
    assert!(latch_b.wait_for(Duration::from_millis(1)).await);
    assert_eq!(b.local_waiters(&channel), 0);
}

/// `await(timeout)` gives up when the time runs out and unsubscribes; `delete` (message `1`)
/// wakes nobody, so a waiter only sees the count gone when its time is up.
#[tokio::test]
async fn latch_wait_for_gives_up_and_delete_wakes_nobody() {
    let server = RedisServer::start();
    let java = Redisson::connect(&server).await;
    let latch = java.count_down_latch(common::prefix("latch-give-up"));
    let channel = latch.channel().to_owned();
    assert!(latch.try_set_count(1).await);
    assert!(!latch.wait_for(Duration::from_millis(200)).await);
    until_numsub(&server, &channel, 0).await;

    let timeout = Duration::from_millis(1500);
    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move {
            let started = Instant::now();
            (latch.wait_for(timeout).await, started.elapsed())
        }
    });
    until_numsub(&server, &channel, 1).await;
    let other = Redisson::connect(&server).await;
    assert!(other.count_down_latch(latch.name()).delete().await);
    let (opened, waited) = join(waiter, "await(timeout)").await;
    assert!(opened, "the count reads 0 once the waiter looks again");
    assert!(
        waited >= timeout - Duration::from_millis(50),
        "woken after {waited:?}: `1` must not wake it"
    );
    until_numsub(&server, &channel, 0).await;
}
