//! Waiting without polling: one subscriber connection per client, shared per lock channel.
//!
//! A waiter registers on a channel before its second attempt, so a release published between its
//! failed attempt and its sleep is not lost: try → subscribe → try → wait → try. A waiter that
//! expects to wait behind this client's waiters subscribes before its first attempt instead, and
//! so does a fair lock's waiter whose channel is still subscribed from its owner's last wait
//! (see [`Waiter::acquired_lingering`]). The first waiter
//! of a channel subscribes it, the last one to leave unsubscribes it. Waiters of a channel queue in
//! arrival order; how many of them one message wakes (the first one not already woken, some, or
//! all) is the rule of the type whose waiters listen there ([`WakeRule`], given when a waiter
//! registers). A reconnect, a connection error or a lagged message stream wakes them all (messages
//! may have been lost; and a waiter woken while the server is gone fails within the command
//! timeout instead of sleeping out the holder's lease).
//! Pub/sub is only a hint: every wait is bounded by the holder's TTL, so a lost message costs
//! latency, never a hang. On a Redis 7 cluster the channels are sharded (`SSUBSCRIBE`), so a
//! lock's messages stay on the shard that holds the lock.
//!
//! The hub numbers the messages it receives, so that the hand-off grace (`handoff`) can tell a
//! release of another process from the echo of this client's own ([`Hub::position`],
//! [`Hub::messages_since`]). What to do about them is not the hub's business.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fred::clients::SubscriberClient;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

mod channels;
mod link;
mod waiter;

use channels::{Channel, Channels, Slot};
use link::{run, Link};
pub(crate) use waiter::{Waiter, Wake};

/// Whether a channel's subscription is confirmed by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subscription {
    Pending,
    Active,
    Failed,
}

/// How many of a channel's waiters one message wakes, in arrival order, skipping those woken
/// already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wakes {
    /// The first one.
    One,
    /// As many as `n` permits serve, in arrival order, each waiter counting the permits it
    /// waits for: the first one always (it tries again whatever the count says, as a message
    /// may understate what is free), the ones after it while their permits fit in what the
    /// waiters before them leave of `n`, stopping at the first that does not fit, so a waiter
    /// for many permits is not passed by those behind it. A semaphore's rule: the message is
    /// how many permits may be free.
    Permits(u64),
    /// Every one.
    All,
    /// Every one, and the wait is over: they need not look again (a latch that reached zero).
    AllDone,
}

/// A type's rule for its channel: what one message (its text, when it is one) wakes.
pub(crate) type WakeRule = fn(Option<&str>) -> Wakes;

/// The client's pub/sub side: registers waiters and keeps the subscriptions in step with them.
pub(crate) struct Hub {
    channels: Arc<Channels>,
    sync_tx: mpsc::UnboundedSender<Arc<str>>,
}

/// Where a channel's messages stood at some moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Position {
    /// The sequence number of the last message received on any channel then.
    pub(crate) seq: u64,
    /// Whether this client was subscribed to the channel (so its own publication there comes
    /// back to it).
    pub(crate) subscribed: bool,
}

impl Hub {
    /// Starts the hub task on `subscriber`; it stops when `shutdown` changes or is dropped.
    /// `sharded` subscribes with `SSUBSCRIBE` (Redis 7 cluster) instead of `SUBSCRIBE`. After a
    /// reconnect the connection is named `name` again (see `crate::connection::naming`) before it subscribes.
    pub(crate) fn start(
        subscriber: SubscriberClient,
        sharded: bool,
        name: String,
        meter: Arc<crate::meter::Meter>,
        shutdown: watch::Receiver<bool>,
    ) -> Hub {
        let channels = Arc::new(Channels::default());
        let (sync_tx, sync_rx) = mpsc::unbounded_channel();
        let link = Link {
            subscriber,
            sharded,
            name,
            meter,
        };
        tokio::spawn(run(link, channels.clone(), sync_rx, shutdown));
        Hub { channels, sync_tx }
    }

