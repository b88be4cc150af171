//! A waiter's place on a channel, and how it sleeps until woken.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::channels::{Channels, Slot};
use super::Subscription;

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A message (or a reconnect) said the lock may be free.
    Message,
    /// The bound ran out: the holder's lease may have ended.
    Timeout,
    /// A message said the wait is over ([`Wakes::AllDone`]).
    Done,
}

/// A waiter's place on a channel. Dropping it without the lock leaves the queue and wakes the
/// next waiter (passing on any wake-up it had not used); the last waiter out unsubscribes the
/// channel.
pub(crate) struct Waiter {
    pub(super) channels: Arc<Channels>,
    pub(super) sync_tx: mpsc::UnboundedSender<Arc<str>>,
    pub(super) state: watch::Receiver<Subscription>,
    pub(super) channel: Arc<str>,
    pub(super) id: u64,
    pub(super) slot: Arc<Slot>,
    pub(super) acquired: bool,
    /// Left with the lock: the channel stays subscribed this long without waiters.
    pub(super) linger: Option<Duration>,
}

impl Waiter {
    /// Waits until the server confirmed the subscription, at most until `deadline`.
    /// Returns false when it was not confirmed (the waiter then relies on TTL-bounded retries).
    pub(crate) async fn subscribed(&mut self, deadline: Instant) -> bool {
        let confirmed = tokio::time::timeout_at(
            deadline,
            self.state.wait_for(|s| *s != Subscription::Pending),
        )
        .await;
        matches!(confirmed, Ok(Ok(s)) if *s == Subscription::Active)
    }

    /// Sleeps until woken by a message or until `bound` passes.
    pub(crate) async fn wait(&self, bound: Duration) -> Wake {
        // A wake-up delivered before this call left a permit in `notify`: it returns at once.
        match tokio::time::timeout(bound, self.slot.notify.notified()).await {
            Ok(()) => {
                self.slot.woken.store(false, Ordering::Release);
                if self.slot.done.load(Ordering::Acquire) {
                    Wake::Done
                } else {
                    Wake::Message
                }
            }
            Err(_) => Wake::Timeout,
        }
    }

    /// Whether a wake-up was delivered to this waiter and not consumed by a [`wait`](Self::wait)
    /// yet.
    pub(crate) fn is_woken(&self) -> bool {
        self.slot.is_woken()
    }

    /// Whether this waiter is first in its channel's queue: the one the next wake-up is for.
    pub(crate) fn is_first(&self) -> bool {
        let map = self.channels.map.lock().unwrap();
        map.get(&self.channel)
            .and_then(|c| c.queue.front())
            .is_some_and(|(id, _)| *id == self.id)
    }

    /// Leaves the queue without passing on a wake-up: the waiter took the lock, and its own
    /// release will wake the next one.
    pub(crate) fn acquired(mut self) {
        self.acquired = true;
    }

    /// As [`acquired`](Self::acquired), and if it was the channel's last waiter the channel
    /// stays subscribed for `linger` (if its subscription is confirmed): a waiter of the same
    /// channel that comes back meanwhile finds it subscribed, with no round trip to wait for and
    /// no message missed since. A channel of one owner's waiters (a fair lock's) gains from
    /// this when that owner takes the lock again and again.
    pub(crate) fn acquired_lingering(mut self, linger: Duration) {
        self.acquired = true;
        self.linger = Some(linger);
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut map = self.channels.map.lock().unwrap();
        let Some(entry) = map.get_mut(&self.channel) else {
            return;
        };
        if let Some(pos) = entry.queue.iter().position(|(id, _)| *id == self.id) {
            entry.queue.remove(pos);
        }
        if !self.acquired {
            // Whoever queued behind a waiter that gave up may have skipped its own attempt
            // (newcomers do not barge): let the next one look at the lock now. This also passes
            // on a wake-up the departing waiter had received and not used.
            entry.wake_one();
        }
        entry.waiters -= 1;
        let active = *entry.state.borrow() == Subscription::Active;
        if entry.waiters == 0 && active && !self.sync_tx.is_closed() {
            if let Some(linger) = self.linger {
                // The hub task unsubscribes it once the time is up (see `Channels::end_lingering`).
                entry.linger_until = Some(Instant::now() + linger);
                if self.channels.lingering.fetch_add(1, Ordering::AcqRel) == 0 {
                    // The first to linger: tells the hub task to start watching the time.
                    let _ = self.sync_tx.send(self.channel.clone());
                }
                return;
            }
        }
        if entry.waiters == 0 && self.sync_tx.send(self.channel.clone()).is_err() {
            // The hub task has stopped (the client shut down): nobody will unsubscribe the
            // channel, and its connection is closed anyway; forget the channel here.
            map.remove(&self.channel);
        }
    }
}
