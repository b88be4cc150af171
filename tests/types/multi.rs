//! `MultiLock`: several locks as one, all or nothing, against real servers (one, two, a
//! cluster, and eight processes at once). Every promise of `src/lock/multi.rs` is checked on
//! Redis with raw commands that bypass relock: who holds which hash, what is left after a give
//! back, a cancellation or an error, the order parts are taken in (no deadlock), the lease of
//! each part, and how a waiter is woken.

use crate::common;
use common::child;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::family::{self, raw_keys, raw_token, Family};
use common::faults::{self, Overlaps, Register};
use common::topology::Cluster;
use common::{
    claim_key, eventually, fair_queue_key, raw_exists, raw_hgetall, raw_holds, raw_lrange,
    raw_pttl, resp_int, RedisServer,
};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use relock::{Client, MultiGuard, MultiLock, Owner, Part};
use tokio::time::{timeout, Instant};

/// The watchdog timeout of most clients here: far longer than any test's holds.
const WATCHDOG: Duration = Duration::from_secs(10);
/// A bound for anything that must end and would only run this long if it were stuck.
const HANG: Duration = Duration::from_secs(30);

async fn client(server: &RedisServer) -> Client {
    common::client(server, WATCHDOG).await
}

/// The holder field of `owner` on `client`: `<client-id>:<owner-id>`.
fn field(client: &Client, owner: &Owner) -> String {
    family::field(client, owner)
}

/// The holder field of a multi guard's owner on `client`.
fn field_of(client: &Client, guard: &MultiGuard) -> String {
    field(client, guard.parts()[0].owner())
}

/// `n` lock names under `prefix`: `<prefix>-0`, `<prefix>-1`, ... (sorted as listed for n ≤ 10).
fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Lock names `<prefix>-<key>`, one for each of `keys`.
fn named<const N: usize>(prefix: &str, keys: [&str; N]) -> [String; N] {
    keys.map(|key| format!("{prefix}-{key}"))
}

/// A server of the test's own, a name prefix of its own, and `N` clients on the server (see
/// [`client`]).
async fn setup<const N: usize>(test: &str) -> (RedisServer, String, [Client; N]) {
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..N {
        clients.push(client(&server).await);
    }
    let clients = clients.try_into().unwrap_or_else(|_| unreachable!());
    (server, common::prefix(test), clients)
}

/// Whether `client` tracks nothing: no hold, renewal, waiter or channel, and has nothing in
/// flight.
fn idle(client: &Client) -> bool {
    let stats = client.stats();
    let counts = (stats.holds, stats.renewing, stats.waiters, stats.channels);
    // In flight: a dropped acquire's script may still run on the server until its check ends.
    counts == (0, 0, 0, 0) && stats.in_flight == 0
}

/// How many keys the server holds (`DBSIZE`).
fn dbsize(server: &RedisServer) -> i64 {
    resp_int(&server.cmd(&["DBSIZE"]))
}

/// The keys on `server` whose name holds `prefix`, but for replay keys (which expire on their
/// own) and fencing token counters (kept by design).
fn leftover_keys(server: &RedisServer, prefix: &str) -> Vec<String> {
    raw_keys(server, &format!("*{prefix}*"))
        .into_iter()
        .filter(|key| {
            !key.starts_with("redisson_unlock_latch:") && !key.starts_with("redisson_lock_token:")
        })
        .collect()
}

/// Waits (bounded) until no key of `prefix` is left on `server` and nothing subscribes to a
/// channel of it; fails with what is left.
async fn assert_nothing_left(server: &RedisServer, prefix: &str) {
    let clean = eventually(Duration::from_secs(10), || async {
        leftover_keys(server, prefix).is_empty()
            && family::raw_channels(server, &format!("*{prefix}*")).is_empty()
    })
    .await;
    assert!(
        clean,
        "left on the server: keys {:?}, channels {:?}",
        leftover_keys(server, prefix),
        family::raw_channels(server, &format!("*{prefix}*"))
    );
}

/// The part of `guard` on lock `name`.
fn part<'g>(guard: &'g MultiGuard, name: &str) -> &'g relock::LockGuard {
    guard
        .parts()
        .iter()
        .find(|part| part.name() == name)
        .unwrap_or_else(|| panic!("no part {name} in {guard:?}"))
}

/// Whether a one-shot `try_lock` of a `family` handle on `name` by `client` finds it taken.
async fn kept_out(client: &Client, family: Family, name: &str) -> bool {
    family
        .lock(client, name)
        .try_lock()
        .await
        .unwrap()
        .is_none()
}

/// Checks that a multi-lock's read part `read` and write part `write` (each with the server it
/// is on) are held by holder field `mine`, each as its side holds.
fn assert_rw_parts_held(
    (read_on, read): (&RedisServer, &str),
    (write_on, write): (&RedisServer, &str),
    mine: &str,
) {
    let read_hold = vec![(mine.to_owned(), "1".to_owned()), mode("read")];
    assert_eq!(raw_hgetall(read_on, read), read_hold, "{read}");
    let write_hold = vec![(format!("{mine}:write"), "1".to_owned()), mode("write")];
    assert_eq!(raw_hgetall(write_on, write), write_hold, "{write}");
}

/// A read-write lock hash's `mode` field set to `mode`.
fn mode(mode: &str) -> (String, String) {
    ("mode".to_owned(), mode.to_owned())
}

/// Checks that `other` is kept out of a multi-lock's write part `write` (no reader, no writer)
/// and read part `read` (no writer); returns the read hold of `read` it is admitted to beside
/// the multi-lock's.
async fn rw_parts_exclude(other: &Client, write: &str, read: &str) -> relock::LockGuard {
    for (family, name) in [
        (Family::Read, write),
        (Family::Write, write),
        (Family::Write, read),
    ] {
        assert!(kept_out(other, family, name).await, "{family:?} of {name}");
    }
    let reader = other.rw_lock(read).read().try_lock().await.unwrap();
    reader.expect("a reader is admitted beside the multi-lock's read part")
}

/// Waits (at most 10 s) until the queue of fair lock `fair` holds one waiter of each of
/// `clients`, in that order, and no other.
async fn until_queued(server: &RedisServer, fair: &str, clients: &[&Client]) {
    let queue = fair_queue_key(fair);
    let queued = eventually(Duration::from_secs(10), || async {
        let entries = raw_lrange(server, &queue);
        entries.len() == clients.len()
            && entries
                .iter()
                .zip(clients)
                .all(|(e, c)| e.starts_with(c.id()))
    })
    .await;
    assert!(queued, "queue {:?}", raw_lrange(server, &queue));
}

