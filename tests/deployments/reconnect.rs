//! Waiters survive a broken subscriber connection: the hub resubscribes their channels on
//! reconnect and wakes them, so a release after the cut still wakes them promptly.

use crate::common;

use std::time::{Duration, Instant};

use common::RedisServer;

#[tokio::test]
async fn a_waiter_is_woken_after_its_subscriber_connection_was_killed() {
    let server = RedisServer::start();
    let holder = common::client(&server, Duration::from_secs(20)).await;
    let waiting = common::client(&server, Duration::from_secs(20)).await;
    let name = common::prefix("reconnect-pubsub");
    let channel = common::lock_channel(&name);

    let guard = holder.lock(&name).lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = waiting.lock(&name);
        async move {
            let guard = lock.lock().await.unwrap();
            let at = Instant::now();
            guard.unlock().await.unwrap();
            at
        }
    });
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            common::raw_numsub(&server, &channel) == 1
        })
        .await
    );

    let killed = common::resp_int(&server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]));
    assert!(killed >= 1, "killed {killed} pub/sub connections");
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            common::raw_numsub(&server, &channel) == 1
        })
        .await,
        "the waiter's channel was not resubscribed"
    );
    assert!(
        !waiter.is_finished(),
        "the waiter must still wait for the holder"
    );

    let released = Instant::now();
    guard.unlock().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was never woken")
        .unwrap();
    // The holder's lease is 20 s: only the message explains a wake-up within 5 s.
    assert!(acquired.duration_since(released) < Duration::from_secs(5));
    assert_eq!(waiting.stats().waiters, 0);
}

#[tokio::test]
async fn locks_keep_working_after_the_command_connection_was_killed() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(20)).await;
    let lock = client.lock(common::prefix("reconnect-command"));

    let guard = lock.lock().await.unwrap();
    server.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    // The first command after the cut may fail while fred reconnects; the lock must work again
    // within a few tries and the hold must still be there.
    let ok = common::eventually(Duration::from_secs(10), || async {
        lock.hold_count().await.is_ok_and(|n| n == 1)
    })
    .await;
    assert!(ok, "the hold was not visible again after a reconnect");
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}
