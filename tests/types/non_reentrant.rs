//! The non-reentrant locks: an owner that holds one and asks again is refused at once
//! (`Error::Reentry`), with the one hold it has left as it was; everything else is the
//! reentrant lock's (other owners wait and are woken, a `MultiLock` part, the blocking API).

use crate::common;

use std::time::Duration;

use relock::{MultiLock, Owner, Part};

const WATCHDOG: Duration = Duration::from_secs(3);
/// Long enough for any refusal or hand-off on a loaded machine; a refusal takes one round trip.
const GENEROUS: Duration = Duration::from_secs(10);

/// The Redis holder field of `owner` on `client`.
fn field(client: &relock::Client, owner: &Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

#[tokio::test]
async fn an_owner_that_holds_it_is_refused_at_once_and_keeps_its_one_hold() {
    let (server, client, name) = common::setup("nonreentrant-refused", WATCHDOG).await;
    let owner = Owner::new();
    let lock = client
        .non_reentrant_lock(name.clone())
        .owned_by(owner.clone());
    let guard = lock.lock().await.unwrap();
    let me = field(&client, &owner);
    assert_eq!(common::raw_holds(&server, &name, &me), 1);
    let ttl_before = common::raw_pttl(&server, &name);

    // lock(), try_lock() and a wait: each refused, none waits out its wait or the lease.
    let again = tokio::time::timeout(GENEROUS, lock.lock())
        .await
        .expect("a refused re-entry must not wait");
    let e = again.expect_err("a second hold of a non-reentrant lock");
    assert!(e.is_reentry(), "{e}");
    assert!(
        e.to_string().contains(&name),
        "the error names the lock: {e}"
    );
    assert!(lock.try_lock().await.is_err_and(|e| e.is_reentry()));
    let waited = tokio::time::timeout(GENEROUS, lock.try_lock_for(Duration::from_secs(60), None))
        .await
        .expect("a refused re-entry must not wait");
    assert!(waited.is_err_and(|e| e.is_reentry()));

    // Nothing changed: one hold, the TTL not raised, no other field.
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert_eq!(
        common::raw_hgetall(&server, &name),
        common::pairs(&[(&me, "1")])
    );
    assert!(common::raw_pttl(&server, &name) <= ttl_before);
    assert!(lock.is_held_by_current_owner().await.unwrap());

    // The one unlock frees it.
    guard.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
    let guard = lock.try_lock().await.unwrap().expect("free again");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_lock_held_by_the_same_owner_through_a_reentrant_handle_is_refused_too() {
    let (server, client, name) = common::setup("nonreentrant-mixed", WATCHDOG).await;
    let owner = Owner::new();
    let reentrant = client.lock(name.clone()).owned_by(owner.clone());
    let guard = reentrant.lock().await.unwrap();
    let refusing = client
        .non_reentrant_lock(name.clone())
        .owned_by(owner.clone());
    assert!(refusing.try_lock().await.is_err_and(|e| e.is_reentry()));
    assert_eq!(
        common::raw_holds(&server, &name, &field(&client, &owner)),
        1
    );
    guard.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn other_owners_wait_and_are_woken_by_the_release() {
    let (server, holder, waiter, name) = common::setup_two("nonreentrant-wait", WATCHDOG).await;
    let guard = holder
        .non_reentrant_lock(name.clone())
        .lock()
        .await
        .unwrap();
    let lock = waiter.non_reentrant_lock(name.clone());
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "held by another owner"
    );
    let waiting = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        let holds = lock.hold_count().await.unwrap();
        guard.unlock().await.unwrap();
        holds
    });
    assert!(common::until_subscribed(&server, &name, 1).await);
    guard.unlock().await.unwrap();
    let holds = tokio::time::timeout(GENEROUS, waiting)
        .await
        .expect("woken by the release")
        .unwrap();
    assert_eq!(holds, 1);
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn the_fair_one_refuses_its_holder_without_queueing_it_and_keeps_the_queue() {
    let (server, holder, waiter, name) = common::setup_two("nonreentrant-fair", WATCHDOG).await;
    let owner = Owner::new();
    let lock = holder
        .non_reentrant_fair_lock(name.clone())
        .owned_by(owner.clone());
    let guard = lock.lock().await.unwrap();

    // Another owner queues behind it.
    let other = waiter.non_reentrant_fair_lock(name.clone());
    let queued = tokio::spawn(async move {
        let guard = other.lock().await.unwrap();
        guard.unlock().await.unwrap();
    });
    let queue = common::fair_queue_key(&name);
    let deadline = tokio::time::Instant::now() + GENEROUS;
    while common::raw_lrange(&server, &queue).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = common::raw_lrange(&server, &queue);

    // The holder asks again: refused, not queued, the queue as it was.
    let again = tokio::time::timeout(GENEROUS, lock.lock()).await.unwrap();
    assert!(again.is_err_and(|e| e.is_reentry()));
    assert!(lock.try_lock().await.is_err_and(|e| e.is_reentry()));
    let me = field(&holder, &owner);
    assert_eq!(common::raw_lrange(&server, &queue), before);
    assert!(!before.contains(&me));
    assert_eq!(common::raw_holds(&server, &name, &me), 1);

    // Its release hands the lock to the queued waiter.
    guard.unlock().await.unwrap();
    tokio::time::timeout(GENEROUS, queued)
        .await
        .unwrap()
        .unwrap();
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn a_multi_lock_with_a_part_its_owner_holds_fails_whole_and_takes_nothing() {
    let (server, client, name) = common::setup("nonreentrant-multi", WATCHDOG).await;
    let owner = Owner::new();
    let (held, other) = (format!("{name}:held"), format!("{name}:other"));
    let single = client
        .non_reentrant_lock(held.clone())
        .owned_by(owner.clone());
    let guard = single.lock().await.unwrap();
    let multi = MultiLock::new([
        Part::from(client.lock(other.clone())),
        client.non_reentrant_lock(held.clone()).into(),
    ])
    .owned_by(owner.clone());
    let taken = tokio::time::timeout(GENEROUS, multi.lock()).await.unwrap();
    assert!(taken.is_err_and(|e| e.is_reentry()));
    // The other part was given back (or never taken), the held one is as it was.
    let deadline = tokio::time::Instant::now() + GENEROUS;
    while common::raw_exists(&server, &other) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the other part stayed held"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        common::raw_holds(&server, &held, &field(&client, &owner)),
        1
    );
    guard.unlock().await.unwrap();
    // Now the whole MultiLock is free to take.
    let guard = multi.lock().await.unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn inspect_shows_it_as_a_lock_held_once_by_its_owner() {
    let (_server, client, name) = common::setup("nonreentrant-inspect", WATCHDOG).await;
    let owner = Owner::new();
    let lock = client
        .non_reentrant_lock(name.clone())
        .owned_by(owner.clone());
    let guard = lock.lock().await.unwrap();
    let seen = client.inspect(&name).await.unwrap();
    assert_eq!(seen.kind, relock::inspect::Kind::Lock);
    let holders: Vec<_> = seen
        .holders
        .iter()
        .map(|h| (h.party.field.clone(), h.holds))
        .collect();
    assert_eq!(holders, vec![(field(&client, &owner), 1)]);
    guard.unlock().await.unwrap();
}

#[cfg(feature = "blocking")]
#[test]
fn the_blocking_api_refuses_a_second_hold_on_the_same_thread() {
    let server = common::RedisServer::start();
    let name = common::prefix("nonreentrant-blocking");
    let config = common::config(&server.url()).with_watchdog_timeout(WATCHDOG);
    let client = relock::blocking::Client::new(config).unwrap();
    let plain = client.non_reentrant_lock(name.clone());
    let guard = plain.lock().unwrap();
    assert!(plain.lock().is_err_and(|e| e.is_reentry()));
    assert!(plain.try_lock().is_err_and(|e| e.is_reentry()));
    assert_eq!(plain.hold_count().unwrap(), 1);
    guard.unlock().unwrap();
    assert!(!plain.is_locked().unwrap());

    let fair = client.non_reentrant_fair_lock(format!("{name}:fair"));
    let guard = fair.lock().unwrap();
    assert!(fair.lock().is_err_and(|e| e.is_reentry()));
    assert_eq!(fair.hold_count().unwrap(), 1);
    guard.unlock().unwrap();
    assert!(!fair.is_locked().unwrap());
}

/// The example against a server of the test's: the second `lock()` of one task is refused and
/// its hold stays one, and the fair one refuses too.
#[test]
fn the_example_shows_the_refusal() {
    let server = common::RedisServer::start();
    let stdout = common::run_example("non_reentrant", "testing", &server);
    assert!(
        stdout.contains("refused (lock `example:non_reentrant:"),
        "{stdout}"
    );
    assert!(stdout.contains("hold_count = 1"), "{stdout}");
    assert!(
        stdout.contains("the fair one refuses too:   true"),
        "{stdout}"
    );
}
