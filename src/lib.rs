#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod background;
#[cfg(feature = "blocking")]
#[cfg_attr(docsrs, doc(cfg(feature = "blocking")))]
pub mod blocking;
mod client;
mod config;
mod connection;
mod election;
mod error;
mod fence;
mod handoff;
pub mod inspect;
mod lock;
mod meter;
mod names;
mod non_reentrant;
mod owner;
mod primitive;
mod pubsub;
mod redis_error;
mod redlock;
mod registry;
mod scripts;
mod server;
mod shared;
mod sync;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod wait;
mod watchdog;

pub use client::Client;
pub use config::Config;
pub use election::{
    Candidate, Change, Cursor, Election, Leader, Leadership, Role, Term, TermContext, TermEnd,
    Vacancy, Watch,
};
pub use error::{Error, Result};
pub use fence::Fence;
pub use lock::{
    Backoff, FairLock, FencedGuard, FencedLock, Lock, LockGuard, MultiGuard, MultiLock, Part,
    ReadLock, RemainingLease, RwLock, SpinLock, WriteLock,
};
pub use meter::stats::{ClientStats, Evalsha, ScriptCalls};
pub use non_reentrant::{NonReentrantFairLock, NonReentrantLock};
pub use owner::Owner;
pub use redlock::{RedLock, RedLockGuard};
pub use scripts::library_name;
pub use sync::{CountDownLatch, Permit, PermitSemaphore, Semaphore};
pub use wait::Lost;

/// The Redis client relock is built on, re-exported so [`Client::redis`] can be used without
/// adding a second, possibly different, version of it.
pub use fred;
