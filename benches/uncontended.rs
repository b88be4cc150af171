//! Uncontended: N tasks (1 and 32) each take and release a lock of its own in a loop, against the
//! ceiling of the same scripts sent by `redis-benchmark` (`-c 1 -P 1` for one task, `-c 1 -P 32`
//! for 32, like fred's multiplexed connection), measured in the same run.
//!
//! Figures: pairs/s, and p50/p99 of one lock + unlock pair, each relock figure also as a ratio
//! to the ceiling. relock runs on a runtime with one worker fewer than the machine has cores
//! (at least one), leaving redis-server its core as the one-thread `redis-benchmark` does; the
//! 32-task loop is also run on the default runtime (a worker per core). `cargo bench --bench
//! uncontended` (env `RUNS`, default 3).

mod common;

use std::time::Instant;

use common::report::Table;
use common::server::RedisServer;

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
        let (r1, p50, p99) = runtime.block_on(relock_pairs(&client, 1, 5_000));
        let (r32, p50_32, p99_32) = runtime.block_on(relock_pairs(&client, 32, 1_000));
        let (r32_default, _, _) =
            default_runtime.block_on(relock_pairs(&default_client, 32, 1_000));
        table.add("ceiling -P 1 pairs/s", "/s", c1.pairs_per_sec);
        table.add("ceiling -P 1 pair p50", "ms", c1.pair_p50_ms);
        table.add("ceiling -P 32 pairs/s", "/s", c32.pairs_per_sec);
        table.add_ratio(
            "1 task pairs/s",
            "/s",
            r1,
            r1 / c1.pairs_per_sec,
            "-P 1 pairs/s",
        );
        table.add_ratio(
            "1 task pair p50",
            "ms",
            p50,
            p50 / c1.pair_p50_ms,
            "-P 1 pair p50",
        );
        table.add("1 task pair p99", "ms", p99);
        table.add_ratio(
            "32 tasks pairs/s",
            "/s",
            r32,
            r32 / c32.pairs_per_sec,
            "-P 32 pairs/s",
        );
        table.add("32 tasks pair p50", "ms", p50_32);
        table.add("32 tasks pair p99", "ms", p99_32);
        table.add_ratio(
            &format!("32 tasks pairs/s, {cores} workers"),
            "/s",
            r32_default,
            r32_default / c32.pairs_per_sec,
            "-P 32 pairs/s",
        );
    }
    let met = table.ratio("32 tasks pairs/s") >= 0.9;
    table.target("32 tasks pairs/s", "≥ 0.9× -P 32 ceiling", met);
    let met = table.ratio("1 task pair p50") <= 1.3;
    table.target("1 task pair p50", "≤ 1.3× -P 1 ceiling", met);
    table.print();
}
