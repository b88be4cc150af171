//! Contended: N tasks (2, 16, 128) on one lock, in one worker process (P=1) and spread over four
//! (P=4), each taking it with the blocking `lock()`, holding it H (0 or 1 ms) and releasing it, in
//! a loop, for a window (3 s; 5 s at N=128; env `WINDOW_SECS` overrides both). Each configuration
//! runs for each lock type in turn — `Lock`, `FairLock`, `SpinLock` (env `KINDS`, say
//! `KINDS=fair`, picks a subset) — so the types are measured in the same sitting, interleaved.
//!
//! Figures per type and (N, P, H): acquisitions/s; the hand-off gap from one owner's release to a
//! different owner's acquire (p50, p99); how often the releasing task re-took the lock itself; the
//! longest wait in `lock()`; the tasks that never got it (starved); order violations; the mean
//! hold. Mutual exclusion is checked throughout (see `common/contend.rs`): an overlap panics. The
//! ceiling is `redis-benchmark -c 1 -P 1` running relock's acquire and release scripts, in the
//! same run. So that long waits can be told from the machine's own hiccups, each run also records
//! the longest round trip of back-to-back `PING`s over a plain TCP connection for 3 s, the p50
//! round trip of a `PING` sent by fred (the order slack, below), and the floor of a hand-off to
//! other, sleeping, processes with plain sockets and with fred (`common/wake.rs`), for as many
//! woken processes as a release wakes. `unlock() call p50` is how long a release takes its
//! caller: about half of it lies between a release's stamp and its wake-up leaving the server.
//!
//! **Order violations.** Each task stamps the wall clock (µs since the epoch, one clock for every
//! process on the machine) when it calls `lock()` and when it gets the lock. An acquisition by
//! task B is a violation when, at the moment B got the lock, another task A was still waiting —
//! A got the lock after B, or not at all in the window — and A had called `lock()` more than a
//! slack before B did: `called_A + slack < called_B`. The slack is the p50 round trip of a `PING`
//! sent by fred, measured in the same run: about the time from a task's stamp to its first
//! attempt reaching Redis, where `FairLock`'s queue fixes the order. A `FairLock` must have none;
//! for `Lock` and `SpinLock` the count is information (neither promises an order across waiters).
//! `order: longest head start overtaken` is the largest `called_B − called_A` among them.
//!
//! Targets (printed, never asserted):
//! - `Lock`: gap p50 ≤ 3× the ceiling pair in one process; over several, ≤ 1.3× the fred wake
//!   floor for as many processes as a release wakes (one per process with waiters: all of them
//!   at N ≥ 16, the other one at N = 2); gap p99 ≤ 1 ms; acq/s ≥ 0.85× 1/(hold + gap) at
//!   H = 1 ms; longest wait ≤ 2N(hold + gap); none starved.
//! - `FairLock`: over several processes, gap p50 ≤ 1.3× the fred floor of waking one process (a
//!   release wakes the queue's head alone) and longest wait ≤ 1.2·N(hold + gap); everywhere, no
//!   order violation and none starved, in every run.
//! - `SpinLock`: no target; its gap p50 is shown as a multiple of its backoff's initial pause,
//!   with the backoff's initial and longest pause beside it (env `SPIN_BACKOFF_MS=<initial>,<max>`
//!   sets them, multiplier 2; default `Backoff::default()`).
//!
//! `cargo bench --bench contended` (env `RUNS`, default 3; `KINDS`, `TASKS`, `PROCS`, `HOLDS_MS`
//! take comma-separated subsets, say `KINDS=fair TASKS=16 PROCS=4`; `DEBUG_ORDER=1` prints the
//! first order violations of each configuration; `ORDER_MONITOR=1` also counts `FairLock`'s
//! order on the server's arrival times, read with `MONITOR`, which slows the server: a
//! diagnostic, see `common/monitor.rs`).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::contend::{self, LockKind, Spec};
use common::monitor::Monitor;
use common::report::Table;
use common::wake::Stack;
use relock::testing::RedisServer;

const TASKS: [usize; 3] = [2, 16, 128];
const PROCS: [usize; 2] = [1, 4];
const HOLDS_MS: [u64; 2] = [0, 1];
const CEILING: &str = "ceiling pair p50";

/// How many processes one release wakes, each with a waiter to answer: `Lock` wakes one waiter
/// in every process that has waiters (the releaser's own has one unless it ran the only task
/// there), `FairLock` the queue's head alone.
fn woken(kind: LockKind, tasks: usize, procs: usize) -> usize {
    let procs = procs.clamp(1, tasks);
    match kind {
        LockKind::Lock => procs.min(tasks - 1).max(1),
        LockKind::Fair | LockKind::Spin => 1,
    }
}

fn floor_figure(woken: usize) -> String {
    format!("floor (fred): PUBLISH → PING, {woken} woken, p50")
}

