//! What each lock type does beyond the shared invariants: fair queues, spin back-off, read-write
//! rules, fencing tokens and the fenced write, MultiLock, RedLock, reentrancy, waiting and the
//! watchdog.

#[path = "../common/mod.rs"]
mod common;

mod blocking;
mod blocking_election;
mod election;
mod election_campaign;
mod election_chaos;
mod election_history;
mod election_loop;
mod election_watch;
mod fair;
mod fair_leave;
mod fairness;
mod fence;
mod fenced;
mod force_unlock;
mod inspect;
mod latch;
mod leases;
mod lock_delay;
mod multi;
mod non_reentrant;
mod non_reentrant_redisson;
mod permit;
mod redlock;
mod reentrancy;
mod release;
mod rw;
mod semaphore;
mod spin;
mod waiting;
mod watchdog;
