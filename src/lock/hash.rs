//! The lock hash's calls: a [`Lock`](crate::Lock)'s scripts, which every type built on Redisson's
//! `RLock` hash shares (a spin lock's, a fenced lock's, an election's), and the ones every lock
//! type shares (release, renewal, force release, abandon, inspect): their arguments and replies.

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use once_cell::sync::Lazy;

use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::names::LockKeys;
use crate::registry::{Closing, Renewal};

use super::kind::{AcquireCall, ReleaseCall};
use super::replies::{Answer, Delay, Reentry, Released, REFUSE};
use super::rw::scripts as rw;
use crate::scripts::{catalogue, integer, ms_arg, text, unexpected, Script, UNLOCK_MESSAGE};

static ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::LOCK_ACQUIRE));
static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::LOCK_RELEASE));
static RENEW: Lazy<Script> = Lazy::new(|| Script::new(catalogue::LOCK_RENEW));
static FORCE_RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::LOCK_FORCE_RELEASE));
static INSPECT: Lazy<Script> = Lazy::new(|| Script::new(catalogue::INSPECT));
static ABANDON: Lazy<Script> = Lazy::new(|| Script::new(catalogue::LOCK_ABANDON));
static RENEW_DELAYED: Lazy<Script> = Lazy::new(|| Script::new(catalogue::LOCK_RENEW_DELAYED));
static DELAY_LEFT: Lazy<Script> = Lazy::new(|| Script::new(catalogue::LOCK_DELAY_LEFT));

/// Takes a hold. [`Answer::Busy`] when it was not taken: how long to wait at most before trying
/// again (the holder's PTTL, -1 for a lock without expiry; or what is left of another waiter's
/// claim on a free lock). An [`Ask::Claim`] claims the lock's next hand-off, for the claim window
/// beyond the lease. With a `token` counter (a fenced lock), a new owner's hold increments it and
/// the answer carries the token. With a `delay` (never with a `token`), a free lock in its
/// lock-delay answers [`Answer::Delayed`]. With [`Reentry::Refused`], the owner's re-entry fails
/// with [`Error::Reentry`](crate::Error::Reentry).
pub(crate) async fn acquire(
    call: AcquireCall<'_>,
    token: Option<&Str>,
    delay: Option<&Delay>,
    reentry: Reentry,
) -> Result<Answer> {
    let (redis, keys) = (call.redis, call.hold.keys);
    // The third key is the token counter of a fenced lock or the shadow lease of a lock with a
    // lock-delay, and the fifth argument the delay (lua/lock/acquire.lua).
    let third = token.or(delay.map(|d| &d.shadow));
    let all_keys = [
        Key::from(&keys.name),
        Key::from(&keys.claim),
        third.map_or_else(|| Key::from(""), Key::from),
    ];
    let args = [
        ms_arg(call.lease_ms),
        Value::String(call.hold.field.clone()),
        Value::Integer(i64::from(call.ask.claim_priority())),
        ms_arg(call.shared.claim_window_ms),
        delay.map_or_else(|| text(""), |d| ms_arg(d.ms)),
        text(REFUSE),
    ];
    let n = if third.is_some() { 3 } else { 2 };
    let m = match (reentry, delay) {
        (Reentry::Refused, _) => 6,
        (Reentry::Counted, Some(_)) => 5,
        (Reentry::Counted, None) => 4,
    };
    let reply = ACQUIRE
        .run(redis, &all_keys[..n], &args[..m])
        .await
        .map_err(|e| {
            let third = third.map_or("", |t| &**t);
            Error::from_script(e, &[&keys.name, &keys.claim, third], &redis.server)
        })?;
    match reply {
        Value::Array(mut items) if items.len() == 1 => {
            let token = integer(items.remove(0), &keys.name, &redis.server)?;
            Ok(Answer::Taken {
                token: Some(token.max(0) as u64),
            })
        }
        other => busy_or_delayed(other, &keys.name, &redis.server),
    }
}

/// An acquire's reply without a token: nil (taken), the ms to wait, or `{ms, 'delayed'}`.
pub(crate) fn busy_or_delayed(reply: Value, name: &str, server: &str) -> Result<Answer> {
    match reply {
        Value::Null => Ok(Answer::Taken { token: None }),
        Value::Array(mut items) if items.len() == 2 => {
            Ok(Answer::Delayed(integer(items.remove(0), name, server)?))
        }
        other => Ok(Answer::Busy(integer(other, name, server)?)),
    }
}

