//! The tasks model's steps: a task runs to its next await, a release's reply comes back, a
//! watchdog renews, a message reaches a process (or is lost), a waiting `lock()` is dropped, a
//! process dies, time passes.

use crate::server::Reply;

use super::super::lock::calls::{self, Log, ReleaseArgs};
use super::state::{
    field, next_reply, replay_key, Op, Phase, Release, Stage, TasksState, CHANNEL, COMMAND_TIMEOUT,
    LEASE, RENEW_EVERY,
};
use super::{Mutation, TasksModel};

/// One step of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Task `t` runs from where it stands to its next await: `lock()` begins (an attempt, or
    /// queueing first), its waiter registers, a wait of its ends (a wake-up it received, the
    /// wait's bound, a release's verdict) and what follows runs, its turn's attempt is sent
    /// and answered, or `unlock()` sends its release.
    Run(usize),
    /// Task `t`'s release has its reply (`Outgoing::settle`, `Handoffs::released`).
    Reply(usize),
    /// Task `t`'s watchdog renews its hold.
    Renew(usize),
    /// A message on the lock's channel reaches process `p`: its hub wakes its first waiter not
    /// woken yet (`Channel::wake_one`).
    Deliver(usize),
    /// A message for process `p` is lost (a fault).
    LoseMessage(usize),
    /// Task `t`'s waiting `lock()` is dropped: its waiter leaves, passing on a wake-up.
    Cancel(usize),
    /// Task `t`'s cancelled acquire withdraws its claim (in the background).
    Unclaim(usize),
    /// Process `p` dies (a fault).
    Crash(usize),
    /// Time passes to the next event.
    Tick,
}

impl TasksModel {
    /// The steps enabled in `s`.
    pub(super) fn enabled(&self, s: &TasksState, actions: &mut Vec<Action>) {
        let now = s.server.now();
        for (t, task) in s.tasks.iter().enumerate() {
            let next = self.plans[t].get(task.pc as usize);
            let p = task.process as usize;
            match task.phase {
                Phase::Idle => match next {
                    Some(Op::Lock) => actions.push(Action::Run(t)),
                    Some(Op::Unlock) => actions.push(Action::Run(t)),
                    None => {}
                },
                Phase::Subscribing { .. } | Phase::Ready => actions.push(Action::Run(t)),
                Phase::Waiting { stage, until } => {
                    let ended = match stage {
                        Stage::Reply => s.processes[p].awaiting_reply == 0,
                        _ => task.woken,
                    };
                    if ended || now >= until {
                        actions.push(Action::Run(t));
                    }
                }
                Phase::Releasing { .. } if next_reply(s, t) => actions.push(Action::Reply(t)),
                Phase::Releasing { .. } => {}
                Phase::Unclaiming => actions.push(Action::Unclaim(t)),
                Phase::Crashed => continue,
            }
            if task.holds && now >= task.renew_due && now < task.deadline {
                actions.push(Action::Renew(t));
            }
            let waits = matches!(task.phase, Phase::Waiting { .. } | Phase::Ready);
            if waits && s.cancels < self.max_cancels && self.cancellable[t] {
                actions.push(Action::Cancel(t));
            }
        }
        let fault = s.faults < self.max_faults;
        for (p, process) in s.processes.iter().enumerate() {
            if process.crashed {
                continue;
            }
            if process.inbox > 0 {
                actions.push(Action::Deliver(p));
                if fault && self.faults.lose_message {
                    actions.push(Action::LoseMessage(p));
                }
            }
            if fault && self.faults.crash {
                actions.push(Action::Crash(p));
            }
        }
        if self.next_event(s).is_some() {
            actions.push(Action::Tick);
        }
    }

    /// The next moment something is due after now, within the horizon: a wait's bound, a
    /// renewal, a key's expiry. `None` also while a release's reply is overdue (it comes
    /// within a command timeout).
    pub(super) fn next_event(&self, s: &TasksState) -> Option<u64> {
        let now = s.server.now();
        let overdue = s.tasks.iter().any(|task| match task.phase {
            Phase::Releasing { sent_at, .. } => sent_at + COMMAND_TIMEOUT <= now,
            _ => false,
        });
        // A holder about to unlock does so before time passes (`prompt_holders`).
        let holding = s
            .tasks
            .iter()
            .any(|task| task.holds && task.phase == Phase::Idle);
        if overdue || (self.prompt_holders && holding) {
            return None;
        }
        let timers = s.tasks.iter().filter_map(|task| match task.phase {
            Phase::Waiting { until, .. } => Some(until),
            Phase::Releasing { sent_at, .. } => Some(sent_at + COMMAND_TIMEOUT),
            _ if task.holds && now < task.deadline => Some(task.renew_due),
            _ => None,
        });
        timers
            .chain(s.server.next_expiry())
            .filter(|&at| at > now && at <= self.horizon)
            .min()
    }

