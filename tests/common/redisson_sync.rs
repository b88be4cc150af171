//! A Redisson peer for `RSemaphore`, `RPermitExpirableSemaphore` and `RCountDownLatch`: a
//! test-side client that does on the wire what Redisson (single-server config, default
//! settings) does, so relock can be tested against it.
//!
//! What is copied from Redisson, as a "Java" process would show it to Redis:
//! - the keys, channels, KEYS/ARGV orders, data effects, replies and publishes of every script
//!   (the Lua here is written anew; only the effects are Redisson's). A single server gets plain
//!   `EVAL` and `PUBLISH`, as Redisson sends them when no replica `WAIT` applies;
//! - the client's wall clock as "now" in every permit script, `timeoutDate = now + lease`, and
//!   [`NO_LEASE`] for a permit without a lease (what `acquire()` / `tryAcquire()` use);
//! - permit ids of 16 random bytes, shown as 32 lowercase hex chars and sent as raw bytes;
//! - the wait loops of Redisson's blocking methods: one subscription per channel per process
//!   ([`Redisson`]), counted by the waiters on it; a semaphore message wakes
//!   `min(local waiters, message)` of them (clamped at 0), and wake-ups nobody took yet stay
//!   banked; a woken waiter re-runs its acquire script; a permit waiter sleeps at most until the
//!   earliest lease expiry the script replied; a latch message `0` opens the process's latch
//!   (all its waiters re-read the count) and `1` closes it.
//!
//! Usage: `let java = Redisson::connect(&server).await;` is one Java process; its
//! [`semaphore`](Redisson::semaphore), [`permit_semaphore`](Redisson::permit_semaphore) and
//! [`count_down_latch`](Redisson::count_down_latch) give cloneable handles whose methods mirror
//! Redisson's (`try_acquire_for` is `tryAcquire(..., wait)`, and so on). Waiters can be spawned
//! on any task; [`Redisson::local_waiters`] and `PUBSUB NUMSUB` tell when they are parked.
//!
//! Every method panics on a Redis error, where Redisson would throw.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fred::bytes::Bytes;
use fred::clients::{Client, SubscriberClient};
use fred::interfaces::{ClientLike, EventInterface, KeysInterface, LuaInterface, PubsubInterface};
use fred::types::{Message, Value};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

use super::RedisServer;

/// The score of a permit without a lease (`nonExpirableTimeout` in Redisson).
pub const NO_LEASE: i64 = 922_337_203_685_477;

/// The publish command every script is given (Redisson's `getPublishCommand` off a sharded
/// cluster).
pub const PUBLISH: &str = "PUBLISH";

/// Redisson's default `subscriptionTimeout`: how long a blocking call waits for its
/// subscription.
pub const SUBSCRIPTION_TIMEOUT: Duration = Duration::from_millis(7500);

/// The latch message "the count reached zero" (`ZERO_COUNT_MESSAGE`).
pub const LATCH_ZERO: &str = "0";

/// The latch message "a new count was set" (`NEW_COUNT_MESSAGE`).
pub const LATCH_NEW_COUNT: &str = "1";

// ---- Names ----

/// The channel of both semaphores named `name` (`redisson_sc:{<name>}`), the lease set of the
/// permit semaphore `name` (Redisson's `suffixName(name, "timeout")`: `{<name>}:timeout`) and the
/// channel of the latch `name` (`redisson_countdownlatch__channel__{<name>}`), as the tests'
/// common name rules spell them.
pub use super::{latch_channel, leases_key as timeout_key, semaphore_channel};

// ---- Clock and permit ids ----

/// The client's wall clock in epoch ms (`System.currentTimeMillis()`).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// A new permit id: 16 random bytes as 32 lowercase hex chars (`ServiceManager.generateId`).
pub fn new_permit_id() -> String {
    hex(&rand::random::<[u8; 16]>())
}

/// Bytes as lowercase hex (`ByteBufUtil.hexDump`).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A permit id's raw bytes, as Redis stores them (`ByteBufUtil.decodeHexDump`). Panics on text
/// that is not hex.
pub fn id_bytes(id: &str) -> Vec<u8> {
    assert!(id.len() % 2 == 0, "permit id {id:?} has an odd length");
    (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&id[i..i + 2], 16).expect("a hex permit id"))
        .collect()
}

/// A permit's score for `lease` taken at `now` (`calcTimeout`): `now + lease`, or [`NO_LEASE`].
fn timeout_date(now: i64, lease: Option<Duration>) -> i64 {
    match lease {
        Some(lease) => now + lease.as_millis() as i64,
        None => NO_LEASE,
    }
}

// ---- Scripts (Redisson's effects, written anew) ----

/// RSemaphore `tryAcquire(n)`. KEYS: count. ARGV: n. Takes n when at least n are there.
const SEM_TRY_ACQUIRE: &str = r"
local available = redis.call('get', KEYS[1])
if available == false or tonumber(available) < tonumber(ARGV[1]) then
    return 0
end
redis.call('decrby', KEYS[1], ARGV[1])
return 1
";

/// RSemaphore `release(n)`. KEYS: count, channel. ARGV: n, publish command. Publishes the new
/// count, whatever its sign; a missing count starts at 0.
const SEM_RELEASE: &str = r"
local total = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], total)
";

/// RSemaphore `releaseIfExists(n)`: `release` on an existing count only; replies whether it ran.
const SEM_RELEASE_IF_EXISTS: &str = r"
if redis.call('exists', KEYS[1]) == 0 then
    return 0
end
local total = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], total)
return 1
";

/// RSemaphore `drainPermits()`. KEYS: count. Sets 0 (SET: the TTL goes) and replies the old
/// value as GET gave it; 0 and no write when missing.
const SEM_DRAIN: &str = r"
local before = redis.call('get', KEYS[1])
if before == false then
    return 0
end
redis.call('set', KEYS[1], 0)
return before
";

/// `trySetPermits(n)` of both semaphores. KEYS: count, channel. ARGV: n, publish command.
/// Only on a missing count: SET it (no TTL) and publish n.
const TRY_SET_PERMITS: &str = r"
if redis.call('get', KEYS[1]) ~= false then
    return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
