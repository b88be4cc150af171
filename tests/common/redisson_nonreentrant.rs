//! A Redisson peer for the non-reentrant locks (`getNonReentrantLock`, `getNonReentrantFairLock`,
//! Redisson 4.4.0 on): a "Java" client thread that does on the wire what those locks do, so
//! relock's `NonReentrantLock` and `NonReentrantFairLock` can be tested against it.
//!
//! What is Redisson's here (the Lua is written anew; the effects, KEYS, ARGV and replies are
//! Redisson's):
//! - the acquire scripts: `RLock`'s and `RFairLock`'s with the re-entry branch answering the
//!   error reply whose text is the last ARGV, [`REENTRY_ERR`]; a re-entry writes nothing (a fair
//!   script's purge of dead heads, done before, stays), a new hold's count is 1;
//! - the unlock scripts, inherited unchanged from `RLock` and `RFairLock`: the unlock latch
//!   `redisson_unlock_latch:{<name>}:<request id>` (32 random hex chars per call, with
//!   Redisson's default latch TTL, deleted once the script replied), and `PUBLISH 0` on
//!   `redisson_lock__channel:{<name>}`, or, for the fair lock, on the next waiter's own
//!   `redisson_lock__channel:{<name>}:<field>`;
//! - the holder field `<client uuid>:<thread id>` and the client's wall clock as the fair
//!   scripts' `now`;
//! - the `lock()` loop: one attempt; else subscribe, then {attempt; wait for a message at most
//!   the ms the script replied}, a refusal ending it at once, as Redisson's throws.
//!
//! A single server gets plain `EVAL` and `PUBLISH` (Redisson sends `EVALSHA`, with the same
//! effects). Every method panics on a Redis error other than the refusal, where Redisson throws.

use std::time::Duration;

use fred::clients::Client as Redis;
use fred::interfaces::{KeysInterface, LuaInterface};
use fred::types::Value;

use super::redisson_fair::{java_now, unlock_script as fair_unlock_script};
use super::{braced, fair_queue_key, fair_timeout_key, lock_channel, RawSubscriber, RedisServer};

/// The text of Redisson's refusal (`RedissonNonReentrantLock.REENTRY_ERR`), sent as the
/// acquire scripts' last ARGV and answered as an error reply (Redis 7 puts `ERR ` before it).
pub const REENTRY_ERR: &str = "NON_REENTRANT_REACQUIRE";

/// The publish command the unlock scripts are given (`getPublishCommand` off a sharded
/// cluster).
pub const PUBLISH: &str = "PUBLISH";

/// The message an unlock publishes (`LockPubSub.UNLOCK_MESSAGE`).
pub const UNLOCK_MESSAGE: &str = "0";

/// The Java client's id (`ServiceManager.id`, a random UUID per Redisson client): the first
/// half of its holder fields.
pub const JAVA_CLIENT_ID: &str = "0d8a3f6e-51c2-4b7e-9a14-c3e2f7b06d59";

/// The holder field of the Java client's thread `thread` (`getLockName(threadId)`).
pub fn java_field(thread: u64) -> String {
    format!("{JAVA_CLIENT_ID}:{thread}")
}

/// The plain acquire (both `EVAL_LONG` for `lock()` and `EVAL_NULL_BOOLEAN` for `tryLock()`):
/// KEYS = [name], ARGV = [lease ms, field, refusal text]. nil: taken (count 1, TTL the lease);
/// the refusal as an error reply when the field holds it (nothing written); else the lock's
/// PTTL.
pub const ACQUIRE: &str = r"
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return redis.error_reply(ARGV[3])
end
return redis.call('pttl', KEYS[1])
";

/// `RLock`'s unlock: KEYS = [name, channel, unlock latch], ARGV = [message, lease ms, field,
/// publish command, latch TTL ms]. A latch that exists replays its result. nil: the field does
/// not hold it (no latch written); 0: one hold fewer, the TTL set to the lease; 1: the last hold
/// went, the key deleted and the message published.
pub const UNLOCK: &str = r"
local replay = redis.call('get', KEYS[3])
if replay ~= false then return tonumber(replay) end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[3], 0, 'px', ARGV[5])
    return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1
";

