//! Semaphore: what the synchronizers cost — `Semaphore` (`client.semaphore`, Redisson's
//! `RSemaphore`), `PermitSemaphore` (`client.permit_semaphore`, `RPermitExpirableSemaphore`,
//! permits renewed by the watchdog) and `CountDownLatch` (`client.count_down_latch`,
//! `RCountDownLatch`) — against a `Lock` and the machine's own floor, measured in the same run.
//!
//! - **Pairs**: one task takes and gives back one permit (`acquire(1)` + `release(1)`; for the
//!   permit semaphore `acquire()` + `Permit::release()`) in a loop, next to a `Lock` pair
//!   (`lock()` + `unlock()`), interleaved finely: each trial runs blocks of 25 pairs of each
//!   type in turn (this machine switches between a fast and a slow state for seconds at a time,
//!   and types measured seconds apart can land in different states); best p50 of three trials
//!   per run. The pair p50 is a ratio to the `Lock` pair's of the same run; redis-server's CPU
//!   time and the commands it ran per pair (those inside scripts included, `INFO
//!   commandstats`), from a block of each type on its own, are shown beside it.
//! - **Contended**: N = 128 tasks spread over 4 worker processes on one semaphore of 4 permits,
//!   each taking a permit, holding it 1 ms (a `tokio::time::sleep`, so 1–2 ms) and giving it
//!   back, in a loop, for a window. Each task stamps the wall clock when it asks, gets the
//!   permit, gives it back and is answered. `gap`: the time from a release (its call) to the
//!   acquire that took the permit it freed; at saturation the k-th release frees the permit of
//!   the (k + 4)-th acquisition, so gap = acquired[k + 4] − released[k] over the merged, sorted
//!   stamps (never below 0: the permits are conserved). `acq/s` against the ideal
//!   4 / (hold + gap p50), with the measured mean hold; the longest wait (waits cut by the
//!   window's end included) against 2·(N/4)·(hold + gap p50); starved tasks (no permit in the
//!   window); script calls and all commands per acquisition (`INFO commandstats`, as `herd`);
//!   the share of acquisitions of the least-served process (25 % would be even).
//!   Asserted: never more than 4 holders at once, both on the stamps (holds of all processes
//!   merged) and on Redis (each hold `INCR`s a counter that must read at most 4, then `DECR`s
//!   it); either failing panics, so the bench exits non-zero.
//! - **Latch wake-up**: W waiters (1,000, and 4 for comparison) spread over 4 worker processes
//!   wait on a latch of count 1; once they are all parked, the parent calls `count_down()`. The
//!   figure is the time from that call to the last waiter's `wait()` returning (and to the
//!   first's), p50 over the rounds of a run. The floor, in the same run: a `PUBLISH` of a stamp
//!   to 4 other processes idle on a plain-socket subscription, timed until the last of them has
//!   read it (`common/wake.rs`, `reach_all_ms`), p50 over its rounds. To tell where the time
//!   goes beyond the floor: the same floor with fred on tokio in the reading processes; the time
//!   until every process had a waiter awake (the message is in everywhere) and the longest a
//!   process took from its first waiter awake to its last (its fan-out); a fred `PING` on the
//!   parent's client after the same idle pause as before a `count_down()` (its first leg); and
//!   two controls without Redis or relock, the same tasks in the same processes woken by a
//!   `tokio::sync::watch`, or each by a `tokio::sync::Notify` of its own under a timeout (the
//!   shape of a relock waiter's sleep).
//!
//! Targets (printed, never asserted): a pair ≤ 1.1× a `Lock` pair (each semaphore type);
//! contended acq/s ≥ 0.9 × 4 / (hold + gap p50), no task starved in any run, longest wait
//! ≤ 2·(N/4)·(hold + gap p50) (each semaphore type); the latch's last waiter awake ≤ 2× the
//! floor of 4 processes, every waiter woken in every round.
//!
//! `cargo bench --bench semaphore` (env `RUNS`, default 3; `PAIRS` per trial, 1000; `TASKS`,
//! `PROCS`, `PERMITS`, `HOLD_MS`, `WINDOW_SECS` of the contended run, 128, 4, 4, 1, 3;
//! `WAITERS` of the latch, 1000, `LATCH_ROUNDS` per run, 10; `FLOOR_ROUNDS`, 40; `KINDS`:
//! `semaphore,permit`, the semaphore types of the contended run; `WORKER_THREADS` of each
//! worker's runtime, default one per core; `PARTS`: `pairs,contended,latch`, the parts to
//! run). About 50 s with the defaults.

mod common;

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fred::interfaces::{ClientLike, KeysInterface};

use common::report::Table;
use common::wake::{reach_all_ms, Stack};
use common::worker::{self, Worker};
use common::{calls_delta, command_calls, instant_at, now_us, percentile, Redis};
use relock::testing::RedisServer;

/// The semaphore the contended tasks share, and the counter of its holders on Redis.
const SEMAPHORE: &str = "bench:semaphore";
const INSIDE: &str = "bench:semaphore:inside";
/// The bench's own commands, not the library's.
const PROBES: [&str; 3] = ["incr", "decr", "info"];

/// The semaphore types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Semaphore,
    Permit,
}

