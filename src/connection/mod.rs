//! A connection as relock's scripts use it: a fred client, the server its errors name, and the
//! clock of its being down (so a command against a server that is gone fails within one command
//! timeout instead of queueing for a reconnect).

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::Client as Redis;
use fred::interfaces::ClientLike;
use tokio::time::Instant;

use crate::meter::Meter;

pub(crate) mod naming;
use crate::meter::stats::{Evalsha, ScriptCalls};

/// A fred client as relock's scripts use it: with the server its errors name, and the clock of
/// its connection being down.
#[derive(Clone)]
pub(crate) struct Connection {
    redis: Redis,
    /// The server as errors name it.
    pub(crate) server: Arc<str>,
    /// Shared by the clones, which share the connection.
    pub(crate) down: Arc<DownClock>,
    /// The client's command timeout, which fred applies to a command sent without options.
    pub(crate) timeout: Duration,
    /// Where its scripts' durations and reloads are counted.
    pub(crate) meter: Arc<Meter>,
    /// Whether its scripts go as functions (`FCALL`) or by `EVALSHA`: `EVALSHA` until the
    /// client loaded its library at connect.
    pub(crate) calls: Arc<CallPath>,
}

impl Connection {
    /// A connection of `redis` to `server`, whose scripts are counted in `meter`.
    pub(crate) fn new(redis: Redis, server: &str, meter: Arc<Meter>) -> Connection {
        Connection {
            timeout: redis.perf_config().default_command_timeout,
            redis,
            server: server.into(),
            down: Arc::default(),
            meter,
            calls: Arc::default(),
        }
    }
}

impl Connection {
    /// This connection, its scripts going the way `calls` says (shared with other connections
    /// of its client).
    pub(crate) fn calling(mut self, calls: &Arc<CallPath>) -> Connection {
        self.calls = calls.clone();
        self
    }
}

impl Deref for Connection {
    type Target = Redis;

    fn deref(&self) -> &Redis {
        &self.redis
    }
}

/// Since when a connection has been seen down, so that commands stop waiting for a reconnect
/// once a whole command timeout went by without one (see the scripts' `run`).
#[derive(Default)]
pub(crate) struct DownClock {
    since: Mutex<Option<Instant>>,
    /// Whether `since` may be set: [`up`](Self::up), called before every command, reads this
    /// flag alone while the connection stays up.
    marked: AtomicBool,
}

impl DownClock {
    /// When the connection was first seen down: now, unless it was seen down before and has
    /// not been seen up since.
    pub(crate) fn since(&self) -> Instant {
        let mut since = self.since.lock().unwrap();
        self.marked.store(true, Ordering::Release);
        *since.get_or_insert_with(Instant::now)
    }

    /// A command sent at `at` met a broken connection: it has been down since then at the
    /// latest.
    pub(crate) fn suspect(&self, at: Instant) {
        let mut since = self.since.lock().unwrap();
        self.marked.store(true, Ordering::Release);
        if since.map_or(true, |since| at < since) {
            *since = Some(at);
        }
    }

    /// The connection is up.
    pub(crate) fn up(&self) {
        if self.marked.load(Ordering::Acquire) {
            let mut since = self.since.lock().unwrap();
            self.marked.store(false, Ordering::Release);
            since.take();
        }
    }
}

/// `redis` with its commands sent to `node`, a cluster's (or, with `None`, routed as usual).
pub(crate) fn on_node<C: ClientLike>(
    redis: &C,
    node: Option<&fred::types::config::Server>,
) -> fred::clients::WithOptions<C> {
    redis.with_options(&fred::types::config::Options {
        cluster_node: node.cloned(),
        ..Default::default()
    })
}

/// How a connection's scripts go out, shared by its clones; readable without a lock.
#[derive(Default)]
pub(crate) struct CallPath(AtomicU8);

impl CallPath {
    /// The path in use.
    pub(crate) fn get(&self) -> ScriptCalls {
        match self.0.load(Ordering::Relaxed) {
            1 => ScriptCalls::Functions,
            2 => ScriptCalls::Evalsha(Evalsha::NoFunctions),
            3 => ScriptCalls::Evalsha(Evalsha::Refused),
            _ => ScriptCalls::Evalsha(Evalsha::Configured),
        }
    }

    pub(crate) fn set(&self, calls: ScriptCalls) {
        let code = match calls {
            ScriptCalls::Functions => 1,
            ScriptCalls::Evalsha(Evalsha::NoFunctions) => 2,
            ScriptCalls::Evalsha(Evalsha::Refused) => 3,
            ScriptCalls::Evalsha(Evalsha::Configured) => 0,
        };
        self.0.store(code, Ordering::Relaxed);
    }

    /// Whether scripts go by `FCALL`.
    pub(crate) fn functions(&self) -> bool {
        self.0.load(Ordering::Relaxed) == 1
    }
}
