//! A blocking lock + unlock pair (`relock::blocking`, from a plain thread) against the async pair
//! (one task on a runtime), in the same run: p50 and p99 of one pair, each side 5,000 pairs per
//! trial, the trials interleaved, medians of the runs. Target: blocking p50 ≤ 1.2× async
//! (printed, never asserted). `cargo bench --bench blocking --features blocking` (env `RUNS`,
//! default 3).

mod common;

use std::time::{Duration, Instant};

use relock::testing::RedisServer;

const PAIRS: usize = 5_000;

/// p50 and p99 in µs of `pairs` pair times.
fn quantiles(mut pairs: Vec<Duration>) -> (f64, f64) {
    pairs.sort();
    let at = |q: f64| pairs[((pairs.len() as f64 * q) as usize).min(pairs.len() - 1)];
    (at(0.5).as_secs_f64() * 1e6, at(0.99).as_secs_f64() * 1e6)
}

fn main() {
    let runs = common::runs(3);
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let blocking = relock::blocking::Client::connect(&url).expect("connect");
    let runtime = common::runtime(0);
    let client = runtime
        .block_on(relock::Client::connect(&url))
        .expect("connect");
    let (mut blocking_p50s, mut async_p50s) = (Vec::new(), Vec::new());
    let (mut blocking_p99s, mut async_p99s) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        eprintln!("blocking: run {run}/{runs}");
        let lock = blocking.lock("bench:blocking");
        let mut times = Vec::with_capacity(PAIRS);
        for _ in 0..PAIRS {
            let started = Instant::now();
            lock.lock().unwrap().unlock().unwrap();
            times.push(started.elapsed());
        }
        let (p50, p99) = quantiles(times);
        blocking_p50s.push(p50);
        blocking_p99s.push(p99);

        let lock = client.lock("bench:async");
        let times = runtime.block_on(runtime.spawn(async move {
            let mut times = Vec::with_capacity(PAIRS);
            for _ in 0..PAIRS {
                let started = Instant::now();
                lock.lock().await.unwrap().unlock().await.unwrap();
                times.push(started.elapsed());
            }
            times
        }));
        let (p50, p99) = quantiles(times.unwrap());
        async_p50s.push(p50);
        async_p99s.push(p99);
    }
    let (bp50, ap50) = (common::median(&blocking_p50s), common::median(&async_p50s));
    let (bp99, ap99) = (common::median(&blocking_p99s), common::median(&async_p99s));
    let ratio = bp50 / ap50;
    println!("blocking vs async: one lock + unlock pair, one caller, medians of {runs} runs");
    println!("  async (a task on the default runtime):  p50 {ap50:7.1} µs  p99 {ap99:7.1} µs");
    println!("  blocking (a plain thread):              p50 {bp50:7.1} µs  p99 {bp99:7.1} µs");
    let met = if ratio <= 1.2 { "✓" } else { "✗" };
    println!("  blocking / async p50: {ratio:.2} (target ≤ 1.2: {met})");
}
