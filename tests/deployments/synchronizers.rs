//! The semaphores and the latch on a 3-master Cluster and through Sentinel: their keys stay in
//! one slot per name, waiters `SSUBSCRIBE` on the slot's master and are woken by the scripts'
//! `SPUBLISH` (on Redis 6: `SUBSCRIBE` and `PUBLISH`), the watchdog renews permits per slot; across a Sentinel failover a
//! parked waiter resubscribes on the new primary and is woken there, and a permit renewed by
//! the watchdog survives.

use crate::common;

use std::time::{Duration, Instant};

use common::connect;
use common::topology::{self, Cluster, Sentinels};
use common::{eventually, latch_channel, leases_key, raw_count, raw_zrange_hex, semaphore_channel};
use relock::Client;
use tokio::time::timeout;

/// A client on `url` with `watchdog` whose waiters poll only every 60 s: messages wake them.
async fn connect(url: &str, watchdog: Duration) -> Client {
    let config = connect::config(url, watchdog, Duration::from_secs(3));
    connect::connected(config.with_poll_interval(Duration::from_secs(60))).await
}

/// Everything on one master per name: a waiter for each type parked in `waiting`, woken by
/// `acting`'s release or count-down through the shard channel alone (waiters poll every 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronizers_on_every_master_wake_through_shard_channels() {
    let started = Instant::now();
    let cluster = Cluster::start(3);
    eprintln!("3-master cluster up in {:?}", started.elapsed());
    let watchdog = Duration::from_millis(900);
    let acting = connect(&cluster.url(), watchdog).await;
    let waiting = connect(&cluster.url(), watchdog).await;
    let prefix = common::prefix("cluster-sync");
    let names: Vec<(String, String, String)> = cluster
        .keys_per_master(&prefix, 3)
        .into_iter()
        .map(|(_, mut keys)| {
            (
                keys.pop().unwrap(),
                keys.pop().unwrap(),
                keys.pop().unwrap(),
            )
        })
        .collect();

    for (sem, permits, latch) in &names {
        assert!(acting
            .semaphore(sem.as_str())
            .try_set_permits(1)
            .await
            .unwrap());
        assert!(acting.semaphore(sem.as_str()).try_acquire(1).await.unwrap());
        let permit_sem = acting.permit_semaphore(permits.as_str());
        assert!(permit_sem.try_set_permits(1).await.unwrap());
        assert!(acting
            .count_down_latch(latch.as_str())
            .try_set_count(1)
            .await
            .unwrap());
    }
    // A watchdog permit on every master, held across three leases: renewed per slot.
    let mut held = Vec::new();
    for (_, permits, _) in &names {
        held.push(
            acting
                .permit_semaphore(permits.as_str())
                .acquire()
                .await
                .unwrap(),
        );
    }
    assert_eq!(acting.stats().renewing, 3);

    let mut waiters = Vec::new();
    let kept = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    for (sem, permits, latch) in &names {
        let sem = waiting.semaphore(sem.as_str());
        waiters.push(tokio::spawn(async move { sem.acquire(1).await.map(drop) }));
        // The waiter keeps its permit until the test ends.
        let permits = waiting.permit_semaphore(permits.as_str());
        let kept = kept.clone();
        waiters.push(tokio::spawn(async move {
            let permit = permits.acquire().await?;
            kept.lock().unwrap().push(permit);
            Ok(())
        }));
        let latch = waiting.count_down_latch(latch.as_str());
        waiters.push(tokio::spawn(async move { latch.wait().await }));
    }
    let parked = eventually(Duration::from_secs(10), || async {
        waiting.stats().waiters == 9
            && names.iter().all(|(sem, permits, latch)| {
                let on = |_key: &str, channel: String| cluster.subscribers(&channel) >= 1;
                on(sem, semaphore_channel(sem))
                    && on(permits, semaphore_channel(permits))
                    && on(latch, latch_channel(latch))
            })
    })
    .await;
    assert!(
        parked,
        "the waiters never shard-subscribed: {:?}",
        waiting.stats()
    );

    tokio::time::sleep(watchdog * 3).await;
    for ((_, permits, _), permit) in names.iter().zip(&held) {
        assert!(!permit.is_lost(), "{permits}: the watchdog lost the permit");
        let node = cluster.node_for_key(permits);
        let leases = raw_zrange_hex(node, &leases_key(permits));
        assert_eq!(leases.len(), 1, "{permits}");
        assert!(
            leases[0].1 > common::raw_time_ms(node),
            "{permits}: its lease ran out under the watchdog"
        );
    }
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "a waiter went early"
    );

    let released = Instant::now();
    for ((sem, _, latch), permit) in names.iter().zip(held) {
        acting.semaphore(sem.as_str()).release(1).await.unwrap();
        permit.release().await.unwrap();
        acting
            .count_down_latch(latch.as_str())
            .count_down()
            .await
            .unwrap();
    }
    for waiter in waiters {
        timeout(common::HANG, waiter)
            .await
            .expect("a waiter hung")
            .unwrap()
            .unwrap();
    }
    let woke = released.elapsed();
    assert!(woke < common::PROMPT, "woken {woke:?} after the releases");
    for (sem, permits, _) in &names {
        assert_eq!(raw_count(cluster.node_for_key(sem), sem), Some(0));
        assert_eq!(raw_count(cluster.node_for_key(permits), permits), Some(0));
    }
    for node in cluster.nodes() {
        assert_eq!(
            topology::error_count(node, "CROSSSLOT"),
            0,
            "{}",
            node.port()
        );
    }
    let stats = waiting.stats();
    assert_eq!(
        (stats.waiters, stats.in_flight, stats.holds),
        (0, 0, 3),
        "{stats:?}"
    );
    drop(kept);
    acting.shutdown().await.unwrap();
    waiting.shutdown().await.unwrap();
}

