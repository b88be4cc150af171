//! `RwLock`: many readers or one writer, on Redisson's layout. Checked on what Redis holds (the
//! hash's `mode` and fields, each read hold's timeout key) and on who got the lock when.

use crate::common;
use common::child;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::family::raw_keys;
use common::rw::{dropped_attempts, read_hold, side};
use common::{woken_promptly as served_promptly, RedisServer, HANG, PROMPT};
use fred::interfaces::{KeysInterface, ListInterface};
use rand::Rng;
use relock::{Client, LockGuard, Owner, RemainingLease, RwLock};

const WATCHDOG: Duration = Duration::from_secs(5);
/// A watchdog lease far above [`PROMPT`]: a waiter served within `PROMPT` of a release was
/// served by the release's message, not by the end of such a holder's lease.
const LONG: Duration = Duration::from_secs(30);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn field(client: &Client, owner: &Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

/// A read hold's timeout key, as Redisson names it.
fn timeout_key(name: &str, field: &str, n: u64) -> String {
    format!("{{{name}}}:{field}:rwlock_timeout:{n}")
}

fn hget(server: &RedisServer, key: &str, field: &str) -> Option<String> {
    common::raw_hgetall(server, key)
        .into_iter()
        .find(|(f, _)| f == field)
        .map(|(_, v)| v)
}

#[tokio::test]
async fn readers_share_and_a_writer_excludes_both() {
    let (server, a, b, name) = common::setup_two("rw-share", WATCHDOG).await;
    let (ra, rb) = (a.rw_lock(&name), b.rw_lock(&name));
    let read_a = ra.read().lock().await.unwrap();
    let read_b = rb.read().lock().await.unwrap();
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("read"));
    assert!(ra.read().is_locked().await.unwrap());
    assert!(!ra.write().is_locked().await.unwrap());
    // A writer of another owner (this task reads on both clients: its own write would be an
    // upgrade).
    let writer = || rb.write().owned_by(Owner::new());
    assert!(
        writer().try_lock().await.unwrap().is_none(),
        "a writer while reading"
    );
    read_a.unlock().await.unwrap();
    assert!(
        writer().try_lock().await.unwrap().is_none(),
        "one reader is left"
    );
    read_b.unlock().await.unwrap();
    assert!(
        !common::raw_exists(&server, &name),
        "the last reader deletes the lock"
    );
    let write = rb.write().lock().await.unwrap();
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("write"));
    assert!(
        ra.read().try_lock().await.unwrap().is_none(),
        "a reader while writing"
    );
    assert!(
        ra.write().try_lock().await.unwrap().is_none(),
        "a second writer"
    );
    write.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn a_reader_asking_for_the_write_lock_gets_an_error_not_a_deadlock() {
    let (server, client, name) = common::setup("rw-upgrade", WATCHDOG).await;
    let rw = client.rw_lock(&name);
    let read = rw.read().lock().await.unwrap();
    let upgrade = tokio::time::timeout(Duration::from_secs(5), rw.write().lock())
        .await
        .expect("the upgrade must fail at once, not wait");
    let error = upgrade.unwrap_err();
    assert!(error.is_upgrade_would_deadlock(), "{error}");
    // Nothing changed: the read hold stands, and no claim keeps readers out.
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("read"));
    assert!(!claimed(&server, &name));
    read.unlock().await.unwrap();
    rw.write().lock().await.unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn the_writer_may_read_and_keeps_the_lock_as_a_reader() {
    let (server, a, b, name) = common::setup_two("rw-downgrade", WATCHDOG).await;
    let rw = a.rw_lock(&name);
    let write = rw.write().lock().await.unwrap();
    let read = rw.read().lock().await.unwrap();
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("write"));
    assert!(b.rw_lock(&name).read().try_lock().await.unwrap().is_none());
    write.unlock().await.unwrap();
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("read"));
    let other = b.rw_lock(&name).read().try_lock().await.unwrap();
    assert!(other.is_some(), "after the downgrade other readers come in");
    let writer = b.rw_lock(&name).write().owned_by(Owner::new());
    assert!(writer.try_lock().await.unwrap().is_none());
    read.unlock().await.unwrap();
    other.unwrap().unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn each_readers_lease_is_its_own() {
    let (server, a, b, name) = common::setup_two("rw-leases", WATCHDOG).await;
    let short = read_hold(&a, &name, Some(ms(400))).await;
    let long = read_hold(&b, &name, Some(ms(20_000))).await;
    let short_field = field(&a, short.owner());
    let long_field = field(&b, long.owner());
    assert!(common::raw_pttl(&server, &timeout_key(&name, &short_field, 1)) <= 400);
    assert!(common::raw_pttl(&server, &name) > 10_000);
    // The long reader leaves: the lock keeps only the short reader's lease.
    long.unlock().await.unwrap();
    let ttl = common::raw_pttl(&server, &name);
    assert!(
        ttl <= 400,
        "the lock kept the leaving reader's lease: {ttl} ms"
    );
    // The short one lapses: the lock is gone with it.
    assert!(until_gone(&server, &name).await);
    assert!(short.unlock().await.unwrap_err().is_lease_lost());
    // A lapsed reader among live ones keeps nothing alive.
    let long = read_hold(&b, &name, Some(ms(20_000))).await;
    let short = read_hold(&a, &name, Some(ms(300))).await;
    let short_field = field(&a, short.owner());
    tokio::time::sleep(ms(600)).await;
    assert!(!common::raw_exists(
        &server,
        &timeout_key(&name, &short_field, 1)
    ));
    // Its client dropped the lapsed reader's field once the lease ended.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            hget(&server, &name, &short_field).is_none()
        })
        .await
    );
    long.unlock().await.unwrap();
    assert!(
        !common::raw_exists(&server, &name),
        "a lapsed reader kept the lock: {:?}",
        common::raw_hgetall(&server, &name)
    );
    assert!(short.unlock().await.unwrap_err().is_lease_lost());
    let _ = long_field;
}

#[tokio::test]
async fn the_watchdog_renews_readers_and_a_waiting_writer_gets_the_lock_when_they_leave() {
    let (server, a, b, name) = common::setup_two("rw-watchdog", ms(600)).await;
    let read = a.rw_lock(&name).read().lock().await.unwrap();
    let read_field = field(&a, read.owner());
    let writer = {
        let rw = b.rw_lock(&name);
        tokio::spawn(async move { rw.write().lock().await })
    };
    tokio::time::sleep(ms(1_500)).await;
    assert!(!read.is_lost());
    assert!(common::raw_exists(
        &server,
        &timeout_key(&name, &read_field, 1)
    ));
    assert!(
        !writer.is_finished(),
        "the writer got in past a live reader"
    );
    // The writer's claim keeps a new reader out.
    assert!(a
        .rw_lock(&name)
        .read()
        .owned_by(Owner::new())
        .try_lock()
        .await
        .unwrap()
        .is_none());
    read.unlock().await.unwrap();
    let write = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer was not woken")
        .unwrap()
        .unwrap();
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("write"));
    write.unlock().await.unwrap();
}

// ---------------------------------------------------------------- helpers

/// [`common::setup_two`] with the first client's watchdog lease [`LONG`] (its holds outlast any
/// wake-up) and the second one's [`WATCHDOG`].
async fn setup_long_and_short(test: &str) -> (RedisServer, Client, Client, String) {
    let (server, long, name) = common::setup(test, LONG).await;
    let short = common::client(&server, WATCHDOG).await;
    (server, long, short, name)
}

