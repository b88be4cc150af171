//! The election model's state: the simulated primary and its replica's keyspace, each candidate
//! as the state machine relock's campaign, term, watchdog and resign make of it, the watcher as
//! `election::watch::Watcher` is, and the ghost facts the properties read (epochs granted, what
//! the watcher delivered, scripts that failed).

use std::fmt;

use crate::server::{Data, Keyspace, Server};

/// The lease of a term, in ms (the watchdog timeout).
pub const LEASE: u64 = 30;
/// The watchdog renews every third of the lease (`watchdog::Watchdog::run`).
pub const RENEW_EVERY: u64 = LEASE / 3;
/// The claim window, in ms (`Config::with_claim_window`).
pub const WINDOW: u64 = 5;
/// How long a release's replay key lives, in ms (`command_timeout * 2 * TRIES`, with a 2 ms
/// command timeout).
pub const REPLAY_TTL: u64 = 12;
/// The most sends of one release (`wait::TRIES`).
pub const TRIES: u8 = 3;
/// How long a watch waits after a failed read (`watch::AFTER_ERROR`, scaled to the model's ms).
pub const AFTER_ERROR: u64 = 5;
/// How many entries one read of history takes at most (`watch::READ_AT_ONCE`).
pub const READ_AT_ONCE: u64 = 100;

/// The election's lock hash (the election is named `e`).
pub const LOCK: &str = "relock_election:e";
/// The hand-off claim.
pub const CLAIM: &str = "relock_claim:{relock_election:e}";
/// The epoch counter (a fenced lock's token counter).
pub const EPOCH: &str = "redisson_lock_token:{relock_election:e}";
/// The history stream.
pub const HISTORY: &str = "relock_election_log:{relock_election:e}";
/// The change channel (watchers).
pub const CHANGES: &str = "relock_election_changes:{relock_election:e}";
/// The candidates' wake-up channel.
pub const CHANNEL: &str = "redisson_lock__channel:{relock_election:e}";

/// One operation of a candidate's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `election.campaign().await`: waits until it leads.
    Campaign,
    /// `term.proclaim(..)`: writes metadata to history within the term.
    Proclaim,
    /// `term.resign()`: gives the term back.
    Resign,
}

/// Where a candidate's current operation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// No operation in flight.
    Idle,
    /// Its first attempt found a leader: it subscribes, then tries again at once.
    Subscribing,
    /// Subscribed, waiting for a message or its timer.
    Waiting {
        /// When the timer fires (ms).
        until: u64,
    },
    /// A resign whose reply was lost: sent again as a retry.
    Releasing {
        /// When the release was first sent.
        sent_at: u64,
        /// Whether a last release writes a replay key (ARGV\[7\]).
        replay_last: bool,
        /// Sends so far.
        tries: u8,
    },
    /// The campaign failed with an error (a script error): the caller got no term.
    Failed,
    /// The process died.
    Crashed,
}

/// One candidate: a process of its own running its plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Candidate {
    /// The next operation of the plan.
    pub pc: u8,
    /// The current operation's state.
    pub phase: Phase,
    /// The epoch of the term it holds (`Term::epoch`), if it holds one.
    pub epoch: Option<u64>,
    /// The term's local deadline (`Term::lost` completes then).
    pub deadline: u64,
    /// The watchdog found the term gone, or renewed too late.
    pub lost: bool,
    /// When the watchdog renews next.
    pub renew_due: u64,
    /// Subscribed to the wake-up channel.
    pub subscribed: bool,
    /// Woken by a message (or a reconnect), not consumed yet.
    pub woken: bool,
    /// A message is on its way to it.
    pub inbox: bool,
    /// Attempts as its client's first waiter (`ClaimGuard::tries`).
    pub tries: u8,
    /// Release requests sent.
    pub requests: u8,
}

impl Candidate {
    /// A candidate before its first operation.
    pub fn new() -> Candidate {
        Candidate {
            pc: 0,
            phase: Phase::Idle,
            epoch: None,
            deadline: 0,
            lost: false,
            renew_due: 0,
            subscribed: false,
            woken: false,
            inbox: false,
            tries: 0,
            requests: 0,
        }
    }

    /// Whether it believes it leads at `now`: a term not being given back, not known lost,
    /// its local deadline not passed.
    pub fn believes_leads(&self, now: u64) -> bool {
        let giving_back = matches!(self.phase, Phase::Releasing { .. } | Phase::Crashed);
        self.epoch.is_some() && !giving_back && !self.lost && now < self.deadline
    }
}

impl Default for Candidate {
    fn default() -> Candidate {
        Candidate::new()
    }
}

/// Where the watcher stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WatchPhase {
    /// Not started: the first poll subscribes, then reads.
    Start,
    /// Waiting for a message or its timer (the leader's lease end, or after an error).
    Waiting {
        /// When it reads again without a message (ms).
        until: u64,
    },
}

