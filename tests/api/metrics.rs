//! What a client counts: `Client::stats()` without any feature, and with the `metrics` feature
//! the same events at `/metrics`, scraped over HTTP from `examples/metrics.rs` after it did a
//! known amount of work.

use crate::common;

use std::time::Duration;

use relock::Owner;

#[tokio::test]
async fn stats_count_acquires_waits_unlocks_losses_and_reloads() {
    let server = common::RedisServer::start();
    let (a, b) = (
        common::client(&server, Duration::from_secs(3)).await,
        common::client(&server, Duration::from_secs(3)).await,
    );
    let name = common::prefix("stats-counts");
    let held = a.lock(&name).owned_by(Owner::new()).lock().await.unwrap();
    assert!(b.lock(&name).try_lock().await.unwrap().is_none());
    let waiter = tokio::spawn({
        let lock = b.lock(&name);
        async move { lock.lock().await.unwrap().unlock().await.unwrap() }
    });
    assert!(common::until_subscribed(&server, &name, 1).await);
    held.unlock().await.unwrap();
    waiter.await.unwrap();
    let stats = b.stats();
    assert_eq!(
        (stats.acquired, stats.busy, stats.acquire_errors),
        (1, 1, 0)
    );
    assert_eq!(stats.waits, 1, "{stats:?}");
    assert_eq!(stats.unlocks, 1);
    assert!(
        stats.wakeups >= 1,
        "the release's message woke the waiter: {stats:?}"
    );
    assert_eq!(a.stats().unlocks, 1);

    // A cancelled acquire, a lease lost on purpose, and a script the server forgot.
    let held = a.lock(&name).owned_by(Owner::new()).lock().await.unwrap();
    let cancelled = tokio::time::timeout(Duration::from_millis(50), b.lock(&name).lock()).await;
    assert!(cancelled.is_err());
    assert_eq!(b.stats().cancelled, 1);
    server.cmd(&["DEL", &name]);
    tokio::time::timeout(Duration::from_secs(10), held.lost())
        .await
        .expect("the watchdog finds the lock gone");
    let stats = a.stats();
    assert_eq!(stats.leases_lost, 1, "{stats:?}");
    assert!(stats.renewals >= 1);
    let functions = a.stats().scripts == relock::ScriptCalls::Functions;
    server.cmd(&["SCRIPT", "FLUSH"]);
    if functions {
        server.cmd(&["FUNCTION", "FLUSH"]);
    }
    let before = a.stats().noscript_reloads;
    a.lock(&name).lock().await.unwrap().unlock().await.unwrap();
    // By EVALSHA, the acquire's and the release's (and a renewal's, should the watchdog's tick
    // fall between them); as functions, the library's, by the first call after the flush (a
    // renewal sent at the same moment may find it gone too).
    let reloads = a.stats().noscript_reloads - before;
    let expected = if functions { 1..=2 } else { 2..=3 };
    assert!(expected.contains(&reloads), "{reloads}");
}

/// The samples of `metric` in a Prometheus text scrape whose labels include every one of
/// `labels`, summed.
#[cfg(feature = "metrics")]
fn sample(scrape: &str, metric: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, rest) = series.split_once('{').unwrap_or((series, "}"));
            if name != metric {
                return None;
            }
            let found = labels
                .iter()
                .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            found.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

#[cfg(feature = "metrics")]
#[tokio::test]
async fn the_example_serves_metrics_that_match_what_it_did() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    let server = common::RedisServer::start();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let (tasks, rounds) = (4, 25);
    let mut child = tokio::process::Command::new(common::example("metrics", "metrics"))
        .args(["--addr", &addr, "--tasks", &tasks.to_string()])
        .args(["--rounds", &rounds.to_string()])
        .env("REDIS_URL", server.url())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let done = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.starts_with("done") {
                return line;
            }
        }
        panic!("the example ended before it was done");
    })
    .await
    .expect("the example is done within 60 s");

    let mut http = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    http.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    http.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");

    // The warm-up, every task's rounds, and the one after SCRIPT FLUSH.
    let orders = [("kind", "lock"), ("name", "orders:*")];
    let taken = (1 + tasks * rounds + 1) as f64;
    let acquired = [orders[0], orders[1], ("outcome", "acquired")];
    assert_eq!(
        sample(&response, "relock_acquire_total", &acquired),
        taken,
        "{done}"
    );
    let released = [orders[0], orders[1], ("outcome", "released")];
    assert_eq!(sample(&response, "relock_unlocks_total", &released), taken);
    let holds = sample(&response, "relock_hold_duration_seconds_count", &orders);
    assert_eq!(holds, taken);
    assert_eq!(sample(&response, "relock_held", &orders), 0.0);
    assert_eq!(sample(&response, "relock_waiters", &orders), 0.0);
    assert!(sample(&response, "relock_waits_total", &orders) >= 1.0);
    // The lease lost on purpose, and nothing else lost.
    let reports = [("kind", "lock"), ("name", "reports:*"), ("reason", "gone")];
    assert_eq!(sample(&response, "relock_leases_lost_total", &reports), 1.0);
    assert_eq!(sample(&response, "relock_leases_lost_total", &[]), 1.0);
    assert_eq!(
        sample(&response, "relock_renewals_total", &[("outcome", "gone")]),
        1.0
    );
    // By EVALSHA, each script loaded twice: on the new server, and after SCRIPT FLUSH. As
    // functions, the library once, by the acquire after FUNCTION FLUSH (it was loaded at
    // connect, and the release finds it there again).
    let functions = done.ends_with("scripts=functions");
    for (script, expected) in [("lock_acquire", 2.0), ("lock_release", 2.0)] {
        let reloads = sample(
            &response,
            "relock_noscript_reloads_total",
            &[("script", script)],
        );
        let expected = match (functions, script) {
            (true, "lock_acquire") => 1.0,
            (true, _) => 0.0,
            _ => expected,
        };
        assert_eq!(reloads, expected, "{script}: {done}");
    }
    let acquire_runs = sample(
        &response,
        "relock_script_duration_seconds_count",
        &[("script", "lock_acquire")],
    );
    let attempts = sample(&response, "relock_acquire_attempts_sum", &[]);
    assert_eq!(acquire_runs, attempts, "one acquire script per attempt");
    assert!(sample(&response, "relock_wakeups_total", &[]) >= 1.0);
    // Described once, with a unit.
    assert!(
        response.contains("# HELP relock_leases_lost_total"),
        "{response}"
    );
    child.start_kill().unwrap();
}

