//! Combining (`Config::with_combining(true)`): a client whose overlapping script calls go out
//! together against the default client, whose every call goes out alone, in one sitting on one
//! server. `cargo bench --bench combining` (env `RUNS`, default 3).
//!
//! - **Every type, 32 tasks**: each task takes and gives back its own lock (or permit) in a
//!   loop: `Lock`, `FairLock`, `RwLock` read and write, `FencedLock`, `Semaphore` (one permit of
//!   one) and `PermitSemaphore`. Per type and way (calls alone, combining): pairs/s and this
//!   process's CPU per pair, best of three trials interleaved; redis-server's CPU per pair over
//!   the three; and the client's `writev` system calls per pair over one more trial, counted by
//!   `perf stat -e syscalls:sys_enter_writev` on this process (printed as NaN without `perf`).
//!   Each combining figure is also a ratio to the same type's calls alone. Both on a runtime
//!   with one worker fewer than the machine has cores (the server keeps a core, as for the
//!   `redis-benchmark` ceiling) and on the default runtime (a worker per core).
//! - **References** (`Lock`): the `redis-benchmark -P 32` ceiling of the two scripts sent alone
//!   (`common/ceiling.rs`), and redis-rs sending them from 32 tasks on one multiplexed
//!   connection (`common/clients.rs`), for the client CPU per pair.
//! - **Batches and latency** (`Lock`, combining): at 1, 4, 32 and 256 tasks, the sends by how
//!   many calls each carried (`ClientStats::batch_sizes`, as a share of all sends per power of
//!   two) and the p99 of one call (a `lock()` or an `unlock()`), next to the same p99 with
//!   every call alone.
//!
//! Targets (issue 35), printed ✓/✗: on the default runtime combining's client CPU per pair at
//! most redis-rs's; `writev` per pair at most 0.25; server CPU per pair at most 0.7× calls
//! alone; pairs/s at least 1.5× the `-P 32` ceiling; one task's pair p50 and client CPU within
//! 3 % of calls alone.

mod common;

use std::process::{Command, Stdio};
use std::time::Instant;

use common::clients::{self, Trial};
use common::report::Table;
use relock::testing::RedisServer;

/// Pairs per task in the 32-task loops.
const PAIRS_PER_TASK: usize = 500;

/// The types measured, with their names in the table.
const KINDS: [(Kind, &str); 7] = [
    (Kind::Lock, "Lock"),
    (Kind::Fair, "FairLock"),
    (Kind::Read, "RwLock read"),
    (Kind::Write, "RwLock write"),
    (Kind::Fenced, "FencedLock"),
    (Kind::Semaphore, "Semaphore"),
    (Kind::Permit, "PermitSemaphore"),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lock,
    Fair,
    Read,
    Write,
    Fenced,
    Semaphore,
    Permit,
}

/// One task's handle of one of the types.
enum Handle {
    Lock(relock::Lock),
    Fair(relock::FairLock),
    Read(relock::ReadLock),
    Write(relock::WriteLock),
    Fenced(relock::FencedLock),
    Semaphore(relock::Semaphore),
    Permit(relock::PermitSemaphore),
}

impl Handle {
    async fn new(client: &relock::Client, kind: Kind, name: String) -> Handle {
        match kind {
            Kind::Lock => Handle::Lock(client.lock(name)),
            Kind::Fair => Handle::Fair(client.fair_lock(name)),
            Kind::Read => Handle::Read(client.rw_lock(name).read()),
            Kind::Write => Handle::Write(client.rw_lock(name).write()),
            Kind::Fenced => Handle::Fenced(client.fenced_lock(name)),
            Kind::Semaphore => {
                let semaphore = client.semaphore(name);
                semaphore.try_set_permits(1).await.unwrap();
                Handle::Semaphore(semaphore)
            }
            Kind::Permit => {
                let semaphore = client.permit_semaphore(name);
                semaphore.try_set_permits(1).await.unwrap();
                Handle::Permit(semaphore)
            }
        }
    }

