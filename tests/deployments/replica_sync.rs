//! Replica sync (`Config::with_replica_sync`): every acquire is followed by `WAIT 1 <timeout>`, so
//! a hold the caller gets is already on a replica; when no replica acknowledges in time the hold
//! just taken is released and the acquire fails with `Error::NotReplicated`.
//!
//! On a primary + replica pair: a healthy replica has the lock the moment the acquire returns; a
//! replica frozen with SIGSTOP makes acquires fail after about the sync timeout and leaves the
//! lock as it was; a lock taken before the primary dies is still its owner's on the promoted
//! replica until its lease ends. A server without any replica fails every acquire and keeps
//! nothing.

use crate::common;

use std::time::{Duration, Instant};

use common::connect::field_of;
use common::topology::ReplicaPair;
use common::{eventually, raw_exists, raw_holds, raw_pttl, RedisServer};
use relock::{Client, Error};
use tokio::time::timeout;

/// The replica sync timeout of the tests' clients.
const SYNC: Duration = Duration::from_millis(500);
/// The most an acquire may take beyond [`SYNC`] (generous: the machine is shared).
const SLACK: Duration = Duration::from_secs(2);
/// Bounds every wait.
const HANG: Duration = Duration::from_secs(20);

/// A client on `url` that waits for a replica after each acquire, at most `sync`.
async fn sync_client(url: &str, sync: Duration) -> Client {
    let config = common::connect::config(url, Duration::from_secs(5), Duration::from_secs(2));
    common::connect::connected(config.with_replica_sync(sync)).await
}

/// Checks that `client` takes lock `name` at once with `try_lock` (else fails with `expected`),
/// and releases it.
async fn taken_at_once(client: &Client, name: &str, expected: &str) {
    let taken = client.lock(name).try_lock().await.unwrap();
    taken.expect(expected).unlock().await.unwrap();
}

/// A primary + replica pair, in sync, and a client of the primary with replica sync [`SYNC`].
async fn synced_pair() -> (ReplicaPair, Client) {
    let pair = ReplicaPair::start();
    pair.wait_in_sync(Duration::from_secs(10));
    let client = sync_client(&pair.primary().url(), SYNC).await;
    (pair, client)
}

/// Runs `attempt` (the acquire `what` of lock `name`) and checks that it fails with
/// `NotReplicated` for `name` after about `sync`.
async fn assert_not_replicated<T: std::fmt::Debug>(
    attempt: impl std::future::Future<Output = relock::Result<T>>,
    name: &str,
    sync: Duration,
    what: &str,
) {
    let started = Instant::now();
    let outcome = attempt.await;
    let took = started.elapsed();
    match outcome {
        Err(err @ Error::NotReplicated { .. }) => {
            assert!(err.is_not_replicated());
            let Error::NotReplicated { lock } = &err else {
                unreachable!()
            };
            assert_eq!(lock, name, "{what}: {err}");
        }
        other => panic!("{what}: expected NotReplicated, got {other:?}"),
    }
    assert!(
        took >= sync - Duration::from_millis(20),
        "{what}: failed after {took:?}, before the {sync:?} sync timeout"
    );
    assert!(
        took < sync + SLACK,
        "{what}: failed only after {took:?} (sync timeout {sync:?})"
    );
}

/// As [`assert_not_replicated`], and checks that the failed acquire left no lock `name` on
/// `server`.
async fn assert_not_replicated_nor_kept<T: std::fmt::Debug>(
    server: &RedisServer,
    attempt: impl std::future::Future<Output = relock::Result<T>>,
    name: &str,
    sync: Duration,
    what: &str,
) {
    assert_not_replicated(attempt, name, sync, what).await;
    assert!(!raw_exists(server, name), "{what} left the lock behind");
}