impl Kind {
    fn arg(self) -> &'static str {
        match self {
            Kind::Semaphore => "semaphore",
            Kind::Permit => "permit",
        }
    }

    fn type_name(self) -> &'static str {
        match self {
            Kind::Semaphore => "Semaphore",
            Kind::Permit => "PermitSemaphore",
        }
    }

    fn parse(arg: &str) -> Kind {
        match arg.trim().to_ascii_lowercase().as_str() {
            "semaphore" | "sem" => Kind::Semaphore,
            "permit" | "permit_semaphore" | "permitsemaphore" => Kind::Permit,
            other => panic!("unknown kind {other:?}: KINDS takes semaphore, permit"),
        }
    }

    fn from_env() -> Vec<Kind> {
        match std::env::var("KINDS") {
            Ok(list) if !list.trim().is_empty() => list.split(',').map(Kind::parse).collect(),
            _ => vec![Kind::Semaphore, Kind::Permit],
        }
    }
}

/// A semaphore of either type.
#[derive(Clone)]
enum AnySemaphore {
    Semaphore(relock::Semaphore),
    Permit(relock::PermitSemaphore),
}

/// A permit taken from either type.
enum Taken {
    Count,
    Permit(relock::Permit),
}

impl AnySemaphore {
    fn new(client: &relock::Client, kind: Kind, name: &str) -> AnySemaphore {
        match kind {
            Kind::Semaphore => AnySemaphore::Semaphore(client.semaphore(name)),
            Kind::Permit => AnySemaphore::Permit(client.permit_semaphore(name)),
        }
    }

    async fn try_set_permits(&self, permits: u64) -> bool {
        match self {
            AnySemaphore::Semaphore(s) => s.try_set_permits(permits).await,
            AnySemaphore::Permit(s) => s.try_set_permits(permits).await,
        }
        .expect("try_set_permits")
    }

    async fn available_permits(&self) -> i64 {
        match self {
            AnySemaphore::Semaphore(s) => s.available_permits().await,
            AnySemaphore::Permit(s) => s.available_permits().await,
        }
        .expect("available_permits")
    }

    async fn acquire(&self) -> relock::Result<Taken> {
        match self {
            AnySemaphore::Semaphore(s) => s.acquire(1).await.map(|()| Taken::Count),
            AnySemaphore::Permit(s) => s.acquire().await.map(Taken::Permit),
        }
    }

    async fn release(&self, taken: Taken) -> relock::Result<()> {
        match (self, taken) {
            (AnySemaphore::Semaphore(s), Taken::Count) => s.release(1).await,
            (AnySemaphore::Permit(_), Taken::Permit(permit)) => permit.release().await,
            _ => unreachable!("a permit goes back to its own type"),
        }
    }
}

