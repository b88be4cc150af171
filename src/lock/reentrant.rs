//! The reentrant lock, Redisson's `RLock` in async Rust.
//!
//! The lock is a Redis hash named after the lock, with one field per holder
//! (`<client-uuid>:<owner>` → hold count) and a lease as its TTL. Taking it again as the same
//! owner counts one more hold; the last release deletes it and publishes `0` on its channel, which
//! wakes one waiter in every process waiting for it. The data, channel and messages are
//! Redisson's, so a Java service using Redisson and a Rust service using relock exclude each other
//! on the same name and wake each other's waiters.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::interfaces::{ClientLike, ServerInterface};
use fred::types::config::Options;
use fred::types::{ClusterHash, Key};
use futures::future::BoxFuture;
use tokio::time::Instant;
use tracing::{field::Empty, Instrument};

use crate::client::{Client, Connection, Inner, ReplicaSync};
use crate::config::millis;
use crate::error::{Error, Result};
use crate::inflight::{Fingerprint, Releasing};
use crate::names::LockKeys;
use crate::owner::Owner;
use crate::pubsub::Wake;
use crate::scripts::{self, Claim, ReleaseHow, Released};
use crate::watchdog::{HoldKey, Leaving, Registration, Standing};

/// How long a hold lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lease {
    /// The watchdog timeout, renewed by the watchdog while the guard lives.
    Watchdog,
    /// A fixed lease that nobody renews.
    Fixed(Duration),
}

/// A reentrant distributed lock: a cheap handle (a name, a client and an optional explicit
/// owner) that does no I/O until used.
///
/// Holds are counted per owner: by default the current tokio task (see [`Owner`]), so a task
/// that calls `lock()` while it already holds the lock re-enters at once, and the lock is free
/// only when its last hold is released. Locks taken without a lease are kept alive by the
/// client's watchdog for as long as their guard lives, and expire one watchdog timeout after
/// their holder dies. Waiting is done on pub/sub messages, bounded by the holder's lease.
///
/// `join!` branches run in one task and so share an owner: they re-enter each other's holds
/// rather than exclude each other. Give each branch its own [`Owner::new`] through
/// [`Lock::owned_by`] when they must exclude each other.
///
/// # Fairness
///
/// Waiters of one client are served in arrival order: a release wakes the longest waiter, and a
/// newcomer queues behind waiting tasks instead of barging past them. Across processes the
/// woken waiters race, with two rules against losing every race: a client that just released a
/// lock to waiters elsewhere holds its own tasks back for a short grace
/// (`Config::with_handoff_grace`), and a client's first waiter that lost a race claims the next
/// hand-off (`Config::with_claim_window`): the lock, once free, goes to it alone, or to a waiter
/// that lost more races. A strict global order is the job of a fair lock. A re-entry never waits
/// for anyone, and `try_lock()` never waits for another owner, though it finds a freed lock busy
/// while a claim on it stands.
///
/// Every acquire waits for its owner's own releases of the lock that are still in flight (an
/// `unlock()` or a dropped guard whose reply has not come back): a round trip as a rule, and
/// until the release's retries end when its reply was lost. That is what lets the last release
/// leave no replay key behind (see [`LockGuard::unlock`]).
///
/// # Examples
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// let lock = client.lock("order:42");
/// let outer = lock.lock().await?;
/// let inner = lock.lock().await?;             // the same task: re-enters
/// assert_eq!(lock.hold_count().await?, 2);
/// inner.unlock().await?;
/// outer.unlock().await?;
/// assert!(!lock.is_locked().await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    client: Client,
    name: String,
    keys: std::result::Result<Arc<LockKeys>, Error>,
    owner: Option<Owner>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .finish()
    }
}

/// What [`Lock::remaining_lease`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemainingLease {
    /// Nobody holds the lock.
    Unlocked,
    /// The lock is held and expires in this long unless renewed.
    Expires(Duration),
    /// The lock is held and has no expiry: someone wrote it without a TTL (relock never does).
    /// It stays until deleted, for example by [`Lock::force_unlock`].
    NoExpiry,
}

impl RemainingLease {
    /// The time left, for a lock that expires.
    pub fn expires_in(&self) -> Option<Duration> {
        match self {
            RemainingLease::Expires(left) => Some(*left),
            _ => None,
        }
    }
}

enum Attempt {
    Acquired(LockGuard),
    /// Held by another owner; the holder's remaining lease (`None`: it has no expiry).
    Busy(Option<Duration>),
}

impl Lock {
    pub(crate) fn new(client: Client, name: String) -> Lock {
        let keys = LockKeys::new(&name).map(Arc::new);
        Lock {
            client,
            name,
            keys,
            owner: None,
        }
    }