/// (a) With a healthy replica, acquires and re-entries succeed and the replica already has each
/// hold when the call returns (read with HGET on the replica, no waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_replica_has_the_lock_when_the_acquire_returns() {
    let (pair, client) = synced_pair().await;
    let (primary, replica) = (pair.primary(), pair.replica());
    let name = common::prefix("sync-healthy");
    let lock = client.lock(name.as_str());

    let started = Instant::now();
    let outer = lock.lock().await.unwrap();
    eprintln!("a synced acquire took {:?}", started.elapsed());
    let field = field_of(&client, &outer);
    assert_eq!(raw_holds(primary, &name, &field), 1);
    assert_eq!(raw_holds(replica, &name, &field), 1, "not on the replica");
    assert!(raw_pttl(replica, &name) > 0);

    let inner = lock.lock().await.unwrap();
    assert_eq!(
        raw_holds(replica, &name, &field),
        2,
        "re-entry not on the replica"
    );
    assert_eq!(lock.hold_count().await.unwrap(), 2);

    // Contention is still no error, and a synced try_lock of a free lock works too.
    let other_owner = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.try_lock().await })
    };
    assert!(other_owner.await.unwrap().unwrap().is_none());
    let fixed_name = format!("{name}:fixed");
    let fixed = client
        .lock(fixed_name.as_str())
        .try_lock_for(Duration::ZERO, Some(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("a free lock");
    assert_eq!(
        raw_holds(replica, &fixed_name, &field_of(&client, &fixed)),
        1
    );
    let pttl = raw_pttl(replica, &fixed_name);
    assert!(0 < pttl && pttl <= 10_000, "PTTL on the replica {pttl}");

    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    fixed.unlock().await.unwrap();
    assert!(!raw_exists(primary, &name));
    let gone = eventually(Duration::from_secs(5), || async {
        !raw_exists(replica, &name) && !raw_exists(replica, &fixed_name)
    })
    .await;
    assert!(gone, "the releases never reached the replica");
    common::faults::assert_no_leaks(primary, &[&client], &[&name, &fixed_name]).await;
    client.shutdown().await.unwrap();
}

/// (b) With the replica frozen (SIGSTOP), `try_lock`, `lock` and a re-entry all fail with
/// `NotReplicated` after about the sync timeout, and each leaves the lock as it found it: a new
/// lock is deleted again, a re-entered one is back to its one hold. Once the replica runs again,
/// acquires succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_replica_fails_acquires_and_releases_the_hold() {
    let (pair, client) = synced_pair().await;
    let (primary, replica) = (pair.primary(), pair.replica());
    let plain = common::client(primary, Duration::from_secs(5)).await;
    let prefix = common::prefix("sync-stalled");
    let held = format!("{prefix}:held");
    let fresh = format!("{prefix}:fresh");

    let lock = client.lock(held.as_str());
    let guard = lock.lock().await.unwrap();
    let field = field_of(&client, &guard);
    assert_eq!(raw_holds(replica, &held, &field), 1);

    let pid = replica.pid().expect("the replica runs");
    let resume = common::faults::Frozen::stop(pid);

    // A re-entry: the second hold is taken, not replicated, and given back.
    assert_not_replicated(lock.lock(), &held, SYNC, "re-entry").await;
    assert_eq!(
        raw_holds(primary, &held, &field),
        1,
        "the re-entry was kept"
    );
    assert!(raw_pttl(primary, &held) > 0);
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert_eq!(client.stats().holds, 1);

    // A fresh lock, by each way of taking it: deleted again every time.
    let fresh_lock = client.lock(fresh.as_str());
    let lease = Some(Duration::from_secs(30));
    assert_not_replicated_nor_kept(primary, fresh_lock.try_lock(), &fresh, SYNC, "try_lock").await;
    assert_not_replicated_nor_kept(primary, fresh_lock.lock(), &fresh, SYNC, "lock").await;
    let waiting = fresh_lock.try_lock_for(Duration::from_secs(5), lease);
    assert_not_replicated_nor_kept(primary, waiting, &fresh, SYNC, "try_lock_for").await;
    assert_eq!(client.stats().holds, 1);
    assert_eq!(client.stats().waiters, 0);
    // Nothing of it blocks anyone: a client without replica sync takes it at once.
    taken_at_once(&plain, &fresh, "the unreplicated lock was released").await;

    // A release needs no replica.
    guard.unlock().await.unwrap();
    assert!(!raw_exists(primary, &held));

    drop(resume);
    pair.wait_in_sync(Duration::from_secs(10));
    let again = timeout(HANG, fresh_lock.try_lock())
        .await
        .expect("an acquire hung")
        .unwrap()
        .expect("with the replica back, the lock is taken");
    assert_eq!(raw_holds(replica, &fresh, &field_of(&client, &again)), 1);
    again.unlock().await.unwrap();

    common::faults::assert_no_leaks(primary, &[&client, &plain], &[&held, &fresh]).await;
    client.shutdown().await.unwrap();
    plain.shutdown().await.unwrap();
}