/// The read-write lock's channel, as Redisson names it.
fn rw_channel(name: &str) -> String {
    format!("redisson_rwlock:{{{name}}}")
}

/// Every readers' timeout key of lock `name` on the server, sorted.
fn timeouts(server: &RedisServer, name: &str) -> Vec<String> {
    let mut keys = raw_keys(server, &format!("{{{name}}}:*:rwlock_timeout:*"));
    keys.sort();
    keys
}

/// The lock hash `name` as sorted pairs.
fn hash(server: &RedisServer, name: &str) -> Vec<(String, String)> {
    common::raw_hgetall(server, name)
}

/// Whether `client` tracks nothing: no hold, no waiter, no channel, and nothing in flight.
fn idle(client: &Client) -> bool {
    let stats = client.stats();
    let counts = (stats.holds, stats.renewing, stats.waiters, stats.channels);
    // In flight: a dropped acquire's script may still run on the server until its check ends.
    counts == (0, 0, 0, 0) && stats.in_flight == 0
}

/// What differs from a clean state of lock `name`: the hash is `hash` (empty: no lock), the
/// readers' timeout keys are `keys`, there is no claim and no subscriber on the lock's channel,
/// and `clients` track nothing.
fn leftovers(
    server: &RedisServer,
    name: &str,
    clients: &[&Client],
    expect_hash: &[(String, String)],
    keys: &[String],
) -> Vec<String> {
    let mut found = Vec::new();
    let held = hash(server, name);
    if held != expect_hash {
        found.push(format!("lock hash {held:?}"));
    }
    let left = timeouts(server, name);
    if left != keys {
        found.push(format!("timeout keys {left:?}"));
    }
    let claim = common::claim_key(name);
    if common::raw_exists(server, &claim) {
        found.push(format!("claim {}", server.cmd(&["GET", &claim]).trim()));
    }
    let subscribers = common::raw_numsub(server, &rw_channel(name));
    if subscribers != 0 {
        found.push(format!("{subscribers} subscriber(s)"));
    }
    for client in clients {
        if !idle(client) {
            found.push(format!("client {}: {:?}", client.id(), client.stats()));
        }
    }
    found
}

/// Waits (at most 10 s) until [`leftovers`] finds nothing, then checks that nothing comes back
/// for 300 ms (a background release or withdrawal that would bring a hold or a claim back).
async fn until_clean(
    server: &RedisServer,
    name: &str,
    clients: &[&Client],
    expect_hash: &[(String, String)],
    keys: &[String],
    what: &str,
) {
    let clean = common::eventually(Duration::from_secs(10), || async {
        leftovers(server, name, clients, expect_hash, keys).is_empty()
    })
    .await;
    assert!(
        clean,
        "{what}: left behind: {:?}",
        leftovers(server, name, clients, expect_hash, keys)
    );
    let end = Instant::now() + Duration::from_millis(300);
    while Instant::now() < end {
        let found = leftovers(server, name, clients, expect_hash, keys);
        assert!(found.is_empty(), "{what}: came back: {found:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`until_clean`] of a lock left free: no hash, no timeout key.
async fn until_free(server: &RedisServer, name: &str, clients: &[&Client]) {
    until_clean(server, name, clients, &[], &[], "the end").await;
}

/// One hold, as its holder saw it: from `lock()` returning to just before `unlock()`.
#[derive(Debug, Clone)]
struct Span {
    write: bool,
    who: String,
    start: Instant,
    end: Instant,
}

impl Span {
    fn overlaps(&self, other: &Span) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// Checks that no write span overlaps any other span; returns the most read spans that were
/// open at one moment.
fn assert_exclusive(spans: &[Span]) -> usize {
    for (i, w) in spans.iter().enumerate().filter(|(_, s)| s.write) {
        for (j, other) in spans.iter().enumerate() {
            assert!(
                i == j || !w.overlaps(other),
                "a write hold of {} overlapped a hold of {}:\n  {w:?}\n  {other:?}",
                w.who,
                other.who
            );
        }
    }
    max_readers(spans.iter().filter(|s| !s.write).map(|s| (s.start, s.end)))
}

/// The most intervals open at one moment (an interval that ends when another starts does not
/// count as overlapping it).
fn max_readers<T: Ord + Copy>(intervals: impl Iterator<Item = (T, T)>) -> usize {
    let mut events: Vec<(T, i32)> = Vec::new();
    for (start, end) in intervals {
        events.push((start, 1));
        events.push((end, -1));
    }
    events.sort();
    let (mut open, mut most) = (0i32, 0i32);
    for (_, step) in events {
        open += step;
        most = most.max(open);
    }
    most as usize
}

/// `rounds` holds of one side of `rw`, each `hold` long, by one owner; each hold's span goes to
/// `spans`.
async fn take_turns(
    rw: RwLock,
    write: bool,
    rounds: usize,
    hold: Duration,
    spans: Arc<Mutex<Vec<Span>>>,
) {
    let owner = Owner::new();
    let who = owner.id().to_owned();
    let lock = side(&rw, write).owned_by(owner);
    for _ in 0..rounds {
        let guard = lock.lock().await.unwrap();
        let start = Instant::now();
        tokio::time::sleep(hold).await;
        let end = Instant::now();
        guard.unlock().await.unwrap();
        spans.lock().unwrap().push(Span {
            write,
            who: who.clone(),
            start,
            end,
        });
    }
}

/// A task that runs `acquire` (a `lock()` of the `who` side, at most [`HANG`]) and returns when
/// it got the lock.
fn spawn_taking(
    who: &'static str,
    acquire: impl std::future::Future<Output = relock::Result<LockGuard>> + Send + 'static,
) -> tokio::task::JoinHandle<(Instant, LockGuard)> {
    tokio::spawn(async move {
        let guard = tokio::time::timeout(HANG, acquire)
            .await
            .unwrap_or_else(|_| panic!("the {who} never got the lock"))
            .unwrap_or_else(|error| panic!("the {who}'s lock() failed: {error}"));
        (Instant::now(), guard)
    })
}

/// A task that takes the read side of `lock` (see [`spawn_taking`]).
fn spawn_reader(lock: relock::ReadLock) -> tokio::task::JoinHandle<(Instant, LockGuard)> {
    spawn_taking("reader", async move { lock.lock().await })
}

/// A task that takes the write side of `lock` (see [`spawn_taking`]).
fn spawn_writer(lock: relock::WriteLock) -> tokio::task::JoinHandle<(Instant, LockGuard)> {
    spawn_taking("writer", async move { lock.lock().await })
}

/// The guards of every one of `waiters`, each checked by [`served_promptly`].
async fn all_served_promptly(
    waiters: Vec<tokio::task::JoinHandle<(Instant, LockGuard)>>,
    released: Instant,
    what: &str,
) -> Vec<LockGuard> {
    let mut guards = Vec::new();
    for waiter in waiters {
        guards.push(served_promptly(waiter, released, what).await);
    }
    guards
}

/// Waits (at most 5 s) until `key` is gone from `server`; whether it went.
async fn until_gone(server: &RedisServer, key: &str) -> bool {
    common::eventually(Duration::from_secs(5), || async {
        !common::raw_exists(server, key)
    })
    .await
}

/// Whether a waiting writer's claim on lock `name` stands.
fn claimed(server: &RedisServer, name: &str) -> bool {
    common::raw_exists(server, &common::claim_key(name))
}

/// Waits (at most 5 s) until a waiting writer claimed lock `name`; fails with `what`.
async fn until_claimed(server: &RedisServer, name: &str, what: impl std::fmt::Display) {
    let in_time =
        common::eventually(Duration::from_secs(5), || async { claimed(server, name) }).await;
    assert!(in_time, "{what}");
}

/// A new client with the [`LONG`] lease whose writer runs `wait` (its `lock()`, say) on lock
/// `name` in a task of its own; returns once the writer claimed the lock (else fails, `label`
/// telling which round): the client and the task.
async fn claiming_writer<Fut>(
    server: &RedisServer,
    name: &str,
    label: impl std::fmt::Display,
    wait: impl FnOnce(relock::WriteLock) -> Fut,
) -> (Client, tokio::task::JoinHandle<Fut::Output>)
where
    Fut: std::future::Future + Send + 'static,
    Fut::Output: Send + 'static,
{
    let client = common::client(server, LONG).await;
    let task = tokio::spawn(wait(client.rw_lock(name).write()));
    until_claimed(server, name, format!("{label}: the writer never claimed")).await;
    (client, task)
}

/// [`common::setup`] with the [`LONG`] lease, and a read hold of the lock by the calling task:
/// a lock for writers to wait on and claim.
async fn setup_read_held(test: &str) -> (RedisServer, Client, String, LockGuard) {
    let (server, client, name) = common::setup(test, LONG).await;
    let read = client.rw_lock(&name).read().lock().await.unwrap();
    (server, client, name, read)
}

/// Releases each of `guards`, then waits until lock `name` is free and clean (see
/// [`until_free`]).
async fn release_and_clean(
    guards: Vec<LockGuard>,
    server: &RedisServer,
    name: &str,
    clients: &[&Client],
) {
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    until_free(server, name, clients).await;
}

/// Waits until `client` has `n` waiters parked.
async fn until_waiting(client: &Client, n: usize) {
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            client.stats().waiters == n
        })
        .await,
        "expected {n} waiters, the client has {:?}",
        client.stats()
    );
}

// ---------------------------------------------------------------- sharing and exclusion

/// Six readers and two writers on two clients take turns on one lock. Readers hold the lock
/// together (more than one at a time), and no write hold overlaps any other hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_overlap_in_time_while_a_writer_excludes_everyone() {
    let (server, a, b, name) = common::setup_two("rw-overlap", WATCHDOG).await;
    let hold = ms(15);
    let spans = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for client in [&a, &b] {
        for _ in 0..3 {
            let rw = client.rw_lock(&name);
            tasks.push(tokio::spawn(take_turns(rw, false, 12, hold, spans.clone())));
        }
        let rw = client.rw_lock(&name);
        tasks.push(tokio::spawn(take_turns(rw, true, 6, hold, spans.clone())));
    }
    let all = futures::future::join_all(tasks);
    for task in tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("the rounds hung")
    {
        task.unwrap();
    }
    let spans = spans.lock().unwrap().clone();
    assert_eq!(spans.iter().filter(|s| s.write).count(), 12);
    assert_eq!(spans.iter().filter(|s| !s.write).count(), 72);
    let most = assert_exclusive(&spans);
    println!("at most {most} readers at once");
    assert!(most > 1, "readers never held the lock together");
    assert!(!common::raw_exists(&server, &name));
    assert!(timeouts(&server, &name).is_empty());
}

