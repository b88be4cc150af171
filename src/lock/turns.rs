//! How the plain [`Lock`](crate::Lock)'s waiters take turns: one wake-up channel per lock,
//! Redisson's, on which a release wakes one waiter in every process.
//!
//! Three local rules keep that from starving anyone:
//!
//! - **In-process order.** This client's waiters queue in arrival order (the pub/sub hub wakes
//!   its first waiter), and a newcomer does not barge past them. A re-entry and a one-shot
//!   `try_lock` do try at once: neither waits behind anyone.
//! - **Hand-off grace.** When this client's release woke waiters in other processes, its own
//!   tasks hold back for a short grace or until the lock changes hands (a release not its own is
//!   heard), so the process that releases and relocks does not keep the lock among its tasks.
//!   Whether it woke any is known from the release's reply: a task that asks for the lock while
//!   a release of its client's is on its way (the lock may be free already) waits for that reply
//!   too. Kept in `handoff`; see `Config::with_handoff_grace`.
//! - **Claims.** This client's first waiter, once it lost a race to another process, claims the
//!   lock's next hand-off (`relock_claim:{<name>}`): the lock, once free, goes to it alone or to
//!   a waiter that lost more races. See `Config::with_claim_window`.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::kind::Ask;
use super::kind::Hold;
use super::kind::Turns;
use crate::pubsub::{Waiter, Wake};
use crate::registry::Place;
use crate::shared::Shared;
use crate::wait::{subscribe, time_left, Retry};

/// The turns of one plain acquire (of a [`Lock`](crate::Lock) or a
/// [`FencedLock`](crate::FencedLock)).
pub(crate) struct PlainTurns<'a> {
    hold: &'a Hold,
    one_shot: bool,
    /// Waiting behind this client's waiters, a hand-off grace, or a release of this client's
    /// that awaits its reply: the first attempt waits too.
    queue_first: bool,
    /// Waiting behind this client's waiters: park on the channel before the first attempt.
    behind_waiters: bool,
    waiter: Option<Waiter>,
    claim: ClaimGuard<'a>,
}

impl<'a> PlainTurns<'a> {
    pub(crate) fn new(hold: &'a Hold, wait: Option<Duration>) -> PlainTurns<'a> {
        let shared = &hold.shared;
        let channel = &hold.keys.channel;
        let one_shot = wait == Some(Duration::ZERO);
        let behind_waiters = shared.hub.waiters(channel) > 0;
        // A release of this client's whose reply is not in yet may have freed the lock and woken
        // waiters elsewhere, which are still receiving the wake-up: a newcomer that tried now
        // would take the lock back before them. It waits for the reply, and for the grace if the
        // reply sets one (see `next_turn`). The reply is asked about first: a reply sets its
        // grace before it stops awaiting, so one that comes in between is not missed.
        let handing_off = || {
            shared.handoffs.awaiting_reply(channel)
                || shared.handoffs.pending(&shared.hub, channel).is_some()
        };
        let queue_first = !one_shot
            && (behind_waiters || handing_off())
            && shared.registry.guards(&hold.hold_key()) == 0;
        PlainTurns {
            hold,
            one_shot,
            queue_first,
            behind_waiters: queue_first && behind_waiters,
            waiter: None,
            claim: ClaimGuard::new(hold),
        }
    }
}

impl Turns for PlainTurns<'_> {
    fn queue_first(&self) -> bool {
        self.queue_first
    }

    fn ask(&mut self) -> Ask {
        let first = self.waiter.as_ref().is_some_and(Waiter::is_first);
        match self.claim.next(first, self.hold.shared.claims) {
            Some(priority) if !self.one_shot => Ask::Claim(priority),
            _ => Ask::Now,
        }
    }

