//! Combining: the script calls of many tasks carried by one `EVALSHA`.
//!
//! Every script call pays the client a command and a system call, and the server a read, a
//! dispatch and a reply, whatever the script does. When calls overlap on a connection, a call
//! that finds [`IN_FLIGHT`] sends on their way queues; when one of them ends, everything queued
//! goes out as one call of the dispatcher ([`DISPATCHER`]), which runs each queued call's script in turn
//! on its own keys and arguments, isolates each one's error, and answers each call apart. This
//! is flat combining (Hendler, Incze, Shavit and Tzafrir, 2010) without a combiner thread: the
//! call that frees the connection hands the queue to a task that sends it, so a caller that
//! gives up waiting strands nobody. A lone call goes out exactly as it would without combining:
//! nothing is queued, spawned or timed when calls do not overlap.
//!
//! Each call keeps its guarantees. A call whose caller gave up while it was queued is never
//! sent; one that went out is as sent as any command its caller stopped waiting for. A call
//! still queued when its command timeout ends fails as not sent; one that went out is answered
//! by its batch, which has a command timeout of its own from when it went out, and a batch that
//! timed out fails each call as timed out, which its caller resolves by reading back (on the same
//! connection, after the batch) as it would its own. The batch
//! runs atomically, so a lost reply leaves each call applied or not as a whole, and each caller
//! reads back its own. A `NOSCRIPT` reloads the dispatcher and sends the batch again: none of it
//! ran.
//!
//! On a cluster each call goes out on its own: one script may only touch one slot's keys, and
//! fred routes by the first key.

use std::future::Future;
use std::sync::{Arc, Mutex};

use fred::bytes_utils::Str;
use fred::error::{Error as RedisError, ErrorKind};
use fred::types::{Key, Value};
use once_cell::sync::Lazy;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{catalogue, Script};
use crate::connection::Connection;
use crate::meter::ScriptId;
use crate::redis_error;

/// How many sends (lone calls or batches) a connection has out at once before calls queue.
///
/// A batch is written to the connection as it is taken from the queue (see [`send_next`]), so
/// nothing sent after it can overtake it. But a batch that meets `NOSCRIPT` is sent again once
/// the dispatcher is loaded, and a call sent meanwhile (the cleanup of an acquire whose caller
/// dropped it, which must follow the acquire) would run before it if another send could be out.
/// With one send out at a time nothing can: the cleanup queues behind the batch. More sends out
/// did not make combining win either (benches/README.md, "Combining").
const IN_FLIGHT: usize = 1;

/// The most calls one batch carries: the server runs a batch as one script, which nothing else
/// runs beside, so a long queue goes out in batches of this many rather than as one long stall.
const MOST_PER_BATCH: usize = 128;

type Reply = std::result::Result<Value, RedisError>;

/// The queue of one connection's calls waiting to go out together.
#[derive(Default)]
pub(crate) struct Combiner {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Sends out now.
    in_flight: usize,
    queued: Vec<Queued>,
    /// The id the next queued call gets.
    next_id: u64,
}

/// A call waiting to go out in the next batch.
struct Queued {
    id: u64,
    /// Its script's place in [`catalogue::ALL`].
    slot: usize,
    keys: Vec<Key>,
    args: Vec<Value>,
    reply: oneshot::Sender<Reply>,
}

impl Combiner {
    /// Runs `script` (a catalogue script) on `keys` and `args`: at once when nothing else is on
    /// its way, else in the next batch.
    pub(crate) async fn run(
        self: &Arc<Self>,
        script: &Script,
        redis: &Connection,
        keys: &[Key],
        args: &[Value],
    ) -> Reply {
        let started = Instant::now();
        let queued = {
            let mut state = self.state.lock().unwrap();
            if state.in_flight < IN_FLIGHT && state.queued.is_empty() {
                state.in_flight += 1;
                None
            } else {
                let (reply, answer) = oneshot::channel();
                let id = state.next_id;
                state.next_id += 1;
                state.queued.push(Queued {
                    id,
                    slot: script.metered.slot,
                    keys: keys.to_vec(),
                    args: args.to_vec(),
                    reply,
                });
                Some((id, answer))
            }
        };
        let Some((id, answer)) = queued else {
            redis.meter.sent(1);
            let _sending = Sending::new(self, redis);
            return Box::pin(script.run_once(redis, None, keys, args)).await;
        };
        let mut answer = answer;
        let answered = match tokio::time::timeout_at(started + redis.timeout, &mut answer).await {
            Ok(answered) => answered,
            Err(_) => {
                if self.withdrawn(id) {
                    return Err(redis_error::not_sent(format!(
                        "queued behind other calls for the whole command timeout ({:?}); \
                         nothing was sent",
                        redis.timeout
                    )));
                }
                // It went out: its batch answers it (or times out, as a command does) within a
                // command timeout of its own. Only then may its caller send anything after it
                // (a read-back of whether it ran must follow it on the connection).
                answer.await
            }
        };
        answered.unwrap_or_else(|_| {
            // The batch's sender was dropped unanswered: the runtime is going down.
            Err(RedisError::new(
                ErrorKind::Canceled,
                "the batch carrying this call was dropped unanswered",
            ))
        })
    }

