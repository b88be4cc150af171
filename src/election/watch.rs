//! [`Watch`]: an election's changes as a stream, read from its history in Redis, with pub/sub as
//! the wake-up only.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use fred::bytes_utils::Str;
use futures::stream::{BoxStream, Stream, StreamExt};

use super::history::{observe, Change, Cursor, Entry, Observed, Read};
use super::office::ElectionKeys;
use crate::error::{Error, Result};
use crate::pubsub::{Waiter, Wakes};
use crate::shared::Shared;

/// How many changes one read of history takes at most.
const READ_AT_ONCE: u32 = 100;

/// How long a watch waits after a failed read before it reads again, unless woken sooner (a
/// reconnect wakes it).
const AFTER_ERROR: Duration = Duration::from_millis(500);

/// The changes of an [`Election`](crate::Election), from [`watch`](crate::Election::watch) or
/// [`watch_after`](crate::Election::watch_after): a [`Stream`] of [`Change`]s, each once and in
/// the order history has them (by [`Change::seq`], so by epoch), with a [`Change::Gap`] where
/// history was lost.
///
/// The changes are read from the election's history in Redis, which the script that makes each
/// change writes; a message on the election's channel only says when to read. So a message
/// lost (a reconnect, a failover) delays a change but never drops it: the watch reads again
/// after every reconnect. A term whose lease runs out changes nothing on Redis by itself: the
/// watch reads again when the leader's lease would end, and reports the vacancy then (as the
/// next candidate's acquire would).
///
/// **A history rewritten behind the watch is never followed silently.** Each entry of history
/// has a stamp that follows from it and from the entry before it (see [`Cursor`]). At each read
/// the watch also reads the entry at the place it delivered last and compares it with what it
/// delivered: when that entry is gone (deleted) or different (a failover lost the last changes
/// and new ones took their places, or history was deleted and grew again past that place), or
/// history is now shorter than that place, it reports a [`Change::Gap`] and follows the new
/// history from its newest change. History trimmed past the watch is a gap too, and the watch
/// goes on from the oldest change left. So what a watch delivers between two gaps is always
/// consecutive changes of one history. A watch resumed from a bare seq
/// ([`watch_after`](crate::Election::watch_after) with a `u64`) has no stamp to check until it
/// delivers a change: before that it notices only a history shorter than the seq.
///
/// A failed read is an item (`Err`); the stream goes on after it, and reads again within half
/// a second, or at once when the connection comes back. It ends after
/// [`Error::Closed`](crate::Error::Closed), once its client has shut down.
pub struct Watch {
    changes: BoxStream<'static, Result<Change>>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

impl Stream for Watch {
    type Item = Result<Change>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.changes.poll_next_unpin(cx)
    }
}

impl Watch {
    /// A watch that delivers `error` and ends.
    pub(super) fn failed(error: Error) -> Watch {
        Watch {
            changes: futures::stream::once(async move { Err(error) }).boxed(),
        }
    }

    /// A watch of the election with lock hash `lock`: after place `after` (`None`: from its
    /// newest change).
    pub(super) fn new(
        shared: Arc<Shared>,
        lock: Str,
        keys: ElectionKeys,
        after: Option<Cursor>,
    ) -> Watch {
        let mark = after
            .as_ref()
            .and_then(|c| c.stamp().map(|s| Mark::Stamp(s.to_string())));
        let watcher = Watcher {
            shared,
            lock,
            keys,
            after: after.map(|c| c.seq()),
            mark,
            last_epoch: 0,
            pending: VecDeque::new(),
            waiter: None,
            failed: false,
            closed: false,
        };
        let changes = futures::stream::unfold(watcher, |mut watcher| async move {
            let next = watcher.next().await?;
            Some((next, watcher))
        });
        Watch {
            changes: changes.boxed(),
        }
    }
}

/// A watch's state between two changes.
struct Watcher {
    shared: Arc<Shared>,
    lock: Str,
    keys: ElectionKeys,
    /// The last place delivered (`None`: none yet; the first read takes the newest).
    after: Option<u64>,
    /// What history must still hold at `after` for the watch to follow it (`None`: nothing
    /// to check: nothing delivered there, or a bare seq to resume from).
    mark: Option<Mark>,
    /// The epoch of the last change delivered.
    last_epoch: u64,
    /// Changes read and not delivered yet.
    pending: VecDeque<Change>,
    /// Its place on the election's channel, once subscribed.
    waiter: Option<Waiter>,
    /// Whether the last read failed.
    failed: bool,
    /// Whether it delivered [`Error::Closed`].
    closed: bool,
}

/// What a watch delivered at its place, to tell whether history still holds it.
enum Mark {
    /// The entry's stamp.
    Stamp(String),
    /// An entry without a stamp (written before stamps): the change itself.
    Change(Change),
}

