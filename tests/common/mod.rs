//! The shared test harness: real Redis servers and helpers every test file uses.

#![allow(dead_code, unreachable_pub)]

pub mod child;
pub mod connect;
pub mod family;
pub mod faults;
pub mod proxy;
pub mod raw;
pub mod redisson_fair;
pub mod redisson_nonreentrant;
pub mod redisson_sync;
pub mod rw;
pub mod server;
pub mod sync_family;
pub mod tls;
pub mod topology;

use std::time::Duration;

pub use raw::*;
pub use server::RedisServer;

/// A unique key prefix per test, so tests share servers without sharing keys.
pub fn prefix(test: &str) -> String {
    format!("{test}:{}", uuid_like())
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether this run's clients (made from [`config`]) call their scripts as functions: the
/// server has them (Redis 7.0 and later, Valkey) and `RELOCK_TEST_FUNCTIONS` is not `off`.
pub fn functions_in_use() -> bool {
    let off = std::env::var("RELOCK_TEST_FUNCTIONS").is_ok_and(|v| v == "off");
    !off && relock::testing::server_version().map_or(true, |v| v.at_least(7, 0))
}

/// What names the catalogue script `lua` in its request from this run's clients, for a proxy
/// to recognise it: its function's name (`FCALL relock_<id>_lock_release …`), or its SHA1
/// (`EVALSHA <sha> …`).
pub fn sent_as(lua: &str) -> String {
    if !functions_in_use() {
        return fred::util::sha1_hash(lua);
    }
    let (name, _) = relock::testing::scripts::ALL
        .iter()
        .find(|(_, text)| *text == lua)
        .expect("a script of the catalogue");
    format!("{}_{}", relock::library_name(), name.to_lowercase())
}

/// Makes `server` forget relock's scripts: `SCRIPT FLUSH`, and `FUNCTION FLUSH` where it has
/// functions.
pub fn flush_scripts(server: &RedisServer) {
    assert!(server.cmd(&["SCRIPT", "FLUSH"]).starts_with("+OK"));
    if relock::testing::server_version().map_or(true, |v| v.at_least(7, 0)) {
        assert!(server.cmd(&["FUNCTION", "FLUSH"]).starts_with("+OK"));
    }
}

/// How many of relock's scripts `server` holds: those in its script cache, and 1 for this
/// build's function library.
pub fn raw_loaded_scripts(server: &RedisServer) -> u64 {
    let library = relock::testing::server_version().map_or(true, |v| v.at_least(7, 0))
        && server
            .cmd(&["FUNCTION", "LIST", "LIBRARYNAME", relock::library_name()])
            .contains(relock::library_name());
    raw_cached_scripts(server) + u64::from(library)
}

/// The settings of `url` as the tests' clients start from them: scripts called as functions
/// where the server has them, as the library does, unless `RELOCK_TEST_FUNCTIONS` is `off`
/// (every script by `EVALSHA`), so the suites can run both ways.
pub fn config(url: &str) -> relock::Config {
    let off = std::env::var("RELOCK_TEST_FUNCTIONS").is_ok_and(|v| v == "off");
    relock::Config::from_url(url).unwrap().with_functions(!off)
}

/// A client with a short watchdog timeout, as tests want.
pub async fn client(server: &RedisServer, watchdog: Duration) -> relock::Client {
    let config = config(&server.url())
        .with_watchdog_timeout(watchdog)
        .with_command_timeout(Duration::from_secs(2));
    relock::Client::new(config).await.expect("connect")
}

/// What most tests start with: a server of their own, a client on it with `watchdog` (see
/// [`client`]), and a name of their own (see [`prefix`]). Keep the server bound while it is
/// needed: dropping it stops it.
pub async fn setup(test: &str, watchdog: Duration) -> (RedisServer, relock::Client, String) {
    let server = RedisServer::start();
    let client = client(&server, watchdog).await;
    (server, client, prefix(test))
}

/// [`setup`] with the plain `Lock` on the test's name.
pub async fn setup_lock(
    test: &str,
    watchdog: Duration,
) -> (RedisServer, relock::Client, String, relock::Lock) {
    let (server, client, name) = setup(test, watchdog).await;
    let lock = client.lock(name.clone());
    (server, client, name, lock)
}

/// [`setup`] with two clients on the server: a holder and a waiter, say.
pub async fn setup_two(
    test: &str,
    watchdog: Duration,
) -> (RedisServer, relock::Client, relock::Client, String) {
    let server = RedisServer::start();
    let (a, b) = (
        client(&server, watchdog).await,
        client(&server, watchdog).await,
    );
    (server, a, b, prefix(test))
}

/// `n` clients on `server`, each its own connections: as many processes.
pub async fn clients(server: &RedisServer, n: usize, watchdog: Duration) -> Vec<relock::Client> {
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(client(server, watchdog).await);
    }
    clients
}

