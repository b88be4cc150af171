//! Stream commands: `XADD` (explicit or automatic IDs, `MAXLEN`), `XRANGE`, `XREVRANGE`,
//! `XLEN`, `XDEL`, `XTRIM`, `XINFO STREAM` (without `FULL`).
//!
//! `MAXLEN ~ n` trims whole blocks of 100 entries from the head, as Redis trims whole nodes of
//! its radix tree (`stream-node-max-entries` 100); Redis also closes a node at 4 KiB, which this
//! server does not count, so past `n` entries of large fields the two may keep different
//! numbers of entries (both keep at least `n`).

use super::data::{Stream, StreamId};
use super::numbers::int_arg;
use super::{arity, errors, Bytes, Data, Outcome, Reply, Server};

/// Entries per radix-tree node, as Redis's default `stream-node-max-entries`.
const NODE_ENTRIES: usize = 100;

/// Runs `name` when it is one of this file's commands.
pub(super) fn dispatch(server: &mut Server, name: &str, args: &[Bytes]) -> Option<Outcome> {
    Some(match name {
        "xadd" => xadd(server, name, args),
        "xrange" | "xrevrange" => range(server, name, args),
        "xlen" => arity(name, args, 1, true).and_then(|_| {
            Ok(Reply::Int(
                stream(server, &args[0])?.map_or(0, |s| s.entries.len()) as i64,
            ))
        }),
        "xdel" => arity(name, args, 2, false).and_then(|_| {
            let ids: Vec<StreamId> = args[1..]
                .iter()
                .map(|id| parse_id(id, 0).ok_or_else(invalid_id))
                .collect::<Result<_, _>>()?;
            let Some(s) = stream_mut(server, &args[0])? else {
                return Ok(Reply::Int(0));
            };
            let before = s.entries.len();
            let mut max_deleted = s.max_deleted;
            s.entries.retain(|(id, _)| {
                let gone = ids.contains(id);
                if gone {
                    max_deleted = max_deleted.max(*id);
                }
                !gone
            });
            s.max_deleted = max_deleted;
            Ok(Reply::Int((before - s.entries.len()) as i64))
        }),
        "xtrim" => arity(name, args, 3, false).and_then(|_| {
            let (limit, _) = trim_option(&args[1..])?.ok_or_else(errors::syntax)?;
            let Some(s) = stream_mut(server, &args[0])? else {
                return Ok(Reply::Int(0));
            };
            Ok(Reply::Int(trim(s, limit) as i64))
        }),
        "xinfo" => xinfo(server, args),
        _ => return None,
    })
}

/// `XINFO STREAM key` as Redis 7.0 answers it (Redis 6.x: without `max-deleted-entry-id`,
/// `entries-added`, `recorded-first-entry-id`). `radix-tree-keys` and `radix-tree-nodes` are
/// the radix tree's of a stream whose nodes each hold 100 entries (one node per 100 entries,
/// one more tree node than nodes): Redis's own also depend on the entries' sizes and IDs (no
/// script of relock's reads them).
fn xinfo(server: &mut Server, args: &[Bytes]) -> Outcome {
    let Some(sub) = args.first() else {
        return Err(errors::arity("xinfo"));
    };
    if !sub.eq_ignore_ascii_case(b"stream") {
        return Err(Reply::error(format!(
            "ERR unknown subcommand '{}'. Try XINFO HELP.",
            String::from_utf8_lossy(sub)
        )));
    }
    let key = match &args[1..] {
        [key] => key,
        [] => return Err(errors::arity("xinfo|stream")),
        _ => return Err(errors::syntax()),
    };
    let redis6 = server.version == super::Version::Redis6;
    let Some(s) = stream(server, key)? else {
        return Err(Reply::error("ERR no such key"));
    };
    let entry = |e: Option<&(StreamId, Vec<(Bytes, Bytes)>)>| match e {
        None => Reply::Nil,
        Some((id, fields)) => Reply::Array(vec![
            Reply::bulk(id.to_string()),
            Reply::Array(
                fields
                    .iter()
                    .flat_map(|(f, v)| [Reply::Bulk(f.clone()), Reply::Bulk(v.clone())])
                    .collect(),
            ),
        ]),
    };
    let nodes = s.entries.len().div_ceil(NODE_ENTRIES) as i64;
    let mut reply = vec![
        Reply::bulk("length"),
        Reply::Int(s.entries.len() as i64),
        Reply::bulk("radix-tree-keys"),
        Reply::Int(nodes),
        Reply::bulk("radix-tree-nodes"),
        Reply::Int(nodes + 1),
        Reply::bulk("last-generated-id"),
        Reply::bulk(s.last_id.to_string()),
    ];
    if !redis6 {
        let first = s.entries.first().map(|(id, _)| *id).unwrap_or_default();
        reply.extend([
            Reply::bulk("max-deleted-entry-id"),
            Reply::bulk(s.max_deleted.to_string()),
            Reply::bulk("entries-added"),
            Reply::Int(s.entries_added as i64),
            Reply::bulk("recorded-first-entry-id"),
            Reply::bulk(first.to_string()),
        ]);
    }
    reply.extend([
        Reply::bulk("groups"),
        Reply::Int(0),
        Reply::bulk("first-entry"),
        entry(s.entries.first()),
        Reply::bulk("last-entry"),
        entry(s.entries.last()),
    ]);
    Ok(Reply::Array(reply))
}

