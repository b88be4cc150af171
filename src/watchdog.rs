//! The watchdog: one task per client renews every watchdog hold every third of its lease (the
//! client's watchdog timeout, or a lease of the hold's own), many locks per script call (per
//! lease, and per slot on a cluster). It wakes when the first lock is due (the registry keeps
//! when each is, see `Registry::due`) and renews with it the locks due soon after, so locks due
//! about the same time share their calls. A renewal only extends a lock whose holder
//! field is still there; it never re-creates one. What it finds goes to the registry of holds
//! (`holds`), which tells the guards.
//!
//! With replica sync on, renewals go on the replica-sync connection, each batch followed there by
//! `WAIT 1 <timeout>` (which covers every write that connection sent before it), and a renewal
//! moves its holds' local deadline only once a replica acknowledged it: a failover to that
//! replica then keeps every lease at least as long as its holder believes. A renewal the primary
//! confirmed but no replica acknowledged in time leaves the deadline where it was; the next one
//! may move it, and past it the hold is lost as for a late renewal.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use fred::interfaces::{ClientLike, ServerInterface};
use fred::types::config::Options;
use fred::types::ClusterHash;

use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::meter::Renewed;
use crate::registry::{Held, HoldKey, Registry, Renewal};
use crate::shared::ReplicaSync;

/// Holds renewed together: a type that renews them, and each hold with its generation.
type Renewals = (Arc<dyn Held>, Vec<(HoldKey, u64)>);

/// What one script call renews: the renewal (as the types name it), the cluster slot and the
/// lease in ms.
type Group = (&'static str, u16, u64);

/// What the watchdog needs to run.
pub(crate) struct Watchdog {
    pub(crate) redis: Connection,
    pub(crate) registry: Arc<Registry>,
    /// The client's watchdog timeout: the lease of a hold without one of its own.
    pub(crate) lease: Duration,
    pub(crate) batch: usize,
    /// Cluster: one script's keys must share a slot, so batches are built per slot.
    pub(crate) per_slot: bool,
    /// With replica sync on: the connection renewals go on instead of `redis`, each batch
    /// followed by a `WAIT` there, and its timeout.
    pub(crate) replica_sync: Option<ReplicaSync>,
}

impl Watchdog {
    /// Renews each watchdog hold every third of its lease until `shutdown` changes or is
    /// dropped. With nothing to renew it still wakes every third of the client's lease, so a
    /// hold with that lease registered meanwhile is never due before the watchdog wakes (one
    /// with a shorter lease wakes it, see `Registry::due_sooner`).
    pub(crate) async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let idle = self.lease / 3;
        let mut next = Instant::now() + idle;
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                () = self.registry.due_sooner() => {
                    if let Some(due) = self.registry.next_due() {
                        next = next.min(due);
                    }
                }
                () = tokio::time::sleep_until(next) => {
                    // A runtime too busy to run the watchdog on time loses leases: it shows here first.
                    let now = Instant::now();
                    self.registry.meter.renewal_lag(now.saturating_duration_since(next));
                    // No later than a third of the client's lease after the round's start: a
                    // hold registered since is due no sooner (unless it has a shorter lease). A
                    // round that ran past that goes on at once.
                    let idle_until = now + idle;
                    let due = self.renew_all(now).await;
                    next = due.map_or(idle_until, |due| due.min(idle_until));
                }
            }
        }
    }

    /// Renews the locks due at `now`; when the next one is due.
    async fn renew_all(&self, now: Instant) -> Option<Instant> {
        let (due, next) = self.registry.due(now);
        let count = due.len();
        // One call renews the holds of one renewal (as their types name it), on one slot, with
        // one lease.
        let mut groups: HashMap<Group, Renewals> = HashMap::new();
        for (key, generation, held, lease) in due {
            let slot = if self.per_slot {
                fred::util::redis_keyslot(key.0.as_bytes())
            } else {
                0
            };
            let lease_ms = crate::config::ceil_millis(lease) as u64;
            groups
                .entry((held.renewal(), slot, lease_ms))
                .or_insert_with(|| (held.clone(), Vec::new()))
                .1
                .push((key, generation));
        }
        let batches = groups
            .iter()
            .flat_map(|(&(_, slot, lease_ms), (held, group))| {
                group
                    .chunks(self.batch)
                    .map(move |batch| self.renew(held, slot, batch, lease_ms))
            });
        futures::future::join_all(batches)
            .instrument(tracing::debug_span!("relock.renew", locks = count))
            .await;
        self.registry.lose_lapsed();
        next
    }

    /// Renews one batch of holds of one type (on one slot), and reports each to the registry.
    async fn renew(
        &self,
        held: &Arc<dyn Held>,
        slot: u16,
        batch: &[(HoldKey, u64)],
        lease_ms: u64,
    ) {
        let locks: Vec<HoldKey> = batch.iter().map(|(k, _)| k.clone()).collect();
        // With replica sync, on the connection the WAIT goes on: a WAIT covers only what its
        // own connection wrote.
        let redis = self.replica_sync.as_ref().map_or(&self.redis, |s| &s.redis);
        let sent_at = Instant::now();
        let meter = &self.registry.meter;
        let renewal = Renewal {
            redis,
            locks: &locks,
            lease_ms,
        };
        let renewed = match held.renew(renewal).await {
            Ok(renewed) => renewed,
            Err(error) => {
                for _ in batch {
                    meter.renewed(Renewed::Failed);
                }
                tracing::warn!(%error, locks = batch.len(), "lock renewal failed; retrying next period");
                return;
            }
        };
        let extended = renewed.iter().filter(|&&ok| ok).count();
        let replicated = match &self.replica_sync {
            Some(sync) if extended > 0 => match replica_acknowledged(sync, slot).await {
                Ok(acknowledged) => acknowledged,
                Err(error) => {
                    tracing::warn!(%error, locks = extended, "waiting for a replica to have the renewals failed; the leases count from the last acknowledged one");
                    false
                }
            },
            _ => true,
        };
        if !replicated {
            tracing::debug!(locks = extended, "no replica acknowledged the renewals in time; the leases count from the last acknowledged one");
        }
        for ((key, generation), ok) in batch.iter().zip(renewed) {
            if !ok {
                self.registry.found_gone(key, *generation);
            } else if replicated {
                meter.renewed(Renewed::Extended);
                let lease = Duration::from_millis(lease_ms);
                self.registry.renewed(key, *generation, sent_at, lease);
            } else {
                // The deadline stays: a failover to the replica may lose this renewal.
                meter.renewed(Renewed::Unreplicated);
            }
        }
    }
}

/// `WAIT 1 <timeout>` on the replica-sync connection (on a cluster, to the node serving `slot`):
/// whether a replica acknowledged every write that connection sent before it (to that node).
pub(crate) async fn replica_acknowledged(sync: &ReplicaSync, slot: u16) -> Result<bool> {
    let options = Options {
        cluster_hash: Some(ClusterHash::Custom(slot)),
        timeout: Some(sync.redis.timeout + Duration::from_millis(sync.timeout_ms)),
        max_attempts: Some(1),
        ..Default::default()
    };
    let acked: i64 = sync
        .redis
        .with_options(&options)
        .wait(1, sync.timeout_ms as i64)
        .await
        .map_err(|e| Error::redis(e, &sync.redis.server))?;
    Ok(acked >= 1)
}
