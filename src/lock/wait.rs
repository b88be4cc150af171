//! The wait loop every lock type shares: try → get ready to wait → try → wait for a turn → try.
//!
//! What differs between types is how a waiter waits for its turn and what it asks of each
//! attempt; each type makes that as its [`Turns`] (`LockType::turns`). The loop itself only
//! counts attempts, keeps the deadline and traces the outcome.
//! An attempt is [`Hold::try_once`].

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;
use tracing::{field::Empty, Instrument};

use super::attempt::Attempt;
use super::guard::LockGuard;
use super::hold::Hold;
use super::kind::Ask;
use crate::error::Result;
use crate::holds::Registration;
use crate::pubsub::{Waiter, WakeRule};
use crate::shared::Shared;

/// How the waiters of one lock type take turns. One value serves one acquire; dropped before
/// [`acquired`](Turns::acquired), it undoes what waiting left on Redis (a claim, a place in a
/// queue), in the background. Each type makes its own ([`LockType::turns`]).
///
/// [`LockType::turns`]: super::kind::LockType::turns
pub(crate) trait Turns: Send {
    /// Whether the first attempt waits for its turn before it is sent, instead of at once.
    fn queue_first(&self) -> bool {
        false
    }

    /// What the next attempt asks for.
    fn ask(&mut self) -> Ask;

    /// Gets ready to wait (subscribes to the wake-up, for instance), after a first attempt that
    /// found the lock busy (`first`: what it found) or instead of one (`first` is `None`).
    fn start(
        &mut self,
        deadline: Option<Instant>,
        first: Option<Option<Duration>>,
    ) -> BoxFuture<'_, ()>;

    /// Waits until the next attempt is due. `busy` is what the last attempt found (the most to
    /// wait before trying again; `None` inside when no bound is known), or `None` for the first
    /// attempt after [`start`](Turns::start). `false` once the deadline has passed.
    fn wait_turn(
        &mut self,
        busy: Option<Option<Duration>>,
        deadline: Option<Instant>,
    ) -> BoxFuture<'_, bool>;

    /// The attempt took the lock.
    fn acquired(self: Box<Self>);
}

/// Takes `hold`, waiting at most `wait` (`None`: as long as it takes; zero: one attempt).
pub(crate) async fn acquire(
    hold: &Hold,
    mut turns: Box<dyn Turns + '_>,
    wait: Option<Duration>,
) -> Result<Option<LockGuard>> {
    let span = tracing::debug_span!(
        "relock.acquire",
        lock = %hold.keys.name,
        owner = %hold.owner,
        waited_ms = Empty,
        attempts = Empty,
        acquired = Empty,
    );
    let started = Instant::now();
    let deadline = wait.and_then(|wait| started.checked_add(wait));
    let mut attempts = 0u32;
    let outcome = async {
        let mut first = None;
        if !turns.queue_first() {
            attempts += 1;
            match hold.try_once(turns.ask()).await? {
                Attempt::Acquired(registration, token) => {
                    turns.acquired();
                    return guard(hold, registration, token).await.map(Some);
                }
                Attempt::Busy(_) if wait == Some(Duration::ZERO) => return Ok(None),
                Attempt::Busy(retry) => first = Some(retry),
            }
        }
        turns.start(deadline, first).await;
        let mut busy = None;
        loop {
            if !turns.wait_turn(busy.take(), deadline).await {
                return Ok(None);
            }
            attempts += 1;
            match hold.try_once(turns.ask()).await? {
                Attempt::Acquired(registration, token) => {
                    turns.acquired();
                    return guard(hold, registration, token).await.map(Some);
                }
                Attempt::Busy(retry) => busy = Some(retry),
            }
        }
    }
    .instrument(span.clone())
    .await;
    let waited_ms = started.elapsed().as_millis() as u64;
    span.record("waited_ms", waited_ms);
    span.record("attempts", attempts);
    span.record("acquired", matches!(outcome, Ok(Some(_))));
    let lock = &hold.keys.name;
    match &outcome {
        Ok(Some(guard)) => {
            tracing::debug!(lock = %guard.name(), owner = %guard.owner(), waited_ms, attempts, "lock acquired")
        }
        Ok(None) => tracing::debug!(%lock, waited_ms, attempts, "lock not acquired: busy"),
        Err(error) => tracing::debug!(%lock, waited_ms, attempts, %error, "lock not acquired"),
    }
    outcome
}

/// The guard of a hold just taken; with replica sync on, once a replica has the hold (else the
/// hold is released again and the acquire fails).
async fn guard(hold: &Hold, registration: Registration, token: Option<u64>) -> Result<LockGuard> {
    let guard = LockGuard::new(hold.clone(), registration, token);
    if let Some(sync) = &hold.shared.replica_sync {
        // Boxed, like script calls: it holds a fred command future.
        if let Err(unsynced) = Box::pin(hold.await_replica(sync)).await {
            // Boxed: a release future is large, and every waiting lock() would carry it.
            if let Err(error) = Box::pin(guard.unlock()).await {
                tracing::warn!(lock = %hold.keys.name, %error, "could not release an unreplicated hold; it expires with its lease");
            }
            return Err(unsynced);
        }
    }
    Ok(guard)
}

/// Registers a waiter on `channel`, woken as `rule` says, and waits until its subscription is
/// confirmed, at most a command timeout and never past `deadline` (a wait that starts
/// unconfirmed still ends: every wait is bounded).
pub(crate) async fn subscribe(
    shared: &Shared,
    channel: &str,
    rule: WakeRule,
    deadline: Option<Instant>,
) -> Waiter {
    let mut waiter = shared.hub.register(channel, rule);
    let confirm_by = Instant::now() + shared.command_timeout;
    waiter
        .subscribed(deadline.map_or(confirm_by, |d| d.min(confirm_by)))
        .await;
    waiter
}

/// What is left of a wait until `deadline` (all the time in the world without one); `None`
/// once it has passed.
pub(crate) fn time_left(deadline: Option<Instant>) -> Option<Duration> {
    let Some(deadline) = deadline else {
        return Some(Duration::MAX);
    };
    let now = Instant::now();
    (deadline > now).then(|| deadline - now)
}
