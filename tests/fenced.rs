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

/// Takes the fenced lock `ROUNDS` times in each of `TASKS` tasks (each its own owner), and,
/// holding it, appends its token to the list `<name>:tokens`. Run as a child process by
/// `tokens_are_unique_and_in_order_across_processes`; without its settings it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by the cross-process tests"]
async fn child_fenced_holders() {
    use fred::interfaces::ListInterface;
    let (Ok(url), Ok(name), Ok(tasks), Ok(rounds)) = (
        std::env::var("REDIS_URL"),
        std::env::var("LOCK_NAME"),
        std::env::var("TASKS"),
        std::env::var("ROUNDS"),
    ) else {
        return;
    };
    let config = relock::Config::from_url(&url)
        .unwrap()
        .with_watchdog_timeout(Duration::from_secs(5))
        .with_command_timeout(Duration::from_secs(2));
    let client = relock::Client::new(config).await.expect("connect");
    let rounds: usize = rounds.parse().unwrap();
    let mut all = Vec::new();
    for _ in 0..tasks.parse::<usize>().unwrap() {
        let (client, name) = (client.clone(), name.clone());
        all.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = client.fenced_lock(&name).lock().await.unwrap();
                let _: i64 = client
                    .redis()
                    .rpush(format!("{name}:tokens"), guard.token())
                    .await
                    .unwrap();
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in all {
        task.await.unwrap();
    }
    client.shutdown().await.unwrap();
}

/// Tokens of holders in 3 processes × 2 tasks, logged by each holder while it holds the lock:
/// the log is 1, 2, 3, … with no gap and no repeat, so each new owner got the next token and
/// the order of tokens is the order of tenures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_unique_and_in_order_across_processes() {
    let server = RedisServer::start();
    let name = common::prefix("fenced-procs");
    let rounds = 15;
    let mut children: Vec<_> = (0..3)
        .map(|_| {
            common::spawn_child_test(
                "child_fenced_holders",
                &[
                    ("REDIS_URL", server.url()),
                    ("LOCK_NAME", name.clone()),
                    ("TASKS", "2".to_owned()),
                    ("ROUNDS", rounds.to_string()),
                ],
            )
        })
        .collect();
    for child in &mut children {
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .expect("a child hung")
            .unwrap();
        assert!(status.success(), "a child failed: {status}");
    }
    let log: Vec<u64> = common::raw_lrange(&server, &format!("{name}:tokens"))
        .iter()
        .map(|t| t.parse().unwrap())
        .collect();
    let expected: Vec<u64> = (1..=3 * 2 * rounds as u64).collect();
    assert_eq!(log, expected, "tokens out of order, repeated or skipped");
    assert_eq!(raw_token(&server, &name), expected.len() as i64);
}

/// Takes `count` tokens one after another, each by a new owner; returns the last.
async fn take_tokens(client: &relock::Client, name: &str, count: usize) -> u64 {
    let mut last = 0;
    for _ in 0..count {
        let guard = client
            .fenced_lock(name)
            .owned_by(Owner::new())
            .lock()
            .await
            .unwrap();
        assert!(guard.token() > last);
        last = guard.token();
        guard.unlock().await.unwrap();
    }
    last
}

/// What the docs promise of persistence: with the AOF synced on every write, a crashed
/// (`SIGKILL`) and restarted server goes on counting; without persistence it starts again at 1
/// and hands out tokens it gave before (the documented hazard).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_stay_monotonic_across_a_crash_only_with_the_aof_synced() {
    let name = common::prefix("fenced-restart");
    let mut durable = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut volatile = RedisServer::start();
    for (server, kept) in [(&mut durable, true), (&mut volatile, false)] {
        let client = common::client(server, WATCHDOG).await;
        let before = take_tokens(&client, &name, 5).await;
        assert_eq!(before, 5);
        client.shutdown_keeping_locks().await.ok();
        server.kill();
        server.restart();
        let client = common::client(server, WATCHDOG).await;
        let after = take_tokens(&client, &name, 1).await;
        if kept {
            assert_eq!(after, before + 1, "the AOF lost the counter");
        } else {
            assert_eq!(
                after, 1,
                "a server without persistence starts counting again"
            );
        }
        client.shutdown().await.unwrap();
    }
}
