//! The fair lock model's state: the simulated server, each client as the state machine relock's
//! fair acquire (`FairTurns`), wait, leave and release make of it, the faults spent, and the
//! ghost records the properties read (queue tickets, an overtaking seen, since when a waiter
//! heads a free lock's queue).

use std::fmt;

use crate::server::{Data, Server};

/// The lease of every hold, in ms (`lock_with_lease`: a fixed lease, no watchdog).
pub const LEASE: u64 = 15;
/// The fair waiter timeout W, in ms (`Config::with_fair_waiter_timeout`): a waiter that has not
/// run its acquire for W is dead.
pub const WAITER: u64 = 9;
/// A waiter renews its place every third of W (`FairTurns::wait_turn`).
pub const RENEW_EVERY: u64 = WAITER / 3;
/// Redisson's per-waiter wait Q (`scripts::fair::REDISSON_FAIR_WAIT_MS`), as relock passes it.
pub const REDISSON_WAIT: u64 = 300_000;
/// The command timeout, in ms (`Config::with_command_timeout`).
pub const COMMAND_TIMEOUT: u64 = 2;
/// The most sends of one release (`wait::TRIES`).
pub const TRIES: u8 = 3;
/// How long a release's replay key lives, in ms: `command_timeout * 2 * TRIES`
/// (`release::Hold::outgoing`).
pub const REPLAY_TTL: u64 = COMMAND_TIMEOUT * 2 * TRIES as u64;
/// A release's last retry goes out within `2 * TRIES - 1` command timeouts of its first send:
/// the clock stops there until the retry is sent.
pub const RETRY_BY: u64 = COMMAND_TIMEOUT * (2 * TRIES as u64 - 1);
/// An acquire whose reply was lost reads the lock back on its connection within two command
/// timeouts of its send (one for the reply it lost, one for the read-back's reconnect and
/// reply): the model's clock stops there until it is read. Shorter than the lease, so a hold
/// the read-back finds is never answered late (`Hold::answered_late`).
pub const READ_BACK_BY: u64 = COMMAND_TIMEOUT * 2;

/// The lock's hash.
pub const LOCK: &str = "lock";
/// The queue of waiting holder fields.
pub const QUEUE: &str = "redisson_lock_queue:{lock}";
/// The waiters' deadlines (Redisson's arithmetic).
pub const TIMEOUT: &str = "redisson_lock_timeout:{lock}";
/// relock's liveness record of its waiters.
pub const ALIVE: &str = "relock_fair_alive:{lock}";
/// The waiters' channel prefix: a waiter listens on `<prefix>:<field>`.
pub const CHANNEL: &str = "redisson_lock__channel:{lock}";

/// One operation of a client's plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `lock.lock_with_lease(LEASE).await`: waits as long as it takes (the holder re-enters).
    Lock,
    /// `guard.unlock().await`: releases one hold.
    Unlock,
}

/// Where a client's current operation stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// No operation in flight: the next one of its plan may start.
    Idle,
    /// Its first attempt found the lock busy (and queued it): it subscribes to its own channel,
    /// then tries again at once.
    Subscribing,
    /// Subscribed, waiting for its message or its timer (the hint, at most W/3).
    Waiting {
        /// When the timer fires (server clock, ms).
        until: u64,
    },
    /// A release whose reply was lost: sent again, as a retry.
    Releasing {
        /// When the release was first sent.
        sent_at: u64,
        /// Whether a last release writes a replay key (ARGV\[8\]).
        replay_last: bool,
        /// The TTL asked for the holds that remain (ARGV\[2\]).
        keep: u64,
        /// Sends so far.
        tries: u8,
    },
    /// An acquire whose reply was lost (its script ran or not): it reads the lock back on its
    /// connection (`Sending::read_back`).
    ReadingBack {
        /// When the acquire was sent (the lease of a hold it took counts from then).
        sent_at: u64,
        /// The owner's guards before it was sent (`Sending::held_before`).
        held_before: u8,
    },
    /// An acquire dropped (cancelled) while its outcome was unknown, or whose read-back failed
    /// too: its `OrphanCheck` reads the lock back in the background and releases a hold no
    /// guard stands for; the owner's next acquire waits for it (`Sending::gate`: the check
    /// counts as a release in flight). Cancelled or not is the client's `cancelled`.
    OrphanCheck,
    /// The process died: its hold expires with its lease, its place lapses with its liveness.
    Crashed,
}

/// Whether a client's acquire was cancelled, and its leave ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cancelled {
    /// Not cancelled.
    No,
    /// Cancelled; its leave has not run yet.
    Pending,
    /// Cancelled, and its leave ran.
    Left,
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
    /// Until when the owner believes its holds last (the latest hold's send time + lease).
    pub deadline: u64,
    /// Subscribed to its own channel (a waiter is registered).
    pub subscribed: bool,
    /// A message reached the waiter and no attempt consumed it yet.
    pub woken: bool,
    /// A message is on its way to this client.
    pub inbox: bool,
    /// A message for this client was lost since its last attempt.
    pub missed: bool,
    /// Whether its acquire was cancelled, and left.
    pub cancelled: Cancelled,
    /// A `lock()` of its, cancelled or failed, gives up its place in the background
    /// (`LeaveQueue`'s drop: FAIR_LEAVE), not yet run. Two such leaves of one owner are one:
    /// both take the same field out, and the second finds nothing of it.
    pub leaving: bool,
    /// Release requests sent (the request id of the latest).
    pub requests: u8,
    /// Guards of a lapsed generation: their release sends nothing.
    pub stale: u8,
    /// Ghost: its place in the order of queuing (set when its field first enters the queue in
    /// the current acquire), cleared when it takes the lock.
    pub ticket: Option<u8>,
    /// Ghost: its last take was a queued waiter's, while another queued behind it.
    pub handed: bool,
    /// Ghost: it died with its field queued.
    pub died_queued: bool,
    /// Its last attempt found another waiter heading the queue: its timer is that waiter's
    /// death (or the renewal), not the lock's TTL.
    pub behind: bool,
}

