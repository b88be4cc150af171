//! The client: connections, identity and the background tasks every lock shares.
//!
//! A [`Client`] is cheap to clone (an `Arc` inside). It owns one command connection, one
//! subscriber connection with its pub/sub hub, a random UUID that prefixes every holder field it
//! writes, and the watchdog task. Dropping the last clone stops the tasks; [`Client::shutdown`]
//! does it explicitly and closes the connections. Making one is `connect.rs`'s; reading what a
//! server holds (`inspect`, `find`, `connections`) is `inspect.rs`'s, over the `inspect`
//! module.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fred::clients::Client as Redis;
use fred::interfaces::ClientLike;

use crate::election::Election;
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::lock::{FairLock, FencedLock, Lock, MultiLock, RwLock, SpinLock};
use crate::meter::stats::ClientStats;
use crate::non_reentrant::{NonReentrantFairLock, NonReentrantLock};
use crate::registry::{Closing, Place};
use crate::shared::Shared;
use crate::sync::{CountDownLatch, PermitSemaphore, Semaphore};

mod connect;
mod inspect;

/// A connection to Redis that hands out locks.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> relock::Result<()> {
/// let client = relock::Client::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.lock("order:42").lock().await?;
/// // ... the critical section ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) shared: Arc<Shared>,
}

