//! The read-write lock, Redisson's `RReadWriteLock` in async Rust: many readers or one writer,
//! each side reentrant per owner, on Redisson's data (see `lua/rw/readers.lua`).
//!
//! Waiters of both sides listen on the lock's one channel, `redisson_rwlock:{<name>}`, and every
//! message wakes all of this client's waiters: a freed lock may take many readers at once. A
//! waiting writer claims the lock's next turn (`relock_claim:{<name>}`), which keeps new readers
//! out until it has had it.

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use futures::future::BoxFuture;
use tokio::time::Instant;

use super::api::lock_api;
use super::handle::Handle;
use super::kind::Hold;
use super::kind::Turns;
use super::kind::{AcquireCall, Ask, Kind, Lease, LockType, ReleaseCall};
use super::turns::ClaimGuard;
use crate::wait::{subscribe, time_left, Retry};

/// How long after a fixed read lease ends its client drops the lapsed reader (see
/// [`Side::taken`]).
const LAPSE_MARGIN: Duration = Duration::from_millis(100);
use super::hash;
use super::replies::{Answer, Released};
use crate::connection::Connection;
use crate::error::{Call, Result};
use crate::handoff::{unclaim, Wake};
use crate::names::LockKeys;
use crate::primitive::Primitive;
use crate::pubsub::{Waiter, WakeRule, Wakes};
use crate::registry::{Closing, HoldKey, Renewal};
use crate::shared::Shared;

pub(crate) mod scripts;

/// A distributed read-write lock, wire-compatible with Redisson's `RReadWriteLock`: many readers
/// or one writer at a time.
///
/// [`read`](RwLock::read) and [`write`](RwLock::write) give the two sides, each a lock with the
/// full API of [`Lock`](crate::Lock) (`lock`, `lock_with_lease`, `try_lock`, `try_lock_for`,
/// guards, [`lost`](crate::LockGuard::lost), cancel safety), reentrant per owner.
///
/// - **Readers** share the lock; a writer excludes readers and other writers.
/// - **Downgrade.** The writer may take read holds; when it releases its write holds the lock
///   stays read-locked by them (and other readers may come in).
/// - **No upgrade.** An owner holding the read lock that asks for the write lock gets
///   [`Error::UpgradeWouldDeadlock`](crate::Error::UpgradeWouldDeadlock) at once: the write lock
///   waits for every reader to leave, this one included. (Redisson's waits forever.)
/// - **Leases are per reader.** Each read hold has its own timeout key on Redis (Redisson's
///   layout), and the lock lasts as long as the longest of them: a reader that leaves takes its
///   lease with it, a reader whose lease ran out keeps nothing alive, and one reader's renewal
///   extends no other's. The watchdog renews every reader of the client in one script call per
///   batch, as it does [`Lock`](crate::Lock)s.
/// - **Writers are not starved.** A writer that has to wait for readers claims the lock's next
///   turn: from then on no *new* reader comes in (a reader that holds the lock already may still
///   re-enter), so the writer waits only for the readers that hold it now. Once the lock is
///   free it is the claimant's for the claim window
///   ([`Config::with_claim_window`](crate::Config::with_claim_window)) at most; a claim of a
///   writer that died lapses by itself. A writer's release wakes every waiter, and readers and
///   writers then race for the lock: no side is preferred after a write. A one-shot
///   `try_lock` of the write lock claims nothing.
/// - **Redisson.** The data and messages are Redisson's: a relock reader and a Redisson writer
///   exclude each other, and each side's releases wake the other's waiters. Redisson's readers
///   do not look at a relock writer's claim, so they may still come in while it waits.
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// let prices = client.rw_lock("prices");
/// let read = prices.read().lock().await?;   // many readers at once
/// read.unlock().await?;
/// let write = prices.write().lock().await?; // one writer, no readers
/// let read = prices.read().lock().await?;   // the writer may read too (downgrade)
/// write.unlock().await?;                    // ...and keeps the lock as a reader
/// read.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    shared: Arc<Shared>,
    name: String,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock").field("name", &self.name).finish()
    }
}

impl RwLock {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> RwLock {
        RwLock { shared, name }
    }

    /// The lock's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The read side: shared by many readers.
    pub fn read(&self) -> ReadLock {
        ReadLock {
            handle: Handle::new(self.shared.clone(), self.name.clone(), Kind::of(Side::Read)),
        }
    }

    /// The write side: one writer, no readers but its own.
    pub fn write(&self) -> WriteLock {
        WriteLock {
            handle: Handle::new(
                self.shared.clone(),
                self.name.clone(),
                Kind::of(Side::Write),
            ),
        }
    }
}

