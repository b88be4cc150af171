//! Who holds a lock, who waits, and which process that is: a read of what relock and Redisson
//! keep in Redis, for operators ([`Client::inspect`](crate::Client::inspect), [`Client::find`](crate::Client::find), the `relock` command
//! line) and for code that wants to know.
//!
//! Every relock client names its connections (`CLIENT SETNAME relock|<client-uuid>|<role>|<pid>|
//! <host>|<program>`, once per connection, nothing on the acquire path), so a holder field
//! `<client-uuid>:<owner>` leads to the connections of the process that holds, through
//! `CLIENT LIST`. A holder whose client has no connection left is gone: its lock frees when its
//! lease ends, as [`Inspection::pttl_ms`] says. Redisson's clients name no connection: their
//! holders are recognised by their owner (a thread id, all digits) and shown with no process.
//!
//! Nothing here writes: a reader whose lease ran out is reported, not dropped.

use std::time::Duration;

mod describe;
mod find;
mod parse;

/// Makes [`Kind`] of the kinds in the primitives' table, with [`Nothing`](Kind::Nothing) and
/// [`Other`](Kind::Other) for what relock does not know.
macro_rules! kinds {
    (
        primitives { $($primitives:tt)* }
        kinds {
            $(
                $(#[$doc:meta])* $Kind:ident = $label:literal, $words:literal,
                $class:ident $(($($unlock:tt)*))?,
                keys { $($keys:tt)* }
            )*
        }
    ) => {
        /// What a name holds, as [`Client::inspect`](crate::Client::inspect) tells it from the
        /// keys it finds.
        #[derive(Debug, Clone, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum Kind {
            $($(#[$doc])* $Kind,)*
            /// Nothing relock or Redisson keeps is there.
            Nothing,
            /// A key of another kind (its Redis type, or "hash" for a hash that is no lock): not
            /// a lock or synchronizer.
            Other(String),
        }

        impl Kind {
            /// The labels of the kinds relock knows, as [`label`](Self::label) gives them:
            /// `lock`, `fair`, `rw`, `fenced`, `election`, `semaphore`, `permits`, `latch`,
            /// `counter`.
            pub const LABELS: [&'static str; [$($label),*].len()] = [$($label),*];

            /// A short lower-case name: one of [`LABELS`](Self::LABELS), `none`, or the other
            /// key's Redis type.
            pub fn label(&self) -> &str {
                match self {
                    $(Kind::$Kind => $label,)*
                    Kind::Nothing => "none",
                    Kind::Other(kind) => kind,
                }
            }

            /// How a sentence names it: "fair lock", "count-down latch"; `none` or the other
            /// key's Redis type for what relock does not know.
            pub fn words(&self) -> &str {
                match self {
                    $(Kind::$Kind => $words,)*
                    Kind::Nothing | Kind::Other(_) => self.label(),
                }
            }

            /// Whether it is a lock of some type (something
            /// [`Client::force_unlock`](crate::Client::force_unlock) applies to).
            pub fn is_lock(&self) -> bool {
                match self {
                    $(Kind::$Kind => is_lock!($class),)*
                    Kind::Nothing | Kind::Other(_) => false,
                }
            }
        }
    };
}

/// Whether a kind's class in the primitives' table is a lock's (any other word fails the build).
macro_rules! is_lock {
    (lock) => {
        true
    };
    (sync) => {
        false
    };
}

crate::primitive::with_primitives!(kinds);

/// `PSUBSCRIBE` patterns for every channel a release of `name` may publish on, relock's and
/// Redisson's alike: a lock's, each fair waiter's, a read-write lock's, both semaphores' and a
/// count-down latch's (the name glob-escaped). What the command line's live view listens to;
/// a cluster's sharded channels take no patterns.
///
/// ```
/// let patterns = relock::inspect::release_patterns("order:42");
/// assert!(patterns.contains(&"redisson_lock__channel:{order:42}*".to_owned()));
/// assert!(patterns.contains(&"redisson_countdownlatch__channel__{order:42}".to_owned()));
/// assert_eq!(relock::inspect::release_patterns("a*b")[1], "redisson_rwlock:{a\\*b}");
/// ```
pub fn release_patterns(name: &str) -> Vec<String> {
    crate::names::release_patterns(name)
}

impl Kind {
    /// Whether relock knows it: a lock or a synchronizer.
    pub fn is_known(&self) -> bool {
        !matches!(self, Kind::Nothing | Kind::Other(_))
    }
}

/// One connection to the server, from `CLIENT LIST`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientConnection {
    /// The server (cluster node) it is connected to, `host:port`.
    pub node: String,
    /// The server's id for it (`CLIENT KILL ID` takes it).
    pub id: u64,
    /// The client's address as the server sees it.
    pub addr: String,
    /// Its name (`CLIENT SETNAME`), empty when it has none.
    pub name: String,
    /// How long it has been connected.
    pub age: Duration,
    /// How long since its last command.
    pub idle: Duration,
    /// Its pub/sub subscriptions (channels, patterns and shard channels).
    pub subscriptions: u64,
    /// The relock process behind it, read from its name; `None` for any other client.
    pub process: Option<Process>,
}

/// The relock process behind a connection, as it named the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Process {
    /// The relock client's id, the `<client-uuid>` of its holder fields ([`Client::id`](crate::Client::id)).
    pub client_id: String,
    /// What the connection is for: `cmd` (commands), `sub` (wake-ups) or `sync` (replica sync).
    pub role: String,
    /// The process id.
    pub pid: Option<u32>,
    /// The host name.
    pub host: String,
    /// The program (its executable's file name).
    pub program: String,
}

/// Who a holder or a waiter is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Party {
    /// The hash field (or queue entry) as stored: `<client-uuid>:<owner>`, with `:write` for a
    /// read-write lock's writer.
    pub field: String,
    /// The client's id.
    pub client_id: String,
    /// The owner within the client: `task-<n>`, `thread-<n>`, `owner-<n>` for relock; a thread
    /// id for Redisson.
    pub owner: String,
    /// Whether the owner is a thread id: a Redisson client (or one speaking its protocol),
    /// whose connections have no name to find.
    pub redisson: bool,
    /// The connections of its client that are open now (relock's name themselves); empty for
    /// a relock client whose process is gone, and for Redisson's.
    pub connections: Vec<ClientConnection>,
}

