//! The reentrant lock, Redisson's `RLock` in async Rust.
//!
//! The lock is a Redis hash named after the lock, with one field per holder
//! (`<client-uuid>:<owner>` → hold count) and a lease as its TTL. Taking it again as the same
//! owner counts one more hold; the last release deletes it and publishes `0` on its channel, which
//! wakes one waiter in every process waiting for it. The data, channel and messages are
//! Redisson's, so a Java service using Redisson and a Rust service using relock exclude each other
//! on the same name and wake each other's waiters.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::guard::{LockGuard, Lost};
use super::handle::{Handle, RemainingLease};
use super::kind::Kind;
use super::turns::Plain;
use crate::error::Result;
use crate::owner::Owner;
use crate::shared::Shared;

/// A reentrant distributed lock: a cheap handle (a name, a client and an optional explicit
/// owner) that does no I/O until used.
///
/// Holds are counted per owner: by default the current tokio task (see [`Owner`]), so a task
/// that calls `lock()` while it already holds the lock re-enters at once, and the lock is free
/// only when its last hold is released. Locks taken without a lease are kept alive by the
/// client's watchdog for as long as their guard lives, and expire one watchdog timeout after
/// their holder dies. Waiting is done on pub/sub messages, bounded by the holder's lease.
///
/// `join!` branches run in one task and so share an owner: they re-enter each other's holds
/// rather than exclude each other. Give each branch its own [`Owner::new`] through
/// [`Lock::owned_by`] when they must exclude each other.
///
/// # Fairness
///
/// Waiters of one client are served in arrival order: a release wakes the longest waiter, and a
/// newcomer queues behind waiting tasks instead of barging past them. Across processes the
/// woken waiters race, with two rules against losing every race: a client that just released a
/// lock to waiters elsewhere holds its own tasks back for a short grace
/// (`Config::with_handoff_grace`), and a client's first waiter that lost a race claims the next
/// hand-off (`Config::with_claim_window`): the lock, once free, goes to it alone, or to a waiter
/// that lost more races. A strict global order is the job of a [`FairLock`](crate::FairLock). A
/// re-entry never waits for anyone, and `try_lock()` never waits for another owner, though it
/// finds a freed lock busy while a claim on it stands.
///
/// Every acquire waits for its owner's own releases of the lock that are still in flight (an
/// `unlock()` or a dropped guard whose reply has not come back): a round trip as a rule, and
/// until the release's retries end when its reply was lost. That is what lets the last release
/// leave no replay key behind (see [`LockGuard::unlock`]).
///
/// An acquire answered only after its lease could have run out (the server or the network
/// stalled longer than the lease) gives the hold back and tries again within its wait, so no call
/// returns a guard that is lost on arrival; `try_lock()` then finds the lock busy. The same holds
/// for every lock type.
///
/// # Examples
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// let lock = client.lock("order:42");
/// let outer = lock.lock().await?;
/// let inner = lock.lock().await?;             // the same task: re-enters
/// assert_eq!(lock.hold_count().await?, 2);
/// inner.unlock().await?;
/// outer.unlock().await?;
/// assert!(!lock.is_locked().await?);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Lock {
    handle: Handle,
}

impl Lock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> Lock {
        Lock {
            handle: Handle::new(shared, name, |_| Kind::Reentrant),
        }
    }

    /// The lock's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// The same lock, held and released on behalf of `owner` instead of the current task.
    pub fn owned_by(self, owner: Owner) -> Lock {
        Lock {
            handle: self.handle.owned_by(owner),
        }
    }

    /// Takes the lock, waiting as long as it takes. The watchdog renews its lease until the
    /// guard is released or dropped.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name,
    /// [`Error::WrongType`](crate::Error::WrongType) when the key holds another type,
    /// [`Error::Redis`](crate::Error::Redis) when Redis fails,
    /// [`Error::Closed`](crate::Error::Closed) after shutdown. If the connection to Redis breaks
    /// while it waits, it fails with [`Error::Redis`](crate::Error::Redis) within about one command
    /// timeout, unless the connection is back by then.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call leaves no hold, no subscription and no waiter behind. If the
    /// acquire had already reached Redis, its hold is released in the background.
    pub async fn lock(&self) -> Result<LockGuard> {
        self.handle
            .acquire(None, None, Plain)
            .await
            .map(|guard| guard.expect("an unbounded wait ends only with the lock"))
    }

    /// Takes the lock with a fixed lease, waiting as long as it takes. Nobody renews the lease:
    /// the lock frees itself when it ends, guard or no guard.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), and [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
    /// lease under 1 ms or over 2^53 ms.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.handle
            .acquire(Some(lease), None, Plain)
            .await
            .map(|guard| guard.expect("an unbounded wait ends only with the lock"))
    }

    /// Takes the lock if it is free (or already held by this owner), in one attempt.
    /// `Ok(None)` when another owner holds it. The watchdog renews a lock taken here.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.handle.acquire(None, Some(Duration::ZERO), Plain).await
    }

    /// Takes the lock, waiting at most `wait`; `Ok(None)` when the wait ran out. With
    /// `lease: None` the watchdog renews the lock, else it lasts `lease`.
    ///
    /// # Errors
    ///
    /// As [`lock_with_lease`](Self::lock_with_lease).
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.handle.acquire(lease, Some(wait), Plain).await
    }

    /// Runs `work` under the lock and releases it afterwards, whatever `work` returned. If `work`
    /// panics or the call is dropped, the guard's drop releases the lock in the background.
    ///
    /// `work` gets the hold's [`Lost`] signal (see [`LockGuard::lost`]), so it can stop when the
    /// lease is lost; ignore it with `|_|` when the work is short.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// # async fn copy_rows() -> u64 { 42 }
    /// let copied = client
    ///     .lock("stock:7")
    ///     .with(|lost| async move {
    ///         tokio::select! {
    ///             _ = lost => None,             // the lease is gone: stop writing
    ///             rows = copy_rows() => Some(rows),
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), and any error of the release after `work` (such as
    /// [`Error::LeaseLost`](crate::Error::LeaseLost): the value is dropped then, as the work ran
    /// unprotected).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the lock is released in the background.
    pub async fn with<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Lost) -> Fut,
        Fut: Future<Output = T>,
    {
        self.handle.with(Plain, work).await
    }

    /// Deletes the lock whoever holds it and wakes a waiter. `Ok(true)` when there was a lock.
    /// Holders find out through their watchdog (`lost()`) or when they release (`NotHeld`).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType) when the key holds another type (it is left
    /// alone), and as [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may or may not have deleted the lock.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.handle.force_unlock().await
    }

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    ///
    /// As [`force_unlock`](Self::force_unlock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool> {
        self.handle.is_locked().await
    }

    /// Whether this lock's owner (the current task unless [`owned_by`](Self::owned_by) set one)
    /// holds the lock.
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_held_by_current_owner(&self) -> Result<bool> {
        Ok(self.handle.hold_count().await? > 0)
    }

    /// How many holds this lock's owner has (0 when none).
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn hold_count(&self) -> Result<u64> {
        self.handle.hold_count().await
    }

    /// How long the lock has left before it expires, whoever holds it.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// use relock::RemainingLease;
    /// match client.lock("job").remaining_lease().await? {
    ///     RemainingLease::Unlocked => println!("free"),
    ///     RemainingLease::Expires(left) => println!("held, {left:?} left"),
    ///     RemainingLease::NoExpiry => println!("held with no expiry (not written by relock)"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn remaining_lease(&self) -> Result<RemainingLease> {
        self.handle.remaining_lease().await
    }
}
