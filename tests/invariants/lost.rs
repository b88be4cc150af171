//! `lost()` and `is_lost()` tell the truth at once: past the earliest moment the lease can have
//! run out, a guard says so before any round trip, and `unlock()` then reports `LeaseLost`.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

const SOON: Duration = Duration::from_secs(10);
/// The watchdog timeout of the clients here: a stall of twice it outlives a lease.
const WATCHDOG: Duration = Duration::from_millis(900);

/// A server of its own, a client there with [`WATCHDOG`], and lock `test` held by it: the
/// server, the client, the lock's name, the lock and its guard.
async fn held(
    test: &str,
) -> (
    common::RedisServer,
    relock::Client,
    String,
    relock::Lock,
    relock::LockGuard,
) {
    let (server, client, name, lock) = common::setup_lock(test, WATCHDOG).await;
    let guard = lock.lock().await.unwrap();
    (server, client, name, lock, guard)
}

/// The runtime of this test is one thread: blocking it stops the watchdog too, as a stopped
/// process or a stalled runtime would.
#[tokio::test(flavor = "current_thread")]
async fn a_holder_stalled_past_its_lease_knows_it_before_any_round_trip() {
    let (server, _client, name, _lock, guard) = held("lost-stalled").await;
    assert!(!guard.is_lost());

    std::thread::sleep(WATCHDOG * 2);
    // Not one await since the stall: the watchdog has had no chance to run.
    assert!(
        guard.is_lost(),
        "a holder stalled past its lease wakes believing it holds the lock"
    );
    assert!(
        guard.lost().now_or_never().is_some(),
        "lost() waits for a round trip"
    );
    assert!(
        !common::raw_exists(&server, &name),
        "the lock outlived its lease on the server"
    );

    // Someone else takes it meanwhile; the stalled holder's unlock says what happened.
    let rival = common::client(&server, WATCHDOG).await;
    let taken = rival.lock(name.clone()).try_lock().await.unwrap();
    assert!(taken.is_some());
    let error = guard.unlock().await.unwrap_err();
    assert!(error.is_lease_lost(), "unlock after a lapse said: {error}");
    taken.unwrap().unlock().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_loss_is_final_even_when_a_late_renewal_finds_the_lock() {
    let (server, client, _name, lock, guard) = held("lost-final").await;
    let lost = guard.lost();

    // The server stalls too, so the lock does not expire there while this process stalls.
    let pid = server.pid().unwrap();
    common::faults::stop(pid);
    std::thread::sleep(WATCHDOG * 2);
    assert!(guard.is_lost());
    common::faults::resume(pid);

    // The watchdog's next renewal finds the field: still the guard stays lost.
    let calls = common::raw_script_calls(&server);
    let renewals = client.stats().renewals;
    assert!(
        common::eventually(SOON, || async {
            common::raw_script_calls(&server) > calls && client.stats().renewals > renewals
        })
        .await
    );
    assert!(guard.is_lost(), "a loss was taken back");
    assert!(lost.now_or_never().is_some());
    // The owner's next hold is a new one, not lost.
    let again = lock.lock().await.unwrap();
    assert!(!again.is_lost());
    again.unlock().await.unwrap();
    guard.unlock().await.unwrap_err();
}

#[tokio::test]
async fn with_hands_the_work_its_lost_signal() {
    let (server, _client, name, lock) =
        common::setup_lock("lost-with", Duration::from_millis(600)).await;
    let saw_loss = Arc::new(AtomicBool::new(false));

    let result = lock
        .with(|lost| {
            let saw_loss = saw_loss.clone();
            let name = name.clone();
            let server = &server;
            async move {
                server.cmd(&["DEL", &name]);
                tokio::select! {
                    _ = lost => saw_loss.store(true, Ordering::SeqCst),
                    _ = tokio::time::sleep(SOON) => {}
                }
            }
        })
        .await;
    assert!(
        saw_loss.load(Ordering::SeqCst),
        "the work never heard of the loss"
    );
    assert!(result.unwrap_err().is_lease_lost());
}

#[tokio::test(flavor = "current_thread")]
async fn a_lost_guard_never_releases_its_owners_newer_hold() {
    let (server, _client, name, lock, stale) = held("lost-stale-guard").await;
    std::thread::sleep(WATCHDOG * 2); // the lease runs out while this runtime is stalled
    assert!(!common::raw_exists(&server, &name));

    // The same owner takes the lock again: a new hold under the same holder field.
    let fresh = lock.lock().await.unwrap();
    assert!(!fresh.is_lost());
    let error = stale.unlock().await.unwrap_err();
    assert!(error.is_lease_lost(), "{error}");
    assert_eq!(
        lock.hold_count().await.unwrap(),
        1,
        "the lost guard's unlock released the owner's newer hold"
    );
    fresh.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}
