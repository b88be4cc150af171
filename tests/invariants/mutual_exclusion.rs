//! Mutual exclusion under contention, with the protected data on Redis: many tasks across two
//! clients update a counter kept in Redis (read and written through the holders' own
//! connections) under one lock; the total must be exact and no two critical sections may
//! overlap. (The family invariant in `family.rs` checks the same with a register in memory, on
//! every lock type.)

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::interfaces::KeysInterface;

const TASKS: usize = 16;
const ROUNDS: usize = 5;

/// Checks that no two (enter, exit) intervals overlap.
fn assert_disjoint(mut sections: Vec<(Instant, Instant)>) {
    sections.sort_by_key(|&(enter, _)| enter);
    for pair in sections.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(a.0 <= a.1, "a section exits before it enters");
        assert!(
            a.1 <= b.0,
            "critical sections overlap: one exits {:?} after the next entered",
            a.1 - b.0
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_counter_is_exact_and_sections_never_overlap() {
    let server = common::RedisServer::start();
    let clients = [
        common::client(&server, Duration::from_secs(3)).await,
        common::client(&server, Duration::from_secs(3)).await,
    ];
    let name = common::prefix("mutex-redis");
    let counter = format!("{name}:counter");
    let sections = Arc::new(Mutex::new(Vec::new()));

    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let client = clients[i % 2].clone();
        let (name, counter, sections) = (name.clone(), counter.clone(), sections.clone());
        tasks.push(tokio::spawn(async move {
            let lock = client.lock(name);
            for _ in 0..ROUNDS {
                let guard = lock.lock().await.unwrap();
                let enter = Instant::now();
                let value: Option<u64> = client.redis().get(&counter).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _: () = client
                    .redis()
                    .set(&counter, value.unwrap_or(0) + 1, None, None, false)
                    .await
                    .unwrap();
                let exit = Instant::now();
                sections.lock().unwrap().push((enter, exit));
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        common::within(Duration::from_secs(120), task, "the workers finish").await;
    }

    let total: u64 = clients[0].redis().get(&counter).await.unwrap();
    assert_eq!(total, (TASKS * ROUNDS) as u64);
    let sections = std::mem::take(&mut *sections.lock().unwrap());
    assert_eq!(sections.len(), TASKS * ROUNDS);
    assert_disjoint(sections);

    assert!(!common::raw_exists(&server, &name), "the lock is left free");
    for client in &clients {
        let stats = client.stats();
        assert_eq!((stats.holds, stats.waiters), (0, 0), "{stats:?}");
    }
}
