//! Redis as the tests read it behind relock's back: raw RESP replies, the server's state read
//! with raw commands, the key and channel names relock and Redisson use, a plain fred client
//! and a raw pub/sub subscriber.

use std::time::Duration;

use super::{eventually, uuid_like, RedisServer};

// ---- Reading raw RESP replies, as `RedisServer::cmd` and `RawSubscriber` get them. ----

/// One RESP value, as a raw connection reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resp {
    /// `+...`
    Simple(String),
    /// `-...`
    Error(String),
    /// `:...`
    Int(i64),
    /// `$...` (`None` for the null bulk string)
    Bulk(Option<String>),
    /// `*...` (`None` for the null array)
    Array(Option<Vec<Resp>>),
}

/// Parses one RESP value at the start of `buf`: the value and how many bytes it took, or `None`
/// when `buf` does not hold a whole value yet.
pub fn parse_resp(buf: &[u8]) -> Option<(Resp, usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[1..end]).ok()?.to_owned();
    let after = end + 2;
    match buf.first()? {
        b'+' => Some((Resp::Simple(line), after)),
        b'-' => Some((Resp::Error(line), after)),
        b':' => Some((Resp::Int(line.parse().ok()?), after)),
        b'$' => {
            let len: i64 = line.parse().ok()?;
            if len < 0 {
                return Some((Resp::Bulk(None), after));
            }
            let stop = after + len as usize;
            if buf.len() < stop + 2 {
                return None;
            }
            let text = String::from_utf8_lossy(&buf[after..stop]).into_owned();
            Some((Resp::Bulk(Some(text)), stop + 2))
        }
        b'*' => {
            let len: i64 = line.parse().ok()?;
            if len < 0 {
                return Some((Resp::Array(None), after));
            }
            let mut items = Vec::new();
            let mut at = after;
            for _ in 0..len {
                let (item, used) = parse_resp(&buf[at..])?;
                items.push(item);
                at += used;
            }
            Some((Resp::Array(Some(items)), at))
        }
        _ => None,
    }
}

/// The whole of a raw reply from [`RedisServer::cmd`] as a [`Resp`].
pub fn resp(reply: &str) -> Resp {
    parse_resp(reply.as_bytes())
        .map(|(value, _)| value)
        .unwrap_or_else(|| panic!("incomplete RESP reply {reply:?}"))
}

/// The integer of a raw `:<n>` reply from [`RedisServer::cmd`].
pub fn resp_int(reply: &str) -> i64 {
    match parse_resp(reply.as_bytes()) {
        Some((Resp::Int(n), _)) => n,
        other => panic!("expected an integer reply, got {reply:?} ({other:?})"),
    }
}

// ---- Server state read with raw commands, bypassing the code under test. ----

/// Whether `key` exists (`EXISTS`).
pub fn raw_exists(server: &RedisServer, key: &str) -> bool {
    resp_int(&server.cmd(&["EXISTS", key])) == 1
}

/// The string at `key`, `None` when there is none (`GET`).
pub fn raw_get(server: &RedisServer, key: &str) -> Option<String> {
    match resp(&server.cmd(&["GET", key])) {
        Resp::Bulk(value) => value,
        other => panic!("unexpected GET reply {other:?}"),
    }
}

/// The time to live of `key` in milliseconds (`PTTL`: -1 without one, -2 when there is no key).
pub fn raw_pttl(server: &RedisServer, key: &str) -> i64 {
    resp_int(&server.cmd(&["PTTL", key]))
}

/// Whether the hash `key` has `field` (`HEXISTS`).
pub fn raw_hexists(server: &RedisServer, key: &str, field: &str) -> bool {
    resp_int(&server.cmd(&["HEXISTS", key, field])) == 1
}

/// The hold count of `field` on the lock `name`, 0 when absent (`HGET`).
pub fn raw_holds(server: &RedisServer, name: &str, field: &str) -> u64 {
    match resp(&server.cmd(&["HGET", name, field])) {
        Resp::Bulk(None) => 0,
        Resp::Bulk(Some(n)) => n.parse().expect("an integer count"),
        other => panic!("unexpected HGET reply {other:?}"),
    }
}

