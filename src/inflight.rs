//! Acquires and releases in flight, per lock and holder field.
//!
//! A release that leaves holds behind writes a replay key, so its retry after a lost reply
//! replays instead of counting twice. The *last* release mostly writes none: that would cost the
//! server a write and a delete on every lock + unlock pair. Its retry then finds the field gone,
//! or finds it there, and must tell three cases apart without the key:
//!
//! - the first send freed the lock: the field is gone, and the release succeeded;
//! - the hold lapsed (or was force-unlocked) before the first send ran: the field is gone too.
//!   The release writes a replay key after all whenever the hold could lapse before its last
//!   retry (a short fixed lease), so this can only be a force-unlock in the same moment as the
//!   lost reply, which goes unreported;
//! - a new hold of the same owner came in between: the field is there again, and the retry would
//!   release it. The counts kept here rule this out: an acquire waits while a release of the same
//!   lock by the same owner is in flight, and a release that starts while an acquire of the same
//!   lock by the same owner is in flight asks for a replay key, as that acquire may run after it.
//!
//! The owner's holds are the only ones with its field, so no other hold can be found by a retry.
//! Both counts are kept under one mutex, so an acquire and a release that start at once are
//! ordered one way or the other. Releases never wait, so nothing here can deadlock.
//!
//! Counts are kept per [`Fingerprint`] of the lock name and holder field, computed once per
//! `lock()` call, so the bookkeeping costs every acquire and release a mutex and no hashing of
//! strings. Two pairs with the same fingerprint would only share counts: an acquire could wait
//! for a release of the other, or a release write a replay key it did not need, never the
//! reverse.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// A 64-bit hash of a lock name and holder field, the key of the counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Fingerprint(u64);

impl Fingerprint {
    pub(crate) fn of(name: &str, field: &str) -> Fingerprint {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (name, field).hash(&mut hasher);
        Fingerprint(hasher.finish())
    }
}

/// Fingerprints are hashes already: the map uses them as they are.
#[derive(Default)]
struct AsIs(u64);

impl Hasher for AsIs {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// What is in flight for each lock and holder field that has anything in flight.
#[derive(Default)]
pub(crate) struct InFlight {
    counts: Mutex<HashMap<Fingerprint, Counts, BuildHasherDefault<AsIs>>>,
    /// Told whenever a lock and field has no release in flight any more.
    settled: Notify,
}

#[derive(Default)]
struct Counts {
    acquires: u32,
    releases: u32,
    /// The longest lease asked for by the acquires in flight since `acquires` was last 0.
    acquire_lease_ms: u64,
}

/// An acquire in flight, from just before it is sent until its outcome is known (its reply, or
/// the read-back after a lost one).
pub(crate) struct Acquiring {
    in_flight: Arc<InFlight>,
    key: Fingerprint,
}

/// A release in flight, from before it is first sent until it ends, retries and all (or, for a
/// dropped `unlock()`, until the background task finishing it ends).
pub(crate) struct Releasing {
    in_flight: Arc<InFlight>,
    key: Fingerprint,
    /// An acquire of the same lock and owner was in flight when the release started: the
    /// release must write a replay key even if it frees the lock.
    pub(crate) beside_acquire: bool,
    /// The longest lease those acquires ask for (0 without any): a release that leaves holds
    /// behind keeps the lock at least this long, as such an acquire may run before it.
    pub(crate) acquire_lease_ms: u64,
}

impl InFlight {
    /// Counts an acquire of `key` with a lease of `lease_ms` in flight, once no release of `key`
    /// is.
    pub(crate) async fn acquiring(self: &Arc<Self>, key: Fingerprint, lease_ms: u64) -> Acquiring {
        if self.try_acquiring(&key, lease_ms) {
            return self.acquire_token(key);
        }
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.try_acquiring(&key, lease_ms) {
                return self.acquire_token(key);
            }
            notified.await;
        }
    }

