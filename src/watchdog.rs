//! The watchdog: one task per client renews every watchdog hold every third of the lease, many
//! locks per script call (per slot on a cluster). A renewal only extends a lock whose holder field
//! is still there; it never re-creates one. What it finds goes to the registry of holds
//! (`holds`), which tells the guards.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::connection::Connection;
use crate::meter::Renewed;
use crate::registry::{Held, HoldKey, Registry};

/// Holds renewed together: a type that renews them, and each hold with its generation.
type Renewals = (Arc<dyn Held>, Vec<(HoldKey, u64)>);

/// What the watchdog needs to run.
pub(crate) struct Watchdog {
    pub(crate) redis: Connection,
    pub(crate) registry: Arc<Registry>,
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
                due = ticks.tick() => {
                    // A runtime too busy to run the watchdog on time loses leases: it shows here first.
                    self.registry.meter.renewal_lag(Instant::now().saturating_duration_since(due));
                    self.renew_all().await
                }
            }
        }
    }

    async fn renew_all(&self) {
        let due = self.registry.due();
        let count = due.len();
        let lease_ms = crate::config::ceil_millis(self.lease) as u64;
        // One call renews the holds of one renewal (as their types name it), on one slot.
        let mut groups: HashMap<(&'static str, u16), Renewals> = HashMap::new();
        for (key, generation, held) in due {
            let slot = if self.per_slot {
                fred::util::redis_keyslot(key.0.as_bytes())
            } else {
                0
            };
            groups
                .entry((held.renewal(), slot))
                .or_insert_with(|| (held.clone(), Vec::new()))
                .1
                .push((key, generation));
        }
        let batches = groups
            .values()
            .flat_map(|(held, group)| group.chunks(self.batch).map(move |b| (held, b)))
            .map(|(held, batch)| async move {
            let locks: Vec<HoldKey> = batch.iter().map(|(k, _)| k.clone()).collect();
            let sent_at = Instant::now();
            match held.renew(&self.redis, &locks, lease_ms).await {
                Ok(renewed) => {
                    for ((key, generation), ok) in batch.iter().zip(renewed) {
                        let meter = &self.registry.meter;
                        if ok {
                            meter.renewed(Renewed::Extended);
                            self.registry.renewed(key, *generation, sent_at);
                        } else {
                            self.registry.found_gone(key, *generation);
                        }
                    }
                }
                Err(error) => {
                    for _ in batch {
                        self.registry.meter.renewed(Renewed::Failed);
                    }
                    tracing::warn!(%error, locks = batch.len(), "lock renewal failed; retrying next period");
                }
            }
        });
        futures::future::join_all(batches)
            .instrument(tracing::debug_span!("relock.renew", locks = count))
            .await;
        self.registry.lose_lapsed();
    }
}
