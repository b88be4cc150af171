//! The spin lock, Redisson's `RSpinLock` in async Rust: the plain lock's data on Redis, with
//! waiters that retry after growing, jittered pauses instead of listening for a release.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::guard::{LockGuard, Lost};
use super::handle::{Handle, RemainingLease};
use super::hold::Hold;
use super::kind::{Ask, Kind};
use super::wait::{time_left, TakeTurns, Turns};
use crate::backoff::{Backoff, Delays};
use crate::error::Result;
use crate::owner::Owner;
use crate::shared::Shared;

/// A reentrant distributed lock whose waiters poll with exponential backoff instead of pub/sub,
/// as Redisson's `RSpinLock`: for deployments where pub/sub is unavailable or too costly (very
/// many short-lived locks, or a cluster where each subscription costs every node).
///
/// It has the [`Lock`](crate::Lock)'s data on Redis, API and guarantees (reentrant per owner,
/// watchdog or fixed leases, [`LockGuard::lost`], cancel safety), and excludes a `Lock` or a
/// Redisson `RLock` of the same name. What differs:
///
/// - it never subscribes, and its release publishes nothing;
/// - a waiter retries after a pause drawn from its [`Backoff`] (by default 1 ms, doubling up to
///   128 ms, as Redisson's), and never later than the holder's lease ends;
/// - waiters race for a freed lock: there is no order among them, and a hand-off waits for the
///   next retry, so it is slower than a `Lock`'s under contention.
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// use std::time::Duration;
/// use relock::Backoff;
/// let backoff = Backoff::exponential(Duration::from_millis(2), Duration::from_millis(50), 1.5)?;
/// let lock = client.spin_lock("cache:refresh").with_backoff(backoff);
/// let guard = lock.lock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SpinLock {
    handle: Handle,
}

impl SpinLock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> SpinLock {
        SpinLock {
            handle: Handle::new(shared, name, |_| Kind::Spin(Backoff::default())),
        }
    }

    /// The same lock, with waiters that pause after `backoff`.
    pub fn with_backoff(mut self, backoff: Backoff) -> SpinLock {
        *self.handle.kind_mut() = Kind::Spin(backoff);
        self
    }

    /// The lock's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// The same lock, held and released on behalf of `owner` instead of the current task.
    pub fn owned_by(self, owner: Owner) -> SpinLock {
        SpinLock {
            handle: self.handle.owned_by(owner),
        }
    }

    /// Takes the lock, retrying as long as it takes; the watchdog renews its lease.
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`](crate::Lock::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call leaves no hold behind.
    pub async fn lock(&self) -> Result<LockGuard> {
        self.handle
            .acquire(None, None, Spin)
            .await
            .map(|guard| guard.expect("an unbounded wait ends only with the lock"))
    }

    /// Takes the lock with a fixed lease, retrying as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`Lock::lock_with_lease`](crate::Lock::lock_with_lease).
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.handle
            .acquire(Some(lease), None, Spin)
            .await
            .map(|guard| guard.expect("an unbounded wait ends only with the lock"))
    }

    /// Takes the lock if it is free (or re-enters), in one attempt; `Ok(None)` otherwise.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.handle.acquire(None, Some(Duration::ZERO), Spin).await
    }

    /// Takes the lock, retrying for at most `wait`; `Ok(None)` when the wait ran out. With
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
        self.handle.acquire(lease, Some(wait), Spin).await
    }

    /// Runs `work` under the lock and releases it afterwards; see
    /// [`Lock::with`](crate::Lock::with).
    ///
    /// # Errors
    ///
    /// As [`Lock::with`](crate::Lock::with).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the lock is released in the background.
    pub async fn with<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Lost) -> Fut,
        Fut: Future<Output = T>,
    {
        self.handle.with(Spin, work).await
    }

    /// Deletes the lock whoever holds it (publishing nothing). `Ok(true)` when there was a lock.
    ///
    /// # Errors
    ///
    /// As [`Lock::force_unlock`](crate::Lock::force_unlock).
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
    /// As [`Lock::is_locked`](crate::Lock::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool> {
        self.handle.is_locked().await
    }

    /// Whether this lock's owner holds the lock.
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

/// The spin lock's way of taking turns: none; each waiter retries after its pauses.
struct Spin;

impl TakeTurns for Spin {
    type Turns<'h> = SpinTurns;

    fn turns(&self, hold: &Hold, _wait: Option<Duration>) -> SpinTurns {
        let Kind::Spin(backoff) = &hold.kind else {
            unreachable!("spin turns are made for spin locks only");
        };
        SpinTurns {
            delays: Delays::new(*backoff),
            first: None,
        }
    }
}

/// The turns of one spin acquire: a pause from the backoff before each retry, never past the
/// holder's lease.
struct SpinTurns {
    delays: Delays,
    /// What the first attempt found, for the first pause.
    first: Option<Option<Duration>>,
}

impl Turns for SpinTurns {
    fn ask(&mut self) -> Ask {
        Ask::Now
    }

    async fn start(&mut self, _deadline: Option<Instant>, first: Option<Option<Duration>>) {
        self.first = first;
    }

    async fn wait_turn(
        &mut self,
        busy: Option<Option<Duration>>,
        deadline: Option<Instant>,
    ) -> bool {
        let Some(remaining) = time_left(deadline) else {
            return false;
        };
        let pause = self.delays.next();
        // No message comes after subscribing: the first pause follows the first attempt too.
        let lease_left = busy
            .or(self.first.take())
            .flatten()
            .unwrap_or(Duration::MAX);
        tokio::time::sleep(pause.min(lease_left).min(remaining)).await;
        time_left(deadline).is_some() || deadline.is_none()
    }

    fn acquired(self) {}
}
