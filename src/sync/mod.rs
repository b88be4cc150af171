//! Redisson's synchronizers: the [`Semaphore`], the [`PermitSemaphore`] and the
//! [`CountDownLatch`], each a counter in Redis (what they share is in `counter`), waiting on
//! their channel through `wait::OnChannel`.

mod counter;
mod latch;
mod permit;
mod semaphore;

pub use latch::CountDownLatch;
pub use permit::{Permit, PermitSemaphore};
pub use semaphore::Semaphore;
