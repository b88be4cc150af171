//! Every Lua script on a real server, branch by branch, and relock's scripts interleaved with
//! Redisson's on the same locks.

#[path = "../common/mod.rs"]
mod common;

mod delay_scripts;
mod fair_redisson_queue;
mod fair_scripts;
mod fixture;
mod functions;
mod multi_scripts;
mod redisson_compat;
mod redisson_sync;
mod reentry_scripts;
mod reload;
mod rw_scripts;
mod scripts;
mod synchronizer_scripts;
mod synchronizers_compat;
mod write_after_error;
