//! Fenced: what fencing costs. Tasks (1 and 32, each on a lock and a key of its own) take a lock,
//! write a key and release, in a loop, in four ways measured in the same run, their trials
//! interleaved:
//!
//! - `Lock` + a plain `SET` (the reference);
//! - `FencedLock` + `Fence::set` (the fenced write: one script that checks the token, records it
//!   and writes);
//! - `Lock` + `GET` + `SET` (a read-modify-write, unprotected against a paused holder);
//! - `FencedLock` + `Fence::get` + `Fence::set` (the same, fenced: safe against one).
//!
//! Figures: cycles/s (a cycle is lock, the I/O, unlock) and p50 of one cycle, each the best of
//! three trials per run, and redis-server's CPU time per cycle, medians over `RUNS` runs
//! (default 3); the fenced figures also as ratios to their unfenced twins. A fenced cycle has as
//! many round trips as its twin, so one task (bound by round trips) should lose little; 32 tasks
//! are bound by the server's CPU, where a script costs more than a `SET`. Targets are printed,
//! never asserted.
//! `cargo bench --bench fenced`.

mod common;

use std::time::Instant;

use common::report::Table;
use relock::fred::interfaces::KeysInterface;
use relock::testing::RedisServer;

/// The four ways of one cycle.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    PlainWrite,
    FencedWrite,
    PlainUpdate,
    FencedUpdate,
}

impl Way {
    const ALL: [Way; 4] = [
        Way::PlainWrite,
        Way::FencedWrite,
        Way::PlainUpdate,
        Way::FencedUpdate,
    ];

    fn name(self) -> &'static str {
        match self {
            Way::PlainWrite => "Lock + SET",
            Way::FencedWrite => "FencedLock + Fence::set",
            Way::PlainUpdate => "Lock + GET + SET",
            Way::FencedUpdate => "FencedLock + Fence::get + Fence::set",
        }
    }
}

/// One cycle of `way` on lock `name` and key `key`.
async fn cycle(client: &relock::Client, fence: &relock::Fence, way: Way, name: &str, key: &str) {
    let redis = client.redis();
    match way {
        Way::PlainWrite | Way::PlainUpdate => {
            let guard = client.lock(name).lock().await.unwrap();
            let value: i64 = if way == Way::PlainUpdate {
                redis.get::<Option<i64>, _>(key).await.unwrap().unwrap_or(0)
            } else {
                0
            };
            let _: () = redis.set(key, value + 1, None, None, false).await.unwrap();
            guard.unlock().await.unwrap();
        }
        Way::FencedWrite | Way::FencedUpdate => {
            let guard = client.fenced_lock(name).lock().await.unwrap();
            let token = guard.token();
            let value: i64 = if way == Way::FencedUpdate {
                let read: Option<i64> = fence.get(token, key).await.unwrap();
                read.unwrap_or(0)
            } else {
                0
            };
            fence.set(token, key, value + 1).await.unwrap();
            guard.unlock().await.unwrap();
        }
    }
}

/// `tasks` tasks each run `cycles` cycles of `way` on their own lock and key: (cycles/s, p50 ms).
async fn cycles(client: &relock::Client, way: Way, tasks: usize, cycles: usize) -> (f64, f64) {
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let client = client.clone();
            tokio::spawn(async move {
                let name = format!("bench:fenced:lock:{t}");
                let key = format!("bench:fenced:key:{t}");
                let fence = client.fence(&key);
                let mut times = Vec::with_capacity(cycles);
                for _ in 0..cycles {
                    let t0 = Instant::now();
                    cycle(&client, &fence, way, &name, &key).await;
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
        (tasks * cycles) as f64 / elapsed,
        common::percentile(&times, 50.0),
    )
}

/// Each way's best of three trials (highest rate, lowest p50), the trials interleaved, and
/// redis-server's CPU time per cycle over the three, in µs.
fn best_of_three(
    server: &RedisServer,
    runtime: &tokio::runtime::Runtime,
    client: &relock::Client,
    tasks: usize,
    count: usize,
) -> Vec<(f64, f64, f64)> {
    let mut best = vec![(0.0_f64, f64::MAX, 0.0); Way::ALL.len()];
    for _ in 0..3 {
        for (i, way) in Way::ALL.into_iter().enumerate() {
            let cpu = common::server_cpu(server);
            let (rate, p50) = runtime.block_on(cycles(client, way, tasks, count));
            let cpu_us = (common::server_cpu(server) - cpu).as_secs_f64() * 1e6;
            best[i] = (
                best[i].0.max(rate),
                best[i].1.min(p50),
                best[i].2 + cpu_us / (3 * tasks * count) as f64,
            );
        }
    }
    best
}

fn main() {
    let runs = common::runs(3);
    let server = RedisServer::start().expect("start redis-server");
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    // As the uncontended bench: the server keeps a core of its own.
    let runtime = common::runtime((cores - 1).max(1));
    let client = runtime
        .block_on(relock::Client::connect(&server.url()))
        .unwrap();
    for way in Way::ALL {
        runtime.block_on(cycles(&client, way, 4, 100)); // warm-up: scripts loaded
    }
    let mut table = Table::new(
        "fenced",
        format!(
            "fenced: lock + write (+ read) + unlock cycles, each task on its own lock and key — redis {}, medians of {runs} runs",
            common::redis_version(&server)
        ),
    );
    for run in 1..=runs {
        eprintln!("fenced: run {run}/{runs}");
        for (tasks, count) in [(1, 2_000), (32, 300)] {
            let best = best_of_three(&server, &runtime, &client, tasks, count);
            for (i, way) in Way::ALL.into_iter().enumerate() {
                let (rate, p50, cpu) = best[i];
                let figure = format!("{tasks} task(s) {} cycles/s", way.name());
                let p50_figure = format!("{tasks} task(s) {} p50", way.name());
                let cpu_figure = format!("{tasks} task(s) {} server CPU per cycle", way.name());
                match way {
                    Way::FencedWrite | Way::FencedUpdate => {
                        let twin = best[i - 1];
                        let to = format!("{} (same run)", Way::ALL[i - 1].name());
                        table.add_ratio(&figure, "/s", rate, rate / twin.0, &to);
                        table.add_ratio(&p50_figure, "ms", p50, p50 / twin.1, &to);
                        table.add_ratio(&cpu_figure, "µs", cpu, cpu / twin.2, &to);
                    }
                    Way::PlainWrite | Way::PlainUpdate => {
                        table.add(&figure, "/s", rate);
                        table.add(&p50_figure, "ms", p50);
                        table.add(&cpu_figure, "µs", cpu);
                    }
                }
            }
        }
    }
    for tasks in [1, 32] {
        for way in [Way::FencedWrite, Way::FencedUpdate] {
            let figure = format!("{tasks} task(s) {} cycles/s", way.name());
            let met = table.ratio(&figure) >= 0.8;
            table.target(&figure, "≥ 0.8× unfenced (same run)", met);
        }
    }
    table.print();
}