    /// The state after `action` in `s`, with what it sent in `log`.
    pub(super) fn step(&self, s: &TasksState, action: Action, log: &mut Log) -> TasksState {
        let mut s = s.clone();
        let now = s.server.now();
        let mut taker = None;
        match action {
            Action::Run(t) => {
                let (held, claimed) = (s.tasks[t].holds, s.tasks[t].claimed);
                self.run_task(&mut s, t, log);
                if !held && s.tasks[t].holds {
                    taker = Some((t, claimed));
                }
            }
            Action::Reply(t) => self.reply(&mut s, t),
            Action::Renew(t) => {
                let field = field(&s, t);
                let held = calls::renew(&self.scripts, &mut s.server, log, &field);
                let task = &mut s.tasks[t];
                task.renew_due = now + RENEW_EVERY;
                task.deadline = if held { now + LEASE } else { now };
            }
            Action::Deliver(p) => {
                let process = &mut s.processes[p];
                process.inbox -= 1;
                process.seq += 1;
                process.recent = [process.seq, process.recent[0]];
                self.wake_one(&mut s, p);
            }
            Action::LoseMessage(p) => {
                s.faults += 1;
                s.processes[p].inbox -= 1;
                s.unannounced = true;
            }
            Action::Cancel(t) => {
                s.cancels += 1;
                self.leave_queue(&mut s, t);
                let task = &mut s.tasks[t];
                task.pc = self.plans[t].len() as u8;
                task.tries = 0;
                if task.claimed {
                    task.phase = Phase::Unclaiming;
                } else {
                    (task.cancelled, task.phase) = (true, Phase::Idle);
                }
            }
            Action::Unclaim(t) => {
                let field = field(&s, t);
                calls::unclaim(&self.scripts, &mut s.server, log, &field);
                let task = &mut s.tasks[t];
                (task.claimed, task.cancelled, task.phase) = (false, true, Phase::Idle);
            }
            Action::Crash(p) => {
                s.faults += 1;
                let process = &mut s.processes[p];
                if process.subscribed {
                    s.server.unsubscribe(CHANNEL.as_bytes());
                }
                *process = super::state::Process {
                    crashed: true,
                    ..Default::default()
                };
                for task in s.tasks.iter_mut().filter(|task| task.process as usize == p) {
                    *task = super::state::Task {
                        phase: Phase::Crashed,
                        ..super::state::Task::new(p as u8)
                    };
                }
            }
            Action::Tick => {
                let at = self.next_event(&s).expect("enabled");
                s.server.advance_to(at);
            }
        }
        self.publish(&mut s);
        self.note_hands(&mut s, action, taker);
        s
    }

    /// Task `t` runs to its next await.
    fn run_task(&self, s: &mut TasksState, t: usize, log: &mut Log) {
        match s.tasks[t].phase {
            Phase::Idle => match self.plans[t][s.tasks[t].pc as usize] {
                Op::Lock => self.begin_lock(s, t, log),
                Op::Unlock => self.send_release(s, t, log),
            },
            Phase::Subscribing { ttl, behind } => self.subscribe(s, t, ttl, behind),
            Phase::Ready => self.attempt(s, t, log),
            Phase::Waiting { .. } => self.resume(s, t),
            other => unreachable!("task {t} runs in {other:?}"),
        }
    }

