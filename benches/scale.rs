//! Scale: one client holding 10,000 locks under the watchdog, and one client waiting on 10,000
//! different locks at once.
//!
//! Holding: a client with a 3 s watchdog timeout (renewal every 1 s) takes 10,000 locks. Over
//! whole renewal periods it counts `EVALSHA` calls (`INFO commandstats`) and the process's CPU
//! time (`/proc/self/stat`, 10 ms ticks), minus the same client's CPU with no locks.
//! Waiting: a second client calls `lock()` on each of the 10,000 held locks. Figures: resident
//! memory per waiter (`VmRSS` delta / 10,000), the server's view of its subscriber connection
//! (`CLIENT LIST TYPE pubsub`, `PUBSUB NUMSUB`), the re-checks while waiting, and the time from
//! releasing all 10,000 until every waiter has the lock (all must, or the bench fails).
//!
//! `cargo bench --bench scale` (env `RUNS`, default 3; `LOCKS`, default 10000).

mod common;

use std::time::Duration;

use futures::future::join_all;
use tokio::time::{sleep, sleep_until, Instant};

use common::report::Table;
use common::worker::Worker;
use common::{command_calls, cpu_time, ms, rss_bytes, Redis, Remote};
use relock::testing::RedisServer;

const WATCHDOG: Duration = Duration::from_secs(3);
/// The watchdog renews every third of its timeout.
const PERIOD: Duration = Duration::from_secs(1);
const PERIODS: u32 = 5;

fn name(i: usize) -> String {
    format!("bench:scale:{i}")
}

/// Waits until half a period after one of the watchdog's ticks (it ticks every `PERIOD` from
/// `born`), so a span of whole periods holds exactly that many ticks.
async fn between_ticks(born: Instant) {
    let since = born.elapsed();
    let next = (since.as_millis() / PERIOD.as_millis() + 1) as u32;
    sleep_until(born + PERIOD * next + PERIOD / 2).await;
}

/// `EVALSHA` calls and CPU time over `PERIODS` renewal periods.
async fn over_periods(server: &impl Redis, born: Instant) -> (f64, Duration) {
    between_ticks(born).await;
    let (calls, cpu) = (command_calls(server), cpu_time());
    sleep(PERIOD * PERIODS).await;
    (evalsha(server) - evalsha_in(&calls), cpu_time() - cpu)
}

fn evalsha_in(calls: &std::collections::HashMap<String, u64>) -> f64 {
    calls.get("evalsha").copied().unwrap_or(0) as f64
}

fn evalsha(server: &impl Redis) -> f64 {
    evalsha_in(&command_calls(server))
}

/// `(connections in pub/sub mode with subscriptions, their channel counts)`.
fn subscribers(server: &impl Redis) -> Vec<u64> {
    server
        .cmd(&["CLIENT", "LIST", "TYPE", "pubsub"])
        .split_whitespace()
        .filter_map(|field| field.strip_prefix("sub=")?.parse().ok())
        .filter(|subs| *subs > 0)
        .collect()
}