/// A recorder that keeps every counter, gauge and histogram (as a count of samples) by its name
/// and labels, for [`metrics::with_local_recorder`].
#[cfg(feature = "metrics")]
#[derive(Default)]
struct Capture {
    handles: std::sync::Mutex<
        std::collections::HashMap<String, std::sync::Arc<std::sync::atomic::AtomicU64>>,
    >,
    /// Each histogram's last sample, as f64 bits.
    last: std::sync::Mutex<
        std::collections::HashMap<String, std::sync::Arc<std::sync::atomic::AtomicU64>>,
    >,
}

/// A histogram that keeps its number of samples, in the cell [`Capture`] reads, and its last
/// sample. Counters and gauges need no wrapper: `metrics` records them straight into the cell
/// (a gauge's value as f64 bits).
#[cfg(feature = "metrics")]
struct Samples {
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
    last: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

#[cfg(feature = "metrics")]
impl metrics::HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let bits = value.to_bits();
        self.last.store(bits, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(feature = "metrics")]
impl Capture {
    /// `name{k=v,...}` with the labels sorted.
    fn text(key: &metrics::Key) -> String {
        let mut labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        labels.sort();
        format!("{}{{{}}}", key.name(), labels.join(","))
    }

    /// The cell that counts `key`'s samples, made on first use.
    fn handle(&self, key: &metrics::Key) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
        let mut handles = self.handles.lock().unwrap();
        handles.entry(Capture::text(key)).or_default().clone()
    }

    /// A counter's count or a histogram's samples, by `name{k=v,...}` (labels sorted).
    fn count(&self, key: &str) -> u64 {
        let handles = self.handles.lock().unwrap();
        let found = handles.get(key);
        found.map_or(0, |s| s.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn gauge(&self, key: &str) -> f64 {
        f64::from_bits(self.count(key))
    }

    /// A histogram's last sample, by `name{k=v,...}`; `None` before its first.
    fn last(&self, key: &str) -> Option<f64> {
        (self.count(key) > 0).then(|| {
            let last = self.last.lock().unwrap();
            f64::from_bits(last[key].load(std::sync::atomic::Ordering::Relaxed))
        })
    }
}

#[cfg(feature = "metrics")]
impl metrics::Recorder for Capture {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }

    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::from_arc(self.handle(key))
    }

    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::from_arc(self.handle(key))
    }

    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        let mut cells = self.last.lock().unwrap();
        let last = cells.entry(Capture::text(key)).or_default().clone();
        metrics::Histogram::from_arc(std::sync::Arc::new(Samples {
            count: self.handle(key),
            last,
        }))
    }
}

