//! Leader election: one leader per name at a time, whose term carries an epoch that fences.
//!
//! A term is a hold of a [`FencedLock`] named `relock_election:<name>`, taken by a candidate of
//! its own: the lease is renewed by the watchdog while the term lives, a candidate waits for the
//! leader to go as a lock waiter does (woken by the release, no polling), and the epoch is the
//! fenced lock's token, so a [`Fence`](crate::Fence) refuses the writes of any earlier term.

mod history;
mod leading;
mod office;
mod term;
mod watch;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fred::bytes_utils::Str;

use crate::error::{Error, Result};
use crate::inspect::Party;
use crate::lock::replies::Delay;
use crate::lock::{lock_delay_ms, Handle, Kind};
use crate::owner::Owner;
use crate::shared::Shared;

pub use history::{Candidate, Change, Cursor, Vacancy};
pub use leading::{Leadership, Role, TermEnd};
pub use term::{Term, TermContext};
pub use watch::Watch;

use history::{observe, Change as Seen, Read};
use office::{ElectionKeys, Office};

use crate::names::prefix::ELECTION as PREFIX;

/// A leader election: at most one [`Term`] of it is alive at a time, across every process
/// that campaigns on its name. From [`Client::election`](crate::Client::election).
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
/// term.run(|term| async move { schedule(term.epoch()).await }).await?;
/// # Ok(()) }
/// ```
///
#[doc = include_str!("../../docs/election.md")]
#[derive(Clone)]
pub struct Election {
    name: String,
    handle: Handle,
    keys: ElectionKeys,
    shared: Arc<Shared>,
    /// The lock-delay in ms (0: none).
    delay_ms: u64,
    /// Its terms' own lease (`None`: the client's watchdog timeout).
    lease: Option<Duration>,
    /// What its candidates are elected with (empty: nothing).
    metadata: Str,
}

impl Election {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> Election {
        let lock = format!("{PREFIX}{name}");
        let keys = ElectionKeys::new(&lock);
        let office = Office {
            keys: keys.clone(),
            delay: None,
            metadata: Str::new(),
        };
        Election {
            handle: Handle::new(shared.clone(), lock, Kind::of(office)),
            keys,
            name,
            shared,
            delay_ms: 0,
            lease: None,
            metadata: Str::new(),
        }
    }

    /// Gives the election's lock handle the office of its present settings.
    fn set_office(&mut self) {
        let office = Office {
            keys: self.keys.clone(),
            delay: (self.delay_ms > 0).then(|| Delay::new(self.handle.name(), self.delay_ms)),
            metadata: self.metadata.clone(),
        };
        self.handle.set_kind(Kind::of(office));
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same election with a **lock-delay** for a leader that dies: when a term ends without
    /// a resign (its lease ran out: the leader died, stalled, or lost Redis), this handle's
    /// candidates wait `delay` more before one leads, so that requests the old leader still had
    /// in flight land first (Chubby's lock-delay). A resign (also a dropped [`Term`] and
    /// [`Client::shutdown`](crate::Client::shutdown)) imposes none: a waiting candidate leads at once.
    /// [`Duration::ZERO`] turns it off (the default). Every candidate of the election should set
    /// the same delay: one without it does not read the delay and may lead at once. It is the
    /// lock-delay of [`Lock::with_lock_delay`](crate::Lock::with_lock_delay), with its limits:
    /// a mitigation; the epoch is the protection.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// use std::time::Duration;
    /// let election = client.election("scheduler").with_lock_delay(Duration::from_secs(5))?;
    /// let term = election.campaign().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a delay over 60 s, or above zero but under 1 ms.
    pub fn with_lock_delay(mut self, delay: Duration) -> Result<Election> {
        self.delay_ms = lock_delay_ms(delay)?;
        self.set_office();
        Ok(self)
    }

    /// The same election whose terms have a lease of their own, `lease` (client-go's
    /// `LeaseDuration`), instead of the client's watchdog timeout: the watchdog renews a term
    /// every third of it, and a leader that dies without resigning is followed once it has run
    /// out. Shorter means a faster takeover after a death and more renewals; the term's local
    /// deadline ([`Term::lost`]) is counted from it. Every candidate of the election should set
    /// the same lease (each term is renewed with the lease of the candidate that won it).
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// use std::time::Duration;
    /// let election = client.election("scheduler").with_lease(Duration::from_secs(5))?;
    /// let term = election.campaign().await?; // renewed every 1.67 s
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a lease under 3 ms (it is renewed every third of it) or
    /// longer than a lease can be.
    pub fn with_lease(mut self, lease: Duration) -> Result<Election> {
        let ms = crate::config::millis(lease, "an election's lease")?;
        if ms < 3 {
            return Err(Error::invalid(format!(
                "an election's lease must be at least 3 ms so it can be renewed every third of it, got {lease:?}"
            )));
        }
        self.lease = Some(Duration::from_millis(ms));
        Ok(self)
    }

    /// The same election whose candidates are elected with `metadata` (an address to reach
    /// the leader at, say; etcd's `Campaign(val)`): written in the same step that elects one,
    /// so [`Change::Elected`] and [`leader`](Self::leader) carry it from the term's first
    /// moment. [`Term::proclaim`] replaces it within a term. Empty: none (the default).
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// let election = client.election("scheduler").with_metadata("10.0.0.7:8080");
    /// let term = election.campaign().await?;
    /// assert_eq!(
    ///     election.leader().await?.and_then(|leader| leader.metadata).as_deref(),
    ///     Some("10.0.0.7:8080")
    /// );
    /// # Ok(()) }
    /// ```
    pub fn with_metadata(mut self, metadata: impl Into<String>) -> Election {
        self.metadata = Str::from(metadata.into());
        self.set_office();
        self
    }

    /// Waits until this caller leads, and returns its term: at once when nobody leads, else
    /// when the leader resigns or its term ends (woken by the release, without polling; a term
    /// that ends by its lease is noticed when the lease would end).
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
        self.campaign_as(Owner::new()).await
    }

