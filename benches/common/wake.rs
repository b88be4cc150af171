//! The floor of a hand-off between processes, with no client library in the way: one process
//! `PUBLISH`es a stamp while another, idle in a blocking read on its subscription, wakes up and
//! sends one `PING` on a second connection. The time from the `PUBLISH` to the `PONG` is what
//! any hand-off to a waiter in another, sleeping, process costs at least on this machine: the
//! publish, the wake-up of the sleeping process and one round trip.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::worker::{self, Worker};
use super::{now_us, percentile};

const CHANNEL: &str = "bench:wake";

/// p50 of `PUBLISH` → the other process's `PONG`, in ms, over `rounds` wake-ups `pause` apart
/// (long enough for the waking process to go idle, like a waiter during a hold).
pub fn floor_ms(port: u16, rounds: usize, pause: Duration) -> f64 {
    let mut waker = Worker::spawn(&["wake".into(), port.to_string(), rounds.to_string()]);
    waker.expect("ready");
    let mut publisher = connect(port);
    for _ in 0..rounds {
        std::thread::sleep(pause);
        let sent = now_us().to_string();
        command(&mut publisher, &["PUBLISH", CHANNEL, &sent]);
    }
    let lines = waker.finish();
    let gaps: Vec<f64> = lines
        .iter()
        .filter_map(|line| line.strip_prefix("t "))
        .map(|stamps| {
            let (sent, woke): (u64, u64) = stamps
                .split_once(' ')
                .map(|(a, b)| (a.parse().unwrap(), b.parse().unwrap()))
                .unwrap();
            (woke - sent) as f64 / 1e3
        })
        .collect();
    assert!(!gaps.is_empty(), "the waking process saw no message");
    percentile(&gaps, 50.0)
}

/// The worker side: `wake <port> <rounds>`. Subscribes, says `ready`, and for each message sends
/// a `PING` and prints `t <published µs> <pong µs>`.
pub fn worker_main(args: &[String]) {
    let [mode, port, rounds] = args else {
        panic!("worker arguments: wake <port> <rounds>")
    };
    assert_eq!(mode, "wake");
    let _parent = worker::parent_lines(); // exit when the parent goes away
    let port: u16 = port.parse().unwrap();
    let mut subscriber = connect(port);
    let mut pinger = connect(port);
    subscriber
        .write_all(format!("SUBSCRIBE {CHANNEL}\r\n").as_bytes())
        .unwrap();
    read_reply(&mut subscriber); // the subscription's confirmation
    println!("ready");
    for _ in 0..rounds.parse::<usize>().unwrap() {
        // A message is `*3 $7 message $<n> bench:wake $<n> <stamp>`: the stamp is its last line.
        let message = read_reply(&mut subscriber);
        command(&mut pinger, &["PING"]);
        let woke = now_us();
        let sent = message.lines().last().unwrap_or_default().trim();
        println!("t {sent} {woke}");
    }
}

fn connect(port: u16) -> TcpStream {
    let conn = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    conn.set_nodelay(true).unwrap();
    conn
}

/// Sends one command and reads its (short, single-read) reply.
fn command(conn: &mut TcpStream, args: &[&str]) -> String {
    let mut out = format!("*{}\r\n", args.len());
    for arg in args {
        out.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    conn.write_all(out.as_bytes()).unwrap();
    read_reply(conn)
}

/// Reads until a whole RESP reply is in (the replies here are small arrays and simple strings).
fn read_reply(conn: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let n = conn.read(&mut chunk).expect("read");
        assert!(n > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        if super::server::complete(&buf) {
            return String::from_utf8_lossy(&buf).into_owned();
        }
    }
}