    /// Takes call `id` out of the queue if it is still there: whether it was (it will never be
    /// sent).
    fn withdrawn(&self, id: u64) -> bool {
        let mut state = self.state.lock().unwrap();
        let at = state.queued.iter().position(|q| q.id == id);
        at.map(|at| state.queued.remove(at)).is_some()
    }
}

/// A lone call out on a connection. When it ends, however it ends (answered, failed, or its
/// caller gone), what queued meanwhile goes out next.
struct Sending<'a> {
    combiner: &'a Arc<Combiner>,
    redis: &'a Connection,
}

impl<'a> Sending<'a> {
    fn new(combiner: &'a Arc<Combiner>, redis: &'a Connection) -> Sending<'a> {
        Sending { combiner, redis }
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        send_next(self.combiner, self.redis);
    }
}

/// A batch out on a connection: when it ends, or its task is dropped unpolled, what queued
/// meanwhile goes out next.
struct BatchSending {
    combiner: Arc<Combiner>,
    redis: Connection,
}

impl Drop for BatchSending {
    fn drop(&mut self) {
        send_next(&self.combiner, &self.redis);
    }
}

/// At the end of a send: the calls queued first (at most [`MOST_PER_BATCH`]) go out as the next
/// send, or the connection has one send fewer out when none are queued.
///
/// The batch is written to the connection here, with the queue still locked: it leaves out the
/// calls whose callers are gone and hands the rest to fred in the first poll of its send, before
/// any call queued after it can go out (so a cleanup that a dropped caller sends follows the
/// call it cleans up after, as it does without combining). A task polls the send on from there.
fn send_next(combiner: &Arc<Combiner>, redis: &Connection) {
    let mut state = combiner.state.lock().unwrap();
    let batch = loop {
        if state.queued.is_empty() {
            state.in_flight -= 1;
            return;
        }
        let most = state.queued.len().min(MOST_PER_BATCH);
        let batch: Vec<Queued> = state
            .queued
            .drain(..most)
            .filter(|call| !call.reply.is_closed())
            .collect();
        if !batch.is_empty() {
            redis.meter.sent(batch.len());
            break batch;
        }
    };
    let sending = BatchSending {
        combiner: combiner.clone(),
        redis: redis.clone(),
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        drop(state);
        for call in batch {
            let _ = call.reply.send(Err(redis_error::not_sent(
                "the runtime that would send it is gone; nothing was sent".into(),
            )));
        }
        return;
    };
    let redis = redis.clone();
    let mut send = Box::pin(async move { send(&redis, batch).await });
    let mut first = std::task::Context::from_waker(futures::task::noop_waker_ref());
    let sent = send.as_mut().poll(&mut first).is_ready();
    drop(state);
    if !sent {
        runtime.spawn(async move {
            let _sending = sending;
            send.await
        });
    }
}

