//! Contended: N tasks (2, 16, 128) on one lock, in one worker process (P=1) and spread over four
//! (P=4), each taking it with the blocking `lock()`, holding it H (0 or 1 ms) and releasing it, in
//! a loop, for a window (3 s; 5 s at N=128; env `WINDOW_SECS` overrides both).
//!
//! Figures per (N, P, H): acquisitions/s; the hand-off gap from one owner's release to a different
//! owner's acquire (p50, p99); how often the releasing task re-took the lock itself; the longest
//! wait in `lock()`; the tasks that never got it (starved); the mean hold. Mutual exclusion is
//! checked throughout (see `common/contend.rs`): an overlap panics. The ceiling is
//! `redis-benchmark -c 1 -P 1` running relock's acquire and release scripts, in the same run. So
//! that long waits can be told from the machine's own hiccups, each run also records the longest
//! round trip of back-to-back `PING`s over a plain TCP connection for 3 s, and the floor of a
//! hand-off to other, sleeping, processes with plain sockets and with fred (`common/wake.rs`).
//!
//! `cargo bench --bench contended` (env `RUNS`, default 3; `TASKS`, `PROCS`, `HOLDS_MS` take
//! comma-separated subsets, say `TASKS=16 PROCS=4`).

mod common;

use std::time::Duration;

use common::contend::{self, Spec};
use common::report::Table;
use common::server::RedisServer;
use common::wake::Stack;

const TASKS: [usize; 3] = [2, 16, 128];
const PROCS: [usize; 2] = [1, 4];
const HOLDS_MS: [u64; 2] = [0, 1];
const CEILING: &str = "ceiling pair p50";

fn main() {
    if let Some(args) = common::worker::args() {
        if args.first().is_some_and(|mode| mode.starts_with("wake")) {
            return common::wake::worker_main(&args);
        }
        return contend::worker_main(&args);
    }
    let runs = common::runs(3);
    let tasks = common::env_list("TASKS", &TASKS);
    let procs_list = common::env_list("PROCS", &PROCS);
    let holds_ms = common::env_list("HOLDS_MS", &HOLDS_MS);
    let server = RedisServer::start();
    let mut table = Table::new(
        "contended",
        format!(
            "contended: N tasks on one lock, hold H, P processes — redis {}, medians of {runs} runs",
            common::redis_version(&server)
        ),
    );
    for run in 1..=runs {
        eprintln!("contended: run {run}/{runs}");
        let ceiling = common::ceiling::measure(&server, 1, 10_000);
        table.add("ceiling pair p50 (-c 1 -P 1)", "ms", ceiling.pair_p50_ms);
        let stall = common::longest_ping_ms(server.port(), Duration::from_secs(3));
        table.add("machine: longest PING round trip in 3 s", "ms", stall);
        for (stack, name) in [(Stack::Bare, "plain sockets"), (Stack::Fred, "fred")] {
            for procs in [1, 4] {
                let pause = Duration::from_millis(2);
                let floor = common::wake::floor_ms(stack, server.port(), procs, 300, pause);
                table.add_ratio(
                    &format!("floor ({name}): PUBLISH → PING, {procs} woken, p50"),
                    "ms",
                    floor,
                    floor / ceiling.pair_p50_ms,
                    CEILING,
                );
            }
        }
        for &n in &tasks {
            for &procs in &procs_list {
                for &hold_ms in &holds_ms {
                    let window = Duration::from_secs(common::env_or(
                        "WINDOW_SECS",
                        if n >= 128 { 5 } else { 3 },
                    ));
                    let spec = Spec {
                        tasks: n,
                        procs,
                        hold: Duration::from_millis(hold_ms),
                        window,
                    };
                    let outcome = contend::run(&server, spec, |_, _| {});
                    outcome.debug_waits();
                    let s = outcome.stats(outcome.start_us, outcome.end_us);
                    let at = |figure: &str| format!("N={n} P={procs} H={hold_ms}ms {figure}");
                    let gap = s.gap_ms(50.0);
                    table.add_ratio(
                        &at("gap p50"),
                        "ms",
                        gap,
                        gap / ceiling.pair_p50_ms,
                        CEILING,
                    );
                    table.add(&at("gap p99"), "ms", s.gap_ms(99.0));
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
                    let bound = 2.0 * n as f64 * cycle;
                    table.add_ratio(
                        &at("longest wait"),
                        "ms",
                        s.longest_wait_ms,
                        s.longest_wait_ms / bound,
                        "2N(hold+gap)",
                    );
                    table.add(&at("starved"), "tasks", outcome.starved as f64);
                    table.add(&at("mean hold"), "ms", s.mean_hold_ms);
                }
            }
        }
    }
    for &n in &tasks {
        for &procs in &procs_list {
            for &hold_ms in &holds_ms {
                let at = |figure: &str| format!("N={n} P={procs} H={hold_ms}ms {figure}");
                let met = table.ratio(&at("gap p50")) <= 3.0;
                table.target(&at("gap p50"), "≤ 3× ceiling pair p50", met);
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
        }
    }
    table.print();
}