    /// The lock's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock, held and released on behalf of `owner` instead of the current task.
    pub fn owned_by(mut self, owner: Owner) -> Lock {
        self.owner = Some(owner);
        self
    }

    /// Takes the lock, waiting as long as it takes. The watchdog renews its lease until the
    /// guard is released or dropped.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] when the key holds another
    /// type, [`Error::Redis`] when Redis fails, [`Error::Closed`] after shutdown. If the
    /// connection to Redis breaks while it waits, it fails with [`Error::Redis`] within about one
    /// command timeout, unless the connection is back by then.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call leaves no hold, no subscription and no waiter behind. If the
    /// acquire had already reached Redis, its hold is released in the background.
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire(Lease::Watchdog, None)
            .await
            .map(|guard| guard.expect("an unbounded wait ends only with the lock"))
    }

    /// Takes the lock with a fixed lease, waiting as long as it takes. Nobody renews the lease:
    /// the lock frees itself when it ends, guard or no guard.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), and [`Error::InvalidArgument`] for a lease under 1 ms or over
    /// 2^53 ms.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(Lease::Fixed(lease), None)
            .await
            .map(|guard| guard.expect("an unbounded wait ends only with the lock"))
    }

    /// Takes the lock if it is free (or already held by this owner), in one attempt.
    /// `Ok(None)` when another owner holds it. The watchdog renews a lock taken here.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(Lease::Watchdog, Some(Duration::ZERO)).await
    }

    /// Takes the lock, waiting at most `wait`; `Ok(None)` when the wait ran out. With
    /// `lease: None` the watchdog renews the lock, else it lasts `lease`.
    ///
    /// # Errors
    ///
    /// As [`lock_with_lease`](Self::lock_with_lease).
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let lease = lease.map_or(Lease::Watchdog, Lease::Fixed);
        self.acquire(lease, Some(wait)).await
    }

    /// Runs `work` under the lock and releases it afterwards, whatever `work` returned. If `work`
    /// panics or the call is dropped, the guard's drop releases the lock in the background.
    ///
    /// `work` gets the hold's [`Lost`] signal (see [`LockGuard::lost`]), so it can stop when the
    /// lease is lost; ignore it with `|_|` when the work is short.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// # async fn copy_rows() -> u64 { 42 }
    /// let copied = client
    ///     .lock("stock:7")
    ///     .with(|lost| async move {
    ///         tokio::select! {
    ///             _ = lost => None,             // the lease is gone: stop writing
    ///             rows = copy_rows() => Some(rows),
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), and any error of the release after `work` (such as
    /// [`Error::LeaseLost`]: the value is dropped then, as the work ran unprotected).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the lock is released in the background.
    pub async fn with<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Lost) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock().await?;
        let value = work(guard.lost()).await;
        guard.unlock().await?;
        Ok(value)
    }

    /// Deletes the lock whoever holds it and wakes a waiter. `Ok(true)` when there was a lock.
    /// Holders find out through their watchdog (`lost()`) or when they release (`NotHeld`).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when the key holds another type (it is left alone), and as
    /// [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may or may not have deleted the lock.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.client.check_open()?;
        let keys = self.keys()?;
        let inner = &self.client.inner;
        scripts::force_release(&inner.redis, &keys, inner.publish, inner.claim_window_ms).await
    }

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    ///
    /// As [`force_unlock`](Self::force_unlock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool> {
        Ok(self.inspect(&self.owner()).await?.locked)
    }

    /// Whether this lock's owner (the current task unless [`owned_by`](Self::owned_by) set one)
    /// holds the lock.
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn is_held_by_current_owner(&self) -> Result<bool> {
        Ok(self.hold_count().await? > 0)
    }

    /// How many holds this lock's owner has (0 when none).
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn hold_count(&self) -> Result<u64> {
        Ok(self.inspect(&self.owner()).await?.holds)
    }

    /// How long the lock has left before it expires, whoever holds it.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// use relock::RemainingLease;
    /// match client.lock("job").remaining_lease().await? {
    ///     RemainingLease::Unlocked => println!("free"),
    ///     RemainingLease::Expires(left) => println!("held, {left:?} left"),
    ///     RemainingLease::NoExpiry => println!("held with no expiry (not written by relock)"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`is_locked`](Self::is_locked).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn remaining_lease(&self) -> Result<RemainingLease> {
        let state = self.inspect(&self.owner()).await?;
        Ok(match state.pttl {
            -2 => RemainingLease::Unlocked,
            ms if ms < 0 => RemainingLease::NoExpiry,
            ms => RemainingLease::Expires(Duration::from_millis(ms as u64)),
        })
    }

    fn keys(&self) -> Result<Arc<LockKeys>> {
        self.keys.clone()
    }

    fn owner(&self) -> Owner {
        self.owner.clone().unwrap_or_else(Owner::current)
    }

    async fn inspect(&self, owner: &Owner) -> Result<scripts::Inspection> {
        self.client.check_open()?;
        let keys = self.keys()?;
        let inner = &self.client.inner;
        let field = holder_field(inner, owner).into();
        scripts::inspect(&inner.redis, &keys, &field).await
    }

    /// The wait loop: try → subscribe → try → wait for a message or the holder's TTL → try.
    async fn acquire(&self, lease: Lease, wait: Option<Duration>) -> Result<Option<LockGuard>> {
        self.client.check_open()?;
        let keys = self.keys()?;
        let lease_ms = match lease {
            Lease::Watchdog => self.client.inner.watchdog_ms,
            Lease::Fixed(lease) => millis(lease, "lease")?,
        };
        let owner = self.owner();
        let span = tracing::debug_span!(
            "relock.acquire",
            lock = %keys.name,
            owner = %owner,
            waited_ms = Empty,
            attempts = Empty,
            acquired = Empty,
        );
        let started = Instant::now();
        let deadline = wait.and_then(|wait| started.checked_add(wait));
        let field: Str = holder_field(&self.client.inner, &owner).into();
        let attempt = Hold {
            client: self.client.clone(),
            in_flight_key: Fingerprint::of(&keys.name, &field),
            field,
            keys,
            owner,
            lease,
            lease_ms,
        };
        let mut attempts = 0u32;
        let outcome = async {
            let inner = &attempt.client.inner;
            // This client's waiters queue in arrival order: a newcomer does not barge past them.
            // A re-entry and a one-shot try_lock do try at once: neither waits behind anyone.
            // Nor past other processes' waiters that this client's last release just woke: it
            // leaves them a short grace to take the lock first (see `Config::with_handoff_grace`).
            let channel = &attempt.keys.channel;
            let behind_waiters = inner.hub.waiters(channel) > 0;
            let queue_first = wait != Some(Duration::ZERO)
                && (behind_waiters || inner.hub.handoff_pending(channel).is_some())
                && inner.holds.guards(&attempt.hold_key()) == 0;
            if !queue_first {
                attempts += 1;
                if let Attempt::Acquired(guard) = attempt.try_once(Claim::No).await? {
                    return Ok(Some(guard));
                }
                if wait == Some(Duration::ZERO) {
                    return Ok(None);
                }
            }
            let mut waiter = inner.hub.register(&attempt.keys.channel);
            // Withdraws this waiter's claim on the next hand-off if it leaves without the lock.
            let mut claim = ClaimGuard {
                hold: &attempt,
                claimed: false,
                tries: 0,
            };
            let confirm_by = Instant::now() + inner.command_timeout;
            waiter
                .subscribed(deadline.map_or(confirm_by, |d| d.min(confirm_by)))
                .await;
            // `Some(ttl)`: park first, at most the holder's TTL (`None`: not known).
            let mut park = (queue_first && behind_waiters).then_some(None);
            loop {
                if let Some(ttl) = park.take() {
                    let Some(remaining) = time_left(deadline) else {
                        return Ok(None);
                    };
                    // Without a known TTL (a lock without expiry, or a queued newcomer), re-check
                    // now and then: pub/sub is only a hint.
                    let bound = ttl
                        .unwrap_or(inner.watchdog_timeout)
                        .max(Duration::from_millis(1))
                        .min(remaining);
                    if waiter.wait(bound).await == Wake::Timeout {
                        tracing::trace!("woke on the holder's TTL, not a message");
                    }
                }
                // This client's own release woke other processes' waiters: they go first, for
                // the grace or until the lock changes hands (a release message not our own).
                // Not before a waiter that has claimed the hand-off, though: it lost a race
                // already, and the others may be waiting for it to use its claim.
                // A release of this client's own whose reply is not in yet may have woken this
                // waiter: whether a grace follows is known only from that reply.
                loop {
                    while let Some(grace) = inner
                        .hub
                        .handoff_pending(channel)
                        .filter(|_| !claim.claimed)
                    {
                        let Some(remaining) = time_left(deadline) else {
                            return Ok(None);
                        };
                        waiter.wait(grace.min(remaining)).await;
                    }
                    let Some(remaining) = time_left(deadline) else {
                        return Ok(None);
                    };
                    let bound = remaining.min(inner.command_timeout);
                    if claim.claimed || !inner.hub.await_release_reply(channel, bound).await {
                        break;
                    }
                }
                let ask = claim.next(waiter.is_first(), inner.claims);
                attempts += 1;
                match attempt.try_once(ask).await? {
                    Attempt::Acquired(guard) => {
                        // Taking the lock used up any claim of ours.
                        claim.claimed = false;
                        waiter.acquired();
                        return Ok(Some(guard));
                    }
                    Attempt::Busy(ttl) => park = Some(ttl),
                }
            }
        }
        .instrument(span.clone())
        .await;
        let waited_ms = started.elapsed().as_millis() as u64;
        span.record("waited_ms", waited_ms);
        span.record("attempts", attempts);
        span.record("acquired", matches!(outcome, Ok(Some(_))));
        match &outcome {
            Ok(Some(guard)) => {
                tracing::debug!(lock = %guard.name(), owner = %guard.owner(), waited_ms, attempts, "lock acquired")
            }
            Ok(None) => {
                tracing::debug!(lock = %self.name, waited_ms, attempts, "lock not acquired: busy")
            }
            Err(error) => {
                tracing::debug!(lock = %self.name, waited_ms, attempts, %error, "lock not acquired")
            }
        }
        outcome
    }
}

