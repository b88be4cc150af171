//! The model's state: the simulated server, each client's place in relock's code, and the
//! world's fault budget.

use crate::server::{Bytes, Data, Reply, Server};

/// The semaphore's name: the key of its available count.
pub const NAME: &str = "sem";
/// Its leases, `{<name>}:timeout`.
pub const LEASES: &str = "{sem}:timeout";
/// Its wake-up channel, `redisson_sc:{<name>}`.
pub const CHANNEL: &str = "redisson_sc:{sem}";
/// Redisson's score of a permit without a lease (`permit/mod.rs`'s `NO_LEASE`).
pub const NO_LEASE: &str = "922337203685477";

/// A permit id: relock draws a fresh UUID per attempt (`take`); the model numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id {
    /// The client that drew it.
    pub client: u8,
    /// Its attempt number within that client.
    pub n: u8,
}

impl Id {
    /// The 16 raw bytes the scripts get: `permit-c<client>-n<5 digits>`.
    pub fn bytes(self) -> Vec<u8> {
        format!("permit-c{}-n{:05}", self.client, self.n).into_bytes()
    }
}

/// A request a client has sent and not yet seen answered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Request {
    /// `PERMIT_ACQUIRE` for `id` (`take`), sent at `sent_at` (the lease counts from there).
    Acquire {
        /// The permit id drawn for this attempt.
        id: Id,
        /// When it was sent.
        sent_at: u64,
    },
    /// `ZSCORE <leases> <id>` after an acquire's lost reply (`take`'s read-back).
    ReadBack {
        /// The id of the acquire whose reply was lost.
        id: Id,
        /// When that acquire was sent.
        sent_at: u64,
    },
    /// `PERMIT_RELEASE` of `id` (`give_back`), try `tries` of `until_answered`'s 3.
    Release {
        /// The permit given back.
        id: Id,
        /// Which try this is (1-based); `tries > 1` is a retry (`sent_before`).
        tries: u8,
    },
}

/// A request on the wire: not run yet (`reply: None`), or run at a moment with its reply on
/// the way back.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Call {
    /// What was sent.
    pub request: Request,
    /// The reply and the server time the script ran at, once it ran.
    pub reply: Option<(Reply, u64)>,
}

impl Call {
    /// A request just sent.
    pub fn sent(request: Request) -> Call {
        Call {
            request,
            reply: None,
        }
    }
}

/// Where a client's task is in relock's code.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Between operations (or the last one ended, with or without an error).
    Idle,
    /// An attempt (`take`) or its read-back is on the wire; `late`: replies in a row that came
    /// after their lease (`LateAnswers`).
    Acquiring {
        /// Late replies in a row.
        late: u8,
    },
    /// Parked in `OnChannel::wait_turn` until a message or `deadline` (the client's timer:
    /// the reply's arrival plus `min(poll, hint)`). `promised`: the same bound counted from when
    /// the script ran, what the server's hint promised (the lost wake-up property reads it).
    Waiting {
        /// When the timer fires.
        deadline: u64,
        /// When the server's reply said a permit may be back, at the latest.
        promised: u64,
        /// Late replies in a row.
        late: u8,
    },
    /// A `Permit` lives: `lapses_at` is its standing (send time of the latest confirmed acquire
    /// or renewal plus the lease); `lost`: the watchdog found it gone.
    Holding {
        /// The permit.
        id: Id,
        /// When `is_lost()` turns true.
        lapses_at: u64,
        /// The watchdog's renewal found it gone.
        lost: bool,
        /// Renewals left within the bound.
        renewals: u8,
    },
    /// `Permit::release` is running (`until_answered`); its outcome (`Ok`, `LeaseLost`,
    /// `NotHeld`) ends the operation either way, so the model keeps only the id.
    Releasing {
        /// The permit given back.
        id: Id,
    },
    /// The process died: its requests, background jobs and subscription are gone.
    Crashed,
}

