//! The tests' view of `relock::testing`, the one throwaway-server harness (tests, benchmarks
//! and examples all start their servers with it): the same server, with panics instead of
//! errors, as tests want.

#![allow(dead_code, unreachable_pub)]

use std::net::TcpStream;
use std::ops::{Deref, DerefMut};

/// A `relock::testing::RedisServer` that panics when it cannot start, restart or answer.
///
/// With `RELOCK_MIRROR` set to the `relock-model` binary, every server a test starts is
/// reached through that binary's conformance mirror (`relock-model mirror`): each command runs
/// on the real server and on relock-model's simulated one, and the test fails at its end when
/// a reply or the keyspace after a command differed (the differences are printed).
pub struct RedisServer(relock::testing::RedisServer, Option<Mirror>);

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
        let server = relock::testing::RedisServer::start_with(&args).expect("start redis-server");
        let mirror =
            std::env::var_os(MIRROR_VARIABLE).map(|program| Mirror::start(&program, &server));
        RedisServer(server, mirror)
    }

    /// The port tests connect to: the mirror's, when there is one.
    pub fn port(&self) -> u16 {
        self.1.as_ref().map_or_else(|| self.0.port(), |m| m.port)
    }

    /// `redis://127.0.0.1:<port>` of [`port`](Self::port).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }

    /// [`relock::testing::RedisServer::command`], through the mirror when there is one.
    pub fn command(&self, args: &[&str]) -> std::io::Result<String> {
        relock::testing::command(self.port(), args)
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

/// The variable that names the `relock-model` binary whose mirror the servers run behind.
pub const MIRROR_VARIABLE: &str = "RELOCK_MIRROR";

/// A `relock-model mirror` process in front of one server, and the file it reports to.
pub struct Mirror {
    port: u16,
    child: std::process::Child,
    report: std::path::PathBuf,
}

impl Mirror {
    fn start(program: &std::ffi::OsStr, server: &relock::testing::RedisServer) -> Mirror {
        use std::io::BufRead;
        let report = std::env::temp_dir().join(format!(
            "relock-mirror-{}-{}.txt",
            std::process::id(),
            server.port()
        ));
        let _ = std::fs::remove_file(&report);
        let mut child = std::process::Command::new(program)
            .args(["mirror", "--real", &server.port().to_string(), "--report"])
            .arg(&report)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start relock-model mirror");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("the mirror's port");
        let port = line.trim().parse().expect("the mirror prints its port");
        Mirror {
            port,
            child,
            report,
        }
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let differences = std::fs::read_to_string(&self.report).unwrap_or_default();
        let _ = std::fs::remove_file(&self.report);
        if !differences.is_empty() && !std::thread::panicking() {
            panic!("the simulated server disagreed with the real one:\n{differences}");
        }
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
