//! [`Term`]: a leader's time in office, and the work tied to it; [`TermContext`], what the work
//! is given of its term.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use fred::bytes_utils::Str;

use super::history::proclaim;
use super::Election;
use crate::error::{Error, Result};
use crate::lock::LockGuard;
use crate::registry::Signal;
use crate::wait::Lost;

/// A leader's term in an [`Election`](crate::Election), from
/// [`campaign`](crate::Election::campaign): this caller leads while it lives and its lease has
/// not run out. Dropping it gives the term back in the background, as does
/// [`Client::shutdown`](crate::Client::shutdown); [`resign`](Self::resign) gives it back and
/// waits for the answer. Either way the next candidate leads at once (no lock-delay applies).
#[must_use = "dropping the term gives it back at once"]
#[derive(Debug)]
pub struct Term {
    guard: LockGuard,
    context: TermContext,
}

impl Term {
    pub(super) fn new(guard: LockGuard, election: Election) -> Term {
        let field = election.shared.holder_field(guard.owner()).into();
        let epoch = guard
            .fencing_token()
            .expect("an election's acquire gives an epoch");
        let standing = guard.standing();
        Term {
            guard,
            context: TermContext {
                election,
                epoch,
                field,
                standing,
            },
        }
    }

    /// What [`run`](Self::run)'s work is given: the term's epoch, `lost()`, `is_lost()` and
    /// `proclaim()`, in a handle the work can keep and clone.
    pub fn context(&self) -> TermContext {
        self.context.clone()
    }

    /// The term's epoch: higher than the epoch of every earlier term of the election, so it
    /// can be the token of a [`Fence`](crate::Fence) that refuses the writes of an older
    /// leader. It is the election's fenced-lock token, and grows as long as its counter does:
    /// see [`FencedLock`](crate::FencedLock) for what the deployment must keep (the AOF on a
    /// single server, replica sync on a replicated one).
    pub fn epoch(&self) -> u64 {
        self.context.epoch
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        self.context.election()
    }

    /// Proclaims `metadata` (an address to reach the leader at, say) for this term: written to
    /// the election's history, so [`Election::leader`](crate::Election::leader) shows it and
    /// every [`watch`](crate::Election::watch) reports it as a
    /// [`Change::Proclaimed`](crate::Change::Proclaimed). Returns its place in history.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the term has ended (checked on Redis, in the same script that
    /// writes it), [`Error::Redis`] when the server cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: written whole or not at all, and a dropped call may have written it.
    pub async fn proclaim(&self, metadata: impl AsRef<str>) -> Result<u64> {
        self.context.proclaim(metadata).await
    }

    /// Completes at the earliest moment the term's lease can have run out (as
    /// [`LockGuard::lost`](crate::LockGuard::lost)): from then on another candidate may lead.
    pub fn lost(&self) -> Lost {
        self.context.lost()
    }

    /// Whether [`lost`](Self::lost) has completed, checked against the clock without a round
    /// trip.
    pub fn is_lost(&self) -> bool {
        self.context.is_lost()
    }

    /// Gives the term back and waits for the answer: a waiting candidate leads at once.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::unlock`](crate::LockGuard::unlock): [`Error::LeaseLost`] when the term
    /// had ended already.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the release runs to its end in the background.
    pub async fn resign(self) -> Result<()> {
        self.guard.unlock().await
    }

    /// Runs the leader's `work` for this term, then gives the term back. The work is given the
    /// term's [`TermContext`] (its epoch, `lost()`, `is_lost()`, `proclaim()`) and runs until it
    /// ends, or until the term may have ended
    /// ([`lost`](Self::lost): the earliest moment its lease can have run out, by this process's
    /// clock), whichever comes first; in the second case the work is dropped (cancelled at the
    /// `.await` it is waiting in) and `run` fails with [`Error::LeaseLost`] (its `lock` the
    /// election's name). The term is given back only after the work has stopped.
    ///
    /// What that guarantees: no `.await` of the work resumes after the term's local deadline
    /// (checked before every poll of the work, not only when a timer fires),
    /// which comes before the lease can have run out on the server as long as this machine's
    /// clock runs no slower than the server's (the lease is counted from before each renewal
    /// was sent). What it cannot: stop code that runs without awaiting (a blocking call, a long
    /// computation) in the middle, a write already on its way, or work the work handed to
    /// another task (`tokio::spawn`): that runs on; watch [`TermContext::lost`] in it, or keep
    /// it in the work (a `JoinSet` the work owns is dropped, and its tasks aborted, with the
    /// work). Pass the epoch to a
    /// [`Fence`](crate::Fence) (or any store that checks it) for writes that must never land
    /// after the term.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// let term = client.election("compactor").campaign().await?;
    /// let fence = client.fence("compaction:cursor");
    /// let done = term
    ///     .run(|term| async move {
    ///         // Refused once a newer leader has written.
    ///         fence.set(term.epoch(), "compaction:cursor", 42).await
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the term may have ended before the work did.
    ///
    /// # Cancel safety
    ///
    /// Dropping `run` drops the work and the term: the term is given back in the background.
    pub async fn run<F, Fut, T>(self, work: F) -> Result<T>
    where
        F: FnOnce(TermContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let lost = self.context.lost_error();
        match self.run_until(work, std::future::pending()).await {
            Ended::Done(out) => Ok(out),
            Ended::Lost | Ended::Stopped => Err(lost),
        }
    }

