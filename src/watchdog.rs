//! Who holds what in this client, and the watchdog that keeps watchdog leases alive.
//!
//! Every live guard is counted here under its lock name and holder field. Guards taken without a
//! lease are also *renewing*: one task per client extends all of them every third of the lease,
//! many locks per script call. A renewal only extends a lock whose holder field is still there; it
//! never re-creates one. When it finds the field gone, or renewals have failed for a whole lease,
//! the holds are marked lost: their guards' `lost()` completes and a warning names the lock.
//! A release stops renewal before it sends anything, so renewal and release never race.
//!
//! Each entry also keeps the earliest moment its hold can lapse, which [`Holds::unregister`]
//! hands to the release: a last release whose hold could lapse before its last retry writes a
//! replay key (see `inflight`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::clients::Client as Redis;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::scripts;

/// A lock name and a holder field.
pub(crate) type HoldKey = (Str, Str);

struct Entry {
    /// Live guards of this field.
    guards: u32,
    /// Live guards that asked for watchdog renewal.
    renewing: u32,
    /// Tells renewal results of an older entry from this one.
    generation: u64,
    lost: watch::Sender<bool>,
    /// When the last acquire or renewal that succeeded was sent.
    confirmed_at: Instant,
    /// The earliest the hold can lapse, as the latest-sent confirmed command that set its lease
    /// tells (an acquire, a renewal or a release of one hold of several): that command's send
    /// time plus the lease it set, since the server applied it after it was sent.
    lapses_after: Instant,
    /// When the command that set `lapses_after` was sent.
    lease_sent_at: Instant,
}

impl Entry {
    /// A confirmed command sent at `sent_at` set the hold's lease to `lease`. The latest-sent
    /// one decides, as the server applied them in that order.
    fn lease_set(&mut self, sent_at: Instant, lease: Duration) {
        if sent_at >= self.lease_sent_at {
            self.lease_sent_at = sent_at;
            self.lapses_after = sent_at + lease;
        }
    }
}

/// The holds of one client.
#[derive(Default)]
pub(crate) struct Holds {
    map: Mutex<HashMap<HoldKey, Entry>>,
    next_generation: AtomicU64,
}

/// What a guard keeps of its registration.
pub(crate) struct Registration {
    pub(crate) lost: watch::Receiver<bool>,
}

impl Holds {
    /// Live guards of `key`.
    pub(crate) fn guards(&self, key: &HoldKey) -> u32 {
        self.map.lock().unwrap().get(key).map_or(0, |e| e.guards)
    }

    /// Counts a new guard; its acquire was sent at `sent_at` and set a lease of `lease`.
    pub(crate) fn register(
        &self,
        key: HoldKey,
        renew: bool,
        sent_at: Instant,
        lease: Duration,
    ) -> Registration {
        let mut map = self.map.lock().unwrap();
        let entry = map.entry(key).or_insert_with(|| Entry {
            guards: 0,
            renewing: 0,
            generation: 0,
            lost: watch::Sender::new(true),
            confirmed_at: sent_at,
            lapses_after: sent_at + lease,
            lease_sent_at: sent_at,
        });
        if *entry.lost.borrow() {
            // A fresh hold (or one after a loss): a new signal for the guards from here on.
            entry.generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
            entry.lost = watch::Sender::new(false);
            entry.renewing = 0;
            entry.confirmed_at = sent_at;
        }
        entry.guards += 1;
        if renew {
            entry.renewing += 1;
            entry.confirmed_at = entry.confirmed_at.max(sent_at);
        }
        entry.lease_set(sent_at, lease);
        Registration {
            lost: entry.lost.subscribe(),
        }
    }

    /// Forgets a guard. Called before its release is sent, so no renewal follows the release.
    /// Returns the earliest the field's hold can lapse, as far as this client knows.
    pub(crate) fn unregister(&self, key: &HoldKey, renew: bool) -> Option<Instant> {
        let mut map = self.map.lock().unwrap();
        let entry = map.get_mut(key)?;
        entry.guards = entry.guards.saturating_sub(1);
        if renew {
            entry.renewing = entry.renewing.saturating_sub(1);
        }
        let lapses_after = entry.lapses_after;
        if entry.guards == 0 {
            map.remove(key);
        }
        Some(lapses_after)
    }