fn invalid_id() -> Reply {
    Reply::error("ERR Invalid stream ID specified as stream command argument")
}

fn stream<'a>(server: &'a Server, key: &[u8]) -> Result<Option<&'a Stream>, Reply> {
    match server.entry(key).map(|e| &e.data) {
        None => Ok(None),
        Some(Data::Stream(s)) => Ok(Some(s)),
        Some(_) => Err(errors::wrong_type()),
    }
}

fn stream_mut<'a>(server: &'a mut Server, key: &[u8]) -> Result<Option<&'a mut Stream>, Reply> {
    match server.entry_mut(key).map(|e| &mut e.data) {
        None => Ok(None),
        Some(Data::Stream(s)) => Ok(Some(s)),
        Some(_) => Err(errors::wrong_type()),
    }
}

/// `<ms>-<seq>`, or `<ms>` with the sequence `seq`.
fn parse_id(text: &[u8], seq: u64) -> Option<StreamId> {
    let text = std::str::from_utf8(text).ok()?;
    match text.split_once('-') {
        Some((ms, s)) => Some(StreamId {
            ms: ms.parse().ok()?,
            seq: s.parse().ok()?,
        }),
        None => Some(StreamId {
            ms: text.parse().ok()?,
            seq,
        }),
    }
}

/// A `MAXLEN` limit: the length, and whether approximate (`~`).
type Limit = (usize, bool);

/// `MAXLEN [=|~] n` at the head of `args`: the limit, and how many arguments it took.
fn trim_option(args: &[Bytes]) -> Result<Option<(Limit, usize)>, Reply> {
    let Some(first) = args.first() else {
        return Ok(None);
    };
    if !first.eq_ignore_ascii_case(b"maxlen") {
        return Ok(None);
    }
    let (approximate, at) = match args.get(1).map(|a| a.as_slice()) {
        Some(b"~") => (true, 2),
        Some(b"=") => (false, 2),
        _ => (false, 1),
    };
    let n = int_arg(args.get(at).ok_or_else(errors::syntax)?)?;
    let n =
        usize::try_from(n).map_err(|_| Reply::error("ERR The MAXLEN argument must be >= 0."))?;
    Ok(Some(((n, approximate), at + 1)))
}

/// Trims `s` to `limit` entries (whole nodes only when approximate); returns how many went.
fn trim(s: &mut Stream, (max, approximate): Limit) -> usize {
    let len = s.entries.len();
    if len <= max {
        return 0;
    }
    let cut = if approximate {
        (len - max) / NODE_ENTRIES * NODE_ENTRIES
    } else {
        len - max
    };
    s.entries.drain(..cut);
    cut
}

