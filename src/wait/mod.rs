//! Waiting, for everything that waits: the one wait loop ([`until_taken`]): try → get ready to
//! wait → try → wait for a turn → try; the wait of the synchronizers ([`OnChannel`]); sending a
//! request that must apply once until it is answered ([`until_answered`]); and the [`Lost`]
//! signal of a hold.
//!
//! Whatever waits says what an attempt is and how it waits between attempts, as a [`Waiting`];
//! the loop only keeps the deadline. A lock's attempt is its hold's `try_once`, and each lock type
//! makes its way of waiting as its turns (see `lock::acquire`). A RedLock's attempt is a round
//! over its masters (see `redlock`); a multi-lock waits for each part through its part's type; a
//! semaphore's, a permit's and a latch's are one script each, waiting on their channel.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Result;
use crate::meter::{Acquired, Acquiring, Meter};
use crate::primitive::Primitive;
use crate::pubsub::{Waiter, WakeRule};
use crate::shared::Shared;

mod lost;
mod on_channel;

pub use lost::Lost;
pub(crate) use on_channel::{Counted, OnChannel};

/// What an attempt that found it busy found: the most to wait before the next (`None`: no
/// bound known).
pub(crate) type Retry = Option<Duration>;

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

/// What the wait makes of an attempt's [`Try`]: a late answer is busy for no time (or, too many
/// in a row, the wait's error), so a judged attempt cannot be late.
enum Judged<T> {
    /// It took what it asked for.
    Taken(T),
    /// Busy, or late: how long to wait at most before the next attempt.
    Busy(Option<Duration>),
}

/// How many attempts in a row may be answered after their lease ran out before the wait fails.
const LATE_TRIES: u32 = 3;

/// Counts attempts answered late in a row ([`Try::Late`]), and fails the wait at [`LATE_TRIES`];
/// any other outcome starts the count again.
#[derive(Default)]
struct LateAnswers(u32);

impl LateAnswers {
    /// What the wait makes of `outcome`: a late one is busy for no time, until too many.
    fn judge<T>(&mut self, outcome: Try<T>) -> Result<Judged<T>> {
        let lease_ms = match outcome {
            Try::Taken(taken) => {
                self.0 = 0;
                return Ok(Judged::Taken(taken));
            }
            Try::Busy(retry) => {
                self.0 = 0;
                return Ok(Judged::Busy(retry));
            }
            Try::Late { lease_ms } => lease_ms,
        };
        self.0 += 1;
        if self.0 >= LATE_TRIES {
            return Err(crate::error::Error::invalid(format!(
                "a lease of {lease_ms} ms ran out before Redis's reply came back, {LATE_TRIES} \
                 times in a row: a lease must outlast a round trip to Redis"
            )));
        }
        Ok(Judged::Busy(Some(Duration::ZERO)))
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
        first: Option<Retry>,
    ) -> impl Future<Output = ()> + Send;

    /// Waits until the next attempt is due. `busy` is what the last attempt found, or `None`
    /// for the first attempt after [`start`](Waiting::start). `false` once the deadline has
    /// passed.
    fn wait_turn(
        &mut self,
        busy: Option<Retry>,
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
            Judged::Taken(taken) => {
                waiting.taken(&taken);
                return Ok(Some(taken));
            }
            Judged::Busy(_) if wait == Some(Duration::ZERO) => return Ok(None),
            Judged::Busy(retry) => first = Some(retry),
        }
    }
    waiting.start(deadline, first).await;
    let mut busy = None;
    loop {
        if !waiting.wait_turn(busy.take(), deadline).await {
            return Ok(None);
        }
        match late.judge(waiting.attempt().await?)? {
            Judged::Taken(taken) => {
                waiting.taken(&taken);
                return Ok(Some(taken));
            }
            Judged::Busy(retry) => busy = Some(retry),
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
        first: Option<Retry>,
    ) -> impl Future<Output = ()> + Send {
        self.acquiring.waits();
        self.inner.start(deadline, first)
    }

    fn wait_turn(
        &mut self,
        busy: Option<Retry>,
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
    kind: Primitive,
    name: &str,
    waiting: W,
    wait: Option<Duration>,
) -> Result<Option<W::Taken>> {
    let mut acquiring = meter.acquiring(kind, name);
    let outcome = until_taken_counted(&mut acquiring, waiting, wait).await;
    acquiring.end(Acquired::of(&outcome));
    outcome
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

/// What is left of a wait until `deadline` (all the time in the world without one); `None`
/// once it has passed.
pub(crate) fn time_left(deadline: Option<Instant>) -> Option<Duration> {
    let Some(deadline) = deadline else {
        return Some(Duration::MAX);
    };
    let now = Instant::now();
    (deadline > now).then(|| deadline - now)
}

/// The most times a request that must apply once (a release, a count-down) is sent: a lost
/// reply is retried under the same request id.
pub(crate) const TRIES: u32 = 3;

/// Sends a request that must apply once (`send(sent_before)`: a release, a count-down) until it
/// is answered: a reply Redis may or may not have applied (see
/// [`Error::is_ambiguous`](crate::Error::is_ambiguous)) is sent again, up to [`TRIES`] times in
/// all, as a retry. The outcome, and whether its request may have reached the server before.
pub(crate) async fn until_answered<T, F, Fut>(
    mut sent_before: bool,
    mut send: F,
) -> (Result<T>, bool)
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut tries = 1;
    loop {
        match send(sent_before).await {
            Err(error) if error.is_ambiguous() && tries < TRIES => {
                tries += 1;
                sent_before = true;
            }
            outcome => return (outcome, sent_before),
        }
    }
}