    /// [`run`](Self::run), which `stop` can also end: the work is then dropped and the term
    /// given back (the answer awaited), as when the work ends.
    pub(super) async fn run_until<F, Fut, T>(
        self,
        work: F,
        stop: impl Future<Output = ()>,
    ) -> Ended<T>
    where
        F: FnOnce(TermContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let context = self.context();
        let lost = self.lost();
        let ended = {
            let work = work(self.context());
            tokio::pin!(work);
            // The deadline is read before every poll of the work: `lost` completes when the
            // runtime's timer turns (on whole milliseconds), and work woken by I/O meanwhile
            // would otherwise run once more past the deadline.
            let guarded = std::future::poll_fn(|cx| {
                if context.is_lost() {
                    return Poll::Ready(Ended::Lost);
                }
                work.as_mut().poll(cx).map(Ended::Done)
            });
            tokio::select! {
                biased;
                () = lost => Ended::Lost,
                () = stop => Ended::Stopped,
                ended = guarded => ended,
            }
            // The work is dropped here, before the term is given back.
        };
        if matches!(ended, Ended::Lost) {
            drop(self.guard);
        } else if let Err(e) = self.guard.unlock().await {
            // The term ends by its lease then: the watchdog no longer renews it.
            let election = self.context.election();
            tracing::warn!(election, error = %e, "resigning a term failed");
        }
        ended
    }
}

/// How [`Term::run_until`] ended.
pub(super) enum Ended<T> {
    /// The work ended with this; the term was given back.
    Done(T),
    /// The term may have ended first: the work was dropped.
    Lost,
    /// Stopped: the work was dropped and the term given back.
    Stopped,
}

/// A leader's term as its work sees it, from [`Term::run`], [`Term::context`] and the leader
/// loop ([`Election::lead`](crate::Election::lead)): the epoch to fence with, the term's
/// deadline, and `proclaim`. Cheap to clone; it does not keep the term (dropping it gives
/// nothing back), and once the term has ended its `lost()` completes at once and `proclaim`
/// fails.
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// let term = client.election("indexer").campaign().await?;
/// term.run(|term| async move {
///     term.proclaim("10.0.0.7:8080").await?;
///     while !term.is_lost() {
///         // One step of work, fenced by the term's epoch.
///         # let _ = term.epoch();
///         # break;
///     }
///     Ok::<_, relock::Error>(())
/// })
/// .await??;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TermContext {
    election: Election,
    epoch: u64,
    /// The holder field, `<client-uuid>:<owner>`.
    field: Str,
    standing: Arc<Signal>,
}

impl std::fmt::Debug for TermContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TermContext")
            .field("election", &self.election.name())
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl TermContext {
    /// The term's epoch ([`Term::epoch`]): pass it to a [`Fence`](crate::Fence).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        self.election.name()
    }

    /// As [`Term::lost`]: completes at the earliest moment the term's lease can have run out.
    pub fn lost(&self) -> Lost {
        Lost::from_future(self.standing.clone().lost())
    }

    /// As [`Term::is_lost`], checked against the clock without a round trip.
    pub fn is_lost(&self) -> bool {
        self.standing.is_lost()
    }

    /// As [`Term::proclaim`].
    ///
    /// # Errors
    ///
    /// As [`Term::proclaim`].
    ///
    /// # Cancel safety
    ///
    /// As [`Term::proclaim`].
    pub async fn proclaim(&self, metadata: impl AsRef<str>) -> Result<u64> {
        let shared = &self.election.shared;
        shared.check_open()?;
        let (redis, publish) = (&shared.redis, shared.publish);
        let lock = self.election.lock_name();
        let keys = &self.election.keys;
        let written = proclaim(redis, publish, &lock, keys, &self.field, metadata.as_ref()).await?;
        written.ok_or_else(|| self.lost_error())
    }

    /// The error of a term that has ended.
    fn lost_error(&self) -> Error {
        Error::LeaseLost {
            lock: self.election.name().to_owned(),
            owner: self.field.to_string(),
        }
    }
}