    fn start(&mut self, deadline: Option<Instant>, first: Option<Retry>) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let (shared, channel) = (&self.hold.shared, &self.hold.keys.channel);
            let rule = self.hold.kind.wakes();
            self.waiter = Some(subscribe(shared, channel, rule, deadline).await);
            if let Some(Some(ttl)) = first {
                shared.hub.note_busy_until(channel, Instant::now() + ttl);
            }
        })
    }

    fn wait_turn(&mut self, busy: Option<Retry>, deadline: Option<Instant>) -> BoxFuture<'_, bool> {
        Box::pin(self.next_turn(busy, deadline))
    }

    fn acquired(mut self: Box<Self>) {
        // Taking the lock used up any claim of ours.
        self.claim.claimed = false;
        if let Some(waiter) = self.waiter.take() {
            // The waiters behind this one park until this hold may end, at the latest: if it
            // ends by its lease running out, no message comes.
            let lease = Duration::from_millis(self.hold.lease_ms);
            let shared = &self.hold.shared;
            shared
                .hub
                .note_busy_until(&self.hold.keys.channel, Instant::now() + lease);
            waiter.acquired();
        }
    }
}

impl PlainTurns<'_> {
    /// See [`Turns::wait_turn`].
    async fn next_turn(&mut self, busy: Option<Retry>, deadline: Option<Instant>) -> bool {
        let shared = &self.hold.shared;
        let channel = &self.hold.keys.channel;
        let waiter = self.waiter.as_ref().expect("started before waiting");
        if let Some(Some(ttl)) = busy {
            shared.hub.note_busy_until(channel, Instant::now() + ttl);
        }
        if let Some(ttl) = busy {
            let Some(remaining) = time_left(deadline) else {
                return false;
            };
            // Without a known TTL (a lock without expiry), re-check now and then: pub/sub is
            // only a hint.
            let bound = ttl
                .unwrap_or(shared.watchdog_timeout)
                .max(Duration::from_millis(1))
                .min(remaining);
            if waiter.wait(bound).await == Wake::Timeout {
                tracing::trace!("woke on the holder's TTL, not a message");
                if !waiter.is_first() && !park_behind(shared, channel, waiter, deadline).await {
                    return false;
                }
            }
        } else if std::mem::take(&mut self.behind_waiters)
            && !park_behind(shared, channel, waiter, deadline).await
        {
            return false;
        }
        // This client's own release woke other processes' waiters: they go first, for the grace
        // or until the lock changes hands (a release message not our own). Not before a waiter
        // that has claimed the hand-off, though: it lost a race already, and the others may be
        // waiting for it to use its claim. A release of this client's own whose reply is not in
        // yet may have woken this waiter, or freed the lock just before this newcomer came:
        // whether a grace follows is known only from that reply. The reply is asked about before
        // the grace: a reply sets its grace before it stops awaiting, so one that comes in
        // between is not missed. After any wait both are asked again: another task of this
        // client may have released the lock meanwhile (a case the model checker found).
        loop {
            let Some(remaining) = time_left(deadline) else {
                return false;
            };
            let bound = remaining.min(shared.command_timeout);
            let awaited =
                !self.claim.claimed && shared.handoffs.await_release_reply(channel, bound).await;
            let grace = shared
                .handoffs
                .pending(&shared.hub, channel)
                .filter(|_| !self.claim.claimed);
            if let Some(grace) = grace {
                let Some(remaining) = time_left(deadline) else {
                    return false;
                };
                waiter.wait(grace.min(remaining)).await;
            } else if !awaited {
                return true;
            }
        }
    }
}

