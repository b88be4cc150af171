//! The model's steps: what each client may do next (its fair acquire, wait, leave and release
//! as relock's code runs them) and what the world may do (deliver or lose a message, lose a
//! reply, crash a client, let time pass to the next event).

use crate::server::Reply;

use super::calls::{self, Log, ReleaseArgs};
use super::state::{
    channel, field, live_head, locked, queue, Cancelled, Client, FairState, Op, Phase, LEASE,
    RENEW_EVERY, REPLAY_TTL, RETRY_BY, TRIES,
};
use super::{FairModel, Mutation};

/// One step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Client `i` sends an acquire attempt ("wait") and gets its reply: the first of a
    /// `lock()` (or a re-entry), or the next after its wait ended (its message, or its timer).
    Acquire(usize),
    /// Client `i`'s first attempt found the lock busy: it subscribes to its own channel, then
    /// tries again at once.
    Subscribe(usize),
    /// Client `i`'s waiting `lock()` is dropped.
    Cancel(usize),
    /// Client `i`'s cancelled acquire leaves the queue (in the background).
    Leave(usize),
    /// Client `i` sends a release and gets its reply.
    Release(usize),
    /// Client `i` sends a release; the script runs but the reply is lost (a fault).
    ReleaseReplyLost(usize),
    /// A published wake-up reaches client `i`.
    Deliver(usize),
    /// A published wake-up for client `i` is lost (a fault).
    LoseMessage(usize),
    /// Client `i`'s process dies (a fault).
    Crash(usize),
    /// Client `i`, about to lock again while its holds lapsed locally, drops its field on
    /// Redis first (`Sending::gate`, `Registry::lapsed_hold`, `Hold::release_orphan`).
    DropLost(usize),
    /// Time passes to the next event: a key's expiry, a waiter's timer, a retry's latest send.
    Tick,
}

impl FairModel {
    /// The steps enabled in `s`.
    pub(super) fn enabled(&self, s: &FairState, actions: &mut Vec<Action>) {
        let now = s.server.now();
        let fault = s.faults < self.max_faults;
        for (i, c) in s.clients.iter().enumerate() {
            let next = self.plans[i].get(c.pc as usize).copied();
            match c.phase {
                Phase::Crashed => continue,
                Phase::Idle => match next {
                    Some(Op::Lock)
                        if c.holds > 0
                            && now >= c.deadline
                            && self.mutation != Mutation::ReentersLostHold =>
                    {
                        actions.push(Action::DropLost(i));
                    }
                    Some(Op::Lock) => actions.push(Action::Acquire(i)),
                    Some(Op::Unlock) if c.holds == 0 && c.stale > 0 => {
                        actions.push(Action::Release(i));
                    }
                    Some(Op::Unlock) if c.holds > 0 => {
                        actions.push(Action::Release(i));
                        if fault && self.lose_reply {
                            actions.push(Action::ReleaseReplyLost(i));
                        }
                    }
                    _ => {}
                },
                Phase::Subscribing => actions.push(Action::Subscribe(i)),
                Phase::Waiting { until } => {
                    if c.woken || now >= until {
                        actions.push(Action::Acquire(i));
                    }
                }
                Phase::Releasing { tries, .. } => {
                    actions.push(Action::Release(i));
                    if fault && self.lose_reply && tries + 1 < TRIES {
                        actions.push(Action::ReleaseReplyLost(i));
                    }
                }
                Phase::Leaving => actions.push(Action::Leave(i)),
            }
            if c.waits() && s.cancels < self.max_cancels && self.cancellable[i] {
                actions.push(Action::Cancel(i));
            }
            if c.inbox {
                actions.push(Action::Deliver(i));
                if fault && self.lose_message {
                    actions.push(Action::LoseMessage(i));
                }
            }
            // Only a client with something in flight or held: a crash of one before or after
            // its plan changes nothing the others see.
            let busy = c.phase != Phase::Idle || c.holds > 0;
            if fault && self.crash && busy {
                actions.push(Action::Crash(i));
            }
        }
        if self.next_event(s).is_some() {
            actions.push(Action::Tick);
        }
    }

    /// The next moment something is due after now, within the horizon. `None` also while a
    /// client's next step is due now: a live process subscribes, runs its due timer and sends
    /// its retry before the clock passes it (the timing relock's liveness rule assumes: a
    /// waiter renews well within W).
    pub(super) fn next_event(&self, s: &FairState) -> Option<u64> {
        let now = s.server.now();
        let mut events = Vec::new();
        for c in &s.clients {
            match c.phase {
                Phase::Subscribing => return None,
                Phase::Waiting { until } if until <= now => return None,
                Phase::Waiting { until } => events.push(until),
                Phase::Releasing { sent_at, .. } if sent_at + RETRY_BY <= now => return None,
                Phase::Releasing { sent_at, .. } => events.push(sent_at + RETRY_BY),
                _ => {}
            }
        }
        events
            .into_iter()
            .chain(s.server.next_expiry())
            .filter(|&t| t > now && t <= self.horizon)
            .min()
    }

