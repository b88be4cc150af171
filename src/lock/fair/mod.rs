//! The fair lock, Redisson's `RFairLock` in async Rust: waiters of every process take the lock
//! in the order they asked for it.
//!
//! Beside the lock hash (the plain lock's) live a queue of waiting holder fields
//! (`redisson_lock_queue:{<name>}`), each waiter's deadline (`redisson_lock_timeout:{<name>}`,
//! by Redisson's arithmetic) and relock's own liveness record of its waiters
//! (`relock_fair_alive:{<name>}`, server clock). A waiter that finds the lock busy joins the
//! queue's tail; only the queue's head may take a free lock, and a release wakes the head alone,
//! on its own channel (`redisson_lock__channel:{<name>}:<field>`). A waiter loses its place when
//! its liveness lapses: a live waiter renews it every third of the fair waiter timeout, so only a
//! waiter that stopped answering is dropped from the head, and the next one goes on. A waiter
//! that gives up leaves at once, and wakes the next when that makes it first: of a free lock it
//! takes it, of a held one it learns the lease that is left (told behind the head only when the
//! head could be dead, it would otherwise sleep until its renewal after the lock lapsed).

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::api::{delay_api, lock_api};
use super::handle::Handle;
use super::kind::Hold;
use super::kind::Turns;
use super::kind::{AcquireCall, Ask, Kind, LockType, ReleaseCall};
use super::replies::{Answer, Delay, Reentry, Released};
use crate::background::Ended;
use crate::connection::Connection;
use crate::error::{Call, Result};
use crate::names::{FairKeys, LockKeys};
use crate::primitive::Primitive;
use crate::pubsub::Waiter;
use crate::registry::Place;
use crate::shared::Shared;
use crate::wait::{subscribe, time_left, Retry};

mod scripts;

/// A fair (first come, first served) reentrant distributed lock, wire-compatible with Redisson's
/// `RFairLock`: the waiters of every process get the lock in the order they started waiting.
///
/// It has the [`Lock`](crate::Lock)'s API and guarantees (reentrant per owner, watchdog or fixed
/// leases, [`LockGuard::lost`](crate::LockGuard::lost), cancel safety); only the order of waiters
/// differs. A release wakes exactly the next waiter in the queue, in whatever process it lives, so
/// a hand-off costs one wake-up however many wait.
///
/// - **Order.** A waiter takes its place in the queue with its first attempt; the lock goes to
///   the queue's head, never to a newcomer while others wait (`try_lock` included: it fails
///   rather than jump the queue). A re-entry never waits.
/// - **Leaving.** A waiter that times out, is cancelled or fails leaves the queue at once (in the
///   background when dropped), waking the next waiter if it was first. The owner's next acquire
///   of the lock waits for that leave, so a `lock()` called again at once queues anew rather
///   than lose its new place to the leave of the one before.
/// - **Dead waiters.** A waiter renews its place every third of
///   [`Config::with_fair_waiter_timeout`](crate::Config::with_fair_waiter_timeout) (30 s by
///   default). One whose process died loses its place when that timeout has passed since its
///   last renewal; at the head of the queue it holds the others back that long at most, and
///   nobody polls meanwhile. Deadlines use the Redis server's clock. (Redisson's scripts go by
///   Redisson's deadlines only: a queue of Redisson waiters alone behind a dead relock waiter
///   drops it when its Redisson deadline passes, as it would one of its own.)
/// - **Owners.** Tasks that share an owner (such as `join!` branches) share one place in the
///   queue, which stays while any of them waits (one that gives up leaves it to the others);
///   give each its own [`Owner`](crate::Owner) to queue them apart.
/// - **Subscriptions.** Each waiter listens on a channel of its own owner's. Once a waiter has
///   the lock, its channel stays subscribed for 2 s unused, so that the same owner's next wait
///   (a task taking the lock in a loop) starts subscribed and runs one script fewer; then it is
///   unsubscribed. [`Client::stats`](crate::Client::stats) does not count such a channel.
/// - **One type per name.** A [`Lock`](crate::Lock) or [`SpinLock`](crate::SpinLock) of the
///   same name excludes a `FairLock` (they share the hash) but ignores its queue, and its release
///   wakes none of the fair waiters, who then find the lock free only on their next renewal.
/// - **Lock-delay.** With [`with_lock_delay`](FairLock::with_lock_delay), a lock whose holder's
///   lease ran out without an unlock stays unavailable for the delay; the queue keeps its order
///   meanwhile, and its head takes the lock when the delay ends.
/// - **Redisson.** Redisson's fair locks on the same name share the queue, served in arrival
///   order: the deadlines Redisson reads follow its arithmetic with its default wait (300 s), each
///   waiter's the one's before plus the wait, lowered by it when a waiter leaves. relock tracks
///   its own waiters' liveness in a record of its own (`relock_fair_alive:{<name>}`). Redisson's
///   deadlines come from each Java client's clock; one configured with a shorter
///   `fairLockWaitTimeout` drops waiters sooner, as it would its own.
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// let lock = client.fair_lock("payouts");
/// let guard = lock.lock().await?; // after every waiter that came before
/// // ... the critical section ...
/// guard.unlock().await?;          // wakes the next waiter in the queue, and only it
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock {
    pub(super) handle: Handle,
}

