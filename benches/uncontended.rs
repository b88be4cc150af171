//! Uncontended: N tasks (1 and 32) each take and release a lock of its own in a loop, against the
//! ceiling of the same scripts sent by `redis-benchmark` (`-c 1 -P 1` for one task, `-c 1 -P 32`
//! for 32, like fred's multiplexed connection), measured in the same run.
//!
//! Figures: pairs/s, and p50/p99 of one lock + unlock pair, each relock figure also as a ratio
//! to the ceiling; each is the best of three trials per run on both sides. redis-server's CPU
//! time per pair shows whether relock's pair costs the server more than the ceiling's. relock
//! runs on a runtime with one worker fewer than the machine has cores (at least one), leaving
//! redis-server its core as the one-thread `redis-benchmark` does; the 32-task loop is also run
//! on the default runtime (a worker per core). `cargo bench --bench uncontended` (env `RUNS`,
//! default 3).

mod common;

use std::time::Instant;

use common::report::Table;
use common::server::RedisServer;

/// Pairs per task in the 32-task loops.
const PAIRS_PER_TASK: usize = 1_000;

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
                    times.push(common::ms(t0.elapsed()));
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
    (
        (tasks * pairs) as f64 / elapsed,
        common::percentile(&times, 50.0),
        common::percentile(&times, 99.0),
    )
}

/// Pairs/s, p50 and p99 (ms), each the best of three trials (highest rate, lowest latencies),
/// as the ceiling takes its own: one trial on a small shared machine swings with where the
/// scheduler puts the client and the server. Also redis-server's CPU time per pair over the
/// three, in µs.
struct BestOfThree {
    per_sec: f64,
    p50: f64,
    p99: f64,
    server_us_per_pair: f64,
}

fn best_of_three(
    server: &RedisServer,
    runtime: &tokio::runtime::Runtime,
    client: &relock::Client,
    tasks: usize,
    pairs: usize,
) -> BestOfThree {
    let cpu_before = common::server_cpu(server);
    let trials: Vec<_> = (0..3)
        .map(|_| runtime.block_on(relock_pairs(client, tasks, pairs)))
        .collect();
    let cpu = common::server_cpu(server) - cpu_before;
    let best = |pick: fn(&(f64, f64, f64)) -> f64, better: fn(f64, f64) -> f64| {
        trials.iter().map(pick).reduce(better).unwrap()
    };
    BestOfThree {
        per_sec: best(|t| t.0, f64::max),
        p50: best(|t| t.1, f64::min),
        p99: best(|t| t.2, f64::min),
        server_us_per_pair: cpu.as_secs_f64() * 1e6 / (3 * tasks * pairs) as f64,
    }
}

/// A multi-threaded runtime with `workers` worker threads, and a client on it.
fn runtime_and_client(
    server: &RedisServer,
    workers: usize,
) -> (tokio::runtime::Runtime, relock::Client) {
    let runtime = common::runtime(workers);
    let client = runtime
        .block_on(relock::Client::connect(&server.url()))
        .unwrap();
    runtime.block_on(relock_pairs(&client, 4, 200)); // warm-up
    (runtime, client)
}

fn main() {
    let runs = common::runs(3);
    let server = RedisServer::start();
    // The ceiling's client, redis-benchmark, is one thread, and redis-server needs a core of its
    // own: relock gets the cores the server leaves, like for like. The default runtime (one
    // worker per core, so the client competes with the server for CPU) is measured too.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (runtime, client) = runtime_and_client(&server, (cores - 1).max(1));
    let (default_runtime, default_client) = runtime_and_client(&server, cores);
    let mut table = Table::new(
        "uncontended",
        format!(
            "uncontended: lock + unlock pairs, each task on its own lock — redis {}, medians of {runs} runs",
            common::redis_version(&server)
        ),
    );
    for run in 1..=runs {
        eprintln!("uncontended: run {run}/{runs}");
        let c1 = common::ceiling::measure(&server, 1, 10_000);
        let c32 = common::ceiling::measure(&server, 32, 100_000);
        let one = best_of_three(&server, &runtime, &client, 1, 5_000);
        let many = best_of_three(&server, &runtime, &client, 32, PAIRS_PER_TASK);
        let many_default = best_of_three(
            &server,
            &default_runtime,
            &default_client,
            32,
            PAIRS_PER_TASK,
        );
        table.add("ceiling -P 1 pairs/s", "/s", c1.pairs_per_sec);
        table.add("ceiling -P 1 pair p50", "ms", c1.pair_p50_ms);
        table.add("ceiling -P 32 pairs/s", "/s", c32.pairs_per_sec);
        table.add_ratio(
            "1 task pairs/s",
            "/s",
            one.per_sec,
            one.per_sec / c1.pairs_per_sec,
            "-P 1 pairs/s",
        );
        table.add_ratio(
            "1 task pair p50",
            "ms",
            one.p50,
            one.p50 / c1.pair_p50_ms,
            "-P 1 pair p50",
        );
        table.add("1 task pair p99", "ms", one.p99);
        table.add_ratio(
            "32 tasks pairs/s",
            "/s",
            many.per_sec,
            many.per_sec / c32.pairs_per_sec,
            "-P 32 pairs/s",
        );
        table.add(
            "ceiling -P 32 server CPU per pair",
            "µs",
            c32.server_us_per_pair,
        );
        table.add_ratio(
            "32 tasks server CPU per pair",
            "µs",
            many.server_us_per_pair,
            many.server_us_per_pair / c32.server_us_per_pair,
            "-P 32 server CPU",
        );
        table.add("32 tasks pair p50", "ms", many.p50);
        table.add("32 tasks pair p99", "ms", many.p99);
        table.add_ratio(
            &format!("32 tasks pairs/s, {cores} workers"),
            "/s",
            many_default.per_sec,
            many_default.per_sec / c32.pairs_per_sec,
            "-P 32 pairs/s",
        );
    }
    let met = table.ratio("32 tasks pairs/s") >= 0.9;
    table.target("32 tasks pairs/s", "≥ 0.9× -P 32 ceiling", met);
    let met = table.ratio("1 task pair p50") <= 1.3;
    table.target("1 task pair p50", "≤ 1.3× -P 1 ceiling", met);
    table.print();
}