    /// The state after `action` in `s`, with what it sent in `log`.
    pub(super) fn step(&self, s: &FairState, action: Action, log: &mut Log) -> FairState {
        let mut s = s.clone();
        match action {
            Action::Acquire(i) => {
                s.clients[i].woken = false;
                self.attempt(&mut s, i, log);
            }
            Action::DropLost(i) => {
                // `Sending::gate` after a local loss: a release with a TTL of 0 under a request
                // of its own, asked to write its replay key, which the sweeper deletes once the
                // reply is in; the lost guards are stale from here on.
                let c = &mut s.clients[i];
                c.requests += 1;
                let how = ReleaseArgs {
                    request: c.requests,
                    keep: 0,
                    sent_before: false,
                    replay_last: true,
                };
                calls::release(&self.scripts, &mut s.server, log, i, &how);
                calls::sweep(&mut s.server, log, i, how.request);
                let c = &mut s.clients[i];
                (c.stale, c.holds, c.deadline) = (c.stale + c.holds, 0, 0);
            }
            Action::Subscribe(i) => {
                s.server.subscribe(channel(i).as_bytes());
                s.clients[i].subscribed = true;
                self.attempt(&mut s, i, log);
            }
            Action::Cancel(i) => {
                s.cancels += 1;
                leave_wait(&mut s, i);
                let c = &mut s.clients[i];
                c.pc = self.plans[i].len() as u8;
                c.ticket = None;
                if self.mutation == Mutation::SkipLeave {
                    (c.cancelled, c.phase) = (Cancelled::Left, Phase::Idle);
                } else {
                    (c.cancelled, c.phase) = (Cancelled::Pending, Phase::Leaving);
                }
            }
            Action::Leave(i) => {
                let reply = calls::leave(&self.scripts, &mut s.server, log, i);
                assert!(
                    matches!(reply, Reply::Int(_)),
                    "FAIR_LEAVE answered {reply:?}"
                );
                let c = &mut s.clients[i];
                (c.cancelled, c.phase) = (Cancelled::Left, Phase::Idle);
            }
            Action::Release(i) => self.release(&mut s, i, false, log),
            Action::ReleaseReplyLost(i) => self.release(&mut s, i, true, log),
            Action::Deliver(i) => {
                let c = &mut s.clients[i];
                c.inbox = false;
                c.woken |= c.subscribed;
            }
            Action::LoseMessage(i) => {
                s.faults += 1;
                let c = &mut s.clients[i];
                c.inbox = false;
                c.missed |= c.subscribed;
            }
            Action::Crash(i) => {
                s.faults += 1;
                if s.clients[i].subscribed {
                    s.server.unsubscribe(channel(i).as_bytes());
                }
                let queued = queue(&s.server).contains(&field(i).into_bytes());
                s.clients[i] = Client {
                    phase: Phase::Crashed,
                    died_queued: queued,
                    ..Client::new()
                };
            }
            Action::Tick => {
                let at = self.next_event(&s).expect("enabled");
                s.server.advance_to(at);
            }
        }
        deliver(&mut s);
        let now = s.server.now();
        let held = locked(&s.server);
        s.free_since = if held {
            None
        } else {
            s.free_since.or(Some(now))
        };
        let head = live_head(&s.server).map(|i| i as u8);
        if head != s.head.map(|(h, _, _)| h) {
            s.head = head.map(|h| (h, now, held));
        }
        s
    }

    /// `Hold::try_once` with `Ask::Queue`, and what `until_taken` / `FairTurns` make of its
    /// answer.
    fn attempt(&self, s: &mut FairState, i: usize, log: &mut Log) {
        let now = s.server.now();
        let held_before = super::state::redis_holds(&s.server, i);
        let reply = calls::acquire(&self.scripts, &mut s.server, log, i);
        // Ghost: the order of queuing.
        if s.clients[i].ticket.is_none() && queue(&s.server).contains(&field(i).into_bytes()) {
            s.clients[i].ticket = Some(s.next_ticket);
            s.next_ticket += 1;
        }
        match reply {
            Reply::Nil => {
                let c = &mut s.clients[i];
                if c.holds > 0 && now >= c.deadline {
                    // A lapsed generation: its guards' releases send nothing.
                    (c.stale, c.holds) = (c.stale + c.holds, 0);
                }
                if held_before == 0 {
                    self.took(s, i);
                }
                let c = &mut s.clients[i];
                c.deadline = c.deadline.max(now + LEASE);
                c.holds += 1;
                c.pc += 1;
                (c.phase, c.ticket, c.behind) = (Phase::Idle, None, false);
                leave_wait(s, i);
            }
            Reply::Int(ms) => {
                let behind = live_head(&s.server) != Some(i);
                let c = &mut s.clients[i];
                (c.missed, c.behind) = (false, behind);
                c.phase = if c.subscribed {
                    // `FairTurns::wait_turn`: the hint (-1: none), at most W/3 (the renewal),
                    // at least 1 ms.
                    let hint = u64::try_from(ms).unwrap_or(RENEW_EVERY);
                    let bound = if self.mutation == Mutation::NoRenewCap {
                        hint
                    } else {
                        hint.min(RENEW_EVERY)
                    };
                    Phase::Waiting {
                        until: now + bound.max(1),
                    }
                } else {
                    Phase::Subscribing
                };
            }
            other => panic!("FAIR_ACQUIRE answered {other:?}"),
        }
    }

