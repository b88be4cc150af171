//! relock for code that is not async (feature `blocking`): the same types and methods, called
//! from plain threads, as `reqwest::blocking` does for `reqwest`.
//!
//! A [`Client`] runs the async client on a small tokio runtime of its own (one worker thread,
//! for the watchdog, the pub/sub hub and the connections); each call blocks the calling thread
//! until it is done. No tokio appears in the caller's code. Guards release their holds when
//! dropped, on any thread, during a panic's unwinding too, and when `main` returns holding one.
//!
//! Reentrancy is per thread by default, as Redisson's: a thread that takes a lock it holds takes
//! it again, another thread waits. An explicit [`Owner`] (`owned_by`) shares a hold
//! between threads, as in the async API.
//!
//! Called from a thread of a tokio runtime, where blocking would stall the runtime's thread (or
//! deadlock it), a call returns [`Error::InvalidArgument`] at once
//! instead: use the async API there. That includes `tokio::task::spawn_blocking`'s threads,
//! which carry their runtime too (there, call the async API through `Handle::block_on`).
//!
//! ```no_run
//! # fn main() -> relock::Result<()> {
//! let client = relock::blocking::Client::connect("redis://127.0.0.1:6379")?;
//! let guard = client.lock("order:42").lock()?;
//! // ... the critical section, on this thread ...
//! guard.unlock()?;
//! # Ok(()) }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::{ClientStats, Config, Owner, RemainingLease};

/// The runtime a blocking client's async client lives on, shared by its handles and guards.
type Runtime = Arc<Owned>;

/// The runtime itself. The last one to let go of it shuts it down; inside an async runtime
/// (where dropping a runtime would panic) that happens on a thread of its own.
struct Owned(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for Owned {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("taken only when dropped")
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        let runtime = self.0.take();
        if tokio::runtime::Handle::try_current().is_ok() {
            std::thread::spawn(move || drop(runtime));
        }
    }
}

/// Refuses a call from inside an async runtime.
fn outside_async() -> Result<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::invalid(
            "relock::blocking was called from inside an async runtime, where blocking would \
             stall (or deadlock) the runtime's thread: use relock's async API there",
        ));
    }
    Ok(())
}

/// Runs `future` to its end on `runtime`, blocking this thread; refused inside a runtime.
fn block<F: Future>(runtime: &Runtime, future: F) -> Result<F::Output> {
    outside_async()?;
    Ok(runtime.block_on(future))
}

/// [`block`], for a future that gives a `Result`.
fn call<T>(runtime: &Runtime, future: impl Future<Output = Result<T>>) -> Result<T> {
    block(runtime, future)?
}

/// A connection to Redis that hands out locks, for plain threads (see the
/// [module](self)). Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: crate::Client,
    runtime: Runtime,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Client")
            .field("id", &self.inner.id())
            .finish()
    }
}

impl Client {
    /// Connects to the server at `url` with the default [`Config`].
    ///
    /// # Errors
    ///
    /// As [`crate::Client::connect`]; [`Error::InvalidArgument`] inside an async runtime.
    pub fn connect(url: &str) -> Result<Client> {
        Client::new(Config::from_url(url)?)
    }

    /// Connects with `config`, on a runtime of the client's own.
    ///
    /// # Errors
    ///
    /// As [`crate::Client::new`]; [`Error::InvalidArgument`] inside an async runtime.
    pub fn new(config: Config) -> Result<Client> {
        outside_async()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("relock-blocking")
            .enable_all()
            .build()
            .map_err(|e| Error::invalid(format!("cannot start relock's runtime: {e}")))?;
        let runtime = Arc::new(Owned(Some(runtime)));
        // The client is made inside the runtime, so its tasks run there.
        let inner = call(&runtime, crate::Client::new(config))?;
        Ok(Client { inner, runtime })
    }

    fn wrap<T>(&self, inner: T) -> Blocking<T> {
        Blocking {
            inner,
            runtime: self.runtime.clone(),
        }
    }