    /// [`campaign`](Self::campaign) as the candidate `owner`.
    async fn campaign_as(&self, owner: Owner) -> Result<Term> {
        let term = self.stand(owner, None).await?;
        Ok(term.expect("an unbounded wait ends only with the term"))
    }

    /// Campaigns as the candidate `owner`, waiting at most `wait` (`None`: as long as it
    /// takes), with the election's lease.
    async fn stand(&self, owner: Owner, wait: Option<Duration>) -> Result<Option<Term>> {
        self.check()?;
        let candidate = self.handle.clone().owned_by(owner);
        let guard = match self.lease {
            Some(lease) => candidate.acquire_renewed(lease, wait).await?,
            None => candidate.acquire(None, wait).await?,
        };
        Ok(guard.map(|guard| Term::new(guard, self.clone())))
    }

    /// [`campaign`](Self::campaign) with `metadata` written with the election, as
    /// [`with_metadata`](Self::with_metadata) does: `Change::Elected` and `leader()` carry it
    /// from the term's first moment.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    ///
    /// As [`campaign`](Self::campaign).
    pub async fn campaign_with(&self, metadata: impl Into<String>) -> Result<Term> {
        self.clone().with_metadata(metadata).campaign().await
    }

    /// Waits at most `wait` to lead: `Some(term)` once this caller leads, `None` when `wait`
    /// passed first (the candidate is withdrawn then, leaving nothing behind).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    ///
    /// As [`campaign`](Self::campaign).
    pub async fn campaign_for(&self, wait: Duration) -> Result<Option<Term>> {
        self.stand(Owner::new(), Some(wait)).await
    }

    /// Leads if nobody does: `Some(term)`, or `None` at once when another candidate leads (or
    /// a lock-delay is in force). Also `None` on a vacant election whose hand-off a waiting
    /// candidate has claimed: the candidate that waited leads first (its claim lasts until it
    /// has taken the term, at most the claim window).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    ///
    /// # Cancel safety
    ///
    /// As [`campaign`](Self::campaign).
    pub async fn try_campaign(&self) -> Result<Option<Term>> {
        self.stand(Owner::new(), Some(Duration::ZERO)).await
    }

