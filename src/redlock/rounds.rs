//! A RedLock's acquire, round by round: each round asks every master at once and counts the
//! votes; between rounds the wait loop (`lock::until_taken`) pauses, cut short by a release on a
//! master that was busy.

use std::time::Duration;

use futures::future::join_all;
use futures::StreamExt;
use tokio::time::Instant;

use super::{RedLock, RedLockGuard};
use crate::error::{Error, Result};
use crate::lock::LockGuard;
use crate::owner::Owner;
use crate::pubsub::{Waiter, Wake};
use crate::wait::{time_left, Retry, Try, Waiting};

/// How one master voted in a round.
enum Vote {
    Yes(LockGuard),
    Busy,
    Failed,
}

/// How a round ended, when it did not hold.
struct Missed {
    granted: usize,
    busy: usize,
    failed: usize,
    /// The masters that said busy, by index.
    busy_at: Vec<usize>,
}

/// A RedLock's acquire as the wait loop runs it: each attempt a round, and between rounds a
/// pause with jitter, cut short by a release on a master that was busy.
pub(super) struct Rounds<'a> {
    pub(super) lock: &'a RedLock,
    pub(super) owner: Owner,
    pub(super) lease: Option<Duration>,
    pub(super) length: Duration,
    pub(super) vote_timeout: Duration,
    /// Wake-ups from the masters that refused, kept across rounds so no release is missed.
    pub(super) waiters: Vec<Option<Waiter>>,
    /// The masters the last round found busy.
    pub(super) busy_at: Vec<usize>,
}

impl Waiting for Rounds<'_> {
    /// The guard, and which masters granted it.
    type Taken = (RedLockGuard, Vec<bool>);

    async fn attempt(&mut self) -> Result<Try<Self::Taken>> {
        let lock = self.lock;
        let (lease, length, timeout) = (self.lease, self.length, self.vote_timeout);
        let missed = match lock.round(&self.owner, lease, length, timeout).await {
            Ok(taken) => return Ok(Try::Taken(taken)),
            Err(missed) => missed,
        };
        if missed.granted + missed.busy < lock.quorum() {
            return Err(Error::NoQuorum {
                lock: lock.name.clone(),
                granted: missed.granted,
                busy: missed.busy,
                failed: missed.failed,
                needed: lock.quorum(),
            });
        }
        self.busy_at = missed.busy_at;
        Ok(Try::Busy(None))
    }

    async fn start(&mut self, _deadline: Option<Instant>, _first: Option<Retry>) {}

    async fn wait_turn(&mut self, _busy: Option<Retry>, deadline: Option<Instant>) -> bool {
        if time_left(deadline).is_none() {
            return false;
        }
        let lock = self.lock;
        let waiters = &self.waiters;
        let subscribing = self
            .busy_at
            .iter()
            .filter(|&&i| waiters[i].is_none())
            .map(|&i| async move { (i, lock.parts[i].waiter(deadline).await) });
        for (i, waiter) in join_all(subscribing).await {
            // The name was checked before the first round: its keys are sound.
            self.waiters[i] = waiter.ok();
        }
        let Some(left) = time_left(deadline) else {
            return false;
        };
        // Both at most 2^53 ms (see `with_retry_delay`); saturating all the same.
        let jitter = lock.retry_jitter;
        let pause =
            (lock.retry_delay - jitter).saturating_add(random_below(jitter.saturating_mul(2)));
        let live: Vec<_> = self
            .waiters
            .iter()
            .flatten()
            .map(|w| Box::pin(w.wait(left.min(pause))))
            .collect();
        if live.is_empty() {
            tokio::time::sleep(left.min(pause)).await;
        } else if futures::future::select_all(live).await.0 == Wake::Message {
            let left = time_left(deadline).unwrap_or_default();
            tokio::time::sleep(left.min(random_below(lock.retry_jitter / 2))).await;
        }
        true
    }

    fn taken(mut self, (_, held_at): &Self::Taken) {
        for (waiter, held) in self.waiters.iter_mut().zip(held_at) {
            if let (Some(waiter), true) = (waiter.take(), held) {
                waiter.acquired(); // our release of that part wakes the next
            }
        }
    }
}

