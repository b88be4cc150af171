//! The tests' view of `relock::testing`, the one throwaway-server harness (tests, benchmarks
//! and examples all start their servers with it): the same server, with panics instead of
//! errors, as tests want.

#![allow(dead_code, unreachable_pub)]

use std::net::TcpStream;
use std::ops::{Deref, DerefMut};

/// A `relock::testing::RedisServer` that panics when it cannot start, restart or answer.
pub struct RedisServer(relock::testing::RedisServer);

impl RedisServer {
    /// Starts a server with no persistence and `DEBUG` allowed, on a free loopback port.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `--option value` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let args: Vec<&str> = ["--protected-mode", "no"]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        RedisServer(relock::testing::RedisServer::start_with(&args).expect("start redis-server"))
    }

    /// Starts it again on the same port (after [`kill`](relock::testing::RedisServer::kill)),
    /// empty unless it was started with `--appendonly yes` (it then reloads its AOF).
    pub fn restart(&mut self) {
        self.0.restart().expect("restart redis-server");
    }

    /// Sends one command and returns the raw RESP reply, for checks that must not go through
    /// the code under test. A command that closes its own connection (`CLIENT KILL TYPE
    /// normal`) gives an empty reply.
    pub fn cmd(&self, args: &[&str]) -> String {
        raw_command(self.port(), args).expect("redis command failed")
    }
}

impl Deref for RedisServer {
    type Target = relock::testing::RedisServer;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for RedisServer {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// [`relock::testing::command`], where a connection closed before the reply (by the command
/// itself) gives an empty reply.
pub fn raw_command(port: u16, args: &[&str]) -> std::io::Result<String> {
    empty_if_closed(relock::testing::command(port, args))
}

/// [`relock::testing::command_on`], where a connection closed before the reply gives an empty
/// reply.
pub fn command_on(stream: &mut TcpStream, args: &[&str]) -> std::io::Result<String> {
    empty_if_closed(relock::testing::command_on(stream, args))
}

fn empty_if_closed(reply: std::io::Result<String>) -> std::io::Result<String> {
    match reply {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(String::new()),
        other => other,
    }
}
