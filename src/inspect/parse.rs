//! Reading the replies `inspect` gets: `CLIENT LIST` lines, `PUBSUB NUMSUB`, the describe
//! script's lists and pairs.

use std::time::Duration;

use fred::types::Value;

use crate::connection::naming;

use super::*;

/// One line of `CLIENT LIST` as a connection to `node`.
pub(super) fn parse_client(line: &str, node: &str) -> Option<ClientConnection> {
    let mut id = None;
    let (mut addr, mut name) = (String::new(), String::new());
    let (mut age, mut idle, mut subscriptions) = (0, 0, 0);
    for pair in line.split(' ') {
        let Some((key, value)) = pair.split_once('=') else {
            continue;
        };
        match key {
            "id" => id = value.parse().ok(),
            "addr" => addr = value.to_owned(),
            "name" => name = value.to_owned(),
            "age" => age = value.parse().unwrap_or(0),
            "idle" => idle = value.parse().unwrap_or(0),
            "sub" | "psub" | "ssub" => subscriptions += value.parse::<u64>().unwrap_or(0),
            _ => {}
        }
    }
    let process = naming::parse(&name).map(|p| Process {
        client_id: p.client_id.to_owned(),
        role: p.role.to_owned(),
        pid: p.pid,
        host: p.host.to_owned(),
        program: p.program.to_owned(),
    });
    Some(ClientConnection {
        node: node.to_owned(),
        id: id?,
        addr,
        name,
        age: Duration::from_secs(age),
        idle: Duration::from_secs(idle),
        subscriptions,
        process,
    })
}

/// `PUBSUB NUMSUB`'s reply: channel, count, channel, count... → the counts.
pub(super) fn numsub(reply: Value) -> Vec<u64> {
    list(reply)
        .chunks(2)
        .map(|pair| pair.get(1).and_then(Value::as_u64).unwrap_or(0))
        .collect()
}

pub(super) fn list(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        _ => Vec::new(),
    }
}

pub(super) fn text(value: Value) -> String {
    value.as_string().unwrap_or_default()
}

pub(super) fn pairs(value: Value) -> Vec<(String, String)> {
    let items = list(value);
    items
        .chunks(2)
        .map(|pair| {
            let get = |i: usize| pair.get(i).and_then(Value::as_string).unwrap_or_default();
            (get(0), get(1))
        })
        .collect()
}

pub(super) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::super::find::{is_auxiliary, unprefixed};
    use super::*;

    #[test]
    fn auxiliary_keys_lead_to_their_names() {
        assert_eq!(
            unprefixed("redisson_lock_token", "redisson_lock_token:{order:42}").as_deref(),
            Some("order:42")
        );
        assert_eq!(
            unprefixed(
                "redisson_lock_queue",
                "redisson_lock_queue:{user:7}:profile"
            )
            .as_deref(),
            Some("{user:7}:profile")
        );
        assert_eq!(unprefixed("relock_lease", "relock_lease:plain"), None);
        assert!(is_auxiliary("{jobs}:timeout"));
        assert!(is_auxiliary("{rw}:abc:task-1:rwlock_timeout:1"));
        assert!(!is_auxiliary("order:42"));
    }

    #[test]
    fn a_client_list_line_names_its_process() {
        let line = "id=7 addr=127.0.0.1:5100 laddr=127.0.0.1:6379 fd=9 \
                    name=relock|3f2a|cmd|4242|web-1|billing age=12 idle=0 flags=N db=0 \
                    sub=0 psub=0 ssub=0 multi=-1 cmd=evalsha";
        let c = parse_client(line, "127.0.0.1:6379").unwrap();
        assert_eq!(
            (c.id, c.age, c.addr.as_str()),
            (7, Duration::from_secs(12), "127.0.0.1:5100")
        );
        let p = c.process.unwrap();
        assert_eq!(
            (p.client_id.as_str(), p.pid, p.host.as_str()),
            ("3f2a", Some(4242), "web-1")
        );
        let other = parse_client("id=8 addr=x name= age=1 idle=1 sub=2 psub=1", "n").unwrap();
        assert_eq!((other.process, other.subscriptions), (None, 3));
    }

    #[test]
    fn a_holder_field_splits_into_client_and_owner() {
        let redisson = Party::new("0b7e-11:57", &[]);
        assert!(redisson.redisson && !redisson.is_gone());
        let writer = Party::new("0b7e-11:task-3:write", &[]);
        assert_eq!(
            (writer.client_id.as_str(), writer.owner.as_str()),
            ("0b7e-11", "task-3")
        );
        assert!(writer.is_gone());
    }
}
