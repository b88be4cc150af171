//! Uncontended lock + unlock pairs against the server's own ceiling for the same scripts.
//!
//! Starts a throwaway `redis-server`, then per run: `redis-benchmark` runs the acquire and the
//! release script by `EVALSHA` (`-c 1 -P 1`: one client, one command in flight; `-c 1 -P 32`:
//! 32 pipelined, like fred's multiplexed connection), and relock takes and releases locks in a
//! loop from 1 and from 32 tasks, each on its own key. Prints medians over the runs, each relock
//! figure as a ratio to the ceiling measured in the same run, and one JSON line per figure.
//!
//! `cargo bench --bench lock` (env `RUNS`, default 5).

#[path = "../tests/common/server.rs"]
mod server;

use std::process::Command;
use std::time::{Duration, Instant};

const ACQUIRE: &str = include_str!("../lua/acquire.lua");
const RELEASE: &str = include_str!("../lua/release.lua");

struct Ceiling {
    pairs_per_sec: f64,
    pair_p50_ms: f64,
}

/// One `redis-benchmark` test: (requests/s, p50 latency ms).
fn redis_benchmark(port: u16, pipeline: u32, requests: u32, args: &[&str]) -> (f64, f64) {
    let out = Command::new("redis-benchmark")
        .args([
            "-p",
            &port.to_string(),
            "-c",
            "1",
            "-P",
            &pipeline.to_string(),
        ])
        .args(["-n", &requests.to_string(), "-r", "100000000", "--csv"])
        .args(args)
        .output()
        .expect("redis-benchmark (apt-get install redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .last()
        .expect("redis-benchmark printed nothing");
    let cols: Vec<f64> = row
        .split(',')
        .skip(1)
        .map(|c| c.trim_matches('"').parse().unwrap_or(f64::NAN))
        .collect();
    (cols[0], cols[3])
}

fn sha(server: &server::RedisServer, lua: &str) -> String {
    let reply = server.cmd(&["SCRIPT", "LOAD", lua]);
    reply.lines().nth(1).expect("sha").to_owned()
}

fn ceiling(server: &server::RedisServer, pipeline: u32, requests: u32) -> Ceiling {
    let (acquire, release) = (sha(server, ACQUIRE), sha(server, RELEASE));
    // The release runs its "holds remain" branch on a field holding many holds: same work as the
    // last release (one write, one expiry, one replay key) without needing fresh holds.
    server.cmd(&["HSET", "bench:ceiling", "client:1", "1000000000000"]);
    let (acq_rps, acq_p50) = redis_benchmark(
        server.port(),
        pipeline,
        requests,
        &[
            "EVALSHA",
            &acquire,
            "1",
            "bench:ceiling",
            "30000",
            "client:1",
        ],
    );
    let (rel_rps, rel_p50) = redis_benchmark(
        server.port(),
        pipeline,
        requests,
        &[
            "EVALSHA",
            &release,
            "3",
            "bench:ceiling",
            "redisson_lock__channel:{bench:ceiling}",
            "redisson_unlock_latch:{bench:ceiling}:__rand_int__",
            "0",
            "30000",
            "client:1",
            "PUBLISH",
            "12000",
        ],
    );
    Ceiling {
        pairs_per_sec: 1.0 / (1.0 / acq_rps + 1.0 / rel_rps),
        pair_p50_ms: acq_p50 + rel_p50,
    }
}

/// `tasks` tasks each take and release their own lock `pairs` times: (pairs/s, pair p50 ms, p99).
async fn relock_pairs(client: &relock::Client, tasks: usize, pairs: usize) -> (f64, f64, f64) {
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let lock = client.lock(format!("bench:own:{t}"));
            tokio::spawn(async move {
                let mut times = Vec::with_capacity(pairs);
                for _ in 0..pairs {
                    let t0 = Instant::now();
                    lock.lock().await.unwrap().unlock().await.unwrap();
                    times.push(t0.elapsed());
                }
                times
            })
        })
        .collect();
    let mut times = Vec::new();
    for h in handles {
        times.extend(h.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    (
        (tasks * pairs) as f64 / elapsed,
        ms(times[times.len() / 2]),
        ms(times[times.len() * 99 / 100]),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let server = server::RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime
        .block_on(relock::Client::connect(&server.url()))
        .unwrap();
    runtime.block_on(relock_pairs(&client, 4, 200)); // warm-up

    let mut rows: Vec<(&str, Vec<f64>)> = [
        "ceiling_1_pairs_per_s",
        "ceiling_1_pair_p50_ms",
        "relock_1_pairs_per_s",
        "relock_1_pair_p50_ms",
        "relock_1_pair_p99_ms",
        "ratio_1_pair_p50",
        "ceiling_32_pairs_per_s",
        "relock_32_pairs_per_s",
        "ratio_32_pairs_per_s",
    ]
    .into_iter()
    .map(|name| (name, Vec::new()))
    .collect();
    for _ in 0..runs {
        let c1 = ceiling(&server, 1, 20_000);
        let c32 = ceiling(&server, 32, 200_000);
        let (r1, p50, p99) = runtime.block_on(relock_pairs(&client, 1, 5_000));
        let (r32, _, _) = runtime.block_on(relock_pairs(&client, 32, 1_000));
        let values = [
            c1.pairs_per_sec,
            c1.pair_p50_ms,
            r1,
            p50,
            p99,
            p50 / c1.pair_p50_ms,
            c32.pairs_per_sec,
            r32,
            r32 / c32.pairs_per_sec,
        ];
        for ((_, v), x) in rows.iter_mut().zip(values) {
            v.push(x);
        }
    }
    let version = server.cmd(&["INFO", "server"]);
    let version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?");
    println!("relock uncontended lock+unlock, redis {version}, medians of {runs} runs");
    for (name, values) in &rows {
        println!("{name:<24} {:>12.3}", median(values.clone()));
    }
    for (name, values) in rows {
        println!(
            "{{\"bench\":\"lock\",\"figure\":\"{name}\",\"median\":{:.4},\"runs\":{runs}}}",
            median(values)
        );
    }
}
