//! The lock family on one core.
//!
//! Each lock type has one home that says everything special about it, as its implementation of
//! `kind::LockType` (its keys, holder field, turns, scripts, renewal, wake-up rule and what a
//! shutdown does with it), and calls its own scripts from there: [`Lock`] (`reentrant`, on the
//! lock hash's scripts in `hash`), [`FairLock`] (`fair/`), [`SpinLock`] (`spin/`, with its
//! [`Backoff`]), [`FencedLock`] (`fenced`), [`RwLock`] (`rw/`). The rest is shared, asks the type
//! and never which type it is, and an acquire goes down through it once:
//!
//! - `handle`: the handle every type wraps (name, client, owner, type), which makes a hold;
//! - `api`: the methods every type has, written once;
//! - `acquire`: the wait loop (`crate::wait`) run over a hold's attempts and its type's turns;
//! - `turns`: the plain lock's turns (a `Lock`'s and a `FencedLock`'s) and a waiter's hand-off
//!   claim (the claim itself is `crate::handoff`'s);
//! - `attempt`: one attempt to take a hold (`kind::Hold`): the in-flight gate, the type's
//!   acquire script, the read-back of a lost reply, the registration;
//! - `guard`: the guard and its `Lost` signal; `release`: releases that count once;
//! - `hash`: the lock hash's scripts (Redisson's `RLock` layout), which every type built on it
//!   shares; `replies`: what the family's scripts answer.
//!
//! Above them, [`MultiLock`] (`multi/`) takes several holds of any types as one, in one global
//! order (its plain locks of one client and slot by one script each, `multi/batch`). `RedLock`,
//! outside this module (`redlock`), combines one plain lock per master.

mod acquire;
mod api;
mod attempt;
mod fair;
mod fenced;
mod guard;
mod handle;
pub(crate) mod hash;
mod kind;
mod multi;
mod reentrant;
mod release;
pub(crate) mod replies;
mod rw;
mod spin;
mod turns;

pub(crate) use api::combined_api;
// The core that a primitive built on the lock family (an election, a non-reentrant lock) makes
// its type with, from its own module.
pub(crate) use api::lock_api;
pub(crate) use fair::Fair;
pub use fair::FairLock;
pub(crate) use fenced::read_token;
pub use fenced::{FencedGuard, FencedLock};
pub use guard::LockGuard;
pub use handle::RemainingLease;
pub(crate) use handle::{lock_delay_ms, Handle};
pub(crate) use kind::{AcquireCall, Ask, Hold, Kind, LockType, ReleaseCall, Turns};
pub use multi::{MultiGuard, MultiLock, Part};
pub use reentrant::Lock;
pub(crate) use reentrant::Reentrant;
pub(crate) use replies::Reentry;
pub use rw::{ReadLock, RwLock, WriteLock};
pub(crate) use spin::Delays;
pub use spin::{Backoff, SpinLock};
pub(crate) use turns::PlainTurns;