/// What is left of a wait until `deadline` (all the time in the world without one); `None`
/// once it has passed.
fn time_left(deadline: Option<Instant>) -> Option<Duration> {
    let Some(deadline) = deadline else {
        return Some(Duration::MAX);
    };
    let now = Instant::now();
    (deadline > now).then(|| deadline - now)
}

fn holder_field(inner: &Inner, owner: &Owner) -> String {
    [&*inner.id, ":", owner.id()].concat()
}

/// A hold as an acquire asks for it and a guard keeps it: the lock, the owner and the lease.
#[derive(Clone)]
struct Hold {
    client: Client,
    keys: Arc<LockKeys>,
    owner: Owner,
    /// The holder field, `<client-uuid>:<owner>`, shared with script arguments and the
    /// watchdog's registry.
    field: Str,
    /// The lock name and field as acquires and releases in flight are counted.
    in_flight_key: Fingerprint,
    lease: Lease,
    lease_ms: u64,
}

impl Hold {
    fn hold_key(&self) -> HoldKey {
        (self.keys.name.clone(), self.field.clone())
    }

    /// One attempt. Cancel safe: dropped between sending the script and making the guard, it
    /// leaves an [`OrphanCheck`] behind that releases a hold nobody received.
    async fn try_once(&self, claim: Claim) -> Result<Attempt> {
        self.client.check_open()?;
        let inner = &self.client.inner;
        // With replica sync the acquire goes on the connection its WAIT will go on.
        let redis = inner
            .replica_sync
            .as_ref()
            .map_or(&inner.redis, |s| &s.redis);
        let key = self.hold_key();
        // A release of the owner's still in flight may be a last one, which leaves no replay
        // key: a hold taken now could be the one its retry finds and releases. It goes first.
        let acquiring = inner
            .in_flight
            .acquiring(self.in_flight_key, self.lease_ms)
            .await;
        let held_before = inner.holds.guards(&key);
        let mut orphan = OrphanCheck::arm(self);
        let sent_at = Instant::now();
        let window = inner.claim_window_ms;
        match scripts::acquire(redis, &self.keys, self.lease_ms, &self.field, claim, window).await {
            Ok(None) => {}
            Ok(Some(pttl)) => {
                orphan.disarm();
                return Ok(Attempt::Busy(
                    u64::try_from(pttl).ok().map(Duration::from_millis),
                ));
            }
            Err(error) if error.is_ambiguous() => {
                // The script may have run without its reply reaching us: read the state back.
                // Our field holding more than our live guards means this attempt took a hold.
                let state = scripts::inspect(redis, &self.keys, &self.field).await;
                match state {
                    Ok(state) if state.holds > u64::from(held_before) => {
                        tracing::debug!(lock = %self.keys.name, "acquire reply lost; the read-back shows the hold");
                    }
                    Ok(_) => {
                        orphan.disarm();
                        return Err(error);
                    }
                    Err(_) => return Err(error),
                }
            }
            Err(error) => {
                orphan.disarm();
                return Err(error);
            }
        }
        // Registered while still counted in flight, so a release that starts from here on
        // counts this hold among those that remain.
        let registration = inner.holds.register(
            key,
            self.lease == Lease::Watchdog,
            sent_at,
            Duration::from_millis(self.lease_ms),
        );
        orphan.disarm();
        drop(acquiring);
        let guard = LockGuard {
            hold: self.clone(),
            registration,
            released: false,
        };
        if let Some(sync) = &inner.replica_sync {
            // Boxed, like script calls: it holds a fred command future.
            if let Err(unsynced) = Box::pin(self.await_replica(sync)).await {
                // Boxed: a release future is large, and every waiting lock() would carry it.
                if let Err(error) = Box::pin(guard.unlock()).await {
                    tracing::warn!(lock = %self.keys.name, %error, "could not release an unreplicated hold; it expires with its lease");
                }
                return Err(unsynced);
            }
        }
        Ok(Attempt::Acquired(guard))
    }