impl Party {
    /// The party of holder field `field` whose client has no connection open.
    pub(crate) fn gone(field: &str) -> Party {
        Party::new(field, &[])
    }

    fn new(field: &str, connections: &[ClientConnection]) -> Party {
        let base = field.strip_suffix(":write").unwrap_or(field);
        let (client_id, owner) = base.split_once(':').unwrap_or((base, ""));
        let redisson = !owner.is_empty() && owner.bytes().all(|b| b.is_ascii_digit());
        Party {
            field: field.to_owned(),
            client_id: client_id.to_owned(),
            owner: owner.to_owned(),
            redisson,
            connections: connections
                .iter()
                .filter(|c| c.process.as_ref().is_some_and(|p| p.client_id == client_id))
                .cloned()
                .collect(),
        }
    }

    /// The process behind it, when its client is a relock client with a connection open.
    pub fn process(&self) -> Option<&Process> {
        self.connections.iter().find_map(|c| c.process.as_ref())
    }

    /// Whether it is a relock holder whose client has no connection left: nobody renews its
    /// lease, and the lock frees when the lease ends.
    pub fn is_gone(&self) -> bool {
        !self.redisson && self.connections.is_empty()
    }
}

/// A holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// Who holds.
    pub party: Party,
    /// Its hold count (reentrant holds).
    pub holds: u64,
    /// A read-write lock's writer.
    pub writer: bool,
    /// False for a read-write lock's reader whose lease ran out (none of its timeout keys
    /// lives): it holds nothing, and the next script that meets it drops it.
    pub live: bool,
}

