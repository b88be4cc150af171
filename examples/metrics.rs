//! relock's metrics (the `metrics` feature) served at `/metrics` by
//! `metrics-exporter-prometheus`, while tasks contend on a lock.
//!
//! ```text
//! cargo run --example metrics --features metrics            # a throwaway redis-server
//! curl -s http://127.0.0.1:9898/metrics | grep '^relock_'    # in another terminal
//! ```
//!
//! Four tasks take `orders:42` in turns, forever. Each lock's metrics carry a `name` label
//! through a mapper that keeps the family only (`orders:42` becomes `orders:*`), so the number of
//! series stays bounded however many orders there are.
//!
//! With `--rounds N` it does a fixed amount of work instead, and says what it did: one acquire
//! and release, then each task takes the lock N times; then one lease is lost on purpose (a watchdog lock on
//! `reports:nightly` whose key is deleted behind its holder's back); then the server forgets its
//! scripts (`SCRIPT FLUSH`, and `FUNCTION FLUSH` where it calls them as functions) before one
//! more acquire and release of `orders:42`. It prints a line
//! starting with `done` and serves `/metrics` until it is stopped, for a test to scrape.
//! Other options: `--addr HOST:PORT` (default `127.0.0.1:9898`) and `--tasks N` (default 4);
//! `REDIS_URL` picks a server of your own. `--help` says all this.

use std::net::SocketAddr;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use relock::fred::interfaces::{ClientLike, KeysInterface};
use relock::fred::types::{ClusterHash, CustomCommand, Value};
use relock::{Client, Config};

/// Histogram buckets in seconds, 0.5 ms to 60 s: without buckets the exporter shows
/// histograms as summaries.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

struct Options {
    addr: SocketAddr,
    tasks: usize,
    rounds: Option<usize>,
}

const USAGE: &str = "\
usage: metrics [--addr HOST:PORT] [--tasks N] [--rounds N]

Serves relock's metrics at http://HOST:PORT/metrics while N tasks take `orders:42` in turns.
  --addr HOST:PORT  where /metrics is served (default 127.0.0.1:9898)
  --tasks N         how many tasks contend (default 4)
  --rounds N        take the lock N times per task, then lose one lease, flush the scripts and
                    print `done`; without it the tasks go on until stopped
REDIS_URL picks a server of your own; else a throwaway redis-server is started.";

/// The options, or the usage and an exit: 0 for `--help`, 2 for anything it cannot read.
fn options() -> Options {
    let mut options = Options {
        addr: "127.0.0.1:9898".parse().unwrap(),
        tasks: 4,
        rounds: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--help" || arg == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = args
            .next()
            .unwrap_or_else(|| usage_error(&format!("{arg} needs a value")));
        match arg.as_str() {
            "--addr" => options.addr = parse(&arg, &value),
            "--tasks" => options.tasks = parse(&arg, &value),
            "--rounds" => options.rounds = Some(parse(&arg, &value)),
            other => usage_error(&format!("unknown option {other}")),
        }
    }
    options
}

/// `value` of option `arg`, or the usage and an exit.
fn parse<T: std::str::FromStr>(arg: &str, value: &str) -> T {
    value
        .parse()
        .unwrap_or_else(|_| usage_error(&format!("{arg}: cannot read {value:?}")))
}

fn usage_error(what: &str) -> ! {
    eprintln!("metrics: {what}\n\n{USAGE}");
    std::process::exit(2);
}

#[tokio::main]
async fn main() -> relock::Result<()> {
    let options = options();
    // The recorder first: a client registers its metrics when it is made.
    PrometheusBuilder::new()
        .with_http_listener(options.addr)
        .set_buckets(BUCKETS)
        .expect("buckets")
        .install()
        .expect("serve /metrics");

    let (_server, url) = relock::testing::from_env_or_start().expect("a redis-server");
    let config = Config::from_url(&url)?
        .with_watchdog_timeout(Duration::from_secs(3))
        .with_metric_name_label(|name| match name.split_once(':') {
            Some((family, _)) => format!("{family}:*"),
            None => name.to_owned(),
        });
    let client = Client::new(config).await?;
    println!("serving http://{}/metrics (Redis at {url})", options.addr);

    // One acquire and release first: a new server loads the scripts then, once each.
    client.lock("orders:42").lock().await?.unlock().await?;

    let contenders: Vec<_> = (0..options.tasks)
        .map(|_| {
            let lock = client.lock("orders:42");
            let rounds = options.rounds;
            tokio::spawn(async move {
                let mut done = 0;
                while rounds.map_or(true, |rounds| done < rounds) {
                    let guard = lock.lock().await?;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    guard.unlock().await?;
                    done += 1;
                }
                relock::Result::Ok(())
            })
        })
        .collect();
    for contender in contenders {
        contender.await.expect("a contender panicked")?;
    }

    // A lease lost on purpose: the lock's key deleted behind its holder's back; the watchdog's
    // next renewal finds it gone.
    let guard = client.lock("reports:nightly").lock().await?;
    let _: i64 = client.redis().del("reports:nightly").await.expect("DEL");
    guard.lost().await;
    drop(guard);
    // Its release runs in the background: let it end before the flush below, or it may load
    // the release script again itself and leave the unlock after the flush nothing to reload.
    while client.stats().in_flight > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    // The server forgets relock's scripts: the next ones are loaded again (NOSCRIPT), or the
    // library once, by the first call that finds its function gone.
    let functions = client.stats().scripts == relock::ScriptCalls::Functions;
    let what = if functions { "FUNCTION" } else { "SCRIPT" };
    let flush = CustomCommand::new_static(what, ClusterHash::Random, false);
    let _: Value = client
        .redis()
        .custom(flush, vec!["FLUSH"])
        .await
        .expect("FLUSH");
    client.lock("orders:42").lock().await?.unlock().await?;

    let stats = client.stats();
    println!(
        "done: acquired={} leases_lost={} noscript_reloads={} scripts={}",
        stats.acquired,
        stats.leases_lost,
        stats.noscript_reloads,
        if functions { "functions" } else { "evalsha" }
    );
    // Serve until stopped.
    std::future::pending::<()>().await;
    Ok(())
}