impl FairLock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> FairLock {
        FairLock {
            handle: Handle::new(
                shared,
                name.clone(),
                Kind::of(Fair::new(&name, Reentry::Counted, Primitive::FairLock)),
            ),
        }
    }
}

lock_api!(FairLock, "fair_lock");
delay_api!(FairLock, "fair_lock");

impl FairLock {
    /// The same lock with a lock-delay of `ms` (0: none).
    fn set_lock_delay(mut self, ms: u64) -> FairLock {
        let delay = (ms > 0).then(|| Delay::new(self.handle.name(), ms));
        let fair = Fair::new(self.handle.name(), Reentry::Counted, Primitive::FairLock);
        self.handle.set_kind(Kind::of(Fair { delay, ..fair }));
        self
    }
}

/// The fair lock's type: the lock hash, a queue of waiters and their deadlines on Redis, and a
/// wake-up channel per waiter. A release writes a replay key by the plain lock's rule (when it
/// leaves holds behind, or a retry could need it). With a lock-delay its scripts keep the shadow
/// lease too (see `lua/common/delay.lua`), and it renews with the holds that have one. A type
/// that refuses its owner's re-entry (a non-reentrant fair lock) is this one with
/// [`Reentry::Refused`] and a primitive of its own.
pub(crate) struct Fair {
    keys: Arc<FairKeys>,
    delay: Option<Delay>,
    reentry: Reentry,
    primitive: Primitive,
}

impl Fair {
    /// The type of fair lock `name`, without a lock-delay.
    pub(crate) fn new(name: &str, reentry: Reentry, primitive: Primitive) -> Fair {
        Fair {
            keys: Arc::new(FairKeys::new(name)),
            delay: None,
            reentry,
            primitive,
        }
    }
}

impl LockType for Fair {
    fn primitive(&self) -> Primitive {
        self.primitive
    }

    fn turns<'h>(&self, hold: &'h Hold, wait: Option<Duration>) -> Box<dyn Turns + 'h> {
        let one_shot = wait == Some(Duration::ZERO);
        let hub = &hold.shared.hub;
        // Its channel still subscribed from this owner's last wait (it lingers, see
        // `FairTurns::acquired`): register there before the first attempt, which is then the
        // last before the wait.
        let subscribed = !one_shot && hub.any_lingering() && hub.is_subscribed(&channel(hold));
        Box::new(FairTurns {
            hold,
            one_shot,
            subscribed,
            waiter: None,
            queued: None,
        })
    }

    fn acquire<'a>(&'a self, call: AcquireCall<'a>) -> Call<'a, Answer> {
        let delay = self.delay.as_ref();
        Box::pin(scripts::acquire(call, &self.keys, delay, self.reentry))
    }

    fn release<'a>(&'a self, call: ReleaseCall<'a>) -> Call<'a, Released> {
        Box::pin(scripts::release(call, &self.keys, self.delay.as_ref()))
    }

    fn force_release<'a>(&'a self, shared: &'a Shared, keys: &'a LockKeys) -> Call<'a, bool> {
        let publish = self.publish(shared);
        Box::pin(scripts::force_release(
            &shared.redis,
            keys,
            &self.keys,
            publish,
        ))
    }

    fn lock_delay(&self) -> Option<&Delay> {
        self.delay.as_ref()
    }

    fn leave_queue<'a>(
        &'a self,
        redis: &'a Connection,
        keys: &'a LockKeys,
        field: &'a Str,
        publish: &'static str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(scripts::leave(redis, keys, &self.keys, field, publish))
    }
}

/// The turns of one fair acquire: a place in the queue on Redis, renewed while it waits, and a
/// wake-up channel of its own.
pub(super) struct FairTurns<'a> {
    hold: &'a Hold,
    one_shot: bool,
    /// Its channel is subscribed already: it registers there before its first attempt.
    subscribed: bool,
    waiter: Option<Waiter>,
    /// Set once an attempt may have queued this waiter: it leaves the queue if dropped.
    queued: Option<LeaveQueue>,
}

