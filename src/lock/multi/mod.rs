//! Several locks as one: [`MultiLock`], all or nothing over any mix of the family, on one client
//! or several.
//!
//! An acquire takes the parts in one global order (by name, then server), whatever order they
//! were listed in, and waits on a busy part while it holds the parts before it. Two multi-locks
//! over overlapping sets therefore wait for each other only one way round, and cannot deadlock.
//! Every step is first tried at once; the acquire waits in order from the first step that was
//! busy. Neighbouring plain [`Lock`] parts that share a client and a cluster slot form one step,
//! tried by one script in one round trip (see `batch`); when that finds one busy, they are taken
//! one by one in order, each waiting as its type waits. Every part is a hold like any other: renewed by its
//! client's watchdog, released through `release`, given back in the background when an acquire
//! is dropped.

use std::time::Duration;

use futures::future::{join_all, select_all};
use tokio::time::Instant;

use super::api::combined_api;
use super::guard::LockGuard;
use super::handle::Handle;
use crate::error::Result;
use crate::owner::Owner;
use crate::wait::{time_left, Lost};

mod batch;
mod scripts;
mod steps;

use steps::{give_back, plan, take, take_at_once, Held};

/// One lock of a [`MultiLock`]: any lock of the family, made with `From` (or `.into()`).
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// use relock::{MultiLock, Part};
/// let accounts = client.rw_lock("accounts");
/// let transfer = MultiLock::new([
///     Part::from(client.lock("account:1")),
///     client.fair_lock("account:2").into(),
///     accounts.read().into(),
/// ]);
/// let guard = transfer.lock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Part(Handle);

impl std::fmt::Debug for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.debug_as("Part", f)
    }
}

macro_rules! part_from {
    ($($Type:ty),*) => {$(
        impl From<$Type> for Part {
            fn from(lock: $Type) -> Part {
                Part(lock.handle)
            }
        }

        impl From<&$Type> for Part {
            fn from(lock: &$Type) -> Part {
                Part(lock.handle.clone())
            }
        }
    )*};
}

/// A part of every lock type the primitives' table lists as a `handle` or a `side`.
macro_rules! parts {
    (
        primitives {
            $($(#[$doc:meta])* $Variant:ident = $tag:literal, $shape:ident $(($($how:tt)*))?,)*
        }
        kinds { $($kinds:tt)* }
    ) => {
        $(part!($Variant $shape);)*
    };
}

/// [`parts`], for one row.
macro_rules! part {
    ($Variant:ident handle) => {
        part_from!(crate::$Variant);
    };
    ($Variant:ident side) => {
        part_from!(crate::$Variant);
    };
    ($Variant:ident other) => {};
}

crate::primitive::with_primitives!(parts);

/// Several locks taken as one, all or nothing (Redisson's `RMultiLock`): any mix of lock types
/// (each a [`Part`]: a [`Lock`](crate::Lock), a [`FairLock`](crate::FairLock), either side of an
/// [`RwLock`](crate::RwLock), …), from one client or from several (several servers).
///
/// - **All or nothing.** An acquire returns a [`MultiGuard`] holding every part, or holds
///   nothing: when a part stays busy past the wait, when a part fails, and when the call is
///   dropped at any point, the parts already taken are released (in the background, for a
///   dropped call).
/// - **No deadlock.** The parts are taken in one order, whatever order they were listed in:
///   by name, and one name on several servers by the address its client was given. An acquire
///   waits on a busy part while it holds the parts before it in that order, so two multi-locks
///   over overlapping sets cannot wait for each other in a cycle, in one process or many. (Only
///   a name that two processes both lock on the same two servers, reached under different
///   addresses, could be ordered differently by them.)
/// - **One round trip** when nothing is busy: every part is tried at once, in parallel across
///   clients, and the plain [`Lock`](crate::Lock)s that share a client and a cluster slot (every plain part,
///   on one server) by one script, released by one script too. From the first part found busy
///   on, the parts are taken one by one in order, each waiting as its type waits (a `Lock` by
///   pub/sub and claims, a fair part in its queue, a read part for the writer, a spin part
///   backing off); the parts tried at once past it are given back first.
/// - **Reentrant per owner**, as its parts are: the owner (the current task, or
///   [`owned_by`](MultiLock::owned_by)) that holds the multi-lock takes it again at once.
/// - **Duplicates are merged.** A lock listed twice (the same client, type and name) is one
///   part. The same name twice with different types (a read and a write side, a `Lock` and a
///   `FairLock`), or twice through two clients of the same server (the same address, or the
///   same `run_id` under two addresses), is an [`Error::InvalidArgument`](crate::Error::InvalidArgument): such parts would
///   wait for each other. Parts listed with different [`owned_by`](MultiLock::owned_by)
///   owners are still one lock: the first listed owner's.
/// - **Leases.** Without a lease, every part is renewed by its client's watchdog. With a fixed
///   lease, each part's lease starts when that part is taken; should an early part's lease run
///   out while a later part is waited for, everything is released and the acquire starts over
///   (within its wait), so a guard is never lost on arrival. A lease shorter than the parts
///   take to gather starts over again and again: give such an acquire a wait
///   ([`try_lock_for`](MultiLock::try_lock_for)).
///
/// The guard's [`lost`](MultiGuard::lost) completes when any part's does.
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// // Listed in any order: taken in one order, so no deadlock with another transfer.
/// let transfer = client.multi_lock(["account:7", "account:3"]);
/// let guard = transfer.lock().await?;
/// // ... move money between both accounts ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct MultiLock {
    parts: Vec<Handle>,
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.parts.iter().map(|part| Part(part.clone())))
            .finish()
    }
}

