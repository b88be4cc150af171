//! relock's non-reentrant locks and Redisson's on one name (the Redisson side is the peer of
//! `tests/common/redisson_nonreentrant.rs`): each excludes the other, each refuses its own
//! owner's re-entry with nothing written, each one's unlock wakes the other's waiter, and the
//! fair ones share one queue, which a refused re-entry never joins.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::family::raw_keys;
use common::redisson_fair::{java_now, REDISSON_FAIR_WAIT_MS};
use common::redisson_nonreentrant::{
    java_field, Attempt, RedissonNonReentrant, RedissonNonReentrantFair, Unlocked, UNLOCK_MESSAGE,
};
use common::{
    fair_alive_key, fair_queue_key, fair_timeout_key, pairs, raw_exists, raw_hgetall, raw_lrange,
    raw_pttl, raw_zscore, RawSubscriber, RedisServer,
};
use relock::Owner;

const WATCHDOG: Duration = Duration::from_secs(5);

/// A holder's lease when the test unlocks it while someone waits: longer than
/// [`common::PROMPT`], so a waiter served within `PROMPT` of the unlock was woken by its message,
/// not by the lease running out.
const HELD_MS: i64 = 10_000;

/// A lease the test only reads (nobody waits on it).
const SHORT: Duration = Duration::from_secs(5);