/// [`setup`] with `n` clients (see [`clients`]).
pub async fn setup_clients(
    test: &str,
    n: usize,
    watchdog: Duration,
) -> (RedisServer, Vec<relock::Client>, String) {
    let server = RedisServer::start();
    let clients = clients(&server, n, watchdog).await;
    (server, clients, prefix(test))
}

/// [`setup`] with a [`polling_client`] that polls every `poll`.
pub async fn setup_polling(test: &str, poll: Duration) -> (RedisServer, relock::Client, String) {
    let server = RedisServer::start();
    let client = polling_client(&server, poll).await;
    (server, client, prefix(test))
}

/// Waits at most `within` for `key` to be gone from `server`; whether it went.
pub async fn until_gone(server: &RedisServer, key: &str, within: Duration) -> bool {
    eventually(within, || async { !raw_exists(server, key) }).await
}

/// Waits at most `within` for `channel` to have `subscribers` on `server`; whether it had.
pub async fn until_numsub(
    server: &RedisServer,
    channel: &str,
    subscribers: i64,
    within: Duration,
) -> bool {
    eventually(within, || async {
        raw_numsub(server, channel) == subscribers
    })
    .await
}

/// The guard of a `try_lock` the caller knows finds the lock free (else panics with `what`).
pub fn taken<G>(attempt: relock::Result<Option<G>>, what: &str) -> G {
    attempt.unwrap().unwrap_or_else(|| panic!("{what}"))
}

/// Awaits `task` within `within` (else panics with `what`) and returns what it returned; a task
/// that panicked panics here.
pub async fn within<T>(within: Duration, task: tokio::task::JoinHandle<T>, what: &str) -> T {
    let ended = tokio::time::timeout(within, task).await;
    ended.unwrap_or_else(|_| panic!("{what}")).unwrap()
}

/// The lease left of a lock the caller knows is held and expiring.
pub fn lease_left(remaining: relock::Result<relock::RemainingLease>) -> Duration {
    let remaining = remaining.unwrap();
    remaining.expires_in().expect("held, with a lease")
}

/// Awaits every task, each within `within` (else panics with `what`), and returns what they
/// returned; a task that panicked panics here.
pub async fn all_within<T>(
    tasks: impl IntoIterator<Item = tokio::task::JoinHandle<T>>,
    within: Duration,
    what: &str,
) -> Vec<T> {
    let mut done = Vec::new();
    for task in tasks {
        done.push(self::within(within, task, what).await);
    }
    done
}

/// Waits until `client` has `waiters` waiters (at most 5 s; a failure shows its stats).
pub async fn until_waiters(client: &relock::Client, waiters: usize) {
    let there = eventually(Duration::from_secs(5), || async {
        client.stats().waiters == waiters
    })
    .await;
    assert!(there, "never {waiters} waiters: {:?}", client.stats());
}

/// A client with a short watchdog timeout on `url` (a proxy's, say).
pub async fn client_at(url: &str, watchdog: Duration) -> relock::Client {
    let config = config(url)
        .with_watchdog_timeout(watchdog)
        .with_command_timeout(Duration::from_secs(2));
    relock::Client::new(config).await.expect("connect")
}