    /// The reentrant lock `name` (see [`crate::Client::lock`]).
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        self.wrap(self.inner.lock(name))
    }

    /// The fair lock `name` (see [`crate::Client::fair_lock`]).
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        self.wrap(self.inner.fair_lock(name))
    }

    /// The spin lock `name` (see [`crate::Client::spin_lock`]).
    pub fn spin_lock(&self, name: impl Into<String>) -> SpinLock {
        self.wrap(self.inner.spin_lock(name))
    }

    /// The read-write lock `name` (see [`crate::Client::rw_lock`]).
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        self.wrap(self.inner.rw_lock(name))
    }

    /// The fenced lock `name` (see [`crate::Client::fenced_lock`]).
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        self.wrap(self.inner.fenced_lock(name))
    }

    /// A multi-lock over the reentrant locks `names` (see [`crate::Client::multi_lock`]).
    pub fn multi_lock<N: Into<String>>(&self, names: impl IntoIterator<Item = N>) -> MultiLock {
        self.wrap(self.inner.multi_lock(names))
    }

    /// The semaphore `name` (see [`crate::Client::semaphore`]).
    pub fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        self.wrap(self.inner.semaphore(name))
    }

    /// The permit semaphore `name` (see [`crate::Client::permit_semaphore`]).
    pub fn permit_semaphore(&self, name: impl Into<String>) -> PermitSemaphore {
        self.wrap(self.inner.permit_semaphore(name))
    }

    /// The count-down latch `name` (see [`crate::Client::count_down_latch`]).
    pub fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        self.wrap(self.inner.count_down_latch(name))
    }

    /// This client's id, the `<client-uuid>` half of every holder field it writes.
    pub fn id(&self) -> &str {
        self.inner.id()
    }

    /// What the client counts (see [`crate::Client::stats`]).
    pub fn stats(&self) -> ClientStats {
        self.inner.stats()
    }

    /// The async client underneath, for code that has both worlds.
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    /// Releases every lock this client holds and closes it (see [`crate::Client::shutdown`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Client::shutdown`]; [`Error::InvalidArgument`] inside an async runtime.
    pub fn shutdown(&self) -> Result<()> {
        call(&self.runtime, self.inner.shutdown())
    }

    /// Closes the client and leaves its locks held until their leases end (see
    /// [`crate::Client::shutdown_keeping_locks`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Client::shutdown_keeping_locks`]; [`Error::InvalidArgument`] inside an
    /// async runtime.
    pub fn shutdown_keeping_locks(&self) -> Result<()> {
        call(&self.runtime, self.inner.shutdown_keeping_locks())
    }
}

/// A blocking handle: an async one and the runtime it runs on.
#[derive(Clone)]
pub struct Blocking<T> {
    inner: T,
    runtime: Runtime,
}

impl<T: std::fmt::Debug> std::fmt::Debug for Blocking<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<T> Blocking<T> {
    fn wrap<U>(&self, inner: U) -> Blocking<U> {
        Blocking {
            inner,
            runtime: self.runtime.clone(),
        }
    }

    /// The async value underneath.
    pub fn as_async(&self) -> &T {
        &self.inner
    }
}

/// A blocking [`crate::Lock`].
pub type Lock = Blocking<crate::Lock>;
/// A blocking [`crate::FairLock`].
pub type FairLock = Blocking<crate::FairLock>;
/// A blocking [`crate::SpinLock`].
pub type SpinLock = Blocking<crate::SpinLock>;
/// A blocking [`crate::ReadLock`].
pub type ReadLock = Blocking<crate::ReadLock>;
/// A blocking [`crate::WriteLock`].
pub type WriteLock = Blocking<crate::WriteLock>;
/// A blocking [`crate::FencedLock`].
pub type FencedLock = Blocking<crate::FencedLock>;
/// A blocking [`crate::RwLock`].
pub type RwLock = Blocking<crate::RwLock>;
/// A blocking [`crate::MultiLock`].
pub type MultiLock = Blocking<crate::MultiLock>;
/// A blocking [`crate::RedLock`].
pub type RedLock = Blocking<crate::RedLock>;
/// A blocking [`crate::Semaphore`].
pub type Semaphore = Blocking<crate::Semaphore>;
/// A blocking [`crate::PermitSemaphore`].
pub type PermitSemaphore = Blocking<crate::PermitSemaphore>;
/// A blocking [`crate::CountDownLatch`].
pub type CountDownLatch = Blocking<crate::CountDownLatch>;
/// A blocking [`crate::LockGuard`]: dropped (on any thread, or by a panic), it releases its
/// hold in the background.
pub type LockGuard = Guard<crate::LockGuard>;
/// A blocking [`crate::FencedGuard`].
pub type FencedGuard = Guard<crate::FencedGuard>;
/// A blocking [`crate::MultiGuard`].
pub type MultiGuard = Guard<crate::MultiGuard>;
/// A blocking [`crate::RedLockGuard`].
pub type RedLockGuard = Guard<crate::RedLockGuard>;
/// A blocking [`crate::Permit`].
pub type Permit = Guard<crate::Permit>;

