//! The model's steps: what each client may do next (its fair acquire, wait, leave and release
//! as relock's code runs them) and what the world may do (deliver or lose a message, lose a
//! reply, crash a client, let time pass to the next event).

use crate::server::Reply;

use super::calls::{self, Log, ReleaseArgs};
use super::state::{
    channel, field, live_head, locked, queue, Cancelled, Client, FairState, Op, Phase,
    READ_BACK_BY, REPLAY_TTL, RETRY_BY, TRIES,
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
    /// Client `i` sends an acquire attempt (as [`Action::Acquire`], or after subscribing as
    /// [`Action::Subscribe`]) and its reply never comes: the request was lost before the script
    /// ran, or the reply after it (a fault). The client reads the lock back.
    AcquireLost(usize, Loss),
    /// Client `i` reads the lock back after its acquire's lost reply: its field counting more
    /// holds than its guards before the send means the acquire took one
    /// (`Sending::read_back`); else its `lock()` fails, its place is left in the background,
    /// and its task calls `lock()` again.
    ReadBack(usize),
    /// Client `i`'s read-back fails too (a fault): its `lock()` fails, the orphan check reads
    /// the lock back in the background, and its place is left.
    ReadBackFails(usize),
    /// Client `i`'s orphan check: the hold of an acquire nobody received (cancelled, or failed
    /// with its outcome unknown) is released if the owner's field counts more holds than its
    /// guards (`OrphanCheck`'s drop, `Hold::release_orphan`).
    OrphanCheck(usize),
    /// Client `i`'s waiting `lock()` is dropped (at its subscription, its wait, or while its
    /// attempt's outcome is unknown).
    Cancel(usize),
    /// Client `i`'s cancelled or failed `lock()` leaves the queue (in the background).
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
    /// Time passes to the next event: a key's expiry, a waiter's timer, a retry's or a
    /// read-back's latest send.
    Tick,
}

/// What an acquire's lost reply lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loss {
    /// The request: the script never ran.
    Request,
    /// The reply: the script ran.
    Reply,
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
                    // Unless its leave may race it, a failed `lock()`'s leave runs before the
                    // owner's next `lock()` (see `FairModel::leave_races`).
                    Some(Op::Lock) if c.leaving && !self.leave_races => {}
                    Some(Op::Lock)
                        if c.holds > 0
                            && now >= c.deadline
                            && self.mutation != Mutation::ReentersLostHold =>
                    {
                        actions.push(Action::DropLost(i));
                    }
                    Some(Op::Lock) => self.push_acquire(s, i, actions),
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
                Phase::Subscribing => {
                    actions.push(Action::Subscribe(i));
                    self.push_lost(s, i, actions);
                }
                Phase::Waiting { until } => {
                    if c.woken || now >= until {
                        self.push_acquire(s, i, actions);
                    }
                }
                Phase::ReadingBack { .. } => {
                    actions.push(Action::ReadBack(i));
                    if fault && self.lose_acquire {
                        actions.push(Action::ReadBackFails(i));
                    }
                }
                Phase::OrphanCheck => actions.push(Action::OrphanCheck(i)),
                Phase::Releasing { tries, .. } => {
                    actions.push(Action::Release(i));
                    if fault && self.lose_reply && tries + 1 < TRIES {
                        actions.push(Action::ReleaseReplyLost(i));
                    }
                }
            }
            if c.leaving {
                actions.push(Action::Leave(i));
            }
            // A re-entry never waits; an acquire with nothing held may be dropped while it
            // waits or while its attempt's outcome is unknown.
            let waits = c.waits() || (matches!(c.phase, Phase::ReadingBack { .. }) && c.holds == 0);
            if waits && s.cancels < self.max_cancels && self.cancellable[i] {
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
            let busy = c.phase != Phase::Idle || c.holds > 0 || c.leaving;
            if fault && self.crash && busy {
                actions.push(Action::Crash(i));
            }
        }
        if self.next_event(s).is_some() {
            actions.push(Action::Tick);
        }
    }

    /// Client `i`'s next attempt, answered or (a fault) not.
    fn push_acquire(&self, s: &FairState, i: usize, actions: &mut Vec<Action>) {
        actions.push(Action::Acquire(i));
        self.push_lost(s, i, actions);
    }

    /// Client `i`'s next attempt, its request or its reply lost (a fault).
    fn push_lost(&self, s: &FairState, i: usize, actions: &mut Vec<Action>) {
        if s.faults < self.max_faults && self.lose_acquire {
            actions.push(Action::AcquireLost(i, Loss::Request));
            actions.push(Action::AcquireLost(i, Loss::Reply));
        }
    }

    /// The next moment something is due after now, within the horizon. `None` also while a
    /// client's next step is due now: a live process subscribes, runs its due timer and sends
    /// its retry or its read-back before the clock passes it (the timing relock's liveness rule
    /// assumes: a waiter renews well within W).
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
                Phase::ReadingBack { sent_at, .. } if sent_at + READ_BACK_BY <= now => return None,
                Phase::ReadingBack { sent_at, .. } => events.push(sent_at + READ_BACK_BY),
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
            Action::DropLost(i) => self.drop_lost(&mut s, i, log),
            Action::Subscribe(i) => {
                s.server.subscribe(channel(i).as_bytes());
                s.clients[i].subscribed = true;
                self.attempt(&mut s, i, log);
            }
            Action::AcquireLost(i, loss) => self.acquire_lost(&mut s, i, loss, log),
            Action::ReadBack(i) => self.read_back(&mut s, i, log),
            Action::ReadBackFails(i) => {
                s.faults += 1;
                self.fail(&mut s, i);
                s.clients[i].phase = Phase::OrphanCheck;
            }
            Action::OrphanCheck(i) => self.orphan_check(&mut s, i, log),
            Action::Cancel(i) => {
                s.cancels += 1;
                leave_wait(&mut s, i);
                let c = &mut s.clients[i];
                c.pc = self.plans[i].len() as u8;
                c.ticket = None;
                // Dropped with its outcome unknown: its orphan check runs in the background.
                let unknown = matches!(c.phase, Phase::ReadingBack { .. });
                c.phase = if unknown {
                    Phase::OrphanCheck
                } else {
                    Phase::Idle
                };
                if self.mutation == Mutation::SkipLeave {
                    c.cancelled = Cancelled::Left;
                } else {
                    (c.cancelled, c.leaving) = (Cancelled::Pending, true);
                }
            }
            Action::Leave(i) => self.left(&mut s, i, log),
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
pub(super) fn leave_wait(s: &mut FairState, i: usize) {
    let c = &mut s.clients[i];
    if c.subscribed {
        s.server.unsubscribe(channel(i).as_bytes());
    }
    (c.subscribed, c.woken, c.inbox, c.missed) = (false, false, false, false);
}
