//! Tasks in one or more worker processes contending for one lock, with mutual exclusion checked
//! while they run. Used by the `contended` and `herd` benches.
//!
//! Every task loops over the normal blocking `lock()` for a window: it stamps the wall clock when
//! it calls `lock()`, when it gets the lock and just before it calls `unlock()`. Inside the lock it
//! `INCR`s a Redis counter that must read 1 and `DECR`s it back to 0 before it releases: a second
//! holder anywhere shows up there. The parent merges the stamps of all processes (they share the
//! machine's wall clock) and checks that no two holds overlap. Either check failing panics, so the
//! bench exits non-zero.

use std::io::Write;
use std::time::Duration;

use fred::interfaces::KeysInterface;

use super::server::RedisServer;
use super::worker::{self, Worker};
use super::{instant_at, now_us, percentile};

/// The lock every task contends for.
pub const KEY: &str = "bench:contended";
/// The Redis-side overlap check: how many tasks are inside the lock (must never exceed 1).
pub const INSIDE: &str = "bench:inside";

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub tasks: usize,
    /// Worker processes to spread the tasks over (at most one per task).
    pub procs: usize,
    /// How long each holder keeps the lock (plus the two check commands).
    pub hold: Duration,
    pub window: Duration,
}

/// One hold: wall-clock µs when its owner called `lock()`, got it, and called `unlock()`.
#[derive(Clone, Copy, Debug)]
pub struct Hold {
    pub owner: u64,
    pub called: u64,
    pub acquired: u64,
    pub released: u64,
}

/// Everything the workers saw, merged.
pub struct Outcome {
    /// Every hold, in acquire order.
    pub holds: Vec<Hold>,
    pub tasks: usize,
    /// Processes that ran tasks.
    pub procs: usize,
    /// Tasks that never got the lock in the window.
    pub starved: usize,
    /// Waits still open when the window closed, µs (a lower bound of those waits).
    pub open_waits: Vec<u64>,
    pub start_us: u64,
    pub end_us: u64,
}

/// Figures over the holds acquired in a span of the window.
pub struct Stats {
    pub acquisitions: usize,
    pub per_sec: f64,
    /// Release → acquire by a different owner, ms.
    pub gaps_ms: Vec<f64>,
    /// Acquisitions by the owner that released just before.
    pub retakes: usize,
    /// From calling `lock()` to getting it, open waits included, ms.
    pub longest_wait_ms: f64,
    pub mean_hold_ms: f64,
}

impl Stats {
    pub fn gap_ms(&self, p: f64) -> f64 {
        percentile(&self.gaps_ms, p)
    }

    pub fn retake_share(&self) -> f64 {
        self.retakes as f64 / (self.acquisitions.max(2) - 1) as f64
    }
}

/// Runs `spec` against `server`. `during(start_us, end_us)` runs in the parent once the window
/// is set (for probes taken while the tasks contend). Panics on any mutual exclusion violation.
pub fn run(server: &RedisServer, spec: Spec, during: impl FnOnce(u64, u64)) -> Outcome {
    server.cmd(&["DEL", KEY]);
    server.cmd(&["SET", INSIDE, "0"]);
    let procs = spec.procs.clamp(1, spec.tasks);
    let mut workers: Vec<Worker> = (0..procs)
        .map(|p| {
            let tasks = spec.tasks / procs + usize::from(p < spec.tasks % procs);
            Worker::spawn(&[
                "contend".into(),
                server.url(),
                tasks.to_string(),
                spec.hold.as_micros().to_string(),
                p.to_string(),
            ])
        })
        .collect();
    for w in &mut workers {
        w.expect("ready");
    }
    let start_us = now_us() + 300_000;
    let end_us = start_us + spec.window.as_micros() as u64;
    for w in &mut workers {
        w.send(&format!("go {start_us} {end_us}"));
    }
    during(start_us, end_us);

    let mut outcome = Outcome {
        holds: Vec::new(),
        tasks: spec.tasks,
        procs,
        starved: 0,
        open_waits: Vec::new(),
        start_us,
        end_us,
    };
    let mut violations = 0;
    for w in workers {
        for line in w.finish() {
            let f: Vec<u64> = line
                .split(' ')
                .skip(1)
                .map(|x| x.parse().unwrap())
                .collect();
            match line.split(' ').next() {
                Some("h") => outcome.holds.push(Hold {
                    owner: f[0],
                    called: f[1],
                    acquired: f[2],
                    released: f[3],
                }),
                Some("o") => outcome.open_waits.push(f[1]),
                Some("s") => outcome.starved += 1,
                Some("v") => violations += f[0],
                _ => {}
            }
        }
    }
    assert_eq!(
        violations, 0,
        "MUTUAL EXCLUSION VIOLATED: the Redis-side inside counter was not 1 in {violations} holds"
    );
    let inside = server.cmd(&["GET", INSIDE]);
    assert!(
        inside.ends_with("\r\n0\r\n"),
        "inside counter is {inside:?} after the run"
    );
    outcome.holds.sort_by_key(|h| h.acquired);
    for pair in outcome.holds.windows(2) {
        assert!(
            pair[1].acquired >= pair[0].released,
            "MUTUAL EXCLUSION VIOLATED: holds overlap: {:?} and {:?}",
            pair[0],
            pair[1]
        );
    }
    outcome
}