combined_api!(
    MultiLock,
    MultiGuard,
    lock: [
        " Takes every part, waiting as long as it takes. The watchdogs renew them until the guard",
        " is released or dropped.",
        "",
        " # Errors",
        "",
        " [`Error::InvalidArgument`](crate::Error::InvalidArgument) for no parts, a bad name or conflicting duplicates, and any",
        " error of a part's acquire ([`Lock::lock`](crate::Lock::lock)); the parts taken before it are released.",
        "",
        " # Cancel safety",
        "",
        " Cancel safe: a dropped call leaves no hold behind; parts already taken are released in",
        " the background.",
    ],
    lock_with_lease: [
        " Takes every part with a fixed lease each, waiting as long as it takes.",
    ],
    try_lock: [
        " Takes every part if this owner can have them all now, one attempt each; `Ok(None)`",
        " (holding nothing) when any is busy.",
    ],
    try_lock_for: [
        " Takes every part, waiting at most `wait` in all; `Ok(None)` (holding nothing) when the",
        " wait ran out. With `lease: None` the watchdogs renew the parts, else each lasts `lease`.",
    ],
    with: [
        " Runs `work` holding every part and releases them afterwards, whatever `work` returned.",
        " `work` gets the guard's [`Lost`](crate::Lost) signal.",
        "",
        " # Errors",
        "",
        " As [`lock`](Self::lock), and any error of the release after `work`.",
        "",
        " # Cancel safety",
        "",
        " Cancel safe: the parts are released in the background.",
    ],
);

impl MultiLock {
    /// A multi-lock over `parts`. No I/O until used; bad parts (none, a bad name, conflicting
    /// duplicates) are reported by the first acquire.
    pub fn new<P: Into<Part>>(parts: impl IntoIterator<Item = P>) -> MultiLock {
        MultiLock {
            parts: parts.into_iter().map(|part| part.into().0).collect(),
        }
    }

