//! The non-reentrant locks, Redisson's `getNonReentrantLock` and `getNonReentrantFairLock`: the
//! [`Lock`](crate::Lock)'s and the [`FairLock`](crate::FairLock)'s data, scripts and waiting, but
//! an owner that holds the lock and asks for it again is refused at once
//! ([`Error::Reentry`](crate::Error::Reentry)) instead of counting a second hold.
//!
//! Redisson's non-reentrant acquire is its reentrant one with the re-entry branch answering
//! `NON_REENTRANT_REACQUIRE`; everything else (release, renewal, force release, the fair queue) is
//! the reentrant lock's. relock's is the same: the family's acquire scripts with their "refuse"
//! argument (`lua/lock/acquire.lua`, `lua/fair/acquire.lua`), and the types `Reentrant` and `Fair`
//! with `Reentry::Refused`.

use std::sync::Arc;

use crate::lock::{lock_api, Fair, Handle, Kind, Reentrant, Reentry};
use crate::primitive::Primitive;
use crate::shared::Shared;

/// A distributed lock that its owner cannot take twice, wire-compatible with Redisson's
/// non-reentrant lock (`RedissonClient::getNonReentrantLock`): a cheap handle that does no I/O
/// until used.
///
/// It is a [`Lock`](crate::Lock) in all but one rule: an owner that holds it and asks again
/// (`lock`, `try_lock`, any wait) gets [`Error::Reentry`](crate::Error::Reentry) at once, without
/// waiting, and keeps the one hold it has. A reentrant lock would count a second hold there; code
/// that must never nest, or that wants to find the self-deadlocks reentrancy hides, takes this one
/// instead. Holds of other owners, leases, the watchdog, waiting, hand-offs and releases are the
/// `Lock`'s. So is the owner: by default the current task (see [`Owner`](crate::Owner)), so a
/// task that locks it twice is refused, and two tasks exclude each other.
///
/// The data are the `Lock`'s and Redisson's (the hash `<name>`, one field per holder, a hold
/// count of 1), so a `NonReentrantLock`, a `Lock` and Redisson's `RLock` or non-reentrant lock on
/// one name exclude each other, and an owner that holds the name by a `Lock` is refused here too.
/// In a [`MultiLock`](crate::MultiLock), a part the owner holds already makes the whole acquire
/// fail with the same error.
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// let lock = client.non_reentrant_lock("order:42");
/// let guard = lock.lock().await?;
/// let again = lock.lock().await; // the same task: refused, not counted
/// assert!(again.is_err_and(|e| e.is_reentry()));
/// assert_eq!(lock.hold_count().await?, 1);
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct NonReentrantLock {
    pub(crate) handle: Handle,
}

impl NonReentrantLock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> NonReentrantLock {
        let kind = Reentrant {
            reentry: Reentry::Refused,
            primitive: Primitive::NonReentrantLock,
            ..Reentrant::PLAIN
        };
        NonReentrantLock {
            handle: Handle::new(shared, name, Kind::of(kind)),
        }
    }
}

lock_api!(NonReentrantLock, "non_reentrant_lock");

/// A fair (first come, first served) lock that its owner cannot take twice, wire-compatible with
/// Redisson's non-reentrant fair lock (`RedissonClient::getNonReentrantFairLock`).
///
/// It is a [`FairLock`](crate::FairLock) (its queue, its order, its dead waiters, Redisson's
/// deadlines) in all but one rule: an owner that holds it and asks again gets
/// [`Error::Reentry`](crate::Error::Reentry) at once, is never queued, and keeps the one hold it
/// has, as for a [`NonReentrantLock`].
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// let lock = client.non_reentrant_fair_lock("payouts");
/// let guard = lock.lock().await?; // after every waiter that came before
/// assert!(lock.try_lock().await.is_err_and(|e| e.is_reentry()));
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct NonReentrantFairLock {
    pub(crate) handle: Handle,
}

impl NonReentrantFairLock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> NonReentrantFairLock {
        let kind = Fair::new(&name, Reentry::Refused, Primitive::NonReentrantFairLock);
        NonReentrantFairLock {
            handle: Handle::new(shared, name, Kind::of(kind)),
        }
    }
}

lock_api!(NonReentrantFairLock, "non_reentrant_fair_lock");
