//! The `relock` binary against real servers: every command on every type (one server and a
//! Cluster), a holder in another process named by its pid and shown gone once killed, force
//! unlocks that wake relock's and Redisson's waiters, bad input, NDJSON, and the live views
//! driven in a real terminal (tmux).

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::process::{Output, Stdio};
use std::time::Duration;

use common::redisson_fair::RedissonFair;
use common::topology::Cluster;
use common::{RawSubscriber, RedisServer};
use relock::fred::interfaces::KeysInterface;
use relock::{Client, Owner};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

mod bad_input;
mod election;
mod functions;
mod terminal;

const WATCHDOG: Duration = Duration::from_secs(10);

/// Runs `relock` with `args` against `url`, stdin closed.
async fn relock(url: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_relock"))
        .args(args)
        .env("REDIS_URL", url)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run relock")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `relock --json <args>`, which must exit 0, as JSON.
async fn json(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = relock(url, &all).await;
    assert!(out.status.success(), "relock {args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("an exit code")
}

/// A child process that holds lock `LOCK_NAME` on `REDIS_URL` until killed (run by
/// [`common::spawn_child_test`]).
#[tokio::test]
#[ignore = "a child process of show_names_a_holder_in_another_process_and_a_killed_one_as_gone"]
async fn child_holder() {
    let (Ok(url), Ok(name)) = (std::env::var("REDIS_URL"), std::env::var("LOCK_NAME")) else {
        return;
    };
    let config = relock::Config::from_url(&url)
        .unwrap()
        .with_watchdog_timeout(WATCHDOG);
    let client = Client::new(config).await.unwrap();
    let _guard = client.lock(&name).lock().await.unwrap();
    println!("HELD {}", client.id());
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test]
async fn show_names_a_holder_in_another_process_and_a_killed_one_as_gone() {
    let server = RedisServer::start();
    let url = server.url();
    let name = common::prefix("cli-show");
    let mut child = common::child::spawn_child_test(
        concat!(module_path!(), "::child_holder"),
        &[("REDIS_URL", url.clone()), ("LOCK_NAME", name.clone())],
    );
    let pid = child.id().expect("the child's pid");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let held = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(id) = line.strip_prefix("HELD ") {
                return id.to_owned();
            }
        }
        panic!("the child ended without holding");
    })
    .await
    .expect("the child holds within 30 s");

    let out = relock(&url, &["show", &name]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(&format!("pid {pid} on ")), "{text}");
    assert!(text.contains(&held), "{text}");
    let seen = json(&url, &["show", &name]).await;
    assert_eq!(seen["type"], "lock");
    let holder = &seen["holders"][0];
    assert_eq!(holder["process"]["pid"], pid);
    assert_eq!(holder["client_id"], held.as_str());
    assert_eq!(holder["gone"], false);
    assert!(holder["connections"].as_array().unwrap().len() >= 2);

    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let gone = common::eventually(Duration::from_secs(10), || async {
        json(&url, &["show", &name]).await["holders"][0]["gone"] == true
    })
    .await;
    assert!(gone, "a killed holder shows as gone");
    let text = stdout(&relock(&url, &["show", &name]).await);
    assert!(
        text.contains("holder's connection is gone: the lock frees in"),
        "{text}"
    );
}

