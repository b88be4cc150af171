//! A client's channels: each one's waiters in arrival order, and whom a message wakes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::{Subscription, WakeRule, Wakes};

/// One parked (or about to park) waiter.
pub(super) struct Slot {
    /// A wake-up was delivered and not yet consumed.
    pub(super) woken: AtomicBool,
    /// A wake-up said the wait is over ([`Wakes::AllDone`]).
    pub(super) done: AtomicBool,
    /// The permits this waiter waits for (1 for anything but a semaphore's waiter).
    pub(super) permits: u64,
    pub(super) notify: Notify,
}

impl Slot {
    pub(super) fn new(permits: u64) -> Slot {
        Slot {
            woken: AtomicBool::new(false),
            done: AtomicBool::new(false),
            permits,
            notify: Notify::new(),
        }
    }

    pub(super) fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    pub(super) fn is_woken(&self) -> bool {
        self.woken.load(Ordering::Acquire)
    }
}

pub(super) struct Channel {
    pub(super) waiters: usize,
    pub(super) state: watch::Sender<Subscription>,
    pub(super) queue: VecDeque<(u64, Arc<Slot>)>,
    /// Sequence numbers (see [`Channels::messages`]) of the last two messages received.
    pub(super) recent: [u64; 2],
    /// What one message wakes: the rule its first waiter registered with (every waiter of a
    /// channel is of a type that shares it).
    pub(super) rule: WakeRule,
    /// The latest moment this client learned the lock may be busy until: its holder's lease
    /// end, as an attempt's reply or this client's own acquire told it.
    pub(super) busy_until: Option<Instant>,
    /// Kept subscribed without waiters until then (see [`Waiter::acquired_lingering`]).
    pub(super) linger_until: Option<Instant>,
}

impl Channel {
    /// Wakes the first waiter not already woken.
    pub(super) fn wake_one(&self) {
        let mut idle = self.queue.iter().filter(|(_, slot)| !slot.is_woken());
        if let Some((_, slot)) = idle.next() {
            slot.wake();
        }
    }

    /// Wakes as [`Wakes::Permits`] says: the waiters woken already count against `permits`
    /// too, as they are about to try.
    pub(super) fn wake_for(&self, permits: u64) {
        let mut left = permits;
        for (i, (_, slot)) in self.queue.iter().enumerate() {
            if !slot.is_woken() {
                if i > 0 && slot.permits > left {
                    return;
                }
                slot.wake();
            }
            left = left.saturating_sub(slot.permits);
        }
    }

    /// Wakes whom `message` wakes by the channel's rule.
    pub(super) fn deliver(&self, message: Option<&str>) {
        self.wake((self.rule)(message));
    }

    pub(super) fn wake(&self, wakes: Wakes) {
        match wakes {
            Wakes::One => self.wake_one(),
            Wakes::Permits(n) => self.wake_for(n),
            Wakes::All => self.wake_all(),
            Wakes::AllDone => {
                for (_, slot) in &self.queue {
                    slot.done.store(true, Ordering::Release);
                    slot.wake();
                }
            }
        }
    }

    pub(super) fn wake_all(&self) {
        for (_, slot) in &self.queue {
            slot.wake();
        }
    }
}

#[derive(Default)]
pub(super) struct Channels {
    pub(super) map: Mutex<HashMap<Arc<str>, Channel>>,
    pub(super) next_id: AtomicU64,
    /// Messages received on all channels so far: each message's sequence number.
    pub(super) messages: AtomicU64,
    /// How many channels linger (subscribed, no waiter, `linger_until` set).
    pub(super) lingering: AtomicUsize,
}

impl Channels {
    /// The lingering channels whose time is up by `now` (every one with `None`: a reconnect may
    /// have dropped their subscriptions); they no longer linger.
    pub(super) fn end_lingering(&self, now: Option<Instant>) -> Vec<Arc<str>> {
        if self.lingering.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let mut map = self.map.lock().unwrap();
        let mut done = Vec::new();
        for (name, channel) in map.iter_mut() {
            let up = |until: &Instant| now.map_or(true, |now| *until <= now);
            if channel.linger_until.as_ref().is_some_and(up) {
                channel.linger_until = None;
                done.push(name.clone());
            }
        }
        self.lingering.fetch_sub(done.len(), Ordering::AcqRel);
        done
    }

    pub(super) fn wake_all(&self) {
        for channel in self.map.lock().unwrap().values() {
            channel.wake_all();
        }
    }

    /// Counts of channels (but those lingering) and of registered waiters, for leak checks.
    pub(super) fn counts(&self) -> (usize, usize) {
        let map = self.map.lock().unwrap();
        let in_use = map.values().filter(|c| c.linger_until.is_none()).count();
        (in_use, map.values().map(|c| c.waiters).sum())
    }
}
