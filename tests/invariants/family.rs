//! The invariants every lock type keeps, checked on each of them: `Lock`, `FairLock`,
//! `SpinLock`, `FencedLock` and an `RwLock`'s write and read sides share one core and one API, so
//! each invariant is one function of the [`Family`], and `family_tests!` makes a test of it per
//! type (`<invariant>::lock`, `::fair`, `::spin`, `::fenced`, `::write`, `::read`), so a failure
//! names the type.
//!
//! A read hold is shared: where an invariant needs someone excluded or waiting, that is the
//! hold's *contender* ([`Family::contender`]), a writer for a reader and a handle of the same type
//! otherwise, and crowds of contending tasks mix readers with writers ([`Family::crowd`]).
//!
//! Mutual exclusion across clients, reentrancy per owner, busy and timed-out attempts, fixed and
//! watchdog leases, waiters served by a release, cancellation at random points, force-unlock and
//! shutdown, and the fault suite's faults (a server restart, `DEBUG SLEEP` shorter and longer
//! than the lease, `CLIENT KILL`, `SCRIPT FLUSH`, replies lost in a proxy). Each ends with the
//! family's leak check: nothing left on Redis (lock, replay, claim, queue keys, subscriptions)
//! or in the clients.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::family::{assert_fenced, connect, AnyGuard, AnyLock, Family};
use common::faults::{self, critical_section, shared_section, Overlaps, Register};
use common::proxy::{Mode, Proxy};
use common::{eventually, raw_exists, raw_hexists, raw_pttl, stays, RawSubscriber, RedisServer};
use rand::Rng;
use relock::{Client, Owner, RemainingLease};
use tokio::time::{timeout, Instant};

