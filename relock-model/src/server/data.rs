//! The simulated server's keyspace: each key's value (the five types relock's and Redisson's
//! scripts use) and its expiry, on a logical clock in milliseconds. Everything here is plain
//! data that clones, compares and hashes, so a model state can carry a whole keyspace.

use std::collections::BTreeMap;
use std::fmt;

/// A key, a field, a member or a string value: Redis strings are bytes.
pub type Bytes = Vec<u8>;

/// A sorted set's score: an `f64` that compares, orders and hashes by its bits (Redis never
/// stores NaN in a sorted set), so that a keyspace can be a model state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Score(pub f64);

impl Eq for Score {}

impl std::hash::Hash for Score {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// A stream entry's ID, `<ms>-<seq>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct StreamId {
    /// The milliseconds part.
    pub ms: u64,
    /// The sequence part.
    pub seq: u64,
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// A stream: its entries in ID order and the last ID it ever gave (which `XADD` must exceed
/// even after the entries are gone).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Stream {
    /// Entries, each its ID and its field-value pairs, in ID order.
    pub entries: Vec<(StreamId, Vec<(Bytes, Bytes)>)>,
    /// The greatest ID ever added.
    pub last_id: StreamId,
    /// How many entries were ever added (`XINFO STREAM`'s `entries-added`).
    pub entries_added: u64,
    /// The greatest ID `XDEL` deleted (`XINFO STREAM`'s `max-deleted-entry-id`).
    pub max_deleted: StreamId,
}

/// A hash: fields in the order they were first set, as Redis keeps a small hash (a listpack,
/// up to 128 fields), so `HGETALL` and `HKEYS` answer in Redis's order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Hash(pub Vec<(Bytes, Bytes)>);

impl Hash {
    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<&Bytes> {
        self.0.iter().find(|(f, _)| f == field).map(|(_, v)| v)
    }

    /// Sets `field` (in place when it is there, last when new); true when it was new.
    pub fn set(&mut self, field: &[u8], value: Bytes) -> bool {
        match self.0.iter_mut().find(|(f, _)| f == field) {
            Some((_, v)) => {
                *v = value;
                false
            }
            None => {
                self.0.push((field.to_vec(), value));
                true
            }
        }
    }

    /// Removes `field`; true when it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        let before = self.0.len();
        self.0.retain(|(f, _)| f != field);
        self.0.len() != before
    }
}

/// A sorted set: members with their scores.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ZSet(pub BTreeMap<Bytes, Score>);

impl ZSet {
    /// Members in Redis's order: by score, then by member bytes.
    pub fn ordered(&self) -> Vec<(&Bytes, f64)> {
        let mut all: Vec<(&Bytes, f64)> = self.0.iter().map(|(m, s)| (m, s.0)).collect();
        all.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
        all
    }
}

/// A key's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Data {
    /// A string.
    String(Bytes),
    /// A hash.
    Hash(Hash),
    /// A sorted set.
    ZSet(ZSet),
    /// A list.
    List(std::collections::VecDeque<Bytes>),
    /// A set (no script uses one; `TYPE` and `WRONGTYPE` know it).
    Set(std::collections::BTreeSet<Bytes>),
    /// A stream.
    Stream(Stream),
}

impl Data {
    /// The type's name, as `TYPE` gives it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Data::String(_) => "string",
            Data::Hash(_) => "hash",
            Data::ZSet(_) => "zset",
            Data::List(_) => "list",
            Data::Set(_) => "set",
            Data::Stream(_) => "stream",
        }
    }

    /// Whether the value is an empty container (Redis deletes the key then; a stream stays).
    pub fn is_empty_container(&self) -> bool {
        match self {
            Data::Hash(h) => h.0.is_empty(),
            Data::ZSet(z) => z.0.is_empty(),
            Data::List(l) => l.is_empty(),
            Data::Set(s) => s.is_empty(),
            Data::String(_) | Data::Stream(_) => false,
        }
    }
}

/// A key's value and the moment it expires (logical ms), if it does.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The value.
    pub data: Data,
    /// When the key expires, in ms on the server's clock; `None`: never.
    pub expires_at: Option<u64>,
}

impl Entry {
    /// Whether the key is still there at `now`: Redis expires a key once the clock is past
    /// its expiry, not at it.
    pub fn alive_at(&self, now: u64) -> bool {
        self.expires_at.is_none_or(|at| at >= now)
    }
}

/// Every key the server holds. A key is gone once the clock is past its expiry (at its expiry
/// it is still there, with a `PTTL` of 0, as on Redis): reads filter by the clock, and
/// [`Keyspace::purge`] drops what has expired (Redis's lazy and active expiry together, which
/// no client can tell apart).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Keyspace {
    /// Keys and their entries.
    pub keys: BTreeMap<Bytes, Entry>,
}

impl Keyspace {
    /// Drops every key whose expiry is before `now`.
    pub fn purge(&mut self, now: u64) {
        self.keys.retain(|_, entry| entry.alive_at(now));
    }

    /// The first moment a key that expires is gone (its expiry + 1 ms), if any key expires.
    pub fn next_expiry(&self) -> Option<u64> {
        self.keys
            .values()
            .filter_map(|e| e.expires_at)
            .min()
            .map(|at| at + 1)
    }
}
