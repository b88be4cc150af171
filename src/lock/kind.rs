//! What sets the lock types apart: one [`LockType`] per type, implemented once in that type's
//! file (`reentrant`, `fair`, `spin`, `fenced`, `rw`), with the [`Turns`] its waiters take, and
//! [`Kind`], the handle the shared core holds it by; and a [`Hold`] of one, as an acquire asks
//! for it and a guard keeps it (the two refer to each other, so they live here together; `attempt`
//! takes a hold, `release` gives it back). Nothing outside a type's file asks which type a lock
//! is: the core asks the type.
//!
//! Every type keeps its holds in the same Redisson hash (`<name>`: holder field → count), so
//! inspection and the release bookkeeping are shared; the defaults below are that hash's
//! (renewal, the shutdown's release, claims), and a type overrides what it does differently.

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use futures::future::{self, BoxFuture};
use tokio::time::Instant;

use super::hash;
use super::replies::{Answer, Delay, ReleaseHow, Released};
use crate::connection::Connection;
use crate::error::{Call, Result};
use crate::handoff::unclaim;
use crate::names::LockKeys;
use crate::owner::Owner;
use crate::primitive::Primitive;
use crate::pubsub::{WakeRule, Wakes};
use crate::registry::{Closing, Held, HoldKey, Renewal};
use crate::scripts::UNLOCK_MESSAGE;
use crate::shared::Shared;
use crate::wait::Retry;

/// Who asks: the lock's keys and the holder field.
pub(crate) struct Holder<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) field: &'a Str,
}

/// One acquire attempt, as [`LockType::acquire`] sends it.
pub(crate) struct AcquireCall<'a> {
    pub(crate) shared: &'a Shared,
    /// The connection it goes on (with replica sync, the one its `WAIT` goes on).
    pub(crate) redis: &'a Connection,
    pub(crate) hold: Holder<'a>,
    pub(crate) lease_ms: u64,
    pub(crate) ask: Ask,
}

/// One release of one hold, as [`LockType::release`] sends it.
pub(crate) struct ReleaseCall<'a> {
    pub(crate) hold: Holder<'a>,
    pub(crate) redis: &'a Connection,
    /// The TTL the owner's remaining holds need.
    pub(crate) keep_ms: u64,
    pub(crate) how: ReleaseHow<'a>,
}

/// What one acquire attempt asks the script for, beyond the hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// The hold if free, and nothing else.
    Now,
    /// The plain lock (and a read-write lock's writer): the hold, or else a claim on its next
    /// hand-off with this priority.
    Claim(u32),
    /// The fair lock: the hold if it is this waiter's turn, or else a place in the queue (a
    /// new one at its tail, or the one it has, renewed).
    Queue,
}

impl Ask {
    /// The claim priority an acquire script takes: 0 (no claim) unless it claims, and then at
    /// least 1.
    pub(crate) fn claim_priority(self) -> u32 {
        match self {
            Ask::Claim(priority) => priority.max(1),
            Ask::Now | Ask::Queue => 0,
        }
    }
}

/// The renewal of the lock hashes with a lock-delay (a [`Lock`](crate::Lock)'s and a
/// [`FairLock`](crate::FairLock)'s): each renewal extends the shadow lease too.
const DELAYED_RENEWAL: &str = "hash+delay";

