//! What every lock handle does, whatever its type: a name, a client and an optional explicit
//! owner, checked and turned into a [`Hold`] when used. The public types (`Lock`, `FairLock`,
//! `SpinLock`) wrap one and document what is special about them.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;

use super::acquire;
use super::guard::LockGuard;
use super::hash;
use super::kind::Kind;
use super::kind::{Hold, Lease};
use crate::config::millis;
use crate::error::{Error, Result};
use crate::names::LockKeys;
use crate::owner::Owner;
use crate::pubsub::Waiter;
use crate::shared::Shared;
use crate::wait::Lost;

/// What [`Lock::remaining_lease`](crate::Lock::remaining_lease) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemainingLease {
    /// Nobody holds the lock.
    Unlocked,
    /// The lock is held and expires in this long unless renewed.
    Expires(Duration),
    /// The lock is held and has no expiry: someone wrote it without a TTL (relock never does).
    /// It stays until deleted, for example by [`Lock::force_unlock`](crate::Lock::force_unlock).
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

/// The longest lock-delay, as Chubby's and Consul's: a holder that died holds a lock back no
/// longer than its lease and this.
pub(crate) const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);

/// A lock-delay in whole ms (a remainder rounded up; 0: none), or the error of one under 1 ms or
/// over [`MAX_LOCK_DELAY`].
pub(crate) fn lock_delay_ms(delay: Duration) -> Result<u64> {
    if delay.is_zero() {
        return Ok(0);
    }
    if delay > MAX_LOCK_DELAY {
        return Err(Error::invalid(format!(
            "a lock-delay of {delay:?} is too long: the most is {MAX_LOCK_DELAY:?}"
        )));
    }
    millis(delay, "a lock-delay")
}

/// A lock handle of any type. Cheap to clone; no I/O until used.
#[derive(Clone)]
pub(crate) struct Handle {
    shared: Arc<Shared>,
    name: String,
    keys: std::result::Result<Arc<LockKeys>, Error>,
    owner: Option<Owner>,
    kind: Kind,
}

impl Handle {
    /// Formats the handle as the public type `type_name`: its name and explicit owner.
    pub(crate) fn debug_as(
        &self,
        type_name: &str,
        f: &mut std::fmt::Formatter<'_>,
    ) -> std::fmt::Result {
        f.debug_struct(type_name)
            .field("name", &self.name)
            .field("owner", &self.owner)
            .finish()
    }
}

impl Handle {
    /// A handle on lock `name` of type `kind`.
    pub(crate) fn new(shared: Arc<Shared>, name: String, kind: Kind) -> Handle {
        let keys = kind.keys(&name);
        let keys = keys
            .and_then(|k| k.checked_for(shared.clustered()))
            .map(Arc::new);
        Handle {
            kind,
            shared,
            name,
            keys,
            owner: None,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The lock's keys, or the error its name gets.
    pub(crate) fn keys(&self) -> Result<Arc<LockKeys>> {
        self.keys.clone()
    }

    pub(crate) fn owned_by(mut self, owner: Owner) -> Handle {
        self.owner = Some(owner);
        self
    }

    pub(crate) fn kind(&self) -> &Kind {
        &self.kind
    }

    /// Makes the handle's lock one of type `kind` (the same keys: a spin lock with another
    /// backoff, say).
    pub(crate) fn set_kind(&mut self, kind: Kind) {
        self.kind = kind;
    }

    fn owner(&self) -> Owner {
        self.owner.clone().unwrap_or_else(Owner::current)
    }

    /// Takes the lock: with the watchdog's lease (`lease: None`) or a fixed one, waiting at most
    /// `wait` (`None`: as long as it takes), taking turns as the type makes them.
    pub(crate) async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.shared.check_open()?;
        let hold = self.hold(lease)?;
        acquire::acquire(&hold, hold.kind.turns(&hold, wait), wait).await
    }

    /// Takes the lock with a watchdog lease of its own, `lease`, instead of the client's
    /// watchdog timeout: the watchdog renews it every third of `lease` while its guard lives
    /// (an election's `with_lease`, client-go's `LeaseDuration`). Waits at most `wait` (`None`:
    /// as long as it takes), taking turns as the type makes them. The guard is a watchdog
    /// guard in every other way ([`LockGuard::lease`] is `None`).
    pub(crate) async fn acquire_renewed(
        &self,
        lease: Duration,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.shared.check_open()?;
        let hold = self.renewed_hold(lease)?;
        acquire::acquire(&hold, hold.kind.turns(&hold, wait), wait).await
    }

    /// The hold an acquire of this handle asks for: with the watchdog's lease (`lease: None`)
    /// or a fixed one, for the handle's owner (the current task's unless one was given). The
    /// error of a bad name or lease.
    pub(crate) fn hold(&self, lease: Option<Duration>) -> Result<Hold> {
        match lease {
            None => self.hold_as(Lease::Watchdog, self.shared.watchdog_ms),
            // The lease as Redis gets it: whole milliseconds, a remainder rounded up.
            Some(lease) => {
                let ms = millis(lease, "lease")?;
                self.hold_as(Lease::Fixed(Duration::from_millis(ms)), ms)
            }
        }
    }

    /// The hold of a watchdog lease of its own (see [`acquire_renewed`](Self::acquire_renewed)):
    /// the error of a bad name, or of a lease too short to renew every third of (under 3 ms).
    pub(crate) fn renewed_hold(&self, lease: Duration) -> Result<Hold> {
        let ms = millis(lease, "lease")?;
        if ms < 3 {
            return Err(Error::invalid(format!(
                "a renewed lease must be at least 3 ms so it can be renewed every third of it, got {lease:?}"
            )));
        }
        self.hold_as(Lease::Watchdog, ms)
    }

    fn hold_as(&self, lease: Lease, lease_ms: u64) -> Result<Hold> {
        let shared = &self.shared;
        let keys = self.keys.clone()?;
        let owner = self.owner();
        let field: Str = self.kind.field(shared.holder_field(&owner));
        Ok(Hold {
            shared: shared.clone(),
            kind: self.kind.clone(),
            field,
            keys,
            owner,
            lease,
            lease_ms,
        })
    }

    /// Takes the lock (as long as it takes), runs `work`, and releases the lock.
    pub(crate) async fn with<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Lost) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.acquire(None, None).await?;
        let guard = guard.expect("an unbounded wait ends only with the lock");
        let value = work(guard.lost()).await;
        guard.unlock().await?;
        Ok(value)
    }

    /// A waiter on the lock's wake-up channel, woken as the type's waiters are, once its
    /// subscription is confirmed (at most a command timeout, never past `deadline`).
    pub(crate) async fn waiter(&self, deadline: Option<tokio::time::Instant>) -> Result<Waiter> {
        let keys = self.keys.clone()?;
        let rule = self.kind.wakes();
        Ok(crate::wait::subscribe(&self.shared, &keys.channel, rule, deadline).await)
    }

    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        self.shared.check_open()?;
        let keys = self.keys.clone()?;
        self.kind.force_release(&self.shared, &keys).await
    }

    pub(crate) async fn is_locked(&self) -> Result<bool> {
        Ok(self.inspect().await?.locked)
    }

    pub(crate) async fn hold_count(&self) -> Result<u64> {
        Ok(self.inspect().await?.holds)
    }

    pub(crate) async fn remaining_lease(&self) -> Result<RemainingLease> {
        let state = self.inspect().await?;
        Ok(match state.pttl {
            -2 => RemainingLease::Unlocked,
            ms if ms < 0 => RemainingLease::NoExpiry,
            ms => RemainingLease::Expires(Duration::from_millis(ms as u64)),
        })
    }

    pub(crate) async fn lock_delay_left(&self) -> Result<Option<Duration>> {
        self.shared.check_open()?;
        let keys = self.keys.clone()?;
        let left = hash::delay_left(&self.shared.redis, &keys).await?;
        Ok((left > 0).then(|| Duration::from_millis(left)))
    }

    async fn inspect(&self) -> Result<hash::Inspection> {
        self.shared.check_open()?;
        let keys = self.keys.clone()?;
        let field = self.kind.field(self.shared.holder_field(&self.owner()));
        hash::inspect(&self.shared.redis, &keys, &field, self.kind.view()).await
    }
}

