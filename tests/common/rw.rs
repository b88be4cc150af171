//! Shared by the read-write lock and multi-lock tests: holds of an `RwLock`'s sides by owners of
//! their own, and acquires dropped at a random moment.

#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::time::Duration;

use relock::{Client, LockGuard, MultiGuard, MultiLock, Owner, Result, RwLock};

use super::family::{AnyGuard, AnyLock};

/// The write side of `rw` when `write`, else its read side, as one handle type.
pub fn side(rw: &RwLock, write: bool) -> AnyLock {
    if write {
        AnyLock::Write(rw.write())
    } else {
        AnyLock::Read(rw.read())
    }
}

/// A hold of read-write lock `name` on `client` (its write side when `write`, else its read
/// side) by an owner of its own, not the calling task: with a fixed `lease`, or renewed by the
/// watchdog with `None`.
pub async fn hold(client: &Client, name: &str, write: bool, lease: Option<Duration>) -> LockGuard {
    let (rw, owner) = (client.rw_lock(name), Owner::new());
    match (write, lease) {
        (true, Some(lease)) => rw.write().owned_by(owner).lock_with_lease(lease).await,
        (true, None) => rw.write().owned_by(owner).lock().await,
        (false, Some(lease)) => rw.read().owned_by(owner).lock_with_lease(lease).await,
        (false, None) => rw.read().owned_by(owner).lock().await,
    }
    .unwrap()
}

/// [`hold`] of the read side.
pub async fn read_hold(client: &Client, name: &str, lease: Option<Duration>) -> LockGuard {
    hold(client, name, false, lease).await
}

/// [`hold`] of the write side.
pub async fn write_hold(client: &Client, name: &str, lease: Option<Duration>) -> LockGuard {
    hold(client, name, true, lease).await
}

/// A lock the cancellation tests take and drop: either side of a read-write lock, or a
/// multi-lock.
pub trait Acquire: Send + Sync + 'static {
    /// What a won acquire returns.
    type Guard: Send;
    /// `lock()`: waits as long as it takes.
    fn lock(&self) -> impl Future<Output = Result<Self::Guard>> + Send;
    /// `try_lock_for(wait)` under the watchdog.
    fn try_lock_for(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Self::Guard>>> + Send;
    /// Gives a won hold back.
    fn release(guard: Self::Guard) -> impl Future<Output = Result<()>> + Send;
}

/// Implements [`Acquire`] for `$lock`, whose methods are named as a `Lock`'s, with guards `$guard`.
macro_rules! acquire {
    ($lock:ty, $guard:ty) => {
        impl Acquire for $lock {
            type Guard = $guard;

            fn lock(&self) -> impl Future<Output = Result<$guard>> + Send {
                <$lock>::lock(self)
            }

            fn try_lock_for(
                &self,
                wait: Duration,
            ) -> impl Future<Output = Result<Option<$guard>>> + Send {
                <$lock>::try_lock_for(self, wait, None)
            }

            fn release(guard: $guard) -> impl Future<Output = Result<()>> + Send {
                guard.unlock()
            }
        }
    };
}

acquire!(AnyLock, AnyGuard);
acquire!(MultiLock, MultiGuard);

/// Takes `lock` (by `lock()` when `plain`, else by a 30 s `try_lock_for`) but drops the attempt
/// after `after`; an attempt that wins in time gives its hold back at once. 1 when it won, 0
/// when it was dropped.
pub async fn won_before_dropped<L: Acquire>(lock: &L, plain: bool, after: Duration) -> usize {
    let attempt = async {
        if plain {
            lock.lock().await.map(Some)
        } else {
            lock.try_lock_for(Duration::from_secs(30)).await
        }
    };
    match tokio::time::timeout(after, attempt).await {
        Ok(Ok(Some(guard))) => {
            L::release(guard).await.unwrap();
            1
        }
        Ok(Ok(None)) => panic!("a 30 s wait gave up within {after:?}"),
        Ok(Err(e)) => panic!("acquire failed: {e}"),
        Err(_) => 0,
    }
}

/// Runs each `(lock, plain, after)` attempt of [`won_before_dropped`] at once, each on a task of
/// its own; how many won.
pub async fn dropped_attempts<L: Acquire>(attempts: Vec<(L, bool, Duration)>) -> usize {
    let tasks: Vec<_> = attempts
        .into_iter()
        .map(|(lock, plain, after)| {
            tokio::spawn(async move { won_before_dropped(&lock, plain, after).await })
        })
        .collect();
    let mut won = 0;
    for task in tasks {
        won += task.await.unwrap();
    }
    won
}
