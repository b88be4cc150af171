//! The model's steps: what each candidate may do next (its campaign, watchdog, proclaim and
//! resign as relock's code runs them), what the watcher may do (see `watch.rs`), and what the
//! world may do (deliver or lose a message, lose a reply, crash a candidate, replicate, fail
//! over, restart the server, delete history's newest entry, let time pass).

use crate::server::{Reply, Server};

use super::calls::{self, Log};
use super::state::{
    Candidate, ElectionState, Op, Phase, WatchPhase, CHANGES, CHANNEL, LEASE, RENEW_EVERY,
    REPLAY_TTL, TRIES,
};
use super::ElectionModel;

/// One step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Candidate `i` sends an acquire attempt and gets its reply.
    Acquire(usize),
    /// Candidate `i`'s first attempt found a leader: it subscribes, then tries again at once.
    Subscribe(usize),
    /// Candidate `i`'s watchdog renews its term (with replica sync: and a replica acknowledges
    /// it, so the replica has every write made so far).
    Renew(usize),
    /// With replica sync: candidate `i`'s watchdog renews its term on the primary, and no
    /// replica acknowledges it in time (the `WAIT` times out): the local deadline stays.
    RenewUnacked(usize),
    /// Candidate `i` proclaims its metadata.
    Proclaim(usize),
    /// Candidate `i` sends its resign and gets its reply.
    Release(usize),
    /// Candidate `i` sends its resign; the script runs, the reply is lost (a fault).
    ReleaseReplyLost(usize),
    /// The watcher reads history (its first poll subscribes first).
    WatchRead,
    /// A wake-up reaches candidate `i`.
    Deliver(usize),
    /// A wake-up for candidate `i` is lost (a fault).
    LoseMessage(usize),
    /// A change message reaches the watcher.
    WatchDeliver,
    /// A change message for the watcher is lost (a fault).
    WatchLoseMessage,
    /// Candidate `i`'s process dies (a fault).
    Crash(usize),
    /// The replica catches up with the primary.
    Replicate,
    /// The replica is promoted: what it lacked is lost (a fault).
    Failover,
    /// The server restarts empty (a fault).
    Restart,
    /// History's newest entry is deleted (a fault).
    DeleteNewest,
    /// Time passes to the next event.
    Tick,
}