/// The wake-up channel of `hold`'s waiters: `redisson_lock__channel:{<name>}:<field>`.
fn channel(hold: &Hold) -> String {
    [&*hold.keys.channel, ":", &*hold.field].concat()
}

/// How long a waiter's channel stays subscribed after it took the lock, for its owner's next
/// wait: that wait then needs no subscription round trip, and no second attempt (see
/// `Waiter::acquired_lingering`).
const LINGER: Duration = Duration::from_secs(2);

impl Turns for FairTurns<'_> {
    fn queue_first(&self) -> bool {
        self.subscribed
    }

    fn ask(&mut self) -> Ask {
        if self.one_shot {
            return Ask::Now;
        }
        if self.queued.is_none() {
            let hold = self.hold;
            let held = hold.kind.held();
            hold.shared
                .registry
                .enter(Place::Queue, &hold.keys.name, &hold.field, held);
            self.queued = Some(LeaveQueue {
                hold: hold.clone(),
                armed: true,
            });
        }
        Ask::Queue
    }

    fn start(&mut self, deadline: Option<Instant>, _first: Option<Retry>) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let (shared, channel) = (&self.hold.shared, channel(self.hold));
            let rule = self.hold.kind.wakes();
            self.waiter = Some(subscribe(shared, &channel, rule, deadline).await);
        })
    }

    fn wait_turn(&mut self, busy: Option<Retry>, deadline: Option<Instant>) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let Some(remaining) = time_left(deadline) else {
                return false;
            };
            // The first attempt after subscribing goes at once: a release before the
            // subscription woke nobody.
            let Some(retry) = busy else {
                return true;
            };
            // Renew the place in the queue every third of the waiter timeout, whatever the hint.
            let renew = Duration::from_millis((self.hold.shared.fair_waiter_ms / 3).max(1));
            let bound = retry.map_or(renew, |retry| retry.min(renew)).min(remaining);
            let waiter = self.waiter.as_ref().expect("started before waiting");
            waiter.wait(bound.max(Duration::from_millis(1))).await;
            true
        })
    }

    fn acquired(mut self: Box<Self>) {
        // The acquire script took this waiter out of the queue with the lock.
        if let Some(mut queued) = self.queued.take() {
            queued.armed = false;
        }
        if let Some(waiter) = self.waiter.take() {
            waiter.acquired_lingering(LINGER);
        }
    }
}

/// A waiter's place in a fair lock's queue. Dropped armed (the waiter gave up, ran out of time,
/// failed or was cancelled), it takes the place out of the queue in the background, after the
/// attempts sent before it, so the next waiter need not wait out its deadline.
///
/// The leave is counted in flight until it ends, and the owner's next acquire of the lock waits
/// for it, as for a release of the owner's (`Sending::gate`): that acquire's first attempt may
/// queue the owner, or keep its place, and a leave that ran after it would take the place out,
/// leaving the owner waiting outside the queue while those who came later go first. The waiters
/// of one owner share one place (see `Registry::enter`): one that leaves while another still
/// waits there sends nothing, and the place stays for the other.
struct LeaveQueue {
    hold: Hold,
    armed: bool,
}

impl Drop for LeaveQueue {
    fn drop(&mut self) {
        let shared = &self.hold.shared;
        if shared.check_open().is_err() {
            // The client gives up every place in its queues as it shuts down (see
            // `Client::shutdown`): the place stays listed for it.
            return;
        }
        let (name, field) = (&self.hold.keys.name, &self.hold.field);
        let last = shared.registry.leave(Place::Queue, name, field);
        if !self.armed || !last {
            // Taken with the lock, or still the place of another waiter of the owner's.
            return;
        }
        let leaving = shared.registry.leaving_queue(self.hold.hold_key());
        let hold = self.hold.clone();
        let shared = hold.shared.clone();
        shared
            .background
            .must_run(Arc::new(move |fresh: Option<Arc<Connection>>| {
                // The job keeps the leave counted in flight until its last run ends.
                let (hold, _leaving) = (hold.clone(), &leaving);
                Box::pin(async move {
                    let shared = &hold.shared;
                    // On the acquires' connection, so it runs after the last of them.
                    let redis = fresh
                        .as_deref()
                        .unwrap_or_else(|| shared.acquire_connection());
                    let publish = hold.kind.publish(shared);
                    let left = hold
                        .kind
                        .leave_queue(redis, &hold.keys, &hold.field, publish);
                    let left = left.await;
                    if let Err(error) = &left {
                        tracing::debug!(lock = %hold.keys.name, %error, "could not leave the fair queue; the place lapses with its deadline");
                    }
                    Ended::of(&left)
                })
            }));
    }
}
