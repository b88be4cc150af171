//! The hub's side of the subscriber connection: the task that keeps the subscriptions in step
//! with the waiters and hands each message to its channel, which wakes whom its rule says.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fred::clients::SubscriberClient;
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::types::Value;
use tokio::sync::{mpsc, watch};

use super::{Channels, Subscription};

/// The subscriber connection and how to subscribe on it.
pub(super) struct Link {
    pub(super) subscriber: SubscriberClient,
    pub(super) sharded: bool,
    /// The connection's name (see `crate::connection::naming`), set again after a reconnect.
    pub(super) name: String,
    /// Where wake-ups and resubscriptions are counted.
    pub(super) meter: Arc<crate::meter::Meter>,
}

impl Link {
    /// Subscribes `names`; sharded channels go one slot at a time, as Redis requires.
    /// Returns each group with its outcome.
    async fn subscribe(&self, names: Vec<Arc<str>>) -> Vec<(Vec<Arc<str>>, bool)> {
        let mut outcomes = Vec::new();
        for group in self.groups(names) {
            let list: Vec<String> = group.iter().map(|n| n.to_string()).collect();
            let result = if self.sharded {
                self.subscriber.ssubscribe(list).await
            } else {
                // fred answers a SUBSCRIBE as soon as it is queued, before the server has run
                // it (it waits for SSUBSCRIBE's reply). A PING behind it on the same connection
                // is answered only after it: a release published from then on reaches us.
                match self.subscriber.subscribe(list).await {
                    Ok(()) => self.subscriber.ping::<Value>(None).await.map(drop),
                    failed => failed,
                }
            };
            if let Err(error) = &result {
                tracing::warn!(%error, "subscribe failed; waiters fall back to lease-bounded retries");
            }
            outcomes.push((group, result.is_ok()));
        }
        outcomes
    }

    async fn unsubscribe(&self, names: Vec<Arc<str>>) {
        for group in self.groups(names) {
            let list: Vec<String> = group.iter().map(|n| n.to_string()).collect();
            let result = if self.sharded {
                self.subscriber.sunsubscribe(list).await
            } else {
                self.subscriber.unsubscribe(list).await
            };
            if let Err(error) = result {
                tracing::debug!(%error, "unsubscribe failed; the connection drops it on reconnect");
            }
        }
    }

    /// One group for classic pub/sub, one per hash slot for sharded pub/sub.
    fn groups(&self, names: Vec<Arc<str>>) -> Vec<Vec<Arc<str>>> {
        if !self.sharded {
            return vec![names];
        }
        let mut by_slot: HashMap<u16, Vec<Arc<str>>> = HashMap::new();
        for name in names {
            let slot = fred::util::redis_keyslot(name.as_bytes());
            by_slot.entry(slot).or_default().push(name);
        }
        by_slot.into_values().collect()
    }
}

/// How often the hub task looks for lingering channels whose time is up, while any linger.
const LINGER_CHECK: std::time::Duration = std::time::Duration::from_millis(250);

