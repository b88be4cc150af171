//! Deletes spent replay and request keys, many per command.
//!
//! A release that leaves holds behind writes a short-lived replay key so that a retry after a lost
//! reply counts once (a last release writes none: see `lua/lock/release.lua`). Once its reply has
//! arrived the key is useless; deleting it at once keeps memory flat under heavy
//! use, as Redisson does. Sending one `DEL` per release would cost a command per release, so the
//! keys queue here and one task deletes, a few milliseconds after the first, whatever has queued
//! since (per cluster slot when clustered). A key this task never gets to expires on its own.

use std::collections::HashMap;

use fred::clients::Client as Redis;
use fred::interfaces::KeysInterface;
use fred::types::Key;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Duration, Instant};

/// The most keys one `DEL` carries.
const BATCH: usize = 512;
/// How long the sweeper gathers keys after the first before it sends their `DEL`: one task
/// that takes and gives back a semaphore's permits in a loop leaves two keys per pair, which
/// would otherwise cost the server a `DEL` each.
const GATHER: Duration = Duration::from_millis(5);

enum Job {
    Delete(Key),
    /// Completes once every key queued before it was deleted (or its delete failed).
    Flush(oneshot::Sender<()>),
}

/// A handle on the sweeper task.
pub(crate) struct Sweeper {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Sweeper {
    /// Starts the task; `per_slot` groups keys by cluster slot. It stops on `shutdown`.
    pub(crate) fn start(redis: Redis, per_slot: bool, shutdown: watch::Receiver<bool>) -> Sweeper {
        let (jobs, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(redis, per_slot, rx, shutdown));
        Sweeper { jobs }
    }

    /// Queues a spent replay key for deletion.
    pub(crate) fn delete(&self, key: Key) {
        let _ = self.jobs.send(Job::Delete(key));
    }

    /// Waits until every key queued so far was deleted (or the task stopped).
    pub(crate) async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.jobs.send(Job::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }
}

async fn run(
    redis: Redis,
    per_slot: bool,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let first = tokio::select! {
            _ = shutdown.changed() => break,
            job = jobs.recv() => match job {
                Some(job) => job,
                None => break,
            },
        };
        let mut keys = Vec::new();
        let mut flushes = Vec::new();
        let gathered_by = Instant::now() + GATHER;
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                Job::Delete(key) => keys.push(key),
                Job::Flush(done) => flushes.push(done),
            }
            if keys.len() >= BATCH {
                break;
            }
            next = match jobs.try_recv() {
                Ok(job) => Some(job),
                // Gather more, unless a flush waits or the client shuts down.
                Err(_) if flushes.is_empty() => tokio::select! {
                    job = jobs.recv() => job,
                    _ = tokio::time::sleep_until(gathered_by) => None,
                    _ = shutdown.changed() => None,
                },
                Err(_) => None,
            };
        }
        for group in groups(keys, per_slot) {
            if let Err(error) = redis.del::<i64, _>(group).await {
                tracing::debug!(%error, "could not delete spent replay keys; they expire on their own");
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
}

fn groups(keys: Vec<Key>, per_slot: bool) -> Vec<Vec<Key>> {
    if keys.is_empty() {
        return Vec::new();
    }
    if !per_slot {
        return vec![keys];
    }
    let mut by_slot: HashMap<u16, Vec<Key>> = HashMap::new();
    for key in keys {
        by_slot.entry(key.cluster_hash()).or_default().push(key);
    }
    by_slot.into_values().collect()
}
