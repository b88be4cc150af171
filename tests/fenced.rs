//! `FencedLock`: the plain lock whose new owners take a growing token. Checked against the
//! counter on Redis (`redisson_lock_token:{<name>}`).

mod common;

use std::time::Duration;

use common::RedisServer;
use relock::Owner;

const WATCHDOG: Duration = Duration::from_secs(5);

fn token_key(name: &str) -> String {
    format!("redisson_lock_token:{{{name}}}")
}

fn raw_token(server: &RedisServer, name: &str) -> i64 {
    match common::resp(&server.cmd(&["GET", &token_key(name)])) {
        common::Resp::Bulk(Some(value)) => value.parse().unwrap(),
        other => panic!("no token counter: {other:?}"),
    }
}

#[tokio::test]
async fn tokens_grow_with_each_new_owner_and_a_reentry_keeps_its_own() {
    let server = RedisServer::start();
    let name = common::prefix("fenced-tokens");
    let (a, b) = (
        common::client(&server, WATCHDOG).await,
        common::client(&server, WATCHDOG).await,
    );
    assert_eq!(a.fenced_lock(&name).token().await.unwrap(), 0);
    let first = a.fenced_lock(&name).lock().await.unwrap();
    assert_eq!(first.token(), 1);
    let again = a.fenced_lock(&name).lock().await.unwrap();
    assert_eq!(again.token(), 1, "a re-entry keeps the owner's token");
    assert_eq!(raw_token(&server, &name), 1);
    assert!(b.fenced_lock(&name).try_lock().await.unwrap().is_none());
    // A plain Lock of the same name is excluded too: the same hash.
    assert!(b.lock(&name).try_lock().await.unwrap().is_none());
    again.unlock().await.unwrap();
    first.unlock().await.unwrap();
    let mut last = 1;
    for round in 0..5 {
        let client = if round % 2 == 0 { &b } else { &a };
        let guard = client
            .fenced_lock(&name)
            .owned_by(Owner::new())
            .lock()
            .await
            .unwrap();
        assert!(guard.token() > last, "token {} after {last}", guard.token());
        last = guard.token();
        assert_eq!(raw_token(&server, &name), last as i64);
        assert_eq!(a.fenced_lock(&name).token().await.unwrap(), last);
        guard.unlock().await.unwrap();
    }
}