/// The fair acquire, `queueing` for `EVAL_LONG` (`lock()`, `tryLock(wait)`: ARGV = [lease ms,
/// field, wait ms, now, refusal]) or not for `EVAL_NULL_BOOLEAN` (`tryLock()`: ARGV = [lease ms,
/// field, now, wait ms, refusal], the order Redisson swaps); KEYS = [name, queue, deadlines].
///
/// Both drop the heads whose deadline has passed, then take a free lock nobody queues ahead
/// for (hold count 1; the deadlines left drop by the wait), then refuse a field that holds it
/// (the purge kept). Not taken: the no-wait script replies 1, never queueing; the queueing one
/// replies the lock's PTTL (at least 0) to a field queued already, else queues the field behind
/// the tail with the deadline `ttl + wait + now` and replies `ttl`: the tail's deadline less now,
/// or the lock's PTTL when nobody queues.
pub fn fair_acquire_script(queueing: bool) -> String {
    let (wait_arg, now_arg) = if queueing { (3, 4) } else { (4, 3) };
    let head = format!(
        r"
local now = tonumber(ARGV[{now_arg}])
local wait = tonumber(ARGV[{wait_arg}])
while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if first == false then break end
    local deadline = redis.call('zscore', KEYS[3], first)
    if deadline ~= false and tonumber(deadline) <= now then
        redis.call('zrem', KEYS[3], first)
        redis.call('lpop', KEYS[2])
    else
        break
    end
end
if redis.call('exists', KEYS[1]) == 0 and (redis.call('exists', KEYS[2]) == 0
        or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    local behind = redis.call('zrange', KEYS[3], 0, -1)
    for i = 1, #behind do
        redis.call('zincrby', KEYS[3], -wait, behind[i])
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    return redis.error_reply(ARGV[5])
end
"
    );
    let tail = if queueing {
        r"
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
    return math.max(0, redis.call('pttl', KEYS[1]))
end
local last = redis.call('lindex', KEYS[2], -1)
local ttl
if last ~= false and last ~= ARGV[2] and redis.call('zscore', KEYS[3], last) ~= false then
    ttl = tonumber(redis.call('zscore', KEYS[3], last)) - now
else
    ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + wait + now, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl
"
    } else {
        "return 1\n"
    };
    head + tail
}

/// What one run of an acquire script replied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// nil: the thread holds the lock now.
    Acquired,
    /// A number: not taken. `lock()`'s scripts reply how long to wait at most (ms); the fair
    /// `tryLock()` replies 1, which Redisson reads as `false`.
    Busy(i64),
    /// The error reply [`REENTRY_ERR`]: the thread holds the lock already (Redisson throws
    /// `IllegalMonitorStateException`).
    Refused,
}

/// What an unlock script replied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unlocked {
    /// 1: the last hold went (or, for the fair lock, the lock was gone already); the next waiter
    /// was told.
    Released,
    /// 0: holds are left (only when reentrant code on the same field counted more than one).
    StillHeld,
    /// nil: the thread does not hold it (Redisson throws `IllegalMonitorStateException`).
    NotHeld,
}

/// A new unlock request id: 16 random bytes as 32 lowercase hex chars
/// (`ServiceManager.generateId`).
pub fn request_id() -> String {
    rand::random::<[u8; 16]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The unlock latch TTL with Redisson's defaults (`timeout` 3000 ms, `retryAttempts` 4,
/// `EqualJitterDelay(1 s, 2 s)`): `(timeout + delay(4)) * 4`, the delay 1000 to 2000 ms.
pub fn latch_ttl_ms() -> i64 {
    let delay = 1000 + rand::random::<u64>() % 1001;
    (3000 + delay as i64) * 4
}

/// The unlock latch of lock `name` for request `request`.
pub fn latch_key(name: &str, request: &str) -> String {
    format!("{}:{request}", braced("redisson_unlock_latch", name))
}

/// Runs `script` and reads its reply as an acquire's; `what` names it in a panic.
async fn acquire(
    redis: &Redis,
    script: &str,
    keys: Vec<String>,
    args: Vec<String>,
    what: &str,
) -> Attempt {
    match redis.eval::<Value, _, _, _>(script, keys, args).await {
        Ok(Value::Null) => Attempt::Acquired,
        Ok(Value::Integer(ms)) => Attempt::Busy(ms),
        Ok(other) => panic!("{what}: unexpected reply {other:?}"),
        Err(e) if format!("{} {e}", e.details()).contains(REENTRY_ERR) => Attempt::Refused,
        Err(e) => panic!("{what}: {e:?}"),
    }
}

/// Runs an unlock `script` whose last KEY is the latch of `request` on `name`, then deletes the
/// latch as Redisson does once the script replied; `what` names it in a panic.
async fn unlock(
    redis: &Redis,
    script: &str,
    keys: Vec<String>,
    args: Vec<String>,
    latch: String,
    what: &str,
) -> Unlocked {
    let reply: Value = redis
        .eval(script, keys, args)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e:?}"));
    let _: i64 = redis
        .del(latch)
        .await
        .unwrap_or_else(|e| panic!("{what}'s latch DEL: {e:?}"));
    match reply {
        Value::Integer(1) => Unlocked::Released,
        Value::Integer(0) => Unlocked::StillHeld,
        Value::Null => Unlocked::NotHeld,
        other => panic!("{what}: unexpected reply {other:?}"),
    }
}

