//! Multi: what a `MultiLock` costs against the single `Lock`, measured in the same run.
//!
//! - **One server, one slot**: one task takes and releases a multi-lock of k = 1, 2, 8 and 32
//!   plain locks, against one `Lock`'s pair. The plain locks of one client and slot are taken by
//!   one script and released by one, so the pair should cost about one `Lock` pair whatever k.
//! - **One by one**: k = 1, 2 and 8 fenced locks (a type taken part by part, in order), and k
//!   plain locks spread over two servers; reported per part, to see that the cost grows no worse
//!   than linearly.
//! - **Contended**: 8 tasks on two clients take random overlapping subsets (3 of 10 locks, each
//!   listed in random order) for a few seconds, holding each for a moment: multi-locks per
//!   second, and the fewest any task got (0 would be a starved task).
//!
//! Figures are p50 of one acquire + release pair (best of three interleaved trials per run),
//! medians over `RUNS` runs (default 3). Targets are printed, never asserted.
//! `cargo bench --bench multi`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::report::Table;
use relock::testing::RedisServer;
use relock::{MultiLock, Owner, Part};

/// What one pair takes.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// One `Lock`: the reference.
    Single,
    /// k plain locks on one client.
    Plain(usize),
    /// k fenced locks on one client: taken one by one.
    Fenced(usize),
    /// k plain locks, half on each of two servers.
    TwoServers(usize),
}

impl Shape {
    fn name(self) -> String {
        match self {
            Shape::Single => "Lock".into(),
            Shape::Plain(k) => format!("MultiLock of {k} Lock(s), one server"),
            Shape::Fenced(k) => format!("MultiLock of {k} FencedLock(s), one by one"),
            Shape::TwoServers(k) => format!("MultiLock of {k} Locks over 2 servers"),
        }
    }

    fn parts(self) -> usize {
        match self {
            Shape::Single => 1,
            Shape::Plain(k) | Shape::Fenced(k) | Shape::TwoServers(k) => k,
        }
    }
}

/// The p50 in ms of `count` acquire + release pairs of `shape`, in one task.
async fn pairs(clients: &[relock::Client; 2], shape: Shape, count: usize) -> f64 {
    let [a, b] = clients;
    let name = |i: usize| format!("bench:multi:{i}");
    let multi = match shape {
        Shape::Single => None,
        Shape::Plain(k) => Some(a.multi_lock((0..k).map(name))),
        Shape::Fenced(k) => Some(MultiLock::new((0..k).map(|i| a.fenced_lock(name(i))))),
        Shape::TwoServers(k) => Some(MultiLock::new((0..k).map(|i| {
            let client = if i % 2 == 0 { a } else { b };
            Part::from(client.lock(name(i)))
        }))),
    };
    let single = a.lock(name(0));
    let mut times = Vec::with_capacity(count);
    for _ in 0..count {
        let t0 = Instant::now();
        match &multi {
            None => single.lock().await.unwrap().unlock().await.unwrap(),
            Some(multi) => multi.lock().await.unwrap().unlock().await.unwrap(),
        }
        times.push(common::ms(t0.elapsed()));
    }
    common::percentile(&times, 50.0)
}

/// 8 tasks on two clients take random subsets of 3 of 10 locks for `run`: (multi-locks per
/// second, the fewest any task got).
async fn contended(clients: &[relock::Client; 2], run: Duration) -> (f64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let client = clients[t % 2].clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut seed = 0x9E37_79B9_7F4A_7C15_u64 ^ (t as u64 + 1);
                let mut next = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed
                };
                let mut got = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut picked: Vec<u64> = Vec::new();
                    while picked.len() < 3 {
                        let i = next() % 10;
                        if !picked.contains(&i) {
                            picked.push(i);
                        }
                    }
                    let multi = client
                        .multi_lock(picked.iter().map(|i| format!("bench:multi:c:{i}")))
                        .owned_by(Owner::new());
                    let guard = multi.lock().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    guard.unlock().await.unwrap();
                    got += 1;
                }
                got
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(run).await;
    stop.store(true, Ordering::Relaxed);
    let mut counts = Vec::new();
    for task in tasks {
        counts.push(task.await.unwrap());
    }
    let total: u64 = counts.iter().sum();
    (
        total as f64 / started.elapsed().as_secs_f64(),
        counts.into_iter().min().unwrap_or(0),
    )
}

