//! The synchronizers (`Semaphore`, `PermitSemaphore`, `CountDownLatch`) and the permit,
//! blocking.

use std::time::Duration;

use super::{call, Blocking, Guard};
use super::{CountDownLatch, Permit, PermitSemaphore, Semaphore};
use crate::error::Result;

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