/// Checks that `guard` (taken on `clients[0]`) holds each of the plain locks `names` once,
/// releases it, and checks that none of `clients` left anything of them.
async fn release_checked(
    server: &RedisServer,
    guard: MultiGuard,
    clients: &[&Client],
    names: &[&str],
) {
    let mine = field_of(clients[0], &guard);
    for name in names {
        assert_eq!(raw_holds(server, name, &mine), 1, "{name}");
    }
    guard.unlock().await.unwrap();
    Family::Lock.assert_no_leaks(server, clients, names).await;
}

// ---- 1. All or nothing ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing_a_busy_part_leaves_the_free_ones_free() {
    let (server, prefix, [a, b]) = setup("multi-all").await;
    // `-0` sorts before the others: a multi-lock over it and a held one takes it first.
    let all = names(&prefix, 4);
    let free = &all[0];
    let held: Vec<String> = all[1..].to_vec();
    let listed = [held[2].clone(), held[0].clone(), held[1].clone()];
    let guard = a.multi_lock(&listed).lock().await.unwrap();
    assert_eq!(guard.parts().len(), 3);
    let mine = field_of(&a, &guard);
    for name in &held {
        assert_eq!(
            raw_hgetall(&server, name),
            vec![(mine.clone(), "1".to_owned())],
            "{name} is held by the multi-lock's owner alone"
        );
        assert!(raw_pttl(&server, name) > 0, "{name} has a lease");
    }
    // Parts come in the order they are taken: by name on one server.
    let order: Vec<&str> = guard.parts().iter().map(|p| p.name()).collect();
    assert_eq!(order, held.iter().map(String::as_str).collect::<Vec<_>>());

    // Another client over one free lock and one held: nothing, and the free one stays free.
    let other = b.multi_lock([held[1].as_str(), free.as_str()]);
    assert!(other.try_lock().await.unwrap().is_none());
    assert!(
        !raw_exists(&server, free),
        "try_lock left the free part held"
    );
    let waited = other
        .try_lock_for(Duration::from_millis(300), None)
        .await
        .unwrap();
    assert!(waited.is_none());
    assert!(
        !raw_exists(&server, free),
        "try_lock_for left the free part held"
    );
    assert!(!raw_exists(&server, &claim_key(free)));
    assert!(
        eventually(Duration::from_secs(5), || async { idle(&b) }).await,
        "{:?}",
        b.stats()
    );
    // The held ones are still the first owner's, untouched.
    for name in &held {
        assert_eq!(raw_holds(&server, name, &mine), 1);
    }

    guard.unlock().await.unwrap();
    for name in &held {
        assert!(
            !raw_exists(&server, name),
            "{name} is left after the release"
        );
    }
    // Now the other client gets both.
    let got = other.try_lock().await.unwrap().expect("everything is free");
    let theirs = field_of(&b, &got);
    assert_eq!(raw_holds(&server, free, &theirs), 1);
    assert_eq!(raw_holds(&server, &held[1], &theirs), 1);
    got.unlock().await.unwrap();
    let all: Vec<&str> = std::iter::once(free.as_str())
        .chain(held.iter().map(String::as_str))
        .collect();
    Family::Lock.assert_no_leaks(&server, &[&a, &b], &all).await;
    assert_eq!(
        dbsize(&server),
        0,
        "keys left: {:?}",
        raw_keys(&server, "*")
    );
}

// ---- 2. Listed order does not matter: no deadlock, no overlap ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_listed_order_no_deadlock_no_overlap() {
    let (server, prefix, clients) = setup::<2>("multi-order").await;
    let [a, b, c] = [0, 1, 2].map(|i| format!("{prefix}-{i}"));
    let orders: Vec<Vec<String>> = vec![
        vec![a.clone(), b.clone(), c.clone()],
        vec![c.clone(), b.clone(), a.clone()],
        vec![b.clone(), a.clone()],
        vec![c.clone(), a.clone()],
        vec![b.clone(), c.clone(), a.clone()],
        vec![c.clone(), b.clone()],
    ];
    let checks: Arc<HashMap<String, (Overlaps, Register, AtomicU64)>> = Arc::new(
        [&a, &b, &c]
            .iter()
            .map(|n| (n.to_string(), Default::default()))
            .collect(),
    );
    let run_for = Duration::from_secs(2);
    let started = Instant::now();
    let tasks: Vec<_> = (0..12)
        .map(|t| {
            let client = clients[t % 2].clone();
            let order = orders[t % orders.len()].clone();
            let checks = checks.clone();
            tokio::spawn(async move {
                let owner = Owner::new();
                let multi = client.multi_lock(&order).owned_by(owner.clone());
                let who = format!("task {t} ({order:?})");
                let (mut rounds, mut longest) = (0u64, Duration::ZERO);
                while started.elapsed() < run_for {
                    let asked = Instant::now();
                    let guard = multi.lock().await.unwrap();
                    longest = longest.max(asked.elapsed());
                    let enter = Instant::now();
                    for name in &order {
                        let (_, register, sections) = &checks[name];
                        register.increment(Duration::from_micros(200)).await;
                        sections.fetch_add(1, Ordering::Relaxed);
                    }
                    for name in &order {
                        checks[name].0.record(who.clone(), enter);
                    }
                    guard.unlock().await.unwrap();
                    rounds += 1;
                }
                (t, rounds, longest)
            })
        })
        .collect();
    // A deadlock stops every task for good; a slow run only makes each round slower. The longest
    // any round can take without a deadlock is bounded by everyone else's rounds in a row.
    let mut total = 0;
    for task in tasks {
        let (t, rounds, longest) = timeout(run_for + HANG, task)
            .await
            .expect("a task never finished: deadlock")
            .unwrap();
        eprintln!("task {t}: {rounds} rounds, longest wait {longest:?}");
        assert!(rounds >= 1, "task {t} never got its locks");
        total += rounds;
    }
    eprintln!("{total} multi-lock rounds in {:?}", started.elapsed());
    for (name, (overlaps, register, sections)) in checks.iter() {
        overlaps.assert_none();
        register.assert_exact(sections.load(Ordering::Relaxed));
        assert!(overlaps.len() > 0, "{name} was never taken");
    }
    let refs: Vec<&Client> = clients.iter().collect();
    Family::Lock
        .assert_no_leaks(&server, &refs, &[&a, &b, &c])
        .await;
}

// ---- 3. Eight processes, random overlapping subsets, mixed kinds ----

