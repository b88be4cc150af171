//! The conformance mirror: a RESP proxy in front of a real Redis server that runs every
//! command on the simulated [`Server`] too, and records each place where the two disagree.
//!
//! `relock-model mirror --real <port> [--report <file>]` listens on a free loopback port and
//! prints it on its first line. Each client connection gets its own connection to the real
//! server. A command that changes or reads the keyspace goes to the real server under one lock,
//! so the mirror sees the order the real server ran them in; the simulated server then runs it
//! at each millisecond the real one may have run it at (between the machine's clock read before
//! sending and after the reply: the server on loopback reads the same clock), with the clock
//! moving on by a millisecond at any command of a script or not at all (Redis 7.0 freezes only
//! its expiry check while a script runs), and agrees when at one of them both the reply and
//! the whole keyspace are the real
//! server's: every key, its type, its value (hash fields in their order, sorted set members
//! with their scores, a stream's entries and last ID) and its expiry to the millisecond
//! (`PEXPIRETIME`, Redis 7.0 and later). Keys due to expire between the command and the read
//! of the real keyspace are left out on both sides. Error replies are compared without the
//! `script: <sha>, on @user_script:<line>.` that Redis 7 adds to a script's raised error (a
//! function's: `script: <name>, on @user_function:<line>.`), and `FUNCTION LIST` without its
//! order (Redis lists libraries and functions in its hash tables' order).
//!
//! Commands the simulated server does not model (`CLIENT`, `CONFIG`, `INFO`, `DEBUG`,
//! `FUNCTION HELP | DUMP`, …) go to the real server alone; after a `FUNCTION RESTORE`, which
//! goes there alone too, the simulated server loads the libraries the real one then has. A
//! command the real server refused to run, for its user (`NOPERM`, `NOAUTH`) or because it is
//! over `maxmemory` (`OOM`: the simulated server has no memory limit), is not run on the
//! simulated one. When the real server restarted (its `run_id` changed: the mirror's own link
//! to it closed), so does the simulated one: keeping its keys and libraries when the real one
//! has an AOF (`appendonly yes`), empty otherwise. Subscriptions go through as they are; the
//! simulated server counts each connection's channels, so a `PUBLISH` counts the same
//! receivers on both (pattern subscriptions are not counted); an unsubscribe on a connection
//! that subscribed to nothing goes to the real server alone.
//!
//! Each difference is appended to the report file (and printed to stderr) as a block that
//! names the command, both replies and the keys that differ; an empty report is conformance.