    /// One take + give back: the time of each call, in ms.
    async fn pair(&self) -> [f64; 2] {
        let started = Instant::now();
        let took = |at: Instant| common::ms(at.elapsed());
        match self {
            Handle::Lock(lock) => {
                let guard = lock.lock().await.unwrap();
                let (first, at) = (took(started), Instant::now());
                guard.unlock().await.unwrap();
                [first, took(at)]
            }
            Handle::Fair(lock) => {
                let guard = lock.lock().await.unwrap();
                let (first, at) = (took(started), Instant::now());
                guard.unlock().await.unwrap();
                [first, took(at)]
            }
            Handle::Read(lock) => {
                let guard = lock.lock().await.unwrap();
                let (first, at) = (took(started), Instant::now());
                guard.unlock().await.unwrap();
                [first, took(at)]
            }
            Handle::Write(lock) => {
                let guard = lock.lock().await.unwrap();
                let (first, at) = (took(started), Instant::now());
                guard.unlock().await.unwrap();
                [first, took(at)]
            }
            Handle::Fenced(lock) => {
                let guard = lock.lock().await.unwrap();
                let (first, at) = (took(started), Instant::now());
                guard.unlock().await.unwrap();
                [first, took(at)]
            }
            Handle::Semaphore(semaphore) => {
                semaphore.acquire(1).await.unwrap();
                let (first, at) = (took(started), Instant::now());
                semaphore.release(1).await.unwrap();
                [first, took(at)]
            }
            Handle::Permit(semaphore) => {
                let permit = semaphore.acquire().await.unwrap();
                let (first, at) = (took(started), Instant::now());
                permit.release().await.unwrap();
                [first, took(at)]
            }
        }
    }
}

/// One trial of `tasks` tasks doing `pairs` pairs each: pairs/s and CPU per pair, and every
/// call's time in ms.
fn trial(
    runtime: &tokio::runtime::Runtime,
    client: &relock::Client,
    kind: Kind,
    tasks: usize,
    pairs: usize,
) -> (Trial, Vec<f64>) {
    runtime.block_on(async {
        let mut handles = Vec::with_capacity(tasks);
        for t in 0..tasks {
            // A fresh name per trial and task: no trial finds another's state.
            let name = format!("bench:combining:{}:{t}", common::now_us());
            handles.push(Handle::new(client, kind, name).await);
        }
        let mut times = Vec::with_capacity(tasks * pairs * 2);
        let run = Trial::measure(tasks * pairs, async {
            let runs: Vec<_> = handles
                .into_iter()
                .map(|handle| {
                    tokio::spawn(async move {
                        let mut times = Vec::with_capacity(pairs * 2);
                        for _ in 0..pairs {
                            times.extend(handle.pair().await);
                        }
                        times
                    })
                })
                .collect();
            for run in runs {
                times.extend(run.await.unwrap());
            }
        })
        .await;
        (run, times)
    })
}

/// One way's figures for one type: pairs/s and client CPU per pair (best of three), server CPU
/// per pair (over the three), `writev` per pair (one more trial).
#[derive(Default, Clone, Copy)]
struct Figures {
    per_sec: f64,
    client_us: f64,
    server_us: f64,
    writev: f64,
}

/// The clients of one runtime: every call alone, and combining.
struct Ways {
    runtime: tokio::runtime::Runtime,
    alone: relock::Client,
    combining: relock::Client,
}

impl Ways {
    fn new(url: &str, workers: usize) -> Ways {
        let runtime = common::runtime(workers);
        let (alone, combining) = runtime.block_on(async {
            let config = relock::Config::from_url(url).unwrap();
            (
                relock::Client::new(config.clone()).await.unwrap(),
                relock::Client::new(config.with_combining(true))
                    .await
                    .unwrap(),
            )
        });
        Ways {
            runtime,
            alone,
            combining,
        }
    }

