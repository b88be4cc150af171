//! relock's `Semaphore`, `PermitSemaphore` and `CountDownLatch` beside Redisson's `RSemaphore`,
//! `RPermitExpirableSemaphore` and `RCountDownLatch` (the peer of `common::redisson_sync`) on the
//! same names, one real server per test: together they never lend more permits than there are,
//! each side's releases wake the other side's waiters, a latch is one latch whoever sets, counts
//! down or deletes it, and a lease that lapses on one side is the other side's to take.
//!
//! A relock waiter here polls only every 60 s (`polling_client`) and a Redisson waiter without a
//! lease to wait for does not poll at all, so a wake-up within `PROMPT` comes from a message.
//! Before a test sends a wake-up it waits until the waiters are parked: registered, and past the
//! attempt they make once subscribed. The server counts those attempts: relock runs its scripts
//! by EVALSHA, the peer by EVAL, and the peer's latch reads its count by GET.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::redisson_sync::{now_ms, Redisson, NO_LEASE};
use common::{
    eventually, latch_channel, leases_key, polling_client, raw_command_calls, raw_count,
    raw_exists, raw_script_calls, raw_zrange_hex, semaphore_channel, RawSubscriber, RedisServer,
    HANG, PROMPT,
};
use fred::interfaces::{KeysInterface, LuaInterface};
use fred::types::Value;
use tokio::task::JoinHandle;

/// How long a test waits for a state it expects.
const SOON: Duration = Duration::from_secs(5);

/// How long both sides take and give back permits in the conservation tests.
const RUN: Duration = Duration::from_secs(2);

/// A lease no test outlives.
const LONG_LEASE: Duration = Duration::from_secs(30);

// ---- Helpers ----

/// Spawns `future`; the task returns when it ended, and what it gave.
fn spawn_timed<F>(future: F) -> JoinHandle<(Instant, F::Output)>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(async move {
        let out = future.await;
        (Instant::now(), out)
    })
}

/// Awaits a spawned task for at most [`HANG`].
async fn join<T>(task: JoinHandle<T>, what: &str) -> T {
    tokio::time::timeout(HANG, task)
        .await
        .unwrap_or_else(|_| panic!("{what}: hung"))
        .unwrap_or_else(|e| panic!("{what}: failed: {e}"))
}

/// Awaits a waiter spawned with [`spawn_timed`] and checks it went on within [`PROMPT`] of
/// `since`, when its wake-up was sent.
async fn prompt<T>(task: JoinHandle<(Instant, T)>, since: Instant, what: &str) -> T {
    let (at, out) = join(task, what).await;
    let after = at.saturating_duration_since(since);
    eprintln!("{what}: went on {after:?} after the wake-up was sent");
    assert!(
        after < PROMPT,
        "{what}: went on {after:?} after the wake-up was sent: no message woke it"
    );
    out
}

/// Waits until `client` has `waiters` waiters registered and the server has run at least
/// `evalsha` EVALSHAs: relock's first waiter on a channel tries once before it subscribes and
/// once after, and parks; those that come after it park behind it without trying.
async fn relock_parked(
    server: &RedisServer,
    client: &relock::Client,
    waiters: usize,
    evalsha: u64,
) {
    let parked = eventually(SOON, || async {
        client.stats().waiters == waiters && raw_script_calls(server) >= evalsha
    })
    .await;
    assert!(
        parked,
        "relock never had {waiters} waiter(s) parked: {:?}, {} EVALSHA of {evalsha}",
        client.stats(),
        raw_script_calls(server)
    );
}

/// Waits until the process `java` has `waiters` waiters on `channel` and the server has run
/// `command` at least `calls` times: each Redisson waiter tries once before it subscribes and
/// once after, and parks.
async fn java_parked(
    server: &RedisServer,
    java: &Redisson,
    channel: &str,
    waiters: usize,
    command: &str,
    calls: u64,
) {
    let parked = eventually(SOON, || async {
        java.local_waiters(channel) == waiters && raw_command_calls(server, command) >= calls
    })
    .await;
    assert!(
        parked,
        "Redisson never had {waiters} waiter(s) parked on {channel}: {}, {} {command} of {calls}",
        java.local_waiters(channel),
        raw_command_calls(server, command)
    );
}

/// Waits until the wall clock is past `epoch_ms` (a lease end).
async fn until_past(epoch_ms: i64) {
    assert!(
        eventually(SOON, || async { now_ms() > epoch_ms }).await,
        "the clock never passed {epoch_ms}"
    );
}

/// The permits out in `leases`, as hex ids, by lease end.
fn permits_out(server: &RedisServer, leases: &str) -> Vec<String> {
    raw_zrange_hex(server, leases)
        .into_iter()
        .map(|(id, _)| id)
        .collect()
}

/// The lease end (epoch ms) of permit `id` in `leases`.
fn lease_end(server: &RedisServer, leases: &str, id: &str) -> i64 {
    raw_zrange_hex(server, leases)
        .into_iter()
        .find(|(member, _)| member == id)
        .map(|(_, score)| score)
        .unwrap_or_else(|| panic!("permit {id} is not in {leases}"))
}

/// An integer reply, as text or as an integer.
fn int(value: &Value) -> i64 {
    match value {
        Value::Integer(n) => *n,
        Value::String(s) => s.parse().expect("an integer"),
        Value::Bytes(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .expect("an integer"),
        other => panic!("not an integer: {other:?}"),
    }
}

/// Holds a permit a little while (0 to 7 ms), as work would.
async fn work() {
    tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 8)).await;
}

// ---- 1. Never more permits out than there are ----

/// Which side holds a permit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Relock,
    Java,
}