/// How long the cross-process run lasts: `MULTI_STRESS_SECS` (at most 20), 20 s by default.
fn stress_duration() -> Duration {
    let secs: u64 = std::env::var("MULTI_STRESS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(secs.clamp(1, 20))
}

/// Names 0–6 are plain `Lock`s, names 7–9 `RwLock`s, in every process.
const STRESS_LOCKS: usize = 10;
const FIRST_RW: usize = 7;

/// What a child holds of one lock while inside: exclusively, or as a reader.
#[derive(Clone, Copy, Debug)]
enum Held {
    Exclusive,
    Reader,
}

/// A plain fred client on `url`.
async fn fred_on(url: &str) -> fred::clients::Client {
    use fred::interfaces::ClientLike;
    let config = fred::types::config::Config::from_url(url).expect("url");
    let client = fred::types::Builder::from_config(config)
        .build()
        .expect("build fred client");
    client.init().await.expect("connect fred client");
    client
}

/// One worker process of `eight_processes_random_subsets_mixed_kinds`: two tasks, each taking
/// multi-locks over random subsets (2–5) of the 10 locks in random listed order until the run
/// ends, checking exclusion on the check server while inside. Prints `VIOLATION ...` and fails
/// on any; prints `ACQUISITIONS <n> <reads>` at the end. Without its settings it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by eight_processes_random_subsets_mixed_kinds"]
async fn child_multi_worker() {
    use fred::interfaces::KeysInterface;
    let Some(env) = child::env() else { return };
    let run_for = env.millis("MULTI_RUN_MS");
    let seed: u64 = env.number("MULTI_SEED");
    let prefix = env.text("MULTI_PREFIX");
    let config = common::config(&env.text("MULTI_LOCK_URL"))
        .with_watchdog_timeout(Duration::from_secs(5))
        .with_command_timeout(Duration::from_secs(3));
    let client = Client::new(config).await.expect("connect");
    let check = fred_on(&env.text("MULTI_CHECK_URL")).await;
    let started = Instant::now();
    let tasks: Vec<_> = (0..2u64)
        .map(|t| {
            let (client, check, prefix) = (client.clone(), check.clone(), prefix.clone());
            tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(2).wrapping_add(t));
                let (mut acquisitions, mut reads, mut longest) = (0u64, 0u64, Duration::ZERO);
                while started.elapsed() < run_for {
                    let size = rng.gen_range(2..=5);
                    let mut chosen: Vec<usize> = (0..STRESS_LOCKS).collect();
                    chosen.shuffle(&mut rng);
                    chosen.truncate(size);
                    let mut parts = Vec::new();
                    let mut held = Vec::new();
                    for &i in &chosen {
                        let name = format!("{prefix}-{i}");
                        if i < FIRST_RW {
                            parts.push(Part::from(client.lock(name)));
                            held.push((i, Held::Exclusive));
                        } else if rng.gen_bool(0.6) {
                            parts.push(client.rw_lock(name).read().into());
                            held.push((i, Held::Reader));
                        } else {
                            parts.push(client.rw_lock(name).write().into());
                            held.push((i, Held::Exclusive));
                        }
                    }
                    let multi = MultiLock::new(parts);
                    let asked = Instant::now();
                    let guard = match timeout(Duration::from_secs(30), multi.lock()).await {
                        Ok(guard) => guard.unwrap(),
                        Err(_) => {
                            println!("VIOLATION stuck for 30 s on {chosen:?}: deadlock?");
                            panic!("stuck on {chosen:?}");
                        }
                    };
                    longest = longest.max(asked.elapsed());
                    // Enter: each counts itself in, then checks the other kind is out.
                    for &(i, kind) in &held {
                        let (inside, readers) = (
                            format!("{prefix}:inside:{i}"),
                            format!("{prefix}:readers:{i}"),
                        );
                        let problem = match kind {
                            Held::Exclusive => {
                                let n: i64 = check.incr(&inside).await.unwrap();
                                let r: Option<i64> = check.get(&readers).await.unwrap();
                                (n != 1 || r.unwrap_or(0) != 0).then(|| {
                                    format!("exclusive hold of lock {i}: {n} inside, {r:?} readers")
                                })
                            }
                            Held::Reader => {
                                let _: i64 = check.incr(&readers).await.unwrap();
                                let n: Option<i64> = check.get(&inside).await.unwrap();
                                (n.unwrap_or(0) != 0).then(|| {
                                    format!("read hold of lock {i}: {n:?} exclusive holders inside")
                                })
                            }
                        };
                        if let Some(problem) = problem {
                            println!("VIOLATION {problem} (subset {chosen:?})");
                            panic!("{problem}");
                        }
                    }
                    if rng.gen_bool(0.3) {
                        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..3))).await;
                    }
                    if guard.is_lost() {
                        println!("VIOLATION a part's lease may be lost while inside {chosen:?}");
                        panic!("lost while inside");
                    }
                    for &(i, kind) in &held {
                        let key = match kind {
                            Held::Exclusive => format!("{prefix}:inside:{i}"),
                            Held::Reader => format!("{prefix}:readers:{i}"),
                        };
                        let _: i64 = check.decr(&key).await.unwrap();
                    }
                    guard.unlock().await.unwrap();
                    acquisitions += 1;
                    reads += held
                        .iter()
                        .filter(|(_, k)| matches!(k, Held::Reader))
                        .count() as u64;
                }
                (acquisitions, reads, longest)
            })
        })
        .collect();
    let (mut acquisitions, mut reads, mut longest) = (0, 0, Duration::ZERO);
    for task in tasks {
        let (a, r, l) = task.await.unwrap();
        acquisitions += a;
        reads += r;
        longest = longest.max(l);
    }
    client.shutdown().await.unwrap();
    println!(
        "ACQUISITIONS {acquisitions} {reads} {}",
        longest.as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_random_subsets_mixed_kinds() {
    let locks = RedisServer::start();
    let check = RedisServer::start();
    let prefix = common::prefix("multi-procs");
    let run_for = stress_duration();
    let seed: u64 = rand::thread_rng().gen();
    eprintln!("8 processes for {run_for:?}, seed {seed}");
    let children: Vec<_> = (0..8u64)
        .map(|i| {
            child::Child::spawn(
                concat!(module_path!(), "::child_multi_worker"),
                &[
                    ("MULTI_LOCK_URL", locks.url()),
                    ("MULTI_CHECK_URL", check.url()),
                    ("MULTI_PREFIX", prefix.clone()),
                    ("MULTI_RUN_MS", run_for.as_millis().to_string()),
                    ("MULTI_SEED", (seed.wrapping_add(i * 1000)).to_string()),
                ],
            )
        })
        .collect();
    let mut outputs = Vec::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.finish(run_for + Duration::from_secs(45)).await;
        let violations: Vec<&String> = out.iter().filter(|l| l.contains("VIOLATION")).collect();
        assert!(violations.is_empty(), "child {i}: {violations:?}");
        let line = out
            .iter()
            .find_map(|l| l.strip_prefix("ACQUISITIONS "))
            .unwrap_or_else(|| panic!("child {i} reported nothing: {out:?}"));
        let fields: Vec<u64> = line.split(' ').map(|f| f.parse().unwrap()).collect();
        outputs.push((i, fields[0], fields[1], fields[2]));
    }
    let mut total = 0;
    for (i, acquisitions, reads, longest_ms) in &outputs {
        eprintln!(
            "child {i}: {acquisitions} multi-lock acquisitions ({reads} read parts), longest wait {longest_ms} ms"
        );
        assert!(*acquisitions >= 1, "child {i} never got a multi-lock");
        total += acquisitions;
    }
    eprintln!("{total} acquisitions in all");
    // Everyone is out: the counters are back at zero.
    for i in 0..STRESS_LOCKS {
        for key in [
            format!("{prefix}:inside:{i}"),
            format!("{prefix}:readers:{i}"),
        ] {
            let value = common::resp(&check.cmd(&["GET", &key]));
            assert!(
                matches!(&value, common::Resp::Bulk(None))
                    || value == common::Resp::Bulk(Some("0".into())),
                "{key} = {value:?}"
            );
        }
    }
    // Nothing left of any lock: no hash, claim key, reader's timeout key, channel.
    assert_nothing_left(&locks, &prefix).await;
}

