//! String commands: `GET`, `SET` with its options, the counters (`INCR`, `INCRBY`, `DECR`,
//! `DECRBY`) and `STRLEN`.

use super::numbers::{int, int_arg};
use super::{arity, errors, Bytes, Data, Entry, Outcome, Reply, Server};

/// Runs `name` when it is one of this file's commands.
pub(super) fn dispatch(server: &mut Server, name: &str, args: &[Bytes]) -> Option<Outcome> {
    Some(match name {
        "get" => arity(name, args, 1, true).and_then(|_| {
            Ok(string(server, &args[0])?.map_or(Reply::Nil, |s| Reply::Bulk(s.clone())))
        }),
        "strlen" => arity(name, args, 1, true).and_then(|_| {
            Ok(Reply::Int(
                string(server, &args[0])?.map_or(0, |s| s.len()) as i64
            ))
        }),
        "set" => set(server, name, args),
        "setnx" => arity(name, args, 2, true).map(|_| {
            if server.entry(&args[0]).is_some() {
                return Reply::Int(0);
            }
            put(server, &args[0], args[1].clone(), None);
            Reply::Int(1)
        }),
        "incr" => arity(name, args, 1, true).and_then(|_| add(server, &args[0], 1)),
        "decr" => arity(name, args, 1, true).and_then(|_| add(server, &args[0], -1)),
        "incrby" => {
            arity(name, args, 2, true).and_then(|_| add(server, &args[0], int_arg(&args[1])?))
        }
        "decrby" => arity(name, args, 2, true).and_then(|_| {
            let by = int_arg(&args[1])?;
            add(
                server,
                &args[0],
                by.checked_neg().ok_or_else(errors::overflow)?,
            )
        }),
        _ => return None,
    })
}

/// The string at `key`, `None` when there is none; a `WRONGTYPE` error for another type.
fn string<'a>(server: &'a Server, key: &[u8]) -> Result<Option<&'a Bytes>, Reply> {
    match server.entry(key).map(|e| &e.data) {
        None => Ok(None),
        Some(Data::String(s)) => Ok(Some(s)),
        Some(_) => Err(errors::wrong_type()),
    }
}

fn put(server: &mut Server, key: &[u8], value: Bytes, expires_at: Option<u64>) {
    let entry = Entry {
        data: Data::String(value),
        expires_at,
    };
    server.keyspace.keys.insert(key.to_vec(), entry);
}

/// `SET key value [NX|XX] [GET] [EX s|PX ms|KEEPTTL]`.
fn set(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 2, false)?;
    let (mut nx, mut xx, mut get, mut keep) = (false, false, false, false);
    let mut ttl_ms: Option<i64> = None;
    let mut i = 2;
    while i < args.len() {
        let option = String::from_utf8_lossy(&args[i]).to_lowercase();
        match option.as_str() {
            "nx" if !xx => nx = true,
            "xx" if !nx => xx = true,
            "get" => get = true,
            "keepttl" if ttl_ms.is_none() => keep = true,
            "ex" | "px" if ttl_ms.is_none() && !keep && i + 1 < args.len() => {
                let amount = int_arg(&args[i + 1])?;
                if amount <= 0 {
                    return Err(Reply::error("ERR invalid expire time in 'set' command"));
                }
                ttl_ms = Some(if option == "ex" {
                    amount * 1000
                } else {
                    amount
                });
                i += 1;
            }
            _ => return Err(errors::syntax()),
        }
        i += 1;
    }
    // SET replaces a value of any type; only SET … GET reads the old one, which must be a string.
    let old = if get {
        string(server, &args[0])?.cloned()
    } else {
        None
    };
    let exists = server.entry(&args[0]).is_some();
    if (nx && exists) || (xx && !exists) {
        return Ok(if get {
            old.map_or(Reply::Nil, Reply::Bulk)
        } else {
            Reply::Nil
        });
    }
    let expires_at = match ttl_ms {
        Some(ms) => Some(server.clock() + ms as u64),
        None if keep => server.entry(&args[0]).and_then(|e| e.expires_at),
        None => None,
    };
    put(server, &args[0], args[1].clone(), expires_at);
    Ok(if get {
        old.map_or(Reply::Nil, Reply::Bulk)
    } else {
        Reply::ok()
    })
}

/// `INCRBY key by`, keeping the key's expiry.
fn add(server: &mut Server, key: &[u8], by: i64) -> Outcome {
    let current = match string(server, key)? {
        None => 0,
        Some(text) => int(text).ok_or_else(errors::not_integer)?,
    };
    let next = current.checked_add(by).ok_or_else(errors::overflow)?;
    let expires_at = server.entry(key).and_then(|e| e.expires_at);
    put(server, key, next.to_string().into_bytes(), expires_at);
    Ok(Reply::Int(next))
}
