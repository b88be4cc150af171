//! What the `metrics` feature costs: the 32-task `Lock` loop (each task takes and releases a lock
//! of its own) on the default runtime, as pairs/s and client CPU per pair.
//!
//! Built with the feature, it installs a Prometheus recorder first (`metrics-exporter-prometheus`,
//! what an application does), so every event reaches a real recorder; built without, the same
//! loop runs. The comparison needs both builds in one sitting, interleaved:
//! `benches/metrics_overhead.sh` (env `RUNS`, default 5) builds and runs them and prints the
//! medians and the ratio (target: pairs/s with the feature ≥ 0.97× without). Alone, `cargo bench
//! --bench metrics [--features metrics]` prints one line per trial.

mod common;

use std::time::Instant;

use relock::testing::RedisServer;

/// Pairs per task in a trial.
const PAIRS_PER_TASK: usize = 2_000;
/// Tasks, each on a lock of its own.
const TASKS: usize = 32;

fn main() {
    #[cfg(feature = "metrics")]
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("install a Prometheus recorder");
    let feature = if cfg!(feature = "metrics") {
        "on"
    } else {
        "off"
    };
    let trials: usize = common::env_or("TRIALS", 3);
    let server = RedisServer::start().expect("start redis-server");
    let runtime = common::runtime(0);
    let client = runtime
        .block_on(relock::Client::connect(&server.url()))
        .expect("connect");
    // A first pass loads the scripts and warms the connection.
    runtime.block_on(pairs(&client, 100));
    for _ in 0..trials {
        let (cpu, started) = (common::cpu_ns(), Instant::now());
        runtime.block_on(pairs(&client, PAIRS_PER_TASK));
        let (elapsed, cpu) = (started.elapsed(), common::cpu_ns() - cpu);
        let total = (TASKS * PAIRS_PER_TASK) as f64;
        println!(
            "metrics={feature} pairs_per_sec={:.0} client_cpu_us_per_pair={:.2}",
            total / elapsed.as_secs_f64(),
            cpu as f64 / 1e3 / total
        );
    }
}

/// `TASKS` tasks, each taking and releasing its own lock `n` times.
async fn pairs(client: &relock::Client, n: usize) {
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let lock = client.lock(format!("metrics-overhead:{i}"));
            tokio::spawn(async move {
                for _ in 0..n {
                    lock.lock().await.unwrap().unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}
