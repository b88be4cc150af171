//! relock's protocol in a model checker that runs relock's own Lua scripts.
//!
//! - [`server`]: a simulated Redis server (Lua 5.1, the commands the scripts use, a logical
//!   clock, pub/sub counts), plain data that a model state carries.
//! - [`mirror`]: a RESP proxy in front of a real server that runs every command on the
//!   simulated server too and records where the two disagree: the conformance check.
//!
//! `docs/model.md` in relock's repository says what is modelled and how to run the checks.

pub mod mirror;
pub mod model;
pub mod resp;
pub mod server;