/// `lock()`'s loop once the first attempt failed: subscribe to `channel`, then {`attempt`; wait
/// for a message at most the ms it replied (forever for a negative one)} until it is taken or
/// refused.
async fn wait_loop<F, Fut>(server: &RedisServer, channel: &str, mut attempt: F) -> Attempt
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Attempt>,
{
    let mut sub = RawSubscriber::subscribe(server, &[channel]).await;
    loop {
        let ms = match attempt().await {
            Attempt::Busy(ms) => ms,
            done => return done,
        };
        // No expiry: Redisson waits for a message alone; a day stands in for "forever".
        let wait = u64::try_from(ms).map_or(Duration::from_secs(86_400), Duration::from_millis);
        // Any message, or the end of the wait, means: try again.
        let _ = sub.next_message(wait).await;
    }
}

/// One thread of a Java client on one non-reentrant lock (`getNonReentrantLock(name)`).
pub struct RedissonNonReentrant {
    /// The Java client's connection.
    pub redis: Redis,
    /// The lock's name, its hash key.
    pub name: String,
    /// The thread's holder field, `<uuid>:<thread id>`.
    pub field: String,
    /// The lease of an acquire, and the TTL an unlock that leaves holds sets
    /// (`internalLockLeaseTime`: `lock(lease)`'s lease, or the watchdog timeout).
    pub lease_ms: i64,
}

impl RedissonNonReentrant {
    /// The thread with holder field `field` on lock `name`, with leases of `lease_ms`, on a
    /// connection of its own to `server`.
    pub async fn new(
        server: &RedisServer,
        name: &str,
        field: &str,
        lease_ms: i64,
    ) -> RedissonNonReentrant {
        RedissonNonReentrant {
            redis: super::fred_client(server).await,
            name: name.to_owned(),
            field: field.to_owned(),
            lease_ms,
        }
    }

    /// The lock's channel, `redisson_lock__channel:{<name>}`, where its unlocks publish.
    pub fn channel(&self) -> String {
        lock_channel(&self.name)
    }

    /// One run of the acquire script: `tryLock()`, or each attempt of `lock()`.
    pub async fn attempt(&self) -> Attempt {
        let args = vec![
            self.lease_ms.to_string(),
            self.field.clone(),
            REENTRY_ERR.to_owned(),
        ];
        let keys = vec![self.name.clone()];
        acquire(&self.redis, ACQUIRE, keys, args, "Redisson's acquire").await
    }

    /// `lock(lease)`: [`Attempt::Acquired`], or [`Attempt::Refused`] at once (nothing
    /// subscribed) when the thread holds it already.
    pub async fn lock(&self, server: &RedisServer) -> Attempt {
        match self.attempt().await {
            Attempt::Busy(_) => wait_loop(server, &self.channel(), || self.attempt()).await,
            done => done,
        }
    }

    /// `unlock()`, with a new request id.
    pub async fn unlock(&self) -> Unlocked {
        let latch = latch_key(&self.name, &request_id());
        let keys = vec![self.name.clone(), self.channel(), latch.clone()];
        let args = vec![
            UNLOCK_MESSAGE.to_owned(),
            self.lease_ms.to_string(),
            self.field.clone(),
            PUBLISH.to_owned(),
            latch_ttl_ms().to_string(),
        ];
        unlock(&self.redis, UNLOCK, keys, args, latch, "Redisson's unlock").await
    }
}

