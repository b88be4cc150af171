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
        /// When, by the server's clock.
        at: SystemTime,
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
    },
    /// History between two places was lost: the changes after `after` (the last one this
    /// watch delivered, 0 for none) and before `next` (the next one it delivers) are gone. With
    /// `next` above `after + 1` they were trimmed (history keeps about the last 1,000 changes);
    /// with `next` at or below `after`, history itself was rewritten behind the watch (a server
    /// that lost its data, or a failover to a replica that had not received the last changes),
    /// and what follows is that new history.
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
    let change = match get("event").as_str() {
        "elected" => Change::Elected {
            seq,
            epoch,
            leader: leader(),
            at,
        },
        "proclaimed" => Change::Proclaimed {
            seq,
            epoch,
            leader: leader(),
            metadata: get("metadata"),
            at,
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
    /// The entries asked for.
    pub(super) entries: Vec<Entry>,
}

/// What to read of history.
#[derive(Debug, Clone, Copy)]
pub(super) enum Read {
    /// Its newest entry.
    Newest,
    /// At most `count` entries after place `after`.
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
    let (after, count) = match read {
        Read::Newest => (-1, 1),
        Read::After { after, count } => (after.min(i64::MAX as u64) as i64, count),
    };
    let reply = OBSERVE
        .run(
            redis,
            &keys.with_lock(lock),
            &[
                text(publish),
                Value::Integer(after),
                Value::Integer(i64::from(count)),
            ],
        )
        .await
        .map_err(|e| Error::from_script(e, &keys.named_with(lock), &redis.server))?;
    let server = &redis.server;
    let Value::Array(items) = reply else {
        return Err(unexpected(&reply, lock, server));
    };
    let [leader, pttl, epoch, newest, entries]: [Value; 5] = items
        .try_into()
        .map_err(|items: Vec<Value>| unexpected(&Value::Array(items), lock, server))?;
    let entries = match entries {
        Value::Array(list) => list
            .into_iter()
            .map(|e| entry(e, &keys.history, server))
            .collect::<Result<Vec<_>>>()?,
        Value::Null => Vec::new(),
        other => return Err(unexpected(&other, &keys.history, server)),
    };
    Ok(Observed {
        leader: match leader {
            Value::Null => None,
            name => name.as_string(),
        },
        pttl_ms: integer(pttl, lock, server)?,
        epoch: integer(epoch, lock, server)?.max(0) as u64,
        newest: integer(newest, lock, server)?.max(0) as u64,
        entries,
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
