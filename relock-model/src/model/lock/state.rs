//! The lock model's state: the simulated server, each client as the state machine relock's
//! acquire, wait, release and watchdog make of it, the faults spent, and since when the lock is
//! free (for the wake-up properties).

use std::fmt;

use crate::server::{Data, Server};

/// The lease of every hold, in ms (the watchdog timeout: `Config::with_watchdog_timeout`).
pub const LEASE: u64 = 30;
/// The claim window, in ms (`Config::with_claim_window`).
pub const WINDOW: u64 = 5;
/// The command timeout, in ms (`Config::with_command_timeout`).
pub const COMMAND_TIMEOUT: u64 = 2;
/// The retries' window, in ms: `command_timeout * 2 * TRIES` (`release::Hold::outgoing`'s
/// `retries`): a last release whose hold could lapse within it writes a replay key. The key
/// lives this plus the longer of the TTL the release leaves and the lease.
pub const REPLAY_TTL: u64 = COMMAND_TIMEOUT * 2 * TRIES as u64;
/// A release's last retry goes out within `2 * TRIES - 1` command timeouts of its first send
/// (each try waits a command timeout for the connection at most, and another for the reply):
/// what relock assumes when it sizes the replay key. The model's clock stops there until the
/// retry is sent, unless `LockModel::stalled_retries` lets a stalled process be later.
pub const RETRY_BY: u64 = COMMAND_TIMEOUT * (2 * TRIES as u64 - 1);
/// The watchdog renews every third of the lease (`watchdog::Watchdog::run`).
pub const RENEW_EVERY: u64 = LEASE / 3;
/// The most sends of one release (`wait::TRIES`).
pub const TRIES: u8 = 3;
/// An acquire whose reply was lost reads the lock back on its connection within two command
/// timeouts of its send (one for the reply it lost, one for the read-back's reconnect and
/// reply, as `scripts::met` leaves it): the model's clock stops there until it is read.
pub const READ_BACK_BY: u64 = COMMAND_TIMEOUT * 2;

/// The lock's hash.
pub const LOCK: &str = "lock";
/// The lock's hand-off claim.
pub const CLAIM: &str = "relock_claim:{lock}";
/// The lock's wake-up channel.
pub const CHANNEL: &str = "redisson_lock__channel:{lock}";

/// One operation of a client's plan: what its task asks of the lock next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `lock.lock().await`: waits as long as it takes (a second one by the holder re-enters).
    Lock,
    /// `guard.unlock().await`: releases one hold.
    Unlock,
}

/// Where a client's current operation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// No operation in flight: the next one of its plan may start.
    Idle,
    /// Its first attempt found the lock busy: it subscribes, then tries again at once.
    Subscribing,
    /// Subscribed, waiting for a message or its timer (the retry hint the script returned).
    Waiting {
        /// When the timer fires (server clock, ms).
        until: u64,
    },
    /// A release whose reply was lost: it is sent again, as a retry.
    Releasing {
        /// When the release was first sent (its `Outgoing::sent_at`).
        sent_at: u64,
        /// Whether a last release writes a replay key (ARGV\[8\]).
        replay_last: bool,
        /// Sends so far.
        tries: u8,
    },
    /// An acquire whose reply was lost (its script ran or not): it reads the lock back on its
    /// connection (`Sending::read_back`).
    ReadingBack {
        /// When the acquire was sent (the lease of a hold it took counts from then).
        sent_at: u64,
        /// The owner's live guards before it was sent (`Sending::held_before`).
        held_before: u8,
    },
    /// An acquire dropped (cancelled) while its outcome was unknown, or whose read-back failed
    /// too: its `OrphanCheck` reads the lock back in the background and releases a hold no
    /// guard stands for; the owner's next acquire waits for it.
    OrphanCheck {
        /// Whether the acquire was cancelled (else it failed, and the owner's task will call
        /// `lock()` again).
        cancelled: bool,
    },
    /// A cancelled or failed acquire whose claim is being withdrawn (`ClaimGuard`'s drop:
    /// UNCLAIM in the background).
    Unclaiming {
        /// Whether the acquire was cancelled (else it failed).
        cancelled: bool,
    },
    /// The process died: its holds expire with their lease, its claim with its window.
    Crashed,
}

/// What a cancelled acquire left to clean up, once its cleanup ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cancelled {
    /// Not cancelled.
    No,
    /// Cancelled before it claimed anything.
    Plain,
    /// Cancelled after it claimed, and its claim withdrawn.
    Withdrawn,
}

