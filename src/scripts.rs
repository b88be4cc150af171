//! The Lua scripts, one per Redis-side operation, and the only code that knows their arguments.
//!
//! Each script lives in `lua/` with its KEYS / ARGV / reply contract in its header. It is hashed
//! once per process and run by `EVALSHA`; when the server answers `NOSCRIPT` (after a restart, a
//! failover or `SCRIPT FLUSH`) it is loaded and run again. A lock script must never be applied
//! twice by a transport retry: the client's connection sends every command once (see
//! [`Client::new`](crate::Client::new)), and a reply that never came is resolved by the caller.

use fred::clients::Client as Redis;
use std::time::Duration;

use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::Value;
use once_cell::sync::Lazy;

use crate::error::{Error, Result};

/// The message published on a lock's channel when it is freed: wake one waiter per process.
pub(crate) const UNLOCK_MESSAGE: &str = "0";
/// The publish command on a single server, Sentinel, or a cluster before Redis 7.
pub(crate) const PUBLISH: &str = "PUBLISH";
/// The publish command on a Redis 7 cluster: the message stays on the lock's shard.
pub(crate) const SPUBLISH: &str = "SPUBLISH";

/// A Lua script and its SHA1, computed once.
pub(crate) struct Script {
    lua: &'static str,
    sha: String,
}

impl Script {
    fn new(lua: &'static str) -> Script {
        Script {
            lua,
            sha: fred::util::sha1_hash(lua),
        }
    }

    /// Runs the script by `EVALSHA`, loading it first if the server does not know it. A
    /// command that could not even be written (no connection: fred says it failed to route it)
    /// is sent again once the connection is back, within the connection timeout: it never
    /// reached Redis, so this cannot apply it twice.
    async fn run(
        &self,
        redis: &Redis,
        keys: &[&str],
        args: &[&str],
    ) -> std::result::Result<Value, fred::error::Error> {
        let patience = redis.connection_config().connection_timeout;
        let started = tokio::time::Instant::now();
        loop {
            match self.run_once(redis, keys, args).await {
                Err(e) if e.details().starts_with("Failed to route") => {
                    let left = patience.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        return Err(e);
                    }
                    let _ = tokio::time::timeout(left, redis.wait_for_connect()).await;
                    tokio::time::sleep(Duration::from_millis(5).min(left)).await;
                }
                result => return result,
            }
        }
    }

    async fn run_once(
        &self,
        redis: &Redis,
        keys: &[&str],
        args: &[&str],
    ) -> std::result::Result<Value, fred::error::Error> {
        match redis
            .evalsha::<Value, _, _, _>(self.sha.as_str(), keys.to_vec(), args.to_vec())
            .await
        {
            Err(e) if e.details().starts_with("NOSCRIPT") => {
                redis.script_load_cluster::<(), _>(self.lua).await?;
                redis
                    .evalsha(self.sha.as_str(), keys.to_vec(), args.to_vec())
                    .await
            }
            result => result,
        }
    }
}

static ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(include_str!("../lua/acquire.lua")));
static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(include_str!("../lua/release.lua")));
static RENEW: Lazy<Script> = Lazy::new(|| Script::new(include_str!("../lua/renew.lua")));
static FORCE_RELEASE: Lazy<Script> =
    Lazy::new(|| Script::new(include_str!("../lua/force_release.lua")));
static INSPECT: Lazy<Script> = Lazy::new(|| Script::new(include_str!("../lua/inspect.lua")));

/// Takes a hold. `Ok(None)` when taken, `Ok(Some(pttl))` when another owner holds the lock
/// (`pttl` is -1 for a lock without expiry).
pub(crate) async fn acquire(
    redis: &Redis,
    name: &str,
    lease_ms: u64,
    field: &str,
) -> Result<Option<i64>> {
    let reply = ACQUIRE
        .run(redis, &[name], &[&lease_ms.to_string(), field])
        .await
        .map_err(|e| Error::from_redis(e, name))?;
    match reply {
        Value::Null => Ok(None),
        other => Ok(Some(integer(other, name)?)),
    }
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The field held nothing.
    NotHeld,
    /// One hold released; others remain.
    StillHeld,
    /// The last hold released: the lock is gone, and its wake-up message reached `woken`
    /// subscribed connections (0 when the reply was a replay).
    Freed { woken: u64 },
}