/// What both sides' tasks did with a semaphore's permits (its holders are known to nobody but
/// them). A sample of the counter is not atomic with the tasks, so each tally only grows and is
/// bumped before its command is sent (`asked`, `returning`) or after its reply came (the others):
/// tallies read before a sample and after it bound the permits out at the sample both ways.
struct Ledger {
    permits: i64,
    /// Permits asked for by acquires sent.
    asked: AtomicI64,
    /// Permits asked for by acquires that came back without them.
    refused: AtomicI64,
    /// Permits taken by acquires that came back with them.
    taken: AtomicI64,
    /// Permits given back by releases sent.
    returning: AtomicI64,
    /// Permits given back by releases that came back.
    returned: AtomicI64,
    /// Permits held now (taken, not yet being given back), by both sides, and by each.
    out: AtomicI64,
    relock_out: AtomicI64,
    java_out: AtomicI64,
    /// Acquires that took permits, by side.
    relock_took: AtomicI64,
    java_took: AtomicI64,
}

/// Tallies read before a sample: taken, refused, returned.
type Before = [i64; 3];

impl Ledger {
    fn new(permits: i64) -> Ledger {
        Ledger {
            permits,
            asked: AtomicI64::new(0),
            refused: AtomicI64::new(0),
            taken: AtomicI64::new(0),
            returning: AtomicI64::new(0),
            returned: AtomicI64::new(0),
            out: AtomicI64::new(0),
            relock_out: AtomicI64::new(0),
            java_out: AtomicI64::new(0),
            relock_took: AtomicI64::new(0),
            java_took: AtomicI64::new(0),
        }
    }

    fn side(&self, side: Side) -> (&AtomicI64, &AtomicI64) {
        match side {
            Side::Relock => (&self.relock_out, &self.relock_took),
            Side::Java => (&self.java_out, &self.java_took),
        }
    }

    fn asking(&self, k: i64) {
        self.asked.fetch_add(k, Ordering::SeqCst);
    }

    fn refused(&self, k: i64) {
        self.refused.fetch_add(k, Ordering::SeqCst);
    }

    /// `side` holds `k` more permits: never more out than there are.
    fn took(&self, side: Side, k: i64) {
        self.taken.fetch_add(k, Ordering::SeqCst);
        let before = self.out.fetch_add(k, Ordering::SeqCst);
        let (out, took) = self.side(side);
        out.fetch_add(k, Ordering::SeqCst);
        took.fetch_add(1, Ordering::SeqCst);
        assert!(
            before + k <= self.permits,
            "{side:?} took {k} permit(s) with {before} out already: more than the {} there are \
             (relock holds {}, Redisson {})",
            self.permits,
            self.relock_out.load(Ordering::SeqCst),
            self.java_out.load(Ordering::SeqCst)
        );
    }

    fn giving_back(&self, side: Side, k: i64) {
        self.side(side).0.fetch_sub(k, Ordering::SeqCst);
        self.out.fetch_sub(k, Ordering::SeqCst);
        self.returning.fetch_add(k, Ordering::SeqCst);
    }

    fn gave_back(&self, k: i64) {
        self.returned.fetch_add(k, Ordering::SeqCst);
    }

    fn before(&self) -> Before {
        [
            self.taken.load(Ordering::SeqCst),
            self.refused.load(Ordering::SeqCst),
            self.returned.load(Ordering::SeqCst),
        ]
    }

    /// Checks `available`, the counter sampled after `before` was read: it is never below 0,
    /// and the permits it says are out are between what the tasks surely held during the
    /// sample and what they may have held.
    fn check(&self, before: Before, available: i64) {
        let [taken, refused, returned] = before;
        let asked = self.asked.load(Ordering::SeqCst);
        let returning = self.returning.load(Ordering::SeqCst);
        let out = self.permits - available;
        assert!(available >= 0, "the counter went below 0: {available}");
        assert!(
            out <= asked - refused - returned,
            "{out} permits out, more than the tasks may hold: {asked} asked - {refused} refused \
             - {returned} given back"
        );
        assert!(
            out >= taken - returning,
            "{out} permits out, fewer than the tasks hold: {taken} taken - {returning} given back"
        );
    }
}