    /// Waits for one replica to acknowledge the hold just taken.
    async fn await_replica(&self, sync: &ReplicaSync) -> Result<()> {
        let inner = &self.client.inner;
        let options = Options {
            cluster_hash: Some(ClusterHash::Custom(fred::util::redis_keyslot(
                self.keys.name.as_bytes(),
            ))),
            timeout: Some(inner.command_timeout + Duration::from_millis(sync.timeout_ms)),
            max_attempts: Some(1),
            ..Default::default()
        };
        let acked: i64 = sync
            .redis
            .with_options(&options)
            .wait(1, sync.timeout_ms as i64)
            .await
            .map_err(|e| Error::redis(e, &sync.redis.server))?;
        if acked >= 1 {
            Ok(())
        } else {
            Err(Error::NotReplicated {
                lock: self.keys.name.to_string(),
            })
        }
    }
}

/// A waiter's claim on a lock's next hand-off. Dropped while `claimed` (the waiter gave up, ran
/// out of time or failed), it withdraws the claim in the background, so other waiters need not
/// sit out the claim window for a waiter that left.
struct ClaimGuard<'a> {
    hold: &'a Hold,
    claimed: bool,
    /// Attempts made as this client's first waiter.
    tries: u32,
}

impl ClaimGuard<'_> {
    /// What the next attempt asks for. This client's first waiter claims the next hand-off
    /// from its second try on (each failed try since it became first was a race lost to
    /// another process), so it cannot lose race after race; between claimants, the one that
    /// lost most goes first. Its first try claims nothing: most hand-offs then still go to
    /// whichever waiter is quickest, and only a waiter that lost one waits for its turn.
    fn next(&mut self, first: bool, claims: bool) -> Claim {
        if !first || !claims {
            return Claim::No;
        }
        self.tries += 1;
        if self.tries < 2 {
            return Claim::No;
        }
        self.claimed = true;
        Claim::For {
            priority: self.tries - 1,
        }
    }
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if !self.claimed {
            return;
        }
        let hold = self.hold.clone();
        let client = hold.client.clone();
        // Without a runtime to run it, the claim lapses with its window.
        client.inner.background.spawn(Box::pin(async move {
            let inner = &hold.client.inner;
            if let Err(error) = scripts::unclaim(&inner.redis, &hold.keys, &hold.field).await {
                tracing::debug!(lock = %hold.keys.name, %error, "could not withdraw a claim; it lapses with its window");
            }
        }));
    }
}