/// The holder field of `owner` on `client`.
fn field(client: &relock::Client, owner: &Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

/// Checks that `attempt` was refused as a re-entry of `name`.
fn assert_reentry<T: std::fmt::Debug>(attempt: relock::Result<T>, name: &str) {
    match attempt {
        Err(relock::Error::Reentry { lock }) => assert_eq!(lock, name),
        other => panic!("expected a refused re-entry of {name}, got {other:?}"),
    }
}

/// Checks that `attempt` found the lock busy, with a PTTL above 0.
fn assert_busy(attempt: Attempt) {
    assert!(
        matches!(attempt, Attempt::Busy(ms) if ms > 0),
        "expected busy with a PTTL, got {attempt:?}"
    );
}

#[tokio::test]
async fn a_redisson_holder_excludes_relock_and_its_unlock_wakes_relocks_waiter() {
    let (server, client, name) = common::setup("nr-redisson-holds", WATCHDOG).await;
    let java = RedissonNonReentrant::new(&server, &name, &java_field(1), HELD_MS).await;
    assert_eq!(java.attempt().await, Attempt::Acquired);
    assert_eq!(raw_hgetall(&server, &name), pairs(&[(&java.field, "1")]));

    let lock = client.non_reentrant_lock(name.clone());
    assert!(lock.try_lock().await.unwrap().is_none());
    let waited = lock.try_lock_for(Duration::from_millis(200), None).await;
    assert!(waited.unwrap().is_none());
    let waiter = common::spawn_acquire("relock's waiter", async move { lock.lock().await });
    assert!(
        common::until_subscribed(&server, &name, 1).await,
        "relock's waiter never subscribed to {}",
        java.channel()
    );
    assert_eq!(raw_hgetall(&server, &name), pairs(&[(&java.field, "1")]));

    let released = Instant::now();
    assert_eq!(java.unlock().await, Unlocked::Released);
    let guard = common::woken_promptly(waiter, released, "Redisson's unlock").await;

    // relock holds it: one field of its client, count 1; Redisson's latch went with its DEL.
    let hash = raw_hgetall(&server, &name);
    assert_eq!(hash.len(), 1, "{hash:?}");
    assert!(hash[0].0.starts_with(client.id()), "{hash:?}");
    assert_eq!(hash[0].1, "1");
    assert!(raw_keys(&server, "redisson_unlock_latch:*").is_empty());
    assert_busy(java.attempt().await);
    assert_eq!(java.unlock().await, Unlocked::NotHeld);

    guard.unlock().await.unwrap();
    assert!(!raw_exists(&server, &name));
    assert_eq!(java.attempt().await, Attempt::Acquired);
    assert_eq!(java.unlock().await, Unlocked::Released);
}

#[tokio::test]
async fn each_side_refuses_its_own_reentry_and_finds_the_others_hold_busy() {
    let (server, client, name) = common::setup("nr-redisson-reentry", WATCHDOG).await;
    let owner = Owner::new();
    let lock = client
        .non_reentrant_lock(name.clone())
        .owned_by(owner.clone());
    let guard = lock.lock_with_lease(SHORT).await.unwrap();
    let mine = field(&client, &owner);
    let java =
        RedissonNonReentrant::new(&server, &name, &java_field(1), SHORT.as_millis() as i64).await;

    // Redisson finds relock's hold busy; its unlock, not holding, changes nothing.
    assert_busy(java.attempt().await);
    assert_eq!(java.unlock().await, Unlocked::NotHeld);
    assert!(raw_keys(&server, "redisson_unlock_latch:*").is_empty());

    // relock's owner asks again, three ways: refused, naming the lock, nothing written.
    let ttl_before = raw_pttl(&server, &name);
    assert_reentry(lock.lock().await, &name);
    assert_reentry(lock.try_lock().await, &name);
    assert_reentry(
        lock.try_lock_for(Duration::from_secs(30), None).await,
        &name,
    );
    assert_eq!(raw_hgetall(&server, &name), pairs(&[(&mine, "1")]));
    let ttl_after = raw_pttl(&server, &name);
    assert!(
        0 < ttl_after && ttl_after <= ttl_before,
        "the TTL went from {ttl_before} to {ttl_after}"
    );
    assert_eq!(lock.hold_count().await.unwrap(), 1);

    // relock's unlock frees it and says so as Redisson's waiters expect (`0` on the lock's
    // channel); Redisson takes it, and its own re-entry is refused in turn.
    let mut told = RawSubscriber::subscribe(&server, &[&java.channel()]).await;
    guard.unlock().await.unwrap();
    assert_eq!(
        told.next_message(common::PROMPT).await,
        Some((java.channel(), UNLOCK_MESSAGE.to_owned()))
    );
    assert!(!raw_exists(&server, &name));
    assert_eq!(java.attempt().await, Attempt::Acquired);
    let ttl_before = raw_pttl(&server, &name);
    assert_eq!(java.attempt().await, Attempt::Refused);
    assert_eq!(java.lock(&server).await, Attempt::Refused);
    // Another handle of the same Java thread (same client, same thread): refused too.
    let same_thread =
        RedissonNonReentrant::new(&server, &name, &java.field, SHORT.as_millis() as i64).await;
    assert_eq!(same_thread.attempt().await, Attempt::Refused);
    assert_eq!(raw_hgetall(&server, &name), pairs(&[(&java.field, "1")]));
    let ttl_after = raw_pttl(&server, &name);
    assert!(
        0 < ttl_after && ttl_after <= ttl_before,
        "the TTL went from {ttl_before} to {ttl_after}"
    );

    // To relock's owner, Redisson's hold is another owner's: busy, not a re-entry.
    assert!(lock.try_lock().await.unwrap().is_none());

    // One unlock frees it.
    assert_eq!(java.unlock().await, Unlocked::Released);
    assert!(!raw_exists(&server, &name));
    let guard = common::taken(lock.try_lock().await, "free after Redisson's unlock");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn the_fair_ones_share_a_queue_that_a_refused_reentry_never_joins() {
    let server = Arc::new(RedisServer::start());
    let client = common::client(&server, WATCHDOG).await;
    let name = common::prefix("nr-redisson-fair");
    let (queue, deadlines) = (fair_queue_key(&name), fair_timeout_key(&name));
    let owner = Owner::new();
    let lock = client
        .non_reentrant_fair_lock(name.clone())
        .owned_by(owner.clone());
    let held = Duration::from_millis(HELD_MS as u64);
    let guard = lock.lock_with_lease(held).await.unwrap();
    let mine = field(&client, &owner);
    let java = RedissonNonReentrantFair::new(
        &server,
        &name,
        &java_field(1),
        REDISSON_FAIR_WAIT_MS,
        HELD_MS,
    )
    .await;
    let java_field_1 = java.field.clone();
    let java_channel = java.channel();

    // Redisson's tryLock() finds it busy and does not queue; its lock() queues and waits.
    assert_eq!(java.try_lock().await, Attempt::Busy(1));
    assert!(raw_lrange(&server, &queue).is_empty());
    let mut told = RawSubscriber::subscribe(&server, &[&java_channel]).await;
    let java_waiter = {
        let server = server.clone();
        tokio::spawn(async move {
            let attempt = java.lock(&server).await;
            (attempt, Instant::now(), java)
        })
    };
    assert!(
        common::until_numsub(&server, &java_channel, 2, Duration::from_secs(5)).await,
        "Redisson's waiter never subscribed"
    );
    assert_eq!(raw_lrange(&server, &queue), vec![java_field_1.clone()]);
    let java_deadline = raw_zscore(&server, &deadlines, &java_field_1).expect("queued");

    // relock's owner asks again: refused, never queued, the Redisson waiter's place and deadline
    // as they were, relock's hold as it was.
    let ttl_before = raw_pttl(&server, &name);
    assert_reentry(lock.lock().await, &name);
    assert_reentry(lock.try_lock().await, &name);
    assert_reentry(
        lock.try_lock_for(Duration::from_secs(30), None).await,
        &name,
    );
    assert_eq!(raw_lrange(&server, &queue), vec![java_field_1.clone()]);
    assert_eq!(raw_zscore(&server, &deadlines, &mine), None);
    assert_eq!(raw_zscore(&server, &fair_alive_key(&name), &mine), None);
    assert_eq!(
        raw_zscore(&server, &deadlines, &java_field_1),
        Some(java_deadline)
    );
    assert_eq!(raw_hgetall(&server, &name), pairs(&[(&mine, "1")]));
    let ttl_after = raw_pttl(&server, &name);
    assert!(
        0 < ttl_after && ttl_after <= ttl_before,
        "the TTL went from {ttl_before} to {ttl_after}"
    );

    // relock's unlock tells the Redisson waiter on its own channel, which then takes the lock.
    let released = Instant::now();
    guard.unlock().await.unwrap();
    assert_eq!(
        told.next_message(common::PROMPT).await,
        Some((java_channel.clone(), UNLOCK_MESSAGE.to_owned()))
    );
    let (attempt, acquired, java) = common::within(
        common::HANG,
        java_waiter,
        "Redisson's waiter never got the lock",
    )
    .await;
    assert_eq!(attempt, Attempt::Acquired);
    let waited = acquired.saturating_duration_since(released);
    assert!(
        waited < common::PROMPT,
        "Redisson's waiter got the lock {waited:?} after relock's unlock"
    );
    assert_eq!(raw_hgetall(&server, &name), pairs(&[(&java_field_1, "1")]));
    assert!(raw_lrange(&server, &queue).is_empty());
    assert!(!raw_exists(&server, &deadlines));

    // Redisson's own re-entry, both ways: refused, never queued.
    assert_eq!(java.attempt().await, Attempt::Refused);
    assert_eq!(java.try_lock().await, Attempt::Refused);
    assert!(raw_lrange(&server, &queue).is_empty());
    assert_eq!(raw_hgetall(&server, &name), pairs(&[(&java_field_1, "1")]));

    // relock queues behind Redisson's hold; Redisson's unlock tells it on its channel.
    let relock_waiter = {
        let lock = lock.clone();
        common::spawn_acquire("relock's fair waiter", async move { lock.lock().await })
    };
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            raw_lrange(&server, &queue) == vec![mine.clone()]
        })
        .await,
        "relock's waiter never queued"
    );
    common::until_waiters(&client, 1).await;
    let released = Instant::now();
    assert_eq!(java.unlock().await, Unlocked::Released);
    let guard = common::woken_promptly(relock_waiter, released, "Redisson's fair unlock").await;
    assert_eq!(raw_hgetall(&server, &name), pairs(&[(&mine, "1")]));
    assert!(raw_lrange(&server, &queue).is_empty());
    assert!(raw_keys(&server, "redisson_unlock_latch:*").is_empty());
    guard.unlock().await.unwrap();
}

