//! Herd: Redis commands executed per hand-off with W = 1, 16, 128 and 1024 waiters on one lock
//! (W + 1 tasks: one holds, W wait), in one worker process (P=1) and spread over four (P=4).
//! Each task takes the lock with `lock()`, holds it 1 ms and releases it, in a loop.
//!
//! Between two `INFO commandstats` snapshots taken while the tasks contend (from 1 s into the
//! window, after the initial rush, to 0.3 s before its end) it counts the calls of every command
//! (those run inside scripts included) and of `EVALSHA` alone, and divides them by the hand-offs
//! in between: the calls of the bench's own `INCR` inside every hold (same snapshots, so exact).
//! The bench's probes (`INCR`, `DECR`, `INFO`) are left out. Mutual exclusion is checked as in
//! `contended`. Each configuration runs for each lock type in turn: `Lock`, `FairLock` and
//! `SpinLock` (env `KINDS`, say `KINDS=fair`, picks a subset).
//!
//! Targets (printed, never asserted): `Lock`: script calls ≤ 2 + 1 per process with waiters, and
//! all commands ≤ 1.25× the figure with the fewest waiters over as many processes. `FairLock`
//! wakes the queue's head alone, whatever the number of waiters and processes: both its script
//! calls and all its commands per hand-off ≤ 1.25× the smallest of its own figures over every W
//! and P. `SpinLock`: no target (its waiters poll, so its figures grow with W by design).
//!
//! `cargo bench --bench herd` (env `RUNS`, default 3; `WINDOW_SECS`, default 3; `KINDS`).

mod common;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use common::contend::{self, LockKind, Spec};
use common::report::Table;
use common::{calls_delta, command_calls, now_us};
use relock::testing::RedisServer;

const WAITERS: [usize; 4] = [1, 16, 128, 1024];
const PROCS: [usize; 2] = [1, 4];
/// The bench's own commands, not the library's.
const PROBES: [&str; 3] = ["incr", "decr", "info"];

fn main() {
    if let Some(args) = common::worker::args() {
        return contend::worker_main(&args);
    }
    let runs = common::runs(3);
    let kinds = LockKind::from_env();
    let window = Duration::from_secs(common::env_or("WINDOW_SECS", 3));
    let server = RedisServer::start().expect("start redis-server");
    let version = common::redis_version(&server);
    let mut tables: Vec<(LockKind, Table)> = kinds
        .iter()
        .map(|&kind| {
            let title = format!(
                "herd: {} — Redis commands per hand-off, W waiters on one lock, hold 1 ms, P processes — redis {version}, medians of {runs} runs",
                kind.type_name()
            );
            (kind, Table::new("herd", title))
        })
        .collect();
    let mut breakdown: Vec<(String, Vec<(String, f64)>)> = Vec::new();
    let mut procs_used = HashMap::new();
    for run in 1..=runs {
        eprintln!("herd: run {run}/{runs}");
        for procs in PROCS {
            for waiters in WAITERS {
                for (kind, table) in &mut tables {
                    let kind = *kind;
                    let spec = Spec {
                        kind,
                        tasks: waiters + 1,
                        procs,
                        hold: Duration::from_millis(1),
                        window,
                    };
                    let snapshots = Mutex::new(Vec::new());
                    let outcome = contend::run(&server, spec, |start, end| {
                        for at in [start + 1_000_000, end - 300_000] {
                            std::thread::sleep(Duration::from_micros(at.saturating_sub(now_us())));
                            let calls = command_calls(&server);
                            snapshots.lock().unwrap().push((now_us(), calls));
                        }
                    });
                    let snapshots = snapshots.into_inner().unwrap();
                    let [(from, before), (to, after)] = &snapshots[..] else {
                        unreachable!()
                    };
                    let handoffs = (after["incr"] - before["incr"]) as f64;
                    let delta = calls_delta(before, after, &PROBES);
                    let total: u64 = delta.values().sum();
                    let evalsha = delta.get("evalsha").copied().unwrap_or(0);
                    let stats = outcome.stats(*from, *to);
                    let prefix = kind.prefix();
                    let at = |figure: &str| format!("{prefix}W={waiters} P={procs} {figure}");
                    table.add(&at("hand-offs"), "count", handoffs);
                    table.add(&at("evalsha/hand-off"), "calls", evalsha as f64 / handoffs);
                    table.add(&at("all cmds/hand-off"), "calls", total as f64 / handoffs);
                    table.add(
                        &at("retaken by releaser"),
                        "%",
                        100.0 * stats.retake_share(),
                    );
                    procs_used.insert((waiters, procs), outcome.procs);
                    if run == runs {
                        let mut per: Vec<(String, f64)> = delta
                            .into_iter()
                            .map(|(name, n)| (name, n as f64 / handoffs))
                            .collect();
                        per.sort_by(|a, b| b.1.total_cmp(&a.1));
                        breakdown.push((at(""), per));
                    }
                }
            }
        }
    }
    for (kind, table) in &mut tables {
        match kind {
            LockKind::Lock => lock_targets(table, &procs_used),
            LockKind::Fair => fair_targets(table),
            LockKind::Spin => {}
        }
    }
    for (_, table) in &tables {
        table.print();
    }
    println!("\ncalls per hand-off by command (last run; inside scripts included)");
    for (config, per) in breakdown {
        let list: Vec<String> = per.iter().map(|(n, x)| format!("{n} {x:.2}")).collect();
        println!("{config:<23} {}", list.join(", "));
    }
}

/// `Lock`: script calls ≤ 2 + 1 per process with waiters; all commands ≤ 1.25× the figure with
/// the fewest waiters spread over as many processes.
fn lock_targets(table: &mut Table, procs_used: &HashMap<(usize, usize), usize>) {
    for procs in PROCS {
        for waiters in WAITERS {
            let at = |figure: &str| format!("W={waiters} P={procs} {figure}");
            let used = procs_used[&(waiters, procs)];
            // The fewest waiters spread over as many processes: what the figure must not grow from.
            let base_w = WAITERS
                .into_iter()
                .find(|w| procs_used[&(*w, procs)] == used)
                .unwrap();
            let base = table.median(&format!("W={base_w} P={procs} all cmds/hand-off"));
            let allowed = 2 + used;
            let met = table.median(&at("evalsha/hand-off")) <= allowed as f64;
            let text = format!("≤ {allowed} (2 + 1 per process with waiters)");
            table.target(&at("evalsha/hand-off"), text, met);
            let met = table.median(&at("all cmds/hand-off")) <= 1.25 * base;
            let text = format!("≤ 1.25× W={base_w} (no growth with W)");
            table.target(&at("all cmds/hand-off"), text, met);
        }
    }
}

/// `FairLock`: script calls and all commands per hand-off each ≤ 1.25× the smallest of its
/// own over every W and P (flat: one waiter is woken per release).
fn fair_targets(table: &mut Table) {
    for figure in ["evalsha/hand-off", "all cmds/hand-off"] {
        let name =
            |waiters: usize, procs: usize| format!("FairLock W={waiters} P={procs} {figure}");
        let (mut base, mut base_at) = (f64::INFINITY, String::new());
        for procs in PROCS {
            for waiters in WAITERS {
                let median = table.median(&name(waiters, procs));
                if median < base {
                    (base, base_at) = (median, format!("W={waiters} P={procs}"));
                }
            }
        }
        for procs in PROCS {
            for waiters in WAITERS {
                let met = table.median(&name(waiters, procs)) <= 1.25 * base;
                let text = format!("≤ 1.25× smallest ({base_at}: {base:.2})");
                table.target(&name(waiters, procs), text, met);
            }
        }
    }
}
