//! The wait of the synchronizers (a semaphore's, a permit's, a latch's): attempts that run one
//! script each, woken by their channel's messages.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::Retry;
use super::{subscribe_for, time_left, Try, Waiting};
use crate::error::Result;
use crate::pubsub::{Waiter, Wake, WakeRule};
use crate::shared::Shared;

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

    async fn start(&mut self, deadline: Option<Instant>, first: Option<Retry>) {
        let (shared, channel, rule) = (self.shared, self.channel, self.rule);
        self.waiter = Some(subscribe_for(shared, channel, rule, self.permits, deadline).await);
        self.parked_first = first.is_none();
    }

    async fn wait_turn(&mut self, busy: Option<Retry>, deadline: Option<Instant>) -> bool {
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