    /// `kind` both ways, trials interleaved: (alone, combining).
    fn measure(&self, server: &RedisServer, kind: Kind, tasks: usize) -> [Figures; 2] {
        let mut figures = [Figures::default(); 2];
        let clients = [&self.alone, &self.combining];
        let mut best = [(0.0f64, f64::MAX); 2];
        let mut server_cpu = [std::time::Duration::ZERO; 2];
        for _ in 0..3 {
            for (way, client) in clients.iter().enumerate() {
                let before = common::server_cpu(server);
                let (run, _) = trial(&self.runtime, client, kind, tasks, PAIRS_PER_TASK);
                server_cpu[way] += common::server_cpu(server) - before;
                best[way] = (
                    best[way].0.max(run.per_sec),
                    best[way].1.min(run.cpu_us_per_pair),
                );
            }
        }
        for (way, client) in clients.iter().enumerate() {
            let writev = writev_calls(|| trial(&self.runtime, client, kind, tasks, PAIRS_PER_TASK));
            let pairs = (tasks * PAIRS_PER_TASK) as f64;
            figures[way] = Figures {
                per_sec: best[way].0,
                client_us: best[way].1,
                server_us: server_cpu[way].as_secs_f64() * 1e6 / (3.0 * pairs),
                writev: writev.map_or(f64::NAN, |n| n as f64 / pairs),
            };
        }
        figures
    }
}