    /// Notes that a release sent at `sent_at` left holds behind and set their lease to `lease`.
    pub(crate) fn lease_set(&self, key: &HoldKey, sent_at: Instant, lease: Duration) {
        if let Some(entry) = self.map.lock().unwrap().get_mut(key) {
            entry.lease_set(sent_at, lease);
        }
    }

    /// The locks to renew now, with the generation of their entry.
    fn due(&self) -> Vec<(HoldKey, u64)> {
        let map = self.map.lock().unwrap();
        map.iter()
            .filter(|(_, e)| e.renewing > 0 && !*e.lost.borrow())
            .map(|(k, e)| (k.clone(), e.generation))
            .collect()
    }

    fn renewed(&self, key: &HoldKey, generation: u64, sent_at: Instant, lease: Duration) {
        let mut map = self.map.lock().unwrap();
        if let Some(entry) = map.get_mut(key) {
            if entry.generation == generation {
                entry.confirmed_at = entry.confirmed_at.max(sent_at);
                entry.lease_set(sent_at, lease);
            }
        }
    }

    /// Marks a hold lost: its guards' `lost()` completes and renewal stops.
    fn lose(&self, key: &HoldKey, generation: u64, why: &str) {
        let mut map = self.map.lock().unwrap();
        if let Some(entry) = map.get_mut(key) {
            if entry.generation == generation && !*entry.lost.borrow() {
                entry.lost.send_replace(true);
                entry.renewing = 0;
                tracing::warn!(lock = %key.0, holder = %key.1, "lock lease lost: {why}");
            }
        }
    }

    /// Marks lost every renewing hold not confirmed for a whole lease.
    fn lose_overdue(&self, lease: Duration) {
        let now = Instant::now();
        let overdue: Vec<(HoldKey, u64)> = {
            let map = self.map.lock().unwrap();
            map.iter()
                .filter(|(_, e)| {
                    e.renewing > 0 && !*e.lost.borrow() && now >= e.confirmed_at + lease
                })
                .map(|(k, e)| (k.clone(), e.generation))
                .collect()
        };
        for (key, generation) in overdue {
            self.lose(&key, generation, "renewals failed for a whole lease");
        }
    }

    /// (holds, of which renewing) for leak checks.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let map = self.map.lock().unwrap();
        (map.len(), map.values().filter(|e| e.renewing > 0).count())
    }
}

/// What the watchdog needs to run.
pub(crate) struct Watchdog {
    pub(crate) redis: Redis,
    pub(crate) holds: Arc<Holds>,
    pub(crate) lease: Duration,
    pub(crate) batch: usize,
    /// Cluster: one script's keys must share a slot, so batches are built per slot.
    pub(crate) per_slot: bool,
}

impl Watchdog {
    /// Renews every third of the lease until `shutdown` changes or is dropped.
    pub(crate) async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let period = self.lease / 3;
        let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = ticks.tick() => self.renew_all().await,
            }
        }
    }

    async fn renew_all(&self) {
        let due = self.holds.due();
        let count = due.len();
        let lease_ms = self.lease.as_millis() as u64;
        let groups: Vec<Vec<(HoldKey, u64)>> = if self.per_slot {
            let mut by_slot: HashMap<u16, Vec<(HoldKey, u64)>> = HashMap::new();
            for hold in due {
                let slot = fred::util::redis_keyslot(hold.0 .0.as_bytes());
                by_slot.entry(slot).or_default().push(hold);
            }
            by_slot.into_values().collect()
        } else {
            vec![due]
        };
        let batches = groups
            .iter()
            .flat_map(|group| group.chunks(self.batch))
            .map(|batch| async move {
            let locks: Vec<HoldKey> = batch.iter().map(|(k, _)| k.clone()).collect();
            let sent_at = Instant::now();
            match scripts::renew(&self.redis, &locks, lease_ms).await {
                Ok(renewed) => {
                    for ((key, generation), ok) in batch.iter().zip(renewed) {
                        if ok {
                            self.holds.renewed(key, *generation, sent_at, self.lease);
                        } else {
                            self.holds
                                .lose(key, *generation, "the lock is gone (expired or deleted)");
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, locks = batch.len(), "lock renewal failed; retrying next period");
                }
            }
        });
        futures::future::join_all(batches)
            .instrument(tracing::debug_span!("relock.renew", locks = count))
            .await;
        self.holds.lose_overdue(self.lease);
    }
}