/// Not a test on its own: a worker process of the test below. `READERS` reader tasks and
/// `WRITERS` writer tasks, one owner each, take their side of the lock `ROUNDS` times; each logs
/// `<R|W> <field> in` on the list `<name>:log` once it holds the lock and `... out` before it
/// releases, so the list is the server's own order of holds. It starts when the key `<name>:go`
/// appears. Without its settings it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by the cross-process tests"]
async fn child_rw_rounds() {
    let Some(env) = child::env() else { return };
    let rounds: usize = env.number("ROUNDS");
    let client = common::client_at(&env.text("REDIS_URL"), WATCHDOG).await;
    let name = env.text("LOCK_NAME");
    let (log, go) = (format!("{name}:log"), format!("{name}:go"));
    let _: i64 = client
        .redis()
        .rpush(format!("{name}:ready"), client.id())
        .await
        .unwrap();
    let started = Instant::now();
    while client.redis().exists::<i64, _>(&go).await.unwrap() == 0 {
        assert!(started.elapsed() < HANG, "never told to go");
        tokio::time::sleep(ms(5)).await;
    }
    let sides = std::iter::repeat(false)
        .take(env.number("READERS"))
        .chain(std::iter::repeat(true).take(env.number("WRITERS")));
    let mut tasks = Vec::new();
    for write in sides {
        let (client, name, log) = (client.clone(), name.clone(), log.clone());
        tasks.push(tokio::spawn(async move {
            let owner = Owner::new();
            let me = field(&client, &owner);
            let tag = if write { "W" } else { "R" };
            let lock = side(&client.rw_lock(&name), write).owned_by(owner);
            for _ in 0..rounds {
                let guard = lock.lock().await.unwrap();
                let _: i64 = client
                    .redis()
                    .rpush(&log, format!("{tag} {me} in"))
                    .await
                    .unwrap();
                tokio::time::sleep(ms(5)).await;
                let _: i64 = client
                    .redis()
                    .rpush(&log, format!("{tag} {me} out"))
                    .await
                    .unwrap();
                guard.unlock().await.unwrap();
            }
        }));
    }
    let done = tokio::time::timeout(Duration::from_secs(90), futures::future::join_all(tasks));
    for task in done.await.expect("child timed out") {
        task.unwrap();
    }
    client.shutdown().await.unwrap();
}

/// Three processes, each with two readers and a writer, take turns on one lock. The log they
/// keep on Redis while holding it (in the server's order) shows no writer in while anyone else
/// is, and readers of different processes in at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_of_several_processes_exclude_each_other() {
    const PROCS: usize = 3;
    const ROUNDS: usize = 8;
    let server = RedisServer::start();
    let name = common::prefix("rw-procs");
    // Every child alike.
    let settings = [
        ("REDIS_URL", server.url()),
        ("LOCK_NAME", name.clone()),
        ("READERS", "2".to_owned()),
        ("WRITERS", "1".to_owned()),
        ("ROUNDS", ROUNDS.to_string()),
    ];
    let path = concat!(module_path!(), "::child_rw_rounds");
    let children: Vec<_> = (0..PROCS)
        .map(|_| child::Child::spawn(path, &settings))
        .collect();
    let ready = format!("{name}:ready");
    assert!(
        common::eventually(HANG, || async {
            common::raw_lrange(&server, &ready).len() == PROCS
        })
        .await,
        "the children never got ready"
    );
    server.cmd(&["SET", &format!("{name}:go"), "1"]);
    for child in children {
        child.finish(Duration::from_secs(120)).await;
    }

    let log = common::raw_lrange(&server, &format!("{name}:log"));
    assert_eq!(
        log.len(),
        PROCS * 3 * ROUNDS * 2,
        "every hold logged in and out"
    );
    let mut readers: HashSet<String> = HashSet::new();
    let mut writer: Option<String> = None;
    let (mut most, mut most_processes) = (0, 0);
    for (at, line) in log.iter().enumerate() {
        let mut parts = line.split(' ');
        let (side, who, step) = (
            parts.next().unwrap(),
            parts.next().unwrap().to_owned(),
            parts.next().unwrap(),
        );
        match (side, step) {
            ("W", "in") => {
                assert!(
                    writer.is_none() && readers.is_empty(),
                    "entry {at}: writer {who} in with writer {writer:?} and readers {readers:?}"
                );
                writer = Some(who);
            }
            ("W", "out") => assert_eq!(writer.take(), Some(who), "entry {at}"),
            ("R", "in") => {
                assert!(
                    writer.is_none(),
                    "entry {at}: reader {who} in with writer {writer:?}"
                );
                readers.insert(who);
                let processes: HashSet<&str> = readers.iter().map(|r| &r[..36]).collect();
                most = most.max(readers.len());
                most_processes = most_processes.max(processes.len());
            }
            ("R", "out") => assert!(readers.remove(&who), "entry {at}: {who} was not in"),
            other => panic!("bad log entry {other:?}"),
        }
    }
    println!("at most {most} readers at once, of {most_processes} processes");
    assert!(
        most_processes > 1,
        "readers of different processes never shared the lock"
    );
    assert!(!common::raw_exists(&server, &name));
    assert!(timeouts(&server, &name).is_empty());
}

