//! Leader election: one leader per name at a time, whose term carries an epoch that fences.
//!
//! A term is a hold of a [`FencedLock`] named `relock_election:<name>`, taken by a candidate of
//! its own: the lease is renewed by the watchdog while the term lives, a candidate waits for the
//! leader to go as a lock waiter does (woken by the release, no polling), and the epoch is the
//! fenced lock's token, so a [`Fence`](crate::Fence) refuses the writes of any earlier term.

mod term;

use std::time::Duration;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::inspect::Party;
use crate::lock::FencedLock;
use crate::owner::Owner;

pub use term::{Term, TermInfo};

use crate::names::prefix::ELECTION as PREFIX;

/// A leader election: at most one [`Term`] of it is alive at a time, across every process
/// that campaigns on its name. From [`Client::election`].
///
/// Each [`campaign`](Self::campaign) is a candidate of its own, even two of one task (unlike a
/// lock, a term does not re-enter). The leader's term lasts while it is alive: the watchdog
/// renews its lease, and a leader that dies without resigning leaves at the end of its lease
/// (the client's watchdog timeout, 30 s by default).
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// # async fn schedule(epoch: u64) {}
/// let election = client.election("scheduler");
/// let term = election.campaign().await?; // waits until this candidate leads
/// // The work runs until it ends or the term may have ended, whichever comes first; then the
/// // term is given back.
/// term.run(|term| async move { schedule(term.epoch).await }).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Election {
    name: String,
    lock: FencedLock,
    client: Client,
}

impl Election {
    pub(crate) fn new(client: Client, name: String) -> Election {
        Election {
            lock: client.fenced_lock(format!("{PREFIX}{name}")),
            name,
            client,
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits until this caller leads, and returns its term: at once when nobody leads, else
    /// when the leader resigns or its term ends (woken by the release, without polling).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, and as [`Lock::lock`](crate::Lock::lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a campaign dropped while it waits leaves no candidate behind, and one whose
    /// acquire had reached Redis gives the term back in the background.
    pub async fn campaign(&self) -> Result<Term> {
        self.check()?;
        let guard = self.candidate().lock().await?;
        Ok(Term::new(guard, self.name.clone(), self.client.id()))
    }

    /// Leads if nobody does: `Some(term)`, or `None` at once when another candidate leads.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    ///
    /// As [`campaign`](Self::campaign).
    pub async fn try_campaign(&self) -> Result<Option<Term>> {
        self.check()?;
        let guard = self.candidate().try_lock().await?;
        Ok(guard.map(|guard| Term::new(guard, self.name.clone(), self.client.id())))
    }

    /// Who leads now, read from Redis: `None` when nobody does.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, [`Error::WrongType`] when the election's
    /// key holds something else, [`Error::Redis`] when the server cannot be read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        self.check()?;
        let key = format!("{PREFIX}{}", self.name);
        let seen = self.client.inspect(&key).await?;
        if !seen.kind.is_lock() && seen.kind != crate::inspect::Kind::Nothing {
            return Err(Error::WrongType { key });
        }
        let Some(holder) = seen.holders.into_iter().next() else {
            return Ok(None);
        };
        Ok(Some(Leader {
            epoch: seen.token.unwrap_or(0),
            party: holder.party,
            lease_left: u64::try_from(seen.pttl_ms).ok().map(Duration::from_millis),
        }))
    }

    /// A handle of the election's lock for a new candidate.
    fn candidate(&self) -> FencedLock {
        self.lock.clone().owned_by(Owner::new())
    }

    fn check(&self) -> Result<()> {
        if self.name.is_empty() {
            return Err(Error::invalid("an election's name must not be empty"));
        }
        Ok(())
    }
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish()
    }
}

/// Who leads an [`Election`], from [`Election::leader`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's epoch: its term's [`Term::epoch`].
    pub epoch: u64,
    /// The leader: its client and owner, and the process behind it (pid, host, program) while
    /// its client has a connection open, as [`Client::inspect`] shows a holder.
    pub party: Party,
    /// What is left of its lease (the watchdog renews it while the leader lives); `None` for a
    /// term without expiry.
    pub lease_left: Option<Duration>,
}
