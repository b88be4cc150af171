//! `relock::blocking` (feature `blocking`): the lock family from plain threads. Eight threads
//! contend on each type; guards dropped on another thread, by a panic, or on the way out of
//! `main` release their holds; reentrancy is per thread; a call inside an async runtime is an
//! error, not a stall.

#![cfg(feature = "blocking")]

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::RedisServer;
use relock::blocking::Client;
use relock::Owner;

const THREADS: usize = 8;
const ROUNDS: usize = 4;

pub(super) fn connect(server: &RedisServer) -> Client {
    let config = common::config(&server.url())
        .with_watchdog_timeout(Duration::from_secs(5))
        .with_command_timeout(Duration::from_secs(2));
    Client::new(config).unwrap()
}

/// Runs `THREADS` threads, each `ROUNDS` times through `turn`, which takes something, calls
/// the given critical section, and gives it back; checks that no two were inside at once and
/// that every turn happened.
fn contend<F>(what: &'static str, turn: F)
where
    F: Fn(&dyn Fn()) + Send + Sync + 'static,
{
    let inside = Arc::new(AtomicUsize::new(0));
    let turns = Arc::new(AtomicUsize::new(0));
    let turn = Arc::new(turn);
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (inside, turns, turn) = (inside.clone(), turns.clone(), turn.clone());
            std::thread::spawn(move || {
                for _ in 0..ROUNDS {
                    turn(&|| {
                        let before = inside.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(1));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        assert_eq!(before, 0, "{what}: two threads inside at once");
                        turns.fetch_add(1, Ordering::SeqCst);
                    });
                }
            })
        })
        .collect();
    for thread in threads {
        thread
            .join()
            .unwrap_or_else(|_| panic!("{what}: a thread failed"));
    }
    assert_eq!(turns.load(Ordering::SeqCst), THREADS * ROUNDS, "{what}");
}

#[test]
fn eight_threads_contend_on_every_type() {
    let server = RedisServer::start();
    let client = connect(&server);
    let base = common::prefix("blocking-contend");
    let name = |kind: &str| format!("{base}:{kind}");

    let lock = client.lock(name("lock"));
    contend("lock", move |inside| lock.with(inside).unwrap());
    let fair = client.fair_lock(name("fair"));
    contend("fair", move |inside| fair.with(inside).unwrap());
    let spin = client.spin_lock(name("spin"));
    contend("spin", move |inside| spin.with(inside).unwrap());
    let write = client.rw_lock(name("rw")).write();
    contend("write", move |inside| write.with(inside).unwrap());
    let fenced = client.fenced_lock(name("fenced"));
    let last = Arc::new(AtomicUsize::new(0));
    contend("fenced", move |inside| {
        let guard = fenced.lock().unwrap();
        let token = guard.token() as usize;
        assert!(last.swap(token, Ordering::SeqCst) < token, "tokens grow");
        inside();
        guard.unlock().unwrap();
    });
    let multi = client.multi_lock([name("m1"), name("m2")]);
    contend("multi", move |inside| multi.with(inside).unwrap());
    let semaphore = client.semaphore(name("sem"));
    assert!(semaphore.try_set_permits(1).unwrap());
    contend("semaphore", move |inside| {
        semaphore.acquire(1).unwrap();
        inside();
        semaphore.release(1).unwrap();
    });
    let permits = client.permit_semaphore(name("permits"));
    assert!(permits.try_set_permits(1).unwrap());
    contend("permits", move |inside| {
        let permit = permits.acquire().unwrap();
        inside();
        permit.release().unwrap();
    });

    // RedLock over three servers, each thread's hold its own.
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let clients: Vec<Client> = servers.iter().map(connect).collect();
    let red = relock::blocking::RedLock::new(&clients, name("red")).unwrap();
    contend("redlock", move |inside| red.with(inside).unwrap());

    // A latch opens for every waiting thread at once.
    let latch = client.count_down_latch(name("latch"));
    assert!(latch.try_set_count(1).unwrap());
    let waiters: Vec<_> = (0..THREADS)
        .map(|_| {
            let latch = latch.clone();
            std::thread::spawn(move || latch.wait_for(Duration::from_secs(20)).unwrap())
        })
        .collect();
    latch.count_down().unwrap();
    assert!(waiters.into_iter().all(|w| w.join().unwrap()));
}