/// One thread of a Java client on one non-reentrant fair lock (`getNonReentrantFairLock(name)`).
pub struct RedissonNonReentrantFair {
    /// The Java client's connection.
    pub redis: Redis,
    /// The lock's name, its hash key.
    pub name: String,
    /// The queue, `redisson_lock_queue:{<name>}`.
    pub queue: String,
    /// The waiters' deadlines, `redisson_lock_timeout:{<name>}`.
    pub deadlines: String,
    /// The thread's holder field, `<uuid>:<thread id>`.
    pub field: String,
    /// The wait its scripts add and subtract (`fairLockWaitTimeout`, 300 s by default, or a
    /// `tryLock`'s wait).
    pub wait_ms: i64,
    /// The lease of an acquire, and the TTL an unlock that leaves holds sets.
    pub lease_ms: i64,
}

impl RedissonNonReentrantFair {
    /// The thread with holder field `field` on fair lock `name`, with a wait of `wait_ms` and
    /// leases of `lease_ms`, on a connection of its own to `server`.
    pub async fn new(
        server: &RedisServer,
        name: &str,
        field: &str,
        wait_ms: i64,
        lease_ms: i64,
    ) -> RedissonNonReentrantFair {
        RedissonNonReentrantFair {
            redis: super::fred_client(server).await,
            name: name.to_owned(),
            queue: fair_queue_key(name),
            deadlines: fair_timeout_key(name),
            field: field.to_owned(),
            wait_ms,
            lease_ms,
        }
    }

    /// The thread's own wake-up channel, `redisson_lock__channel:{<name>}:<field>`.
    pub fn channel(&self) -> String {
        format!("{}:{}", lock_channel(&self.name), self.field)
    }

    /// KEYS `[name, queue, deadlines]`, which every fair script begins with.
    fn lock_keys(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.queue.clone(),
            self.deadlines.clone(),
        ]
    }

    /// One run of the queueing acquire (`EVAL_LONG`): each attempt of `lock()` or
    /// `tryLock(wait)`; a busy lock queues the thread.
    pub async fn attempt(&self) -> Attempt {
        let args = vec![
            self.lease_ms.to_string(),
            self.field.clone(),
            self.wait_ms.to_string(),
            java_now().to_string(),
            REENTRY_ERR.to_owned(),
        ];
        let script = fair_acquire_script(true);
        acquire(&self.redis, &script, self.lock_keys(), args, "fair lock()").await
    }

    /// `tryLock()` (`EVAL_NULL_BOOLEAN`): one run that never queues; [`Attempt::Busy`]`(1)` when
    /// not taken.
    pub async fn try_lock(&self) -> Attempt {
        let args = vec![
            self.lease_ms.to_string(),
            self.field.clone(),
            java_now().to_string(),
            self.wait_ms.to_string(),
            REENTRY_ERR.to_owned(),
        ];
        let script = fair_acquire_script(false);
        acquire(
            &self.redis,
            &script,
            self.lock_keys(),
            args,
            "fair tryLock()",
        )
        .await
    }

    /// `lock(lease)`: [`Attempt::Acquired`], or [`Attempt::Refused`] at once (never queued,
    /// nothing subscribed) when the thread holds it already.
    pub async fn lock(&self, server: &RedisServer) -> Attempt {
        match self.attempt().await {
            Attempt::Busy(_) => wait_loop(server, &self.channel(), || self.attempt()).await,
            done => done,
        }
    }

    /// `unlock()` (`RFairLock`'s, unchanged), with a new request id.
    pub async fn unlock(&self) -> Unlocked {
        let latch = latch_key(&self.name, &request_id());
        let keys = [
            self.lock_keys(),
            vec![lock_channel(&self.name), latch.clone()],
        ]
        .concat();
        let args = vec![
            UNLOCK_MESSAGE.to_owned(),
            self.lease_ms.to_string(),
            self.field.clone(),
            java_now().to_string(),
            PUBLISH.to_owned(),
            latch_ttl_ms().to_string(),
        ];
        let script = fair_unlock_script();
        let what = "Redisson's fair unlock";
        unlock(&self.redis, &script, keys, args, latch, what).await
    }
}
