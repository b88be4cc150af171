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
//! `script: <sha>, on @user_script:<line>.` that Redis 7 adds to a script's raised error.
//!
//! Commands the simulated server does not model (`CLIENT`, `CONFIG`, `INFO`, `DEBUG`, …) go to
//! the real server alone. Subscriptions go through as they are; the simulated server counts
//! each connection's channels, so a `PUBLISH` counts the same receivers on both (pattern
//! subscriptions are not counted).
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

use compare::{compare, real_dump};

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
    "function",
    "fcall",
    "fcall_ro",
    "time",
    "dump",
];

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
        state: Mutex::new(State {
            server: Server::new(Version::Redis7),
            control: None,
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
    state: Mutex<State>,
}

struct State {
    server: Server,
    /// The mirror's own connection to the real server: `TIME` and the keyspace reads.
    control: Option<Link>,
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
    fn control(&mut self, port: u16) -> io::Result<&mut Link> {
        if self.control.is_none() {
            self.control = Some(Link::open(port)?);
        }
        Ok(self.control.as_mut().expect("just opened"))
    }
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
        let reply = if PASSTHROUGH.contains(&name.as_str()) {
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

/// Runs `args` on the real server and on the simulated one, and compares.
fn mirrored(shared: &Shared, upstream: &mut Link, args: &[Vec<u8>]) -> io::Result<Reply> {
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    let before = clock_ms();
    let reply = upstream.call(args)?;
    let after = clock_ms();
    let real = real_dump(state.control(shared.real)?)?;
    let read = clock_ms();
    compare(
        shared,
        &mut state,
        args,
        &reply,
        before..=after.max(before),
        &real,
        read,
    );
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
