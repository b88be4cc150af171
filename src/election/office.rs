//! The election's lock type: a term is the one hold of the election's lock hash, taken and given
//! back by the election's own scripts (`lua/election/`), which also write each change to the
//! election's history. Everything else (waiting, the watchdog, releases that count once, the
//! shutdown) is the lock core's, as for any lock type.

use std::time::Duration;

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use once_cell::sync::Lazy;

use crate::connection::Connection;
use crate::error::{Call, Error, Result};
use crate::lock::hash::{busy_or_delayed, released};
use crate::lock::replies::{Answer, Delay, ReleaseHow, Released};
use crate::lock::{read_token, AcquireCall, Hold, LockType, PlainTurns, ReleaseCall, Turns};
use crate::names::{prefixed, LockKeys};
use crate::primitive::Primitive;
use crate::registry::{Closing, HoldKey};
use crate::scripts::{catalogue, integer, ms_arg, text, Script, UNLOCK_MESSAGE};
use crate::shared::Shared;

static ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::ELECTION_ACQUIRE));
static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::ELECTION_RELEASE));
static FORCE_RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::ELECTION_FORCE_RELEASE));

/// This process as an elected leader's history entry names it: pid, host, program.
pub(super) static PROCESS: Lazy<[Value; 3]> = Lazy::new(|| {
    [
        Value::Integer(i64::from(std::process::id())),
        Value::from(crate::connection::naming::host()),
        Value::from(crate::connection::naming::program()),
    ]
});

/// The keys beside an election's lock hash: its epoch counter, history and change channel.
#[derive(Debug, Clone)]
pub(super) struct ElectionKeys {
    /// The epoch counter, a fenced lock's token counter: `redisson_lock_token:{<lock>}`.
    pub(super) epoch: Str,
    /// The history stream, `relock_election_log:{<lock>}`.
    pub(super) history: Str,
    /// The change channel, `relock_election_changes:{<lock>}`.
    pub(super) changes: Str,
}

impl ElectionKeys {
    /// The keys of the scripts that read or write history: `lock`, then the epoch, history and
    /// change channel (`lua/election/observe.lua`'s and `proclaim.lua`'s).
    pub(super) fn with_lock(&self, lock: &Str) -> [Key; 4] {
        [
            Key::from(lock),
            Key::from(&self.epoch),
            Key::from(&self.history),
            Key::from(&self.changes),
        ]
    }

    /// [`with_lock`](Self::with_lock)'s keys by their place, for a script's errors (the channel
    /// is no key a command could fail on).
    pub(super) fn named_with<'k>(&'k self, lock: &'k str) -> [&'k str; 4] {
        [lock, &self.epoch, &self.history, ""]
    }

    /// The keys of the election whose lock hash is `lock`.
    pub(super) fn new(lock: &str) -> ElectionKeys {
        use crate::names::prefix;
        ElectionKeys {
            epoch: prefixed(prefix::TOKEN, lock).into(),
            history: prefixed(prefix::HISTORY, lock).into(),
            changes: prefixed(prefix::CHANGES, lock).into(),
        }
    }
}

/// The election's lock type: its keys, its lock-delay if it has one, and the metadata its
/// candidates are elected with (empty: none).
pub(super) struct Office {
    pub(super) keys: ElectionKeys,
    pub(super) delay: Option<Delay>,
    pub(super) metadata: Str,
}

impl LockType for Office {
    fn primitive(&self) -> Primitive {
        Primitive::Election
    }

    fn turns<'h>(&self, hold: &'h Hold, wait: Option<Duration>) -> Box<dyn Turns + 'h> {
        Box::new(PlainTurns::new(hold, wait))
    }

    fn acquire<'a>(&'a self, call: AcquireCall<'a>) -> Call<'a, Answer> {
        Box::pin(self.take(call))
    }

    fn token<'a>(&'a self, redis: &'a Connection, _keys: &'a LockKeys) -> Call<'a, Option<u64>> {
        Box::pin(read_token(redis, &self.keys.epoch))
    }

    fn release<'a>(&'a self, call: ReleaseCall<'a>) -> Call<'a, Released> {
        Box::pin(self.give_back(call.redis, call.hold.keys, call.hold.field, call.how))
    }

    fn force_release<'a>(&'a self, shared: &'a Shared, keys: &'a LockKeys) -> Call<'a, bool> {
        Box::pin(self.force(shared, keys))
    }

    fn hands_off_with_grace(&self) -> bool {
        true
    }

    fn lock_delay(&self) -> Option<&Delay> {
        self.delay.as_ref()
    }

    fn abandon<'a>(&'a self, closing: &'a Closing<'a>, held: &'a HoldKey) -> Call<'a, bool> {
        Box::pin(async move {
            let (keys, field) = (self.keys(&held.0)?, &held.1);
            let replay = keys.replay_key(field);
            let how = ReleaseHow {
                replay: &replay,
                replay_ttl_ms: 0,
                publish: closing.publish,
                claim_window_ms: closing.claim_window_ms,
                sent_before: false,
                replay_last: false,
            };
            let released = self.give_back(closing.redis, &keys, field, how).await?;
            Ok(matches!(released, Released::Freed { .. }))
        })
    }
}

