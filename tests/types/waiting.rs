//! Waiting for a busy lock: waiters are woken by the release's pub/sub message (long before the
//! holder's lease could have run out), fall back to the lease when no message comes, give up
//! cleanly when their wait runs out, and are served one per release. (Waiters in other clients
//! served by a release or a force unlock are family invariants, in
//! `tests/invariants/family.rs`.)

use crate::common;

use std::time::{Duration, Instant};

use relock::{Client, Lock, LockGuard};
use tokio::sync::{mpsc, oneshot};

/// A lease far longer than any wake-up the tests accept, so a waiter that got the lock within
/// [`PROMPT`] of a release was woken by the release's message, not by its lease-bounded retry.
const LONG: Duration = Duration::from_secs(20);
/// The most a woken waiter may take to get the lock (generous: the machine is shared).
const PROMPT: Duration = Duration::from_secs(5);
/// Bounds the whole of any wait, so a broken wake-up fails the test instead of hanging it.
const HANG: Duration = Duration::from_secs(60);

/// A server, two clients on it (a holder's and a waiter's) with `watchdog`, and a lock name.
async fn two_clients(
    test: &str,
    watchdog: Duration,
) -> (common::RedisServer, Client, Client, String) {
    let server = common::RedisServer::start();
    let holder_client = common::client(&server, watchdog).await;
    let waiter_client = common::client(&server, watchdog).await;
    (server, holder_client, waiter_client, common::prefix(test))
}

/// Takes `name` on `client` with a fixed `lease`: when the attempt started, and the guard.
async fn hold_with_lease(client: &Client, name: &str, lease: Duration) -> (Instant, LockGuard) {
    let before = Instant::now();
    let guard = client.lock(name).lock_with_lease(lease).await.unwrap();
    (before, guard)
}

/// Waits until `client` has `waiters` waiters and their channel is subscribed on the server.
async fn until_waiting(server: &common::RedisServer, client: &Client, lock: &Lock, waiters: usize) {
    let channel = common::lock_channel(lock.name());
    let ready = common::eventually(Duration::from_secs(10), || async {
        client.stats().waiters == waiters && common::raw_numsub(server, &channel) >= 1
    })
    .await;
    assert!(ready, "waiters never registered: {:?}", client.stats());
}

/// Spawns a task that takes `lock` with `lock()` and returns when it got it, with its guard.
fn spawn_waiter(lock: Lock) -> tokio::task::JoinHandle<(Instant, LockGuard)> {
    tokio::spawn(async move {
        let guard = tokio::time::timeout(HANG, lock.lock())
            .await
            .expect("the waiter never got the lock")
            .unwrap();
        (Instant::now(), guard)
    })
}

/// Waits until `waiter` is registered on `client` and checks that it stays parked while `lock`
/// is held.
async fn until_parked(
    server: &common::RedisServer,
    client: &Client,
    lock: &Lock,
    waiter: &tokio::task::JoinHandle<(Instant, LockGuard)>,
) {
    until_waiting(server, client, lock, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
}

/// Releases `holder` and checks that `waiter` gets the lock within [`PROMPT`]; returns its guard.
async fn release_wakes(
    holder: LockGuard,
    waiter: tokio::task::JoinHandle<(Instant, LockGuard)>,
) -> LockGuard {
    let released = Instant::now();
    holder.unlock().await.unwrap();
    let (acquired, guard) = waiter.await.unwrap();
    let waited = acquired.saturating_duration_since(released);
    assert!(waited < PROMPT, "woken {waited:?} after the release");
    guard
}

/// Checks that a lock `waited` for once its holder's `lease` ran out, and not much later.
fn assert_waited_for_the_lease(waited: Duration, lease: Duration) {
    assert!(
        waited >= lease - Duration::from_millis(50),
        "got the lock after {waited:?}, before the {lease:?} lease ran out"
    );
    assert!(
        waited < lease + PROMPT,
        "got the lock only after {waited:?}"
    );
}

/// Spawns waiter `id` of a queue: it takes `lock`, reports (id, when, release switch) on
/// `acquired`, and releases the lock when switched.
fn spawn_queued_waiter(
    id: usize,
    lock: Lock,
    acquired: mpsc::UnboundedSender<(usize, Instant, oneshot::Sender<()>)>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let guard = tokio::time::timeout(HANG, lock.lock())
            .await
            .expect("a waiter never got the lock")
            .unwrap();
        let (release_tx, release_rx) = oneshot::channel::<()>();
        acquired.send((id, Instant::now(), release_tx)).unwrap();
        release_rx.await.unwrap();
        guard.unlock().await.unwrap();
    })
}