/// Sends `batch` and answers each call.
async fn send(redis: &Connection, mut batch: Vec<Queued>) {
    match batch.len() {
        0 => {}
        1 => {
            let call = batch.pop().unwrap();
            let script = &BY_SLOT[call.slot];
            let reply = Box::pin(script.run_once(redis, None, &call.keys, &call.args)).await;
            let _ = call.reply.send(reply);
        }
        _ => {
            let (keys, args) = packed(&batch);
            let started = Instant::now();
            let reply = Box::pin(DISPATCHER.run_once(redis, None, &keys, &args)).await;
            // Each call's script ran for as long as the batch did.
            let took = started.elapsed();
            for call in &batch {
                redis.meter.script(BY_SLOT[call.slot].metered, took, false);
            }
            match reply.map(unpacked) {
                Ok(Some(replies)) if replies.len() == batch.len() => {
                    for (call, reply) in batch.into_iter().zip(replies) {
                        let _ = call.reply.send(reply);
                    }
                }
                Ok(_) => {
                    for call in batch {
                        let _ = call.reply.send(Err(RedisError::new(
                            ErrorKind::Parse,
                            "the dispatcher's reply does not answer each call",
                        )));
                    }
                }
                Err(e) => {
                    for call in batch {
                        let _ = call.reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}

/// The dispatcher's keys (every call's, in order) and arguments: the number of calls, then per
/// call its script's place (from 1), its number of keys and of arguments, and its arguments.
fn packed(batch: &[Queued]) -> (Vec<Key>, Vec<Value>) {
    let keys = batch.iter().flat_map(|q| q.keys.iter().cloned()).collect();
    let mut args = Vec::with_capacity(1 + batch.iter().map(|q| 3 + q.args.len()).sum::<usize>());
    args.push(Value::Integer(batch.len() as i64));
    for call in batch {
        args.push(Value::Integer(call.slot as i64 + 1));
        args.push(Value::Integer(call.keys.len() as i64));
        args.push(Value::Integer(call.args.len() as i64));
        args.extend(call.args.iter().cloned());
    }
    (keys, args)
}

/// Each call's reply from the dispatcher's: `[1, reply]`, `[2]` for nil, `[0, error]`.
fn unpacked(reply: Value) -> Option<Vec<Reply>> {
    let Value::Array(replies) = reply else {
        return None;
    };
    replies
        .into_iter()
        .map(|reply| {
            let Value::Array(mut parts) = reply else {
                return None;
            };
            let value = (parts.len() == 2).then(|| parts.pop()).flatten();
            match (parts.first()?.as_i64()?, value) {
                (1, Some(value)) => Some(Ok(value)),
                (2, None) => Some(Ok(Value::Null)),
                (0, Some(error)) => Some(Err(server_error(&error.as_string()?))),
                _ => None,
            }
        })
        .collect()
}

/// The error a script's error reply `text` is, as fred makes it of a reply of its own.
fn server_error(text: &str) -> RedisError {
    let kind = match text.split_whitespace().next() {
        Some("WRONGTYPE") => ErrorKind::InvalidArgument,
        _ => ErrorKind::Unknown,
    };
    RedisError::new(kind, text.to_owned())
}

/// Every catalogue script, by its place: what a batch of one is sent as.
static BY_SLOT: Lazy<Vec<Script>> = Lazy::new(|| {
    catalogue::ALL
        .iter()
        .map(|(_, lua)| Script::new(lua))
        .collect()
});

/// The dispatcher: every catalogue script as a function of its keys and arguments, and the loop
/// that runs a batch's calls through them (see [`packed`] and [`unpacked`]).
pub(crate) static DISPATCHER: Lazy<Script> = Lazy::new(|| {
    let mut script = Script::from_text(Str::from(dispatcher_source()));
    // Metered after the catalogue's scripts, as `dispatch`.
    script.metered = ScriptId {
        slot: catalogue::ALL.len(),
        name: "DISPATCH",
    };
    script
});

/// The dispatcher's source: a function `script(place)` that makes the catalogue script at that
/// place (from 1) as a function of its keys and arguments, then the loop. Only the scripts a
/// batch calls are made, once each per batch: making every one on every call cost the server
/// as much as running a call.
pub(crate) fn dispatcher_source() -> String {
    let mut lua = String::from("local function script(place)\n");
    for (place, (_, script)) in catalogue::ALL.iter().enumerate() {
        lua.push_str(&format!(
            "if place == {} then return function(KEYS, ARGV)\n",
            place + 1
        ));
        lua.push_str(script);
        lua.push_str("end end\n");
    }
    lua.push_str("end\n");
    lua.push_str(catalogue::DISPATCH);
    lua
}

#[cfg(all(test, feature = "testing"))]
mod tests;