/// One client process with one task using the semaphore.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// The task's place.
    pub phase: Phase,
    /// The task's request on the wire, if any.
    pub main: Option<Call>,
    /// Background jobs in order (`ResumeRelease`'s releases, and an acquire left on the wire by
    /// a cancelled attempt, which the same connection runs first).
    pub background: Vec<Call>,
    /// The process's hub is subscribed to the channel (a waiter is registered).
    pub subscribed: bool,
    /// The waiter's slot holds a wake-up not consumed yet.
    pub woken: bool,
    /// Messages published to this subscriber, not yet delivered (their counts).
    pub inbox: Vec<Bytes>,
    /// Operations (acquire, then release) left within the bound.
    pub ops: u8,
    /// The next attempt's number.
    pub next_n: u8,
    /// Ids the task let go of with their outcome unknown: a cancelled or late attempt, or a
    /// failed read-back; a background release gives each back.
    pub abandoned: Vec<Id>,
}

impl Client {
    /// A client with `ops` operations to run.
    pub fn new(ops: u8) -> Client {
        Client {
            phase: Phase::Idle,
            main: None,
            background: Vec::new(),
            subscribed: false,
            woken: false,
            inbox: Vec::new(),
            ops,
            next_n: 0,
            abandoned: Vec::new(),
        }
    }

    /// Whether the task believes it holds a permit now (a `Permit` that is not `is_lost()`).
    pub fn believes(&self, now: u64) -> Option<Id> {
        match self.phase {
            Phase::Holding {
                id,
                lapses_at,
                lost: false,
                ..
            } if now < lapses_at => Some(id),
            _ => None,
        }
    }
}

/// What happened so far that a `sometimes` property looks for (bits of [`State::seen`]) and
/// that no state shows by itself.
pub mod seen {
    /// A script gave back a permit whose lease had ended (lazy reclaim).
    pub const RECLAIMED: u16 = 1;
    /// A renewal extended a lease.
    pub const RENEWED: u16 = 2;
    /// A renewal delayed on its way ran after its lease had ended on the server.
    pub const LATE_RENEWAL: u16 = 4;
    /// A renewal extended a lease that had ended on the server (what the always property
    /// "a renewal only extends a live lease" rules out).
    pub const ENDED_RENEWED: u16 = 8;
}

/// The world: the server and the clients.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The simulated Redis (its clock is the model's clock; clients read the same clock).
    pub server: Server,
    /// The clients, by index.
    pub clients: Vec<Client>,
    /// Faults so far (lost requests, replies and messages, crashes, a restart).
    pub faults: u8,
    /// A message was lost (the lost wake-up property no longer applies: the poll covers it).
    pub lost_message: bool,
    /// The server restarted empty (data was lost: conservation no longer applies).
    pub restarted: bool,
    /// Situations reached ([`seen`]).
    pub seen: u16,
}

impl State {
    /// The available count, when the counter exists.
    pub fn available(&self) -> Option<i64> {
        match &self.server.keyspace.keys.get(NAME.as_bytes())?.data {
            Data::String(text) => std::str::from_utf8(text).ok()?.parse().ok(),
            _ => None,
        }
    }

    /// The permits out: (id bytes, lease end) from the leases.
    pub fn leases(&self) -> Vec<(Bytes, u64)> {
        match self.server.keyspace.keys.get(LEASES.as_bytes()) {
            Some(entry) => match &entry.data {
                Data::ZSet(set) => set.0.iter().map(|(m, s)| (m.clone(), s.0 as u64)).collect(),
                _ => Vec::new(),
            },
            None => Vec::new(),
        }
    }

    /// The lease end of permit `id`, if it is out.
    pub fn lease_of(&self, id: Id) -> Option<u64> {
        let bytes = id.bytes();
        self.leases()
            .into_iter()
            .find(|(m, _)| *m == bytes)
            .map(|(_, end)| end)
    }
}