// ---------------------------------------------------------------- reentrancy and inspection

#[tokio::test]
async fn both_sides_reenter_count_their_holds_and_report_them() {
    let (server, client, name) = common::setup("rw-reentry", WATCHDOG).await;
    let rw = client.rw_lock(&name);
    assert_eq!(
        rw.read().remaining_lease().await.unwrap(),
        RemainingLease::Unlocked
    );
    assert_eq!(
        rw.write().remaining_lease().await.unwrap(),
        RemainingLease::Unlocked
    );

    // The read side: one hold count, one timeout key per hold.
    let r1 = rw.read().lock().await.unwrap();
    let r2 = rw.read().lock().await.unwrap();
    let r3 = rw.read().lock_with_lease(ms(20_000)).await.unwrap();
    let me = field(&client, r1.owner());
    assert_eq!(
        hash(&server, &name),
        common::pairs(&[("mode", "read"), (&me, "3")])
    );
    assert_eq!(
        timeouts(&server, &name),
        (1..=3)
            .map(|n| timeout_key(&name, &me, n))
            .collect::<Vec<_>>()
    );
    assert_eq!(rw.read().hold_count().await.unwrap(), 3);
    assert_eq!(r2.hold_count().await.unwrap(), 3);
    assert_eq!(rw.write().hold_count().await.unwrap(), 0);
    assert!(rw.read().is_locked().await.unwrap());
    assert!(!rw.write().is_locked().await.unwrap());
    assert!(rw.read().is_held_by_current_owner().await.unwrap());
    match rw.read().remaining_lease().await.unwrap() {
        RemainingLease::Expires(left) => assert!(left > WATCHDOG, "the fixed 20 s hold: {left:?}"),
        other => panic!("read-locked: {other:?}"),
    }
    // The lease is the lock's, whoever holds it: the write side sees the readers' lease too.
    assert!(matches!(
        rw.write().remaining_lease().await.unwrap(),
        RemainingLease::Expires(left) if left > WATCHDOG
    ));
    r3.unlock().await.unwrap();
    assert_eq!(common::raw_holds(&server, &name, &me), 2);
    assert_eq!(timeouts(&server, &name).len(), 2);
    match rw.read().remaining_lease().await.unwrap() {
        RemainingLease::Expires(left) => assert!(left <= WATCHDOG, "the 20 s hold left: {left:?}"),
        other => panic!("read-locked: {other:?}"),
    }
    r2.unlock().await.unwrap();
    r1.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
    assert!(timeouts(&server, &name).is_empty());

    // The write side, and the writer's own read holds.
    let w1 = rw.write().lock().await.unwrap();
    let w2 = rw.write().lock().await.unwrap();
    let me_w = format!("{me}:write");
    assert_eq!(
        hash(&server, &name),
        common::pairs(&[("mode", "write"), (&me_w, "2")])
    );
    assert_eq!(rw.write().hold_count().await.unwrap(), 2);
    assert_eq!(w1.hold_count().await.unwrap(), 2);
    assert_eq!(rw.read().hold_count().await.unwrap(), 0);
    assert!(rw.write().is_locked().await.unwrap());
    assert!(
        !rw.read().is_locked().await.unwrap(),
        "a writer alone: no read lock"
    );
    let r = rw.read().lock().await.unwrap();
    assert!(
        rw.read().is_locked().await.unwrap(),
        "a writer that reads: read-locked (Redisson's rule)"
    );
    assert_eq!(rw.read().hold_count().await.unwrap(), 1);
    let leases = [
        rw.read().remaining_lease().await.unwrap(),
        rw.write().remaining_lease().await.unwrap(),
    ];
    for lease in leases {
        match lease {
            RemainingLease::Expires(left) => assert!(left <= WATCHDOG),
            other => panic!("write-locked: {other:?}"),
        }
    }
    w2.unlock().await.unwrap();
    assert_eq!(common::raw_holds(&server, &name, &me_w), 1);
    w1.unlock().await.unwrap();
    assert_eq!(
        hash(&server, &name),
        common::pairs(&[("mode", "read"), (&me, "1")])
    );
    assert!(!rw.write().is_locked().await.unwrap());
    assert!(rw.read().is_locked().await.unwrap());
    assert_eq!(rw.write().hold_count().await.unwrap(), 0);
    r.unlock().await.unwrap();
    assert!(!rw.read().is_locked().await.unwrap());
    assert_eq!(
        rw.read().remaining_lease().await.unwrap(),
        RemainingLease::Unlocked
    );
}

// ---------------------------------------------------------------- downgrade and upgrade

/// Readers of another client wait while a writer holds; the writer reads too, then releases its
/// write hold: the waiting readers are woken and share the lock with the writer's read hold,
/// and a writer stays out until all of them leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_downgrade_waiting_readers_come_in_beside_the_writers_read_hold() {
    let (server, writer_client, readers_client, name) =
        setup_long_and_short("rw-downgrade-wake").await;
    let rw = writer_client.rw_lock(&name);
    let write = rw.write().lock().await.unwrap();
    let waiting: Vec<_> = (0..3)
        .map(|_| spawn_reader(readers_client.rw_lock(&name).read()))
        .collect();
    until_waiting(&readers_client, 3).await;
    let read = rw.read().lock().await.unwrap();
    let me = field(&writer_client, read.owner());
    assert_eq!(
        hash(&server, &name),
        common::pairs(&[("mode", "write"), (&me, "1"), (&format!("{me}:write"), "1")]),
        "readers got in beside a writer"
    );
    let released = Instant::now();
    write.unlock().await.unwrap();
    let guards = all_served_promptly(waiting, released, "a reader after the downgrade").await;
    let held = hash(&server, &name);
    assert_eq!(
        held.len(),
        5,
        "mode, the writer's read hold, 3 readers: {held:?}"
    );
    assert!(held.contains(&("mode".to_owned(), "read".to_owned())));
    assert!(held.contains(&(me.clone(), "1".to_owned())));
    let other_writer = readers_client.rw_lock(&name).write().owned_by(Owner::new());
    assert!(other_writer.try_lock().await.unwrap().is_none());
    read.unlock().await.unwrap();
    assert!(
        other_writer.try_lock().await.unwrap().is_none(),
        "readers are left"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    let write = other_writer
        .try_lock()
        .await
        .unwrap()
        .expect("everyone left");
    write.unlock().await.unwrap();
    until_free(&server, &name, &[&writer_client, &readers_client]).await;
}

