//! An election's history as relock reads it: the changes (`lua/election/history.lua` writes
//! them), and the scripts that read it and proclaim into it.

use std::time::{Duration, SystemTime};

use fred::bytes_utils::Str;
use fred::types::Value;
use once_cell::sync::Lazy;

use super::office::{ElectionKeys, PROCESS};
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::scripts::{catalogue, integer, text, unexpected, Script};

static OBSERVE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::ELECTION_OBSERVE));
static PROCLAIM: Lazy<Script> = Lazy::new(|| Script::new(catalogue::ELECTION_PROCLAIM));

/// A change of an [`Election`](crate::Election), as [`watch`](crate::Election::watch) reports
/// it. Each has its place in the election's history, `seq`, counting its changes from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// A candidate was elected: a term of a new, higher epoch began.
    Elected {
        /// Its place in history.
        seq: u64,
        /// The term's epoch.
        epoch: u64,
        /// Who leads.
        leader: Candidate,
        /// The metadata it campaigned with, if any.
        metadata: Option<String>,
        /// When, by the server's clock.
        at: SystemTime,
        /// Its stamp in history (see [`Cursor`]); `None` for an entry written by a relock
        /// before stamps.
        stamp: Option<String>,
    },
    /// The leader proclaimed new metadata within its term
    /// ([`Term::proclaim`](crate::Term::proclaim)).
    Proclaimed {
        /// Its place in history.
        seq: u64,
        /// The term's epoch.
        epoch: u64,
        /// Who leads.
        leader: Candidate,
        /// What it proclaimed.
        metadata: String,
        /// When, by the server's clock.
        at: SystemTime,
        /// Its stamp in history (see [`Cursor`]); `None` for an entry written by a relock
        /// before stamps.
        stamp: Option<String>,
    },
    /// The term of `epoch` ended: nobody leads until the next election.
    Vacant {
        /// Its place in history.
        seq: u64,
        /// The epoch of the term that ended.
        epoch: u64,
        /// How it ended.
        reason: Vacancy,
        /// When it was written, by the server's clock: at the resign, or, for a term that
        /// lapsed, when the lapse was first noticed (by a candidate, a watcher or
        /// [`leader`](crate::Election::leader)).
        at: SystemTime,
        /// Its stamp in history (see [`Cursor`]); `None` for an entry written by a relock
        /// before stamps.
        stamp: Option<String>,
    },
    /// The watch could not follow history from `after` (the last place it delivered, 0 for
    /// none) to `next` (the next place it delivers): changes were lost in between, and what it
    /// delivers from `next` on is history as it is now. Either history was **trimmed** (it
    /// keeps about the last 1,000 changes): the changes after `after` and before `next` are
    /// gone; or history was **rewritten** behind the watch: the entry the watch delivered at
    /// `after` is no longer there or no longer the same (a failover to a replica that had not
    /// received the last changes, after which new changes took their places; a server that
    /// lost its data; a history deleted, or its entries deleted; a
    /// [`watch_after`](crate::Election::watch_after) with a [`Cursor`] of another history, or
    /// a seq history does not reach). The watch then goes on from the newest change of the new
    /// history, so `next` may be at, below or above `after`: whatever was delivered before the
    /// gap may differ from what history now holds, and a follower should take the state from
    /// the changes after it.
    ///
    /// A rewritten history is noticed by the stamp of the entry at `after` (see [`Cursor`]): a
    /// watch that has delivered a change, or that resumes from a [`Cursor`], compares it at
    /// each read. A watch resumed from a bare seq (`watch_after(seq)` with a `u64`) has no
    /// stamp to compare until its first delivery, and notices only a history shorter than the
    /// seq.
    Gap {
        /// The last place delivered before the gap (0: none).
        after: u64,
        /// The next place delivered.
        next: u64,
    },
}

impl Change {
    /// Its place in history (a gap's: the next one).
    pub fn seq(&self) -> u64 {
        match self {
            Change::Elected { seq, .. }
            | Change::Proclaimed { seq, .. }
            | Change::Vacant { seq, .. } => *seq,
            Change::Gap { next, .. } => *next,
        }
    }

    /// Where a watch that delivered this change stands, to keep (as text: [`Cursor`] is
    /// `Display` and `FromStr`) and resume from with
    /// [`watch_after`](crate::Election::watch_after); `None` for a gap (keep the change after
    /// it).
    pub fn cursor(&self) -> Option<Cursor> {
        match self {
            Change::Elected { seq, stamp, .. }
            | Change::Proclaimed { seq, stamp, .. }
            | Change::Vacant { seq, stamp, .. } => Some(Cursor {
                seq: *seq,
                stamp: stamp.clone(),
            }),
            Change::Gap { .. } => None,
        }
    }

    /// Its stamp in history, if it has one.
    pub(super) fn stamp(&self) -> Option<&str> {
        match self {
            Change::Elected { stamp, .. }
            | Change::Proclaimed { stamp, .. }
            | Change::Vacant { stamp, .. } => stamp.as_deref(),
            Change::Gap { .. } => None,
        }
    }
}