/// Polls `check` every 10 ms until it is true or `within` passes; returns the last result.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Checks that `check` holds on every poll (every 10 ms) for `window`: for states that must not
/// change once reached, such as background work that must not bring a hold back.
pub async fn stays<F, Fut>(window: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let end = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < end {
        if !check().await {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

// ---- Semaphores and latches. ----

/// Checks that every one of `errors` is a wrong-type error naming `key`.
pub fn assert_wrong_type(errors: impl IntoIterator<Item = relock::Error>, key: &str) {
    for error in errors {
        match &error {
            relock::Error::WrongType { key: named } => assert_eq!(named, key),
            other => panic!("expected WrongType on {key}, got {other:?}"),
        }
    }
}

/// A `Semaphore` `name` on `client`, its `permits` set (it must have had none).
pub async fn semaphore(client: &relock::Client, name: &str, permits: u64) -> relock::Semaphore {
    let sem = client.semaphore(name);
    assert!(
        sem.try_set_permits(permits).await.unwrap(),
        "{name} was set"
    );
    sem
}

/// A `PermitSemaphore` `name` on `client`, its `permits` set (it must have had none).
pub async fn permit_semaphore(
    client: &relock::Client,
    name: &str,
    permits: u64,
) -> relock::PermitSemaphore {
    let sem = client.permit_semaphore(name);
    assert!(
        sem.try_set_permits(permits).await.unwrap(),
        "{name} was set"
    );
    sem
}

/// A `CountDownLatch` `name` on `client`, its `count` set (it must have been open).
pub async fn latch(client: &relock::Client, name: &str, count: u64) -> relock::CountDownLatch {
    let latch = client.count_down_latch(name);
    assert!(latch.try_set_count(count).await.unwrap(), "{name} was set");
    latch
}

/// The counter as Redis holds it (`GET`), `None` when there is none.
pub fn raw_count(server: &RedisServer, key: &str) -> Option<i64> {
    match resp(&server.cmd(&["GET", key])) {
        Resp::Bulk(None) => None,
        Resp::Bulk(Some(n)) => Some(n.parse().expect("a count")),
        other => panic!("unexpected GET reply {other:?}"),
    }
}

/// The semaphore channel of `name`, as Redisson names it.
pub fn semaphore_channel(name: &str) -> String {
    braced("redisson_sc", name)
}

/// The latch channel of `name`, as Redisson names it (braces whatever the name).
pub fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// The permit semaphore leases key of `name` (`{<name>}:timeout`), as Redisson names it.
pub fn leases_key(name: &str) -> String {
    format!("{}:timeout", tagged(name))
}

/// The members of the sorted set `key` as (member as hex, score), by score (`ZRANGE ... WITHSCORES`).
pub fn raw_zrange_hex(server: &RedisServer, key: &str) -> Vec<(String, i64)> {
    let Resp::Array(Some(items)) = resp(&server.cmd(&["EVAL", "local r = redis.call('zrange', KEYS[1], 0, -1, 'withscores') for i = 1, #r, 2 do r[i] = string.gsub(r[i], '.', function(c) return string.format('%02x', string.byte(c)) end) end return r", "1", key])) else {
        panic!("ZRANGE {key} did not return an array");
    };
    items
        .chunks(2)
        .map(|pair| match pair {
            [Resp::Bulk(Some(member)), Resp::Bulk(Some(score))] => {
                (member.clone(), score.parse().expect("an integer score"))
            }
            other => panic!("bad ZRANGE pair {other:?}"),
        })
        .collect()
}

/// A client whose waiters poll every `poll` without a message.
pub async fn polling_client(server: &RedisServer, poll: Duration) -> relock::Client {
    let config = config(&server.url())
        .with_watchdog_timeout(Duration::from_secs(5))
        .with_command_timeout(Duration::from_secs(2))
        .with_poll_interval(poll);
    relock::Client::new(config).await.expect("connect")
}

/// How soon after a release a woken waiter must hold the lock: far below any lease the tests
/// give the holder, so only the wake-up message explains it.
pub const PROMPT: Duration = Duration::from_secs(5);

/// How long a waiter may take before a test calls it hung.
pub const HANG: Duration = Duration::from_secs(40);

/// Spawns a task that takes `lock` with `lock()` (at most [`HANG`]); it returns when it got the
/// lock, and the guard.
pub fn spawn_waiter(
    lock: relock::Lock,
) -> tokio::task::JoinHandle<(std::time::Instant, relock::LockGuard)> {
    spawn_acquire("the waiter", async move { lock.lock().await })
}

/// Spawns a task that runs `acquire` (at most [`HANG`], else panics naming `who`); it returns
/// when it got the lock, and the guard.
pub fn spawn_acquire(
    who: &'static str,
    acquire: impl std::future::Future<Output = relock::Result<relock::LockGuard>> + Send + 'static,
) -> tokio::task::JoinHandle<(std::time::Instant, relock::LockGuard)> {
    tokio::spawn(async move {
        let acquired = tokio::time::timeout(HANG, acquire).await;
        let acquired = acquired.unwrap_or_else(|_| panic!("{who} never got the lock"));
        let guard = acquired.unwrap_or_else(|e| panic!("{who}'s lock() failed: {e}"));
        (std::time::Instant::now(), guard)
    })
}

/// Checks that `waiter` got its lock within [`PROMPT`] of `released`; returns its guard.
pub async fn woken_promptly(
    waiter: tokio::task::JoinHandle<(std::time::Instant, relock::LockGuard)>,
    released: std::time::Instant,
    what: &str,
) -> relock::LockGuard {
    let (acquired, guard) = tokio::time::timeout(HANG, waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}: the waiter hung"))
        .unwrap();
    let waited = acquired.saturating_duration_since(released);
    eprintln!("{what}: waiter woken {waited:?} after the release");
    assert!(
        waited < PROMPT,
        "{what}: the waiter got the lock {waited:?} after the release: the message did not wake it"
    );
    guard
}

/// Runs example `name` (built with `feature`) to its end against `server` (its `REDIS_URL`),
/// and gives what it printed; fails the test when it did not exit 0.
pub fn run_example(name: &str, feature: &str, server: &RedisServer) -> String {
    let out = std::process::Command::new(example(name, feature))
        .env("REDIS_URL", server.url())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{name}: {stdout}\n{out:?}");
    stdout
}

/// The path of example `name` (built with feature `feature`), which `cargo test --all-features`
/// builds beside the test binaries; a test that runs it fails with what to do when it is
/// missing or older than a source it is built from.
pub fn example(name: &str, feature: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir.join("examples").join(name);
    let rebuild = format!(
        "build it with `cargo build --example {name} --features {feature}` \
         (`cargo test --all-features` builds it, `--test <one>` alone does not)"
    );
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| panic!("{} is missing: {rebuild}", path.display()));
    // Older than a source it is built from: it would test yesterday's code.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = format!("examples/{name}.rs");
    let newest = ["src", "lua", source.as_str()]
        .iter()
        .map(|p| newest_in(&root.join(p)))
        .max()
        .unwrap();
    assert!(built >= newest, "{} is stale: {rebuild}", path.display());
    path
}

/// The latest modification time of `path` or of any file under it.
fn newest_in(path: &std::path::Path) -> std::time::SystemTime {
    let own = std::fs::metadata(path).and_then(|m| m.modified()).unwrap();
    let Ok(entries) = std::fs::read_dir(path) else {
        return own;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| newest_in(&e.path()))
        .fold(own, std::cmp::max)
}

/// A hold of lock `name` by an owner of its own (not the calling task).
pub async fn hold(client: &relock::Client, name: impl Into<String>) -> relock::LockGuard {
    client
        .lock(name)
        .owned_by(relock::Owner::new())
        .lock()
        .await
        .unwrap()
}
