//! What sets the lock types apart on the wire: which scripts take, release and force-release a
//! hold, and whether a release publishes a wake-up and leaves a hand-off grace.
//!
//! Every type keeps its holds in the same Redisson hash (`<name>`: holder field → count), so
//! inspection, renewal and the shutdown release are shared; how waiters are ordered and woken is
//! the job of each type's turns (`turns`, `fair`, `spin`).

use std::sync::Arc;

use fred::bytes_utils::Str;

use crate::backoff::Backoff;
use crate::connection::Connection;
use crate::error::Result;
use crate::names::{FairKeys, LockKeys};
use crate::scripts::{self, Claim, ReleaseHow, Released, NO_PUBLISH};
use crate::shared::Shared;

/// Who asks: the lock's keys and the holder field.
pub(crate) struct Holder<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) field: &'a Str,
}

/// A lock type, as the shared core sees it.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// [`Lock`](crate::Lock): waiters woken one per process by a message on the lock's channel.
    Reentrant,
    /// [`FairLock`](crate::FairLock): a queue on Redis; a release wakes its first waiter alone.
    Fair(Arc<FairKeys>),
    /// [`SpinLock`](crate::SpinLock): no messages; waiters retry after growing pauses.
    Spin(Backoff),
}

/// What one acquire attempt asks the script for, beyond the hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// The hold if free, and nothing else.
    Now,
    /// The plain lock: the hold, or else a claim on its next hand-off with this priority.
    Claim(u32),
    /// The fair lock: the hold if it is this waiter's turn, or else a place in the queue (a
    /// new one at its tail, or the one it has, renewed).
    Queue,
}

impl Kind {
    /// Runs the type's acquire script: `Ok(None)` when the hold was taken, else how long to wait
    /// at most before the next attempt, in ms (-1: no bound known).
    pub(crate) async fn acquire(
        &self,
        shared: &Shared,
        redis: &Connection,
        hold: Holder<'_>,
        lease_ms: u64,
        ask: Ask,
    ) -> Result<Option<i64>> {
        match self {
            Kind::Reentrant | Kind::Spin(_) => {
                let claim = match ask {
                    Ask::Claim(priority) => Claim::For { priority },
                    Ask::Now | Ask::Queue => Claim::No,
                };
                let window = shared.claim_window_ms;
                scripts::acquire(redis, hold.keys, lease_ms, hold.field, claim, window).await
            }
            Kind::Fair(fair) => {
                let queue = ask == Ask::Queue;
                let waiter = shared.fair_waiter_ms;
                scripts::fair::acquire(redis, hold.keys, fair, lease_ms, hold.field, waiter, queue)
                    .await
            }
        }
    }

    /// Runs the type's release script for one hold; `keep_ms` is the TTL the owner's remaining
    /// holds need.
    pub(crate) async fn release(
        &self,
        hold: Holder<'_>,
        redis: &Connection,
        keep_ms: u64,
        how: ReleaseHow<'_>,
    ) -> Result<Released> {
        match self {
            Kind::Reentrant | Kind::Spin(_) => {
                scripts::release(redis, hold.keys, hold.field, keep_ms, how).await
            }
            Kind::Fair(fair) => {
                scripts::fair::release(redis, hold.keys, fair, hold.field, keep_ms, how).await
            }
        }
    }

    /// Deletes the lock whoever holds it and wakes whom the type wakes; `true` when there was
    /// one.
    pub(crate) async fn force_release(&self, shared: &Shared, keys: &LockKeys) -> Result<bool> {
        let publish = self.publish(shared);
        match self {
            Kind::Reentrant | Kind::Spin(_) => {
                scripts::force_release(&shared.redis, keys, publish, shared.claim_window_ms).await
            }
            Kind::Fair(fair) => {
                scripts::fair::force_release(&shared.redis, keys, fair, publish).await
            }
        }
    }

    /// The publish command of the type's releases.
    pub(crate) fn publish(&self, shared: &Shared) -> &'static str {
        match self {
            Kind::Spin(_) => NO_PUBLISH,
            Kind::Reentrant | Kind::Fair(_) => shared.publish,
        }
    }

    /// Whether this client's release of the lock leaves other processes' waiters a hand-off
    /// grace (the plain lock's turn-taking; see `turns`).
    pub(crate) fn hands_off_with_grace(&self) -> bool {
        matches!(self, Kind::Reentrant)
    }

    /// Whether every release writes a replay key. The plain and spin locks skip it on a last
    /// release when no retry can need it (see `inflight`); the fair lock's release also moves
    /// its queue, so it always keeps one, as Redisson does.
    pub(crate) fn always_replays(&self) -> bool {
        matches!(self, Kind::Fair(_))
    }
}
