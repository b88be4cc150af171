//! The multi-lock's fast path: several plain locks of one owner, on one client and one cluster
//! slot, taken by one script and released by one (see `lua/multi/acquire.lua` and
//! `lua/multi/release.lua` for their contracts). Each part is taken and released as
//! `lua/lock/acquire.lua` and `lua/lock/release.lua` treat one lock.

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use once_cell::sync::Lazy;

use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::lock::hash::released;
use crate::lock::replies::{ReleaseHow, Released};
use crate::names::LockKeys;
use crate::redis_error::{classify, Blamed, What};
use crate::scripts::{catalogue, integer, ms_arg, text, unexpected, Script, UNLOCK_MESSAGE};

static ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::MULTI_ACQUIRE));
static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::MULTI_RELEASE));

/// Maps an error of a multi-lock script: a WRONGTYPE names the part that failed (the scripts
/// append ` [part <i>]`, 1-based), any other error is the first part's.
fn error(error: fred::error::Error, parts: &[&LockKeys], server: &str) -> Error {
    let part = match classify(&error) {
        What::WrongType(Blamed::Part(i)) => i.checked_sub(1).and_then(|i| parts.get(i)),
        // The acquire's KEYS are each part's name then its claim: key 2i is part i's claim.
        What::WrongType(Blamed::Key(k)) if k % 2 == 0 => {
            if let Some(keys) = parts.get(k / 2 - 1) {
                return Error::WrongType {
                    key: keys.claim.to_string(),
                };
            }
            None
        }
        _ => None,
    };
    let name = part.or(parts.first()).map_or("", |keys| &*keys.name);
    Error::from_redis(error, name, server)
}

/// Takes one hold of `field` on every lock of `parts` (distinct, in one slot), or none, as
/// [`acquire`](crate::lock::hash::acquire) takes one without claiming. `Ok(None)` when all were taken; else the index
/// (0-based) of the first part that is busy and how long to wait at most before trying again in
/// ms, as `acquire` answers it (-1: no bound known).
pub(crate) async fn acquire(
    redis: &Connection,
    parts: &[&LockKeys],
    lease_ms: u64,
    field: &Str,
    window: u64,
) -> Result<Option<(usize, i64)>> {
    let mut keys = Vec::with_capacity(2 * parts.len());
    for part in parts {
        keys.push(Key::from(&part.name));
        keys.push(Key::from(&part.claim));
    }
    let args = [
        ms_arg(lease_ms),
        Value::String(field.clone()),
        ms_arg(window),
    ];
    let reply = ACQUIRE
        .run(redis, &keys, &args)
        .await
        .map_err(|e| error(e, parts, &redis.server))?;
    let context = parts.first().map_or("", |keys| &*keys.name);
    match reply {
        Value::Null => Ok(None),
        Value::Array(items) if items.len() == 2 => {
            let [index, ttl]: [Value; 2] = items.try_into().expect("two items");
            let index = integer(index, context, &redis.server)?;
            let ttl = integer(ttl, context, &redis.server)?;
            match usize::try_from(index) {
                Ok(index) if (1..=parts.len()).contains(&index) => Ok(Some((index - 1, ttl))),
                _ => Err(unexpected(&Value::Integer(index), context, &redis.server)),
            }
        }
        other => Err(unexpected(&other, context, &redis.server)),
    }
}

/// Releases one hold of `field` on every lock of `parts` (distinct, in one slot), each as
/// [`release`](crate::lock::hash::release) releases one: part `i` under the replay key `replays[i]`, keeping its TTL
/// at `keep_ms[i]` when holds remain. `how.replay` is unused (each part has its own). One result
/// per part, in order.
pub(crate) async fn release(
    redis: &Connection,
    parts: &[&LockKeys],
    replays: &[&Key],
    field: &Str,
    keep_ms: &[u64],
    how: &ReleaseHow<'_>,
) -> Result<Vec<Released>> {
    debug_assert!(parts.len() == replays.len() && parts.len() == keep_ms.len());
    let mut keys = Vec::with_capacity(4 * parts.len());
    for (part, replay) in parts.iter().zip(replays) {
        keys.push(Key::from(&part.name));
        keys.push(Key::from(&part.channel));
        keys.push((*replay).clone());
        keys.push(Key::from(&part.claim));
    }
    let mut args = Vec::with_capacity(7 + parts.len());
    args.extend([text(UNLOCK_MESSAGE), Value::String(field.clone())]);
    args.extend(how.args());
    args.extend(keep_ms.iter().map(|&ms| ms_arg(ms)));
    let reply = RELEASE
        .run(redis, &keys, &args)
        .await
        .map_err(|e| error(e, parts, &redis.server))?;
    let context = parts.first().map_or("", |keys| &*keys.name);
    let Value::Array(items) = reply else {
        return Err(unexpected(&reply, context, &redis.server));
    };
    if items.len() != parts.len() {
        return Err(unexpected(&Value::Array(items), context, &redis.server));
    }
    items
        .into_iter()
        .zip(parts)
        .map(|(item, part)| released(item, &part.name, &redis.server))
        .collect()
}
