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

use common::clients::{self, Trial as Measured};
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

/// A loop of lock + unlock pairs: relock with a lock type, or one of the bare clients sending
/// relock's two scripts (`common/clients.rs`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Loop {
    Relock(Kind),
    Fred,
    RedisRs,
}

/// The clients of one runtime: relock's, and the references'.
struct Clients {
    relock: relock::Client,
    fred: fred::clients::Client,
    redis_rs: redis::aio::MultiplexedConnection,
}

/// One trial: pairs/s and client CPU per pair, and (relock only) p50 and p99 of one pair in ms.
#[derive(Clone, Copy)]
struct Trial {
    run: Measured,
    p50: f64,
    p99: f64,
}

async fn trial(clients: &Clients, what: Loop, tasks: usize, pairs: usize) -> Trial {
    let unmeasured = |run| Trial {
        run,
        p50: f64::NAN,
        p99: f64::NAN,
    };
    match what {
        Loop::Relock(kind) => relock_pairs(&clients.relock, kind, tasks, pairs).await,
        Loop::Fred => unmeasured(clients::fred_pairs(&clients.fred, tasks, pairs).await),
        Loop::RedisRs => unmeasured(clients::redis_rs_pairs(&clients.redis_rs, tasks, pairs).await),
    }
}

/// `tasks` tasks each take and release their own lock `pairs` times.
async fn relock_pairs(client: &relock::Client, kind: Kind, tasks: usize, pairs: usize) -> Trial {
    let locks: Vec<_> = (0..tasks)
        .map(|t| Handle::new(client, kind, format!("bench:own:{t}")))
        .collect();
    let mut times = Vec::new();
    let run = Measured::measure(tasks * pairs, async {
        let handles: Vec<_> = locks
            .into_iter()
            .map(|lock| {
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
        for h in handles {
            times.extend(h.await.unwrap());
        }
    })
    .await;
    Trial {
        run,
        p50: common::percentile(&times, 50.0),
        p99: common::percentile(&times, 99.0),
    }
}

/// Pairs/s, p50 and p99 (ms), client CPU per pair (µs), each the best of three trials (highest
/// rate, lowest latencies and CPU), as the ceiling takes its own: one trial on a small shared
/// machine swings with where the scheduler puts the client and the server. Also redis-server's
/// CPU time per pair over the three, in µs, and every trial's pairs/s (for the spread).
struct BestOfThree {
    per_sec: f64,
    p50: f64,
    p99: f64,
    client_us_per_pair: f64,
    server_us_per_pair: f64,
    trials_per_sec: Vec<f64>,
}

/// [`BestOfThree`] for each of `loops`, their trials interleaved (one trial of each, three times
/// over), so that a drift of the machine during the run weighs on every loop alike.
fn best_of_three_each(
    server: &RedisServer,
    runtime: &tokio::runtime::Runtime,
    clients: &Clients,
    loops: &[Loop],
    tasks: usize,
    pairs: usize,
) -> Vec<BestOfThree> {
    let mut trials = vec![Vec::new(); loops.len()];
    let mut cpu = vec![std::time::Duration::ZERO; loops.len()];
    for _ in 0..3 {
        for (k, &what) in loops.iter().enumerate() {
            let cpu_before = common::server_cpu(server);
            trials[k].push(runtime.block_on(trial(clients, what, tasks, pairs)));
            cpu[k] += common::server_cpu(server) - cpu_before;
        }
    }
    trials
        .iter()
        .zip(cpu)
        .map(|(trials, cpu)| {
            let best = |pick: fn(&Trial) -> f64, better: fn(f64, f64) -> f64| {
                trials.iter().map(pick).reduce(better).unwrap()
            };
            BestOfThree {
                per_sec: best(|t| t.run.per_sec, f64::max),
                p50: best(|t| t.p50, f64::min),
                p99: best(|t| t.p99, f64::min),
                client_us_per_pair: best(|t| t.run.cpu_us_per_pair, f64::min),
                server_us_per_pair: cpu.as_secs_f64() * 1e6 / (3 * tasks * pairs) as f64,
                trials_per_sec: trials.iter().map(|t| t.run.per_sec).collect(),
            }
        })
        .collect()
}

/// A multi-threaded runtime with `workers` worker threads, and the clients on it.
fn runtime_and_clients(server: &RedisServer, workers: usize) -> (tokio::runtime::Runtime, Clients) {
    let runtime = common::runtime(workers);
    let url = server.url();
    let clients = runtime.block_on(async {
        Clients {
            relock: relock::Client::connect(&url).await.unwrap(),
            fred: clients::fred_client(&url).await,
            redis_rs: clients::redis_rs_connection(&url).await,
        }
    });
    let all = [
        Loop::Relock(Kind::Lock),
        Loop::Relock(Kind::Spin),
        Loop::Relock(Kind::Fair),
        Loop::Fred,
        Loop::RedisRs,
    ];
    for what in all {
        runtime.block_on(trial(&clients, what, 4, 200)); // warm-up: scripts loaded
    }
    (runtime, clients)
}

/// (max − min) / median of `values`.
fn spread(values: &[f64]) -> f64 {
    let max = values.iter().copied().fold(f64::MIN, f64::max);
    let min = values.iter().copied().fold(f64::MAX, f64::min);
    (max - min) / common::median(values)
}

fn main() {
    let runs = common::runs(3);
    let server = RedisServer::start().expect("start redis-server");
    // The ceiling's client, redis-benchmark, is one thread, and redis-server needs a core of its
    // own: relock gets the cores the server leaves, like for like. The default runtime (one
    // worker per core, so the client competes with the server for CPU) is measured too.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (runtime, clients) = runtime_and_clients(&server, (cores - 1).max(1));
    let (default_runtime, default_clients) = runtime_and_clients(&server, cores);
    let mut table = Table::new(
        "uncontended",
        format!(
            "uncontended: lock + unlock pairs, each task on its own lock — redis {}, medians of {runs} runs",
            common::redis_version(&server)
        ),
    );
    // Every trial's pairs/s of the 32-task loops on the default runtime, over all runs.
    let (mut lock_trials, mut fred_trials) = (Vec::new(), Vec::new());
    for run in 1..=runs {
        eprintln!("uncontended: run {run}/{runs}");
        let c1 = common::ceiling::measure(&server, 1, 10_000);
        let c32 = common::ceiling::measure(&server, 32, 100_000);
        // Lock's trials interleaved with SpinLock's and FairLock's and the bare clients', on the
        // same runtime.
        let relock_loops = [Kind::Lock, Kind::Spin, Kind::Fair].map(Loop::Relock);
        let ones = best_of_three_each(&server, &runtime, &clients, &relock_loops, 1, 5_000);
        let mut loops = relock_loops.to_vec();
        loops.extend([Loop::Fred, Loop::RedisRs]);
        let manys = best_of_three_each(&server, &runtime, &clients, &loops, 32, PAIRS_PER_TASK);
        let (one, many) = (&ones[0], &manys[0]);
        let (fred, redis_rs) = (&manys[3], &manys[4]);
        let defaults = best_of_three_each(
            &server,
            &default_runtime,
            &default_clients,
            &[Loop::Relock(Kind::Lock), Loop::Fred, Loop::RedisRs],
            32,
            PAIRS_PER_TASK,
        );
        let (many_default, fred_default, redis_rs_default) =
            (&defaults[0], &defaults[1], &defaults[2]);
        lock_trials.extend(&many_default.trials_per_sec);
        fred_trials.extend(&fred_default.trials_per_sec);
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
        // The client's own cost: this process's CPU per pair, next to the bare clients' on the
        // same runtime.
        let workers = [
            (String::new(), many, fred, redis_rs),
            (
                format!(", {cores} workers"),
                many_default,
                fred_default,
                redis_rs_default,
            ),
        ];
        for (on, relock, fred, redis_rs) in workers {
            table.add(
                &format!("fred alone 32 tasks pairs/s{on}"),
                "/s",
                fred.per_sec,
            );
            table.add(
                &format!("redis-rs 32 tasks pairs/s{on}"),
                "/s",
                redis_rs.per_sec,
            );
            table.add(
                &format!("fred alone client CPU per pair{on}"),
                "µs",
                fred.client_us_per_pair,
            );
            table.add_ratio(
                &format!("redis-rs client CPU per pair{on}"),
                "µs",
                redis_rs.client_us_per_pair,
                redis_rs.client_us_per_pair / fred.client_us_per_pair,
                "fred alone's",
            );
            table.add_ratio(
                &format!("32 tasks client CPU per pair{on}"),
                "µs",
                relock.client_us_per_pair,
                relock.client_us_per_pair / fred.client_us_per_pair,
                "fred alone's",
            );
            table.add_ratio(
                &format!("32 tasks client CPU per pair vs redis-rs{on}"),
                "µs",
                relock.client_us_per_pair,
                relock.client_us_per_pair / redis_rs.client_us_per_pair,
                "redis-rs's",
            );
        }
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
                &format!("{name} 32 tasks client CPU per pair"),
                "µs",
                many_k.client_us_per_pair,
                many_k.client_us_per_pair / many.client_us_per_pair,
                "Lock's client CPU",
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
    let met = table.ratio("32 tasks pairs/s") >= 1.0;
    table.target("32 tasks pairs/s", "≥ 1.0× -P 32 ceiling", met);
    let on_default = format!(", {cores} workers");
    let figure = format!("32 tasks pairs/s{on_default}");
    let met = table.ratio(&figure) >= 0.9;
    table.target(&figure, "≥ 0.9× -P 32 ceiling", met);
    let figure = format!("32 tasks client CPU per pair{on_default}");
    let met = table.ratio(&figure) <= 1.3;
    table.target(&figure, "≤ 1.3× fred alone's", met);
    let figure = format!("32 tasks client CPU per pair vs redis-rs{on_default}");
    let met = table.ratio(&figure) <= 1.0;
    table.target(&figure, "≤ redis-rs's (1.0×)", met);
    // The spread of single trials over the whole sitting: relock's no wider than fred's.
    let (lock_spread, fred_spread) = (spread(&lock_trials), spread(&fred_trials));
    table.add(
        &format!("fred alone 32 tasks pairs/s spread{on_default}"),
        "×",
        fred_spread,
    );
    table.add_ratio(
        &format!("32 tasks pairs/s spread{on_default}"),
        "×",
        lock_spread,
        lock_spread / fred_spread,
        "fred alone's spread",
    );
    let figure = format!("32 tasks pairs/s spread{on_default}");
    let met = lock_spread <= fred_spread;
    table.target(&figure, "≤ fred alone's", met);
    let figure = "FairLock 32 tasks pairs/s";
    let met = table.ratio(figure) >= 0.9;
    table.target(figure, "≥ 0.9× Lock's", met);
    let met = table.ratio("1 task pair p50") <= 1.3;
    table.target("1 task pair p50", "≤ 1.3× -P 1 ceiling", met);
    for figure in ["SpinLock 1 task pairs/s", "SpinLock 32 tasks pairs/s"] {
        let met = table.ratio(figure) >= 1.0;
        table.target(figure, "≥ Lock's (1.0×, same run)", met);
    }
    table.print();
}