    /// The names of the parts, as listed.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().map(Handle::name)
    }

    /// The same multi-lock, every part held and released on behalf of `owner`.
    pub fn owned_by(self, owner: Owner) -> MultiLock {
        MultiLock {
            parts: self
                .parts
                .into_iter()
                .map(|part| part.owned_by(owner.clone()))
                .collect(),
        }
    }

    /// [`acquire_parts`](Self::acquire_parts), counted by the first part's client (under the
    /// first part's name).
    async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<MultiGuard>> {
        let Some(first) = self.parts.first() else {
            return self.acquire_parts(lease, wait).await;
        };
        let meter = first.shared().meter();
        let acquiring = meter.acquiring(crate::primitive::Primitive::MultiLock, first.name());
        let outcome = self.acquire_parts(lease, wait).await;
        acquiring.end(crate::meter::Acquired::of(&outcome));
        outcome
    }

    async fn acquire_parts(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<MultiGuard>> {
        let steps = plan(&self.parts)?;
        let deadline = wait.and_then(|wait| Instant::now().checked_add(wait));
        loop {
            // Dropped (the call cancelled), the guards release their parts in the background.
            let (mut taken, next) = match take_at_once(&steps, lease).await {
                Ok(at_once) => at_once,
                Err(error) => return Err(error),
            };
            if wait == Some(Duration::ZERO) && next > 0 && next < steps.len() {
                give_back(taken).await; // a one-shot acquire had its attempt at every part
                return Ok(None);
            }
            for step in &steps[next..] {
                // A one-shot acquire gives each part one attempt; a bounded one what is left.
                let part_wait = wait.map(|_| time_left(deadline).unwrap_or(Duration::ZERO));
                match take(step, lease, part_wait).await {
                    Ok(step_taken) if step_taken.complete => taken.add(step_taken),
                    Ok(step_taken) => {
                        give_back(taken.parts.into_iter().chain(step_taken.guards)).await;
                        return Ok(None);
                    }
                    Err(error) => {
                        give_back(taken).await;
                        return Err(error);
                    }
                }
            }
            if !taken.parts.iter().any(LockGuard::is_lost) {
                return Ok(Some(MultiGuard { held: taken }));
            }
            // A fixed lease ran out on an early part while a later one was waited for.
            tracing::debug!(
                parts = taken.parts.len(),
                "a part's lease ran out while the others were taken; starting over"
            );
            give_back(taken).await;
            if wait.is_some() && time_left(deadline).is_none() {
                return Ok(None);
            }
        }
    }
}

/// The holds of a [`MultiLock`], one per part. Release them with
/// [`unlock`](MultiGuard::unlock); dropping the guard releases them in the background.
#[must_use = "dropping the guard releases the holds at once"]
pub struct MultiGuard {
    /// In the order they were taken.
    held: Held,
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiGuard")
            .field("parts", &self.held.parts)
            .finish()
    }
}

impl MultiGuard {
    /// The hold of each part, in the order they were taken (by name, then server), one per lock
    /// (duplicates merged). A fenced part's token is its
    /// [`fencing_token`](LockGuard::fencing_token).
    pub fn parts(&self) -> &[LockGuard] {
        &self.held.parts
    }

    /// Completes as soon as any part's [`LockGuard::lost`] does: from then on, another owner
    /// may hold one of the locks.
    pub fn lost(&self) -> Lost {
        let signals = select_all(self.held.parts.iter().map(LockGuard::lost));
        Lost::from_future(async move {
            signals.await;
        })
    }

    /// Whether any part's [`LockGuard::is_lost`] is true.
    pub fn is_lost(&self) -> bool {
        self.held.parts.iter().any(LockGuard::is_lost)
    }

    /// Releases every part, all at once (one script for the plain locks of one client and
    /// slot).
    ///
    /// # Errors
    ///
    /// Once every release has ended: the first part's error, as
    /// [`LockGuard::unlock`] reports it ([`Error::LeaseLost`](crate::Error::LeaseLost) when a part's lease had run out).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the releases run to their end in the background.
    pub async fn unlock(self) -> Result<()> {
        let Held { parts, runs } = self.held;
        let mut parts = parts.into_iter();
        let releases = runs.into_iter().map(|count| {
            let run: Vec<LockGuard> = parts.by_ref().take(count).collect();
            async move {
                if run.len() > 1 {
                    batch::release_all(run).await
                } else {
                    join_all(run.into_iter().map(LockGuard::unlock)).await
                }
            }
        });
        let outcomes = join_all(releases).await;
        outcomes
            .into_iter()
            .flatten()
            .find(Result::is_err)
            .unwrap_or(Ok(()))
    }
}
