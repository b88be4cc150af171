//! The ceiling: what the server does with relock's own acquire and release scripts when
//! `redis-benchmark` sends them by `EVALSHA`, with no client library in the way.
//!
//! `-c 1 -P 1` is one client with one command in flight (the latency of one lock + unlock pair);
//! `-c 1 -P 32` pipelines 32 on one connection, like fred's multiplexed connection under 32 tasks.
//! Each figure is the best of three trials.

use std::process::Command;

use super::Redis;
use relock::testing::RedisServer;

use relock::testing::scripts::{LOCK_ACQUIRE as ACQUIRE, LOCK_RELEASE as RELEASE};

/// One acquire + release pair, as the server sees it.
#[derive(Clone, Copy, Debug)]
pub struct Ceiling {
    pub pairs_per_sec: f64,
    /// p50 of the acquire plus p50 of the release, in ms.
    pub pair_p50_ms: f64,
    /// redis-server's CPU time per pair over the trials, in µs.
    pub server_us_per_pair: f64,
}

/// The best of three trials (highest pairs/s, lowest p50): on a small shared machine one trial
/// swings with where the scheduler puts `redis-benchmark` and `redis-server`.
pub fn measure(server: &RedisServer, pipeline: u32, requests: u32) -> Ceiling {
    let cpu_before = super::server_cpu(server);
    let trials: Vec<(f64, f64)> = (0..3).map(|_| trial(server, pipeline, requests)).collect();
    let cpu = super::server_cpu(server) - cpu_before;
    Ceiling {
        pairs_per_sec: trials.iter().map(|t| t.0).fold(0.0, f64::max),
        pair_p50_ms: trials.iter().map(|t| t.1).fold(f64::MAX, f64::min),
        server_us_per_pair: cpu.as_secs_f64() * 1e6 / (trials.len() as f64 * requests as f64),
    }
}

/// Runs both scripts `requests` times each with `pipeline` commands in flight: (pairs/s, pair
/// p50 ms).
fn trial(server: &RedisServer, pipeline: u32, requests: u32) -> (f64, f64) {
    let (acquire, release) = (sha(server, ACQUIRE), sha(server, RELEASE));
    // The release runs its "holds remain" branch on a field holding many holds, as a first send
    // (relock's every release but a retry), without needing fresh holds: one write and one
    // expiry like a last release, plus a replay key, which a last release does not write (it
    // deletes the hash and publishes instead).
    server.cmd(&["HSET", "bench:ceiling", "client:1", "1000000000000"]);
    let (acq_rps, acq_p50) = redis_benchmark(
        server.port(),
        pipeline,
        requests,
        &[
            "EVALSHA",
            &acquire,
            "2",
            "bench:ceiling",
            "relock_claim:{bench:ceiling}",
            "30000",
            "client:1",
            "0",
            "0",
        ],
    );
    let (rel_rps, rel_p50) = redis_benchmark(
        server.port(),
        pipeline,
        requests,
        &[
            "EVALSHA",
            &release,
            "4",
            "bench:ceiling",
            "redisson_lock__channel:{bench:ceiling}",
            "redisson_unlock_latch:{bench:ceiling}:__rand_int__",
            "relock_claim:{bench:ceiling}",
            "0",
            "30000",
            "client:1",
            "PUBLISH",
            "12000",
            "10",
            "0",
            "0",
        ],
    );
    server.cmd(&["DEL", "bench:ceiling"]);
    (1.0 / (1.0 / acq_rps + 1.0 / rel_rps), acq_p50 + rel_p50)
}

fn sha(server: &RedisServer, lua: &str) -> String {
    let reply = server.cmd(&["SCRIPT", "LOAD", lua]);
    reply.lines().nth(1).expect("sha").to_owned()
}

/// One `redis-benchmark` test: (requests/s, p50 latency ms).
fn redis_benchmark(port: u16, pipeline: u32, requests: u32, args: &[&str]) -> (f64, f64) {
    let out = Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "-c", "1"])
        .args(["-P", &pipeline.to_string(), "-n", &requests.to_string()])
        .args(["-r", "100000000", "--csv"])
        .args(args)
        .output()
        .expect("redis-benchmark (apt-get install redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .last()
        .expect("redis-benchmark printed nothing");
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
    let cols: Vec<f64> = row
        .split(',')
        .skip(1)
        .map(|c| c.trim_matches('"').parse().unwrap_or(f64::NAN))
        .collect();
    (cols[0], cols[3])
}