use std::collections::BTreeSet;
use std::io::{self, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::resp::{self, command_args, encode_command};
use crate::server::{Reply, Server, Version};

mod compare;

use compare::{compare, real_dump, report};

/// Commands that go to the real server alone.
const PASSTHROUGH: &[&str] = &[
    "hello",
    "client",
    "config",
    "info",
    "debug",
    "cluster",
    "sentinel",
    "replicaof",
    "slaveof",
    "wait",
    "pubsub",
    "command",
    "memory",
    "object",
    "latency",
    "slowlog",
    "role",
    "readonly",
    "readwrite",
    "auth",
    "shutdown",
    "monitor",
    "save",
    "bgsave",
    "bgrewriteaof",
    "lastsave",
    "acl",
    "module",
    "quit",
    "reset",
    "select",
    "ping",
    "echo",
    "scan",
    "xinfo",
    "time",
    "dump",
];

/// `FUNCTION` subcommands that go to the real server alone (`RESTORE` is followed by a copy of
/// the real server's libraries).
const FUNCTION_PASSTHROUGH: &[&str] = &["help", "dump", "restore"];

/// Whether `args` go to the real server alone.
fn passthrough(name: &str, args: &[Vec<u8>]) -> bool {
    PASSTHROUGH.contains(&name)
        || name == "function"
            && args.get(1).is_some_and(|sub| {
                let sub = String::from_utf8_lossy(sub).to_lowercase();
                FUNCTION_PASSTHROUGH.contains(&sub.as_str())
            })
}

/// How long to wait for the real server to confirm a subscription change.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves the mirror: `--real <port>` (required), `--report <file>`.
pub fn main(args: &[String]) {
    let mut real = None;
    let mut report = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--real" => real = it.next().and_then(|p| p.parse::<u16>().ok()),
            "--report" => report = it.next().map(PathBuf::from),
            other => {
                eprintln!("relock-model mirror: unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let Some(real) = real else {
        eprintln!("usage: relock-model mirror --real <port> [--report <file>]");
        std::process::exit(2);
    };
    if let Err(e) = serve(real, report) {
        eprintln!("relock-model mirror: {e}");
        std::process::exit(1);
    }
}

fn serve(real: u16, report: Option<PathBuf>) -> io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("{}", listener.local_addr()?.port());
    io::stdout().flush()?;
    let shared = Arc::new(Shared {
        real,
        report,
        simulator: Simulator::start(),
        state: Mutex::new(State {
            server: Server::new(Version::Redis7),
            control: None,
            run_id: None,
            differences: 0,
        }),
    });
    for client in listener.incoming() {
        let client = client?;
        let shared = Arc::clone(&shared);
        std::thread::spawn(move || {
            let _ = connection(&shared, client);
        });
    }
    Ok(())
}

struct Shared {
    real: u16,
    report: Option<PathBuf>,
    simulator: Simulator,
    state: Mutex<State>,
}

/// The one thread that runs the simulated server's commands, whichever connection sent them:
/// Lua interpreters are one per thread, and a function library's top-level locals persist
/// from one `FCALL` to the next whatever connection sends it, as on one real server.
struct Simulator {
    jobs: Mutex<mpsc::Sender<Job>>,
}

type Job = Box<dyn FnOnce() + Send>;

impl Simulator {
    fn start() -> Simulator {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            for job in queue {
                // A job that panicked drops its reply channel: its connection sees an error.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
        });
        Simulator {
            jobs: Mutex::new(jobs),
        }
    }

    /// Runs `f` on the simulator's thread and returns what it returned.
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
        let (done, result) = mpsc::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(f());
        });
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job)
            .map_err(|_| io::Error::other("the simulator's thread is gone"))?;
        result
            .recv()
            .map_err(|_| io::Error::other("the simulated server panicked"))
    }

    /// Runs `f` on `state`'s server, on the simulator's thread.
    fn with_server<T: Send + 'static>(
        &self,
        state: &mut State,
        f: impl FnOnce(&mut Server) -> T + Send + 'static,
    ) -> io::Result<T> {
        let mut server = std::mem::replace(&mut state.server, Server::new(Version::Redis7));
        let (server, out) = self.run(move || {
            let out = f(&mut server);
            (server, out)
        })?;
        state.server = server;
        Ok(out)
    }
}

struct State {
    server: Server,
    /// The mirror's own connection to the real server: `TIME` and the keyspace reads.
    control: Option<Link>,
    /// The real server's `run_id` when the control link was opened: another one is a restart.
    run_id: Option<String>,
    differences: usize,
}

/// A connection to the real server, for one command at a time.
struct Link {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Link {
    fn open(port: u16) -> io::Result<Link> {
        let writer = TcpStream::connect(("127.0.0.1", port))?;
        writer.set_nodelay(true)?;
        Ok(Link {
            reader: BufReader::new(writer.try_clone()?),
            writer,
        })
    }

    fn call(&mut self, args: &[Vec<u8>]) -> io::Result<Reply> {
        self.writer.write_all(&encode_command(args))?;
        resp::read(&mut self.reader)?.ok_or_else(|| io::ErrorKind::UnexpectedEof.into())
    }
}

impl State {
    /// The real server's keyspace, read on the control link. A link the server closed (a
    /// `CLIENT KILL`, a restart) is opened again; if the server restarted meanwhile, the
    /// simulated one restarts too.
    fn real_keyspace(&mut self, port: u16) -> io::Result<compare::Dump> {
        if let Some(link) = self.control.as_mut() {
            match real_dump(link) {
                Ok(dump) => return Ok(dump),
                Err(_) => self.control = None,
            }
        }
        let mut link = Link::open(port)?;
        let run_id = run_id(&mut link)?;
        if self.run_id.as_ref().is_some_and(|known| *known != run_id) {
            let appendonly =
                link.call(&[b"CONFIG".to_vec(), b"GET".to_vec(), b"appendonly".to_vec()])?;
            if appendonly == Reply::Array(vec![Reply::bulk("appendonly"), Reply::bulk("yes")]) {
                self.server.restart_keeping_data();
            } else {
                self.server.restart_empty();
            }
        }
        self.run_id = Some(run_id);
        let dump = real_dump(&mut link)?;
        self.control = Some(link);
        Ok(dump)
    }