/// Every way of asking for the write lock fails at once for a reader, and leaves nothing: no
/// hold, no claim, no subscription. Another owner's waiting writer keeps its claim, and gets the
/// lock when the reader leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_fails_at_once_in_every_form_and_leaves_nothing_behind() {
    let (server, client, other, name) = setup_long_and_short("rw-upgrade-all").await;
    let rw = client.rw_lock(&name);
    let read = rw.read().lock().await.unwrap();
    let me = field(&client, read.owner());
    let state = common::pairs(&[("mode", "read"), (&me, "1")]);

    let keys = vec![timeout_key(&name, &me, 1)];

    let tries = |rw: RwLock| async move {
        let w = rw.write();
        let errors = [
            w.lock().await.map(|_| ()),
            w.lock_with_lease(ms(5_000)).await.map(|_| ()),
            w.try_lock().await.map(|_| ()),
            w.try_lock_for(Duration::from_secs(30), None)
                .await
                .map(|_| ()),
            w.try_lock_for(Duration::from_secs(30), Some(ms(5_000)))
                .await
                .map(|_| ()),
            w.with(|_| async {}).await,
        ];
        for (i, error) in errors.into_iter().enumerate() {
            let error = error.expect_err("an upgrade went through");
            assert!(error.is_upgrade_would_deadlock(), "form {i}: {error}");
        }
    };
    tokio::time::timeout(Duration::from_secs(10), tries(rw.clone()))
        .await
        .expect("an upgrade waited");
    let stats = client.stats();
    assert_eq!(
        (stats.holds, stats.waiters, stats.channels),
        (1, 0, 0),
        "{stats:?}"
    );
    assert_eq!(hash(&server, &name), state);
    assert_eq!(timeouts(&server, &name), keys);
    assert!(!claimed(&server, &name));
    assert_eq!(common::raw_numsub(&server, &rw_channel(&name)), 0);

    // With another owner's writer waiting (and claiming the lock).
    let writer = spawn_writer(other.rw_lock(&name).write());
    let claim = common::claim_key(&name);
    until_claimed(&server, &name, "the waiting writer never claimed").await;
    let claimed = server.cmd(&["GET", &claim]);
    tokio::time::timeout(Duration::from_secs(10), tries(rw.clone()))
        .await
        .expect("an upgrade waited");
    assert_eq!(
        server.cmd(&["GET", &claim]),
        claimed,
        "the claim is the writer's still"
    );
    assert_eq!(hash(&server, &name), state);
    assert!(!writer.is_finished());
    let released = Instant::now();
    read.unlock().await.unwrap();
    let write = served_promptly(writer, released, "the writer after the reader").await;
    write.unlock().await.unwrap();
    until_free(&server, &name, &[&client, &other]).await;
}

/// A one-shot `try_lock()` of the write side finds readers and gives up without claiming the
/// lock: new readers still come in. A `try_lock_for` whose wait runs out leaves no claim either.
#[tokio::test]
async fn a_one_shot_write_attempt_claims_nothing() {
    let (server, client, name) = common::setup("rw-one-shot", WATCHDOG).await;
    let claim = common::claim_key(&name);
    let read = client.rw_lock(&name).read().lock().await.unwrap();
    let writer = client.rw_lock(&name).write().owned_by(Owner::new());
    assert!(writer.try_lock().await.unwrap().is_none());
    assert!(!common::raw_exists(&server, &claim));
    let newcomer = client.rw_lock(&name).read().owned_by(Owner::new());
    newcomer
        .try_lock()
        .await
        .unwrap()
        .expect("kept out")
        .unlock()
        .await
        .unwrap();
    assert!(writer.try_lock_for(ms(50), None).await.unwrap().is_none());
    read.unlock().await.unwrap();
    until_free(&server, &name, &[&client]).await;
}

// ---------------------------------------------------------------- leases

/// Three readers: one with a short fixed lease, one with a long one, one renewed by the
/// watchdog. The short one lapses: its guard reports it lost, and it keeps nothing alive. When
/// the long one leaves, the lock's TTL follows the watchdog reader's lease alone.
#[tokio::test]
async fn a_lapsed_reader_among_live_ones_is_lost_and_the_lock_follows_the_others() {
    let (server, a, b, name) = common::setup_two("rw-lapse-one", WATCHDOG).await;
    let short = read_hold(&a, &name, Some(ms(500))).await;
    let long = read_hold(&b, &name, Some(Duration::from_secs(60))).await;
    let renewed = read_hold(&b, &name, None).await;
    let short_field = field(&a, short.owner());
    tokio::time::timeout(Duration::from_secs(10), short.lost())
        .await
        .expect("the short reader never learned its lease ended");
    assert!(short.is_lost() && !long.is_lost() && !renewed.is_lost());
    let short_key = timeout_key(&name, &short_field, 1);
    assert!(until_gone(&server, &short_key).await);
    assert!(
        common::raw_pttl(&server, &name) > 50_000,
        "the long reader's lease"
    );
    long.unlock().await.unwrap();
    let ttl = common::raw_pttl(&server, &name);
    assert!(
        ttl > 0 && ttl <= WATCHDOG.as_millis() as i64,
        "the lock's TTL is {ttl} ms: not the watchdog reader's"
    );
    let error = short.unlock().await.unwrap_err();
    assert!(error.is_lease_lost(), "{error}");
    assert!(
        !common::raw_hexists(&server, &name, &short_field),
        "the lapsed reader's field stayed"
    );
    renewed.unlock().await.unwrap();
    until_free(&server, &name, &[&a, &b]).await;
}

/// Two owners of one client read: one renewed by the watchdog, one with a fixed lease. The
/// watchdog's renewals refresh the first one's timeout key again and again, and never the
/// second one's, which runs down and expires; the lock then lives on the first one's lease.
#[tokio::test]
async fn renewing_one_reader_never_extends_another_readers_timeout_key() {
    let watchdog = ms(900);
    let (server, client, name) = common::setup("rw-renew-own", watchdog).await;
    let renewed = read_hold(&client, &name, None).await;
    let fixed = read_hold(&client, &name, Some(ms(2_500))).await;
    let renewed_key = timeout_key(&name, &field(&client, renewed.owner()), 1);
    let fixed_key = timeout_key(&name, &field(&client, fixed.owner()), 1);
    let (mut refreshed, mut last_renewed, mut last_fixed) = (0, i64::MAX, i64::MAX);
    let started = Instant::now();
    while started.elapsed() < ms(1_800) {
        let (r, f) = (
            common::raw_pttl(&server, &renewed_key),
            common::raw_pttl(&server, &fixed_key),
        );
        assert!(r > 0, "the renewed reader's key lapsed");
        assert!(
            f <= last_fixed,
            "the fixed reader's key was extended: {last_fixed} -> {f} ms"
        );
        if r > last_renewed {
            refreshed += 1;
        }
        (last_renewed, last_fixed) = (r, f);
        tokio::time::sleep(ms(25)).await;
    }
    assert!(
        refreshed >= 2,
        "the renewed reader's key was refreshed {refreshed} times"
    );
    assert!(
        until_gone(&server, &fixed_key).await,
        "the fixed reader's key never expired"
    );
    assert!(fixed.is_lost() && !renewed.is_lost());
    assert!(common::raw_exists(&server, &renewed_key));
    assert!(common::raw_pttl(&server, &name) <= watchdog.as_millis() as i64 * 2);
    assert!(fixed.unlock().await.unwrap_err().is_lease_lost());
    renewed.unlock().await.unwrap();
    until_free(&server, &name, &[&client]).await;
}

// ---------------------------------------------------------------- cancellation

