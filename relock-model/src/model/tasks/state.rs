//! The tasks model's state: the simulated server, each process's pub/sub hub and hand-off
//! state (shared by its tasks), and each task as the state machine `until_taken` and
//! `PlainTurns` make of its `lock()` and `unlock()`.

use std::fmt;

use crate::server::{Data, Server};

pub use super::super::lock::state::{CHANNEL, CLAIM, LOCK};

/// The lease of every hold, in ms (the watchdog timeout).
pub const LEASE: u64 = 12;
/// The claim window, in ms (`Config::with_claim_window`).
pub const WINDOW: u64 = 3;
/// The command timeout, in ms.
pub const COMMAND_TIMEOUT: u64 = 1;
/// The hand-off grace, in ms (`Config::with_handoff_grace`).
pub const GRACE: u64 = 2;
/// The watchdog renews every third of the lease.
pub const RENEW_EVERY: u64 = LEASE / 3;

/// One operation of a task's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `lock.lock().await`.
    Lock,
    /// `guard.unlock().await`.
    Unlock,
}

/// What a waiting task awaits (each an `.await` of `PlainTurns::next_turn` or `park_behind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// `next_turn`'s `waiter.wait(bound)` after a busy attempt: a message, or the holder's TTL.
    Turn,
    /// `park_behind`'s wait, its `overdue` moment (a waiter ahead that has not tried yet).
    Park {
        /// When the lock's noted lease end first lay behind this waiter, while one ahead of it
        /// was still queued.
        overdue: Option<u64>,
    },
    /// `park_behind`'s one wait when no lease end is known: it returns after it either way.
    ParkOnce,
    /// `Handoffs::await_release_reply`: a release of this process's on its way whose reply
    /// says whether a grace follows.
    Reply,
    /// The hand-off loop's `waiter.wait(grace)`.
    Grace,
}

/// Where a task's current operation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// No operation in flight.
    Idle,
    /// `start`: registers its waiter (the process subscribes with its first) after a first
    /// attempt found the lock busy (`ttl`, the hint it got: `Some(-1)` for none) or instead of
    /// one (`None`: a newcomer queued behind this process's waiters or a grace).
    Subscribing {
        /// The first attempt's retry hint, if it made one.
        ttl: Option<i64>,
        /// Queued behind this process's waiters: it parks before its first attempt.
        behind: bool,
    },
    /// Awaiting `stage` until `until` (or a wake-up).
    Waiting {
        /// What it awaits.
        stage: Stage,
        /// When the wait's bound runs out.
        until: u64,
    },
    /// Its turn came: the next attempt is due.
    Ready,
    /// A release sent, its reply not in yet (`ReleaseMark` counts it while it awaits it).
    Releasing {
        /// What the reply says: subscribed connections the release's message reached (`None`:
        /// it did not free the lock).
        woken: Option<u8>,
        /// Messages the process had received when the release was marked (`Position::seq`).
        seq: u8,
        /// Whether the process was subscribed then (its own echo wakes it too).
        subscribed: bool,
        /// Whether the mark counts as awaiting a reply (the process had waiters then).
        counted: bool,
        /// When it was sent (its reply comes within a command timeout).
        sent_at: u64,
        /// Its request id in its process: a connection answers in the order it was sent.
        ticket: u8,
    },
    /// A cancelled acquire's claim is being withdrawn (UNCLAIM in the background).
    Unclaiming,
    /// The process died.
    Crashed,
}

