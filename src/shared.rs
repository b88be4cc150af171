//! What every lock of a client shares, and the only view of the client that lock code has.
//!
//! [`Client`](crate::Client) builds it and hands it out; each lock type, the watchdog and the
//! background jobs read it. Nothing here knows about any lock type.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::ClientLike;
use tokio::sync::watch;

use crate::background::Background;
use crate::background::Sweeper;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::handoff::Handoffs;
use crate::owner::Owner;
use crate::pubsub::Hub;
use crate::registry::Registry;

/// What every lock of one client shares: its identity, connections, settings and background tasks.
/// Locks hold it directly, so no lock module depends on the [`Client`](crate::Client) facade.
pub(crate) struct Shared {
    /// The client id: the first half of every holder field.
    pub(crate) id: String,
    pub(crate) redis: Connection,
    /// The server's `run_id` as read at connect time (not on a cluster): one server reached
    /// under two addresses has one.
    pub(crate) server_id: Option<String>,
    pub(crate) subscriber: SubscriberClient,
    pub(crate) hub: Hub,
    /// The plain lock's hand-off graces.
    pub(crate) handoffs: Handoffs,
    pub(crate) sweeper: Sweeper,
    /// Per lock and holder field: this client's holds, its acquires and releases in flight, and
    /// its waiters' places in queues and claims on hand-offs.
    pub(crate) registry: Arc<Registry>,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) watchdog_ms: u64,
    pub(crate) command_timeout: Duration,
    /// Whether this client's waiters claim hand-offs.
    pub(crate) claims: bool,
    /// The claim window in ms: how long a claim outlives the lease it waits on, and the most a
    /// claim on a free lock may have left (the default window when this client does not claim).
    pub(crate) claim_window_ms: u64,
    /// How long a fair lock's waiter keeps its place without renewing it, in ms.
    pub(crate) fair_waiter_ms: u64,
    /// How long a semaphore's or latch's waiter sleeps without a message (see [`Shared::poll`]).
    pub(crate) poll_interval: Duration,
    /// `PUBLISH`, or `SPUBLISH` on a Redis 7 cluster.
    pub(crate) publish: &'static str,
    /// With replica sync on: the connection acquires run on, followed by `WAIT`.
    pub(crate) replica_sync: Option<ReplicaSync>,
    /// Where releases from `Drop` run.
    pub(crate) background: Background,
    pub(crate) closed: AtomicBool,
    pub(crate) shutdown: watch::Sender<bool>,
}

/// A dedicated connection for acquire + `WAIT`, so a slow `WAIT` stalls only acquires.
pub(crate) struct ReplicaSync {
    pub(crate) redis: Connection,
    pub(crate) timeout_ms: u64,
}

impl Shared {
    /// Whether the client is on a Redis Cluster, where each script's keys must share a slot.
    pub(crate) fn clustered(&self) -> bool {
        self.redis.is_clustered()
    }

    /// Where this client counts what it does (see `crate::meter`).
    pub(crate) fn meter(&self) -> &crate::meter::Meter {
        &self.registry.meter
    }

    /// `Err(Closed)` once the client has shut down.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// The holder field of `owner` in this client: `<client-uuid>:<owner>`.
    pub(crate) fn holder_field(&self, owner: &Owner) -> String {
        [&*self.id, ":", owner.id()].concat()
    }

    /// Whether this client's server is `other`'s: the same address, or the same `run_id`.
    pub(crate) fn same_server(&self, other: &Shared) -> bool {
        self.redis.server == other.redis.server
            || self.server_id.is_some() && self.server_id == other.server_id
    }

    /// How long a semaphore's or latch's waiter sleeps now without a message before it looks
    /// again: the poll interval, give or take a fifth at random, so waiters spread out.
    pub(crate) fn poll(&self) -> Duration {
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let fifth = self.poll_interval / 5;
        let spread = (fifth * 2).as_micros().max(1) as u64;
        self.poll_interval - fifth + Duration::from_micros(random % spread)
    }

    /// The connection acquires go on: with replica sync, the one its `WAIT` goes on.
    pub(crate) fn acquire_connection(&self) -> &Connection {
        self.replica_sync.as_ref().map_or(&self.redis, |s| &s.redis)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
        if !self.closed.load(Ordering::Acquire) {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                let (redis, subscriber) = ((*self.redis).clone(), self.subscriber.clone());
                let sync = self.replica_sync.as_ref().map(|s| (*s.redis).clone());
                runtime.spawn(async move {
                    let _ = subscriber.quit().await;
                    if let Some(sync) = sync {
                        let _ = sync.quit().await;
                    }
                    let _ = redis.quit().await;
                });
            }
        }
    }
}