";

/// RSemaphore `trySetPermits(n, ttl)`: as [`TRY_SET_PERMITS`], the count created with PX
/// ARGV[3].
const SEM_TRY_SET_PERMITS_TTL: &str = r"
if redis.call('get', KEYS[1]) ~= false then
    return 0
end
redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
";

/// RSemaphore `addPermits(delta)`. KEYS: count, channel. ARGV: delta, publish command. SETs
/// count + delta (the TTL goes) and publishes that total, whatever its sign.
const SEM_ADD_PERMITS: &str = r"
local total = tonumber(redis.call('get', KEYS[1]) or 0) + tonumber(ARGV[1])
redis.call('set', KEYS[1], total)
redis.call(ARGV[2], KEYS[2], total)
";

/// The reclaim step of the permit scripts, as a Lua function: moves at most `most` (-1: all)
/// permits whose score is at or before `now` back to the count, and publishes the new count
/// when it is positive. Returns the new count, or nil when nothing lapsed.
macro_rules! reclaim_fn {
    () => {
        r"
local function reclaim(count_key, leases_key, channel, now, most, publish)
    local lapsed = redis.call('zrangebyscore', leases_key, 0, now, 'limit', 0, most)
    if #lapsed == 0 then
        return nil
    end
    redis.call('zrem', leases_key, unpack(lapsed))
    local available = redis.call('incrby', count_key, #lapsed)
    if available > 0 then
        redis.call(publish, channel, available)
    end
    return available
end
"
    };
}

/// RPermitExpirableSemaphore acquire. KEYS: count, leases, channel. ARGV: n, timeoutDate, now,
/// [`NO_LEASE`], publish command, id 1 … id n (raw bytes). Reclaims at most n; then either
/// takes n (each id scored timeoutDate, the count's positive PTTL copied onto the lease set) and
/// replies `OK`, or replies `:<score>` of the earliest lease when it is not [`NO_LEASE`], or nil.
const PES_ACQUIRE: &str = concat!(
    reclaim_fn!(),
    r"
reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[3], ARGV[1], ARGV[5])
local wanted = tonumber(ARGV[1])
local available = redis.call('get', KEYS[1])
if available ~= false and tonumber(available) >= wanted then
    redis.call('decrby', KEYS[1], wanted)
    for i = 6, #ARGV do
        redis.call('zadd', KEYS[2], ARGV[2], ARGV[i])
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return 'OK'
end
local earliest = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if earliest[1] ~= nil and earliest[2] ~= ARGV[4] then
    return ':' .. earliest[2]
end
return nil
"
);

/// RPermitExpirableSemaphore `tryRelease(id)`. KEYS: count, channel, leases. ARGV: id, 1, now,
/// publish command. A held id goes back to the count (even when its lease had lapsed) and the
/// new count is published; replies 1 only when the lease had not lapsed.
const PES_RELEASE: &str = r"
local expiry = redis.call('zscore', KEYS[3], ARGV[1])
if redis.call('zrem', KEYS[3], ARGV[1]) ~= 1 then
    return 0
end
local total = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], total)
if tonumber(expiry) <= tonumber(ARGV[3]) then
    return 0
end
return 1
";

/// RPermitExpirableSemaphore `tryRelease(ids)`. KEYS: count, channel, leases. ARGV: n, now,
/// publish command, id 1 … id n. All or nothing: any id missing or lapsed replies 0 and writes
/// nothing. Otherwise reclaims every lapsed permit, releases the ids, and publishes (and
/// replies) how many it released.
const PES_RELEASE_MANY: &str = concat!(
    reclaim_fn!(),
    r"
for i = 4, #ARGV do
    local expiry = redis.call('zscore', KEYS[3], ARGV[i])
    if expiry == false or tonumber(expiry) <= tonumber(ARGV[2]) then
        return 0
    end
end
reclaim(KEYS[1], KEYS[3], KEYS[2], ARGV[2], -1, ARGV[3])
local ids = {}
for i = 4, #ARGV do
    ids[#ids + 1] = ARGV[i]
end
local released = redis.call('zrem', KEYS[3], unpack(ids))
redis.call('incrby', KEYS[1], released)
redis.call(ARGV[3], KEYS[2], released)
return released
"
);

/// RPermitExpirableSemaphore `availablePermits()`. KEYS: count, leases, channel. ARGV: now,
/// publish command. The count after reclaiming (the INCRBY result when it reclaimed, else the
/// stored text, 0 when missing).
const PES_AVAILABLE: &str = concat!(
    reclaim_fn!(),
    r"
local reclaimed = reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[1], -1, ARGV[2])
if reclaimed ~= nil then
    return reclaimed
end
local available = redis.call('get', KEYS[1])
if available == false then
    return 0
end
return available
"
);

/// RPermitExpirableSemaphore `getPermits()`: count + permits held after reclaiming; 0 when the
/// count is missing. KEYS and ARGV as [`PES_AVAILABLE`].
const PES_PERMITS: &str = concat!(
    reclaim_fn!(),
    r"
reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[1], -1, ARGV[2])
local available = redis.call('get', KEYS[1])
if available == false then
    return 0
end
return tonumber(available) + redis.call('zcount', KEYS[2], 0, '+inf')
"
);

/// RPermitExpirableSemaphore `acquiredPermits()`: permits held after reclaiming (no-lease ones
/// included). KEYS and ARGV as [`PES_AVAILABLE`].
const PES_ACQUIRED: &str = concat!(
    reclaim_fn!(),
    r"
reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[1], -1, ARGV[2])
return redis.call('zcount', KEYS[2], 0, '+inf')
"
);

/// RPermitExpirableSemaphore `setPermits(m)`. KEYS: count, channel, leases. ARGV: m, publish
/// command. No reclaim. Missing count: SET m, publish m. Otherwise moves the count so that
/// count + held = m, publishing m, unless that is already so.
const PES_SET_PERMITS: &str = r"
local available = redis.call('get', KEYS[1])
if available == false then
    redis.call('set', KEYS[1], ARGV[1])
    redis.call(ARGV[2], KEYS[2], ARGV[1])
    return nil