/// One client: a process with its own UUID and one task (the owner) running its plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// The next operation of the plan.
    pub pc: u8,
    /// The current operation's state.
    pub phase: Phase,
    /// Holds the owner believes it has (its live guards).
    pub holds: u8,
    /// The local deadline: until when the owner believes its holds last (`lost()` completes
    /// then): the send time of the latest command that confirmed the lease, plus the lease.
    pub deadline: u64,
    /// The watchdog found the hold gone, or renewed it too late: `lost()` completed.
    pub lost: bool,
    /// When the watchdog renews next.
    pub renew_due: u64,
    /// Subscribed to the lock's channel (a waiter is registered).
    pub subscribed: bool,
    /// A message reached the waiter and was not consumed by a wait yet.
    pub woken: bool,
    /// A message is on its way to this client.
    pub inbox: bool,
    /// A message for this client was lost since its last attempt.
    pub missed: bool,
    /// Attempts as its client's first waiter (`ClaimGuard::tries`).
    pub tries: u8,
    /// An attempt may have left a claim of this waiter's (`ClaimGuard::claimed`).
    pub claimed: bool,
    /// Whether its acquire was cancelled, and cleaned up.
    pub cancelled: Cancelled,
    /// Release requests sent (the request id of the latest).
    pub requests: u8,
    /// Guards of a generation lost before the owner took the lock again: their release sends
    /// nothing (`Leaving::Lost`).
    pub stale: u8,
}

impl Client {
    /// A client before its first operation.
    pub fn new() -> Client {
        Client {
            pc: 0,
            phase: Phase::Idle,
            holds: 0,
            deadline: 0,
            lost: false,
            renew_due: 0,
            subscribed: false,
            woken: false,
            inbox: false,
            missed: false,
            tries: 0,
            claimed: false,
            cancelled: Cancelled::No,
            requests: 0,
            stale: 0,
        }
    }

    /// The state of a client whose process died.
    pub fn crashed() -> Client {
        Client {
            phase: Phase::Crashed,
            ..Client::new()
        }
    }

    /// Holds the owner believes it has and still uses: those not being released.
    pub fn using(&self) -> u8 {
        match self.phase {
            Phase::Releasing { .. } => self.holds.saturating_sub(1),
            Phase::Crashed => 0,
            _ => self.holds,
        }
    }

    /// Whether the owner believes it holds the lock at `now`: a hold it uses, not known lost,
    /// its local deadline not passed.
    pub fn believes_held(&self, now: u64) -> bool {
        self.using() > 0 && !self.lost && now < self.deadline
    }
}

impl Default for Client {
    fn default() -> Client {
        Client::new()
    }
}

/// The whole model state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LockState {
    /// The simulated Redis.
    pub server: Server,
    /// The clients, by index.
    pub clients: Vec<Client>,
    /// Faults spent (lost messages, lost replies, crashes, restarts).
    pub faults: u8,
    /// Acquires cancelled.
    pub cancels: u8,
    /// Since when the lock hash is gone (`None`: held).
    pub free_since: Option<u64>,
    /// Whether the lock went by expiry (or a restart), not by a release: no release cut its
    /// claim then, and the next acquire cuts it to the window (`lua/common/claim.lua`).
    pub freed_by_expiry: bool,
    /// Whether the server restarted from its AOF.
    pub restarted_from_aof: bool,
}

/// Client `i`'s UUID (a process of its own).
pub fn uuid(i: usize) -> String {
    format!("{i}{i}{i}{i}-uuid")
}

/// Client `i`'s holder field: `<client-uuid>:<owner>` (its one task).
pub fn field(i: usize) -> String {
    format!("{}:1", uuid(i))
}

/// Client `i`'s replay key of release request `n`.
pub fn replay_key(i: usize, n: u8) -> String {
    format!("redisson_unlock_latch:{{lock}}:{}-{n}", uuid(i))
}

/// The hold count of client `i` on the server (0 when its field is absent).
pub fn redis_holds(server: &Server, i: usize) -> u64 {
    let Some(entry) = server.keyspace.keys.get(LOCK.as_bytes()) else {
        return 0;
    };
    let Data::Hash(hash) = &entry.data else {
        return 0;
    };
    hash.get(field(i).as_bytes())
        .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
        .unwrap_or(0)
}

/// The claim's text and expiry, if there is one.
pub fn claim(server: &Server) -> Option<(String, Option<u64>)> {
    let entry = server.keyspace.keys.get(CLAIM.as_bytes())?;
    let Data::String(text) = &entry.data else {
        return None;
    };
    Some((String::from_utf8_lossy(text).into_owned(), entry.expires_at))
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pc={} {:?} holds={}", self.pc, self.phase, self.holds)?;
        if self.holds > 0 {
            write!(f, " deadline={} renew@{}", self.deadline, self.renew_due)?;
        }
        let flags = [
            (self.lost, "lost"),
            (self.subscribed, "subscribed"),
            (self.woken, "woken"),
            (self.inbox, "message-in-flight"),
            (self.missed, "missed-a-message"),
            (self.claimed, "claimed"),
        ];
        for (on, name) in flags {
            if on {
                write!(f, " {name}")?;
            }
        }
        if self.stale > 0 {
            write!(f, " stale-guards={}", self.stale)?;
        }
        if self.tries > 0 {
            write!(f, " tries={}", self.tries)?;
        }
        if self.cancelled != Cancelled::No {
            write!(f, " cancelled={:?}", self.cancelled)?;
        }
        Ok(())
    }
}