/// The read side of an [`RwLock`]: held by many owners at once, never with another owner's
/// write hold. `is_locked()` is true while anyone reads (Redisson's rule: read-locked, or
/// write-locked by a writer that also reads). A reader whose lease ran out holds nothing: its
/// guard is lost, and `is_locked()`, `hold_count()` and `is_held_by_current_owner()` count only
/// readers whose lease runs, dropping from Redis a lapsed reader's field they meet (Redis 7.0
/// has no expiry per hash field, so the field goes with the next script that meets it, a query
/// included). Its `force_unlock()` deletes the lock only while it
/// is read-locked (every reader goes, with their timeout keys, and every waiter wakes); while a
/// writer holds it, it is `Ok(false)` and leaves the writer alone, as Redisson's
/// `readLock().forceUnlock()` does. To end a hold whatever its mode, use
/// [`Lock::force_unlock`](crate::Lock::force_unlock) on the same name.
#[derive(Clone)]
pub struct ReadLock {
    pub(super) handle: Handle,
}

/// The write side of an [`RwLock`]: one owner at a time, with no other owner reading.
/// `is_locked()` is true while someone writes. Its `force_unlock()` deletes the lock only while
/// it is write-locked (and every waiter wakes); while readers hold it, it is `Ok(false)` and
/// leaves them alone, as Redisson's `writeLock().forceUnlock()` does. To end a hold whatever its
/// mode, use [`Lock::force_unlock`](crate::Lock::force_unlock) on the same name.
#[derive(Clone)]
pub struct WriteLock {
    pub(super) handle: Handle,
}

lock_api!(ReadLock, "rw_lock", ".read()", super::guard::LockGuard);
lock_api!(WriteLock, "rw_lock", ".write()", super::guard::LockGuard);

/// Every message on the lock's channel wakes every waiter of this client: a freed lock may take
/// many readers at once.
fn wakes_all(_message: Option<&str>) -> Wakes {
    Wakes::All
}

/// A side's type: the read side (many readers, each with its own lease, timeout keys that the
/// watchdog renews apart from the lock's other holds), or the write side (one writer, whose
/// field is `<client-uuid>:<owner>:write` as Redisson's, and whose waiting claims keep new
/// readers out).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Read,
    Write,
}

impl LockType for Side {
    fn primitive(&self) -> Primitive {
        match self {
            Side::Read => Primitive::ReadLock,
            Side::Write => Primitive::WriteLock,
        }
    }

    /// A read hold with a fixed lease: once the lease has ended (on the server's clock too), if
    /// the hold was not released, this client drops the lapsed reader's field from the hash, so
    /// it does not outlive its lease while other readers keep the lock (Redis 7.0 has no expiry
    /// per hash field). A client that is gone by then leaves it to the next script that meets it.
    fn taken(&self, hold: &Hold) {
        let (Side::Read, Lease::Fixed(lease)) = (self, hold.lease) else {
            return;
        };
        let shared = Arc::downgrade(&hold.shared);
        let (keys, field, key) = (hold.keys.clone(), hold.field.clone(), hold.hold_key());
        hold.shared.background.spawn(Box::pin(async move {
            // A little past the lease: the server's clock started it when the acquire ran.
            tokio::time::sleep(lease + LAPSE_MARGIN).await;
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if shared.check_open().is_err() || shared.registry.guards(&key) == 0 {
                return; // released, or the client closed (which released it)
            }
            let pruned = hash::inspect(&shared.redis, &keys, &field, "read").await;
            if let Err(error) = pruned {
                tracing::debug!(lock = %keys.name, %error, "could not drop a lapsed reader; the next script that meets it will");
            }
        }));
    }

    fn keys(&self, name: &str) -> Result<LockKeys> {
        LockKeys::rw(name)
    }

    fn field(&self, owner_field: String) -> Str {
        if *self == Side::Read {
            return owner_field.into();
        }
        let field = scripts::writer_field(&owner_field);
        // The scripts tell a writer from a reader by its field alone (`lua/rw/abandon.lua`).
        debug_assert!(scripts::is_writer_field(&field));
        field
    }