/// Every primitive reports under its own `kind`: recorded by a recorder local to this test's
/// thread (a current-thread runtime runs the client and its tasks there).
#[cfg(feature = "metrics")]
#[test]
fn every_primitive_reports_under_its_kind() {
    let capture = Capture::default();
    let server = common::RedisServer::start();
    let candidates = std::cell::Cell::new(0.0);
    metrics::with_local_recorder(&capture, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let client = common::client(&server, Duration::from_secs(3)).await;
            let base = common::prefix("metrics-kinds");
            let sem = client.semaphore(format!("{base}:sem"));
            assert!(sem.try_set_permits(1).await.unwrap());
            sem.acquire(1).await.unwrap();
            assert!(!sem.try_acquire(1).await.unwrap());
            sem.release(1).await.unwrap();
            let permits = client.permit_semaphore(format!("{base}:permits"));
            assert!(permits.try_set_permits(1).await.unwrap());
            permits.acquire().await.unwrap().release().await.unwrap();
            let latch = client.count_down_latch(format!("{base}:latch"));
            assert!(latch.try_set_count(1).await.unwrap());
            latch.count_down().await.unwrap();
            latch.wait().await.unwrap();
            let fair = client.fair_lock(format!("{base}:fair"));
            fair.lock().await.unwrap().unlock().await.unwrap();
            let rw = client.rw_lock(format!("{base}:rw"));
            rw.read().lock().await.unwrap().unlock().await.unwrap();
            rw.write().lock().await.unwrap().unlock().await.unwrap();
            let multi = client.multi_lock([format!("{base}:m1"), format!("{base}:m2")]);
            multi.lock().await.unwrap().unlock().await.unwrap();
            let election = client.election(format!("{base}:election"));
            election.campaign().await.unwrap().resign().await.unwrap();
            let _term = election.campaign().await.unwrap();
            // A candidate waiting behind the term counts among the kind's waiters.
            let candidate = tokio::spawn({
                let election = election.clone();
                async move { election.campaign().await }
            });
            while client.stats().waiters == 0 {
                tokio::task::yield_now().await;
            }
            candidates.set(capture.gauge("relock_waiters{kind=election}"));
            candidate.abort();
            let _kept = client.lock(format!("{base}:kept")).lock().await.unwrap();
            client.shutdown().await.unwrap();
        });
    });
    let acquired = |kind: &str| {
        capture.count(&format!(
            "relock_acquire_total{{kind={kind},outcome=acquired}}"
        ))
    };
    for kind in [
        "semaphore",
        "permit_semaphore",
        "latch",
        "fair_lock",
        "read_lock",
        "write_lock",
        "multi_lock",
    ] {
        assert_eq!(acquired(kind), 1, "{kind}");
    }
    // The lock kept till the shutdown: a multi-lock that takes its parts in one script counts
    // once, under its own kind (its parts' guards are held as locks).
    assert_eq!(acquired("lock"), 1);
    let busy = "relock_acquire_total{kind=semaphore,outcome=busy}";
    assert_eq!(capture.count(busy), 1);
    let permit = "kind=permit_semaphore";
    assert_eq!(capture.gauge(&format!("relock_held{{{permit}}}")), 0.0);
    let held_for = format!("relock_hold_duration_seconds{{{permit}}}");
    assert_eq!(capture.count(&held_for), 1);
    let released = format!("relock_unlocks_total{{{permit},outcome=released}}");
    assert_eq!(capture.count(&released), 1);
    let lost = "relock_leases_lost_total{kind=lock,reason=shutdown}";
    assert_eq!(capture.count(lost), 1, "the lock kept till the shutdown");
    assert_eq!(capture.gauge("relock_held{kind=lock}"), 0.0);
    // Two terms won, one resigned, one ended by the shutdown; the second began after a vacancy
    // that history records.
    assert_eq!(acquired("election"), 2);
    let resigned = "relock_unlocks_total{kind=election,outcome=released}";
    assert_eq!(capture.count(resigned), 1);
    let ended = "relock_leases_lost_total{kind=election,reason=shutdown}";
    assert_eq!(capture.count(ended), 1);
    assert_eq!(capture.count("relock_election_vacancy_seconds{}"), 1);
    assert_eq!(candidates.get(), 1.0, "the waiting candidate");
    for script in [
        "lock_acquire",
        "fair_acquire",
        "semaphore_acquire",
        "permit_acquire",
    ] {
        let runs = format!("relock_script_duration_seconds{{script={script}}}");
        assert!(capture.count(&runs) >= 1, "{script}");
    }
}

/// Under a lock-delay, the vacancy metric measures the vacancy: a leader that stops renewing
/// (its client shut down keeping its term) lapses; the candidate that meets the lock-delay
/// records the vacancy then, and the term it takes after the delay measures from there (it
/// measured nothing when the delayed attempt wrote nothing).
#[cfg(feature = "metrics")]
#[test]
fn the_vacancy_metric_measures_a_lock_delay() {
    let capture = Capture::default();
    let server = common::RedisServer::start();
    let delay = Duration::from_millis(800);
    metrics::with_local_recorder(&capture, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let lease = Duration::from_millis(600);
            let name = common::prefix("metrics-vacancy");
            let leaving = common::client(&server, lease).await;
            let leader = leaving.election(&name).with_lock_delay(delay).unwrap();
            let term = leader.campaign().await.unwrap();
            leaving.shutdown_keeping_locks().await.unwrap();
            drop(term);
            let next = common::client(&server, lease).await;
            let election = next.election(&name).with_lock_delay(delay).unwrap();
            let _term = election.campaign().await.unwrap();
        });
    });
    let vacancy = capture
        .last("relock_election_vacancy_seconds{}")
        .expect("the second term recorded its vacancy");
    println!("vacancy {vacancy:.3} s with a lock-delay of {delay:?}");
    assert!(
        vacancy >= delay.as_secs_f64() / 2.0,
        "a vacancy of {vacancy} s under a lock-delay of {delay:?}"
    );
}