/// Makes one test per lock type of each invariant `fn <invariant>(family: Family)`: a module
/// named after it with the tests `lock`, `fair`, `spin`, `fenced`, `write` and `read`. An
/// invariant may be followed by `{ <type>: [#[attr]...], ... }` for some of the types, in that
/// order: attributes of those tests (an `#[ignore]` naming a bug of that type).
macro_rules! family_tests {
    ($(
        $invariant:ident $({
            $(lock: [$(#[$lock:meta])*],)?
            $(fair: [$(#[$fair:meta])*],)?
            $(spin: [$(#[$spin:meta])*],)?
            $(fenced: [$(#[$fenced:meta])*],)?
            $(write: [$(#[$write:meta])*],)?
            $(read: [$(#[$read:meta])*],)?
        })?
    ),* $(,)?) => {
        $(
            mod $invariant {
                use super::Family;

                family_tests!(@test $invariant, lock, Lock $($($(#[$lock])*)?)?);
                family_tests!(@test $invariant, fair, Fair $($($(#[$fair])*)?)?);
                family_tests!(@test $invariant, spin, Spin $($($(#[$spin])*)?)?);
                family_tests!(@test $invariant, fenced, Fenced $($($(#[$fenced])*)?)?);
                family_tests!(@test $invariant, write, Write $($($(#[$write])*)?)?);
                family_tests!(@test $invariant, read, Read $($($(#[$read])*)?)?);
            }
        )*
    };
    (@test $invariant:ident, $test:ident, $family:ident $(#[$attr:meta])*) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $(#[$attr])*
        async fn $test() {
            super::$invariant(Family::$family).await;
        }
    };
}

family_tests!(
    mutual_exclusion_across_clients,
    reentrancy_counts_holds_per_owner,
    owned_by_owners_exclude_each_other,
    busy_try_lock_fails_at_once_and_try_lock_for_times_out,
    fixed_lease_expiry_frees_the_lock,
    watchdog_keeps_the_lock_past_its_timeout,
    reentrant_leases_never_cut_each_other,
    waiters_are_served_once_the_holder_releases,
    a_dropped_guard_releases_and_serves_a_waiter,
    cancelled_acquires_leave_nothing_behind,
    force_unlock_frees_the_lock_for_a_waiter,
    shutdown_releases_held_locks_to_a_waiter,
    shutdown_lets_other_clients_waiters_past_its_own,
    shutdown_while_waiting_leaves_no_waiter_behind,
    restart_while_held_and_while_waiting,
    debug_sleep_shorter_than_the_lease_loses_nothing,
    debug_sleep_longer_than_the_lease_loses_the_lock,
    acquire_answered_after_its_lease_keeps_its_lock,
    client_kill_keeps_waiters_waking_and_the_watchdog_renewing,
    script_flush_mid_run_keeps_every_operation_working,
    lost_acquire_reply_never_counts_a_hold_twice,
    lost_release_reply_is_retried_and_counts_once,
);

/// The command timeout of most clients here.
pub(super) const CMD: Duration = Duration::from_secs(2);
/// A lease (and watchdog timeout) far longer than any test: a holder that keeps it is only
/// freed by a release, and a waiter served long before it ends was served by that release.
pub(super) const LONG: Duration = Duration::from_secs(20);
/// How long after a release a waiter may take, beyond a spin lock's pause between polls: a
/// quarter of [`LONG`], far above a message's delivery on a loaded machine and far below the
/// holder's lease.
const SLACK: Duration = Duration::from_secs(5);
/// How long a critical section waits between reading and writing the register.
const THINK: Duration = Duration::from_millis(2);

/// A unique lock name for `test` on `family`.
pub(super) fn lock_name(family: Family, test: &str) -> String {
    common::prefix(&format!("family-{test}-{}", family.name()))
}

/// Spawns a task that takes `lock` with `lock()` (at most 60 s) and returns when it got it, with
/// its guard.
pub(super) fn spawn_waiter(lock: AnyLock) -> tokio::task::JoinHandle<(Instant, AnyGuard)> {
    tokio::spawn(async move {
        let guard = timeout(Duration::from_secs(60), lock.lock())
            .await
            .expect("the waiter never got the lock")
            .expect("the waiter's lock() failed");
        (Instant::now(), guard)
    })
}

/// Checks that `waiter` got its lock within `family.prompt(SLACK)` of `released`; its guard.
pub(super) async fn served_promptly(
    family: Family,
    waiter: tokio::task::JoinHandle<(Instant, AnyGuard)>,
    released: Instant,
    what: &str,
) -> AnyGuard {
    let bound = family.prompt(SLACK);
    let (acquired, guard) = tokio::time::timeout_at(released + bound, waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}: the waiter was not served within {bound:?}"))
        .unwrap();
    let waited = acquired.saturating_duration_since(released);
    assert!(
        waited < bound,
        "{what}: the waiter got the lock {waited:?} after the release (bound {bound:?})"
    );
    guard
}

/// One critical section under a hold of `lock`: it bumps the register, or under a shared hold
/// reads it and finds it unchanged (see [`shared_section`]).
async fn section(lock: &AnyLock, register: &Register, overlaps: &Overlaps, who: &str) {
    if lock.family().shared() {
        shared_section(register, overlaps, who, THINK).await;
    } else {
        critical_section(register, overlaps, who, THINK).await;
    }
}

/// Takes `lock` and runs one critical section `rounds` times, through `lock()` and `unlock()`
/// or, with `scoped`, through `with`.
async fn rounds(
    lock: AnyLock,
    who: String,
    rounds: usize,
    scoped: bool,
    register: Arc<Register>,
    overlaps: Arc<Overlaps>,
) {
    for _ in 0..rounds {
        if scoped {
            lock.with(|_| section(&lock, &register, &overlaps, &who))
                .await
                .unwrap();
        } else {
            let guard = lock.lock().await.unwrap();
            section(&lock, &register, &overlaps, &who).await;
            guard.unlock().await.unwrap();
        }
    }
}

/// Loops lock → critical section → unlock on `lock` until `stop`; how many sections ran.
async fn worker(
    lock: AnyLock,
    who: String,
    register: Arc<Register>,
    overlaps: Arc<Overlaps>,
    stop: Arc<AtomicBool>,
) -> u64 {
    let mut sections = 0;
    while !stop.load(Ordering::Relaxed) {
        let guard = lock.lock().await.unwrap();
        section(&lock, &register, &overlaps, &who).await;
        guard.unlock().await.unwrap();
        sections += 1;
    }
    sections
}

/// Starts `count` workers on lock `name`, alternating between `clients`, a crowd of `family`
/// (see [`Family::crowd`]).
fn start_workers(
    family: Family,
    clients: &[Client],
    name: &str,
    count: usize,
    register: &Arc<Register>,
    overlaps: &Arc<Overlaps>,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<u64>> {
    (0..count)
        .map(|i| {
            tokio::spawn(worker(
                family.crowd(&clients[i % clients.len()], name, i),
                format!("worker-{i}"),
                register.clone(),
                overlaps.clone(),
                stop.clone(),
            ))
        })
        .collect()
}

/// Joins workers, each within `bound`, and sums their sections.
async fn join_workers(workers: Vec<tokio::task::JoinHandle<u64>>, bound: Duration) -> u64 {
    let mut total = 0;
    for worker in workers {
        total += timeout(bound, worker)
            .await
            .expect("a worker hung")
            .expect("a worker failed");
    }
    total
}

/// Waits until `register` went `by` past its value now (at most 10 s).
async fn progress(register: &Register, by: u64) -> bool {
    let before = register.value();
    eventually(Duration::from_secs(10), || async {
        register.value() >= before + by
    })
    .await
}

/// Whether `client` tracks nothing: no hold, renewal, waiter or channel, and has nothing in
/// flight.
fn idle(client: &Client) -> bool {
    let stats = client.stats();
    let counts = (stats.holds, stats.renewing, stats.waiters, stats.channels);
    // In flight: a dropped acquire's script may still run on the server until its check ends.
    counts == (0, 0, 0, 0) && stats.in_flight == 0
}

/// The channels of lock `name` with subscribers (a fair waiter's own included).
fn subscribed(family: Family, server: &RedisServer, name: &str) -> Vec<String> {
    common::family::raw_channels(server, &format!("{}*", family.channel(name)))
}

/// Whether nothing of a waiter is left on Redis for lock `name`: no subscription on its
/// channels, no claim on its next turn and, for a fair lock, no queue, no deadlines and no liveness record.
fn no_waiter_on_redis(family: Family, server: &RedisServer, name: &str) -> bool {
    subscribed(family, server, name).is_empty()
        && !raw_exists(server, &common::claim_key(name))
        && (family != Family::Fair
            || (!raw_exists(server, &common::fair_queue_key(name))
                && !raw_exists(server, &common::fair_timeout_key(name))
                && !raw_exists(server, &common::fair_alive_key(name))))
}

/// The claim on lock `name`'s next turn (`<priority>:<field>`), if there is one.
fn claimant(server: &RedisServer, name: &str) -> Option<String> {
    match common::resp(&server.cmd(&["GET", &common::claim_key(name)])) {
        common::Resp::Bulk(claim) => claim,
        other => panic!("unexpected GET reply {other:?}"),
    }
}

// ---- Mutual exclusion ----

/// Six tasks on two clients each run five critical sections under the lock (a third through
/// `with`): the register counts every one, and no two overlap. For readers, a crowd of readers
/// and writers: no section overlaps a writer's, and the register counts the writers'.
async fn mutual_exclusion_across_clients(family: Family) {
    const TASKS: usize = 6;
    const ROUNDS: usize = 5;
    let server = RedisServer::start();
    let clients = [
        connect(&server.url(), LONG, CMD).await,
        connect(&server.url(), LONG, CMD).await,
    ];
    let name = lock_name(family, "mutex");
    let register = Arc::new(Register::default());
    let overlaps = Arc::new(Overlaps::default());

    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            tokio::spawn(rounds(
                family.crowd(&clients[i % 2], &name, i),
                format!("task-{i}"),
                ROUNDS,
                i % 3 == 0,
                register.clone(),
                overlaps.clone(),
            ))
        })
        .collect();
    for task in tasks {
        common::within(Duration::from_secs(60), task, "the tasks finish").await;
    }
    register.assert_exact(overlaps.exclusive() as u64);
    assert_eq!(overlaps.len(), TASKS * ROUNDS);
    overlaps.assert_none();
    family
        .assert_no_leaks(&server, &[&clients[0], &clients[1]], &[&name])
        .await;
}

// ---- Reentrancy ----

/// One task locks twice: two holds in one field, counted by the lock and the guard, on the way up
/// and down. Another owner (in another client; a writer, for a reader) is refused and waits (a
/// waiter of its own client, not of the holder's) until the last of them is released, and only
/// then gets the lock.
async fn reentrancy_counts_holds_per_owner(family: Family) {
    let server = Arc::new(RedisServer::start());
    let client = connect(&server.url(), LONG, CMD).await;
    let other = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "reenter");

    let lock = family.lock(&client, &name);
    let other_lock = family.contender(&other, &name);
    let task = tokio::spawn({
        let (server, client, other, name) =
            (server.clone(), client.clone(), other.clone(), name.clone());
        async move {
            let owner_field = family.field(&client, &Owner::current());
            assert_eq!(lock.hold_count().await.unwrap(), 0);
            assert_eq!(family.holds(&server, &name, &owner_field), 0);
            let outer = lock.lock().await.unwrap();
            let outer_token = outer.token();
            assert_eq!(lock.hold_count().await.unwrap(), 1);
            assert_eq!(outer.hold_count().await.unwrap(), 1);
            assert_eq!(family.holds(&server, &name, &owner_field), 1);
            let inner = timeout(Duration::from_secs(5), lock.lock())
                .await
                .expect("a re-entry must not wait")
                .unwrap();
            assert_eq!(lock.hold_count().await.unwrap(), 2);
            assert_eq!(inner.hold_count().await.unwrap(), 2);
            assert!(lock.is_held_by_current_owner().await.unwrap());
            assert_eq!(
                family.holders(&server, &name),
                vec![(owner_field.clone(), "2".to_owned())],
                "a re-entry counts in the owner's field"
            );
            assert_eq!(family.holds(&server, &name, &owner_field), 2);

            // Another owner is refused, and waits.
            assert!(other_lock.try_lock().await.unwrap().is_none());
            assert_eq!(other_lock.hold_count().await.unwrap(), 0);
            assert!(!other_lock.is_held_by_current_owner().await.unwrap());
            let watch = family.watch_waiters(&server);
            let waiter = spawn_waiter(other_lock.clone());
            assert!(
                watch
                    .until_waiting(&server, &name, &[(&other, 1), (&client, 0)])
                    .await,
                "the other owner never waited (on its own client): {:?}, {:?}",
                other.stats(),
                client.stats()
            );

            // With another owner waiting, the owner still re-enters at once, also by try_lock.
            let third = timeout(Duration::from_secs(5), lock.lock())
                .await
                .expect("a re-entry waited behind another owner's waiter")
                .unwrap();
            let fourth = common::taken(
                lock.try_lock().await,
                "a try_lock re-entry was refused while another owner waits",
            );
            assert_eq!(family.holds(&server, &name, &owner_field), 4);
            fourth.unlock().await.unwrap();
            third.unlock().await.unwrap();
            assert!(!waiter.is_finished(), "the other owner got a held lock");

            inner.unlock().await.unwrap();
            assert_eq!(lock.hold_count().await.unwrap(), 1);
            assert!(lock.is_locked().await.unwrap());
            assert_eq!(family.holds(&server, &name, &owner_field), 1);
            assert!(
                raw_pttl(&server, &name) > 0,
                "the partial release left no TTL"
            );
            assert!(other_lock.try_lock().await.unwrap().is_none());
            assert!(!waiter.is_finished(), "the other owner got a held lock");

            let released = Instant::now();
            outer.unlock().await.unwrap();
            assert_eq!(lock.hold_count().await.unwrap(), 0);
            let taken = served_promptly(family, waiter, released, "after the last release").await;
            assert_eq!(
                family.holders(&server, &name),
                vec![(family.rival().field_of(&other, &taken), "1".to_owned())]
            );
            assert_fenced(outer_token, taken.token());
            assert!(!lock.is_held_by_current_owner().await.unwrap());
            taken.unlock().await.unwrap();
        }
    });
    common::within(Duration::from_secs(60), task, "the test task hung").await;
    assert!(!raw_exists(&server, &name));
    family
        .assert_no_leaks(&server, &[&client, &other], &[&name])
        .await;
}

/// Two explicit owners on one client and one task exclude each other; an owner's hold is
/// re-entered from another task that acts for it. A third owner of the first one's type is
/// refused too, but for readers: two reader owners hold the lock at once, while a writer owner
/// is refused and waits until both have left.
async fn owned_by_owners_exclude_each_other(family: Family) {
    let server = RedisServer::start();
    let client = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "owners");
    let (one, two, three) = (Owner::new(), Owner::new(), Owner::new());
    let first = family.lock(&client, &name).owned_by(one.clone());
    let second = family.contender(&client, &name).owned_by(two.clone());
    let third = family.lock(&client, &name).owned_by(three.clone());

    let held = first.lock().await.unwrap();
    assert_eq!(held.owner().id(), one.id());
    let sharer = third.try_lock().await.unwrap();
    assert_eq!(
        sharer.is_some(),
        family.shared(),
        "a third owner's try_lock got {sharer:?}"
    );
    assert!(second.try_lock().await.unwrap().is_none());
    assert!(second
        .try_lock_for(Duration::from_millis(100), None)
        .await
        .unwrap()
        .is_none());
    assert_eq!(second.hold_count().await.unwrap(), 0);
    assert_eq!(first.hold_count().await.unwrap(), 1);
    assert_eq!(
        third.hold_count().await.unwrap(),
        u64::from(family.shared())
    );

    // Another task acting for the first owner re-enters its hold.
    let again = tokio::spawn({
        let first = first.clone();
        async move { first.try_lock().await }
    })
    .await
    .unwrap()
    .unwrap()
    .expect("the owner's hold is re-entered from another task");
    let mut holders = vec![(family.field(&client, &one), "2".to_owned())];
    if sharer.is_some() {
        holders.push((family.field(&client, &three), "1".to_owned()));
        holders.sort();
    }
    assert_eq!(family.holders(&server, &name), holders);

    // The second owner waits until the lock's last release: the first owner's, or that of the
    // reader sharing the lock with it.
    let watch = family.watch_waiters(&server);
    let waiter = spawn_waiter(second.clone());
    assert!(watch.until_waiting(&server, &name, &[(&client, 1)]).await);
    again.unlock().await.unwrap();
    assert!(!waiter.is_finished(), "the second owner got a held lock");
    let last = match sharer {
        Some(sharer) => {
            held.unlock().await.unwrap();
            assert_eq!(
                family.holders(&server, &name),
                vec![(family.field(&client, &three), "1".to_owned())]
            );
            assert!(!waiter.is_finished(), "a writer got a lock a reader holds");
            sharer
        }
        None => held,
    };
    // A watchdog hold far from its end: the release, not the lease, serves the waiter.
    let left = common::lease_left(first.remaining_lease().await);
    assert!(left > LONG / 2, "the holder's lease is long: {left:?}");
    let released = Instant::now();
    last.unlock().await.unwrap();
    let taken = served_promptly(family, waiter, released, "the second owner").await;
    assert_eq!(taken.owner().id(), two.id());
    assert_eq!(
        family.holders(&server, &name),
        vec![(family.rival().field(&client, &two), "1".to_owned())]
    );
    assert!(first.try_lock().await.unwrap().is_none());
    assert!(third.try_lock().await.unwrap().is_none());
    taken.unlock().await.unwrap();
    family.assert_no_leaks(&server, &[&client], &[&name]).await;
}

// ---- Busy and timed-out attempts ----

/// A `try_lock` of a held lock (by a contender) is one attempt: `None` within a command timeout.
/// A `try_lock_for` waits its whole wait, not much more, and leaves no waiter behind (nor a
/// writer's claim on a read lock's next turn).
async fn busy_try_lock_fails_at_once_and_try_lock_for_times_out(family: Family) {
    let server = RedisServer::start();
    let holder = connect(&server.url(), LONG, CMD).await;
    let client = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "try");
    let lock = family.contender(&client, &name);

    let held = family.lock(&holder, &name).lock().await.unwrap();
    // A round trip of this client, measured here: the floor of any attempt. (A write lock is
    // not locked while only readers hold it: ask the holder's side.)
    let started = Instant::now();
    assert!(family.lock(&client, &name).is_locked().await.unwrap());
    let round_trip = started.elapsed();

    let started = Instant::now();
    assert!(lock.try_lock().await.unwrap().is_none());
    let took = started.elapsed();
    assert!(
        took < CMD + round_trip * 10,
        "try_lock of a held lock took {took:?} (a round trip: {round_trip:?})"
    );

    let wait = Duration::from_millis(300);
    for lease in [None, Some(Duration::from_secs(1))] {
        let started = Instant::now();
        let outcome = lock.try_lock_for(wait, lease).await.unwrap();
        let took = started.elapsed();
        assert!(outcome.is_none(), "try_lock_for got a held lock");
        assert!(
            took + Duration::from_millis(5) >= wait,
            "try_lock_for({wait:?}, {lease:?}) gave up after {took:?}"
        );
        assert!(
            took < wait + CMD + round_trip * 10,
            "try_lock_for({wait:?}, {lease:?}) returned after {took:?}"
        );
    }
    // The timed-out waits left nothing: no waiter, no subscription, no place in a queue.
    assert!(
        eventually(Duration::from_secs(10), || async {
            idle(&client) && no_waiter_on_redis(family, &server, &name)
        })
        .await,
        "the timed-out waits left {:?}",
        client.stats()
    );
    assert_eq!(
        family.holders(&server, &name),
        vec![(family.field_of(&holder, &held), "1".to_owned())]
    );

    held.unlock().await.unwrap();
    let taken = lock.try_lock().await.unwrap().expect("a free lock");
    taken.unlock().await.unwrap();
    family
        .assert_no_leaks(&server, &[&holder, &client], &[&name])
        .await;
}

// ---- Leases ----

/// A fixed lease that nobody releases ends: another owner (a contender) gets the lock, not
/// before the lease ended, and the old guard's unlock reports the loss and spares the new holder.
async fn fixed_lease_expiry_frees_the_lock(family: Family) {
    let server = RedisServer::start();
    let holder = connect(&server.url(), LONG, CMD).await;
    let other = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "lease");
    let lease = Duration::from_millis(500);

    let held = family
        .lock(&holder, &name)
        .lock_with_lease(lease)
        .await
        .unwrap();
    assert_eq!(held.lease(), Some(lease));
    let read_at = Instant::now();
    let pttl = raw_pttl(&server, &name);
    assert!(
        pttl > 0 && pttl <= lease.as_millis() as i64,
        "PTTL {pttl} of a {lease:?} lease"
    );
    let lease_end = read_at + Duration::from_millis(pttl as u64);

    let taken = family
        .contender(&other, &name)
        .try_lock_for(Duration::from_secs(10), None)
        .await
        .unwrap()
        .expect("the lease ends");
    let taken_at = Instant::now();
    assert!(
        taken_at + Duration::from_millis(1) >= lease_end,
        "taken {:?} before the lease ended",
        lease_end - taken_at
    );
    assert_eq!(
        family.holders(&server, &name),
        vec![(family.rival().field_of(&other, &taken), "1".to_owned())]
    );
    assert_fenced(held.token(), taken.token());
    assert!(held.is_lost(), "the guard of an ended lease is not lost");
    let err = held.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "unlock of an ended lease: {err:?}");
    assert_eq!(taken.hold_count().await.unwrap(), 1, "the new hold was hit");
    taken.unlock().await.unwrap();
    family
        .assert_no_leaks(&server, &[&holder, &other], &[&name])
        .await;
}

/// A lock taken without a lease outlives its watchdog timeout twice over while its guard
/// lives: renewed (a reader's own timeout key too), with a TTL, never lost, never free for a
/// contender; once released, free for one.
async fn watchdog_keeps_the_lock_past_its_timeout(family: Family) {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(900);
    let holder = connect(&server.url(), watchdog, CMD).await;
    let other = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "watchdog");
    let lock = family.lock(&holder, &name);

    let contender = family.contender(&other, &name);
    let held = lock.lock().await.unwrap();
    let taken_at = Instant::now();
    assert_eq!(held.lease(), None);
    assert_eq!(holder.stats().renewing, 1, "a watchdog hold is renewed");
    let holder_field = family.field_of(&holder, &held);
    let mut checks = 0;
    while taken_at.elapsed() < watchdog * 2 {
        assert!(!held.is_lost(), "lost {:?} after", taken_at.elapsed());
        assert_eq!(
            family.holds(&server, &name, &holder_field),
            1,
            "the lock lapsed"
        );
        let pttl = raw_pttl(&server, &name);
        assert!(pttl > 0, "PTTL {pttl} after {:?}", taken_at.elapsed());
        assert!(
            contender.try_lock().await.unwrap().is_none(),
            "a contender took a held lock after {:?}",
            taken_at.elapsed()
        );
        checks += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(checks >= 10, "only {checks} checks ran");
    match lock.remaining_lease().await.unwrap() {
        RemainingLease::Expires(left) => assert!(left <= watchdog, "{left:?} left"),
        other => panic!("a renewed lock has {other:?}"),
    }
    held.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(
        lock.remaining_lease().await.unwrap(),
        RemainingLease::Unlocked
    );
    common::taken(
        contender.try_lock().await,
        "a released lock is free for another client",
    )
    .unlock()
    .await
    .unwrap();
    family
        .assert_no_leaks(&server, &[&holder, &other], &[&name])
        .await;
}

/// Each hold of an owner keeps its own lease: a re-entry with a shorter lease never shortens
/// the lock's TTL (nor is it lost while the owner's field lives), and a partial release leaves
/// the TTL the remaining holds need (the watchdog's, or what is left of a fixed lease, and no
/// more: the lock frees itself at the fixed hold's deadline, before a watchdog lease's end).
async fn reentrant_leases_never_cut_each_other(family: Family) {
    let server = RedisServer::start();
    let watchdog = Duration::from_secs(3);
    let client = connect(&server.url(), watchdog, CMD).await;
    let rival = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "leases");
    let fixed_first = format!("{name}:fixed-first");
    let lock = family.lock(&client, &name);

    // A watchdog hold, then a short fixed re-entry.
    let outer = lock.lock().await.unwrap();
    let short = Duration::from_millis(300);
    let taken = Instant::now();
    let inner = lock.lock_with_lease(short).await.unwrap();
    let pttl = raw_pttl(&server, &name);
    assert!(
        pttl > short.as_millis() as i64,
        "the re-entry cut the watchdog hold's TTL to {pttl} ms"
    );
    tokio::time::sleep_until(taken + short + Duration::from_millis(100)).await;
    assert!(
        family
            .contender(&rival, &name)
            .try_lock()
            .await
            .unwrap()
            .is_none(),
        "another client took the lock while the watchdog hold lived"
    );
    assert!(
        !outer.is_lost(),
        "the watchdog hold believes it lost the lock"
    );
    assert!(
        !inner.is_lost(),
        "the owner still holds the lock under its field"
    );
    inner.unlock().await.unwrap();
    let pttl = raw_pttl(&server, &name);
    assert!(
        pttl > (watchdog / 2).as_millis() as i64,
        "the partial release left {pttl} ms for a watchdog hold"
    );
    outer.unlock().await.unwrap();
    assert!(!raw_exists(&server, &name));

    // A fixed hold, then a watchdog re-entry that goes first: what is left is the fixed one's.
    let lock = family.lock(&client, &fixed_first);
    let lease = Duration::from_secs(1);
    let taken = Instant::now();
    let fixed = lock.lock_with_lease(lease).await.unwrap();
    let renewed = lock.lock().await.unwrap();
    let pttl = raw_pttl(&server, &fixed_first);
    assert!(
        pttl > lease.as_millis() as i64,
        "the watchdog re-entry got only {pttl} ms"
    );
    renewed.unlock().await.unwrap();
    let pttl = raw_pttl(&server, &fixed_first);
    assert!(
        (1..=lease.as_millis() as i64).contains(&pttl),
        "the partial release left {pttl} ms for a hold with at most {lease:?} left"
    );
    let took = family
        .contender(&rival, &fixed_first)
        .try_lock_for(LONG, None)
        .await
        .unwrap()
        .expect("the lock outlived its only remaining hold");
    assert!(
        taken.elapsed() < watchdog,
        "the lock lasted {:?}: not freed at the {lease:?} hold's deadline",
        taken.elapsed()
    );
    assert_fenced(fixed.token(), took.token());
    assert!(fixed.is_lost());
    assert!(fixed.unlock().await.unwrap_err().is_lease_lost());
    took.unlock().await.unwrap();
    family
        .assert_no_leaks(&server, &[&client, &rival], &[&name, &fixed_first])
        .await;
}

// ---- Waiting ----

/// Waiters in two clients (contenders) wait for a lock held with a long fixed lease; each
/// release serves exactly one of them, promptly: by its message (every type but Spin) or the
/// next poll (Spin, which subscribes to nothing and publishes nothing).
async fn waiters_are_served_once_the_holder_releases(family: Family) {
    let server = RedisServer::start();
    let holder = connect(&server.url(), LONG, CMD).await;
    let waiting = [
        connect(&server.url(), LONG, CMD).await,
        connect(&server.url(), LONG, CMD).await,
    ];
    let name = lock_name(family, "served");
    let channel = family.channel(&name);

    let held = family
        .lock(&holder, &name)
        .lock_with_lease(LONG)
        .await
        .unwrap();
    let watch = family.watch_waiters(&server);
    let (tx, mut served) = tokio::sync::mpsc::unbounded_channel();
    let waiters: Vec<_> = waiting
        .iter()
        .map(|client| {
            let (lock, tx) = (family.contender(client, &name), tx.clone());
            tokio::spawn(async move {
                let guard = timeout(Duration::from_secs(60), lock.lock())
                    .await
                    .expect("a waiter hung")
                    .unwrap();
                let (release, released) = tokio::sync::oneshot::channel::<()>();
                tx.send((Instant::now(), release)).unwrap();
                released.await.unwrap();
                guard.unlock().await.unwrap();
            })
        })
        .collect();
    assert!(
        watch
            .until_waiting(&server, &name, &[(&waiting[0], 1), (&waiting[1], 1)])
            .await,
        "the waiters never waited"
    );
    let mut quiet = None;
    if !family.subscribes() {
        let subscribed = subscribed(family, &server, &name);
        assert!(
            subscribed.is_empty(),
            "a spin waiter subscribed: {subscribed:?}"
        );
        quiet = Some(RawSubscriber::subscribe(&server, &[&channel]).await);
    }
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "a waiter got a held lock"
    );

    let mut released = Instant::now();
    held.unlock().await.unwrap();
    for round in 0..2 {
        let (at, release) = timeout(Duration::from_secs(60), served.recv())
            .await
            .expect("no waiter was served")
            .unwrap();
        let waited = at.saturating_duration_since(released);
        let bound = family.prompt(SLACK);
        assert!(
            waited < bound,
            "round {round}: served {waited:?} after the release (bound {bound:?})"
        );
        assert!(served.try_recv().is_err(), "two waiters hold the lock");
        assert_eq!(family.holders(&server, &name).len(), 1, "one holder");
        // The served waiter's release serves the next one.
        released = Instant::now();
        release.send(()).unwrap();
    }
    for waiter in waiters {
        common::within(
            Duration::from_secs(60),
            waiter,
            "a served waiter did not release",
        )
        .await;
    }
    if let Some(mut sub) = quiet {
        sub.assert_quiet(&server, &channel).await;
    }
    family
        .assert_no_leaks(&server, &[&holder, &waiting[0], &waiting[1]], &[&name])
        .await;
}

/// A guard dropped without `unlock()` releases its hold in the background: the owner's hold
/// count goes back to zero and a waiter in another client (a contender) is served promptly.
async fn a_dropped_guard_releases_and_serves_a_waiter(family: Family) {
    let server = RedisServer::start();
    let holder = connect(&server.url(), LONG, CMD).await;
    let waiting = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "dropped");
    let lock = family.lock(&holder, &name);

    let outer = lock.lock_with_lease(LONG).await.unwrap();
    let inner = lock.lock_with_lease(LONG).await.unwrap();
    let watch = family.watch_waiters(&server);
    let waiter = spawn_waiter(family.contender(&waiting, &name));
    assert!(watch.until_waiting(&server, &name, &[(&waiting, 1)]).await);
    let holder_field = family.field_of(&holder, &outer);

    drop(inner);
    assert!(
        eventually(Duration::from_secs(5), || async {
            family.holds(&server, &name, &holder_field) == 1
        })
        .await,
        "the dropped guard did not release its hold: {:?}",
        family.holders(&server, &name)
    );
    assert!(!waiter.is_finished(), "a waiter got a lock still held");
    let released = Instant::now();
    drop(outer);
    let taken = served_promptly(family, waiter, released, "after the drop").await;
    assert_eq!(
        family.holders(&server, &name),
        vec![(family.rival().field_of(&waiting, &taken), "1".to_owned())]
    );
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    taken.unlock().await.unwrap();
    family
        .assert_no_leaks(&server, &[&holder, &waiting], &[&name])
        .await;
}

// ---- Cancellation ----

/// Starts `count` acquires of `lock` in their own tasks (half `lock()`, half `try_lock_for`),
/// each dropped after a random 0–50 ms; one that wins in time releases at once. Returns
/// (acquired, cancelled).
async fn cancelled_acquires(lock: &AnyLock, count: usize) -> (usize, usize) {
    let plans: Vec<(bool, Duration)> = {
        let mut rng = rand::thread_rng();
        (0..count)
            .map(|_| {
                (
                    rng.gen_bool(0.5),
                    Duration::from_millis(rng.gen_range(0..=50)),
                )
            })
            .collect()
    };
    let tasks: Vec<_> = plans
        .into_iter()
        .map(|(plain, after)| {
            let lock = lock.clone();
            tokio::spawn(async move {
                let attempt = async {
                    if plain {
                        lock.lock().await.map(Some)
                    } else {
                        lock.try_lock_for(Duration::from_secs(30), None).await
                    }
                };
                match timeout(after, attempt).await {
                    Ok(Ok(Some(guard))) => {
                        guard.unlock().await.unwrap();
                        (1, 0)
                    }
                    Ok(Ok(None)) => panic!("a 30 s wait gave up within 50 ms"),
                    Ok(Err(e)) => panic!("acquire failed: {e}"),
                    Err(_) => (0, 1),
                }
            })
        })
        .collect();
    let mut totals = (0, 0);
    for task in tasks {
        let (a, c) = task.await.unwrap();
        totals.0 += a;
        totals.1 += c;
    }
    totals
}

/// Acquires (of contenders) dropped at random points, first while the lock is held throughout,
/// then racing the holder's release: none takes a held lock, and afterwards nothing is left: no
/// hold, no waiter, no subscription, no claim, no place in a fair queue (left in the
/// background, so eventually), and nothing comes back for a while after.
async fn cancelled_acquires_leave_nothing_behind(family: Family) {
    const DROPS: usize = 30;
    let server = RedisServer::start();
    let holder = connect(&server.url(), LONG, CMD).await;
    let canceller = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "cancel");
    let lock = family.contender(&canceller, &name);
    let clean = || async { idle(&canceller) && no_waiter_on_redis(family, &server, &name) };

    // 1. Held throughout: every acquire is dropped while waiting or mid-attempt.
    let guard = family.lock(&holder, &name).lock().await.unwrap();
    let only_holder = vec![(family.field_of(&holder, &guard), "1".to_owned())];
    let (acquired, cancelled) = cancelled_acquires(&lock, DROPS).await;
    assert_eq!((acquired, cancelled), (0, DROPS), "took a held lock");
    assert!(
        eventually(Duration::from_secs(10), clean).await,
        "left behind: {:?}, channels {:?}, claim {}, queue {:?}",
        canceller.stats(),
        subscribed(family, &server, &name),
        raw_exists(&server, &common::claim_key(&name)),
        common::raw_lrange(&server, &common::fair_queue_key(&name))
    );
    assert!(
        stays(Duration::from_millis(300), || async {
            clean().await && family.holders(&server, &name) == only_holder
        })
        .await,
        "only the holder's field remains, and nothing comes back: {:?}, lock {:?}",
        canceller.stats(),
        family.holders(&server, &name)
    );

    // 2. Racing the holder's release: some are dropped mid-acquire, some win.
    let mut guard = Some(guard);
    let mut won = 0;
    for round in 0..3 {
        let guard = match guard.take() {
            Some(guard) => guard,
            None => timeout(Duration::from_secs(10), family.lock(&holder, &name).lock())
                .await
                .expect("the holder gets the lock back")
                .unwrap(),
        };
        let release_after = Duration::from_millis(rand::thread_rng().gen_range(0..=30));
        let release = tokio::spawn(async move {
            tokio::time::sleep(release_after).await;
            guard.unlock().await.unwrap();
        });
        let (acquired, cancelled) = cancelled_acquires(&lock, DROPS).await;
        release.await.unwrap();
        assert_eq!(acquired + cancelled, DROPS);
        won += acquired;
        assert!(
            eventually(Duration::from_secs(10), || async {
                clean().await && !raw_exists(&server, &name)
            })
            .await,
            "round {round} left behind: {:?}, lock {:?}, channels {:?}, claim {}, queue {:?}",
            canceller.stats(),
            common::raw_hgetall(&server, &name),
            subscribed(family, &server, &name),
            raw_exists(&server, &common::claim_key(&name)),
            common::raw_lrange(&server, &common::fair_queue_key(&name))
        );
        assert!(
            stays(Duration::from_millis(300), || async {
                clean().await && !raw_exists(&server, &name)
            })
            .await,
            "round {round}: a hold came back: {:?}, lock {:?}",
            canceller.stats(),
            common::raw_hgetall(&server, &name)
        );
    }
    println!("{}: {won} acquires won their race", family.name());

    // A fresh client takes the lock at once.
    let fresh = connect(&server.url(), LONG, CMD).await;
    family
        .contender(&fresh, &name)
        .try_lock()
        .await
        .unwrap()
        .expect("nothing holds the lock")
        .unlock()
        .await
        .unwrap();
    family
        .assert_no_leaks(&server, &[&holder, &canceller, &fresh], &[&name])
        .await;
}

// ---- Force-unlock and shutdown ----

/// `force_unlock` deletes a held lock and a waiter (a contender) gets it promptly; the old
/// holder's unlock fails and leaves the new hold alone.
async fn force_unlock_frees_the_lock_for_a_waiter(family: Family) {
    let server = RedisServer::start();
    let holder = connect(&server.url(), LONG, CMD).await;
    let waiting = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "force");
    let holder_lock = family.lock(&holder, &name);

    let held = holder_lock.lock().await.unwrap();
    let watch = family.watch_waiters(&server);
    let waiter = spawn_waiter(family.contender(&waiting, &name));
    assert!(watch.until_waiting(&server, &name, &[(&waiting, 1)]).await);
    assert!(!waiter.is_finished());

    let forced = Instant::now();
    assert!(
        holder_lock.force_unlock().await.unwrap(),
        "there was a lock"
    );
    let taken = served_promptly(family, waiter, forced, "after force_unlock").await;
    assert_eq!(
        family.holders(&server, &name),
        vec![(family.rival().field_of(&waiting, &taken), "1".to_owned())]
    );
    assert_fenced(held.token(), taken.token());
    let err = held.unlock().await.unwrap_err();
    assert!(err.is_not_held() || err.is_lease_lost(), "{err:?}");
    assert_eq!(taken.hold_count().await.unwrap(), 1, "the new hold was hit");
    taken.unlock().await.unwrap();
    assert!(
        !holder_lock.force_unlock().await.unwrap(),
        "nothing to delete"
    );
    family
        .assert_no_leaks(&server, &[&holder, &waiting], &[&name])
        .await;
}

/// `Client::shutdown` releases every lock the client holds, whatever the hold count, and a
/// waiter in another client (a contender) gets it promptly; the guards report the loss.
async fn shutdown_releases_held_locks_to_a_waiter(family: Family) {
    let server = RedisServer::start();
    let holder = connect(&server.url(), LONG, CMD).await;
    let waiting = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "shutdown");
    let fixed = format!("{name}:fixed");
    let lock = family.lock(&holder, &name);

    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    let other = family
        .lock(&holder, &fixed)
        .lock_with_lease(LONG)
        .await
        .unwrap();
    let watch = family.watch_waiters(&server);
    let waiter = spawn_waiter(family.contender(&waiting, &name));
    assert!(watch.until_waiting(&server, &name, &[(&waiting, 1)]).await);

    let shut = Instant::now();
    holder.shutdown().await.unwrap();
    assert!(!raw_exists(&server, &fixed), "shutdown left a lock held");
    let taken = served_promptly(family, waiter, shut, "after the holder's shutdown").await;
    assert_eq!(
        family.holders(&server, &name),
        vec![(family.rival().field_of(&waiting, &taken), "1".to_owned())]
    );
    for guard in [outer, inner, other] {
        assert!(guard.is_lost(), "a guard of a closed client is not lost");
        let err = guard.unlock().await.unwrap_err();
        assert!(err.is_closed(), "{err:?}");
    }
    assert!(lock.is_locked().await.unwrap_err().is_closed());
    taken.unlock().await.unwrap();
    family
        .assert_no_leaks(&server, &[&holder, &waiting], &[&name, &fixed])
        .await;
}

/// A client that holds a lock and also has a waiter of its own queued for it shuts down: its
/// waiter fails, and a waiter of another client that came after it gets the lock promptly: the
/// closed client's waiter neither takes the lock nor keeps its turn (its place in a fair queue,
/// or a writer's claim on a read lock's next turn). The waiters are contenders. The fair waiter
/// timeout is long here, so a place in a fair queue that lapsed instead of being left would show.
async fn shutdown_lets_other_clients_waiters_past_its_own(family: Family) {
    let server = RedisServer::start();
    let holder = connect(&server.url(), LONG, CMD).await;
    let waiting = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "shutdown-queued");
    let lock = family.lock(&holder, &name);

    let held = lock.lock().await.unwrap();
    let watch = family.watch_waiters(&server);
    let own = tokio::spawn({
        let lock = family.contender(&holder, &name);
        async move { timeout(Duration::from_secs(60), lock.lock()).await }
    });
    assert!(
        watch.until_waiting(&server, &name, &[(&holder, 1)]).await,
        "the holder's own waiter never waited"
    );
    let watch = family.watch_waiters(&server);
    let waiter = spawn_waiter(family.contender(&waiting, &name));
    assert!(
        watch
            .until_waiting(&server, &name, &[(&holder, 1), (&waiting, 1)])
            .await,
        "the other client's waiter never waited"
    );
    if family == Family::Fair {
        let queue = common::raw_lrange(&server, &common::fair_queue_key(&name));
        assert_eq!(queue.len(), 2, "{queue:?}");
        assert!(queue[0].starts_with(holder.id()), "{queue:?}");
    }

    let shut = Instant::now();
    holder.shutdown().await.unwrap();
    let outcome = own.await.unwrap().expect("the closed client's waiter hung");
    let err = outcome.expect_err("a waiter of a closed client took the lock");
    assert!(err.is_closed(), "{err:?}");
    let taken = served_promptly(family, waiter, shut, "after the holder's shutdown").await;
    assert_eq!(
        family.holders(&server, &name),
        vec![(family.rival().field_of(&waiting, &taken), "1".to_owned())]
    );
    assert!(held.unlock().await.unwrap_err().is_closed());
    taken.unlock().await.unwrap();
    // What the closed client still tracks locally is shutdown_while_waiting's concern.
    let stats = holder.stats();
    assert_eq!((stats.holds, stats.waiters), (0, 0), "{stats:?}");
    family.assert_no_leaks(&server, &[&waiting], &[&name]).await;
}

/// A client shuts down while one of its tasks waits for a lock another client holds, with a
/// waiter of a third client behind it (both contenders): its waiter fails at once, the client
/// tracks nothing any more, nothing of its waiter stays on Redis, and the holder's release
/// serves the third client's waiter promptly. The fair waiter timeout is long, so a place in a
/// fair queue that lapsed instead of being left would show; so is the holder's lease, so would a
/// claim of the closed client's on the lock's next turn.
async fn shutdown_while_waiting_leaves_no_waiter_behind(family: Family) {
    let server = RedisServer::start();
    let holder = connect(&server.url(), LONG, CMD).await;
    let closing = connect(&server.url(), LONG, CMD).await;
    let waiting = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "shutdown-waiting");

    let held = family.lock(&holder, &name).lock().await.unwrap();
    let watch = family.watch_waiters(&server);
    let gone = tokio::spawn({
        let lock = family.contender(&closing, &name);
        async move { timeout(Duration::from_secs(60), lock.lock()).await }
    });
    assert!(
        watch.until_waiting(&server, &name, &[(&closing, 1)]).await,
        "the closing client's waiter never waited"
    );
    let watch = family.watch_waiters(&server);
    let waiter = spawn_waiter(family.contender(&waiting, &name));
    assert!(
        watch
            .until_waiting(&server, &name, &[(&closing, 1), (&waiting, 1)])
            .await,
        "the other client's waiter never waited"
    );

    closing.shutdown().await.unwrap();
    let err = common::within(SLACK, gone, "the closed client's waiter went on waiting")
        .await
        .expect("the closed client's waiter hung")
        .expect_err("a waiter of a closed client took the lock");
    assert!(err.is_closed(), "{err:?}");
    if family == Family::Fair {
        let queue = common::fair_queue_key(&name);
        assert!(
            eventually(Duration::from_secs(5), || async {
                common::raw_lrange(&server, &queue)
                    .iter()
                    .all(|field| !field.starts_with(closing.id()))
            })
            .await,
            "the closed client's waiter kept its place: {:?}",
            common::raw_lrange(&server, &queue)
        );
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            !claimant(&server, &name).is_some_and(|claim| claim.contains(closing.id()))
        })
        .await,
        "the closed client's waiter kept its claim: {:?}",
        claimant(&server, &name)
    );

    let released = Instant::now();
    held.unlock().await.unwrap();
    let taken = served_promptly(family, waiter, released, "after the release").await;
    taken.unlock().await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async { idle(&closing) }).await,
        "the closed client still tracks {:?}",
        closing.stats()
    );
    family
        .assert_no_leaks(&server, &[&holder, &closing, &waiting], &[&name])
        .await;
}

// ---- Faults: kill and restart ----

/// The server is killed and restarted (empty) while a lock is held and three waiters
/// (contenders) wait for it: no waiter hangs (each takes the lock or fails), they never overlap,
/// the holder learns its loss, and afterwards locks and wake-ups work again: once the holder
/// knows of its loss, its client is back, and its next operations succeed at the first attempt.
async fn restart_while_held_and_while_waiting(family: Family) {
    let mut server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let holder = connect(&server.url(), lease, CMD).await;
    let waiting = connect(&server.url(), lease, CMD).await;
    let name = lock_name(family, "restart");
    let later = format!("{name}:later");
    let register = Arc::new(Register::default());
    let overlaps = Arc::new(Overlaps::default());

    let held = family.lock(&holder, &name).lock().await.unwrap();
    let watch = family.watch_waiters(&server);
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let lock = family.contender(&waiting, &name);
            let (register, overlaps) = (register.clone(), overlaps.clone());
            tokio::spawn(async move {
                let guard = lock.lock().await?;
                critical_section(&register, &overlaps, &format!("waiter-{i}"), THINK).await;
                guard.unlock().await.expect("release after the restart");
                Ok::<(), relock::Error>(())
            })
        })
        .collect();
    assert!(
        watch.until_waiting(&server, &name, &[(&waiting, 3)]).await,
        "the waiters did not wait: {:?}",
        waiting.stats()
    );

    server.kill();
    server.restart();
    let restarted = Instant::now();
    let bound = Duration::from_secs(15);
    let mut acquired = 0;
    for waiter in waiters {
        let outcome = tokio::time::timeout_at(restarted + bound, waiter)
            .await
            .unwrap_or_else(|_| panic!("a waiter neither took the lock nor failed in {bound:?}"))
            .unwrap();
        match outcome {
            Ok(()) => acquired += 1,
            Err(error) => println!("a waiter failed across the restart: {error}"),
        }
    }
    println!(
        "{}: {acquired}/3 waiters took the lock {:?} after the restart",
        family.name(),
        restarted.elapsed()
    );
    register.assert_exact(acquired);
    overlaps.assert_none();
    timeout(lease * 2 + Duration::from_secs(5), held.lost())
        .await
        .expect("lost() did not fire for a lock the restart wiped out");

    // Locks work again, and a new waiter is served by a release.
    let taken = family.lock(&holder, &name).try_lock().await;
    taken
        .expect("the first acquire after the restart failed")
        .expect("a free lock after the restart")
        .unlock()
        .await
        .unwrap();
    let blocker = family
        .lock(&holder, &later)
        .lock_with_lease(LONG)
        .await
        .expect("an acquire after the restart failed");
    let watch = family.watch_waiters(&server);
    let waiter = spawn_waiter(family.contender(&waiting, &later));
    assert!(
        watch.until_waiting(&server, &later, &[(&waiting, 1)]).await,
        "no waiter after the restart: {:?}",
        waiting.stats()
    );
    let released = Instant::now();
    blocker.unlock().await.unwrap();
    let guard = served_promptly(family, waiter, released, "after the restart").await;
    guard.unlock().await.unwrap();

    let err = held.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "unlock of the wiped-out hold: {err:?}");
    family
        .assert_no_leaks(&server, &[&holder, &waiting], &[&name, &later])
        .await;
}

// ---- Faults: DEBUG SLEEP ----

/// The server stalls for less than the lease while workers (a crowd) contend and a lock is held:
/// no update is lost, no sections overlap, and the held lock outlives the stall by a lease.
async fn debug_sleep_shorter_than_the_lease_loses_nothing(family: Family) {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let holder = connect(&server.url(), lease, CMD).await;
    let clients = [
        connect(&server.url(), lease, CMD).await,
        connect(&server.url(), lease, CMD).await,
    ];
    let held_name = lock_name(family, "short-sleep");
    let shared_name = format!("{held_name}:shared");
    let register = Arc::new(Register::default());
    let overlaps = Arc::new(Overlaps::default());
    let stop = Arc::new(AtomicBool::new(false));

    let held = family.lock(&holder, &held_name).lock().await.unwrap();
    let held_field = family.field_of(&holder, &held);
    let workers = start_workers(
        family,
        &clients,
        &shared_name,
        4,
        &register,
        &overlaps,
        &stop,
    );
    assert!(progress(&register, 5).await, "the workers did not start");

    let woke = faults::debug_sleep(&server, 0.4).woken().await;
    assert!(
        progress(&register, 5).await,
        "the workers did not go on after the sleep"
    );
    // A whole lease after the stall, the holder still holds.
    let remaining = (woke + lease).saturating_duration_since(Instant::now());
    assert!(
        timeout(remaining, held.lost()).await.is_err(),
        "lost() fired after a stall shorter than the lease"
    );
    stop.store(true, Ordering::Relaxed);
    let sections = join_workers(workers, Duration::from_secs(30)).await;
    assert_eq!(overlaps.len() as u64, sections);
    register.assert_exact(overlaps.exclusive() as u64);
    overlaps.assert_none();

    assert_eq!(family.holds(&server, &held_name, &held_field), 1);
    assert!(raw_pttl(&server, &held_name) > 0);
    assert!(family
        .contender(&clients[0], &held_name)
        .try_lock()
        .await
        .unwrap()
        .is_none());
    held.unlock().await.unwrap();
    family
        .assert_no_leaks(
            &server,
            &[&holder, &clients[0], &clients[1]],
            &[&held_name, &shared_name],
        )
        .await;
}

/// The server stalls for longer than the lease: the holder's lock expires, it learns so, a
/// contender takes the lock after the lease ended, and the old holder's renewals and unlock
/// never touch the new hold (nor bring back a reader's timeout key).
async fn debug_sleep_longer_than_the_lease_loses_the_lock(family: Family) {
    let server = RedisServer::start();
    let lease = Duration::from_millis(800);
    let stall = Duration::from_millis(1600);
    let holder = connect(&server.url(), lease, CMD).await;
    // Its acquire waits out the whole stall in the server; its watchdog lease outlasts the
    // stall, so the hold it gets is not one whose lease may have ended before its reply came
    // (see acquire_answered_after_its_lease_keeps_its_lock).
    let other = connect(&server.url(), LONG, Duration::from_secs(5)).await;
    let name = lock_name(family, "long-sleep");

    let held = family.lock(&holder, &name).lock().await.unwrap();
    let old_field = family.field_of(&holder, &held);
    assert!(family
        .contender(&other, &name)
        .try_lock()
        .await
        .unwrap()
        .is_none());
    let read_at = Instant::now();
    let pttl = raw_pttl(&server, &name);
    assert!(pttl > 0);
    let lease_end = read_at + Duration::from_millis(pttl as u64);

    let sleep = faults::debug_sleep(&server, stall.as_secs_f64());
    let slept_from = sleep.sent_at;
    let contender = tokio::spawn({
        let lock = family.contender(&other, &name);
        async move {
            let guard = lock.try_lock_for(Duration::from_secs(15), None).await;
            (guard, Instant::now())
        }
    });
    sleep.woken().await;
    timeout(Duration::from_secs(6), held.lost())
        .await
        .expect("lost() did not fire after a stall longer than the lease");
    let (taken, taken_at) =
        common::within(Duration::from_secs(20), contender, "the contender hung").await;
    let taken = taken
        .unwrap()
        .expect("the lock frees itself after the lease");
    assert!(
        taken_at + Duration::from_millis(1) >= lease_end,
        "taken {:?} before the lease ended",
        lease_end - taken_at
    );
    assert!(
        taken_at + Duration::from_millis(100) >= slept_from + stall,
        "taken while the server slept"
    );
    let new_field = family.rival().field_of(&other, &taken);
    assert_eq!(
        family.holders(&server, &name),
        vec![(new_field.clone(), "1".to_owned())]
    );
    assert_fenced(held.token(), taken.token());

    // The old holder's renewals never bring its field back.
    let end = Instant::now() + lease;
    while Instant::now() < end {
        assert!(
            !raw_hexists(&server, &name, &old_field)
                && family.holds(&server, &name, &old_field) == 0,
            "the lost hold came back"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let err = held.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "unlock of the lost hold: {err:?}");
    assert_eq!(
        family.holders(&server, &name),
        vec![(new_field, "1".to_owned())],
        "the old unlock touched the new holder's lock"
    );
    taken.unlock().await.unwrap();
    family
        .assert_no_leaks(&server, &[&holder, &other], &[&name])
        .await;
}

/// An acquire sent while the server stalls for longer than the watchdog timeout takes a free
/// lock when the server wakes. `lock()` promises that the watchdog renews the lease until the
/// guard is released: so the lock must stay held on Redis, under the guard's field, for several
/// watchdog timeouts after it was handed out.
async fn acquire_answered_after_its_lease_keeps_its_lock(family: Family) {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(500);
    let stall = Duration::from_millis(1200);
    // Its acquire waits out the whole stall in the server.
    let client = connect(&server.url(), watchdog, Duration::from_secs(5)).await;
    let name = lock_name(family, "late-reply");
    let lock = family.lock(&client, &name);
    // Loads the scripts, so the acquire below is one command.
    lock.lock().await.unwrap().unlock().await.unwrap();

    let sleep = faults::debug_sleep(&server, stall.as_secs_f64());
    assert!(
        common::family::until_asleep(&server).await,
        "the server never slept"
    );
    let guard = lock.lock().await.unwrap();
    let woke = sleep.woken().await;
    let held_field = family.field_of(&client, &guard);
    println!(
        "{}: lost on arrival: {}, PTTL {} ms",
        family.name(),
        guard.is_lost(),
        raw_pttl(&server, &name)
    );
    while woke.elapsed() < watchdog * 4 {
        assert!(
            family.holds(&server, &name, &held_field) == 1,
            "the lock expired {:?} after it was taken, its guard alive (lost() says {})",
            woke.elapsed(),
            guard.is_lost()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    guard.unlock().await.unwrap();
    family.assert_no_leaks(&server, &[&client], &[&name]).await;
}

// ---- Faults: CLIENT KILL ----

/// Every connection of the clients is cut while waiters (contenders) wait for a lock held with a
/// long lease and another lock is renewed by the watchdog: the watchdog renews on the new connections, the
/// waiters (re-subscribed, or still polling) are served once the lock is released, one at a time.
async fn client_kill_keeps_waiters_waking_and_the_watchdog_renewing(family: Family) {
    let server = RedisServer::start();
    let lease = Duration::from_millis(900);
    let holder = connect(&server.url(), lease, CMD).await;
    let waiting = connect(&server.url(), lease, CMD).await;
    let waited = lock_name(family, "kill");
    let renewed = format!("{waited}:renewed");
    let register = Arc::new(Register::default());
    let overlaps = Arc::new(Overlaps::default());

    let blocker = family
        .lock(&holder, &waited)
        .lock_with_lease(LONG)
        .await
        .unwrap();
    let kept = family.lock(&holder, &renewed).lock().await.unwrap();
    let kept_field = family.field_of(&holder, &kept);
    let watch = family.watch_waiters(&server);
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let lock = family.contender(&waiting, &waited);
            let (register, overlaps) = (register.clone(), overlaps.clone());
            tokio::spawn(async move {
                // The cut may fail an attempt in flight, and only with a Redis error: a spin
                // waiter polls, and a parked waiter is woken by its subscriber's reconnect and
                // tries at once, possibly on the command connection the cut closed before the
                // client saw it go. Such a waiter waits again; any other error fails the test.
                let guard = loop {
                    match lock.try_lock_for(Duration::from_secs(30), None).await {
                        Ok(Some(guard)) => break guard,
                        Ok(None) => panic!("no lock within 30 s"),
                        Err(error) if error.is_redis() => {
                            println!("waiter-{i}: an attempt failed: {error}")
                        }
                        Err(error) => panic!("waiter-{i}: the wait failed: {error}"),
                    }
                };
                let at = Instant::now();
                critical_section(&register, &overlaps, &format!("waiter-{i}"), THINK).await;
                guard.unlock().await.unwrap();
                at
            })
        })
        .collect();
    assert!(
        watch
            .until_waiting(&server, &waited, &[(&waiting, 3)])
            .await
    );

    let normal = faults::client_kill(&server, "normal");
    let pubsub = faults::client_kill(&server, "pubsub");
    let cut_at = Instant::now();
    assert!(normal >= 2, "killed {normal} command connections");
    if family.subscribes() {
        assert!(pubsub >= 1, "killed {pubsub} subscriber connections");
        let watch = family.watch_waiters(&server);
        assert!(
            watch
                .until_waiting(&server, &waited, &[(&waiting, 3)])
                .await,
            "the waiters' channels were not subscribed again"
        );
    }

    // The watchdog renews on the new connection: the hold outlives two leases after the cut.
    while cut_at.elapsed() < lease * 2 {
        assert!(
            !kept.is_lost(),
            "lost() fired {:?} after the cut",
            cut_at.elapsed()
        );
        assert_eq!(
            family.holds(&server, &renewed, &kept_field),
            1,
            "the renewed lock lapsed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        register.value(),
        0,
        "a waiter got in while the lock was held"
    );

    let released = Instant::now();
    blocker.unlock().await.unwrap();
    // Three in a row, each after the one before released.
    faults::assert_served_within(waiters, released, family.prompt(SLACK) * 3).await;
    register.assert_exact(3);
    overlaps.assert_none();
    kept.unlock().await.unwrap();
    family
        .assert_no_leaks(&server, &[&holder, &waiting], &[&waited, &renewed])
        .await;
}

// ---- Faults: SCRIPT FLUSH ----

/// The script cache is flushed again and again under contending workers (a crowd): every script
/// is loaded again on `NOSCRIPT`, and no operation fails, no update is lost.
async fn script_flush_mid_run_keeps_every_operation_working(family: Family) {
    const FLUSHES: usize = 4;
    let server = RedisServer::start();
    let clients = [
        connect(&server.url(), Duration::from_secs(2), CMD).await,
        connect(&server.url(), Duration::from_secs(2), CMD).await,
    ];
    let name = lock_name(family, "flush");
    let register = Arc::new(Register::default());
    let overlaps = Arc::new(Overlaps::default());
    let stop = Arc::new(AtomicBool::new(false));

    let workers = start_workers(family, &clients, &name, 4, &register, &overlaps, &stop);
    for flush in 0..FLUSHES {
        assert!(
            progress(&register, 3).await,
            "the workers stalled after {flush} flushes"
        );
        common::flush_scripts(&server);
    }
    assert!(progress(&register, 3).await, "the workers stalled");
    stop.store(true, Ordering::Relaxed);
    let sections = join_workers(workers, Duration::from_secs(30)).await;
    // The last flush emptied the cache and the workers went on: what it holds was loaded again.
    let reloaded = common::raw_loaded_scripts(&server);
    println!(
        "{}: {sections} sections across {FLUSHES} flushes, {reloaded} scripts loaded again",
        family.name()
    );
    assert!(reloaded >= 1, "the flushes never made a script reload");
    assert_eq!(overlaps.len() as u64, sections);
    register.assert_exact(overlaps.exclusive() as u64);
    overlaps.assert_none();
    family
        .assert_no_leaks(&server, &[&clients[0], &clients[1]], &[&name])
        .await;
}

// ---- Faults: lost replies ----

/// A server, a proxy in front of it and a client through the proxy whose `family` scripts (and
/// its rival's) are loaded (so no lost reply is a `NOSCRIPT` one).
async fn proxied(family: Family, lease: Duration, warm: &str) -> (RedisServer, Proxy, Client) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = connect(&proxy.url(), lease, Duration::from_secs(1)).await;
    let lock = family.lock(&client, warm);
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    if family.rival() != family {
        let contender = family.contender(&client, warm);
        contender.lock().await.unwrap().unlock().await.unwrap();
    }
    (server, proxy, client)
}

/// Judges an acquire whose reply was lost. With a guard, the hold counts once: one unlock frees
/// the lock. With an error, the hold is not counted, or it expires by its lease.
pub(crate) async fn settle_lost_acquire(
    family: Family,
    server: &RedisServer,
    client: &Client,
    name: &str,
    outcome: relock::Result<Option<AnyGuard>>,
    lease: Duration,
) {
    let owner_field = family.field(client, &Owner::current());
    match outcome {
        Ok(Some(guard)) => {
            assert_eq!(family.field_of(client, &guard), owner_field);
            assert_eq!(
                family.holders(server, name),
                vec![(owner_field.clone(), "1".to_owned())],
                "counted twice"
            );
            assert_eq!(family.holds(server, name, &owner_field), 1);
            if let Some(token) = guard.token() {
                assert_eq!(
                    (token, common::family::raw_token(server, name)),
                    (1, Some(1)),
                    "a new owner took more than one token"
                );
            }
            guard.unlock().await.unwrap();
            assert!(!raw_exists(server, name), "one unlock must free the lock");
        }
        Ok(None) => panic!("a free lock was reported busy after a lost reply"),
        Err(error) => {
            println!("an acquire with a lost reply failed: {error}");
            assert!(
                family.holds(server, name, &owner_field) <= 1,
                "counted twice"
            );
            let ttl = raw_pttl(server, name);
            assert!(
                ttl == -2 || (ttl > 0 && ttl <= lease.as_millis() as i64),
                "PTTL {ttl}"
            );
            assert!(
                common::until_gone(server, name, lease + Duration::from_secs(3)).await,
                "the orphaned hold did not expire by its lease"
            );
        }
    }
}

/// An acquire whose script ran but whose reply was lost (its connection closed) gives a guard
/// that counts once, or an error with no hold counted beyond its lease: for `try_lock`, `lock`
/// and a re-entry.
async fn lost_acquire_reply_never_counts_a_hold_twice(family: Family) {
    let lease = Duration::from_secs(1);
    let base = lock_name(family, "lost-acquire");
    let name = |part: &str| format!("{base}:{part}");
    let (server, proxy, client) = proxied(family, lease, &name("warm")).await;
    let acquire = family.acquire_sha();

    let lock = family.lock(&client, name("try"));
    proxy.swallow_next_reply(&[&acquire, &name("try")]);
    let outcome = timeout(Duration::from_secs(15), lock.try_lock())
        .await
        .expect("try_lock hung after a lost reply");
    assert_eq!(proxy.swallowed(), 1, "the fault did not happen");
    settle_lost_acquire(family, &server, &client, &name("try"), outcome, lease).await;

    let lock = family.lock(&client, name("lock"));
    proxy.swallow_next_reply(&[&acquire, &name("lock")]);
    let outcome = timeout(Duration::from_secs(15), lock.lock())
        .await
        .expect("lock hung after a lost reply");
    assert_eq!(proxy.swallowed(), 2, "the fault did not happen");
    let outcome = outcome.map(Some);
    settle_lost_acquire(family, &server, &client, &name("lock"), outcome, lease).await;

    // A re-entry whose reply was lost: two holds, two unlocks.
    let reenter = name("reenter");
    let lock = family.lock(&client, &reenter);
    let first = lock.lock().await.unwrap();
    let owner_field = family.field_of(&client, &first);
    proxy.swallow_next_reply(&[&acquire, &reenter]);
    let outcome = timeout(Duration::from_secs(15), lock.lock())
        .await
        .expect("re-entry hung after a lost reply");
    assert_eq!(proxy.swallowed(), 3, "the fault did not happen");
    match outcome {
        Ok(second) => {
            assert_eq!(
                family.holds(&server, &reenter, &owner_field),
                2,
                "miscounted"
            );
            assert_eq!(second.token(), first.token(), "a re-entry took a new token");
            second.unlock().await.unwrap();
            assert_eq!(family.holds(&server, &reenter, &owner_field), 1);
            first.unlock().await.unwrap();
            assert!(!raw_exists(&server, &reenter), "two unlocks must free it");
        }
        Err(error) => {
            println!("a re-entry with a lost reply failed: {error}");
            assert!(
                family.holds(&server, &reenter, &owner_field) <= 2,
                "counted twice"
            );
            first.unlock().await.unwrap();
            assert!(
                common::until_gone(&server, &reenter, lease + Duration::from_secs(3)).await,
                "the orphaned hold did not expire by its lease"
            );
        }
    }
    // A waiter's (a contender's) attempt on a busy lock, reply lost: whether it fails or waits
    // on, it takes no hold while another client holds the lock, and leaves nothing of its wait
    // behind.
    let busy = name("busy");
    let other = connect(&server.url(), LONG, CMD).await;
    let held = family.lock(&other, &busy).lock().await.unwrap();
    let lock = family.contender(&client, &busy);
    proxy.swallow_next_reply(&[&family.rival().acquire_sha(), &busy]);
    let outcome = timeout(
        Duration::from_secs(15),
        lock.try_lock_for(Duration::from_secs(1), None),
    )
    .await
    .expect("try_lock_for hung after a lost reply");
    assert_eq!(proxy.swallowed(), 4, "the fault did not happen");
    match outcome {
        Ok(None) => {}
        Ok(Some(_)) => panic!("took a lock another client holds"),
        Err(error) => println!("a wait with a lost reply failed: {error}"),
    }
    assert_eq!(
        family.holders(&server, &busy),
        vec![(family.field_of(&other, &held), "1".to_owned())]
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            idle(&client) && no_waiter_on_redis(family, &server, &busy)
        })
        .await,
        "the failed wait left {:?}, queue {:?}",
        client.stats(),
        common::raw_lrange(&server, &common::fair_queue_key(&busy))
    );
    held.unlock().await.unwrap();

    let names = ["warm", "try", "lock", "reenter", "busy"].map(name);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    family
        .assert_no_leaks(&server, &[&client, &other], &names)
        .await;
}

/// A release whose script ran but whose reply was lost is retried under the same request id
/// and counts once: a release of one of two holds leaves one, a last release frees the lock,
/// also when the hold could lapse before the retry.
async fn lost_release_reply_is_retried_and_counts_once(family: Family) {
    let lease = Duration::from_secs(1);
    let base = lock_name(family, "lost-release");
    let name = |part: &str| format!("{base}:{part}");
    let (server, proxy, client) = proxied(family, lease, &name("warm")).await;
    let release = family.release_sha();

    // Two holds; the release of one ran but its reply was lost.
    let held = name("release");
    let lock = family.lock(&client, &held);
    let first = lock.lock().await.unwrap();
    let second = lock.lock().await.unwrap();
    let owner_field = family.field_of(&client, &first);
    assert_eq!(family.holds(&server, &held, &owner_field), 2);
    proxy.swallow_next_reply(&[&release, &held]);
    timeout(Duration::from_secs(15), second.unlock())
        .await
        .expect("unlock hung after a lost reply")
        .expect("a retried release succeeds");
    assert_eq!(proxy.swallowed(), 1, "the fault did not happen");
    assert_eq!(
        family.holds(&server, &held, &owner_field),
        1,
        "the retried release counted twice"
    );
    first.unlock().await.unwrap();
    assert!(!raw_exists(&server, &held));

    // The last release of a long lease, reply lost.
    let last = name("last");
    let only = family
        .lock(&client, &last)
        .lock_with_lease(Duration::from_secs(10))
        .await
        .unwrap();
    proxy.swallow_next_reply(&[&release, &last]);
    timeout(Duration::from_secs(15), only.unlock())
        .await
        .expect("unlock hung after a lost reply")
        .expect("a retried last release succeeds");
    assert_eq!(proxy.swallowed(), 2, "the fault did not happen");
    assert!(!raw_exists(&server, &last));

    // A hold that could lapse before the last retry (600 ms, 1 s command timeout): its replies
    // are dropped until the lease is over, then the connection is cut and the release sent
    // again; the retry replays "freed".
    let lapsed = name("lapsed");
    let acquired_at = Instant::now();
    let short = family
        .lock(&client, &lapsed)
        .lock_with_lease(Duration::from_millis(600))
        .await
        .unwrap();
    proxy.set_mode(Mode::DropReplies);
    let unlock = tokio::spawn(short.unlock());
    assert!(
        common::until_gone(&server, &lapsed, Duration::from_secs(5)).await,
        "the release never ran"
    );
    tokio::time::sleep_until(acquired_at + Duration::from_millis(700)).await;
    proxy.set_mode(Mode::Pass);
    proxy.cut();
    common::within(
        Duration::from_secs(15),
        unlock,
        "unlock hung after a lost reply",
    )
    .await
    .expect("the retry replays the release of a short lease");
    assert!(!raw_exists(&server, &lapsed));

    let names = ["warm", "release", "last", "lapsed"].map(name);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    family.assert_no_leaks(&server, &[&client], &names).await;
}
