//! Making a [`Client`]: its connections, what the server is, how it runs scripts, and the
//! background tasks every lock shares.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use fred::interfaces::ClientLike;
use fred::types::config::ReconnectPolicy;
use fred::types::Builder;
use tokio::sync::watch;

use super::Client;
use crate::background::Background;
use crate::background::Sweeper;
use crate::config::{millis, server_name, Config};
use crate::connection::naming::{self, Role};
use crate::connection::{CallPath, Connection};
use crate::error::{Error, Result};
use crate::handoff::Handoffs;
use crate::meter::Meter;
use crate::pubsub::Hub;
use crate::registry::Registry;
use crate::scripts::library;
use crate::scripts::{PUBLISH, SPUBLISH};
use crate::shared::{ReplicaSync, Shared};
use crate::watchdog::Watchdog;

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
        // Who is who (see `crate::connection::naming`): before the subscriber subscribes to anything.
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
}