impl RedLock {
    /// One round: every master asked at once. The guard (and which masters granted it) when a
    /// quorum granted the lock in time; else every yes is released (and awaited) and the tally returned.
    async fn round(
        &self,
        owner: &Owner,
        lease: Option<Duration>,
        length: Duration,
        vote_timeout: Duration,
    ) -> std::result::Result<(RedLockGuard, Vec<bool>), Missed> {
        let started = Instant::now();
        let votes = self.parts.iter().enumerate().map(|(i, part)| {
            let part = part.clone().owned_by(owner.clone());
            async move {
                let vote = tokio::time::timeout(vote_timeout, part.try_lock_for(Duration::ZERO, lease));
                let vote = match vote.await {
                    Ok(Ok(Some(guard))) => Vote::Yes(guard),
                    Ok(Ok(None)) => Vote::Busy,
                    Ok(Err(error)) => {
                        tracing::debug!(lock = %part.name(), %error, "a RedLock master failed its vote");
                        Vote::Failed
                    }
                    Err(_) => {
                        tracing::debug!(lock = %part.name(), ?vote_timeout, "a RedLock master did not vote in time");
                        Vote::Failed
                    }
                };
                (i, vote)
            }
        });
        let votes = self.count(votes.collect(), started).await;
        let drift = length.mul_f64(self.drift_factor) + Duration::from_millis(2);
        let validity = length.saturating_sub(started.elapsed() + drift);
        let mut missed = Missed {
            granted: 0,
            busy: 0,
            failed: 0,
            busy_at: Vec::new(),
        };
        let mut parts = Vec::new();
        let mut held_at = Vec::new();
        for (i, vote) in votes.into_iter().enumerate() {
            held_at.push(matches!(vote, Vote::Yes(_)));
            match vote {
                Vote::Yes(guard) => parts.push(guard),
                Vote::Busy => missed.busy_at.push(i),
                Vote::Failed => missed.failed += 1,
            }
        }
        missed.granted = parts.len();
        missed.busy = missed.busy_at.len();
        if parts.len() >= self.quorum() && !validity.is_zero() {
            let guard = RedLockGuard {
                name: self.name.clone(),
                owner: owner.clone(),
                parts,
                quorum: self.quorum(),
                lease,
                validity,
                valid_until: lease.map(|_| started + validity),
            };
            return Ok((guard, held_at));
        }
        if parts.len() >= self.quorum() {
            tracing::debug!(lock = %self.name, "a RedLock round took longer than its lease allows");
        }
        for (part, released) in join_all(parts.into_iter().map(|p| async {
            let name = p.name().to_owned();
            (name, p.unlock().await)
        }))
        .await
        {
            if let Err(error) = released {
                tracing::debug!(lock = %part, %error, "could not give back a RedLock vote; it expires with its lease");
            }
        }
        Err(missed)
    }

    /// The votes of one round as they come in; once a quorum has said yes, the others get the
    /// quorum grace, and those still out then are dropped and count as failed.
    async fn count(
        &self,
        mut votes: futures::stream::FuturesUnordered<
            impl std::future::Future<Output = (usize, Vote)>,
        >,
        started: Instant,
    ) -> Vec<Vote> {
        let mut tally: Vec<Vote> = self.parts.iter().map(|_| Vote::Failed).collect();
        let (mut yes, mut until) = (0, None);
        loop {
            let next = match until {
                None => votes.next().await,
                Some(until) => match tokio::time::timeout_at(until, votes.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        tracing::debug!(lock = %self.name, out = votes.len(), "a RedLock round stops waiting for its slowest masters");
                        break;
                    }
                },
            };
            let Some((i, vote)) = next else {
                break;
            };
            yes += usize::from(matches!(vote, Vote::Yes(_)));
            tally[i] = vote;
            if yes == self.quorum() && until.is_none() {
                let grace = self.quorum_grace.unwrap_or_else(|| started.elapsed());
                until = Instant::now().checked_add(grace);
            }
        }
        tally
    }
}

/// A uniform random duration in `[0, bound]`.
fn random_below(bound: Duration) -> Duration {
    let draw = uuid::Uuid::new_v4().as_u128() as u64;
    let nanos = bound.as_nanos().min(u128::from(u64::MAX - 1)) as u64;
    Duration::from_nanos(((u128::from(draw) * u128::from(nanos + 1)) >> 64) as u64)
}