/// Relock tasks and Redisson tasks (several of each, over two clients and two processes) take
/// 1 or 2 permits of one `Semaphore` at a time and give them back, for a couple of seconds,
/// while the counter is sampled: never more permits out than there are, the counter never
/// below 0, every permit accounted for; at the end every permit is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_are_conserved_across_relock_and_redisson() {
    const PERMITS: i64 = 4;
    let server = RedisServer::start();
    let name = common::prefix("compat-sem-total");
    let relocks = [
        common::client(&server, LONG_LEASE).await,
        common::client(&server, LONG_LEASE).await,
    ];
    let javas = [
        Redisson::connect(&server).await,
        Redisson::connect(&server).await,
    ];
    let sem = relocks[0].semaphore(name.clone());
    assert!(sem.try_set_permits(PERMITS as u64).await.unwrap());
    let ledger = Arc::new(Ledger::new(PERMITS));
    let stop = Instant::now() + RUN;

    let mut tasks = Vec::new();
    for i in 0..3u32 {
        let sem = relocks[i as usize % 2].semaphore(name.clone());
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            let mut round = i;
            while Instant::now() < stop {
                round += 1;
                let k = 1 + round % 2;
                ledger.asking(k.into());
                let took = if round % 3 == 0 {
                    let wait = Duration::from_millis(20);
                    sem.try_acquire_for(k, wait).await.expect("try_acquire_for")
                } else {
                    sem.acquire(k).await.expect("acquire");
                    true
                };
                if !took {
                    ledger.refused(k.into());
                    continue;
                }
                ledger.took(Side::Relock, k.into());
                work().await;
                ledger.giving_back(Side::Relock, k.into());
                sem.release(k).await.expect("release");
                ledger.gave_back(k.into());
            }
        }));
    }
    for i in 0..3u32 {
        let sem = javas[i as usize % 2].semaphore(name.clone());
        let ledger = ledger.clone();
        tasks.push(tokio::spawn(async move {
            let mut round = i;
            while Instant::now() < stop {
                round += 1;
                let k = 1 + round % 2;
                ledger.asking(k.into());
                let took = if round % 3 == 1 {
                    sem.try_acquire_for(k, Duration::from_millis(20)).await
                } else {
                    sem.acquire(k).await;
                    true
                };
                if !took {
                    ledger.refused(k.into());
                    continue;
                }
                ledger.took(Side::Java, k.into());
                work().await;
                ledger.giving_back(Side::Java, k.into());
                sem.release(k).await;
                ledger.gave_back(k.into());
            }
        }));
    }

    let redis = common::fred_client(&server).await;
    let mut samples = 0u32;
    while tasks.iter().any(|task| !task.is_finished()) {
        let before = ledger.before();
        let available: Option<i64> = redis.get(name.as_str()).await.expect("GET");
        ledger.check(before, available.expect("the counter exists"));
        samples += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for task in tasks {
        join(task, "a task taking and giving back permits").await;
    }
    let (relock_took, java_took) = (
        ledger.relock_took.load(Ordering::SeqCst),
        ledger.java_took.load(Ordering::SeqCst),
    );
    eprintln!("{samples} samples; relock took permits {relock_took} times, Redisson {java_took}");
    assert!(samples > 10, "only {samples} samples");
    assert!(relock_took > 0 && java_took > 0, "both sides took permits");

    assert_eq!(ledger.out.load(Ordering::SeqCst), 0);
    assert_eq!(
        raw_count(&server, &name),
        Some(PERMITS),
        "every permit is back"
    );
    assert_eq!(sem.available_permits().await.unwrap(), PERMITS);
    assert_eq!(
        javas[0].semaphore(name.clone()).available_permits().await,
        PERMITS
    );
}

/// The permit ids each side holds now.
struct Holders {
    permits: usize,
    ids: Mutex<HashMap<String, Side>>,
}

impl Holders {
    /// `side` holds `id` now: a new id, and never more out than there are.
    fn took(&self, side: Side, id: &str) {
        let mut ids = self.ids.lock().unwrap();
        let before = ids.insert(id.to_owned(), side);
        assert_eq!(before, None, "{side:?} got permit {id}, held already");
        assert!(
            ids.len() <= self.permits,
            "{side:?} took a permit with {} out already: more than the {} there are ({ids:?})",
            ids.len() - 1,
            self.permits
        );
    }

    fn giving_back(&self, id: &str) {
        self.ids.lock().unwrap().remove(id);
    }

    fn ids(&self) -> HashSet<String> {
        self.ids.lock().unwrap().keys().cloned().collect()
    }
}

/// The count and the permits out (hex ids) of a permit semaphore, read at one moment.
const PERMIT_STATE: &str = r"
local available = redis.call('get', KEYS[1])
local ids = redis.call('zrange', KEYS[2], 0, -1)
for i = 1, #ids do
    ids[i] = (string.gsub(ids[i], '.', function(c) return string.format('%02x', string.byte(c)) end))
end
return {available, ids}
";