/// A lock type: its keys, holder field, turn-taking, scripts, renewal, wake-ups and shutdown.
/// Each type implements it once, in its own file; the defaults are the lock hash's.
pub(crate) trait LockType: Send + Sync + 'static {
    /// The primitive the type is. Two handles on one lock name are one lock only when theirs
    /// match.
    fn primitive(&self) -> Primitive;

    /// The keys of lock `name`, or the error its name gets.
    fn keys(&self, name: &str) -> Result<LockKeys> {
        LockKeys::new(name)
    }

    /// The holder field of `owner_field` (`<client-uuid>:<owner>`) for this type.
    fn field(&self, owner_field: String) -> Str {
        owner_field.into()
    }

    /// What [`inspect`](scripts::inspect) counts as locked for this type (see
    /// `lua/inspect.lua`).
    fn view(&self) -> &'static str {
        ""
    }

    /// Whether holds of this type may be taken and released several at once, by one script
    /// (see `batch`).
    fn batches(&self) -> bool {
        false
    }

    /// The turns of one acquire of `hold`, waiting at most `wait`: how its waiter waits for its
    /// turn and what each attempt asks for.
    fn turns<'h>(&self, hold: &'h Hold, wait: Option<Duration>) -> Box<dyn Turns + 'h>;

    /// Runs the type's acquire script.
    fn acquire<'a>(&'a self, call: AcquireCall<'a>) -> Call<'a, Answer>;

    /// The owner's fencing token, read back after an acquire whose reply was lost but which the
    /// read-back showed took the hold (`None` for the types without tokens).
    fn token<'a>(&'a self, _redis: &'a Connection, _keys: &'a LockKeys) -> Call<'a, Option<u64>> {
        Box::pin(future::ready(Ok(None)))
    }

    /// Runs the type's release script for one hold.
    fn release<'a>(&'a self, call: ReleaseCall<'a>) -> Call<'a, Released>;

    /// Deletes the lock whoever holds it and wakes whom the type wakes; `true` when there was
    /// one.
    fn force_release<'a>(&'a self, shared: &'a Shared, keys: &'a LockKeys) -> Call<'a, bool>;

    /// The publish command of the type's releases.
    fn publish(&self, shared: &Shared) -> &'static str {
        shared.publish
    }

    /// Whom a message on the type's wake-up channel wakes among this client's waiters. By
    /// default Redisson's rule: a release (`0`) wakes one waiter per process, anything else
    /// every waiter.
    fn wakes(&self) -> WakeRule {
        one_per_unlock
    }

    /// Whether this client's release of the lock leaves other processes' waiters a hand-off
    /// grace (the plain lock's turn-taking; see `turns`).
    fn hands_off_with_grace(&self) -> bool {
        false
    }

    /// Whether every release writes a replay key; else the last release skips it when no
    /// retry can need it (see `inflight`).
    fn always_replays(&self) -> bool {
        false
    }

    /// Withdraws `field`'s claim on the lock's next hand-off (`publish`: the client's publish
    /// command); `true` when it had one.
    fn unclaim<'a>(
        &'a self,
        redis: &'a Connection,
        keys: &'a LockKeys,
        field: &'a Str,
        _publish: &'static str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(unclaim(redis, keys, field, None))
    }

    /// Gives up `field`'s place in the lock's queue, waking whom that lets go first; `true`
    /// when it had one (never, for a type without queues).
    fn leave_queue<'a>(
        &'a self,
        _redis: &'a Connection,
        _keys: &'a LockKeys,
        _field: &'a Str,
        _publish: &'static str,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(future::ready(Ok(false)))
    }

    /// The lock-delay of this type's locks, if they have one (a [`Lock`](crate::Lock)'s or a
    /// [`FairLock`](crate::FairLock)'s): their scripts then keep the shadow lease too (see
    /// `lua/common/delay.lua`), and they renew with the holds that have one.
    fn lock_delay(&self) -> Option<&Delay> {
        None
    }

    /// The renewals the watchdog batches this type's holds with (see [`Held::renewal`]).
    fn renews_with(&self) -> &'static str {
        if self.lock_delay().is_some() {
            DELAYED_RENEWAL
        } else {
            "hash"
        }
    }

    /// Extends each of the renewal's locks whose holder field is still there (see
    /// [`Held::renew`]).
    fn renew_all<'a>(&'a self, renewal: Renewal<'a>) -> Call<'a, Vec<bool>> {
        if self.lock_delay().is_some() {
            Box::pin(hash::renew_delayed(renewal))
        } else {
            Box::pin(hash::renew(renewal, false))
        }
    }

    /// A hold of this type was just taken and its guard made (nothing to do by default).
    fn taken(&self, _hold: &Hold) {}

    /// Drops every hold of `held`'s field at once as its client shuts down, waking whom that
    /// lets in (by default the lock hash's: `lua/lock/abandon.lua`).
    fn abandon<'a>(&'a self, closing: &'a Closing<'a>, held: &'a HoldKey) -> Call<'a, bool> {
        Box::pin(async move {
            let keys = self.keys(&held.0)?;
            hash::abandon(closing, &keys, &held.1).await
        })
    }
}

/// Redisson's wake-up rule: a release (`0`) wakes one waiter per process, any other message
/// every waiter.
pub(crate) fn one_per_unlock(message: Option<&str>) -> Wakes {
    if message == Some(UNLOCK_MESSAGE) {
        Wakes::One
    } else {
        Wakes::All
    }
}