/// A place in an election's history that can be checked: the seq of a change and the stamp of
/// its entry, from [`Change::cursor`], for [`watch_after`](crate::Election::watch_after).
///
/// Each entry of history has a stamp that follows from the entry and from the stamp of the
/// entry before it, so two histories whose entries at a seq have the same stamp hold the same
/// changes up to there. A watch resumed from a cursor compares the stamp with the entry at its
/// seq and reports a [`Change::Gap`] when history is not the one the cursor was taken from (it
/// was rewritten by a failover, deleted and grown again, or it is another election's).
///
/// As text (`Display`, `FromStr`), `<seq>:<stamp>`, or `<seq>` without a stamp; a `u64`
/// converts to a cursor without a stamp, which can only tell a history shorter than its seq.
///
/// ```
/// let cursor: relock::Cursor = "12:9f86d081884c7d65".parse().unwrap();
/// assert_eq!(cursor.seq(), 12);
/// assert_eq!(cursor.to_string(), "12:9f86d081884c7d65");
/// assert_eq!(relock::Cursor::from(12).to_string(), "12");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor {
    seq: u64,
    stamp: Option<String>,
}

impl Cursor {
    /// The seq of the change it follows.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The stamp of that change's entry, if known.
    pub fn stamp(&self) -> Option<&str> {
        self.stamp.as_deref()
    }
}

impl From<u64> for Cursor {
    fn from(seq: u64) -> Cursor {
        Cursor { seq, stamp: None }
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.stamp {
            Some(stamp) => write!(f, "{}:{stamp}", self.seq),
            None => write!(f, "{}", self.seq),
        }
    }
}

impl std::str::FromStr for Cursor {
    type Err = Error;

    /// `<seq>:<stamp>` or `<seq>`; [`Error::InvalidArgument`] for anything else.
    fn from_str(text: &str) -> Result<Cursor> {
        let bad = || Error::invalid(format!("not a history cursor: {text:?}"));
        let (seq, stamp) = match text.split_once(':') {
            Some((seq, stamp)) => {
                let ok = !stamp.is_empty() && stamp.bytes().all(|b| b.is_ascii_hexdigit());
                (seq, Some(stamp.to_string()).filter(|_| ok).ok_or_else(bad)?)
            }
            None => (text, String::new()),
        };
        let seq = seq.parse::<u64>().map_err(|_| bad())?;
        Ok(Cursor {
            seq,
            stamp: Some(stamp).filter(|s| !s.is_empty()),
        })
    }
}

/// How a term ended, in a [`Change::Vacant`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Vacancy {
    /// The leader gave the term back: [`Term::resign`](crate::Term::resign), a dropped term,
    /// [`Client::shutdown`](crate::Client::shutdown).
    Resigned,
    /// The term ended without that: its lease ran out (the leader died, or stopped renewing),
    /// or its key was deleted.
    Lapsed,
    /// An operator ended it: [`Election::force_vacate`](crate::Election::force_vacate), or
    /// `relock unlock --force`.
    Forced,
}

/// A leader as history names it: its holder field and the process it ran in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// Its holder field, `<client-uuid>:<owner>`, as [`Client::inspect`](crate::Client::inspect)
    /// shows a holder.
    pub field: String,
    /// Its process id.
    pub pid: u32,
    /// Its host name.
    pub host: String,
    /// Its program: the file name of its executable.
    pub program: String,
}

/// One entry of history, as the scripts return it.
pub(super) struct Entry {
    pub(super) change: Change,
    /// When the term it belongs to began (`since`), for an entry of a term.
    pub(super) since: Option<SystemTime>,
}

/// The time of `ms` since the epoch.
fn time(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
}

/// Parses an entry, `[id, [field, value, ...]]`, of the history named `context`.
fn entry(value: Value, context: &str, server: &str) -> Result<Entry> {
    let bad = |value: &Value| unexpected(value, context, server);
    let Value::Array(mut parts) = value else {
        return Err(bad(&value));
    };
    let (Some(Value::Array(list)), Some(id)) = (parts.pop(), parts.pop()) else {
        return Err(bad(&Value::Array(parts)));
    };
    let id = id.as_string().unwrap_or_default();
    let seq = id.split('-').next().and_then(|s| s.parse::<u64>().ok());
    let mut fields = std::collections::HashMap::new();
    for pair in list.chunks(2) {
        if let [name, value] = pair {
            let name = name.as_string().unwrap_or_default();
            fields.insert(name, value.as_string().unwrap_or_default());
        }
    }
    let get = |name: &str| fields.get(name).cloned().unwrap_or_default();
    let number = |name: &str| get(name).parse::<u64>().ok();
    let (Some(seq), Some(epoch), Some(at)) = (seq, number("epoch"), number("at")) else {
        return Err(bad(&Value::from(id)));
    };
    let at = time(at);
    let leader = || Candidate {
        field: get("leader"),
        pid: number("pid").unwrap_or(0) as u32,
        host: get("host"),
        program: get("program"),
    };
    let stamp = fields.get("stamp").filter(|s| !s.is_empty()).cloned();
    let change = match get("event").as_str() {
        "elected" => Change::Elected {
            seq,
            epoch,
            leader: leader(),
            metadata: fields.get("metadata").filter(|m| !m.is_empty()).cloned(),
            at,
            stamp,
        },
        "proclaimed" => Change::Proclaimed {
            seq,
            epoch,
            leader: leader(),
            metadata: get("metadata"),
            at,
            stamp,
        },
        "vacant" => Change::Vacant {
            seq,
            epoch,
            reason: match get("reason").as_str() {
                "resigned" => Vacancy::Resigned,
                "forced" => Vacancy::Forced,
                _ => Vacancy::Lapsed,
            },
            at,
            stamp,
        },
        _ => return Err(bad(&Value::from(id))),
    };
    Ok(Entry {
        change,
        since: number("since").map(time),
    })
}