impl Office {
    /// Runs `lua/election/acquire.lua`; a term taken after a vacancy that history records is
    /// counted in the meter's vacancies.
    async fn take(&self, call: AcquireCall<'_>) -> Result<Answer> {
        let lock = call.hold.keys;
        let mut keys = vec![
            Key::from(&lock.name),
            Key::from(&lock.claim),
            Key::from(&self.keys.epoch),
            Key::from(&self.keys.history),
            Key::from(&self.keys.changes),
        ];
        let [pid, host, program] = &*PROCESS;
        let mut args = vec![
            ms_arg(call.lease_ms),
            Value::String(call.hold.field.clone()),
            Value::Integer(i64::from(call.ask.claim_priority())),
            ms_arg(call.shared.claim_window_ms),
            text(call.shared.publish),
            pid.clone(),
            host.clone(),
            program.clone(),
        ];
        if let Some(delay) = &self.delay {
            keys.push(Key::from(&delay.shadow));
        }
        args.push(ms_arg(self.delay.as_ref().map_or(0, |delay| delay.ms)));
        args.push(Value::String(self.metadata.clone()));
        let reply = ACQUIRE
            .run(call.redis, &keys, &args)
            .await
            .map_err(|e| Error::from_script(e, &self.named(lock), &call.redis.server))?;
        let server = &call.redis.server;
        match reply {
            Value::Array(items) if items.len() == 2 && items[1].as_i64().is_some() => {
                let [epoch, vacant]: [Value; 2] = items.try_into().expect("two items");
                let epoch = integer(epoch, &lock.name, server)?.max(0) as u64;
                let vacant = integer(vacant, &lock.name, server)?;
                if let Ok(ms) = u64::try_from(vacant) {
                    let name = self.election_name(&lock.name);
                    call.shared.meter().vacancy(name, Duration::from_millis(ms));
                }
                Ok(Answer::Taken { token: Some(epoch) })
            }
            other => busy_or_delayed(other, &lock.name, server),
        }
    }

    /// Runs `lua/election/release.lua`: gives the term of `field` back.
    async fn give_back(
        &self,
        redis: &Connection,
        lock: &LockKeys,
        field: &Str,
        how: ReleaseHow<'_>,
    ) -> Result<Released> {
        let mut keys = vec![
            Key::from(&lock.name),
            Key::from(&lock.channel),
            how.replay.clone(),
            Key::from(&lock.claim),
            Key::from(&self.keys.epoch),
            Key::from(&self.keys.history),
            Key::from(&self.keys.changes),
        ];
        if let Some(delay) = &self.delay {
            keys.push(Key::from(&delay.shadow));
        }
        let flag = |on: bool| text(if on { "1" } else { "0" });
        let args = [
            text(UNLOCK_MESSAGE),
            text(how.publish),
            Value::String(field.clone()),
            ms_arg(how.replay_ttl_ms.max(1)),
            ms_arg(how.claim_window_ms),
            flag(how.sent_before),
            flag(how.replay_last),
        ];
        let reply = RELEASE.run(redis, &keys, &args).await.map_err(|e| {
            let named = [
                &*lock.name,
                &lock.channel,
                "",
                &lock.claim,
                &self.keys.epoch,
                &self.keys.history,
                "",
                self.delay.as_ref().map_or("", |d| &d.shadow),
            ];
            Error::from_script(e, &named, &redis.server)
        })?;
        released(reply, &lock.name, &redis.server)
    }

    /// Runs `lua/election/force_release.lua`: ends the term whoever leads.
    async fn force(&self, shared: &Shared, lock: &LockKeys) -> Result<bool> {
        let redis = &shared.redis;
        let shadow = crate::names::lease_shadow(&lock.name);
        let keys = [
            Key::from(&lock.name),
            Key::from(&lock.channel),
            Key::from(&lock.claim),
            Key::from(&shadow),
            Key::from(&self.keys.epoch),
            Key::from(&self.keys.history),
            Key::from(&self.keys.changes),
        ];
        let args = [
            text(UNLOCK_MESSAGE),
            text(shared.publish),
            ms_arg(shared.claim_window_ms),
        ];
        let reply = FORCE_RELEASE.run(redis, &keys, &args).await.map_err(|e| {
            let named = [
                &*lock.name,
                &lock.channel,
                &lock.claim,
                &shadow,
                &self.keys.epoch,
                &self.keys.history,
            ];
            Error::from_script(e, &named, &redis.server)
        })?;
        Ok(integer(reply, &lock.name, &redis.server)? == 1)
    }

    /// The keys of the acquire script, by their place, for its errors.
    fn named<'k>(&'k self, lock: &'k LockKeys) -> [&'k str; 6] {
        [
            &lock.name,
            &lock.claim,
            &self.keys.epoch,
            &self.keys.history,
            "",
            self.delay.as_ref().map_or("", |d| &d.shadow),
        ]
    }

    /// The election's name, from its lock's.
    fn election_name<'n>(&self, lock: &'n str) -> &'n str {
        lock.strip_prefix(crate::names::prefix::ELECTION)
            .unwrap_or(lock)
    }
}
