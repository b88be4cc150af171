//! The lock family on one core.
//!
//! Each lock type is a small file that says what is special about it: [`Lock`] (`reentrant`),
//! [`FairLock`] (`fair`), [`SpinLock`] (`spin`). The rest is shared, and an acquire goes down
//! through it once:
//!
//! - `handle`: the handle every type wraps (name, client, owner), which makes a hold;
//! - `wait`: the wait loop, which asks the type's turns when to try;
//! - `turns` (the plain lock's), `fair` and `spin`: how waiters take turns;
//! - `hold`: what a hold is; `attempt`: one attempt to take it: the in-flight gate, the type's
//!   acquire script (picked by `kind`), the read-back of a lost reply, the registration;
//! - `guard`: the guard and its `Lost` signal; `release`: releases that count once.

mod api;
mod attempt;
mod fair;
mod guard;
mod handle;
mod hold;
mod kind;
mod reentrant;
mod release;
mod spin;
mod turns;
mod wait;

pub use fair::FairLock;
pub use guard::{LockGuard, Lost};
pub use handle::RemainingLease;
pub use reentrant::Lock;
pub use spin::SpinLock;