impl ElectionModel {
    /// The steps enabled in `s`.
    pub(super) fn enabled(&self, s: &ElectionState, actions: &mut Vec<Action>) {
        let now = s.server.now();
        let fault = s.faults < self.max_faults;
        for (i, c) in s.candidates.iter().enumerate() {
            let next = self.plans[i].get(c.pc as usize).copied();
            match c.phase {
                Phase::Crashed | Phase::Failed => continue,
                Phase::Idle => {
                    match next {
                        Some(Op::Campaign) => actions.push(Action::Acquire(i)),
                        Some(Op::Proclaim) => actions.push(Action::Proclaim(i)),
                        Some(Op::Resign) => {
                            actions.push(Action::Release(i));
                            if fault && self.faults.lose_reply && c.epoch.is_some() {
                                actions.push(Action::ReleaseReplyLost(i));
                            }
                        }
                        None => {}
                    }
                    if c.epoch.is_some() && !c.lost && now >= c.renew_due {
                        actions.push(Action::Renew(i));
                        if self.replica_sync && s.replica.is_some() {
                            actions.push(Action::RenewUnacked(i));
                        }
                    }
                }
                Phase::Subscribing => actions.push(Action::Subscribe(i)),
                Phase::Waiting { until } => {
                    if c.woken || now >= until {
                        actions.push(Action::Acquire(i));
                    }
                }
                Phase::Releasing { tries, .. } => {
                    actions.push(Action::Release(i));
                    if fault && self.faults.lose_reply && tries + 1 < TRIES {
                        actions.push(Action::ReleaseReplyLost(i));
                    }
                }
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
        let w = &s.watcher;
        match w.phase {
            WatchPhase::Start => actions.push(Action::WatchRead),
            WatchPhase::Waiting { until } if w.woken || now >= until => {
                actions.push(Action::WatchRead)
            }
            WatchPhase::Waiting { .. } => {}
        }
        if w.inbox {
            actions.push(Action::WatchDeliver);
            if fault && self.faults.lose_message {
                actions.push(Action::WatchLoseMessage);
            }
        }
        if let Some(replica) = &s.replica {
            if *replica != s.server.keyspace {
                actions.push(Action::Replicate);
                if fault && self.faults.failover {
                    actions.push(Action::Failover);
                }
            }
        }
        if fault && self.faults.restart && !s.server.keyspace.keys.is_empty() {
            actions.push(Action::Restart);
        }
        if fault
            && self.faults.delete_newest
            && !super::state::history(&s.server.keyspace).is_empty()
        {
            actions.push(Action::DeleteNewest);
        }
        if self.next_event(s).is_some() {
            actions.push(Action::Tick);
        }
    }

    /// The next moment something is due after now, within the horizon: a key's expiry, a
    /// waiter's or the watcher's timer, a renewal, a local deadline. `None` while a resign's
    /// retry is due (it goes out at once).
    pub(super) fn next_event(&self, s: &ElectionState) -> Option<u64> {
        let now = s.server.now();
        let retrying = s
            .candidates
            .iter()
            .any(|c| matches!(c.phase, Phase::Releasing { .. }));
        if retrying {
            return None;
        }
        let mut times: Vec<u64> = Vec::new();
        for c in &s.candidates {
            match c.phase {
                Phase::Waiting { until } => times.push(until),
                Phase::Idle if c.epoch.is_some() && !c.lost => {
                    times.extend([c.renew_due, c.deadline]);
                }
                _ => {}
            }
        }
        if let WatchPhase::Waiting { until } = s.watcher.phase {
            times.push(until);
        }
        times
            .into_iter()
            .chain(s.server.next_expiry())
            .filter(|&t| t > now && t <= self.horizon)
            .min()
    }

    /// The state after `action` in `s`, with what it sent in `log`.
    pub(super) fn step(&self, s: &ElectionState, action: Action, log: &mut Log) -> ElectionState {
        let mut s = s.clone();
        let now = s.server.now();
        match action {
            Action::Acquire(i) => {
                let c = &mut s.candidates[i];
                c.woken = false;
                let priority = if c.subscribed { ask(c) } else { 0 };
                self.attempt(&mut s, i, priority, log);
            }
            Action::Subscribe(i) => {
                s.server.subscribe(CHANNEL.as_bytes());
                s.candidates[i].subscribed = true;
                let priority = ask(&mut s.candidates[i]);
                self.attempt(&mut s, i, priority, log);
            }
            Action::Renew(i) | Action::RenewUnacked(i) => {
                let held = calls::renew(&self.scripts, &mut s.server, log, i);
                // `Watchdog::renew_all`: with replica sync, the batch's `WAIT`; the deadline
                // moves only on a renewal a replica acknowledged.
                let replicated = matches!(action, Action::Renew(_));
                let acked = !self.replica_sync || self.renew_without_wait || replicated;
                if self.replica_sync && replicated {
                    if let Some(replica) = &mut s.replica {
                        *replica = s.server.keyspace.clone();
                    }
                }
                let c = &mut s.candidates[i];
                if held && now < c.deadline {
                    if acked {
                        c.deadline = c.deadline.max(now + LEASE);
                    }
                } else {
                    c.lost = true;
                }
                c.renew_due = now + RENEW_EVERY;
            }
            Action::Proclaim(i) => {
                let metadata = format!("m{i}");
                let reply = calls::proclaim(&self.scripts, &mut s.server, log, i, &metadata);
                if reply.is_error() {
                    failed(&mut s, "ELECTION_PROCLAIM", &reply);
                }
                s.candidates[i].pc += 1;
            }
            Action::Release(i) => self.release(&mut s, i, false, log),
            Action::ReleaseReplyLost(i) => self.release(&mut s, i, true, log),
            Action::WatchRead => self.watch_read(&mut s, log),
            Action::Deliver(i) => {
                let c = &mut s.candidates[i];
                c.inbox = false;
                c.woken |= c.subscribed;
            }
            Action::LoseMessage(i) => {
                s.faults += 1;
                s.candidates[i].inbox = false;
            }
            Action::WatchDeliver => {
                s.watcher.inbox = false;
                s.watcher.woken = true;
            }
            Action::WatchLoseMessage => {
                s.faults += 1;
                s.watcher.inbox = false;
            }
            Action::Crash(i) => {
                s.faults += 1;
                if s.candidates[i].subscribed {
                    s.server.unsubscribe(CHANNEL.as_bytes());
                }
                s.candidates[i] = Candidate {
                    phase: Phase::Crashed,
                    ..Candidate::new()
                };
            }
            Action::Replicate => {
                s.replica = Some(s.server.keyspace.clone());
            }
            Action::Failover => {
                s.faults += 1;
                let replica = s.replica.clone().expect("a replica");
                s.server.keyspace = replica;
                s.server.keyspace.purge(now);
                reconnect(&mut s);
            }
            Action::Restart => {
                s.faults += 1;
                s.server.restart_empty();
                s.server.advance_to(now);
                if s.candidates.iter().any(|c| c.subscribed) {
                    s.server.subscribe(CHANNEL.as_bytes());
                }
                if s.watcher.phase != WatchPhase::Start {
                    s.server.subscribe(CHANGES.as_bytes());
                }
                reconnect(&mut s);
            }
            Action::DeleteNewest => {
                s.faults += 1;
                calls::delete_newest(&mut s.server, log);
            }
            Action::Tick => {
                let at = self.next_event(&s).expect("enabled");
                s.server.advance_to(at);
            }
        }
        deliver(&mut s);
        s
    }

    /// `Hold::try_once` and what `until_taken` / `PlainTurns` make of its answer.
    fn attempt(&self, s: &mut ElectionState, i: usize, priority: u32, log: &mut Log) {
        let now = s.server.now();
        let reply = calls::acquire(&self.scripts, &mut s.server, log, i, priority);
        match reply {
            Reply::Array(items) if matches!(items.as_slice(), [Reply::Int(_), Reply::Int(_)]) => {
                let Reply::Int(epoch) = items[0] else {
                    unreachable!()
                };
                if self.replica_sync {
                    // `acquire::guard`: the term is the caller's once a replica has it.
                    if let Some(replica) = &mut s.replica {
                        *replica = s.server.keyspace.clone();
                    }
                }
                let epoch = epoch.max(0) as u64;
                s.epochs.push(epoch);
                let c = &mut s.candidates[i];
                c.epoch = Some(epoch);
                (c.deadline, c.lost, c.renew_due) = (now + LEASE, false, now + RENEW_EVERY);
                (c.tries, c.pc, c.phase) = (0, c.pc + 1, Phase::Idle);
                leave_wait(s, i);
            }
            Reply::Int(ms) => {
                let c = &mut s.candidates[i];
                c.phase = if c.subscribed {
                    // `next_turn`: wait for a message, at most the hint (no TTL: the watchdog
                    // timeout), at least 1 ms.
                    let bound = if ms < 0 { LEASE } else { (ms as u64).max(1) };
                    Phase::Waiting { until: now + bound }
                } else {
                    Phase::Subscribing
                };
            }
            other => {
                // A script error fails the campaign: the caller gets no term.
                failed(s, "ELECTION_ACQUIRE", &other);
                s.candidates[i].phase = Phase::Failed;
                leave_wait(s, i);
            }
        }
    }

    /// `Hold::release_as` for the term: one send of the resign (its reply lost when `lose`).
    fn release(&self, s: &mut ElectionState, i: usize, lose: bool, log: &mut Log) {
        let now = s.server.now();
        let c = &mut s.candidates[i];
        let Some(epoch) = c.epoch else {
            // No term (the campaign never won it): nothing to give back.
            c.pc += 1;
            return;
        };
        let (sent_at, replay_last, tries) = match c.phase {
            Phase::Releasing {
                sent_at,
                replay_last,
                tries,
            } => (sent_at, replay_last, tries),
            _ => {
                c.requests += 1;
                (now, c.deadline <= now + REPLAY_TTL, 0)
            }
        };
        let request = c.requests;
        let reply = calls::release(
            &self.scripts,
            &mut s.server,
            log,
            i,
            request,
            tries > 0,
            replay_last,
        );
        let c = &mut s.candidates[i];
        if lose {
            s.faults += 1;
            c.phase = Phase::Releasing {
                sent_at,
                replay_last,
                tries: tries + 1,
            };
            return;
        }
        match reply {
            Reply::Nil => {}
            Reply::Int(n) if n >= 1 => {
                if !s.resigned.contains(&epoch) {
                    s.resigned.push(epoch);
                }
            }
            other => failed(s, "ELECTION_RELEASE", &other),
        }
        let c = &mut s.candidates[i];
        (c.epoch, c.deadline, c.lost, c.renew_due) = (None, 0, false, 0);
        (c.pc, c.phase) = (c.pc + 1, Phase::Idle);
        if replay_last {
            calls::sweep(&mut s.server, log, i, request);
        }
    }
}

/// `PlainTurns::ask` / `ClaimGuard::next`: nothing on a waiter's first try, then the races it
/// lost.
fn ask(c: &mut Candidate) -> u32 {
    c.tries += 1;
    if c.tries < 2 {
        0
    } else {
        u32::from(c.tries - 1)
    }
}

/// Records the first script that answered an error.
pub(super) fn failed(s: &mut ElectionState, script: &str, reply: &Reply) {
    if s.failed.is_none() {
        s.failed = Some(format!("{script} answered {reply:?}"));
    }
}

/// Candidate `i`'s waiter goes: it unsubscribes, and a message on its way finds nobody.
fn leave_wait(s: &mut ElectionState, i: usize) {
    let c = &mut s.candidates[i];
    if c.subscribed {
        s.server.unsubscribe(CHANNEL.as_bytes());
    }
    (c.subscribed, c.woken, c.inbox) = (false, false, false);
}

/// The clients reconnect (a failover, a restart): the hub resubscribes and wakes every waiter
/// and every watch, and messages on their way are gone.
fn reconnect(s: &mut ElectionState) {
    for c in s.candidates.iter_mut().filter(|c| c.subscribed) {
        (c.woken, c.inbox) = (true, false);
    }
    if s.watcher.phase != WatchPhase::Start {
        (s.watcher.woken, s.watcher.inbox) = (true, false);
    }
}

/// Hands each message published to its subscribers.
fn deliver(s: &mut ElectionState) {
    let server: &mut Server = &mut s.server;
    for (channel, _) in server.take_published() {
        if channel == CHANNEL.as_bytes() {
            for c in s.candidates.iter_mut().filter(|c| c.subscribed) {
                c.inbox = true;
            }
        } else if channel == CHANGES.as_bytes() && s.watcher.phase != WatchPhase::Start {
            s.watcher.inbox = true;
        }
    }
}
