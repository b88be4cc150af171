//! A task's code between two of its awaits, as `until_taken`, `PlainTurns` (`next_turn`,
//! `park_behind`, the hand-off grace loop) and the pub/sub hub run it: each function takes the
//! task from one await to the next.

use crate::server::Reply;

use super::super::lock::calls::{self, Log};
use super::state::{
    field, Phase, Stage, TasksState, CHANNEL, COMMAND_TIMEOUT, GRACE, LEASE, RENEW_EVERY, WINDOW,
};
use super::{Mutation, TasksModel};

/// Task `t`'s process.
fn t_process(s: &TasksState, t: usize) -> usize {
    s.tasks[t].process as usize
}

impl TasksModel {
    /// `lock()` begins (`PlainTurns::new`): behind this process's waiters, a hand-off grace
    /// or a release of this process's awaiting its reply, it queues first (subscribes, and
    /// waits its turn before any attempt); else it tries at once.
    pub(super) fn begin_lock(&self, s: &mut TasksState, t: usize, log: &mut Log) {
        let p = s.tasks[t].process as usize;
        let behind = !s.processes[p].queue.is_empty();
        let replying =
            s.processes[p].awaiting_reply > 0 && self.mutation != Mutation::NewcomerBeforeReply;
        let queue_first = (behind || self.grace_left(s, p).is_some() || replying)
            && self.mutation != Mutation::NewcomerBarges;
        if queue_first {
            s.tasks[t].phase = Phase::Subscribing { ttl: None, behind };
            return;
        }
        let field = field(s, t);
        let reply = calls::acquire(&self.scripts, &mut s.server, log, &field, 0);
        self.replies_before(s, p);
        match reply {
            Reply::Nil => self.taken(s, t),
            Reply::Int(ttl) => {
                s.tasks[t].phase = Phase::Subscribing {
                    ttl: Some(ttl),
                    behind: false,
                }
            }
            other => panic!("LOCK_ACQUIRE answered {other:?}"),
        }
    }

    /// `PlainTurns::start` (the waiter registered, the process subscribed with its first),
    /// then `next_turn` with nothing busy yet.
    pub(super) fn subscribe(&self, s: &mut TasksState, t: usize, ttl: Option<i64>, behind: bool) {
        let now = s.server.now();
        let p = s.tasks[t].process as usize;
        let process = &mut s.processes[p];
        if !process.subscribed {
            s.server.subscribe(CHANNEL.as_bytes());
            process.subscribed = true;
        }
        process.queue.push(t as u8);
        s.registered_at = now;
        if let Some(ttl) = ttl.filter(|&ttl| ttl >= 0) {
            process.busy_until = Some(now + ttl as u64);
        }
        if behind {
            self.park(s, t, None);
        } else {
            self.grace_loop(s, t);
        }
    }

    /// `Hold::try_once` with the claim priority `ClaimGuard::next` gives this process's first
    /// waiter, then `taken` or `next_turn` with what it found.
    pub(super) fn attempt(&self, s: &mut TasksState, t: usize, log: &mut Log) {
        let now = s.server.now();
        let p = s.tasks[t].process as usize;
        let first = s.processes[p].queue.first() == Some(&(t as u8));
        let task = &mut s.tasks[t];
        let mut priority = 0;
        if first {
            task.tries += 1;
            if task.tries >= 2 {
                task.claimed = true;
                priority = u32::from(task.tries - 1);
            }
        }
        let field = field(s, t);
        let reply = calls::acquire(&self.scripts, &mut s.server, log, &field, priority);
        self.replies_before(s, p);
        match reply {
            Reply::Nil => self.taken(s, t),
            Reply::Int(ttl) => {
                // `next_turn`: note the lease end, wait for a message at most the hint (no TTL:
                // the watchdog timeout), at least 1 ms.
                if ttl >= 0 {
                    s.processes[p].busy_until = Some(now + ttl as u64);
                }
                let bound = if ttl < 0 { LEASE } else { (ttl as u64).max(1) };
                s.tasks[t].phase = Phase::Waiting {
                    stage: Stage::Turn,
                    until: now + bound,
                };
            }
            other => panic!("LOCK_ACQUIRE answered {other:?}"),
        }
    }

    /// A wait of task `t` ended (a wake-up, its bound, or a release's verdict): the code after
    /// that await runs to the next one.
    pub(super) fn resume(&self, s: &mut TasksState, t: usize) {
        let Phase::Waiting { stage, .. } = s.tasks[t].phase else {
            unreachable!("resumed while waiting")
        };
        let p = s.tasks[t].process as usize;
        // `Waiter::wait` consumes a wake-up; `await_release_reply` waits on the verdicts.
        let message = stage != Stage::Reply && std::mem::take(&mut s.tasks[t].woken);
        let first = s.processes[p].queue.first() == Some(&(t as u8));
        match stage {
            Stage::Turn if !message && !first => self.park(s, t, None),
            Stage::Park { overdue } if !message => self.park(s, t, overdue),
            Stage::Reply => self.grace_wait(s, t, true),
            Stage::Grace if self.mutation == Mutation::SingleRound => self.grace_wait(s, t, false),
            _ => self.grace_loop(s, t),
        }
    }

