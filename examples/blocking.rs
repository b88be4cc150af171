//! relock from plain threads (feature `blocking`): no async, no tokio in sight.
//!
//! ```text
//! cargo run --example blocking --features blocking
//! ```
//!
//! Eight threads take turns on one lock, each re-entering it once (reentrancy is per thread);
//! one of them panics while it holds the lock, which frees it for the others at once; and the
//! last count shows that nobody overlapped.
//!
//! `--hold NAME` takes lock `NAME`, prints `held`, and returns from `main` still holding it:
//! the lock is released on the way out (a test checks it is gone right after the process).
//! `REDIS_URL` picks a server of your own; else a throwaway one is started. `--help` says so.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const USAGE: &str = "\
usage: blocking [--hold NAME]

Eight threads take turns on one lock, with no async; one panics while holding it.
  --hold NAME  take lock NAME, print `held NAME` and return from main still holding it
REDIS_URL picks a server of your own; else a throwaway redis-server is started.";

fn main() -> relock::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] | ["--hold", _] => {}
        ["--help" | "-h"] => {
            println!("{USAGE}");
            return Ok(());
        }
        _ => {
            eprintln!("blocking: cannot read {args:?}\n\n{USAGE}");
            std::process::exit(2);
        }
    }
    let (_server, url) = relock::testing::from_env_or_start().expect("a redis-server");
    let client = relock::blocking::Client::connect(&url)?;
    if let [_, name] = args.as_slice() {
        let guard = client.lock(name.as_str()).lock()?;
        println!("held {}", guard.name());
        return Ok(()); // `guard` is dropped on the way out of main: the lock is released
    }

    let inside = Arc::new(AtomicUsize::new(0));
    let turns = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let (lock, inside, turns) = (client.lock("report"), inside.clone(), turns.clone());
            std::thread::spawn(move || {
                for round in 0..5 {
                    let guard = lock.lock().expect("lock");
                    let again = lock.lock().expect("re-enter on the same thread");
                    assert_eq!(lock.hold_count().unwrap(), 2);
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "someone else was inside"
                    );
                    std::thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    turns.fetch_add(1, Ordering::SeqCst);
                    if i == 3 && round == 2 {
                        panic!("thread 3 panics holding the lock (on purpose)");
                    }
                    again.unlock().expect("unlock");
                    guard.unlock().expect("unlock");
                }
            })
        })
        .collect();
    let panicked = threads.into_iter().filter_map(|t| t.join().err()).count();
    println!(
        "{} turns on `report` by 8 threads, none overlapping; {panicked} thread panicked holding it, \
         and its lock was released as it unwound",
        turns.load(Ordering::SeqCst)
    );
    client.shutdown()
}
