//! The lock types, `MultiLock` and `RedLock`, and their guards, blocking.

use std::time::Duration;

use super::{block, call, Blocking, Guard};
use super::{Client, FencedGuard, LockGuard, MultiGuard, MultiLock, RedLock, RedLockGuard, RwLock};
use crate::error::{Error, Result};
use crate::{Owner, RemainingLease};

/// How every lock type, `MultiLock` and `RedLock` are taken, blocking.
macro_rules! acquire_methods {
    ($Async:ty, $AsyncGuard:ty) => {
        impl Blocking<$Async> {
            fn guard(&self, inner: $AsyncGuard) -> Guard<$AsyncGuard> {
                Guard {
                    inner,
                    runtime: self.runtime.clone(),
                }
            }

            /// The same lock, held on behalf of `owner` instead of the calling thread.
            pub fn owned_by(self, owner: Owner) -> Self {
                let runtime = self.runtime;
                Blocking {
                    inner: self.inner.owned_by(owner),
                    runtime,
                }
            }

            /// Takes it, waiting as long as it takes.
            ///
            /// # Errors
            ///
            /// As the async `lock`.
            pub fn lock(&self) -> Result<Guard<$AsyncGuard>> {
                call(&self.runtime, self.inner.lock()).map(|g| self.guard(g))
            }

            /// Takes it for `lease`, not renewed.
            ///
            /// # Errors
            ///
            /// As the async `lock_with_lease`.
            pub fn lock_with_lease(&self, lease: Duration) -> Result<Guard<$AsyncGuard>> {
                call(&self.runtime, self.inner.lock_with_lease(lease)).map(|g| self.guard(g))
            }

            /// Takes it if it is free now.
            ///
            /// # Errors
            ///
            /// As the async `try_lock`.
            pub fn try_lock(&self) -> Result<Option<Guard<$AsyncGuard>>> {
                call(&self.runtime, self.inner.try_lock()).map(|g| g.map(|g| self.guard(g)))
            }

            /// Takes it, waiting at most `wait`; with `lease`, not renewed.
            ///
            /// # Errors
            ///
            /// As the async `try_lock_for`.
            pub fn try_lock_for(
                &self,
                wait: Duration,
                lease: Option<Duration>,
            ) -> Result<Option<Guard<$AsyncGuard>>> {
                call(&self.runtime, self.inner.try_lock_for(wait, lease))
                    .map(|g| g.map(|g| self.guard(g)))
            }

            /// Runs `work` holding it, and releases it after.
            ///
            /// # Errors
            ///
            /// As [`lock`](Self::lock), and the release's error.
            pub fn with<T>(&self, work: impl FnOnce() -> T) -> Result<T> {
                let guard = self.lock()?;
                let value = work();
                guard.unlock()?;
                Ok(value)
            }
        }
    };
}

/// What every lock type (not the combined ones) answers, blocking.
macro_rules! query_methods {
    ($Async:ty) => {
        impl Blocking<$Async> {
            /// The lock's name.
            pub fn name(&self) -> &str {
                self.inner.name()
            }

            /// Frees the lock whoever holds it (see the async `force_unlock`).
            ///
            /// # Errors
            ///
            /// As the async `force_unlock`.
            pub fn force_unlock(&self) -> Result<bool> {
                call(&self.runtime, self.inner.force_unlock())
            }

            /// Whether anyone holds the lock.
            ///
            /// # Errors
            ///
            /// As the async `is_locked`.
            pub fn is_locked(&self) -> Result<bool> {
                call(&self.runtime, self.inner.is_locked())
            }

            /// Whether the calling thread (or this handle's owner) holds the lock.
            ///
            /// # Errors
            ///
            /// As the async `is_held_by_current_owner`.
            pub fn is_held_by_current_owner(&self) -> Result<bool> {
                call(&self.runtime, self.inner.is_held_by_current_owner())
            }

            /// How many holds the calling thread (or this handle's owner) has.
            ///
            /// # Errors
            ///
            /// As the async `hold_count`.
            pub fn hold_count(&self) -> Result<u64> {
                call(&self.runtime, self.inner.hold_count())
            }

            /// The lock's remaining lease.
            ///
            /// # Errors
            ///
            /// As the async `remaining_lease`.
            pub fn remaining_lease(&self) -> Result<RemainingLease> {
                call(&self.runtime, self.inner.remaining_lease())
            }
        }
    };
}

/// A lock type: taken and queried.
macro_rules! lock_methods {
    ($Async:ty, $AsyncGuard:ty) => {
        acquire_methods!($Async, $AsyncGuard);
        query_methods!($Async);
    };
}

/// Lock-delay, on the lock types that have it.
macro_rules! delay_methods {
    ($Async:ty) => {
        impl Blocking<$Async> {
            /// The same lock with a lock-delay (see the async `with_lock_delay`).
            ///
            /// # Errors
            ///
            /// As the async `with_lock_delay`.
            pub fn with_lock_delay(self, delay: Duration) -> Result<Self> {
                let runtime = self.runtime;
                Ok(Blocking {
                    inner: self.inner.with_lock_delay(delay)?,
                    runtime,
                })
            }

            /// What is left of a lock-delay in force, if any.
            ///
            /// # Errors
            ///
            /// As the async `lock_delay_left`.
            pub fn lock_delay_left(&self) -> Result<Option<Duration>> {
                call(&self.runtime, self.inner.lock_delay_left())
            }
        }
    };
}

