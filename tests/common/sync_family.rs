//! The synchronizers as one type, so a fault case is written once and checked on each of them
//! (as [`family`](super::family) does for the locks): [`Synchronizer`] names a type
//! (`Semaphore`, `PermitSemaphore`, `CountDownLatch`), [`AnySync`] is a handle of any of them,
//! and `sync_tests!` makes a test of a case per type.
//!
//! What the three share is a gate waiters wait at: a semaphore's is closed while a holder has
//! every permit and opens as it gives them back; a latch's is closed while its count is above 0
//! and opens as it is counted down.

#![allow(dead_code, unreachable_pub, unused_imports, unused_macros)]

use std::time::Duration;

use relock::{Client, CountDownLatch, Permit, PermitSemaphore, Result, Semaphore};

/// A synchronizer type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synchronizer {
    /// [`relock::Semaphore`]: counted permits, not tied to a holder.
    Semaphore,
    /// [`relock::PermitSemaphore`]: permits each with a lease, renewed by the watchdog.
    Permit,
    /// [`relock::CountDownLatch`]: waiters return once its count reaches 0.
    Latch,
}

impl Synchronizer {
    /// A handle of this type on synchronizer `name`.
    pub fn on(self, client: &Client, name: impl Into<String>) -> AnySync {
        match self {
            Synchronizer::Semaphore => AnySync::Semaphore(client.semaphore(name)),
            Synchronizer::Permit => AnySync::Permit(client.permit_semaphore(name)),
            Synchronizer::Latch => AnySync::Latch(client.count_down_latch(name)),
        }
    }

    /// The channel synchronizer `name`'s waiters listen on.
    pub fn channel(self, name: &str) -> String {
        match self {
            Synchronizer::Semaphore | Synchronizer::Permit => super::semaphore_channel(name),
            Synchronizer::Latch => super::latch_channel(name),
        }
    }
}

/// A handle of any synchronizer type.
#[derive(Clone, Debug)]
pub enum AnySync {
    Semaphore(Semaphore),
    Permit(PermitSemaphore),
    Latch(CountDownLatch),
}

/// What a waiter got past the gate with: permits of a semaphore (taken by the handle here), a
/// `Permit`, or a latch's opening.
#[derive(Debug)]
pub enum Passed {
    Permits(Semaphore, u32),
    Permit(Permit),
    Open,
}

impl Passed {
    /// Gives back what it took: the permits (a latch's opening takes nothing).
    pub async fn give_back(self) -> Result<()> {
        match self {
            Passed::Permits(sem, n) => sem.release(n).await,
            Passed::Permit(permit) => permit.release().await,
            Passed::Open => Ok(()),
        }
    }
}

/// What keeps a gate closed, in the order it is given back: a semaphore's permits taken at once
/// (one step), a permit semaphore's `Permit`s (a step each), a latch's count (a count-down each).
#[derive(Debug)]
pub enum Closed {
    Permits(Semaphore, u32),
    Permit(Vec<Permit>),
    Count(CountDownLatch, u64),
}

impl Closed {
    /// Gives back its first step: all of a semaphore's permits, one `Permit`, one count-down.
    pub async fn open_one(&mut self) -> Result<()> {
        match self {
            Closed::Permits(sem, n) => {
                let n = std::mem::take(n);
                sem.release(n).await
            }
            Closed::Permit(permits) => permits.remove(0).release().await,
            Closed::Count(latch, n) => {
                *n -= 1;
                latch.count_down().await
            }
        }
    }

    /// Gives back what is left of it.
    pub async fn open(mut self) -> Result<()> {
        while !self.is_open() {
            self.open_one().await?;
        }
        Ok(())
    }

    /// Whether nothing is left of it.
    fn is_open(&self) -> bool {
        self.steps() == 0
    }

    /// How many steps of it are left to give back.
    pub fn steps(&self) -> usize {
        match self {
            Closed::Permits(_, n) => usize::from(*n > 0),
            Closed::Permit(permits) => permits.len(),
            Closed::Count(_, n) => *n as usize,
        }
    }
}

impl AnySync {
    /// The type of this handle.
    pub fn kind(&self) -> Synchronizer {
        match self {
            AnySync::Semaphore(_) => Synchronizer::Semaphore,
            AnySync::Permit(_) => Synchronizer::Permit,
            AnySync::Latch(_) => Synchronizer::Latch,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            AnySync::Semaphore(sem) => sem.name(),
            AnySync::Permit(sem) => sem.name(),
            AnySync::Latch(latch) => latch.name(),
        }
    }

