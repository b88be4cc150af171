//! The Lua scripts, one per Redis-side operation, and the only code that knows their arguments.
//!
//! Each script's source is composed by [`catalogue`] from `lua/` (a type's scripts in
//! `lua/<type>/`, the rules several share in `lua/common/`), with its KEYS / ARGV / reply
//! contract in its own file's header. Where the server has functions, a script is called as a
//! function of relock's library ([`library`]: `FCALL`, loaded at connect and again on `ERR
//! Function not found`); elsewhere its text is hashed once per process and run by `EVALSHA`,
//! loaded and run again when the server answers `NOSCRIPT` (after a restart, a failover or
//! `SCRIPT FLUSH`). A type's file outside this module runs its own scripts the same way:
//! `static ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::<TYPE>_ACQUIRE))`, then
//! `ACQUIRE.run(redis, &keys, &args)`, with [`text`], [`ms_arg`] and [`integer`] for the
//! arguments and the reply. A lock script must never be applied
//! twice by a transport retry: the client's connection sends every command once (see
//! [`Client::new`](crate::Client::new)), and a reply that never came is resolved by the caller.

use std::time::Duration;

use fred::bytes_utils::Str;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, CustomCommand};
use fred::types::{Key, Value};
use tokio::time::Instant;

use crate::connection::Connection;
use crate::error::{Error, Result, Shown};
use crate::meter::stats::{Evalsha, ScriptCalls};
use crate::meter::ScriptId;
use crate::redis_error::{self, classify, What};

pub mod catalogue;
pub(crate) mod library;

pub use library::library_name;

/// The message published on a lock's channel when it is freed: wake one waiter per process.
pub(crate) const UNLOCK_MESSAGE: &str = "0";
/// The publish command on a single server, Sentinel, or a cluster before Redis 7.
pub(crate) const PUBLISH: &str = "PUBLISH";
/// The publish command on a Redis 7 cluster: the message stays on the lock's shard.
pub(crate) const SPUBLISH: &str = "SPUBLISH";
/// In place of a publish command: publish nothing (a spin lock has no waiters to wake).
pub(crate) const NO_PUBLISH: &str = "";

/// A Lua script and its SHA1, computed once.
pub(crate) struct Script {
    lua: Str,
    sha: Str,
    /// How metrics name it: its place in [`catalogue::ALL`] and its name there (unnamed: a
    /// script made at run time).
    metered: ScriptId,
    /// Its function in relock's library, and whether it writes nothing (called by
    /// `FCALL_RO`); none for a script made at run time, which always goes by `EVALSHA`.
    function: Option<(Str, bool)>,
}

impl Script {
    pub(crate) fn new(lua: &'static str) -> Script {
        let mut script = Script::from_text(Str::from_static(lua));
        let found = catalogue::ALL.iter().position(|(_, text)| *text == lua);
        if let Some(slot) = found {
            let name = catalogue::ALL[slot].0;
            script.metered = ScriptId { slot, name };
            let read_only = catalogue::READ_ONLY.contains(&name);
            script.function = Some((library::LIBRARY.function(name), read_only));
        }
        script
    }

    /// A script made at run time (a fenced user script): the server caches it by its SHA1 as
    /// it caches relock's own.
    pub(crate) fn from_text(lua: Str) -> Script {
        Script {
            sha: fred::util::sha1_hash(&lua).into(),
            lua,
            metered: ScriptId::UNNAMED,
            function: None,
        }
    }

    /// Runs the script by `EVALSHA`, loading it first if the server does not know it, all
    /// within one command timeout.
    ///
    /// A script is never sent while the connection is down: it waits for the reconnect, but
    /// not past one command timeout from when the connection was first seen down (`down`
    /// remembers that across calls, from the start of a command that met a broken connection).
    /// So against a server that is gone every call fails within a command timeout, and later
    /// calls at once, with an error that says nothing was sent;
    /// a queued command would instead sit out its timeout and leave the caller unsure whether
    /// it ran. A command fred could not route is sent again the same way: it never reached
    /// Redis, so this cannot apply it twice.
    ///
    /// Keys and arguments come as fred's own types so that sending them copies nothing: a
    /// [`Key`] or [`Str`] made once per lock (or per hold) is shared by reference count.
    pub(crate) async fn run(
        &self,
        redis: &Connection,
        keys: &[Key],
        args: &[Value],
    ) -> std::result::Result<Value, fred::error::Error> {
        let down = &redis.down;
        let timeout = redis.timeout;
        if redis.is_connected() {
            down.up();
            let sent = Instant::now();
            // The common case: connected, with the whole timeout left, which fred applies to a
            // command sent without options, so none are built per command.
            let reply = Box::pin(self.run_once(Request::new(redis, None, keys, args))).await;
            match reply {
                Err(e) if matches!(classify(&e), What::NotRouted | What::Redirected) => {}
                Err(e) => return Err(met(redis, e, sent)),
                result => return result,
            }
        }
        let deadline = Instant::now() + timeout;
        loop {
            if redis.is_connected() {
                down.up();
            } else {
                let until = deadline.min(down.since() + timeout);
                let back = tokio::time::timeout_at(until, redis.wait_for_connect()).await;
                if !matches!(back, Ok(Ok(()))) {
                    return Err(redis_error::not_sent(format!(
                        "not connected (no reconnect within {timeout:?}; nothing was sent)"
                    )));
                }
            }
            let sent = Instant::now();
            let left = deadline.saturating_duration_since(sent);
            match Box::pin(self.run_once(Request::new(redis, Some(left), keys, args))).await {
                Err(e)
                    if matches!(classify(&e), What::NotRouted | What::Redirected)
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => return Err(met(redis, e, sent)),
                result => return result,
            }
        }
    }

