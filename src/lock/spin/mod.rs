//! The spin lock, Redisson's `RSpinLock` in async Rust: the plain lock's data on Redis, with
//! waiters that retry after growing, jittered pauses instead of listening for a release.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::api::lock_api;
use super::handle::Handle;
use super::kind::Hold;
use super::kind::Turns;
use super::kind::{AcquireCall, Ask, Kind, LockType, ReleaseCall};
use super::reentrant::{plain_acquire, Reentrant};
use super::replies::{Answer, Released};
use crate::error::Call;
use crate::names::LockKeys;
use crate::scripts::NO_PUBLISH;
use crate::shared::Shared;
use crate::wait::{time_left, Retry};

mod backoff;
pub use backoff::Backoff;
pub(crate) use backoff::Delays;

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
            handle: Handle::new(
                shared,
                name,
                Kind::of(Spin {
                    backoff: Backoff::default(),
                }),
            ),
        }
    }

    /// The same lock, with waiters that pause after `backoff`.
    pub fn with_backoff(mut self, backoff: Backoff) -> SpinLock {
        self.handle.set_kind(Kind::of(Spin { backoff }));
        self
    }
}

lock_api!(SpinLock, "spin_lock");

/// The spin lock's type: the plain lock's data and scripts, with waiters that retry after the
/// pauses of its backoff and releases that publish nothing.
pub(super) struct Spin {
    backoff: Backoff,
}

impl LockType for Spin {
    fn primitive(&self) -> crate::primitive::Primitive {
        crate::primitive::Primitive::SpinLock
    }

    fn turns<'h>(&self, _hold: &'h Hold, _wait: Option<Duration>) -> Box<dyn Turns + 'h> {
        Box::new(SpinTurns {
            delays: Delays::new(self.backoff),
            first: None,
        })
    }

    fn acquire<'a>(&'a self, call: AcquireCall<'a>) -> Call<'a, Answer> {
        plain_acquire(call, None)
    }

    fn release<'a>(&'a self, call: ReleaseCall<'a>) -> Call<'a, Released> {
        Reentrant::PLAIN.release(call)
    }

    fn force_release<'a>(&'a self, shared: &'a Shared, keys: &'a LockKeys) -> Call<'a, bool> {
        let (publish, window) = (self.publish(shared), shared.claim_window_ms);
        Box::pin(super::hash::force_release(
            &shared.redis,
            keys,
            publish,
            window,
        ))
    }

    /// Nobody listens for a spin lock's release.
    fn publish(&self, _shared: &Shared) -> &'static str {
        NO_PUBLISH
    }
}

/// The turns of one spin acquire: a pause from the backoff before each retry, never past the
/// holder's lease.
pub(super) struct SpinTurns {
    delays: Delays,
    /// What the first attempt found, for the first pause.
    first: Option<Retry>,
}

impl Turns for SpinTurns {
    fn ask(&mut self) -> Ask {
        Ask::Now
    }

    fn start(&mut self, _deadline: Option<Instant>, first: Option<Retry>) -> BoxFuture<'_, ()> {
        self.first = first;
        Box::pin(std::future::ready(()))
    }

    fn wait_turn(&mut self, busy: Option<Retry>, deadline: Option<Instant>) -> BoxFuture<'_, bool> {
        Box::pin(async move {
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
        })
    }

    fn acquired(self: Box<Self>) {}
}
