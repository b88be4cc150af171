//! RedLock: the p50 of one acquire + release pair (one task, its own lock name) over 3 and 5
//! masters, each as a ratio to a single `Lock`'s pair on one of the same servers, measured in the
//! same run (trials interleaved, best of three per run), and to the machine's floor for a
//! parallel round: N single `Lock` pairs, one per master, run at once. Then the same with one
//! master stopped (`SIGSTOP`): with the default quorum grace a round stops waiting for it shortly
//! after a quorum said yes; waiting for every vote (`with_quorum_grace(Duration::MAX)`) costs a
//! round the whole vote timeout (a tenth of the lease, at most 100 ms), shown for comparison.
//!
//! Target: a pair ≤ 1.5× a single `Lock`'s (printed, never asserted).
//! `cargo bench --bench redlock` (env `RUNS`, default 3).

mod common;

use std::time::{Duration, Instant};

use common::report::Table;
use relock::testing::RedisServer;
use relock::{Client, RedLock};

/// Pairs per trial with every master up, and with one stopped.
const PAIRS: usize = 2_000;
const STOPPED_PAIRS: usize = 20;

enum Subject {
    Lock(relock::Lock),
    /// One `Lock` pair on each of several servers, at once.
    Parallel(Vec<relock::Lock>),
    Red(RedLock),
}

impl Subject {
    async fn pair(&self) {
        match self {
            Subject::Lock(lock) => lock.lock().await.unwrap().unlock().await.unwrap(),
            Subject::Parallel(locks) => {
                futures::future::join_all(
                    locks
                        .iter()
                        .map(|lock| async { lock.lock().await.unwrap().unlock().await.unwrap() }),
                )
                .await;
            }
            Subject::Red(lock) => lock.lock().await.unwrap().unlock().await.unwrap(),
        }
    }
}

/// The p50 of `pairs` pairs in ms.
async fn p50(subject: &Subject, pairs: usize) -> f64 {
    let mut times = Vec::with_capacity(pairs);
    for _ in 0..pairs {
        let t0 = Instant::now();
        subject.pair().await;
        times.push(common::ms(t0.elapsed()));
    }
    common::percentile(&times, 50.0)
}

/// The best (lowest) p50 of three trials of each subject, trials interleaved.
fn best_of_three(rt: &tokio::runtime::Runtime, subjects: &[&Subject], pairs: usize) -> Vec<f64> {
    let mut best = vec![f64::MAX; subjects.len()];
    for _ in 0..3 {
        for (k, subject) in subjects.iter().enumerate() {
            best[k] = best[k].min(rt.block_on(p50(subject, pairs)));
        }
    }
    best
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// Resumes the stopped server when dropped, even if the bench panics.
struct Stopped(u32);

impl Drop for Stopped {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn main() {
    let runs = common::runs(3);
    let servers: Vec<RedisServer> = (0..5)
        .map(|_| RedisServer::start().expect("start redis-server"))
        .collect();
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let rt = common::runtime((cores - 1).max(1));
    let clients: Vec<Client> = servers
        .iter()
        .map(|s| rt.block_on(Client::connect(&s.url())).unwrap())
        .collect();
    let single = Subject::Lock(clients[0].lock("bench:redlock:single"));
    let three = Subject::Red(RedLock::new(&clients[..3], "bench:redlock:3"));
    let five = Subject::Red(RedLock::new(&clients, "bench:redlock:5"));
    let parallel = |n: usize| {
        Subject::Parallel(
            clients[..n]
                .iter()
                .map(|c| c.lock("bench:redlock:parallel"))
                .collect(),
        )
    };
    let (parallel_three, parallel_five) = (parallel(3), parallel(5));
    let every_vote = Duration::MAX;
    let three_all =
        Subject::Red(RedLock::new(&clients[..3], "bench:redlock:3a").with_quorum_grace(every_vote));
    let five_all =
        Subject::Red(RedLock::new(&clients, "bench:redlock:5a").with_quorum_grace(every_vote));
    for subject in [
        &single,
        &parallel_three,
        &parallel_five,
        &three,
        &five,
        &three_all,
        &five_all,
    ] {
        rt.block_on(p50(subject, 200)); // warm-up: scripts loaded
    }
    let mut table = Table::new(
        "redlock",
        format!(
            "redlock: acquire + release pair p50, one task — redis {}, medians of {runs} runs",
            common::redis_version(&servers[0])
        ),
    );
    for run in 1..=runs {
        eprintln!("redlock: run {run}/{runs}");
        let up = best_of_three(
            &rt,
            &[&single, &parallel_three, &parallel_five, &three, &five],
            PAIRS,
        );
        table.add("Lock pair p50", "ms", up[0]);
        for (k, n) in [(1, 3), (2, 5)] {
            table.add_ratio(
                &format!("{n} Lock pairs at once, one per master, p50"),
                "ms",
                up[k],
                up[k] / up[0],
                "Lock's pair",
            );
        }
        for (k, n) in [(3, 3), (4, 5)] {
            table.add_ratio(
                &format!("RedLock {n} masters pair p50"),
                "ms",
                up[k],
                up[k] / up[0],
                "Lock's pair",
            );
            table.add_ratio(
                &format!("RedLock {n} masters pair p50, against the parallel floor"),
                "ms",
                up[k],
                up[k] / up[k - 2],
                format!("{n} Lock pairs at once"),
            );
        }
        // Master 2 is in both sets; the single Lock's server (0) runs on.
        let stopped = Stopped(servers[2].pid().unwrap());
        signal(stopped.0, "-STOP");
        let down = best_of_three(
            &rt,
            &[&single, &three, &five, &three_all, &five_all],
            STOPPED_PAIRS,
        );
        drop(stopped);
        for (k, figure) in [
            (1, "1 stopped: RedLock 3 masters pair p50"),
            (2, "1 stopped: RedLock 5 masters pair p50"),
            (
                3,
                "1 stopped, every vote awaited: RedLock 3 masters pair p50",
            ),
            (
                4,
                "1 stopped, every vote awaited: RedLock 5 masters pair p50",
            ),
        ] {
            table.add_ratio(figure, "ms", down[k], down[k] / down[0], "Lock's pair");
        }
        // The stopped master's late replies and background releases drain before the next run.
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(500)).await });
    }
    for figure in [
        "RedLock 3 masters pair p50",
        "RedLock 5 masters pair p50",
        "1 stopped: RedLock 3 masters pair p50",
        "1 stopped: RedLock 5 masters pair p50",
    ] {
        let met = table.ratio(figure) <= 1.5;
        table.target(figure, "≤ 1.5× Lock's pair (same run)", met);
    }
    table.print();
}
