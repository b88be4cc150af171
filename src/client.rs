//! The client: connections, identity and the background tasks every lock shares.
//!
//! A [`Client`] is cheap to clone (an `Arc` inside). It owns one command connection, one
//! subscriber connection with its pub/sub hub, a random UUID that prefixes every holder field it
//! writes, and the watchdog task. Dropping the last clone stops the tasks; [`Client::shutdown`]
//! does it explicitly and closes the connections.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fred::clients::Client as Redis;
use fred::interfaces::ClientLike;
use fred::types::config::ReconnectPolicy;
use fred::types::Builder;
use tokio::sync::watch;

use crate::background::Background;
use crate::config::{millis, server_name, Config};
use crate::connection::Connection;
use crate::election::Election;
use crate::error::{Error, Result};
use crate::handoff::Handoffs;
use crate::lock::{FairLock, FencedLock, Lock, MultiLock, RwLock, SpinLock};
use crate::meter::Meter;
use crate::naming::{self, Role};
use crate::pubsub::Hub;
use crate::registry::{Closing, Place, Registry};
use crate::scripts::library::{self, CallPath};
use crate::scripts::{PUBLISH, SPUBLISH};
use crate::shared::{ReplicaSync, Shared};
use crate::stats::ClientStats;
use crate::sweeper::Sweeper;
use crate::sync::{CountDownLatch, PermitSemaphore, Semaphore};
use crate::watchdog::Watchdog;

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
    /// Connects to the server at `url` with the default [`Config`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad URL, [`Error::Redis`] when the server cannot be reached.
    pub async fn connect(url: &str) -> Result<Client> {
        Client::new(Config::from_url(url)?).await
    }

    /// Connects with `config`: the command connection, the subscriber connection, and starts the
    /// pub/sub hub and the watchdog.
    ///
    /// The command connection sends every command once: a command in flight when the connection
    /// drops fails instead of being re-sent after the reconnect, because a lock script applied
    /// twice would count a hold twice. relock resolves such failures itself (it reads the lock
    /// back, or retries a release under its request id).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad setting, [`Error::Redis`] when the server cannot be
    /// reached.
    pub async fn new(config: Config) -> Result<Client> {
        config.validate()?;
        let mut builder = Builder::from_config(config.redis.clone());
        builder
            .with_performance_config(|p| {
                p.broadcast_channel_capacity = 4096;
                p.default_command_timeout = config.command_timeout;
            })
            .with_connection_config(|c| {
                c.connection_timeout = config.command_timeout;
                c.internal_command_timeout = config.command_timeout;
                // A lock script in flight when the connection drops must fail, not be sent again
                // on the new connection: a second run would count a hold twice.
                c.max_command_attempts = 1;
                // And a command that meets `MOVED` or `ASK` comes back unsent rather than
                // failing as one that may have run (fred counts the redirected write against
                // those attempts): relock sends a script again to the slot's new owner.
                c.max_redirections = 0;
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 20, 1000, 2));
        let server = server_name(&config.redis.server);
        let failed = |e| Error::redis(e, &server);
        // Connecting over TLS, a timeout is a handshake nobody answered: say so.
        #[cfg(feature = "tls")]
        let tls = config.redis.tls.is_some();
        #[cfg(not(feature = "tls"))]
        let tls = false;
        let not_connected = |e: fred::error::Error| {
            let unanswered = tls
                .then(|| crate::redis_error::tls_unanswered(&e, config.command_timeout))
                .flatten();
            failed(unanswered.unwrap_or(e))
        };
        let redis = builder.build().map_err(failed)?;
        let id = uuid::Uuid::new_v4().to_string();
        let clustered = config.redis.server.is_clustered();
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::invalid("a relock client must be made inside a tokio runtime"))?;
        let background = Background::new(runtime, builder.clone(), &server, config.command_timeout);
        let subscriber = builder.build_subscriber_client().map_err(failed)?;
        redis.init().await.map_err(not_connected)?;
        if let Err(e) = subscriber.init().await {
            let _ = redis.quit().await;
            return Err(not_connected(e));
        }
        // Who is who (see `crate::naming`): before the subscriber subscribes to anything.
        let command_name = naming::connection_name(&id, Role::Commands);
        naming::set_name_everywhere(&redis, clustered, &command_name).await;
        let pubsub_name = naming::connection_name(&id, Role::Pubsub);
        naming::set_name_everywhere(&subscriber, clustered, &pubsub_name).await;
        // Which server it is, and whether relock can run there: refused before anything runs.
        let facts = match crate::server::learn(&redis, &server).await {
            Ok(facts) => facts,
            Err(refused) => {
                let _ = redis.quit().await;
                let _ = subscriber.quit().await;
                return Err(refused);
            }
        };
        let sharded = config.redis.server.is_clustered() && facts.major >= 7;
        // Functions or EVALSHA, for every connection of this client to this server.
        let calls = Arc::new(CallPath::default());
        calls.set(library::choose(&redis, clustered, config.functions, facts.major, &server).await);
        // One server under two addresses is still one server (a multi-lock must know).
        let server_id = if config.redis.server.is_clustered() {
            None
        } else {
            facts.run_id
        };
        let meter = Arc::new(Meter::new(
            #[cfg(feature = "metrics")]
            config.metric_names.clone(),
        ));
        let (shutdown, _) = watch::channel(false);
        tokio::spawn(naming::keep_name(
            redis.clone(),
            command_name,
            shutdown.subscribe(),
        ));
        let replica_sync = match config.replica_sync {
            Some(timeout) => {
                let sync = redis.clone_new();
                sync.init().await.map_err(failed)?;
                let name = naming::connection_name(&id, Role::Sync);
                naming::set_name_everywhere(&sync, clustered, &name).await;
                tokio::spawn(naming::keep_name(sync.clone(), name, shutdown.subscribe()));
                Some(ReplicaSync {
                    redis: Connection::new(sync, &server, meter.clone()).calling(&calls),
                    timeout_ms: millis(timeout, "replica sync timeout")?,
                })
            }
            None => None,
        };

        let registry = Arc::new(Registry::new(config.watchdog_timeout, meter.clone()));
        let connection = Connection::new(redis.clone(), &server, meter.clone()).calling(&calls);
        let watchdog = Watchdog {
            redis: connection.clone(),
            registry: registry.clone(),
            lease: config.watchdog_timeout,
            batch: config.renewal_batch,
            per_slot: config.redis.server.is_clustered(),
            // With replica sync, renewals go on its connection, followed by a WAIT there.
            replica_sync: replica_sync.as_ref().map(|s| ReplicaSync {
                redis: s.redis.clone(),
                timeout_ms: s.timeout_ms,
            }),
        };
        tokio::spawn(watchdog.run(shutdown.subscribe()));
        let hub = Hub::start(
            subscriber.clone(),
            sharded,
            pubsub_name,
            meter.clone(),
            shutdown.subscribe(),
        );
        let sweeper = Sweeper::start(
            redis.clone(),
            config.redis.server.is_clustered(),
            shutdown.subscribe(),
        );
        Ok(Client {
            shared: Arc::new(Shared {
                id,
                redis: connection,
                server_id,
                subscriber,
                hub,
                handoffs: Handoffs::new(config.handoff_grace),
                sweeper,
                registry,
                watchdog_ms: millis(config.watchdog_timeout, "watchdog timeout")?,
                watchdog_timeout: config.watchdog_timeout,
                command_timeout: config.command_timeout,
                claims: config.claims(),
                claim_window_ms: config.claim_window_ms()?,
                fair_waiter_ms: millis(config.fair_waiter_timeout, "fair waiter timeout")?,
                poll_interval: config.poll_interval,
                publish: if sharded { SPUBLISH } else { PUBLISH },
                replica_sync,
                background,
                closed: AtomicBool::new(false),
                shutdown,
            }),
        })
    }

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

    /// A handle on the leader election `name`: at most one [`Term`](crate::Term) of it lives at
    /// a time, across every process that campaigns on it. No I/O happens until it is used.
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(self.clone(), name.into())
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
            .map(|((name, field), held)| held.close_place(closing, name, field));
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
            .map(|((name, field), held)| held.close_claim(closing, name, field));
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
            .map(|((name, field), held)| held.close_holds(closing, name, field));
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
