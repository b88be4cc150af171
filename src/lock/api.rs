//! The methods every lock type has, written once: each type's file says `lock_api!` with its
//! name and the client method that makes it, and documents what is special about it on the type
//! itself.

/// Implements the shared lock API on `$Type` (a struct with a `handle: Handle` field, which
/// knows the lock's type); `$make` is the `Client` method that makes one, for the examples, and
/// `$then` what follows its call there (`.read()` for a read lock). The guards are `$Guard`s,
/// made from a [`LockGuard`](crate::LockGuard) (by default, the `LockGuard` itself).
macro_rules! lock_api {
    ($Type:ident, $make:literal) => {
        $crate::lock::lock_api!($Type, $make, "", $crate::lock::LockGuard);
    };
    ($Type:ident, $make:literal, $then:literal, $Guard:ty) => {
        impl std::fmt::Debug for $Type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.handle.debug_as(stringify!($Type), f)
            }
        }

        impl $Type {
            /// The lock's name, which is also its Redis key.
            pub fn name(&self) -> &str {
                self.handle.name()
            }

            /// The same lock, held and released on behalf of `owner` instead of the current
            /// task.
            pub fn owned_by(self, owner: $crate::owner::Owner) -> $Type {
                $Type {
                    handle: self.handle.owned_by(owner),
                }
            }

            /// Takes the lock, waiting as long as it takes. The watchdog renews its lease until
            /// the guard is released or dropped.
            ///
            /// # Errors
            ///
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name,
            /// [`Error::WrongType`](crate::Error::WrongType) when the key holds another type,
            /// [`Error::Redis`](crate::Error::Redis) when Redis fails,
            /// [`Error::Closed`](crate::Error::Closed) after shutdown. If the connection to Redis
            /// breaks while it waits, it fails with [`Error::Redis`](crate::Error::Redis) within
            /// about one command timeout, unless the connection is back by then.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: a dropped call leaves no hold, no subscription, no waiter and no
            /// place in a fair lock's queue behind. If the acquire had already reached Redis, its
            /// hold is released (and its place given up) in the background.
            #[allow(clippy::useless_conversion)]
            pub async fn lock(&self) -> $crate::error::Result<$Guard> {
                self.handle
                    .acquire(None, None)
                    .await
                    .map(|guard| guard.expect("an unbounded wait ends only with the lock").into())
            }

            /// Takes the lock with a fixed lease, waiting as long as it takes. Nobody renews the
            /// lease: the lock frees itself when it ends, guard or no guard.
            ///
            /// # Errors
            ///
            /// As [`lock`](Self::lock), and
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a lease under 1 ms
            /// or over 2^53 ms.
            ///
            /// # Cancel safety
            ///
            /// As [`lock`](Self::lock).
            #[allow(clippy::useless_conversion)]
            pub async fn lock_with_lease(
                &self,
                lease: std::time::Duration,
            ) -> $crate::error::Result<$Guard> {
                self.handle
                    .acquire(Some(lease), None)
                    .await
                    .map(|guard| guard.expect("an unbounded wait ends only with the lock").into())
            }

            /// Takes the lock if this owner can have it now (it is free, or this owner holds it
            /// already), in one attempt; `Ok(None)` when another owner holds it, or, for a
            /// [`FairLock`](crate::FairLock), when others queue for it (a one-shot attempt never
            /// joins the queue). The watchdog renews a lock taken here.
            ///
            /// # Errors
            ///
            /// As [`lock`](Self::lock).
            ///
            /// # Cancel safety
            ///
            /// As [`lock`](Self::lock).
            #[allow(clippy::useless_conversion)]
            pub async fn try_lock(&self) -> $crate::error::Result<Option<$Guard>> {
                self.handle
                    .acquire(None, Some(std::time::Duration::ZERO))
                    .await
                    .map(|guard| guard.map(Into::into))
            }

            /// Takes the lock, waiting at most `wait`; `Ok(None)` when the wait ran out (a fair
            /// lock's waiter has left the queue then). With `lease: None` the watchdog renews the
            /// lock, else it lasts `lease`.
            ///
            /// # Errors
            ///
            /// As [`lock_with_lease`](Self::lock_with_lease).
            ///
            /// # Cancel safety
            ///
            /// As [`lock`](Self::lock).
            #[allow(clippy::useless_conversion)]
            pub async fn try_lock_for(
                &self,
                wait: std::time::Duration,
                lease: Option<std::time::Duration>,
            ) -> $crate::error::Result<Option<$Guard>> {
                self.handle
                    .acquire(lease, Some(wait))
                    .await
                    .map(|guard| guard.map(Into::into))
            }

            /// Runs `work` under the lock and releases it afterwards, whatever `work` returned.
            /// If `work` panics or the call is dropped, the guard's drop releases the lock in the
            /// background.
            ///
            /// `work` gets the hold's [`Lost`](crate::Lost) signal (see
            /// [`LockGuard::lost`](crate::LockGuard::lost)), so it can stop when the lease is
            /// lost; ignore it with `|_|` when the work is short.
            ///
            /// ```no_run
            /// # async fn run(client: relock::Client) -> relock::Result<()> {
            /// # async fn copy_rows() -> u64 { 42 }
            #[doc = concat!("let copied = client\n    .", $make, "(\"stock:7\")", $then)]
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
            /// [`Error::LeaseLost`](crate::Error::LeaseLost): the value is dropped then, as the
            /// work ran unprotected).
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: the lock is released in the background.
            pub async fn with<F, Fut, T>(&self, work: F) -> $crate::error::Result<T>
            where
                F: FnOnce($crate::wait::Lost) -> Fut,
                Fut: std::future::Future<Output = T>,
            {
                self.handle.with(work).await
            }

            /// Deletes the lock whoever holds it (a side of an [`RwLock`](crate::RwLock): only
            /// while the lock is held in that side's mode, see
            /// [`ReadLock`](crate::ReadLock) and [`WriteLock`](crate::WriteLock); a
            /// [`Lock`](crate::Lock): in any mode, a read-write lock's readers' timeout keys
            /// included), and tells its waiters as a last release does
            /// (see [`LockGuard::unlock`](crate::LockGuard::unlock)). `Ok(true)` when there was
            /// a lock. Every type but an `RwLock`'s sides also deletes the name's lock-delay
            /// shadow (see [`Lock::with_lock_delay`](crate::Lock::with_lock_delay)): the name is
            /// free at once, and a lock-delay in force ends (`Ok(true)` then too). Holders find out through their watchdog (`lost()`, at its next renewal) or
            /// when they release: `NotHeld` before their `lost()` completed, `LeaseLost` after
            /// (see [`LockGuard::unlock`](crate::LockGuard::unlock)).
            ///
            /// # Errors
            ///
            /// [`Error::WrongType`](crate::Error::WrongType) when the key holds another type (it
            /// is left alone), and as [`lock`](Self::lock).
            ///
            /// # Cancel safety
            ///
            /// Not cancel safe: a dropped call may or may not have deleted the lock.
            pub async fn force_unlock(&self) -> $crate::error::Result<bool> {
                self.handle.force_unlock().await
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
            pub async fn is_locked(&self) -> $crate::error::Result<bool> {
                self.handle.is_locked().await
            }

            /// Whether this lock's owner (the current task unless [`owned_by`](Self::owned_by)
            /// set one) holds the lock.
            ///
            /// # Errors
            ///
            /// As [`is_locked`](Self::is_locked).
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: it only reads.
            pub async fn is_held_by_current_owner(&self) -> $crate::error::Result<bool> {
                Ok(self.handle.hold_count().await? > 0)
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
            pub async fn hold_count(&self) -> $crate::error::Result<u64> {
                self.handle.hold_count().await
            }

            /// How long the lock has left before it expires, whoever holds it.
            ///
            /// ```no_run
            /// # async fn run(client: relock::Client) -> relock::Result<()> {
            /// use relock::RemainingLease;
            #[doc = concat!("match client.", $make, "(\"job\")", $then, ".remaining_lease().await? {")]
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
            pub async fn remaining_lease(&self) -> $crate::error::Result<$crate::lock::RemainingLease> {
                self.handle.remaining_lease().await
            }
        }
    };
}