    /// Registers a waiter on `channel`, subscribing it if this is its first waiter. `rule` says
    /// whom a message on it wakes (the first waiter's rule stands while the channel has any);
    /// the waiter waits for `permits` permits (1 but for a semaphore's; see [`Wakes::Permits`]).
    pub(crate) fn register(&self, channel: &str, rule: WakeRule, permits: u64) -> Waiter {
        let id = self.channels.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::new(permits));
        let mut map = self.channels.map.lock().unwrap();
        let name: Arc<str> = match map.get_key_value(channel) {
            Some((name, entry)) => {
                if *entry.state.borrow() == Subscription::Failed {
                    let _ = self.sync_tx.send(name.clone());
                }
                name.clone()
            }
            None => {
                let name: Arc<str> = channel.into();
                map.insert(
                    name.clone(),
                    Channel {
                        waiters: 0,
                        state: watch::Sender::new(Subscription::Pending),
                        queue: VecDeque::new(),
                        recent: [0; 2],
                        rule,
                        busy_until: None,
                        linger_until: None,
                    },
                );
                let _ = self.sync_tx.send(name.clone());
                name
            }
        };
        let entry = map.get_mut(channel).expect("registered above");
        if entry.linger_until.take().is_some() {
            self.channels.lingering.fetch_sub(1, Ordering::AcqRel);
        }
        entry.waiters += 1;
        entry.queue.push_back((id, slot.clone()));
        Waiter {
            channels: self.channels.clone(),
            sync_tx: self.sync_tx.clone(),
            state: entry.state.subscribe(),
            channel: name,
            id,
            slot,
            acquired: false,
            linger: None,
        }
    }

    /// Where `channel`'s messages stand now.
    pub(crate) fn position(&self, channel: &str) -> Position {
        let map = self.channels.map.lock().unwrap();
        let entry = map.get(channel);
        Position {
            seq: self.channels.messages.load(Ordering::Acquire),
            subscribed: entry.is_some_and(|c| *c.state.borrow() == Subscription::Active),
        }
    }

    /// How many of the last two messages on `channel` came after message `seq`.
    pub(crate) fn messages_since(&self, channel: &str, seq: u64) -> u32 {
        let map = self.channels.map.lock().unwrap();
        map.get(channel).map_or(0, |c| {
            c.recent.iter().filter(|&&recent| recent > seq).count() as u32
        })
    }

    /// Notes that the lock of `channel` may be busy until `until` (the latest note wins: the
    /// lock may have changed hands). Kept while the channel has waiters.
    pub(crate) fn note_busy_until(&self, channel: &str, until: Instant) {
        if let Some(entry) = self.channels.map.lock().unwrap().get_mut(channel) {
            entry.busy_until = Some(until);
        }
    }

    /// The latest [`note_busy_until`](Self::note_busy_until) of `channel`'s lock, if any.
    pub(crate) fn busy_until(&self, channel: &str) -> Option<Instant> {
        let map = self.channels.map.lock().unwrap();
        map.get(channel).and_then(|entry| entry.busy_until)
    }

    /// Whether `channel` is subscribed now, confirmed by the server: a waiter registered on it
    /// from here on hears every message published after this.
    pub(crate) fn is_subscribed(&self, channel: &str) -> bool {
        let map = self.channels.map.lock().unwrap();
        map.get(channel)
            .is_some_and(|c| *c.state.borrow() == Subscription::Active)
    }

    /// Whether any channel lingers (see [`Waiter::acquired_lingering`]).
    pub(crate) fn any_lingering(&self) -> bool {
        self.channels.lingering.load(Ordering::Acquire) > 0
    }

    /// Wakes `channel`'s waiters as `wakes` says, as if a message had come (a semaphore's
    /// waiter that took permits and saw more left, say).
    pub(crate) fn wake(&self, channel: &str, wakes: Wakes) {
        if let Some(entry) = self.channels.map.lock().unwrap().get(channel) {
            entry.wake(wakes);
        }
    }

    /// How many waiters of this client wait on `channel`.
    pub(crate) fn waiters(&self, channel: &str) -> usize {
        let map = self.channels.map.lock().unwrap();
        map.get(channel).map_or(0, |c| c.waiters)
    }

    /// (subscribed channels, registered waiters) held locally.
    pub(crate) fn counts(&self) -> (usize, usize) {
        self.channels.counts()
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// A channel of `waiters` parked waiters, woken as `rule` says.
    fn channel(waiters: usize, rule: WakeRule) -> Channel {
        Channel {
            waiters,
            state: watch::Sender::new(Subscription::Active),
            queue: (0..waiters as u64)
                .map(|id| (id, Arc::new(Slot::new(1))))
                .collect(),
            recent: [0; 2],
            rule,
            busy_until: None,
            linger_until: None,
        }
    }

    fn woken(channel: &Channel) -> Vec<bool> {
        let slots = channel.queue.iter();
        slots
            .map(|(_, s)| s.woken.load(Ordering::Acquire))
            .collect()
    }

    #[test]
    fn a_message_wakes_whom_the_types_rule_says_in_arrival_order() {
        let one = |_: Option<&str>| Wakes::One;
        let two = |_: Option<&str>| Wakes::Permits(2);
        let all = |_: Option<&str>| Wakes::All;
        let c = channel(3, one);
        c.deliver(None);
        assert_eq!(woken(&c), [true, false, false]);
        c.deliver(None);
        assert_eq!(woken(&c), [true, true, false], "woke a woken waiter again");
        let c = channel(3, two);
        c.deliver(None);
        assert_eq!(woken(&c), [true, true, false]);
        c.deliver(None);
        assert_eq!(
            woken(&c),
            [true, true, false],
            "2 permits woke a third waiter while two woken ones had not tried yet"
        );
        let c = channel(3, all);
        c.deliver(Some("0"));
        assert_eq!(woken(&c), [true, true, true]);
    }

    #[test]
    fn permits_wake_waiters_in_order_while_they_fit_and_the_first_always() {
        let rule = |m: Option<&str>| Wakes::Permits(m.and_then(|m| m.parse().ok()).unwrap_or(0));
        let mut c = channel(0, rule);
        for (id, permits) in [(0, 4), (1, 1), (2, 1)] {
            c.queue.push_back((id, Arc::new(Slot::new(permits))));
        }
        c.deliver(Some("3"));
        assert_eq!(woken(&c), [true, false, false], "passed the waiter for 4");
        c.deliver(Some("5"));
        assert_eq!(
            woken(&c),
            [true, true, false],
            "the woken first counts against 5"
        );
        c.queue.pop_front();
        c.deliver(Some("0"));
        assert_eq!(
            woken(&c),
            [true, false],
            "0 permits wake nobody behind the first"
        );
        c.deliver(Some("2"));
        assert_eq!(woken(&c), [true, true]);
    }
}