/// A watchdog lease of a hold's own against a real server (feature `testing`, which relock's own
/// tests turn on).
#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::time::Duration;

    use crate::testing::RedisServer;
    use crate::{Client, Config};

    /// The lease left of `name` on `server`, in ms (`PTTL`).
    fn pttl(server: &RedisServer, name: &str) -> i64 {
        let reply = server.command(&["PTTL", name]).unwrap();
        reply.trim_start_matches(':').trim().parse().unwrap()
    }

    /// A hold with a short lease of its own is renewed with it, every third of it, while the
    /// client's long watchdog timeout is in force for the other holds, and outlives many of
    /// its leases; released, it is no longer renewed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hold_with_its_own_lease_is_renewed_with_it_until_released() {
        const CLIENT: Duration = Duration::from_secs(30);
        const OWN: Duration = Duration::from_millis(600);
        let server = RedisServer::start().unwrap();
        let config = Config::from_url(&server.url())
            .unwrap()
            .with_watchdog_timeout(CLIENT)
            .with_command_timeout(Duration::from_secs(2));
        let client = Client::new(config).await.unwrap();
        let (short, long) = ("own-lease:short", "own-lease:long");

        let long_guard = client.lock(long).lock().await.unwrap();
        let guard = client
            .lock(short)
            .handle
            .acquire_renewed(OWN, None)
            .await
            .unwrap()
            .expect("a free lock");
        assert_eq!(guard.lease(), None, "a watchdog guard");
        let ttl = pttl(&server, short);
        assert!(
            0 < ttl && ttl <= 600,
            "acquired with its own lease: PTTL {ttl}"
        );

        // Four of its leases: only renewals keep it.
        let started = tokio::time::Instant::now();
        while started.elapsed() < OWN * 4 {
            let ttl = pttl(&server, short);
            assert!(
                0 < ttl && ttl <= 600,
                "renewed with its own lease: PTTL {ttl}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!guard.is_lost(), "renewed every third of its own lease");
        let renewals = client.stats().renewals;
        assert!(renewals >= 6, "{renewals} renewals in four of its leases");
        // The other hold keeps the client's lease, not renewed yet (a third of 30 s).
        let ttl = pttl(&server, long);
        assert!(ttl > 25_000, "the client's lease was cut short: PTTL {ttl}");
        // What a release leaving holds behind would set the TTL to: each field's own lease.
        let need = |name| {
            let key = client.lock(name).handle.hold(None).unwrap().hold_key();
            client.shared.registry.need(&key)
        };
        assert_eq!(need(long), Some(CLIENT));
        assert_eq!(need(short), Some(OWN));

        guard.unlock().await.unwrap();
        assert_eq!(client.stats().renewing, 1);
        let released = client.stats().renewals;
        tokio::time::sleep(OWN).await;
        assert_eq!(
            client.stats().renewals,
            released,
            "a released hold was renewed"
        );
        assert_eq!(pttl(&server, short), -2, "the lock was left behind");

        long_guard.unlock().await.unwrap();
        client.shutdown().await.unwrap();
    }
}
