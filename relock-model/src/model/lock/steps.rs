//! The model's steps: what each client may do next (its acquire, wait, release and watchdog as
//! relock's code runs them) and what the world may do (deliver or lose a message, lose a reply,
//! crash a client, restart the server, let time pass to the next event).

use super::calls::{self, Log};
use super::state::{
    field, Cancelled, Client, LockState, Op, Phase, CHANNEL, LEASE, READ_BACK_BY, RENEW_EVERY,
    RETRY_BY, TRIES,
};
use super::{LockModel, Mutation};

/// One step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Client `i` sends an acquire attempt and gets its reply: the first attempt of a `lock()`
    /// (or a re-entry), or the next one after its wait ended (a message, or its timer).
    Acquire(usize),
    /// Client `i`'s first attempt found the lock busy: it subscribes to the lock's channel,
    /// then tries again at once (a message sent meanwhile found nobody listening yet).
    Subscribe(usize),
    /// Client `i` sends an acquire attempt (as [`Action::Acquire`], or after subscribing as
    /// [`Action::Subscribe`]) and its reply never comes: the request was lost before the script
    /// ran, or the reply after it (a fault). The client reads the lock back.
    AcquireLost(usize, Loss),
    /// Client `i` reads the lock back after its acquire's lost reply: its field counting more
    /// holds than its live guards means the acquire took one (`Sending::read_back`); else its
    /// `lock()` fails, and its task calls it again.
    ReadBack(usize),
    /// Client `i`'s read-back fails too (a fault): its `lock()` fails, and the orphan check
    /// reads the lock back in the background.
    ReadBackFails(usize),
    /// Client `i`'s orphan check: the hold of an acquire nobody received (cancelled, or failed
    /// with its outcome unknown) is released if the owner's field counts more holds than its
    /// live guards (`OrphanCheck`'s drop, `Hold::release_orphan`).
    OrphanCheck(usize),
    /// Client `i`'s waiting `lock()` is dropped (at its subscription, its wait, or while its
    /// attempt's outcome is unknown).
    Cancel(usize),
    /// Client `i`'s cancelled or failed acquire withdraws its claim (in the background).
    Unclaim(usize),
    /// Client `i` sends a release and gets its reply.
    Release(usize),
    /// Client `i` sends a release; the script runs but the reply is lost (a fault).
    ReleaseReplyLost(usize),
    /// Client `i`'s watchdog renews its hold.
    Renew(usize),
    /// A published wake-up reaches client `i`.
    Deliver(usize),
    /// A published wake-up for client `i` is lost (a fault).
    LoseMessage(usize),
    /// Client `i`'s process dies (a fault).
    Crash(usize),
    /// Client `i`, about to lock again while its holds lapsed locally, drops its field on
    /// Redis first (`Sending::gate`, `Registry::lapsed_hold`, `Hold::release_orphan`).
    DropLost(usize),
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