fn main() {
    if let Some(args) = worker::args() {
        return match args.first().map(String::as_str) {
            Some("hold") => hold_worker(&args),
            Some("latch") => latch_worker(&args),
            _ => common::wake::worker_main(&args),
        };
    }
    let runs = common::runs(3);
    let kinds = Kind::from_env();
    let pair_count = common::env_or("PAIRS", 1_000);
    let spec = Spec {
        tasks: common::env_or("TASKS", 128),
        procs: common::env_or("PROCS", 4),
        permits: common::env_or("PERMITS", 4),
        hold: Duration::from_millis(common::env_or("HOLD_MS", 1)),
        window: Duration::from_secs(common::env_or("WINDOW_SECS", 3)),
    };
    let waiters: usize = common::env_or("WAITERS", 1_000);
    let latch_rounds: usize = common::env_or("LATCH_ROUNDS", 10);
    let floor_rounds: usize = common::env_or("FLOOR_ROUNDS", 40);
    let parts = std::env::var("PARTS").unwrap_or_else(|_| "pairs,contended,latch".into());
    let part = |name: &str| parts.split(',').any(|p| p.trim() == name);
    let kinds = if part("contended") { kinds } else { Vec::new() };

    let server = RedisServer::start().expect("start redis-server");
    let version = common::redis_version(&server);
    // One worker thread, the machine's other core left to redis-server (as `uncontended`).
    let runtime = common::runtime(1);
    let client = runtime
        .block_on(relock::Client::connect(&server.url()))
        .unwrap();
    let pairs = Pairs::new(&runtime, &client);
    runtime.block_on(pairs.trial(3 * BLOCK)); // warm-up: scripts loaded

    let mut pair_table = Table::new(
        "semaphore",
        format!("semaphore: one permit taken and given back, one task, against a Lock pair — redis {version}, medians of {runs} runs"),
    );
    let (n, p, k) = (spec.tasks, spec.procs, spec.permits);
    let hold_ms = spec.hold.as_millis();
    let latch_procs = LATCH_PROCS;
    let mut contended_table = Table::new(
        "semaphore",
        format!("semaphore: N={n} tasks over P={p} processes, {k} permits, hold {hold_ms} ms — redis {version}, medians of {runs} runs"),
    );
    let mut latch_table = Table::new(
        "semaphore",
        format!("semaphore: CountDownLatch wake-up, waiters over {latch_procs} processes — redis {version}, medians of {runs} runs"),
    );
    let (bound_text, ideal_text) = contended_texts(spec);
    for run in 1..=runs {
        if part("pairs") {
            eprintln!("semaphore: run {run}/{runs}: pairs");
            let best = pairs.best_of_three(&server, pair_count);
            let lock = best[0];
            pair_table.add("Lock pair p50", "ms", lock.p50);
            pair_table.add("Lock server CPU per pair", "µs", lock.server_us);
            pair_table.add("Lock all cmds/pair", "calls", lock.cmds);
            for (i, name) in [(1, "Semaphore"), (2, "PermitSemaphore")] {
                let b = best[i];
                pair_table.add_ratio(
                    &format!("{name} pair p50"),
                    "ms",
                    b.p50,
                    b.p50 / lock.p50,
                    "Lock pair (same run)",
                );
                pair_table.add_ratio(
                    &format!("{name} server CPU per pair"),
                    "µs",
                    b.server_us,
                    b.server_us / lock.server_us,
                    "Lock's server CPU",
                );
                pair_table.add(&format!("{name} all cmds/pair"), "calls", b.cmds);
            }
        }

        for &kind in &kinds {
            eprintln!(
                "semaphore: run {run}/{runs}: contended {}",
                kind.type_name()
            );
            let outcome = contend(&server, &runtime, &client, kind, spec);
            contended_rows(&mut contended_table, kind, spec, &outcome);
        }
        if part("latch") {
            eprintln!("semaphore: run {run}/{runs}: latch");
            let place = (&server, &runtime, &client);
            latch_run(
                &mut latch_table,
                place,
                run,
                waiters,
                latch_rounds,
                floor_rounds,
            );
        }
    }

    for name in ["Semaphore", "PermitSemaphore"] {
        let figure = format!("{name} pair p50");
        let met = pair_table.ratio(&figure) <= 1.1;
        pair_table.target(&figure, "≤ 1.1× a Lock pair", met);
    }
    for &kind in &kinds {
        let at = |figure: &str| format!("{} {figure}", kind.type_name());
        let t = &mut contended_table;
        let met = t.ratio(&at("acq/s")) >= 0.9;
        t.target(&at("acq/s"), format!("≥ 0.9× {ideal_text}"), met);
        let met = t.ratio(&at("longest wait")) <= 1.0;
        t.target(&at("longest wait"), format!("≤ {bound_text}"), met);
        let met = t.max(&at("starved")) == 0.0;
        t.target(&at("starved"), "none, in every run", met);
        let met = t.max(&at("most holders at once")) <= k as f64;
        t.target(
            &at("most holders at once"),
            format!("≤ {k} (asserted)"),
            met,
        );
        let figure = at("permits available after");
        let met = t.min(&figure) == k as f64 && t.max(&figure) == k as f64;
        t.target(&figure, format!("{k} in every run (none leaked)"), met);
    }
    let figure = format!("W={waiters} count_down → last waiter awake p50");
    let met = latch_table.ratio(&figure) <= 2.0;

    latch_table.target(&figure, "≤ 2× floor, 4 processes", met);
    for w in [LATCH_PROCS, waiters] {
        let figure = format!("W={w} fewest waiters woken in a round");
        let met = latch_table.min(&figure) == w as f64;
        latch_table.target(&figure, format!("{w} in every round"), met);
    }
    if part("pairs") {
        pair_table.print();
    }
    if !kinds.is_empty() {
        contended_table.print();
    }
    if part("latch") {
        latch_table.print();
    }
}

/// The processes the latch's waiters are spread over.
const LATCH_PROCS: usize = 4;

/// What the contended figures are compared with: the longest wait's bound and the ideal rate.
fn contended_texts(spec: Spec) -> (String, String) {
    let k = spec.permits;
    (format!("2(N/{k})(hold+gap)"), format!("{k}/(hold+gap p50)"))
}

/// One contended run's rows.
fn contended_rows(table: &mut Table, kind: Kind, spec: Spec, outcome: &Outcome) {
    let (bound_text, ideal_text) = contended_texts(spec);
    let (n, k) = (spec.tasks as f64, spec.permits as f64);
    let at = |figure: &str| format!("{} {figure}", kind.type_name());
    let gap = outcome.gap_ms(50.0);
    let cycle = outcome.mean_hold_ms + gap;
    let ideal = 1000.0 * k / cycle;
    let rate = outcome.per_sec;
    table.add_ratio(&at("acq/s"), "/s", rate, rate / ideal, ideal_text);
    table.add(&at("gap p50"), "ms", gap);
    table.add(&at("gap p99"), "ms", outcome.gap_ms(99.0));
    let bound = 2.0 * (n / k) * cycle;
    let longest = outcome.longest_wait_ms;
    table.add_ratio(
        &at("longest wait"),
        "ms",
        longest,
        longest / bound,
        bound_text,
    );
    table.add(&at("starved"), "tasks", outcome.starved as f64);
    let most = outcome.most_at_once as f64;
    table.add(&at("most holders at once"), "tasks", most);
    let evalsha = outcome.evalsha_per_acq;
    table.add(&at("script calls/acquisition"), "calls", evalsha);
    table.add(&at("all cmds/acquisition"), "calls", outcome.cmds_per_acq);
    let after = outcome.available_after as f64;
    table.add(&at("permits available after"), "", after);
    let share = 100.0 * outcome.least_share;
    table.add(
        &at("least-served process's share of acquisitions"),
        "%",
        share,
    );
    table.add(&at("mean hold"), "ms", outcome.mean_hold_ms);
}

