//! The one wait loop ([`until_taken`]): try → get ready to wait → try → wait for a turn → try.
//!
//! Whatever waits says what an attempt is and how it waits between attempts, as a [`Waiting`];
//! the loop only keeps the deadline. A lock's attempt is [`Hold::try_once`], and each type makes
//! its way of waiting as its [`Turns`] (`LockType::turns`); [`acquire`] runs them and traces the
//! outcome. A RedLock's attempt is a round over its masters (see `redlock`); a multi-lock waits
//! for each part through its part's type.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{field::Empty, Instrument};

use super::attempt::Attempt;
use super::guard::LockGuard;
use super::kind::{Hold, Turns};
use crate::error::Result;
use crate::meter::{Acquired, Acquiring, Kind, Meter};
use crate::pubsub::{Waiter, Wake, WakeRule};
use crate::registry::Registration;
use crate::shared::Shared;

/// What one attempt found.
pub(crate) enum Try<T> {
    /// It took what it asked for.
    Taken(T),
    /// Busy: how long to wait at most before the next attempt (`None`: no bound known).
    Busy(Option<Duration>),
    /// Taken, but answered after its lease of `lease_ms` could have run out, so given back: the
    /// next attempt goes at once. [`LATE_TRIES`] in a row fail the wait: a lease shorter than a
    /// round trip to Redis can never be kept.
    Late { lease_ms: u64 },
}

/// How many attempts in a row may be answered after their lease ran out before the wait fails.
const LATE_TRIES: u32 = 3;

/// Counts attempts answered late in a row ([`Try::Late`]), and fails the wait at [`LATE_TRIES`];
/// any other outcome starts the count again.
#[derive(Default)]
struct LateAnswers(u32);

impl LateAnswers {
    /// What the wait makes of `outcome`: a late one is busy for no time, until too many.
    fn judge<T>(&mut self, outcome: Try<T>) -> Result<Try<T>> {
        let Try::Late { lease_ms } = outcome else {
            self.0 = 0;
            return Ok(outcome);
        };
        self.0 += 1;
        if self.0 >= LATE_TRIES {
            return Err(crate::error::Error::invalid(format!(
                "a lease of {lease_ms} ms ran out before Redis's reply came back, {LATE_TRIES} \
                 times in a row: a lease must outlast a round trip to Redis"
            )));
        }
        Ok(Try::Busy(Some(Duration::ZERO)))
    }
}

/// Something a caller waits for: its attempts, and how it takes turns between them (for a lock,
/// its type's [`Turns`]; for a RedLock, its rounds).
pub(crate) trait Waiting: Send {
    /// What an attempt that succeeds gives.
    type Taken: Send;

    /// Whether the first attempt waits for its turn before it is sent, instead of at once.
    fn queue_first(&self) -> bool {
        false
    }

    /// One attempt.
    fn attempt(&mut self) -> impl Future<Output = Result<Try<Self::Taken>>> + Send;

    /// Gets ready to wait, after a first attempt that found it busy (`first`: what it found)
    /// or instead of one (`first` is `None`).
    fn start(
        &mut self,
        deadline: Option<Instant>,
        first: Option<Option<Duration>>,
    ) -> impl Future<Output = ()> + Send;

