//! The fair lock's scripts: Redisson's queue of waiters and their deadlines beside the lock hash,
//! and one wake-up channel per waiter (see `lua/fair/` for each contract,
//! and `lua/fair/queue.lua` for the queue's rules they share).

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use once_cell::sync::Lazy;

use super::{catalogue, integer, ms_arg, text, ReleaseHow, Released, Script, UNLOCK_MESSAGE};
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::names::{FairKeys, LockKeys};

static ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::FAIR_ACQUIRE));
static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::FAIR_RELEASE));
static FORCE_RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::FAIR_FORCE_RELEASE));
static LEAVE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::FAIR_LEAVE));

/// Redisson's per-waiter wait (`fairLockWaitTimeout`, 300 s by default): the deadlines of a
/// queue shared with Redisson follow its arithmetic with it (see `lua/fair/queue.lua`), each
/// waiter's the one's before + this, lowered by this when a waiter leaves the queue.
pub(crate) const REDISSON_FAIR_WAIT_MS: u64 = 300_000;

/// The lock, its queue, its deadlines and the waiters' channel prefix, as most fair scripts take
/// them.
fn queue_keys(keys: &LockKeys, fair: &FairKeys) -> [Key; 4] {
    [
        Key::from(&keys.name),
        Key::from(&fair.queue),
        Key::from(&fair.timeouts),
        Key::from(&keys.channel),
    ]
}

/// The key names by their place in a script's KEYS (the liveness record at `alive`), for an
/// error that names one.
fn named<'a>(keys: &'a LockKeys, fair: &'a FairKeys, alive: usize) -> Vec<&'a str> {
    let mut names = vec![&*keys.name, &*fair.queue, &*fair.timeouts, &*keys.channel];
    names.resize(alive - 1, &*keys.name);
    names.push(&*fair.alive);
    names
}

/// Takes a hold if the lock is free and no one is ahead of `field` in the queue (or re-enters).
/// `Ok(None)` when taken; `Ok(Some(ms))` when not: how long to wait at most before trying again
/// (-1: no bound known). With `queue`, a busy lock puts `field` at the tail of the queue, or
/// renews its place there, for `waiter_ms`; without, the queue is left as it is.
pub(crate) async fn acquire(
    redis: &Connection,
    keys: &LockKeys,
    fair: &FairKeys,
    lease_ms: u64,
    field: &Str,
    waiter_ms: u64,
    queue: bool,
) -> Result<Option<i64>> {
    let reply = ACQUIRE
        .run(
            redis,
            &[
                Key::from(&keys.name),
                Key::from(&fair.queue),
                Key::from(&fair.timeouts),
                Key::from(&fair.alive),
            ],
            &[
                ms_arg(lease_ms),
                Value::String(field.clone()),
                ms_arg(waiter_ms),
                text(if queue { "wait" } else { "try" }),
                ms_arg(REDISSON_FAIR_WAIT_MS),
            ],
        )
        .await
        .map_err(|e| Error::from_script(e, &named(keys, fair, 4), &redis.server))?;
    match reply {
        Value::Null => Ok(None),
        other => Ok(Some(integer(other, &keys.name, &redis.server)?)),
    }
}

/// Releases one hold of `field`; the last one wakes the first waiter in the queue. Every
/// release writes its replay key.
pub(crate) async fn release(
    redis: &Connection,
    keys: &LockKeys,
    fair: &FairKeys,
    field: &Str,
    keep_ms: u64,
    how: ReleaseHow<'_>,
) -> Result<Released> {
    let [name, queue, timeouts, channel] = queue_keys(keys, fair);
    let reply = RELEASE
        .run(
            redis,
            &[
                name,
                queue,
                timeouts,
                channel,
                how.latch.clone(),
                Key::from(&fair.alive),
            ],
            &[
                text(UNLOCK_MESSAGE),
                ms_arg(keep_ms),
                Value::String(field.clone()),
                text(how.publish),
                ms_arg(how.latch_ttl_ms),
                text(if how.sent_before { "1" } else { "0" }),
            ],
        )
        .await
        .map_err(|e| Error::from_script(e, &named(keys, fair, 6), &redis.server))?;
    super::released(reply, &keys.name, &redis.server)
}

/// Deletes the lock whoever holds it and wakes the first waiter; `true` when there was one.
pub(crate) async fn force_release(
    redis: &Connection,
    keys: &LockKeys,
    fair: &FairKeys,
    publish: &'static str,
) -> Result<bool> {
    let [name, queue, timeouts, channel] = queue_keys(keys, fair);
    let reply = FORCE_RELEASE
        .run(
            redis,
            &[name, queue, timeouts, channel, Key::from(&fair.alive)],
            &[text(UNLOCK_MESSAGE), text(publish)],
        )
        .await
        .map_err(|e| Error::from_script(e, &named(keys, fair, 5), &redis.server))?;
    Ok(integer(reply, &keys.name, &redis.server)? == 1)
}

/// Takes `field` out of the queue (a waiter gave up); wakes the next waiter when that makes it
/// first and the lock is free. `true` when `field` was queued.
pub(crate) async fn leave(
    redis: &Connection,
    keys: &LockKeys,
    fair: &FairKeys,
    field: &Str,
    publish: &'static str,
) -> Result<bool> {
    let [name, queue, timeouts, channel] = queue_keys(keys, fair);
    let reply = LEAVE
        .run(
            redis,
            &[name, queue, timeouts, channel, Key::from(&fair.alive)],
            &[
                Value::String(field.clone()),
                text(publish),
                text(UNLOCK_MESSAGE),
                ms_arg(REDISSON_FAIR_WAIT_MS),
            ],
        )
        .await
        .map_err(|e| Error::from_script(e, &named(keys, fair, 5), &redis.server))?;
    Ok(integer(reply, &keys.name, &redis.server)? == 1)
}