/// The next queued waiter to get the lock, checked to be served within [`PROMPT`] of `released`
/// and to be the only holder: its id and release switch.
async fn next_served(
    acquired: &mut mpsc::UnboundedReceiver<(usize, Instant, oneshot::Sender<()>)>,
    released: Instant,
    round: usize,
) -> (usize, oneshot::Sender<()>) {
    let (id, at, release) = tokio::time::timeout(HANG, acquired.recv())
        .await
        .expect("no waiter was served")
        .unwrap();
    let waited = at.saturating_duration_since(released);
    assert!(
        waited < PROMPT,
        "round {round}: served {waited:?} after the release"
    );
    // Exactly one holder at a time: nobody else got it meanwhile.
    assert!(acquired.try_recv().is_err(), "two waiters hold the lock");
    (id, release)
}

/// Checks that no waiter and no subscription is left on `client` for `lock`.
async fn assert_no_waiter_left(server: &common::RedisServer, client: &Client, lock: &Lock) {
    let channel = common::lock_channel(lock.name());
    let clean = common::eventually(Duration::from_secs(10), || async {
        let stats = client.stats();
        stats.waiters == 0 && stats.channels == 0 && common::raw_numsub(server, &channel) == 0
    })
    .await;
    assert!(
        clean,
        "left behind: {:?}, {} subscriber(s)",
        client.stats(),
        common::raw_numsub(server, &channel)
    );
}

#[tokio::test]
async fn a_release_wakes_a_waiter_long_before_a_fixed_lease_ends() {
    let (server, client, _name, lock) =
        common::setup_lock("wait-release-fixed", Duration::from_secs(3)).await;
    let holder = lock.lock_with_lease(LONG).await.unwrap();
    assert_eq!(holder.lease(), Some(LONG));
    // A waiter that asks for a fixed lease too.
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = tokio::time::timeout(HANG, lock.lock_with_lease(LONG))
                .await
                .expect("the waiter never got the lock")
                .unwrap();
            (Instant::now(), guard)
        }
    });
    until_parked(&server, &client, &lock, &waiter).await;

    let guard = release_wakes(holder, waiter).await;
    let lease = common::lease_left(lock.remaining_lease().await);
    assert!(lease > LONG / 2, "the waiter's own lease: {lease:?}");
    guard.unlock().await.unwrap();
    assert_no_waiter_left(&server, &client, &lock).await;
}

#[tokio::test]
async fn a_waiter_gets_a_lock_whose_lease_ran_out_without_a_release() {
    let (server, holder_client, waiter_client, name) =
        two_clients("wait-expiry-forget", Duration::from_secs(3)).await;
    let lease = Duration::from_millis(500);

    let (before, holder) = hold_with_lease(&holder_client, &name, lease).await;
    // Never released: only the lease frees the lock, and nothing is published.
    std::mem::forget(holder);

    let lock = waiter_client.lock(name.clone());
    let guard = tokio::time::timeout(HANG, lock.lock())
        .await
        .expect("the waiter never got the expired lock")
        .unwrap();
    let waited = before.elapsed();
    assert_waited_for_the_lease(waited, lease);
    let field = format!("{}:", waiter_client.id());
    let hash = common::raw_hgetall(&server, &name);
    assert_eq!(hash.len(), 1, "one holder: {hash:?}");
    assert!(hash[0].0.starts_with(&field), "{hash:?}");
    guard.unlock().await.unwrap();
    assert_no_waiter_left(&server, &waiter_client, &lock).await;
}