/// One task: an owner of its own (`<client-uuid>:<task>`) in a process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Task {
    /// Its process.
    pub process: u8,
    /// The next operation of its plan.
    pub pc: u8,
    /// The current operation's state.
    pub phase: Phase,
    /// Whether it holds the lock (its guard lives).
    pub holds: bool,
    /// Its local deadline (`lost()`), while it holds.
    pub deadline: u64,
    /// When its watchdog renews next.
    pub renew_due: u64,
    /// A wake-up delivered to its waiter and not consumed yet (`Slot::woken`).
    pub woken: bool,
    /// Attempts as its process's first waiter (`ClaimGuard::tries`).
    pub tries: u8,
    /// An attempt may have left a claim of its own (`ClaimGuard::claimed`).
    pub claimed: bool,
    /// Its acquire was cancelled, its cleanup done.
    pub cancelled: bool,
}

impl Task {
    /// A task of `process` before its first operation.
    pub fn new(process: u8) -> Task {
        Task {
            process,
            pc: 0,
            phase: Phase::Idle,
            holds: false,
            deadline: 0,
            renew_due: 0,
            woken: false,
            tries: 0,
            claimed: false,
            cancelled: false,
        }
    }

    /// Whether it waits for the lock (its waiter registered).
    pub fn waits(&self) -> bool {
        matches!(self.phase, Phase::Waiting { .. } | Phase::Ready) && !self.holds
    }

    /// Whether it believes it holds the lock at `now`.
    pub fn believes_held(&self, now: u64) -> bool {
        self.holds && self.phase != Phase::Crashed && now < self.deadline
    }
}

/// A hand-off grace: after a release of this process's woke another process's waiters, its
/// own tasks let them take the lock first (`handoff::Grace`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grace {
    /// When it ends.
    pub until: u64,
    /// Messages received when the release was marked.
    pub seq: u8,
    /// Whether the process was subscribed then (its own echo is one message more).
    pub subscribed: bool,
}

/// A release that freed the lock, as the hand-off property sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Release {
    /// The releasing task's process.
    pub process: u8,
    /// When the script ran.
    pub at: u64,
    /// Whether its message reached other processes' subscriptions.
    pub woke_others: bool,
    /// The tasks whose attempt was already on its way then (decided before the release:
    /// nothing can hold it back), as bits.
    pub in_flight: u8,
    /// Messages of earlier releases were still on their way to the releasing process when it
    /// marked this release: arriving after the mark, they count as releases by others and end
    /// the grace early (a limit of `Handoffs::pending`, which cannot tell them apart).
    pub stale_messages: bool,
}

/// One process: its pub/sub hub's state on the lock's channel and its hand-offs.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Process {
    /// Its waiters, in arrival order (tasks by index).
    pub queue: Vec<u8>,
    /// Subscribed to the lock's channel (it has waiters).
    pub subscribed: bool,
    /// Messages on their way to it.
    pub inbox: u8,
    /// Messages it has received (`Channels::messages`).
    pub seq: u8,
    /// The sequence numbers of the last two it received (`Channel::recent`).
    pub recent: [u8; 2],
    /// The latest lease end it noted (`Hub::note_busy_until`), while it has waiters.
    pub busy_until: Option<u64>,
    /// Its hand-off grace, if one is in force.
    pub grace: Option<Grace>,
    /// Its releases sent whose reply has not come back (`Handoffs::awaiting_reply`).
    pub awaiting_reply: u8,
    /// Release requests sent (the latest one's id names its replay key).
    pub requests: u8,
    /// The process died.
    pub crashed: bool,
}

impl Process {
    /// A process before any operation.
    pub fn new() -> Process {
        Process {
            queue: Vec::new(),
            subscribed: false,
            inbox: 0,
            seq: 0,
            recent: [0; 2],
            busy_until: None,
            grace: None,
            awaiting_reply: 0,
            requests: 0,
            crashed: false,
        }
    }
}

impl Default for Process {
    fn default() -> Process {
        Process::new()
    }
}

