//! Acquires, releases and leaves of a fair lock's queue in flight, per lock and holder field.
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
//! The counts are kept under one mutex, so an acquire and a release that start at once are
//! ordered one way or the other. Releases never wait, so nothing here can deadlock.
//!
//! A fair lock's waiter that gives up leaves the queue in the background (see `lock::fair`); its
//! leave is counted here too, and the owner's next acquire of the lock waits for it as for a
//! release: that acquire may queue the owner (or keep its place), and a leave that ran after it
//! would take that place out, so a waiter that asked later would go first. A leave never waits
//! either.
//!
//! The counts are the in-flight part of the client's registry entry of the lock name and holder
//! field (see `registry`).

use std::sync::Arc;

use super::{HoldKey, Registry};

/// What is in flight for one lock and holder field.
#[derive(Default)]
pub(super) struct Counts {
    acquires: u32,
    releases: u32,
    /// Leaves of the owner's place in the lock's queue (a fair lock's).
    leaves: u32,
    /// The longest lease asked for by the acquires in flight since `acquires` was last 0.
    acquire_lease_ms: u64,
    /// The latest moment a hold whose release is in flight could lapse, since `releases` was
    /// last 0: a release that leaves holds behind must not cut the lock's TTL below it while
    /// another release is still on its way (it would find the lock expired, and the owner's
    /// hold not held).
    release_lapse: Option<tokio::time::Instant>,
}

/// An acquire in flight, from just before it is sent until its outcome is known (its reply, or
/// the read-back after a lost one).
pub(crate) struct Acquiring {
    registry: Arc<Registry>,
    key: HoldKey,
}

/// A release in flight, from before it is first sent until it ends, retries and all (or, for a
/// dropped `unlock()`, until the background task finishing it ends).
pub(crate) struct Releasing {
    registry: Arc<Registry>,
    key: HoldKey,
    /// An acquire of the same lock and owner was in flight when the release started: the
    /// release must write a replay key even if it frees the lock.
    pub(crate) beside_acquire: bool,
    /// The longest lease those acquires ask for (0 without any): a release that leaves holds
    /// behind keeps the lock at least this long, as such an acquire may run before it.
    pub(crate) acquire_lease_ms: u64,
}

/// A leave of the owner's place in a fair lock's queue in flight, from just before it is spawned
/// until it ends (on whatever runtime or thread runs it): the owner's next acquire of the lock
/// waits for it.
pub(crate) struct LeavingQueue {
    registry: Arc<Registry>,
    key: HoldKey,
}

impl Counts {
    pub(super) fn is_empty(&self) -> bool {
        self.acquires == 0 && self.releases == 0 && self.leaves == 0
    }

    /// Whether an acquire must wait: a release or a leave of the owner's is in flight.
    fn holds_back(&self) -> bool {
        self.releases > 0 || self.leaves > 0
    }
}

