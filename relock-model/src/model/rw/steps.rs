//! The model's steps: what each client may do next (its acquire, wait, release and watchdog as
//! relock's code runs them) and what the world may do (deliver or lose a message, lose a reply,
//! crash a client, restart the server, let time pass to the next event).

use crate::server::Reply;

use super::calls::{self, Log};
use super::state::{
    Cancelled, Client, Leaving, Op, Phase, RwState, Side, CHANNEL, LEASE, LOCK, READ_BACK_BY,
    RENEW_EVERY, RETRY_BY, TRIES,
};
use super::{Mutation, RwModel};

/// One step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Client `i` sends an acquire attempt of its current `Lock` and gets its reply: the first
    /// attempt, or the next one after its wait ended (a message, or its timer).
    Acquire(usize),
    /// Client `i`'s first attempt found the lock busy: it subscribes, then tries again at once.
    Subscribe(usize),
    /// Client `i` sends an acquire attempt (as [`Action::Acquire`], or after subscribing as
    /// [`Action::Subscribe`]) and its reply never comes: the request was lost before the script
    /// ran, or the reply after it (a fault). The client reads the lock back.
    AcquireLost(usize, Loss),
    /// Client `i` reads the lock back after its acquire's lost reply: its side's field counting
    /// more holds than its live guards of the side means the acquire took one; else its
    /// `lock()` fails, and its task calls it again.
    ReadBack(usize),
    /// Client `i`'s read-back fails too (a fault): its `lock()` fails, and the orphan check
    /// reads the lock back in the background.
    ReadBackFails(usize),
    /// Client `i`'s orphan check: the hold of an acquire nobody received (cancelled, or failed
    /// with its outcome unknown) is released if the owner's field of the side counts more
    /// holds than its live guards of the side.
    OrphanCheck(usize),
    /// Client `i`, about to acquire a side whose holds lapsed locally while their guards live,
    /// drops its field of that side on Redis first.
    DropLost(usize),
    /// Client `i`'s waiting `lock()` is dropped (at its subscription, its wait, or while its
    /// attempt's outcome is unknown).
    Cancel(usize),
    /// Client `i`'s background UNCLAIM (a claiming `ClaimGuard` dropped).
    Unclaim(usize),
    /// Client `i`'s task starts its `Unlock` or `Drop`: a release of one guard begins.
    StartRelease(usize),
    /// Client `i` sends `side`'s release and gets its reply.
    Release(usize, Side),
    /// Client `i` sends `side`'s release; the script runs but the reply is lost (a fault).
    ReleaseReplyLost(usize, Side),
    /// Client `i`'s watchdog renews `side`.
    Renew(usize, Side),
    /// A published wake-up reaches client `i`.
    Deliver(usize),
    /// A published wake-up for client `i` is lost (a fault).
    LoseMessage(usize),
    /// Client `i`'s process dies (a fault).
    Crash(usize),
    /// The server restarts empty, down for a lease first (a fault).
    Restart,
    /// The server restarts from an AOF with every write, down for a third of a lease first (a
    /// fault).
    RestartFromAof,
    /// Time passes to the next event: a key's expiry, a waiter's timer, a renewal.
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

const SIDES: [Side; 2] = [Side::Read, Side::Write];

impl RwModel {
    /// The operation client `i` is at, if any is left.
    pub(super) fn op(&self, s: &RwState, i: usize) -> Option<Op> {
        self.plans[i].get(s.clients[i].pc as usize).copied()
    }