    /// Waits until the next attempt is due. `busy` is what the last attempt found, or `None`
    /// for the first attempt after [`start`](Waiting::start). `false` once the deadline has
    /// passed.
    fn wait_turn(
        &mut self,
        busy: Option<Option<Duration>>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = bool> + Send;

    /// The last attempt took `taken`; what waiting set up is spent, not undone.
    fn taken(self, taken: &Self::Taken);
}

/// The wait loop: try → get ready to wait → try → wait for a turn → try, until an attempt takes
/// it, an attempt fails, or the wait (`None`: as long as it takes; zero: one attempt) runs out
/// (`Ok(None)`).
pub(crate) async fn until_taken<W: Waiting>(
    mut waiting: W,
    wait: Option<Duration>,
) -> Result<Option<W::Taken>> {
    let deadline = wait.and_then(|wait| Instant::now().checked_add(wait));
    let mut late = LateAnswers::default();
    let mut first = None;
    if !waiting.queue_first() {
        match late.judge(waiting.attempt().await?)? {
            Try::Taken(taken) => {
                waiting.taken(&taken);
                return Ok(Some(taken));
            }
            Try::Busy(_) if wait == Some(Duration::ZERO) => return Ok(None),
            Try::Busy(retry) => first = Some(retry),
            Try::Late { .. } => unreachable!("judged"),
        }
    }
    waiting.start(deadline, first).await;
    let mut busy = None;
    loop {
        if !waiting.wait_turn(busy.take(), deadline).await {
            return Ok(None);
        }
        match late.judge(waiting.attempt().await?)? {
            Try::Taken(taken) => {
                waiting.taken(&taken);
                return Ok(Some(taken));
            }
            Try::Busy(retry) => busy = Some(retry),
            Try::Late { .. } => unreachable!("judged"),
        }
    }
}

/// A wait that counts its attempts, and that it waited, into an acquire being measured.
struct Tallied<'m, 'a, W> {
    inner: W,
    acquiring: &'m mut Acquiring<'a>,
}

impl<W: Waiting> Waiting for Tallied<'_, '_, W> {
    type Taken = W::Taken;

    fn queue_first(&self) -> bool {
        self.inner.queue_first()
    }

    fn attempt(&mut self) -> impl Future<Output = Result<Try<Self::Taken>>> + Send {
        self.acquiring.attempt();
        self.inner.attempt()
    }

    fn start(
        &mut self,
        deadline: Option<Instant>,
        first: Option<Option<Duration>>,
    ) -> impl Future<Output = ()> + Send {
        self.acquiring.waits();
        self.inner.start(deadline, first)
    }

    fn wait_turn(
        &mut self,
        busy: Option<Option<Duration>>,
        deadline: Option<Instant>,
    ) -> impl Future<Output = bool> + Send {
        self.inner.wait_turn(busy, deadline)
    }

    fn taken(self, taken: &Self::Taken) {
        self.inner.taken(taken)
    }
}

/// [`until_taken`], counted into `acquiring` (its attempts, and whether it waited); the caller
/// ends it.
pub(crate) async fn until_taken_counted<W: Waiting>(
    acquiring: &mut Acquiring<'_>,
    waiting: W,
    wait: Option<Duration>,
) -> Result<Option<W::Taken>> {
    until_taken(
        Tallied {
            inner: waiting,
            acquiring,
        },
        wait,
    )
    .await
}

/// [`until_taken`], counted by `meter` as an acquire of `kind` on `name`.
pub(crate) async fn measured<W: Waiting>(
    meter: &Meter,
    kind: Kind,
    name: &str,
    waiting: W,
    wait: Option<Duration>,
) -> Result<Option<W::Taken>> {
    let mut acquiring = meter.acquiring(kind, name);
    let outcome = until_taken_counted(&mut acquiring, waiting, wait).await;
    acquiring.end(Acquired::of(&outcome));
    outcome
}

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
        first: Option<Option<Duration>>,
    ) -> impl Future<Output = ()> + Send {
        self.turns.start(deadline, first)
    }

    fn wait_turn(
        &mut self,
        busy: Option<Option<Duration>>,
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

/// Registers a waiter on `channel`, woken as `rule` says, and waits until its subscription is
/// confirmed, at most a command timeout and never past `deadline` (a wait that starts
/// unconfirmed still ends: every wait is bounded).
pub(crate) async fn subscribe(
    shared: &Shared,
    channel: &str,
    rule: WakeRule,
    deadline: Option<Instant>,
) -> Waiter {
    subscribe_for(shared, channel, rule, 1, deadline).await
}

/// As [`subscribe`], for a waiter that waits for `permits` permits (see `Wakes::Permits`).
pub(crate) async fn subscribe_for(
    shared: &Shared,
    channel: &str,
    rule: WakeRule,
    permits: u64,
    deadline: Option<Instant>,
) -> Waiter {
    let mut waiter = shared.hub.register(channel, rule, permits);
    let confirm_by = Instant::now() + shared.command_timeout;
    waiter
        .subscribed(deadline.map_or(confirm_by, |d| d.min(confirm_by)))
        .await;
    waiter
}

/// What a synchronizer's attempt took, and how many permits it saw left for the waiters behind
/// it (0 for a latch).
pub(crate) type Counted<T> = (T, u64);

/// The waits of the synchronizers (a semaphore's, a latch's): attempts that run one script, a
/// channel whose messages say when to try again, and a poll when none comes. This client's
/// waiters take turns in arrival order: a newcomer parks behind the waiters already there
/// instead of trying first, and a message wakes them as the channel's rule says (a semaphore's
/// as many as the permits it frees serve, the first always). Each wait is bounded by the poll
/// interval (with jitter) and by what the last attempt found (`Try::Busy`), so a lost message
/// costs latency, never a hang.
pub(crate) struct OnChannel<'a, F> {
    shared: &'a Shared,
    channel: &'a str,
    rule: WakeRule,
    /// What this waiter waits for, in permits (1 but for a semaphore's).
    permits: u64,
    queue_first: bool,
    /// The first wait after subscribing parks (a newcomer behind others) instead of trying.
    parked_first: bool,
    /// A message said the wait is over (a latch at zero): the next attempt need not look.
    done: bool,
    waiter: Option<Waiter>,
    attempt: F,
}

