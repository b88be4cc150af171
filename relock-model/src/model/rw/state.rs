//! The read-write lock model's state: the simulated server, each client as the state machine
//! relock's acquire, wait, release and watchdog make of it (a read side and a write side, each a
//! hold of its own in relock's registry), the faults spent, and since when the lock is free.

use std::fmt;

use crate::server::{Data, Server};

/// The lease of every hold, in ms (the watchdog timeout: `Config::with_watchdog_timeout`).
pub const LEASE: u64 = 30;
/// The claim window, in ms (`Config::with_claim_window`).
pub const WINDOW: u64 = 5;
/// The command timeout, in ms (`Config::with_command_timeout`).
pub const COMMAND_TIMEOUT: u64 = 2;
/// The most sends of one release (`wait::TRIES`).
pub const TRIES: u8 = 3;
/// How long a release's replay key lives, in ms: `command_timeout * 2 * TRIES`
/// (`release::Hold::outgoing`).
pub const REPLAY_TTL: u64 = COMMAND_TIMEOUT * 2 * TRIES as u64;
/// A release's last send goes out within `2 * TRIES - 1` command timeouts of its start (what
/// relock assumes when it sizes the replay key): the clock waits for it.
pub const RETRY_BY: u64 = COMMAND_TIMEOUT * (2 * TRIES as u64 - 1);
/// The watchdog renews every third of the lease (`watchdog::Watchdog::run`).
pub const RENEW_EVERY: u64 = LEASE / 3;
/// An acquire whose reply was lost reads the lock back on its connection within two command
/// timeouts of its send (one for the reply it lost, one for the read-back's reconnect and
/// reply, as `scripts::met` leaves it): the model's clock stops there until it is read.
pub const READ_BACK_BY: u64 = COMMAND_TIMEOUT * 2;

/// The lock's hash (`RwLock::name`).
pub const LOCK: &str = "rw";
/// The lock's hand-off claim (`LockKeys::rw`).
pub const CLAIM: &str = "relock_claim:{rw}";
/// The lock's one wake-up channel, both sides' (`LockKeys::rw`).
pub const CHANNEL: &str = "redisson_rwlock:{rw}";

/// A side of the lock: each is a hold of its own (its own field, registry entry and lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// `RwLock::read()`: field `<uuid>:<owner>`.
    Read,
    /// `RwLock::write()`: field `<uuid>:<owner>:write`.
    Write,
}

/// One operation of a client's plan: what its task asks of the lock next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `side.lock().await`: waits as long as it takes. An error (`UpgradeWouldDeadlock`) ends
    /// the task (`?`).
    Lock(Side),
    /// `guard.unlock().await`: the task waits for the release.
    Unlock(Side),
    /// `drop(guard)`: the release goes on in the background, the task goes on at once.
    Drop(Side),
}

/// A release in flight: one hold of a side leaving (`Hold::release_as`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Leaving {
    /// When it started (`Outgoing::sent_at`).
    pub sent_at: u64,
    /// Sends whose reply was lost so far.
    pub tries: u8,
}

/// One side's holds as the owner sees them (relock's registry entry for its hold key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Holds {
    /// Live guards of this side.
    pub holds: u8,
    /// The local deadline (`lost()` completes then): the send time of the latest command that
    /// confirmed the lease, plus the lease.
    pub deadline: u64,
    /// The watchdog found the hold gone, or renewed it too late.
    pub lost: bool,
    /// When the watchdog renews this side next.
    pub renew_due: u64,
    /// Guards of a lost generation: their release sends nothing (`Leaving::Lost`).
    pub stale: u8,
    /// A release of one of its guards in flight.
    pub leaving: Option<Leaving>,
    /// Release requests sent (the request id of the latest).
    pub requests: u8,
}

impl Holds {
    /// Guards the owner still uses: those not being released.
    pub fn using(&self) -> u8 {
        self.holds - u8::from(self.leaving.is_some())
    }

    /// Whether the owner believes it holds this side at `now`.
    pub fn believes(&self, now: u64) -> bool {
        self.using() > 0 && !self.lost && now < self.deadline
    }

    /// The live guards of this side's current generation at `now` (`Registry::guards`, once
    /// `Sending::gate` marked a lapsed generation lost): none once its holds lapsed locally,
    /// and not the guard whose release is on its way (unregistered before it is sent).
    pub fn live_guards(&self, now: u64) -> u8 {
        if self.lost || now >= self.deadline {
            0
        } else {
            self.using()
        }
    }