/// Every lock type of the primitives' table (a `handle` or a `side`): its blocking type, the
/// blocking [`Client`]'s constructor of a `handle`, their methods and, for a lock type with a
/// lock-delay, its methods.
macro_rules! lock_types {
    (
        primitives {
            $($(#[$doc:meta])* $Variant:ident = $tag:literal, $shape:ident $(($($how:tt)*))?,)*
        }
        kinds { $($kinds:tt)* }
    ) => {
        $(lock_type!($Variant $shape $(($($how)*))?);)*
    };
}

/// [`lock_types`], for one row.
macro_rules! lock_type {
    ($Variant:ident handle($make:ident, $words:literal, $Guard:ident, $delay:ident)) => {
        #[doc = concat!("A blocking [`crate::", stringify!($Variant), "`].")]
        pub type $Variant = Blocking<crate::$Variant>;

        impl Client {
            #[doc = concat!(
                "The ", $words, " `name` (see [`crate::Client::", stringify!($make), "`])."
            )]
            pub fn $make(&self, name: impl Into<String>) -> $Variant {
                self.wrap(self.inner.$make(name))
            }
        }

        lock_methods!(crate::$Variant, crate::$Guard);
        lock_type!($Variant $delay);
    };
    ($Variant:ident side($Guard:ident)) => {
        #[doc = concat!("A blocking [`crate::", stringify!($Variant), "`].")]
        pub type $Variant = Blocking<crate::$Variant>;

        lock_methods!(crate::$Variant, crate::$Guard);
    };
    ($Variant:ident other) => {};
    ($Variant:ident delay) => {
        delay_methods!(crate::$Variant);
    };
    ($Variant:ident plain) => {};
}

crate::primitive::with_primitives!(lock_types);

impl FencedLock {
    /// The last fencing token handed out (0 before the first).
    ///
    /// # Errors
    ///
    /// As [`crate::FencedLock::token`].
    pub fn token(&self) -> Result<u64> {
        call(&self.runtime, self.inner.token())
    }
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The read side: many readers at once.
    pub fn read(&self) -> ReadLock {
        self.wrap(self.inner.read())
    }

    /// The write side: one writer, no readers.
    pub fn write(&self) -> WriteLock {
        self.wrap(self.inner.write())
    }
}

acquire_methods!(crate::MultiLock, crate::MultiGuard);
acquire_methods!(crate::RedLock, crate::RedLockGuard);

impl RedLock {
    /// A RedLock over `clients` (one per independent master), named `name` (see
    /// [`crate::RedLock::new`]: any other bad set of clients is reported by the first
    /// operation).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] with no client at all.
    pub fn new(clients: &[Client], name: impl Into<String>) -> Result<RedLock> {
        let Some(first) = clients.first() else {
            return Err(Error::invalid("a RedLock needs at least one client"));
        };
        let asyncs: Vec<crate::Client> = clients.iter().map(|c| c.inner.clone()).collect();
        Ok(first.wrap(crate::RedLock::new(&asyncs, name)))
    }
}

impl MultiLock {
    /// A multi-lock over `parts`, any lock types of any blocking clients (see
    /// [`crate::MultiLock::new`]).
    pub fn new<P: Into<crate::Part>>(
        parts: impl IntoIterator<Item = P>,
        client: &Client,
    ) -> MultiLock {
        client.wrap(crate::MultiLock::new(parts))
    }
}

/// The methods every guard has, blocking.
macro_rules! guard_methods {
    ($AsyncGuard:ty) => {
        impl Guard<$AsyncGuard> {
            /// Releases the hold, waiting for Redis to confirm.
            ///
            /// # Errors
            ///
            /// As the async `unlock`; [`Error::InvalidArgument`] inside an async runtime (the
            /// guard's drop releases it then).
            pub fn unlock(self) -> Result<()> {
                let Guard { inner, runtime } = self;
                call(&runtime, inner.unlock())
            }

            /// Whether the hold may be lost (its lease may have run out unrenewed).
            pub fn is_lost(&self) -> bool {
                self.inner.is_lost()
            }

            /// Blocks until the hold may be lost, at most `timeout`; `true` if it may be.
            pub fn wait_lost(&self, timeout: Duration) -> bool {
                let lost = self.inner.lost();
                let _enter = self.runtime.enter();
                let waited = tokio::time::timeout(timeout, lost);
                drop(_enter);
                block(&self.runtime, waited).map_or(false, |r| r.is_ok())
            }
        }
    };
}

guard_methods!(crate::LockGuard);
guard_methods!(crate::FencedGuard);
guard_methods!(crate::MultiGuard);
guard_methods!(crate::RedLockGuard);

impl MultiGuard {
    /// The holds of the parts (async guards; see [`crate::MultiGuard::parts`]).
    pub fn parts(&self) -> &[crate::LockGuard] {
        self.inner.parts()
    }
}

impl RedLockGuard {
    /// On how many masters it holds.
    pub fn held_on(&self) -> usize {
        self.inner.held_on()
    }

    /// How long it is valid for at least, from when it was taken (see
    /// [`crate::RedLockGuard::validity`]).
    pub fn validity(&self) -> Duration {
        self.inner.validity()
    }
}

impl LockGuard {
    /// A fenced lock's token; `None` for a hold of any other type.
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Its holder.
    pub fn owner(&self) -> &Owner {
        self.inner.owner()
    }

    /// Its fixed lease; `None` when the watchdog renews it.
    pub fn lease(&self) -> Option<Duration> {
        self.inner.lease()
    }

    /// The owner's hold count on the lock.
    ///
    /// # Errors
    ///
    /// As [`crate::LockGuard::hold_count`].
    pub fn hold_count(&self) -> Result<u64> {
        call(&self.runtime, self.inner.hold_count())
    }
}

impl FencedGuard {
    /// The fencing token of this hold.
    pub fn token(&self) -> u64 {
        self.inner.token()
    }
}
