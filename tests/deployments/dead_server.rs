//! A server that goes away: every `lock()` fails within a bound set by the command timeout,
//! whether it was waiting for another holder or just starting, instead of sleeping out a lease.

use crate::common;

use std::time::{Duration, Instant};

use common::RedisServer;
use relock::{Client, LockGuard};

const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// A client of `server` with a 30 s watchdog and the [`COMMAND_TIMEOUT`].
async fn client(server: &RedisServer) -> Client {
    let config = common::connect::config(&server.url(), Duration::from_secs(30), COMMAND_TIMEOUT);
    common::connect::connected(config).await
}

/// What the waiting tests start with: a server, a holder with a 30 s hold of a lock, and a
/// `lock()` of it in another client, spawned and subscribed.
struct Parked {
    server: RedisServer,
    _holder: Client,
    waiting: Client,
    held: LockGuard,
    waiter: tokio::task::JoinHandle<relock::Result<()>>,
}

impl Parked {
    /// Starts it all, the lock named for `test`.
    async fn start(test: &str) -> Parked {
        let server = RedisServer::start();
        let holder = client(&server).await;
        let waiting = client(&server).await;
        let name = common::prefix(test);
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
        Parked {
            server,
            _holder: holder,
            waiting,
            held,
            waiter,
        }
    }
}

/// What `waiter` ended with (it may take 60 s) and how long after `since` it ended, printed
/// with `what` happened then.
async fn ended(
    waiter: tokio::task::JoinHandle<relock::Result<()>>,
    since: Instant,
    what: &str,
) -> (relock::Result<()>, Duration) {
    let outcome = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("the waiter hung")
        .unwrap();
    let took = since.elapsed();
    eprintln!("waiting lock() ended {took:?} after {what}: {outcome:?}");
    (outcome, took)
}

#[tokio::test]
async fn a_waiting_lock_fails_soon_after_the_server_dies() {
    let mut parked = Parked::start("dead-waiting").await;
    parked.server.kill();
    let (outcome, took) = ended(parked.waiter, Instant::now(), "the server died").await;
    let error = outcome.expect_err("the server is gone: lock() cannot succeed");
    assert!(error.is_redis(), "{error:?}");
    // The holder's lease has 30 s to run: only noticing the dead connection explains this.
    assert!(
        took < 5 * COMMAND_TIMEOUT,
        "the waiter took {took:?} to notice the server was gone"
    );
    assert_eq!(parked.waiting.stats().waiters, 0);
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
    let mut parked = Parked::start("dead-back").await;
    parked.server.restart();
    // The restarted server is empty: the holder's lock is gone, so the waiter takes it (or
    // fails with a Redis error if its attempt met the dead connection) without waiting the lease.
    let (outcome, took) = ended(parked.waiter, Instant::now(), "the restart").await;
    if let Err(error) = &outcome {
        assert!(error.is_redis(), "{error:?}");
    }
    assert!(took < 5 * COMMAND_TIMEOUT, "took {took:?}");
    drop(parked.held);
}
