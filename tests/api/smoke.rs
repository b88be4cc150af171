//! A first end-to-end check: take, re-enter, wait and release a lock on a real server.

use crate::common;

use std::time::Duration;

#[tokio::test]
async fn smoke() {
    let (_server, client, name) = common::setup("smoke", Duration::from_secs(3)).await;
    let lock = client.lock(name);
    let g1 = lock.lock().await.unwrap();
    let g2 = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    let other = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_lock().await.unwrap().is_none() }
    });
    assert!(other.await.unwrap());
    g2.unlock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move {
            let t = std::time::Instant::now();
            let g = lock.lock().await.unwrap();
            let waited = t.elapsed();
            g.unlock().await.unwrap();
            waited
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    g1.unlock().await.unwrap();
    let waited = waiter.await.unwrap();
    println!("waited {waited:?}");
    assert!(!lock.is_locked().await.unwrap());
    println!("{:?}", client.stats());
}
