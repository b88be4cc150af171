//! The blocking [`Election`] and [`Term`].

use super::{call, Election, Guard, Term};
use crate::error::Result;
use crate::Leader;

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
