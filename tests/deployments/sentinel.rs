//! relock through Sentinel (`redis-sentinel://` URL) across a failover: a watchdog lock keeps
//! being renewed on the new primary, a waiter parked in another client resubscribes there and is
//! woken by a release, and new acquisitions work and exclude.
//!
//! The failover is `SENTINEL FAILOVER` followed at once by `demote_old_primary` (the old primary
//! becomes a replica and its clients are disconnected, as Sentinel's `+convert-to-slave` does some
//! 10 s later), so both clients reconnect through the Sentinels to the new primary.

use crate::common;

use std::time::{Duration, Instant};

use common::connect::{self, field_of};
use common::topology::Sentinels;
use common::{eventually, lock_channel, raw_exists, raw_holds, raw_numsub, raw_pttl, RedisServer};
use relock::{Client, LockGuard};

/// The watchdog lease of both clients.
const WATCHDOG: Duration = Duration::from_secs(2);
/// A fixed lease far longer than any wake-up the test accepts: a waiter that gets the lock
/// within [`PROMPT`] of the release was woken by the release's message.
const LONG: Duration = Duration::from_secs(20);

/// A client through the Sentinels at `url`, with the [`WATCHDOG`] lease.
async fn connect(url: &str) -> Client {
    connect::connected(connect::config(url, WATCHDOG, Duration::from_secs(2))).await
}

/// Reads a key's PTTL on one server every 20 ms from its own thread, and keeps the lowest.
struct PttlProbe {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<i64>,
}

impl PttlProbe {
    fn start(port: u16, key: &str) -> PttlProbe {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (stop, key) = (stop.clone(), key.to_owned());
            move || {
                let mut lowest = i64::MAX;
                while !stop.load(Ordering::Relaxed) {
                    // A server in the middle of a failover may answer with an error (or a cut
                    // reply): only integer replies count.
                    if let Ok(reply) = common::server::raw_command(port, &["PTTL", &key]) {
                        if let Some((common::Resp::Int(pttl), _)) =
                            common::parse_resp(reply.as_bytes())
                        {
                            lowest = lowest.min(pttl);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                lowest
            }
        });
        PttlProbe { port, stop, thread }
    }

    /// Stops the probe: the lowest PTTL it read (-2: the key was gone).
    fn finish(self) -> i64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("the PTTL probe panicked")
    }
}

