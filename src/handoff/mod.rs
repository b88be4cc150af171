//! The hand-off grace of the plain [`Lock`](crate::Lock): after this client released a lock whose
//! wake-up reached waiters in other processes, its own tasks hold back until the grace ends or
//! another release of the lock is heard, so that the process that releases and relocks does not
//! keep the lock among its own tasks (its waiters are awake and close; the others must first
//! receive the wake-up). See `Config::with_handoff_grace`.
//!
//! To tell another process's release from the echo of its own, a release marks where the lock's
//! channel stood ([`Hub::position`]) just before it is sent: the lock is still this client's then,
//! so no other release can come in between. A release whose reply is not in yet counts as
//! awaiting its reply: until it comes, nobody here knows whether other processes wait, so this
//! client's tasks wait for the reply first: its woken waiters (its wake-up may well reach them
//! before the reply reaches the releasing task), and a task that calls `lock()` meanwhile (the
//! lock may be free already while the waiters it woke elsewhere are still receiving the wake-up).
//! Every release counts, whether or not this client had waiters on the lock then.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::pubsub::{Hub, Position};

mod claim;
pub(crate) use claim::{unclaim, Wake};

/// The hand-offs this client is part of.
pub(crate) struct Handoffs {
    /// How long a release that woke other processes' waiters leaves them to take the lock.
    grace: Duration,
    state: Arc<Mutex<State>>,
    /// Told whenever a release of this client's has its reply (or gave up).
    verdicts: Arc<Notify>,
}

#[derive(Default)]
struct State {
    /// Channels whose lock this client just released to other processes.
    graces: HashMap<Arc<str>, Grace>,
    /// Releases sent whose reply has not come back yet, per channel.
    awaiting_reply: HashMap<Arc<str>, u32>,
}

/// A hand-off grace: this client's waiters let other processes take the lock first.
struct Grace {
    until: Instant,
    mark: Position,
}

/// Taken just before this client sends a release; counts the release as awaiting its reply
/// until dropped. It is dropped after [`Handoffs::released`] took the reply, so a grace is set
/// before the release stops awaiting its reply (`turns` relies on that order).
pub(crate) struct ReleaseMark {
    at: Position,
    channel: Option<Arc<str>>,
    state: Arc<Mutex<State>>,
    verdicts: Arc<Notify>,
}

impl Drop for ReleaseMark {
    fn drop(&mut self) {
        let Some(channel) = self.channel.take() else {
            return;
        };
        let mut state = self.state.lock().unwrap();
        if let Some(count) = state.awaiting_reply.get_mut(&channel) {
            *count -= 1;
            if *count == 0 {
                state.awaiting_reply.remove(&channel);
            }
        }
        drop(state);
        self.verdicts.notify_waiters();
    }
}

impl Handoffs {
    pub(crate) fn new(grace: Duration) -> Handoffs {
        Handoffs {
            grace,
            state: Arc::default(),
            verdicts: Arc::default(),
        }
    }

    /// Marks where `channel`'s messages stand just before this client sends a release of its
    /// lock; [`released`](Self::released) takes the mark.
    pub(crate) fn mark(&self, hub: &Hub, channel: &str) -> ReleaseMark {
        // Taken before the state's lock: `pending` takes the two the other way round.
        let at = hub.position(channel);
        // Every release counts, with waiters here or not: a task of this client's that asks for
        // the lock before the reply comes must wait for it too (see `turns`).
        let counted = (!self.grace.is_zero()).then(|| {
            let channel: Arc<str> = channel.into();
            let mut state = self.state.lock().unwrap();
            *state.awaiting_reply.entry(channel.clone()).or_default() += 1;
            channel
        });
        ReleaseMark {
            at,
            channel: counted,
            state: self.state.clone(),
            verdicts: self.verdicts.clone(),
        }
    }

    /// Whether a release of this client's on `channel` awaits its reply.
    pub(crate) fn awaiting_reply(&self, channel: &str) -> bool {
        let state = self.state.lock().unwrap();
        state.awaiting_reply.contains_key(channel)
    }

    /// Waits, at most `bound`, until no release of this client's on `channel` awaits its reply;
    /// false at once when none does.
    pub(crate) async fn await_release_reply(&self, channel: &str, bound: Duration) -> bool {
        let notified = self.verdicts.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !self
            .state
            .lock()
            .unwrap()
            .awaiting_reply
            .contains_key(channel)
        {
            return false;
        }
        let _ = tokio::time::timeout(bound, notified).await;
        true
    }

    /// Notes that this client freed the lock of `channel` and its wake-up reached `woken`
    /// subscribed connections. More than this client's own means other processes wait: for the
    /// grace, or until the lock changes hands, this client's waiters let them go first.
    pub(crate) fn released(&self, channel: &str, woken: u64, mark: &ReleaseMark) {
        if self.grace.is_zero() {
            return;
        }
        let mark = mark.at;
        let mut state = self.state.lock().unwrap();
        let graces = &mut state.graces;
        if woken > u64::from(mark.subscribed) {
            let now = Instant::now();
            if graces.len() > 1024 {
                graces.retain(|_, g| g.until > now);
            }
            let until = now + self.grace;
            graces.insert(channel.into(), Grace { until, mark });
        } else {
            graces.remove(channel);
        }
    }

    /// What is left of a hand-off grace on `channel`: `None` once it ran out or another
    /// process released the lock since (a message came that was not this client's own).
    pub(crate) fn pending(&self, hub: &Hub, channel: &str) -> Option<Duration> {
        let mut state = self.state.lock().unwrap();
        let graces = &mut state.graces;
        let grace = graces.get(channel)?;
        let left = grace.until.saturating_duration_since(Instant::now());
        let own = u32::from(grace.mark.subscribed);
        let since = hub.messages_since(channel, grace.mark.seq);
        if left.is_zero() || since > own {
            graces.remove(channel);
            return None;
        }
        Some(left)
    }
}
