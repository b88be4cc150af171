//! Wire compatibility with Redisson: a "Java" client played by hand with Redisson's own acquire
//! script and unlock commands, against relock, both ways. They must exclude each other on the
//! same name and wake each other's waiters through `redisson_lock__channel:{<name>}`.

use crate::common;

use std::time::{Duration, Instant};

use common::{
    lock_channel, raw_exists, raw_hgetall, raw_numsub, raw_pttl, resp, resp_int, RawSubscriber,
    RedisServer, Resp,
};

/// Redisson's `RedissonLock.tryLockInnerAsync` script, as Redisson sends it.
const REDISSON_ACQUIRE: &str = "if ((redis.call('exists', KEYS[1]) == 0) \
    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
    end; \
    return redis.call('pttl', KEYS[1]);";

/// The holder field of the Java client's thread 1.
const JAVA_FIELD: &str = "5b6c2a1e-9d3f-4e7a-8c1b-2f0e4d6a8b9c:1";

/// The Java side's `tryLock` with a lease: the raw RESP reply of Redisson's acquire script.
fn java_acquire(server: &RedisServer, name: &str, lease_ms: u64) -> Resp {
    resp(&server.cmd(&[
        "EVAL",
        REDISSON_ACQUIRE,
        "1",
        name,
        &lease_ms.to_string(),
        JAVA_FIELD,
    ]))
}

/// The Java side's `unlock`: one hold less; on the last, DEL and `PUBLISH <channel> 0`.
/// Returns whether the lock was freed.
fn java_unlock(server: &RedisServer, name: &str) -> bool {
    let left = resp_int(&server.cmd(&["HINCRBY", name, JAVA_FIELD, "-1"]));
    if left > 0 {
        server.cmd(&["PEXPIRE", name, "30000"]);
        return false;
    }
    assert_eq!(resp_int(&server.cmd(&["DEL", name])), 1);
    server.cmd(&["PUBLISH", &lock_channel(name), "0"]);
    true
}

/// Java holds (twice, 30 s lease): relock cannot take it, and a relock waiter is woken by the
/// Java side's final `PUBLISH 0`, well before its TTL-bound retry (30 s) could fire.
async fn java_holds_then_wakes_relock(name: String) {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let channel = lock_channel(&name);

    assert_eq!(java_acquire(&server, &name, 30_000), Resp::Bulk(None));
    assert_eq!(java_acquire(&server, &name, 30_000), Resp::Bulk(None));
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(JAVA_FIELD.into(), "2".into())]
    );

    let lock = client.lock(name.clone());
    assert!(lock.try_lock().await.unwrap().is_none(), "Java holds it");
    assert!(lock
        .try_lock_for(Duration::from_millis(50), None)
        .await
        .unwrap()
        .is_none());
    assert!(lock.is_locked().await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    let lease = lock
        .remaining_lease()
        .await
        .unwrap()
        .expires_in()
        .expect("locked");
    assert!(lease > Duration::from_secs(25), "Java's lease: {lease:?}");
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(JAVA_FIELD.into(), "2".into())],
        "relock's failed attempts wrote nothing"
    );

    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = lock.lock().await.unwrap();
            let acquired_at = Instant::now();
            let owner = guard.owner().id().to_owned();
            (guard, owner, acquired_at)
        }
    });
    // The waiter is parked once relock subscribed the lock's channel.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            raw_numsub(&server, &channel) == 1
        })
        .await,
        "relock subscribed {channel}"
    );

    // The Java side releases one of two holds: still held, no message, relock keeps waiting.
    assert!(!java_unlock(&server, &name));
    assert!(!waiter.is_finished());
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(JAVA_FIELD.into(), "1".into())]
    );

    // The last Java release: DEL + PUBLISH 0. Only the message can wake relock this soon.
    let released_at = Instant::now();
    assert!(java_unlock(&server, &name));
    let (guard, owner, acquired_at) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("relock was woken by the Java side's PUBLISH")
        .unwrap();
    let woke_after = acquired_at.duration_since(released_at);
    assert!(
        woke_after < Duration::from_secs(3),
        "woken {woke_after:?} after the Java release"
    );

    // relock now holds it in Redisson's layout; the Java side is refused with relock's PTTL.
    let field = format!("{}:{owner}", client.id());
    assert_eq!(raw_hgetall(&server, &name), vec![(field, "1".into())]);
    let ttl = raw_pttl(&server, &name);
    assert!(
        (25_000..=30_000).contains(&ttl),
        "relock's watchdog lease {ttl}"
    );
    match java_acquire(&server, &name, 30_000) {
        Resp::Int(busy) => assert!(busy > 0 && busy <= 30_000, "busy PTTL {busy}"),
        other => panic!("the Java acquire must be refused, got {other:?}"),
    }
    guard.unlock().await.unwrap();
    assert!(!raw_exists(&server, &name));
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            raw_numsub(&server, &channel) == 0
        })
        .await,
        "relock left the channel once it had the lock"
    );
}

