//! List commands: `RPUSH`, `LPUSH`, `LPOP`, `RPOP`, `LLEN`, `LRANGE`, `LINDEX`, `LREM`, and
//! the set commands the tests read with (`SADD`, `SMEMBERS`, `SCARD`, `SREM`).

use std::collections::VecDeque;

use super::numbers::int_arg;
use super::{arity, errors, Bytes, Data, Outcome, Reply, Server};

/// Runs `name` when it is one of this file's commands.
pub(super) fn dispatch(server: &mut Server, name: &str, args: &[Bytes]) -> Option<Outcome> {
    Some(match name {
        "rpush" | "lpush" => arity(name, args, 2, false).and_then(|_| {
            list(server, &args[0])?;
            let l = list_mut(server, &args[0])?;
            for item in &args[1..] {
                if name == "rpush" {
                    l.push_back(item.clone());
                } else {
                    l.push_front(item.clone());
                }
            }
            Ok(Reply::Int(l.len() as i64))
        }),
        "lpop" | "rpop" => pop(server, name, args),
        "llen" => arity(name, args, 1, true).and_then(|_| {
            Ok(Reply::Int(
                list(server, &args[0])?.map_or(0, |l| l.len()) as i64
            ))
        }),
        "lindex" => arity(name, args, 2, true).and_then(|_| {
            let index = int_arg(&args[1])?;
            let Some(l) = list(server, &args[0])? else {
                return Ok(Reply::Nil);
            };
            let at = if index < 0 {
                l.len() as i64 + index
            } else {
                index
            };
            Ok(usize::try_from(at)
                .ok()
                .and_then(|at| l.get(at))
                .map_or(Reply::Nil, |v| Reply::Bulk(v.clone())))
        }),
        "lrange" => arity(name, args, 3, true).and_then(|_| {
            let (start, stop) = (int_arg(&args[1])?, int_arg(&args[2])?);
            let Some(l) = list(server, &args[0])? else {
                return Ok(Reply::Array(vec![]));
            };
            let len = l.len() as i64;
            let start = if start < 0 {
                (len + start).max(0)
            } else {
                start
            };
            let stop = if stop < 0 {
                len + stop
            } else {
                stop.min(len - 1)
            };
            if start > stop || start >= len {
                return Ok(Reply::Array(vec![]));
            }
            let items = l.range(start as usize..=stop as usize);
            Ok(Reply::Array(items.cloned().map(Reply::Bulk).collect()))
        }),
        "lrem" => arity(name, args, 3, true).and_then(|_| lrem(server, args)),
        "sadd" => arity(name, args, 2, false).and_then(|_| {
            set(server, &args[0])?;
            let s = server.value_or_new(&args[0], Data::Set(Default::default()), |d| match d {
                Data::Set(s) => Some(s),
                _ => None,
            })?;
            Ok(Reply::Int(
                args[1..].iter().filter(|m| s.insert(m.to_vec())).count() as i64,
            ))
        }),
        "srem" => arity(name, args, 2, false).and_then(|_| {
            let Some(Data::Set(s)) = server.entry_mut(&args[0]).map(|e| &mut e.data) else {
                set(server, &args[0])?;
                return Ok(Reply::Int(0));
            };
            let removed = args[1..].iter().filter(|m| s.remove(*m)).count();
            server.drop_if_empty(&args[0]);
            Ok(Reply::Int(removed as i64))
        }),
        "smembers" => arity(name, args, 1, true).and_then(|_| {
            let members = set(server, &args[0])?.cloned().unwrap_or_default();
            Ok(Reply::Array(members.into_iter().map(Reply::Bulk).collect()))
        }),
        "scard" => arity(name, args, 1, true).and_then(|_| {
            Ok(Reply::Int(
                set(server, &args[0])?.map_or(0, |s| s.len()) as i64
            ))
        }),
        _ => return None,
    })
}

fn list<'a>(server: &'a Server, key: &[u8]) -> Result<Option<&'a VecDeque<Bytes>>, Reply> {
    match server.entry(key).map(|e| &e.data) {
        None => Ok(None),
        Some(Data::List(l)) => Ok(Some(l)),
        Some(_) => Err(errors::wrong_type()),
    }
}

fn list_mut<'a>(server: &'a mut Server, key: &[u8]) -> Result<&'a mut VecDeque<Bytes>, Reply> {
    server.value_or_new(key, Data::List(VecDeque::new()), |d| match d {
        Data::List(l) => Some(l),
        _ => None,
    })
}

fn set<'a>(
    server: &'a Server,
    key: &[u8],
) -> Result<Option<&'a std::collections::BTreeSet<Bytes>>, Reply> {
    match server.entry(key).map(|e| &e.data) {
        None => Ok(None),
        Some(Data::Set(s)) => Ok(Some(s)),
        Some(_) => Err(errors::wrong_type()),
    }
}

/// `LPOP key [count]` / `RPOP key [count]`.
fn pop(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 1, false)?;
    if args.len() > 2 {
        return Err(errors::arity(name));
    }
    let count = match args.get(1) {
        Some(c) => Some(
            usize::try_from(int_arg(c)?)
                .map_err(|_| Reply::error("ERR value is out of range, must be positive"))?,
        ),
        None => None,
    };
    if list(server, &args[0])?.is_none() {
        return Ok(if count.is_some() {
            Reply::NilArray
        } else {
            Reply::Nil
        });
    }
    let l = list_mut(server, &args[0])?;
    let mut taken = Vec::new();
    for _ in 0..count.unwrap_or(1) {
        let item = if name == "lpop" {
            l.pop_front()
        } else {
            l.pop_back()
        };
        match item {
            Some(item) => taken.push(Reply::Bulk(item)),
            None => break,
        }
    }
    server.drop_if_empty(&args[0]);
    Ok(match count {
        Some(_) => Reply::Array(taken),
        None => taken.pop().unwrap_or(Reply::Nil),
    })
}

/// `LREM key count element`: from the head when count > 0, the tail when < 0, all when 0.
fn lrem(server: &mut Server, args: &[Bytes]) -> Outcome {
    let count = int_arg(&args[1])?;
    if list(server, &args[0])?.is_none() {
        return Ok(Reply::Int(0));
    }
    let l = list_mut(server, &args[0])?;
    let limit = if count == 0 {
        usize::MAX
    } else {
        count.unsigned_abs() as usize
    };
    let mut removed = 0;
    let mut kept: Vec<Bytes> = Vec::with_capacity(l.len());
    let items: Vec<Bytes> = if count < 0 {
        l.drain(..).rev().collect()
    } else {
        l.drain(..).collect()
    };
    for item in items {
        if removed < limit && item == args[2] {
            removed += 1;
        } else {
            kept.push(item);
        }
    }
    if count < 0 {
        kept.reverse();
    }
    l.extend(kept);
    server.drop_if_empty(&args[0]);
    Ok(Reply::Int(removed as i64))
}
