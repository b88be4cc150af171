//! A diagnostic for order (env `ORDER_MONITOR=1` in `contended`): the server's own time of every
//! waiter's arrival, read with `MONITOR`.
//!
//! A task's `called` stamp is taken in its own process before `lock()` sends anything; between
//! the stamp and the first attempt reaching Redis the process may be descheduled for
//! milliseconds on a busy machine. `MONITOR` shows, with the server's clock (the same wall clock
//! as the stamps), when each fair acquire with `"wait"` ran, and for whom: the first one of a
//! holder field at or after a task's `called` is that wait's arrival, when the fair lock's queue
//! took its place. Order counted on arrivals instead of stamps tells a waiter that was overtaken
//! in the queue from one whose request reached the queue late. `MONITOR` costs the server a good
//! deal, so it is off by default and its runs are not the headline figures.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::thread::JoinHandle;
use std::time::Duration;

use super::now_us;

/// A `MONITOR` connection read on a thread until a wall-clock moment.
pub struct Monitor {
    thread: JoinHandle<HashMap<String, Vec<u64>>>,
}

impl Monitor {
    /// Starts monitoring; the thread stops reading at wall-clock `until_us`.
    pub fn start(port: u16, until_us: u64) -> Monitor {
        let mut conn = TcpStream::connect(("127.0.0.1", port)).expect("connect for MONITOR");
        conn.write_all(b"MONITOR\r\n").unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut reader = BufReader::new(conn);
        let mut ok = String::new();
        reader.read_line(&mut ok).expect("MONITOR reply");
        assert!(ok.starts_with("+OK"), "MONITOR: {ok:?}");
        let thread = std::thread::spawn(move || {
            let mut arrivals: HashMap<String, Vec<u64>> = HashMap::new();
            let mut line = String::new();
            while now_us() < until_us {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        if let Some((at, field)) = fair_wait(&line) {
                            arrivals.entry(field).or_default().push(at);
                        }
                    }
                    Err(_) => continue, // read timeout: look at the clock again
                }
            }
            for times in arrivals.values_mut() {
                times.sort_unstable();
            }
            arrivals
        });
        Monitor { thread }
    }

    /// Per holder field, the server times (µs) of its fair acquires with `"wait"`.
    pub fn finish(self) -> HashMap<String, Vec<u64>> {
        self.thread.join().expect("monitor thread")
    }
}

/// `+<secs>.<µs> [0 <addr>] "evalsha" "<sha>" "3" <3 keys> "<lease>" "<field>" "<W>" "wait"`:
/// (µs, field) of a fair acquire that asks to wait.
fn fair_wait(line: &str) -> Option<(u64, String)> {
    let line = line.trim_end().strip_prefix('+')?;
    if !line.ends_with("\"wait\"") {
        return None;
    }
    let (stamp, rest) = line.split_once(' ')?;
    let (secs, micros) = stamp.split_once('.')?;
    let at = secs.parse::<u64>().ok()? * 1_000_000 + micros.parse::<u64>().ok()?;
    let args: Vec<&str> = rest.split('"').skip(1).step_by(2).collect();
    // "evalsha", sha, "3", 3 keys, lease, field, W, "wait"
    if args.len() != 10 || !args[0].eq_ignore_ascii_case("evalsha") {
        return None;
    }
    Some((at, args[7].to_owned()))
}
