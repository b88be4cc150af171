//! relock for code that is not async (feature `blocking`): the same types and methods, called
//! from plain threads, as `reqwest::blocking` does for `reqwest`.
//!
//! A [`Client`] runs the async client on a small tokio runtime of its own (one worker thread,
//! for the watchdog, the pub/sub hub and the connections); each call blocks the calling thread
//! until it is done. No tokio appears in the caller's code. Guards release their holds when
//! dropped, on any thread, during a panic's unwinding too, and when `main` returns holding one.
//!
//! Reentrancy is per thread by default, as Redisson's: a thread that takes a lock it holds takes
//! it again, another thread waits. An explicit [`Owner`](crate::Owner) (`owned_by`) shares a hold
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
//!
#![doc = include_str!("../../docs/blocking.md")]

use std::future::Future;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::{ClientStats, Config};

mod election;
mod leading;
pub use election::Watch;
pub use leading::{Leadership, TermContext};
mod locks;
// The lock types the primitives' table lists, each a blocking type (`locks::lock_types`).
pub use locks::*;
mod sync;

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

    /// The read-write lock `name` (see [`crate::Client::rw_lock`]).
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        self.wrap(self.inner.rw_lock(name))
    }

    /// The leader election `name` (see [`crate::Client::election`]).
    pub fn election(&self, name: impl Into<String>) -> Election {
        self.wrap(self.inner.election(name))
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
/// A blocking [`crate::Election`].
pub type Election = Blocking<crate::Election>;
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
/// A blocking [`crate::Term`]: dropped (on any thread, or by a panic), it gives the term back
/// in the background.
pub type Term = Guard<crate::Term>;

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