fn xadd(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 4, false)?;
    let mut i = 1;
    let mut create = true;
    let mut limit = None;
    loop {
        if args[i].eq_ignore_ascii_case(b"nomkstream") {
            create = false;
            i += 1;
        } else if let Some((option, used)) = trim_option(&args[i..])? {
            limit = Some(option);
            i += used;
        } else {
            break;
        }
        if i >= args.len() {
            return Err(errors::syntax());
        }
    }
    let fields = &args[i + 1..];
    if fields.is_empty() || fields.len() % 2 != 0 {
        return Err(errors::arity(name));
    }
    let exists = stream(server, &args[0])?.is_some();
    if !exists && !create {
        return Ok(Reply::Nil);
    }
    let now = server.clock();
    let last = stream(server, &args[0])?
        .map(|s| s.last_id)
        .unwrap_or_default();
    let id = match args[i].as_slice() {
        b"*" => {
            if now > last.ms {
                StreamId { ms: now, seq: 0 }
            } else {
                StreamId {
                    ms: last.ms,
                    seq: last.seq + 1,
                }
            }
        }
        text => {
            let seq =
                if parse_id(text, 0).is_some_and(|id| id.ms == last.ms) && !text.contains(&b'-') {
                    last.seq + 1
                } else {
                    0
                };
            let id = parse_id(text, seq).ok_or_else(invalid_id)?;
            if id == StreamId::default() {
                return Err(Reply::error(
                    "ERR The ID specified in XADD must be greater than 0-0",
                ));
            }
            if id <= last {
                return Err(Reply::error(
                    "ERR The ID specified in XADD is equal or smaller than the target stream top item",
                ));
            }
            id
        }
    };
    let s = server.value_or_new(&args[0], Data::Stream(Stream::default()), |d| match d {
        Data::Stream(s) => Some(s),
        _ => None,
    })?;
    let pairs = fields
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    s.entries.push((id, pairs));
    s.last_id = id;
    s.entries_added += 1;
    if let Some(limit) = limit {
        trim(s, limit);
    }
    Ok(Reply::bulk(id.to_string()))
}

/// A range end: `-`, `+`, an ID, `<ms>` (its first or last sequence), `(` before either.
fn range_end(text: &[u8], start: bool) -> Result<Option<StreamId>, Reply> {
    let (exclusive, text) = match text.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, text),
    };
    let id = match text {
        b"-" => StreamId::default(),
        b"+" => StreamId {
            ms: u64::MAX,
            seq: u64::MAX,
        },
        _ => parse_id(text, if start { 0 } else { u64::MAX }).ok_or_else(invalid_id)?,
    };
    if !exclusive {
        return Ok(Some(id));
    }
    let next = if start {
        id.seq
            .checked_add(1)
            .map(|seq| StreamId { seq, ..id })
            .or_else(|| id.ms.checked_add(1).map(|ms| StreamId { ms, seq: 0 }))
    } else {
        id.seq
            .checked_sub(1)
            .map(|seq| StreamId { seq, ..id })
            .or_else(|| {
                id.ms
                    .checked_sub(1)
                    .map(|ms| StreamId { ms, seq: u64::MAX })
            })
    };
    Ok(next)
}

fn range(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 3, false)?;
    let reverse = name == "xrevrange";
    let (start, end) = if reverse {
        (&args[2], &args[1])
    } else {
        (&args[1], &args[2])
    };
    let count = match &args[3..] {
        [] => None,
        [word, n] if word.eq_ignore_ascii_case(b"count") => Some(int_arg(n)?),
        _ => return Err(errors::syntax()),
    };
    let (start, end) = (range_end(start, true)?, range_end(end, false)?);
    let Some(s) = stream(server, &args[0])? else {
        return Ok(Reply::Array(vec![]));
    };
    let (Some(start), Some(end)) = (start, end) else {
        return Ok(Reply::Array(vec![]));
    };
    if count.is_some_and(|n| n <= 0) {
        return Ok(Reply::Array(vec![]));
    }
    let mut hits: Vec<&(StreamId, Vec<(Bytes, Bytes)>)> = s
        .entries
        .iter()
        .filter(|(id, _)| *id >= start && *id <= end)
        .collect();
    if reverse {
        hits.reverse();
    }
    let take = count.map_or(usize::MAX, |n| n as usize);
    Ok(Reply::Array(
        hits.into_iter()
            .take(take)
            .map(|(id, fields)| {
                let flat = fields
                    .iter()
                    .flat_map(|(f, v)| [Reply::Bulk(f.clone()), Reply::Bulk(v.clone())]);
                Reply::Array(vec![
                    Reply::bulk(id.to_string()),
                    Reply::Array(flat.collect()),
                ])
            })
            .collect(),
    ))
}
