//! relock's `FairLock` and Redisson's `RFairLock` in one queue, each with its defaults: the
//! Redisson side is a peer running Redisson's fair lock scripts with its deadline arithmetic
//! (`tests/common/redisson_fair.rs`) and its default wait, 300 s. Waiters of both kinds must be
//! served in the order they came, without anyone losing its place; dead waiters still go, a
//! relock one within relock's fair waiter timeout, a Redisson one by Redisson's rules.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::redisson_fair::{RedissonFair, REDISSON_FAIR_WAIT_MS};
use common::RedisServer;

/// A Java client's thread `i`.
fn java_field(i: usize) -> String {
    format!("5b6c2a1e-9d3f-4e7a-8c1b-2f0e4d6a8b9c:{i}")
}

/// A server of the test's own (shared with spawned Redisson waiters) and its fair lock named
/// after `test`, taken by a relock client with `watchdog`: the server, the name, the client and
/// the hold.
async fn held(
    test: &str,
    watchdog: Duration,
) -> (Arc<RedisServer>, String, relock::Client, relock::LockGuard) {
    let server = Arc::new(RedisServer::start());
    let name = common::prefix(test);
    let client = common::client(&server, watchdog).await;
    let hold = client.fair_lock(name.clone()).lock().await.unwrap();
    (server, name, client, hold)
}

fn queue_len(server: &RedisServer, name: &str) -> usize {
    common::raw_lrange(server, &common::fair_queue_key(name)).len()
}

/// Far below relock's renewal (10 s) and fair waiter timeout (30 s): a turn that took longer
/// was a waiter that lost its place, or one that slept on a stale hint.
const TURN_BOUND: Duration = Duration::from_secs(3);

#[tokio::test]
async fn a_queue_shared_with_redisson_at_its_default_wait_is_served_in_arrival_order() {
    const WAITERS: usize = 8;
    let (server, name, _holder_client, holder) =
        held("fair-mixed-default", Duration::from_secs(30)).await;

    let served: Arc<Mutex<Vec<(usize, Instant)>>> = Arc::default();
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let served = served.clone();
        if i % 2 == 0 {
            let client = common::client(&server, Duration::from_secs(30)).await;
            let lock = client.fair_lock(name.clone());
            clients.push(client);
            tasks.push(tokio::spawn(async move {
                let guard = lock.lock().await.unwrap();
                served.lock().unwrap().push((i, Instant::now()));
                tokio::time::sleep(Duration::from_millis(50)).await;
                guard.unlock().await.unwrap();
            }));
        } else {
            let java =
                RedissonFair::new(&server, &name, &java_field(i), REDISSON_FAIR_WAIT_MS).await;
            let server = server.clone();
            tasks.push(tokio::spawn(async move {
                java.lock(&server).await;
                served.lock().unwrap().push((i, Instant::now()));
                tokio::time::sleep(Duration::from_millis(50)).await;
                java.unlock().await;
            }));
        }
        // Each arrives once the one before it has queued.
        assert!(
            common::eventually(Duration::from_secs(5), || async {
                queue_len(&server, &name) == i + 1
            })
            .await,
            "waiter {i} never queued"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let released = Instant::now();
    holder.unlock().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("a waiter hung")
            .unwrap();
    }
    let served = served.lock().unwrap().clone();
    let order: Vec<usize> = served.iter().map(|(i, _)| *i).collect();
    let mut last = released;
    let turns: Vec<Duration> = served
        .iter()
        .map(|(_, at)| {
            let turn = at.saturating_duration_since(last);
            last = *at;
            turn
        })
        .collect();
    eprintln!("served {order:?}, turns {turns:?}");
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "served out of order"
    );
    for (k, turn) in turns.iter().enumerate() {
        assert!(*turn < TURN_BOUND, "turn {k} waited {turn:?}");
    }
    assert_eq!(queue_len(&server, &name), 0);
    assert!(!common::raw_exists(
        &server,
        &common::fair_timeout_key(&name)
    ));
    assert!(!common::raw_exists(&server, &common::fair_alive_key(&name)));
}

