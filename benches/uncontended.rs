//! Uncontended: N tasks (1 and 32) each take and release a lock of its own in a loop, against the
//! ceiling of the same scripts sent by `redis-benchmark` (`-c 1 -P 1` for one task, `-c 1 -P 32`
//! for 32, like fred's multiplexed connection), measured in the same run.
//!
//! Figures: pairs/s, and p50/p99 of one lock + unlock pair, each relock figure also as a ratio
//! to the ceiling; each is the best of three trials per run on both sides. redis-server's CPU
//! time per pair shows whether relock's pair costs the server more than the ceiling's. relock
//! runs on a runtime with one worker fewer than the machine has cores (at least one), leaving
//! redis-server its core as the one-thread `redis-benchmark` does; the 32-task loop is also run
//! on the default runtime (a worker per core).
//!
//! The same loops run with `SpinLock` and `FairLock` handles in the same run, each trial of
//! `Lock` followed by one of each (so a drift of the machine weighs on all alike). `SpinLock`
//! runs the plain lock's acquire script and its release publishes nothing, so its pairs/s must
//! be at least `Lock`'s (target ≥ 1.0× `Lock`'s, same run); `FairLock` runs its own scripts (the
//! queue and deadline keys are read on every acquire and release), and is printed for
//! information. `cargo bench --bench uncontended` (env `RUNS`, default 3).

mod common;

use std::time::Instant;

use common::report::Table;
use relock::testing::RedisServer;

/// Pairs per task in the 32-task loops.
const PAIRS_PER_TASK: usize = 1_000;

/// The lock types, as this bench takes them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lock,
    Spin,
    Fair,
}

/// A handle of one of the types (made once per task, as `Lock`'s always was).
enum Handle {
    Lock(relock::Lock),
    Spin(relock::SpinLock),
    Fair(relock::FairLock),
}

impl Handle {
    fn new(client: &relock::Client, kind: Kind, name: String) -> Handle {
        match kind {
            Kind::Lock => Handle::Lock(client.lock(name)),
            Kind::Spin => Handle::Spin(client.spin_lock(name)),
            Kind::Fair => Handle::Fair(client.fair_lock(name)),
        }
    }

    /// One lock + unlock pair.
    async fn pair(&self) {
        let guard = match self {
            Handle::Lock(lock) => lock.lock().await,
            Handle::Spin(lock) => lock.lock().await,
            Handle::Fair(lock) => lock.lock().await,
        };
        guard.unwrap().unlock().await.unwrap();
    }
}

/// `tasks` tasks each take and release their own lock `pairs` times: (pairs/s, pair p50 ms, p99).
async fn relock_pairs(
    client: &relock::Client,
    kind: Kind,
    tasks: usize,
    pairs: usize,
) -> (f64, f64, f64) {
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let lock = Handle::new(client, kind, format!("bench:own:{t}"));
            tokio::spawn(async move {
                let mut times = Vec::with_capacity(pairs);
                for _ in 0..pairs {
                    let t0 = Instant::now();
                    lock.pair().await;
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
    kind: Kind,
    tasks: usize,
    pairs: usize,
) -> BestOfThree {
    best_of_three_each(server, runtime, client, &[kind], tasks, pairs).remove(0)
}

/// [`best_of_three`] for each of `kinds`, their trials interleaved (one trial of each kind, three
/// times over), so that a drift of the machine during the run weighs on every type alike.
fn best_of_three_each(
    server: &RedisServer,
    runtime: &tokio::runtime::Runtime,
    client: &relock::Client,
    kinds: &[Kind],
    tasks: usize,
    pairs: usize,
) -> Vec<BestOfThree> {
    let mut trials = vec![Vec::new(); kinds.len()];
    let mut cpu = vec![std::time::Duration::ZERO; kinds.len()];
    for _ in 0..3 {
        for (k, &kind) in kinds.iter().enumerate() {
            let cpu_before = common::server_cpu(server);
            trials[k].push(runtime.block_on(relock_pairs(client, kind, tasks, pairs)));
            cpu[k] += common::server_cpu(server) - cpu_before;
        }
    }
    trials
        .iter()
        .zip(cpu)
        .map(|(trials, cpu)| {
            let best = |pick: fn(&(f64, f64, f64)) -> f64, better: fn(f64, f64) -> f64| {
                trials.iter().map(pick).reduce(better).unwrap()
            };
            BestOfThree {
                per_sec: best(|t| t.0, f64::max),
                p50: best(|t| t.1, f64::min),
                p99: best(|t| t.2, f64::min),
                server_us_per_pair: cpu.as_secs_f64() * 1e6 / (3 * tasks * pairs) as f64,
            }
        })
        .collect()
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
    for kind in [Kind::Lock, Kind::Spin, Kind::Fair] {
        runtime.block_on(relock_pairs(&client, kind, 4, 200)); // warm-up: scripts loaded
    }
    (runtime, client)
}

fn main() {
    let runs = common::runs(3);
    let server = RedisServer::start().expect("start redis-server");
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
        // Lock's trials interleaved with SpinLock's and FairLock's, on the same runtime and client.
        let kinds = [Kind::Lock, Kind::Spin, Kind::Fair];
        let ones = best_of_three_each(&server, &runtime, &client, &kinds, 1, 5_000);
        let manys = best_of_three_each(&server, &runtime, &client, &kinds, 32, PAIRS_PER_TASK);
        let (one, many) = (&ones[0], &manys[0]);
        let many_default = best_of_three(
            &server,
            &default_runtime,
            &default_client,
            Kind::Lock,
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
        for (k, name) in [(1, "SpinLock"), (2, "FairLock")] {
            let (one_k, many_k) = (&ones[k], &manys[k]);
            table.add_ratio(
                &format!("{name} 1 task pairs/s"),
                "/s",
                one_k.per_sec,
                one_k.per_sec / one.per_sec,
                "Lock's 1 task pairs/s",
            );
            table.add_ratio(
                &format!("{name} 1 task pair p50"),
                "ms",
                one_k.p50,
                one_k.p50 / c1.pair_p50_ms,
                "-P 1 pair p50",
            );
            table.add_ratio(
                &format!("{name} 32 tasks pairs/s"),
                "/s",
                many_k.per_sec,
                many_k.per_sec / many.per_sec,
                "Lock's 32 tasks pairs/s",
            );
            table.add_ratio(
                &format!("{name} 32 tasks server CPU per pair"),
                "µs",
                many_k.server_us_per_pair,
                many_k.server_us_per_pair / many.server_us_per_pair,
                "Lock's server CPU",
            );
        }
    }
    let met = table.ratio("32 tasks pairs/s") >= 0.9;
    table.target("32 tasks pairs/s", "≥ 0.9× -P 32 ceiling", met);
    let met = table.ratio("1 task pair p50") <= 1.3;
    table.target("1 task pair p50", "≤ 1.3× -P 1 ceiling", met);
    for figure in ["SpinLock 1 task pairs/s", "SpinLock 32 tasks pairs/s"] {
        let met = table.ratio(figure) >= 1.0;
        table.target(figure, "≥ Lock's (1.0×, same run)", met);
    }
    table.print();
}