/// Armed while an acquire may have taken a hold that no guard stands for yet. Dropped armed (the
/// caller gave up mid-flight), it reads the lock back and releases one hold if the owner's field
/// counts more holds than its live guards. The read goes on the acquire's connection, after it,
/// so it sees what the acquire did.
struct OrphanCheck<'a> {
    hold: Option<&'a Hold>,
}

impl<'a> OrphanCheck<'a> {
    fn arm(hold: &'a Hold) -> OrphanCheck<'a> {
        OrphanCheck { hold: Some(hold) }
    }

    fn disarm(&mut self) {
        self.hold = None;
    }
}

impl Drop for OrphanCheck<'_> {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take().cloned() else {
            return;
        };
        // The owner's next acquire of this lock waits for the check, as for any release.
        let releasing = Arc::new(hold.releasing());
        let client = hold.client.clone();
        client.inner.background.must_run(Arc::new(move |fresh: Option<Arc<Connection>>| {
            let (hold, releasing) = (hold.clone(), releasing.clone());
            Box::pin(async move {
                let inner = &hold.client.inner;
                let redis = fresh.as_deref().unwrap_or_else(|| {
                    inner
                        .replica_sync
                        .as_ref()
                        .map_or(&inner.redis, |s| &s.redis)
                });
                let Ok(state) = scripts::inspect(redis, &hold.keys, &hold.field).await else {
                    return; // the hold, if any, expires with its lease
                };
                if state.holds > u64::from(inner.holds.guards(&hold.hold_key())) {
                    tracing::debug!(lock = %hold.keys.name, "releasing the hold of a cancelled acquire");
                    let latch = hold.keys.latch(&inner.id);
                    let how = ReleaseAs {
                        redis: fresh.as_deref(),
                        latch: &latch,
                        sent_before: false,
                        lapses_after: None,
                    };
                    let _ = hold.release_as(how, &releasing).await;
                }
            })
        }));
    }
}

