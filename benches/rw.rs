//! RwLock: what a read hold costs against a plain `Lock`, and how long a writer waits behind
//! readers that never let the lock go free.
//!
//! (a) **Pairs.** One task takes and releases a lock of its own in a loop: a `Lock`, a `FairLock`,
//! the read side of an `RwLock` and its write side, their trials interleaved (one trial of each,
//! three times over) on the same runtime and client, so a drift of the machine weighs on all
//! alike. Each figure is the best of the three trials per run (highest pairs/s, lowest p50), as
//! `uncontended` takes them. The read pair is a ratio to `Lock`'s pair p50 in the same run: its
//! acquire also writes the hold's own timeout key, its release reads every reader's timeout keys
//! for the lock's new TTL, and every read-write release writes a replay key, which the client
//! deletes after the reply (the plain lock skips it on a last release; the fair lock, whose
//! release always writes one too, is shown as a second reference). Target: read pair p50 ≤ 2×
//! `Lock`'s: a pair is two round trips, so one more would take it well past that.
//!
//! (b) **A writer behind readers.** `READERS` reader tasks (8, on two clients) each take a read
//! hold, keep it `READ_HOLD_MS` (20 ms), release it and take the next at once, started
//! `READ_HOLD_MS / READERS` apart: the lock is read-locked without a gap. A writer then asks for
//! the write lock, `WRITER_ROUNDS` times (20) per run, once the readers are all back in after its
//! previous turn. Its wait is reported against the readers' hold measured in the same run (the p50
//! of their holds, sleep overshoot included): the writer's claim keeps new readers out, so it waits
//! for the readers that hold the lock when it asks, about one hold. Targets: wait p50 ≤ 1.5× the
//! hold, longest wait of a run ≤ 3× the hold. `readers let in while the writer waited` counts
//! reader holds that began after the writer's first attempt had surely reached Redis (two fred
//! `PING` round trips, p50, after it asked) and before it got the lock: the claim should let none
//! in (target: a median of 0 per round; the worst round is shown too). Exclusion is checked
//! throughout: a reader that gets in beside the writer, or a writer beside readers, aborts the
//! bench.
//!
//! `cargo bench --bench rw` (env `RUNS`, default 3; `READERS`, `READ_HOLD_MS`, `WRITER_ROUNDS`).

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::report::Table;
use relock::testing::RedisServer;
use relock::Owner;

const PAIRS: usize = 5_000;

/// What (a) takes and releases.
#[derive(Clone, Copy)]
enum Side {
    Lock,
    Fair,
    Read,
    Write,
}

/// `pairs` lock + unlock pairs of one task on a lock of its own: (pairs/s, pair p50 ms, p99).
async fn pairs(client: &relock::Client, side: Side, pairs: usize) -> (f64, f64, f64) {
    let name = format!("bench:rw:pairs:{}", side as u8);
    let rw = client.rw_lock(&name);
    let (lock, fair) = (client.lock(&name), client.fair_lock(&name));
    let mut times = Vec::with_capacity(pairs);
    let started = Instant::now();
    for _ in 0..pairs {
        let t0 = Instant::now();
        let guard = match side {
            Side::Lock => lock.lock().await,
            Side::Fair => fair.lock().await,
            Side::Read => rw.read().lock().await,
            Side::Write => rw.write().lock().await,
        };
        guard.unwrap().unlock().await.unwrap();
        times.push(common::ms(t0.elapsed()));
    }
    (
        pairs as f64 / started.elapsed().as_secs_f64(),
        common::percentile(&times, 50.0),
        common::percentile(&times, 99.0),
    )
}

/// Best of three trials of each side, the trials interleaved: (pairs/s, p50, p99) per side.
fn best_of_three(
    runtime: &tokio::runtime::Runtime,
    client: &relock::Client,
    sides: &[Side],
) -> Vec<(f64, f64, f64)> {
    let mut trials = vec![Vec::new(); sides.len()];
    for _ in 0..3 {
        for (k, &side) in sides.iter().enumerate() {
            trials[k].push(runtime.block_on(pairs(client, side, PAIRS)));
        }
    }
    trials
        .iter()
        .map(|t| {
            (
                t.iter().map(|x| x.0).fold(f64::MIN, f64::max),
                t.iter().map(|x| x.1).fold(f64::MAX, f64::min),
                t.iter().map(|x| x.2).fold(f64::MAX, f64::min),
            )
        })
        .collect()
}