// ---- 4. Cancellation at random points ----

/// The cancellation test's lock `i` of `all` as one type in every handle: 0–1 plain `Lock`s,
/// 2–3 `FairLock`s, 4–5 `RwLock`s (their read side when `read`, else the write side).
fn cancel_part(client: &Client, all: &[String], i: usize, read: bool) -> Part {
    match i {
        0 | 1 => client.lock(&all[i]).into(),
        2 | 3 => client.fair_lock(&all[i]).into(),
        _ if read => client.rw_lock(&all[i]).read().into(),
        _ => client.rw_lock(&all[i]).write().into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_no_part_behind() {
    let (server, prefix, [holder, canceller]) = setup("multi-cancel").await;
    let all = names(&prefix, 6);
    let mut acquired_total = 0;
    for round in 0..6 {
        // The holder has three of the six (the odd ones: a plain, a fair and a write lock),
        // released at a random moment.
        let held = MultiLock::new([1, 3, 5].map(|i| cancel_part(&holder, &all, i, false)))
            .owned_by(Owner::new())
            .lock()
            .await
            .unwrap();
        let release_after = Duration::from_millis(rand::thread_rng().gen_range(0..=40));
        let release = tokio::spawn(async move {
            tokio::time::sleep(release_after).await;
            held.unlock().await.unwrap();
        });
        // 30 multi-locks over random subsets (2 to 4 parts), each dropped after 0 to 60 ms.
        let attempts = {
            let mut rng = rand::thread_rng();
            (0..30)
                .map(|_| {
                    let mut subset: Vec<usize> = (0..all.len()).collect();
                    subset.shuffle(&mut rng);
                    subset.truncate(rng.gen_range(2..=4));
                    let multi = MultiLock::new(
                        subset
                            .into_iter()
                            .map(|i| cancel_part(&canceller, &all, i, rng.gen_bool(0.5))),
                    );
                    let dropped_after = Duration::from_millis(rng.gen_range(0..=60));
                    (multi, rng.gen_bool(0.5), dropped_after)
                })
                .collect()
        };
        let acquired = common::rw::dropped_attempts(attempts).await;
        release.await.unwrap();
        acquired_total += acquired;
        eprintln!("round {round}: {acquired} of 30 acquired, the rest dropped");
        let mine = canceller.id().to_owned();
        let clean = eventually(Duration::from_secs(10), || async {
            idle(&canceller) && idle(&holder) && leftover_keys(&server, &prefix).is_empty()
        })
        .await;
        assert!(
            clean,
            "round {round} left: canceller {:?}, holder {:?}, keys {:?}, hashes {:?}",
            canceller.stats(),
            holder.stats(),
            leftover_keys(&server, &prefix),
            all.iter()
                .map(|n| raw_hgetall(&server, n))
                .collect::<Vec<_>>(),
        );
        // And nothing comes back afterwards (a background give back racing a late attempt).
        tokio::time::sleep(Duration::from_millis(200)).await;
        for name in &all {
            let hash = raw_hgetall(&server, name);
            assert!(
                hash.iter().all(|(f, _)| !f.starts_with(&mine)),
                "{name} came back held by a cancelled owner: {hash:?}"
            );
        }
    }
    eprintln!("{acquired_total} acquires won in time");
    let fresh = client(&server).await;
    let guard = fresh
        .multi_lock(&all)
        .try_lock()
        .await
        .unwrap()
        .expect("a fresh multi-lock gets every part");
    let theirs = field_of(&fresh, &guard);
    for name in &all {
        assert_eq!(
            raw_hgetall(&server, name),
            vec![(theirs.clone(), "1".into())]
        );
    }
    guard.unlock().await.unwrap();
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    Family::Lock
        .assert_no_leaks(&server, &[&holder, &canceller, &fresh], &refs)
        .await;
}

// ---- 5. Mixed types ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_types_each_held_as_its_type_holds() {
    let server = RedisServer::start();
    let prefix = common::prefix("multi-mixed");
    let a = family::connect(&server.url(), WATCHDOG, Duration::from_secs(2)).await;
    let b = family::connect(&server.url(), WATCHDOG, Duration::from_secs(2)).await;
    let [lock, fair, spin, fenced, read, write] =
        named(&prefix, ["lock", "fair", "spin", "fenced", "read", "write"]);
    // Listed in no particular order.
    let multi = MultiLock::new([
        Part::from(a.rw_lock(&write).write()),
        a.spin_lock(&spin).into(),
        a.lock(&lock).into(),
        a.rw_lock(&read).read().into(),
        a.fenced_lock(&fenced).into(),
        a.fair_lock(&fair).into(),
    ]);
    let guard = multi.lock().await.unwrap();
    assert_eq!(guard.parts().len(), 6);
    let mine = field_of(&a, &guard);
    for name in [&lock, &fair, &spin, &fenced] {
        assert_eq!(
            raw_hgetall(&server, name),
            vec![(mine.clone(), "1".to_owned())],
            "{name}"
        );
    }
    assert_rw_parts_held((&server, &read), (&server, &write), &mine);
    let token = part(&guard, &fenced).fencing_token();
    assert!(token.is_some(), "the fenced part has a token");
    assert_eq!(token, raw_token(&server, &fenced), "the counter on Redis");
    for name in [&lock, &fair, &spin, &read, &write] {
        assert_eq!(part(&guard, name).fencing_token(), None, "{name}");
    }

    // Another client: excluded as each type excludes, a reader of the read part admitted.
    for (family, name) in [
        (Family::Lock, &lock),
        (Family::Spin, &spin),
        (Family::Fenced, &fenced),
    ] {
        assert!(kept_out(&b, family, name).await, "{name}");
    }
    let reader = rw_parts_exclude(&b, &write, &read).await;
    // A fair waiter queues behind the multi-lock's hold.
    let fair_waiter = tokio::spawn({
        let lock = b.fair_lock(&fair);
        async move { timeout(HANG, lock.lock()).await.expect("fair waiter hung") }
    });
    until_queued(&server, &fair, &[&b]).await;
    assert_eq!(
        raw_hgetall(&server, &fair),
        vec![(mine.clone(), "1".into())]
    );

    guard.unlock().await.unwrap();
    let fair_guard = fair_waiter.await.unwrap().unwrap();
    let theirs = Family::Fair.field_of(&b, &fair_guard);
    assert_eq!(
        raw_hgetall(&server, &fair),
        vec![(theirs.clone(), "1".into())]
    );
    for name in [&lock, &spin, &fenced, &write] {
        assert!(!raw_exists(&server, name), "{name} left after the release");
    }
    // Only b's reader is left on the read lock.
    assert_eq!(
        raw_hgetall(&server, &read),
        vec![
            (field(&b, reader.owner()), "1".to_owned()),
            ("mode".into(), "read".into())
        ]
    );
    reader.unlock().await.unwrap();
    fair_guard.unlock().await.unwrap();
    for (family, name) in [
        (Family::Lock, &lock),
        (Family::Fair, &fair),
        (Family::Spin, &spin),
        (Family::Fenced, &fenced),
        (Family::Read, &read),
        (Family::Write, &write),
    ] {
        family.assert_no_leaks(&server, &[&a, &b], &[name]).await;
    }
}

// ---- 6. Reentrant per owner ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_per_owner_released_in_any_order() {
    let (server, prefix, [a]) = setup("multi-reentry").await;
    let [plain, fair, write] = named(&prefix, ["plain", "fair", "write"]);
    let multi = MultiLock::new([
        Part::from(a.lock(&plain)),
        a.fair_lock(&fair).into(),
        a.rw_lock(&write).write().into(),
    ]);
    let rival = multi.clone().owned_by(Owner::new());
    for first_released_first in [true, false] {
        let first = multi.lock().await.unwrap();
        let second = timeout(Duration::from_secs(5), multi.lock())
            .await
            .expect("a reentry waits for nothing")
            .unwrap();
        let mine = field_of(&a, &first);
        assert_eq!(mine, field_of(&a, &second), "the same owner (this task)");
        for (name, field) in [
            (&plain, mine.clone()),
            (&fair, mine.clone()),
            (&write, format!("{mine}:write")),
        ] {
            assert_eq!(raw_holds(&server, name, &field), 2, "{name}");
            assert_eq!(part(&second, name).hold_count().await.unwrap(), 2);
        }
        assert!(rival.try_lock().await.unwrap().is_none());
        let (sooner, later) = if first_released_first {
            (first, second)
        } else {
            (second, first)
        };
        sooner.unlock().await.unwrap();
        for (name, field) in [
            (&plain, mine.clone()),
            (&fair, mine.clone()),
            (&write, format!("{mine}:write")),
        ] {
            assert_eq!(raw_holds(&server, name, &field), 1, "{name}");
        }
        assert!(
            rival.try_lock().await.unwrap().is_none(),
            "excluded until the last release"
        );
        later.unlock().await.unwrap();
        for name in [&plain, &fair, &write] {
            assert!(!raw_exists(&server, name), "{name} left");
        }
        let theirs = rival.try_lock().await.unwrap().expect("free after both");
        theirs.unlock().await.unwrap();
    }
    assert!(eventually(Duration::from_secs(5), || async { idle(&a) }).await);
    assert_nothing_left(&server, &prefix).await;
}