/// The fields and values of the hash `key` as sorted pairs, empty when there is no key
/// (`HGETALL`).
/// `items` as owned (field, value) pairs, sorted: what [`raw_hgetall`] returns for that hash.
pub fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = items
        .iter()
        .map(|(f, v)| (f.to_string(), v.to_string()))
        .collect();
    pairs.sort();
    pairs
}

pub fn raw_hgetall(server: &RedisServer, key: &str) -> Vec<(String, String)> {
    let Resp::Array(Some(items)) = resp(&server.cmd(&["HGETALL", key])) else {
        panic!("HGETALL {key} did not return an array");
    };
    let mut pairs: Vec<(String, String)> = items
        .chunks(2)
        .map(|pair| match pair {
            [Resp::Bulk(Some(f)), Resp::Bulk(Some(v))] => (f.clone(), v.clone()),
            other => panic!("bad HGETALL pair {other:?}"),
        })
        .collect();
    pairs.sort();
    pairs
}

/// How many connections are subscribed to `channel` (`PUBSUB NUMSUB`).
pub fn raw_numsub(server: &RedisServer, channel: &str) -> i64 {
    match resp(&server.cmd(&["PUBSUB", "NUMSUB", channel])) {
        Resp::Array(Some(items)) => match items.as_slice() {
            [_, Resp::Int(n)] => *n,
            other => panic!("bad NUMSUB reply {other:?}"),
        },
        other => panic!("bad NUMSUB reply {other:?}"),
    }
}

/// How many times the server ran `command` (`calls` of `cmdstat_<command>` in
/// `INFO commandstats`; 0 when never).
pub fn raw_command_calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.cmd(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|rest| rest.split(',').next().unwrap().parse().unwrap())
        .unwrap_or(0)
}

/// How many scripts `server` ran for its clients, whichever way they were sent: `EVALSHA`,
/// `EVAL`, `FCALL` and `FCALL_RO`.
pub fn raw_script_calls(server: &RedisServer) -> u64 {
    ["evalsha", "eval", "fcall", "fcall_ro"]
        .iter()
        .map(|command| raw_command_calls(server, command))
        .sum()
}

/// How many `SCRIPT LOAD`s the server ran: `cmdstat_script|load` from Redis 7.0 (and Valkey),
/// where each subcommand is counted apart; before 7.0 every `SCRIPT` subcommand counts under
/// `cmdstat_script`, so the `SCRIPT FLUSH`es a test sent itself (`flushes`) are taken off.
pub fn raw_script_loads(server: &RedisServer, flushes: u64) -> u64 {
    let subcommands = relock::testing::server_version().map_or(true, |v| v.at_least(7, 0));
    if subcommands {
        raw_command_calls(server, "script|load")
    } else {
        raw_command_calls(server, "script").saturating_sub(flushes)
    }
}