    /// Whether this side's holds lapsed locally while their guards live (`Registry::lapsed_hold`):
    /// Redis may still count them.
    pub fn lapsed(&self, now: u64) -> bool {
        self.holds > 0 && (self.lost || now >= self.deadline)
    }
}

/// Where a client's task stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// No operation in flight: the next one of its plan may start.
    Idle,
    /// Its first attempt found the lock busy: it subscribes, then tries again at once.
    Subscribing,
    /// Subscribed, waiting for a message or its timer (the PTTL the script returned).
    Waiting {
        /// When the timer fires (server clock, ms).
        until: u64,
    },
    /// `unlock().await`: waits for its side's release.
    Unlocking,
    /// An acquire of `side` whose reply was lost (its script ran or not): it reads the lock
    /// back on its connection (`Sending::read_back`).
    ReadingBack {
        /// The side asked for.
        side: Side,
        /// When the acquire was sent (the lease of a hold it took counts from then).
        sent_at: u64,
        /// The owner's live guards of `side` before it was sent (`Sending::held_before`).
        held_before: u8,
    },
    /// An acquire of `side` dropped (cancelled) while its outcome was unknown, or whose
    /// read-back failed too: its `OrphanCheck` reads the lock back in the background and
    /// releases a hold no guard stands for; the owner's next acquire of `side` waits for it
    /// (`Sending::gate`), and a cancelled task has nothing left to do.
    OrphanCheck {
        /// The side asked for.
        side: Side,
        /// Whether the acquire was cancelled (else it failed, and the owner's task calls
        /// `lock()` again).
        cancelled: bool,
    },
    /// The process died: its holds expire with their lease, its claim with its window.
    Crashed,
}

/// What a cancelled acquire left to clean up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cancelled {
    /// Not cancelled.
    No,
    /// Cancelled; its claim's withdrawal (UNCLAIM in the background) not run yet.
    Pending,
    /// Cancelled, and cleaned up (nothing claimed, or the claim withdrawn).
    Clean,
}

/// How a write acquire was refused as an upgrade (`RELOCK_UPGRADE`), if it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Upgrade {
    /// Never refused.
    No,
    /// Refused while the owner held a read guard.
    Holding,
    /// Refused while the owner's read guard was dropped, its release still on its way
    /// (commit `bb3725d`'s race).
    Releasing,
    /// Refused while the owner had no read hold at all: a bug.
    Unexplained,
}

/// One client: a process with its own UUID and one task (the owner) running its plan.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// The next operation of the plan.
    pub pc: u8,
    /// The task's state.
    pub phase: Phase,
    /// The read side's holds.
    pub read: Holds,
    /// The write side's holds.
    pub write: Holds,
    /// Subscribed to the channel (a waiter is registered).
    pub subscribed: bool,
    /// A message reached the waiter and was not consumed by a wait yet.
    pub woken: bool,
    /// A message is on its way to this client.
    pub inbox: bool,
    /// A message for this client was lost since its last attempt.
    pub missed: bool,
    /// A write attempt may have left a claim of this owner's (`ClaimGuard::claimed`).
    pub claimed: bool,
    /// UNCLAIM is due in the background (a `ClaimGuard` dropped while claimed).
    pub unclaiming: bool,
    /// The current acquire waited (for the `sometimes` properties).
    pub waited: bool,
    /// Whether its acquire was cancelled, and cleaned up.
    pub cancelled: Cancelled,
    /// Whether a write acquire was refused as an upgrade.
    pub upgrade: Upgrade,
    /// A release's reply was lost and its retry answered.
    pub replayed: bool,
}

impl Client {
    /// A client before its first operation.
    pub fn new() -> Client {
        Client {
            pc: 0,
            phase: Phase::Idle,
            read: Holds::default(),
            write: Holds::default(),
            subscribed: false,
            woken: false,
            inbox: false,
            missed: false,
            claimed: false,
            unclaiming: false,
            waited: false,
            cancelled: Cancelled::No,
            upgrade: Upgrade::No,
            replayed: false,
        }
    }

    /// The state of a client whose process died.
    pub fn crashed() -> Client {
        Client {
            phase: Phase::Crashed,
            ..Client::new()
        }
    }

    /// One side's holds.
    pub fn side(&self, side: Side) -> &Holds {
        match side {
            Side::Read => &self.read,
            Side::Write => &self.write,
        }
    }

