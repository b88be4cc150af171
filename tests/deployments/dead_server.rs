//! A server that goes away: every `lock()` fails within a bound set by the command timeout,
//! whether it was waiting for another holder or just starting, instead of sleeping out a lease.

use crate::common;

use std::time::{Duration, Instant};

use common::RedisServer;
use relock::{Client, Config};

const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

async fn client(server: &RedisServer) -> Client {
    let config = Config::from_url(&server.url())
        .unwrap()
        .with_watchdog_timeout(Duration::from_secs(30))
        .with_command_timeout(COMMAND_TIMEOUT);
    Client::new(config).await.expect("connect")
}

#[tokio::test]
async fn a_waiting_lock_fails_soon_after_the_server_dies() {
    let mut server = RedisServer::start();
    let holder = client(&server).await;
    let waiting = client(&server).await;
    let name = common::prefix("dead-waiting");
    let _held = holder
        .lock(&name)
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let lock = waiting.lock(&name);
        async move { lock.lock().await.map(|_| ()) }
    });
    assert!(common::until_subscribed(&server, &name, 1).await);

    server.kill();
    let killed = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("the waiter hung")
        .unwrap();
    let took = killed.elapsed();
    eprintln!("waiting lock() ended {took:?} after the server died: {outcome:?}");
    let error = outcome.expect_err("the server is gone: lock() cannot succeed");
    assert!(error.is_redis(), "{error:?}");
    // The holder's lease has 30 s to run: only noticing the dead connection explains this.
    assert!(
        took < 5 * COMMAND_TIMEOUT,
        "the waiter took {took:?} to notice the server was gone"
    );
    assert_eq!(waiting.stats().waiters, 0);
}

#[tokio::test]
async fn a_fresh_lock_against_a_dead_server_fails_within_the_command_timeout() {
    let mut server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.lock(common::prefix("dead-fresh"));
    // The connection is known to be up: the first command after the kill meets it broken.
    assert!(!lock.is_locked().await.unwrap());

    server.kill();
    for round in 0..2 {
        let started = Instant::now();
        let outcome = tokio::time::timeout(Duration::from_secs(60), lock.lock())
            .await
            .expect("lock() hung against a dead server");
        let took = started.elapsed();
        eprintln!("fresh lock() #{round} against a dead server failed after {took:?}");
        let error = outcome.map(|_| ()).expect_err("the server is gone");
        assert!(error.is_redis(), "{error:?}");
        assert!(
            took < COMMAND_TIMEOUT * 3 / 2 + Duration::from_secs(1),
            "lock() #{round} took {took:?} to fail with a {COMMAND_TIMEOUT:?} command timeout"
        );
    }
}

#[tokio::test]
async fn a_waiting_lock_survives_a_server_that_comes_back() {
    let mut server = RedisServer::start();
    let holder = client(&server).await;
    let waiting = client(&server).await;
    let name = common::prefix("dead-back");
    let held = holder
        .lock(&name)
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let lock = waiting.lock(&name);
        async move { lock.lock().await.map(drop) }
    });
    assert!(common::until_subscribed(&server, &name, 1).await);

    server.restart();
    // The restarted server is empty: the holder's lock is gone, so the waiter takes it (or
    // fails with a Redis error if its attempt met the dead connection) without waiting the lease.
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("the waiter hung")
        .unwrap();
    let took = started.elapsed();
    eprintln!("waiting lock() ended {took:?} after the restart: {outcome:?}");
    if let Err(error) = &outcome {
        assert!(error.is_redis(), "{error:?}");
    }
    assert!(took < 5 * COMMAND_TIMEOUT, "took {took:?}");
    drop(held);
}