impl Outcome {
    /// Figures over the holds acquired in [`from_us`, `to_us`).
    pub fn stats(&self, from_us: u64, to_us: u64) -> Stats {
        let holds: Vec<&Hold> = self
            .holds
            .iter()
            .filter(|h| (from_us..to_us).contains(&h.acquired))
            .collect();
        let mut gaps_ms = Vec::new();
        let mut retakes = 0;
        for pair in holds.windows(2) {
            if pair[0].owner == pair[1].owner {
                retakes += 1;
            } else {
                gaps_ms.push((pair[1].acquired - pair[0].released) as f64 / 1e3);
            }
        }
        let longest_us = holds
            .iter()
            .map(|h| h.acquired - h.called)
            .chain(self.open_waits.iter().copied())
            .max()
            .unwrap_or(0);
        let held_us: u64 = holds.iter().map(|h| h.released - h.acquired).sum();
        Stats {
            acquisitions: holds.len(),
            per_sec: holds.len() as f64 / ((to_us - from_us) as f64 / 1e6),
            gaps_ms,
            retakes,
            longest_wait_ms: longest_us as f64 / 1e3,
            mean_hold_ms: held_us as f64 / 1e3 / holds.len().max(1) as f64,
        }
    }
}

/// The worker side: `contend <url> <tasks> <hold µs> <process index>`. Says `ready`, waits for
/// `go <start µs> <end µs>`, contends until the end, then prints its stamps and exits.
pub fn worker_main(args: &[String]) {
    let [mode, url, tasks, hold_us, proc] = args else {
        panic!("worker arguments: contend <url> <tasks> <hold µs> <process>")
    };
    assert_eq!(mode, "contend");
    let (tasks, proc): (u64, u64) = (tasks.parse().unwrap(), proc.parse().unwrap());
    let hold = Duration::from_micros(hold_us.parse().unwrap());
    let parent = worker::parent_lines();
    let runtime = super::runtime(super::env_or("WORKER_THREADS", 0));
    let logs = runtime.block_on(async {
        let client = relock::Client::connect(url).await.unwrap();
        // Warm up: scripts loaded, both connections used once.
        let warm = client.lock(format!("{KEY}:warm:{proc}"));
        warm.lock().await.unwrap().unlock().await.unwrap();
        println!("ready");
        let go = tokio::task::spawn_blocking(move || parent.recv().unwrap())
            .await
            .unwrap();
        let window: Vec<u64> = go.split(' ').skip(1).map(|x| x.parse().unwrap()).collect();
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let owner = proc * 1_000_000 + t;
                tokio::spawn(contend(client.clone(), owner, hold, window[0], window[1]))
            })
            .collect();
        let mut logs = Vec::new();
        for h in handles {
            logs.push(h.await.unwrap());
        }
        logs
    });
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for log in logs {
        for h in &log.holds {
            writeln!(
                out,
                "h {} {} {} {}",
                h.owner, h.called, h.acquired, h.released
            )
            .unwrap();
        }
        if let Some(wait) = log.open_wait {
            writeln!(out, "o {} {wait}", log.owner).unwrap();
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
    open_wait: Option<u64>,
    violations: u64,
}

async fn contend(
    client: relock::Client,
    owner: u64,
    hold: Duration,
    start: u64,
    end: u64,
) -> TaskLog {
    let lock = client.lock(KEY);
    let redis = client.redis().clone();
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
        let guard = match tokio::time::timeout_at(deadline, lock.lock()).await {
            Ok(guard) => guard.expect("lock()"),
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
        if inside != 1 || left != 0 {
            log.violations += 1;
        }
        let released = now_us();
        guard.unlock().await.expect("unlock()");
        log.holds.push(Hold {
            owner,
            called,
            acquired,
            released,
        });
    }
    log
}

impl Outcome {
    /// With `DEBUG_WAITS=1`: the five longest waits, each with where in the window it began, how
    /// many holds of others it sat through, and the longest hold and gap among them (stderr).
    pub fn debug_waits(&self) {
        if std::env::var("DEBUG_WAITS").is_err() {
            return;
        }
        let mut waits: Vec<&Hold> = self.holds.iter().collect();
        waits.sort_by_key(|h| std::cmp::Reverse(h.acquired - h.called));
        for w in waits.iter().take(5) {
            let during: Vec<&Hold> = self
                .holds
                .iter()
                .filter(|h| h.acquired >= w.called && h.acquired < w.acquired)
                .collect();
            let longest_hold = during.iter().map(|h| h.released - h.acquired).max();
            let mut prev = self
                .holds
                .iter()
                .filter(|h| h.released <= w.called)
                .map(|h| h.released)
                .max()
                .unwrap_or(w.called);
            let mut longest_gap = 0;
            for h in during.iter().copied().chain([*w]) {
                longest_gap = longest_gap.max(h.acquired.saturating_sub(prev.max(w.called)));
                prev = h.released;
            }
            let mut by_process = std::collections::BTreeMap::new();
            for h in &during {
                *by_process.entry(h.owner / 1_000_000).or_insert(0) += 1;
            }
            eprintln!(
                "wait {} µs by {} from +{} µs: {} holds of others {by_process:?}, longest hold {:?} µs, longest gap {} µs",
                w.acquired - w.called,
                w.owner,
                w.called.saturating_sub(self.start_us),
                during.len(),
                longest_hold,
                longest_gap
            );
        }
        eprintln!("open waits (µs): {:?}", self.open_waits);
    }
}