impl LockModel {
    /// The steps enabled in `s`.
    pub(super) fn enabled(&self, s: &LockState, actions: &mut Vec<Action>) {
        let now = s.server.now();
        let fault = s.faults < self.max_faults;
        for (i, c) in s.clients.iter().enumerate() {
            let next = self.plans[i].get(c.pc as usize).copied();
            match c.phase {
                Phase::Crashed => continue,
                Phase::Idle => {
                    match next {
                        Some(Op::Lock) => {
                            let lapsed = c.holds > 0 && (c.lost || now >= c.deadline);
                            let drops = !matches!(
                                self.mutation,
                                Mutation::ReentersLostHold | Mutation::SkipsDrop
                            );
                            if lapsed && drops {
                                actions.push(Action::DropLost(i));
                            } else {
                                self.push_acquire(s, i, actions);
                            }
                        }
                        Some(Op::Unlock) if c.holds == 0 && c.stale > 0 => {
                            actions.push(Action::Release(i));
                        }
                        Some(Op::Unlock) if c.holds > 0 => {
                            actions.push(Action::Release(i));
                            if fault && self.faults.lose_reply {
                                actions.push(Action::ReleaseReplyLost(i));
                            }
                        }
                        _ => {}
                    }
                    if c.holds > 0 && !c.lost && now >= c.renew_due {
                        actions.push(Action::Renew(i));
                    }
                }
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
                    if fault && self.faults.lose_acquire {
                        actions.push(Action::ReadBackFails(i));
                    }
                }
                Phase::OrphanCheck { .. } => actions.push(Action::OrphanCheck(i)),
                Phase::Releasing { tries, .. } => {
                    actions.push(Action::Release(i));
                    if fault && self.faults.lose_reply && tries + 1 < TRIES {
                        actions.push(Action::ReleaseReplyLost(i));
                    }
                }
                Phase::Unclaiming { .. } => actions.push(Action::Unclaim(i)),
            }
            // A re-entry never waits; an acquire with nothing held may be dropped while it
            // waits or while its attempt's outcome is unknown.
            let waits = match c.phase {
                Phase::Subscribing | Phase::Waiting { .. } => true,
                Phase::ReadingBack { .. } => c.holds == 0,
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
        // A restart keeps the server down for a lease: not while a release's retry or a
        // read-back is due within a few command timeouts (its sends would fail, not be
        // answered late).
        let retrying = s
            .clients
            .iter()
            .any(|c| matches!(c.phase, Phase::Releasing { .. } | Phase::ReadingBack { .. }));
        let restart = !retrying || self.stalled_retries;
        if fault && self.faults.restart && restart && now + LEASE <= self.horizon {
            actions.push(Action::Restart);
        }
        if fault && self.faults.restart_aof && restart && now + RENEW_EVERY <= self.horizon {
            actions.push(Action::RestartFromAof);
        }
        if self.next_event(s).is_some() {
            actions.push(Action::Tick);
        }
    }

    /// Client `i`'s next attempt, answered or (a fault) not.
    fn push_acquire(&self, s: &LockState, i: usize, actions: &mut Vec<Action>) {
        actions.push(Action::Acquire(i));
        self.push_lost(s, i, actions);
    }

    /// Client `i`'s next attempt, its request or its reply lost (a fault).
    fn push_lost(&self, s: &LockState, i: usize, actions: &mut Vec<Action>) {
        if s.faults < self.max_faults && self.faults.lose_acquire {
            actions.push(Action::AcquireLost(i, Loss::Request));
            actions.push(Action::AcquireLost(i, Loss::Reply));
        }
    }

    /// The next moment something is due after now, within the horizon: a key's expiry, a
    /// waiter's timer, a holder's renewal, the latest a release's retry or a read-back goes
    /// out. `None` also when a retry or a read-back is due now and retries do not stall.
    pub(super) fn next_event(&self, s: &LockState) -> Option<u64> {
        let now = s.server.now();
        let retry_by = |c: &Client| match c.phase {
            Phase::Releasing { sent_at, .. } if !self.stalled_retries => Some(sent_at + RETRY_BY),
            Phase::ReadingBack { sent_at, .. } => Some(sent_at + READ_BACK_BY),
            _ => None,
        };
        if s.clients.iter().filter_map(retry_by).any(|t| t <= now) {
            return None;
        }
        let timers = s.clients.iter().filter_map(|c| match c.phase {
            Phase::Waiting { until } => Some(until),
            Phase::Idle if c.holds > 0 && !c.lost => Some(c.renew_due),
            _ => None,
        });
        timers
            .chain(s.clients.iter().filter_map(retry_by))
            .chain(s.server.next_expiry())
            .filter(|&t| t > now && t <= self.horizon)
            .min()
    }

    /// The state after `action` in `s`, with what it sent in `log`.
    pub(super) fn step(&self, s: &LockState, action: Action, log: &mut Log) -> LockState {
        let mut s = s.clone();
        let now = s.server.now();
        match action {
            Action::Acquire(i) => {
                let c = &mut s.clients[i];
                c.woken = false;
                let priority = if c.subscribed { self.ask(c) } else { 0 };
                self.attempt(&mut s, i, priority, log);
            }
            Action::DropLost(i) => self.drop_lost(&mut s, i, log),
            Action::Subscribe(i) => {
                s.server.subscribe(CHANNEL.as_bytes());
                s.clients[i].subscribed = true;
                let priority = self.ask(&mut s.clients[i]);
                self.attempt(&mut s, i, priority, log);
            }
            Action::AcquireLost(i, loss) => {
                s.faults += 1;
                if s.clients[i].phase == Phase::Subscribing {
                    s.server.subscribe(CHANNEL.as_bytes());
                    s.clients[i].subscribed = true;
                }
                let c = &mut s.clients[i];
                c.woken = false;
                let priority = if c.subscribed { self.ask(c) } else { 0 };
                let held_before = self.live_guards(c, now);
                if loss == Loss::Reply {
                    calls::acquire(&self.scripts, &mut s.server, log, &field(i), priority);
                }
                s.clients[i].phase = Phase::ReadingBack {
                    sent_at: now,
                    held_before,
                };
            }
            Action::ReadBack(i) => {
                let Phase::ReadingBack {
                    sent_at,
                    held_before,
                } = s.clients[i].phase
                else {
                    unreachable!("enabled while reading back")
                };
                let took = self.mutation != Mutation::SkipReadBack
                    && calls::inspect(&self.scripts, &mut s.server, log, &field(i))
                        > u64::from(held_before);
                if took {
                    self.taken(&mut s, i, sent_at);
                } else {
                    // `lock()` fails with the lost reply's error; the task calls it again.
                    leave_wait(&mut s, i);
                    self.give_up(&mut s.clients[i], false);
                }
            }
            Action::ReadBackFails(i) => {
                s.faults += 1;
                leave_wait(&mut s, i);
                s.clients[i].phase = Phase::OrphanCheck { cancelled: false };
            }
            Action::OrphanCheck(i) => {
                let Phase::OrphanCheck { cancelled } = s.clients[i].phase else {
                    unreachable!("enabled while checking")
                };
                let guards = self.live_guards(&s.clients[i], now);
                if calls::inspect(&self.scripts, &mut s.server, log, &field(i)) > u64::from(guards)
                {
                    self.release_orphan(&mut s, i, log);
                }
                self.give_up(&mut s.clients[i], cancelled);
            }
            Action::Cancel(i) => {
                s.cancels += 1;
                leave_wait(&mut s, i);
                let c = &mut s.clients[i];
                c.pc = self.plans[i].len() as u8;
                if matches!(c.phase, Phase::ReadingBack { .. }) {
                    // Dropped with its outcome unknown: the orphan check runs first.
                    c.phase = Phase::OrphanCheck { cancelled: true };
                } else {
                    self.give_up(c, true);
                }
            }
            Action::Unclaim(i) => {
                calls::unclaim(&self.scripts, &mut s.server, log, &field(i));
                let c = &mut s.clients[i];
                if c.phase == (Phase::Unclaiming { cancelled: true }) {
                    c.cancelled = Cancelled::Withdrawn;
                }
                (c.claimed, c.phase) = (false, Phase::Idle);
            }
            Action::Release(i) => self.release(&mut s, i, false, log),
            Action::ReleaseReplyLost(i) => self.release(&mut s, i, true, log),
            Action::Renew(i) => {
                let held = calls::renew(&self.scripts, &mut s.server, log, &field(i));
                let c = &mut s.clients[i];
                // `Registry::renewed` / `found_gone`: a renewal that finds the hold gone, or
                // comes back after the lease could have lapsed, loses it.
                if held && now < c.deadline {
                    c.deadline = self.believed(c.deadline.max(now + LEASE));
                } else {
                    c.lost = true;
                }
                c.renew_due = now + RENEW_EVERY;
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
                    s.restarted_from_aof = true;
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
        let locked = s
            .server
            .keyspace
            .keys
            .contains_key(super::state::LOCK.as_bytes());
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

    /// The local deadline the owner keeps: `deadline`, or forever for a client that ignores it.
    pub(super) fn believed(&self, deadline: u64) -> u64 {
        if self.mutation == Mutation::IgnoreDeadline {
            u64::MAX
        } else {
            deadline
        }
    }

    /// Hands each message published on the lock's channel to every subscribed client.
    fn deliver(&self, s: &mut LockState) {
        for (channel, _) in s.server.take_published() {
            if channel == CHANNEL.as_bytes() {
                for c in s.clients.iter_mut().filter(|c| c.subscribed) {
                    c.inbox = true;
                }
            }
        }
    }
}

/// Client `i`'s waiter goes (it took the lock, or gave up): the last waiter of the client
/// unsubscribes the channel, and a message on its way finds nobody.
pub(super) fn leave_wait(s: &mut LockState, i: usize) {
    let c = &mut s.clients[i];
    if c.subscribed {
        s.server.unsubscribe(CHANNEL.as_bytes());
    }
    (c.subscribed, c.woken, c.inbox, c.missed, c.tries) = (false, false, false, false, 0);
}
