//! The mirror's comparison: the whole keyspace of both servers read alike, and each reply and
//! key that differs written to the report.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use super::{Link, Shared, State};
use crate::server::{Data, Reply, Server};

/// A key as both servers are compared on: its type, its value, its expiry (ms, or none).
pub(super) type Dump = BTreeMap<Vec<u8>, (String, Reply, Option<u64>)>;

/// Runs `args` on `server` at each instant the real server may have run it at (and each
/// script tick), until both the reply and the keyspace are the real server's: the server as it
/// is after the run that agreed, or after the first run and what differed (the report's text,
/// after its `--- difference <n> `).
pub(super) fn compare(
    server: &Server,
    args: &[Vec<u8>],
    reply: &Reply,
    instants: std::ops::RangeInclusive<u64>,
    real: &Dump,
    read: u64,
) -> (Server, Option<String>) {
    let real = settled(real, read);
    let mut first = None;
    let latest = *instants.end();
    for at in instants {
        // The script's clock may move on by a ms at any of its commands (or not at all).
        let mut tick = None;
        loop {
            let mut sim = server.clone();
            sim.set_clock(at);
            sim.set_script_tick(tick);
            let sim_reply = sim.call(args);
            let commands = sim.script_commands();
            sim.set_script_tick(None);
            let sim_dump = settled(&sim_dump(&mut sim), read);
            if normal(args, &sim_reply) == normal(args, reply) && sim_dump == real {
                return (sim, None);
            }
            if first.is_none() {
                first = Some((sim, sim_reply, sim_dump, at));
            }
            tick = match tick {
                None if commands > 0 => Some(0),
                Some(t) if t + 1 < commands => Some(t + 1),
                _ => break,
            };
        }
    }
    let (sim, sim_reply, sim_dump, at) = first.expect("at least one instant");
    let mut text = format!(
        "(simulated at {at} ms, shown; every ms to {latest} tried): {}\nreal reply: {reply}\nsim reply:  {sim_reply}\n",
        describe(args)
    );
    let keys: BTreeSet<&Vec<u8>> = real.keys().chain(sim_dump.keys()).collect();
    for key in keys {
        let (r, s) = (real.get(key), sim_dump.get(key));
        if r != s {
            text.push_str(&format!(
                "key {:?}:\n  real: {}\n  sim:  {}\n",
                String::from_utf8_lossy(key),
                show(r),
                show(s)
            ));
        }
    }
    (sim, Some(text))
}

/// Numbers a difference, prints it to stderr and appends it to the report.
pub(super) fn report(shared: &Shared, state: &mut State, difference: &str) {
    state.differences += 1;
    let text = format!("--- difference {} {difference}", state.differences);
    eprint!("{text}");
    if let Some(path) = &shared.report {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = file.write_all(text.as_bytes());
        }
    }
}

fn show(entry: Option<&(String, Reply, Option<u64>)>) -> String {
    match entry {
        None => "(none)".into(),
        Some((kind, value, expiry)) => format!("{kind} {value} expires {expiry:?}"),
    }
}