/// What the readers and the writer share in (b).
#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    /// Readers holding the lock now, counted between `lock()` returning and `unlock()` called.
    readers_in: AtomicUsize,
    /// The writer holds the lock, between the same two moments.
    writer_in: AtomicBool,
    /// Read holds taken so far.
    holds: AtomicU64,
    /// When each read hold began (µs since the bench started), noted before its release.
    began: Mutex<Vec<u64>>,
    /// How long each read hold lasted (ms).
    lasted: Mutex<Vec<f64>>,
}

/// One run of (b): the writer's waits (ms), the readers' hold p50 (ms), and how many readers
/// got in while the writer waited, per round.
async fn writer_behind_readers(
    url: &str,
    readers: usize,
    hold: Duration,
    rounds: usize,
    slack: Duration,
) -> (Vec<f64>, f64, Vec<f64>) {
    let clients = [
        relock::Client::connect(url).await.unwrap(),
        relock::Client::connect(url).await.unwrap(),
    ];
    let name = format!("bench:rw:writer:{}", common::now_us());
    let shared = Arc::new(Shared::default());
    let epoch = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..readers {
        let lock = clients[i % 2].rw_lock(&name).read().owned_by(Owner::new());
        let shared = shared.clone();
        let offset = hold * i as u32 / readers as u32;
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(offset).await;
            while !shared.stop.load(Ordering::Relaxed) {
                let guard = lock.lock().await.unwrap();
                let began = epoch.elapsed();
                shared.began.lock().unwrap().push(began.as_micros() as u64);
                shared.readers_in.fetch_add(1, Ordering::SeqCst);
                assert!(
                    !shared.writer_in.load(Ordering::SeqCst),
                    "a reader got in beside the writer"
                );
                shared.holds.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(hold).await;
                let lasted = epoch.elapsed() - began;
                shared.readers_in.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.unwrap();
                shared.lasted.lock().unwrap().push(common::ms(lasted));
            }
        }));
    }
    let until_holds = |n: u64| {
        let shared = shared.clone();
        async move {
            while shared.holds.load(Ordering::Relaxed) < n {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    };
    until_holds(2 * readers as u64).await;
    let writer = clients[0].rw_lock(&name).write().owned_by(Owner::new());
    let (mut waits, mut let_in) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let asked = epoch.elapsed();
        let guard = writer.lock().await.unwrap();
        let got = epoch.elapsed();
        shared.writer_in.store(true, Ordering::SeqCst);
        assert_eq!(
            shared.readers_in.load(Ordering::SeqCst),
            0,
            "the writer got in beside readers"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
        shared.writer_in.store(false, Ordering::SeqCst);
        guard.unlock().await.unwrap();
        waits.push(common::ms(got - asked));
        let (from, to) = ((asked + slack).as_micros() as u64, got.as_micros() as u64);
        // A hold that began before `got` was noted before its release, so before `got`.
        let let_in_now = shared
            .began
            .lock()
            .unwrap()
            .iter()
            .filter(|began| (from..to).contains(*began))
            .count();
        let_in.push(let_in_now as f64);
        // Every reader back in before the next round.
        until_holds(shared.holds.load(Ordering::Relaxed) + readers as u64).await;
    }
    shared.stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let holds = shared.lasted.lock().unwrap().clone();
    for client in clients {
        client.shutdown().await.unwrap();
    }
    (waits, common::percentile(&holds, 50.0), let_in)
}

fn main() {
    let runs = common::runs(3);
    let readers: usize = common::env_or("READERS", 8).max(2);
    let hold = Duration::from_millis(common::env_or("READ_HOLD_MS", 20));
    let rounds: usize = common::env_or("WRITER_ROUNDS", 20).max(1);
    let server = RedisServer::start().expect("start redis-server");
    let url = server.url();
    let version = common::redis_version(&server);
    // As `uncontended`: relock gets the cores redis-server leaves.
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let pair_runtime = common::runtime((cores - 1).max(1));
    let pair_client = pair_runtime
        .block_on(relock::Client::connect(&url))
        .unwrap();
    let sides = [Side::Lock, Side::Fair, Side::Read, Side::Write];
    for &side in &sides {
        pair_runtime.block_on(pairs(&pair_client, side, 200)); // warm-up: scripts loaded
    }
    let wait_runtime = common::runtime(0);
    let mut table = Table::new(
        "rw",
        format!(
            "rw: RwLock pairs against Lock's, and a writer behind {readers} readers holding {} ms each — redis {version}, medians of {runs} runs",
            hold.as_millis()
        ),
    );
    // The longest writer wait of any run, as a multiple of that run's readers' hold.
    let mut worst = 0.0f64;
    for run in 1..=runs {
        eprintln!("rw: run {run}/{runs}");
        let best = best_of_three(&pair_runtime, &pair_client, &sides);
        let (lock, fair, read, write) = (best[0], best[1], best[2], best[3]);
        table.add("Lock pair p50", "ms", lock.1);
        table.add("Lock pairs/s", "/s", lock.0);
        table.add_ratio(
            "FairLock pair p50",
            "ms",
            fair.1,
            fair.1 / lock.1,
            "Lock pair p50",
        );
        table.add_ratio(
            "read pair p50",
            "ms",
            read.1,
            read.1 / lock.1,
            "Lock pair p50",
        );
        table.add_ratio(
            "read pair p50 vs FairLock's",
            "ms",
            read.1,
            read.1 / fair.1,
            "FairLock pair p50",
        );
        table.add("read pair p99", "ms", read.2);
        table.add_ratio(
            "read pairs/s",
            "/s",
            read.0,
            read.0 / lock.0,
            "Lock pairs/s",
        );
        table.add_ratio(
            "write pair p50",
            "ms",
            write.1,
            write.1 / lock.1,
            "Lock pair p50",
        );

        // The writer's first attempt (which claims) reaches Redis about half a round trip after
        // it asks, and a reader's `lock()` returns about half a round trip after its script ran:
        // a reader let in before the claim began at most a round trip after the writer asked.
        // Two fred round trips (p50) of slack.
        let slack = Duration::from_secs_f64(2.0 * common::fred_ping_p50_ms(&url, 2_000) / 1e3);
        let (waits, held, let_in) =
            wait_runtime.block_on(writer_behind_readers(&url, readers, hold, rounds, slack));
        let (p50, max) = (
            common::percentile(&waits, 50.0),
            waits.iter().copied().fold(0.0, f64::max),
        );
        table.add("readers' hold p50 (measured)", "ms", held);
        table.add_ratio("writer wait p50", "ms", p50, p50 / held, "readers' hold");
        table.add_ratio("writer wait max", "ms", max, max / held, "readers' hold");
        worst = worst.max(max / held);
        table.add(
            "readers let in while the writer waited, per round",
            "",
            common::median(&let_in),
        );
        table.add(
            "readers let in while the writer waited, worst round",
            "",
            let_in.iter().copied().fold(0.0, f64::max),
        );
    }
    let met = table.ratio("read pair p50") <= 2.0;
    table.target("read pair p50", "≤ 2× Lock's (same run)", met);
    let met = table.ratio("writer wait p50") <= 1.5;
    table.target("writer wait p50", "≤ 1.5× the readers' hold", met);
    table.target(
        "writer wait max",
        format!("≤ 3× the readers' hold, every run (worst {worst:.2}×)"),
        worst <= 3.0,
    );
    let met = table.median("readers let in while the writer waited, per round") == 0.0;
    table.target(
        "readers let in while the writer waited, per round",
        "0",
        met,
    );
    table.print();
}