end
local maximum = tonumber(available) + redis.call('zcount', KEYS[3], 0, '+inf')
local wanted = tonumber(ARGV[1])
if maximum ~= wanted then
    redis.call('incrby', KEYS[1], wanted - maximum)
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
return nil
";

/// RPermitExpirableSemaphore `addPermits(delta)`. KEYS: count, channel. ARGV: delta, publish
/// command. SETs count + delta (the TTL goes); publishes the delta, only when positive.
const PES_ADD_PERMITS: &str = r"
local delta = tonumber(ARGV[1])
redis.call('set', KEYS[1], tonumber(redis.call('get', KEYS[1]) or 0) + delta)
if delta > 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
";

/// RPermitExpirableSemaphore `updateLeaseTime(id, lease)`. KEYS: count, leases, channel. ARGV:
/// id, new timeoutDate, now, publish command. Reclaims, then rescores the id if still held.
const PES_UPDATE_LEASE: &str = concat!(
    reclaim_fn!(),
    r"
reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[3], -1, ARGV[4])
if redis.call('zscore', KEYS[2], ARGV[1]) == false then
    return 0
end
redis.call('zadd', KEYS[2], ARGV[2], ARGV[1])
return 1
"
);

/// RPermitExpirableSemaphore `getLeaseTime(id)`. KEYS as [`PES_UPDATE_LEASE`]. ARGV: id,
/// [`NO_LEASE`], now, publish command. Reclaims, then replies the ms left, -1 without a lease,
/// 0 when the id is not held.
const PES_LEASE_TIME: &str = concat!(
    reclaim_fn!(),
    r"
reclaim(KEYS[1], KEYS[2], KEYS[3], ARGV[3], -1, ARGV[4])
local expiry = redis.call('zscore', KEYS[2], ARGV[1])
if expiry == false then
    return 0
end
if tonumber(expiry) == tonumber(ARGV[2]) then
    return -1
end
return tonumber(expiry) - tonumber(ARGV[3])
"
);

/// RCountDownLatch `countDown()`. KEYS: count, channel. ARGV: `0`, publish command. DECR;
/// deletes the count at 0 or below; publishes `0` exactly at 0.
const LATCH_COUNT_DOWN: &str = r"
local left = redis.call('decr', KEYS[1])
if left <= 0 then
    redis.call('del', KEYS[1])
end
if left == 0 then
    redis.call(ARGV[2], KEYS[2], ARGV[1])
end
";

/// RCountDownLatch `trySetCount(n)`. KEYS: count, channel. ARGV: `1`, n, publish command. Only
/// on a missing count: SET n (no TTL), publish `1`.
const LATCH_TRY_SET_COUNT: &str = r"
if redis.call('exists', KEYS[1]) == 1 then
    return 0
end
redis.call('set', KEYS[1], ARGV[2])
redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1
";

/// RCountDownLatch `delete()`. KEYS: count, channel. ARGV: `1`, publish command. Publishes `1`
/// when it deleted the count.
const LATCH_DELETE: &str = r"
if redis.call('del', KEYS[1]) ~= 1 then
    return 0
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1
";

// ---- Replies ----

