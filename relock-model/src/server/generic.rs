//! Commands on any key (`DEL`, `EXISTS`, `TYPE`, expiry) and on the server (`TIME`, `KEYS`,
//! `FLUSHALL`, `PING`).

use super::numbers::int_arg;
use super::{arity, errors, Bytes, Outcome, Reply, Server};

/// Runs `name` when it is one of this file's commands.
pub(super) fn dispatch(server: &mut Server, name: &str, args: &[Bytes]) -> Option<Outcome> {
    Some(match name {
        "del" | "unlink" => del(server, name, args),
        "exists" => exists(server, name, args),
        "type" => type_of(server, name, args),
        "pexpire" => expire(server, name, args, 1),
        "expire" => expire(server, name, args, 1000),
        "pttl" => ttl(server, name, args, 1),
        "ttl" => ttl(server, name, args, 1000),
        "pexpiretime" => expire_time(server, name, args),
        "persist" => persist(server, name, args),
        "keys" => keys(server, name, args),
        "dbsize" => arity(name, args, 0, true).map(|_| Reply::Int(live_keys(server).len() as i64)),
        "flushall" | "flushdb" => {
            server.keyspace.keys.clear();
            Ok(Reply::ok())
        }
        "time" => arity(name, args, 0, true).map(|_| {
            let now = server.clock();
            Reply::Array(vec![
                Reply::bulk((now / 1000).to_string()),
                Reply::bulk(((now % 1000) * 1000).to_string()),
            ])
        }),
        "ping" => Ok(match args {
            [] => Reply::Status("PONG".into()),
            [message] => Reply::Bulk(message.clone()),
            _ => return Some(Err(errors::arity(name))),
        }),
        "echo" => arity(name, args, 1, true).map(|_| Reply::Bulk(args[0].clone())),
        "select" => arity(name, args, 1, true).and_then(|_| match int_arg(&args[0])? {
            0 => Ok(Reply::ok()),
            _ => Err(Reply::error("ERR DB index is out of range")),
        }),
        _ => return None,
    })
}

fn del(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 1, false)?;
    let mut n = 0;
    for key in args {
        if server.entry(key).is_some() {
            server.keyspace.keys.remove(key);
            n += 1;
        }
    }
    Ok(Reply::Int(n))
}

fn exists(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 1, false)?;
    Ok(Reply::Int(
        args.iter().filter(|k| server.entry(k).is_some()).count() as i64,
    ))
}

fn type_of(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 1, true)?;
    let kind = server
        .entry(&args[0])
        .map_or("none", |e| e.data.type_name());
    Ok(Reply::Status(kind.into()))
}

/// `PEXPIRE` (`unit` 1) and `EXPIRE` (`unit` 1000), without the 7.0 options.
fn expire(server: &mut Server, name: &str, args: &[Bytes], unit: i64) -> Outcome {
    arity(name, args, 2, false)?;
    let amount = int_arg(&args[1])?;
    if args.len() > 2 {
        return Err(Reply::error(format!(
            "ERR Unsupported option {}",
            String::from_utf8_lossy(&args[2])
        )));
    }
    let now = server.clock() as i64;
    let at = amount
        .checked_mul(unit)
        .and_then(|ms| ms.checked_add(now))
        .ok_or_else(|| Reply::error(format!("ERR invalid expire time in '{name}' command")))?;
    if server.entry(&args[0]).is_none() {
        return Ok(Reply::Int(0));
    }
    if at <= now {
        server.keyspace.keys.remove(&args[0]);
    } else {
        server.entry_mut(&args[0]).unwrap().expires_at = Some(at as u64);
    }
    Ok(Reply::Int(1))
}

/// `PTTL` (`unit` 1) and `TTL` (`unit` 1000): -2 without the key, -1 without an expiry.
fn ttl(server: &mut Server, name: &str, args: &[Bytes], unit: u64) -> Outcome {
    arity(name, args, 1, true)?;
    let now = server.clock();
    Ok(Reply::Int(match server.entry(&args[0]) {
        None => -2,
        Some(entry) => match entry.expires_at {
            None => -1,
            Some(at) => ((at - now + unit / 2) / unit) as i64,
        },
    }))
}

fn expire_time(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 1, true)?;
    Ok(Reply::Int(match server.entry(&args[0]) {
        None => -2,
        Some(entry) => entry.expires_at.map_or(-1, |at| at as i64),
    }))
}

fn persist(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 1, true)?;
    Ok(Reply::Int(match server.entry_mut(&args[0]) {
        Some(entry) if entry.expires_at.is_some() => {
            entry.expires_at = None;
            1
        }
        _ => 0,
    }))
}

fn keys(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 1, true)?;
    let found = live_keys(server)
        .into_iter()
        .filter(|k| glob(&args[0], k))
        .map(Reply::Bulk)
        .collect();
    Ok(Reply::Array(found))
}

fn live_keys(server: &Server) -> Vec<Bytes> {
    let keys = server.keyspace.keys.keys();
    keys.filter(|k| server.entry(k).is_some())
        .cloned()
        .collect()
}

/// Redis's glob match: `*`, `?`, `[abc]`, `[^a]`, `[a-z]`, `\x`.
pub(crate) fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob(rest, &text[i..])),
        Some((b'?', rest)) => !text.is_empty() && glob(rest, &text[1..]),
        Some((b'[', rest)) => {
            let Some(close) = rest.iter().position(|&b| b == b']') else {
                return text.first() == Some(&b'[') && glob(rest, &text[1..]);
            };
            let Some(&c) = text.first() else { return false };
            let (negate, class) = match rest[..close].split_first() {
                Some((b'^', class)) => (true, class),
                _ => (false, &rest[..close]),
            };
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= (class[i].min(class[i + 2])..=class[i].max(class[i + 2])).contains(&c);
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            hit != negate && glob(&rest[close + 1..], &text[1..])
        }
        Some((b'\\', rest)) if !rest.is_empty() => {
            text.first() == Some(&rest[0]) && glob(&rest[1..], &text[1..])
        }
        Some((&p, rest)) => text.first() == Some(&p) && glob(rest, &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn globs_match_as_redis_does() {
        assert!(glob(b"relock_*", b"relock_claim:{a}"));
        assert!(glob(b"*{a}*", b"relock_claim:{a}"));
        assert!(!glob(b"a?c", b"ac"));
        assert!(glob(b"[a-c]x", b"bx"));
        assert!(!glob(b"[^a-c]x", b"bx"));
        assert!(glob(b"\\*", b"*"));
    }
}