/// Every lock type is a held thing the watchdog renews and a shutdown lets go of.
impl<T: LockType> Held for T {
    fn renewal(&self) -> &'static str {
        self.renews_with()
    }

    fn primitive(&self) -> Primitive {
        LockType::primitive(self)
    }

    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> Call<'a, Vec<bool>> {
        self.renew_all(renewal)
    }

    fn close_holds<'a>(&'a self, closing: &'a Closing<'a>, held: &'a HoldKey) -> Call<'a, bool> {
        self.abandon(closing, held)
    }

    fn close_place<'a>(&'a self, closing: &'a Closing<'a>, held: &'a HoldKey) -> Call<'a, bool> {
        Box::pin(async move {
            let keys = self.keys(&held.0)?;
            let (redis, publish) = (closing.redis, closing.publish);
            self.leave_queue(redis, &keys, &held.1, publish).await
        })
    }

    fn close_claim<'a>(&'a self, closing: &'a Closing<'a>, held: &'a HoldKey) -> Call<'a, bool> {
        Box::pin(async move {
            let keys = self.keys(&held.0)?;
            let (redis, publish) = (closing.redis, closing.publish);
            self.unclaim(redis, &keys, &held.1, publish).await
        })
    }
}

/// A lock's type as the shared core holds it: the type's behaviour, and the same value as the
/// client's registries keep it. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Kind {
    of: Arc<dyn LockType>,
    held: Arc<dyn Held>,
    /// The type's `kind` in metrics, worked out once from its tag.
    metered: Primitive,
}

impl Kind {
    /// The kind of type `of`.
    pub(crate) fn of<T: LockType>(of: T) -> Kind {
        let of = Arc::new(of);
        Kind {
            metered: of.primitive(),
            held: of.clone(),
            of,
        }
    }

    /// The type's `kind` in metrics.
    pub(crate) fn metered(&self) -> Primitive {
        self.metered
    }

    /// The type as the client's registries keep it.
    pub(crate) fn held(&self) -> &Arc<dyn Held> {
        &self.held
    }
}

impl std::ops::Deref for Kind {
    type Target = dyn LockType;

    fn deref(&self) -> &(dyn LockType + 'static) {
        &*self.of
    }
}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.of.primitive().tag())
    }
}

/// How the waiters of one lock type take turns. One value serves one acquire; dropped before
/// [`acquired`](Turns::acquired), it undoes what waiting left on Redis (a claim, a place in a
/// queue), in the background. Each type makes its own ([`LockType::turns`]).
pub(crate) trait Turns: Send {
    /// Whether the first attempt waits for its turn before it is sent, instead of at once.
    fn queue_first(&self) -> bool {
        false
    }

    /// What the next attempt asks for.
    fn ask(&mut self) -> Ask;

    /// Gets ready to wait (subscribes to the wake-up, for instance), after a first attempt that
    /// found the lock busy (`first`: what it found) or instead of one (`first` is `None`).
    fn start(&mut self, deadline: Option<Instant>, first: Option<Retry>) -> BoxFuture<'_, ()>;

    /// Waits until the next attempt is due. `busy` is what the last attempt found (the most to
    /// wait before trying again; `None` inside when no bound is known), or `None` for the first
    /// attempt after [`start`](Turns::start). `false` once the deadline has passed.
    fn wait_turn(&mut self, busy: Option<Retry>, deadline: Option<Instant>) -> BoxFuture<'_, bool>;

    /// The attempt took the lock.
    fn acquired(self: Box<Self>);
}

/// How long a hold lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// The watchdog timeout, renewed by the watchdog while the guard lives.
    Watchdog,
    /// A fixed lease that nobody renews.
    Fixed(Duration),
}

/// A hold: the lock, its type, the owner and the lease.
#[derive(Clone)]
pub(crate) struct Hold {
    pub(crate) shared: Arc<Shared>,
    pub(crate) kind: Kind,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) owner: Owner,
    /// The holder field, `<client-uuid>:<owner>`, shared with script arguments and the
    /// registry of holds.
    pub(crate) field: Str,
    pub(crate) lease: Lease,
    pub(crate) lease_ms: u64,
}

impl Hold {
    pub(crate) fn hold_key(&self) -> HoldKey {
        (self.keys.name.clone(), self.field.clone())
    }

    pub(crate) fn holder(&self) -> Holder<'_> {
        Holder {
            keys: &self.keys,
            field: &self.field,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_hashs_rule_wakes_one_per_release_and_all_on_anything_else() {
        assert_eq!(one_per_unlock(Some(UNLOCK_MESSAGE)), Wakes::One);
        assert_eq!(one_per_unlock(Some("1")), Wakes::All);
        assert_eq!(one_per_unlock(None), Wakes::All);
    }
}
