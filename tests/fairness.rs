//! In-process fairness: waiters of one client are served in arrival order, and a task that
//! releases and asks again queues behind them instead of re-taking the lock at once.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order() {
    let server = common::RedisServer::start();
    let client = common::client(&server, Duration::from_secs(20)).await;
    let name = common::prefix("fair-order");
    let holder = client.lock(&name).lock().await.unwrap();

    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for n in 0..8 {
        let lock = client.lock(&name);
        let served = served.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            served.lock().unwrap().push(n);
            guard.unlock().await.unwrap();
        }));
        // Each waiter is registered before the next one starts: that is the arrival order.
        assert!(
            common::eventually(Duration::from_secs(5), || async {
                client.stats().waiters == n + 1
            })
            .await
        );
    }
    holder.unlock().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("a waiter was never served")
            .unwrap();
    }
    assert_eq!(*served.lock().unwrap(), (0..8).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_releasing_task_does_not_barge_past_waiters() {
    let server = common::RedisServer::start();
    let client = common::client(&server, Duration::from_secs(20)).await;
    let name = common::prefix("fair-barging");
    let rounds = 20;
    let order = Arc::new(Mutex::new(Vec::new()));

    // Four tasks loop lock → record → unlock → lock again. Without queueing, the task that just
    // released would usually win its next lock() before a woken waiter's attempt arrives.
    let mut tasks = Vec::new();
    for n in 0..4 {
        let lock = client.lock(&name);
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = lock.lock().await.unwrap();
                order.lock().unwrap().push(n);
                tokio::time::sleep(Duration::from_millis(1)).await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("a task starved")
            .unwrap();
    }
    let order = order.lock().unwrap();
    let retakes = order.windows(2).filter(|w| w[0] == w[1]).count();
    // Once all four queue, each hand-off goes to the longest waiter: a task follows itself only
    // while the others have not queued yet (the first rounds) or have finished (the last ones).
    assert!(
        retakes <= 3 * 4,
        "{retakes} of {} hand-offs went back to the releasing task: {order:?}",
        order.len() - 1
    );
    assert_eq!(client.stats().waiters, 0);
}