    /// One side's holds, to change.
    pub fn side_mut(&mut self, side: Side) -> &mut Holds {
        match side {
            Side::Read => &mut self.read,
            Side::Write => &mut self.write,
        }
    }
}

impl Default for Client {
    fn default() -> Client {
        Client::new()
    }
}

/// The whole model state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RwState {
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
}

/// Client `i`'s UUID (a process of its own).
pub fn uuid(i: usize) -> String {
    format!("{i}{i}{i}{i}-uuid")
}

/// Client `i`'s field of `side`: `<uuid>:<owner>`, or `<uuid>:<owner>:write`.
pub fn field(i: usize, side: Side) -> String {
    match side {
        Side::Read => format!("{}:1", uuid(i)),
        Side::Write => format!("{}:1:write", uuid(i)),
    }
}

/// Client `i`'s replay key of `side`'s release request `n` (`LockKeys::replay_key`).
pub fn replay_key(i: usize, side: Side, n: u8) -> String {
    let s = if side == Side::Read { 'r' } else { 'w' };
    format!("redisson_unlock_latch:{{rw}}:{}-{s}{n}", uuid(i))
}

/// Reader `field`'s timeout key of hold `n` (`lua/rw/readers.lua`'s `rw_timeouts`).
pub fn timeout_key(field: &str, n: u64) -> String {
    format!("{{{LOCK}}}:{field}:rwlock_timeout:{n}")
}

/// The lock's `mode`, if the hash is there.
pub fn mode(server: &Server) -> Option<String> {
    hash_field(server, "mode")
}

fn hash_field(server: &Server, name: &str) -> Option<String> {
    let entry = server.keyspace.keys.get(LOCK.as_bytes())?;
    let Data::Hash(hash) = &entry.data else {
        return None;
    };
    hash.get(name.as_bytes())
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

fn alive(server: &Server, key: &str) -> bool {
    let now = server.now();
    server
        .keyspace
        .keys
        .get(key.as_bytes())
        .is_some_and(|e| e.expires_at.is_none_or(|t| now <= t))
}

/// Client `i`'s hold count of `side` on the server: a reader counts only while one of its
/// timeout keys lives (`rw_alive`); 0 when its field is absent.
pub fn redis_holds(server: &Server, i: usize, side: Side) -> u64 {
    let field = field(i, side);
    let count: u64 = hash_field(server, &field)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if side == Side::Read && !(1..=count).any(|n| alive(server, &timeout_key(&field, n))) {
        return 0;
    }
    count
}

/// The claim's text and expiry, if there is one.
pub fn claim(server: &Server) -> Option<(String, Option<u64>)> {
    let entry = server.keyspace.keys.get(CLAIM.as_bytes())?;
    let Data::String(text) = &entry.data else {
        return None;
    };
    Some((String::from_utf8_lossy(text).into_owned(), entry.expires_at))
}

fn holds(f: &mut fmt::Formatter<'_>, name: &str, h: &Holds) -> fmt::Result {
    if h.holds == 0 && h.stale == 0 && h.leaving.is_none() {
        return Ok(());
    }
    write!(f, " {name}={}", h.holds)?;
    if h.holds > 0 {
        write!(f, "(deadline={} renew@{}", h.deadline, h.renew_due)?;
        if h.lost {
            write!(f, " lost")?;
        }
        write!(f, ")")?;
    }
    if let Some(l) = h.leaving {
        write!(f, " releasing(sent@{} lost-replies={})", l.sent_at, l.tries)?;
    }
    if h.stale > 0 {
        write!(f, " stale={}", h.stale)?;
    }
    Ok(())
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pc={} {:?}", self.pc, self.phase)?;
        holds(f, "read", &self.read)?;
        holds(f, "write", &self.write)?;
        let flags = [
            (self.subscribed, "subscribed"),
            (self.woken, "woken"),
            (self.inbox, "message-in-flight"),
            (self.missed, "missed-a-message"),
            (self.claimed, "claimed"),
            (self.unclaiming, "unclaim-due"),
        ];
        for (on, name) in flags {
            if on {
                write!(f, " {name}")?;
            }
        }
        if self.cancelled != Cancelled::No {
            write!(f, " cancelled={:?}", self.cancelled)?;
        }
        if self.upgrade != Upgrade::No {
            write!(f, " upgrade-refused={:?}", self.upgrade)?;
        }
        Ok(())
    }
}