/// Through Sentinel: a permit renewed by the watchdog and a latch survive a failover; a waiter
/// parked on the old primary is woken by a release on the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synchronizers_keep_working_across_a_sentinel_failover() {
    let sentinels = Sentinels::start();
    let url = sentinels.url();
    let old = sentinels.primary_port();
    let watchdog = Duration::from_secs(2);
    let holder = connect(&url, watchdog).await;
    let waiting = connect(&url, watchdog).await;
    let prefix = common::prefix("sentinel-sync");
    let (permits_name, latch_name) = (format!("{prefix}:permits"), format!("{prefix}:latch"));
    let permits = holder.permit_semaphore(permits_name.as_str());
    assert!(permits.try_set_permits(1).await.unwrap());
    let permit = permits.acquire().await.unwrap();
    let latch = holder.count_down_latch(latch_name.as_str());
    assert!(latch.try_set_count(1).await.unwrap());
    let replicated = eventually(Duration::from_secs(5), || async {
        let replica = sentinels.replica();
        raw_zrange_hex(replica, &leases_key(&permits_name)).len() == 1
            && raw_count(replica, &latch_name) == Some(1)
    })
    .await;
    assert!(
        replicated,
        "the permit and the latch never reached the replica"
    );

    let permit_waiter = tokio::spawn({
        let sem = waiting.permit_semaphore(permits_name.as_str());
        async move { sem.acquire().await }
    });
    let latch_waiter = tokio::spawn({
        let latch = waiting.count_down_latch(latch_name.as_str());
        async move { latch.wait().await }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            waiting.stats().waiters == 2
        })
        .await,
        "the waiters never parked"
    );

    let new = sentinels.failover();
    sentinels.demote_old_primary();
    assert_ne!(new, old);
    eprintln!("failed over from {old} to {new}");
    // The watchdog keeps the permit on the new primary past a few leases.
    tokio::time::sleep(watchdog * 2).await;
    assert!(!permit.is_lost(), "the permit was lost across the failover");
    let leases = raw_zrange_hex(sentinels.server(new), &leases_key(&permits_name));
    assert_eq!(leases.len(), 1, "the permit is not on the new primary");
    assert!(!permit_waiter.is_finished() && !latch_waiter.is_finished());

    permit.release().await.unwrap();
    latch.count_down().await.unwrap();
    let permit = timeout(common::HANG, permit_waiter)
        .await
        .expect("the permit waiter hung across the failover")
        .unwrap()
        .unwrap();
    timeout(common::HANG, latch_waiter)
        .await
        .expect("the latch waiter hung across the failover")
        .unwrap()
        .unwrap();
    assert_eq!(raw_count(sentinels.server(new), &permits_name), Some(0));
    permit.release().await.unwrap();
    assert_eq!(raw_count(sentinels.server(new), &permits_name), Some(1));
    holder.shutdown().await.unwrap();
    waiting.shutdown().await.unwrap();
}