/// Puts the Redisson waiter `field`, dead (its deadline a minute past), at the head of `name`'s
/// queue.
fn put_dead_head(server: &RedisServer, name: &str, field: &str) {
    let queued = server.cmd(&["LPUSH", &fair_queue_key(name), field]);
    assert!(queued.starts_with(':'), "LPUSH: {queued}");
    let deadline = (java_now() - 60_000).to_string();
    let scored = server.cmd(&["ZADD", &fair_timeout_key(name), &deadline, field]);
    assert!(scored.starts_with(":1"), "ZADD: {scored}");
}

#[tokio::test]
async fn a_refused_fair_reentry_still_drops_a_dead_head_on_either_side() {
    let server = Arc::new(RedisServer::start());
    let client = common::client(&server, WATCHDOG).await;
    let name = common::prefix("nr-redisson-purge");
    let (queue, deadlines) = (fair_queue_key(&name), fair_timeout_key(&name));
    let lease = SHORT.as_millis() as i64;
    let java = |thread| {
        let server = server.clone();
        let name = name.clone();
        async move {
            RedissonNonReentrantFair::new(
                &server,
                &name,
                &java_field(thread),
                REDISSON_FAIR_WAIT_MS,
                lease,
            )
            .await
        }
    };

    // Redisson holds; a live Redisson waiter queues; a dead one heads the queue. The holder's
    // refusals, by tryLock() and by lock(), each drop the dead head and keep the live waiter.
    let holder = java(1).await;
    let live = java(2).await;
    assert_eq!(holder.attempt().await, Attempt::Acquired);
    assert_busy(live.attempt().await);
    let live_deadline = raw_zscore(&server, &deadlines, &live.field).expect("queued");
    put_dead_head(&server, &name, &java_field(3));
    assert_eq!(holder.try_lock().await, Attempt::Refused);
    assert_eq!(raw_lrange(&server, &queue), vec![live.field.clone()]);
    assert_eq!(raw_zscore(&server, &deadlines, &java_field(3)), None);
    put_dead_head(&server, &name, &java_field(4));
    assert_eq!(holder.attempt().await, Attempt::Refused);
    assert_eq!(raw_lrange(&server, &queue), vec![live.field.clone()]);
    assert_eq!(raw_zscore(&server, &deadlines, &java_field(4)), None);
    assert_eq!(
        raw_zscore(&server, &deadlines, &live.field),
        Some(live_deadline)
    );
    assert_eq!(raw_hgetall(&server, &name), pairs(&[(&holder.field, "1")]));

    // The live waiter's turn comes, and goes; the name is free.
    assert_eq!(holder.unlock().await, Unlocked::Released);
    assert_eq!(live.attempt().await, Attempt::Acquired);
    assert_eq!(live.unlock().await, Unlocked::Released);
    assert!(!raw_exists(&server, &name));
    assert!(raw_lrange(&server, &queue).is_empty());

    // relock holds; a live Redisson waiter queues; a dead one heads the queue. relock's refusal
    // drops the dead head too, and keeps the live waiter.
    let owner = Owner::new();
    let lock = client
        .non_reentrant_fair_lock(name.clone())
        .owned_by(owner.clone());
    let guard = lock.lock_with_lease(SHORT).await.unwrap();
    let waiter = java(5).await;
    assert_busy(waiter.attempt().await);
    let waiter_deadline = raw_zscore(&server, &deadlines, &waiter.field).expect("queued");
    put_dead_head(&server, &name, &java_field(6));
    assert_reentry(lock.lock().await, &name);
    assert_eq!(raw_lrange(&server, &queue), vec![waiter.field.clone()]);
    assert_eq!(raw_zscore(&server, &deadlines, &java_field(6)), None);
    assert_eq!(
        raw_zscore(&server, &deadlines, &waiter.field),
        Some(waiter_deadline)
    );
    let mine = field(&client, &owner);
    assert_eq!(raw_hgetall(&server, &name), pairs(&[(&mine, "1")]));

    guard.unlock().await.unwrap();
    assert_eq!(waiter.attempt().await, Attempt::Acquired);
    assert_eq!(waiter.unlock().await, Unlocked::Released);
    assert!(raw_lrange(&server, &queue).is_empty());
}
