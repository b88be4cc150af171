//! The lock family as one type, so an invariant is written once and checked on every lock type:
//! [`Family`] names a type (`Lock`, `FairLock`, `SpinLock`, `FencedLock`, and an `RwLock`'s
//! write and read sides), [`AnyLock`] is a handle of any of them with their common methods, and
//! the helpers here know what each type leaves on Redis (the fair lock's queue and per-waiter
//! channels, the spin lock's lack of any subscription, the read-write lock's `mode`, writer
//! field, readers' timeout keys and channel).
//!
//! A read hold shares the lock with other readers: for it, whoever must be excluded or must wait
//! is a writer of another owner, its [`rival`](Family::rival).

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::ops::Deref;
use std::time::Duration;

use relock::testing::scripts;
use relock::{Client, FencedGuard, LockGuard, Lost, Owner, RemainingLease, Result};

use super::{faults, RedisServer, Resp};

/// A lock type of the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// [`relock::Lock`]: waiters woken by a message on the lock's channel.
    Lock,
    /// [`relock::FairLock`]: a queue on Redis, each waiter woken on its own channel.
    Fair,
    /// [`relock::SpinLock`]: waiters poll with backoff, no pub/sub at all.
    Spin,
    /// [`relock::FencedLock`]: the plain lock, and a token counter its new owners increment.
    Fenced,
    /// [`relock::WriteLock`]: an `RwLock`'s exclusive side, its waiters woken by every message
    /// on the read-write lock's channel.
    Write,
    /// [`relock::ReadLock`]: an `RwLock`'s shared side; a writer is its rival.
    Read,
}

impl Family {
    /// Every lock type.
    pub const ALL: [Family; 6] = [
        Family::Lock,
        Family::Fair,
        Family::Spin,
        Family::Fenced,
        Family::Write,
        Family::Read,
    ];