/// The whole model state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TasksState {
    /// The simulated Redis.
    pub server: Server,
    /// The processes, by index.
    pub processes: Vec<Process>,
    /// The tasks, by index.
    pub tasks: Vec<Task>,
    /// Faults spent.
    pub faults: u8,
    /// Acquires cancelled.
    pub cancels: u8,
    /// Since when the lock hash is gone (`None`: held).
    pub free_since: Option<u64>,
    /// When a waiter last registered (its first wait counts from then, if the lock was free
    /// already).
    pub registered_at: u64,
    /// Whether the lock went by expiry, or a wake-up was lost, since it became free: no message
    /// then bounds the waiters' waits, their timers do.
    pub unannounced: bool,
    /// The release that freed the lock last, while the lock stays free (for the hand-off
    /// property).
    pub released_by: Option<Release>,
    /// A task took the lock within the grace of a release of its own process that woke other
    /// processes' waiters, without a claim (the hand-off property's witness).
    pub barged: bool,
}

/// Process `p`'s UUID.
pub fn uuid(p: u8) -> String {
    format!("{p}{p}{p}{p}-uuid")
}

/// Task `t`'s holder field: its process's UUID and its own id.
pub fn field(s: &TasksState, t: usize) -> String {
    format!("{}:{}", uuid(s.tasks[t].process), t + 1)
}

/// Process `p`'s replay key of release request `n`.
pub fn replay_key(p: u8, n: u8) -> String {
    format!("redisson_unlock_latch:{{lock}}:{}-{n}", uuid(p))
}

/// The hold count of `field` on the server.
pub fn redis_holds(server: &Server, field: &str) -> u64 {
    let Some(entry) = server.keyspace.keys.get(LOCK.as_bytes()) else {
        return 0;
    };
    let Data::Hash(hash) = &entry.data else {
        return 0;
    };
    hash.get(field.as_bytes())
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0)
}

/// The holder field the lock's claim names, if there is a claim (`<priority>:<field>`).
pub fn claim_holder(server: &Server) -> Option<String> {
    let entry = server.keyspace.keys.get(CLAIM.as_bytes())?;
    let Data::String(text) = &entry.data else {
        return None;
    };
    let text = String::from_utf8_lossy(text);
    text.split_once(':').map(|(_, holder)| holder.to_string())
}

/// Whether task `t`'s release is the oldest of its process's still awaiting a reply (replies
/// come back in the order the connection sent the requests).
pub fn next_reply(s: &TasksState, t: usize) -> bool {
    let ticket = |task: &Task| match task.phase {
        Phase::Releasing { ticket, .. } => Some(ticket),
        _ => None,
    };
    let (process, Some(mine)) = (s.tasks[t].process, ticket(&s.tasks[t])) else {
        return false;
    };
    let mut others = s.tasks.iter().filter(|task| task.process == process);
    !others.any(|task| ticket(task).is_some_and(|other| other < mine))
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process {} pc={} {:?}",
            self.process, self.pc, self.phase
        )?;
        if self.holds {
            write!(
                f,
                " holds (deadline={} renew@{})",
                self.deadline, self.renew_due
            )?;
        }
        for (on, name) in [
            (self.woken, "woken"),
            (self.claimed, "claimed"),
            (self.cancelled, "cancelled"),
        ] {
            if on {
                write!(f, " {name}")?;
            }
        }
        if self.tries > 0 {
            write!(f, " tries={}", self.tries)?;
        }
        Ok(())
    }
}

impl fmt::Display for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "queue={:?} seq={}", self.queue, self.seq)?;
        if self.subscribed {
            write!(f, " subscribed")?;
        }
        if self.inbox > 0 {
            write!(f, " inbox={}", self.inbox)?;
        }
        if let Some(until) = self.busy_until {
            write!(f, " busy-until={until}")?;
        }
        if let Some(grace) = self.grace {
            write!(f, " grace-until={} (mark seq {})", grace.until, grace.seq)?;
        }
        if self.awaiting_reply > 0 {
            write!(f, " awaiting-reply={}", self.awaiting_reply)?;
        }
        if self.crashed {
            write!(f, " crashed")?;
        }
        Ok(())
    }
}