pub(crate) use lock_api;

/// Implements the lock-delay API on `$Type` (a [`Lock`](crate::Lock) or a
/// [`FairLock`](crate::FairLock), which has a `set_lock_delay(self, ms) -> Self`); `$make` is
/// the `Client` method that makes one, for the examples.
macro_rules! delay_api {
    ($Type:ident, $make:literal) => {
        impl $Type {
            /// The same lock with a **lock-delay** (after Chubby's and Consul's): when a holder's
            /// lease runs out without an unlock (its process died or stalled, or its renewals
            /// stopped reaching Redis), the lock stays unavailable to this handle's acquires for
            /// `delay` more, so that requests the lost holder still had in flight land before
            /// the next holder starts. A clean release (an `unlock()`, a dropped guard, a client's
            /// shutdown) imposes no delay: the next waiter gets the lock at once.
            /// [`Duration::ZERO`](std::time::Duration::ZERO) turns it off (the default). It
            /// applies to watchdog and fixed leases alike: a fixed lease that runs out is a lapse
            /// too.
            ///
            /// The delay is decided on Redis, inside the acquire script, by a relock-only shadow
            /// key `relock_lease:{<name>}` that outlives the lock by `delay` (set by acquires,
            /// re-entries, renewals and partial releases; deleted by the last release): a free
            /// lock whose shadow lives is *delayed*. A delayed acquire sleeps until the delay
            /// ends (the script reports its end; no message comes, no polling), and traces
            /// `lock-delay in force` at debug level; [`try_lock`](Self::try_lock) gives
            /// `Ok(None)`, and [`lock_delay_left`](Self::lock_delay_left) tells a delayed lock
            /// from a free one.
            ///
            /// - **Every handle on the name must set it.** An acquire through a handle without a
            ///   lock-delay does not read the shadow (so locks without one cost nothing more),
            ///   and takes a delayed lock at once; so do **Redisson** clients, which know nothing
            ///   of it. Their unlock leaves the shadow, so this handle's acquires may then wait
            ///   out what is left of it (at most the delay).
            /// - **[`force_unlock`](Self::force_unlock)** (through any handle on the name) is an
            ///   operator's override: it deletes the shadow with the lock, so the name is free at
            ///   once, and it also ends a lock-delay in force (then returning `Ok(true)` and
            ///   waking the waiters).
            /// - **A mitigation, not a protection.** A holder stalled longer than its lease plus
            ///   the delay (a GC or VM pause, a slow network) still writes after the next holder
            ///   started. Where that matters, use a [`FencedLock`](crate::FencedLock) and have the
            ///   resource check its fencing tokens.
            ///
            /// ```no_run
            /// # async fn run(client: relock::Client) -> relock::Result<()> {
            /// use std::time::Duration;
            #[doc = concat!("let lock = client.", $make, "(\"ledger\").with_lock_delay(Duration::from_secs(10))?;")]
            /// let guard = lock.lock().await?; // after any lock-delay in force
            /// guard.unlock().await?;          // a clean release: no delay for the next holder
            /// # Ok(()) }
            /// ```
            ///
            /// # Errors
            ///
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a delay over 60 s,
            /// or above zero but under 1 ms (a remainder of a millisecond is rounded up).
            pub fn with_lock_delay(self, delay: std::time::Duration) -> $crate::error::Result<$Type> {
                let ms = super::handle::lock_delay_ms(delay)?;
                Ok(self.set_lock_delay(ms))
            }

            /// What is left of the lock's lock-delay: `Some(left)` when the lock is free but
            /// delayed (its last holder's lease ran out without an unlock, less than its delay
            /// ago), `None` when it is held or free to take. It reads the shadow key whether or
            /// not this handle has a lock-delay (see [`with_lock_delay`](Self::with_lock_delay)).
            ///
            /// # Errors
            ///
            /// As [`is_locked`](Self::is_locked), and
            /// [`Error::WrongType`](crate::Error::WrongType) when the shadow key holds another
            /// type.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: it only reads.
            pub async fn lock_delay_left(
                &self,
            ) -> $crate::error::Result<Option<std::time::Duration>> {
                self.handle.lock_delay_left().await
            }
        }
    };
}