/// One hold of a [`Lock`]. Release it with [`unlock`](LockGuard::unlock); dropping it releases
/// it in the background.
///
/// The guard is `'static` and `Send`: it can move into another task, and it remembers its owner,
/// so it can be released from anywhere. Dropped where no tokio runtime runs (a plain thread,
/// after the runtime that ran `main` ended) or while its runtime shuts down, it still releases
/// the hold: on the client's runtime, or else on a thread of its own that the dropping thread
/// waits for, a few command timeouts at most.
#[must_use = "dropping the guard releases the hold at once"]
pub struct LockGuard {
    hold: Hold,
    registration: Registration,
    released: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &self.hold.keys.name)
            .field("owner", &self.hold.owner)
            .field("lease", &self.hold.lease)
            .finish()
    }
}

impl LockGuard {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.hold.keys.name
    }

    /// The owner this hold belongs to.
    pub fn owner(&self) -> &Owner {
        &self.hold.owner
    }

    /// The fixed lease of this hold, or `None` when the watchdog renews it.
    pub fn lease(&self) -> Option<Duration> {
        match self.hold.lease {
            Lease::Fixed(lease) => Some(lease),
            Lease::Watchdog => None,
        }
    }

    /// A future that completes as soon as this client knows the hold may be gone, so another
    /// owner may hold the lock:
    ///
    /// - the earliest moment the lease can have run out has passed: the send time of the latest
    ///   acquire or renewal that Redis confirmed, plus its lease. This needs no round trip, so a
    ///   holder whose process was stopped or whose runtime was blocked past its lease learns it
    ///   the moment it runs again;
    /// - the watchdog found the lock deleted, expired or taken over;
    /// - the client shut down (and released its locks).
    ///
    /// For a fixed lease that is its end, unless the same owner holds the lock by a longer
    /// hold too (the lock then lasts as long as that hold needs). A loss is final: it never
    /// completes and then un-completes, even if a late renewal shows the lock was still there.
    /// It completes too once the hold is released.
    ///
    /// What it cannot promise: it is a snapshot. Work that checked it (or `is_lost()`) and then
    /// writes can still be paused between the check and the write, past the lease. Only a write
    /// that the store itself refuses when the lock has changed hands (a fencing token, coming
    /// with the fenced lock, or a script that checks the holder field) is safe from that.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// # async fn work() {}
    /// let guard = client.lock("job").lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("lease lost: stop writing"),
    ///     _ = work() => {}
    /// }
    /// guard.unlock().await.ok();
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> Lost {
        let mut standing = self.registration.standing.clone();
        Lost(Box::pin(async move {
            loop {
                let known: Standing = *standing.borrow_and_update();
                if known.is_lost(Instant::now()) {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep_until(known.lapses_after) => return,
                    changed = standing.changed() => if changed.is_err() {
                        return; // the hold was released
                    },
                }
            }
        }))
    }

    /// Whether [`lost`](Self::lost) has completed (or would complete at once): true from the
    /// earliest moment the lease can have run out, checked against the clock without a round
    /// trip. The same snapshot caveat applies.
    pub fn is_lost(&self) -> bool {
        self.registration.standing.borrow().is_lost(Instant::now())
    }

    /// This owner's hold count on the lock.
    ///
    /// # Errors
    ///
    /// As [`Lock::hold_count`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn hold_count(&self) -> Result<u64> {
        self.hold.client.check_open()?;
        let inner = &self.hold.client.inner;
        let state = scripts::inspect(&inner.redis, &self.hold.keys, &self.hold.field).await?;
        Ok(state.holds)
    }

    /// Releases this hold. When it was the owner's last, the lock is deleted and one waiter per
    /// process is woken. Renewal of the hold stops before the release is sent. When holds of the
    /// owner remain, the lock's TTL becomes what they need (see the lease rule in the crate
    /// docs).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the hold was already gone and the guard knew it may have lost
    /// its lease (see [`lost`](Self::lost)), [`Error::NotHeld`] when it was gone otherwise (say,
    /// force-unlocked), [`Error::Closed`] after the client shut down (which released it), and
    /// as [`Lock::lock`]. A release that Redis may or may not have applied is retried with the
    /// same request id, so it counts once. The owner's own acquires of this lock wait until the
    /// release has its reply.
    ///
    /// A *last* release whose hold cannot lapse before its last retry (a watchdog lease, renewed
    /// until the release, or a fixed lease with over six command timeouts left) leaves no replay
    /// key, to spare the server a write and a delete (see `lua/release.lua`): its retry that
    /// finds the hold gone reports success, as its first send freed the lock. If the lock was
    /// force-unlocked in the same moment as that reply was lost, the force-unlock goes
    /// unreported.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the release runs to its end in the background.
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        let was_lost = self.is_lost();
        let leaving = self.stop_renewal();
        self.hold.client.check_open()?;
        let lost = || Error::LeaseLost {
            lock: self.hold.keys.name.to_string(),
            owner: self.hold.field.to_string(),
        };
        let Leaving::Release { lapses_after } = leaving else {
            return Err(lost());
        };
        let inner = &self.hold.client.inner;
        let latch = self.hold.keys.latch(&inner.id);
        // Dropped mid-flight, the release is finished in the background under the same
        // request id, so it still counts exactly once; it stays counted in flight till then.
        let mut resume = ResumeRelease {
            pending: Some((&self.hold, self.hold.releasing())),
            latch: &latch,
            lapses_after,
        };
        let span = tracing::debug_span!("relock.release", lock = %self.hold.keys.name, holder = %self.hold.field);
        let (_, releasing) = resume.pending.as_ref().expect("set above");
        let how = ReleaseAs {
            redis: None,
            latch: &latch,
            sent_before: false,
            lapses_after: Some(lapses_after),
        };
        let outcome = self.hold.release_as(how, releasing).instrument(span).await;
        resume.pending = None;
        match outcome? {
            Released::StillHeld | Released::Freed { .. } => Ok(()),
            Released::NotHeld if was_lost || self.is_lost() => Err(lost()),
            Released::NotHeld => Err(Error::NotHeld {
                lock: self.hold.keys.name.to_string(),
                owner: self.hold.field.to_string(),
            }),
        }
    }

    /// Stops renewal of this hold; called before its release is sent.
    fn stop_renewal(&self) -> Leaving {
        self.hold
            .client
            .inner
            .holds
            .unregister(&self.hold.hold_key(), &self.registration)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        let leaving = self.stop_renewal();
        let Leaving::Release { lapses_after } = leaving else {
            return; // a release would strike the owner's newer hold
        };
        if self.hold.client.check_open().is_err() {
            return;
        }
        // Counted in flight now, so the owner's next acquire, even right after the drop,
        // waits for it.
        let releasing = Arc::new(self.hold.releasing());
        let latch = self.hold.keys.latch(&self.hold.client.inner.id);
        self.hold.resume(latch, false, lapses_after, releasing);
    }
}

