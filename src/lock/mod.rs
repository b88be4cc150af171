//! The lock family. One file per lock type; each builds on the client's shared parts (scripts,
//! pub/sub hub, watchdog).

mod reentrant;

pub use reentrant::{Lock, LockGuard, Lost, RemainingLease};