impl Client {
    /// A client before its first operation.
    pub fn new() -> Client {
        Client {
            pc: 0,
            phase: Phase::Idle,
            holds: 0,
            deadline: 0,
            subscribed: false,
            woken: false,
            inbox: false,
            missed: false,
            cancelled: Cancelled::No,
            leaving: false,
            requests: 0,
            stale: 0,
            ticket: None,
            handed: false,
            died_queued: false,
            behind: false,
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

    /// Whether the owner believes it holds the lock at `now`.
    pub fn believes_held(&self, now: u64) -> bool {
        self.using() > 0 && now < self.deadline
    }

    /// A live waiter: in an acquire that waits, not cancelled, not dead.
    pub fn waits(&self) -> bool {
        matches!(self.phase, Phase::Subscribing | Phase::Waiting { .. })
    }

    /// An acquire whose outcome is unknown: reading back after a lost reply, or its orphan
    /// check pending. Redis may count a hold of it that the owner does not (yet) believe in.
    pub fn unknown(&self) -> bool {
        matches!(self.phase, Phase::ReadingBack { .. } | Phase::OrphanCheck)
    }
}

impl Default for Client {
    fn default() -> Client {
        Client::new()
    }
}

/// The whole model state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FairState {
    /// The simulated Redis.
    pub server: Server,
    /// The clients, by index.
    pub clients: Vec<Client>,
    /// Faults spent (lost messages, lost replies, crashes).
    pub faults: u8,
    /// Acquires cancelled.
    pub cancels: u8,
    /// Ghost: the next queue ticket.
    pub next_ticket: u8,
    /// Ghost: the first overtaking seen, (taker, live waiter it passed).
    pub overtaken: Option<(u8, u8)>,
    /// Ghost: the client whose field heads the queue (by the scripts' rule of dead heads), since
    /// when, and whether the lock was held at that moment.
    pub head: Option<(u8, u64, bool)>,
    /// Ghost: since when the lock hash is gone (`None`: held).
    pub free_since: Option<u64>,
}

/// Client `i`'s UUID (a process of its own).
pub fn uuid(i: usize) -> String {
    format!("{i}{i}{i}{i}-uuid")
}

/// Client `i`'s holder field: `<client-uuid>:<owner>`.
pub fn field(i: usize) -> String {
    format!("{}:1", uuid(i))
}

/// Client `i`'s wake-up channel: `<prefix>:<field>`.
pub fn channel(i: usize) -> String {
    format!("{CHANNEL}:{}", field(i))
}

/// Client `i`'s replay key of release request `n`.
pub fn replay_key(i: usize, n: u8) -> String {
    format!("redisson_unlock_latch:{{lock}}:{}-{n}", uuid(i))
}

/// The client a holder field belongs to.
pub fn client_of(field: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(field).ok()?;
    text.split('-').next()?.get(..1)?.parse().ok()
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

/// Whether the lock hash exists.
pub fn locked(server: &Server) -> bool {
    server.keyspace.keys.contains_key(LOCK.as_bytes())
}

/// The queue's fields, head first.
pub fn queue(server: &Server) -> Vec<Vec<u8>> {
    match server.keyspace.keys.get(QUEUE.as_bytes()).map(|e| &e.data) {
        Some(Data::List(list)) => list.iter().cloned().collect(),
        _ => Vec::new(),
    }
}

/// A field's score in the zset `key`.
pub fn score(server: &Server, key: &str, field: &[u8]) -> Option<f64> {
    match server.keyspace.keys.get(key.as_bytes()).map(|e| &e.data) {
        Some(Data::ZSet(z)) => z.0.get(field).map(|s| s.0),
        _ => None,
    }
}

/// The client whose field heads the queue by the scripts' rule (`live_head` in
/// lua/fair/queue.lua, read only): the first field whose deadline, or earlier liveness record,
/// is still ahead.
pub fn live_head(server: &Server) -> Option<usize> {
    let now = server.now() as f64;
    queue(server).into_iter().find_map(|f| {
        let deadline = score(server, TIMEOUT, &f)?;
        let dead = score(server, ALIVE, &f).map_or(deadline, |b| b.min(deadline));
        (dead > now).then(|| client_of(&f)).flatten()
    })
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pc={} {:?} holds={}", self.pc, self.phase, self.holds)?;
        if self.holds > 0 {
            write!(f, " deadline={}", self.deadline)?;
        }
        let flags = [
            (self.subscribed, "subscribed"),
            (self.woken, "woken"),
            (self.inbox, "message-in-flight"),
            (self.missed, "missed-a-message"),
            (self.leaving, "leave-pending"),
        ];
        for (on, name) in flags {
            if on {
                write!(f, " {name}")?;
            }
        }
        if let Some(t) = self.ticket {
            write!(f, " ticket={t}")?;
        }
        if self.stale > 0 {
            write!(f, " stale-guards={}", self.stale)?;
        }
        if self.cancelled != Cancelled::No {
            write!(f, " cancelled={:?}", self.cancelled)?;
        }
        Ok(())
    }
}
