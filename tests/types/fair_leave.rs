//! A fair lock's head that gives up wakes the waiter it leaves at the head, whether the lock is
//! held or free: the new head learns the lease that is left rather than sleeping until its
//! renewal (found by relock-model's fair lock model: `docs/model.md`).

use crate::common;

use std::time::Duration;

use common::RedisServer;
use tokio::time::Instant;

use super::fair::{fair_client, until_queued};

#[tokio::test]
async fn a_head_promoted_by_a_leave_takes_the_lock_when_its_lease_ends_not_at_its_renewal() {
    // A waiter renews its place every third of the waiter timeout: 10 s here.
    let waiter_timeout = Duration::from_secs(30);
    let renewal = waiter_timeout / 3;
    let server = RedisServer::start();
    let name = common::prefix("fair-leave-head");
    let first = fair_client(&server, waiter_timeout).await;
    let second = fair_client(&server, waiter_timeout).await;
    // A holder that is gone: its lease ends on Redis in 1.5 s, publishing nothing.
    server.cmd(&["HSET", &name, "0a0a0a0a-0000-4000-8000-000000000000:1", "1"]);
    server.cmd(&["PEXPIRE", &name, "1500"]);

    let head = tokio::spawn({
        let (client, name) = (first.clone(), name.clone());
        async move { client.fair_lock(&name).lock().await }
    });
    until_queued(&server, &name, 1).await;
    // Behind the head, the second waiter is told to try again when the head could be dead:
    // later than its renewal, so it sleeps until its renewal unless something wakes it.
    let queued_at = Instant::now();
    let next = tokio::spawn({
        let (client, name) = (second.clone(), name.clone());
        async move {
            let guard = client.fair_lock(&name).lock().await.unwrap();
            (Instant::now(), guard)
        }
    });
    until_queued(&server, &name, 2).await;
    // The head gives up while the lock is still held: its leave runs in the background.
    head.abort();
    until_queued(&server, &name, 1).await;

    let (taken_at, guard) = next.await.unwrap();
    assert!(
        taken_at < queued_at + renewal,
        "the new head took the lock {:?} after it queued, at its renewal ({renewal:?}), not when \
         the lease ended (1.5 s after it was planted)",
        taken_at - queued_at
    );
    guard.unlock().await.unwrap();
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}