/// One run of the latch part: the floors, `rounds` latch rounds with one waiter per process
/// and as many with `waiters`, and the controls.
fn latch_run(
    table: &mut Table,
    (server, runtime, client): (&RedisServer, &tokio::runtime::Runtime, &relock::Client),
    run: usize,
    waiters: usize,
    rounds: usize,
    floor_rounds: usize,
) {
    let pause = Duration::from_millis(50);
    let port = server.port();
    let reach = reach_all_ms(Stack::Bare, port, LATCH_PROCS, floor_rounds, pause);
    let floor = percentile(&reach, 50.0);
    let floor_figure = format!("floor: PUBLISH → read by {LATCH_PROCS} processes, p50");
    table.add(&floor_figure, "ms", floor);
    let reach = reach_all_ms(Stack::Fred, port, LATCH_PROCS, floor_rounds, pause);
    let fred = percentile(&reach, 50.0);
    let fred_figure =
        format!("fred: PUBLISH → read by {LATCH_PROCS} processes (fred on tokio), p50");
    table.add_ratio(&fred_figure, "ms", fred, fred / floor, "floor");
    let floor_text = format!("floor, {LATCH_PROCS} processes");
    let mut latch = LatchWorkers::spawn(server, LATCH_PROCS);
    for w in [LATCH_PROCS, waiters] {
        let rounds: Vec<LatchRound> = (0..rounds)
            .map(|round| latch.round(server, runtime, client, run, round, w))
            .collect();
        let p50 =
            |f: fn(&LatchRound) -> f64| percentile(&rounds.iter().map(f).collect::<Vec<_>>(), 50.0);
        let at = |figure: &str| format!("W={w} {figure}");
        let last = p50(|r| r.last_ms);
        let figure = at("count_down → last waiter awake p50");
        table.add_ratio(&figure, "ms", last, last / floor, &floor_text);
        table.add(
            &at("count_down → first waiter awake p50"),
            "ms",
            p50(|r| r.first_ms),
        );
        let every = p50(|r| r.every_process_ms);
        let figure = at("count_down → a waiter awake in every process p50");
        table.add_ratio(&figure, "ms", every, every / floor, &floor_text);
        let fan_out = p50(|r| r.fan_out_ms);
        table.add(
            &at("slowest process: first → last waiter awake p50"),
            "ms",
            fan_out,
        );
        table.add(&at("count_down() call p50"), "ms", p50(|r| r.call_ms));
        let fewest = rounds.iter().map(|r| r.woken).min().unwrap_or(0) as f64;
        table.add(&at("fewest waiters woken in a round"), "tasks", fewest);
    }
    // What count_down's first leg costs before any latch work: a PING on the same client and
    // runtime, from as idle a parent as count_down's.
    let pings: Vec<f64> = (0..rounds)
        .map(|_| {
            std::thread::sleep(pause);
            let sent = Instant::now();
            let _: String = runtime.block_on(client.redis().ping(None)).unwrap();
            common::ms(sent.elapsed())
        })
        .collect();
    let figure = "parent: fred PING on count_down's client after 50 ms idle, p50";
    table.add(figure, "ms", percentile(&pings, 50.0));
    for (how, what) in [
        ("watch", "a tokio watch wakes the tasks"),
        ("notify", "a Notify per task, 5 s timeout"),
    ] {
        let control: Vec<f64> = (0..rounds).map(|_| latch.control(how, waiters)).collect();
        let figure = format!("W={waiters} control, no Redis: {what}, slowest process p50");
        table.add(&figure, "ms", percentile(&control, 50.0));
    }
    latch.finish();
}

// ------------------------------------------------------------------------------------------
// Pairs

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum PairKind {
    Lock,
    Semaphore,
    Permit,
}

/// The three handles of the pair loops, one client, one task.
struct Pairs<'a> {
    runtime: &'a tokio::runtime::Runtime,
    lock: relock::Lock,
    semaphore: relock::Semaphore,
    permit: relock::PermitSemaphore,
}

#[derive(Clone, Copy)]
struct Best {
    p50: f64,
    /// redis-server's CPU time per pair over the three trials, µs.
    server_us: f64,
    /// Commands the server ran per pair (those inside scripts included).
    cmds: f64,
}

