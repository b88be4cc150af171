//! The public surface: bad input as typed errors, error messages, URLs, the testing harness, a
//! smoke run, what a waiting future costs, and the servers relock refuses.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod bounds;
mod errors;
mod examples;
mod footprint;
mod metrics;
mod smoke;
mod testing_server;
mod unsupported;
mod urls;
