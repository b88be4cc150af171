//! A Redisson `RFairLock` peer: a "Java" client that runs Redisson's fair lock scripts, with
//! their deadline arithmetic, against the same keys as relock's `FairLock` (the scripts are
//! written here in the project's own words, with the effects of `RedissonFairLock`'s).
//!
//! Redisson's rules, as this peer applies them: a waiter queues with the deadline of the tail
//! before it (or `now + PTTL(lock)` when nobody queues) plus its wait (`fairLockWaitTimeout`,
//! 300 s by default); whoever takes the lock, and whoever gives up, lowers the deadlines of those
//! left behind by that wait; any script drops the head once its deadline has passed. `now` is the
//! Java client's own clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::clients::Client as Redis;
use fred::interfaces::LuaInterface;
use fred::types::Value;

use super::{fair_queue_key, fair_timeout_key, lock_channel, RawSubscriber, RedisServer};

/// Redisson's default `fairLockWaitTimeout`, the wait each queued `lock()` adds.
pub const REDISSON_FAIR_WAIT_MS: i64 = 300_000;

/// Drops the heads whose deadline has passed (`now` = ARGV[i]): Redisson's purge, shared by
/// every script below.
fn purge(now_arg: usize) -> String {
    format!(
        r#"
local now = tonumber(ARGV[{now_arg}])
while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if first == false then break end
    local deadline = redis.call('zscore', KEYS[3], first)
    if deadline and tonumber(deadline) <= now then
        redis.call('zrem', KEYS[3], first)
        redis.call('lpop', KEYS[2])
    else
        break
    end
end
"#
    )
}

/// The waiting acquire (`lock()` / `tryLock(wait)`, `EVAL_LONG`): KEYS = [name, queue,
/// deadlines], ARGV = [lease, field, wait, now]. nil: taken; else the ms to wait.
pub fn acquire_script() -> String {
    purge(4)
        + r#"
local wait = tonumber(ARGV[3])
if redis.call('exists', KEYS[1]) == 0 and (redis.call('exists', KEYS[2]) == 0
        or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    local waiters = redis.call('zrange', KEYS[3], 0, -1)
    for i = 1, #waiters do
        redis.call('zincrby', KEYS[3], -wait, waiters[i])
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if redis.call('zscore', KEYS[3], ARGV[2]) then
    return math.max(0, redis.call('pttl', KEYS[1]))
end
local last = redis.call('lindex', KEYS[2], -1)
local ttl
if last and last ~= ARGV[2] and redis.call('zscore', KEYS[3], last) then
    ttl = tonumber(redis.call('zscore', KEYS[3], last)) - now
else
    ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + wait + now, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
end
return ttl
"#
}

/// The unlock: KEYS = [name, queue, deadlines, channel prefix, unlock latch], ARGV = [message,
/// lease, field, now, publish command, latch TTL]. Wakes the head on its own channel.
pub fn unlock_script() -> String {
    r#"
local replay = redis.call('get', KEYS[5])
if replay ~= false then return tonumber(replay) end
"#
    .to_owned()
        + &purge(4)
        + r#"
if redis.call('exists', KEYS[1]) == 0 then
    local next = redis.call('lindex', KEYS[2], 0)
    if next then redis.call(ARGV[5], KEYS[4] .. ':' .. next, ARGV[1]) end
    redis.call('set', KEYS[5], 1, 'px', ARGV[6])
    return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
local holds = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if holds > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    redis.call('set', KEYS[5], 0, 'px', ARGV[6])
    return 0
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[6])
local next = redis.call('lindex', KEYS[2], 0)
if next then redis.call(ARGV[5], KEYS[4] .. ':' .. next, ARGV[1]) end
return 1
"#
}

/// `acquireFailed` (a `tryLock` gave up): KEYS = [queue, deadlines], ARGV = [field, wait]. The
/// waiters behind the field move up: their deadlines drop by the wait.
pub const ACQUIRE_FAILED: &str = r#"
local queue = redis.call('lrange', KEYS[1], 0, -1)
local i = 1
while i <= #queue and queue[i] ~= ARGV[1] do i = i + 1 end
for j = i + 1, #queue do
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[j])
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])
"#;

