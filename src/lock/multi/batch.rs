//! The multi-lock's fast path: several holds of plain [`Lock`](crate::Lock)s, taken by one
//! script in one round trip ([`try_all`]) and released by one ([`release_all`]).
//!
//! A batch is a set of holds that one script can take: at least one, all of the plain lock
//! (whose type `batches`; it claims nothing here), on one client (one `Shared`), with one
//! holder field (one owner) and one lease, on distinct lock names, and in one cluster slot when
//! the client is clustered. The callers (the multi-lock) make sure of it; debug builds assert it.
//!
//! Each part keeps every guarantee of a single attempt ([`Hold::try_once`] and the guard made
//! from it) and of [`LockGuard::unlock`]; both paths share their pieces (`attempt::Sending`,
//! `release::Outgoing`), so this file only says what changes when the parts travel together:
//!
//! - the acquire waits for the owner's releases in flight of every part before it is sent, and
//!   keeps one armed orphan check per part until its outcome is known;
//! - a lost reply is resolved by reading back the first part: the script is atomic, so what
//!   it did to one part it did to all;
//! - with replica sync, one `WAIT` after the script covers every part's write;
//! - the release writes a replay key for every part that keeps holds, and for a last release
//!   when the plain lock's rule asks for one (see `Hold::release_as` and `inflight`) for any
//!   part; a retry (or the background release of a cancelled `release_all`, one single release
//!   per part under the same request id) replays each part's result, or finds a freed part's
//!   field gone, which the rule makes a sure sign of its first send.

use std::time::Duration;

use fred::types::Key;
use tokio::time::Instant;
use tracing::Instrument;

use super::scripts;
use crate::error::Result;
use crate::lock::attempt::Sending;
use crate::lock::guard::LockGuard;
use crate::lock::kind::Hold;
use crate::lock::release::{Outgoing, ReleaseAs, ResumeRelease};
use crate::names::LockKeys;
use crate::wait::until_answered;

/// What one attempt at a batch found.
pub(crate) enum BatchAttempt {
    /// Every part was taken: their guards, in the order of the holds.
    Acquired(Vec<LockGuard>),
    /// Nothing was taken. `index` is the first part (0-based, in the order of the holds) found
    /// busy, and `retry` the most to wait before trying again, as [`Hold::try_once`] reports it
    /// for that part (`None`: no bound known, a lock without expiry). An answer that came after
    /// the lease could have lapsed reports part 0 with a zero `retry`: what it took is being
    /// given back, and the caller tries again.
    Busy {
        index: usize,
        // The multi-lock waits for the busy part by that part's own attempts, which learn it.
        #[allow(dead_code)]
        retry: Option<Duration>,
    },
}