    /// A short name for messages and key prefixes.
    pub fn name(self) -> &'static str {
        match self {
            Family::Lock => "lock",
            Family::Fair => "fair",
            Family::Spin => "spin",
            Family::Fenced => "fenced",
            Family::Write => "write",
            Family::Read => "read",
        }
    }

    /// A handle of this type on lock `name` (a spin lock with the default backoff).
    pub fn lock(self, client: &Client, name: impl Into<String>) -> AnyLock {
        match self {
            Family::Lock => AnyLock::Lock(client.lock(name)),
            Family::Fair => AnyLock::Fair(client.fair_lock(name)),
            Family::Spin => AnyLock::Spin(client.spin_lock(name)),
            Family::Fenced => AnyLock::Fenced(client.fenced_lock(name)),
            Family::Write => AnyLock::Write(client.rw_lock(name).write()),
            Family::Read => AnyLock::Read(client.rw_lock(name).read()),
        }
    }

    /// Whether this type's holds of different owners share the lock (a read lock's).
    pub fn shared(self) -> bool {
        matches!(self, Family::Read)
    }

    /// The type whose holds exclude a hold of this type by another owner, and wait for it: the
    /// type itself, but a writer for a reader.
    pub fn rival(self) -> Family {
        match self {
            Family::Read => Family::Write,
            other => other,
        }
    }

    /// A handle that contends with this type's holds on lock `name`: one of its
    /// [`rival`](Self::rival).
    pub fn contender(self, client: &Client, name: impl Into<String>) -> AnyLock {
        self.rival().lock(client, name)
    }

    /// The `i`-th of a crowd of handles on lock `name`: of this type, and for a shared type every
    /// other pair of them its rival's, so that shared holds meet exclusive ones.
    pub fn crowd(self, client: &Client, name: impl Into<String>, i: usize) -> AnyLock {
        if self.shared() && (i / 2) % 2 == 1 {
            self.contender(client, name)
        } else {
            self.lock(client, name)
        }
    }

    /// Whether its waiters subscribe (and its releases publish).
    pub fn subscribes(self) -> bool {
        !matches!(self, Family::Spin)
    }

    /// The longest a spin waiter pauses between attempts (the default backoff's), zero for the
    /// types woken by messages.
    pub fn poll_pause(self) -> Duration {
        match self {
            Family::Spin => relock::Backoff::default().max(),
            _ => Duration::ZERO,
        }
    }

    /// How soon after a release a waiter must hold the lock: the type's pause between polls
    /// plus `slack`. Tests give the holder a lease far longer than this, so a waiter served
    /// within it was served by the release (its message, or its next poll), not by its timer.
    pub fn prompt(self, slack: Duration) -> Duration {
        self.poll_pause() + slack
    }

    /// What names this type's acquire script in its request (`sent_as`).
    pub fn acquire_sha(self) -> String {
        self.sha_of([
            scripts::LOCK_ACQUIRE,
            scripts::FAIR_ACQUIRE,
            scripts::RW_WRITE_ACQUIRE,
            scripts::RW_READ_ACQUIRE,
        ])
    }

    /// What names this type's release script in its request (`sent_as`).
    pub fn release_sha(self) -> String {
        self.sha_of([
            scripts::LOCK_RELEASE,
            scripts::FAIR_RELEASE,
            scripts::RW_WRITE_RELEASE,
            scripts::RW_READ_RELEASE,
        ])
    }

    /// What names this type's script of `[plain, fair, write, read]` in its request: the plain lock's serves
    /// the spin and fenced locks too.
    fn sha_of(self, [plain, fair, write, read]: [&str; 4]) -> String {
        super::sent_as(match self {
            Family::Lock | Family::Spin | Family::Fenced => plain,
            Family::Fair => fair,
            Family::Write => write,
            Family::Read => read,
        })
    }

    /// Whether this is a side of an `RwLock`: Redisson's read-write layout and channel.
    fn read_write(self) -> bool {
        matches!(self, Family::Write | Family::Read)
    }

    /// The channel lock `name`'s releases publish on and its waiters listen to (a fair waiter
    /// listens on its own, under it).
    pub fn channel(self, name: &str) -> String {
        if self.read_write() {
            super::braced("redisson_rwlock", name)
        } else {
            super::lock_channel(name)
        }
    }

    /// The holder field of `owner` on `client` for this type: `<client-id>:<owner-id>`, and a
    /// writer's `:write` after it.
    pub fn field(self, client: &Client, owner: &Owner) -> String {
        let field = field(client, owner);
        match self {
            Family::Write => format!("{field}:write"),
            _ => field,
        }
    }

    /// The holder field of a guard of this type.
    pub fn field_of(self, client: &Client, guard: &LockGuard) -> String {
        self.field(client, guard.owner())
    }

    /// The holders of lock `name` as sorted (field, count) pairs, empty when there is no lock.
    /// A read-write lock's `mode` is checked (`write` with a writer, else `read`) and left out.
    pub fn holders(self, server: &RedisServer, name: &str) -> Vec<(String, String)> {
        let mut hash = super::raw_hgetall(server, name);
        if !self.read_write() || hash.is_empty() {
            return hash;
        }
        let mode = hash.iter().position(|(field, _)| field == "mode");
        let mode = hash.remove(mode.unwrap_or_else(|| panic!("no mode in {name}: {hash:?}")));
        let writing = hash.iter().any(|(field, _)| field.ends_with(":write"));
        let expected = if writing { "write" } else { "read" };
        assert_eq!(mode.1, expected, "the mode of {name}, held by {hash:?}");
        hash
    }

    /// How many holds `field` has on lock `name`, 0 when none. A reader holds only while one of
    /// its timeout keys lives (see `lua/rw/readers.lua`): a field whose keys are all gone holds
    /// nothing, and no key outlives the holds counted.
    pub fn holds(self, server: &RedisServer, name: &str, field: &str) -> u64 {
        let count = super::raw_holds(server, name, field);
        if !self.read_write() || field.ends_with(":write") {
            return count;
        }
        let keys = raw_keys(server, &format!("{}:*", read_timeouts(name, field)));
        let numbers: Vec<u64> = keys
            .iter()
            .map(|key| key.rsplit(':').next().unwrap().parse().unwrap())
            .collect();
        assert!(
            numbers.iter().all(|n| (1..=count).contains(n)),
            "reader {field} of {name} counts {count} holds, has timeout keys {keys:?}"
        );
        if numbers.is_empty() {
            0
        } else {
            count
        }
    }

    /// What a watcher of waiters needs to know before waiters start: see
    /// [`WaitWatch::until_waiting`].
    pub fn watch_waiters(self, server: &RedisServer) -> WaitWatch {
        WaitWatch {
            family: self,
            evalsha_before: super::raw_script_calls(server),
        }
    }

    /// The end-of-test leak check of [`faults::assert_no_leaks`] (no key without a TTL, no
    /// subscriber on the lock's channel, nothing tracked by `clients`), and more, polled for up
    /// to 10 s: no lock hash, no replay key, no claim key, no subscriber on any of the lock's
    /// channels (a fair waiter's included), for a fair lock an empty queue and deadline set, and
    /// for a read-write lock no reader's timeout key.
    pub async fn assert_no_leaks(self, server: &RedisServer, clients: &[&Client], names: &[&str]) {
        faults::assert_no_leaks(server, clients, names).await;
        faults::until_no_leaks(Duration::from_secs(10), || {
            let found = self.leaks(server, names);
            let name = self.name();
            found
                .into_iter()
                .map(|leak| format!("{name}: {leak}"))
                .collect()
        })
        .await;
    }

    /// What [`assert_no_leaks`](Self::assert_no_leaks) adds to the fault suite's check. A
    /// fenced lock's token counter stays, by design: it has no expiry (see `FencedLock`).
    fn leaks(self, server: &RedisServer, names: &[&str]) -> Vec<String> {
        let mut found = Vec::new();
        for name in names {
            let hash = super::raw_hgetall(server, name);
            if !hash.is_empty() {
                found.push(format!("lock `{name}` is still held: {hash:?}"));
            }
            let claim = super::claim_key(name);
            if super::raw_exists(server, &claim) {
                found.push(format!("claim key `{claim}` is left"));
            }
            let latches = raw_keys(server, &format!("{}:*", latch_prefix(name)));
            if !latches.is_empty() {
                found.push(format!("replay keys left: {latches:?}"));
            }
            let channels = raw_channels(server, &format!("{}*", self.channel(name)));
            if !channels.is_empty() {
                found.push(format!("channels still subscribed: {channels:?}"));
            }
            if self.read_write() {
                let timeouts = raw_keys(server, &format!("{}:*", read_timeouts(name, "*")));
                if !timeouts.is_empty() {
                    found.push(format!("readers' timeout keys left: {timeouts:?}"));
                }
            }
            if self == Family::Fair {
                let queue = super::raw_lrange(server, &super::fair_queue_key(name));
                if !queue.is_empty() {
                    found.push(format!("fair queue of `{name}` is not empty: {queue:?}"));
                }
                let timeouts = super::fair_timeout_key(name);
                if super::raw_exists(server, &timeouts) {
                    found.push(format!("fair deadlines `{timeouts}` are left"));
                }
            }
        }
        found
    }
}