/// An integer reply that may come as an integer or as the text GET returned (Redisson decodes
/// both with `LongCodec`); nil reads as 0.
fn int(value: Value, what: &str) -> i64 {
    match value {
        Value::Integer(n) => n,
        Value::Null => 0,
        Value::String(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("{what}: not an integer {s:?}")),
        Value::Bytes(b) => std::str::from_utf8(&b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{what}: not an integer {b:?}")),
        other => panic!("{what}: unexpected reply {other:?}"),
    }
}

/// A message's payload as `LongCodec` reads it: `None` when it is not a decimal integer (Redisson
/// fails to decode it and drops it).
fn message_value(message: &Message) -> Option<i64> {
    match &message.value {
        Value::Integer(n) => Some(*n),
        Value::String(s) => s.parse().ok(),
        Value::Bytes(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

// ---- The process: connections and subscriptions ----

/// Which message rule a subscription follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `SemaphorePubSub`: a message `m` wakes `min(waiters, m)` waiters.
    Semaphore,
    /// `CountDownLatchPubSub`: `0` opens the latch, `1` closes it.
    Latch,
}

/// A process's state for one channel (`RedissonLockEntry` / `RedissonCountDownLatchEntry`):
/// created with the channel's first waiter, dropped with its last.
struct Entry {
    kind: Kind,
    /// Waiters subscribed through this entry (`acquired()`); written by the pub/sub task only.
    waiters: AtomicUsize,
    /// Wake-ups handed out by messages so far.
    wakeups: AtomicU64,
    /// The semaphore waiters' latch: a `java.util.concurrent.Semaphore` starting at 0.
    latch: Semaphore,
    /// The latch waiters' `ReclosableLatch`: `true` when open; created closed.
    open: watch::Sender<bool>,
}

impl Entry {
    fn new(kind: Kind) -> Entry {
        Entry {
            kind,
            waiters: AtomicUsize::new(0),
            wakeups: AtomicU64::new(0),
            latch: Semaphore::new(0),
            open: watch::channel(false).0,
        }
    }

    /// `onMessage`: the entry's reaction to one message.
    fn on_message(&self, value: i64) {
        match self.kind {
            Kind::Semaphore => {
                let waiters = self.waiters.load(Ordering::SeqCst) as i64;
                let wake = waiters.min(value).max(0);
                self.wakeups.fetch_add(wake as u64, Ordering::SeqCst);
                self.latch.add_permits(wake as usize);
            }
            Kind::Latch => {
                if value == 0 {
                    self.open.send_replace(true);
                } else if value == 1 {
                    self.open.send_replace(false);
                }
            }
        }
    }
}

/// A request to the process's pub/sub task.
enum Request {
    /// One more waiter on `channel`; subscribes when it is the first. The reply comes once the
    /// server has the subscription.
    Subscribe {
        channel: String,
        kind: Kind,
        reply: oneshot::Sender<Arc<Entry>>,
    },
    /// One waiter less on `channel`; unsubscribes when it was the last.
    Unsubscribe { channel: String },
}

/// One waiter's hold on its process's channel entry; dropping it unsubscribes the waiter (the
/// `finally { unsubscribe(entry) }` of Redisson's loops, cancellation included).
struct Subscription {
    channel: String,
    entry: Arc<Entry>,
    requests: mpsc::UnboundedSender<Request>,
}

impl Subscription {
    /// Waits for a semaphore wake-up (`latch.acquire()` / `latch.tryAcquire(ms)`): `None` without
    /// a time limit; `Some(ms)` at most that long, where `ms <= 0` only takes a banked wake-up.
    async fn wake(&self, within_ms: Option<i64>) {
        let latch = &self.entry.latch;
        match within_ms {
            None => latch.acquire().await.expect("latch open").forget(),
            Some(ms) if ms <= 0 => {
                if let Ok(permit) = latch.try_acquire() {
                    permit.forget();
                }
            }
            Some(ms) => {
                let wait = Duration::from_millis(ms as u64);
                if let Ok(permit) = tokio::time::timeout(wait, latch.acquire()).await {
                    permit.expect("latch open").forget();
                }
            }
        }
    }

    /// Waits until the latch is open (`latch.await()` / `latch.await(ms)`).
    async fn opened(&self, within: Option<Duration>) {
        let mut open = self.entry.open.subscribe();
        let wait = open.wait_for(|open| *open);
        match within {
            None => drop(wait.await.expect("latch entry alive")),
            Some(within) => drop(tokio::time::timeout(within, wait).await),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let _ = self.requests.send(Request::Unsubscribe {
            channel: std::mem::take(&mut self.channel),
        });
    }
}

/// One "Java process" running Redisson: a command connection, a pub/sub connection with one
/// subscription per channel however many of its waiters wait there, and the handles on it.
/// Cheap to clone; usable from many tasks at once. Two `Redisson`s are two processes.
#[derive(Clone)]
pub struct Redisson {
    redis: Client,
    requests: mpsc::UnboundedSender<Request>,
    entries: Arc<Mutex<HashMap<String, Arc<Entry>>>>,
}

impl Redisson {
    /// What most of these tests start with: a server of their own, one Redisson process on it
    /// and a name of their own (see [`super::prefix`]). Dropping the server stops it.
    pub async fn setup(test: &str) -> (RedisServer, Redisson, String) {
        let server = RedisServer::start();
        let java = Redisson::connect(&server).await;
        (server, java, super::prefix(test))
    }

    /// A process connected to `server`.
    pub async fn connect(server: &RedisServer) -> Redisson {
        Redisson::connect_url(&server.url()).await
    }

    /// A process connected to the server at `url`.
    pub async fn connect_url(url: &str) -> Redisson {
        let config = fred::types::config::Config::from_url(url).expect("url");
        let mut builder = fred::types::Builder::from_config(config);
        builder.with_performance_config(|performance| {
            performance.broadcast_channel_capacity = 4096;
        });
        let redis = builder.build().expect("build the command client");
        redis.init().await.expect("connect the command client");
        let subscriber = builder
            .build_subscriber_client()
            .expect("build the subscriber client");
        subscriber
            .init()
            .await
            .expect("connect the subscriber client");

        let (requests, request_rx) = mpsc::unbounded_channel();
        let entries = Arc::new(Mutex::new(HashMap::new()));
        tokio::spawn(pubsub_task(subscriber, request_rx, entries.clone()));
        Redisson {
            redis,
            requests,
            entries,
        }
    }

    /// The command connection, for raw reads in tests.
    pub fn redis(&self) -> &Client {
        &self.redis
    }

    /// An `RSemaphore` named `name` (`getSemaphore(name)`).
    pub fn semaphore(&self, name: impl Into<String>) -> JavaSemaphore {
        let name = name.into();
        self.counted(semaphore_channel(&name), name, SemaphoreKind)
    }

    /// An `RPermitExpirableSemaphore` named `name` (`getPermitExpirableSemaphore(name)`).
    pub fn permit_semaphore(&self, name: impl Into<String>) -> JavaPermitSemaphore {
        let name = name.into();
        let kind = PermitKind {
            timeout_key: timeout_key(&name),
        };
        self.counted(semaphore_channel(&name), name, kind)
    }

    /// An `RCountDownLatch` named `name` (`getCountDownLatch(name)`).
    pub fn count_down_latch(&self, name: impl Into<String>) -> JavaLatch {
        let name = name.into();
        self.counted(latch_channel(&name), name, LatchKind)
    }

    /// The count `name` with its `channel`, an object of `kind`, on this process.
    fn counted<Kind>(&self, channel: String, name: String, kind: Kind) -> Counted<Kind> {
        Counted {
            process: self.clone(),
            name,
            channel,
            kind,
        }
    }

    /// How many of this process's waiters are subscribed to `channel` now.
    pub fn local_waiters(&self, channel: &str) -> usize {
        self.entry(channel)
            .map_or(0, |entry| entry.waiters.load(Ordering::SeqCst))
    }

    /// How many semaphore wake-ups messages on `channel` handed out since this process's entry
    /// for it was created (0 without one).
    pub fn wakeups(&self, channel: &str) -> u64 {
        self.entry(channel)
            .map_or(0, |entry| entry.wakeups.load(Ordering::SeqCst))
    }

    fn entry(&self, channel: &str) -> Option<Arc<Entry>> {
        self.entries.lock().unwrap().get(channel).cloned()
    }

    /// Joins `channel` as one more waiter; returns once the server has the subscription.
    async fn subscribe(&self, channel: &str, kind: Kind) -> Subscription {
        let (reply, entry) = oneshot::channel();
        self.requests
            .send(Request::Subscribe {
                channel: channel.to_owned(),
                kind,
                reply,
            })
            .expect("pub/sub task alive");
        let entry = entry.await.expect("pub/sub task alive");
        Subscription {
            channel: channel.to_owned(),
            entry,
            requests: self.requests.clone(),
        }
    }

    /// [`subscribe`](Self::subscribe) bounded by [`SUBSCRIPTION_TIMEOUT`], as the blocking
    /// methods without a wait time bound it (Redisson throws past it).
    async fn subscribe_bounded(&self, channel: &str, kind: Kind) -> Subscription {
        tokio::time::timeout(SUBSCRIPTION_TIMEOUT, self.subscribe(channel, kind))
            .await
            .unwrap_or_else(|_| panic!("subscribing {channel} timed out"))
    }

    /// `EVAL script` with `keys` and `args`; panics on a Redis error.
    async fn eval(&self, script: &str, keys: Vec<String>, args: Vec<Value>) -> Value {
        self.redis
            .eval::<Value, _, _, _>(script, keys, args)
            .await
            .unwrap_or_else(|e| panic!("EVAL failed: {e}"))
    }
}

/// The process's pub/sub task: it alone subscribes and unsubscribes (so each channel is
/// subscribed once, by its first waiter, and dropped with its last) and hands every message to
/// its channel's entry. Ends when the process and all its waiters are gone.
async fn pubsub_task(
    subscriber: SubscriberClient,
    mut requests: mpsc::UnboundedReceiver<Request>,
    entries: Arc<Mutex<HashMap<String, Arc<Entry>>>>,
) {
    // Messages go through an unbounded queue, so none is lost while a (un)subscribe is awaited.
    let (message_tx, mut messages) = mpsc::unbounded_channel();
    let mut broadcast = subscriber.message_rx();
    let forwarder = tokio::spawn(async move {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match broadcast.recv().await {
                Ok(message) => {
                    if message_tx.send(message).is_err() {
                        return;
                    }
                }
                Err(RecvError::Lagged(lost)) => panic!("the peer lost {lost} pub/sub messages"),
                Err(RecvError::Closed) => return,
            }
        }
    });

    loop {
        tokio::select! {
            request = requests.recv() => match request {
                None => break,
                Some(Request::Subscribe { channel, kind, reply }) => {
                    let (entry, first) = {
                        let mut entries = entries.lock().unwrap();
                        let first = !entries.contains_key(&channel);
                        let entry = entries
                            .entry(channel.clone())
                            .or_insert_with(|| Arc::new(Entry::new(kind)))
                            .clone();
                        entry.waiters.fetch_add(1, Ordering::SeqCst);
                        (entry, first)
                    };
                    if first {
                        subscriber
                            .subscribe(channel.as_str())
                            .await
                            .expect("SUBSCRIBE");
                        // fred answers SUBSCRIBE once it is queued; a PING behind it on the same
                        // connection is answered after the server ran it (Redisson waits for the
                        // server's confirmation).
                        subscriber.ping::<Value>(None).await.expect("PING");
                    }
                    if reply.send(entry).is_err() {
                        // The waiter gave up while subscribing.
                        leave(&subscriber, &entries, &channel).await;
                    }
                }
                Some(Request::Unsubscribe { channel }) => {
                    leave(&subscriber, &entries, &channel).await;
                }
            },
            Some(message) = messages.recv() => {
                let entry = entries.lock().unwrap().get(&*message.channel).cloned();
                if let (Some(entry), Some(value)) = (entry, message_value(&message)) {
                    entry.on_message(value);
                }
            }
        }
    }
    forwarder.abort();
    let _ = subscriber.quit().await;
}

/// One waiter leaves `channel`; the last one drops the entry and unsubscribes.
async fn leave(
    subscriber: &SubscriberClient,
    entries: &Mutex<HashMap<String, Arc<Entry>>>,
    channel: &str,
) {
    let last = {
        let mut entries = entries.lock().unwrap();
        let entry = entries
            .get(channel)
            .expect("an entry for a subscribed waiter");
        let last = entry.waiters.fetch_sub(1, Ordering::SeqCst) == 1;
        if last {
            entries.remove(channel);
        }
        last
    };
    if last {
        subscriber.unsubscribe(channel).await.expect("UNSUBSCRIBE");
        subscriber.ping::<Value>(None).await.expect("PING");
    }
}

/// Milliseconds left of `total` since `start` (Redisson's `time -= elapsed` bookkeeping).
fn left_ms(total: Duration, start: Instant) -> i64 {
    total.as_millis() as i64 - start.elapsed().as_millis() as i64
}

// ---- What the semaphores and the latch share ----

/// Redisson's `RSemaphore`, `RPermitExpirableSemaphore` or `RCountDownLatch` (by `Kind`) on
/// one process: the count key `<name>` (STRING) and the object's channel they all have, and
/// what its kind adds.
#[derive(Clone)]
pub struct Counted<Kind> {
    process: Redisson,
    name: String,
    channel: String,
    kind: Kind,
}

/// `RSemaphore`: nothing beyond the count.
#[derive(Clone)]
pub struct SemaphoreKind;

/// `RPermitExpirableSemaphore`: the count and a lease set.
#[derive(Clone)]
pub struct PermitKind {
    timeout_key: String,
}

/// `RCountDownLatch`: nothing beyond the count.
#[derive(Clone)]
pub struct LatchKind;

/// Redisson's `RSemaphore` on one process: key `<name>` (STRING count), channel
/// `redisson_sc:{<name>}`.
pub type JavaSemaphore = Counted<SemaphoreKind>;

/// Redisson's `RPermitExpirableSemaphore` on one process: key `<name>` (STRING free count),
/// `{<name>}:timeout` (ZSET raw id → lease end in epoch ms, [`NO_LEASE`] without a lease),
/// channel `redisson_sc:{<name>}`.
pub type JavaPermitSemaphore = Counted<PermitKind>;

/// Redisson's `RCountDownLatch` on one process: key `<name>` (STRING count, deleted at 0),
/// channel `redisson_countdownlatch__channel__{<name>}`.
pub type JavaLatch = Counted<LatchKind>;

impl<Kind> Counted<Kind> {
    /// The object's name (its count key).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Runs `script` with KEYS `[count, channel]` and `args`.
    async fn eval_on_channel(&self, script: &str, args: Vec<Value>) -> Value {
        let keys = vec![self.name.clone(), self.channel.clone()];
        self.process.eval(script, keys, args).await
    }

    /// `GET <name>`, 0 when missing; `what` is the Redisson call, for a panic.
    async fn read_count(&self, what: &str) -> i64 {
        let reply = self
            .process
            .redis
            .get::<Value, _>(self.name.as_str())
            .await
            .expect("GET");
        int(reply, what)
    }
}

/// The kinds with permits: both semaphores.
pub trait Permits {}
impl Permits for SemaphoreKind {}
impl Permits for PermitKind {}

impl<Kind: Permits> Counted<Kind> {
    /// Both semaphores' `trySetPermits(n)`: sets the count only when there is none (no TTL)
    /// and publishes `n`.
    pub async fn try_set_permits(&self, permits: i64) -> bool {
        let args = vec![permits.into(), PUBLISH.into()];
        let reply = self.eval_on_channel(TRY_SET_PERMITS, args).await;
        int(reply, "trySetPermits") == 1
    }
}

// ---- RSemaphore ----

impl JavaSemaphore {
    /// `trySetPermits(n, ttl)`: as [`try_set_permits`](Self::try_set_permits), the count created
    /// with a TTL of `ttl` (ms).
    pub async fn try_set_permits_with_ttl(&self, permits: i64, ttl: Duration) -> bool {
        let args = vec![
            permits.into(),
            PUBLISH.into(),
            (ttl.as_millis() as i64).into(),
        ];
        let reply = self.eval_on_channel(SEM_TRY_SET_PERMITS_TTL, args).await;
        int(reply, "trySetPermits(ttl)") == 1
    }

    /// `addPermits(delta)`: SETs count + delta (dropping any TTL) and publishes the new total,
    /// negative included.
    pub async fn add_permits(&self, delta: i64) {
        let args = vec![delta.into(), PUBLISH.into()];
        self.eval_on_channel(SEM_ADD_PERMITS, args).await;
    }

    /// `availablePermits()`: `GET <name>`, 0 when missing.
    pub async fn available_permits(&self) -> i64 {
        self.read_count("availablePermits").await
    }

    /// `drainPermits()`: sets the count to 0 and returns what it was (0 when missing, without a
    /// write). Publishes nothing.
    pub async fn drain_permits(&self) -> i64 {
        let reply = self
            .process
            .eval(SEM_DRAIN, vec![self.name.clone()], vec![])
            .await;
        int(reply, "drainPermits")
    }

    /// `tryAcquire(n)`: one attempt. `n == 0` is `true` without a command.
    pub async fn try_acquire(&self, permits: u32) -> bool {
        if permits == 0 {
            return true;
        }
        let reply = self
            .process
            .eval(
                SEM_TRY_ACQUIRE,
                vec![self.name.clone()],
                vec![i64::from(permits).into()],
            )
            .await;
        int(reply, "tryAcquire") == 1
    }

    /// `acquire(n)`: an attempt; then subscribe and loop {attempt; wait for a wake-up} without a
    /// time limit.
    pub async fn acquire(&self, permits: u32) {
        if self.try_acquire(permits).await {
            return;
        }
        let sub = self
            .process
            .subscribe_bounded(&self.channel, Kind::Semaphore)
            .await;
        while !self.try_acquire(permits).await {
            sub.wake(None).await;
        }
    }

    /// `tryAcquire(n, wait)`: as [`acquire`](Self::acquire), within `wait` (the subscription
    /// included); `false` when it runs out.
    pub async fn try_acquire_for(&self, permits: u32, wait: Duration) -> bool {
        let start = Instant::now();
        if self.try_acquire(permits).await {
            return true;
        }
        let left = left_ms(wait, start);
        if left <= 0 {
            return false;
        }
        let subscribing = self.process.subscribe(&self.channel, Kind::Semaphore);
        let Ok(sub) = tokio::time::timeout(Duration::from_millis(left as u64), subscribing).await
        else {
            return false;
        };
        if left_ms(wait, start) <= 0 {
            return false;
        }
        loop {
            if self.try_acquire(permits).await {
                return true;
            }
            let left = left_ms(wait, start);
            if left <= 0 {
                return false;
            }
            sub.wake(Some(left)).await;
            if left_ms(wait, start) <= 0 {
                return false;
            }
        }
    }

    /// `release(n)`: adds n (creating a missing count) and publishes the new count. `n == 0`
    /// sends nothing.
    pub async fn release(&self, permits: u32) {
        if permits == 0 {
            return;
        }
        let args = vec![i64::from(permits).into(), PUBLISH.into()];
        self.eval_on_channel(SEM_RELEASE, args).await;
    }

    /// `releaseIfExists(n)`: [`release`](Self::release) on an existing count only; `false` (and
    /// nothing sent) for `n == 0`.
    pub async fn release_if_exists(&self, permits: u32) -> bool {
        if permits == 0 {
            return false;
        }
        let args = vec![i64::from(permits).into(), PUBLISH.into()];
        let reply = self.eval_on_channel(SEM_RELEASE_IF_EXISTS, args).await;
        int(reply, "releaseIfExists") == 1
    }

    /// `delete()`: `DEL <name>`. Publishes nothing.
    pub async fn delete(&self) -> bool {
        let deleted: i64 = self
            .process
            .redis
            .del(self.name.as_str())
            .await
            .expect("DEL");
        deleted > 0
    }
}

// ---- RPermitExpirableSemaphore ----

/// The reply of one run of the permit acquire script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// `OK`: the permits, with these ids.
    Acquired(Vec<String>),
    /// `:<score>`: not acquired; the earliest lease ends at this epoch ms.
    EarliestExpiry(i64),
    /// nil: not acquired, and no lease to wait for.
    NoExpiry,
}

impl JavaPermitSemaphore {
    /// Its lease set, `{<name>}:timeout`.
    pub fn timeout_key(&self) -> &str {
        &self.kind.timeout_key
    }

    /// KEYS `[count, leases, channel]`.
    fn keys_count_leases_channel(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.kind.timeout_key.clone(),
            self.channel.clone(),
        ]
    }

    /// KEYS `[count, channel, leases]`.
    fn keys_count_channel_leases(&self) -> Vec<String> {
        vec![
            self.name.clone(),
            self.channel.clone(),
            self.kind.timeout_key.clone(),
        ]
    }

    /// `setPermits(max)`: makes count + held = `max`, publishing `max` when it changed anything.
    pub async fn set_permits(&self, max: i64) {
        let args = vec![max.into(), PUBLISH.into()];
        let keys = self.keys_count_channel_leases();
        self.process.eval(PES_SET_PERMITS, keys, args).await;
    }

    /// `addPermits(delta)`: SETs count + delta (dropping any TTL); publishes the delta only when
    /// positive.
    pub async fn add_permits(&self, delta: i64) {
        let args = vec![delta.into(), PUBLISH.into()];
        self.eval_on_channel(PES_ADD_PERMITS, args).await;
    }

    /// Runs a read script (KEYS `[count, leases, channel]`, ARGV `[now, publish]`).
    async fn read(&self, script: &str, what: &str) -> i64 {
        let args = vec![now_ms().into(), PUBLISH.into()];
        let reply = self
            .process
            .eval(script, self.keys_count_leases_channel(), args)
            .await;
        int(reply, what)
    }

    /// `availablePermits()`: the count after reclaiming lapsed permits.
    pub async fn available_permits(&self) -> i64 {
        self.read(PES_AVAILABLE, "availablePermits").await
    }

    /// `acquiredPermits()`: the permits held after reclaiming (no-lease ones included).
    pub async fn acquired_permits(&self) -> i64 {
        self.read(PES_ACQUIRED, "acquiredPermits").await
    }

    /// `getPermits()`: available + held after reclaiming; 0 when the count is missing.
    pub async fn permits(&self) -> i64 {
        self.read(PES_PERMITS, "getPermits").await
    }

    /// One run of the acquire script for `permits` new ids, with a lease of `lease` from now
    /// (`None`: [`NO_LEASE`]).
    pub async fn attempt(&self, permits: u32, lease: Option<Duration>) -> Attempt {
        let ids: Vec<String> = (0..permits).map(|_| new_permit_id()).collect();
        let now = now_ms();
        let mut args: Vec<Value> = vec![
            i64::from(permits).into(),
            timeout_date(now, lease).into(),
            now.into(),
            NO_LEASE.into(),
            PUBLISH.into(),
        ];
        args.extend(ids.iter().map(|id| Value::Bytes(Bytes::from(id_bytes(id)))));
        let reply = self
            .process
            .eval(PES_ACQUIRE, self.keys_count_leases_channel(), args)
            .await;
        let text = match reply {
            Value::Null => return Attempt::NoExpiry,
            Value::String(s) => s.to_string(),
            Value::Bytes(b) => String::from_utf8(b.to_vec()).expect("a text reply"),
            other => panic!("acquire: unexpected reply {other:?}"),
        };
        if text == "OK" {
            return Attempt::Acquired(ids);
        }
        let score = text
            .strip_prefix(':')
            .and_then(|score| score.parse().ok())
            .unwrap_or_else(|| panic!("acquire: unexpected reply {text:?}"));
        Attempt::EarliestExpiry(score)
    }

    /// `tryAcquire()`: one attempt for one permit without a lease.
    pub async fn try_acquire(&self) -> Option<String> {
        match self.attempt(1, None).await {
            Attempt::Acquired(mut ids) => ids.pop(),
            _ => None,
        }
    }

    /// `acquire()`: one permit without a lease, waiting as long as it takes.
    pub async fn acquire(&self) -> String {
        self.acquire_many(1, None).await.remove(0)
    }

    /// `acquire(lease)`: one permit with `lease`, waiting as long as it takes.
    pub async fn acquire_with_lease(&self, lease: Duration) -> String {
        self.acquire_many(1, Some(lease)).await.remove(0)
    }

    /// `acquire(n, lease)`: an attempt; then subscribe and loop {attempt (new ids, new
    /// deadline); wait for a wake-up, at most until the earliest lease the script named}.
    pub async fn acquire_many(&self, permits: u32, lease: Option<Duration>) -> Vec<String> {
        if let Attempt::Acquired(ids) = self.attempt(permits, lease).await {
            return ids;
        }
        let sub = self
            .process
            .subscribe_bounded(&self.channel, Kind::Semaphore)
            .await;
        loop {
            match self.attempt(permits, lease).await {
                Attempt::Acquired(ids) => return ids,
                Attempt::EarliestExpiry(score) => sub.wake(Some(score - now_ms())).await,
                Attempt::NoExpiry => sub.wake(None).await,
            }
        }
    }

    /// `tryAcquire(wait, lease)`: one permit, within `wait`; `None` when it runs out.
    pub async fn try_acquire_for(&self, wait: Duration, lease: Option<Duration>) -> Option<String> {
        self.try_acquire_many_for(1, wait, lease).await.pop()
    }

    /// `tryAcquire(n, wait, lease)`: as [`acquire_many`](Self::acquire_many) within `wait` (the
    /// subscription included), each sleep at most the smaller of the time left and the earliest
    /// lease; empty when it runs out.
    pub async fn try_acquire_many_for(
        &self,
        permits: u32,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Vec<String> {
        let start = Instant::now();
        if let Attempt::Acquired(ids) = self.attempt(permits, lease).await {
            return ids;
        }
        let left = left_ms(wait, start);
        if left <= 0 {
            return Vec::new();
        }
        let subscribing = self.process.subscribe(&self.channel, Kind::Semaphore);
        let Ok(sub) = tokio::time::timeout(Duration::from_millis(left as u64), subscribing).await
        else {
            return Vec::new();
        };
        if left_ms(wait, start) <= 0 {
            return Vec::new();
        }
        loop {
            let nearest = match self.attempt(permits, lease).await {
                Attempt::Acquired(ids) => return ids,
                Attempt::EarliestExpiry(score) => Some(score - now_ms()),
                Attempt::NoExpiry => None,
            };
            let left = left_ms(wait, start);
            if left <= 0 {
                return Vec::new();
            }
            sub.wake(Some(nearest.map_or(left, |nearest| nearest.min(left))))
                .await;
            if left_ms(wait, start) <= 0 {
                return Vec::new();
            }
        }
    }

    /// `tryRelease(id)`: a held id goes back (publishing the new count), even when its lease had
    /// lapsed; `true` only when it had not. `release(id)` throws where this is `false`.
    pub async fn release(&self, id: &str) -> bool {
        let keys = self.keys_count_channel_leases();
        let released = self.eval_on_id(PES_RELEASE, keys, id, 1.into(), now_ms(), "tryRelease");
        released.await == 1
    }

    /// Runs a script on the permit `id`: KEYS `keys`, ARGV `[raw id, arg, now, publish
    /// command]`; its integer reply (`what`: the Redisson call, for a panic).
    async fn eval_on_id(
        &self,
        script: &str,
        keys: Vec<String>,
        id: &str,
        arg: Value,
        now: i64,
        what: &str,
    ) -> i64 {
        let id = Value::Bytes(Bytes::from(id_bytes(id)));
        let args = vec![id, arg, now.into(), PUBLISH.into()];
        int(self.process.eval(script, keys, args).await, what)
    }

    /// `tryRelease(ids)`: all or nothing; returns (and publishes) how many it released, 0 when
    /// any id was missing or lapsed. `release(ids)` throws unless this is `ids.len()`.
    pub async fn release_many(&self, ids: &[String]) -> i64 {
        assert!(!ids.is_empty(), "Redisson rejects an empty list");
        let mut args: Vec<Value> = vec![(ids.len() as i64).into(), now_ms().into(), PUBLISH.into()];
        args.extend(ids.iter().map(|id| Value::Bytes(Bytes::from(id_bytes(id)))));
        let keys = self.keys_count_channel_leases();
        int(
            self.process.eval(PES_RELEASE_MANY, keys, args).await,
            "tryRelease(list)",
        )
    }

    /// `updateLeaseTime(id, lease)`: a new lease from now (`None`: [`NO_LEASE`]) for a permit
    /// still held after reclaiming; `false` otherwise.
    pub async fn update_lease_time(&self, id: &str, lease: Option<Duration>) -> bool {
        let now = now_ms();
        let lease = timeout_date(now, lease).into();
        let keys = self.keys_count_leases_channel();
        let updated = self.eval_on_id(PES_UPDATE_LEASE, keys, id, lease, now, "updateLeaseTime");
        updated.await == 1
    }

    /// `getLeaseTime(id)`'s script reply: the ms left, -1 without a lease, 0 when not held
    /// (where Redisson throws).
    pub async fn lease_time(&self, id: &str) -> i64 {
        let keys = self.keys_count_leases_channel();
        let (no_lease, now) = (NO_LEASE.into(), now_ms());
        self.eval_on_id(PES_LEASE_TIME, keys, id, no_lease, now, "getLeaseTime")
            .await
    }

    /// `delete()`: `DEL <name> {<name>}:timeout`; `true` when it deleted either. Publishes
    /// nothing.
    pub async fn delete(&self) -> bool {
        let deleted: i64 = self
            .process
            .redis
            .del(vec![self.name.clone(), self.kind.timeout_key.clone()])
            .await
            .expect("DEL");
        deleted > 0
    }
}

// ---- RCountDownLatch ----

impl JavaLatch {
    /// `trySetCount(n)`: sets the count only when there is none (no TTL) and publishes `1`.
    pub async fn try_set_count(&self, count: i64) -> bool {
        let args = vec![LATCH_NEW_COUNT.into(), count.into(), PUBLISH.into()];
        let reply = self.eval_on_channel(LATCH_TRY_SET_COUNT, args).await;
        int(reply, "trySetCount") == 1
    }

    /// `countDown()`: DECR; at 0 or below the count is deleted; exactly at 0 `0` is published.
    pub async fn count_down(&self) {
        let args = vec![LATCH_ZERO.into(), PUBLISH.into()];
        self.eval_on_channel(LATCH_COUNT_DOWN, args).await;
    }

    /// `getCount()`: `GET <name>`, 0 when missing.
    pub async fn count(&self) -> i64 {
        self.read_count("getCount").await
    }

    /// `await()`: returns at once at count 0; otherwise subscribes and loops {re-read the count;
    /// while above 0, wait for the process's latch to be open}.
    pub async fn wait(&self) {
        if self.count().await == 0 {
            return;
        }
        let sub = self
            .process
            .subscribe_bounded(&self.channel, Kind::Latch)
            .await;
        while self.count().await > 0 {
            sub.opened(None).await;
        }
    }

    /// `await(timeout)`: as [`wait`](Self::wait) within `timeout` (the subscription included);
    /// `false` when it runs out.
    pub async fn wait_for(&self, timeout: Duration) -> bool {
        let start = Instant::now();
        if self.count().await == 0 {
            return true;
        }
        let subscribing = self.process.subscribe(&self.channel, Kind::Latch);
        let Ok(sub) = tokio::time::timeout(timeout, subscribing).await else {
            return false;
        };
        if left_ms(timeout, start) <= 0 {
            return false;
        }
        while self.count().await > 0 {
            let left = left_ms(timeout, start);
            if left <= 0 {
                return false;
            }
            sub.opened(Some(Duration::from_millis(left as u64))).await;
        }
        true
    }

    /// `delete()`: deletes the count and, if there was one, publishes `1` (which closes latches;
    /// it wakes nobody).
    pub async fn delete(&self) -> bool {
        let args = vec![LATCH_NEW_COUNT.into(), PUBLISH.into()];
        int(self.eval_on_channel(LATCH_DELETE, args).await, "delete") == 1
    }
}