/// Relock tasks and Redisson tasks (several of each, over two clients and two processes) take
/// permits of one `PermitSemaphore` (relock: watchdog-renewed and fixed leases; Redisson: with
/// a lease and without, as its default `acquire()` takes them) and give them back (relock:
/// `release` or a dropped `Permit`; Redisson: `release(id)`) for a couple of seconds, while the
/// count and the leases are sampled at once: the count never below 0, count + permits out
/// always the total, every permit a task holds in the leases, and both sides agreeing on the
/// total; at the end every permit is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_semaphore_permits_are_conserved_across_relock_and_redisson() {
    const PERMITS: usize = 3;
    let server = RedisServer::start();
    let name = common::prefix("compat-pes-total");
    let leases = leases_key(&name);
    let relocks = [
        common::client(&server, LONG_LEASE).await,
        common::client(&server, LONG_LEASE).await,
    ];
    let javas = [
        Redisson::connect(&server).await,
        Redisson::connect(&server).await,
    ];
    let pes = relocks[0].permit_semaphore(name.clone());
    let jpes = javas[0].permit_semaphore(name.clone());
    assert!(jpes.try_set_permits(PERMITS as i64).await);
    let holders = Arc::new(Holders {
        permits: PERMITS,
        ids: Mutex::default(),
    });
    let stop = Instant::now() + RUN;
    let short = Duration::from_millis(20);

    let mut tasks = Vec::new();
    for i in 0..3u32 {
        let pes = relocks[i as usize % 2].permit_semaphore(name.clone());
        let holders = holders.clone();
        tasks.push(tokio::spawn(async move {
            let mut round = i;
            while Instant::now() < stop {
                round += 1;
                let permit = match round % 4 {
                    0 => Some(pes.acquire().await.expect("acquire")),
                    1 => Some(pes.acquire_with_lease(LONG_LEASE).await.expect("acquire")),
                    2 => pes
                        .try_acquire_for(short, None)
                        .await
                        .expect("try_acquire_for"),
                    _ => pes
                        .try_acquire_for(short, Some(LONG_LEASE))
                        .await
                        .expect("try"),
                };
                let Some(permit) = permit else { continue };
                holders.took(Side::Relock, permit.id());
                work().await;
                holders.giving_back(permit.id());
                if (round / 4) % 2 == 0 {
                    permit.release().await.expect("release");
                } else {
                    drop(permit); // given back in the background
                }
            }
        }));
    }
    for i in 0..3u32 {
        let jpes = javas[i as usize % 2].permit_semaphore(name.clone());
        let holders = holders.clone();
        tasks.push(tokio::spawn(async move {
            let mut round = i;
            while Instant::now() < stop {
                round += 1;
                let id = match round % 4 {
                    0 => Some(jpes.acquire().await),
                    1 => Some(jpes.acquire_with_lease(LONG_LEASE).await),
                    2 => jpes.try_acquire_for(short, None).await,
                    _ => jpes.try_acquire_for(short, Some(LONG_LEASE)).await,
                };
                let Some(id) = id else { continue };
                holders.took(Side::Java, &id);
                work().await;
                holders.giving_back(&id);
                assert!(jpes.release(&id).await, "Redisson's release of {id} failed");
            }
        }));
    }

    let redis = common::fred_client(&server).await;
    let mut samples = 0u32;
    while tasks.iter().any(|task| !task.is_finished()) {
        let before = holders.ids();
        let keys = vec![name.clone(), leases.clone()];
        let state: Value = redis
            .eval(PERMIT_STATE, keys, Vec::<Value>::new())
            .await
            .expect("EVAL");
        let after = holders.ids();
        let Value::Array(state) = state else {
            panic!("bad state reply {state:?}");
        };
        let available = int(&state[0]);
        let out: HashSet<String> = match &state[1] {
            Value::Array(ids) => ids
                .iter()
                .map(|id| id.as_string().expect("a hex id"))
                .collect(),
            other => panic!("bad ids {other:?}"),
        };
        assert!(available >= 0, "the count went below 0: {available}");
        assert_eq!(
            available + out.len() as i64,
            PERMITS as i64,
            "count {available} + {} out is not the total",
            out.len()
        );
        for id in before.intersection(&after) {
            assert!(
                out.contains(id),
                "permit {id}, held all through the sample, is not in the leases {out:?}"
            );
        }
        if samples % 16 == 0 {
            assert_eq!(
                pes.permits().await.unwrap(),
                PERMITS as i64,
                "relock's total"
            );
            assert_eq!(jpes.permits().await, PERMITS as i64, "Redisson's total");
        }
        samples += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for task in tasks {
        join(task, "a task taking and giving back permits").await;
    }
    eprintln!("{samples} samples");
    assert!(samples > 10, "only {samples} samples");

    // Dropped permits are given back in the background.
    for relock in &relocks {
        assert!(eventually(SOON, || async { relock.stats().in_flight == 0 }).await);
        assert_eq!(relock.stats().holds, 0);
    }
    assert_eq!(
        raw_count(&server, &name),
        Some(PERMITS as i64),
        "every permit is back"
    );
    assert!(!raw_exists(&server, &leases), "no permit is out");
    assert_eq!(pes.available_permits().await.unwrap(), PERMITS as i64);
    assert_eq!(pes.acquired_permits().await.unwrap(), 0);
    assert_eq!(jpes.available_permits().await, PERMITS as i64);
}

// ---- 2. Each side's releases wake the other side's waiters ----

/// A relock waiter on a `Semaphore` (polling every 60 s) is woken at once by Redisson's
/// `release` and by its `addPermits`.
#[tokio::test]
async fn relock_semaphore_waiter_is_woken_by_redisson_release_and_add_permits() {
    let server = RedisServer::start();
    let client = polling_client(&server, Duration::from_secs(60)).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-sem-wake-relock");
    let sem = client.semaphore(name.clone());
    let jsem = java.semaphore(name.clone());
    assert!(jsem.try_set_permits(0).await);
    assert!(!sem.try_acquire(1).await.unwrap(), "none to take"); // the script is loaded

    for how in ["release(1)", "addPermits(1)"] {
        let base = raw_script_calls(&server);
        let waiter = spawn_timed({
            let sem = sem.clone();
            async move { sem.acquire(1).await }
        });
        relock_parked(&server, &client, 1, base + 2).await;
        let sent = Instant::now();
        if how == "release(1)" {
            jsem.release(1).await;
        } else {
            jsem.add_permits(1).await;
        }
        let what = format!("relock's acquire(1) after Redisson's {how}");
        prompt(waiter, sent, &what).await.unwrap();
        assert_eq!(raw_count(&server, &name), Some(0), "relock took the permit");
        assert_eq!(client.stats().waiters, 0);
    }
}

/// A relock waiter on a `PermitSemaphore` (polling every 60 s; the permit out has no lease, so
/// no lease end bounds its wait) is woken at once by Redisson's `release(id)` and by its
/// `addPermits`.
#[tokio::test]
async fn relock_permit_waiter_is_woken_by_redisson_release_and_add_permits() {
    let server = RedisServer::start();
    let client = polling_client(&server, Duration::from_secs(60)).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-pes-wake-relock");
    let leases = leases_key(&name);
    let pes = client.permit_semaphore(name.clone());
    let jpes = java.permit_semaphore(name.clone());
    assert!(jpes.try_set_permits(1).await);

    for how in ["release(id)", "addPermits(1)"] {
        let held = jpes.acquire().await; // Redisson's default: no lease
        assert!(
            pes.try_acquire().await.unwrap().is_none(),
            "Redisson holds it"
        );
        let base = raw_script_calls(&server);
        let waiter = spawn_timed({
            let pes = pes.clone();
            async move { pes.acquire().await }
        });
        relock_parked(&server, &client, 1, base + 2).await;
        let sent = Instant::now();
        if how == "release(id)" {
            assert!(jpes.release(&held).await);
        } else {
            jpes.add_permits(1).await;
        }
        let what = format!("relock's acquire() after Redisson's {how}");
        let permit = prompt(waiter, sent, &what).await.unwrap();
        let mut out = permits_out(&server, &leases);
        out.sort();
        let mut expected = vec![permit.id().to_owned()];
        if how != "release(id)" {
            expected.push(held.clone());
        }
        expected.sort();
        assert_eq!(out, expected);
        permit.release().await.unwrap();
        if how != "release(id)" {
            assert!(jpes.release(&held).await);
        }
    }
    assert_eq!(
        raw_count(&server, &name),
        Some(2),
        "one permit, and one added"
    );
    assert!(!raw_exists(&server, &leases));
}

