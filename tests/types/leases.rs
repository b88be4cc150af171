//! Each hold keeps its own lease. The rule: the lock's TTL on Redis is never shorter than what any
//! live hold needs, and never longer than the longest of them. A watchdog hold needs the
//! watchdog timeout, renewed; a fixed hold needs its own deadline. Re-entry never shortens a
//! lease; a partial release sets the TTL from the holds that remain. (A watchdog hold and a
//! fixed re-entry, in either order, are a family invariant, in `tests/invariants/family.rs`;
//! the cases here are the plain lock's others.)

use crate::common;

use std::time::Duration;

use relock::RemainingLease;

const SOON: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_forgotten_fixed_hold_ends_at_its_own_deadline() {
    let server = common::RedisServer::start();
    let watchdog = Duration::from_secs(20);
    let client = common::client(&server, watchdog).await;
    let rival = common::client(&server, watchdog).await;
    let name = common::prefix("lease-forgotten-fixed");
    let lock = client.lock(name.clone());

    let taken = tokio::time::Instant::now();
    std::mem::forget(lock.lock_with_lease(Duration::from_secs(1)).await.unwrap());
    lock.lock().await.unwrap().unlock().await.unwrap();

    let took = rival
        .lock(name.clone())
        .try_lock_for(watchdog / 2, None)
        .await
        .unwrap()
        .expect("a forgotten 1 s hold kept the lock for the watchdog's lease");
    assert!(taken.elapsed() < watchdog / 2);
    took.unlock().await.unwrap();
}

#[tokio::test]
async fn a_shorter_fixed_reentry_never_cuts_a_longer_fixed_lease() {
    let (server, _client, name, lock) =
        common::setup_lock("lease-fixed-then-shorter", Duration::from_secs(5)).await;

    let long = Duration::from_secs(30);
    let outer = lock.lock_with_lease(long).await.unwrap();
    let inner = lock
        .lock_with_lease(Duration::from_millis(200))
        .await
        .unwrap();
    let pttl = common::raw_pttl(&server, &name);
    assert!(
        pttl > (long / 2).as_millis() as i64,
        "the re-entry cut a {long:?} lease to {pttl} ms"
    );
    inner.unlock().await.unwrap();
    assert!(common::raw_pttl(&server, &name) > (long / 2).as_millis() as i64);
    outer.unlock().await.unwrap();
}

#[tokio::test]
async fn renewals_never_cut_a_longer_fixed_hold() {
    let (server, _client, name, lock) =
        common::setup_lock("lease-renewal-vs-fixed", Duration::from_millis(600)).await;

    let long = Duration::from_secs(30);
    let fixed = lock.lock_with_lease(long).await.unwrap();
    let renewed = lock.lock().await.unwrap();
    // Every renewal is one more EVALSHA on this server of the test's own.
    let calls = common::raw_script_calls(&server);
    assert!(
        common::eventually(SOON, || async {
            common::raw_script_calls(&server) >= calls + 3
        })
        .await,
        "the watchdog never renewed"
    );
    let pttl = common::raw_pttl(&server, &name);
    assert!(
        pttl > (long / 2).as_millis() as i64,
        "renewals cut a {long:?} hold to {pttl} ms"
    );
    renewed.unlock().await.unwrap();
    fixed.unlock().await.unwrap();
}

#[tokio::test]
async fn remaining_lease_tells_free_held_and_no_expiry_apart() {
    let (server, _client, name, lock) =
        common::setup_lock("lease-remaining", Duration::from_secs(5)).await;
    assert_eq!(
        lock.remaining_lease().await.unwrap(),
        RemainingLease::Unlocked
    );

    let lease = Duration::from_secs(10);
    let guard = lock.lock_with_lease(lease).await.unwrap();
    let left = lock.remaining_lease().await.unwrap();
    assert!(
        matches!(left, RemainingLease::Expires(d) if d <= lease && d > lease / 2),
        "{left:?}"
    );
    guard.unlock().await.unwrap();

    // A lock someone wrote without a TTL.
    server.cmd(&["HSET", &name, "someone:thread-1", "1"]);
    assert_eq!(
        lock.remaining_lease().await.unwrap(),
        RemainingLease::NoExpiry
    );
    assert_eq!(lock.remaining_lease().await.unwrap().expires_in(), None);
}
