//! Election: how soon a follower leads after the leader goes. The leader is a worker process
//! (campaigned with a 2 s lease, the watchdog renewing it); this process's follower waits in
//! `campaign()`.
//!
//! - **After a kill**: the leader is SIGKILLed at a different point of its lease each round. The
//!   lease's end is the kill time plus the election key's `PTTL` read just before it; the
//!   overshoot is how long after that end the follower led (it cannot lead before: nobody gave
//!   the term back). Target (issue 36): p99 ≤ 250 ms.
//! - **After `resign()`**: the leader stamps the wall clock and resigns; the figure is that
//!   stamp to the moment the follower leads, against the floor of waking one idle process
//!   through fred (`common/wake.rs`, a `PUBLISH` until the woken process's `PING` is answered),
//!   measured in the same run. In the same rounds, a `watch()` of another client of this
//!   process (polled once it reported the leader) delivers the vacancy: the stamp to that
//!   moment, against the same floor.
//!
//! `cargo bench --bench election` (env `TAKEOVERS`, default 20, per kind; `RUNS`, default 1).

mod common;

use std::time::Duration;

use futures::StreamExt;

use common::now_us;
use common::report::Table;
use common::wake::Stack;
use common::worker::{self, Worker};
use common::Redis;
use relock::testing::RedisServer;

const LEASE: Duration = Duration::from_secs(2);

/// Worker: `leader <url> <name> <kill|resign>`: leads, says `leads`; for `resign`, waits for
/// the parent's `resign`, says `t <µs>` and resigns; for `kill`, holds the term until killed.
fn leader(args: &[String]) {
    let [_, url, name, how] = args else {
        panic!("worker arguments: leader <url> <name> <kill|resign>")
    };
    let parent = worker::parent_lines();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let config = relock::Config::from_url(url)
            .unwrap()
            .with_watchdog_timeout(LEASE);
        let client = relock::Client::new(config).await.unwrap();
        let term = client.election(name).campaign().await.unwrap();
        println!("leads");
        if how == "kill" {
            std::future::pending::<()>().await;
        }
        let _ = tokio::task::spawn_blocking(move || parent.recv())
            .await
            .unwrap();
        println!("t {}", now_us());
        term.resign().await.unwrap();
        println!("resigned");
    });
}

/// One takeover after the leader goes `how`: the ms from the leader's going (a kill: its
/// lease's end; a resign: its stamp) to the follower's leading, and for a resign the ms from
/// the stamp to a `watch()` (another client of this process) delivering the vacancy.
async fn takeover(
    server: &RedisServer,
    client: &relock::Client,
    watcher: &relock::Client,
    how: &str,
    round: usize,
) -> (f64, Option<f64>) {
    let name = format!("bench:election:{how}:{round}");
    let mut worker = Worker::spawn(&["leader".into(), server.url(), name.clone(), how.into()]);
    worker.expect("leads");
    let mut watch = watcher.election(name.clone()).watch();
    let elected = watch.next().await.unwrap().unwrap();
    assert!(matches!(elected, relock::Change::Elected { .. }));
    let watched = tokio::spawn(async move {
        let vacant = watch.next().await.unwrap().unwrap();
        assert!(matches!(vacant, relock::Change::Vacant { .. }));
        now_us()
    });
    let election = client.election(name.clone());
    let follower = tokio::spawn(async move {
        let term = election.campaign().await.unwrap();
        let led = now_us();
        term.resign().await.unwrap();
        led
    });
    while client.stats().waiters == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let gone = if how == "kill" {
        // Kill at a different point of the lease (and of the renewal period) in every round.
        tokio::time::sleep(Duration::from_millis(100 + (round as u64 * 277) % 900)).await;
        let key = format!("relock_election:{name}");
        let before = now_us();
        let pttl: u64 = server.cmd(&["PTTL", &key])[1..].trim().parse().unwrap();
        let after = now_us();
        worker.kill();
        // PTTL is whole ms, rounded down: the end lies within the next ms.
        (before + after) / 2 + pttl * 1000 + 500
    } else {
        worker.send("resign");
        let line = worker.line();
        let stamp = line.strip_prefix("t ").expect("the leader's stamp");
        stamp.parse().unwrap()
    };
    let led = tokio::time::timeout(LEASE * 3, follower)
        .await
        .expect("the follower never led")
        .unwrap();
    let seen = tokio::time::timeout(LEASE * 3, watched)
        .await
        .expect("the watch never saw the vacancy")
        .unwrap();
    let watch_ms = (how == "resign").then(|| (seen as f64 - gone as f64) / 1e3);
    ((led as f64 - gone as f64) / 1e3, watch_ms)
}

fn main() {
    if let Some(args) = worker::args() {
        return match args.first().map(String::as_str) {
            Some("leader") => leader(&args),
            _ => common::wake::worker_main(&args),
        };
    }
    let runs = common::runs(1);
    let takeovers: usize = common::env_or("TAKEOVERS", 20);
    let server = RedisServer::start().expect("start redis-server");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime
        .block_on(relock::Client::connect(&server.url()))
        .unwrap();
    let watcher = runtime
        .block_on(relock::Client::connect(&server.url()))
        .unwrap();
    let mut table = Table::new(
        "election",
        format!(
            "election: a follower in campaign() after the leader (another process, 2 s lease) \
             goes — redis {}, {takeovers} takeovers per kind, medians of {runs} runs",
            common::redis_version(&server)
        ),
    );
    for run in 1..=runs {
        eprintln!("election: run {run}/{runs}");
        let floor = common::wake::floor_ms(
            Stack::Fred,
            server.port(),
            1,
            takeovers,
            Duration::from_millis(50),
        );
        table.add("wake one idle process through fred, p50", "ms", floor);
        for how in ["kill", "resign"] {
            let (times, watched): (Vec<f64>, Vec<Option<f64>>) = (0..takeovers)
                .map(|round| runtime.block_on(takeover(&server, &client, &watcher, how, round)))
                .unzip();
            let watched: Vec<f64> = watched.into_iter().flatten().collect();
            let (p50, p99) = (
                common::percentile(&times, 50.0),
                common::percentile(&times, 99.0),
            );
            if how == "kill" {
                table.add("after a kill: led past the lease's end, p50", "ms", p50);
                table.add("after a kill: led past the lease's end, p99", "ms", p99);
            } else {
                table.add_ratio(
                    "after resign(): led, p50",
                    "ms",
                    p50,
                    p50 / floor,
                    "waking a process",
                );
                table.add("after resign(): led, p99", "ms", p99);
                let (w50, w99) = (
                    common::percentile(&watched, 50.0),
                    common::percentile(&watched, 99.0),
                );
                table.add_ratio(
                    "after resign(): watch() delivered the vacancy, p50",
                    "ms",
                    w50,
                    w50 / floor,
                    "waking a process",
                );
                table.add(
                    "after resign(): watch() delivered the vacancy, p99",
                    "ms",
                    w99,
                );
            }
        }
    }
    let figure = "after a kill: led past the lease's end, p99";
    let met = table.median(figure) <= 250.0;
    table.target(figure, "≤ 250 ms", met);
    table.print();
}
