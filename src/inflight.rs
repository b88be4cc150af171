//! Acquires and releases in flight, per lock and holder field.
//!
//! A release that leaves holds behind writes a replay key, so its retry after a lost reply
//! replays instead of counting twice. The *last* release writes none: that would cost the server
//! a write and a delete on every lock + unlock pair. Its retry then finds the field gone and
//! cannot tell by itself whether its first send freed the lock, or whether a new hold of the same
//! owner came in between and is the hold it finds. This bookkeeping rules the second case out:
//!
//! - an acquire waits while a release of the same lock by the same owner is in flight;
//! - a release that starts while an acquire of the same lock by the same owner is in flight asks
//!   for a replay key even on the last hold, as that acquire may run after it.
//!
//! The owner's holds are the only ones with its field, so no other hold can be found by a retry.
//! Both counts are kept under one mutex, so an acquire and a release that start at once are
//! ordered one way or the other. Releases never wait, so nothing here can deadlock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::watchdog::HoldKey;

/// What is in flight for each lock and holder field that has anything in flight.
#[derive(Default)]
pub(crate) struct InFlight {
    counts: Mutex<HashMap<HoldKey, Counts>>,
    /// Told whenever a lock and field has no release in flight any more.
    settled: Notify,
}

#[derive(Default)]
struct Counts {
    acquires: u32,
    releases: u32,
}

/// An acquire in flight, from just before it is sent until its outcome is known (its reply, or
/// the read-back after a lost one).
pub(crate) struct Acquiring {
    in_flight: Arc<InFlight>,
    key: HoldKey,
}

/// A release in flight, from before it is first sent until it ends, retries and all (or, for a
/// dropped `unlock()`, until the background task finishing it ends).
pub(crate) struct Releasing {
    in_flight: Arc<InFlight>,
    key: HoldKey,
    /// An acquire of the same lock and owner was in flight when the release started: the
    /// release must write a replay key even if it frees the lock.
    pub(crate) beside_acquire: bool,
}

impl InFlight {
    /// Counts an acquire of `key` in flight, once no release of `key` is.
    pub(crate) async fn acquiring(self: &Arc<Self>, key: HoldKey) -> Acquiring {
        if self.try_acquiring(&key) {
            return self.acquire_token(key);
        }
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.try_acquiring(&key) {
                return self.acquire_token(key);
            }
            notified.await;
        }
    }

    /// Counts an acquire of `key` unless a release of it is in flight.
    fn try_acquiring(&self, key: &HoldKey) -> bool {
        let mut counts = self.counts.lock().unwrap();
        let entry = counts.entry(key.clone()).or_default();
        if entry.releases > 0 {
            return false;
        }
        entry.acquires += 1;
        true
    }

    fn acquire_token(self: &Arc<Self>, key: HoldKey) -> Acquiring {
        Acquiring {
            in_flight: self.clone(),
            key,
        }
    }

    /// Counts a release of `key` in flight; it never waits.
    pub(crate) fn releasing(self: &Arc<Self>, key: HoldKey) -> Releasing {
        let mut counts = self.counts.lock().unwrap();
        let entry = counts.entry(key.clone()).or_default();
        entry.releases += 1;
        let beside_acquire = entry.acquires > 0;
        drop(counts);
        Releasing {
            in_flight: self.clone(),
            key,
            beside_acquire,
        }
    }

    /// Takes one off `key`'s counts; drops the entry once nothing is in flight.
    fn done(&self, key: &HoldKey, count: impl FnOnce(&mut Counts)) -> Option<Counts> {
        let mut counts = self.counts.lock().unwrap();
        let entry = counts.get_mut(key)?;
        count(entry);
        let left = Counts {
            acquires: entry.acquires,
            releases: entry.releases,
        };
        if left.acquires == 0 && left.releases == 0 {
            counts.remove(key);
        }
        Some(left)
    }

    /// How many locks and fields have something in flight.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.counts.lock().unwrap().len()
    }
}

impl Drop for Acquiring {
    fn drop(&mut self) {
        self.in_flight.done(&self.key, |c| c.acquires -= 1);
    }
}

impl Drop for Releasing {
    fn drop(&mut self) {
        let left = self.in_flight.done(&self.key, |c| c.releases -= 1);
        if left.is_some_and(|left| left.releases == 0) {
            self.in_flight.settled.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> HoldKey {
        (name.to_owned().into(), "client:task-1".into())
    }

    #[tokio::test]
    async fn a_release_beside_an_acquire_asks_for_a_replay_key() {
        let in_flight = Arc::new(InFlight::default());
        let acquire = in_flight.acquiring(key("a")).await;
        assert!(in_flight.releasing(key("a")).beside_acquire);
        assert!(
            !in_flight.releasing(key("b")).beside_acquire,
            "another lock's acquire counts"
        );
        drop(acquire);
        assert!(!in_flight.releasing(key("a")).beside_acquire);
        assert_eq!(in_flight.len(), 0, "spent entries are kept");
    }

    #[tokio::test]
    async fn an_acquire_waits_for_the_releases_in_flight() {
        let in_flight = Arc::new(InFlight::default());
        let first = in_flight.releasing(key("a"));
        let second = in_flight.releasing(key("a"));
        let other = in_flight.acquiring(key("b")).await; // another lock: no wait
        let waiting = tokio::spawn({
            let in_flight = in_flight.clone();
            async move {
                let _acquire = in_flight.acquiring(key("a")).await;
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