    /// The steps enabled in `s`.
    pub(super) fn enabled(&self, s: &RwState, actions: &mut Vec<Action>) {
        let now = s.server.now();
        let fault = s.faults < self.max_faults;
        for (i, c) in s.clients.iter().enumerate() {
            if c.phase == Phase::Crashed {
                continue;
            }
            match (c.phase, self.op(s, i)) {
                // `Sending::gate`: an acquire of a side waits for the owner's release of it in
                // flight, and first drops the side's holds that lapsed locally.
                (Phase::Idle, Some(Op::Lock(side))) if c.side(side).leaving.is_none() => {
                    if c.side(side).lapsed(now) {
                        actions.push(Action::DropLost(i));
                    } else {
                        self.push_acquire(s, i, actions);
                    }
                }
                (Phase::Idle, Some(Op::Unlock(side) | Op::Drop(side)))
                    if c.side(side).leaving.is_none() =>
                {
                    actions.push(Action::StartRelease(i));
                }
                (Phase::Subscribing, _) => {
                    actions.push(Action::Subscribe(i));
                    self.push_lost(s, i, actions);
                }
                (Phase::Waiting { until }, _) if c.woken || now >= until => {
                    self.push_acquire(s, i, actions);
                }
                (Phase::ReadingBack { .. }, _) => {
                    actions.push(Action::ReadBack(i));
                    if fault && self.faults.lose_acquire {
                        actions.push(Action::ReadBackFails(i));
                    }
                }
                (Phase::OrphanCheck { .. }, _) => actions.push(Action::OrphanCheck(i)),
                _ => {}
            }
            for side in SIDES {
                let h = c.side(side);
                if let Some(leaving) = h.leaving {
                    actions.push(Action::Release(i, side));
                    if fault && self.faults.lose_reply && leaving.tries + 1 < TRIES {
                        actions.push(Action::ReleaseReplyLost(i, side));
                    }
                }
                if h.holds > 0 && !h.lost && now >= h.renew_due {
                    actions.push(Action::Renew(i, side));
                }
            }
            if c.unclaiming {
                actions.push(Action::Unclaim(i));
            }
            // A re-entry never waits; an acquire of a side the owner holds nothing of may be
            // dropped while it waits or while its attempt's outcome is unknown.
            let waits = match c.phase {
                Phase::Subscribing | Phase::Waiting { .. } => true,
                Phase::ReadingBack { side, .. } => c.side(side).holds == 0,
                _ => false,
            };
            if waits && s.cancels < self.max_cancels && self.cancellable[i] {
                actions.push(Action::Cancel(i));
            }
            if c.inbox {
                actions.push(Action::Deliver(i));
                if fault && self.faults.lose_message {
                    actions.push(Action::LoseMessage(i));
                }
            }
            if fault && self.faults.crash {
                actions.push(Action::Crash(i));
            }
        }
        // A restart keeps the server down for a lease: not while a release or a read-back is
        // due (its sends would fail, not be answered late).
        let releasing = s.clients.iter().any(|c| {
            let reading_back = matches!(c.phase, Phase::ReadingBack { .. });
            reading_back || c.read.leaving.is_some() || c.write.leaving.is_some()
        });
        if fault && self.faults.restart && !releasing && now + LEASE <= self.horizon {
            actions.push(Action::Restart);
        }
        let aof = fault && self.faults.restart_aof && !releasing;
        if aof && now + RENEW_EVERY <= self.horizon {
            actions.push(Action::RestartFromAof);
        }
        if self.next_event(s).is_some() {
            actions.push(Action::Tick);
        }
    }

    /// Client `i`'s next attempt, answered or (a fault) not.
    fn push_acquire(&self, s: &RwState, i: usize, actions: &mut Vec<Action>) {
        actions.push(Action::Acquire(i));
        self.push_lost(s, i, actions);
    }

    /// Client `i`'s next attempt, its request or its reply lost (a fault).
    fn push_lost(&self, s: &RwState, i: usize, actions: &mut Vec<Action>) {
        if s.faults < self.max_faults && self.faults.lose_acquire {
            actions.push(Action::AcquireLost(i, Loss::Request));
            actions.push(Action::AcquireLost(i, Loss::Reply));
        }
    }

    /// The next moment something is due after now, within the horizon; `None` also when a
    /// release's send or a read-back is due now.
    pub(super) fn next_event(&self, s: &RwState) -> Option<u64> {
        let now = s.server.now();
        let mut due = Vec::new();
        for c in &s.clients {
            match c.phase {
                Phase::Crashed => continue,
                Phase::Waiting { until } => due.push(until),
                Phase::ReadingBack { sent_at, .. } if sent_at + READ_BACK_BY <= now => return None,
                Phase::ReadingBack { sent_at, .. } => due.push(sent_at + READ_BACK_BY),
                _ => {}
            }
            for side in SIDES {
                let h = c.side(side);
                if let Some(leaving) = h.leaving {
                    if leaving.sent_at + RETRY_BY <= now {
                        return None;
                    }
                    due.push(leaving.sent_at + RETRY_BY);
                }
                if h.holds > 0 && !h.lost {
                    due.push(h.renew_due);
                }
            }
        }
        due.into_iter()
            .chain(s.server.next_expiry())
            .filter(|&t| t > now && t <= self.horizon)
            .min()
    }