#[test]
fn reentrancy_is_per_thread_and_an_owner_shares_a_hold() {
    let server = RedisServer::start();
    let client = connect(&server);
    let lock = client.lock(common::prefix("blocking-reentry"));
    let first = lock.lock().unwrap();
    let again = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    let other = std::thread::spawn({
        let lock = lock.clone();
        move || {
            (
                lock.try_lock().unwrap().is_none(),
                lock.hold_count().unwrap(),
            )
        }
    });
    assert_eq!(
        other.join().unwrap(),
        (true, 0),
        "another thread is another owner"
    );
    again.unlock().unwrap();
    first.unlock().unwrap();

    let owner = Owner::new();
    let shared = lock.clone().owned_by(owner.clone());
    let guard = shared.lock().unwrap();
    let count = std::thread::spawn(move || shared.hold_count().unwrap());
    assert_eq!(
        count.join().unwrap(),
        1,
        "an explicit owner is the same on every thread"
    );
    guard.unlock().unwrap();
}

#[test]
fn guards_dropped_on_another_thread_or_by_a_panic_release_their_holds() {
    let server = RedisServer::start();
    let client = connect(&server);
    let name = common::prefix("blocking-drop");
    let lock = client.lock(name.clone());
    let guard = lock.lock().unwrap();
    std::thread::spawn(move || drop(guard)).join().unwrap();
    let freed = wait_until(Duration::from_secs(5), || {
        !common::raw_exists(&server, &name)
    });
    assert!(freed, "a guard dropped on another thread released its hold");

    let panicking = std::thread::spawn({
        let lock = lock.clone();
        move || {
            let _guard = lock.lock().unwrap();
            panic!("a thread panics while it holds the lock (on purpose)");
        }
    });
    assert!(panicking.join().is_err());
    let started = Instant::now();
    let taken = lock
        .try_lock_for(Duration::from_secs(10), None)
        .unwrap()
        .expect("the panicking thread's hold was released");
    // Far sooner than its lease (5 s): released by the unwinding, not by expiry.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    taken.unlock().unwrap();
}

#[test]
fn a_process_that_returns_from_main_holding_a_lock_releases_it() {
    let server = RedisServer::start();
    let name = common::prefix("blocking-exit");
    let out = std::process::Command::new(common::example("blocking", "blocking"))
        .args(["--hold", &name])
        .env("REDIS_URL", server.url())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("held"));
    // Its lease is 30 s: gone now means released on the way out, not expired.
    assert!(
        !common::raw_exists(&server, &name),
        "the lock outlived its process"
    );
}

#[tokio::test]
async fn a_call_inside_an_async_runtime_is_an_error_not_a_stall() {
    let server = RedisServer::start();
    let err = Client::connect(&server.url()).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert!(err.to_string().contains("async runtime"), "{err}");
    // A client made on a plain thread, used inside.
    let url = server.url();
    let client = std::thread::spawn(move || Client::connect(&url).unwrap())
        .join()
        .unwrap();
    let err = client
        .lock(common::prefix("blocking-inside"))
        .lock()
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    // Dropped here, where dropping a runtime would panic: it shuts down on a thread of its own.
    drop(client);
}

/// Polls `check` every 10 ms until it is true or `within` passes.
pub(super) fn wait_until(within: Duration, check: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    check()
}