#[tokio::test]
async fn java_holds_relock_is_refused_and_woken_by_java_publish() {
    java_holds_then_wakes_relock(common::prefix("compat-java-holds")).await;
}

#[tokio::test]
async fn java_holds_with_user_hash_tag_wakes_relock_on_tagged_channel() {
    let tag = common::prefix("compat-java-tag");
    java_holds_then_wakes_relock(format!("{{{tag}}}:42")).await;
}

/// A Java holder that dies (no unlock, no message) blocks relock until its lease ends, then
/// relock takes the lock on its TTL-bound retry.
#[tokio::test]
async fn java_holder_that_dies_frees_the_lock_at_its_lease_end() {
    let (server, client, name) = common::setup("compat-java-dies", Duration::from_secs(30)).await;
    assert_eq!(java_acquire(&server, &name, 600), Resp::Bulk(None));
    let started = Instant::now();
    let lease_left = raw_pttl(&server, &name);
    assert!(lease_left > 0 && lease_left <= 600, "{lease_left}");

    let lock = client.lock(name.clone());
    let guard = tokio::time::timeout(Duration::from_secs(20), lock.lock())
        .await
        .expect("taken once the Java lease ended")
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(lease_left as u64) - Duration::from_millis(50),
        "taken after {waited:?}, before the Java lease ({lease_left} ms) ended"
    );
    // Far below relock's own 30 s lease: a waiter that did not go by the Java lease's PTTL
    // would wait that long.
    assert!(waited < Duration::from_secs(10), "took {waited:?}");
    let field = format!("{}:{}", client.id(), guard.owner().id());
    assert_eq!(raw_hgetall(&server, &name), vec![(field, "1".into())]);
    guard.unlock().await.unwrap();
}

/// relock holds: Redisson's acquire is refused with a PTTL, the hash field is
/// `<client-id>:<owner-id>` with an integer count, and the last unlock publishes exactly `0`.
#[tokio::test]
async fn relock_holds_java_is_refused_and_woken_by_relock_publish() {
    let (server, client, name) =
        common::setup("compat-relock-holds", Duration::from_secs(30)).await;
    let channel = lock_channel(&name);
    let mut sub = RawSubscriber::subscribe(&server, &[&channel]).await;

    let owner = relock::Owner::new();
    let lock = client.lock(name.clone()).owned_by(owner.clone());
    let outer = lock.lock().await.unwrap();
    let field = format!("{}:{}", client.id(), owner.id());
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(field.clone(), "1".into())]
    );
    let ttl = raw_pttl(&server, &name);
    assert!((25_000..=30_000).contains(&ttl), "watchdog lease {ttl}");

    match java_acquire(&server, &name, 10_000) {
        Resp::Int(busy) => assert!(busy > 0 && busy <= 30_000, "busy PTTL {busy}"),
        other => panic!("the Java acquire must be refused, got {other:?}"),
    }
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(field.clone(), "1".into())]
    );

    // Re-entry: the count is a plain integer Redisson can HINCRBY.
    let inner = lock.lock().await.unwrap();
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(field.clone(), "2".into())]
    );
    assert_eq!(
        resp(&server.cmd(&["HGET", &name, &field])),
        Resp::Bulk(Some("2".into()))
    );
    assert_eq!(
        resp(&server.cmd(&["TYPE", &name])),
        Resp::Simple("hash".into())
    );

    // Releasing one of two holds publishes nothing.
    inner.unlock().await.unwrap();
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(field.clone(), "1".into())]
    );
    sub.assert_quiet(&server, &channel).await;

    // The last release deletes the hash and publishes exactly "0" on Redisson's channel.
    outer.unlock().await.unwrap();
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((channel.clone(), "0".to_owned()))
    );
    assert!(!raw_exists(&server, &name));
    sub.assert_quiet(&server, &channel).await;

    // The Java side now gets it, and relock is refused.
    assert_eq!(java_acquire(&server, &name, 30_000), Resp::Bulk(None));
    assert!(lock.try_lock().await.unwrap().is_none());
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(JAVA_FIELD.into(), "1".into())]
    );
}