impl Mark {
    /// The mark of a change delivered.
    fn of(change: &Change) -> Mark {
        match change.stamp() {
            Some(stamp) => Mark::Stamp(stamp.to_string()),
            None => Mark::Change(change.clone()),
        }
    }

    /// Whether `change`, at the marked place in history now, is the one marked.
    fn holds(&self, change: &Change) -> bool {
        match self {
            Mark::Stamp(stamp) => change.stamp() == Some(stamp.as_str()),
            Mark::Change(marked) => marked == change,
        }
    }
}

/// Every message on an election's channel wakes every watch of it.
fn every(_: Option<&str>) -> Wakes {
    Wakes::All
}

impl Watcher {
    /// The next item; `None` once the stream is over.
    async fn next(&mut self) -> Option<Result<Change>> {
        loop {
            if let Some(change) = self.pending.pop_front() {
                return Some(Ok(change));
            }
            if self.closed {
                return None;
            }
            if let Err(e) = self.shared.check_open() {
                self.closed = true;
                return Some(Err(e));
            }
            if self.waiter.is_none() {
                // Subscribed before the read: a change written after it wakes this watch.
                let channel = &self.keys.changes;
                self.waiter =
                    Some(crate::wait::subscribe(&self.shared, channel, every, None).await);
            }
            let waiter = self.waiter.as_ref().expect("subscribed above");
            if self.failed {
                waiter.wait(AFTER_ERROR).await;
            }
            let read = match self.after {
                None => Read::Newest,
                Some(after) => Read::After {
                    after,
                    count: READ_AT_ONCE,
                },
            };
            let redis = &self.shared.redis;
            let publish = self.shared.publish;
            match observe(redis, publish, &self.lock, &self.keys, read).await {
                Err(e) => {
                    self.failed = true;
                    if matches!(e, Error::Closed) {
                        self.closed = true;
                    }
                    return Some(Err(e));
                }
                Ok(seen) => {
                    self.failed = false;
                    let bound = self.take(seen);
                    if self.pending.is_empty() {
                        let waiter = self.waiter.as_ref().expect("subscribed above");
                        waiter.wait(bound).await;
                    }
                }
            }
        }
    }

    /// Queues the changes `seen` brought, with a gap before them where history was lost, and
    /// returns how long to wait for the next change without a message: until the leader's
    /// lease would end (the watch then reports its lapse), or a watchdog timeout when nobody
    /// leads.
    fn take(&mut self, seen: Observed) -> Duration {
        let bound = match seen.pttl_ms {
            ms if ms > 0 => Duration::from_millis(ms as u64 + 1),
            _ => self.shared.watchdog_timeout,
        };
        let Some(after) = self.after else {
            // The first read: the newest change, or, in an empty history, whatever comes first.
            self.after = Some(0);
            for Entry { change, .. } in seen.entries {
                self.deliver(change);
            }
            return bound;
        };
        // History was rewritten behind this watch when it holds fewer changes than the watch
        // saw, or, holding its place (not trimmed past it), no longer holds there what the
        // watch delivered: from here on it follows the new history, from its newest change.
        let shorter = seen.entries.is_empty() && seen.newest < after;
        let rewritten = match (&self.mark, &seen.at_after) {
            (Some(mark), Some(there)) => !mark.holds(&there.change),
            (Some(_), None) => seen.newest >= after && seen.oldest <= after,
            (None, _) => false,
        };
        if shorter || rewritten {
            self.pending.push_back(Change::Gap {
                after,
                next: seen.newest.max(1),
            });
            self.after = Some(seen.newest.saturating_sub(1));
            self.mark = None;
            self.last_epoch = 0;
            return Duration::ZERO;
        }
        // A change that does not follow the one before (history trimmed past the watch, or an
        // entry deleted) comes after a gap.
        for Entry { change, .. } in seen.entries {
            let (seq, epoch) = place(&change);
            let after = self.after.unwrap_or(0);
            if after.checked_add(1) != Some(seq) || epoch < self.last_epoch {
                self.pending.push_back(Change::Gap { after, next: seq });
                self.last_epoch = 0;
            }
            self.deliver(change);
        }
        bound
    }

    /// Queues `change` and moves this watch's place past it.
    fn deliver(&mut self, change: Change) {
        let (seq, epoch) = place(&change);
        self.after = Some(seq);
        self.mark = Some(Mark::of(&change));
        self.last_epoch = epoch;
        self.pending.push_back(change);
    }
}

/// A change's place in history and epoch.
fn place(change: &Change) -> (u64, u64) {
    match change {
        Change::Elected { seq, epoch, .. }
        | Change::Proclaimed { seq, epoch, .. }
        | Change::Vacant { seq, epoch, .. } => (*seq, *epoch),
        Change::Gap { next, .. } => (*next, 0),
    }
}