    /// Who leads now, read from Redis: `None` when nobody does. A term that ended by its lease
    /// is written to history as it is found here (see [`Change::Vacant`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, [`Error::WrongType`] when one of the
    /// election's keys holds something else, [`Error::Redis`] when the server cannot be read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: what it may write (a lapsed term's vacancy) is written whole or not at all.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        self.check()?;
        let shared = &self.shared;
        shared.check_open()?;
        let lock = self.lock_name();
        let seen = observe(
            &shared.redis,
            shared.publish,
            &lock,
            &self.keys,
            Read::Newest,
        )
        .await?;
        let Some(field) = seen.leader else {
            return Ok(None);
        };
        let inspected = self.shared.inspect(&lock).await?;
        let party = inspected
            .holders
            .into_iter()
            .map(|holder| holder.party)
            .find(|party| party.field == field)
            .unwrap_or_else(|| Party::gone(&field));
        let mut leader = Leader {
            epoch: seen.epoch,
            party,
            metadata: None,
            since: None,
            lease_left: u64::try_from(seen.pttl_ms).ok().map(Duration::from_millis),
        };
        if let Some(newest) = seen.entries.into_iter().next() {
            let (Seen::Elected {
                epoch, leader: who, ..
            }
            | Seen::Proclaimed {
                epoch, leader: who, ..
            }) = &newest.change
            else {
                return Ok(Some(leader));
            };
            if *epoch == seen.epoch && who.field == field {
                leader.since = newest.since;
                match newest.change {
                    Seen::Proclaimed { metadata, .. } => leader.metadata = Some(metadata),
                    Seen::Elected { metadata, .. } => leader.metadata = metadata,
                    _ => {}
                }
            }
        }
        Ok(Some(leader))
    }

    /// Ends the term whoever leads (an operator's override, as
    /// [`Lock::force_unlock`](crate::Lock::force_unlock)), and any lock-delay in force: the
    /// vacancy is written to history as [`Vacancy::Forced`] and a waiting candidate leads at
    /// once. The leader is not told: its renewals find the term gone, and its
    /// [`lost`](Term::lost) completes then (its [`run`](Term::run) stops its work). `true`
    /// when there was a term (or a lock-delay) to end.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, [`Error::WrongType`] when one of the
    /// election's keys holds something else, [`Error::Redis`] when the server cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: done whole or not at all.
    pub async fn force_vacate(&self) -> Result<bool> {
        self.check()?;
        self.handle.force_unlock().await
    }

    /// The election's changes: first the newest one in its history when the stream is first
    /// polled (who leads, or the vacancy; nothing when the election never had a leader), then
    /// every later change, each once, in order. Like any stream it does nothing until polled:
    /// a change made between this call and the first poll is not reported apart from the
    /// newest. See [`Watch`].
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// use futures::StreamExt;
    /// use relock::Change;
    /// let mut changes = client.election("scheduler").watch();
    /// while let Some(change) = changes.next().await {
    ///     match change? {
    ///         Change::Elected { epoch, leader, .. } => println!("{} leads ({epoch})", leader.host),
    ///         Change::Vacant { epoch, reason, .. } => println!("term {epoch} ended: {reason:?}"),
    ///         other => println!("{other:?}"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn watch(&self) -> Watch {
        self.watch_from(None)
    }

    /// The election's changes after a place kept elsewhere (a database, a file): every later
    /// change, each once, in order, with a [`Change::Gap`] first when history no longer has
    /// the change after it, or is not the history the place was taken in.
    ///
    /// The place is best a [`Cursor`] ([`Change::cursor`] of the last change handled, kept as
    /// text): the watch checks that history still holds that change at its seq, and reports a
    /// gap, then follows history from its newest change, when it does not (history rewritten
    /// by a failover that lost changes, deleted and grown again, or another election's). A bare
    /// seq (`u64`, [`Change::seq`]) is accepted too, but has nothing to check: the watch
    /// notices only a history shorter than the seq, until it delivers its first change. Any
    /// seq is accepted: one past the newest in history (`u64::MAX` included) is a history
    /// shorter than the seq, a gap.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client, kept: String) -> relock::Result<()> {
    /// use futures::StreamExt;
    /// let cursor: relock::Cursor = kept.parse()?; // from a change's `cursor()`
    /// let mut changes = client.election("scheduler").watch_after(cursor);
    /// while let Some(change) = changes.next().await {
    ///     let change = change?;
    ///     // ... handle it, then keep where it stands:
    ///     if let Some(cursor) = change.cursor() {
    ///         let _kept = cursor.to_string();
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn watch_after(&self, after: impl Into<Cursor>) -> Watch {
        self.watch_from(Some(after.into()))
    }

    fn watch_from(&self, after: Option<Cursor>) -> Watch {
        let shared = self.shared.clone();
        if let Err(e) = self.check() {
            return Watch::failed(e);
        }
        Watch::new(shared, self.lock_name(), self.keys.clone(), after)
    }

    /// The election's lock hash, `relock_election:<name>`.
    fn lock_name(&self) -> Str {
        Str::from(self.handle.name())
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
    /// its client has a connection open, as [`Client::inspect`](crate::Client::inspect) shows a holder.
    pub party: Party,
    /// What it proclaimed last in this term ([`Term::proclaim`]); `None` before it did, or
    /// when history lost the term's entries.
    pub metadata: Option<String>,
    /// When its term began, by the server's clock; `None` when history lost the term's
    /// entries.
    pub since: Option<SystemTime>,
    /// What is left of its lease (the watchdog renews it while the leader lives); `None` for a
    /// term without expiry.
    pub lease_left: Option<Duration>,
}