/// An election as `lua/election/observe.lua` read it.
pub(super) struct Observed {
    /// The leader's holder field, if anyone leads.
    pub(super) leader: Option<String>,
    /// The lease left: -2 when nobody leads, -1 without expiry.
    pub(super) pttl_ms: i64,
    /// The epoch counter (0: no term yet).
    pub(super) epoch: u64,
    /// The newest place in history (0: it is empty).
    pub(super) newest: u64,
    /// The oldest place in history (0: it is empty).
    pub(super) oldest: u64,
    /// The entries asked for.
    pub(super) entries: Vec<Entry>,
    /// The entry at the place read after, as history has it now (`None`: none there, or not
    /// asked for).
    pub(super) at_after: Option<Entry>,
}

/// What to read of history.
#[derive(Debug, Clone, Copy)]
pub(super) enum Read {
    /// Its newest entry.
    Newest,
    /// At most `count` entries after place `after`, and the entry at `after`.
    After { after: u64, count: u32 },
}

/// Reads the election of lock `lock` (writing the vacancy of a term that lapsed, if nobody
/// has yet) and the part of its history `read` asks for.
pub(super) async fn observe(
    redis: &Connection,
    publish: &'static str,
    lock: &Str,
    keys: &ElectionKeys,
    read: Read,
) -> Result<Observed> {
    // Stream IDs as text, counted here: a seq history cannot reach (past 2^64 - 1) reads
    // nothing, and a seq past Lua's 2^53 reaches the script exact.
    let (from, count, at) = match read {
        Read::Newest => (String::new(), 0, String::new()),
        Read::After { after, count } => match after.checked_add(1) {
            Some(next) => (format!("{next}-0"), count, format!("{after}-0")),
            None => ("0-0".to_string(), 0, format!("{after}-0")),
        },
    };
    let at = if at == "0-0" { String::new() } else { at };
    let reply = OBSERVE
        .run(
            redis,
            &keys.with_lock(lock),
            &[
                text(publish),
                Value::from(from),
                Value::Integer(i64::from(count)),
                Value::from(at),
            ],
        )
        .await
        .map_err(|e| Error::from_script(e, &keys.named_with(lock), &redis.server))?;
    let server = &redis.server;
    let Value::Array(items) = reply else {
        return Err(unexpected(&reply, lock, server));
    };
    let [leader, pttl, epoch, newest, entries, at_after, oldest]: [Value; 7] = items
        .try_into()
        .map_err(|items: Vec<Value>| unexpected(&Value::Array(items), lock, server))?;
    let list = |value: Value| match value {
        Value::Array(list) => list
            .into_iter()
            .map(|e| entry(e, &keys.history, server))
            .collect::<Result<Vec<_>>>(),
        Value::Null => Ok(Vec::new()),
        other => Err(unexpected(&other, &keys.history, server)),
    };
    let seq = |value: Value| {
        value
            .as_string()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| unexpected(&value, &keys.history, server))
    };
    let entries = list(entries)?;
    let at_after = list(at_after)?.into_iter().next();
    Ok(Observed {
        leader: match leader {
            Value::Null => None,
            name => name.as_string(),
        },
        pttl_ms: integer(pttl, lock, server)?,
        epoch: integer(epoch, lock, server)?.max(0) as u64,
        newest: seq(newest)?,
        oldest: seq(oldest)?,
        entries,
        at_after,
    })
}

/// Proclaims `metadata` for the term of `field`: its place in history, or `None` when `field`
/// does not lead.
pub(super) async fn proclaim(
    redis: &Connection,
    publish: &'static str,
    lock: &Str,
    keys: &ElectionKeys,
    field: &Str,
    metadata: &str,
) -> Result<Option<u64>> {
    let [pid, host, program] = &*PROCESS;
    let reply = PROCLAIM
        .run(
            redis,
            &keys.with_lock(lock),
            &[
                Value::String(field.clone()),
                Value::from(metadata),
                text(publish),
                pid.clone(),
                host.clone(),
                program.clone(),
            ],
        )
        .await
        .map_err(|e| Error::from_script(e, &keys.named_with(lock), &redis.server))?;
    match reply {
        Value::Null => Ok(None),
        other => Ok(Some(integer(other, lock, &redis.server)?.max(0) as u64)),
    }
}