/// The default owner (the current task or thread) also writes `<client-id>:<owner-id>`.
#[tokio::test]
async fn relock_default_owner_field_is_client_id_and_owner_id() {
    let (server, client, name) =
        common::setup("compat-default-owner", Duration::from_secs(30)).await;
    let lock = client.lock(name.clone());
    let guard = lock.lock().await.unwrap();
    let field = format!("{}:{}", client.id(), relock::Owner::current().id());
    assert_eq!(guard.owner(), &relock::Owner::current());
    assert_eq!(raw_hgetall(&server, &name), vec![(field, "1".into())]);
    guard.unlock().await.unwrap();
}

/// A name with its own hash tag: relock publishes on `redisson_lock__channel:{order}:42`, as
/// Redisson does, and not on a re-braced channel.
#[tokio::test]
async fn user_hash_tag_uses_redissons_channel_name() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let tag = common::prefix("compat-tag");
    let name = format!("{{{tag}}}:42");
    let right = format!("redisson_lock__channel:{{{tag}}}:42");
    let wrong = format!("redisson_lock__channel:{{{{{tag}}}:42}}");
    assert_eq!(lock_channel(&name), right);
    let mut sub = RawSubscriber::subscribe(&server, &[&right, &wrong]).await;

    let guard = client.lock(name.clone()).lock().await.unwrap();
    match java_acquire(&server, &name, 10_000) {
        Resp::Int(busy) => assert!(busy > 0, "busy PTTL {busy}"),
        other => panic!("the Java acquire must be refused, got {other:?}"),
    }
    guard.unlock().await.unwrap();
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((right.clone(), "0".to_owned()))
    );
    sub.assert_quiet(&server, &wrong).await;

    // force_unlock wakes Redisson waiters on the same channel too.
    assert_eq!(java_acquire(&server, &name, 30_000), Resp::Bulk(None));
    assert!(client.lock(name.clone()).force_unlock().await.unwrap());
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((right.clone(), "0".to_owned()))
    );
    assert!(!raw_exists(&server, &name));
}

/// Lock-delay is relock's alone: a Java client takes a relock lock in its lock-delay at once
/// (it never reads `relock_lease:{<name>}`), excludes relock while it holds it, and its unlock
/// wakes relock's waiter; a relock waiter with a lock-delay then still waits out what is left of
/// the shadow (bounded by the delay), since a Java unlock does not delete it.
#[tokio::test]
async fn java_ignores_a_relock_lock_delay() {
    let (server, client, name) = common::setup("compat-delay", Duration::from_secs(30)).await;
    let shadow = format!("relock_lease:{{{name}}}");
    let delay = Duration::from_millis(1500);
    let lock = client.lock(name.clone()).with_lock_delay(delay).unwrap();
    let lapsing = lock.clone().owned_by(relock::Owner::new());
    std::mem::forget(
        lapsing
            .lock_with_lease(Duration::from_millis(200))
            .await
            .unwrap(),
    );
    while raw_exists(&server, &name) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(lock.lock_delay_left().await.unwrap().is_some());

    // The Java side takes the delayed lock at once; relock is refused as for any holder.
    assert_eq!(java_acquire(&server, &name, 30_000), Resp::Bulk(None));
    assert!(lock.try_lock().await.unwrap().is_none());
    assert!(
        lock.lock_delay_left().await.unwrap().is_none(),
        "held, not delayed"
    );

    // Java's unlock leaves the shadow: the relock waiter waits out what is left of it.
    let shadow_left = raw_pttl(&server, &shadow);
    let read_at = Instant::now();
    assert!(java_unlock(&server, &name));
    let guard = lock
        .try_lock_for(Duration::from_secs(5), None)
        .await
        .unwrap()
        .expect("taken once the shadow expired");
    if shadow_left > 0 {
        assert!(
            read_at.elapsed() + Duration::from_millis(20)
                >= Duration::from_millis(shadow_left as u64)
        );
    }
    guard.unlock().await.unwrap();
    assert!(!raw_exists(&server, &shadow));
}