impl Registry {
    /// Counts an acquire of `key` with a lease of `lease_ms` in flight, once no release of `key`
    /// is, nor a leave of its queue.
    pub(crate) async fn acquiring(self: &Arc<Self>, key: &HoldKey, lease_ms: u64) -> Acquiring {
        if self.try_acquiring(key, lease_ms) {
            return self.acquire_token(key);
        }
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.try_acquiring(key, lease_ms) {
                return self.acquire_token(key);
            }
            notified.await;
        }
    }

    /// Counts an acquire of `key` unless a release of it, or a leave of its queue, is in flight.
    fn try_acquiring(&self, key: &HoldKey, lease_ms: u64) -> bool {
        let mut map = self.map.lock().unwrap();
        if map.get(key).is_some_and(|e| e.in_flight.holds_back()) {
            return false;
        }
        let entry = &mut map.entry(key.clone()).or_default().in_flight;
        entry.acquires += 1;
        entry.acquire_lease_ms = entry.acquire_lease_ms.max(lease_ms);
        true
    }

    fn acquire_token(self: &Arc<Self>, key: &HoldKey) -> Acquiring {
        Acquiring {
            registry: self.clone(),
            key: key.clone(),
        }
    }

    /// Counts a release of `key` in flight; it never waits.
    pub(crate) fn releasing(self: &Arc<Self>, key: HoldKey) -> Releasing {
        let mut map = self.map.lock().unwrap();
        let entry = &mut map.entry(key.clone()).or_default().in_flight;
        entry.releases += 1;
        let beside_acquire = entry.acquires > 0;
        let acquire_lease_ms = entry.acquire_lease_ms;
        drop(map);
        Releasing {
            registry: self.clone(),
            key,
            beside_acquire,
            acquire_lease_ms,
        }
    }

    /// Counts a leave of `key`'s place in its lock's queue in flight; it never waits.
    pub(crate) fn leaving_queue(self: &Arc<Self>, key: HoldKey) -> LeavingQueue {
        let mut map = self.map.lock().unwrap();
        map.entry(key.clone()).or_default().in_flight.leaves += 1;
        drop(map);
        LeavingQueue {
            registry: self.clone(),
            key,
        }
    }

    /// Notes that the hold whose release `releasing` stands for could lapse at `at`.
    pub(crate) fn release_lapses(&self, releasing: &Releasing, at: tokio::time::Instant) {
        let mut map = self.map.lock().unwrap();
        if let Some(entry) = map.get_mut(&releasing.key) {
            let lapse = &mut entry.in_flight.release_lapse;
            *lapse = Some(lapse.map_or(at, |before| before.max(at)));
        }
    }

    /// While another release of `key` is in flight beside this one: the latest moment a hold
    /// being released could lapse, which the lock's TTL must reach. `None` for a release alone.
    pub(crate) fn other_release_lapse(&self, key: &HoldKey) -> Option<tokio::time::Instant> {
        let map = self.map.lock().unwrap();
        let counts = &map.get(key)?.in_flight;
        (counts.releases > 1)
            .then_some(counts.release_lapse)
            .flatten()
    }

    /// Whether another release of `key` is in flight beside the caller's own.
    pub(crate) fn releases_beside(&self, key: &HoldKey) -> bool {
        let map = self.map.lock().unwrap();
        map.get(key).is_some_and(|e| e.in_flight.releases > 1)
    }

    /// Takes one off `key`'s counts and forgets what is spent; returns whether nothing holds
    /// the acquires of `key` back any more (no release, no leave).
    fn done(&self, key: &HoldKey, count: impl FnOnce(&mut Counts)) -> bool {
        let mut map = self.map.lock().unwrap();
        let Some(entry) = map.get_mut(key) else {
            return true;
        };
        count(&mut entry.in_flight);
        if entry.in_flight.releases == 0 {
            entry.in_flight.release_lapse = None;
        }
        let settled = !entry.in_flight.holds_back();
        Registry::forget(&mut map, key, |_| {});
        settled
    }

    /// How many acquires, releases and leaves of a queue are in flight, over every lock and
    /// field.
    pub(crate) fn in_flight(&self) -> usize {
        let map = self.map.lock().unwrap();
        let counts = map.values().map(|e| &e.in_flight);
        counts
            .map(|c| c.acquires as usize + c.releases as usize + c.leaves as usize)
            .sum()
    }
}

impl Drop for Acquiring {
    fn drop(&mut self) {
        self.registry.done(&self.key, |c| {
            c.acquires -= 1;
            if c.acquires == 0 {
                c.acquire_lease_ms = 0;
            }
        });
    }
}

impl Drop for Releasing {
    fn drop(&mut self) {
        if self.registry.done(&self.key, |c| c.releases -= 1) {
            self.registry.settled.notify_waiters();
        }
    }
}

impl Drop for LeavingQueue {
    fn drop(&mut self) {
        if self.registry.done(&self.key, |c| c.leaves -= 1) {
            self.registry.settled.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> HoldKey {
        (name.into(), "client:task-1".into())
    }

    fn registry() -> Arc<Registry> {
        let meter = Arc::new(crate::meter::Meter::detached());
        Arc::new(Registry::new(std::time::Duration::from_secs(30), meter))
    }

    #[tokio::test]
    async fn a_release_beside_an_acquire_asks_for_a_replay_key() {
        let in_flight = registry();
        let acquire = in_flight.acquiring(&key("a"), 30_000).await;
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
        assert_eq!(in_flight.entries(), 0, "spent entries are kept");
    }

    #[tokio::test]
    async fn an_acquire_waits_for_the_releases_in_flight() {
        let in_flight = registry();
        let first = in_flight.releasing(key("a"));
        let second = in_flight.releasing(key("a"));
        let other = in_flight.acquiring(&key("b"), 30_000).await; // another lock: no wait
        let waiting = tokio::spawn({
            let in_flight = in_flight.clone();
            async move {
                let _acquire = in_flight.acquiring(&key("a"), 30_000).await;
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
        assert_eq!(in_flight.entries(), 0, "spent entries are kept");
    }

    #[tokio::test]
    async fn an_acquire_waits_for_the_leave_of_its_queue_in_flight() {
        let in_flight = registry();
        let leaving = in_flight.leaving_queue(key("a"));
        assert_eq!(in_flight.in_flight(), 1);
        let release = in_flight.releasing(key("a"));
        assert!(
            !in_flight.releases_beside(&key("a")),
            "a leave counts as a release"
        );
        drop(release);
        let waiting = tokio::spawn({
            let in_flight = in_flight.clone();
            async move {
                let _acquire = in_flight.acquiring(&key("a"), 30_000).await;
            }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "went ahead of a leave in flight");
        drop(leaving);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("the acquire was never let go")
            .unwrap();
        assert_eq!(in_flight.entries(), 0, "spent entries are kept");
    }
}