    /// Ghost bookkeeping of a new hold of client `i` (its field was not on Redis): an overtaking when a live waiter that
    /// queued before it (or at all, if `i` never queued) still waits.
    fn took(&self, s: &mut FairState, i: usize) {
        let mine = s.clients[i].ticket;
        let mut behind = false;
        for (j, c) in s.clients.iter().enumerate() {
            let Some(theirs) = c.ticket.filter(|_| j != i && c.waits()) else {
                continue;
            };
            if mine.is_none_or(|m| theirs < m) {
                s.overtaken = s.overtaken.or(Some((i as u8, j as u8)));
            } else {
                behind = true;
            }
        }
        s.clients[i].handed = mine.is_some() && behind;
    }

    /// `Hold::release_as`: one send of a release (its reply lost when `lose`), and, when the
    /// reply comes, `Outgoing::settle`.
    fn release(&self, s: &mut FairState, i: usize, lose: bool, log: &mut Log) {
        let now = s.server.now();
        let c = &mut s.clients[i];
        if c.holds == 0 {
            // A guard of a lapsed generation sends nothing.
            (c.stale, c.pc) = (c.stale - 1, c.pc + 1);
            return;
        }
        let (sent_at, replay_last, keep, tries) = match c.phase {
            Phase::Releasing {
                sent_at,
                replay_last,
                keep,
                tries,
            } => (sent_at, replay_last, keep, tries),
            _ => {
                c.requests += 1;
                // `Hold::outgoing`: keep what the remaining holds need (the latest fixed
                // lease's end), or 0 on the last (no hold of the owner's may remain: the script
                // frees the lock whatever count Redis has); a last release writes a replay key
                // when the hold could lapse before the last retry.
                let keep = match (c.holds > 1, self.mutation) {
                    (true, _) => c.deadline.saturating_sub(now).max(1),
                    (false, Mutation::ReentersLostHold) => 1,
                    (false, _) => 0,
                };
                (now, c.deadline <= now + REPLAY_TTL, keep, 0)
            }
        };
        let how = ReleaseArgs {
            request: c.requests,
            keep,
            sent_before: tries > 0,
            replay_last,
        };
        let reply = calls::release(&self.scripts, &mut s.server, log, i, &how);
        let c = &mut s.clients[i];
        if lose {
            s.faults += 1;
            c.phase = Phase::Releasing {
                sent_at,
                replay_last,
                keep,
                tries: tries + 1,
            };
            return;
        }
        let sweep = match reply {
            // Not held: freed by an earlier send, or lapsed (`LeaseLost`): the guard is gone.
            Reply::Nil => false,
            // `Registry::lease_set`: the remaining holds last `keep` from the send.
            Reply::Int(0) => {
                c.deadline = sent_at + keep;
                true
            }
            Reply::Int(_) => replay_last,
            other => panic!("FAIR_RELEASE answered {other:?}"),
        };
        c.holds -= 1;
        if c.holds == 0 {
            c.deadline = 0;
        }
        c.pc += 1;
        c.phase = Phase::Idle;
        if sweep {
            calls::sweep(&mut s.server, log, i, how.request);
        }
    }
}

/// Hands each message published on a waiter's channel to that client, if it listens.
fn deliver(s: &mut FairState) {
    for (published, _) in s.server.take_published() {
        for (j, c) in s.clients.iter_mut().enumerate() {
            if c.subscribed && published == channel(j).into_bytes() {
                c.inbox = true;
            }
        }
    }
}

/// Client `i`'s waiter goes (it took the lock, or gave up): its channel is unsubscribed, and a
/// message on its way finds nobody.
fn leave_wait(s: &mut FairState, i: usize) {
    let c = &mut s.clients[i];
    if c.subscribed {
        s.server.unsubscribe(channel(i).as_bytes());
    }
    (c.subscribed, c.woken, c.inbox, c.missed) = (false, false, false, false);
}