/// One run, in a fresh worker process (so its memory and CPU figures are its own): prints one
/// `figure\tunit\tvalue` line per figure.
async fn run(server: &impl Redis, locks: usize) {
    let mut table = Figures;
    let table = &mut table;
    let config = relock::Config::from_url(&server.url())
        .unwrap()
        .with_watchdog_timeout(WATCHDOG);
    let holder = relock::Client::new(config).await.unwrap();
    let born = Instant::now();

    // Holding: idle baseline, then 10,000 held locks over the same number of periods.
    let (_, idle_cpu) = over_periods(server, born).await;
    let started = Instant::now();
    let guards: Vec<relock::LockGuard> = join_all((0..locks).map(|i| {
        let lock = holder.lock(name(i));
        tokio::spawn(async move { lock.lock().await.unwrap() })
    }))
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect();
    table.add(
        "take all locks (all tasks at once)",
        "ms",
        ms(started.elapsed()),
    );
    let (renewals, held_cpu) = over_periods(server, born).await;
    assert!(guards.iter().all(|g| !g.is_lost()), "a held lock was lost");
    let per_period = renewals / f64::from(PERIODS);
    table.add("renewal calls/period", "calls", per_period);
    table.add(
        "renewal calls/period per 100 locks",
        "calls",
        per_period * 100.0 / locks as f64,
    );
    let cpu = (held_cpu.saturating_sub(idle_cpu)) / PERIODS;
    table.add("renewal CPU/period (minus idle)", "ms", ms(cpu));

    // Waiting: one client, one lock() per held lock.
    let waiter = relock::Client::connect(&server.url()).await.unwrap();
    let rss_before = rss_bytes();
    let tasks: Vec<_> = (0..locks)
        .map(|i| {
            let lock = waiter.lock(name(i));
            tokio::spawn(async move {
                let guard = lock.lock().await.unwrap();
                let acquired = Instant::now();
                guard.unlock().await.unwrap();
                acquired
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while waiter.stats().waiters < locks || subscribers(server).iter().sum::<u64>() < locks as u64 {
        assert!(Instant::now() < deadline, "waiters never all registered");
        sleep(Duration::from_millis(20)).await;
    }
    let rss_after = rss_bytes();
    table.add(
        "memory per waiter (RSS)",
        "bytes",
        (rss_after as f64 - rss_before as f64) / locks as f64,
    );
    let subs = subscribers(server);
    table.add("subscriber connections", "conns", subs.len() as f64);
    table.add("channels on them", "chans", subs.iter().sum::<u64>() as f64);
    let numsub = server.cmd(&[
        "PUBSUB",
        "NUMSUB",
        &format!("redisson_lock__channel:{{{}}}", name(0)),
    ]);
    let numsub: f64 = numsub
        .lines()
        .last()
        .unwrap_or("")
        .trim_start_matches(':')
        .parse()
        .unwrap_or(f64::NAN);
    table.add("PUBSUB NUMSUB of a lock channel", "subs", numsub);
    let calls = evalsha(server);
    // One whole lease: every waiter's TTL-bounded wait ends once in it.
    sleep(WATCHDOG).await;
    let rechecks =
        (evalsha(server) - calls) / WATCHDOG.as_secs_f64() - per_period / PERIOD.as_secs_f64();
    table.add("waiters' re-checks while held", "/s", rechecks);

    // Release all; every waiter must get its lock.
    let released = Instant::now();
    join_all(guards.into_iter().map(|g| tokio::spawn(g.unlock()))).await;
    let release_ms = ms(released.elapsed());
    let mut last = released;
    for task in tasks {
        let acquired = tokio::time::timeout_at(deadline, task)
            .await
            .expect("not every waiter woke within 60 s")
            .unwrap();
        last = last.max(acquired);
    }
    table.add("release all locks", "ms", release_ms);
    table.add(
        "every waiter acquired, after release",
        "ms",
        ms(last - released),
    );
    waiter.shutdown().await.unwrap();
    holder.shutdown().await.unwrap();
}

/// Figures of a worker run, printed for the parent's table.
struct Figures;

impl Figures {
    fn add(&mut self, figure: &str, unit: &str, value: f64) {
        println!("{figure}\t{unit}\t{value}");
    }
}

fn main() {
    if let Some(args) = common::worker::args() {
        let [mode, port, locks] = &args[..] else {
            panic!("worker arguments: scale <port> <locks>")
        };
        assert_eq!(mode, "scale");
        let _parent = common::worker::parent_lines();
        let server = Remote(port.parse().unwrap());
        let runtime = tokio::runtime::Runtime::new().unwrap();
        return runtime.block_on(run(&server, locks.parse().unwrap()));
    }
    let runs = common::runs(3);
    let locks = common::env_or("LOCKS", 10_000usize);
    let server = RedisServer::start().expect("start redis-server");
    let mut table = Table::new(
        "scale",
        format!(
            "scale: {locks} locks held by one client (watchdog 3 s), {locks} waited on by one — redis {}, medians of {runs} runs",
            common::redis_version(&server)
        ),
    );
    for r in 1..=runs {
        eprintln!("scale: run {r}/{runs}");
        let args = ["scale".into(), server.port().to_string(), locks.to_string()];
        for line in Worker::spawn(&args).finish() {
            let [figure, unit, value] = line.split('\t').collect::<Vec<_>>()[..] else {
                continue;
            };
            let unit: &'static str = Box::leak(unit.to_owned().into_boxed_str());
            table.add(figure, unit, value.parse().unwrap());
        }
    }
    let met = table.median("renewal calls/period per 100 locks") <= 1.0;
    table.target("renewal calls/period per 100 locks", "≤ 1", met);
    let met = table.median("subscriber connections") == 1.0;
    table.target("subscriber connections", "1", met);
    let met = table.median("channels on them") >= locks as f64;
    table.target(
        "channels on them",
        format!("{locks} on one connection"),
        met,
    );
    table.print();
}
