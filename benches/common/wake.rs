//! The floor of a hand-off between processes, with no client library in the way: one process
//! `PUBLISH`es a stamp while `procs` others, idle in a blocking read on their subscriptions,
//! wake up and each send one `PING` on a second connection, as every woken waiter sends its
//! attempt. The time from the `PUBLISH` to the `PONG` of the one whose turn it is (they take
//! turns) is what a hand-off to a waiter in another, sleeping, process costs at least on this
//! machine: the publish, the wake-up of the sleeping processes and one round trip. The same with
//! fred (a `SubscriberClient` and a client on a tokio runtime, as relock uses them) shows what
//! the client stack adds before relock's own work. [`reach_all_ms`] times the `PUBLISH` alone:
//! until every subscribed process has read it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::worker::{self, Worker};
use super::{now_us, percentile};

const CHANNEL: &str = "bench:wake";

/// How the woken processes answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stack {
    /// Blocking reads and writes on plain sockets.
    Bare,
    /// fred on a tokio runtime.
    Fred,
}

/// p50 of `PUBLISH` → the `PONG` of the process whose turn it is, in ms, over `rounds`
/// wake-ups `pause` apart (long enough for the processes to go idle, like waiters during a
/// hold), with `procs` processes woken each time.
pub fn floor_ms(stack: Stack, port: u16, procs: usize, rounds: usize, pause: Duration) -> f64 {
    let mode = match stack {
        Stack::Bare => "wake",
        Stack::Fred => "wake-fred",
    };
    let mut wakers: Vec<Worker> = (0..procs)
        .map(|p| {
            Worker::spawn(&[
                mode.into(),
                port.to_string(),
                rounds.to_string(),
                procs.to_string(),
                p.to_string(),
            ])
        })
        .collect();
    for waker in &mut wakers {
        waker.expect("ready");
    }
    let mut publisher = connect(port);
    for round in 0..rounds {
        std::thread::sleep(pause);
        let message = format!("{round}:{}", now_us());
        command(&mut publisher, &["PUBLISH", CHANNEL, &message]);
    }
    let gaps: Vec<f64> = wakers
        .into_iter()
        .flat_map(Worker::finish)
        .filter_map(|line| {
            let (sent, woke) = line.strip_prefix("t ")?.split_once(' ')?;
            let (sent, woke): (u64, u64) = (sent.parse().ok()?, woke.parse().ok()?);
            Some((woke - sent) as f64 / 1e3)
        })
        .collect();
    assert!(!gaps.is_empty(), "no waking process saw a message");
    percentile(&gaps, 50.0)
}

/// How long one `PUBLISH` takes to reach `procs` processes idle on a subscription (the
/// processes only read; none answers): for each of `rounds` publishes `pause` apart, from just
/// before the `PUBLISH` is sent to the moment the last of the processes has read it, in ms.
/// With plain blocking sockets, what waking every waiting process costs at least on this
/// machine, with no client library in the way; with fred (a `SubscriberClient` on a tokio
/// runtime, the message read from its message stream), what the client stack adds.
pub fn reach_all_ms(
    stack: Stack,
    port: u16,
    procs: usize,
    rounds: usize,
    pause: Duration,
) -> Vec<f64> {
    let mode = match stack {
        Stack::Bare => "reach",
        Stack::Fred => "reach-fred",
    };
    let mut readers: Vec<Worker> = (0..procs)
        .map(|p| {
            Worker::spawn(&[
                mode.into(),
                port.to_string(),
                rounds.to_string(),
                procs.to_string(),
                p.to_string(),
            ])
        })
        .collect();
    for reader in &mut readers {
        reader.expect("ready");
    }
    let mut publisher = connect(port);
    for round in 0..rounds {
        std::thread::sleep(pause);
        let message = format!("{round}:{}", now_us());
        let reply = command(&mut publisher, &["PUBLISH", CHANNEL, &message]);
        assert_eq!(reply.trim(), format!(":{procs}"), "every reader subscribed");
    }
    let mut last = vec![0u64; rounds];
    for line in readers.into_iter().flat_map(Worker::finish) {
        let Some(rest) = line.strip_prefix("r ") else {
            continue;
        };
        let f: Vec<u64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
        let [round, sent, read] = f[..] else {
            panic!("r <round> <sent> <read>: {line}")
        };
        last[round as usize] = last[round as usize].max(read - sent);
    }
    last.into_iter().map(|us| us as f64 / 1e3).collect()
}

/// The worker side of [`reach_all_ms`] with fred.
fn reach_fred_worker(port: &str, rounds: usize) {
    use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
    let _parent = worker::parent_lines();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let read = runtime.block_on(async {
        let config =
            fred::types::config::Config::from_url(&format!("redis://127.0.0.1:{port}")).unwrap();
        let subscriber = fred::clients::SubscriberClient::new(config, None, None, None);
        subscriber.init().await.unwrap();
        let mut messages = subscriber.message_rx();
        subscriber.subscribe(CHANNEL).await.unwrap();
        // `subscribe` returns once the command is queued: a PING behind it comes back after
        // the server confirmed it.
        let _: fred::types::Value = subscriber.ping(None).await.unwrap();
        println!("ready");
        let mut read = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let message = messages.recv().await.unwrap();
            let at = now_us();
            let body: String = message.value.convert().unwrap();
            let (round, sent) = body.split_once(':').expect("<round>:<stamp>");
            read.push(format!("r {round} {sent} {at}"));
        }
        read
    });
    for line in read {
        println!("{line}");
    }
}