#[tokio::test]
async fn a_dead_relock_waiter_among_redisson_waiters_goes_within_relocks_waiter_timeout() {
    const TIMEOUT: Duration = Duration::from_secs(2);
    let server = Arc::new(RedisServer::start());
    let name = common::prefix("fair-mixed-dead-relock");
    let config = |server: &RedisServer| {
        common::config(&server.url())
            .with_fair_waiter_timeout(TIMEOUT)
            .with_command_timeout(Duration::from_secs(2))
    };

    // Java 1 holds; relock's D queues and stops answering; relock's R and Java 2 queue behind.
    let java_1 = RedissonFair::new(&server, &name, &java_field(1), REDISSON_FAIR_WAIT_MS).await;
    assert_eq!(java_1.attempt().await, None);
    let dead_client = relock::Client::new(config(&server)).await.unwrap();
    let dead_lock = dead_client.fair_lock(name.clone());
    let mut dead = Box::pin(dead_lock.lock());
    assert!(tokio::time::timeout(Duration::from_millis(300), &mut dead)
        .await
        .is_err());
    std::mem::forget(dead);
    assert_eq!(queue_len(&server, &name), 1);

    let live_client = relock::Client::new(config(&server)).await.unwrap();
    let live = live_client.fair_lock(name.clone());
    let waiter = tokio::spawn(async move {
        let guard = live.lock().await.unwrap();
        (Instant::now(), guard)
    });
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            queue_len(&server, &name) == 2
        })
        .await
    );
    let java_2 = RedissonFair::new(&server, &name, &java_field(2), REDISSON_FAIR_WAIT_MS).await;
    assert!(java_2.attempt().await.is_some());
    assert_eq!(queue_len(&server, &name), 3);

    let released = Instant::now();
    java_1.unlock().await;
    let (acquired, guard) = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("R hung behind the dead waiter")
        .unwrap();
    let waited = acquired - released;
    eprintln!("R got the lock {waited:?} after Java 1's release");
    assert!(
        waited < TIMEOUT + TURN_BOUND,
        "R waited {waited:?} behind a dead relock waiter"
    );
    // Java 2 is next, its place kept.
    assert_eq!(
        common::raw_lrange(&server, &common::fair_queue_key(&name)),
        vec![java_field(2)]
    );
    guard.unlock().await.unwrap();
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            java_2.attempt().await.is_none()
        })
        .await,
        "Java 2 never got its turn"
    );
}

#[tokio::test]
async fn a_dead_redisson_waiter_goes_when_its_redisson_deadline_passes() {
    // A `tryLock(1.5 s)` thread queues with wait 1.5 s, then dies.
    const JAVA_WAIT_MS: i64 = 1_500;
    let (server, name, _holder_client, holder) =
        held("fair-mixed-dead-java", Duration::from_secs(2)).await;

    let java = RedissonFair::new(&server, &name, &java_field(1), JAVA_WAIT_MS).await;
    assert!(java.attempt().await.is_some());
    let deadline =
        common::raw_zscore(&server, &common::fair_timeout_key(&name), &java.field).expect("queued");

    let client = common::client(&server, Duration::from_secs(2)).await;
    let lock = client.fair_lock(name.clone());
    let waiter = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        (common::redisson_fair::java_now(), guard)
    });
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            queue_len(&server, &name) == 2
        })
        .await
    );
    holder.unlock().await.unwrap();
    let (acquired, guard) = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the relock waiter hung")
        .unwrap();
    eprintln!(
        "acquired {} ms after the dead waiter's deadline",
        acquired - deadline
    );
    assert!(
        acquired >= deadline - 50,
        "jumped ahead of a Redisson waiter still within its deadline"
    );
    assert!(
        acquired < deadline + TURN_BOUND.as_millis() as i64,
        "waited {} ms past the dead waiter's deadline",
        acquired - deadline
    );
    assert_eq!(queue_len(&server, &name), 0);
    guard.unlock().await.unwrap();
}