/// A Redisson waiter on an `RSemaphore` (which does not poll) is woken at once by relock's
/// `release` and by its `add_permits`.
#[tokio::test]
async fn redisson_semaphore_waiter_is_woken_by_relock_release_and_add_permits() {
    let server = RedisServer::start();
    let client = common::client(&server, LONG_LEASE).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-sem-wake-java");
    let sem = client.semaphore(name.clone());
    let jsem = java.semaphore(name.clone());
    let channel = semaphore_channel(&name);
    assert!(sem.try_set_permits(0).await.unwrap());

    for how in ["release(1)", "add_permits(1)"] {
        let base = raw_command_calls(&server, "eval");
        let waiter = spawn_timed({
            let jsem = jsem.clone();
            async move { jsem.acquire(1).await }
        });
        java_parked(&server, &java, &channel, 1, "eval", base + 2).await;
        let sent = Instant::now();
        if how == "release(1)" {
            sem.release(1).await.unwrap();
        } else {
            sem.add_permits(1).await.unwrap();
        }
        prompt(
            waiter,
            sent,
            &format!("Redisson's acquire(1) after relock's {how}"),
        )
        .await;
        assert_eq!(
            raw_count(&server, &name),
            Some(0),
            "Redisson took the permit"
        );
    }
}

/// A Redisson waiter on an `RPermitExpirableSemaphore` (which sleeps until the earliest lease
/// end, a minute away here, or for good when no lease is out) is woken at once by relock's
/// `Permit::release`, by a dropped `Permit`, by `add_permits`, and by relock reclaiming a lease
/// that lapsed (`available_permits`): Redisson's waiter, parked before that lease was set, would
/// not look by itself.
#[tokio::test]
async fn redisson_permit_waiter_is_woken_by_relock_releases_additions_and_reclaims() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(60)).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-pes-wake-java");
    let leases = leases_key(&name);
    let channel = semaphore_channel(&name);
    let pes = client.permit_semaphore(name.clone());
    let jpes = java.permit_semaphore(name.clone());
    assert!(pes.try_set_permits(1).await.unwrap());

    for how in ["Permit::release", "a dropped Permit", "add_permits(1)"] {
        let permit = pes.acquire().await.unwrap();
        let base = raw_command_calls(&server, "eval");
        let waiter = spawn_timed({
            let jpes = jpes.clone();
            async move { jpes.acquire().await }
        });
        java_parked(&server, &java, &channel, 1, "eval", base + 2).await;
        let sent = Instant::now();
        let kept = match how {
            "Permit::release" => {
                permit.release().await.unwrap();
                None
            }
            "a dropped Permit" => {
                drop(permit);
                None
            }
            _ => {
                pes.add_permits(1).await.unwrap();
                Some(permit)
            }
        };
        let what = format!("Redisson's acquire() after relock's {how}");
        let id = prompt(waiter, sent, &what).await;
        assert_eq!(
            lease_end(&server, &leases, &id),
            NO_LEASE,
            "Redisson's default"
        );
        assert!(jpes.release(&id).await);
        if let Some(permit) = kept {
            permit.release().await.unwrap();
        }
    }
    assert_eq!(
        raw_count(&server, &name),
        Some(2),
        "one permit, and one added"
    );

    // Another process takes both permits without a lease; the waiter finds no lease to wait
    // for and parks for good. Then one permit gets a short lease (`updateLeaseTime`, which
    // publishes nothing) that lapses: only relock's reclaim announces it.
    let holder = Redisson::connect(&server).await;
    let hpes = holder.permit_semaphore(name.clone());
    let (lapsing, kept) = (hpes.acquire().await, hpes.acquire().await);
    let base = raw_command_calls(&server, "eval");
    let waiter = spawn_timed({
        let jpes = jpes.clone();
        async move { jpes.acquire().await }
    });
    java_parked(&server, &java, &channel, 1, "eval", base + 2).await;
    assert!(
        hpes.update_lease_time(&lapsing, Some(Duration::from_millis(100)))
            .await
    );
    until_past(lease_end(&server, &leases, &lapsing)).await;
    assert!(!waiter.is_finished(), "nothing told the waiter");
    let sent = Instant::now();
    assert_eq!(
        pes.available_permits().await.unwrap(),
        1,
        "relock reclaimed it"
    );
    let id = prompt(waiter, sent, "Redisson's acquire() after relock's reclaim").await;
    let mut out = permits_out(&server, &leases);
    out.sort();
    let mut expected = vec![id, kept];
    expected.sort();
    assert_eq!(out, expected);
    assert!(!hpes.release(&lapsing).await, "reclaimed");
}

