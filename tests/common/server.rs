//! Real `redis-server` processes on free loopback ports, killed when dropped.
//!
//! Shared by the tests through `tests/common/mod.rs`. The examples use `relock::testing`, which
//! starts a server the same way for users' own tests.

#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One `redis-server` child process, with a working directory of its own (for `dump.rdb` and
/// the like) that is removed when it drops.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    extra: Vec<String>,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts a server with no persistence and `DEBUG` allowed, on a free loopback port.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `--option value` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        for _ in 0..20 {
            let port = free_port();
            let dir = work_dir(port);
            if let Some(child) = spawn(port, &dir, &extra) {
                return RedisServer {
                    port,
                    child: Some(child),
                    extra,
                    dir,
                };
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        panic!("could not start redis-server: is it installed? (apt-get install redis-server)");
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Kills it (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port (after [`kill`](Self::kill)), empty.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(child) = spawn(self.port, &self.dir, &self.extra) {
                self.child = Some(child);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("could not restart redis-server on port {}", self.port);
    }

    /// Sends one command and returns the raw RESP reply, for checks that must not go through
    /// the code under test.
    pub fn cmd(&self, args: &[&str]) -> String {
        raw_command(self.port, args).expect("redis command failed")
    }
}

/// The Redis URL to use: `REDIS_URL` when it is set, else a throwaway server started here.
///
/// Returns the server (`None` with `REDIS_URL`) and the URL. Keep the server alive for as long
/// as the URL is in use: dropping it kills the process.
pub fn from_env_or_start() -> (Option<RedisServer>, String) {
    match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = RedisServer::start();
            let url = server.url();
            (Some(server), url)
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// A fresh directory for one server's files.
fn work_dir(port: u16) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("relock-redis-{}-{port}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a server directory");
    dir
}

fn spawn(port: u16, dir: &Path, extra: &[String]) -> Option<Child> {
    let mut child = Command::new("redis-server")
        .args(["--port", &port.to_string()])
        .arg("--dir")
        .arg(dir)
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--enable-debug-command", "yes", "--protected-mode", "no"])
        .args(["--loglevel", "warning"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return None; // exited: most likely the port was taken meanwhile
        }
        // The server that answers must be this child: another test's server that took the port
        // first would answer too, until this child gives up binding and exits.
        let pid = format!("process_id:{}\r", child.id());
        if raw_command(port, &["INFO", "server"]).is_ok_and(|r| r.contains(&pid)) {
            return Some(child);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// Sends one RESP command over a fresh connection and reads one reply (good enough for the
/// short replies tests look at).
pub fn raw_command(port: u16, args: &[&str]) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    command_on(&mut stream, args)
}

/// Sends one RESP command on an open connection and reads one reply.
pub fn command_on(stream: &mut TcpStream, args: &[&str]) -> std::io::Result<String> {
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{}\r\n", arg.len(), arg));
    }
    stream.write_all(request.as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
        if complete(&reply) {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Whether `reply` holds one whole RESP value.
fn complete(reply: &[u8]) -> bool {
    fn value(buf: &[u8], at: usize) -> Option<usize> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        let line = std::str::from_utf8(&buf[at + 1..end]).ok()?;
        match buf.get(at)? {
            b'+' | b'-' | b':' => Some(end + 2),
            b'$' => {
                let len: i64 = line.parse().ok()?;
                if len < 0 {
                    return Some(end + 2);
                }
                let stop = end + 2 + len as usize + 2;
                (buf.len() >= stop).then_some(stop)
            }
            b'*' => {
                let len: i64 = line.parse().ok()?;
                let mut next = end + 2;
                for _ in 0..len.max(0) {
                    next = value(buf, next)?;
                }
                Some(next)
            }
            _ => None,
        }
    }
    !reply.is_empty() && value(reply, 0).is_some()
}