/// Finishes a release in the background when the `unlock()` that sent it was dropped.
struct ResumeRelease<'a> {
    /// The hold, and the token that keeps its release counted in flight until the `unlock()`
    /// or its resumption ends; `None` once the release has ended.
    pending: Option<(&'a Hold, Releasing)>,
    latch: &'a Key,
    lapses_after: Instant,
}

impl Drop for ResumeRelease<'_> {
    fn drop(&mut self) {
        if let Some((hold, releasing)) = self.pending.take() {
            hold.resume(
                self.latch.clone(),
                true,
                self.lapses_after,
                Arc::new(releasing),
            );
        }
    }
}

/// How one release is sent.
struct ReleaseAs<'a> {
    /// The connection to send it on, when not the client's own (a rescue run's).
    redis: Option<&'a Connection>,
    /// The replay key: the request id.
    latch: &'a Key,
    /// Whether the request may have reached the server already (an `unlock()` dropped
    /// mid-flight), so even its first send here looks for a replay.
    sent_before: bool,
    /// The earliest the hold can lapse; `None` when not known.
    lapses_after: Option<Instant>,
}

impl Hold {
    /// Counts a release of this hold in flight until the token drops.
    fn releasing(&self) -> Releasing {
        self.client.inner.in_flight.releasing(self.in_flight_key)
    }

    /// Sends (or finishes) a release under the request id `latch` in the background; see
    /// `background` for what happens when no runtime can run it.
    fn resume(
        &self,
        latch: Key,
        sent_before: bool,
        lapses_after: Instant,
        releasing: Arc<Releasing>,
    ) {
        let hold = self.clone();
        let job = move |fresh: Option<Arc<Connection>>| {
            let (hold, latch, releasing) = (hold.clone(), latch.clone(), releasing.clone());
            let span = tracing::debug_span!("relock.release", lock = %hold.keys.name, holder = %hold.field);
            let release = async move {
                let how = ReleaseAs {
                    redis: fresh.as_deref(),
                    latch: &latch,
                    // A rescue run may follow a send that reached the server.
                    sent_before: sent_before || fresh.is_some(),
                    lapses_after: Some(lapses_after),
                };
                if let Err(error) = hold.release_as(how, &releasing).await {
                    tracing::debug!(lock = %hold.keys.name, %error, "background release failed");
                }
            };
            Box::pin(release.instrument(span)) as BoxFuture<'static, ()>
        };
        self.client.inner.background.must_run(Arc::new(job));
    }

