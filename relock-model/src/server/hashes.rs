//! Hash commands: `HGET`, `HSET`, `HDEL`, `HEXISTS`, `HLEN`, `HINCRBY`, `HGETALL`, `HKEYS`,
//! `HVALS`, `HMGET`, `HSETNX`.

use super::data::Hash;
use super::numbers::{int, int_arg};
use super::{arity, errors, Bytes, Data, Outcome, Reply, Server};

/// Runs `name` when it is one of this file's commands.
pub(super) fn dispatch(server: &mut Server, name: &str, args: &[Bytes]) -> Option<Outcome> {
    Some(match name {
        "hget" => arity(name, args, 2, true).and_then(|_| {
            let value = hash(server, &args[0])?.and_then(|h| h.get(&args[1]));
            Ok(value.map_or(Reply::Nil, |v| Reply::Bulk(v.clone())))
        }),
        "hmget" => arity(name, args, 2, false).and_then(|_| {
            let h = hash(server, &args[0])?;
            Ok(Reply::Array(
                args[1..]
                    .iter()
                    .map(|f| {
                        h.and_then(|h| h.get(f))
                            .map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))
                    })
                    .collect(),
            ))
        }),
        "hexists" => arity(name, args, 2, true).and_then(|_| {
            let found = hash(server, &args[0])?.is_some_and(|h| h.get(&args[1]).is_some());
            Ok(Reply::Int(found as i64))
        }),
        "hlen" => arity(name, args, 1, true).and_then(|_| {
            Ok(Reply::Int(
                hash(server, &args[0])?.map_or(0, |h| h.0.len()) as i64
            ))
        }),
        "hgetall" | "hkeys" | "hvals" => arity(name, args, 1, true).and_then(|_| {
            let pairs = hash(server, &args[0])?
                .map(|h| h.0.clone())
                .unwrap_or_default();
            let items = pairs.into_iter().flat_map(|(f, v)| match name {
                "hgetall" => vec![f, v],
                "hkeys" => vec![f],
                _ => vec![v],
            });
            Ok(Reply::Array(items.map(Reply::Bulk).collect()))
        }),
        "hset" | "hmset" => hset(server, name, args),
        "hsetnx" => arity(name, args, 3, true).and_then(|_| {
            hash(server, &args[0])?;
            let h = hash_mut(server, &args[0])?;
            if h.get(&args[1]).is_some() {
                return Ok(Reply::Int(0));
            }
            h.set(&args[1], args[2].clone());
            Ok(Reply::Int(1))
        }),
        "hdel" => arity(name, args, 2, false).and_then(|_| {
            if hash(server, &args[0])?.is_none() {
                return Ok(Reply::Int(0));
            }
            let h = hash_mut(server, &args[0])?;
            let removed = args[1..].iter().filter(|f| h.remove(f)).count();
            server.drop_if_empty(&args[0]);
            Ok(Reply::Int(removed as i64))
        }),
        "hincrby" => arity(name, args, 3, true).and_then(|_| hincrby(server, args)),
        _ => return None,
    })
}

/// The hash at `key`, `None` when there is none; a `WRONGTYPE` error for another type.
fn hash<'a>(server: &'a Server, key: &[u8]) -> Result<Option<&'a Hash>, Reply> {
    match server.entry(key).map(|e| &e.data) {
        None => Ok(None),
        Some(Data::Hash(h)) => Ok(Some(h)),
        Some(_) => Err(errors::wrong_type()),
    }
}

/// The hash at `key`, made empty when there is none.
fn hash_mut<'a>(server: &'a mut Server, key: &[u8]) -> Result<&'a mut Hash, Reply> {
    server.value_or_new(key, Data::Hash(Hash::default()), |d| match d {
        Data::Hash(h) => Some(h),
        _ => None,
    })
}

fn hset(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    if args.len() < 3 || args.len() % 2 == 0 {
        return Err(errors::arity(name));
    }
    hash(server, &args[0])?;
    let h = hash_mut(server, &args[0])?;
    let added = args[1..]
        .chunks(2)
        .filter(|pair| h.set(&pair[0], pair[1].clone()))
        .count();
    Ok(if name == "hmset" {
        Reply::ok()
    } else {
        Reply::Int(added as i64)
    })
}

fn hincrby(server: &mut Server, args: &[Bytes]) -> Outcome {
    let by = int_arg(&args[2])?;
    let current = match hash(server, &args[0])?.and_then(|h| h.get(&args[1])) {
        None => 0,
        Some(text) => int(text).ok_or_else(errors::hash_not_integer)?,
    };
    let next = current.checked_add(by).ok_or_else(errors::overflow)?;
    hash_mut(server, &args[0])?.set(&args[1], next.to_string().into_bytes());
    Ok(Reply::Int(next))
}
