//! Who holds a lock, who waits, and which process that is: a read of what relock and Redisson
//! keep in Redis, for operators ([`Client::inspect`], [`Client::find`], the `relock` command
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

use std::collections::BTreeSet;
use std::time::Duration;

use fred::interfaces::ClientLike;
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, Key, Value};
use once_cell::sync::Lazy;

use crate::client::Client;
use crate::connection::{on_node, Connection};
use crate::error::{Error, Result};
use crate::names::{latch_channel, leases_key, prefixed};
use crate::naming;
use crate::scripts::{catalogue, Script};

static DESCRIBE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::DESCRIBE));

/// What a name holds, as [`Client::inspect`] tells it from the keys it finds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// A reentrant lock: a [`Lock`](crate::Lock), [`SpinLock`](crate::SpinLock), Redisson's
    /// `RLock`, or a [`FairLock`](crate::FairLock) that nobody waits for (they look alike).
    Lock,
    /// A fair lock with waiters queued.
    FairLock,
    /// A read-write lock, held in [`Inspection::mode`].
    RwLock,
    /// A fenced lock (its token counter exists), held or not.
    FencedLock,
    /// A semaphore (someone waits on a semaphore's channel).
    Semaphore,
    /// A permit semaphore: permits with ids and leases.
    PermitSemaphore,
    /// A count-down latch (someone waits on a latch's channel).
    CountDownLatch,
    /// A count that is a [`Semaphore`](crate::Semaphore)'s or a
    /// [`CountDownLatch`](crate::CountDownLatch)'s: Redis keeps both as a number, and only a
    /// waiter's channel tells them apart.
    Counter,
    /// Nothing relock or Redisson keeps is there.
    Nothing,
    /// A key of another kind (its Redis type, or "hash" for a hash that is no lock): not a
    /// lock or synchronizer.
    Other(String),
}

impl Kind {
    /// A short lower-case name: `lock`, `fair`, `rw`, `fenced`, `semaphore`, `permits`, `latch`,
    /// `counter`, `none`, or the other key's Redis type.
    pub fn label(&self) -> &str {
        match self {
            Kind::Lock => "lock",
            Kind::FairLock => "fair",
            Kind::RwLock => "rw",
            Kind::FencedLock => "fenced",
            Kind::Semaphore => "semaphore",
            Kind::PermitSemaphore => "permits",
            Kind::CountDownLatch => "latch",
            Kind::Counter => "counter",
            Kind::Nothing => "none",
            Kind::Other(kind) => kind,
        }
    }

    /// Whether it is a lock of some type (something `force_unlock` applies to).
    pub fn is_lock(&self) -> bool {
        matches!(
            self,
            Kind::Lock | Kind::FairLock | Kind::RwLock | Kind::FencedLock
        )
    }

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
    /// The relock client's id, the `<client-uuid>` of its holder fields ([`Client::id`]).
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

/// What [`Client::inspect`] found under one name.
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

/// What [`Client::find`] found.
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

impl Client {
    /// Everything relock and Redisson keep under `name`: what it is, who holds it (with the
    /// process behind each relock holder), its lease, its waiters, token, lock-delay, count.
    /// It writes nothing.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// let seen = client.inspect("order:42").await?;
    /// for holder in &seen.holders {
    ///     match holder.party.process() {
    ///         Some(p) => println!("{} holds: pid {} on {}", holder.party.owner, p.pid.unwrap_or(0), p.host),
    ///         None if holder.party.is_gone() => println!("its holder is gone; frees in {} ms", seen.pttl_ms),
    ///         None => println!("a Redisson client holds it"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, [`Error::Redis`] when the server cannot
    /// be read.
    pub async fn inspect(&self, name: &str) -> Result<Inspection> {
        if name.is_empty() {
            return Err(Error::invalid("a name to inspect must not be empty"));
        }
        let connections = self.connections().await?;
        self.describe(name, &connections).await
    }

