//! Taking a hold: the wait loop run over a hold's attempts and its type's turns, traced and
//! counted.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{field::Empty, Instrument};

use super::attempt::Attempt;
use super::guard::LockGuard;
use super::kind::{Hold, Turns};
use crate::error::Result;
use crate::meter::Acquired;
use crate::registry::Registration;
use crate::wait::{until_taken_counted, Retry, Try, Waiting};

/// A hold waited for: its attempts ([`Hold::try_once`]) and its type's turns.
struct Turning<'h> {
    hold: &'h Hold,
    turns: Box<dyn Turns + 'h>,
}

impl Waiting for Turning<'_> {
    type Taken = (Registration, Option<u64>);

    fn queue_first(&self) -> bool {
        self.turns.queue_first()
    }

    async fn attempt(&mut self) -> Result<Try<Self::Taken>> {
        Ok(match self.hold.try_once(self.turns.ask()).await? {
            Attempt::Acquired(registration, token) => Try::Taken((registration, token)),
            Attempt::Busy(retry) => Try::Busy(retry),
            Attempt::Late => Try::Late {
                lease_ms: self.hold.lease_ms,
            },
        })
    }

    fn start(
        &mut self,
        deadline: Option<Instant>,
        first: Option<Retry>,
    ) -> impl Future<Output = ()> + Send {
        self.turns.start(deadline, first)
    }

    fn wait_turn(
        &mut self,
        busy: Option<Retry>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = bool> + Send {
        self.turns.wait_turn(busy, deadline)
    }

    fn taken(self, _taken: &Self::Taken) {
        self.turns.acquired();
    }
}

/// Takes `hold`, waiting at most `wait` (`None`: as long as it takes; zero: one attempt),
/// taking turns as `turns` say.
pub(crate) async fn acquire(
    hold: &Hold,
    turns: Box<dyn Turns + '_>,
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
    let kind = hold.kind.metered();
    // Counts the attempts and the time for the metrics and for the trace alike.
    let mut acquiring = hold.shared.meter().acquiring(kind, &hold.keys.name);
    let outcome = async {
        let waiting = Turning { hold, turns };
        match until_taken_counted(&mut acquiring, waiting, wait).await? {
            Some((registration, token)) => guard(hold, registration, token).await.map(Some),
            None => Ok(None),
        }
    }
    .instrument(span.clone())
    .await;
    let (attempts, waited_ms) = (acquiring.attempts(), acquiring.elapsed().as_millis() as u64);
    acquiring.end(Acquired::of(&outcome));
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