/// The watcher: `watch()` (or `watch_after(seq)`) polled in a loop, with the ghost of what it
/// delivered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Watcher {
    /// Where it stands.
    pub phase: WatchPhase,
    /// The last place delivered (`Watcher::after`; `None`: the first read takes the newest).
    pub after: Option<u64>,
    /// What history must hold at `after` (`Watcher::mark`): the stamp of the entry delivered
    /// there (`None`: nothing delivered there).
    pub mark: Option<String>,
    /// The epoch of the last change delivered (`Watcher::last_epoch`).
    pub last_epoch: u64,
    /// Woken by a message or a reconnect, not consumed yet.
    pub woken: bool,
    /// A message is on its way to it.
    pub inbox: bool,
    /// Ghost: the changes it delivered since its last gap, `(seq, entry)`.
    pub seen: Vec<(u64, String)>,
    /// Ghost: gaps it reported.
    pub gaps: u8,
    /// Ghost: how the promise "every change once, in order, or a gap" broke, if it did.
    pub broken: Option<String>,
}

impl Watcher {
    /// A watcher before its first poll, resuming after `after` (`watch_after`) or not.
    pub fn new(after: Option<u64>) -> Watcher {
        Watcher {
            phase: WatchPhase::Start,
            after,
            mark: None,
            last_epoch: 0,
            woken: false,
            inbox: false,
            seen: Vec::new(),
            gaps: 0,
            broken: None,
        }
    }
}

/// The whole model state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ElectionState {
    /// The primary: the simulated Redis every script runs on.
    pub server: Server,
    /// The replica's keyspace, as of its last replication (`None`: no replica modelled).
    pub replica: Option<Keyspace>,
    /// The candidates, by index.
    pub candidates: Vec<Candidate>,
    /// The watcher.
    pub watcher: Watcher,
    /// Faults spent.
    pub faults: u8,
    /// Ghost: every epoch a term was granted with, in order.
    pub epochs: Vec<u64>,
    /// Ghost: epochs of terms given back by a resign that the server confirmed.
    pub resigned: Vec<u64>,
    /// Ghost: the first script that answered an error, with its reply.
    pub failed: Option<String>,
}

/// Candidate `i`'s holder field, `<client-uuid>:<owner>`.
pub fn field(i: usize) -> String {
    format!("c{i}-uuid:1")
}

/// Candidate `i`'s replay key of release request `n`.
pub fn replay_key(i: usize, n: u8) -> String {
    format!("redisson_unlock_latch:{{relock_election:e}}:c{i}-uuid-{n}")
}

/// A history entry as the model names it: its event and fields, compactly.
pub fn describe(fields: &[(Vec<u8>, Vec<u8>)]) -> String {
    let get = |name: &str| {
        fields
            .iter()
            .find(|(f, _)| f == name.as_bytes())
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    let event = get("event");
    let mut text = format!("{event} epoch={} at={}", get("epoch"), get("at"));
    match event.as_str() {
        "vacant" => text.push_str(&format!(" {}", get("reason"))),
        _ => text.push_str(&format!(" {} meta={:?}", get("leader"), get("metadata"))),
    }
    text
}

/// The history in `keys`: each entry's seq and description.
pub fn history(keys: &Keyspace) -> Vec<(u64, String)> {
    let Some(entry) = keys.keys.get(HISTORY.as_bytes()) else {
        return Vec::new();
    };
    let Data::Stream(stream) = &entry.data else {
        return Vec::new();
    };
    stream
        .entries
        .iter()
        .map(|(id, fields)| (id.ms, describe(fields)))
        .collect()
}

/// The seq of the last ID the history stream in `keys` gave (its newest entry's, unless that
/// was deleted), if there is a stream.
pub fn last_id(keys: &Keyspace) -> Option<u64> {
    match &keys.keys.get(HISTORY.as_bytes())?.data {
        Data::Stream(stream) => Some(stream.last_id.ms),
        _ => None,
    }
}

/// The field that holds the election's lock hash in `keys`, if any.
pub fn holder(keys: &Keyspace) -> Option<String> {
    let entry = keys.keys.get(LOCK.as_bytes())?;
    let Data::Hash(hash) = &entry.data else {
        return None;
    };
    hash.0
        .first()
        .map(|(f, _)| String::from_utf8_lossy(f).into_owned())
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pc={} {:?}", self.pc, self.phase)?;
        if let Some(epoch) = self.epoch {
            write!(
                f,
                " term epoch={epoch} deadline={} renew@{}",
                self.deadline, self.renew_due
            )?;
        }
        for (on, name) in [
            (self.lost, "lost"),
            (self.subscribed, "subscribed"),
            (self.woken, "woken"),
            (self.inbox, "message-in-flight"),
        ] {
            if on {
                write!(f, " {name}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Watcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} after={:?} last_epoch={}",
            self.phase, self.after, self.last_epoch
        )?;
        if let Some(mark) = &self.mark {
            write!(f, " mark=[{mark}]")?;
        }
        if self.woken {
            write!(f, " woken")?;
        }
        if self.inbox {
            write!(f, " message-in-flight")?;
        }
        let seen: Vec<String> = self.seen.iter().map(|(s, e)| format!("{s}:{e}")).collect();
        write!(f, " delivered=[{}] gaps={}", seen.join("; "), self.gaps)
    }
}