pub(crate) use delay_api;

/// Implements the façade of a lock made of others (a [`MultiLock`](crate::MultiLock), a
/// [`RedLock`](crate::RedLock)) on `$Type`, over its
/// `async fn acquire(&self, lease: Option<Duration>, wait: Option<Duration>) -> Result<Option<$Guard>>`
/// (`wait`: `None` as long as it takes, zero for one attempt): `lock`, `lock_with_lease`,
/// `try_lock`, `try_lock_for` and `with`. `$Guard` has `lost()` and `unlock()`. Each method's
/// doc is the type's own, given as `doc = "..."` lines per method; `lock_with_lease`, `try_lock`
/// and `try_lock_for` add their errors and cancel safety, which follow `lock`'s.
macro_rules! combined_api {
    (
        $Type:ident,
        $Guard:ty,
        lock: [$($lock:literal),* $(,)?],
        lock_with_lease: [$($lease:literal),* $(,)?],
        try_lock: [$($try:literal),* $(,)?],
        try_lock_for: [$($try_for:literal),* $(,)?],
        with: [$($with:literal),* $(,)?] $(,)?
    ) => {
        impl $Type {
            $(#[doc = $lock])*
            pub async fn lock(&self) -> $crate::error::Result<$Guard> {
                let guard = self.acquire(None, None).await?;
                Ok(guard.expect("an unbounded wait ends only when it is taken"))
            }

            $(#[doc = $lease])*
            ///
            /// # Errors
            ///
            /// As [`lock`](Self::lock), and
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a lease under 1 ms
            /// or over 2^53 ms.
            ///
            /// # Cancel safety
            ///
            /// As [`lock`](Self::lock).
            pub async fn lock_with_lease(
                &self,
                lease: std::time::Duration,
            ) -> $crate::error::Result<$Guard> {
                let guard = self.acquire(Some(lease), None).await?;
                Ok(guard.expect("an unbounded wait ends only when it is taken"))
            }

            $(#[doc = $try])*
            ///
            /// # Errors
            ///
            /// As [`lock`](Self::lock).
            ///
            /// # Cancel safety
            ///
            /// As [`lock`](Self::lock).
            pub async fn try_lock(&self) -> $crate::error::Result<Option<$Guard>> {
                self.acquire(None, Some(std::time::Duration::ZERO)).await
            }

            $(#[doc = $try_for])*
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
                wait: std::time::Duration,
                lease: Option<std::time::Duration>,
            ) -> $crate::error::Result<Option<$Guard>> {
                self.acquire(lease, Some(wait)).await
            }

            $(#[doc = $with])*
            pub async fn with<F, Fut, T>(&self, work: F) -> $crate::error::Result<T>
            where
                F: FnOnce($crate::wait::Lost) -> Fut,
                Fut: std::future::Future<Output = T>,
            {
                let guard = self.lock().await?;
                let value = work(guard.lost()).await;
                guard.unlock().await?;
                Ok(value)
            }
        }
    };
}

pub(crate) use combined_api;