/// One attempt at all of `holds` (a batch, see the module docs) by one script: every part taken,
/// or none. An empty batch is taken at once.
///
/// Each part as [`Hold::try_once`] with [`Ask::Now`](crate::lock::kind::Ask::Now) and the guard that
/// `wait` makes of it: it waits for the owner's releases of each part still in flight, registers
/// each part with the client's registry of holds (the watchdog renews a watchdog lease), and,
/// with replica sync on, waits for one replica to have the holds (one `WAIT` for all), else
/// releases them all and fails with [`Error::NotReplicated`](crate::Error::NotReplicated).
///
/// # Errors
///
/// As [`Lock::try_lock`](crate::Lock::try_lock): a `WRONGTYPE` names the first part that is not
/// a lock hash (nothing was taken).
///
/// # Cancel safety
///
/// Cancel safe: dropped while the script is in flight, each part's orphan check gives back,
/// in the background, the hold a lost reply may have taken.
pub(crate) async fn try_all(holds: &[Hold]) -> Result<BatchAttempt> {
    debug_assert_batch(holds.iter());
    let Some(first) = holds.first() else {
        return Ok(BatchAttempt::Acquired(Vec::new()));
    };
    let shared = &first.shared;
    shared.check_open()?;
    // With replica sync the acquire goes on the connection its WAIT will go on.
    let redis = shared.acquire_connection();
    // Every part's gate first, then every part's orphan check, just before the script goes
    // out: cancelled while it waits, the batch has sent nothing and leaves nothing to check.
    let mut gates = Vec::with_capacity(holds.len());
    for hold in holds {
        gates.push(Sending::gate(hold).await);
    }
    let sending: Vec<Sending<'_>> = holds
        .iter()
        .zip(gates)
        .map(|(hold, gate)| Sending::arm(hold, gate))
        .collect();
    let parts: Vec<&LockKeys> = holds.iter().map(|hold| &*hold.keys).collect();
    let window = shared.claim_window_ms;
    let sent_at = Instant::now();
    let outcome = scripts::acquire(redis, &parts, first.lease_ms, &first.field, window);
    // Boxed, like every script call a waiting acquire makes: fred's command future is large.
    match Box::pin(outcome).await {
        Ok(None) => {}
        Ok(Some((index, retry_ms))) => {
            sending.into_iter().for_each(Sending::not_taken);
            return Ok(BatchAttempt::Busy {
                index,
                retry: u64::try_from(retry_ms).ok().map(Duration::from_millis),
            });
        }
        // The script takes all or none: the first part's read-back tells for every part.
        Err(error) if error.is_ambiguous() => match sending[0].read_back(redis).await {
            Ok(true) => {}
            Ok(false) => {
                sending.into_iter().for_each(Sending::not_taken);
                return Err(error);
            }
            Err(_) => return Err(error),
        },
        Err(error) => {
            sending.into_iter().for_each(Sending::not_taken);
            return Err(error);
        }
    }
    if first.answered_late(sent_at) {
        // Every part's orphan check gives its hold back; the caller tries again.
        drop(sending);
        return Ok(BatchAttempt::Busy {
            index: 0,
            retry: Some(Duration::ZERO),
        });
    }
    let guards: Vec<LockGuard> = sending
        .into_iter()
        .zip(holds)
        .map(|(part, hold)| LockGuard::new(hold.clone(), part.taken(sent_at), None))
        .collect();
    tracing::debug!(lock = %first.keys.name, parts = guards.len(), owner = %first.owner, "locks acquired together");
    if let Some(sync) = &shared.replica_sync {
        // One WAIT covers every write sent before it on the connection: all the parts.
        if let Err(unsynced) = Box::pin(first.await_replica(sync)).await {
            for outcome in Box::pin(release_all(guards)).await {
                if let Err(error) = outcome {
                    tracing::warn!(%error, "could not release an unreplicated hold; it expires with its lease");
                }
            }
            return Err(unsynced);
        }
    }
    Ok(BatchAttempt::Acquired(guards))
}

/// Releases every guard of `guards` (a batch, see the module docs) by one script, and reports
/// each part's outcome, in order: what [`LockGuard::unlock`] reports for that guard alone.
///
/// Each part as `unlock`: its renewal stops before anything is sent; a part whose hold was
/// lost and taken again by the owner is not sent and reports
/// [`Error::LeaseLost`](crate::Error::LeaseLost); a part held no more reports `LeaseLost` or
/// [`Error::NotHeld`](crate::Error::NotHeld); a part whose owner keeps holds of the lock gets
/// the TTL they need; a freed part publishes its wake-up and leaves the plain lock's hand-off
/// grace. A reply Redis may or may not have applied is retried under the same request ids, and
/// counts once for every part, as a single release does. An error of the script as a whole
/// is every part's that was sent.
///
/// # Cancel safety
///
/// Cancel safe: dropped mid-flight, each part's release is finished in the background (as a
/// single release under the part's request id, which replays what the script did), and the
/// owner's acquires of the part wait for it.
pub(crate) async fn release_all(mut guards: Vec<LockGuard>) -> Vec<Result<()>> {
    debug_assert_batch(guards.iter().map(LockGuard::hold));
    let mut results: Vec<Option<Result<()>>> = (0..guards.len()).map(|_| None).collect();
    // (index, was_lost, lapses_after) of the parts to send.
    let mut leaving = Vec::with_capacity(guards.len());
    for (i, guard) in guards.iter_mut().enumerate() {
        match guard.leave() {
            Ok((was_lost, lapses_after)) => leaving.push((i, was_lost, lapses_after)),
            Err(error) => results[i] = Some(Err(error)),
        }
    }
    if let Some(&(first, ..)) = leaving.first() {
        let shared = &guards[first].hold().shared;
        let replays: Vec<Key> = leaving
            .iter()
            .map(|&(i, ..)| guards[i].hold().keys.replay_key(&shared.id))
            .collect();
        // Dropped mid-flight, each part's release is finished in the background under its
        // request id; each stays counted in flight till then.
        let mut resumes: Vec<ResumeRelease<'_>> = leaving
            .iter()
            .zip(&replays)
            .map(|(&(i, _, lapses_after), replay)| {
                let hold = guards[i].hold();
                ResumeRelease {
                    pending: Some((hold, hold.releasing())),
                    replay,
                    lapses_after,
                }
            })
            .collect();
        let mut outgoing: Vec<Outgoing<'_>> = resumes
            .iter()
            .map(|resume| {
                let (hold, releasing) = resume.pending.as_ref().expect("set above");
                let how = ReleaseAs {
                    redis: None,
                    replay: resume.replay,
                    sent_before: false,
                    lapses_after: Some(resume.lapses_after),
                };
                hold.outgoing(&how, releasing, false)
            })
            .collect();
        // One flag for the script: the parts' last releases write replay keys when any part's
        // rule asks for one (see `Hold::release_as`), as a single release of that part would.
        let replay_last = outgoing.iter().any(|part| part.replay_last);
        for part in &mut outgoing {
            part.replay_last = replay_last;
        }
        let hold = guards[first].hold();
        let parts: Vec<&LockKeys> = leaving
            .iter()
            .map(|&(i, ..)| &*guards[i].hold().keys)
            .collect();
        let latch_refs: Vec<&Key> = replays.iter().collect();
        let keep_ms: Vec<u64> = outgoing.iter().map(|part| part.keep_ms).collect();
        // One replay TTL for the script: the longest any part's rule asks for.
        let replay_ttl_ms = outgoing.iter().map(|part| part.replay_ttl_ms).max();
        let send = |sent_before| {
            let mut how = outgoing[0].script(sent_before);
            how.replay_ttl_ms = replay_ttl_ms.unwrap_or(how.replay_ttl_ms);
            let (parts, replays, keep_ms) = (&parts, &latch_refs, &keep_ms);
            async move {
                let release =
                    scripts::release(&shared.redis, parts, replays, &hold.field, keep_ms, &how);
                // Boxed: fred's command future is large.
                Box::pin(release).await
            }
        };
        let span = tracing::debug_span!("relock.release_all", lock = %hold.keys.name, holder = %hold.field, parts = parts.len());
        let (outcome, sent_before) = until_answered(false, send).instrument(span).await;
        for (j, &(i, was_lost, _)) in leaving.iter().enumerate() {
            let released = match &outcome {
                Ok(released) => outgoing[j].settle(released[j], sent_before),
                Err(error) => Err(error.clone()),
            };
            outgoing[j].count(&released, sent_before);
            results[i] = Some(guards[i].verdict(released, was_lost));
        }
        drop(outgoing);
        for resume in &mut resumes {
            resume.pending = None;
        }
    }
    results
        .into_iter()
        .map(|result| result.expect("every part has its outcome"))
        .collect()
}

