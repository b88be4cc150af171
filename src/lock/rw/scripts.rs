//! The read-write lock's scripts: Redisson's `RReadWriteLock` layout (the hash with `mode`, reader
//! and writer fields, one timeout key per read hold) and its channel (see `lua/rw/` for each
//! contract, and `lua/rw/readers.lua` for the rules every one of them shares).

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use once_cell::sync::Lazy;

use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::lock::hash::{freeing_keys, released};
use crate::lock::replies::{Answer, Released};
use crate::lock::{AcquireCall, Ask, ReleaseCall};
use crate::names::LockKeys;
use crate::redis_error::{classify, What};
use crate::registry::Closing;
use crate::scripts::{catalogue, integer, ms_arg, text, Script};

static READ_ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::RW_READ_ACQUIRE));
static WRITE_ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::RW_WRITE_ACQUIRE));
static READ_RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::RW_READ_RELEASE));
static WRITE_RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::RW_WRITE_RELEASE));
static FORCE_RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::RW_FORCE_RELEASE));
static ABANDON: Lazy<Script> = Lazy::new(|| Script::new(catalogue::RW_ABANDON));
pub(crate) static RENEW_READ: Lazy<Script> = Lazy::new(|| Script::new(catalogue::RW_RENEW_READ));

/// Redisson's read unlock message: wakes one waiter per process (relock's own waiters on a
/// read-write lock all wake on any message).
pub(crate) const READ_UNLOCK: &str = "0";
/// Redisson's write unlock message: wakes every waiter.
pub(crate) const WRITE_UNLOCK: &str = "1";

/// The write acquire's refusal of an owner that holds the read lock (`lua/rw/write_acquire.lua`).
const UPGRADE: &str = "RELOCK_UPGRADE";

/// The writer field of the owner whose reader field is `reader`, and back.
pub(crate) fn writer_field(reader: &str) -> Str {
    [reader, ":write"].concat().into()
}

/// Whether `field` is a writer's field.
pub(crate) fn is_writer_field(field: &str) -> bool {
    field.ends_with(":write")
}

fn reader_field(writer: &str) -> Str {
    writer.strip_suffix(":write").unwrap_or(writer).into()
}

/// Maps an acquire's reply: `Ok(None)` taken, `Ok(Some(ms))` busy, the upgrade refusal typed.
fn acquired(
    reply: std::result::Result<Value, fred::error::Error>,
    keys: &LockKeys,
    server: &str,
) -> Result<Answer> {
    let reply = reply.map_err(|e| match classify(&e) {
        What::Relock { code: UPGRADE, .. } => Error::UpgradeWouldDeadlock {
            lock: keys.name.to_string(),
        },
        _ => Error::from_script(e, &[&keys.name, &keys.claim], server),
    })?;
    match reply {
        Value::Null => Ok(Answer::Taken { token: None }),
        other => Ok(Answer::Busy(integer(other, &keys.name, server)?)),
    }
}

/// Takes a read hold for the call's reader field: taken, or how long to wait at most.
pub(crate) async fn read_acquire(call: AcquireCall<'_>) -> Result<Answer> {
    let (redis, keys, field) = (call.redis, call.hold.keys, call.hold.field);
    let reply = READ_ACQUIRE
        .run(
            redis,
            &[Key::from(&keys.name), Key::from(&keys.claim)],
            &[
                ms_arg(call.lease_ms),
                Value::String(field.clone()),
                Value::String(writer_field(field)),
                ms_arg(call.shared.claim_window_ms),
            ],
        )
        .await;
    acquired(reply, keys, &redis.server)
}

/// Takes a write hold for writer `field`; with `claim`, a read-locked lock is claimed for it so
/// that new readers stay out. [`Error::UpgradeWouldDeadlock`] when the owner holds the read lock.
pub(crate) async fn write_acquire(call: AcquireCall<'_>) -> Result<Answer> {
    let (redis, keys, field) = (call.redis, call.hold.keys, call.hold.field);
    let claim = matches!(call.ask, Ask::Claim(_));
    let reply = WRITE_ACQUIRE
        .run(
            redis,
            &[Key::from(&keys.name), Key::from(&keys.claim)],
            &[
                ms_arg(call.lease_ms),
                Value::String(field.clone()),
                Value::String(reader_field(field)),
                Value::Integer(i64::from(claim)),
                ms_arg(call.shared.claim_window_ms),
            ],
        )
        .await;
    acquired(reply, keys, &redis.server)
}

/// Releases one hold of reader (`write: false`) or writer `field`. Every release writes its
/// replay key.
pub(crate) async fn release(call: ReleaseCall<'_>, write: bool) -> Result<Released> {
    let (redis, keys, field, how) = (call.redis, call.hold.keys, call.hold.field, call.how);
    let (script, message) = if write {
        (&WRITE_RELEASE, WRITE_UNLOCK)
    } else {
        (&READ_RELEASE, READ_UNLOCK)
    };
    let reply = script
        .run(
            redis,
            &[
                Key::from(&keys.name),
                Key::from(&keys.channel),
                how.replay.clone(),
                Key::from(&keys.claim),
            ],
            &[
                text(message),
                ms_arg(call.keep_ms),
                Value::String(field.clone()),
                text(how.publish),
                ms_arg(how.replay_ttl_ms),
                ms_arg(how.claim_window_ms),
                text(if how.sent_before { "1" } else { "0" }),
            ],
        )
        .await
        .map_err(|e| Error::from_redis(e, &keys.name, &redis.server))?;
    released(reply, &keys.name, &redis.server)
}

/// Deletes the lock whoever holds it, if it is in `mode` ("read" or "write"); `true` when it was.
pub(crate) async fn force_release(
    redis: &Connection,
    keys: &LockKeys,
    mode: &'static str,
    publish: &'static str,
    window_ms: u64,
) -> Result<bool> {
    let args = [text(mode), text(publish), ms_arg(window_ms)];
    let reply = FORCE_RELEASE
        .run(redis, &freeing_keys(keys), &args)
        .await
        .map_err(|e| Error::from_redis(e, &keys.name, &redis.server))?;
    Ok(integer(reply, &keys.name, &redis.server)? == 1)
}

/// Drops every hold of `field` (a reader's, or a writer's) on a read-write lock at once (its
/// client shuts down), waking the lock's waiters when that frees it or turns it into a read
/// lock; `true` when it had any. `keys` are the read-write lock's.
pub(crate) async fn abandon(closing: &Closing<'_>, keys: &LockKeys, field: &Str) -> Result<bool> {
    let redis = closing.redis;
    let args = [
        Value::String(field.clone()),
        text(closing.publish),
        ms_arg(closing.claim_window_ms),
    ];
    let reply = ABANDON
        .run(redis, &freeing_keys(keys), &args)
        .await
        .map_err(|e| Error::from_redis(e, &keys.name, &redis.server))?;
    Ok(integer(reply, &keys.name, &redis.server)? > 0)
}
