//! `FencedLock`: the plain lock whose new owners take a growing token. Checked against the
//! counter on Redis (`redisson_lock_token:{<name>}`).

use crate::common;
use common::child;

use std::time::Duration;

use common::{faults, RedisServer};
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
    let (server, a, b, name) = common::setup_two("fenced-tokens", WATCHDOG).await;
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
    let Some(env) = child::env() else { return };
    let client = common::client_at(&env.text("REDIS_URL"), Duration::from_secs(5)).await;
    let name = env.text("LOCK_NAME");
    let rounds: usize = env.number("ROUNDS");
    let mut all = Vec::new();
    for _ in 0..env.number::<usize>("TASKS") {
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
    let children: Vec<_> = (0..3)
        .map(|_| {
            child::Child::spawn(
                concat!(module_path!(), "::child_fenced_holders"),
                &[
                    ("REDIS_URL", server.url()),
                    ("LOCK_NAME", name.clone()),
                    ("TASKS", "2".to_owned()),
                    ("ROUNDS", rounds.to_string()),
                ],
            )
        })
        .collect();
    for child in children {
        child.finish(Duration::from_secs(60)).await;
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

/// A holder in a process of its own, for the pause tests: `ROUNDS` times, takes the fenced lock
/// with a fixed lease of `LEASE_MS`, reads the counter `COUNTER` (fenced when `FENCED` is 1),
/// checks that its lease is not lost, prints `HOLD <token>` and waits for the parent's go (an
/// element on the list `<name>:go:<pid>`: the parent may stop the process first, so the stop
/// falls between the check and the write), and writes the counter + 1 (fenced, or a plain
/// `SET`). A write that went through counts in `<name>:done`, a refused
/// one in `<name>:stale`. Without its settings it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by the pause tests"]
async fn child_fenced_counter() {
    use fred::interfaces::{KeysInterface, ListInterface};
    let Some(env) = child::env() else { return };
    let client = common::client_at(&env.text("REDIS_URL"), Duration::from_secs(5)).await;
    let (name, counter) = (env.text("LOCK_NAME"), env.text("COUNTER"));
    let redis = client.redis().clone();
    let fence = client.fence(&counter);
    let fenced = env.text("FENCED") == "1";
    let lease = env.millis("LEASE_MS");
    for _ in 0..env.number::<usize>("ROUNDS") {
        let guard = client
            .fenced_lock(&name)
            .lock_with_lease(lease)
            .await
            .unwrap();
        let token = guard.token();
        let read: std::result::Result<Option<i64>, relock::Error> = if fenced {
            fence.get(token, &counter).await
        } else {
            Ok(redis.get(&counter).await.unwrap())
        };
        let value = match read {
            Ok(value) => value.unwrap_or(0),
            Err(error) if error.is_stale_token() => {
                let _: i64 = redis.incr(format!("{name}:stale")).await.unwrap();
                continue;
            }
            Err(error) => panic!("{error}"),
        };
        if guard.is_lost() {
            continue; // the honest check: this holder knows its lease is gone
        }
        child::say(format!("HOLD {token}"));
        let go = format!("{name}:go:{}", std::process::id());
        while redis
            .lpop::<Option<String>, _>(&go, None)
            .await
            .unwrap()
            .is_none()
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let written = if fenced {
            fence.set(token, &counter, value + 1).await
        } else {
            let _: () = redis
                .set(&counter, value + 1, None, None, false)
                .await
                .unwrap();
            Ok(())
        };
        match written {
            Ok(()) => {
                let _: i64 = redis.incr(format!("{name}:done")).await.unwrap();
            }
            Err(error) if error.is_stale_token() => {
                let _: i64 = redis.incr(format!("{name}:stale")).await.unwrap();
            }
            Err(error) => panic!("{error}"),
        }
        let _ = guard.unlock().await; // LeaseLost after a pause
    }
    client.shutdown().await.unwrap();
}

/// The integer at `key`, 0 when absent.
fn raw_int(server: &RedisServer, key: &str) -> i64 {
    match common::resp(&server.cmd(&["GET", key])) {
        common::Resp::Bulk(Some(value)) => value.parse().unwrap(),
        _ => 0,
    }
}

/// The holds each holder process takes in the pause tests.
const ROUNDS: usize = 40;

/// Runs 4 holder processes on one counter and stops (`SIGSTOP`) a holder every few holds after it
/// checked its lease and before it writes (it waits for the parent's go, given once it is
/// stopped), until its lease has run out, another process has taken the lock and written the
/// counter; then resumes it. Returns (counter,
/// writes that went through, writes refused, pauses).
async fn paused_holders(fenced: bool) -> (i64, i64, i64, usize) {
    use tokio::io::AsyncBufReadExt;
    let server = RedisServer::start();
    let name = common::prefix(if fenced {
        "fenced-pauses"
    } else {
        "unfenced-pauses"
    });
    let counter = format!("{name}:counter");
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<(u32, u64)>();
    let mut children = Vec::new();
    for _ in 0..4 {
        let mut child = child::spawn_child_test(
            concat!(module_path!(), "::child_fenced_counter"),
            &[
                ("REDIS_URL", server.url()),
                ("LOCK_NAME", name.clone()),
                ("COUNTER", counter.clone()),
                ("ROUNDS", ROUNDS.to_string()),
                ("FENCED", if fenced { "1" } else { "0" }.to_owned()),
                ("LEASE_MS", "150".to_owned()),
            ],
        );
        let pid = child.id().unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines_tx = lines_tx.clone();
        tokio::spawn(async move {
            let mut stdout = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = stdout.next_line().await {
                if let Some(token) = line.strip_prefix("HOLD ") {
                    let _ = lines_tx.send((pid, token.parse().unwrap()));
                }
            }
        });
        children.push(child);
    }
    drop(lines_tx);
    // One holder is stopped at a time, by a task of its own, while the others get their go.
    let server = std::sync::Arc::new(server);
    let mut pause: Option<tokio::task::JoinHandle<bool>> = None;
    let mut pauses = 0;
    let mut holds = 0;
    while let Some((pid, token)) = lines.recv().await {
        holds += 1;
        let go = format!("{name}:go:{pid}");
        // Not near the end: the others must have holds left to overtake the stopped one.
        let late = holds > 4 * ROUNDS - 40;
        if holds % 6 != 0 || late || pause.as_ref().is_some_and(|p| !p.is_finished()) {
            server.cmd(&["RPUSH", &go, "1"]);
            continue;
        }
        if let Some(done) = pause.take() {
            assert!(
                done.await.unwrap(),
                "no other holder wrote while one was stopped"
            );
        }
        faults::stop(pid);
        server.cmd(&["RPUSH", &go, "1"]);
        pauses += 1;
        let (server, name) = (server.clone(), name.clone());
        pause = Some(tokio::spawn(async move {
            let done_before = raw_int(&server, &format!("{name}:done"));
            // Until a newer owner holds a token and has written the counter since.
            let overtaken = common::eventually(Duration::from_secs(20), || async {
                raw_token(&server, &name) > token as i64
                    && raw_int(&server, &format!("{name}:done")) > done_before
            })
            .await;
            faults::resume(pid);
            overtaken
        }));
    }
    if let Some(done) = pause.take() {
        assert!(
            done.await.unwrap(),
            "no other holder wrote while one was stopped"
        );
    }
    for child in &mut children {
        let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
            .await
            .expect("a child hung")
            .unwrap();
        assert!(status.success(), "a child failed: {status}");
    }
    (
        raw_int(&server, &counter),
        raw_int(&server, &format!("{name}:done")),
        raw_int(&server, &format!("{name}:stale")),
        pauses,
    )
}

/// The fencing token's promise: holders stopped past their lease between their last check of it
/// and their write lose no update of a counter that every holder reads and writes fenced: the
/// stopped holders' writes are refused (the newer owner's fenced read raised the fence), and the
/// counter equals the writes that went through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_stopped_past_their_lease_lose_no_update_with_a_fence() {
    let (counter, done, stale, pauses) = paused_holders(true).await;
    eprintln!("fenced: counter {counter}, writes {done}, refused {stale}, pauses {pauses}");
    assert!(pauses >= 5, "too few pauses to tell: {pauses}");
    assert_eq!(counter, done, "{} updates lost", done - counter);
    // Most stopped holders' writes are refused (all of them in most runs; under load, a stop can
    // land after the holder's write, which then loses nothing): the refusals are what kept the
    // count exact.
    assert!(
        stale * 2 >= pauses as i64,
        "only {stale} writes refused for {pauses} stopped holders"
    );
}

/// The same run without the fence: the stopped holders' late writes go through and overwrite
/// newer ones, so updates are lost even though every holder checked its lease before writing.
/// (The control that shows the fenced test can fail.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_stopped_past_their_lease_lose_updates_without_a_fence() {
    let (counter, done, stale, pauses) = paused_holders(false).await;
    eprintln!("unfenced: counter {counter}, writes {done}, refused {stale}, pauses {pauses}");
    assert!(pauses >= 5, "too few pauses to tell: {pauses}");
    assert_eq!(stale, 0);
    assert!(
        counter < done,
        "no update was lost without the fence: the pauses did not overlap another holder"
    );
}
