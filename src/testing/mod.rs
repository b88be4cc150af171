//! Throwaway `redis-server` processes for tests, examples and demos (feature `testing`).
//!
//! [`RedisServer::start`] runs the `redis-server` found on `PATH` (or the binary that
//! `RELOCK_REDIS_SERVER` names: see [`server_program`]) on a free loopback port, with no
//! persistence and its own temporary directory, and returns once the server says it is ready to
//! accept connections. Any Redis from 6.0 and any Valkey will do: the harness asks the binary its
//! version once ([`server_version`]) and passes only the options that version has. Dropping the [`RedisServer`] kills the process, waits for it to exit
//! and removes the directory. [`from_env_or_start`] is the usual opening of a program that
//! should run against `REDIS_URL` when it is set and against a server of its own otherwise.
//!
//! Enable it for your tests only:
//!
//! ```toml
//! [dev-dependencies]
//! redis-relock = { version = "0.1", features = ["testing"] }
//! ```
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let server = relock::testing::RedisServer::start()?; // a StartError if it is not installed
//! let client = relock::Client::connect(&server.url()).await?;
//! let guard = client.lock("order:42").lock().await?;
//! guard.unlock().await?;
//! client.shutdown().await?;
//! drop(server); // the process is gone and its files removed
//! # Ok(()) }
//! ```
//!
//! A server can also be killed, restarted empty on its port, and sent raw commands that do not
//! go through relock ([`RedisServer::command`]), which is what fault tests need: relock's own
//! test suite and benchmarks use this harness too.
//!
//! ```
//! let mut server = relock::testing::RedisServer::start()?;
//! assert_eq!(server.command(&["SET", "k", "v"])?, "+OK\r\n");
//! server.kill(); // gone: connections are refused
//! assert!(server.pid().is_none() && server.command(&["PING"]).is_err());
//! server.restart()?; // back on the same port, empty
//! assert_eq!(server.command(&["EXISTS", "k"])?, ":0\r\n");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! It needs `redis-server` installed (Debian and Ubuntu: `apt-get install redis-server`, or
//! `scripts/install-redis.sh` in relock's repository); without it, starting fails with
//! [`StartError::NotInstalled`] rather than a panic. `scripts/servers.sh` in relock's repository
//! fetches other servers (Redis 6.0, 6.2 and 8.2, Valkey 9.1) for `RELOCK_REDIS_SERVER`.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

mod program;

pub use program::{server_program, server_version, ServerVersion, PROGRAM_VARIABLE};

/// How long a server has to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Ports tried before giving up, when another process takes the free port first.
const PORT_ATTEMPTS: usize = 20;

