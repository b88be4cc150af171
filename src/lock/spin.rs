//! The spin lock, Redisson's `RSpinLock` in async Rust: the plain lock's data on Redis, with
//! waiters that retry after growing, jittered pauses instead of listening for a release.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::api::lock_api;
use super::handle::Handle;
use super::hold::Hold;
use super::kind::{Ask, Kind};
use super::wait::{time_left, TakeTurns, Turns};
use crate::backoff::{Backoff, Delays};
use crate::shared::Shared;

/// A reentrant distributed lock whose waiters poll with exponential backoff instead of pub/sub,
/// as Redisson's `RSpinLock`: for deployments where pub/sub is unavailable or too costly (very
/// many short-lived locks, or a cluster where each subscription costs every node).
///
/// It has the [`Lock`](crate::Lock)'s data on Redis, API and guarantees (reentrant per owner,
/// watchdog or fixed leases, [`LockGuard::lost`](crate::LockGuard::lost), cancel safety), and
/// excludes a `Lock` or a Redisson `RLock` of the same name. What differs:
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
#[derive(Clone)]
pub struct SpinLock {
    pub(super) handle: Handle,
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
}

lock_api!(SpinLock, Spin, "spin_lock");

/// The spin lock's way of taking turns: none; each waiter retries after its pauses.
pub(super) struct Spin;

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
pub(super) struct SpinTurns {
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