    /// The plain semaphore inside, if it is one.
    pub fn as_semaphore(&self) -> Option<&Semaphore> {
        match self {
            AnySync::Semaphore(sem) => Some(sem),
            _ => None,
        }
    }

    /// The permit semaphore inside, if it is one.
    pub fn as_permit(&self) -> Option<&PermitSemaphore> {
        match self {
            AnySync::Permit(sem) => Some(sem),
            _ => None,
        }
    }

    /// The latch inside, if it is one.
    pub fn as_latch(&self) -> Option<&CountDownLatch> {
        match self {
            AnySync::Latch(latch) => Some(latch),
            _ => None,
        }
    }

    /// Sets its permits (its count) to `n` if it has none: `try_set_permits`, `try_set_count`.
    pub async fn set(&self, n: u64) -> Result<bool> {
        match self {
            AnySync::Semaphore(sem) => sem.try_set_permits(n).await,
            AnySync::Permit(sem) => sem.try_set_permits(n).await,
            AnySync::Latch(latch) => latch.try_set_count(n).await,
        }
    }

    /// Sets it to `n` and closes its gate: takes every permit (all at once of a semaphore, a
    /// `Permit` at a time), or leaves a latch counting `n`.
    pub async fn close(&self, n: u64) -> Result<Closed> {
        assert!(self.set(n).await?, "{} was already set", self.name());
        self.take_all(n).await
    }

    /// Closes its gate with the `n` permits it has: takes them all (a latch's count of `n` is
    /// left as it is).
    pub async fn take_all(&self, n: u64) -> Result<Closed> {
        Ok(match self {
            AnySync::Semaphore(sem) => {
                let n = n as u32;
                sem.acquire(n).await?;
                Closed::Permits(sem.clone(), n)
            }
            AnySync::Permit(sem) => {
                let mut permits = Vec::new();
                for _ in 0..n {
                    permits.push(sem.acquire().await?);
                }
                Closed::Permit(permits)
            }
            AnySync::Latch(latch) => Closed::Count(latch.clone(), n),
        })
    }

    /// Waits at the gate with no bound: for one permit (`acquire`), for the latch to open
    /// (`wait`).
    pub async fn wait(&self) -> Result<Passed> {
        match self {
            AnySync::Semaphore(sem) => sem
                .acquire(1)
                .await
                .map(|()| Passed::Permits(sem.clone(), 1)),
            AnySync::Permit(sem) => sem.acquire().await.map(Passed::Permit),
            AnySync::Latch(latch) => latch.wait().await.map(|()| Passed::Open),
        }
    }

    /// Waits at the gate for at most `within` (`try_acquire_for` of one permit, `wait_for`):
    /// `None` when the wait timed out.
    pub async fn wait_for(&self, within: Duration) -> Result<Option<Passed>> {
        self.take_for(1, within).await
    }

    /// As [`wait_for`](Self::wait_for), for `n` permits of a plain semaphore (a permit
    /// semaphore's `Permit` is one, and `n` is 1 for it; a latch ignores `n`).
    pub async fn take_for(&self, n: u32, within: Duration) -> Result<Option<Passed>> {
        match self {
            AnySync::Semaphore(sem) => sem
                .try_acquire_for(n, within)
                .await
                .map(|taken| taken.then(|| Passed::Permits(sem.clone(), n))),
            AnySync::Permit(sem) => {
                assert_eq!(n, 1, "a Permit is one permit");
                sem.try_acquire_for(within, None)
                    .await
                    .map(|permit| permit.map(Passed::Permit))
            }
            AnySync::Latch(latch) => latch
                .wait_for(within)
                .await
                .map(|open| open.then_some(Passed::Open)),
        }
    }
}

/// Makes one test per synchronizer type of each fault case `fn <case>(sync: Synchronizer)`: a
/// module named after it with the tests `semaphore`, `permit` and `latch`.
macro_rules! sync_tests {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                use super::Synchronizer;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn semaphore() {
                    super::$case(Synchronizer::Semaphore).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn permit() {
                    super::$case(Synchronizer::Permit).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn latch() {
                    super::$case(Synchronizer::Latch).await;
                }
            }
        )*
    };
}

pub(crate) use sync_tests;
