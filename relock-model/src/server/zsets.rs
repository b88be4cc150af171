//! Sorted set commands: `ZADD`, `ZSCORE`, `ZREM`, `ZCARD`, `ZRANGE`, `ZRANGEBYSCORE`,
//! `ZINCRBY`, `ZCOUNT`, `ZRANK`, `ZREMRANGEBYSCORE`.

use super::data::{Score, ZSet};
use super::numbers::{double, float, float_arg, int_arg};
use super::{arity, errors, Bytes, Data, Outcome, Reply, Server};

/// Runs `name` when it is one of this file's commands.
pub(super) fn dispatch(server: &mut Server, name: &str, args: &[Bytes]) -> Option<Outcome> {
    Some(match name {
        "zadd" => zadd(server, name, args),
        "zincrby" => arity(name, args, 3, true).and_then(|_| {
            let by = float_arg(&args[1])?;
            zset(server, &args[0])?;
            let set = zset_mut(server, &args[0])?;
            let next = set.0.get(&args[2]).map_or(0.0, |s| s.0) + by;
            if next.is_nan() {
                return Err(Reply::error("ERR resulting score is not a number (NaN)"));
            }
            set.0.insert(args[2].clone(), Score(next));
            Ok(Reply::bulk(double(next)))
        }),
        "zscore" => arity(name, args, 2, true).and_then(|_| {
            let score = zset(server, &args[0])?.and_then(|z| z.0.get(&args[1]).copied());
            Ok(score.map_or(Reply::Nil, |s| Reply::bulk(double(s.0))))
        }),
        "zrank" => arity(name, args, 2, true).and_then(|_| {
            let rank = zset(server, &args[0])?
                .and_then(|z| z.ordered().iter().position(|(m, _)| **m == args[1]));
            Ok(rank.map_or(Reply::Nil, |r| Reply::Int(r as i64)))
        }),
        "zcard" => arity(name, args, 1, true).and_then(|_| {
            Ok(Reply::Int(
                zset(server, &args[0])?.map_or(0, |z| z.0.len()) as i64
            ))
        }),
        "zrem" => arity(name, args, 2, false).and_then(|_| {
            if zset(server, &args[0])?.is_none() {
                return Ok(Reply::Int(0));
            }
            let set = zset_mut(server, &args[0])?;
            let removed = args[1..]
                .iter()
                .filter(|m| set.0.remove(*m).is_some())
                .count();
            server.drop_if_empty(&args[0]);
            Ok(Reply::Int(removed as i64))
        }),
        "zrange" => zrange(server, name, args),
        "zrangebyscore" => zrangebyscore(server, name, args),
        "zcount" => arity(name, args, 3, true).and_then(|_| {
            let (min, max) = (bound(&args[1])?, bound(&args[2])?);
            let n = zset(server, &args[0])?.map_or(0, |z| {
                z.0.values()
                    .filter(|s| min.below(s.0) && max.above(s.0))
                    .count()
            });
            Ok(Reply::Int(n as i64))
        }),
        "zremrangebyscore" => arity(name, args, 3, true).and_then(|_| {
            let (min, max) = (bound(&args[1])?, bound(&args[2])?);
            if zset(server, &args[0])?.is_none() {
                return Ok(Reply::Int(0));
            }
            let set = zset_mut(server, &args[0])?;
            let before = set.0.len();
            set.0.retain(|_, s| !(min.below(s.0) && max.above(s.0)));
            let removed = before - set.0.len();
            server.drop_if_empty(&args[0]);
            Ok(Reply::Int(removed as i64))
        }),
        _ => return None,
    })
}

/// The sorted set at `key`, `None` when there is none; `WRONGTYPE` for another type.
fn zset<'a>(server: &'a Server, key: &[u8]) -> Result<Option<&'a ZSet>, Reply> {
    match server.entry(key).map(|e| &e.data) {
        None => Ok(None),
        Some(Data::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(errors::wrong_type()),
    }
}

