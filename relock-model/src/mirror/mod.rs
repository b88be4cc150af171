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
//!
//! The parts: `real` (the links to the real server and the state the connections share),
//! `simulator` (the one thread the simulated server runs on), `compare` (the comparison and
//! its report) and `subscriptions` (a connection once it subscribed). This file holds the
//! command line, the listener and each connection's commands until it subscribes.

use std::io::{self, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::resp::{self, command_args, encode_command};
use crate::server::{Reply, Server, Version};

mod compare;
mod real;
mod simulator;
mod subscriptions;

use compare::{compare, report};
use real::{Link, State};
use simulator::Simulator;
use subscriptions::subscribed;

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