/// Starts `count` acquires on `rw`, each by an owner of its own, on a random side (write with
/// probability `writes`), by `lock()` or `try_lock_for(30 s)`, each dropped after a random
/// 0–50 ms; one that wins in time releases at once. Returns how many won.
async fn dropped_acquires(rw: &RwLock, count: usize, writes: f64) -> usize {
    let attempts = {
        let mut rng = rand::thread_rng();
        (0..count)
            .map(|_| {
                let lock = side(rw, rng.gen_bool(writes)).owned_by(Owner::new());
                (lock, rng.gen_bool(0.5), ms(rng.gen_range(0..=50)))
            })
            .collect()
    };
    dropped_attempts(attempts).await
}

/// Read and write acquires dropped at random moments: while the lock is write-held (all wait),
/// while it is read-held (reads go through, writes wait and claim), and racing the holder's
/// release. Afterwards nothing is left: no hold, no claim, no timeout key, no subscription, and
/// nothing comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_dropped_at_random_points_leave_nothing_behind() {
    let (server, holder, canceller, name) = common::setup_two("rw-cancel", WATCHDOG).await;
    let rw = canceller.rw_lock(&name);

    // 1. Write-held: every acquire waits and is dropped.
    let write = holder.rw_lock(&name).write().lock().await.unwrap();
    let writer = format!("{}:write", field(&holder, write.owner()));
    assert_eq!(dropped_acquires(&rw, 60, 0.5).await, 0, "got past a writer");
    let only_writer = common::pairs(&[("mode", "write"), (&writer, "1")]);
    until_clean(
        &server,
        &name,
        &[&canceller],
        &only_writer,
        &[],
        "write-held",
    )
    .await;
    write.unlock().await.unwrap();

    // 2. Read-held: readers come in (and leave); writers wait, claim, and are dropped.
    let read = holder.rw_lock(&name).read().lock().await.unwrap();
    let reader = field(&holder, read.owner());
    let won = dropped_acquires(&rw, 60, 0.5).await;
    println!("read-held: {won} readers got in");
    let only_reader = common::pairs(&[("mode", "read"), (&reader, "1")]);
    let reader_key = vec![timeout_key(&name, &reader, 1)];
    until_clean(
        &server,
        &name,
        &[&canceller],
        &only_reader,
        &reader_key,
        "read-held",
    )
    .await;
    read.unlock().await.unwrap();

    // 3. Racing the holder's release, on either side.
    let mut total = 0;
    for round in 0..6 {
        let side = holder.rw_lock(&name);
        let guard = if round % 2 == 0 {
            side.write().lock().await.unwrap()
        } else {
            side.read().lock().await.unwrap()
        };
        let after = ms(rand::thread_rng().gen_range(0..=30));
        let release = tokio::spawn(async move {
            tokio::time::sleep(after).await;
            guard.unlock().await.unwrap();
        });
        total += dropped_acquires(&rw, 40, 0.5).await;
        release.await.unwrap();
        until_clean(
            &server,
            &name,
            &[&canceller, &holder],
            &[],
            &[],
            &format!("round {round}"),
        )
        .await;
    }
    println!("{total} acquires won the race");

    // 4. A fresh client takes both sides at once.
    let fresh = common::client(&server, WATCHDOG).await;
    let rw = fresh.rw_lock(&name);
    for write in [true, false] {
        let guard = side(&rw, write).try_lock().await.unwrap().expect("free");
        guard.unlock().await.unwrap();
    }
}

// ---------------------------------------------------------------- force unlock

/// The read side's force-unlock deletes a read-locked lock with every reader's timeout key and
/// wakes a waiting writer; the write side's does nothing to it. On a write-locked lock, the
/// read side's does nothing (Redisson's rule, even when the writer also reads), the write
/// side's deletes it, the writer's read holds included, and wakes the waiting readers. The
/// holders' releases then find nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_works_on_its_own_side_only_and_wakes_the_other() {
    let (server, a, b, name) = common::setup_two("rw-force", LONG).await;
    let (ra, rb) = (a.rw_lock(&name), b.rw_lock(&name));

    let read_a = ra.read().lock().await.unwrap();
    let read_b = rb.read().lock().await.unwrap();
    let writer = spawn_writer(rb.write().owned_by(Owner::new()));
    until_waiting(&b, 1).await;
    let before = hash(&server, &name);
    assert!(
        !ra.write().force_unlock().await.unwrap(),
        "not write-locked"
    );
    assert_eq!(hash(&server, &name), before);
    assert_eq!(timeouts(&server, &name).len(), 2);
    let forced = Instant::now();
    assert!(ra.read().force_unlock().await.unwrap());
    let write = served_promptly(writer, forced, "the writer after a read force-unlock").await;
    assert_eq!(timeouts(&server, &name), Vec::<String>::new());
    for guard in [read_a, read_b] {
        let error = guard.unlock().await.unwrap_err();
        assert!(error.is_not_held(), "{error}");
    }
    assert_eq!(
        hash(&server, &name).len(),
        2,
        "the writer holds: {:?}",
        hash(&server, &name)
    );

    // Write-locked by a writer that also reads.
    let read_w = rb
        .read()
        .owned_by(write.owner().clone())
        .lock()
        .await
        .unwrap();
    let readers: Vec<_> = (0..2)
        .map(|_| spawn_reader(a.rw_lock(&name).read().owned_by(Owner::new())))
        .collect();
    until_waiting(&a, 2).await;
    let before = hash(&server, &name);
    assert_eq!(before.len(), 3);
    assert!(!ra.read().force_unlock().await.unwrap(), "write-locked");
    assert_eq!(hash(&server, &name), before);
    let forced = Instant::now();
    assert!(ra.write().force_unlock().await.unwrap());
    let guards = all_served_promptly(readers, forced, "a reader after a write force-unlock").await;
    assert!(
        !common::raw_exists(&server, &timeout_key(&name, &field(&b, read_w.owner()), 1)),
        "the writer's read hold survived"
    );
    for guard in [write, read_w] {
        let error = guard.unlock().await.unwrap_err();
        assert!(error.is_not_held(), "{error}");
    }
    release_and_clean(guards, &server, &name, &[&a, &b]).await;
}

// ---------------------------------------------------------------- shutdown

/// A client whose owner holds the write lock and a read hold shuts down: both holds go (in
/// either order the shutdown sends them, the lock ends free), the readers waiting in another
/// client get the lock at once, the client's own waiter fails with `Closed`, and its guards
/// report themselves lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_a_writer_that_reads_and_wakes_the_waiting_readers() {
    let (server, closing, other, name) = setup_long_and_short("rw-shutdown-writer").await;
    let rw = closing.rw_lock(&name);
    let write = rw.write().lock().await.unwrap();
    let read = rw.read().lock().await.unwrap();
    let me = field(&closing, read.owner());
    let own_waiter = {
        let lock = closing.rw_lock(&name).read().owned_by(Owner::new());
        tokio::spawn(async move { lock.lock().await })
    };
    let readers: Vec<_> = (0..3)
        .map(|_| spawn_reader(other.rw_lock(&name).read()))
        .collect();
    until_waiting(&other, 3).await;
    until_waiting(&closing, 1).await;

    let closed = Instant::now();
    closing.shutdown().await.unwrap();
    let guards = all_served_promptly(readers, closed, "a reader after the shutdown").await;
    let error = tokio::time::timeout(PROMPT, own_waiter)
        .await
        .expect("the closed client's waiter still waits")
        .unwrap()
        .unwrap_err();
    assert!(error.is_closed(), "{error}");
    assert!(write.is_lost() && read.is_lost());
    let held = hash(&server, &name);
    assert_eq!(held.len(), 4, "mode and the three readers: {held:?}");
    assert!(!held.iter().any(|(f, _)| f.starts_with(&me)), "{held:?}");
    assert!(!common::raw_exists(&server, &timeout_key(&name, &me, 1)));
    assert_eq!(timeouts(&server, &name).len(), 3);
    assert!(write.unlock().await.unwrap_err().is_closed());
    assert!(read.unlock().await.unwrap_err().is_closed());
    release_and_clean(guards, &server, &name, &[&other]).await;
}