impl<'a, F> OnChannel<'a, F> {
    /// The wait for `permits` on `channel`, by `attempt` (given whether a message said the wait
    /// is over); `takes_turns`: it waits behind this client's waiters there (not a single
    /// attempt, nor a latch's waiter, which goes when every other does).
    pub(crate) fn new(
        shared: &'a Shared,
        channel: &'a str,
        rule: WakeRule,
        permits: u64,
        takes_turns: bool,
        attempt: F,
    ) -> OnChannel<'a, F> {
        OnChannel {
            shared,
            channel,
            rule,
            permits,
            queue_first: takes_turns && shared.hub.waiters(channel) > 0,
            parked_first: false,
            done: false,
            waiter: None,
            attempt,
        }
    }
}

impl<T, F, Fut> Waiting for OnChannel<'_, F>
where
    T: Send,
    F: FnMut(bool) -> Fut + Send,
    Fut: Future<Output = Result<Try<Counted<T>>>> + Send,
{
    type Taken = Counted<T>;

    fn queue_first(&self) -> bool {
        self.queue_first
    }

    fn attempt(&mut self) -> impl Future<Output = Result<Try<Counted<T>>>> + Send {
        (self.attempt)(std::mem::take(&mut self.done))
    }

    async fn start(&mut self, deadline: Option<Instant>, first: Option<Option<Duration>>) {
        let (shared, channel, rule) = (self.shared, self.channel, self.rule);
        self.waiter = Some(subscribe_for(shared, channel, rule, self.permits, deadline).await);
        self.parked_first = first.is_none();
    }

    async fn wait_turn(
        &mut self,
        busy: Option<Option<Duration>>,
        deadline: Option<Instant>,
    ) -> bool {
        let Some(remaining) = time_left(deadline) else {
            return false;
        };
        if busy.is_none() && !std::mem::take(&mut self.parked_first) {
            // The attempt right after subscribing: a message sent since the last attempt
            // found nobody listening yet.
            return true;
        }
        let hint = busy.flatten().unwrap_or(Duration::MAX);
        let bound = self.shared.poll().min(hint).min(remaining);
        let waiter = self.waiter.as_ref().expect("started before waiting");
        self.done = waiter.wait(bound.max(Duration::from_millis(1))).await == Wake::Done;
        true
    }

    fn taken(self, taken: &Counted<T>) {
        if let Some(waiter) = self.waiter {
            // A message that came while the attempt was in flight counted this waiter among
            // those it woke, but may tell of permits given back after the attempt ran: it is
            // passed on to the next waiter rather than dropped with this one.
            let woken_meanwhile = waiter.is_woken();
            waiter.acquired();
            let left = if woken_meanwhile {
                taken.1.max(1)
            } else {
                taken.1
            };
            if left > 0 {
                let wakes = crate::pubsub::Wakes::Permits(left);
                self.shared.hub.wake(self.channel, wakes);
            }
        }
    }
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
