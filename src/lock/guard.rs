//! The guard every lock type hands out.
//!
//! A guard stands for one hold. It knows, without a round trip, from when its hold may be gone
//! (the registry in `holds` keeps that moment), and it releases its hold when unlocked or
//! dropped, through `release`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::hash;
use super::kind::{Hold, Lease};
use super::release::{ReleaseAs, ResumeRelease};
use super::replies::Released;
use crate::error::{Error, Result};
use crate::owner::Owner;
use crate::registry::{Leaving, Registration};
use crate::wait::Lost;

/// One hold of a lock of any type ([`Lock`](crate::Lock), [`FairLock`](crate::FairLock),
/// [`SpinLock`](crate::SpinLock), either side of an [`RwLock`](crate::RwLock); a
/// [`FencedLock`](crate::FencedLock)'s wraps one in a [`FencedGuard`](crate::FencedGuard)).
/// Release it with [`unlock`](LockGuard::unlock); dropping it releases it in the background.
///
/// The guard is `'static` and `Send`: it can move into another task, and it remembers its owner,
/// so it can be released from anywhere. Dropped where no tokio runtime runs (a plain thread,
/// after the runtime that ran `main` ended) or while its runtime shuts down, it still releases
/// the hold: on the client's runtime, or else on a thread of its own that the dropping thread
/// waits for, a few command timeouts at most.
#[must_use = "dropping the guard releases the hold at once"]
pub struct LockGuard {
    hold: Hold,
    registration: Registration,
    released: bool,
    /// A fenced lock's token.
    token: Option<u64>,
    /// When it was taken, for its hold time in metrics.
    taken_at: Instant,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &self.hold.keys.name)
            .field("owner", &self.hold.owner)
            .field("lease", &self.hold.lease)
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(hold: Hold, registration: Registration, token: Option<u64>) -> LockGuard {
        hold.kind.taken(&hold);
        let kind = hold.kind.metered();
        hold.shared.meter().held(kind, &hold.keys.name);
        LockGuard {
            hold,
            registration,
            released: false,
            token,
            taken_at: Instant::now(),
        }
    }

    /// A fenced lock's token (see [`FencedGuard`](crate::FencedGuard)); `None` for a hold of
    /// any other type.
    pub fn fencing_token(&self) -> Option<u64> {
        self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.hold.keys.name
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> &Owner {
        &self.hold.owner
    }

    /// The fixed lease of this hold, or `None` when the watchdog renews it.
    pub fn lease(&self) -> Option<Duration> {
        match self.hold.lease {
            Lease::Fixed(lease) => Some(lease),
            Lease::Watchdog => None,
        }
    }

    /// A future that completes as soon as this client knows the hold may be gone, so another
    /// owner may hold the lock:
    ///
    /// - the earliest moment the lease can have run out has passed: the send time of the latest
    ///   acquire or renewal that Redis confirmed, plus its lease. This needs no round trip, so a
    ///   holder whose process was stopped or whose runtime was blocked past its lease learns it
    ///   the moment it runs again;
    /// - the watchdog found the lock deleted, expired or taken over;
    /// - the client shut down (and released its locks).
    ///
    /// For a fixed lease that is its end, unless the same owner holds the lock by a longer
    /// hold too (the lock then lasts as long as that hold needs). A loss is final: it never
    /// completes and then un-completes, even if a late renewal shows the lock was still there.
    /// It completes too once the hold is released.
    ///
    /// What it cannot promise: it is a snapshot. Work that checked it (or `is_lost()`) and then
    /// writes can still be paused between the check and the write, past the lease. Only a write
    /// that the store itself refuses when the lock has changed hands (a
    /// [`FencedLock`](crate::FencedLock)'s token checked by a [`Fence`](crate::Fence), or a
    /// script that checks the holder field) is safe from that.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// # async fn work() {}
    /// let guard = client.lock("job").lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("lease lost: stop writing"),
    ///     _ = work() => {}
    /// }
    /// guard.unlock().await.ok();
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> Lost {
        Lost::from_future(self.registration.standing.clone().lost())
    }

    /// The standing behind [`lost`](Self::lost) and [`is_lost`](Self::is_lost), for a handle
    /// that outlives a borrow of the guard (an election term's context).
    pub(crate) fn standing(&self) -> Arc<crate::registry::Signal> {
        self.registration.standing.clone()
    }

    /// Whether [`lost`](Self::lost) has completed (or would complete at once): true from the
    /// earliest moment the lease can have run out, checked against the clock without a round
    /// trip. The same snapshot caveat applies.
    pub fn is_lost(&self) -> bool {
        self.registration.standing.is_lost()
    }

    /// This owner's hold count on the lock.
    ///
    /// # Errors
    ///
    /// As [`Lock::hold_count`](crate::Lock::hold_count).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn hold_count(&self) -> Result<u64> {
        self.hold.shared.check_open()?;
        let shared = &self.hold.shared;
        let hold = &self.hold;
        let state = hash::inspect(&shared.redis, &hold.keys, &hold.field, hold.kind.view());
        let state = state.await?;
        Ok(state.holds)
    }

    /// Releases this hold. When it was the owner's last, the lock is deleted and its waiters are
    /// told as its type tells them: a [`Lock`](crate::Lock) (or fenced lock) wakes one waiter per
    /// process, a [`FairLock`](crate::FairLock) the first waiter in its queue, a
    /// [`SpinLock`](crate::SpinLock) nobody (its waiters retry), an [`RwLock`](crate::RwLock)
    /// every waiter (a reader's release only once the last reader has left; a writer's also when
    /// it keeps read holds, a downgrade). Renewal of the hold stops before the release is sent. When holds
    /// of the owner remain, the lock's TTL becomes what they need (see the lease rule in the crate
    /// docs).
    ///
    /// # Errors
    ///
    /// When the hold is gone, the answer says whether this guard knew it when its release was
    /// answered: [`Error::LeaseLost`](crate::Error::LeaseLost) once [`lost`](Self::lost) has
    /// completed (or [`is_lost`](Self::is_lost) is true): the lease may have run out, or the
    /// watchdog found the lock gone (deleted, force-unlocked, wiped by a restart) at its last
    /// renewal; [`Error::NotHeld`](crate::Error::NotHeld) before that (say, force-unlocked since
    /// the last renewal, which comes every third of the watchdog timeout). Both mean the hold
    /// was taken away while the guard lived, and nothing was released. Otherwise,
    /// [`Error::Closed`](crate::Error::Closed) after the client shut down (which released it), and
    /// as [`Lock::lock`](crate::Lock::lock). A release that Redis may or may not have applied is
    /// retried with the same request id, so it counts once. The owner's own acquires of this lock
    /// wait until the release has its reply.
    ///
    /// A *last* release of a `Lock`, `FencedLock` or `SpinLock` whose hold cannot lapse before its last retry (a
    /// watchdog lease, renewed until the release, or a fixed lease with over six command timeouts
    /// left) leaves no replay key, to spare the server a write and a delete (see
    /// `lua/lock/release.lua`): its retry that finds the hold gone reports success, as its first send
    /// freed the lock. If the lock was force-unlocked in the same moment as that reply was lost,
    /// the force-unlock goes unreported. A `FairLock`'s or `RwLock`'s release always leaves one,
    /// as it moves more than the hash (the queue, the readers' timeout keys).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the release runs to its end in the background.
    pub async fn unlock(mut self) -> Result<()> {
        let (was_lost, lapses_after) = self.leave()?;
        let shared = &self.hold.shared;
        let replay = self.hold.keys.replay_key(&shared.id);
        // Dropped mid-flight, the release is finished in the background under the same
        // request id, so it still counts exactly once; it stays counted in flight till then.
        let mut resume = ResumeRelease {
            pending: Some((&self.hold, self.hold.releasing_until(lapses_after))),
            replay: &replay,
            lapses_after,
        };
        let span = tracing::debug_span!("relock.release", lock = %self.hold.keys.name, holder = %self.hold.field);
        let (_, releasing) = resume.pending.as_ref().expect("set above");
        let how = ReleaseAs {
            redis: None,
            replay: &replay,
            sent_before: false,
            lapses_after: Some(lapses_after),
        };
        let outcome = self.hold.release_as(how, releasing).instrument(span).await;
        resume.pending = None;
        self.verdict(outcome, was_lost)
    }

    /// The start of an unlock: marks the guard released and stops renewal. Whether the guard
    /// knew its hold may be lost, and the earliest the hold can lapse; or the unlock's error when
    /// no release is to be sent (the client closed, or the hold was lost and the owner holds the
    /// lock again).
    pub(super) fn leave(&mut self) -> Result<(bool, Instant)> {
        self.released = true;
        let was_lost = self.is_lost();
        let leaving = self.stop_renewal();
        self.hold.shared.check_open()?;
        match leaving {
            Leaving::Release { lapses_after } => Ok((was_lost, lapses_after)),
            Leaving::Lost => Err(self.lease_lost()),
        }
    }

    /// What an unlock reports for its release's `outcome` (`was_lost`: as [`leave`](Self::leave)
    /// found it).
    pub(super) fn verdict(&self, outcome: Result<Released>, was_lost: bool) -> Result<()> {
        match outcome? {
            Released::StillHeld | Released::Freed { .. } => Ok(()),
            Released::NotHeld if was_lost || self.is_lost() => Err(self.lease_lost()),
            Released::NotHeld => Err(Error::NotHeld {
                lock: self.hold.keys.name.to_string(),
                owner: self.hold.field.to_string(),
            }),
        }
    }

    fn lease_lost(&self) -> Error {
        Error::LeaseLost {
            lock: self.hold.keys.name.to_string(),
            owner: self.hold.field.to_string(),
        }
    }

    /// The hold this guard stands for.
    pub(super) fn hold(&self) -> &Hold {
        &self.hold
    }

    /// Stops renewal of this hold; called before its release is sent.
    fn stop_renewal(&self) -> Leaving {
        let hold = &self.hold;
        let kind = hold.kind.metered();
        hold.shared
            .meter()
            .let_go(kind, &hold.keys.name, self.taken_at);
        hold.shared
            .registry
            .unregister(&hold.hold_key(), &self.registration)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        let leaving = self.stop_renewal();
        let Leaving::Release { lapses_after } = leaving else {
            return; // a release would strike the owner's newer hold
        };
        if self.hold.shared.check_open().is_err() {
            return;
        }
        // Counted in flight now, so the owner's next acquire, even right after the drop,
        // waits for it.
        let releasing = Arc::new(self.hold.releasing_until(lapses_after));
        let replay = self.hold.keys.replay_key(&self.hold.shared.id);
        self.hold.resume(replay, false, lapses_after, releasing);
    }
}
