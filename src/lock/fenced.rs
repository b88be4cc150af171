//! The fenced lock, Redisson's `RFencedLock` in async Rust: the plain lock, whose every new owner
//! also takes the next number of a counter on Redis, its fencing token.

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::interfaces::KeysInterface;

use super::api::lock_api;
use super::guard::LockGuard;
use super::handle::Handle;
use super::kind::Hold;
use super::kind::Turns;
use super::kind::{AcquireCall, Kind, LockType, ReleaseCall};
use super::reentrant::{plain_acquire, Reentrant};
use super::replies::{Answer, Released};
use super::turns::PlainTurns;
use crate::connection::Connection;
use crate::error::{Call, Error, Result};
use crate::names::{prefixed, LockKeys};
use crate::owner::Owner;
use crate::shared::Shared;
use crate::wait::Lost;

/// A reentrant distributed lock whose holders get a **fencing token**: a number that grows with
/// every new owner of the lock, so a store that remembers the highest token it has seen can
/// refuse a write from a holder whose lease ran out while it was paused (Redisson's
/// `RFencedLock`).
///
/// A lease alone cannot stop that write: a holder stopped by a GC pause, a `SIGSTOP` or a slow
/// disk past its lease may wake up, still believe it holds the lock (it has not run since it
/// last checked [`is_lost`](FencedGuard::is_lost)), and write after another owner took over.
/// With the token passed along, the store tells: the newer owner's token is higher. Pass
/// [`FencedGuard::token`] to a [`Fence`](crate::Fence) for data on Redis, or to any store that
/// can compare it on write (see the `fence` docs for a SQL table).
///
/// It is the plain [`Lock`](crate::Lock) otherwise, with the same data on Redis: the same API,
/// waiting, leases and guarantees, and it excludes a `Lock` of the same name.
///
/// - **Token.** `INCR redisson_lock_token:{<name>}` when a new owner takes the lock; a re-entry
///   of the same owner gets the same token (Redisson's increments it on every acquire, a
///   re-entry too; either way tokens only grow).
/// - **Persistence.** The counter is a Redis key like any other, without expiry. Tokens stay
///   monotonic as long as the counter is never lost: on a single server, run with the AOF
///   (`appendonly yes`, and `appendfsync always` to survive a crash without losing the last
///   increment; `everysec` may lose up to a second of them, and then hand out a token again). A
///   server restarted without its data restarts the count at 1. On a replicated deployment, a
///   failover to a replica that had not received the last increments can do the same: use
///   [`Config::with_replica_sync`](crate::Config::with_replica_sync) so every acquire waits
///   for a replica.
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// let lock = client.fenced_lock("ledger");
/// let guard = lock.lock().await?;
/// let fence = client.fence("ledger:balance");
/// // Refused with Error::StaleToken if a newer holder has written since.
/// fence.set(guard.token(), "ledger:balance", 100).await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FencedLock {
    pub(super) handle: Handle,
}

impl FencedLock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> FencedLock {
        FencedLock {
            handle: Handle::new(
                shared,
                name.clone(),
                Kind::of(Fenced {
                    token: prefixed(crate::names::prefix::TOKEN, &name).into(),
                }),
            ),
        }
    }

    /// The newest token handed out for this lock (0 when none was), whoever holds it.
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn token(&self) -> Result<u64> {
        self.handle.shared().check_open()?;
        let keys = self.handle.keys()?;
        let redis = &self.handle.shared().redis;
        let counter = prefixed(crate::names::prefix::TOKEN, &keys.name);
        let token: Option<u64> = redis
            .get(&*counter)
            .await
            .map_err(|e| Error::from_redis(e, &counter, &redis.server))?;
        Ok(token.unwrap_or(0))
    }
}

lock_api!(FencedLock, "fenced_lock", "", FencedGuard);

/// The fenced lock's type: the plain lock's, whose acquires also take a token from this counter
/// when a new owner comes in.
pub(super) struct Fenced {
    /// The token counter, `redisson_lock_token:{<name>}`.
    token: Str,
}

impl LockType for Fenced {
    fn primitive(&self) -> crate::primitive::Primitive {
        crate::primitive::Primitive::FencedLock
    }

    fn turns<'h>(&self, hold: &'h Hold, wait: Option<Duration>) -> Box<dyn Turns + 'h> {
        Box::new(PlainTurns::new(hold, wait))
    }

    fn acquire<'a>(&'a self, call: AcquireCall<'a>) -> Call<'a, Answer> {
        plain_acquire(call, Some(&self.token))
    }

    fn token<'a>(&'a self, redis: &'a Connection, _keys: &'a LockKeys) -> Call<'a, Option<u64>> {
        Box::pin(read_token(redis, &self.token))
    }

    fn release<'a>(&'a self, call: ReleaseCall<'a>) -> Call<'a, Released> {
        Reentrant::PLAIN.release(call)
    }

    fn force_release<'a>(&'a self, shared: &'a Shared, keys: &'a LockKeys) -> Call<'a, bool> {
        Reentrant::PLAIN.force_release(shared, keys)
    }

    fn hands_off_with_grace(&self) -> bool {
        true
    }
}

/// The token in counter `token`, read back after an acquire whose reply was lost but which took
/// the hold: an error when the counter is gone (deleted by hand since).
pub(crate) async fn read_token(redis: &Connection, token: &Str) -> Result<Option<u64>> {
    let value: Option<u64> = redis
        .get(token.clone())
        .await
        .map_err(|e| Error::from_redis(e, token, &redis.server))?;
    let gone = || {
        let why = format!("the fencing token counter `{token}` is gone");
        Error::redis(crate::redis_error::missing(why), &redis.server)
    };
    value.map(Some).ok_or_else(gone)
}

/// A hold of a [`FencedLock`], with its fencing token. Everything else is a
/// [`LockGuard`]'s: release it with [`unlock`](FencedGuard::unlock); dropping it releases it in
/// the background.
#[must_use = "dropping the guard releases the hold at once"]
#[derive(Debug)]
pub struct FencedGuard {
    guard: LockGuard,
    token: u64,
}

impl From<LockGuard> for FencedGuard {
    fn from(guard: LockGuard) -> FencedGuard {
        let token = guard
            .fencing_token()
            .expect("a fenced lock's acquire gives a token");
        FencedGuard { guard, token }
    }
}

impl FencedGuard {
    /// The fencing token of this hold: higher than any token of an owner that held the lock
    /// before, the same for every hold of one owner's uninterrupted tenure.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> &Owner {
        self.guard.owner()
    }

    /// As [`LockGuard::lease`].
    pub fn lease(&self) -> Option<Duration> {
        self.guard.lease()
    }

    /// As [`LockGuard::lost`]. Unlike a check of it, the token protects a write the store
    /// itself checks, however long the holder was paused before it.
    pub fn lost(&self) -> Lost {
        self.guard.lost()
    }

    /// As [`LockGuard::is_lost`].
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// As [`LockGuard::hold_count`].
    ///
    /// # Errors
    ///
    /// As [`LockGuard::hold_count`].
    pub async fn hold_count(&self) -> Result<u64> {
        self.guard.hold_count().await
    }

    /// As [`LockGuard::unlock`]. The token counter is left as it is: the next owner's token is
    /// higher.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::unlock`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the release runs to its end in the background.
    pub async fn unlock(self) -> Result<()> {
        self.guard.unlock().await
    }

    /// The plain guard, without the token.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}