/// A relock release of k permits wakes k Redisson waiters of one process (the process's
/// wake-up count), and one permit more lets in the last; a Redisson waiter for 2 permits is
/// woken by relock's release of 1, finds too few and waits on, and the next release lets it in.
#[tokio::test]
async fn a_relock_release_of_k_permits_wakes_k_redisson_waiters() {
    let server = RedisServer::start();
    let client = common::client(&server, LONG_LEASE).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-sem-k-java");
    let sem = client.semaphore(name.clone());
    let jsem = java.semaphore(name.clone());
    let channel = semaphore_channel(&name);
    assert!(sem.try_set_permits(0).await.unwrap());

    let base = raw_command_calls(&server, "eval");
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let jsem = jsem.clone();
            spawn_timed(async move { jsem.acquire(1).await })
        })
        .collect();
    java_parked(&server, &java, &channel, 4, "eval", base + 8).await;
    assert_eq!(java.wakeups(&channel), 0);

    let sent = Instant::now();
    sem.release(3).await.unwrap();
    let three_in = eventually(PROMPT, || async {
        waiters.iter().filter(|w| w.is_finished()).count() == 3
    })
    .await;
    assert!(
        three_in,
        "relock's release(3) did not let 3 Redisson waiters in at once"
    );
    eprintln!(
        "3 Redisson waiters went on {:?} after relock's release(3)",
        sent.elapsed()
    );
    assert_eq!(
        java.wakeups(&channel),
        3,
        "the message woke 3 waiters of the process"
    );
    assert_eq!(raw_count(&server, &name), Some(0));
    assert!(eventually(SOON, || async { java.local_waiters(&channel) == 1 }).await);

    let sent = Instant::now();
    sem.release(1).await.unwrap();
    assert!(
        eventually(PROMPT, || async { waiters.iter().all(|w| w.is_finished()) }).await,
        "relock's release(1) did not let the last Redisson waiter in"
    );
    eprintln!(
        "the last Redisson waiter went on {:?} after relock's release(1)",
        sent.elapsed()
    );
    for waiter in waiters {
        join(waiter, "Redisson's acquire(1)").await;
    }
    assert_eq!(raw_count(&server, &name), Some(0));
    assert!(eventually(SOON, || async { java.local_waiters(&channel) == 0 }).await);

    // A waiter for 2 permits, fed one at a time.
    let base = raw_command_calls(&server, "eval");
    let waiter = spawn_timed({
        let jsem = jsem.clone();
        async move { jsem.acquire(2).await }
    });
    java_parked(&server, &java, &channel, 1, "eval", base + 2).await;
    sem.release(1).await.unwrap();
    let tried_again = eventually(SOON, || async {
        java.wakeups(&channel) == 1 && raw_command_calls(&server, "eval") >= base + 3
    })
    .await;
    assert!(
        tried_again,
        "relock's release(1) did not wake the Redisson waiter"
    );
    assert!(!waiter.is_finished(), "1 permit of 2");
    let sent = Instant::now();
    sem.release(1).await.unwrap();
    prompt(
        waiter,
        sent,
        "Redisson's acquire(2) after relock's second release(1)",
    )
    .await;
    assert_eq!(raw_count(&server, &name), Some(0));
}

/// A Redisson release of k permits wakes k relock waiters of one client at once, and one
/// permit more lets in the last; a relock waiter for 2 permits is woken by Redisson's release
/// of 1, finds too few and waits on, and the next release lets it in.
#[tokio::test]
async fn a_redisson_release_of_k_permits_wakes_k_relock_waiters() {
    let server = RedisServer::start();
    let client = polling_client(&server, Duration::from_secs(60)).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-sem-k-relock");
    let sem = client.semaphore(name.clone());
    let jsem = java.semaphore(name.clone());
    assert!(jsem.try_set_permits(0).await);
    assert!(!sem.try_acquire(1).await.unwrap(), "none to take"); // the script is loaded

    // One at a time, so that each parks behind the one before (without an attempt).
    let base = raw_script_calls(&server);
    let mut waiters = Vec::new();
    for n in 1..=4 {
        let sem = sem.clone();
        waiters.push(spawn_timed(async move { sem.acquire(1).await }));
        relock_parked(&server, &client, n, base + 2).await;
    }

    let sent = Instant::now();
    jsem.release(3).await;
    let three_in = eventually(PROMPT, || async {
        waiters.iter().filter(|w| w.is_finished()).count() == 3
    })
    .await;
    assert!(
        three_in,
        "Redisson's release(3) did not let 3 relock waiters in at once"
    );
    eprintln!(
        "3 relock waiters went on {:?} after Redisson's release(3)",
        sent.elapsed()
    );
    assert_eq!(raw_count(&server, &name), Some(0));
    assert_eq!(client.stats().waiters, 1);

    let sent = Instant::now();
    jsem.release(1).await;
    assert!(
        eventually(PROMPT, || async { waiters.iter().all(|w| w.is_finished()) }).await,
        "Redisson's release(1) did not let the last relock waiter in"
    );
    eprintln!(
        "the last relock waiter went on {:?} after Redisson's release(1)",
        sent.elapsed()
    );
    for waiter in waiters {
        join(waiter, "relock's acquire(1)").await.1.unwrap();
    }
    assert_eq!(raw_count(&server, &name), Some(0));
    assert_eq!(client.stats().waiters, 0);

    // A waiter for 2 permits, fed one at a time.
    let base = raw_script_calls(&server);
    let waiter = spawn_timed({
        let sem = sem.clone();
        async move { sem.acquire(2).await }
    });
    relock_parked(&server, &client, 1, base + 2).await;
    jsem.release(1).await;
    // Woken by the message, it tries once more and parks again.
    relock_parked(&server, &client, 1, base + 3).await;
    assert!(!waiter.is_finished(), "1 permit of 2");
    let sent = Instant::now();
    jsem.release(1).await;
    prompt(
        waiter,
        sent,
        "relock's acquire(2) after Redisson's second release(1)",
    )
    .await
    .unwrap();
    assert_eq!(raw_count(&server, &name), Some(0));
}

