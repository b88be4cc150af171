//! [`Client::find`](crate::Client::find) and [`Client::connections`](crate::Client::connections): the names that match a pattern, on every
//! primary, and every connection with the process behind it.

use std::collections::BTreeSet;

use fred::interfaces::ClientLike;
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, Value};

use crate::connection::{on_node, Connection};
use crate::error::{Error, Result};
use crate::names::{prefix, prefixed};
use crate::shared::Shared;

use super::parse::*;
use super::*;

impl Shared {
    /// [`Client::find`](crate::Client::find)'s work.
    pub(crate) async fn find(&self, pattern: &str, limit: usize) -> Result<Found> {
        if pattern.is_empty() || limit == 0 {
            return Err(Error::invalid(
                "find needs a non-empty pattern and a limit above 0",
            ));
        }
        let connections = self.connections().await?;
        let redis = &self.redis;
        let clustered = self.clustered();
        // Auxiliary keys lead to their name: `prefix:{name}` (or `prefix:name` with a tag).
        let prefixes = ["", prefix::TOKEN, prefix::QUEUE, prefix::LEASE];
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut items = Vec::new();
        let mut keys_seen = 0u64;
        for prefix in prefixes {
            let glob = if prefix.is_empty() {
                pattern.to_owned()
            } else {
                prefixed(prefix, pattern)
            };
            for node in self.nodes() {
                let mut cursor = "0".to_owned();
                loop {
                    let (next, keys) = scan_page(redis, node.as_ref(), &cursor, &glob).await?;
                    keys_seen += keys.len() as u64;
                    let mut names = Vec::new();
                    for key in keys {
                        let name = if prefix.is_empty() {
                            if is_auxiliary(&key) {
                                continue;
                            }
                            key
                        } else {
                            match unprefixed(prefix, &key) {
                                Some(name) => name,
                                None => continue,
                            }
                        };
                        // On a cluster, a name whose braces would split its keys over slots
                        // is nobody's lock (relock refuses it), and cannot be read in one script.
                        let lockable = || {
                            crate::names::LockKeys::new(&name)
                                .and_then(|keys| keys.checked_for(clustered))
                                .is_ok()
                        };
                        if lockable() && seen.insert(name.clone()) {
                            names.push(name);
                        }
                    }
                    let described = futures::future::join_all(
                        names.iter().map(|name| self.describe(name, &connections)),
                    )
                    .await;
                    for inspection in described {
                        let inspection = inspection?;
                        if inspection.kind.is_known() {
                            items.push(inspection);
                            if items.len() >= limit {
                                return Ok(Found {
                                    items,
                                    more: true,
                                    keys_seen,
                                });
                            }
                        }
                    }
                    if next == "0" {
                        break;
                    }
                    cursor = next;
                }
            }
        }
        items.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Found {
            items,
            more: false,
            keys_seen,
        })
    }

    /// [`Client::connections`](crate::Client::connections)'s work.
    pub(crate) async fn connections(&self) -> Result<Vec<ClientConnection>> {
        let redis = &self.redis;
        let mut all = Vec::new();
        for node in self.nodes() {
            let command = CustomCommand::new_static("CLIENT", ClusterHash::Random, false);
            let list: String = on_node(&**redis, node.as_ref())
                .custom(command, vec![Value::from("LIST")])
                .await
                .map_err(|e| Error::redis(e, &redis.server))?;
            let label = node.as_ref().map_or_else(
                || redis.server.to_string(),
                |s| format!("{}:{}", s.host, s.port),
            );
            all.extend(list.lines().filter_map(|line| parse_client(line, &label)));
        }
        Ok(all)
    }

    /// The primaries to ask on a cluster (`Some` each); on one server, `None` once.
    pub(super) fn nodes(&self) -> Vec<Option<Server>> {
        if self.clustered() {
            self.redis
                .active_connections()
                .into_iter()
                .map(Some)
                .collect()
        } else {
            vec![None]
        }
    }
}

/// One `SCAN` page on `node`: the next cursor and the keys.
pub(super) async fn scan_page(
    redis: &Connection,
    node: Option<&Server>,
    cursor: &str,
    glob: &str,
) -> Result<(String, Vec<String>)> {
    let command = CustomCommand::new_static("SCAN", ClusterHash::Random, false);
    let args = vec![
        Value::from(cursor),
        Value::from("MATCH"),
        Value::from(glob),
        Value::from("COUNT"),
        Value::from(1000),
    ];
    let reply: Value = on_node(&**redis, node)
        .custom(command, args)
        .await
        .map_err(|e| Error::redis(e, &redis.server))?;
    let mut parts = list(reply).into_iter();
    let next = parts.next().map(text).unwrap_or_else(|| "0".into());
    let keys = parts.next().map(list).unwrap_or_default();
    Ok((next, keys.into_iter().map(text).collect()))
}

/// Whether `key` is one of the keys relock or Redisson keep beside a name (not a name itself).
pub(super) fn is_auxiliary(key: &str) -> bool {
    let beside = |p: &str| {
        key.strip_prefix(p)
            .is_some_and(|rest| rest.starts_with(':'))
    };
    prefix::auxiliary().any(beside)
        || key.contains(":rwlock_timeout:")
        || (key.starts_with('{') && key.ends_with("}:timeout"))
}

/// The name behind auxiliary key `key` of `prefix` (see [`prefixed`]).
pub(super) fn unprefixed(prefix: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(':')?;
    match rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        Some(name) if !name.contains('{') && !name.contains('}') => Some(name.to_owned()),
        _ if rest.contains('{') => Some(rest.to_owned()),
        _ => None,
    }
}