/// Names of every type under `base`, held or waited on by `a` and `b`; returns the names with
/// their type labels, and what must stay alive while the commands run.
async fn every_type(
    a: &Client,
    b: &Client,
    base: &str,
) -> (Vec<(String, &'static str)>, Vec<Box<dyn std::any::Any>>) {
    let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    let lock = format!("{base}:lock");
    keep.push(Box::new(a.lock(&lock).lock().await.unwrap()));
    let fair = format!("{base}:fair");
    keep.push(Box::new(a.fair_lock(&fair).lock().await.unwrap()));
    let waiter = b.fair_lock(&fair);
    // It keeps the lock once it gets it (after a forced unlock).
    keep.push(Box::new(tokio::spawn(async move {
        let guard = waiter.lock().await;
        tokio::time::sleep(Duration::from_secs(120)).await;
        drop(guard);
    })));
    // The non-reentrant locks keep Redisson's lock data: a lock, and a fair lock with a waiter.
    let single = format!("{base}:single");
    keep.push(Box::new(
        a.non_reentrant_lock(&single).lock().await.unwrap(),
    ));
    let single_fair = format!("{base}:single-fair");
    let holder = a.non_reentrant_fair_lock(&single_fair);
    keep.push(Box::new(holder.lock().await.unwrap()));
    let waiter = b.non_reentrant_fair_lock(&single_fair);
    keep.push(Box::new(tokio::spawn(async move {
        let guard = waiter.lock().await;
        tokio::time::sleep(Duration::from_secs(120)).await;
        drop(guard);
    })));
    let rw = format!("{base}:rw");
    keep.push(Box::new(a.rw_lock(&rw).read().lock().await.unwrap()));
    let fenced = format!("{base}:fenced");
    keep.push(Box::new(a.fenced_lock(&fenced).lock().await.unwrap()));
    let sem = format!("{base}:sem");
    assert!(a.semaphore(&sem).try_set_permits(0).await.unwrap());
    let waiter = b.semaphore(&sem);
    keep.push(Box::new(tokio::spawn(
        async move { waiter.acquire(1).await },
    )));
    let permits = format!("{base}:permits");
    assert!(a
        .permit_semaphore(&permits)
        .try_set_permits(2)
        .await
        .unwrap());
    keep.push(Box::new(
        a.permit_semaphore(&permits).acquire().await.unwrap(),
    ));
    let latch = format!("{base}:latch");
    assert!(a.count_down_latch(&latch).try_set_count(2).await.unwrap());
    let waiter = b.count_down_latch(&latch);
    keep.push(Box::new(tokio::spawn(async move { waiter.wait().await })));
    let names = vec![
        (lock, "lock"),
        (fair, "fair"),
        (single, "lock"),
        (single_fair, "fair"),
        (rw, "rw"),
        (fenced, "fenced"),
        (sem, "semaphore"),
        (permits, "permits"),
        (latch, "latch"),
    ];
    (names, keep)
}

/// Every command on every type at `url`.
async fn every_command(url: &str) {
    let config = || {
        relock::Config::from_url(url)
            .unwrap()
            .with_watchdog_timeout(WATCHDOG)
    };
    let (a, b) = (
        Client::new(config()).await.unwrap(),
        Client::new(config()).await.unwrap(),
    );
    let base = common::prefix("cli-every");
    let (names, _keep) = every_type(&a, &b, &base).await;
    // A user's key whose braces would split a lock's keys over a cluster's slots: never
    // listed, and no reason for the listing to fail.
    let odd = format!("{base}:odd{{x");
    let _: () = a.redis().set(&odd, "v", None, None, false).await.unwrap();
    // Waiters take a moment to subscribe and queue.
    let pattern = format!("{base}:*");
    let settled = common::eventually(Duration::from_secs(10), || async {
        let listed = json(url, &["ls", &pattern]).await;
        let items = listed["items"].as_array().unwrap().clone();
        names.iter().all(|(name, kind)| {
            items
                .iter()
                .any(|i| i["name"] == name.as_str() && i["type"] == *kind)
        })
    })
    .await;
    assert!(
        settled,
        "ls shows every type: {}",
        json(url, &["ls", &pattern]).await
    );

    let listed = json(url, &["ls", &pattern]).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), names.len());
    // The fair lock and the non-reentrant fair lock, each with its one waiter queued.
    let fair = json(url, &["ls", &pattern, "--type", "fair"]).await;
    let fair = fair["items"].as_array().unwrap();
    assert_eq!(fair.len(), 2, "{fair:?}");
    assert!(fair.iter().all(|f| f["queue_len"] == 1), "{fair:?}");
    let table = stdout(&relock(url, &["ls", &pattern]).await);
    for (name, kind) in &names {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(name.as_str()) && l.contains(kind)),
            "{table}"
        );
    }

    for (name, kind) in &names {
        let out = relock(url, &["show", name]).await;
        assert_eq!(code(&out), 0, "show {name}: {}", stderr(&out));
        let seen = json(url, &["show", name]).await;
        assert_eq!(seen["type"], *kind, "{seen}");
        match *kind {
            "lock" | "fenced" | "rw" => {
                assert_eq!(seen["holders"][0]["client_id"], a.id());
                assert_eq!(seen["holders"][0]["process"]["pid"], std::process::id());
            }
            "fair" => assert_eq!(seen["queue"][0]["client_id"], b.id()),
            "semaphore" | "latch" => assert_eq!(seen["subscribers"], 1, "{seen}"),
            "permits" => assert_eq!(seen["leases_len"], 1),
            _ => unreachable!(),
        }
    }
    // top --json ranks them all; watch --json prints each one's state (and on a cluster, whose
    // sharded pub/sub has no patterns, counts no releases).
    let ranked = json(url, &["top", &pattern]).await;
    assert_eq!(ranked.as_array().unwrap().len(), names.len(), "{ranked}");
    for (name, kind) in &names {
        let line = watch_first_line(url, name).await;
        assert_eq!(line["type"], *kind, "{line}");
        assert_eq!(
            line["releases_per_s"].is_null(),
            url.starts_with("redis-cluster://"),
            "{line}"
        );
    }
    let fenced = &names.iter().find(|(_, kind)| *kind == "fenced").unwrap().0;
    assert_eq!(json(url, &["show", fenced]).await["token"], 1);

    for (name, kind) in &names {
        let out = relock(url, &["unlock", name, "--force", "--yes"]).await;
        if matches!(*kind, "semaphore" | "permits" | "latch") {
            assert_eq!(code(&out), 3, "unlock {name}: {}", stderr(&out));
            assert!(stderr(&out).contains("not a lock"), "{}", stderr(&out));
            continue;
        }
        assert_eq!(code(&out), 0, "unlock {name}: {}", stderr(&out));
        assert!(stdout(&out).contains("freed"), "{}", stdout(&out));
        if *kind == "fair" {
            // The queued waiter was woken and took it.
            let taken = common::eventually(Duration::from_secs(10), || async {
                let seen = json(url, &["show", name]).await;
                seen["holders"][0]["client_id"] == b.id()
            })
            .await;
            assert!(taken, "the fair waiter took the freed lock");
        } else {
            // Gone (exit 3), or only its token left (a fenced lock).
            let out = relock(url, &["--json", "show", name]).await;
            let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(seen["holders"].as_array().unwrap().is_empty(), "{seen}");
            assert_eq!(code(&out), if *kind == "fenced" { 0 } else { 3 }, "{seen}");
        }
    }
}