// ---- 3. One latch ----

/// Relock waiters (`wait`, `wait_for`; polling every 60 s) on a latch Redisson set are not
/// woken by a count-down that leaves a count (relock's), and are woken at once by Redisson's
/// `countDown` reaching zero.
#[tokio::test]
async fn relock_latch_waiters_are_woken_by_redisson_count_down() {
    let server = RedisServer::start();
    let client = polling_client(&server, Duration::from_secs(60)).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-latch-relock");
    let latch = client.count_down_latch(name.clone());
    let jlatch = java.count_down_latch(name.clone());
    assert!(jlatch.try_set_count(2).await);
    assert_eq!(latch.count().await.unwrap(), 2); // the script is loaded

    let base = raw_script_calls(&server);
    let plain = spawn_timed({
        let latch = latch.clone();
        async move { latch.wait().await }
    });
    let timed = spawn_timed({
        let latch = latch.clone();
        async move { latch.wait_for(HANG).await }
    });
    relock_parked(&server, &client, 2, base + 4).await;

    latch.count_down().await.unwrap();
    assert_eq!(jlatch.count().await, 1, "Redisson sees relock's count-down");
    assert!(!plain.is_finished() && !timed.is_finished());

    let sent = Instant::now();
    jlatch.count_down().await;
    prompt(plain, sent, "relock's wait() after Redisson's countDown")
        .await
        .unwrap();
    let opened = prompt(
        timed,
        sent,
        "relock's wait_for() after Redisson's countDown",
    )
    .await;
    assert!(opened.unwrap());
    assert!(!raw_exists(&server, &name));
    assert_eq!(client.stats().waiters, 0);
}

/// Redisson waiters (`await`, `await(timeout)`; one process) on a latch relock set are not
/// woken by a count-down that leaves a count (Redisson's), and are woken at once by relock's
/// `count_down` reaching zero.
#[tokio::test]
async fn redisson_latch_waiters_are_woken_by_relock_count_down() {
    let server = RedisServer::start();
    let client = common::client(&server, LONG_LEASE).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-latch-java");
    let latch = client.count_down_latch(name.clone());
    let jlatch = java.count_down_latch(name.clone());
    let channel = latch_channel(&name);
    assert!(latch.try_set_count(2).await.unwrap());

    let base = raw_command_calls(&server, "get");
    let plain = spawn_timed({
        let jlatch = jlatch.clone();
        async move { jlatch.wait().await }
    });
    let timed = spawn_timed({
        let jlatch = jlatch.clone();
        async move { jlatch.wait_for(HANG).await }
    });
    java_parked(&server, &java, &channel, 2, "get", base + 4).await;

    jlatch.count_down().await;
    assert_eq!(
        latch.count().await.unwrap(),
        1,
        "relock sees Redisson's countDown"
    );
    assert!(!plain.is_finished() && !timed.is_finished());

    let sent = Instant::now();
    latch.count_down().await.unwrap();
    prompt(plain, sent, "Redisson's await() after relock's count_down").await;
    let opened = prompt(
        timed,
        sent,
        "Redisson's await(timeout) after relock's count_down",
    )
    .await;
    assert!(opened);
    assert!(!raw_exists(&server, &name));
    assert!(eventually(SOON, || async { java.local_waiters(&channel) == 0 }).await);
}

/// `delete` from either side publishes `1`. relock's waiters read the count again on any
/// message and find the latch open, so Redisson's `delete` lets them go at once. Redisson's
/// waiters only go on `0` (Redisson's behaviour: its `delete` does not wake its own waiters
/// either), so relock's `delete` leaves them waiting, though the count is gone, until a later
/// count-down to zero.
#[tokio::test]
async fn latch_delete_from_either_side() {
    let server = RedisServer::start();
    let client = polling_client(&server, Duration::from_secs(60)).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-latch-delete");
    let latch = client.count_down_latch(name.clone());
    let jlatch = java.count_down_latch(name.clone());
    let channel = latch_channel(&name);

    // Redisson deletes, relock's waiter goes.
    assert!(latch.try_set_count(1).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 1); // the script is loaded
    let base = raw_script_calls(&server);
    let waiter = spawn_timed({
        let latch = latch.clone();
        async move { latch.wait().await }
    });
    relock_parked(&server, &client, 1, base + 2).await;
    let sent = Instant::now();
    assert!(jlatch.delete().await);
    prompt(waiter, sent, "relock's wait() after Redisson's delete")
        .await
        .unwrap();
    assert_eq!(client.stats().waiters, 0);

    // relock deletes: it publishes `0`, the latch is open, and Redisson's waiter goes too
    // (Redisson's own delete publishes `1`, which leaves its waiters asleep).
    assert!(jlatch.try_set_count(1).await);
    let base = raw_command_calls(&server, "get");
    let waiter = spawn_timed({
        let jlatch = jlatch.clone();
        async move { jlatch.wait().await }
    });
    java_parked(&server, &java, &channel, 1, "get", base + 2).await;
    let mut messages = RawSubscriber::subscribe(&server, &[&channel]).await;
    let sent = Instant::now();
    assert!(latch.delete().await.unwrap());
    assert_eq!(
        messages.next_message(SOON).await,
        Some((channel.clone(), "0".into())),
        "relock's delete publishes the zero message"
    );
    assert!(!raw_exists(&server, &name));
    prompt(waiter, sent, "Redisson's await() after relock's delete").await;
    assert!(eventually(SOON, || async { java.local_waiters(&channel) == 0 }).await);
}