/// How many keys the server has expired so far (`expired_keys` of `INFO stats`, lazily or
/// actively): a hold its owner released is deleted, never expired.
pub fn raw_expired_keys(server: &RedisServer) -> u64 {
    let info = server.cmd(&["INFO", "stats"]);
    info.lines()
        .find_map(|line| line.strip_prefix("expired_keys:"))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// How many scripts the server has cached (`number_of_cached_scripts` of `INFO memory`, on
/// every version): after a `SCRIPT FLUSH`, how many were loaded again.
pub fn raw_cached_scripts(server: &RedisServer) -> u64 {
    let info = server.cmd(&["INFO", "memory"]);
    info.lines()
        .find_map(|line| line.strip_prefix("number_of_cached_scripts:"))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// How many `NOSCRIPT` replies the server gave (`errorstat_NOSCRIPT` of `INFO errorstats`, from
/// Redis 6.2). Redis 6.0 counts no errors: there, how many `EVALSHA`s ran, a `NOSCRIPT` reply
/// included, which tells as much when nothing else runs scripts meanwhile.
pub fn raw_noscript_replies(server: &RedisServer) -> u64 {
    let counted = relock::testing::server_version().map_or(true, |v| v.at_least(6, 2));
    if !counted {
        return raw_command_calls(server, "evalsha");
    }
    let info = server.cmd(&["INFO", "errorstats"]);
    info.lines()
        .find_map(|line| line.strip_prefix("errorstat_NOSCRIPT:count="))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// `name` as Redisson puts it in a key: in braces, unless it already holds a hash tag.
pub fn tagged(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

/// The wake-up channel of the lock `name`, as Redisson names it: `name` in braces, unless it
/// already holds a hash tag.
pub fn lock_channel(name: &str) -> String {
    braced("redisson_lock__channel", name)
}

/// The hand-off claim key of lock `name` (plain names; a `{tag}` name is used as it is).
pub fn claim_key(name: &str) -> String {
    braced("relock_claim", name)
}

/// A Redisson name for lock `name`'s key with `prefix`: `<prefix>:{<name>}`, or `<prefix>:<name>`
/// when `name` already holds a hash tag.
pub fn braced(prefix: &str, name: &str) -> String {
    format!("{prefix}:{}", tagged(name))
}

/// The fair lock queue of lock `name` (`redisson_lock_queue:{<name>}`: LIST of waiting fields).
pub fn fair_queue_key(name: &str) -> String {
    braced("redisson_lock_queue", name)
}

/// The fair lock deadlines of lock `name` (`redisson_lock_timeout:{<name>}`: ZSET field →
/// epoch ms).
pub fn fair_timeout_key(name: &str) -> String {
    braced("redisson_lock_timeout", name)
}

/// relock's liveness record of lock `name`'s fair waiters (`relock_fair_alive:{<name>}`: ZSET
/// field → epoch ms, server clock), beside Redisson's deadlines.
pub fn fair_alive_key(name: &str) -> String {
    braced("relock_fair_alive", name)
}

/// The wake-up channel of one fair lock waiter: `redisson_lock__channel:{<name>}:<field>`.
pub fn fair_waiter_channel(name: &str, field: &str) -> String {
    format!("{}:{field}", lock_channel(name))
}

/// The server's clock in epoch milliseconds (`TIME`), as the fair lock scripts read it.
pub fn raw_time_ms(server: &RedisServer) -> i64 {
    match resp(&server.cmd(&["TIME"])) {
        Resp::Array(Some(items)) => match items.as_slice() {
            [Resp::Bulk(Some(secs)), Resp::Bulk(Some(micros))] => {
                secs.parse::<i64>().unwrap() * 1000 + micros.parse::<i64>().unwrap() / 1000
            }
            other => panic!("bad TIME reply {other:?}"),
        },
        other => panic!("bad TIME reply {other:?}"),
    }
}

/// The fields of the list `key`, head first (`LRANGE 0 -1`), empty when there is no key.
pub fn raw_lrange(server: &RedisServer, key: &str) -> Vec<String> {
    match resp(&server.cmd(&["LRANGE", key, "0", "-1"])) {
        Resp::Array(Some(items)) => items
            .into_iter()
            .map(|item| match item {
                Resp::Bulk(Some(field)) => field,
                other => panic!("bad LRANGE item {other:?}"),
            })
            .collect(),
        other => panic!("bad LRANGE reply {other:?}"),
    }
}

/// The score of `member` in the sorted set `key`, rounded down (`ZSCORE`); `None` when absent.
pub fn raw_zscore(server: &RedisServer, key: &str, member: &str) -> Option<i64> {
    match resp(&server.cmd(&["ZSCORE", key, member])) {
        Resp::Bulk(None) => None,
        Resp::Bulk(Some(score)) => Some(score.parse::<f64>().expect("a score").floor() as i64),
        other => panic!("bad ZSCORE reply {other:?}"),
    }
}

/// Waits (at most 5 s) until `connections` subscriber connections listen on lock `name`'s
/// channel: that many clients have a waiter parked on it. False if they never do.
pub async fn until_subscribed(server: &RedisServer, name: &str, connections: i64) -> bool {
    let channel = lock_channel(name);
    eventually(Duration::from_secs(5), || async {
        raw_numsub(server, &channel) == connections
    })
    .await
}

// ---- Raw Redis access outside relock: a plain fred client and a raw pub/sub subscriber. ----

/// A plain fred client on `server`, connected, for EVAL and raw commands that bypass relock.
pub async fn fred_client(server: &RedisServer) -> fred::clients::Client {
    use fred::interfaces::ClientLike;
    let config = fred::types::config::Config::from_url(&server.url()).expect("url");
    let client = fred::types::Builder::from_config(config)
        .build()
        .expect("build fred client");
    client.init().await.expect("connect fred client");
    client
}

/// A subscriber on its own plain TCP connection (no fred, no relock): it sees exactly what the
/// server publishes, in order.
pub struct RawSubscriber {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
}

impl RawSubscriber {
    /// Connects and subscribes to `channels`, returning once the server confirmed each one.
    pub async fn subscribe(server: &RedisServer, channels: &[&str]) -> RawSubscriber {
        use tokio::io::AsyncWriteExt;
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port()))
            .await
            .expect("connect raw subscriber");
        let mut sub = RawSubscriber {
            stream,
            buf: Vec::new(),
        };
        let mut request = format!("*{}\r\n$9\r\nSUBSCRIBE\r\n", channels.len() + 1);
        for channel in channels {
            request.push_str(&format!("${}\r\n{}\r\n", channel.len(), channel));
        }
        sub.stream
            .write_all(request.as_bytes())
            .await
            .expect("send SUBSCRIBE");
        for channel in channels {
            let reply = sub
                .next_value(Duration::from_secs(5))
                .await
                .expect("SUBSCRIBE confirmation");
            match reply {
                Resp::Array(Some(items))
                    if items.first() == Some(&Resp::Bulk(Some("subscribe".into())))
                        && items.get(1) == Some(&Resp::Bulk(Some(channel.to_string()))) => {}
                other => panic!("unexpected SUBSCRIBE reply {other:?}"),
            }
        }
        sub
    }

    async fn next_value(&mut self, within: Duration) -> Option<Resp> {
        use tokio::io::AsyncReadExt;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some((value, used)) = parse_resp(&self.buf) {
                self.buf.drain(..used);
                return Some(value);
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout_at(deadline, self.stream.read(&mut chunk))
                .await
                .ok()?
                .expect("read raw subscriber");
            assert!(n > 0, "the server closed the raw subscriber connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The next published message as (channel, payload), or `None` when none came `within`.
    pub async fn next_message(&mut self, within: Duration) -> Option<(String, String)> {
        let value = self.next_value(within).await?;
        match value {
            Resp::Array(Some(items)) => match items.as_slice() {
                [Resp::Bulk(Some(kind)), Resp::Bulk(Some(channel)), Resp::Bulk(Some(payload))]
                    if kind == "message" =>
                {
                    Some((channel.clone(), payload.clone()))
                }
                _ => panic!("unexpected pub/sub frame {items:?}"),
            },
            other => panic!("unexpected pub/sub frame {other:?}"),
        }
    }

    /// Asserts that nothing was published on `channel` since the last message read: publishes a
    /// sentinel there and checks it is the very next message (Redis delivers in order).
    pub async fn assert_quiet(&mut self, server: &RedisServer, channel: &str) {
        let sentinel = format!("sentinel-{}", uuid_like());
        let reply = server.cmd(&["PUBLISH", channel, &sentinel]);
        assert!(reply.starts_with(':'), "PUBLISH failed: {reply}");
        let next = self.next_message(Duration::from_secs(5)).await;
        assert_eq!(
            next,
            Some((channel.to_owned(), sentinel)),
            "something was published on {channel} before the sentinel"
        );
    }
}