    /// The control link, opened if there is none.
    fn control(&mut self, port: u16) -> io::Result<&mut Link> {
        if self.control.is_none() {
            let mut link = Link::open(port)?;
            self.run_id = Some(run_id(&mut link)?);
            self.control = Some(link);
        }
        Ok(self.control.as_mut().expect("just opened"))
    }

    /// Gives the simulated server the real one's function libraries, and nothing else.
    fn copy_functions(&mut self, port: u16, simulator: &Simulator) -> io::Result<()> {
        let list = self.control(port)?.call(&[
            b"FUNCTION".to_vec(),
            b"LIST".to_vec(),
            b"WITHCODE".to_vec(),
        ])?;
        let codes: Vec<Vec<u8>> = match list {
            Reply::Array(libraries) => libraries
                .iter()
                .filter_map(|library| match library {
                    Reply::Array(fields) => fields
                        .chunks(2)
                        .find(|pair| pair[0] == Reply::bulk("library_code"))
                        .and_then(|pair| match &pair[1] {
                            Reply::Bulk(code) => Some(code.clone()),
                            _ => None,
                        }),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        simulator.with_server(self, move |server| {
            server.command(&["FUNCTION", "FLUSH"]);
            for code in codes {
                server.command(&[b"FUNCTION".to_vec(), b"LOAD".to_vec(), code]);
            }
        })
    }
}

/// The server's `run_id` (`INFO server`): another one after a reconnect is a restart.
fn run_id(link: &mut Link) -> io::Result<String> {
    let info = link.call(&[b"INFO".to_vec(), b"server".to_vec()])?;
    let Reply::Bulk(text) = info else {
        return Err(io::Error::other("INFO server: a bad reply"));
    };
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .unwrap_or_default()
        .trim()
        .to_string())
}

/// One client connection: commands one at a time, until it subscribes.
fn connection(shared: &Shared, client: TcpStream) -> io::Result<()> {
    client.set_nodelay(true)?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut writer = client;
    let mut upstream = Link::open(shared.real)?;
    while let Some(value) = resp::read(&mut reader)? {
        let Some(args) = command_args(value).filter(|a| !a.is_empty()) else {
            writer.write_all(&Reply::error("ERR Protocol error").to_resp())?;
            continue;
        };
        let name = String::from_utf8_lossy(&args[0]).to_lowercase();
        if matches!(name.as_str(), "subscribe" | "ssubscribe" | "psubscribe") {
            return subscribed(shared, args, reader, writer, upstream);
        }
        if matches!(
            name.as_str(),
            "unsubscribe" | "sunsubscribe" | "punsubscribe"
        ) {
            // Subscribed to nothing: the real server confirms each channel named (or the one
            // nil channel when none is), and no count changes.
            upstream.writer.write_all(&encode_command(&args))?;
            for _ in 0..(args.len() - 1).max(1) {
                match resp::read(&mut upstream.reader)? {
                    Some(reply) => writer.write_all(&reply.to_resp())?,
                    None => return Ok(()),
                }
            }
            continue;
        }
        let reply = if is_function_restore(&args) {
            restored(shared, &mut upstream, &args)
        } else if passthrough(&name, &args) {
            upstream.call(&args)
        } else {
            mirrored(shared, &mut upstream, &args)
        };
        match reply {
            Ok(reply) => writer.write_all(&reply.to_resp())?,
            // The real server closed the connection (CLIENT KILL, a restart): so does the mirror.
            Err(_) => return Ok(()),
        }
        if name == "quit" {
            return Ok(());
        }
    }
    Ok(())
}

fn is_function_restore(args: &[Vec<u8>]) -> bool {
    args[0].eq_ignore_ascii_case(b"function")
        && args
            .get(1)
            .is_some_and(|sub| sub.eq_ignore_ascii_case(b"restore"))
}

/// `FUNCTION RESTORE`, which the simulated server does not model: run on the real server, then
/// the simulated one gets the libraries the real one has.
fn restored(shared: &Shared, upstream: &mut Link, args: &[Vec<u8>]) -> io::Result<Reply> {
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    let reply = upstream.call(args)?;
    state.copy_functions(shared.real, &shared.simulator)?;
    Ok(reply)
}

/// Whether `reply` says the real server refused the command before it ran: for the
/// connection's user (`NOPERM`, `NOAUTH`), or because it is full (`OOM`: a write command, or
/// the `FCALL` of a function without `allow-oom` or `no-writes`, over `maxmemory`; a script's
/// first write, which the script raised; the simulated server has no memory limit).
fn refused(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(e)
        if ["NOPERM ", "NOAUTH ", "OOM "].iter().any(|code| e.starts_with(code)))
}

/// Runs `args` on the real server and on the simulated one, and compares.
fn mirrored(shared: &Shared, upstream: &mut Link, args: &[Vec<u8>]) -> io::Result<Reply> {
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    let before = clock_ms();
    let reply = upstream.call(args)?;
    if refused(&reply) {
        return Ok(reply);
    }
    let after = clock_ms();
    let real = state.real_keyspace(shared.real)?;
    let read = clock_ms();
    let (args, real_reply) = (args.to_vec(), reply.clone());
    let difference = shared.simulator.with_server(&mut state, move |server| {
        let (sim, difference) = compare(
            server,
            &args,
            &real_reply,
            before..=after.max(before),
            &real,
            read,
        );
        *server = sim;
        difference
    })?;
    if let Some(difference) = difference {
        report(shared, &mut state, &difference);
    }
    Ok(reply)
}

/// The real server's clock in ms: the machine's, which the server on loopback reads too (the
/// mirror asks the server nothing it could count: tests read `INFO commandstats`).
fn clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A connection that subscribed: the real server's pushes go through as they come; each
/// subscription change is counted on the simulated server once the real one confirmed it.
fn subscribed(
    shared: &Shared,
    first: Vec<Vec<u8>>,
    mut reader: BufReader<TcpStream>,
    writer: TcpStream,
    upstream: Link,
) -> io::Result<()> {
    let (confirmed, confirmations) = mpsc::channel::<(bool, Option<Vec<u8>>, i64)>();
    let Link {
        reader: mut up_reader,
        writer: mut up_writer,
    } = upstream;
    let mut to_client = writer.try_clone()?;
    let pump = std::thread::spawn(move || {
        while let Ok(Some(message)) = resp::read(&mut up_reader) {
            if let Reply::Array(parts) = &message {
                if let [Reply::Bulk(kind), channel, Reply::Int(left)] = &parts[..] {
                    let kind = String::from_utf8_lossy(kind).to_lowercase();
                    let channel = match channel {
                        Reply::Bulk(c) => Some(c.clone()),
                        _ => None,
                    };
                    if kind.ends_with("unsubscribe") {
                        let _ = confirmed.send((false, channel, *left));
                    } else if kind.ends_with("subscribe") {
                        let _ = confirmed.send((true, channel, *left));
                    }
                }
            }
            if to_client.write_all(&message.to_resp()).is_err() {
                break;
            }
        }
    });
    let mut channels: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut next = Some(first);
    while let Some(args) = next.take() {
        let name = String::from_utf8_lossy(&args[0]).to_lowercase();
        {
            let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if up_writer.write_all(&encode_command(&args)).is_err() {
                break;
            }
            let expected = match name.as_str() {
                "subscribe" | "ssubscribe" | "psubscribe" | "unsubscribe" | "sunsubscribe"
                | "punsubscribe" => args.len().saturating_sub(1),
                _ => 0,
            };
            let all = expected == 0 && name.ends_with("unsubscribe");
            let mut seen = 0;
            while seen < expected || all {
                let Ok((subscribe, channel, left)) = confirmations.recv_timeout(CONFIRM_TIMEOUT)
                else {
                    break;
                };
                seen += 1;
                if let Some(channel) = channel.filter(|_| !name.starts_with('p')) {
                    if subscribe && channels.insert(channel.clone()) {
                        state.server.subscribe(&channel);
                    } else if !subscribe && channels.remove(&channel) {
                        state.server.unsubscribe(&channel);
                    }
                }
                if all && left == 0 {
                    break;
                }
            }
        }
        match resp::read(&mut reader) {
            Ok(Some(value)) => next = command_args(value).filter(|a| !a.is_empty()),
            _ => break,
        }
    }
    {
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let _ = up_writer.shutdown(std::net::Shutdown::Both);
        for channel in &channels {
            state.server.unsubscribe(channel);
        }
    }
    let _ = pump.join();
    let _ = writer.shutdown(std::net::Shutdown::Both);
    Ok(())
}
