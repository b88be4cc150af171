//! The fence's scripts: one check (`lua/fence/check.lua`) that refuses a stale token and records a
//! passing one, followed in the same script by the operation's own part (`lua/fence/*.lua`, or a
//! user's Lua). The fence key and the token go after the operation's own keys and arguments,
//! where the check takes them off.

use fred::bytes_utils::Str;
use fred::interfaces::KeysInterface;
use fred::types::{Key, Value};
use once_cell::sync::Lazy;

use crate::connection::Connection;
use crate::error::{Error, Result, Shown};
use crate::redis_error::{self, classify, Blamed, What};
use crate::scripts::{catalogue, Script};

static SET: Lazy<Script> = Lazy::new(|| Script::new(catalogue::FENCE_SET));
static HSET: Lazy<Script> = Lazy::new(|| Script::new(catalogue::FENCE_HSET));
static GET: Lazy<Script> = Lazy::new(|| Script::new(catalogue::FENCE_GET));

/// The check's refusal of a stale token, `RELOCK_STALE <seen>` (see `lua/fence/check.lua`; its
/// answer for a fence key of another type is a `WRONGTYPE` that [`Blamed::Fence`] recognizes).
const STALE: &str = "RELOCK_STALE";

/// Sets `key` to `value` if `token` passes the fence `fence`.
pub(crate) async fn set(
    redis: &Connection,
    fence: &Str,
    token: u64,
    key: &str,
    value: Value,
) -> Result<()> {
    run(&SET, redis, fence, token, &[key], vec![value], Some(key)).await?;
    Ok(())
}

/// Sets `field` of the hash `key` to `value` if `token` passes the fence `fence`.
pub(crate) async fn hset(
    redis: &Connection,
    fence: &Str,
    token: u64,
    key: &str,
    field: &str,
    value: Value,
) -> Result<()> {
    let args = vec![Value::from(field), value];
    run(&HSET, redis, fence, token, &[key], args, Some(key)).await?;
    Ok(())
}

/// Reads `key` if `token` passes the fence `fence`, recording the token.
pub(crate) async fn get(redis: &Connection, fence: &Str, token: u64, key: &str) -> Result<Value> {
    run(&GET, redis, fence, token, &[key], Vec::new(), Some(key)).await
}

/// Runs a user's Lua `body` with its own `keys` and `args` if `token` passes the fence `fence`.
pub(crate) async fn eval(
    redis: &Connection,
    fence: &Str,
    token: u64,
    body: &str,
    keys: &[&str],
    args: &[Value],
) -> Result<Value> {
    let script = Script::from_text([catalogue::FENCE_CHECK, body].concat().into());
    // The one key a WRONGTYPE can be blamed on; with several, Redis's own message says more.
    let blamed = match keys {
        [key] => Some(*key),
        _ => None,
    };
    run(&script, redis, fence, token, keys, args.to_vec(), blamed).await
}

/// The highest token the fence `fence` has seen, 0 when none.
pub(crate) async fn seen(redis: &Connection, fence: &Str) -> Result<u64> {
    let seen: Option<String> = redis
        .get(Key::from(fence))
        .await
        .map_err(|e| Error::from_redis(e, fence, &redis.server))?;
    match seen {
        None => Ok(0),
        Some(seen) => seen.parse().map_err(|_| {
            let reason = format!(
                "fence key `{}` holds a value that is not a token",
                Shown(fence)
            );
            Error::redis(redis_error::unreadable(reason), &redis.server)
        }),
    }
}

/// Runs the fenced `script` on the operation's `keys` and `args`, followed by the fence key and
/// the token. `blamed` is the key a WRONGTYPE from the operation's own part names.
async fn run(
    script: &Script,
    redis: &Connection,
    fence: &Str,
    token: u64,
    keys: &[&str],
    mut args: Vec<Value>,
    blamed: Option<&str>,
) -> Result<Value> {
    let mut all_keys: Vec<Key> = Vec::with_capacity(keys.len() + 1);
    all_keys.extend(keys.iter().map(|key| Key::from(*key)));
    all_keys.push(Key::from(fence));
    args.push(Value::from(token.to_string()));
    script
        .run(redis, &all_keys, &args)
        .await
        .map_err(|e| refused(e, fence, token, blamed, &redis.server))
}

/// What a fenced script's error reply means: a stale token, a fence key of another type, or an
/// error of the operation itself.
fn refused(
    error: fred::error::Error,
    fence: &str,
    token: u64,
    blamed: Option<&str>,
    server: &str,
) -> Error {
    match classify(&error) {
        What::Relock {
            code: STALE,
            payload,
        } => {
            if let Ok(seen) = payload.parse() {
                return Error::StaleToken {
                    resource: fence.to_owned(),
                    seen,
                    presented: token,
                };
            }
        }
        What::WrongType(Blamed::Fence) => {
            return Error::WrongType {
                key: fence.to_owned(),
            }
        }
        _ => {}
    }
    match blamed {
        Some(key) => Error::from_redis(error, key, server),
        None => Error::redis(error, server),
    }
}