#[tokio::test]
async fn every_command_on_every_type_on_one_server() {
    let server = RedisServer::start();
    every_command(&server.url()).await;
}

#[tokio::test]
async fn every_command_on_every_type_on_a_cluster() {
    let cluster = Cluster::start(3);
    every_command(&cluster.url()).await;
}

#[tokio::test]
async fn unlock_force_wakes_a_relock_waiter_and_a_redisson_waiter() {
    let server = std::sync::Arc::new(RedisServer::start());
    let url = server.url();
    let (a, b) = (
        common::client(&server, WATCHDOG).await,
        common::client(&server, WATCHDOG).await,
    );
    // A plain lock: a relock task waits, and a Redisson process's subscription hears it.
    let name = common::prefix("cli-wake");
    let _held = common::hold(&a, &name).await;
    let waiter = common::spawn_waiter(b.lock(&name));
    let mut java = RawSubscriber::subscribe(&server, &[&common::lock_channel(&name)]).await;
    assert!(common::until_subscribed(&server, &name, 2).await);
    let out = relock(&url, &["unlock", &name, "--force", "--yes"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let freed = std::time::Instant::now();
    let guard = common::woken_promptly(waiter, freed, "relock waiter").await;
    assert!(
        java.next_message(common::PROMPT).await.is_some(),
        "the Redisson subscriber heard the force-unlock"
    );
    guard.unlock().await.unwrap();

    // A fair lock: a Redisson-protocol waiter (Redisson's scripts and wait loop, its default
    // fair wait) queued behind relock's holder takes it once it is forced free.
    let fair = common::prefix("cli-wake-fair");
    let _held = a
        .fair_lock(&fair)
        .owned_by(Owner::new())
        .lock()
        .await
        .unwrap();
    let java = RedissonFair::new(
        &server,
        &fair,
        "7d1e0a3c-5b7e-4c2a-8f31-1e0f8d1c2b3a:41",
        common::redisson_fair::REDISSON_FAIR_WAIT_MS,
    )
    .await;
    let field = java.field.clone();
    let waiting = tokio::spawn({
        let server = server.clone();
        async move { java.lock(&server).await }
    });
    let queued = common::eventually(Duration::from_secs(10), || async {
        let seen = json(&url, &["show", &fair]).await;
        seen["queue"][0]["field"] == field.as_str() && seen["queue"][0]["subscribers"] == 1
    })
    .await;
    assert!(queued, "the Redisson waiter is queued and subscribed");
    let shown = stdout(&relock(&url, &["show", &fair]).await);
    assert!(shown.contains("Redisson client, thread 41"), "{shown}");
    let out = relock(&url, &["unlock", &fair, "--force", "--yes"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    tokio::time::timeout(common::PROMPT, waiting)
        .await
        .expect("the Redisson waiter took the lock promptly")
        .unwrap();
    let seen = json(&url, &["show", &fair]).await;
    assert_eq!(seen["holders"][0]["field"], field.as_str());
    assert_eq!(seen["holders"][0]["redisson"], true);
}

#[tokio::test]
async fn it_connects_over_tls_with_a_private_ca_and_through_sentinel() {
    let tls = common::tls::TlsServer::start();
    let url = format!("rediss://127.0.0.1:{}", tls.port);
    let ca = std::env::temp_dir().join(format!("relock-cli-ca-{}.pem", std::process::id()));
    std::fs::write(&ca, &tls.certs.ca).unwrap();
    let config = relock::Config::from_url(&url)
        .unwrap()
        .with_tls_root_certificates(&tls.certs.ca)
        .unwrap();
    let client = Client::new(config).await.unwrap();
    let name = common::prefix("cli-tls");
    let _held = common::hold(&client, &name).await;
    let ca_arg = ca.to_str().unwrap();
    let seen = json(&url, &["--tls-ca", ca_arg, "show", &name]).await;
    assert_eq!(seen["holders"][0]["client_id"], client.id());
    // Without the CA the server's certificate is not trusted: an error, not plaintext.
    let out = relock(&url, &["--timeout", "2", "show", &name]).await;
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let _ = std::fs::remove_file(&ca);

    let sentinels = common::topology::Sentinels::start();
    let url = sentinels.url();
    let client = Client::connect(&url).await.unwrap();
    let name = common::prefix("cli-sentinel");
    let _held = common::hold(&client, &name).await;
    let seen = json(&url, &["show", &name]).await;
    assert_eq!(seen["holders"][0]["client_id"], client.id());
    assert_eq!(seen["holders"][0]["process"]["pid"], std::process::id());
}

#[tokio::test]
async fn watch_json_prints_a_line_per_refresh() {
    let server = RedisServer::start();
    let url = server.url();
    let client = common::client(&server, WATCHDOG).await;
    let name = common::prefix("cli-watch");
    let guard = common::hold(&client, &name).await;
    let (mut watch, mut lines) = spawn_watch(&url, &name);
    let first: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    assert_eq!(first["name"], name.as_str());
    assert_eq!(first["holders"][0]["client_id"], client.id());
    guard.unlock().await.unwrap();
    // A later line sees it free, and the release counted.
    let mut freed = None;
    for _ in 0..200 {
        let line: Value = serde_json::from_str(&next_line(&mut lines).await).unwrap();
        if line["holders"].as_array().unwrap().is_empty() {
            freed = Some(line);
            break;
        }
    }
    let freed = freed.expect("a line shows the lock free");
    assert!(freed["releases_per_s"].as_f64().unwrap() > 0.0, "{freed}");
    watch.start_kill().unwrap();
}

/// `relock --json watch NAME --interval 50`, and its lines.
fn spawn_watch(
    url: &str,
    name: &str,
) -> (
    tokio::process::Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) {
    let mut watch = tokio::process::Command::new(env!("CARGO_BIN_EXE_relock"))
        .args(["--json", "watch", name, "--interval", "50"])
        .env("REDIS_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    (watch, lines)
}

/// The first line `relock --json watch NAME` prints.
async fn watch_first_line(url: &str, name: &str) -> Value {
    let (mut watch, mut lines) = spawn_watch(url, name);
    let line = serde_json::from_str(&next_line(&mut lines).await).unwrap();
    watch.start_kill().unwrap();
    line
}

async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a line within 10 s")
        .unwrap()
        .expect("a line")
}