/// The command, with a script shown by its first line.
fn describe(args: &[Vec<u8>]) -> String {
    args.iter()
        .map(|a| {
            let text = String::from_utf8_lossy(a);
            match text.lines().next() {
                Some(first) if text.len() > 80 => format!("<script: {first} …>"),
                _ => format!("{text:?}"),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Without the keys due to expire by `read` (the real server may or may not have them then).
fn settled(dump: &Dump, read: u64) -> Dump {
    dump.iter()
        .filter(|(_, (_, _, expiry))| expiry.is_none_or(|at| at > read))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A reply as compared: an error without the location Redis 7 adds to a script's or a
/// function's raised error, `KEYS`'s keys sorted (Redis lists them in its hash table's order),
/// and so are `FUNCTION LIST`'s libraries and each library's functions.
fn normal(args: &[Vec<u8>], reply: &Reply) -> Reply {
    if args[0].eq_ignore_ascii_case(b"keys") {
        if let Reply::Array(items) = reply {
            return Reply::Array(sorted(items.clone()));
        }
    }
    if args[0].eq_ignore_ascii_case(b"function")
        && args
            .get(1)
            .is_some_and(|sub| sub.eq_ignore_ascii_case(b"list"))
    {
        if let Reply::Array(libraries) = reply {
            let libraries = libraries.iter().map(|library| match library {
                Reply::Array(fields) => Reply::Array(
                    fields
                        .chunks(2)
                        .flat_map(|pair| match pair {
                            [key, Reply::Array(functions)] if *key == Reply::bulk("functions") => {
                                vec![key.clone(), Reply::Array(sorted(functions.clone()))]
                            }
                            other => other.to_vec(),
                        })
                        .collect(),
                ),
                other => other.clone(),
            });
            return Reply::Array(sorted(libraries.collect()));
        }
    }
    error_without_location(reply)
}

/// `items` in the order of their RESP bytes.
fn sorted(mut items: Vec<Reply>) -> Vec<Reply> {
    items.sort_by_key(|a| a.to_resp());
    items
}

/// An error reply without the location Redis 7 adds to a script's or a function's raised
/// error (` script: <sha or function>, on @user_script:<line>.` or `@user_function:<line>.`).
fn error_without_location(reply: &Reply) -> Reply {
    match reply {
        Reply::Error(message) => match message.find(" script: ") {
            Some(at) => Reply::Error(message[..at].to_string()),
            None => reply.clone(),
        },
        Reply::Array(items) => Reply::Array(items.iter().map(error_without_location).collect()),
        other => other.clone(),
    }
}

/// The value of `key` of type `kind`, read with the commands both servers answer alike.
fn value_commands(kind: &str, key: &[u8]) -> Vec<Vec<u8>> {
    let words: &[&[u8]] = match kind {
        "string" => &[b"GET"],
        "hash" => &[b"HGETALL"],
        "zset" => &[b"ZRANGE", b"KEY", b"0", b"-1", b"WITHSCORES"],
        "list" => &[b"LRANGE", b"KEY", b"0", b"-1"],
        "set" => &[b"SMEMBERS"],
        "stream" => &[b"XRANGE", b"KEY", b"-", b"+"],
        _ => &[b"TYPE"],
    };
    let mut args: Vec<Vec<u8>> = words.iter().map(|w| w.to_vec()).collect();
    if args.len() == 1 {
        args.push(key.to_vec());
    } else {
        args[1] = key.to_vec();
    }
    args
}

/// A set's members sorted, and a stream's value with its last ID (which `XADD` must exceed).
fn canonical(kind: &str, value: Reply, last_id: Option<String>) -> Reply {
    match (kind, value) {
        ("set", Reply::Array(mut items)) => {
            items.sort_by_key(|a| a.to_resp());
            Reply::Array(items)
        }
        ("stream", value) => Reply::Array(vec![value, Reply::bulk(last_id.unwrap_or_default())]),
        (_, value) => value,
    }
}

pub(super) fn real_dump(link: &mut Link) -> io::Result<Dump> {
    let mut keys = Vec::new();
    let mut cursor = b"0".to_vec();
    loop {
        let reply = link.call(&[
            b"SCAN".to_vec(),
            cursor,
            b"COUNT".to_vec(),
            b"1000".to_vec(),
        ])?;
        let Reply::Array(parts) = reply else {
            return Err(io::Error::other("SCAN: a bad reply"));
        };
        let [Reply::Bulk(next), Reply::Array(found)] = &parts[..] else {
            return Err(io::Error::other("SCAN: a bad reply"));
        };
        keys.extend(found.iter().filter_map(|k| match k {
            Reply::Bulk(k) => Some(k.clone()),
            _ => None,
        }));
        if next == b"0" {
            break;
        }
        cursor = next.clone();
    }
    let mut dump = Dump::new();
    for key in keys {
        let Reply::Status(kind) = link.call(&[b"TYPE".to_vec(), key.clone()])? else {
            continue;
        };
        if kind == "none" {
            continue;
        }
        let expiry = match link.call(&[b"PEXPIRETIME".to_vec(), key.clone()])? {
            Reply::Int(-2) => continue,
            Reply::Int(at) if at >= 0 => Some(at as u64),
            _ => None,
        };
        let value = link.call(&value_commands(&kind, &key))?;
        let last_id = if kind == "stream" {
            match link.call(&[b"XINFO".to_vec(), b"STREAM".to_vec(), key.clone()])? {
                Reply::Array(items) => items
                    .chunks(2)
                    .find(|pair| pair[0] == Reply::bulk("last-generated-id"))
                    .and_then(|pair| match &pair[1] {
                        Reply::Bulk(id) => Some(String::from_utf8_lossy(id).into_owned()),
                        _ => None,
                    }),
                _ => None,
            }
        } else {
            None
        };
        dump.insert(
            key,
            (kind.clone(), canonical(&kind, value, last_id), expiry),
        );
    }
    Ok(dump)
}

fn sim_dump(sim: &mut Server) -> Dump {
    let now = sim.now();
    // Each live key: its type, its expiry, a stream's last ID.
    type Live = (Vec<u8>, &'static str, Option<u64>, Option<String>);
    let entries: Vec<Live> = sim
        .keyspace
        .keys
        .iter()
        .filter(|(_, e)| e.alive_at(now))
        .map(|(k, e)| {
            let last = match &e.data {
                Data::Stream(s) => Some(s.last_id.to_string()),
                _ => None,
            };
            (k.clone(), e.data.type_name(), e.expires_at, last)
        })
        .collect();
    let mut dump = Dump::new();
    for (key, kind, expiry, last_id) in entries {
        let value = sim.call(&value_commands(kind, &key));
        dump.insert(
            key,
            (kind.to_string(), canonical(kind, value, last_id), expiry),
        );
    }
    dump
}
