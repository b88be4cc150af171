//! [`Client::inspect`](crate::Client::inspect): one name, every key relock and Redisson keep beside it, and the
//! processes behind its holders.

use std::collections::BTreeSet;

use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Key, Value};
use once_cell::sync::Lazy;

use crate::connection::on_node;
use crate::error::{Error, Result};
use crate::names::{latch_channel, leases_key, prefix, prefixed};
use crate::scripts::{catalogue, Script};
use crate::shared::Shared;

use super::parse::*;
use super::*;

static DESCRIBE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::DESCRIBE));

impl Shared {
    /// [`Client::inspect`](crate::Client::inspect)'s work.
    pub(crate) async fn inspect(&self, name: &str) -> Result<Inspection> {
        if name.is_empty() {
            return Err(Error::invalid("a name to inspect must not be empty"));
        }
        let connections = self.connections().await?;
        self.describe(name, &connections).await
    }

    /// [`inspect`](Self::inspect) with the connections read already.
    pub(super) async fn describe(
        &self,
        name: &str,
        connections: &[ClientConnection],
    ) -> Result<Inspection> {
        let redis = &self.redis;
        let fair = crate::names::FairKeys::new(name);
        let keys: Vec<String> = vec![
            name.to_owned(),
            fair.queue.to_string(),
            fair.timeouts.to_string(),
            prefixed(prefix::TOKEN, name),
            crate::names::lease_shadow(name),
            leases_key(name),
        ];
        let key_list: Vec<Key> = keys.iter().map(|k| Key::from(k.as_str())).collect();
        let reply = DESCRIBE
            .run(redis, &key_list, &[])
            .await
            .map_err(|e| Error::from_redis(e, name, &redis.server))?;
        let Value::Array(parts) = reply else {
            return Err(crate::scripts::unexpected(&reply, name, &redis.server));
        };
        let mut parts = parts.into_iter();
        let mut next = || parts.next().unwrap_or(Value::Null);
        let redis_type = text(next());
        let pttl_ms = next().as_i64().unwrap_or(-2);
        let _size = next();
        let fields = pairs(next());
        let value = next().as_string();
        let queue_fields: Vec<String> = list(next()).into_iter().map(text).collect();
        let queue_len = next().as_u64().unwrap_or(0);
        let deadlines: Vec<Option<i64>> = list(next())
            .into_iter()
            .map(|v| {
                v.as_string()
                    .and_then(|s| s.parse::<f64>().ok())
                    .map(|f| f as i64)
            })
            .collect();
        let token = next().as_string().and_then(|s| s.parse::<u64>().ok());
        let delay_pttl = next().as_i64().unwrap_or(-2);
        let leases_len = next().as_u64().unwrap_or(0);
        let lease_pairs = list(next());
        let now_ms = next().as_i64().unwrap_or(0);
        let live_readers: BTreeSet<String> = list(next()).into_iter().map(text).collect();

        let mode = fields
            .iter()
            .find(|(f, _)| f == "mode")
            .map(|(_, v)| v.clone());
        let holder_fields: Vec<&(String, String)> =
            fields.iter().filter(|(f, _)| f != "mode").collect();
        let looks_like_lock = !holder_fields.is_empty()
            && holder_fields
                .iter()
                .all(|(f, v)| f.contains(':') && v.parse::<u64>().is_ok());
        let count = value.as_deref().and_then(|v| v.parse::<i64>().ok());

        let kind = match redis_type.as_str() {
            "hash" if mode.is_some() && (looks_like_lock || holder_fields.is_empty()) => {
                Kind::RwLock
            }
            "hash" if looks_like_lock && token.is_some() => Kind::FencedLock,
            "hash" if looks_like_lock && queue_len > 0 => Kind::FairLock,
            "hash" if looks_like_lock => Kind::Lock,
            "hash" => Kind::Other("hash".into()),
            "string" if leases_len > 0 && count.is_some() => Kind::PermitSemaphore,
            "string" if count.is_some() => Kind::Counter,
            "none" if token.is_some() => Kind::FencedLock,
            "none" if queue_len > 0 => Kind::FairLock,
            "none" if delay_pttl > 0 => Kind::Lock,
            "none" if leases_len > 0 => Kind::PermitSemaphore,
            "none" => Kind::Nothing,
            other => Kind::Other(other.to_owned()),
        };
        let kind = if kind == Kind::FencedLock && name.starts_with(prefix::ELECTION) {
            Kind::Election
        } else {
            kind
        };

        let mut holders: Vec<Holder> = if kind.is_lock() {
            holder_fields
                .iter()
                .map(|(field, count)| {
                    let writer = field.ends_with(":write");
                    Holder {
                        party: Party::new(field, connections),
                        holds: count.parse().unwrap_or(0),
                        writer,
                        live: mode.is_none() || writer || live_readers.contains(field),
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        holders.sort_by_key(|h| !h.writer);

        // The wake-up channels: the name's own, and each queued waiter's.
        let own_channel = match &kind {
            Kind::RwLock => Some(prefixed(prefix::RW_CHANNEL, name)),
            Kind::Lock | Kind::FencedLock | Kind::Election | Kind::FairLock => {
                Some(prefixed(prefix::LOCK_CHANNEL, name))
            }
            Kind::PermitSemaphore => Some(prefixed(prefix::SEMAPHORE_CHANNEL, name)),
            _ => None,
        };
        let semaphore_channel = prefixed(prefix::SEMAPHORE_CHANNEL, name);
        let latch_channel = latch_channel(name);
        let lock_channel = prefixed(prefix::LOCK_CHANNEL, name);
        let mut channels: Vec<String> = own_channel.iter().cloned().collect();
        if kind == Kind::Counter {
            channels.push(semaphore_channel.clone());
            channels.push(latch_channel.clone());
        }
        channels.extend(queue_fields.iter().map(|f| format!("{lock_channel}:{f}")));
        let counts = self.subscribers(&channels).await?;
        let count_of = |channel: &str| {
            channels
                .iter()
                .position(|c| c == channel)
                .map_or(0, |i| counts[i])
        };
        let kind = match kind {
            Kind::Counter if count_of(&semaphore_channel) > 0 => Kind::Semaphore,
            Kind::Counter if count_of(&latch_channel) > 0 => Kind::CountDownLatch,
            kind => kind,
        };
        let subscribers = match &kind {
            Kind::Semaphore => count_of(&semaphore_channel),
            Kind::CountDownLatch => count_of(&latch_channel),
            // A fair waiter listens on a channel of its own.
            Kind::FairLock => counts.iter().sum(),
            _ => own_channel.as_deref().map_or(0, count_of),
        };
        let queue = queue_fields
            .iter()
            .enumerate()
            .map(|(i, field)| {
                let deadline_ms = deadlines.get(i).copied().flatten();
                Queued {
                    party: Party::new(field, connections),
                    deadline_ms,
                    left_ms: deadline_ms.map(|d| d - now_ms),
                    subscribers: count_of(&format!("{lock_channel}:{field}")),
                }
            })
            .collect();
        let leases = lease_pairs
            .chunks(2)
            .filter_map(|pair| {
                let id = pair.first()?.as_bytes().map(hex)?;
                let deadline = pair.get(1)?.as_string()?.parse::<f64>().ok()? as i64;
                Some(Lease {
                    id,
                    left_ms: deadline - now_ms,
                })
            })
            .collect();
        Ok(Inspection {
            name: name.to_owned(),
            holders,
            mode: if kind == Kind::RwLock { mode } else { None },
            pttl_ms,
            queue,
            queue_len,
            subscribers,
            token: if matches!(kind, Kind::FencedLock | Kind::Election) {
                token
            } else {
                None
            },
            delay_ms: (delay_pttl > 0 && redis_type == "none").then_some(delay_pttl as u64),
            count: if matches!(redis_type.as_str(), "string") {
                count
            } else {
                None
            },
            leases,
            leases_len,
            server_time_ms: now_ms,
            kind,
        })
    }

    /// Connections subscribed to each of `channels`, summed over a cluster's nodes (sharded
    /// channels: asked of the slot's owner).
    async fn subscribers(&self, channels: &[String]) -> Result<Vec<u64>> {
        let redis = &self.redis;
        let mut totals = vec![0u64; channels.len()];
        if channels.is_empty() {
            return Ok(totals);
        }
        let failed = |e| Error::redis(e, &redis.server);
        if self.publish == crate::scripts::SPUBLISH {
            for (i, channel) in channels.iter().enumerate() {
                let slot = fred::util::redis_keyslot(channel.as_bytes());
                let command = CustomCommand::new_static("PUBSUB", ClusterHash::Custom(slot), false);
                let args = vec![Value::from("SHARDNUMSUB"), Value::from(channel.as_str())];
                let reply: Value = redis.custom(command, args).await.map_err(failed)?;
                totals[i] = numsub(reply).first().copied().unwrap_or(0);
            }
            return Ok(totals);
        }
        for node in self.nodes() {
            let command = CustomCommand::new_static("PUBSUB", ClusterHash::Random, false);
            let mut args = vec![Value::from("NUMSUB")];
            args.extend(channels.iter().map(|c| Value::from(c.as_str())));
            let reply: Value = on_node(&**redis, node.as_ref())
                .custom(command, args)
                .await
                .map_err(failed)?;
            for (total, n) in totals.iter_mut().zip(numsub(reply)) {
                *total += n;
            }
        }
        Ok(totals)
    }
}