    fn view(&self) -> &'static str {
        match self {
            Side::Read => "read",
            Side::Write => "write",
        }
    }

    fn turns<'h>(&self, hold: &'h Hold, wait: Option<Duration>) -> Box<dyn Turns + 'h> {
        Box::new(RwTurns::new(hold, wait, *self == Side::Write))
    }

    fn acquire<'a>(&'a self, call: AcquireCall<'a>) -> Call<'a, Answer> {
        match self {
            Side::Read => Box::pin(scripts::read_acquire(call)),
            Side::Write => Box::pin(scripts::write_acquire(call)),
        }
    }

    fn release<'a>(&'a self, call: ReleaseCall<'a>) -> Call<'a, Released> {
        Box::pin(scripts::release(call, *self == Side::Write))
    }

    fn force_release<'a>(&'a self, shared: &'a Shared, keys: &'a LockKeys) -> Call<'a, bool> {
        Box::pin(force_release(self, shared, keys))
    }

    fn wakes(&self) -> WakeRule {
        wakes_all
    }

    fn always_replays(&self) -> bool {
        true
    }

    /// A reader's holds renew with their timeout keys; a writer's as the lock hash's.
    fn renews_with(&self) -> &'static str {
        match self {
            Side::Read => "readers",
            Side::Write => "hash",
        }
    }

    fn renew_all<'a>(&'a self, renewal: Renewal<'a>) -> Call<'a, Vec<bool>> {
        Box::pin(hash::renew(renewal, *self == Side::Read))
    }

    /// A writer's claim keeps new readers out of a read-locked lock: withdrawn, it wakes the
    /// lock's waiters, who may come in now (see `lua/unclaim.lua`).
    fn unclaim<'a>(
        &'a self,
        redis: &'a Connection,
        keys: &'a LockKeys,
        field: &'a Str,
        publish: &'static str,
    ) -> Call<'a, bool> {
        let message = scripts::READ_UNLOCK;
        Box::pin(unclaim(redis, keys, field, Some(Wake { publish, message })))
    }

    fn abandon<'a>(&'a self, closing: &'a Closing<'a>, held: &'a HoldKey) -> Call<'a, bool> {
        Box::pin(abandon(closing, &held.0, &held.1))
    }
}

/// The turns of one read or write acquire: wait for any message on the lock's channel, or for
/// the holders' lease; a waiting writer claims the lock's next turn.
pub(super) struct RwTurns<'a> {
    hold: &'a Hold,
    one_shot: bool,
    /// A writer's: a waiting attempt claims the lock's next turn.
    claims: bool,
    waiter: Option<Waiter>,
    /// A writer's claim, withdrawn if it gives up.
    claim: ClaimGuard<'a>,
}

impl<'a> RwTurns<'a> {
    fn new(hold: &'a Hold, wait: Option<Duration>, claims: bool) -> RwTurns<'a> {
        RwTurns {
            hold,
            one_shot: wait == Some(Duration::ZERO),
            claims,
            waiter: None,
            claim: ClaimGuard::new(hold),
        }
    }
}

impl Turns for RwTurns<'_> {
    fn ask(&mut self) -> Ask {
        if self.one_shot || !self.claims {
            return Ask::Now;
        }
        self.claim.claim();
        Ask::Claim(1)
    }

    fn start(&mut self, deadline: Option<Instant>, _first: Option<Retry>) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let (shared, channel) = (&self.hold.shared, &self.hold.keys.channel);
            let rule = self.hold.kind.wakes();
            self.waiter = Some(subscribe(shared, channel, rule, deadline).await);
        })
    }

    fn wait_turn(&mut self, busy: Option<Retry>, deadline: Option<Instant>) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let Some(remaining) = time_left(deadline) else {
                return false;
            };
            // The first attempt after subscribing goes at once: a release before the
            // subscription woke nobody.
            let Some(ttl) = busy else {
                return true;
            };
            // Without a known TTL (a lock without expiry), re-check now and then.
            let bound = ttl
                .unwrap_or(self.hold.shared.watchdog_timeout)
                .max(Duration::from_millis(1))
                .min(remaining);
            let waiter = self.waiter.as_ref().expect("started before waiting");
            waiter.wait(bound).await;
            true
        })
    }

    fn acquired(mut self: Box<Self>) {
        // Taking the lock used up the claim.
        self.claim.claimed = false;
        if let Some(waiter) = self.waiter.take() {
            waiter.acquired();
        }
    }
}

/// Deletes the lock in `side`'s mode whoever holds it, waking the lock's waiters; `true` when
/// there was one.
async fn force_release(side: &dyn LockType, shared: &Shared, keys: &LockKeys) -> Result<bool> {
    let (publish, window) = (side.publish(shared), shared.claim_window_ms);
    scripts::force_release(&shared.redis, keys, side.view(), publish, window).await
}

/// A read-write lock's shutdown release of every hold of `field` (a reader's or a writer's).
async fn abandon(closing: &Closing<'_>, name: &Str, field: &Str) -> Result<bool> {
    let keys = LockKeys::rw(name)?;
    scripts::abandon(closing, &keys, field).await
}
