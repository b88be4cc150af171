//! The fair lock's scripts: Redisson's queue of waiters and their deadlines beside the lock hash,
//! and one wake-up channel per waiter (see `lua/fair/` for each contract,
//! and `lua/fair/queue.lua` for the queue's rules they share).

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use once_cell::sync::Lazy;

use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::lock::hash::{busy_or_delayed, released};
use crate::lock::replies::{Answer, Delay, Reentry, Released, REFUSE};
use crate::lock::{AcquireCall, Ask, ReleaseCall};
use crate::names::{FairKeys, LockKeys};
use crate::scripts::{catalogue, integer, ms_arg, text, Script, UNLOCK_MESSAGE};

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
/// [`Answer::Busy`] when not taken: how long to wait at most before trying again (-1: no bound
/// known); [`Answer::Delayed`] when the lock is free but in its lock-delay (`delay`). With
/// `queue`, a busy lock puts `field` at the tail of the queue, or renews its place there, for
/// `waiter_ms`; without, the queue is left as it is. With [`Reentry::Refused`], the owner's
/// re-entry fails with [`Error::Reentry`].
#[allow(clippy::too_many_arguments)]
pub(crate) async fn acquire(
    call: AcquireCall<'_>,
    fair: &FairKeys,
    delay: Option<&Delay>,
    reentry: Reentry,
) -> Result<Answer> {
    let (redis, keys, field) = (call.redis, call.hold.keys, call.hold.field);
    let (queue, waiter_ms) = (call.ask == Ask::Queue, call.shared.fair_waiter_ms);
    let all_keys = [
        Key::from(&keys.name),
        Key::from(&fair.queue),
        Key::from(&fair.timeouts),
        Key::from(&fair.alive),
        delay.map_or_else(|| Key::from(""), |d| Key::from(&d.shadow)),
    ];
    let args = [
        ms_arg(call.lease_ms),
        Value::String(field.clone()),
        ms_arg(waiter_ms),
        text(if queue { "wait" } else { "try" }),
        ms_arg(REDISSON_FAIR_WAIT_MS),
        delay.map_or_else(|| text(""), |d| ms_arg(d.ms)),
        text(REFUSE),
    ];
    // The shadow and its delay only for a lock with a lock-delay, the refusal only for a type
    // that refuses re-entry (lua/fair/acquire.lua).
    let n = if delay.is_some() { 5 } else { 4 };
    let m = match (reentry, delay.is_some()) {
        (Reentry::Refused, _) => 7,
        (Reentry::Counted, true) => 6,
        (Reentry::Counted, false) => 5,
    };
    let reply = ACQUIRE
        .run(redis, &all_keys[..n], &args[..m])
        .await
        .map_err(|e| {
            let mut named = named(keys, fair, 4);
            named.push(delay.map_or("", |d| &d.shadow));
            Error::from_script(e, &named, &redis.server)
        })?;
    busy_or_delayed(reply, &keys.name, &redis.server)
}

/// Releases one hold of `field`; the last one wakes the first waiter in the queue. A release
/// that leaves holds behind writes its replay key; the last one when `how.replay_last` asks.
pub(crate) async fn release(
    call: ReleaseCall<'_>,
    fair: &FairKeys,
    delay: Option<&Delay>,
) -> Result<Released> {
    let (redis, keys, field, how) = (call.redis, call.hold.keys, call.hold.field, call.how);
    let [name, queue, timeouts, channel] = queue_keys(keys, fair);
    let all_keys = [
        name,
        queue,
        timeouts,
        channel,
        how.replay.clone(),
        Key::from(&fair.alive),
        delay.map_or_else(|| Key::from(""), |d| Key::from(&d.shadow)),
    ];
    let args = [
        text(UNLOCK_MESSAGE),
        ms_arg(call.keep_ms),
        Value::String(field.clone()),
        text(how.publish),
        ms_arg(how.replay_ttl_ms),
        text(if how.sent_before { "1" } else { "0" }),
        ms_arg(delay.map_or(0, |d| d.ms)),
        text(if how.replay_last { "1" } else { "0" }),
    ];
    // The shadow only for a lock with a lock-delay (lua/fair/release.lua).
    let n = if delay.is_some() { 7 } else { 6 };
    let reply = RELEASE
        .run(redis, &all_keys[..n], &args)
        .await
        .map_err(|e| {
            let mut named = named(keys, fair, 6);
            named.push(delay.map_or("", |d| &d.shadow));
            Error::from_script(e, &named, &redis.server)
        })?;
    released(reply, &keys.name, &redis.server)
}

/// Deletes the lock whoever holds it and wakes the first waiter; `true` when there was one.
pub(crate) async fn force_release(
    redis: &Connection,
    keys: &LockKeys,
    fair: &FairKeys,
    publish: &'static str,
) -> Result<bool> {
    let [name, queue, timeouts, channel] = queue_keys(keys, fair);
    let shadow = crate::names::lease_shadow(&keys.name);
    let reply = FORCE_RELEASE
        .run(
            redis,
            &[
                name,
                queue,
                timeouts,
                channel,
                Key::from(&fair.alive),
                Key::from(&shadow),
            ],
            &[text(UNLOCK_MESSAGE), text(publish)],
        )
        .await
        .map_err(|e| {
            let mut named = named(keys, fair, 5);
            named.push(&shadow);
            Error::from_script(e, &named, &redis.server)
        })?;
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