#[tokio::test]
async fn a_waiter_gets_a_lock_whose_holder_shut_down() {
    let (server, holder_client, waiter_client, name) =
        two_clients("wait-expiry-shutdown", Duration::from_secs(3)).await;
    let lease = Duration::from_secs(1);

    let (before, holder) = hold_with_lease(&holder_client, &name, lease).await;
    holder_client.shutdown_keeping_locks().await.unwrap();
    // A closed client cannot release: dropping the guard leaves the lock to its lease.
    drop(holder);

    let lock = waiter_client.lock(name.clone());
    let waiter = spawn_waiter(lock.clone());
    let (acquired, guard) = waiter.await.unwrap();
    let waited = acquired - before;
    assert_waited_for_the_lease(waited, lease);
    assert!(holder_client
        .lock(name.clone())
        .is_locked()
        .await
        .unwrap_err()
        .is_closed());
    guard.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn try_lock_for_gives_up_when_the_wait_runs_out_and_leaves_nothing_behind() {
    let (server, client, _name, lock) =
        common::setup_lock("wait-timeout", Duration::from_secs(3)).await;
    let holder = lock.lock().await.unwrap();

    for lease in [None, Some(Duration::from_secs(5))] {
        let wait = Duration::from_millis(1500);
        let attempt = tokio::spawn({
            let lock = lock.clone();
            async move {
                let started = Instant::now();
                let outcome = lock.try_lock_for(wait, lease).await.unwrap();
                (outcome.is_none(), started.elapsed())
            }
        });
        // While it waits, it is a registered waiter with a subscription.
        until_waiting(&server, &client, &lock, 1).await;
        let (gave_up, waited) = tokio::time::timeout(HANG, attempt).await.unwrap().unwrap();
        assert!(gave_up, "the wait ran out with the lock held");
        assert!(
            waited >= wait - Duration::from_millis(50),
            "gave up after {waited:?}"
        );
        assert!(waited < wait + PROMPT, "gave up only after {waited:?}");
        assert_no_waiter_left(&server, &client, &lock).await;
    }
    // A short wait that runs out while the subscription is still being made.
    let outcome = tokio::spawn({
        let lock = lock.clone();
        async move {
            lock.try_lock_for(Duration::from_millis(1), None)
                .await
                .unwrap()
                .is_none()
        }
    });
    assert!(outcome.await.unwrap());
    assert_no_waiter_left(&server, &client, &lock).await;

    // The holder was not disturbed.
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    holder.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn several_waiters_in_one_process_are_served_one_per_release() {
    const WAITERS: usize = 4;
    let (server, client, _name, lock) = common::setup_lock("wait-queue", LONG).await;
    let holder = lock.lock().await.unwrap();

    let (acquired_tx, mut acquired_rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for id in 0..WAITERS {
        let (lock, acquired_tx) = (lock.clone(), acquired_tx.clone());
        tasks.push(spawn_queued_waiter(id, lock, acquired_tx));
    }
    until_waiting(&server, &client, &lock, WAITERS).await;

    let mut released = Instant::now();
    holder.unlock().await.unwrap();
    let mut served = Vec::new();
    for round in 0..WAITERS {
        let (id, release) = next_served(&mut acquired_rx, released, round).await;
        assert_eq!(client.stats().waiters, WAITERS - round - 1);
        served.push(id);
        released = Instant::now();
        release.send(()).unwrap();
    }
    for task in tasks {
        task.await.unwrap();
    }
    served.sort_unstable();
    assert_eq!(
        served,
        (0..WAITERS).collect::<Vec<_>>(),
        "each waiter served once"
    );
    assert!(!lock.is_locked().await.unwrap());
    assert_no_waiter_left(&server, &client, &lock).await;
}

#[tokio::test]
async fn a_cancelled_wait_leaves_no_waiter_behind_and_later_waiters_still_wake() {
    let (server, client, _name, lock) = common::setup_lock("wait-cancel", LONG).await;
    let holder = lock.lock().await.unwrap();

    // The wait is dropped once it is seen parked, however long that took to happen.
    let (cancel_tx, cancel_rx) = oneshot::channel::<()>();
    let cancelled = tokio::spawn({
        let lock = lock.clone();
        async move {
            tokio::select! {
                outcome = lock.lock() => panic!("the wait ended with the lock held: {outcome:?}"),
                _ = cancel_rx => {}
            }
        }
    });
    until_waiting(&server, &client, &lock, 1).await;
    cancel_tx.send(()).unwrap();
    common::within(HANG, cancelled, "the cancelled wait did not end").await;
    assert_no_waiter_left(&server, &client, &lock).await;
    assert_eq!(
        lock.hold_count().await.unwrap(),
        1,
        "the holder is undisturbed"
    );

    let waiter = spawn_waiter(lock.clone());
    until_waiting(&server, &client, &lock, 1).await;
    let guard = release_wakes(holder, waiter).await;
    guard.unlock().await.unwrap();
    assert_no_waiter_left(&server, &client, &lock).await;
}

#[tokio::test]
async fn a_release_wakes_only_the_waiters_of_its_own_lock() {
    let server = common::RedisServer::start();
    let client = common::client(&server, LONG).await;
    let first = client.lock(common::prefix("wait-own-lock-a"));
    let second = client.lock(common::prefix("wait-own-lock-b"));
    let first_holder = first.lock().await.unwrap();
    let second_holder = second.lock().await.unwrap();
    let first_waiter = spawn_waiter(first.clone());
    let second_waiter = spawn_waiter(second.clone());
    let ready = common::eventually(Duration::from_secs(10), || async {
        let stats = client.stats();
        stats.waiters == 2
            && stats.channels == 2
            && common::raw_numsub(&server, &common::lock_channel(first.name())) == 1
            && common::raw_numsub(&server, &common::lock_channel(second.name())) == 1
    })
    .await;
    assert!(ready, "waiters never registered: {:?}", client.stats());

    let guard = release_wakes(first_holder, first_waiter).await;
    // The other lock is still held: its waiter keeps waiting, subscribed.
    assert!(!second_waiter.is_finished());
    assert_eq!(client.stats().waiters, 1);
    assert_eq!(
        common::raw_numsub(&server, &common::lock_channel(second.name())),
        1
    );
    guard.unlock().await.unwrap();

    let guard = release_wakes(second_holder, second_waiter).await;
    guard.unlock().await.unwrap();
    assert_no_waiter_left(&server, &client, &first).await;
    assert_no_waiter_left(&server, &client, &second).await;
}

/// A newcomer queued behind a waiter of its own client parks without an attempt of its own. When
/// that waiter then takes the lock and lets its lease run out (no release, so no message), the
/// newcomer still gets the lock once the lease has ended, long before the holder wakes up, and
/// long before its client's watchdog timeout (30 s) would end a blind wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_newcomer_gets_a_lock_whose_holder_outlived_its_lease() {
    let (server, client, name) = common::setup("newcomer-lapse", Duration::from_secs(30)).await;
    let lease = Duration::from_millis(200);
    let stall = Duration::from_secs(4);
    let lock = client.lock(&name);
    let first = lock.lock_with_lease(lease).await.unwrap();
    // A waiter that takes the lock when the first lease ends, then stalls past its own lease.
    let stalled_holder = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let guard = lock.lock_with_lease(lease).await.unwrap();
            let acquired = Instant::now();
            tokio::time::sleep(stall).await;
            let woke = Instant::now();
            assert!(guard.unlock().await.unwrap_err().is_lease_lost());
            (acquired, woke)
        })
    };
    until_waiting(&server, &client, &lock, 1).await;
    let newcomer = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let guard = tokio::time::timeout(HANG, lock.lock_with_lease(LONG))
                .await
                .expect("the newcomer never got the lock")
                .unwrap();
            (Instant::now(), guard)
        })
    };
    until_waiting(&server, &client, &lock, 2).await;
    let (served, guard) = newcomer.await.unwrap();
    let (acquired, woke) = stalled_holder.await.unwrap();
    assert!(
        acquired < served,
        "the newcomer went ahead of the waiter it queued behind"
    );
    assert!(
        served < woke,
        "the newcomer got the lock only after the stalled holder woke up: it slept past the lease"
    );
    drop(first);
    guard.unlock().await.unwrap();
}