    /// `park_behind`: until a message wakes it or the lock's noted lease may have ended (plus
    /// the claim window); then, while a waiter ahead is still queued, a command timeout more
    /// for it to try first.
    fn park(&self, s: &mut TasksState, t: usize, overdue: Option<u64>) {
        let now = s.server.now();
        let p = s.tasks[t].process as usize;
        let first = s.processes[p].queue.first() == Some(&(t as u8));
        let slack = WINDOW.max(1);
        let (stage, until) = match s.processes[p].busy_until {
            Some(until) if until + slack > now => (Stage::Park { overdue: None }, until + slack),
            Some(_) if !first && overdue.unwrap_or(now) + COMMAND_TIMEOUT > now => {
                let overdue = Some(overdue.unwrap_or(now));
                (Stage::Park { overdue }, now + slack)
            }
            Some(_) => return self.grace_loop(s, t),
            None => (Stage::ParkOnce, now + slack),
        };
        s.tasks[t].phase = Phase::Waiting { stage, until };
    }

    /// A round of `next_turn`'s hand-off loop: while a release of this process's awaits its
    /// reply (and the task has not claimed), wait for it (a command timeout at most); then, if
    /// a grace of this process's is in force, wait for it. After either wait, the loop goes
    /// round again; when neither was waited for, the task tries.
    fn grace_loop(&self, s: &mut TasksState, t: usize) {
        let now = s.server.now();
        let p = s.tasks[t].process as usize;
        let replying = s.processes[p].awaiting_reply > 0 && self.mutation != Mutation::NoReplyWait;
        if !s.tasks[t].claimed && replying {
            s.tasks[t].phase = Phase::Waiting {
                stage: Stage::Reply,
                until: now + COMMAND_TIMEOUT,
            };
        } else {
            self.grace_wait(s, t, false);
        }
    }

    /// The round's grace, after its reply wait (`awaited`) or none.
    pub(super) fn grace_wait(&self, s: &mut TasksState, t: usize, awaited: bool) {
        let claimed = s.tasks[t].claimed;
        s.tasks[t].phase = match self.grace_left(s, t_process(s, t)) {
            Some(until) if !claimed => Phase::Waiting {
                stage: Stage::Grace,
                until,
            },
            _ if awaited && self.mutation != Mutation::SingleRound => return self.grace_loop(s, t),
            _ => Phase::Ready,
        };
    }

    /// `Handoffs::pending`: when process `p`'s grace ends, unless it ran out or another
    /// process's release came since (more messages than its own echo); a spent grace goes.
    pub(super) fn grace_left(&self, s: &mut TasksState, p: usize) -> Option<u64> {
        let now = s.server.now();
        let process = &mut s.processes[p];
        let grace = process.grace?;
        let since = process.recent.iter().filter(|&&r| r > grace.seq).count();
        if now >= grace.until || since > usize::from(grace.subscribed) {
            process.grace = None;
            return None;
        }
        Some(grace.until)
    }

    /// `Sending::taken` and `PlainTurns::acquired`: the task holds the lock; its waiter leaves
    /// the queue without waking anyone (its release will), noting the lease end first.
    pub(super) fn taken(&self, s: &mut TasksState, t: usize) {
        let now = s.server.now();
        let p = s.tasks[t].process as usize;
        let process = &mut s.processes[p];
        if let Some(k) = process.queue.iter().position(|&q| q == t as u8) {
            process.busy_until = Some(now + LEASE);
            process.queue.remove(k);
            self.unsubscribe_if_idle(s, p);
        }
        let task = &mut s.tasks[t];
        (task.holds, task.deadline, task.renew_due) = (true, now + LEASE, now + RENEW_EVERY);
        (task.claimed, task.tries, task.woken) = (false, 0, false);
        task.pc += 1;
        task.phase = Phase::Idle;
    }

    /// A waiter leaves without the lock (`Waiter`'s drop): it wakes the next waiter not woken
    /// yet (passing on a wake-up it had not used).
    pub(super) fn leave_queue(&self, s: &mut TasksState, t: usize) {
        let p = s.tasks[t].process as usize;
        s.tasks[t].woken = false;
        let process = &mut s.processes[p];
        let Some(k) = process.queue.iter().position(|&q| q == t as u8) else {
            return;
        };
        process.queue.remove(k);
        if self.mutation != Mutation::NoPassOn {
            self.wake_one(s, p);
        }
        self.unsubscribe_if_idle(s, p);
    }

    /// `Channel::wake_one`: the first waiter of process `p` not already woken.
    pub(super) fn wake_one(&self, s: &mut TasksState, p: usize) {
        let queue = &s.processes[p].queue;
        if let Some(&t) = queue.iter().find(|&&t| !s.tasks[t as usize].woken) {
            s.tasks[t as usize].woken = true;
        }
    }

    /// The last waiter out unsubscribes the channel; the channel's notes go with it, and a
    /// message on its way finds nobody.
    fn unsubscribe_if_idle(&self, s: &mut TasksState, p: usize) {
        let process = &mut s.processes[p];
        if process.queue.is_empty() && process.subscribed {
            s.server.unsubscribe(CHANNEL.as_bytes());
            (process.subscribed, process.inbox) = (false, 0);
            (process.busy_until, process.recent) = (None, [0; 2]);
        }
    }

    /// `Handoffs::released`: a release's reply says it freed the lock and woke `woken`
    /// subscribed connections; more than this process's own means other processes wait, and
    /// its tasks let them go first for the grace.
    pub(super) fn released(&self, s: &mut TasksState, p: usize, woken: u64, mark: (u8, bool)) {
        let now = s.server.now();
        let (seq, subscribed) = mark;
        let grace = (woken > u64::from(subscribed) && self.mutation != Mutation::NoGrace)
            .then_some(super::state::Grace {
                until: now + GRACE,
                seq,
                subscribed,
            });
        s.processes[p].grace = grace;
    }
}
