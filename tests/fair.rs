//! `FairLock`: strict FIFO across clients and processes, dead waiters skipped at their deadline,
//! waiters that give up leave the queue, and Redisson's fair-lock bugs kept out.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{fair_queue_key, fair_timeout_key, raw_lrange, RedisServer};
use relock::Owner;

/// A client with a short fair waiter timeout, as tests want.
async fn fair_client(server: &RedisServer, waiter_timeout: Duration) -> relock::Client {
    let config = relock::Config::from_url(&server.url())
        .unwrap()
        .with_watchdog_timeout(Duration::from_secs(5))
        .with_command_timeout(Duration::from_secs(2))
        .with_fair_waiter_timeout(waiter_timeout);
    relock::Client::new(config).await.expect("connect")
}

/// Waiters on several clients queue while the lock is held; they get it in the order the queue
/// on Redis shows they joined it.
#[tokio::test]
async fn waiters_of_several_clients_get_the_lock_in_queue_order() {
    let server = RedisServer::start();
    let name = common::prefix("fair-order");
    let clients = [
        fair_client(&server, Duration::from_secs(10)).await,
        fair_client(&server, Duration::from_secs(10)).await,
        fair_client(&server, Duration::from_secs(10)).await,
    ];
    let holder = clients[0].fair_lock(&name).lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..12 {
        let client = clients[i % 3].clone();
        let (lock_name, order) = (name.clone(), order.clone());
        let owner = Owner::new();
        let field = format!("{}:{}", client.id(), owner.id());
        tasks.push(tokio::spawn(async move {
            let guard = client
                .fair_lock(&lock_name)
                .owned_by(owner)
                .lock()
                .await
                .unwrap();
            order.lock().unwrap().push(field);
            tokio::time::sleep(Duration::from_millis(2)).await;
            guard.unlock().await.unwrap();
        }));
        // Let each join the queue before the next.
        let queue = fair_queue_key(&name);
        assert!(
            common::eventually(Duration::from_secs(5), || {
                let len = raw_lrange(&server, &queue).len();
                async move { len == i + 1 }
            })
            .await
        );
    }
    let queued = raw_lrange(&server, &fair_queue_key(&name));
    holder.unlock().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), queued);
    assert!(raw_lrange(&server, &fair_queue_key(&name)).is_empty());
    assert!(!common::raw_exists(&server, &fair_timeout_key(&name)));
}