// ---- 4. Leases across sides ----

/// A Redisson permit with a lease that lapses is reclaimed by relock's `acquire`, which waits
/// for the lease end (it polls only every 60 s) and gets the permit; Redisson's `release(id)`
/// then fails and gives nothing back.
#[tokio::test]
async fn a_lapsed_redisson_lease_is_reclaimed_by_relock_acquire() {
    let server = RedisServer::start();
    let client = polling_client(&server, Duration::from_secs(60)).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-lease-java");
    let leases = leases_key(&name);
    let pes = client.permit_semaphore(name.clone());
    let jpes = java.permit_semaphore(name.clone());
    assert!(jpes.try_set_permits(1).await);

    let lapsing = jpes.acquire_with_lease(Duration::from_secs(1)).await;
    let end = lease_end(&server, &leases, &lapsing);
    assert!(
        pes.try_acquire().await.unwrap().is_none(),
        "Redisson holds it"
    );
    let permit = tokio::time::timeout(HANG, pes.acquire())
        .await
        .expect("relock's acquire hung")
        .unwrap();
    let late = now_ms() - end;
    eprintln!("relock took the lapsed permit {late} ms after its lease end");
    assert!(
        late < PROMPT.as_millis() as i64,
        "{late} ms after the lease end"
    );
    assert_eq!(permits_out(&server, &leases), vec![permit.id().to_owned()]);
    assert_eq!(raw_count(&server, &name), Some(0));

    assert!(
        !jpes.release(&lapsing).await,
        "reclaimed: Redisson's release fails"
    );
    assert_eq!(raw_count(&server, &name), Some(0), "and gives nothing back");
    assert_eq!(jpes.available_permits().await, 0);
    assert_eq!(jpes.acquired_permits().await, 1);
    permit.release().await.unwrap();
    assert_eq!(raw_count(&server, &name), Some(1));
}

/// A relock permit with a fixed lease that lapses is reclaimed by Redisson's `acquire`, which
/// sleeps until the lease end and gets the permit; the relock `Permit` is lost, and its
/// `release` reports `LeaseLost` and gives nothing back.
#[tokio::test]
async fn a_lapsed_relock_lease_is_reclaimed_by_redisson_acquire() {
    let server = RedisServer::start();
    let client = common::client(&server, LONG_LEASE).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-lease-relock");
    let leases = leases_key(&name);
    let pes = client.permit_semaphore(name.clone());
    let jpes = java.permit_semaphore(name.clone());
    assert!(pes.try_set_permits(1).await.unwrap());

    let permit = pes
        .acquire_with_lease(Duration::from_millis(500))
        .await
        .unwrap();
    assert_eq!(permit.lease(), Some(Duration::from_millis(500)));
    let end = lease_end(&server, &leases, permit.id());
    let id = tokio::time::timeout(HANG, jpes.acquire())
        .await
        .expect("Redisson's acquire hung");
    let late = now_ms() - end;
    eprintln!("Redisson took the lapsed permit {late} ms after its lease end");
    assert!(
        late < PROMPT.as_millis() as i64,
        "{late} ms after the lease end"
    );
    assert_eq!(permits_out(&server, &leases), vec![id.clone()]);
    assert_eq!(
        lease_end(&server, &leases, &id),
        NO_LEASE,
        "Redisson's default"
    );

    assert!(permit.is_lost());
    tokio::time::timeout(SOON, permit.lost())
        .await
        .expect("the lapsed permit reports itself lost");
    let error = permit.release().await.unwrap_err();
    assert!(error.is_lease_lost(), "{error:?}");
    assert_eq!(raw_count(&server, &name), Some(0), "nothing given back");
    assert_eq!(pes.acquired_permits().await.unwrap(), 1);
    assert!(jpes.release(&id).await);
    assert_eq!(pes.available_permits().await.unwrap(), 1);
}

/// Either side can give back the other's permit by its id: Redisson's `release(id)` of a
/// relock permit makes relock's `Permit::release` fail with `NotHeld` (not `LeaseLost`: its
/// lease had not ended), and relock's `release_id` of a Redisson permit makes Redisson's
/// `release(id)` fail; neither permit is given back twice.
#[tokio::test]
async fn a_release_by_id_on_one_side_takes_the_permit_from_the_other() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(60)).await;
    let java = Redisson::connect(&server).await;
    let name = common::prefix("compat-release-id");
    let leases = leases_key(&name);
    let pes = client.permit_semaphore(name.clone());
    let jpes = java.permit_semaphore(name.clone());
    assert!(pes.try_set_permits(2).await.unwrap());

    let permit = pes.acquire().await.unwrap();
    let jid = jpes.acquire().await;
    assert_eq!(raw_count(&server, &name), Some(0));

    assert!(
        jpes.release(permit.id()).await,
        "Redisson gives back relock's permit"
    );
    assert_eq!(raw_count(&server, &name), Some(1));
    assert!(
        !permit.is_lost(),
        "relock cannot know before its next renewal"
    );
    let error = permit.release().await.unwrap_err();
    assert!(error.is_not_held(), "{error:?}");
    assert_eq!(raw_count(&server, &name), Some(1), "given back once");

    assert!(
        pes.release_id(&jid).await.unwrap(),
        "relock gives back Redisson's permit"
    );
    assert_eq!(raw_count(&server, &name), Some(2));
    assert!(!jpes.release(&jid).await, "Redisson's release of it fails");
    assert!(!pes.release_id(&jid).await.unwrap());
    assert_eq!(raw_count(&server, &name), Some(2), "given back once");
    assert!(!raw_exists(&server, &leases));
    assert_eq!(client.stats().holds, 0);
}