fn main() {
    let runs = common::runs(3);
    let servers = [
        RedisServer::start().expect("start redis-server"),
        RedisServer::start().expect("start redis-server"),
    ];
    let runtime = common::runtime(1);
    let clients = runtime.block_on(async {
        [
            relock::Client::connect(&servers[0].url()).await.unwrap(),
            relock::Client::connect(&servers[1].url()).await.unwrap(),
        ]
    });
    let shapes = [
        Shape::Single,
        Shape::Plain(1),
        Shape::Plain(2),
        Shape::Plain(8),
        Shape::Plain(32),
        Shape::Fenced(1),
        Shape::Fenced(2),
        Shape::Fenced(8),
        Shape::TwoServers(2),
        Shape::TwoServers(8),
    ];
    for shape in shapes {
        runtime.block_on(pairs(&clients, shape, 50)); // warm-up: scripts loaded
    }
    let mut table = Table::new(
        "multi",
        format!(
            "multi: acquire + release pairs, one task — redis {}, medians of {runs} runs",
            common::redis_version(&servers[0])
        ),
    );
    let pair_count = common::env_or("PAIRS", 1_000);
    let contended_for = Duration::from_millis(common::env_or("CONTENDED_MS", 3_000));
    for run in 1..=runs {
        eprintln!("multi: run {run}/{runs}");
        let mut best = vec![f64::MAX; shapes.len()];
        for _ in 0..3 {
            for (i, shape) in shapes.into_iter().enumerate() {
                best[i] = best[i].min(runtime.block_on(pairs(&clients, shape, pair_count)));
            }
        }
        let single = best[0];
        for (i, shape) in shapes.into_iter().enumerate() {
            let figure = format!("{} pair p50", shape.name());
            if shape == Shape::Single {
                table.add(&figure, "ms", single);
                continue;
            }
            table.add_ratio(
                &figure,
                "ms",
                best[i],
                best[i] / single,
                "Lock pair (same run)",
            );
            if !matches!(shape, Shape::Plain(_)) {
                let per_part = best[i] / shape.parts() as f64;
                table.add_ratio(
                    &format!("{} pair p50 per part", shape.name()),
                    "ms",
                    per_part,
                    per_part / single,
                    "Lock pair (same run)",
                );
            }
        }
        let (rate, fewest) = runtime.block_on(contended(&clients, contended_for));
        table.add(
            "contended: 8 tasks, 3 of 10 locks, multi-locks/s",
            "/s",
            rate,
        );
        table.add(
            "contended: fewest multi-locks any task got",
            "",
            fewest as f64,
        );
    }
    for k in [1, 2, 8, 32] {
        let figure = format!("{} pair p50", Shape::Plain(k).name());
        let met = table.ratio(&figure) <= 1.3;
        table.target(&figure, "≤ 1.3× a Lock pair", met);
    }
    for shape in [Shape::Fenced(8), Shape::TwoServers(8)] {
        let figure = format!("{} pair p50 per part", shape.name());
        let small = match shape {
            Shape::Fenced(_) => Shape::Fenced(1),
            _ => Shape::TwoServers(2),
        };
        let base = table.ratio(&format!("{} pair p50 per part", small.name()));
        let met = table.ratio(&figure) <= base * 1.1;
        table.target(&figure, "per part no more than at small k (linear)", met);
    }
    let figure = "contended: fewest multi-locks any task got";
    let met = table.max(figure) > 0.0 && table.median(figure) > 0.0;
    table.target(figure, "> 0 (no task starved)", met);
    table.print();
}