/// A blocking guard: an async guard and the runtime its release runs on. Dropped, the async
/// guard's drop releases the hold in the background, as it does anywhere.
pub struct Guard<G> {
    inner: G,
    runtime: Runtime,
}

impl<G: std::fmt::Debug> std::fmt::Debug for Guard<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<G> Guard<G> {
    /// The async guard underneath.
    pub fn as_async(&self) -> &G {
        &self.inner
    }

    /// The async guard, to release or keep from async code.
    pub fn into_async(self) -> G {
        self.inner
    }
}

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

lock_methods!(crate::Lock, crate::LockGuard);
lock_methods!(crate::FairLock, crate::LockGuard);
lock_methods!(crate::SpinLock, crate::LockGuard);
lock_methods!(crate::ReadLock, crate::LockGuard);
lock_methods!(crate::WriteLock, crate::LockGuard);
lock_methods!(crate::FencedLock, crate::FencedGuard);

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

delay_methods!(crate::Lock);
delay_methods!(crate::FairLock);

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

/// What both semaphores share, blocking.
macro_rules! counter_methods {
    ($Async:ty) => {
        impl Blocking<$Async> {
            /// The semaphore's name.
            pub fn name(&self) -> &str {
                self.inner.name()
            }

            /// Sets the permits if the semaphore has none set yet.
            ///
            /// # Errors
            ///
            /// As the async `try_set_permits`.
            pub fn try_set_permits(&self, permits: u64) -> Result<bool> {
                call(&self.runtime, self.inner.try_set_permits(permits))
            }

            /// Adds (or with a negative `delta` removes) permits.
            ///
            /// # Errors
            ///
            /// As the async `add_permits`.
            pub fn add_permits(&self, delta: i64) -> Result<()> {
                call(&self.runtime, self.inner.add_permits(delta))
            }

            /// The permits available now.
            ///
            /// # Errors
            ///
            /// As the async `available_permits`.
            pub fn available_permits(&self) -> Result<i64> {
                call(&self.runtime, self.inner.available_permits())
            }

            /// Deletes the semaphore.
            ///
            /// # Errors
            ///
            /// As the async `delete`.
            pub fn delete(&self) -> Result<bool> {
                call(&self.runtime, self.inner.delete())
            }
        }
    };
}

counter_methods!(crate::Semaphore);
counter_methods!(crate::PermitSemaphore);

impl Semaphore {
    /// Takes every available permit; how many it took.
    ///
    /// # Errors
    ///
    /// As [`crate::Semaphore::drain_permits`].
    pub fn drain_permits(&self) -> Result<i64> {
        call(&self.runtime, self.inner.drain_permits())
    }

    /// Takes `permits`, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`crate::Semaphore::acquire`].
    pub fn acquire(&self, permits: u32) -> Result<()> {
        call(&self.runtime, self.inner.acquire(permits))
    }

    /// Takes `permits` if they are available now.
    ///
    /// # Errors
    ///
    /// As [`crate::Semaphore::try_acquire`].
    pub fn try_acquire(&self, permits: u32) -> Result<bool> {
        call(&self.runtime, self.inner.try_acquire(permits))
    }

    /// Takes `permits`, waiting at most `wait`.
    ///
    /// # Errors
    ///
    /// As [`crate::Semaphore::try_acquire_for`].
    pub fn try_acquire_for(&self, permits: u32, wait: Duration) -> Result<bool> {
        call(&self.runtime, self.inner.try_acquire_for(permits, wait))
    }

    /// Gives back `permits`.
    ///
    /// # Errors
    ///
    /// As [`crate::Semaphore::release`].
    pub fn release(&self, permits: u32) -> Result<()> {
        call(&self.runtime, self.inner.release(permits))
    }
}