/// Readers of a client that shuts down leave: with another client's reader still in, the lock
/// stays read-locked and its TTL becomes that reader's; once it leaves too, a waiting writer
/// gets the lock at once. When the closing client's readers were the last, the shutdown itself
/// wakes the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_readers_and_the_last_ones_out_wake_a_waiting_writer() {
    let (server, other, name) = common::setup("rw-shutdown-readers", WATCHDOG).await;
    for with_another_reader in [true, false] {
        let closing = common::client(&server, LONG).await;
        let guards: Vec<LockGuard> = futures::future::join_all((0..2).map(|_| {
            let lock = closing.rw_lock(&name).read().owned_by(Owner::new());
            async move { lock.lock().await.unwrap() }
        }))
        .await;
        let staying = if with_another_reader {
            Some(read_hold(&other, &name, None).await)
        } else {
            None
        };
        let writer = spawn_writer(other.rw_lock(&name).write().owned_by(Owner::new()));
        until_claimed(&server, &name, "the waiting writer never claimed").await;
        assert!(common::raw_pttl(&server, &name) > WATCHDOG.as_millis() as i64);
        let closed = Instant::now();
        closing.shutdown().await.unwrap();
        assert!(guards.iter().all(LockGuard::is_lost));
        let released = match staying {
            Some(staying) => {
                let ttl = common::raw_pttl(&server, &name);
                assert!(
                    ttl > 0 && ttl <= WATCHDOG.as_millis() as i64,
                    "the lock's TTL {ttl} ms is not the staying reader's"
                );
                assert_eq!(timeouts(&server, &name).len(), 1);
                assert!(!writer.is_finished());
                let released = Instant::now();
                staying.unlock().await.unwrap();
                released
            }
            None => closed,
        };
        let write = served_promptly(writer, released, "the writer").await;
        write.unlock().await.unwrap();
        until_free(&server, &name, &[&other]).await;
    }
}

/// A client whose writer waits on a read-locked lock (and so claims it) shuts down: the claim
/// goes with it, so new readers of other clients are not kept out for a writer that is gone.
/// The waiter withdraws its claim itself when it gives up, but in the background, on a
/// connection the shutdown is closing: the shutdown withdraws it first. Ten rounds, as the
/// waiter's own withdrawal wins the race with the closing connection most of the time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_withdraws_a_waiting_writers_claim() {
    let (server, other, name, read) = setup_read_held("rw-shutdown-claim").await;
    for round in 0..10 {
        let label = format!("round {round}");
        let (closing, waiter) =
            claiming_writer(
                &server,
                &name,
                &label,
                |lock| async move { lock.lock().await },
            )
            .await;
        closing.shutdown().await.unwrap();
        assert!(
            !claimed(&server, &name),
            "{label}: the claim outlived its client"
        );
        let error = waiter.await.unwrap().unwrap_err();
        assert!(error.is_closed(), "{error}");
        let newcomer = other.rw_lock(&name).read().owned_by(Owner::new());
        let guard = newcomer.try_lock().await.unwrap();
        guard
            .expect("a new reader is kept out")
            .unlock()
            .await
            .unwrap();
    }
    release_and_clean(vec![read], &server, &name, &[&other]).await;
}

/// A writer waiting on a read-locked lock claims it, and new readers wait. When the writer gives
/// up (its wait runs out, its `lock()` is dropped, or its client shuts down), the readers it
/// kept out come in at once, not at the end of the readers' 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_kept_out_by_a_writer_that_gives_up_come_in_at_once() {
    let (server, readers, name, read) = setup_read_held("rw-writer-gives-up").await;
    for how in ["wait runs out", "dropped", "shutdown"] {
        let (writers, writer) = claiming_writer(&server, &name, how, |lock| async move {
            match how {
                "wait runs out" => lock.try_lock_for(ms(300), None).await.map(|g| g.is_none()),
                _ => lock.lock().await.map(|_| false),
            }
        })
        .await;
        let newcomer = spawn_reader(readers.rw_lock(&name).read().owned_by(Owner::new()));
        until_waiting(&readers, 1).await;
        match how {
            "wait runs out" => assert!(writer.await.unwrap().unwrap(), "the wait ran out"),
            "dropped" => {
                writer.abort();
                assert!(writer.await.unwrap_err().is_cancelled());
            }
            _ => {
                writers.shutdown().await.unwrap();
                assert!(writer.await.unwrap().unwrap_err().is_closed());
            }
        }
        let gave_up = Instant::now();
        let guard = served_promptly(newcomer, gave_up, how).await;
        assert!(!claimed(&server, &name), "{how}: the claim stayed");
        guard.unlock().await.unwrap();
        if how != "shutdown" {
            until_clean(
                &server,
                &name,
                &[&writers],
                &hash(&server, &name),
                &timeouts(&server, &name),
                how,
            )
            .await;
        }
    }
    release_and_clean(vec![read], &server, &name, &[&readers]).await;
}

// ---------------------------------------------------------------- wake-ups

/// Eight readers of one client wait while a writer of another holds the lock with a 60 s lease.
/// Its release wakes all of them at once: each gets the lock within `PROMPT` (a reader left
/// to its timer would wait out the 60 s), and they all hold it together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_release_wakes_every_waiting_reader_of_a_client_at_once() {
    const READERS: usize = 8;
    let (server, writer_client, readers_client, name) =
        common::setup_two("rw-wake-all", WATCHDOG).await;
    let write = writer_client
        .rw_lock(&name)
        .write()
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let waiting: Vec<_> = (0..READERS)
        .map(|_| spawn_reader(readers_client.rw_lock(&name).read()))
        .collect();
    until_waiting(&readers_client, READERS).await;
    let released = Instant::now();
    write.unlock().await.unwrap();
    let guards = all_served_promptly(waiting, released, "a reader after the write release").await;
    let held = hash(&server, &name);
    assert_eq!(held.len(), READERS + 1, "all readers at once: {held:?}");
    assert_eq!(timeouts(&server, &name).len(), READERS);
    release_and_clean(guards, &server, &name, &[&writer_client, &readers_client]).await;
}

// ---------------------------------------------------------------- writer starvation

/// Readers that never let the lock go free: `per_client` reader tasks on each of `clients`,
/// each taking a read hold, keeping it `hold`, releasing it and taking the next at once,
/// started `hold / n` apart so their holds overlap. Counts their holds until stopped.
struct Readers {
    stop: Arc<AtomicBool>,
    holds: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Readers {
    fn start(clients: &[&Client], per_client: usize, name: &str, hold: Duration) -> Readers {
        let stop = Arc::new(AtomicBool::new(false));
        let holds = Arc::new(AtomicU64::new(0));
        let n = (clients.len() * per_client) as u32;
        let mut tasks = Vec::new();
        for (i, client) in clients
            .iter()
            .flat_map(|c| std::iter::repeat(c).take(per_client))
            .enumerate()
        {
            let lock = client.rw_lock(name).read().owned_by(Owner::new());
            let (stop, holds) = (stop.clone(), holds.clone());
            let offset = hold * i as u32 / n;
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(offset).await;
                while !stop.load(Ordering::Relaxed) {
                    let guard = lock.lock().await.unwrap();
                    holds.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(hold).await;
                    guard.unlock().await.unwrap();
                }
            }));
        }
        Readers { stop, holds, tasks }
    }

    fn holds(&self) -> u64 {
        self.holds.load(Ordering::Relaxed)
    }

    /// Waits until the readers took `more` holds beyond what they had; false after `within`.
    async fn until_more(&self, more: u64, within: Duration) -> bool {
        let from = self.holds();
        common::eventually(within, || async { self.holds() >= from + more }).await
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            tokio::time::timeout(HANG, task)
                .await
                .expect("a reader hung")
                .unwrap();
        }
    }
}

