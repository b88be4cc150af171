//! [`Term`]: a leader's time in office, and the work tied to it.

use std::future::Future;

use fred::bytes_utils::Str;

use super::history::proclaim;
use super::Election;
use crate::error::{Error, Result};
use crate::lock::LockGuard;
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
    epoch: u64,
    election: Election,
    /// The holder field, `<client-uuid>:<owner>`.
    field: Str,
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
    pub(super) fn new(guard: LockGuard, election: Election) -> Term {
        let field = election.client.shared.holder_field(guard.owner()).into();
        let epoch = guard
            .fencing_token()
            .expect("an election's acquire gives an epoch");
        Term {
            guard,
            epoch,
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
        self.epoch
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        self.election.name()
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
        let shared = &self.election.client.shared;
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
            election: self.election.name().to_owned(),
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
                    let election = self.election.name();
                    tracing::warn!(election, error = %e, "resigning a term failed");
                }
                Ok(out)
            }
            None => {
                let lost = self.lost_error();
                drop(self.guard);
                Err(lost)
            }
        }
    }
}