    /// One send (a load and a second send on `NOSCRIPT`, and the script's text with a third if
    /// the cache was flushed again in between), all within `timeout`; `None`: each
    /// within the client's command timeout, which fred applies to a command without options.
    ///
    /// Boxed by the caller: fred's command future is large, and every lock() future that waits
    /// would otherwise carry room for it (about 7 KB per waiter instead of 1.5 KB).
    async fn run_once(&self, request: Request<'_>) -> Reply {
        let started = Instant::now();
        let (result, reloaded) = self.send_once(request).await;
        request
            .redis
            .meter
            .script(self.metered, started.elapsed(), reloaded);
        result
    }

    /// [`run_once`](Self::run_once) unmetered: its reply, and whether it (or the library) was
    /// loaded again.
    async fn send_once(&self, request: Request<'_>) -> (Reply, bool) {
        match &self.function {
            Some((name, read_only)) if request.redis.calls.functions() => {
                match self.call_function(request, name, *read_only).await {
                    Some(done) => done,
                    // The library could not be loaded again: by `EVALSHA` from now on.
                    None => self.send_script(request).await,
                }
            }
            _ => self.send_script(request).await,
        }
    }

    /// One `FCALL` (`FCALL_RO` when `read_only`) of the script's function `name`, and on `ERR
    /// Function not found` (nothing ran) a load of the library and a second, all within
    /// `timeout` as [`run_once`](Self::run_once) says. `None` when the server refused to load
    /// the library (the client then goes by `EVALSHA`, as at a connect that met the refusal).
    async fn call_function(
        &self,
        request: Request<'_>,
        name: &Str,
        read_only: bool,
    ) -> Option<(Reply, bool)> {
        let (redis, timeout, keys, args) =
            (request.redis, request.timeout, request.keys, request.args);
        let started = Instant::now();
        let command = fcall(read_only);
        let first = send_first(request, started, command, name).await;
        let Err(e) = &first else {
            return Some((first, false));
        };
        if classify(e) != What::NoFunction {
            return Some((first, false));
        }
        let timeout = timeout.unwrap_or(redis.timeout);
        let clustered = redis.inner().config.server.is_clustered();
        match library::load(&redis.with_options(&left_of(timeout, started)), clustered).await {
            Ok(()) => {}
            Err(e) if library::refused(&e) => {
                tracing::debug!(
                    server = %redis.server,
                    "relock's function library could not be loaded again ({e}): scripts go by \
                     EVALSHA from now on"
                );
                redis.calls.set(ScriptCalls::Evalsha(Evalsha::Refused));
                return None;
            }
            Err(e) => return Some((Err(e), false)),
        }
        let redis = redis.with_options(&left_of(timeout, started));
        Some((send(&redis, command, name, keys, args).await, true))
    }

    /// [`send_once`](Self::send_once) by `EVALSHA`.
    async fn send_script(&self, request: Request<'_>) -> (Reply, bool) {
        let (redis, timeout, keys, args) =
            (request.redis, request.timeout, request.keys, request.args);
        let started = Instant::now();
        let first = send_first(request, started, "EVALSHA", &self.sha).await;
        match first {
            Err(e) if classify(&e) == What::NoScript => {
                // Within what is left of the first send's timeout.
                let timeout = timeout.unwrap_or(redis.timeout);
                let redis = redis.with_options(&left_of(timeout, started));
                let loaded = redis.script_load_cluster::<(), _>(self.lua.clone()).await;
                if let Err(e) = loaded {
                    return (Err(e), false);
                }
                let redis = redis.with_options(&left_of(timeout, started));
                let result = send(&redis, "EVALSHA", &self.sha, keys, args).await;
                // Flushed again between the load and the run (`SCRIPT FLUSH` twice in a row):
                // sent with its text this time, which no flush can come between.
                let result = match result {
                    Err(e) if classify(&e) == What::NoScript => {
                        let redis = redis.with_options(&left_of(timeout, started));
                        send(&redis, "EVAL", &self.lua, keys, args).await
                    }
                    result => result,
                };
                (result, true)
            }
            result => (result, false),
        }
    }
}