/// The Java client's clock, epoch ms (`System.currentTimeMillis()`).
pub fn java_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// One thread of a Java client on one fair lock.
pub struct RedissonFair {
    pub redis: Redis,
    pub name: String,
    pub queue: String,
    pub deadlines: String,
    pub field: String,
    /// The wait this thread's scripts add and subtract (`fairLockWaitTimeout`, or a
    /// `tryLock`'s wait time).
    pub wait_ms: i64,
    pub lease_ms: i64,
}

impl RedissonFair {
    pub async fn new(server: &RedisServer, name: &str, field: &str, wait_ms: i64) -> RedissonFair {
        RedissonFair {
            redis: super::fred_client(server).await,
            name: name.to_owned(),
            queue: fair_queue_key(name),
            deadlines: fair_timeout_key(name),
            field: field.to_owned(),
            wait_ms,
            lease_ms: 30_000,
        }
    }

    /// The field's own wake-up channel.
    pub fn channel(&self) -> String {
        format!("{}:{}", lock_channel(&self.name), self.field)
    }

    /// Runs one of Redisson's fair lock scripts with `keys` and `args`; `what` names it in a
    /// panic.
    async fn eval(&self, script: &str, keys: Vec<String>, args: Vec<String>, what: &str) -> Value {
        self.redis
            .eval(script, keys, args)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:?}"))
    }

    /// The lock's KEYS the acquire and the unlock begin with: `[name, queue, deadlines]`.
    fn lock_keys(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.queue.clone(),
            self.deadlines.clone(),
        ]
    }

    /// One attempt: `None` when taken, else the ms Redisson would wait.
    pub async fn attempt(&self) -> Option<i64> {
        let args = vec![
            self.lease_ms.to_string(),
            self.field.clone(),
            self.wait_ms.to_string(),
            java_now().to_string(),
        ];
        let keys = self.lock_keys();
        let reply = self
            .eval(&acquire_script(), keys, args, "Redisson's fair acquire")
            .await;
        match reply {
            Value::Null => None,
            Value::Integer(ms) => Some(ms),
            other => panic!("bad acquire reply {other:?}"),
        }
    }

    /// `lock()`: attempt, subscribe to the own channel, then attempt again after each wake-up
    /// or when the returned ttl ran out, as `RedissonLock.lock` does.
    pub async fn lock(&self, server: &RedisServer) {
        if self.attempt().await.is_none() {
            return;
        }
        let mut sub = RawSubscriber::subscribe(server, &[&self.channel()]).await;
        loop {
            let Some(ttl) = self.attempt().await else {
                return;
            };
            // A ttl of 0 retries at once; Redisson's latch wait returns at once then too.
            let _ = sub
                .next_message(Duration::from_millis(ttl.max(0) as u64))
                .await;
        }
    }

    /// `unlock()`: true when the lock was freed (or already gone).
    pub async fn unlock(&self) -> Value {
        let latch = format!("redisson_unlock_latch:{{{}}}:{}", self.name, java_now());
        let keys = [self.lock_keys(), vec![lock_channel(&self.name), latch]].concat();
        let args = vec![
            "0".to_owned(),
            self.lease_ms.to_string(),
            self.field.clone(),
            java_now().to_string(),
            "PUBLISH".to_owned(),
            "8000".to_owned(),
        ];
        self.eval(&unlock_script(), keys, args, "Redisson's fair unlock")
            .await
    }

    /// `acquireFailed`: the thread gives up its place.
    pub async fn give_up(&self) {
        let keys = vec![self.queue.clone(), self.deadlines.clone()];
        let args = vec![self.field.clone(), self.wait_ms.to_string()];
        self.eval(ACQUIRE_FAILED, keys, args, "Redisson's acquireFailed")
            .await;
    }
}