    /// The locks and synchronizers whose names match `pattern` (a `SCAN MATCH` glob), on
    /// every primary of a cluster, each as [`inspect`](Self::inspect) tells it; at most
    /// `limit` of them. It never runs `KEYS` and writes nothing. Names whose only key is an
    /// auxiliary one are found too: a free fenced lock (its token), a fair queue whose holder
    /// left, a lock-delay in force.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty pattern or a zero limit, [`Error::Redis`] when
    /// a server cannot be read.
    pub async fn find(&self, pattern: &str, limit: usize) -> Result<Found> {
        if pattern.is_empty() || limit == 0 {
            return Err(Error::invalid(
                "find needs a non-empty pattern and a limit above 0",
            ));
        }
        let connections = self.connections().await?;
        let redis = &self.shared.redis;
        let clustered = self.shared.clustered();
        // Auxiliary keys lead to their name: `prefix:{name}` (or `prefix:name` with a tag).
        let prefixes = [
            "",
            "redisson_lock_token",
            "redisson_lock_queue",
            "relock_lease",
        ];
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut items = Vec::new();
        let mut keys_seen = 0u64;
        for prefix in prefixes {
            let glob = if prefix.is_empty() {
                pattern.to_owned()
            } else {
                prefixed(prefix, pattern)
            };
            for node in self.nodes() {
                let mut cursor = "0".to_owned();
                loop {
                    let (next, keys) = scan_page(redis, node.as_ref(), &cursor, &glob).await?;
                    keys_seen += keys.len() as u64;
                    let mut names = Vec::new();
                    for key in keys {
                        let name = if prefix.is_empty() {
                            if is_auxiliary(&key) {
                                continue;
                            }
                            key
                        } else {
                            match unprefixed(prefix, &key) {
                                Some(name) => name,
                                None => continue,
                            }
                        };
                        // On a cluster, a name whose braces would split its keys over slots
                        // is nobody's lock (relock refuses it), and cannot be read in one script.
                        let lockable = || {
                            crate::names::LockKeys::new(&name)
                                .and_then(|keys| keys.checked_for(clustered))
                                .is_ok()
                        };
                        if lockable() && seen.insert(name.clone()) {
                            names.push(name);
                        }
                    }
                    let described = futures::future::join_all(
                        names.iter().map(|name| self.describe(name, &connections)),
                    )
                    .await;
                    for inspection in described {
                        let inspection = inspection?;
                        if inspection.kind.is_known() {
                            items.push(inspection);
                            if items.len() >= limit {
                                return Ok(Found {
                                    items,
                                    more: true,
                                    keys_seen,
                                });
                            }
                        }
                    }
                    if next == "0" {
                        break;
                    }
                    cursor = next;
                }
            }
        }
        items.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Found {
            items,
            more: false,
            keys_seen,
        })
    }

    /// Every connection to the server (each primary of a cluster), from `CLIENT LIST`: relock's
    /// carry [`ClientConnection::process`].
    ///
    /// # Errors
    ///
    /// [`Error::Redis`] when a server cannot be read (or refuses `CLIENT LIST`).
    pub async fn connections(&self) -> Result<Vec<ClientConnection>> {
        let redis = &self.shared.redis;
        let mut all = Vec::new();
        for node in self.nodes() {
            let command = CustomCommand::new_static("CLIENT", ClusterHash::Random, false);
            let list: String = on_node(&**redis, node.as_ref())
                .custom(command, vec![Value::from("LIST")])
                .await
                .map_err(|e| Error::redis(e, &redis.server))?;
            let label = node.as_ref().map_or_else(
                || redis.server.to_string(),
                |s| format!("{}:{}", s.host, s.port),
            );
            all.extend(list.lines().filter_map(|line| parse_client(line, &label)));
        }
        Ok(all)
    }

    /// The primaries to ask on a cluster (`Some` each); on one server, `None` once.
    fn nodes(&self) -> Vec<Option<Server>> {
        if self.shared.clustered() {
            self.shared
                .redis
                .active_connections()
                .into_iter()
                .map(Some)
                .collect()
        } else {
            vec![None]
        }
    }