/// How a waiter behind others of this client's waits when no message woke it: a queued
/// newcomer before its first attempt, or a waiter whose wait ended on the holder's TTL. It parks
/// until a message wakes it or the lock's holder may be gone, as this client last learned it (a
/// lease that runs out publishes nothing), a little later than the waiters ahead of it wake for
/// that; when one of them took the lock meanwhile, it parks again until that hold may end. Then,
/// while a waiter ahead of it is still queued (on a loaded machine its timer or its attempt may
/// run late), it lets that one try first: a try shows as a new lease end (taken, or found busy)
/// or as the queue moving on. A waiter ahead that does neither within a command timeout (a wait
/// no longer polled) is not waited for any longer. `false` once the deadline has passed.
async fn park_behind(
    shared: &Shared,
    channel: &str,
    waiter: &Waiter,
    deadline: Option<Instant>,
) -> bool {
    let slack = Duration::from_millis(shared.claim_window_ms.max(1));
    let mut overdue = None;
    loop {
        let Some(remaining) = time_left(deadline) else {
            return false;
        };
        let now = Instant::now();
        let bound = match shared.hub.busy_until(channel) {
            Some(until) if until + slack > now => {
                overdue = None;
                until + slack - now
            }
            Some(_)
                if !waiter.is_first()
                    && *overdue.get_or_insert(now) + shared.command_timeout > now =>
            {
                slack
            }
            Some(_) => return true,
            None => {
                waiter.wait(slack.min(remaining)).await;
                return true;
            }
        };
        if waiter.wait(bound.min(remaining)).await == Wake::Message {
            return true;
        }
    }
}

/// A waiter's claim on a lock's next hand-off. Dropped while `claimed` (the waiter gave up, ran
/// out of time or failed), it withdraws the claim in the background, so other waiters need not
/// sit out the claim window for a waiter that left. (A read-write lock's waiting writer claims
/// too; see `rw`.) The claim is counted in the client's registry until then, so a shutdown that
/// closes the connection first withdraws it itself.
pub(super) struct ClaimGuard<'a> {
    hold: &'a Hold,
    /// Whether an attempt may have left a claim of this waiter's.
    pub(super) claimed: bool,
    /// Whether this waiter is counted in the client's registry of claims.
    counted: bool,
    /// Attempts made as this client's first waiter.
    tries: u32,
}

impl<'a> ClaimGuard<'a> {
    pub(super) fn new(hold: &'a Hold) -> ClaimGuard<'a> {
        ClaimGuard {
            hold,
            claimed: false,
            counted: false,
            tries: 0,
        }
    }

    /// The next attempt claims: counted in the client's registry before it is sent.
    pub(super) fn claim(&mut self) {
        self.claimed = true;
        if !self.counted {
            self.counted = true;
            let hold = self.hold;
            let held = hold.kind.held();
            let (name, field) = (&hold.keys.name, &hold.field);
            hold.shared.registry.enter(Place::Claim, name, field, held);
        }
    }

    /// The claim priority of the next attempt, if it claims. This client's first waiter claims
    /// the next hand-off from its second try on (each failed try since it became first was a
    /// race lost to another process), so it cannot lose race after race; between claimants, the
    /// one that lost most goes first. Its first try claims nothing: most hand-offs then still go
    /// to whichever waiter is quickest, and only a waiter that lost one waits for its turn.
    fn next(&mut self, first: bool, claims: bool) -> Option<u32> {
        if !first || !claims {
            return None;
        }
        self.tries += 1;
        if self.tries < 2 {
            return None;
        }
        self.claim();
        Some(self.tries - 1)
    }
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let hold = self.hold.clone();
        if !self.claimed {
            // Taking the lock spent the claim.
            hold.shared
                .registry
                .leave(Place::Claim, &hold.keys.name, &hold.field);
            return;
        }
        let shared = hold.shared.clone();
        // Without a runtime to run it, the claim lapses with its window (or goes at shutdown).
        shared.background.spawn(Box::pin(async move {
            let shared = &hold.shared;
            let unclaim = hold
                .kind
                .unclaim(&shared.redis, &hold.keys, &hold.field, shared.publish);
            if let Err(error) = unclaim.await {
                tracing::debug!(lock = %hold.keys.name, %error, "could not withdraw a claim; it lapses with its window");
            }
            shared.registry.leave(Place::Claim, &hold.keys.name, &hold.field);
        }));
    }
}