/// What is left of lock `name`'s lock-delay (0: none in force; see `lua/lock/delay_left.lua`).
pub(crate) async fn delay_left(redis: &Connection, keys: &LockKeys) -> Result<u64> {
    let shadow = crate::names::lease_shadow(&keys.name);
    let reply = DELAY_LEFT
        .run(redis, &[Key::from(&keys.name), Key::from(&shadow)], &[])
        .await
        .map_err(|e| Error::from_script(e, &[&keys.name, &shadow], &redis.server))?;
    Ok(integer(reply, &keys.name, &redis.server)?.max(0) as u64)
}

/// Releases one hold of `field`; a retry with the same replay key (and `sent_before`) replays the
/// first reply.
pub(crate) async fn release(call: ReleaseCall<'_>, delay: Option<&Delay>) -> Result<Released> {
    let (redis, keys, field, how) = (call.redis, call.hold.keys, call.hold.field, call.how);
    // The shadow lease and the delay go for a lock with a lock-delay only; no allocation
    // either way.
    let all_keys = [
        Key::from(&keys.name),
        Key::from(&keys.channel),
        how.replay.clone(),
        Key::from(&keys.claim),
        delay.map_or_else(|| Key::from(""), |d| Key::from(&d.shadow)),
    ];
    let [publish, replay_ttl, claim_window, sent_before, replay_last] = how.args();
    let args = [
        text(UNLOCK_MESSAGE),
        ms_arg(call.keep_ms),
        Value::String(field.clone()),
        publish,
        replay_ttl,
        claim_window,
        sent_before,
        replay_last,
        ms_arg(delay.map_or(0, |d| d.ms)),
    ];
    let n = if delay.is_some() { 5 } else { 4 };
    let reply = RELEASE
        .run(redis, &all_keys[..n], &args[..n + 4])
        .await
        .map_err(|e| {
            let shadow = delay.map_or("", |d| &d.shadow);
            let named = [&*keys.name, &keys.channel, "", &keys.claim, shadow];
            Error::from_script(e, &named[..n], &redis.server)
        })?;
    released(reply, &keys.name, &redis.server)
}

/// A release script's reply: nil, 0, or 1 + the connections its wake-up reached.
pub(crate) fn released(reply: Value, name: &str, server: &str) -> Result<Released> {
    match reply {
        Value::Null => Ok(Released::NotHeld),
        other => match integer(other, name, server)? {
            0 => Ok(Released::StillHeld),
            n => Ok(Released::Freed {
                woken: n.saturating_sub(1) as u64,
            }),
        },
    }
}

/// Extends each lock whose field is still there (`readers`: each read-write lock whose reader
/// still lives, with its own timeout keys); `true` per renewed lock, in order.
pub(crate) async fn renew(renewal: Renewal<'_>, readers: bool) -> Result<Vec<bool>> {
    let Renewal {
        redis,
        locks,
        lease_ms,
    } = renewal;
    let keys: Vec<Key> = locks.iter().map(|(name, _)| Key::from(name)).collect();
    let mut args = Vec::with_capacity(locks.len() + 1);
    args.push(ms_arg(lease_ms));
    args.extend(locks.iter().map(|(_, field)| Value::String(field.clone())));
    let script: &Script = if readers { &rw::RENEW_READ } else { &RENEW };
    run_renew(script, redis, &keys, &args).await
}

/// Extends each lock with a lock-delay whose field is still there, and its shadow lease with
/// it; `true` per renewed lock, in order.
pub(crate) async fn renew_delayed(renewal: Renewal<'_>) -> Result<Vec<bool>> {
    let Renewal {
        redis,
        locks,
        lease_ms,
    } = renewal;
    let mut keys = Vec::with_capacity(locks.len() * 2);
    for (name, _) in locks {
        keys.push(Key::from(name));
        keys.push(Key::from(crate::names::lease_shadow(name)));
    }
    let mut args = Vec::with_capacity(locks.len() + 1);
    args.push(ms_arg(lease_ms));
    args.extend(locks.iter().map(|(_, field)| Value::String(field.clone())));
    run_renew(&RENEW_DELAYED, redis, &keys, &args).await
}