impl PermitSemaphore {
    fn permit(&self, inner: crate::Permit) -> Permit {
        Guard {
            inner,
            runtime: self.runtime.clone(),
        }
    }

    /// The permits out now.
    ///
    /// # Errors
    ///
    /// As [`crate::PermitSemaphore::acquired_permits`].
    pub fn acquired_permits(&self) -> Result<u64> {
        call(&self.runtime, self.inner.acquired_permits())
    }

    /// All the permits: available plus out.
    ///
    /// # Errors
    ///
    /// As [`crate::PermitSemaphore::permits`].
    pub fn permits(&self) -> Result<i64> {
        call(&self.runtime, self.inner.permits())
    }

    /// Takes a permit, waiting at most `wait`; with `lease`, not renewed.
    ///
    /// # Errors
    ///
    /// As [`crate::PermitSemaphore::try_acquire_for`].
    pub fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<Permit>> {
        call(&self.runtime, self.inner.try_acquire_for(wait, lease))
            .map(|p| p.map(|p| self.permit(p)))
    }

    /// Takes a permit, waiting as long as it takes; the watchdog renews it.
    ///
    /// # Errors
    ///
    /// As [`crate::PermitSemaphore::acquire`].
    pub fn acquire(&self) -> Result<Permit> {
        call(&self.runtime, self.inner.acquire()).map(|p| self.permit(p))
    }

    /// Takes a permit for `lease`, not renewed.
    ///
    /// # Errors
    ///
    /// As [`crate::PermitSemaphore::acquire_with_lease`].
    pub fn acquire_with_lease(&self, lease: Duration) -> Result<Permit> {
        call(&self.runtime, self.inner.acquire_with_lease(lease)).map(|p| self.permit(p))
    }

    /// Takes a permit if one is available now.
    ///
    /// # Errors
    ///
    /// As [`crate::PermitSemaphore::try_acquire`].
    pub fn try_acquire(&self) -> Result<Option<Permit>> {
        call(&self.runtime, self.inner.try_acquire()).map(|p| p.map(|p| self.permit(p)))
    }

    /// Gives back the permit `id`, whoever took it.
    ///
    /// # Errors
    ///
    /// As [`crate::PermitSemaphore::release_id`].
    pub fn release_id(&self, id: &str) -> Result<bool> {
        call(&self.runtime, self.inner.release_id(id))
    }
}

impl Permit {
    /// The permit's id.
    pub fn id(&self) -> &str {
        self.inner.id()
    }

    /// Whether the permit may be lost (its lease may have run out unrenewed).
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// Gives the permit back, waiting for Redis to confirm.
    ///
    /// # Errors
    ///
    /// As [`crate::Permit::release`].
    pub fn release(self) -> Result<()> {
        let Guard { inner, runtime } = self;
        call(&runtime, inner.release())
    }
}

impl CountDownLatch {
    /// The latch's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Sets the count if the latch has none set.
    ///
    /// # Errors
    ///
    /// As [`crate::CountDownLatch::try_set_count`].
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        call(&self.runtime, self.inner.try_set_count(count))
    }

    /// Counts down by one.
    ///
    /// # Errors
    ///
    /// As [`crate::CountDownLatch::count_down`].
    pub fn count_down(&self) -> Result<()> {
        call(&self.runtime, self.inner.count_down())
    }

    /// The count now.
    ///
    /// # Errors
    ///
    /// As [`crate::CountDownLatch::count`].
    pub fn count(&self) -> Result<u64> {
        call(&self.runtime, self.inner.count())
    }

    /// Deletes the latch (which opens it).
    ///
    /// # Errors
    ///
    /// As [`crate::CountDownLatch::delete`].
    pub fn delete(&self) -> Result<bool> {
        call(&self.runtime, self.inner.delete())
    }

    /// Waits until the count is zero.
    ///
    /// # Errors
    ///
    /// As [`crate::CountDownLatch::wait`].
    pub fn wait(&self) -> Result<()> {
        call(&self.runtime, self.inner.wait())
    }

    /// Waits at most `timeout` for the count to be zero; `true` if it is.
    ///
    /// # Errors
    ///
    /// As [`crate::CountDownLatch::wait_for`].
    pub fn wait_for(&self, timeout: Duration) -> Result<bool> {
        call(&self.runtime, self.inner.wait_for(timeout))
    }
}