/// The hub task: keeps subscriptions in step with waiters and routes messages to them.
pub(super) async fn run(
    link: Link,
    channels: Arc<Channels>,
    mut sync_rx: mpsc::UnboundedReceiver<Arc<str>>,
    mut shutdown: watch::Receiver<bool>,
) {
    use tokio::sync::broadcast::error::RecvError;

    let mut messages = link.subscriber.message_rx();
    let mut reconnects = link.subscriber.reconnect_rx();
    let mut errors = link.subscriber.error_rx();
    // The subscriptions being brought in step with the waiters, one batch at a time. Messages
    // are delivered meanwhile: a waiter subscribing (a round trip) must not hold back the
    // wake-up of another that is already subscribed.
    let mut syncing: Option<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = None;
    // While channels linger, how often their time is checked.
    let mut lingering = tokio::time::interval(LINGER_CHECK);
    lingering.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            message = messages.recv() => match message {
                Ok(message) => {
                    let mut map = channels.map.lock().unwrap();
                    if let Some(channel) = map.get_mut(&*message.channel) {
                        let seq = channels.messages.fetch_add(1, Ordering::AcqRel) + 1;
                        channel.recent = [seq, channel.recent[0]];
                        channel.deliver(message.value.as_str().as_deref());
                        link.meter.woke();
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "pub/sub messages lagged; waking every waiter");
                    link.meter.resubscribed();
                    channels.wake_all();
                }
                Err(RecvError::Closed) => break,
            },
            // The connection broke: a release may go unheard, and when the server is gone a
            // waiter learns it only from an attempt of its own. Each attempt is bounded by the
            // command timeout, so waking them makes them fail promptly rather than sleep out
            // the holder's lease; if the server is still there they find the lock busy and
            // park again.
            error = errors.recv() => match error {
                Ok((error, _)) => {
                    tracing::debug!(%error, "subscriber connection error; waking every waiter");
                    channels.wake_all();
                }
                Err(RecvError::Lagged(_)) => channels.wake_all(),
                Err(RecvError::Closed) => break,
            },
            reconnect = reconnects.recv() => match reconnect {
                Ok(server) => {
                    // Syncs stay one at a time: the one in flight ends first.
                    if let Some(in_flight) = syncing.take() {
                        in_flight.await;
                    }
                    // Named before it subscribes: a subscribed connection takes no other command.
                    let clustered = link.subscriber.is_clustered();
                    let server = clustered.then_some(&server);
                    crate::connection::naming::set_name(&link.subscriber, server, &link.name).await;
                    // A lingering channel's subscription may not have survived: unsubscribed.
                    let mut all: Vec<Arc<str>> = channels.end_lingering(None);
                    all.extend({
                        let map = channels.map.lock().unwrap();
                        map.iter()
                            .filter(|(_, c)| c.waiters > 0)
                            .map(|(name, c)| {
                                c.state.send_replace(Subscription::Pending);
                                name.clone()
                            })
                            .collect::<Vec<_>>()
                    });
                    sync(&link, &channels, all).await;
                    link.meter.resubscribed();
                    channels.wake_all();
                }
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => break,
            },
            () = async { syncing.as_mut().expect("in flight").await }, if syncing.is_some() => {
                syncing = None;
            }
            _ = lingering.tick(), if syncing.is_none() && channels.lingering.load(Ordering::Acquire) > 0 => {
                let done = channels.end_lingering(Some(tokio::time::Instant::now()));
                if !done.is_empty() {
                    syncing = Some(Box::pin(sync(&link, &channels, done)));
                }
            }
            first = sync_rx.recv(), if syncing.is_none() => {
                let Some(first) = first else { break };
                let mut batch = vec![first];
                while let Ok(more) = sync_rx.try_recv() {
                    batch.push(more);
                }
                syncing = Some(Box::pin(sync(&link, &channels, batch)));
            }
        }
    }
    drop(syncing);
    // Nobody syncs subscriptions from here on: a waiter that leaves last now forgets its channel
    // itself (its send fails), and a channel whose last waiter left just before is forgotten
    // here, not kept for a sync that will not come.
    sync_rx.close();
    channels
        .map
        .lock()
        .unwrap()
        .retain(|_, channel| channel.waiters > 0);
    // Waiters re-try at once and find the client closed instead of sleeping out a lease.
    channels.wake_all();
}

/// Brings the subscriptions of `names` in step with their waiters, one command each way.
async fn sync(link: &Link, channels: &Channels, mut names: Vec<Arc<str>>) {
    names.sort();
    names.dedup();
    let (subscribe, unsubscribe): (Vec<Arc<str>>, Vec<Arc<str>>) = {
        let map = channels.map.lock().unwrap();
        let mut subscribe = Vec::new();
        let mut unsubscribe = Vec::new();
        for name in names {
            match map.get(&name) {
                Some(c) if c.waiters > 0 && *c.state.borrow() != Subscription::Active => {
                    subscribe.push(name)
                }
                Some(c) if c.waiters == 0 && c.linger_until.is_none() => unsubscribe.push(name),
                _ => {}
            }
        }
        (subscribe, unsubscribe)
    };

    if !unsubscribe.is_empty() {
        // Mark them pending first: a waiter arriving meanwhile waits for the resubscription.
        {
            let map = channels.map.lock().unwrap();
            for name in &unsubscribe {
                if let Some(c) = map.get(name) {
                    c.state.send_replace(Subscription::Pending);
                }
            }
        }
        link.unsubscribe(unsubscribe.clone()).await;
        let mut again = Vec::new();
        {
            let mut map = channels.map.lock().unwrap();
            for name in unsubscribe {
                match map.get(&name) {
                    Some(c) if c.waiters > 0 => again.push(name),
                    Some(_) => {
                        map.remove(&name);
                    }
                    None => {}
                }
            }
        }
        if !again.is_empty() {
            Box::pin(sync(link, channels, again)).await;
        }
    }

    if !subscribe.is_empty() {
        for (group, ok) in link.subscribe(subscribe).await {
            let state = if ok {
                Subscription::Active
            } else {
                Subscription::Failed
            };
            let map = channels.map.lock().unwrap();
            for name in group {
                if let Some(c) = map.get(&name) {
                    c.state.send_replace(state);
                }
            }
        }
    }
}