    /// The state after `action` in `s`, with what it sent in `log`.
    pub(super) fn step(&self, s: &RwState, action: Action, log: &mut Log) -> RwState {
        let mut s = s.clone();
        let now = s.server.now();
        match action {
            Action::Acquire(i) => {
                let c = &mut s.clients[i];
                if c.phase == Phase::Idle {
                    c.waited = false;
                }
                c.woken = false;
                self.attempt(&mut s, i, log);
            }
            Action::Subscribe(i) => {
                s.server.subscribe(CHANNEL.as_bytes());
                s.clients[i].subscribed = true;
                self.attempt(&mut s, i, log);
            }
            Action::AcquireLost(i, loss) => self.attempt_lost(&mut s, i, loss, log),
            Action::ReadBack(i) => self.read_back(&mut s, i, log),
            Action::ReadBackFails(i) => self.read_back_fails(&mut s, i),
            Action::OrphanCheck(i) => self.orphan_check(&mut s, i, log),
            Action::DropLost(i) => self.drop_lost(&mut s, i, log),
            Action::Cancel(i) => {
                s.cancels += 1;
                leave_wait(&mut s, i);
                let c = &mut s.clients[i];
                c.pc = self.plans[i].len() as u8;
                c.phase = match c.phase {
                    // Dropped with its outcome unknown: the `Sending` leaves its orphan check.
                    Phase::ReadingBack { side, .. } => Phase::OrphanCheck {
                        side,
                        cancelled: true,
                    },
                    _ => Phase::Idle,
                };
                self.give_up(c, true);
            }
            Action::Unclaim(i) => {
                calls::unclaim(&self.scripts, &mut s.server, log, i);
                let c = &mut s.clients[i];
                c.unclaiming = false;
                if c.cancelled == Cancelled::Pending {
                    c.cancelled = Cancelled::Clean;
                }
            }
            Action::StartRelease(i) => {
                let Some(Op::Unlock(side) | Op::Drop(side)) = self.op(&s, i) else {
                    unreachable!("enabled at an unlock")
                };
                let foreground = matches!(self.op(&s, i), Some(Op::Unlock(_)));
                let c = &mut s.clients[i];
                let h = c.side_mut(side);
                if h.holds == 0 {
                    // A guard of a lost generation: `Registry::unregister` says `Leaving::Lost`.
                    h.stale = h.stale.saturating_sub(1);
                    c.pc += 1;
                } else {
                    h.requests += 1;
                    h.leaving = Some(Leaving {
                        sent_at: now,
                        tries: 0,
                    });
                    if foreground {
                        c.phase = Phase::Unlocking;
                    } else {
                        c.pc += 1;
                    }
                }
            }
            Action::Release(i, side) => self.release(&mut s, i, side, false, log),
            Action::ReleaseReplyLost(i, side) => self.release(&mut s, i, side, true, log),
            Action::Renew(i, side) => {
                let held = calls::renew(&self.scripts, &mut s.server, log, i, side);
                let h = s.clients[i].side_mut(side);
                // `Registry::renewed` / `found_gone`.
                if held && now < h.deadline {
                    h.deadline = self.believed(h.deadline.max(now + LEASE));
                } else {
                    h.lost = true;
                }
                h.renew_due = now + RENEW_EVERY;
            }
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
                    s.server.unsubscribe(CHANNEL.as_bytes());
                }
                s.clients[i] = Client::crashed();
            }
            Action::Restart | Action::RestartFromAof => {
                s.faults += 1;
                if action == Action::Restart {
                    s.server.restart_empty();
                    s.server.advance_to(now + LEASE);
                } else {
                    s.server.restart_keeping_data();
                    s.server.advance_to(now + RENEW_EVERY);
                }
                // The hub resubscribes on reconnect, and a reconnect wakes the waiters.
                for c in s.clients.iter_mut().filter(|c| c.subscribed) {
                    s.server.subscribe(CHANNEL.as_bytes());
                    (c.woken, c.inbox) = (true, false);
                }
            }
            Action::Tick => {
                let at = self.next_event(&s).expect("enabled");
                s.server.advance_to(at);
            }
        }
        self.deliver(&mut s);
        let locked = s.server.keyspace.keys.contains_key(LOCK.as_bytes());
        if !locked && s.free_since.is_none() {
            s.freed_by_expiry = matches!(
                action,
                Action::Tick | Action::Restart | Action::RestartFromAof
            );
        }
        s.free_since = if locked {
            None
        } else {
            s.free_since.or(Some(s.server.now()))
        };
        s
    }

    /// `Hold::release_as`: one send of `side`'s release (its reply lost when `lose`), and, when
    /// the reply comes, `Outgoing::settle`.
    fn release(&self, s: &mut RwState, i: usize, side: Side, lose: bool, log: &mut Log) {
        let h = s.clients[i].side(side);
        let leaving = h.leaving.expect("a release in flight");
        let sent_before = leaving.tries > 0 && self.mutation != Mutation::ReplayFlagZero;
        let request = h.requests;
        // `Hold::outgoing`: the watchdog lease while another hold of this side lives, else 0
        // (no hold of the owner's may remain: the script drops its field whatever the count).
        let keep = if h.holds > 1 { LEASE } else { 0 };
        let reply = calls::release(
            &self.scripts,
            &mut s.server,
            log,
            i,
            side,
            request,
            keep,
            sent_before,
        );
        let c = &mut s.clients[i];
        let h = c.side_mut(side);
        if lose {
            s.faults += 1;
            h.leaving = Some(Leaving {
                tries: leaving.tries + 1,
                ..leaving
            });
            return;
        }
        let sweep = match reply {
            // Not held: a retry's earlier send freed it (or, past the lapse moment,
            // `LeaseLost`), or the hold lapsed. Either way this guard is gone.
            Reply::Nil => false,
            Reply::Int(0) => {
                // `Registry::lease_set`: the TTL was set to what the remaining holds need.
                h.deadline = self.believed(leaving.sent_at + LEASE);
                true
            }
            // Every rw release writes a replay key (`always_replays`).
            Reply::Int(_) => true,
            other => panic!("{side:?} release answered {other:?}"),
        };
        h.leaving = None;
        h.holds -= 1;
        if h.holds == 0 {
            (h.deadline, h.lost, h.renew_due) = (0, false, 0);
        }
        c.replayed |= leaving.tries > 0;
        if c.phase == Phase::Unlocking {
            c.pc += 1;
            c.phase = Phase::Idle;
        }
        if sweep {
            calls::sweep(&mut s.server, log, i, side, request);
        }
    }

    /// The local deadline the owner keeps: `deadline`, or forever for a client that ignores it.
    pub(super) fn believed(&self, deadline: u64) -> u64 {
        if self.mutation == Mutation::IgnoreDeadline {
            u64::MAX
        } else {
            deadline
        }
    }

    /// Hands each message published on the lock's channel to every subscribed client (every
    /// message wakes all of a client's waiters: `rw::wakes_all`).
    fn deliver(&self, s: &mut RwState) {
        for (channel, _) in s.server.take_published() {
            if channel == CHANNEL.as_bytes() {
                for c in s.clients.iter_mut().filter(|c| c.subscribed) {
                    c.inbox = true;
                }
            }
        }
    }
}

/// Client `i`'s waiter goes (it took the lock, or gave up): the client unsubscribes, and a
/// message on its way finds nobody.
pub(super) fn leave_wait(s: &mut RwState, i: usize) {
    let c = &mut s.clients[i];
    if c.subscribed {
        s.server.unsubscribe(CHANNEL.as_bytes());
    }
    (c.subscribed, c.woken, c.inbox, c.missed) = (false, false, false, false);
}