#[test]
fn queries_tokens_permits_and_lock_delay_answer_as_the_async_ones_do() {
    let server = RedisServer::start();
    let client = connect(&server);
    let base = common::prefix("blocking-surface");

    let fenced = client.fenced_lock(format!("{base}:fenced"));
    let guard = fenced.lock().unwrap();
    assert_eq!(fenced.token().unwrap(), guard.token());
    assert!(fenced.is_locked().unwrap() && fenced.is_held_by_current_owner().unwrap());
    assert!(fenced.remaining_lease().unwrap().expires_in().is_some());
    guard.unlock().unwrap();
    assert!(!fenced.is_locked().unwrap());

    // A lease that runs out without an unlock leaves the lock-delay in force.
    let delayed = client
        .lock(format!("{base}:delayed"))
        .with_lock_delay(Duration::from_secs(5))
        .unwrap();
    let held = delayed.lock_with_lease(Duration::from_millis(100)).unwrap();
    assert!(
        held.wait_lost(Duration::from_secs(5)),
        "the fixed lease runs out"
    );
    let left = wait_until(Duration::from_secs(5), || {
        delayed.lock_delay_left().unwrap().is_some()
    });
    assert!(left, "a lock-delay is in force after the lapse");
    drop(held);
    assert!(
        delayed.force_unlock().unwrap(),
        "force_unlock ends the delay"
    );

    let permits = client.permit_semaphore(format!("{base}:permits"));
    assert!(permits.try_set_permits(2).unwrap());
    let permit = permits.acquire().unwrap();
    assert_eq!(
        (
            permits.acquired_permits().unwrap(),
            permits.permits().unwrap()
        ),
        (1, 2)
    );
    let second = permits
        .try_acquire_for(Duration::from_secs(1), None)
        .unwrap()
        .unwrap();
    assert!(permits.try_acquire().unwrap().is_none());
    assert!(permits.release_id(second.id()).unwrap());
    permit.release().unwrap();
    assert_eq!(permits.available_permits().unwrap(), 2);

    // Closed keeping its locks: the lock stays until its lease ends.
    let kept = format!("{base}:kept");
    let guard = client.lock(kept.clone()).lock().unwrap();
    client.shutdown_keeping_locks().unwrap();
    assert!(common::raw_exists(&server, &kept));
    assert!(guard.unlock().unwrap_err().is_closed());
    assert!(common::raw_exists(&server, &kept), "nothing released it");
}

#[test]
fn an_election_from_plain_threads_has_one_leader_and_hands_over_on_resign() {
    let server = RedisServer::start();
    let (first, second) = (connect(&server), connect(&server));
    let name = common::prefix("blocking_election");
    let term = first.election(&name).campaign().unwrap();
    assert!(second.election(&name).try_campaign().unwrap().is_none());
    let leader = second.election(&name).leader().unwrap().unwrap();
    assert_eq!(
        (leader.epoch, leader.party.client_id.as_str()),
        (term.epoch(), first.id())
    );
    // Its changes, as an iterator: the newest one first, then each as it comes. (Watched by
    // the leader's client: a watch counts among its client's waiters, and the follower's must
    // count its campaign alone.)
    let mut changes = first.election(&name).watch();
    let first_change = changes.next().unwrap().unwrap();
    assert!(
        matches!(first_change, relock::Change::Elected { epoch, .. } if epoch == term.epoch()),
        "{first_change:?}"
    );
    assert_eq!(term.proclaim("here").unwrap(), 2);
    let proclaimed = changes.next_within(common::HANG).unwrap();
    assert!(
        matches!(&proclaimed, Some(relock::Change::Proclaimed { metadata, .. }) if metadata == "here"),
        "{proclaimed:?}"
    );
    assert_eq!(
        changes.next_within(Duration::from_millis(100)).unwrap(),
        None
    );
    let follower = std::thread::spawn({
        let election = second
            .election(&name)
            .with_lock_delay(Duration::from_secs(1))
            .unwrap();
        move || election.campaign().unwrap()
    });
    assert!(wait_until(Duration::from_secs(5), || second
        .stats()
        .waiters
        == 1));
    let epoch = term.epoch();
    assert!(!term.is_lost());
    term.resign().unwrap();
    let next = follower.join().unwrap();
    assert!(next.epoch() > epoch);
    assert_eq!(next.election(), name);
    let vacant = changes.next().unwrap().unwrap();
    assert!(
        matches!(vacant, relock::Change::Vacant { epoch: e, reason: relock::Vacancy::Resigned, .. } if e == epoch),
        "{vacant:?}"
    );
    let elected = changes.next().unwrap().unwrap();
    assert_eq!(elected.seq(), 4, "{elected:?}");
    next.resign().unwrap();
}