impl<'a> Pairs<'a> {
    fn new(runtime: &'a tokio::runtime::Runtime, client: &relock::Client) -> Pairs<'a> {
        let pairs = Pairs {
            runtime,
            lock: client.lock("bench:pair:lock"),
            semaphore: client.semaphore("bench:pair:semaphore"),
            permit: client.permit_semaphore("bench:pair:permit"),
        };
        runtime.block_on(async {
            pairs.semaphore.delete().await.unwrap();
            pairs.permit.delete().await.unwrap();
            assert!(pairs.semaphore.try_set_permits(1).await.unwrap());
            assert!(pairs.permit.try_set_permits(1).await.unwrap());
        });
        pairs
    }

    /// How long each of `count` pairs of `kind` took, in ms.
    async fn pairs(&self, kind: PairKind, count: usize) -> Vec<f64> {
        let mut times = Vec::with_capacity(count);
        for _ in 0..count {
            let t0 = Instant::now();
            match kind {
                PairKind::Lock => self.lock.lock().await.unwrap().unlock().await.unwrap(),
                PairKind::Semaphore => {
                    self.semaphore.acquire(1).await.unwrap();
                    self.semaphore.release(1).await.unwrap();
                }
                PairKind::Permit => self
                    .permit
                    .acquire()
                    .await
                    .unwrap()
                    .release()
                    .await
                    .unwrap(),
            }
            times.push(common::ms(t0.elapsed()));
        }
        times
    }

    /// One trial: `count` pairs of each kind, in blocks of [`BLOCK`] pairs taking turns (a
    /// block of `Lock`, one of `Semaphore`, one of `PermitSemaphore`, over again), with a pause
    /// between blocks so that what a block leaves in flight (the key deletions queued behind
    /// its last reply) is done before the next starts. This machine switches between a fast
    /// and a slow state for seconds at a time (a pair takes ~0.04 or ~0.17 ms), and blocks of
    /// a few milliseconds put the three kinds in the same state alike. The p50 of each, in ms.
    async fn trial(&self, count: usize) -> [f64; 3] {
        let mut times = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..count.div_ceil(BLOCK) {
            for (i, kind) in PAIR_KINDS.into_iter().enumerate() {
                times[i].extend(self.pairs(kind, BLOCK).await);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        times.map(|t| percentile(&t, 50.0))
    }

    /// The best p50 of three trials of each kind; then, in a block of `count` pairs of each
    /// kind on its own, redis-server's CPU time and the commands it ran per pair.
    fn best_of_three(&self, server: &RedisServer, count: usize) -> [Best; 3] {
        let mut best = [f64::MAX; 3];
        for _ in 0..3 {
            let p50 = self.runtime.block_on(self.trial(count));
            for i in 0..3 {
                best[i] = best[i].min(p50[i]);
            }
        }
        PAIR_KINDS.map(|kind| {
            let i = PAIR_KINDS.iter().position(|k| *k == kind).unwrap();
            let calls = command_calls(server);
            let before = common::server_cpu(server);
            self.runtime.block_on(self.pairs(kind, count));
            let cpu = common::server_cpu(server) - before;
            // The key deletions queued behind the last reply are in too.
            self.runtime
                .block_on(async { tokio::time::sleep(Duration::from_millis(20)).await });
            let cmds: u64 = calls_delta(&calls, &command_calls(server), &PROBES)
                .values()
                .sum();
            Best {
                p50: best[i],
                server_us: cpu.as_secs_f64() * 1e6 / count as f64,
                cmds: cmds as f64 / count as f64,
            }
        })
    }
}

/// The pair kinds, in the order of the trials' blocks.
const PAIR_KINDS: [PairKind; 3] = [PairKind::Lock, PairKind::Semaphore, PairKind::Permit];
/// Pairs per block of a trial.
const BLOCK: usize = 25;

// ------------------------------------------------------------------------------------------
// Contended

#[derive(Clone, Copy, Debug)]
struct Spec {
    tasks: usize,
    procs: usize,
    permits: usize,
    hold: Duration,
    window: Duration,
}

/// One hold: wall-clock µs when its task asked, got the permit, gave it back (the call) and
/// was answered.
#[derive(Clone, Copy, Debug)]
struct Hold {
    owner: u64,
    called: u64,
    acquired: u64,
    released: u64,
}

struct Outcome {
    per_sec: f64,
    /// Release → the acquire that took the permit it freed, ms.
    gaps_ms: Vec<f64>,
    longest_wait_ms: f64,
    mean_hold_ms: f64,
    starved: usize,
    most_at_once: usize,
    evalsha_per_acq: f64,
    cmds_per_acq: f64,
    available_after: i64,
    /// The fewest acquisitions in the window any process made, as a share of all of them.
    least_share: f64,
}

impl Outcome {
    fn gap_ms(&self, p: f64) -> f64 {
        percentile(&self.gaps_ms, p)
    }
}

/// Runs the contended loop once for `kind`. Panics when more than `spec.permits` tasks held a
/// permit at once.
fn contend(
    server: &RedisServer,
    runtime: &tokio::runtime::Runtime,
    client: &relock::Client,
    kind: Kind,
    spec: Spec,
) -> Outcome {
    let leases = format!("{{{SEMAPHORE}}}:timeout");
    server.cmd(&["DEL", SEMAPHORE, &leases]);
    server.cmd(&["SET", INSIDE, "0"]);
    let semaphore = AnySemaphore::new(client, kind, SEMAPHORE);
    assert!(runtime.block_on(semaphore.try_set_permits(spec.permits as u64)));
    let procs = spec.procs.clamp(1, spec.tasks);
    let mut workers: Vec<Worker> = (0..procs)
        .map(|p| {
            let tasks = spec.tasks / procs + usize::from(p < spec.tasks % procs);
            Worker::spawn(&[
                "hold".into(),
                server.url(),
                kind.arg().into(),
                tasks.to_string(),
                spec.hold.as_micros().to_string(),
                p.to_string(),
                spec.permits.to_string(),
            ])
        })
        .collect();
    for w in &mut workers {
        w.expect("ready");
    }
    let start = now_us() + 300_000;
    let end = start + spec.window.as_micros() as u64;
    for w in &mut workers {
        w.send(&format!("go {start} {end}"));
    }
    // Commands per acquisition between two snapshots taken while the tasks contend (after the
    // initial rush, before the end); the bench's `INCR` runs once per acquisition.
    let mut snapshots = Vec::new();
    for at in [start + 500_000, end - 300_000] {
        std::thread::sleep(Duration::from_micros(at.saturating_sub(now_us())));
        snapshots.push(command_calls(server));
    }
    let mut holds = Vec::new();
    let mut open_waits = Vec::new();
    let (mut starved, mut violations) = (0, 0);
    for w in workers {
        for line in w.finish() {
            let f: Vec<u64> = line
                .split(' ')
                .skip(1)
                .map(|x| x.parse().unwrap())
                .collect();
            match line.split(' ').next() {
                Some("h") => holds.push(Hold {
                    owner: f[0],
                    called: f[1],
                    acquired: f[2],
                    released: f[3],
                }),
                Some("o") => open_waits.push(f[0]),
                Some("s") => starved += 1,
                Some("v") => violations += f[0],
                _ => {}
            }
        }
    }
    assert_eq!(
        violations, 0,
        "PERMITS EXCEEDED: the Redis-side holder counter read more than {} in {violations} holds",
        spec.permits
    );
    // Holders at once, on the stamps: a hold's stamps lie inside its real hold, so at most
    // `permits` may overlap (a release sorts before an acquire at the same µs).
    let mut events: Vec<(u64, i32)> = holds
        .iter()
        .flat_map(|h| [(h.acquired, 1), (h.released, -1)])
        .collect();
    events.sort_unstable();
    let (mut inside, mut most) = (0i32, 0i32);
    for (_, step) in events {
        inside += step;
        most = most.max(inside);
    }
    assert!(
        most as usize <= spec.permits,
        "PERMITS EXCEEDED: {most} holds overlap on the stamps, with {} permits",
        spec.permits
    );
    // Release k frees the permit of acquisition k + permits (both in time order).
    let mut acquired: Vec<u64> = holds.iter().map(|h| h.acquired).collect();
    let mut released: Vec<u64> = holds.iter().map(|h| h.released).collect();
    acquired.sort_unstable();
    released.sort_unstable();
    let gaps_ms = released
        .iter()
        .zip(acquired.iter().skip(spec.permits))
        .filter(|(_, a)| (start..end).contains(*a))
        .map(|(&r, &a)| (a - r) as f64 / 1e3)
        .collect();
    let in_window: Vec<&Hold> = holds
        .iter()
        .filter(|h| (start..end).contains(&h.acquired))
        .collect();
    let longest_us = in_window
        .iter()
        .map(|h| h.acquired - h.called)
        .chain(open_waits.iter().copied())
        .max()
        .unwrap_or(0);
    let held_us: u64 = in_window.iter().map(|h| h.released - h.acquired).sum();
    let [before, after] = &snapshots[..] else {
        unreachable!()
    };
    let acquisitions = (after["incr"] - before["incr"]) as f64;
    let delta = calls_delta(before, after, &PROBES);
    let evalsha = delta.get("evalsha").copied().unwrap_or(0) as f64;
    let all: u64 = delta.values().sum();
    let available_after = runtime.block_on(semaphore.available_permits());
    let mut per_process = vec![0usize; procs];
    for h in &in_window {
        per_process[(h.owner / 1_000_000) as usize] += 1;
    }
    let least = per_process.iter().copied().min().unwrap_or(0);
    Outcome {
        per_sec: in_window.len() as f64 / spec.window.as_secs_f64(),
        gaps_ms,
        longest_wait_ms: longest_us as f64 / 1e3,
        mean_hold_ms: held_us as f64 / 1e3 / in_window.len().max(1) as f64,
        starved,
        most_at_once: most as usize,
        evalsha_per_acq: evalsha / acquisitions,
        cmds_per_acq: all as f64 / acquisitions,
        available_after,
        least_share: least as f64 / in_window.len().max(1) as f64,
    }
}

/// The worker side: `hold <url> <kind> <tasks> <hold µs> <process> <permits>`. Says `ready`,
/// waits for `go <start µs> <end µs>`, runs its tasks until the end, prints their stamps
/// (`h <owner> <called> <acquired> <released>`), waits cut short (`o <waited µs>`), tasks that
/// never got a permit (`s <owner>`) and Redis-side overruns (`v <count>`), and exits.
fn hold_worker(args: &[String]) {
    let [_, url, kind, tasks, hold_us, proc, permits] = args else {
        panic!("worker arguments: hold <url> <kind> <tasks> <hold µs> <process> <permits>")
    };
    let kind = Kind::parse(kind);
    let (tasks, proc): (u64, u64) = (tasks.parse().unwrap(), proc.parse().unwrap());
    let permits: i64 = permits.parse().unwrap();
    let hold = Duration::from_micros(hold_us.parse().unwrap());
    let parent = worker::parent_lines();
    let runtime = common::runtime(common::env_or("WORKER_THREADS", 0));
    let logs = runtime.block_on(async {
        let client = relock::Client::connect(url).await.unwrap();
        // Warm up on a semaphore of this process's own: scripts loaded, both connections used.
        let warm = AnySemaphore::new(&client, kind, &format!("{SEMAPHORE}:warm:{proc}"));
        warm.try_set_permits(1).await;
        let taken = warm.acquire().await.unwrap();
        warm.release(taken).await.unwrap();
        println!("ready");
        let go = tokio::task::spawn_blocking(move || parent.recv().unwrap())
            .await
            .unwrap();
        let window: Vec<u64> = go.split(' ').skip(1).map(|x| x.parse().unwrap()).collect();
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let owner = proc * 1_000_000 + t;
                let semaphore = AnySemaphore::new(&client, kind, SEMAPHORE);
                let redis = client.redis().clone();
                let (start, end) = (window[0], window[1]);
                tokio::spawn(hold_loop(
                    semaphore, redis, owner, permits, hold, start, end,
                ))
            })
            .collect();
        let mut logs = Vec::new();
        for h in handles {
            logs.push(h.await.unwrap());
        }
        client.shutdown().await.unwrap();
        logs
    });
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for log in logs {
        for h in &log.holds {
            let Hold {
                owner,
                called,
                acquired,
                released,
            } = h;
            writeln!(out, "h {owner} {called} {acquired} {released}").unwrap();
        }
        if let Some(waited) = log.open_wait {
            writeln!(out, "o {waited}").unwrap();
        }
        if log.holds.is_empty() {
            writeln!(out, "s {}", log.owner).unwrap();
        }
        writeln!(out, "v {}", log.violations).unwrap();
    }
    out.flush().unwrap();
}

struct TaskLog {
    owner: u64,
    holds: Vec<Hold>,
    /// How long a wait the window's end cut short had lasted, µs.
    open_wait: Option<u64>,
    violations: u64,
}

async fn hold_loop(
    semaphore: AnySemaphore,
    redis: fred::clients::Client,
    owner: u64,
    permits: i64,
    hold: Duration,
    start: u64,
    end: u64,
) -> TaskLog {
    let mut log = TaskLog {
        owner,
        holds: Vec::new(),
        open_wait: None,
        violations: 0,
    };
    tokio::time::sleep_until(instant_at(start)).await;
    let deadline = instant_at(end);
    loop {
        let called = now_us();
        if called >= end {
            break;
        }
        let taken = match tokio::time::timeout_at(deadline, semaphore.acquire()).await {
            Ok(taken) => taken.expect("acquire"),
            Err(_) => {
                log.open_wait = Some(now_us() - called);
                break;
            }
        };
        let acquired = now_us();
        let inside: i64 = redis.incr(INSIDE).await.unwrap();
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        let left: i64 = redis.decr(INSIDE).await.unwrap();
        if !(1..=permits).contains(&inside) || left < 0 {
            log.violations += 1;
        }
        let released = now_us();
        semaphore.release(taken).await.expect("release");
        log.holds.push(Hold {
            owner,
            called,
            acquired,
            released,
        });
    }
    log
}

// ------------------------------------------------------------------------------------------
// Latch

/// One latch round, seen from the parent.
struct LatchRound {
    /// From the `count_down()` call to the last waiter's `wait()` returning, ms.
    last_ms: f64,
    /// ... to the first waiter's.
    first_ms: f64,
    /// ... to the moment every process had its first waiter awake: the message is in.
    every_process_ms: f64,
    /// The longest any process took from its first waiter awake to its last.
    fan_out_ms: f64,
    /// How long `count_down()` took its caller, ms.
    call_ms: f64,
    /// Waiters whose `wait()` returned (within 20 s).
    woken: usize,
}

/// The worker processes that wait on the latches, one client each, kept for a whole run.
struct LatchWorkers {
    workers: Vec<Worker>,
}

impl LatchWorkers {
    fn spawn(server: &RedisServer, procs: usize) -> LatchWorkers {
        let mut workers: Vec<Worker> = (0..procs)
            .map(|p| Worker::spawn(&["latch".into(), server.url(), p.to_string()]))
            .collect();
        for w in &mut workers {
            w.expect("ready");
        }
        LatchWorkers { workers }
    }