/// The worker side of [`reach_all_ms`]: `reach <port> <rounds> <procs> <index>` (`reach-fred`
/// with fred). Subscribes, says `ready`, and for each message prints
/// `r <round> <published µs> <read µs>`.
fn reach_worker(port: &str, rounds: usize) {
    let _parent = worker::parent_lines(); // exit when the parent goes away
    let mut subscriber = connect(port.parse().unwrap());
    subscriber
        .write_all(format!("SUBSCRIBE {CHANNEL}\r\n").as_bytes())
        .unwrap();
    let mut lines = Lines::default();
    lines.take(&mut subscriber, 6); // *3 $9 subscribe $10 bench:wake :1
    println!("ready");
    let mut read = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        // *3 $7 message $10 bench:wake $<n> <round>:<stamp>
        let message = lines.take(&mut subscriber, 7);
        let at = now_us();
        let (round, sent) = message[6].split_once(':').expect("<round>:<stamp>");
        read.push(format!("r {round} {sent} {at}"));
    }
    // Printed at the end: nothing but the read and the stamp happens between two messages.
    for line in read {
        println!("{line}");
    }
}

/// The worker side: `wake <port> <rounds> <procs> <index>`. Subscribes, says `ready`, and for
/// each message sends a `PING`; on its turns (round % procs == index) it prints
/// `t <published µs> <pong µs>`. `wake-fred` does the same with fred; `reach` and
/// `reach-fred` are [`reach_all_ms`]'s.
pub fn worker_main(args: &[String]) {
    let [mode, port, rounds, procs, index] = args else {
        panic!("worker arguments: wake <port> <rounds> <procs> <index>")
    };
    let (procs, index): (usize, usize) = (procs.parse().unwrap(), index.parse().unwrap());
    if mode == "wake-fred" {
        return fred_worker(port, rounds.parse().unwrap(), procs, index);
    }
    if mode == "reach" {
        return reach_worker(port, rounds.parse().unwrap());
    }
    if mode == "reach-fred" {
        return reach_fred_worker(port, rounds.parse().unwrap());
    }
    assert_eq!(mode, "wake");
    let _parent = worker::parent_lines(); // exit when the parent goes away
    let port: u16 = port.parse().unwrap();
    let mut subscriber = connect(port);
    let mut pinger = connect(port);
    subscriber
        .write_all(format!("SUBSCRIBE {CHANNEL}\r\n").as_bytes())
        .unwrap();
    let mut lines = Lines::default();
    lines.take(&mut subscriber, 6); // *3 $9 subscribe $10 bench:wake :1
    println!("ready");
    for _ in 0..rounds.parse::<usize>().unwrap() {
        // *3 $7 message $10 bench:wake $<n> <round>:<stamp>
        let message = lines.take(&mut subscriber, 7);
        command(&mut pinger, &["PING"]);
        let woke = now_us();
        let (round, sent) = message[6].split_once(':').expect("<round>:<stamp>");
        if round.parse::<usize>().unwrap() % procs == index {
            println!("t {sent} {woke}");
        }
    }
}

/// The worker side with fred: a subscriber client and a command client on a tokio runtime.
fn fred_worker(port: &str, rounds: usize, procs: usize, index: usize) {
    use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
    let _parent = worker::parent_lines();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let config =
            fred::types::config::Config::from_url(&format!("redis://127.0.0.1:{port}")).unwrap();
        let subscriber = fred::clients::SubscriberClient::new(config.clone(), None, None, None);
        subscriber.init().await.unwrap();
        let pinger = fred::clients::Client::new(config, None, None, None);
        pinger.init().await.unwrap();
        let mut messages = subscriber.message_rx();
        subscriber.subscribe(CHANNEL).await.unwrap();
        println!("ready");
        for _ in 0..rounds {
            let message = messages.recv().await.unwrap();
            let _: String = pinger.ping(None).await.unwrap();
            let woke = now_us();
            let body: String = message.value.convert().unwrap();
            let (round, sent) = body.split_once(':').expect("<round>:<stamp>");
            if round.parse::<usize>().unwrap() % procs == index {
                println!("t {sent} {woke}");
            }
        }
    });
}

/// Lines read from a connection, kept across reads: one read may bring parts of two replies.
#[derive(Default)]
struct Lines {
    buf: Vec<u8>,
}

impl Lines {
    /// The next `n` CRLF-terminated lines, reading as needed.
    fn take(&mut self, conn: &mut TcpStream, n: usize) -> Vec<String> {
        let mut chunk = [0u8; 512];
        loop {
            let ends: Vec<usize> = self
                .buf
                .windows(2)
                .enumerate()
                .filter(|(_, w)| *w == b"\r\n")
                .map(|(i, _)| i)
                .take(n)
                .collect();
            if ends.len() == n {
                let text = String::from_utf8_lossy(&self.buf[..ends[n - 1]]).into_owned();
                self.buf.drain(..ends[n - 1] + 2);
                return text.split("\r\n").map(str::to_owned).collect();
            }
            let read = conn.read(&mut chunk).expect("read");
            assert!(read > 0, "the server closed the connection");
            self.buf.extend_from_slice(&chunk[..read]);
        }
    }
}

fn connect(port: u16) -> TcpStream {
    let conn = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    conn.set_nodelay(true).unwrap();
    conn
}

/// Sends one command and reads its reply.
fn command(conn: &mut TcpStream, args: &[&str]) -> String {
    relock::testing::command_on(conn, args).expect("a command on a plain connection")
}
