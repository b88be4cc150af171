//! The family invariants every lock type keeps (exclusion, leases, renewal, wake-ups, faults), and
//! the fault cases specific to the plain lock: killed and paused holders, cancelled acquires, lost
//! leases, dropped guards.

#[path = "../common/mod.rs"]
mod common;

mod cancellation;
mod drop_release;
mod family;
mod faults;
mod lost;
mod mutual_exclusion;
mod relapse;
mod stalled_release;
mod synchronizers;
