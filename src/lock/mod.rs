//! The lock family on one core.
//!
//! Each lock type is one file that says everything special about it, as its implementation of
//! `kind::LockType` (its keys, holder field, turns, scripts, renewal, wake-up rule and what a
//! shutdown does with it): [`Lock`] (`reentrant`), [`FairLock`] (`fair`), [`SpinLock`]
//! (`spin`), [`FencedLock`] (`fenced`), [`RwLock`] (`rw`). The rest is shared, asks the type
//! and never which type it is, and an acquire goes down through it once:
//!
//! - `handle`: the handle every type wraps (name, client, owner, type), which makes a hold;
//! - `wait`: the wait loop, which asks the type's turns when to try;
//! - `turns`: the plain lock's turns (a `Lock`'s and a `FencedLock`'s) and its claims;
//! - `attempt`: one attempt to take a hold (`kind::Hold`): the in-flight gate, the type's
//!   acquire script, the read-back of a lost reply, the registration;
//! - `guard`: the guard and its `Lost` signal; `release`: releases that count once;
//! - `batch`: several plain locks of one owner taken and released by one script each.
//!
//! Above them, [`MultiLock`] (`multi`) takes several holds of any types as one, in one global
//! order (its plain locks of one client and slot through `batch`). `RedLock`, outside this
//! module (`redlock`), combines one plain lock per master.

mod acquire;
mod api;
mod attempt;
mod batch;
mod fair;
mod fenced;
mod guard;
mod handle;
mod kind;
mod multi;
mod reentrant;
mod release;
mod rw;
mod spin;
mod turns;

pub(crate) use api::combined_api;
// The core that a primitive built on a lock hash (an election) implements a lock type with.
pub use fair::FairLock;
pub(crate) use fenced::read_token;
pub use fenced::{FencedGuard, FencedLock};
pub use guard::LockGuard;
pub use handle::RemainingLease;
pub(crate) use handle::{lock_delay_ms, Handle};
pub(crate) use kind::{Ask, Hold, Holder, Kind, LockType, Turns};
pub use multi::{MultiGuard, MultiLock, Part};
pub use reentrant::Lock;
pub use rw::{ReadLock, RwLock, WriteLock};
pub use spin::SpinLock;
pub(crate) use turns::PlainTurns;