// ---- 7. Duplicates and bad input ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_merged_conflicts_refused_and_nothing_written() {
    let (server, prefix, [a, a2]) = setup("multi-dup").await;
    let [x, y] = named(&prefix, ["x", "y"]);

    // The same lock twice: one part, one hold.
    let guard = a.multi_lock([&x, &y, &x]).lock().await.unwrap();
    assert_eq!(guard.parts().len(), 2);
    assert_eq!(raw_holds(&server, &x, &field_of(&a, &guard)), 1);
    guard.unlock().await.unwrap();
    assert!(!raw_exists(&server, &x));
    let guard = MultiLock::new([a.rw_lock(&x).read(), a.rw_lock(&x).read()])
        .lock()
        .await
        .unwrap();
    assert_eq!(guard.parts().len(), 1);
    assert_eq!(raw_holds(&server, &x, &field_of(&a, &guard)), 1);
    guard.unlock().await.unwrap();
    assert_nothing_left(&server, &prefix).await;
    // What is left (replay keys, expiring): no refused acquire may add to it.
    let before = raw_keys(&server, "*");
    let nothing_new = |what: &str| {
        let now = raw_keys(&server, "*");
        assert!(
            now.iter().all(|key| before.contains(key)),
            "{what}: written {:?}",
            now.iter()
                .filter(|k| !before.contains(k))
                .collect::<Vec<_>>()
        );
    };

    let refused: Vec<(&str, MultiLock)> = vec![
        (
            "read and write sides of one RwLock",
            MultiLock::new([
                Part::from(a.lock(&y)),
                a.rw_lock(&x).read().into(),
                a.rw_lock(&x).write().into(),
            ]),
        ),
        (
            "a Lock and a FairLock of one name",
            MultiLock::new([
                Part::from(a.lock(&x)),
                a.lock(&y).into(),
                a.fair_lock(&x).into(),
            ]),
        ),
        (
            "one name through two clients of one server",
            MultiLock::new([a.lock(&x), a.lock(&y), a2.lock(&x)]),
        ),
        ("no parts", MultiLock::new(Vec::<Part>::new())),
        ("an empty name", a.multi_lock([y.as_str(), ""])),
    ];
    for (what, multi) in &refused {
        let outcomes = [
            multi.try_lock().await.map(|g| g.is_some()),
            multi
                .try_lock_for(Duration::from_secs(1), None)
                .await
                .map(|g| g.is_some()),
            timeout(Duration::from_secs(5), multi.lock())
                .await
                .expect("an invalid multi-lock waited")
                .map(|_| true),
            timeout(
                Duration::from_secs(5),
                multi.lock_with_lease(Duration::from_secs(5)),
            )
            .await
            .expect("an invalid multi-lock waited")
            .map(|_| true),
        ];
        for outcome in outcomes {
            let error = outcome.expect_err(what);
            assert!(error.is_invalid_argument(), "{what}: {error:?}");
        }
        nothing_new(what);
    }
    // A bad lease is refused too, before anything is written.
    let error = a
        .multi_lock([&x, &y])
        .lock_with_lease(Duration::ZERO)
        .await
        .map(|_| ())
        .expect_err("a zero lease");
    assert!(error.is_invalid_argument(), "{error:?}");
    nothing_new("a zero lease");
    assert!(idle(&a) && idle(&a2));
}