/// The keys one release touches, and how it publishes.
pub(crate) struct ReleaseKeys<'a> {
    pub(crate) name: &'a str,
    pub(crate) channel: &'a str,
    pub(crate) latch: &'a str,
    /// [`PUBLISH`] or [`SPUBLISH`].
    pub(crate) publish: &'static str,
}

/// Releases one hold of `field`; a retry with the same latch key replays the first reply.
pub(crate) async fn release(
    redis: &Redis,
    keys: ReleaseKeys<'_>,
    field: &str,
    lease_ms: u64,
    latch_ttl_ms: u64,
) -> Result<Released> {
    let reply = RELEASE
        .run(
            redis,
            &[keys.name, keys.channel, keys.latch],
            &[
                UNLOCK_MESSAGE,
                &lease_ms.to_string(),
                field,
                keys.publish,
                &latch_ttl_ms.to_string(),
            ],
        )
        .await
        .map_err(|e| Error::from_redis(e, keys.name))?;
    match reply {
        Value::Null => Ok(Released::NotHeld),
        other => match integer(other, keys.name)? {
            0 => Ok(Released::StillHeld),
            n => Ok(Released::Freed {
                woken: n.saturating_sub(1) as u64,
            }),
        },
    }
}

/// Extends each lock whose field is still there; `true` per renewed lock, in order.
pub(crate) async fn renew(
    redis: &Redis,
    locks: &[(std::sync::Arc<str>, std::sync::Arc<str>)],
    lease_ms: u64,
) -> Result<Vec<bool>> {
    let keys: Vec<&str> = locks.iter().map(|(name, _)| &**name).collect();
    let lease = lease_ms.to_string();
    let mut args = Vec::with_capacity(locks.len() + 1);
    args.push(lease.as_str());
    args.extend(locks.iter().map(|(_, field)| &**field));
    let reply = RENEW.run(redis, &keys, &args).await?;
    let Value::Array(items) = reply else {
        return Err(unexpected(&reply, "renew"));
    };
    items
        .into_iter()
        .map(|item| Ok(integer(item, "renew")? == 1))
        .collect()
}

/// Deletes the lock whoever holds it; `true` when there was one.
pub(crate) async fn force_release(
    redis: &Redis,
    name: &str,
    channel: &str,
    publish: &'static str,
) -> Result<bool> {
    let reply = FORCE_RELEASE
        .run(redis, &[name, channel], &[UNLOCK_MESSAGE, publish])
        .await
        .map_err(|e| Error::from_redis(e, name))?;
    Ok(integer(reply, name)? == 1)
}

/// A lock's state as one script saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inspection {
    pub(crate) locked: bool,
    /// Remaining lease in ms: -2 unlocked, -1 no expiry.
    pub(crate) pttl: i64,
    /// The asked-for field's hold count.
    pub(crate) holds: u64,
}

/// Reads whether the lock exists, its remaining lease and one field's hold count.
pub(crate) async fn inspect(redis: &Redis, name: &str, field: &str) -> Result<Inspection> {
    let reply = INSPECT
        .run(redis, &[name], &[field])
        .await
        .map_err(|e| Error::from_redis(e, name))?;
    let Value::Array(items) = reply else {
        return Err(unexpected(&reply, name));
    };
    let [locked, pttl, holds]: [Value; 3] = items
        .try_into()
        .map_err(|items: Vec<Value>| unexpected(&Value::Array(items), name))?;
    Ok(Inspection {
        locked: integer(locked, name)? == 1,
        pttl: integer(pttl, name)?,
        holds: integer(holds, name)?.max(0) as u64,
    })
}

fn integer(value: Value, context: &str) -> Result<i64> {
    value.as_i64().ok_or_else(|| unexpected(&value, context))
}

fn unexpected(value: &Value, context: &str) -> Error {
    Error::Redis(fred::error::Error::new(
        fred::error::ErrorKind::Protocol,
        format!("unexpected script reply {value:?} for `{context}`"),
    ))
}