/// How long [`RedisServer::restart`] keeps trying while the port is still being released.
const RESTART_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` child process on a free loopback port, killed when it drops.
///
/// It listens on `127.0.0.1` only, saves nothing (no RDB snapshots, no AOF), allows `DEBUG`
/// from loopback connections (for `DEBUG SLEEP` and the like in fault tests), and keeps its
/// files in a temporary directory of its own that is removed on drop.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    /// `None` once [`kill`](Self::kill)ed.
    child: Option<Child>,
    args: Vec<String>,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts a server and waits until it accepts connections.
    ///
    /// It blocks the calling thread for that wait, a few milliseconds as a rule (at most
    /// 10 s), which is fine at the start of a test or a `main`, async or not.
    ///
    /// # Errors
    ///
    /// [`StartError::NotInstalled`] when there is no `redis-server` on `PATH`;
    /// [`StartError::Failed`] when it exits or stays silent instead of becoming ready;
    /// [`StartError::Io`] when the process or its directory cannot be created.
    pub fn start() -> Result<RedisServer, StartError> {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments, such as
    /// `["--maxmemory-policy", "noeviction"]`, given after relock's own.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_with(args: &[&str]) -> Result<RedisServer, StartError> {
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            let dir = work_dir(port)?;
            let failure = match spawn(port, &dir, args) {
                Ok(child) => {
                    let args = args.iter().map(|arg| arg.to_string()).collect();
                    let child = Some(child);
                    return Ok(RedisServer {
                        port,
                        child,
                        args,
                        dir,
                    });
                }
                Err(failure) => failure,
            };
            let _ = std::fs::remove_dir_all(&dir);
            match failure {
                Spawn::PortTaken(log) => last = Some(log),
                Spawn::Error(error) => return Err(error),
            }
        }
        Err(StartError::Failed {
            reason: format!(
                "no free port after {PORT_ATTEMPTS} tries; last said: {}",
                last.unwrap_or_default()
            ),
        })
    }

    /// `redis://127.0.0.1:<port>`, for [`Client::connect`](crate::Client::connect).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The loopback port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id while it runs; `None` after [`kill`](Self::kill).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server (`SIGKILL`, as a crash would) and waits for it to exit. Its port and
    /// directory stay reserved for [`restart`](Self::restart).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if it runs, and starts it again on the same port with the same
    /// arguments and directory: empty by default (nothing is saved), or with what its AOF kept
    /// when it was started with `--appendonly yes`. Retries for up to 10 s while the old
    /// process's port is being released.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start); [`StartError::Failed`] when the port stays taken.
    pub fn restart(&mut self) -> Result<(), StartError> {
        self.kill();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let deadline = std::time::Instant::now() + RESTART_TIMEOUT;
        loop {
            match spawn(self.port, &self.dir, &args) {
                Ok(child) => {
                    self.child = Some(child);
                    return Ok(());
                }
                Err(Spawn::PortTaken(log)) if std::time::Instant::now() < deadline => {
                    let _ = log;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(Spawn::PortTaken(log)) => {
                    let reason = format!("port {} still taken: {log}", self.port);
                    return Err(StartError::Failed { reason });
                }
                Err(Spawn::Error(error)) => return Err(error),
            }
        }
    }

    /// Sends one command to the server over a fresh connection and returns its raw RESP reply
    /// (`+OK\r\n`, `:1\r\n`, `-ERR ...\r\n`), bypassing relock: for checks of what Redis
    /// holds that must not go through the code under test.
    ///
    /// # Errors
    ///
    /// When the connection fails (the server was killed, or is frozen for longer than 10 s).
    pub fn command(&self, args: &[&str]) -> io::Result<String> {
        command(self.port, args)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends one command over a fresh connection to the server on the loopback `port` (any Redis
/// server: a cluster node or a sentinel too) and returns its raw RESP reply, as
/// [`RedisServer::command`] does.
///
/// # Errors
///
/// When the connection fails or no whole reply comes within 10 s.
pub fn command(port: u16, args: &[&str]) -> io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    command_on(&mut stream, args)
}

/// Sends one command on an open connection and reads one whole RESP reply, returned raw.
///
/// # Errors
///
/// When writing or reading fails, or the connection closes before a whole reply came.
pub fn command_on(stream: &mut TcpStream, args: &[&str]) -> io::Result<String> {
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{}\r\n", arg.len(), arg));
    }
    stream.write_all(request.as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !whole_reply(&reply) {
        // A signal (a child process stopped or resumed: SIGCHLD) interrupts a read on a socket
        // with a read timeout even under SA_RESTART: read again.
        let n = match stream.read(&mut buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            read => read?,
        };
        if n == 0 {
            let why = "the connection closed before a whole reply";
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, why));
        }
        reply.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&reply).into_owned())
}