// ---- 8. Waiting is by pub/sub; a fair part keeps its place ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release() {
    let (server, prefix, [a, b]) = setup("multi-wake").await;
    let [first, busy] = named(&prefix, ["a", "b"]);
    let multi = a.multi_lock([&busy, &first]);
    // A floor: an uncontended acquire and release of the same multi-lock.
    let t = Instant::now();
    multi
        .try_lock()
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let floor = t.elapsed();

    // The holder's lease (20 s) outlasts the waiter's wait (10 s): without the release's
    // message, the waiter would wait out its deadline.
    let held = b
        .lock(&busy)
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    let asked = Instant::now();
    let waiter = tokio::spawn({
        let multi = multi.clone();
        async move {
            let guard = multi
                .try_lock_for(Duration::from_secs(10), None)
                .await
                .unwrap();
            (Instant::now(), guard)
        }
    });
    assert!(common::until_subscribed(&server, &busy, 1).await);
    // It holds the part before the busy one while it waits.
    assert!(
        eventually(Duration::from_secs(5), || async {
            raw_exists(&server, &first)
        })
        .await
    );
    let releasing = Instant::now();
    held.unlock().await.unwrap();
    let released = Instant::now();
    let release_took = released - releasing;
    let (acquired, guard) = timeout(HANG, waiter).await.unwrap().unwrap();
    let guard = guard.expect("the waiter got both before its deadline");
    // From the start of the release: the waiter may hold both before its reply is read.
    let waited = acquired.saturating_duration_since(releasing);
    let left_at_release = Duration::from_secs(10).saturating_sub(released - asked);
    let bound = (left_at_release / 2).min((floor + release_took) * 100);
    eprintln!(
        "woken {waited:?} after the release (release took {release_took:?}, an uncontended \
         acquire+release {floor:?}; bound {bound:?}, {left_at_release:?} of the wait left)"
    );
    assert!(
        waited < bound,
        "the waiter took {waited:?} after the release: the message did not wake it"
    );
    release_checked(&server, guard, &[&a, &b], &[&first, &busy]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_part_keeps_its_place_in_the_queue() {
    let server = RedisServer::start();
    let prefix = common::prefix("multi-fairq");
    let url = server.url();
    let timeout_cmd = Duration::from_secs(2);
    let a = family::connect(&url, WATCHDOG, timeout_cmd).await;
    let b = family::connect(&url, WATCHDOG, timeout_cmd).await;
    let c = family::connect(&url, WATCHDOG, timeout_cmd).await;
    let [fair, plain] = named(&prefix, ["a-fair", "b-plain"]);
    let queue = fair_queue_key(&fair);
    let held = b.fair_lock(&fair).lock().await.unwrap();
    // a's multi-lock queues on the fair part (taken first: it sorts first)...
    let multi = MultiLock::new([Part::from(a.lock(&plain)), a.fair_lock(&fair).into()]);
    let waiter = tokio::spawn(async move {
        let guard = timeout(HANG, multi.lock()).await.expect("hung").unwrap();
        (Instant::now(), guard)
    });
    until_queued(&server, &fair, &[&a]).await;
    // ... then c's plain waiter behind it.
    let c_waiter = tokio::spawn({
        let lock = c.fair_lock(&fair);
        async move {
            let guard = timeout(HANG, lock.lock()).await.expect("hung").unwrap();
            (Instant::now(), guard)
        }
    });
    until_queued(&server, &fair, &[&a, &c]).await;
    held.unlock().await.unwrap();
    let (a_at, guard) = waiter.await.unwrap();
    let mine = field_of(&a, &guard);
    assert_eq!(
        raw_hgetall(&server, &fair),
        vec![(mine.clone(), "1".into())]
    );
    assert_eq!(raw_holds(&server, &plain, &mine), 1);
    // c is still queued, behind nobody now.
    let q = raw_lrange(&server, &queue);
    assert!(q.len() == 1 && q[0].starts_with(c.id()), "queue {q:?}");
    assert!(!c_waiter.is_finished());
    guard.unlock().await.unwrap();
    let (c_at, c_guard) = c_waiter.await.unwrap();
    assert!(c_at > a_at, "served in queue order");
    c_guard.unlock().await.unwrap();
    Family::Fair
        .assert_no_leaks(&server, &[&a, &b, &c], &[&fair])
        .await;
    Family::Lock
        .assert_no_leaks(&server, &[&a, &b, &c], &[&plain])
        .await;
}

// ---- 9. Errors release everything ----

/// Which of two clients' servers a multi-lock takes first: the one its first part is on.
async fn first_server(x: &Client, x_name: &str, y: &Client, y_name: &str) -> bool {
    let guard = MultiLock::new([y.lock(y_name), x.lock(x_name)])
        .lock()
        .await
        .unwrap();
    let x_first = guard.parts()[0].name() == x_name;
    guard.unlock().await.unwrap();
    x_first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_fails_the_acquire_and_releases_the_other_parts() {
    let one = RedisServer::start();
    let two = RedisServer::start();
    let prefix = common::prefix("multi-dead");
    let connect = |server: &RedisServer| {
        let url = server.url();
        async move {
            let config = common::config(&url)
                .with_watchdog_timeout(WATCHDOG)
                .with_command_timeout(Duration::from_secs(1));
            Client::new(config).await.unwrap()
        }
    };
    let (c1, c2) = (connect(&one).await, connect(&two).await);
    let (n1, n2) = (format!("{prefix}-on-one"), format!("{prefix}-on-two"));
    // A is the server taken first, B the one waited on while A's part is held.
    let one_first = first_server(&c1, &n1, &c2, &n2).await;
    let (mut a_srv, mut b_srv) = (one, two);
    let (a_client, b_client, a_name, b_name) = if one_first {
        (&c1, &c2, &n1, &n2)
    } else {
        std::mem::swap(&mut a_srv, &mut b_srv);
        (&c2, &c1, &n2, &n1)
    };
    let b_holder = connect(&b_srv).await;
    let _held = b_holder
        .lock(b_name)
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let multi = MultiLock::new([b_client.lock(b_name), a_client.lock(a_name)]);
    let waiter = tokio::spawn(async move { multi.lock().await.map(|g| g.parts().len()) });
    assert!(common::until_subscribed(&b_srv, b_name, 1).await);
    assert!(
        raw_exists(&a_srv, a_name),
        "the part on A is held while waiting on B"
    );

    b_srv.kill();
    let killed = Instant::now();
    let outcome = timeout(Duration::from_secs(60), waiter)
        .await
        .expect("the acquire hung after its server died")
        .unwrap();
    eprintln!(
        "acquire ended {:?} after server B died: {outcome:?}",
        killed.elapsed()
    );
    let error = outcome.expect_err("server B is gone");
    assert!(error.is_redis(), "{error:?}");
    assert!(
        eventually(Duration::from_secs(10), || async {
            !raw_exists(&a_srv, a_name)
        })
        .await,
        "the part on A is left: {:?}",
        raw_hgetall(&a_srv, a_name)
    );
    assert!(eventually(Duration::from_secs(5), || async { idle(a_client) }).await);
    assert_eq!(dbsize(&a_srv), 0, "left on A: {:?}", raw_keys(&a_srv, "*"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_type_fails_the_acquire_and_releases_the_other_parts() {
    let (server, prefix, [a]) = setup("multi-wrongtype").await;
    let [fair, plain, string, last] = named(&prefix, ["a", "b", "c", "d"]);
    assert!(server
        .cmd(&["SET", &string, "not a lock"])
        .starts_with("+OK"));
    let multi = MultiLock::new([
        Part::from(a.lock(&last)),
        a.lock(&string).into(),
        a.fair_lock(&fair).into(),
        a.lock(&plain).into(),
    ]);
    for round in 0..2 {
        let error = if round == 0 {
            multi
                .lock()
                .await
                .map(|_| ())
                .expect_err("a string is no lock")
        } else {
            multi
                .try_lock_for(Duration::from_secs(2), None)
                .await
                .map(|_| ())
                .expect_err("a string is no lock")
        };
        assert!(error.is_wrong_type(), "{error:?}");
        for name in [&fair, &plain, &last] {
            assert!(!raw_exists(&server, name), "{name} is left held");
        }
        assert!(!raw_exists(&server, &fair_queue_key(&fair)));
        assert_eq!(
            common::resp(&server.cmd(&["GET", &string])),
            common::Resp::Bulk(Some("not a lock".into()))
        );
    }
    assert!(eventually(Duration::from_secs(5), || async { idle(&a) }).await);
}

// ---- 10. Lost ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_when_any_part_is_and_unlock_releases_the_rest() {
    let (server, prefix, [b]) = setup("multi-lost").await;
    // A short watchdog timeout: renewals every ~⅓ s notice the force-unlock.
    let a = common::client(&server, Duration::from_secs(1)).await;
    let all = names(&prefix, 3);
    let guard = a.multi_lock(&all).lock().await.unwrap();
    let lost = guard.lost();
    assert!(!guard.is_lost());
    // The first part in order: an unlock that stopped at the first failure would leave the rest.
    assert!(b.lock(&all[0]).force_unlock().await.unwrap());
    let noticed = Instant::now();
    timeout(Duration::from_secs(10), lost)
        .await
        .expect("lost() never fired after a part was force-unlocked");
    eprintln!(
        "lost() fired {:?} after the force-unlock",
        noticed.elapsed()
    );
    assert!(guard.is_lost());
    assert!(raw_exists(&server, &all[1]) && raw_exists(&server, &all[2]));
    let error = guard.unlock().await.expect_err("a part was gone");
    assert!(
        error.is_lease_lost() || error.is_not_held(),
        "unlock reported {error:?}"
    );
    eprintln!("unlock reported: {error}");
    for name in &all[1..] {
        assert!(
            !raw_exists(&server, name),
            "{name} left held after unlock met the lost part"
        );
    }
    Family::Lock
        .assert_no_leaks(
            &server,
            &[&a, &b],
            &all.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .await;
}

// ---- 11. Fixed leases ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_bounds_every_part() {
    let (server, prefix, [a]) = setup("multi-lease").await;
    let [plain, fair, write] = named(&prefix, ["a", "b", "c"]);
    let lease = Duration::from_secs(5);
    let multi = MultiLock::new([
        Part::from(a.rw_lock(&write).write()),
        a.lock(&plain).into(),
        a.fair_lock(&fair).into(),
    ]);
    for bounded in [false, true] {
        let guard = if bounded {
            multi
                .try_lock_for(Duration::from_secs(1), Some(lease))
                .await
                .unwrap()
                .expect("free")
        } else {
            multi.lock_with_lease(lease).await.unwrap()
        };
        for name in [&plain, &fair, &write] {
            let pttl = raw_pttl(&server, name);
            assert!(
                pttl > 0 && pttl <= lease.as_millis() as i64,
                "{name}: PTTL {pttl} with a {lease:?} lease"
            );
            assert_eq!(part(&guard, name).lease(), Some(lease));
        }
        guard.unlock().await.unwrap();
        assert_nothing_left(&server, &prefix).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_part_that_expires_while_waiting_is_taken_again() {
    let (server, prefix, [a, b]) = setup("multi-restart").await;
    // `-a` is taken first, then `-b` is waited for.
    let [early, late] = named(&prefix, ["a", "b"]);
    let lease = Duration::from_millis(1500);
    let held = b.lock(&late).lock().await.unwrap();
    let multi = a.multi_lock([&late, &early]);
    let waiter = tokio::spawn(async move { timeout(HANG, multi.lock_with_lease(lease)).await });
    assert!(
        eventually(Duration::from_secs(10), || async {
            raw_exists(&server, &early)
        })
        .await,
        "the early part was never taken"
    );
    assert!(common::until_subscribed(&server, &late, 1).await);
    // The early part's lease runs out on Redis while the late one is waited for.
    assert!(
        eventually(lease * 4, || async { !raw_exists(&server, &early) }).await,
        "the early part never expired: PTTL {}",
        raw_pttl(&server, &early)
    );
    held.unlock().await.unwrap();
    let guard = waiter
        .await
        .unwrap()
        .expect("the acquire hung")
        .expect("the acquire failed");
    assert!(!guard.is_lost(), "the guard came back lost");
    for name in [&early, &late] {
        let pttl = raw_pttl(&server, name);
        assert!(
            pttl > 0 && pttl <= lease.as_millis() as i64,
            "{name}: PTTL {pttl}"
        );
    }
    release_checked(&server, guard, &[&a, &b], &[&early, &late]).await;
}

// ---- 12. Cluster ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_across_masters_slots_and_rw_sides() {
    let cluster = Cluster::start(3);
    let connect = || async {
        let config = common::config(&cluster.url())
            .with_watchdog_timeout(WATCHDOG)
            .with_command_timeout(Duration::from_secs(3));
        timeout(Duration::from_secs(10), Client::new(config))
            .await
            .expect("connect in time")
            .expect("connect")
    };
    let (a, b) = (connect().await, connect().await);
    let prefix = common::prefix("multi-cluster");
    // One plain name per master, two `{tag}` names in one slot, and the two sides of RwLocks:
    // a read side under the tag, a write side on a plain name.
    let per_master = cluster.keys_per_master(&prefix, 2);
    let plain: Vec<String> = per_master.iter().map(|(_, keys)| keys[0].clone()).collect();
    let write_name = per_master[1].1[1].clone();
    let tag = format!("{{{prefix}-tag}}");
    let tagged = [format!("{tag}-x"), format!("{tag}-y")];
    let read_name = format!("{tag}-r");
    let mut parts: Vec<Part> = plain.iter().map(|n| a.lock(n).into()).collect();
    parts.extend(tagged.iter().map(|n| Part::from(a.lock(n))));
    parts.push(a.rw_lock(&read_name).read().into());
    parts.push(a.rw_lock(&write_name).write().into());
    parts.reverse();
    let multi = MultiLock::new(parts);
    let guard = timeout(HANG, multi.lock()).await.expect("hung").unwrap();
    assert_eq!(guard.parts().len(), 7);
    let mine = field_of(&a, &guard);
    let masters: std::collections::BTreeSet<u16> = plain
        .iter()
        .map(|n| cluster.node_for_key(n).port())
        .collect();
    assert_eq!(masters.len(), 3, "the plain names are on every master");
    for name in plain.iter().chain(&tagged) {
        let node = cluster.node_for_key(name);
        assert_eq!(
            raw_hgetall(node, name),
            vec![(mine.clone(), "1".to_owned())],
            "{name} on {}",
            node.port()
        );
    }
    assert_rw_parts_held(
        (cluster.node_for_key(&read_name), &read_name),
        (cluster.node_for_key(&write_name), &write_name),
        &mine,
    );
    // Within a slot, by name: the tagged parts are taken one after the other.
    let order: Vec<&str> = guard.parts().iter().map(|p| p.name()).collect();
    let at = |name: &str| order.iter().position(|n| *n == name).unwrap();
    assert!(
        at(&read_name) + 1 == at(&tagged[0]) && at(&tagged[0]) + 1 == at(&tagged[1]),
        "{order:?}"
    );

    // Another client: excluded from each exclusive part, and from the whole.
    let theirs = MultiLock::new(
        plain
            .iter()
            .chain(&tagged)
            .map(|n| Part::from(b.lock(n)))
            .chain([Part::from(b.rw_lock(&read_name).read())]),
    );
    for name in plain.iter().chain(&tagged) {
        assert!(kept_out(&b, Family::Lock, name).await, "{name}");
    }
    let reader = rw_parts_exclude(&b, &write_name, &read_name).await;
    reader.unlock().await.unwrap();
    assert!(theirs.try_lock().await.unwrap().is_none());
    for name in &tagged {
        assert_eq!(raw_hgetall(cluster.node_for_key(name), name).len(), 1);
    }

    guard.unlock().await.unwrap();
    for name in plain.iter().chain(&tagged).chain([&read_name, &write_name]) {
        assert!(
            !raw_exists(cluster.node_for_key(name), name),
            "{name} left after the release"
        );
    }
    let got = timeout(HANG, theirs.lock()).await.expect("hung").unwrap();
    got.unlock().await.unwrap();
    let all: Vec<&str> = plain
        .iter()
        .chain(&tagged)
        .chain([&read_name, &write_name])
        .map(String::as_str)
        .collect();
    faults::assert_no_leaks_cluster(&cluster, &[&a, &b], &all).await;
    for name in &all {
        let node = cluster.node_for_key(name);
        assert!(
            raw_keys(node, &format!("*{name}*rwlock_timeout*")).is_empty(),
            "a reader's timeout key of {name} is left"
        );
        assert_eq!(cluster.subscribers(&common::lock_channel(name)), 0);
    }
}

// ---- 13. Across two independent servers ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_two_servers_opposite_listings_do_not_deadlock() {
    let one = RedisServer::start();
    let two = RedisServer::start();
    let prefix = common::prefix("multi-two");
    let (c1, c2) = (client(&one).await, client(&two).await);
    let (x, y) = (format!("{prefix}-x"), format!("{prefix}-y"));
    let overlaps = Arc::new([Overlaps::default(), Overlaps::default()]);
    let run_for = Duration::from_millis(1500);
    let started = Instant::now();
    let tasks: Vec<_> = (0..6)
        .map(|t| {
            let parts = if t % 2 == 0 {
                vec![c1.lock(&x), c2.lock(&y)]
            } else {
                vec![c2.lock(&y), c1.lock(&x)]
            };
            let owner = Owner::new();
            let multi = MultiLock::new(parts).owned_by(owner.clone());
            let (f1, f2) = (field(&c1, &owner), field(&c2, &owner));
            let (one_port, two_port, x, y) = (one.port(), two.port(), x.clone(), y.clone());
            let overlaps = overlaps.clone();
            tokio::spawn(async move {
                let mut rounds = 0u64;
                while started.elapsed() < run_for {
                    let guard = multi.lock().await.unwrap();
                    let enter = Instant::now();
                    // Held on each server, by this owner.
                    let on = |port: u16, key: &str, f: &str| {
                        common::server::raw_command(port, &["HEXISTS", key, f]).unwrap()
                    };
                    assert_eq!(on(one_port, &x, &f1), ":1\r\n", "x on server one");
                    assert_eq!(on(two_port, &y, &f2), ":1\r\n", "y on server two");
                    tokio::time::sleep(Duration::from_micros(300)).await;
                    overlaps[0].record(format!("task {t}"), enter);
                    overlaps[1].record(format!("task {t}"), enter);
                    guard.unlock().await.unwrap();
                    rounds += 1;
                }
                (t, rounds)
            })
        })
        .collect();
    for task in tasks {
        let (t, rounds) = timeout(run_for + HANG, task)
            .await
            .expect("a task never finished: deadlock")
            .unwrap();
        eprintln!("task {t}: {rounds} rounds");
        assert!(rounds >= 1, "task {t} never got both");
    }
    overlaps[0].assert_none();
    overlaps[1].assert_none();
    assert!(!raw_exists(&one, &x) && !raw_exists(&two, &y));
    Family::Lock.assert_no_leaks(&one, &[&c1], &[&x]).await;
    Family::Lock.assert_no_leaks(&two, &[&c2], &[&y]).await;
}

// ---- One server, two addresses ----

/// One name through two clients of one server that were given two addresses of it
/// (`127.0.0.1` and `localhost`): by address they look like two servers, and the multi-lock
/// would wait for itself (its two parts are one hash under two client ids). The clients' server
/// `run_id` tells them apart: refused at once, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_under_two_addresses_is_refused() {
    let server = RedisServer::start();
    let by_ip = Client::connect(&format!("redis://127.0.0.1:{}", server.port()))
        .await
        .unwrap();
    let by_host = Client::connect(&format!("redis://localhost:{}", server.port()))
        .await
        .unwrap();
    let name = common::prefix("multi-two-addresses");
    let multi = MultiLock::new([by_ip.lock(&name), by_host.lock(&name)]);
    let outcome = timeout(Duration::from_secs(3), multi.lock())
        .await
        .expect("the multi-lock waits for itself");
    let error = outcome
        .map(|_| ())
        .expect_err("one lock through two clients");
    assert!(error.is_invalid_argument(), "{error:?}");
    assert!(!common::raw_exists(&server, &name), "nothing written");
}
