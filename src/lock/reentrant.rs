//! The reentrant lock, Redisson's `RLock` in async Rust.
//!
//! The lock is a Redis hash named after the lock, with one field per holder
//! (`<client-uuid>:<owner>` → hold count) and a lease as its TTL. Taking it again as the same
//! owner counts one more hold; the last release deletes it and publishes `0` on its channel, which
//! wakes one waiter in every process waiting for it. The data, channel and messages are
//! Redisson's, so a Java service using Redisson and a Rust service using relock exclude each other
//! on the same name and wake each other's waiters.

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;

use super::api::{delay_api, lock_api};
use super::handle::Handle;
use super::hash;
use super::kind::Hold;
use super::kind::Turns;
use super::kind::{AcquireCall, Kind, LockType, ReleaseCall};
use super::replies::{Answer, Delay, Reentry, Released};
use super::turns::PlainTurns;
use crate::error::{Call, Result};
use crate::names::LockKeys;
use crate::primitive::Primitive;
use crate::shared::Shared;

/// A reentrant distributed lock: a cheap handle (a name, a client and an optional explicit
/// owner) that does no I/O until used.
///
/// Holds are counted per owner: by default the current tokio task (see [`Owner`](crate::Owner)), so
/// a task that calls `lock()` while it already holds the lock re-enters at once, and the lock is
/// free only when its last hold is released. Locks taken without a lease are kept alive by the
/// client's watchdog for as long as their guard lives, and expire one watchdog timeout after their
/// holder dies. Waiting is done on pub/sub messages, bounded by the holder's lease.
///
/// `join!` branches run in one task and so share an owner: they re-enter each other's holds rather
/// than exclude each other. Give each branch its own [`Owner::new`](crate::Owner::new) through
/// [`Lock::owned_by`] when they must exclude each other.
///
/// A holder that dies frees the lock when its lease runs out; with
/// [`with_lock_delay`](Lock::with_lock_delay) the lock then stays unavailable a little longer
/// (Chubby's lock-delay), while a clean release still hands it off at once.
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
/// leave no replay key behind (see [`LockGuard::unlock`](crate::LockGuard::unlock)).
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
///
#[doc = include_str!("../../docs/lock-delay.md")]
#[derive(Clone)]
pub struct Lock {
    pub(super) handle: Handle,
}

impl Lock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> Lock {
        Lock {
            handle: Handle::new(shared, name, Kind::of(Reentrant::PLAIN)),
        }
    }

    /// The client this handle belongs to.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.handle.shared()
    }
}

lock_api!(Lock, "lock");
delay_api!(Lock, "lock");

impl Lock {
    /// The same lock with a lock-delay of `ms` (0: none).
    fn set_lock_delay(mut self, ms: u64) -> Lock {
        let delay = (ms > 0).then(|| Delay::new(self.handle.name(), ms));
        self.handle.set_kind(Kind::of(Reentrant {
            delay,
            ..Reentrant::PLAIN
        }));
        self
    }

    /// A waiter woken by this lock's releases (see [`Handle::waiter`]); for a RedLock, which
    /// waits on its masters' locks between rounds.
    pub(crate) async fn waiter(
        &self,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<crate::pubsub::Waiter> {
        self.handle.waiter(deadline).await
    }

    /// The lease of a hold taken without one: its client's watchdog timeout.
    pub(crate) fn watchdog_timeout(&self) -> Duration {
        self.handle.shared().watchdog_timeout
    }
}

/// The plain lock's type: Redisson's lock hash and channel, woken one waiter per process, with
/// claims and hand-off graces (see `turns`). Its last release skips the replay key when no retry
/// can need it (see `inflight`), and holds of one owner and client may go together (`batch`),
/// unless it has a lock-delay: its scripts then keep the shadow lease too (see
/// `lua/common/delay.lua`), and it renews with the holds that have one. A type that refuses
/// its owner's re-entry (a non-reentrant lock) is this one with [`Reentry::Refused`] and a
/// primitive of its own, and takes its holds one by one.
pub(crate) struct Reentrant {
    pub(crate) delay: Option<Delay>,
    pub(crate) reentry: Reentry,
    pub(crate) primitive: Primitive,
}

impl Reentrant {
    /// The plain lock without a lock-delay (a spin lock's and a fenced lock's releases too).
    pub(crate) const PLAIN: Reentrant = Reentrant {
        delay: None,
        reentry: Reentry::Counted,
        primitive: Primitive::Lock,
    };
}

impl LockType for Reentrant {
    fn primitive(&self) -> Primitive {
        self.primitive
    }

    fn batches(&self) -> bool {
        self.delay.is_none() && self.reentry == Reentry::Counted
    }

    fn lock_delay(&self) -> Option<&Delay> {
        self.delay.as_ref()
    }

    fn turns<'h>(&self, hold: &'h Hold, wait: Option<Duration>) -> Box<dyn Turns + 'h> {
        Box::new(PlainTurns::new(hold, wait))
    }

    fn acquire<'a>(&'a self, call: AcquireCall<'a>) -> Call<'a, Answer> {
        Box::pin(hash::acquire(call, None, self.delay.as_ref(), self.reentry))
    }

    fn release<'a>(&'a self, call: ReleaseCall<'a>) -> Call<'a, Released> {
        Box::pin(hash::release(call, self.delay.as_ref()))
    }

    fn force_release<'a>(&'a self, shared: &'a Shared, keys: &'a LockKeys) -> Call<'a, bool> {
        let (publish, window) = (self.publish(shared), shared.claim_window_ms);
        Box::pin(hash::force_release(&shared.redis, keys, publish, window))
    }

    fn hands_off_with_grace(&self) -> bool {
        true
    }
}

/// The plain lock's acquire (a fenced lock's with its `token` counter): the hold, or else a
/// claim on its next hand-off when `ask` says so.
pub(super) fn plain_acquire<'a>(call: AcquireCall<'a>, token: Option<&'a Str>) -> Call<'a, Answer> {
    Box::pin(hash::acquire(call, token, None, Reentry::Counted))
}
