//! [`Term`]: a leader's time in office, and the work tied to it.

use std::future::Future;

use crate::error::{Error, Result};
use crate::lock::FencedGuard;
use crate::wait::Lost;

/// A leader's term in an [`Election`](crate::Election), from
/// [`campaign`](crate::Election::campaign): this caller leads while it lives and its lease has
/// not run out. Dropping it gives the term back in the background, as does
/// [`Client::shutdown`](crate::Client::shutdown); [`resign`](Self::resign) gives it back and
/// waits for the answer. Either way the next candidate leads at once (no lock-delay applies).
#[must_use = "dropping the term gives it back at once"]
#[derive(Debug)]
pub struct Term {
    guard: FencedGuard,
    election: String,
    /// The holder field, `<client-uuid>:<owner>`.
    field: String,
}

/// What the work of [`Term::run`] is told of its term.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TermInfo {
    /// The election's name.
    pub election: String,
    /// The term's epoch ([`Term::epoch`]).
    pub epoch: u64,
}

impl Term {
    pub(super) fn new(guard: FencedGuard, election: String, client_id: &str) -> Term {
        let field = format!("{client_id}:{}", guard.owner());
        Term {
            guard,
            election,
            field,
        }
    }

    /// The term's epoch: higher than the epoch of every earlier term of the election, so it
    /// can be the token of a [`Fence`](crate::Fence) that refuses the writes of an older
    /// leader. It is the election's fenced-lock token, and grows as long as its counter does:
    /// see [`FencedLock`](crate::FencedLock) for what the deployment must keep (the AOF on a
    /// single server, replica sync on a replicated one).
    pub fn epoch(&self) -> u64 {
        self.guard.token()
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        &self.election
    }

    /// Completes at the earliest moment the term's lease can have run out (as
    /// [`LockGuard::lost`](crate::LockGuard::lost)): from then on another candidate may lead.
    pub fn lost(&self) -> Lost {
        self.guard.lost()
    }

    /// Whether [`lost`](Self::lost) has completed, checked against the clock without a round
    /// trip.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
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
    /// term's [`TermInfo`] and runs until it ends, or until the term may have ended
    /// ([`lost`](Self::lost): the earliest moment its lease can have run out, by this process's
    /// clock), whichever comes first; in the second case the work is dropped (cancelled at the
    /// `.await` it is waiting in) and `run` fails with [`Error::LeaseLost`] (its `lock` the
    /// election's name). The term is given back only after the work has stopped.
    ///
    /// What that guarantees: no `.await` of the work resumes after the term's local deadline,
    /// which comes before the lease can have run out on the server as long as this machine's
    /// clock runs no slower than the server's (the lease is counted from before each renewal
    /// was sent). What it cannot: stop code that runs without awaiting (a blocking call, a long
    /// computation) in the middle, or a write already on its way. Pass the epoch to a
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
    ///         fence.set(term.epoch, "compaction:cursor", 42).await
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
        F: FnOnce(TermInfo) -> Fut,
        Fut: Future<Output = T>,
    {
        let info = TermInfo {
            election: self.election.clone(),
            epoch: self.epoch(),
        };
        let lost = self.lost();
        let finished = {
            let work = work(info);
            tokio::pin!(work);
            tokio::select! {
                biased;
                () = lost => None,
                out = &mut work => Some(out),
            }
            // The work is dropped here, before the term is given back.
        };
        match finished {
            Some(out) => {
                if let Err(e) = self.guard.unlock().await {
                    // The term ends by its lease then: the watchdog no longer renews it.
                    tracing::warn!(election = %self.election, error = %e, "resigning a term failed");
                }
                Ok(out)
            }
            None => {
                drop(self.guard);
                Err(Error::LeaseLost {
                    lock: self.election,
                    owner: self.field,
                })
            }
        }
    }
}
