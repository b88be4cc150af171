//! The guard of a RedLock held on a quorum of masters.

use std::time::Duration;

use futures::future::join_all;
use futures::StreamExt;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::lock::LockGuard;
use crate::owner::Owner;
use crate::wait::Lost;

/// A RedLock held on a quorum of masters: the [`LockGuard`]s of the votes it won. Release it
/// with [`unlock`](Self::unlock); dropping it releases every part in the background.
#[must_use = "dropping the guard releases the lock at once"]
pub struct RedLockGuard {
    pub(super) name: String,
    pub(super) owner: Owner,
    pub(super) parts: Vec<LockGuard>,
    pub(super) quorum: usize,
    pub(super) lease: Option<Duration>,
    pub(super) validity: Duration,
    pub(super) valid_until: Option<Instant>,
}

impl std::fmt::Debug for RedLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLockGuard")
            .field("lock", &self.name)
            .field("owner", &self.owner)
            .field("held_on", &self.parts.len())
            .field("lease", &self.lease)
            .finish()
    }
}

impl RedLockGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// How many masters granted the lock (at least the quorum).
    pub fn held_on(&self) -> usize {
        self.parts.len()
    }

    /// The fixed lease of every part, or `None` when the watchdogs renew them.
    pub fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// The validity the acquire found: the lease, less the time the winning round took and the
    /// drift allowance. With a fixed lease the guard is lost when it ends (counted from the
    /// round's start); with the watchdog it is what the first renewal had to beat.
    pub fn validity(&self) -> Duration {
        self.validity
    }

    /// The parts that may be lost may leave fewer than a quorum.
    fn losses_allowed(&self) -> usize {
        self.parts.len() - self.quorum
    }

    /// A future that completes as soon as this client knows that fewer than a quorum of its
    /// parts may still be held (each part's own [`LockGuard::lost`]: its lease ran out, its
    /// watchdog found it gone or could not renew it for a lease), or, with a fixed lease, when
    /// the validity ends. Final once complete. The same snapshot caveat as
    /// [`LockGuard::lost`] applies; a master that restarted empty is noticed only by its
    /// watchdog's next renewal (never with a fixed lease).
    pub fn lost(&self) -> Lost {
        let mut pending: futures::stream::FuturesUnordered<Lost> =
            self.parts.iter().map(LockGuard::lost).collect();
        let allowed = self.losses_allowed();
        let valid_until = self.valid_until;
        Lost::from_future(async move {
            let losses = async {
                let mut lost = 0;
                while pending.next().await.is_some() {
                    lost += 1;
                    if lost > allowed {
                        return;
                    }
                }
            };
            match valid_until {
                Some(until) => tokio::select! {
                    _ = losses => {}
                    _ = tokio::time::sleep_until(until) => {}
                },
                None => losses.await,
            }
        })
    }

    /// Whether [`lost`](Self::lost) has completed (or would at once), checked without a round
    /// trip.
    pub fn is_lost(&self) -> bool {
        let lost = self.parts.iter().filter(|p| p.is_lost()).count();
        lost > self.losses_allowed() || self.valid_until.is_some_and(|u| Instant::now() >= u)
    }

    /// Releases every part, on every master at once, and waits for their replies.
    ///
    /// A part that is gone already (expired, or its master restarted) or whose master cannot be
    /// reached is logged (`tracing`, at debug and warn level) and is not an error of the whole:
    /// an unreachable master's part expires with its lease.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] (its `owner` is the owner's id) when the guard had lost its quorum
    /// (see [`lost`](Self::lost)), or when the releases found fewer than a quorum of parts still
    /// held: another owner may have held the lock meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: each part's release runs to its end in the background.
    pub async fn unlock(self) -> Result<()> {
        let was_lost = self.is_lost();
        let held = self.parts.len();
        let released = join_all(self.parts.into_iter().map(LockGuard::unlock)).await;
        let mut gone = 0;
        for outcome in released {
            match outcome {
                Ok(()) => {}
                Err(error) if error.is_lease_lost() || error.is_not_held() => {
                    gone += 1;
                    tracing::debug!(lock = %self.name, %error, "a RedLock part was gone before its release");
                }
                Err(error) => {
                    tracing::warn!(lock = %self.name, %error, "could not release a RedLock part; it expires with its lease");
                }
            }
        }
        if was_lost || held - gone < self.quorum {
            return Err(Error::LeaseLost {
                lock: self.name,
                owner: self.owner.id().to_owned(),
            });
        }
        Ok(())
    }
}