/// Whether `reply` holds one whole RESP value.
fn whole_reply(reply: &[u8]) -> bool {
    fn value(buf: &[u8], at: usize) -> Option<usize> {
        let end = buf.get(at..)?.windows(2).position(|w| w == b"\r\n")? + at;
        let line = std::str::from_utf8(&buf[at + 1..end]).ok()?;
        match buf.get(at)? {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' => Some(end + 2),
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

/// The Redis URL a program should use: `REDIS_URL` when it is set, else the URL of a throwaway
/// server started here.
///
/// Returns that server too (`None` with `REDIS_URL`): keep it alive for as long as the URL is in
/// use, as dropping it kills the process.
///
/// # Errors
///
/// As [`RedisServer::start`], when `REDIS_URL` is not set.
pub fn from_env_or_start() -> Result<(Option<RedisServer>, String), StartError> {
    match std::env::var("REDIS_URL") {
        Ok(url) => Ok((None, url)),
        Err(_) => {
            let server = RedisServer::start()?;
            let url = server.url();
            Ok((Some(server), url))
        }
    }
}

/// Why a [`RedisServer`] could not be started. Its `Debug` form is its message, so a `main`
/// that returns it says what to do.
#[non_exhaustive]
pub enum StartError {
    /// There is no `redis-server` on `PATH` (or no binary where `RELOCK_REDIS_SERVER` says).
    NotInstalled,
    /// The server exited, or did not say it was ready in time.
    Failed {
        /// What happened, with the server's last log line when there is one.
        reason: String,
    },
    /// The process or its temporary directory could not be created.
    Io(io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::NotInstalled if std::env::var_os(PROGRAM_VARIABLE).is_some() => write!(
                f,
                "{PROGRAM_VARIABLE} names {:?}, which is not there: point it at a redis-server \
                 or valkey-server binary (scripts/servers.sh prints where it put them), or unset it",
                server_program()
            ),
            StartError::NotInstalled => write!(
                f,
                "redis-server is not installed (not found on PATH): install it, e.g. \
                 `sudo apt-get install redis-server` on Debian or Ubuntu, or run \
                 scripts/install-redis.sh from relock's repository"
            ),
            StartError::Failed { reason } => write!(f, "redis-server did not start: {reason}"),
            StartError::Io(error) => write!(f, "could not start redis-server: {error}"),
        }
    }
}

impl fmt::Debug for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Io(error) => Some(error),
            _ => None,
        }
    }
}

enum Spawn {
    /// It exited saying its port is in use: try another one.
    PortTaken(String),
    Error(StartError),
}

fn free_port() -> Result<u16, StartError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(StartError::Io)
}

/// A fresh directory for one server's files.
fn work_dir(port: u16) -> Result<PathBuf, StartError> {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let name = format!("relock-testing-{}-{port}-{n}", std::process::id());
    let dir = std::env::temp_dir().join(name);
    std::fs::create_dir_all(&dir).map_err(StartError::Io)?;
    Ok(dir)
}

/// Starts `redis-server` logging to a pipe, and waits for its "Ready to accept connections"
/// line rather than polling the port.
fn spawn(port: u16, dir: &std::path::Path, args: &[&str]) -> Result<Child, Spawn> {
    let found = server_version().map_err(Spawn::Error)?;
    let mut child = Command::new(server_program())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--dir")
        .arg(dir)
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .args(program::version_options(&found))
        .args(["--logfile", "", "--loglevel", "notice"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|error| {
            Spawn::Error(match error.kind() {
                io::ErrorKind::NotFound => StartError::NotInstalled,
                _ => StartError::Io(error),
            })
        })?;
    let stdout = child.stdout.take().expect("stdout is piped");
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::spawn(move || watch_log(stdout, ready_tx));
    let outcome = ready_rx.recv_timeout(READY_TIMEOUT);
    if let Ok(Ok(())) = outcome {
        return Ok(child);
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(match outcome {
        Ok(Err(log)) if log.iter().any(|l| l.contains("Address already in use")) => {
            Spawn::PortTaken(log.last().cloned().unwrap_or_default())
        }
        Ok(Err(log)) => Spawn::Error(StartError::Failed {
            reason: match log.last() {
                Some(line) => format!("it exited saying: {line}"),
                None => "it exited without a word".to_owned(),
            },
        }),
        _ => Spawn::Error(StartError::Failed {
            reason: format!("not ready after {} s", READY_TIMEOUT.as_secs()),
        }),
    })
}

/// Reads the server's log until it ends: sends `Ok` at the ready line, or the lines seen if the
/// log ends first (the server exited). After the ready line it keeps reading, so a full pipe
/// never blocks the server.
fn watch_log(stdout: ChildStdout, ready: mpsc::Sender<Result<(), Vec<String>>>) {
    let mut log = Vec::new();
    let mut waiting = true;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if waiting && line.contains("Ready to accept connections") {
            let _ = ready.send(Ok(()));
            waiting = false;
        } else if waiting && !line.trim().is_empty() {
            log.push(line);
        }
    }
    if waiting {
        let _ = ready.send(Err(log));
    }
}

/// The source of every Lua script relock sends, as the client composes it from `lua/`: for tests
/// that run a script directly (`EVAL`) or look for it by its SHA1 in `EVALSHA` requests.
pub use crate::scripts::catalogue as scripts;