/// Knows how to tell that waiters of a [`Family`] are parked on a held lock: made by
/// [`Family::watch_waiters`] before they start.
pub struct WaitWatch {
    family: Family,
    /// `EVALSHA` calls before the waiters started: a spin waiter is seen only by its attempts.
    evalsha_before: u64,
}

impl WaitWatch {
    /// Waits (at most 10 s) until each `(client, n)` of `waiting` has `n` waiters on lock
    /// `name`:
    ///
    /// - `Lock`, `Fenced`, `Write`, `Read`: the client counts them, and a subscriber listens on
    ///   the lock's channel;
    /// - `Fair`: the client counts them, and each is in the queue on Redis with its own channel
    ///   subscribed;
    /// - `Spin`: nothing on Redis shows a spin waiter but its attempts: the server ran at least
    ///   two scripts per waiter since the watch began (a first attempt and a retry). Other
    ///   scripts count too, so with a holder renewed meanwhile this only says that much.
    pub async fn until_waiting(
        &self,
        server: &RedisServer,
        name: &str,
        waiting: &[(&Client, usize)],
    ) -> bool {
        let channel = self.family.channel(name);
        let queue = super::fair_queue_key(name);
        let total: usize = waiting.iter().map(|(_, n)| n).sum();
        super::eventually(Duration::from_secs(10), || async {
            match self.family {
                Family::Lock | Family::Fenced | Family::Write | Family::Read => {
                    waiting
                        .iter()
                        .all(|(client, n)| client.stats().waiters == *n)
                        && super::raw_numsub(server, &channel) >= 1
                }
                Family::Fair => {
                    let queued = super::raw_lrange(server, &queue);
                    waiting.iter().all(|(client, n)| {
                        let mine: Vec<&String> = queued
                            .iter()
                            .filter(|field| field.starts_with(client.id()))
                            .collect();
                        client.stats().waiters == *n
                            && mine.len() == *n
                            && mine.iter().all(|field| {
                                super::raw_numsub(server, &super::fair_waiter_channel(name, field))
                                    == 1
                            })
                    })
                }
                Family::Spin => {
                    let calls = super::raw_script_calls(server);
                    calls >= self.evalsha_before + 2 * total as u64
                }
            }
        })
        .await
    }
}