/// A waiter in a fair lock's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Queued {
    /// Who waits.
    pub party: Party,
    /// When its place lapses unless it renews it: epoch ms on the server's clock.
    pub deadline_ms: Option<i64>,
    /// The deadline less the server's clock now: negative for a stale place.
    pub left_ms: Option<i64>,
    /// Connections subscribed to its own wake-up channel.
    pub subscribers: u64,
}

/// A permit semaphore's permit out on lease.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lease {
    /// The permit's id, in hex.
    pub id: String,
    /// Its lease left in ms (negative: lapsed, reclaimed by the next script that runs).
    pub left_ms: i64,
}

/// What [`Client::inspect`](crate::Client::inspect) found under one name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// The name asked about.
    pub name: String,
    /// What it is.
    pub kind: Kind,
    /// The lock's holders, the writer first.
    pub holders: Vec<Holder>,
    /// A read-write lock's mode: `read` or `write`.
    pub mode: Option<String>,
    /// The key's PTTL: the lease left in ms of a lock, -1 for a key without expiry (a lock
    /// that never frees by itself), -2 when there is no key.
    pub pttl_ms: i64,
    /// A fair lock's queue, first come first (the first 100).
    pub queue: Vec<Queued>,
    /// The queue's whole length.
    pub queue_len: u64,
    /// Connections subscribed to the name's wake-up channel: processes with waiters (each
    /// client subscribes once per channel, whatever its waiters), not waiting tasks. For a
    /// fair lock, the sum over the lock's channel and each queued waiter's own (of the first
    /// 100).
    pub subscribers: u64,
    /// A fenced lock's last fencing token.
    pub token: Option<u64>,
    /// A lock-delay in force: ms until the name can be taken again.
    pub delay_ms: Option<u64>,
    /// A semaphore's available permits, or a latch's count.
    pub count: Option<i64>,
    /// A permit semaphore's permits on lease (the first 100).
    pub leases: Vec<Lease>,
    /// How many permits are on lease.
    pub leases_len: u64,
    /// The server's clock when it was read, epoch ms.
    pub server_time_ms: i64,
}

impl Inspection {
    /// The election whose lock this is (its name less `relock_election:`), when it was found as
    /// one ([`Kind::Election`]).
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// let seen = client.inspect("relock_election:billing").await?;
    /// if let Some(election) = seen.election() {
    ///     println!("{election} is led by {:?}", client.election(election).leader().await?);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn election(&self) -> Option<&str> {
        match self.kind {
            Kind::Election => self
                .name
                .strip_prefix(crate::names::prefix::ELECTION)
                .filter(|election| !election.is_empty()),
            _ => None,
        }
    }
}

/// What [`Client::find`](crate::Client::find) found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Found {
    /// The locks and synchronizers, by name.
    pub items: Vec<Inspection>,
    /// Whether it stopped at the limit with more keys left to look at.
    pub more: bool,
    /// How many keys it looked at.
    pub keys_seen: u64,
}

#[cfg(test)]
mod tests {
    use super::Kind;

    #[test]
    fn each_known_kind_has_its_own_label_and_words() {
        let known = [
            Kind::Lock,
            Kind::FairLock,
            Kind::RwLock,
            Kind::FencedLock,
            Kind::Election,
            Kind::Semaphore,
            Kind::PermitSemaphore,
            Kind::CountDownLatch,
            Kind::Counter,
        ];
        let labels: Vec<&str> = known.iter().map(Kind::label).collect();
        assert_eq!(labels, Kind::LABELS);
        let mut unique = labels.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), labels.len(), "two kinds share a label");
        let locks: Vec<&str> = known
            .iter()
            .filter(|k| k.is_lock())
            .map(Kind::label)
            .collect();
        assert_eq!(locks, ["lock", "fair", "rw", "fenced", "election"]);
        assert_eq!(Kind::FairLock.words(), "fair lock");
        assert_eq!(Kind::CountDownLatch.words(), "count-down latch");
        assert_eq!(Kind::Nothing.label(), "none");
        assert_eq!(Kind::Other("zset".into()).words(), "zset");
        assert!(known.iter().all(Kind::is_known));
    }
}