impl Client {
    /// A handle on the reentrant lock `name`. No I/O happens until it is used; a bad name is
    /// reported by the first operation.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.shared.clone(), name.into())
    }

    /// A handle on the fair lock `name`: waiters of every process get it in the order they
    /// asked (Redisson's `RFairLock`). No I/O happens until it is used.
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(self.shared.clone(), name.into())
    }

    /// A handle on the spin lock `name`: waiters retry with backoff instead of pub/sub
    /// (Redisson's `RSpinLock`). No I/O happens until it is used.
    pub fn spin_lock(&self, name: impl Into<String>) -> SpinLock {
        SpinLock::new(self.shared.clone(), name.into())
    }

    /// A handle on the read-write lock `name`: many readers or one writer (Redisson's
    /// `RReadWriteLock`). No I/O happens until it is used.
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(self.shared.clone(), name.into())
    }

    /// A handle on the fenced lock `name`: a [`Lock`] whose holders get a fencing token that
    /// grows with every new owner (Redisson's `RFencedLock`). No I/O happens until it is used.
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        FencedLock::new(self.shared.clone(), name.into())
    }

    /// A handle on the non-reentrant lock `name`: a [`Lock`] whose owner is refused a second hold
    /// ([`Error::Reentry`]; Redisson's non-reentrant lock). No I/O happens until it is used.
    pub fn non_reentrant_lock(&self, name: impl Into<String>) -> NonReentrantLock {
        NonReentrantLock::new(self.shared.clone(), name.into())
    }

    /// A handle on the non-reentrant fair lock `name`: a [`FairLock`] whose owner is refused a
    /// second hold ([`Error::Reentry`]; Redisson's non-reentrant fair lock). No I/O happens
    /// until it is used.
    pub fn non_reentrant_fair_lock(&self, name: impl Into<String>) -> NonReentrantFairLock {
        NonReentrantFairLock::new(self.shared.clone(), name.into())
    }

    /// A fence on `resource`, for writes to Redis data that a lock holder makes with the lock's
    /// fencing token (see [`Fence`]). No I/O happens until it is used; a bad name is reported by
    /// the first operation.
    pub fn fence(&self, resource: impl Into<String>) -> Fence {
        Fence::new(self.shared.clone(), resource.into())
    }

    /// A handle on the leader election `name`: at most one [`Term`](crate::Term) of it lives at
    /// a time, across every process that campaigns on it. No I/O happens until it is used.
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(self.shared.clone(), name.into())
    }

    /// A [`MultiLock`] over the reentrant locks `names`: all or nothing, taken in one order
    /// (one script for all of them on one server or cluster slot). For other types, or locks
    /// of several clients, use [`MultiLock::new`]. No I/O happens until it is used.
    pub fn multi_lock<N: Into<String>>(&self, names: impl IntoIterator<Item = N>) -> MultiLock {
        MultiLock::new(names.into_iter().map(|name| self.lock(name)))
    }

    /// A handle on the semaphore `name`: a count of permits shared by every process (Redisson's
    /// `RSemaphore`). No I/O happens until it is used.
    pub fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        Semaphore::new(self.shared.clone(), name.into())
    }

    /// A handle on the permit semaphore `name`: permits with ids and leases, renewed by the
    /// watchdog while their holder lives, so the permits of a holder that dies come back
    /// (Redisson's `RPermitExpirableSemaphore`). No I/O happens until it is used.
    pub fn permit_semaphore(&self, name: impl Into<String>) -> PermitSemaphore {
        PermitSemaphore::new(self.shared.clone(), name.into())
    }

    /// A handle on the count-down latch `name`: tasks of every process wait until its count,
    /// set once, is counted down to zero (Redisson's `RCountDownLatch`). No I/O happens until
    /// it is used.
    pub fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        CountDownLatch::new(self.shared.clone(), name.into())
    }

    /// This client's id, the `<client-uuid>` half of every holder field it writes.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The fred client relock sends its commands on, for commands of your own. It sends each
    /// command once (no re-send after a reconnect) and bounds each by the command timeout.
    pub fn redis(&self) -> &Redis {
        &self.shared.redis
    }

    /// Counts of what the client tracks locally (for leak checks), and of what it did since it
    /// was made (acquires, waits, lost leases, renewals, unlocks, wake-ups, script reloads):
    /// a snapshot without any dependency, with or without the `metrics` feature.
    pub fn stats(&self) -> ClientStats {
        let (holds, renewing) = self.shared.registry.hold_counts();
        let (channels, waiters) = self.shared.hub.counts();
        let counts = self.shared.meter().counts();
        ClientStats {
            holds,
            renewing,
            channels,
            waiters,
            in_flight: self.shared.registry.in_flight(),
            acquired: counts.acquired,
            busy: counts.busy,
            acquire_errors: counts.acquire_errors,
            cancelled: counts.cancelled,
            waits: counts.waits,
            leases_lost: counts.leases_lost,
            renewals: counts.renewals,
            renewal_errors: counts.renewal_errors,
            unlocks: counts.unlocks,
            replays: counts.replays,
            wakeups: counts.wakeups,
            resubscribes: counts.resubscribes,
            noscript_reloads: counts.noscript_reloads,
            scripts: self.shared.redis.calls.get(),
        }
    }

    /// Releases every lock this client holds, stops the watchdog and the pub/sub hub, and closes
    /// the connections. Each lock's holds go at once, whatever their count, and a lock that this
    /// frees wakes its waiters; the guards report themselves lost, and releasing one later fails
    /// with [`Error::Closed`]. Later operations fail with [`Error::Closed`] too. To leave the
    /// locks held until their leases end instead, use
    /// [`shutdown_keeping_locks`](Self::shutdown_keeping_locks).
    ///
    /// ```no_run
    /// # async fn run() -> relock::Result<()> {
    /// let client = relock::Client::connect("redis://127.0.0.1:6379").await?;
    /// let guard = client.lock("nightly-report").lock().await?;
    /// client.shutdown().await?; // the lock is free again
    /// assert!(guard.is_lost());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when a release or closing a connection failed; the client is closed
    /// anyway, and a lock whose release failed expires with its lease.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped mid-way, some locks may be left to expire with their leases.
    pub async fn shutdown(&self) -> Result<()> {
        self.close(true).await
    }

    /// As [`shutdown`](Self::shutdown), but leaves the locks this client holds in Redis until
    /// their leases end (nobody renews them from now on). For a process that hands its work to
    /// a successor which must find the locks still taken.
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when closing a connection failed; the client is closed anyway.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped mid-way, a connection may be left open until the client drops.
    pub async fn shutdown_keeping_locks(&self) -> Result<()> {
        self.close(false).await
    }

    async fn close(&self, release: bool) -> Result<()> {
        if self.shared.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Waiters fail with `Closed` from here on; their places in fair queues go first, so a
        // lock this client frees below wakes a live waiter, not one of this client's own.
        self.leave_queues().await;
        let released = if release {
            self.release_all().await
        } else {
            Ok(())
        };
        self.withdraw_claims().await;
        self.shared.registry.lose_all(crate::meter::Loss::Shutdown);
        let _ =
            tokio::time::timeout(self.shared.command_timeout, self.shared.sweeper.flush()).await;
        self.shared.shutdown.send_replace(true);
        let subscriber = self.shared.subscriber.quit().await;
        if let Some(sync) = &self.shared.replica_sync {
            let _ = sync.redis.quit().await;
        }
        let server = &self.shared.redis.server;
        self.shared
            .redis
            .quit()
            .await
            .map_err(|e| Error::redis(e, server))?;
        subscriber.map_err(|e| Error::redis(e, server))?;
        released
    }

    /// What each held thing gets to let go with.
    fn closing(&self) -> Closing<'_> {
        Closing {
            redis: &self.shared.redis,
            publish: self.shared.publish,
            claim_window_ms: self.shared.claim_window_ms,
        }
    }

    /// Gives up every place this client's waiters hold in queues (a fair lock's), all at once,
    /// within a command timeout; a place left behind lapses with its deadline. Each lock's type
    /// gives up its own.
    async fn leave_queues(&self) {
        let closing = &self.closing();
        let places = self.shared.registry.places(Place::Queue);
        let leaves = places
            .iter()
            .map(|(key, held)| held.close_place(closing, key));
        let all = futures::future::join_all(leaves);
        if let Ok(outcomes) = tokio::time::timeout(self.shared.command_timeout, all).await {
            for error in outcomes.into_iter().filter_map(Result::err) {
                tracing::debug!(%error, "could not leave a fair queue at shutdown; the place lapses with its deadline");
            }
        }
    }

    /// Withdraws every claim this client's waiters may have on a lock's next hand-off, all at
    /// once, within a command timeout; a claim left behind lapses by itself. A waiter that gives
    /// up withdraws its own claim, but in the background, where the closing connection may beat
    /// it; meanwhile a read-write lock's claim keeps new readers out. Each lock's type withdraws
    /// its own.
    async fn withdraw_claims(&self) {
        let closing = &self.closing();
        let claims = self.shared.registry.places(Place::Claim);
        let unclaims = claims
            .iter()
            .map(|(key, held)| held.close_claim(closing, key));
        let all = futures::future::join_all(unclaims);
        if let Ok(outcomes) = tokio::time::timeout(self.shared.command_timeout, all).await {
            for error in outcomes.into_iter().filter_map(Result::err) {
                tracing::debug!(%error, "could not withdraw a claim at shutdown; it lapses by itself");
            }
        }
    }

    /// Drops every hold of this client's, one script call per lock, all at once; each lock's
    /// type lets go of its own.
    async fn release_all(&self) -> Result<()> {
        let closing = &self.closing();
        let holds = self.shared.registry.holds();
        let releases = holds
            .iter()
            .map(|(key, held)| held.close_holds(closing, key));
        let outcomes = futures::future::join_all(releases).await;
        outcomes
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.shared.id)
            .finish()
    }
}