/// The owner field of `owner` on `client`: `<client-id>:<owner-id>` (see [`Family::field`] for
/// a holder's).
pub fn field(client: &Client, owner: &Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

/// A client on `url` with a watchdog timeout, a command timeout, and a long fair waiter
/// timeout (60 s): a fair waiter renews its place (and tries again) every third of it, so with
/// a long one a fair waiter served soon after a release was served by its wake-up message, not
/// by its heartbeat, and a place that lapsed instead of being left would show.
pub async fn connect(url: &str, watchdog: Duration, command_timeout: Duration) -> Client {
    let config = crate::common::config(url)
        .with_watchdog_timeout(watchdog)
        .with_command_timeout(command_timeout)
        .with_fair_waiter_timeout(Duration::from_secs(60));
    Client::new(config).await.expect("connect")
}

/// Waits (at most 10 s) until `server` stops answering: a `DEBUG SLEEP` sent from another
/// connection is in effect. A `PING` left unanswered for 50 ms says so.
pub async fn until_asleep(server: &RedisServer) -> bool {
    use std::io::{Read, Write};
    let port = server.port();
    tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            stream
                .set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            stream.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
            let mut reply = [0u8; 16];
            match stream.read(&mut reply) {
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return true;
                }
                _ => continue,
            }
        }
        false
    })
    .await
    .unwrap()
}

/// The fencing token counter of lock `name` (`redisson_lock_token:{<name>}`), if there is one.
pub fn raw_token(server: &RedisServer, name: &str) -> Option<u64> {
    let key = super::braced("redisson_lock_token", name);
    match super::resp(&server.cmd(&["GET", &key])) {
        Resp::Bulk(token) => token.map(|token| token.parse().expect("a numeric token")),
        other => panic!("unexpected GET reply {other:?}"),
    }
}

/// The prefix of reader `field`'s timeout keys on read-write lock `name` (Redisson's
/// `suffixName`): `{<name>}:<field>:rwlock_timeout`, each followed by `:<n>`.
fn read_timeouts(name: &str, field: &str) -> String {
    if name.contains('{') {
        format!("{name}:{field}:rwlock_timeout")
    } else {
        format!("{{{name}}}:{field}:rwlock_timeout")
    }
}

/// The prefix of lock `name`'s replay keys.
fn latch_prefix(name: &str) -> String {
    if name.contains('{') {
        format!("redisson_unlock_latch:{name}")
    } else {
        format!("redisson_unlock_latch:{{{name}}}")
    }
}

/// The keys matching `pattern` (`KEYS`).
pub fn raw_keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    bulk_strings(super::resp(&server.cmd(&["KEYS", pattern])))
}

/// The channels with subscribers matching `pattern` (`PUBSUB CHANNELS`).
pub fn raw_channels(server: &RedisServer, pattern: &str) -> Vec<String> {
    bulk_strings(super::resp(&server.cmd(&["PUBSUB", "CHANNELS", pattern])))
}

fn bulk_strings(reply: Resp) -> Vec<String> {
    match reply {
        Resp::Array(Some(items)) => items
            .into_iter()
            .filter_map(|item| match item {
                Resp::Bulk(Some(text)) => Some(text),
                _ => None,
            })
            .collect(),
        other => panic!("expected an array of strings, got {other:?}"),
    }
}

/// A fenced lock's owners follow each other: the `later` one's token is higher than the
/// `earlier` one's. Guards without tokens (the other types) pass.
pub fn assert_fenced(earlier: Option<u64>, later: Option<u64>) {
    if let (Some(earlier), Some(later)) = (earlier, later) {
        assert!(later > earlier, "token {later} after token {earlier}");
    }
}

/// A guard of any lock type: a [`LockGuard`] (a [`FencedGuard`]'s own), and a fenced lock's
/// token.
#[must_use = "dropping the guard releases the hold at once"]
#[derive(Debug)]
pub struct AnyGuard {
    guard: LockGuard,
    token: Option<u64>,
}