    /// `unlock()`: `Handoffs::mark` (where the process's messages stand; counted as awaiting
    /// its reply), then LOCK_RELEASE of the task's one hold (a TTL of 0: no hold of its
    /// owner's remains).
    fn send_release(&self, s: &mut TasksState, t: usize, log: &mut Log) {
        let now = s.server.now();
        let p = s.tasks[t].process as usize;
        let process = &mut s.processes[p];
        // relock's client before the model found newcomers barging counted a release only
        // when the process had waiters.
        let counted = process.subscribed || self.mutation != Mutation::NewcomerBeforeReply;
        let (seq, subscribed, inbox) = (process.seq, process.subscribed, process.inbox);
        process.awaiting_reply += u8::from(counted);
        process.requests += 1;
        let request = process.requests;
        // A release that could find its hold lapsed before its last retry writes a replay key.
        let replay_last = s.tasks[t].deadline <= now + COMMAND_TIMEOUT * 6;
        let how = ReleaseArgs {
            keep_ms: 0,
            replay_ttl: COMMAND_TIMEOUT * 6 + LEASE,
            request,
            sent_before: false,
            replay_last,
        };
        let (field, replay) = (field(s, t), replay_key(p as u8, request));
        let reply = calls::release(&self.scripts, &mut s.server, log, &field, &replay, &how);
        let woken = match reply {
            Reply::Int(n) if n >= 1 => Some((n - 1) as u8),
            Reply::Int(_) | Reply::Nil => None,
            other => panic!("LOCK_RELEASE answered {other:?}"),
        };
        if let Some(woken) = woken {
            let ready = s
                .tasks
                .iter()
                .enumerate()
                .filter(|(_, t)| t.phase == Phase::Ready);
            s.released_by = Some(Release {
                process: p as u8,
                at: now,
                woke_others: woken > u8::from(subscribed),
                in_flight: ready.fold(0, |bits, (t, _)| bits | 1 << t),
                stale_messages: inbox > 0,
            });
        }
        let task = &mut s.tasks[t];
        task.holds = false;
        task.phase = Phase::Releasing {
            woken,
            seq,
            subscribed,
            counted,
            sent_at: now,
            ticket: request,
        };
        if replay_last {
            calls::sweep(&mut s.server, log, &replay);
        }
    }

    /// The replies of process `p`'s releases still on their way come back, in order: an
    /// acquire sent after them is answered after them on the same connection.
    pub(super) fn replies_before(&self, s: &mut TasksState, p: usize) {
        while let Some(t) =
            (0..s.tasks.len()).find(|&t| s.tasks[t].process as usize == p && next_reply(s, t))
        {
            self.reply(s, t);
        }
    }

    /// A release's reply comes back: the hand-off is noted, the mark dropped.
    fn reply(&self, s: &mut TasksState, t: usize) {
        let Phase::Releasing {
            woken,
            seq,
            subscribed,
            counted,
            ..
        } = s.tasks[t].phase
        else {
            unreachable!("replied while releasing")
        };
        let p = s.tasks[t].process as usize;
        if let Some(woken) = woken {
            self.released(s, p, u64::from(woken), (seq, subscribed));
        }
        s.processes[p].awaiting_reply -= u8::from(counted);
        let task = &mut s.tasks[t];
        task.pc += 1;
        task.phase = Phase::Idle;
    }

    /// Hands each message published on the lock's channel to every subscribed process.
    fn publish(&self, s: &mut TasksState) {
        for (channel, _) in s.server.take_published() {
            if channel == CHANNEL.as_bytes() {
                for process in s.processes.iter_mut().filter(|p| p.subscribed) {
                    process.inbox += 1;
                }
            }
        }
    }

    /// Keeps what the properties look at: since when the lock is free, whether that was
    /// announced, and whether the task that took it (`taker`) barged in on a hand-off.
    fn note_hands(&self, s: &mut TasksState, action: Action, taker: Option<(usize, bool)>) {
        let locked = s
            .server
            .keyspace
            .keys
            .contains_key(super::state::LOCK.as_bytes());
        if locked {
            s.free_since = None;
            s.unannounced = false;
        } else if s.free_since.is_none() {
            s.free_since = Some(s.server.now());
            s.unannounced |= matches!(action, Action::Tick | Action::Crash(_));
        }
        if let (Some((t, claimed)), Some(release)) = (taker, s.released_by) {
            let within = s.server.now() < release.at + super::state::GRACE;
            let own = s.tasks[t].process == release.process;
            let in_flight = release.in_flight & 1 << t != 0;
            let held_back = release.woke_others && !release.stale_messages;
            if held_back && within && own && !claimed && !in_flight {
                s.barged = true;
            }
        }
        if locked {
            s.released_by = None;
        }
    }
}