    /// Sends one release, retrying a lost reply under the same request id so the release
    /// applies once.
    ///
    /// A release that leaves holds behind sets the lock's TTL to what the owner's remaining
    /// holds need (and what an acquire of the owner's in flight asks for), and writes a replay
    /// key, so its retry replays "still held". A last release writes one only when a retry could
    /// not do without it (see `inflight`): when an acquire of the owner's was in flight as it
    /// started, or when the hold could lapse (`lapses_after`, the earliest it can, or unknown)
    /// before the last retry. Else a retry that finds the field gone knows its earlier send freed
    /// the lock: the field was there when that send ran, and no new hold of the owner's can have
    /// come in between. Should a retry still come after `lapses_after` (a stalled process), it
    /// cannot tell that from a lapse, and the release ends in [`Error::LeaseLost`].
    async fn release_as(&self, how: ReleaseAs<'_>, releasing: &Releasing) -> Result<Released> {
        const TRIES: u32 = 3;
        let inner = &self.client.inner;
        let redis = how.redis.unwrap_or(&inner.redis);
        let key = self.hold_key();
        // Each try may wait a command timeout for the connection and another for the reply, so
        // the last one is sent within 2 * TRIES - 1 command timeouts: the replay key outlives it.
        let latch_ttl = inner.command_timeout * (2 * TRIES);
        let latch_ttl_ms = latch_ttl.as_millis() as u64;
        let keep_ms = inner
            .holds
            .need(&key)
            .map_or(0, |need| need.as_millis().max(1) as u64)
            .max(releasing.acquire_lease_ms)
            .max(1);
        let mut tries = 1;
        let mut sent_before = how.sent_before;
        let mark = inner.hub.mark(&self.keys.channel);
        let sent_at = Instant::now();
        let replay_last = releasing.beside_acquire
            || how
                .lapses_after
                .map_or(true, |lapse| lapse <= sent_at + latch_ttl);
        loop {
            let script = ReleaseHow {
                latch: how.latch,
                latch_ttl_ms,
                publish: inner.publish,
                claim_window_ms: inner.claim_window_ms,
                sent_before,
                replay_last,
            };
            let outcome = scripts::release(redis, &self.keys, &self.field, keep_ms, script).await;
            match outcome {
                Err(error) if error.is_ambiguous() && tries < TRIES => {
                    tries += 1;
                    sent_before = true;
                }
                Ok(Released::NotHeld) if sent_before => {
                    if !how.lapses_after.is_some_and(|lapse| Instant::now() < lapse) {
                        return Err(Error::LeaseLost {
                            lock: self.keys.name.to_string(),
                            owner: self.field.to_string(),
                        });
                    }
                    tracing::debug!(lock = %self.keys.name, "release reply lost; the retry finds the lock freed by it");
                    inner.hub.released(&self.keys.channel, 0, &mark);
                    tracing::debug!(lock = %self.keys.name, holder = %self.field, "lock released");
                    return Ok(Released::Freed { woken: 0 });
                }
                Ok(released) => {
                    let replay_key = match released {
                        Released::StillHeld => true,
                        Released::Freed { .. } => replay_last,
                        Released::NotHeld => false,
                    };
                    if replay_key {
                        // The reply arrived, so no retry will need the replay key any more.
                        inner.sweeper.delete(how.latch.clone());
                    }
                    match released {
                        Released::StillHeld => {
                            inner
                                .holds
                                .lease_set(&key, sent_at, Duration::from_millis(keep_ms));
                            tracing::debug!(lock = %self.keys.name, holder = %self.field, keep_ms, "one hold released; the owner still holds the lock");
                        }
                        Released::Freed { woken } => {
                            inner.hub.released(&self.keys.channel, woken, &mark);
                            tracing::debug!(lock = %self.keys.name, holder = %self.field, woken, "lock released");
                        }
                        Released::NotHeld => {
                            tracing::debug!(lock = %self.keys.name, holder = %self.field, "release found no hold");
                        }
                    }
                    return Ok(released);
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// Completes when a hold's lease may be gone; from [`LockGuard::lost`].
#[must_use = "futures do nothing unless awaited"]
pub struct Lost(BoxFuture<'static, ()>);

impl Future for Lost {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lost")
    }
}