/// A script call's reply, or the error it met.
type Reply = std::result::Result<Value, fred::error::Error>;

/// One send of a script call: the connection, the time it has (`None`: the client's command
/// timeout, which fred applies to a command without options), its keys and its arguments.
#[derive(Clone, Copy)]
struct Request<'a> {
    redis: &'a Connection,
    timeout: Option<Duration>,
    keys: &'a [Key],
    args: &'a [Value],
}

impl<'a> Request<'a> {
    fn new(
        redis: &'a Connection,
        timeout: Option<Duration>,
        keys: &'a [Key],
        args: &'a [Value],
    ) -> Request<'a> {
        Request {
            redis,
            timeout,
            keys,
            args,
        }
    }
}

/// Options whose timeout is what is left of `timeout` since `started` (at least 1 ms).
fn left_of(timeout: Duration, started: Instant) -> Options {
    Options {
        timeout: Some(
            timeout
                .saturating_sub(started.elapsed())
                .max(Duration::from_millis(1)),
        ),
        ..Options::default()
    }
}

/// The command that calls a function: `FCALL_RO` when it is `read_only`, else `FCALL`.
fn fcall(read_only: bool) -> &'static str {
    if read_only {
        "FCALL_RO"
    } else {
        "FCALL"
    }
}

/// A call's first [`send`] on `redis`: with no options when it has the client's whole command
/// timeout (`timeout` `None`, the common case: none are built per call), else within what is
/// left of `timeout` since `started`.
async fn send_first(
    request: Request<'_>,
    started: Instant,
    command: &'static str,
    what: &Str,
) -> Reply {
    let Request {
        redis,
        timeout,
        keys,
        args,
    } = request;
    match timeout {
        None => send(&**redis, command, what, keys, args).await,
        Some(timeout) => {
            let redis = redis.with_options(&left_of(timeout, started));
            send(&redis, command, what, keys, args).await
        }
    }
}

/// `command` (`EVALSHA`, `EVAL`, `FCALL`, `FCALL_RO`) of `what` (a SHA1, a text, a function's
/// name) with `keys` and `args`, routed by its first key's slot.
///
/// Sent as a command of relock's own rather than by fred's `evalsha` or `fcall`: fred's
/// `with_options` client has no `LuaInterface` of its own, so its `evalsha` went to the client
/// underneath (by `Deref`) and its options (the timeout of what is left of a call) were
/// dropped; here they apply. The command's arguments are built in one vector per call, the
/// keys and arguments shared by reference count, where `evalsha` copied both into vectors of
/// their own first.
async fn send<C: ClientLike>(
    redis: &C,
    command: &'static str,
    what: &Str,
    keys: &[Key],
    args: &[Value],
) -> std::result::Result<Value, fred::error::Error> {
    let hash = keys.first().map_or(ClusterHash::Random, |key| {
        ClusterHash::Custom(key.cluster_hash())
    });
    let mut sent = Vec::with_capacity(2 + keys.len() + args.len());
    sent.push(Value::String(what.clone()));
    sent.push(Value::Integer(keys.len() as i64));
    sent.extend(keys.iter().cloned().map(Value::from));
    sent.extend(args.iter().cloned());
    redis
        .custom(CustomCommand::new_static(command, hash, false), sent)
        .await
}

/// An error that a command sent at `sent` met. A broken connection was likely dead already when
/// the command went out: a read-back that follows waits for a reconnect only what is left of
/// this timeout.
fn met(redis: &Connection, e: fred::error::Error, sent: Instant) -> fred::error::Error {
    if classify(&e).broke() {
        redis.down.suspect(sent);
    }
    e
}

/// A static argument, sent without a copy.
pub(crate) fn text(s: &'static str) -> Value {
    Value::String(Str::from_static(s))
}

/// A duration in ms as an argument (validated to fit 2^53 by `config::millis`).
pub(crate) fn ms_arg(ms: u64) -> Value {
    Value::Integer(ms as i64)
}

/// The integer `value`, or an error naming `context` (a lock name) and the server.
pub(crate) fn integer(value: Value, context: &str, server: &str) -> Result<i64> {
    value
        .as_i64()
        .ok_or_else(|| unexpected(&value, context, server))
}

pub(crate) fn unexpected(value: &Value, context: &str, server: &str) -> Error {
    Error::redis(
        redis_error::unexpected(format!(
            "unexpected script reply {value:?} for `{}`",
            Shown(context)
        )),
        server,
    )
}