fn zset_mut<'a>(server: &'a mut Server, key: &[u8]) -> Result<&'a mut ZSet, Reply> {
    server.value_or_new(key, Data::ZSet(ZSet::default()), |d| match d {
        Data::ZSet(z) => Some(z),
        _ => None,
    })
}

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member …]`.
fn zadd(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 3, false)?;
    let (mut nx, mut xx, mut gt, mut lt, mut ch, mut incr) =
        (false, false, false, false, false, false);
    let mut i = 1;
    while i < args.len() {
        match String::from_utf8_lossy(&args[i]).to_lowercase().as_str() {
            "nx" => nx = true,
            "xx" => xx = true,
            "gt" => gt = true,
            "lt" => lt = true,
            "ch" => ch = true,
            "incr" => incr = true,
            _ => break,
        }
        i += 1;
    }
    let pairs = &args[i..];
    if pairs.is_empty() || pairs.len() % 2 != 0 {
        return Err(errors::syntax());
    }
    if nx && xx {
        return Err(Reply::error(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if (gt && lt) || (nx && (gt || lt)) {
        return Err(Reply::error(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if incr && pairs.len() > 2 {
        return Err(Reply::error(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    let scores: Vec<f64> = pairs
        .chunks(2)
        .map(|p| float_arg(&p[0]))
        .collect::<Result<_, _>>()?;
    if zset(server, &args[0])?.is_none() && xx {
        return Ok(if incr { Reply::Nil } else { Reply::Int(0) });
    }
    let set = zset_mut(server, &args[0])?;
    let (mut added, mut changed) = (0, 0);
    let mut result = None;
    for (pair, score) in pairs.chunks(2).zip(scores) {
        let member = &pair[1];
        let old = set.0.get(member).map(|s| s.0);
        let new = if incr {
            old.unwrap_or(0.0) + score
        } else {
            score
        };
        let skip = match old {
            Some(old) => nx || (gt && new <= old) || (lt && new >= old),
            None => xx,
        };
        if skip {
            continue;
        }
        if old.is_none() {
            added += 1;
        } else if old != Some(new) {
            changed += 1;
        }
        set.0.insert(member.clone(), Score(new));
        result = Some(new);
    }
    server.drop_if_empty(&args[0]);
    if incr {
        return Ok(result.map_or(Reply::Nil, |s| Reply::bulk(double(s))));
    }
    Ok(Reply::Int(if ch { added + changed } else { added }))
}

fn zrange(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 3, false)?;
    let with_scores = match &args[3..] {
        [] => false,
        [option] if option.eq_ignore_ascii_case(b"withscores") => true,
        _ => return Err(errors::syntax()),
    };
    let (start, stop) = (int_arg(&args[1])?, int_arg(&args[2])?);
    let Some(set) = zset(server, &args[0])? else {
        return Ok(Reply::Array(vec![]));
    };
    let all = set.ordered();
    let len = all.len() as i64;
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
    Ok(listing(&all[start as usize..=stop as usize], with_scores))
}

fn zrangebyscore(server: &mut Server, name: &str, args: &[Bytes]) -> Outcome {
    arity(name, args, 3, false)?;
    let (min, max) = (bound(&args[1])?, bound(&args[2])?);
    let (mut with_scores, mut offset, mut count) = (false, 0i64, -1i64);
    let mut i = 3;
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"withscores") {
            with_scores = true;
            i += 1;
        } else if args[i].eq_ignore_ascii_case(b"limit") && i + 2 < args.len() {
            offset = int_arg(&args[i + 1])?;
            count = int_arg(&args[i + 2])?;
            i += 3;
        } else {
            return Err(errors::syntax());
        }
    }
    let Some(set) = zset(server, &args[0])? else {
        return Ok(Reply::Array(vec![]));
    };
    let all = set.ordered();
    let hits: Vec<(&Bytes, f64)> = all
        .into_iter()
        .filter(|(_, s)| min.below(*s) && max.above(*s))
        .collect();
    if offset < 0 {
        return Ok(Reply::Array(vec![]));
    }
    let hits: Vec<(&Bytes, f64)> = hits
        .into_iter()
        .skip(offset as usize)
        .take(if count < 0 {
            usize::MAX
        } else {
            count as usize
        })
        .collect();
    Ok(listing(&hits, with_scores))
}

fn listing(items: &[(&Bytes, f64)], with_scores: bool) -> Reply {
    let mut out = Vec::new();
    for (member, score) in items {
        out.push(Reply::Bulk((*member).clone()));
        if with_scores {
            out.push(Reply::bulk(double(*score)));
        }
    }
    Reply::Array(out)
}

/// A score range's end: `5`, `(5` (exclusive), `-inf`, `+inf`.
#[derive(Clone, Copy)]
struct Bound {
    value: f64,
    exclusive: bool,
}

impl Bound {
    /// Whether `score` is at or past this bound as a minimum.
    fn below(self, score: f64) -> bool {
        if self.exclusive {
            score > self.value
        } else {
            score >= self.value
        }
    }

    /// Whether `score` is at or before this bound as a maximum.
    fn above(self, score: f64) -> bool {
        if self.exclusive {
            score < self.value
        } else {
            score <= self.value
        }
    }
}

fn bound(text: &[u8]) -> Result<Bound, Reply> {
    let bad = || Reply::error("ERR min or max is not a float");
    match text.split_first() {
        Some((b'(', rest)) => Ok(Bound {
            value: float(rest).ok_or_else(bad)?,
            exclusive: true,
        }),
        _ => Ok(Bound {
            value: float(text).ok_or_else(bad)?,
            exclusive: false,
        }),
    }
}
