//! Combining (`Config::with_combining`): the script calls of tasks that overlap on a client's
//! connection go out together, each answered as it would be alone; off, each goes out alone.

use crate::common;

use std::time::Duration;

use common::{raw_command_calls, RedisServer};

/// `tasks` tasks each take and release a lock of their own (and a semaphore's permit) `rounds`
/// times on `client`.
async fn overlapping_pairs(client: &relock::Client, prefix: &str, tasks: usize, rounds: usize) {
    let runs: Vec<_> = (0..tasks)
        .map(|t| {
            let lock = client.lock(format!("{prefix}:lock:{t}"));
            let sem = client.semaphore(format!("{prefix}:sem:{t}"));
            tokio::spawn(async move {
                assert!(sem.try_set_permits(1).await.unwrap());
                for _ in 0..rounds {
                    let guard = lock.lock().await.unwrap();
                    assert!(sem.try_acquire(1).await.unwrap(), "the permit is free");
                    assert!(!sem.try_acquire(1).await.unwrap(), "one permit only");
                    sem.release(1).await.unwrap();
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    common::all_within(runs, common::HANG, "a task hung").await;
}

/// 32 tasks each lock, take a permit twice (once refused), give it back and unlock, 20 times:
/// every call is answered as alone (the locks exclude, the permit is one), and with combining
/// the server runs fewer `EVALSHA`s than there were calls; without it, one per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_calls_go_out_together_and_alone_when_it_is_off() {
    const TASKS: usize = 32;
    const ROUNDS: usize = 20;
    // Per round: lock, two permit takes, a release and an unlock; per task: setting the permits.
    const CALLS: u64 = (TASKS * (ROUNDS * 5 + 1)) as u64;
    for combining in [true, false] {
        let server = RedisServer::start();
        let config = relock::Config::from_url(&server.url())
            .unwrap()
            .with_watchdog_timeout(Duration::from_secs(30))
            .with_combining(combining);
        let client = relock::Client::new(config).await.unwrap();
        // Every script loaded first, so that no NOSCRIPT is counted below.
        overlapping_pairs(&client, "warm", 1, 1).await;
        let before = raw_command_calls(&server, "evalsha");
        let stats_before = client.stats();
        overlapping_pairs(&client, "run", TASKS, ROUNDS).await;
        let sent = raw_command_calls(&server, "evalsha") - before;
        let stats = client.stats();
        let sizes = stats.batch_sizes;
        let sends: Vec<u64> = (0..8)
            .map(|k| sizes[k] - stats_before.batch_sizes[k])
            .collect();
        // The dispatcher's first batch meets NOSCRIPT (the warm-up sent none): sent again.
        let reloads = stats.noscript_reloads - stats_before.noscript_reloads;
        eprintln!(
            "combining {combining}: {CALLS} calls in {sent} EVALSHAs, sends by size {sends:?}"
        );
        if combining {
            assert!(sent < CALLS, "{CALLS} calls in {sent} EVALSHAs");
            // Every EVALSHA is a send the client counted, by how many calls it carried, or
            // one sent again after a NOSCRIPT.
            assert_eq!(sends.iter().sum::<u64>() + reloads, sent, "{sends:?}");
            assert!(
                sends[1..].iter().sum::<u64>() > 0,
                "no send carried two calls: {sends:?}"
            );
        } else {
            assert_eq!(sent, CALLS, "each call alone");
            assert_eq!(sizes, [0; 8], "no sends counted with combining off");
        }
        for t in 0..TASKS {
            assert!(!common::raw_exists(&server, &format!("run:lock:{t}")));
            assert_eq!(common::raw_count(&server, &format!("run:sem:{t}")), Some(1));
        }
        client.shutdown().await.unwrap();
    }
}