fn main() {
    if let Some(args) = common::worker::args() {
        if args.first().is_some_and(|mode| mode.starts_with("wake")) {
            return common::wake::worker_main(&args);
        }
        return contend::worker_main(&args);
    }
    let runs = common::runs(3);
    let kinds = LockKind::from_env();
    let tasks = common::env_list("TASKS", &TASKS);
    let procs_list = common::env_list("PROCS", &PROCS);
    let holds_ms = common::env_list("HOLDS_MS", &HOLDS_MS);
    let backoff = contend::spin_backoff();
    // Diagnostic: order counted on the server's arrival times too (fair locks only).
    let monitored = std::env::var("ORDER_MONITOR").is_ok();
    let server = RedisServer::start().expect("start redis-server");
    let version = common::redis_version(&server);
    let mut machine = Table::new(
        "contended",
        format!(
            "contended: the machine, in the same runs — redis {version}, medians of {runs} runs"
        ),
    );
    let mut tables: Vec<(LockKind, Table)> = kinds
        .iter()
        .map(|&kind| {
            let title = format!(
                "contended: {} — N tasks on one lock, hold H, P processes — redis {version}, medians of {runs} runs",
                kind.type_name()
            );
            (kind, Table::new("contended", title))
        })
        .collect();
    // The fred floors the targets need, besides one and four woken processes.
    let mut floors: BTreeSet<usize> = [1, 4].into();
    for &kind in &kinds {
        for &n in &tasks {
            for &procs in &procs_list {
                floors.insert(woken(kind, n, procs));
            }
        }
    }
    let backoff_text = format!(
        "backoff initial ({} ms; max {} ms)",
        backoff.initial().as_millis(),
        backoff.max().as_millis()
    );
    for run in 1..=runs {
        eprintln!("contended: run {run}/{runs}");
        let ceiling = common::ceiling::measure(&server, 1, 10_000);
        machine.add("ceiling pair p50 (-c 1 -P 1)", "ms", ceiling.pair_p50_ms);
        let stall = common::longest_ping_ms(server.port(), Duration::from_secs(3));
        machine.add("machine: longest PING round trip in 3 s", "ms", stall);
        let trip = common::fred_ping_p50_ms(&server.url(), 2_000);
        machine.add("fred PING round trip p50 (order slack)", "ms", trip);
        let slack_us = (trip * 1e3).round() as u64;
        for (stack, name) in [(Stack::Bare, "plain sockets"), (Stack::Fred, "fred")] {
            let counts: Vec<usize> = match stack {
                Stack::Bare => vec![1, 4],
                Stack::Fred => floors.iter().copied().collect(),
            };
            for procs in counts {
                let pause = Duration::from_millis(2);
                let floor = common::wake::floor_ms(stack, server.port(), procs, 300, pause);
                machine.add_ratio(
                    &format!("floor ({name}): PUBLISH → PING, {procs} woken, p50"),
                    "ms",
                    floor,
                    floor / ceiling.pair_p50_ms,
                    CEILING,
                );
            }
        }
        if kinds.contains(&LockKind::Spin) {
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            machine.add(
                "SpinLock backoff: initial pause",
                "ms",
                ms(backoff.initial()),
            );
            machine.add("SpinLock backoff: longest pause", "ms", ms(backoff.max()));
            machine.add("SpinLock backoff: multiplier", "×", backoff.multiplier());
        }
        for &n in &tasks {
            for &procs in &procs_list {
                for &hold_ms in &holds_ms {
                    for (kind, table) in &mut tables {
                        let kind = *kind;
                        let window = Duration::from_secs(common::env_or(
                            "WINDOW_SECS",
                            if n >= 128 { 5 } else { 3 },
                        ));
                        let spec = Spec {
                            kind,
                            tasks: n,
                            procs,
                            hold: Duration::from_millis(hold_ms),
                            window,
                        };
                        let mut monitor = None;
                        let outcome = contend::run(&server, spec, |_, end| {
                            if monitored && kind == LockKind::Fair {
                                monitor = Some(Monitor::start(server.port(), end + 200_000));
                            }
                        });
                        outcome.debug_waits();
                        let (from, to) = (outcome.start_us, outcome.end_us);
                        let s = outcome.stats(from, to);
                        let order = outcome.order(from, to, slack_us);
                        let prefix = kind.prefix();
                        let at = |figure: &str| {
                            format!("{prefix}N={n} P={procs} H={hold_ms}ms {figure}")
                        };
                        let gap = s.gap_ms(50.0);
                        if kind == LockKind::Spin {
                            let initial = backoff.initial().as_secs_f64() * 1e3;
                            table.add_ratio(
                                &at("gap p50"),
                                "ms",
                                gap,
                                gap / initial,
                                &backoff_text,
                            );
                        } else {
                            let ratio = gap / ceiling.pair_p50_ms;
                            table.add_ratio(&at("gap p50"), "ms", gap, ratio, CEILING);
                        }
                        if outcome.procs > 1 && kind != LockKind::Spin {
                            let k = woken(kind, n, procs);
                            let floor = machine.last(&floor_figure(k));
                            table.add_ratio(
                                &at("gap p50 vs wake floor"),
                                "ms",
                                gap,
                                gap / floor,
                                format!("fred floor, {k} woken"),
                            );
                        }
                        table.add(&at("gap p99"), "ms", s.gap_ms(99.0));
                        let unlock = common::percentile(&s.unlock_ms, 50.0);
                        table.add(&at("unlock() call p50"), "ms", unlock);
                        let cycle = s.mean_hold_ms + gap;
                        if hold_ms > 0 {
                            let ideal = 1000.0 / cycle;
                            table.add_ratio(
                                &at("acq/s"),
                                "/s",
                                s.per_sec,
                                s.per_sec / ideal,
                                "1/(hold+gap)",
                            );
                        } else {
                            table.add(&at("acq/s"), "/s", s.per_sec);
                        }
                        table.add(&at("retaken by releaser"), "%", 100.0 * s.retake_share());
                        let (turns, bound_text) = match kind {
                            LockKind::Fair => (1.0, "N(hold+gap)"),
                            LockKind::Lock | LockKind::Spin => (2.0, "2N(hold+gap)"),
                        };
                        let bound = turns * n as f64 * cycle;
                        table.add_ratio(
                            &at("longest wait"),
                            "ms",
                            s.longest_wait_ms,
                            s.longest_wait_ms / bound,
                            bound_text,
                        );
                        table.add(&at("starved"), "tasks", outcome.starved as f64);
                        table.add(&at("order violations"), "acqs", order.violations as f64);
                        table.add(
                            &at("order: longest head start overtaken"),
                            "ms",
                            order.worst_us as f64 / 1e3,
                        );
                        if let Some(monitor) = monitor {
                            let arrivals = monitor.finish();
                            let by_arrival = outcome.order_by_arrival(from, to, &arrivals);
                            table.add(
                                &at("order violations by server arrival (MONITOR)"),
                                "acqs",
                                by_arrival.violations as f64,
                            );
                            let delays = outcome.arrival_delays_ms(&arrivals);
                            for (p, name) in [(50.0, "p50"), (99.0, "p99"), (100.0, "max")] {
                                table.add(
                                    &at(&format!("call → arrival {name} (MONITOR)")),
                                    "ms",
                                    common::percentile(&delays, p),
                                );
                            }
                        }
                        table.add(&at("mean hold"), "ms", s.mean_hold_ms);
                    }
                }
            }
        }
    }
    for (kind, table) in &mut tables {
        let kind = *kind;
        for &n in &tasks {
            for &procs in &procs_list {
                for &hold_ms in &holds_ms {
                    let prefix = kind.prefix();
                    let at =
                        |figure: &str| format!("{prefix}N={n} P={procs} H={hold_ms}ms {figure}");
                    let several = table.has(&at("gap p50 vs wake floor"));
                    match kind {
                        LockKind::Lock => {
                            if several {
                                let met = table.ratio(&at("gap p50 vs wake floor")) <= 1.3;
                                table.target(
                                    &at("gap p50 vs wake floor"),
                                    "≤ 1.3× wake floor",
                                    met,
                                );
                            } else {
                                let met = table.ratio(&at("gap p50")) <= 3.0;
                                table.target(&at("gap p50"), "≤ 3× ceiling pair p50", met);
                            }
                            let met = table.median(&at("gap p99")) <= 1.0;
                            table.target(&at("gap p99"), "≤ 1 ms", met);
                            if hold_ms > 0 {
                                let met = table.ratio(&at("acq/s")) >= 0.85;
                                table.target(&at("acq/s"), "≥ 0.85× 1/(hold+gap)", met);
                            }
                            let met = table.ratio(&at("longest wait")) <= 1.0;
                            table.target(&at("longest wait"), "≤ 2N(hold+gap)", met);
                            let met = table.max(&at("starved")) == 0.0;
                            table.target(&at("starved"), "none, in every run", met);
                        }
                        LockKind::Fair => {
                            if several {
                                let met = table.ratio(&at("gap p50 vs wake floor")) <= 1.3;
                                table.target(
                                    &at("gap p50 vs wake floor"),
                                    "≤ 1.3× wake floor",
                                    met,
                                );
                                let met = table.ratio(&at("longest wait")) <= 1.2;
                                table.target(&at("longest wait"), "≤ 1.2·N(hold+gap)", met);
                            }
                            let met = table.max(&at("starved")) == 0.0;
                            table.target(&at("starved"), "none, in every run", met);
                            let worst = table.max(&at("order violations"));
                            let text = format!("none, in every run (worst run: {worst})");
                            table.target(&at("order violations"), text, worst == 0.0);
                            let by_arrival = at("order violations by server arrival (MONITOR)");
                            if table.has(&by_arrival) {
                                let worst = table.max(&by_arrival);
                                let text = format!("none, in every run (worst run: {worst})");
                                table.target(&by_arrival, text, worst == 0.0);
                            }
                        }
                        LockKind::Spin => {}
                    }
                }
            }
        }
    }
    machine.print();
    for (_, table) in &tables {
        table.print();
    }
}