/// Runs `work` under `perf stat` counting this process's `writev` system calls: their number,
/// or `None` when `perf` cannot count them here.
fn writev_calls<R>(work: impl FnOnce() -> R) -> Option<u64> {
    let perf = Command::new("perf")
        .args(["stat", "-x", ",", "-e", "syscalls:sys_enter_writev", "-p"])
        .arg(std::process::id().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    // perf prints nothing once attached: give it the time to attach.
    std::thread::sleep(std::time::Duration::from_millis(300));
    work();
    let _ = Command::new("kill")
        .args(["-INT", &perf.id().to_string()])
        .status();
    let out = perf.wait_with_output().ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find(|line| line.contains("sys_enter_writev"))
        .and_then(|line| line.split(',').next()?.trim().parse().ok())
}

fn main() {
    let runs = common::runs(3);
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let spare = Ways::new(&url, (cores - 1).max(1));
    let default = Ways::new(&url, cores);
    let redis_rs = default.runtime.block_on(clients::redis_rs_connection(&url));
    // Warm-up: every script loaded on both clients (the dispatcher too), every runtime started.
    for ways in [&spare, &default] {
        for (kind, _) in KINDS {
            for client in [&ways.alone, &ways.combining] {
                trial(&ways.runtime, client, kind, 8, 20);
            }
        }
    }
    let mut table = Table::new(
        "combining",
        format!(
            "combining: calls that overlap go out together, against every call alone — redis {}, \
             medians of {runs} runs",
            common::redis_version(&server)
        ),
    );
    let on_default = format!(", {cores} workers");
    for run in 1..=runs {
        eprintln!("combining: run {run}/{runs}");
        let ceiling = common::ceiling::measure(&server, 32, 100_000);
        table.add("ceiling -P 32 pairs/s", "/s", ceiling.pairs_per_sec);
        for (ways, on) in [(&spare, String::new()), (&default, on_default.clone())] {
            for (kind, name) in KINDS {
                let [alone, combining] = ways.measure(&server, kind, 32);
                add_type(&mut table, name, &on, alone, combining);
                if kind == Kind::Lock {
                    table.add_ratio(
                        &format!("Lock combining 32 tasks pairs/s vs ceiling{on}"),
                        "/s",
                        combining.per_sec,
                        combining.per_sec / ceiling.pairs_per_sec,
                        "-P 32 pairs/s",
                    );
                }
            }
        }
        let reference =
            default
                .runtime
                .block_on(clients::redis_rs_pairs(&redis_rs, 32, PAIRS_PER_TASK));
        table.add(
            &format!("redis-rs 32 tasks client CPU per pair{on_default}"),
            "µs",
            reference.cpu_us_per_pair,
        );
        let combining = table.last(&format!("Lock combining client CPU per pair{on_default}"));
        table.add_ratio(
            &format!("Lock combining client CPU per pair vs redis-rs{on_default}"),
            "µs",
            combining,
            combining / reference.cpu_us_per_pair,
            "redis-rs's",
        );
        batches_and_latency(&mut table, &spare);
    }
    targets(&mut table, &on_default);
    table.print();
}

/// A figure of [`Figures`]: its name, unit and value.
type Row = (&'static str, &'static str, fn(&Figures) -> f64);

/// One type's rows: each figure both ways, combining's as a ratio to calls alone.
fn add_type(table: &mut Table, name: &str, on: &str, alone: Figures, combining: Figures) {
    let rows: [Row; 4] = [
        ("32 tasks pairs/s", "/s", |f| f.per_sec),
        ("client CPU per pair", "µs", |f| f.client_us),
        ("server CPU per pair", "µs", |f| f.server_us),
        ("writev per pair", "", |f| f.writev),
    ];
    for (figure, unit, pick) in rows {
        table.add(&format!("{name} alone {figure}{on}"), unit, pick(&alone));
        table.add_ratio(
            &format!("{name} combining {figure}{on}"),
            unit,
            pick(&combining),
            pick(&combining) / pick(&alone),
            "calls alone",
        );
    }
}

/// `Lock` at 1, 4, 32 and 256 tasks: combining's sends by calls carried, and the p99 of one
/// call both ways.
fn batches_and_latency(table: &mut Table, ways: &Ways) {
    for tasks in [1, 4, 32, 256] {
        let pairs = (16_000 / tasks).clamp(40, 5_000);
        let before = ways.combining.stats().batch_sizes;
        let (combining, times) = trial(&ways.runtime, &ways.combining, Kind::Lock, tasks, pairs);
        let after = ways.combining.stats().batch_sizes;
        let (alone, alone_times) = trial(&ways.runtime, &ways.alone, Kind::Lock, tasks, pairs);
        let sends: Vec<u64> = (0..8).map(|k| after[k] - before[k]).collect();
        let total = sends.iter().sum::<u64>().max(1) as f64;
        let calls = (tasks * pairs * 2) as f64;
        table.add(&format!("{tasks} tasks calls per send"), "", calls / total);
        for (k, label) in ["1", "2-3", "4-7", "8-15", "16-31", "32-63", "64-127", "128"]
            .iter()
            .enumerate()
        {
            table.add(
                &format!("{tasks} tasks sends of {label} calls"),
                "%",
                100.0 * sends[k] as f64 / total,
            );
        }
        let p99 = common::percentile(&times, 99.0);
        let p99_alone = common::percentile(&alone_times, 99.0);
        table.add(&format!("{tasks} tasks call p99 alone"), "ms", p99_alone);
        table.add_ratio(
            &format!("{tasks} tasks call p99 combining"),
            "ms",
            p99,
            p99 / p99_alone,
            "calls alone",
        );
        if tasks == 1 {
            let p50 = |times: &[f64]| {
                let pairs: Vec<f64> = times.chunks(2).map(|c| c.iter().sum()).collect();
                common::percentile(&pairs, 50.0)
            };
            let (c, a) = (p50(&times), p50(&alone_times));
            table.add_ratio("1 task pair p50 combining", "ms", c, c / a, "calls alone");
            table.add_ratio(
                "1 task client CPU per pair combining",
                "µs",
                combining.cpu_us_per_pair,
                combining.cpu_us_per_pair / alone.cpu_us_per_pair,
                "calls alone",
            );
        }
    }
}

/// The targets, on the medians.
fn targets(table: &mut Table, on_default: &str) {
    let figure = format!("Lock combining client CPU per pair vs redis-rs{on_default}");
    let met = table.ratio(&figure) <= 1.0;
    table.target(&figure, "≤ redis-rs's (1.0×)", met);
    for on in ["", on_default] {
        let figure = format!("Lock combining writev per pair{on}");
        let met = table.median(&figure) <= 0.25;
        table.target(&figure, "≤ 0.25", met);
        let figure = format!("Lock combining server CPU per pair{on}");
        let met = table.ratio(&figure) <= 0.7;
        table.target(&figure, "≤ 0.7× calls alone", met);
        let figure = format!("Lock combining 32 tasks pairs/s vs ceiling{on}");
        let met = table.ratio(&figure) >= 1.5;
        table.target(&figure, "≥ 1.5× -P 32 ceiling", met);
    }
    for figure in [
        "1 task pair p50 combining",
        "1 task client CPU per pair combining",
    ] {
        let met = table.ratio(figure) <= 1.03;
        table.target(figure, "≤ 1.03× calls alone", met);
    }
}