/// (c) A lock taken with replica sync survives the primary's death: on the promoted replica it is
/// still its owner's (same field, one hold, a lease running), and a client of the promoted replica
/// cannot take it until that lease has run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synced_lock_survives_promotion_of_the_replica() {
    const LEASE: Duration = Duration::from_secs(3);
    let (mut pair, client) = synced_pair().await;
    let name = common::prefix("sync-promote");

    let sent = Instant::now();
    let (guard, field) = common::connect::held(&client, &name, Some(LEASE)).await;

    pair.primary_mut().kill();
    pair.promote_replica();
    let promoted = pair.replica();
    assert_eq!(raw_holds(promoted, &name, &field), 1, "the lock was lost");
    let pttl = raw_pttl(promoted, &name);
    assert!(
        0 < pttl && pttl <= 3_000,
        "PTTL on the promoted replica {pttl}"
    );

    let other = common::client(promoted, Duration::from_secs(5)).await;
    let lock = other.lock(name.as_str());
    assert!(
        lock.try_lock().await.unwrap().is_none(),
        "another client took a lock whose lease still runs"
    );
    let taken = timeout(HANG, lock.try_lock_for(HANG, None))
        .await
        .expect("the other client's wait hung")
        .unwrap()
        .expect("the lock is free once its lease ends");
    let after = sent.elapsed();
    eprintln!("the other client got the lock {after:?} after the original acquire was sent");
    assert!(
        after >= LEASE - Duration::from_millis(20),
        "the other client got the lock {after:?} after it was taken with a {LEASE:?} lease"
    );
    assert!(
        after < LEASE + Duration::from_secs(5),
        "got it only after {after:?}"
    );
    assert_eq!(raw_holds(promoted, &name, &field), 0);
    assert_eq!(raw_holds(promoted, &name, &field_of(&other, &taken)), 1);
    taken.unlock().await.unwrap();

    // The original owner's guard: its primary is dead, so its release goes nowhere.
    drop(guard);
    drop(client);
    common::faults::assert_no_leaks(promoted, &[&other], &[&name]).await;
    other.shutdown().await.unwrap();
}

/// (d) A client with replica sync on a server with no replica: every way of acquiring fails with
/// `NotReplicated` after the sync timeout and leaves no lock, no subscription and no local hold
/// behind; `with` does not run its work. Contention is still `Ok(None)`, not an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_replica_fails_every_acquire_and_leaves_nothing() {
    const SHORT: Duration = Duration::from_millis(300);
    let server = RedisServer::start();
    let client = sync_client(&server.url(), SHORT).await;
    let plain = common::client(&server, Duration::from_secs(5)).await;
    let prefix = common::prefix("sync-none");
    let name = format!("{prefix}:free");
    let busy = format!("{prefix}:busy");
    let lock = client.lock(name.as_str());

    assert_not_replicated_nor_kept(&server, lock.try_lock(), &name, SHORT, "try_lock").await;
    assert_not_replicated_nor_kept(&server, lock.lock(), &name, SHORT, "lock").await;
    let leased = lock.lock_with_lease(Duration::from_secs(30));
    assert_not_replicated_nor_kept(&server, leased, &name, SHORT, "lock_with_lease").await;
    let waiting = lock.try_lock_for(Duration::from_secs(5), None);
    assert_not_replicated_nor_kept(&server, waiting, &name, SHORT, "try_lock_for").await;
    let ran = std::sync::atomic::AtomicBool::new(false);
    let work = lock.with(|_| async { ran.store(true, std::sync::atomic::Ordering::SeqCst) });
    assert_not_replicated_nor_kept(&server, work, &name, SHORT, "with").await;
    assert!(!ran.into_inner(), "`with` ran its work without the lock");
    assert!(!lock.is_locked().await.unwrap());
    let stats = client.stats();
    assert_eq!((stats.holds, stats.renewing, stats.waiters), (0, 0, 0));

    // The lock is really free: a client without replica sync takes it at once.
    taken_at_once(&plain, &name, "nothing was left behind").await;

    // Busy is answered before any WAIT: Ok(None), and the server ran no WAIT for it.
    let holder = plain.lock(busy.as_str()).lock().await.unwrap();
    let waits_before = common::raw_command_calls(&server, "wait");
    assert!(
        waits_before >= 5,
        "each failed acquire above ran a WAIT: {waits_before}"
    );
    assert!(client
        .lock(busy.as_str())
        .try_lock()
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        common::raw_command_calls(&server, "wait"),
        waits_before,
        "a busy try_lock waited for replicas"
    );
    holder.unlock().await.unwrap();

    common::faults::assert_no_leaks(&server, &[&client, &plain], &[&name, &busy]).await;
    client.shutdown().await.unwrap();
    plain.shutdown().await.unwrap();
}