async fn run_renew(
    script: &Script,
    redis: &Connection,
    keys: &[Key],
    args: &[Value],
) -> Result<Vec<bool>> {
    let server = || redis.server.to_string();
    let reply = script
        .run(redis, keys, args)
        .await
        .map_err(|e| Error::redis(e, &server()))?;
    let Value::Array(items) = reply else {
        return Err(unexpected(&reply, "renew", &server()));
    };
    items
        .into_iter()
        .map(|item| match item.as_i64() {
            Some(n) => Ok(n == 1),
            None => Err(unexpected(&item, "renew", &server())),
        })
        .collect()
}

/// The keys of a script that may free a lock: the lock, its wake-up channel and its claim.
pub(crate) fn freeing_keys(keys: &LockKeys) -> [Key; 3] {
    [
        Key::from(&keys.name),
        Key::from(&keys.channel),
        Key::from(&keys.claim),
    ]
}

/// Deletes the lock whoever holds it, and its lock-delay's shadow lease; `true` when there was
/// a lock, or a lock-delay in force.
pub(crate) async fn force_release(
    redis: &Connection,
    keys: &LockKeys,
    publish: &'static str,
    claim_window_ms: u64,
) -> Result<bool> {
    let [name, channel, claim] = freeing_keys(keys);
    let shadow = crate::names::lease_shadow(&keys.name);
    let reply = FORCE_RELEASE
        .run(
            redis,
            &[name, channel, claim, Key::from(&shadow)],
            &[text(UNLOCK_MESSAGE), text(publish), ms_arg(claim_window_ms)],
        )
        .await
        .map_err(|e| {
            let named = [&*keys.name, &keys.channel, &keys.claim, &shadow];
            Error::from_script(e, &named, &redis.server)
        })?;
    Ok(integer(reply, &keys.name, &redis.server)? == 1)
}

/// Drops every hold of `field` on a lock hash at once (its client shuts down); `true` when it
/// had any. A read-write lock's holds go by `rw::abandon` instead.
pub(crate) async fn abandon(closing: &Closing<'_>, keys: &LockKeys, field: &Str) -> Result<bool> {
    let (redis, publish) = (closing.redis, closing.publish);
    let fair = crate::names::FairKeys::new(&keys.name);
    let [name, channel, claim] = freeing_keys(keys);
    let reply = ABANDON
        .run(
            redis,
            &[
                name,
                channel,
                claim,
                Key::from(&fair.queue),
                Key::from(crate::names::lease_shadow(&keys.name)),
            ],
            &[
                text(UNLOCK_MESSAGE),
                Value::String(field.clone()),
                text(publish),
                ms_arg(closing.claim_window_ms),
            ],
        )
        .await
        .map_err(|e| {
            let keys = [&*keys.name, &keys.channel, &keys.claim, &fair.queue];
            Error::from_script(e, &keys, &redis.server)
        })?;
    Ok(integer(reply, &keys.name, &redis.server)? > 0)
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

/// Reads whether the lock is taken (as `view` says: see `lua/inspect.lua`), its remaining lease
/// and one field's hold count.
pub(crate) async fn inspect(
    redis: &Connection,
    keys: &LockKeys,
    field: &Str,
    view: &'static str,
) -> Result<Inspection> {
    let name = &*keys.name;
    let reply = INSPECT
        .run(
            redis,
            &[Key::from(&keys.name)],
            &[Value::String(field.clone()), text(view)],
        )
        .await
        .map_err(|e| Error::from_redis(e, name, &redis.server))?;
    let Value::Array(items) = reply else {
        return Err(unexpected(&reply, name, &redis.server));
    };
    let [locked, pttl, holds]: [Value; 3] = items
        .try_into()
        .map_err(|items: Vec<Value>| unexpected(&Value::Array(items), name, &redis.server))?;
    Ok(Inspection {
        locked: integer(locked, name, &redis.server)? == 1,
        pttl: integer(pttl, name, &redis.server)?,
        holds: integer(holds, name, &redis.server)?.max(0) as u64,
    })
}