    /// One round: `waiters` waiters spread over the workers wait on a fresh latch of count 1;
    /// once all are parked and the processes idle, the parent counts it down.
    fn round(
        &mut self,
        server: &RedisServer,
        runtime: &tokio::runtime::Runtime,
        client: &relock::Client,
        run: usize,
        round: usize,
        waiters: usize,
    ) -> LatchRound {
        let name = format!("bench:latch:{run}:{waiters}:{round}");
        let latch = client.count_down_latch(&name);
        assert!(runtime.block_on(latch.try_set_count(1)).unwrap());
        let procs = self.workers.len();
        for (p, w) in self.workers.iter_mut().enumerate() {
            let tasks = waiters / procs + usize::from(p < waiters % procs);
            w.send(&format!("wait {name} {tasks}"));
        }
        for w in &mut self.workers {
            w.expect("waiting");
        }
        // Every process subscribed to the latch's channel, then idle for a moment, as processes
        // whose waiters have been parked a while.
        let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
        let subscribed = Instant::now();
        while !server
            .cmd(&["PUBSUB", "NUMSUB", &channel])
            .trim_end()
            .ends_with(&format!(":{procs}"))
        {
            assert!(
                subscribed.elapsed() < Duration::from_secs(5),
                "not subscribed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        let called = now_us();
        runtime.block_on(latch.count_down()).unwrap();
        let answered = now_us();
        let (mut first, mut last, mut woken) = (u64::MAX, 0, 0);
        let (mut every_process, mut fan_out) = (0, 0);
        for w in &mut self.workers {
            let line = w.line();
            let f: Vec<u64> = line
                .strip_prefix("r ")
                .expect("r <first> <last> <woken>")
                .split(' ')
                .map(|x| x.parse().unwrap())
                .collect();
            if f[2] > 0 {
                first = first.min(f[0]);
                last = last.max(f[1]);
                every_process = every_process.max(f[0]);
                fan_out = fan_out.max(f[1] - f[0]);
            }
            woken += f[2] as usize;
        }
        let since = |us: u64| us.saturating_sub(called) as f64 / 1e3;
        LatchRound {
            last_ms: since(last),
            first_ms: since(first),
            every_process_ms: since(every_process),
            fan_out_ms: fan_out as f64 / 1e3,
            call_ms: since(answered),
            woken,
        }
    }

    /// The controls for the fan-out: `waiters` tasks spread over the workers wait, with no
    /// Redis and no relock, on a `tokio::sync::watch` of their process (`watch`), or each on a
    /// `tokio::sync::Notify` of its own under a 5 s timeout, notified one by one (`notify`: the
    /// shape of a relock waiter's sleep); the parent tells every worker at once, and each
    /// stamps the moment it read the line and wakes its tasks. The longest any process took
    /// from that stamp to its last task awake, ms.
    fn control(&mut self, how: &str, waiters: usize) -> f64 {
        let procs = self.workers.len();
        for (p, w) in self.workers.iter_mut().enumerate() {
            let tasks = waiters / procs + usize::from(p < waiters % procs);
            w.send(&format!("fanout {how} {tasks}"));
        }
        for w in &mut self.workers {
            w.expect("waiting");
        }
        std::thread::sleep(Duration::from_millis(50));
        for w in &mut self.workers {
            w.send("go");
        }
        let mut slowest = 0;
        for w in &mut self.workers {
            let line = w.line();
            let took: u64 = line.strip_prefix("c ").expect("c <µs>").parse().unwrap();
            slowest = slowest.max(took);
        }
        slowest as f64 / 1e3
    }

    fn finish(self) {
        for mut w in self.workers {
            w.send("quit");
            w.finish();
        }
    }
}

/// The worker side: `latch <url> <process>`. Says `ready`; then for each `wait <name> <tasks>`
/// starts that many tasks waiting on the latch, says `waiting` once they are all registered
/// and have had time to park, and prints `r <first µs> <last µs> <woken>` when they are done
/// (each waits at most 20 s); exits on `quit`.
fn latch_worker(args: &[String]) {
    let [_, url, proc] = args else {
        panic!("worker arguments: latch <url> <process>")
    };
    let parent = worker::parent_lines();
    let parent = std::sync::Arc::new(Mutex::new(parent));
    let runtime = common::runtime(common::env_or("WORKER_THREADS", 0));
    runtime.block_on(async {
        let client = relock::Client::connect(url).await.unwrap();
        // Warm up: scripts loaded, both connections used once.
        let warm = client.count_down_latch(format!("bench:latch:warm:{proc}"));
        warm.try_set_count(1).await.unwrap();
        warm.count_down().await.unwrap();
        warm.wait().await.unwrap();
        println!("ready");
        loop {
            let reader = parent.clone();
            let line = tokio::task::spawn_blocking(move || reader.lock().unwrap().recv().ok())
                .await
                .unwrap()
                .unwrap_or_default();
            let words: Vec<&str> = line.split(' ').collect();
            if let ["fanout", how, tasks] = words[..] {
                let tasks: usize = tasks.parse().unwrap();
                let (tx, rx) = tokio::sync::watch::channel(false);
                let notifies: Vec<_> = (0..tasks)
                    .map(|_| std::sync::Arc::new(tokio::sync::Notify::new()))
                    .collect();
                let handles: Vec<_> = (0..tasks)
                    .map(|t| {
                        let mut rx = rx.clone();
                        let notify = notifies[t].clone();
                        let per_task = how == "notify";
                        tokio::spawn(async move {
                            if per_task {
                                let bound = Duration::from_secs(5);
                                let _ = tokio::time::timeout(bound, notify.notified()).await;
                            } else {
                                rx.changed().await.unwrap();
                            }
                            now_us()
                        })
                    })
                    .collect();
                tokio::time::sleep(Duration::from_millis(100)).await;
                println!("waiting");
                let reader = parent.clone();
                tokio::task::spawn_blocking(move || reader.lock().unwrap().recv().unwrap())
                    .await
                    .unwrap();
                let told = now_us();
                tx.send(true).unwrap();
                for notify in &notifies {
                    notify.notify_one();
                }
                let mut last = told;
                for h in handles {
                    last = last.max(h.await.unwrap());
                }
                println!("c {}", last - told);
                continue;
            }
            let ["wait", name, tasks] = words[..] else {
                break; // quit
            };
            let tasks: usize = tasks.parse().unwrap();
            let latch = client.count_down_latch(name);
            let handles: Vec<_> = (0..tasks)
                .map(|_| {
                    let latch = latch.clone();
                    tokio::spawn(async move {
                        let open = latch.wait_for(Duration::from_secs(20)).await.unwrap();
                        (open, now_us())
                    })
                })
                .collect();
            let registering = Instant::now();
            while client.stats().waiters < tasks {
                assert!(registering.elapsed() < Duration::from_secs(10));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            // Their attempt after subscribing has come back: parked.
            tokio::time::sleep(Duration::from_millis(100)).await;
            println!("waiting");
            let (mut first, mut last, mut woken) = (u64::MAX, 0, 0);
            for h in handles {
                let (open, at) = h.await.unwrap();
                if open {
                    first = first.min(at);
                    last = last.max(at);
                    woken += 1;
                }
            }
            println!("r {} {last} {woken}", if woken > 0 { first } else { 0 });
        }
        client.shutdown().await.unwrap();
    });
}
