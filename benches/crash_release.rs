//! Crash-release: a holder process takes a lock with a 2 s lease (a fixed `lock_with_lease`, or
//! the watchdog with a 2 s timeout) and is SIGKILLed while this process waits for the lock in
//! `lock()`. The lease's expiry is the kill time plus the `PTTL` read at the kill; the overshoot
//! is how long after it the waiter got the lock.
//!
//! `cargo bench --bench crash_release` (env `RUNS`, default 5 per lease kind).

mod common;

use std::time::Duration;

use common::now_us;
use common::report::Table;
use common::worker::{self, Worker};
use common::Redis;
use relock::testing::RedisServer;

const KEY: &str = "bench:crash";
const LEASE: Duration = Duration::from_secs(2);
const KINDS: [&str; 2] = ["fixed lease", "watchdog"];

/// Worker: `holder <url> <kind>`: takes the lock, says `held`, and holds it until killed.
fn holder(args: &[String]) {
    let [mode, url, kind] = args else {
        panic!("worker arguments: holder <url> <kind>")
    };
    assert_eq!(mode, "holder");
    let _parent = worker::parent_lines();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let config = relock::Config::from_url(url)
            .unwrap()
            .with_watchdog_timeout(LEASE);
        let client = relock::Client::new(config).await.unwrap();
        let lock = client.lock(KEY);
        let _guard = match kind.as_str() {
            "watchdog" => lock.lock().await.unwrap(),
            _ => lock.lock_with_lease(LEASE).await.unwrap(),
        };
        println!("held");
        std::future::pending::<()>().await;
    });
}

/// One crash: (overshoot ms, kill → acquire ms, PTTL at the kill ms).
async fn crash(server: &RedisServer, client: &relock::Client, kind: &str, run: usize) -> [f64; 3] {
    server.cmd(&["DEL", KEY]);
    let mut holder = Worker::spawn(&["holder".into(), server.url(), kind.into()]);
    holder.expect("held");
    let lock = client.lock(KEY);
    let waiter = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        let acquired = now_us();
        guard.unlock().await.unwrap();
        acquired
    });
    while client.stats().waiters == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Kill at a different point of the lease (and of the renewal period) in every run.
    tokio::time::sleep(Duration::from_millis(200 + (run as u64 * 277) % 900)).await;
    let before = now_us();
    let pttl: u64 = server.cmd(&["PTTL", KEY])[1..].trim().parse().unwrap();
    let after = now_us();
    holder.kill();
    let killed = now_us();
    // PTTL is whole ms, rounded down: the expiry lies within the next ms.
    let expiry = (before + after) / 2 + pttl * 1000 + 500;
    let acquired = tokio::time::timeout(LEASE * 3, waiter)
        .await
        .expect("the waiter never got the lock of a killed holder")
        .unwrap();
    [
        (acquired as f64 - expiry as f64) / 1e3,
        (acquired - killed) as f64 / 1e3,
        pttl as f64,
    ]
}

fn main() {
    if let Some(args) = worker::args() {
        return holder(&args);
    }
    let runs = common::runs(5);
    let server = RedisServer::start().expect("start redis-server");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime
        .block_on(relock::Client::connect(&server.url()))
        .unwrap();
    let mut table = Table::new(
        "crash_release",
        format!(
            "crash-release: holder SIGKILLed with a 2 s lease, waiter in lock() — redis {}, medians of {runs} runs",
            common::redis_version(&server)
        ),
    );
    for kind in KINDS {
        let mut worst = f64::MIN;
        for run in 1..=runs {
            eprintln!("crash_release: {kind} run {run}/{runs}");
            let [overshoot, after_kill, pttl] =
                runtime.block_on(crash(&server, &client, kind, run));
            worst = worst.max(overshoot);
            table.add(&format!("{kind}: overshoot past expiry"), "ms", overshoot);
            table.add(&format!("{kind}: kill → acquire"), "ms", after_kill);
            table.add(&format!("{kind}: PTTL at kill"), "ms", pttl);
        }
        table.add(&format!("{kind}: worst overshoot"), "ms", worst);
        for figure in ["overshoot past expiry", "worst overshoot"] {
            let figure = format!("{kind}: {figure}");
            let met = table.median(&figure) <= 5.0;
            table.target(&figure, "≤ 5 ms", met);
        }
    }
    table.print();
}
