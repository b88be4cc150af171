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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::SubscriberClient;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

mod link;

use link::{run, Link};

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

/// One parked (or about to park) waiter.
struct Slot {
    /// A wake-up was delivered and not yet consumed.
    woken: AtomicBool,
    /// A wake-up said the wait is over ([`Wakes::AllDone`]).
    done: AtomicBool,
    /// The permits this waiter waits for (1 for anything but a semaphore's waiter).
    permits: u64,
    notify: Notify,
}

impl Slot {
    fn new(permits: u64) -> Slot {
        Slot {
            woken: AtomicBool::new(false),
            done: AtomicBool::new(false),
            permits,
            notify: Notify::new(),
        }
    }

    fn wake(&self) {
        self.woken.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    fn is_woken(&self) -> bool {
        self.woken.load(Ordering::Acquire)
    }
}

struct Channel {
    waiters: usize,
    state: watch::Sender<Subscription>,
    queue: VecDeque<(u64, Arc<Slot>)>,
    /// Sequence numbers (see [`Channels::messages`]) of the last two messages received.
    recent: [u64; 2],
    /// What one message wakes: the rule its first waiter registered with (every waiter of a
    /// channel is of a type that shares it).
    rule: WakeRule,
    /// The latest moment this client learned the lock may be busy until: its holder's lease
    /// end, as an attempt's reply or this client's own acquire told it.
    busy_until: Option<Instant>,
    /// Kept subscribed without waiters until then (see [`Waiter::acquired_lingering`]).
    linger_until: Option<Instant>,
}

impl Channel {
    /// Wakes the first waiter not already woken.
    fn wake_one(&self) {
        let mut idle = self.queue.iter().filter(|(_, slot)| !slot.is_woken());
        if let Some((_, slot)) = idle.next() {
            slot.wake();
        }
    }

    /// Wakes as [`Wakes::Permits`] says: the waiters woken already count against `permits`
    /// too, as they are about to try.
    fn wake_for(&self, permits: u64) {
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
    fn deliver(&self, message: Option<&str>) {
        self.wake((self.rule)(message));
    }

    fn wake(&self, wakes: Wakes) {
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

    fn wake_all(&self) {
        for (_, slot) in &self.queue {
            slot.wake();
        }
    }
}

#[derive(Default)]
struct Channels {
    map: Mutex<HashMap<Arc<str>, Channel>>,
    next_id: AtomicU64,
    /// Messages received on all channels so far: each message's sequence number.
    messages: AtomicU64,
    /// How many channels linger (subscribed, no waiter, `linger_until` set).
    lingering: AtomicUsize,
}

impl Channels {
    /// The lingering channels whose time is up by `now` (every one with `None`: a reconnect may
    /// have dropped their subscriptions); they no longer linger.
    fn end_lingering(&self, now: Option<Instant>) -> Vec<Arc<str>> {
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

    fn wake_all(&self) {
        for channel in self.map.lock().unwrap().values() {
            channel.wake_all();
        }
    }

    /// Counts of channels (but those lingering) and of registered waiters, for leak checks.
    fn counts(&self) -> (usize, usize) {
        let map = self.map.lock().unwrap();
        let in_use = map.values().filter(|c| c.linger_until.is_none()).count();
        (in_use, map.values().map(|c| c.waiters).sum())
    }
}

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
    /// Whether any waiter of this client was registered on the channel.
    pub(crate) waited_on: bool,
}

impl Hub {
    /// Starts the hub task on `subscriber`; it stops when `shutdown` changes or is dropped.
    /// `sharded` subscribes with `SSUBSCRIBE` (Redis 7 cluster) instead of `SUBSCRIBE`. After a
    /// reconnect the connection is named `name` again (see `crate::naming`) before it subscribes.
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
            waited_on: entry.is_some(),
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
    channels: Arc<Channels>,
    sync_tx: mpsc::UnboundedSender<Arc<str>>,
    state: watch::Receiver<Subscription>,
    channel: Arc<str>,
    id: u64,
    slot: Arc<Slot>,
    acquired: bool,
    /// Left with the lock: the channel stays subscribed this long without waiters.
    linger: Option<Duration>,
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