/// Asserts, in debug builds, that `holds` make a batch (see the module docs).
fn debug_assert_batch<'a>(holds: impl Iterator<Item = &'a Hold> + Clone) {
    if !cfg!(debug_assertions) {
        return;
    }
    use fred::interfaces::ClientLike;
    let mut all = holds.clone();
    let Some(first) = all.next() else {
        return;
    };
    let clustered = first.shared.redis.is_clustered();
    let slot = |hold: &Hold| fred::util::redis_keyslot(hold.keys.name.as_bytes());
    for (i, hold) in holds.enumerate() {
        assert!(
            std::sync::Arc::ptr_eq(&hold.shared, &first.shared),
            "a batch is on one client"
        );
        assert!(hold.kind.batches(), "a batch is of plain locks");
        assert!(hold.field == first.field, "a batch has one owner");
        assert!(
            hold.lease == first.lease && hold.lease_ms == first.lease_ms,
            "a batch has one lease"
        );
        assert!(
            !clustered || slot(hold) == slot(first),
            "a batch is in one cluster slot"
        );
        assert!(
            all.clone()
                .skip(i)
                .all(|other| other.keys.name != hold.keys.name),
            "a batch has distinct locks: `{}` twice",
            hold.keys.name
        );
    }
}

/// A smoke run of the batch path against a real server (feature `testing`, which relock's own
/// tests turn on): the public tests reach it through the multi-lock.
#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::testing::RedisServer;
    use crate::{Client, Config, Lock, Owner};

    async fn client(server: &RedisServer) -> Client {
        let config = Config::from_url(&server.url())
            .unwrap()
            .with_watchdog_timeout(Duration::from_secs(3))
            .with_command_timeout(Duration::from_secs(2));
        Client::new(config).await.unwrap()
    }

    fn holds(locks: &[Lock], lease: Option<Duration>) -> Vec<Hold> {
        locks
            .iter()
            .map(|lock| lock.handle.hold(lease).unwrap())
            .collect()
    }

    async fn counts(locks: &[Lock]) -> Vec<u64> {
        let mut counts = Vec::new();
        for lock in locks {
            counts.push(lock.hold_count().await.unwrap());
        }
        counts
    }

    fn acquired(attempt: BatchAttempt) -> Vec<LockGuard> {
        match attempt {
            BatchAttempt::Acquired(guards) => guards,
            BatchAttempt::Busy { index, retry } => panic!("busy at {index} ({retry:?})"),
        }
    }

    #[tokio::test]
    async fn a_batch_is_taken_renewed_re_entered_and_released_together() {
        let server = RedisServer::start().unwrap();
        let client = client(&server).await;
        let owner = Owner::new();
        let locks: Vec<Lock> = ["{b}:1", "{b}:2", "{b}:3"]
            .into_iter()
            .map(|name| client.lock(name).owned_by(owner.clone()))
            .collect();
        let outer = acquired(try_all(&holds(&locks, None)).await.unwrap());
        assert_eq!(outer.len(), 3);
        assert_eq!(counts(&locks).await, [1, 1, 1]);
        assert_eq!(client.stats().renewing, 3, "the watchdog renews every part");
        // Past the watchdog timeout, the parts are still held: renewed.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(outer.iter().all(|guard| !guard.is_lost()));
        assert_eq!(counts(&locks).await, [1, 1, 1]);

        // Re-entered with a fixed lease; the single path sees the same holds.
        let lease = Some(Duration::from_secs(20));
        let inner = acquired(try_all(&holds(&locks, lease)).await.unwrap());
        assert_eq!(counts(&locks).await, [2, 2, 2]);
        let single = locks[1].lock().await.unwrap();
        assert_eq!(locks[1].hold_count().await.unwrap(), 3);
        single.unlock().await.unwrap();

        let released = release_all(inner).await;
        assert!(released.iter().all(Result::is_ok), "{released:?}");
        assert_eq!(counts(&locks).await, [1, 1, 1]);
        let released = release_all(outer).await;
        assert!(released.iter().all(Result::is_ok), "{released:?}");
        for lock in &locks {
            assert!(!lock.is_locked().await.unwrap());
        }
        assert_eq!(client.stats().holds, 0);
        client.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn a_busy_part_takes_nothing_and_a_lost_part_reports_itself() {
        let server = RedisServer::start().unwrap();
        let client = client(&server).await;
        let (me, other) = (Owner::new(), Owner::new());
        let names = ["{c}:1", "{c}:2", "{c}:3"];
        let locks: Vec<Lock> = names
            .into_iter()
            .map(|name| client.lock(name).owned_by(me.clone()))
            .collect();
        let theirs = client.lock(names[1]).owned_by(other.clone());
        let held = theirs
            .lock_with_lease(Duration::from_secs(10))
            .await
            .unwrap();
        match try_all(&holds(&locks, None)).await.unwrap() {
            BatchAttempt::Busy { index, retry } => {
                assert_eq!(index, 1);
                let retry = retry.expect("the holder's TTL");
                assert!(retry > Duration::ZERO && retry <= Duration::from_secs(10));
            }
            BatchAttempt::Acquired(_) => panic!("took a busy part"),
        }
        assert!(!locks[0].is_locked().await.unwrap(), "a part was taken");
        assert_eq!(client.stats().holds, 1, "a part was registered");
        held.unlock().await.unwrap();

        let guards = acquired(try_all(&holds(&locks, None)).await.unwrap());
        assert!(locks[1].force_unlock().await.unwrap());
        let released = release_all(guards).await;
        assert!(released[0].is_ok() && released[2].is_ok(), "{released:?}");
        assert!(
            matches!(&released[1], Err(crate::Error::NotHeld { .. })),
            "{released:?}"
        );
        client.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn a_release_dropped_mid_flight_finishes_in_the_background() {
        use futures::FutureExt;
        let server = RedisServer::start().unwrap();
        let client = client(&server).await;
        let owner = Owner::new();
        let locks: Vec<Lock> = ["{d}:1", "{d}:2"]
            .into_iter()
            .map(|name| client.lock(name).owned_by(owner.clone()))
            .collect();
        // Twice, so the background releases must count once each to leave one hold.
        let outer = acquired(try_all(&holds(&locks, None)).await.unwrap());
        let inner = acquired(try_all(&holds(&locks, None)).await.unwrap());
        // Polled once (the script is sent) and dropped.
        assert!(release_all(inner).now_or_never().is_none());
        // The owner's next acquire waits for the background releases.
        let again = acquired(try_all(&holds(&locks, None)).await.unwrap());
        assert_eq!(counts(&locks).await, [2, 2]);
        let released = release_all(again).await;
        assert!(released.iter().all(Result::is_ok), "{released:?}");
        drop(outer); // released in the background
        for lock in &locks {
            let lock = lock.clone();
            let freed = async move {
                while lock.is_locked().await.unwrap() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            tokio::time::timeout(Duration::from_secs(5), freed)
                .await
                .expect("a dropped guard's part was never released");
        }
        client.shutdown().await.unwrap();
    }
}