impl From<LockGuard> for AnyGuard {
    fn from(guard: LockGuard) -> AnyGuard {
        AnyGuard { guard, token: None }
    }
}

impl From<FencedGuard> for AnyGuard {
    fn from(guard: FencedGuard) -> AnyGuard {
        let token = Some(guard.token());
        AnyGuard {
            guard: guard.into_guard(),
            token,
        }
    }
}

impl Deref for AnyGuard {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl AnyGuard {
    /// A fenced lock's token, `None` for the other types.
    pub fn token(&self) -> Option<u64> {
        self.token
    }

    pub async fn unlock(self) -> Result<()> {
        self.guard.unlock().await
    }
}

/// A handle of any lock type, with the methods they share.
#[derive(Clone, Debug)]
pub enum AnyLock {
    Lock(relock::Lock),
    Fair(relock::FairLock),
    Spin(relock::SpinLock),
    Fenced(relock::FencedLock),
    Write(relock::WriteLock),
    Read(relock::ReadLock),
}

/// Runs `$body` with `$lock` bound to the handle inside, whatever its type.
macro_rules! each {
    ($any:expr, $lock:ident => $body:expr) => {
        match $any {
            AnyLock::Lock($lock) => $body,
            AnyLock::Fair($lock) => $body,
            AnyLock::Spin($lock) => $body,
            AnyLock::Fenced($lock) => $body,
            AnyLock::Write($lock) => $body,
            AnyLock::Read($lock) => $body,
        }
    };
}

impl AnyLock {
    /// The type of this handle.
    pub fn family(&self) -> Family {
        match self {
            AnyLock::Lock(_) => Family::Lock,
            AnyLock::Fair(_) => Family::Fair,
            AnyLock::Spin(_) => Family::Spin,
            AnyLock::Fenced(_) => Family::Fenced,
            AnyLock::Write(_) => Family::Write,
            AnyLock::Read(_) => Family::Read,
        }
    }

    pub fn name(&self) -> &str {
        each!(self, lock => lock.name())
    }

    pub fn owned_by(self, owner: Owner) -> AnyLock {
        match self {
            AnyLock::Lock(lock) => AnyLock::Lock(lock.owned_by(owner)),
            AnyLock::Fair(lock) => AnyLock::Fair(lock.owned_by(owner)),
            AnyLock::Spin(lock) => AnyLock::Spin(lock.owned_by(owner)),
            AnyLock::Fenced(lock) => AnyLock::Fenced(lock.owned_by(owner)),
            AnyLock::Write(lock) => AnyLock::Write(lock.owned_by(owner)),
            AnyLock::Read(lock) => AnyLock::Read(lock.owned_by(owner)),
        }
    }

    pub async fn lock(&self) -> Result<AnyGuard> {
        each!(self, lock => lock.lock().await.map(AnyGuard::from))
    }

    pub async fn lock_with_lease(&self, lease: Duration) -> Result<AnyGuard> {
        each!(self, lock => lock.lock_with_lease(lease).await.map(AnyGuard::from))
    }

    pub async fn try_lock(&self) -> Result<Option<AnyGuard>> {
        each!(self, lock => lock.try_lock().await.map(|guard| guard.map(AnyGuard::from)))
    }

    pub async fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<AnyGuard>> {
        each!(self, lock => lock
            .try_lock_for(wait, lease)
            .await
            .map(|guard| guard.map(AnyGuard::from)))
    }

    pub async fn with<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Lost) -> Fut,
        Fut: Future<Output = T>,
    {
        each!(self, lock => lock.with(work).await)
    }

    pub async fn force_unlock(&self) -> Result<bool> {
        each!(self, lock => lock.force_unlock().await)
    }

    pub async fn is_locked(&self) -> Result<bool> {
        each!(self, lock => lock.is_locked().await)
    }

    pub async fn is_held_by_current_owner(&self) -> Result<bool> {
        each!(self, lock => lock.is_held_by_current_owner().await)
    }

    pub async fn hold_count(&self) -> Result<u64> {
        each!(self, lock => lock.hold_count().await)
    }

    pub async fn remaining_lease(&self) -> Result<RemainingLease> {
        each!(self, lock => lock.remaining_lease().await)
    }
}