    /// Counts an acquire of `key` unless a release of it is in flight.
    fn try_acquiring(&self, key: &Fingerprint, lease_ms: u64) -> bool {
        let mut counts = self.counts.lock().unwrap();
        let entry = counts.entry(*key).or_default();
        if entry.releases > 0 {
            return false;
        }
        entry.acquires += 1;
        entry.acquire_lease_ms = entry.acquire_lease_ms.max(lease_ms);
        true
    }

    fn acquire_token(self: &Arc<Self>, key: Fingerprint) -> Acquiring {
        Acquiring {
            in_flight: self.clone(),
            key,
        }
    }

    /// Counts a release of `key` in flight; it never waits.
    pub(crate) fn releasing(self: &Arc<Self>, key: Fingerprint) -> Releasing {
        let mut counts = self.counts.lock().unwrap();
        let entry = counts.entry(key).or_default();
        entry.releases += 1;
        let beside_acquire = entry.acquires > 0;
        let acquire_lease_ms = entry.acquire_lease_ms;
        drop(counts);
        Releasing {
            in_flight: self.clone(),
            key,
            beside_acquire,
            acquire_lease_ms,
        }
    }

    /// Takes one off `key`'s counts and drops the entry once nothing is in flight; returns the
    /// releases left.
    fn done(&self, key: &Fingerprint, count: impl FnOnce(&mut Counts)) -> u32 {
        let mut counts = self.counts.lock().unwrap();
        let Some(entry) = counts.get_mut(key) else {
            return 0;
        };
        count(entry);
        let releases = entry.releases;
        if entry.acquires == 0 && releases == 0 {
            counts.remove(key);
        }
        releases
    }

    /// How many acquires and releases are in flight, over every lock and field.
    pub(crate) fn total(&self) -> usize {
        let counts = self.counts.lock().unwrap();
        counts
            .values()
            .map(|c| c.acquires as usize + c.releases as usize)
            .sum()
    }

    /// How many locks and fields have something in flight.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.counts.lock().unwrap().len()
    }
}

impl Drop for Acquiring {
    fn drop(&mut self) {
        self.in_flight.done(&self.key, |c| {
            c.acquires -= 1;
            if c.acquires == 0 {
                c.acquire_lease_ms = 0;
            }
        });
    }
}

impl Drop for Releasing {
    fn drop(&mut self) {
        if self.in_flight.done(&self.key, |c| c.releases -= 1) == 0 {
            self.in_flight.settled.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Fingerprint {
        Fingerprint::of(name, "client:task-1")
    }

    #[tokio::test]
    async fn a_release_beside_an_acquire_asks_for_a_replay_key() {
        let in_flight = Arc::new(InFlight::default());
        let acquire = in_flight.acquiring(key("a"), 30_000).await;
        let beside = in_flight.releasing(key("a"));
        assert!(beside.beside_acquire);
        assert_eq!(
            beside.acquire_lease_ms, 30_000,
            "the acquire's lease is not known"
        );
        drop(beside);
        assert!(
            !in_flight.releasing(key("b")).beside_acquire,
            "another lock's acquire counts"
        );
        drop(acquire);
        let alone = in_flight.releasing(key("a"));
        assert!(!alone.beside_acquire);
        assert_eq!(alone.acquire_lease_ms, 0, "a spent acquire's lease is kept");
        drop(alone);
        assert_eq!(in_flight.len(), 0, "spent entries are kept");
    }

    #[tokio::test]
    async fn an_acquire_waits_for_the_releases_in_flight() {
        let in_flight = Arc::new(InFlight::default());
        let first = in_flight.releasing(key("a"));
        let second = in_flight.releasing(key("a"));
        let other = in_flight.acquiring(key("b"), 30_000).await; // another lock: no wait
        let waiting = tokio::spawn({
            let in_flight = in_flight.clone();
            async move {
                let _acquire = in_flight.acquiring(key("a"), 30_000).await;
            }
        });
        tokio::task::yield_now().await;
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "went ahead of a release in flight");
        drop(second);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("the acquire was never let go")
            .unwrap();
        drop(other);
        assert_eq!(in_flight.len(), 0, "spent entries are kept");
    }
}