    /// [`inspect`](Self::inspect) with the connections read already.
    async fn describe(&self, name: &str, connections: &[ClientConnection]) -> Result<Inspection> {
        let redis = &self.shared.redis;
        let fair = crate::names::FairKeys::new(name);
        let keys: Vec<String> = vec![
            name.to_owned(),
            fair.queue.to_string(),
            fair.timeouts.to_string(),
            prefixed("redisson_lock_token", name),
            crate::names::lease_shadow(name),
            leases_key(name),
        ];
        let key_list: Vec<Key> = keys.iter().map(|k| Key::from(k.as_str())).collect();
        let reply = DESCRIBE
            .run(redis, &key_list, &[])
            .await
            .map_err(|e| Error::from_redis(e, name, &redis.server))?;
        let Value::Array(parts) = reply else {
            return Err(crate::scripts::unexpected(&reply, name, &redis.server));
        };
        let mut parts = parts.into_iter();
        let mut next = || parts.next().unwrap_or(Value::Null);
        let redis_type = text(next());
        let pttl_ms = next().as_i64().unwrap_or(-2);
        let _size = next();
        let fields = pairs(next());
        let value = next().as_string();
        let queue_fields: Vec<String> = list(next()).into_iter().map(text).collect();
        let queue_len = next().as_u64().unwrap_or(0);
        let deadlines: Vec<Option<i64>> = list(next())
            .into_iter()
            .map(|v| {
                v.as_string()
                    .and_then(|s| s.parse::<f64>().ok())
                    .map(|f| f as i64)
            })
            .collect();
        let token = next().as_string().and_then(|s| s.parse::<u64>().ok());
        let delay_pttl = next().as_i64().unwrap_or(-2);
        let leases_len = next().as_u64().unwrap_or(0);
        let lease_pairs = list(next());
        let now_ms = next().as_i64().unwrap_or(0);
        let live_readers: BTreeSet<String> = list(next()).into_iter().map(text).collect();

        let mode = fields
            .iter()
            .find(|(f, _)| f == "mode")
            .map(|(_, v)| v.clone());
        let holder_fields: Vec<&(String, String)> =
            fields.iter().filter(|(f, _)| f != "mode").collect();
        let looks_like_lock = !holder_fields.is_empty()
            && holder_fields
                .iter()
                .all(|(f, v)| f.contains(':') && v.parse::<u64>().is_ok());
        let count = value.as_deref().and_then(|v| v.parse::<i64>().ok());

        let kind = match redis_type.as_str() {
            "hash" if mode.is_some() && (looks_like_lock || holder_fields.is_empty()) => {
                Kind::RwLock
            }
            "hash" if looks_like_lock && token.is_some() => Kind::FencedLock,
            "hash" if looks_like_lock && queue_len > 0 => Kind::FairLock,
            "hash" if looks_like_lock => Kind::Lock,
            "hash" => Kind::Other("hash".into()),
            "string" if leases_len > 0 && count.is_some() => Kind::PermitSemaphore,
            "string" if count.is_some() => Kind::Counter,
            "none" if token.is_some() => Kind::FencedLock,
            "none" if queue_len > 0 => Kind::FairLock,
            "none" if delay_pttl > 0 => Kind::Lock,
            "none" if leases_len > 0 => Kind::PermitSemaphore,
            "none" => Kind::Nothing,
            other => Kind::Other(other.to_owned()),
        };

        let mut holders: Vec<Holder> = if kind.is_lock() {
            holder_fields
                .iter()
                .map(|(field, count)| {
                    let writer = field.ends_with(":write");
                    Holder {
                        party: Party::new(field, connections),
                        holds: count.parse().unwrap_or(0),
                        writer,
                        live: mode.is_none() || writer || live_readers.contains(field),
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        holders.sort_by_key(|h| !h.writer);

        // The wake-up channels: the name's own, and each queued waiter's.
        let own_channel = match &kind {
            Kind::RwLock => Some(prefixed("redisson_rwlock", name)),
            Kind::Lock | Kind::FencedLock | Kind::FairLock => {
                Some(prefixed("redisson_lock__channel", name))
            }
            Kind::PermitSemaphore => Some(prefixed("redisson_sc", name)),
            _ => None,
        };
        let semaphore_channel = prefixed("redisson_sc", name);
        let latch_channel = latch_channel(name);
        let lock_channel = prefixed("redisson_lock__channel", name);
        let mut channels: Vec<String> = own_channel.iter().cloned().collect();
        if kind == Kind::Counter {
            channels.push(semaphore_channel.clone());
            channels.push(latch_channel.clone());
        }
        channels.extend(queue_fields.iter().map(|f| format!("{lock_channel}:{f}")));
        let counts = self.subscribers(&channels).await?;
        let count_of = |channel: &str| {
            channels
                .iter()
                .position(|c| c == channel)
                .map_or(0, |i| counts[i])
        };
        let kind = match kind {
            Kind::Counter if count_of(&semaphore_channel) > 0 => Kind::Semaphore,
            Kind::Counter if count_of(&latch_channel) > 0 => Kind::CountDownLatch,
            kind => kind,
        };
        let subscribers = match &kind {
            Kind::Semaphore => count_of(&semaphore_channel),
            Kind::CountDownLatch => count_of(&latch_channel),
            // A fair waiter listens on a channel of its own.
            Kind::FairLock => counts.iter().sum(),
            _ => own_channel.as_deref().map_or(0, count_of),
        };
        let queue = queue_fields
            .iter()
            .enumerate()
            .map(|(i, field)| {
                let deadline_ms = deadlines.get(i).copied().flatten();
                Queued {
                    party: Party::new(field, connections),
                    deadline_ms,
                    left_ms: deadline_ms.map(|d| d - now_ms),
                    subscribers: count_of(&format!("{lock_channel}:{field}")),
                }
            })
            .collect();
        let leases = lease_pairs
            .chunks(2)
            .filter_map(|pair| {
                let id = pair.first()?.as_bytes().map(hex)?;
                let deadline = pair.get(1)?.as_string()?.parse::<f64>().ok()? as i64;
                Some(Lease {
                    id,
                    left_ms: deadline - now_ms,
                })
            })
            .collect();
        Ok(Inspection {
            name: name.to_owned(),
            holders,
            mode: if kind == Kind::RwLock { mode } else { None },
            pttl_ms,
            queue,
            queue_len,
            subscribers,
            token: if kind == Kind::FencedLock {
                token
            } else {
                None
            },
            delay_ms: (delay_pttl > 0 && redis_type == "none").then_some(delay_pttl as u64),
            count: if matches!(redis_type.as_str(), "string") {
                count
            } else {
                None
            },
            leases,
            leases_len,
            server_time_ms: now_ms,
            kind,
        })
    }

    /// Connections subscribed to each of `channels`, summed over a cluster's nodes (sharded
    /// channels: asked of the slot's owner).
    async fn subscribers(&self, channels: &[String]) -> Result<Vec<u64>> {
        let redis = &self.shared.redis;
        let mut totals = vec![0u64; channels.len()];
        if channels.is_empty() {
            return Ok(totals);
        }
        let failed = |e| Error::redis(e, &redis.server);
        if self.shared.publish == crate::scripts::SPUBLISH {
            for (i, channel) in channels.iter().enumerate() {
                let slot = fred::util::redis_keyslot(channel.as_bytes());
                let command = CustomCommand::new_static("PUBSUB", ClusterHash::Custom(slot), false);
                let args = vec![Value::from("SHARDNUMSUB"), Value::from(channel.as_str())];
                let reply: Value = redis.custom(command, args).await.map_err(failed)?;
                totals[i] = numsub(reply).first().copied().unwrap_or(0);
            }
            return Ok(totals);
        }
        for node in self.nodes() {
            let command = CustomCommand::new_static("PUBSUB", ClusterHash::Random, false);
            let mut args = vec![Value::from("NUMSUB")];
            args.extend(channels.iter().map(|c| Value::from(c.as_str())));
            let reply: Value = on_node(&**redis, node.as_ref())
                .custom(command, args)
                .await
                .map_err(failed)?;
            for (total, n) in totals.iter_mut().zip(numsub(reply)) {
                *total += n;
            }
        }
        Ok(totals)
    }
}

/// One `SCAN` page on `node`: the next cursor and the keys.
async fn scan_page(
    redis: &Connection,
    node: Option<&Server>,
    cursor: &str,
    glob: &str,
) -> Result<(String, Vec<String>)> {
    let command = CustomCommand::new_static("SCAN", ClusterHash::Random, false);
    let args = vec![
        Value::from(cursor),
        Value::from("MATCH"),
        Value::from(glob),
        Value::from("COUNT"),
        Value::from(1000),
    ];
    let reply: Value = on_node(&**redis, node)
        .custom(command, args)
        .await
        .map_err(|e| Error::redis(e, &redis.server))?;
    let mut parts = list(reply).into_iter();
    let next = parts.next().map(text).unwrap_or_else(|| "0".into());
    let keys = parts.next().map(list).unwrap_or_default();
    Ok((next, keys.into_iter().map(text).collect()))
}

/// Whether `key` is one of the keys relock or Redisson keep beside a name (not a name itself).
fn is_auxiliary(key: &str) -> bool {
    const PREFIXES: [&str; 9] = [
        "redisson_lock_queue:",
        "redisson_lock_timeout:",
        "redisson_lock_token:",
        "redisson_unlock_latch:",
        "relock_claim:",
        "relock_fair_alive:",
        "relock_lease:",
        "relock_request:",
        "relock_fence:",
    ];
    PREFIXES.iter().any(|p| key.starts_with(p))
        || key.contains(":rwlock_timeout:")
        || (key.starts_with('{') && key.ends_with("}:timeout"))
}

/// The name behind auxiliary key `key` of `prefix` (see [`prefixed`]).
fn unprefixed(prefix: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(':')?;
    match rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        Some(name) if !name.contains('{') && !name.contains('}') => Some(name.to_owned()),
        _ if rest.contains('{') => Some(rest.to_owned()),
        _ => None,
    }
}

/// One line of `CLIENT LIST` as a connection to `node`.
fn parse_client(line: &str, node: &str) -> Option<ClientConnection> {
    let mut id = None;
    let (mut addr, mut name) = (String::new(), String::new());
    let (mut age, mut idle, mut subscriptions) = (0, 0, 0);
    for pair in line.split(' ') {
        let Some((key, value)) = pair.split_once('=') else {
            continue;
        };
        match key {
            "id" => id = value.parse().ok(),
            "addr" => addr = value.to_owned(),
            "name" => name = value.to_owned(),
            "age" => age = value.parse().unwrap_or(0),
            "idle" => idle = value.parse().unwrap_or(0),
            "sub" | "psub" | "ssub" => subscriptions += value.parse::<u64>().unwrap_or(0),
            _ => {}
        }
    }
    let process = naming::parse(&name).map(|p| Process {
        client_id: p.client_id.to_owned(),
        role: p.role.to_owned(),
        pid: p.pid,
        host: p.host.to_owned(),
        program: p.program.to_owned(),
    });
    Some(ClientConnection {
        node: node.to_owned(),
        id: id?,
        addr,
        name,
        age: Duration::from_secs(age),
        idle: Duration::from_secs(idle),
        subscriptions,
        process,
    })
}

/// `PUBSUB NUMSUB`'s reply: channel, count, channel, count... → the counts.
fn numsub(reply: Value) -> Vec<u64> {
    list(reply)
        .chunks(2)
        .map(|pair| pair.get(1).and_then(Value::as_u64).unwrap_or(0))
        .collect()
}

fn list(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

fn text(value: Value) -> String {
    value.as_string().unwrap_or_default()
}

fn pairs(value: Value) -> Vec<(String, String)> {
    let items = list(value);
    items
        .chunks(2)
        .map(|pair| {
            let get = |i: usize| pair.get(i).and_then(Value::as_string).unwrap_or_default();
            (get(0), get(1))
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auxiliary_keys_lead_to_their_names() {
        assert_eq!(
            unprefixed("redisson_lock_token", "redisson_lock_token:{order:42}").as_deref(),
            Some("order:42")
        );
        assert_eq!(
            unprefixed(
                "redisson_lock_queue",
                "redisson_lock_queue:{user:7}:profile"
            )
            .as_deref(),
            Some("{user:7}:profile")
        );
        assert_eq!(unprefixed("relock_lease", "relock_lease:plain"), None);
        assert!(is_auxiliary("{jobs}:timeout"));
        assert!(is_auxiliary("{rw}:abc:task-1:rwlock_timeout:1"));
        assert!(!is_auxiliary("order:42"));
    }

    #[test]
    fn a_client_list_line_names_its_process() {
        let line = "id=7 addr=127.0.0.1:5100 laddr=127.0.0.1:6379 fd=9 \
                    name=relock|3f2a|cmd|4242|web-1|billing age=12 idle=0 flags=N db=0 \
                    sub=0 psub=0 ssub=0 multi=-1 cmd=evalsha";
        let c = parse_client(line, "127.0.0.1:6379").unwrap();
        assert_eq!(
            (c.id, c.age, c.addr.as_str()),
            (7, Duration::from_secs(12), "127.0.0.1:5100")
        );
        let p = c.process.unwrap();
        assert_eq!(
            (p.client_id.as_str(), p.pid, p.host.as_str()),
            ("3f2a", Some(4242), "web-1")
        );
        let other = parse_client("id=8 addr=x name= age=1 idle=1 sub=2 psub=1", "n").unwrap();
        assert_eq!((other.process, other.subscriptions), (None, 3));
    }

    #[test]
    fn a_holder_field_splits_into_client_and_owner() {
        let redisson = Party::new("0b7e-11:57", &[]);
        assert!(redisson.redisson && !redisson.is_gone());
        let writer = Party::new("0b7e-11:task-3:write", &[]);
        assert_eq!(
            (writer.client_id.as_str(), writer.owner.as_str()),
            ("0b7e-11", "task-3")
        );
        assert!(writer.is_gone());
    }
}
