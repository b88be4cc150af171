//! The blocking [`Election`] and [`Term`] (its leader loop is in `leading`).

use std::time::Duration;

use futures::StreamExt;

use super::{block, call, Blocking, Election, Guard, Term};
use crate::error::Result;
use crate::{Change, Leader};

/// A blocking [`crate::Watch`]: an [`Iterator`] of the election's changes, each `next()`
/// blocking until the next one (see [`crate::Election::watch`]).
pub type Watch = Blocking<crate::Watch>;

impl Election {
    fn guard(&self, inner: crate::Term) -> Term {
        Guard {
            inner,
            runtime: self.runtime.clone(),
        }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Blocks until this caller leads, and returns its term (see
    /// [`crate::Election::campaign`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Election::campaign`]; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// inside an async runtime.
    pub fn campaign(&self) -> Result<Term> {
        let term = call(&self.runtime, self.inner.campaign())?;
        Ok(self.guard(term))
    }

    /// Leads if nobody does (see [`crate::Election::try_campaign`]).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    pub fn try_campaign(&self) -> Result<Option<Term>> {
        let term = call(&self.runtime, self.inner.try_campaign())?;
        Ok(term.map(|term| self.guard(term)))
    }

    /// Who leads now (see [`crate::Election::leader`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Election::leader`].
    pub fn leader(&self) -> Result<Option<Leader>> {
        call(&self.runtime, self.inner.leader())
    }

    /// The same election with a lock-delay for a leader that dies (see
    /// [`crate::Election::with_lock_delay`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Election::with_lock_delay`].
    pub fn with_lock_delay(self, delay: Duration) -> Result<Election> {
        let inner = self.inner.clone().with_lock_delay(delay)?;
        Ok(self.wrap(inner))
    }

    /// The election's changes, as an iterator (see [`crate::Election::watch`]).
    pub fn watch(&self) -> Watch {
        self.wrap(self.inner.watch())
    }

    /// The election's changes after a place: a [`Cursor`](crate::Cursor), or a seq (see
    /// [`crate::Election::watch_after`]).
    pub fn watch_after(&self, after: impl Into<crate::Cursor>) -> Watch {
        self.wrap(self.inner.watch_after(after))
    }
}

impl Election {
    /// Blocks at most `timeout` to lead: `Some(term)` once this caller leads, `None` when
    /// `timeout` passed first, leaving no candidate behind (see
    /// [`crate::Election::campaign_for`]).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    pub fn campaign_for(&self, timeout: Duration) -> Result<Option<Term>> {
        let term = call(&self.runtime, self.inner.campaign_for(timeout))?;
        Ok(term.map(|term| self.guard(term)))
    }

    /// [`campaign`](Self::campaign) with `metadata` written with the election (see
    /// [`crate::Election::campaign_with`]).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    pub fn campaign_with(&self, metadata: impl Into<String>) -> Result<Term> {
        let term = call(&self.runtime, self.inner.campaign_with(metadata))?;
        Ok(self.guard(term))
    }

    /// The same election whose candidates are elected with `metadata` (see
    /// [`crate::Election::with_metadata`]).
    pub fn with_metadata(self, metadata: impl Into<String>) -> Election {
        let inner = self.inner.clone().with_metadata(metadata);
        self.wrap(inner)
    }

    /// Ends the term whoever leads, and any lock-delay in force; `true` when there was one to
    /// end (see [`crate::Election::force_vacate`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Election::force_vacate`];
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) inside an async runtime.
    pub fn force_vacate(&self) -> Result<bool> {
        call(&self.runtime, self.inner.force_vacate())
    }
}

impl Iterator for Watch {
    type Item = Result<Change>;

    /// Blocks until the next change (or failed read, as the async stream gives it); `None`
    /// once the stream is over, after the client shut down. Inside an async runtime, an
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    fn next(&mut self) -> Option<Result<Change>> {
        match block(&self.runtime, self.inner.next()) {
            Ok(next) => next,
            Err(e) => Some(Err(e)),
        }
    }
}

impl Watch {
    /// As [`next`](Iterator::next), waiting at most `timeout`: `Ok(None)` when no change came
    /// within it, or the stream is over.
    ///
    /// # Errors
    ///
    /// A failed read, as the stream gives it.
    pub fn next_within(&mut self, timeout: Duration) -> Result<Option<Change>> {
        // The timer is made inside the runtime, which it needs.
        let inner = &mut self.inner;
        let next = block(&self.runtime, async move {
            tokio::time::timeout(timeout, inner.next()).await
        })?;
        next.ok().flatten().transpose()
    }
}

/// The work of a blocking leader runs on its own thread, where nothing can stop it at the term's
/// deadline: there is no `run` here. Check [`is_lost`](Self::is_lost) between steps, and pass
/// [`epoch`](Self::epoch) to a [`Fence`](crate::Fence) for writes that must never land after the
/// term.
impl Term {
    /// The term's epoch (see [`crate::Term::epoch`]).
    pub fn epoch(&self) -> u64 {
        self.inner.epoch()
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        self.inner.election()
    }

    /// Whether the term may have ended (see [`crate::Term::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// Proclaims `metadata` for this term (see [`crate::Term::proclaim`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Term::proclaim`]; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// inside an async runtime.
    pub fn proclaim(&self, metadata: impl AsRef<str>) -> Result<u64> {
        call(&self.runtime, self.inner.proclaim(metadata))
    }

    /// Gives the term back and waits for the answer (see [`crate::Term::resign`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Term::resign`]; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// inside an async runtime.
    pub fn resign(self) -> Result<()> {
        call(&self.runtime, self.inner.resign())
    }
}