/// Six readers on two clients keep the lock read-locked without a gap. A writer that starts
/// waiting gets the lock within a bound derived from the readers' hold (20 holds, each with the
/// measured time of a read hold's round trips): its claim keeps new readers out, so it waits
/// only for those in. After its release the readers go on. Three rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_not_starved_by_readers_that_keep_the_lock_busy() {
    let (server, a, b, name) = common::setup_two("rw-starve", WATCHDOG).await;
    // The floor: a read hold's lock + unlock on a free lock, median of 20.
    let mut pairs = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        a.rw_lock(&name)
            .read()
            .lock()
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
        pairs.push(started.elapsed());
    }
    pairs.sort();
    let pair = pairs[pairs.len() / 2];
    let hold = ms(100);
    let bound = (hold + pair) * 20;
    println!("read pair p50 {pair:?}; readers hold {hold:?}; the writer's bound {bound:?}");

    let readers = Readers::start(&[&a, &b], 3, &name, hold);
    assert!(
        readers.until_more(12, Duration::from_secs(10)).await,
        "the readers never ran"
    );
    let writer = a.rw_lock(&name).write().owned_by(Owner::new());
    for round in 0..3 {
        assert!(
            hash(&server, &name).contains(&("mode".to_owned(), "read".to_owned())),
            "round {round}: the readers do not hold the lock"
        );
        let started = Instant::now();
        let write = tokio::time::timeout(bound, writer.lock())
            .await
            .unwrap_or_else(|_| {
                panic!("round {round}: the writer starved for {bound:?} behind the readers")
            })
            .unwrap();
        let waited = started.elapsed();
        println!("round {round}: the writer waited {waited:?}");
        assert_eq!(hash(&server, &name).len(), 2, "readers beside the writer");
        let during = readers.holds();
        tokio::time::sleep(hold).await;
        assert_eq!(readers.holds(), during, "a reader got in beside the writer");
        write.unlock().await.unwrap();
        assert!(
            readers.until_more(6, Duration::from_secs(10)).await,
            "round {round}: the readers did not go on after the writer"
        );
    }
    readers.stop().await;
    until_free(&server, &name, &[&a, &b]).await;
}

/// A read hold taken with a fixed lease and re-entered under the watchdog is renewed as a
/// reader: the watchdog hold's own timeout key outlives several leases, so a writer stays out;
/// once that hold is released, the lapsed fixed hold keeps nothing alive and the writer gets in.
#[tokio::test]
async fn a_fixed_read_hold_re_entered_under_the_watchdog_is_renewed_as_a_reader() {
    let watchdog = ms(600);
    let (server, a, b, name) = common::setup_two("rw-fixed-then-watchdog", watchdog).await;
    let rw = a.rw_lock(&name);
    let fixed = rw.read().lock_with_lease(ms(400)).await.unwrap();
    let me = field(&a, fixed.owner());
    let renewed = rw.read().lock().await.unwrap();
    assert_eq!(renewed.hold_count().await.unwrap(), 2);

    // Past the fixed lease and several watchdog leases.
    tokio::time::sleep(watchdog * 4).await;
    assert!(!renewed.is_lost(), "the watchdog hold was lost");
    let left = common::raw_pttl(&server, &timeout_key(&name, &me, 2));
    assert!(left > 0, "the watchdog hold's timeout key lapsed ({left})");
    let writer = b.rw_lock(&name).write();
    assert!(
        writer.try_lock().await.unwrap().is_none(),
        "a writer got in past a renewed reader"
    );

    renewed.unlock().await.unwrap();
    drop(fixed);
    let write = writer
        .try_lock_for(Duration::from_secs(5), None)
        .await
        .unwrap()
        .expect("the writer once the renewed hold was released");
    write.unlock().await.unwrap();
}

/// A plain `Lock::force_unlock` on a name held as a read-write lock ends it whatever its mode,
/// and takes the readers' timeout keys with the hash: none is left behind.
#[tokio::test]
async fn a_plain_force_unlock_of_a_read_held_name_leaves_no_timeout_keys() {
    let (server, client, name) = common::setup("rw-plain-force", Duration::from_secs(5)).await;
    let first = read_hold(&client, &name, None).await;
    let second = read_hold(&client, &name, None).await;
    let timeouts = format!("{{{name}}}:*rwlock_timeout*");
    let keys = |pattern: &str| common::family::raw_keys(&server, pattern);
    assert_eq!(keys(&timeouts).len(), 2, "one timeout key per reader");

    assert!(client.lock(name.clone()).force_unlock().await.unwrap());
    assert!(!common::raw_exists(&server, &name));
    assert!(
        keys(&timeouts).is_empty(),
        "timeout keys left: {:?}",
        keys(&timeouts)
    );
    for guard in [first, second] {
        assert!(
            guard.unlock().await.is_err(),
            "a forced reader released something"
        );
    }
    assert!(keys(&format!("*{name}*")).is_empty());
}

/// Two readers, the first with a 200 ms lease, the second with 10 s. Once the first's lease ran
/// out its guard is lost, its client drops its field from the hash soon after, and the queries
/// agree: its owner holds nothing; the second reader still holds.
#[tokio::test]
async fn a_lapsed_reader_holds_nothing_for_the_queries_either() {
    let (server, client, name) = common::setup("rw-lapsed-reader", Duration::from_secs(5)).await;
    let rw = client.rw_lock(name.clone());
    let (short_owner, long_owner) = (relock::Owner::new(), relock::Owner::new());
    let short_side = rw.read().owned_by(short_owner.clone());
    let long_side = rw.read().owned_by(long_owner.clone());
    let short = short_side
        .lock_with_lease(Duration::from_millis(200))
        .await
        .unwrap();
    let long = long_side
        .lock_with_lease(Duration::from_secs(10))
        .await
        .unwrap();
    let short_field = format!("{}:{}", client.id(), short_owner.id());
    tokio::time::timeout(Duration::from_secs(10), short.lost())
        .await
        .expect("the short lease never ended");
    // The timeout key is gone with the lease, on the server's clock too.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            common::family::raw_keys(&server, &format!("{{{name}}}:{short_field}:*")).is_empty()
        })
        .await
    );
    assert!(short.is_lost());
    // Its client drops the field soon after the lease ends, with no query to meet it (the
    // hash lives on for the second reader's 10 s).
    assert!(
        common::eventually(Duration::from_secs(3), || async {
            !common::raw_hexists(&server, &name, &short_field)
        })
        .await,
        "the lapsed reader's field outlived its lease"
    );
    assert_eq!(short_side.hold_count().await.unwrap(), 0);
    assert!(!short_side.is_held_by_current_owner().await.unwrap());
    assert_eq!(long_side.hold_count().await.unwrap(), 1);
    assert!(rw.read().is_locked().await.unwrap());
    assert!(short.unlock().await.unwrap_err().is_lease_lost());
    long.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}
