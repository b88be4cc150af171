//! What a waiting `lock()` costs in memory: every parked waiter is one such future, so 10,000
//! waiters cost 10,000 of them. Script calls and releases inside it are boxed to keep it small.

use crate::common;

use std::time::Duration;

/// The most a `lock()` future may take. It took 1,672 bytes when this test was written, and
/// 2,728 before a release inside it was boxed.
const MOST: usize = 2048;

fn is_send<T: Send>(_: &T) {}

#[tokio::test]
async fn a_lock_future_stays_small_and_is_send() {
    let server = common::RedisServer::start();
    let client = common::client(&server, Duration::from_secs(5)).await;
    let lock = client.lock(common::prefix("footprint"));
    for (what, size) in [
        ("lock()", std::mem::size_of_val(&lock.lock())),
        ("try_lock()", std::mem::size_of_val(&lock.try_lock())),
        (
            "try_lock_for()",
            std::mem::size_of_val(&lock.try_lock_for(Duration::from_secs(1), None)),
        ),
    ] {
        eprintln!("{what}: {size} bytes");
        assert!(size <= MOST, "a {what} future takes {size} bytes");
    }
    let future = lock.lock();
    is_send(&future);
    future.await.unwrap().unlock().await.unwrap();
}