/// Takes lock `name` at once with the first of `clients` (else fails with `expected`), checks
/// the hold is on `primary` and that the second client cannot take it meanwhile.
async fn taken_excluding(
    primary: &RedisServer,
    name: &str,
    [taker, other]: [&Client; 2],
    expected: &str,
) -> LockGuard {
    let taken = taker.lock(name).try_lock().await.unwrap().expect(expected);
    assert_eq!(raw_holds(primary, name, &field_of(taker, &taken)), 1);
    let twice = other.lock(name).try_lock().await.unwrap();
    assert!(twice.is_none(), "{name} was taken by both clients");
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_keep_working_across_a_sentinel_failover() {
    let started = Instant::now();
    let sentinels = Sentinels::start();
    eprintln!("sentinels up in {:?}", started.elapsed());
    let url = sentinels.url();
    let old = sentinels.primary_port();
    let holder = connect(&url).await;
    let waiting = connect(&url).await;
    let prefix = common::prefix("sentinel");
    let renewed = format!("{prefix}:watchdog");
    let fixed = format!("{prefix}:fixed");

    // A watchdog lock and a 20 s lock, both on the primary and replicated.
    let (renewed_guard, renewed_field) = connect::held(&holder, &renewed, None).await;
    let (fixed_guard, fixed_field) = connect::held(&holder, &fixed, Some(LONG)).await;
    {
        let primary = sentinels.server(old);
        assert_eq!(raw_holds(primary, &renewed, &renewed_field), 1);
        assert_eq!(raw_holds(primary, &fixed, &fixed_field), 1);
        let replica = sentinels.replica();
        let replicated = eventually(Duration::from_secs(5), || async {
            raw_holds(replica, &renewed, &renewed_field) == 1
                && raw_holds(replica, &fixed, &fixed_field) == 1
        })
        .await;
        assert!(replicated, "the locks never reached the replica");
    }

    // A waiter parked behind each, in the other client, subscribed on the old primary.
    let renewed_waiter = common::spawn_waiter(waiting.lock(renewed.as_str()));
    let fixed_waiter = common::spawn_waiter(waiting.lock(fixed.as_str()));
    let parked = eventually(Duration::from_secs(10), || async {
        waiting.stats().waiters == 2
            && raw_numsub(sentinels.server(old), &lock_channel(&renewed)) >= 1
            && raw_numsub(sentinels.server(old), &lock_channel(&fixed)) >= 1
    })
    .await;
    assert!(parked, "the waiters never parked: {:?}", waiting.stats());

    let lost = renewed_guard.lost();
    tokio::pin!(lost);

    // Fail over, and demote the old primary at once. Meanwhile a thread reads the watchdog
    // lock's PTTL on the replica about to be promoted, every 20 ms, to see how close it came to
    // expiring there before the holder's renewals reached it.
    let failover_at = Instant::now();
    let probe = PttlProbe::start(sentinels.replica().port(), &renewed);
    let new = tokio::task::block_in_place(|| {
        let new = sentinels.failover();
        sentinels.demote_old_primary();
        new
    });
    eprintln!(
        "failover + demote_old_primary took {:?}",
        failover_at.elapsed()
    );
    assert_ne!(new, old);
    let primary = sentinels.server(new);
    assert_eq!(probe.port, new, "the promoted server is the old replica");

    // The waiters resubscribe on the new primary.
    let resubscribed = eventually(Duration::from_secs(10), || async {
        raw_numsub(primary, &lock_channel(&renewed)) >= 1
            && raw_numsub(primary, &lock_channel(&fixed)) >= 1
    })
    .await;
    assert!(
        resubscribed,
        "the waiters did not resubscribe on the new primary: {} / {} subscribers",
        raw_numsub(primary, &lock_channel(&renewed)),
        raw_numsub(primary, &lock_channel(&fixed))
    );
    eprintln!(
        "waiters resubscribed on the new primary {:?} after the failover began",
        failover_at.elapsed()
    );

    // The watchdog renews on the new primary: for three leases the key stays there with a
    // positive PTTL, the holder's field intact, `lost()` silent, and both waiters parked.
    let watch = async {
        let until = Instant::now() + WATCHDOG * 3;
        let mut lowest = i64::MAX;
        while Instant::now() < until {
            let pttl = raw_pttl(primary, &renewed);
            assert!(
                pttl > 0,
                "the watchdog lock vanished from the new primary {:?} after the failover began \
                 (PTTL {pttl})",
                failover_at.elapsed()
            );
            lowest = lowest.min(pttl);
            assert_eq!(raw_holds(primary, &renewed, &renewed_field), 1);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        lowest
    };
    let lowest = tokio::select! {
        _ = &mut lost => panic!(
            "the holder's watchdog lost its lock {:?} after the failover began",
            failover_at.elapsed()
        ),
        lowest = watch => lowest,
    };
    let lowest_during = probe.finish();
    eprintln!(
        "lowest PTTL of the watchdog lock on the new primary: {lowest_during} ms during the \
         failover, {lowest} ms after it"
    );
    assert!(
        lowest_during > 0,
        "the watchdog lock expired on the promoted replica during the failover"
    );
    assert!(!renewed_guard.is_lost());
    assert_eq!(raw_holds(primary, &fixed, &fixed_field), 1);
    assert!(raw_pttl(primary, &fixed) > 0);
    assert!(!renewed_waiter.is_finished(), "a waiter got a held lock");
    assert!(!fixed_waiter.is_finished(), "a waiter got a held lock");

    // Releases on the new primary wake the waiters by message.
    let released = Instant::now();
    fixed_guard.unlock().await.unwrap();
    let fixed_taken = common::woken_promptly(fixed_waiter, released, "20 s lease").await;
    assert_eq!(
        raw_holds(primary, &fixed, &field_of(&waiting, &fixed_taken)),
        1
    );
    let released = Instant::now();
    renewed_guard.unlock().await.unwrap();
    let renewed_taken = common::woken_promptly(renewed_waiter, released, "watchdog lease").await;
    assert_eq!(
        raw_holds(primary, &renewed, &field_of(&waiting, &renewed_taken)),
        1
    );
    fixed_taken.unlock().await.unwrap();
    renewed_taken.unlock().await.unwrap();
    assert!(!raw_exists(primary, &fixed));
    assert!(!raw_exists(primary, &renewed));

    // New acquisitions go to the new primary and exclude each other.
    let fresh = format!("{prefix}:fresh");
    let taken = taken_excluding(primary, &fresh, [&holder, &waiting], "a fresh lock is free").await;
    taken.unlock().await.unwrap();
    let taken = taken_excluding(primary, &fresh, [&waiting, &holder], "released, it is free").await;
    taken.unlock().await.unwrap();

    common::faults::assert_no_leaks(primary, &[&holder, &waiting], &[&renewed, &fixed, &fresh])
        .await;
    holder.shutdown().await.unwrap();
    waiting.shutdown().await.unwrap();
    eprintln!("whole test took {:?}", started.elapsed());
}

/// An election watched through Sentinel across a failover: the watch sees every change once
/// and in order, those before the failover (read from the old primary) and after it (from the
/// promoted replica, which has the history the old primary replicated), with no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_watch_sees_every_change_once_across_a_sentinel_failover() {
    use futures::StreamExt;
    let sentinels = Sentinels::start();
    let url = sentinels.url();
    let old = sentinels.primary_port();
    let (leader, watcher) = (connect(&url).await, connect(&url).await);
    let name = common::prefix("sentinel_election");
    let history = format!("relock_election_log:{{relock_election:{name}}}");
    let mut watch = watcher.election(&name).watch();
    // Polled once before the first change: it starts there (the newest change at its first
    // read), so it sees every change after.
    let quiet = tokio::time::timeout(Duration::from_millis(200), watch.next()).await;
    assert!(
        quiet.is_err(),
        "an election never led has nothing to report"
    );
    let term = leader.election(&name).campaign().await.unwrap();
    term.proclaim("before").await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        seen.push(next_change(&mut watch).await);
    }
    let replicated = eventually(Duration::from_secs(5), || async {
        common::resp_int(&sentinels.replica().cmd(&["XLEN", &history])) == 2
    })
    .await;
    assert!(replicated, "the history never reached the replica");

    let new = tokio::task::block_in_place(|| {
        let new = sentinels.failover();
        sentinels.demote_old_primary();
        new
    });
    assert_ne!(new, old);
    term.resign().await.unwrap();
    let next_term = watcher.election(&name).campaign().await.unwrap();
    let next_epoch = next_term.epoch();
    assert!(next_epoch > 1);
    next_term.resign().await.unwrap();
    for _ in 0..3 {
        seen.push(next_change(&mut watch).await);
    }
    let places: Vec<u64> = seen.iter().map(relock::Change::seq).collect();
    assert_eq!(places, [1, 2, 3, 4, 5], "{seen:?}");
    assert!(
        matches!(
            seen[2],
            relock::Change::Vacant {
                epoch: 1,
                reason: relock::Vacancy::Resigned,
                ..
            }
        ),
        "{seen:?}"
    );
    assert!(
        matches!(seen[3], relock::Change::Elected { epoch, .. } if epoch == next_epoch),
        "{seen:?}"
    );
    let again = tokio::time::timeout(Duration::from_millis(300), watch.next()).await;
    assert!(again.is_err(), "a change came twice: {again:?}");
    assert_eq!(
        common::resp_int(&sentinels.server(new).cmd(&["XLEN", &history])),
        5
    );
    leader.shutdown().await.unwrap();
    watcher.shutdown().await.unwrap();
}

/// The next change of `watch`, which must come within [`common::HANG`].
async fn next_change(watch: &mut relock::Watch) -> relock::Change {
    use futures::StreamExt;
    let change = tokio::time::timeout(common::HANG, watch.next()).await;
    change.expect("no change came").unwrap().unwrap()
}
