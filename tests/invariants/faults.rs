//! The lock under faults, on standalone servers: a server killed and restarted, stalled by
//! `DEBUG SLEEP` shorter and longer than the lease, a holder process paused past its lease
//! (Kleppmann's pause, with a fenced write), connections cut by `CLIENT KILL`, replies lost in a
//! proxy, the script cache flushed mid-run, and the lock key deleted or evicted under its holder.
//!
//! Each test judges its run with the checkers of `common::faults`: an exact lost-update register
//! and an overlap check where the fault model keeps mutual exclusion, and a leak check at the end.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::faults::{self, critical_section, Overlaps, Register};
use common::proxy::{Mode, Proxy};
use common::{
    eventually, lock_channel, raw_exists, raw_hexists, raw_hgetall, raw_holds, raw_numsub,
    raw_pttl, RedisServer,
};
use fred::interfaces::{KeysInterface, LuaInterface};
use relock::{Client, LockGuard, Owner};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::{timeout, Instant};

/// How long a critical section waits between reading and writing the register.
const THINK: Duration = Duration::from_millis(3);

/// A check-and-set that writes `KEYS[2] = ARGV[2]` only while the lock `KEYS[1]` has the holder
/// field `ARGV[1]`: the fence a resource can apply with the holder's own state.
const FENCED_WRITE: &str = "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then \
     redis.call('set', KEYS[2], ARGV[2]) return 1 end return 0";

fn sha(lua: &str) -> String {
    fred::util::sha1_hash(lua)
}

fn acquire_sha() -> String {
    sha(relock::testing::scripts::ACQUIRE)
}

fn release_sha() -> String {
    sha(relock::testing::scripts::RELEASE)
}

async fn connect(url: &str, lease: Duration, command_timeout: Duration) -> Client {
    let config = relock::Config::from_url(url)
        .unwrap()
        .with_watchdog_timeout(lease)
        .with_command_timeout(command_timeout);
    Client::new(config).await.expect("connect")
}

fn field_of(client: &Client, guard: &LockGuard) -> String {
    format!("{}:{}", client.id(), guard.owner().id())
}

/// Runs `FENCED_WRITE` for `field` on `client`'s connection: 1 when written, 0 when refused.
async fn fenced_write(
    client: &Client,
    lock: &str,
    data: &str,
    field: &str,
    value: &str,
) -> Result<i64, fred::error::Error> {
    client
        .redis()
        .eval(FENCED_WRITE, vec![lock, data], vec![field, value])
        .await
}

/// Loops lock → critical section → unlock on `lock` until `stop`; returns how many sections ran.
async fn worker(
    lock: relock::Lock,
    who: String,
    register: Arc<Register>,
    overlaps: Arc<Overlaps>,
    stop: Arc<AtomicBool>,
) -> u64 {
    let mut sections = 0;
    while !stop.load(Ordering::Relaxed) {
        let guard = lock.lock().await.unwrap();
        critical_section(&register, &overlaps, &who, THINK).await;
        guard.unlock().await.unwrap();
        sections += 1;
    }
    sections
}

/// Joins workers, each within `bound`, and sums their sections.
async fn join_workers(workers: Vec<tokio::task::JoinHandle<u64>>, bound: Duration) -> u64 {
    let mut total = 0;
    for worker in workers {
        total += timeout(bound, worker)
            .await
            .expect("a worker hung")
            .expect("a worker failed");
    }
    total
}

// ---- 1. Kill and restart ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_ends_every_wait_and_locks_work_again() {
    let mut server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let cmd = Duration::from_secs(2);
    let holder = connect(&server.url(), lease, cmd).await;
    let waiting = connect(&server.url(), lease, cmd).await;
    let name = common::prefix("faults-restart");
    let later = format!("{name}:later");
    let register = Arc::new(Register::default());
    let overlaps = Arc::new(Overlaps::default());

    let held = holder.lock(&name).lock().await.unwrap();
    let mut waiters = Vec::new();
    for i in 0..3 {
        let lock = waiting.lock(&name);
        let (register, overlaps) = (register.clone(), overlaps.clone());
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            critical_section(&register, &overlaps, &format!("waiter-{i}"), THINK).await;
            guard.unlock().await.expect("release after the restart");
            Ok::<(), relock::Error>(())
        }));
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            waiting.stats().waiters == 3 && raw_numsub(&server, &lock_channel(&name)) == 1
        })
        .await,
        "the waiters did not park: {:?}",
        waiting.stats()
    );

    server.kill();
    server.restart();
    let restarted = Instant::now();

    // No waiter hangs: each takes the lock (gone with the restart) or fails, within 15 s.
    let bound = Duration::from_secs(15);
    let mut acquired = 0;
    for waiter in waiters {
        let outcome = tokio::time::timeout_at(restarted + bound, waiter)
            .await
            .unwrap_or_else(|_| panic!("a waiter neither took the lock nor failed in {bound:?}"))
            .unwrap();
        match outcome {
            Ok(()) => acquired += 1,
            Err(error) => println!("a waiter failed across the restart: {error}"),
        }
    }
    println!(
        "{acquired}/3 waiters took the lock {:?} after the restart",
        restarted.elapsed()
    );
    register.assert_exact(acquired);
    overlaps.assert_none();

    // The holder whose lock vanished is told so by its watchdog.
    timeout(lease * 2 + Duration::from_secs(5), held.lost())
        .await
        .expect("lost() did not fire for a lock the restart wiped out");

    // New acquisitions work, and a new waiter is woken by a release, not by the holder's lease.
    let taken = holder.lock(&name).try_lock().await.unwrap();
    taken
        .expect("a free lock after the restart")
        .unlock()
        .await
        .unwrap();
    let blocker = holder
        .lock(&later)
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    let woken = tokio::spawn({
        let lock = waiting.lock(&later);
        async move {
            let guard = lock.lock().await.unwrap();
            let at = Instant::now();
            guard.unlock().await.unwrap();
            at
        }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            raw_numsub(&server, &lock_channel(&later)) == 1
        })
        .await,
        "no subscription on the reconnected subscriber"
    );
    let released = Instant::now();
    blocker.unlock().await.unwrap();
    let at = timeout(Duration::from_secs(10), woken)
        .await
        .expect("the new waiter was never woken")
        .unwrap();
    assert!(
        at - released < Duration::from_secs(3),
        "woken {:?} after the release: the message did not arrive",
        at - released
    );

    let err = held.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "unlock of the wiped-out hold: {err:?}");
    faults::assert_no_leaks(&server, &[&holder, &waiting], &[&name, &later]).await;
}

// ---- 2. DEBUG SLEEP ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_sleep_shorter_than_the_lease_loses_nothing() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(3);
    let cmd = Duration::from_secs(3);
    let holder = connect(&server.url(), lease, cmd).await;
    let clients = [
        connect(&server.url(), lease, cmd).await,
        connect(&server.url(), lease, cmd).await,
    ];
    let held_name = common::prefix("faults-short-sleep");
    let shared_name = format!("{held_name}:shared");
    let register = Arc::new(Register::default());
    let overlaps = Arc::new(Overlaps::default());
    let stop = Arc::new(AtomicBool::new(false));

    let held = holder.lock(&held_name).lock().await.unwrap();
    let field = field_of(&holder, &held);
    let workers: Vec<_> = (0..4)
        .map(|i| {
            tokio::spawn(worker(
                clients[i % 2].lock(&shared_name),
                format!("worker-{i}"),
                register.clone(),
                overlaps.clone(),
                stop.clone(),
            ))
        })
        .collect();
    assert!(eventually(Duration::from_secs(10), || async { register.value() >= 5 }).await);

    let sleep = faults::debug_sleep(&server, 1.0);
    let woke = sleep.woken().await;
    let before = register.value();
    assert!(
        eventually(Duration::from_secs(10), || async {
            register.value() >= before + 5
        })
        .await,
        "the workers did not go on after the sleep"
    );
    // A whole lease after the stall, the holder still holds.
    let remaining = (woke + lease).saturating_duration_since(Instant::now());
    assert!(
        timeout(remaining, held.lost()).await.is_err(),
        "lost() fired after a stall shorter than the lease"
    );
    stop.store(true, Ordering::Relaxed);
    let sections = join_workers(workers, Duration::from_secs(20)).await;
    println!("{sections} sections, {before} before the end of the sleep");
    register.assert_exact(sections);
    overlaps.assert_none();

    assert!(raw_hexists(&server, &held_name, &field));
    assert!(raw_pttl(&server, &held_name) > 0);
    assert!(clients[0]
        .lock(&held_name)
        .try_lock()
        .await
        .unwrap()
        .is_none());
    held.unlock().await.unwrap();
    assert!(!raw_exists(&server, &held_name));
    faults::assert_no_leaks(
        &server,
        &[&holder, &clients[0], &clients[1]],
        &[&held_name, &shared_name],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_sleep_longer_than_the_lease_loses_the_lock() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(1);
    let stall = Duration::from_millis(2500);
    let holder = connect(&server.url(), lease, Duration::from_secs(2)).await;
    // Its acquire waits out the whole stall in the server.
    let other = connect(&server.url(), lease, Duration::from_secs(6)).await;
    let name = common::prefix("faults-long-sleep");

    let held = holder.lock(&name).lock().await.unwrap();
    let old_field = field_of(&holder, &held);
    assert!(other.lock(&name).try_lock().await.unwrap().is_none());

    let pttl_before = raw_pttl(&server, &name);
    let read_at = Instant::now();
    assert!(pttl_before > 0);
    let sleep = faults::debug_sleep(&server, stall.as_secs_f64());
    let contender = tokio::spawn({
        let lock = other.lock(&name);
        async move {
            let guard = lock.try_lock_for(Duration::from_secs(15), None).await;
            (guard, Instant::now())
        }
    });
    let sent_at = sleep.sent_at;
    sleep.woken().await;

    timeout(Duration::from_secs(6), held.lost())
        .await
        .expect("lost() did not fire after a stall longer than the lease");
    let (taken, taken_at) = timeout(Duration::from_secs(20), contender)
        .await
        .expect("the contender hung")
        .unwrap();
    let taken = taken
        .unwrap()
        .expect("the lock frees itself after the lease");
    let lease_end = read_at + Duration::from_millis(pttl_before as u64);
    assert!(
        taken_at >= lease_end,
        "taken {:?} before the lease ended",
        lease_end - taken_at
    );
    assert!(
        taken_at + Duration::from_millis(100) >= sent_at + stall,
        "taken while the server slept"
    );
    let new_field = field_of(&other, &taken);
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(new_field.clone(), "1".into())]
    );

    // The old holder's renewal never brings its field back.
    let end = Instant::now() + lease;
    while Instant::now() < end {
        assert!(
            !raw_hexists(&server, &name, &old_field),
            "the lost hold came back"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let err = held.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "unlock of the lost hold: {err:?}");
    assert!(
        raw_hexists(&server, &name, &new_field),
        "the old unlock freed the new holder's lock"
    );
    taken.unlock().await.unwrap();
    assert!(!raw_exists(&server, &name));
    faults::assert_no_leaks(&server, &[&holder, &other], &[&name]).await;
}

// ---- 3. A holder process paused past its lease ----

const CHILD_HELD: &str = "RELOCK_PAUSED_HELD field=";
const CHILD_WROTE: &str = "RELOCK_PAUSED_WROTE ";
const CHILD_LOST: &str = "RELOCK_PAUSED_LOST";
const CHILD_FENCED: &str = "RELOCK_PAUSED_FENCED result=";
const CHILD_UNLOCKED: &str = "RELOCK_PAUSED_UNLOCKED ";

fn say(line: String) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// Not a test on its own: the holder process of [`paused_holder_is_fenced_off`]. It holds the
/// lock, writes through the fence every 50 ms until `lost()` fires, then tries one more fenced
/// write and unlocks, reporting each step on stdout. Without its settings it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by paused_holder_is_fenced_off"]
async fn child_paused_holder() {
    let (Ok(url), Ok(name), Ok(data), Ok(lease_ms)) = (
        std::env::var("REDIS_URL"),
        std::env::var("LOCK_NAME"),
        std::env::var("DATA_KEY"),
        std::env::var("WATCHDOG_MS"),
    ) else {
        return;
    };
    let lease = Duration::from_millis(lease_ms.parse().unwrap());
    let client = connect(&url, lease, Duration::from_secs(2)).await;
    let guard = client.lock(&name).lock().await.expect("lock");
    let field = field_of(&client, &guard);
    say(format!("{CHILD_HELD}{field}"));
    let work = async {
        let mut seq = 0;
        loop {
            tokio::select! {
                _ = guard.lost() => break,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {
                    seq += 1;
                    let value = format!("child-{seq}");
                    match fenced_write(&client, &name, &data, &field, &value).await {
                        Ok(n) => say(format!("{CHILD_WROTE}{seq} ok={n}")),
                        Err(e) => say(format!("{CHILD_WROTE}{seq} err={e}")),
                    }
                }
            }
        }
        say(CHILD_LOST.to_owned());
        let fenced = fenced_write(&client, &name, &data, &field, "child-after-lost").await;
        say(format!("{CHILD_FENCED}{}", fenced.expect("fenced write")));
        let outcome = match guard.unlock().await {
            Ok(()) => "ok".to_owned(),
            Err(e) if e.is_lease_lost() => "lease-lost".to_owned(),
            Err(e) => format!("error {e}"),
        };
        say(format!("{CHILD_UNLOCKED}{outcome}"));
    };
    // Only limits an orphan's life.
    timeout(Duration::from_secs(60), work)
        .await
        .expect("child timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_fenced_off() {
    let server = RedisServer::start();
    let child_lease = Duration::from_millis(800);
    // Distinct from the child's, so the TTL tells whose renewal set it.
    let lease = Duration::from_secs(3);
    let name = common::prefix("faults-paused");
    let data = format!("{name}:data");

    let mut child = common::spawn_child_test(
        concat!(module_path!(), "::child_paused_holder"),
        &[
            ("REDIS_URL", server.url()),
            ("LOCK_NAME", name.clone()),
            ("DATA_KEY", data.clone()),
            ("WATCHDOG_MS", child_lease.as_millis().to_string()),
        ],
    );
    let pid = child.id().expect("the child's pid");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = tokio::spawn({
        let lines = lines.clone();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                lines.lock().unwrap().push(line);
            }
        }
    });
    let find = |marker: &str| -> Option<String> {
        let lines = lines.lock().unwrap();
        lines.iter().find_map(|l| {
            l.find(marker)
                .map(|at| l[at + marker.len()..].trim().to_owned())
        })
    };
    let count = |marker: &str| {
        lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(marker))
            .count()
    };

    assert!(
        eventually(Duration::from_secs(15), || async {
            find(CHILD_WROTE).is_some()
        })
        .await,
        "the child did not take the lock and write: {:?}",
        lines.lock().unwrap()
    );
    let child_field = find(CHILD_HELD).unwrap();
    assert_eq!(
        find(CHILD_WROTE).unwrap(),
        "1 ok=1",
        "the holder's fenced write goes through"
    );

    // Kleppmann's pause: the holder stops past its lease.
    faults::stop(pid);
    let stopped_at = Instant::now();
    let ttl_at_stop = raw_pttl(&server, &name);
    let writes_before = count(CHILD_WROTE);
    assert!(ttl_at_stop > 0 && ttl_at_stop <= child_lease.as_millis() as i64);

    let parent = connect(&server.url(), lease, Duration::from_secs(2)).await;
    let taken = parent
        .lock(&name)
        .try_lock_for(child_lease + Duration::from_secs(5), None)
        .await
        .unwrap()
        .expect("the paused holder's lease ends");
    let taken_after = stopped_at.elapsed();
    assert!(
        taken_after + Duration::from_millis(50) >= Duration::from_millis(ttl_at_stop as u64),
        "taken {taken_after:?} after the pause, but the lease had {ttl_at_stop} ms left"
    );
    let field = field_of(&parent, &taken);
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(field.clone(), "1".into())]
    );
    let wrote = fenced_write(&parent, &name, &data, &field, "new-holder")
        .await
        .unwrap();
    assert_eq!(wrote, 1, "the new holder's fenced write goes through");

    faults::resume(pid);
    let resumed_at = Instant::now();
    // Until a while after the child learnt of its loss, only the new holder's field is there,
    // with the new holder's TTL: the child's renewals neither re-create nor extend the lock.
    let mut lost_seen: Option<Instant> = None;
    loop {
        let fields = raw_hgetall(&server, &name);
        assert_eq!(
            fields,
            vec![(field.clone(), "1".into())],
            "the lock changed hands"
        );
        let ttl = raw_pttl(&server, &name);
        assert!(
            ttl > child_lease.as_millis() as i64 + 200,
            "PTTL {ttl}: the paused holder's renewal extended the new holder's lock"
        );
        if lost_seen.is_none() && find(CHILD_LOST).is_some() {
            lost_seen = Some(Instant::now());
        }
        if lost_seen.is_some_and(|at| at.elapsed() > child_lease + child_lease / 2) {
            break;
        }
        assert!(
            resumed_at.elapsed() < Duration::from_secs(15),
            "the child never reported lost(): {:?}",
            lines.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            find(CHILD_UNLOCKED).is_some()
        })
        .await,
        "the child did not finish: {:?}",
        lines.lock().unwrap()
    );
    assert_eq!(
        find(CHILD_FENCED).unwrap(),
        "0",
        "the stale holder's fenced write was applied"
    );
    assert_eq!(find(CHILD_UNLOCKED).unwrap(), "lease-lost");
    let status = timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("the child exits")
        .unwrap();
    assert!(status.success(), "the child failed: {status}");
    reader.await.unwrap();
    let after: Vec<String> = lines.lock().unwrap()[..]
        .iter()
        .filter(|l| l.contains(CHILD_WROTE))
        .skip(writes_before)
        .cloned()
        .collect();
    println!("child writes after the pause: {after:?}");

    let value: String = parent.redis().get(&data).await.unwrap();
    assert_eq!(
        value, "new-holder",
        "a stale write overwrote the new holder's"
    );
    assert!(!raw_hexists(&server, &name, &child_field));
    assert!(
        raw_hexists(&server, &name, &field),
        "the stale unlock freed the new holder's lock"
    );
    taken.unlock().await.unwrap();
    assert!(!raw_exists(&server, &name));
    faults::assert_no_leaks(&server, &[&parent], &[&name]).await;
}

// ---- 4. CLIENT KILL ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_keeps_waiters_waking_and_the_watchdog_renewing() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1200);
    let cmd = Duration::from_secs(2);
    let holder = connect(&server.url(), lease, cmd).await;
    let waiting = connect(&server.url(), lease, cmd).await;
    let waited = common::prefix("faults-kill-waited");
    let renewed = format!("{waited}:renewed");
    let register = Arc::new(Register::default());
    let overlaps = Arc::new(Overlaps::default());

    // A fixed 20 s lease: only a message can wake its waiters soon after its release.
    let blocker = holder
        .lock(&waited)
        .lock_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    let kept = holder.lock(&renewed).lock().await.unwrap();
    let kept_field = field_of(&holder, &kept);
    let waiters: Vec<_> = (0..3)
        .map(|i| {
            let lock = waiting.lock(&waited);
            let (register, overlaps) = (register.clone(), overlaps.clone());
            tokio::spawn(async move {
                let guard = lock
                    .try_lock_for(Duration::from_secs(30), None)
                    .await
                    .unwrap()
                    .expect("the lock within 30 s");
                let at = Instant::now();
                critical_section(&register, &overlaps, &format!("waiter-{i}"), THINK).await;
                guard.unlock().await.unwrap();
                at
            })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(10), || async {
            waiting.stats().waiters == 3 && raw_numsub(&server, &lock_channel(&waited)) == 1
        })
        .await
    );

    let normal = faults::client_kill(&server, "normal");
    let pubsub = faults::client_kill(&server, "pubsub");
    let cut_at = Instant::now();
    assert!(normal >= 2, "killed {normal} command connections");
    assert!(pubsub >= 1, "killed {pubsub} subscriber connections");
    assert!(
        eventually(Duration::from_secs(10), || async {
            raw_numsub(&server, &lock_channel(&waited)) == 1
        })
        .await,
        "the waiters' channel was not resubscribed"
    );

    // The watchdog renews on the new connection: the hold outlives three leases after the cut.
    while cut_at.elapsed() < lease * 3 {
        assert!(
            !kept.is_lost(),
            "lost() fired {:?} after the cut",
            cut_at.elapsed()
        );
        assert!(raw_pttl(&server, &renewed) > 0, "the renewed lock lapsed");
        assert!(raw_hexists(&server, &renewed, &kept_field));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        register.value(),
        0,
        "a waiter got in while the lock was held"
    );

    let released = Instant::now();
    blocker.unlock().await.unwrap();
    for waiter in waiters {
        let at = timeout(Duration::from_secs(10), waiter)
            .await
            .expect("a waiter was never woken")
            .unwrap();
        assert!(
            at - released < Duration::from_secs(5),
            "a waiter took {:?} after the release: not woken by messages",
            at - released
        );
    }
    register.assert_exact(3);
    overlaps.assert_none();

    kept.unlock().await.unwrap();
    assert!(!raw_exists(&server, &renewed));
    faults::assert_no_leaks(&server, &[&holder, &waiting], &[&waited, &renewed]).await;
}

// ---- 5. Lost replies ----

/// Judges an acquire whose reply was lost. With a guard, the hold counts once: one unlock frees
/// the lock. With an error, the hold is not counted, or it expires by its lease.
async fn settle_lost_acquire(
    server: &RedisServer,
    client: &Client,
    name: &str,
    outcome: relock::Result<Option<LockGuard>>,
    lease: Duration,
) {
    let field = format!("{}:{}", client.id(), Owner::current().id());
    match outcome {
        Ok(Some(guard)) => {
            assert_eq!(field_of(client, &guard), field);
            assert_eq!(
                raw_hgetall(server, name),
                vec![(field, "1".into())],
                "counted twice"
            );
            guard.unlock().await.unwrap();
            assert!(!raw_exists(server, name), "one unlock must free the lock");
        }
        Ok(None) => panic!("a free lock was reported busy after a lost reply"),
        Err(error) => {
            println!("an acquire with a lost reply failed: {error}");
            assert!(raw_holds(server, name, &field) <= 1, "counted twice");
            let ttl = raw_pttl(server, name);
            assert!(
                ttl == -2 || (ttl > 0 && ttl <= lease.as_millis() as i64),
                "PTTL {ttl}"
            );
            assert!(
                eventually(lease + Duration::from_secs(3), || async {
                    !raw_exists(server, name)
                })
                .await,
                "the orphaned hold did not expire by its lease"
            );
        }
    }
}

/// A server, a proxy in front of it and a client through the proxy whose scripts are loaded (so
/// no lost reply is a `NOSCRIPT` one).
async fn proxied(lease: Duration, warm: &str) -> (RedisServer, Proxy, Client) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = connect(&proxy.url(), lease, Duration::from_secs(1)).await;
    let lock = client.lock(warm);
    let guard = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    guard.unlock().await.unwrap();
    (server, proxy, client)
}

/// An acquire whose script ran but whose reply was lost (the connection closed) must give a guard
/// that counts once, or an error with no hold counted beyond its lease.
///
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_acquire_reply_never_counts_a_hold_twice() {
    let lease = Duration::from_secs(1);
    let base = common::prefix("faults-lost-acquire");
    let name = |part: &str| format!("{base}:{part}");
    let (server, proxy, client) = proxied(lease, &name("warm")).await;
    let acquire = acquire_sha();

    // try_lock(): the acquire ran, its reply was lost and the connection closed.
    let lock = client.lock(name("try"));
    proxy.swallow_next_reply(&[&acquire, &name("try")]);
    let outcome = timeout(Duration::from_secs(15), lock.try_lock())
        .await
        .expect("try_lock hung after a lost reply");
    assert_eq!(proxy.swallowed(), 1, "the fault did not happen");
    settle_lost_acquire(&server, &client, &name("try"), outcome, lease).await;

    // lock(): the same.
    let lock = client.lock(name("lock"));
    proxy.swallow_next_reply(&[&acquire, &name("lock")]);
    let outcome = timeout(Duration::from_secs(15), lock.lock())
        .await
        .expect("lock hung after a lost reply");
    assert_eq!(proxy.swallowed(), 2, "the fault did not happen");
    settle_lost_acquire(&server, &client, &name("lock"), outcome.map(Some), lease).await;

    // A re-entry whose reply was lost: two holds, two unlocks.
    let lock = client.lock(name("reenter"));
    let first = lock.lock().await.unwrap();
    let field = field_of(&client, &first);
    proxy.swallow_next_reply(&[&acquire, &name("reenter")]);
    let outcome = timeout(Duration::from_secs(15), lock.lock())
        .await
        .expect("re-entry hung after a lost reply");
    assert_eq!(proxy.swallowed(), 3, "the fault did not happen");
    match outcome {
        Ok(second) => {
            assert_eq!(
                raw_holds(&server, &name("reenter"), &field),
                2,
                "miscounted"
            );
            second.unlock().await.unwrap();
            assert_eq!(raw_holds(&server, &name("reenter"), &field), 1);
            first.unlock().await.unwrap();
            assert!(
                !raw_exists(&server, &name("reenter")),
                "two unlocks must free it"
            );
        }
        Err(error) => {
            println!("a re-entry with a lost reply failed: {error}");
            assert!(
                raw_holds(&server, &name("reenter"), &field) <= 2,
                "counted twice"
            );
            first.unlock().await.unwrap();
            assert!(
                eventually(lease + Duration::from_secs(3), || async {
                    !raw_exists(&server, &name("reenter"))
                })
                .await,
                "the orphaned hold did not expire by its lease"
            );
        }
    }
    let names = ["warm", "try", "lock", "reenter"].map(name);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    faults::assert_no_leaks(&server, &[&client], &names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_release_reply_is_retried_and_counts_once() {
    let lease = Duration::from_secs(1);
    let base = common::prefix("faults-lost-release");
    let name = |part: &str| format!("{base}:{part}");
    let (server, proxy, client) = proxied(lease, &name("warm")).await;
    let release = release_sha();

    // Two holds; the release of one ran but its reply was lost: the retry with the same replay
    // key replays "still held" instead of releasing again.
    let lock = client.lock(name("release"));
    let first = lock.lock().await.unwrap();
    let second = lock.lock().await.unwrap();
    let field = field_of(&client, &first);
    assert_eq!(raw_holds(&server, &name("release"), &field), 2);
    proxy.swallow_next_reply(&[&release, &name("release")]);
    timeout(Duration::from_secs(15), second.unlock())
        .await
        .expect("unlock hung after a lost reply")
        .expect("a retried release succeeds");
    assert_eq!(proxy.swallowed(), 1, "the fault did not happen");
    assert_eq!(
        raw_holds(&server, &name("release"), &field),
        1,
        "the retried release counted twice"
    );
    first.unlock().await.unwrap();
    assert!(!raw_exists(&server, &name("release")));

    // The last release, reply lost. It leaves no replay key, so its retry finds the field gone;
    // the reply came long before the 10 s lease could run out, so the first send freed the lock.
    let lock = client.lock(name("last"));
    let only = lock.lock_with_lease(Duration::from_secs(10)).await.unwrap();
    proxy.swallow_next_reply(&[&release, &name("last")]);
    timeout(Duration::from_secs(15), only.unlock())
        .await
        .expect("unlock hung after a lost reply")
        .expect("a retried last release succeeds");
    assert_eq!(proxy.swallowed(), 2, "the fault did not happen");
    assert!(!raw_exists(&server, &name("last")));

    // A hold that could lapse before the last retry (a 600 ms lease, 1 s command timeout): the
    // last release writes a replay key after all. Its replies are dropped until the lease is
    // over, then the connection is cut and the release sent again: the retry replays "freed"
    // where, finding the lock gone, it could not have told its own release from an expiry.
    let lock = client.lock(name("lapsed"));
    let acquired_at = Instant::now();
    let short = lock
        .lock_with_lease(Duration::from_millis(600))
        .await
        .unwrap();
    proxy.set_mode(Mode::DropReplies);
    let unlock = tokio::spawn(short.unlock());
    assert!(
        eventually(Duration::from_secs(5), || async {
            !raw_exists(&server, &name("lapsed"))
        })
        .await,
        "the release never ran"
    );
    tokio::time::sleep_until(acquired_at + Duration::from_millis(700)).await;
    proxy.set_mode(Mode::Pass);
    proxy.cut();
    timeout(Duration::from_secs(15), unlock)
        .await
        .expect("unlock hung after a lost reply")
        .unwrap()
        .expect("the retry replays the release of a short lease");
    assert!(!raw_exists(&server, &name("lapsed")));

    let names = ["warm", "release", "last", "lapsed"].map(name);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    faults::assert_no_leaks(&server, &[&client], &names).await;
}

/// An owner shared by two tasks: one's last release loses its reply after it freed the lock,
/// and the other locks again before the retry. The retry must not release the new hold: the
/// acquire waits until the release has its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_last_release_reply_never_frees_the_owners_next_hold() {
    let lease = Duration::from_secs(10);
    let base = common::prefix("faults-lost-release-race");
    let name = |part: &str| format!("{base}:{part}");
    let (server, proxy, client) = proxied(lease, &name("warm")).await;
    let release = release_sha();
    let owner = Owner::new();
    let lock = client.lock(name("race")).owned_by(owner.clone());
    let field = format!("{}:{}", client.id(), owner.id());

    let guard = lock.lock_with_lease(lease).await.unwrap();
    // The connection stays open for a while after the release ran, passing requests but no
    // replies: an acquire sent meanwhile would run between the release and its retry.
    proxy.swallow_next_reply_for(&[&release, &name("race")], Duration::from_millis(300));
    let unlock = tokio::spawn(guard.unlock());
    // The first send ran (the lock is gone) but its reply is lost: the unlock is unresolved.
    assert!(
        eventually(Duration::from_secs(5), || async {
            !raw_exists(&server, &name("race"))
        })
        .await,
        "the release never ran"
    );
    assert!(
        !unlock.is_finished(),
        "the unlock did not wait for its reply"
    );

    let relocked = timeout(
        Duration::from_secs(15),
        tokio::spawn({
            let lock = lock.clone();
            async move { lock.lock().await }
        }),
    )
    .await
    .expect("the owner's next lock() hung")
    .unwrap()
    .expect("the owner locks again");
    unlock
        .await
        .unwrap()
        .expect("a retried last release succeeds");
    assert_eq!(proxy.swallowed(), 1, "the fault did not happen");
    assert_eq!(
        raw_holds(&server, &name("race"), &field),
        1,
        "the retried release took the owner's new hold"
    );
    assert_eq!(relocked.hold_count().await.unwrap(), 1);
    relocked.unlock().await.unwrap();
    assert!(!raw_exists(&server, &name("race")));

    let names = ["warm", "race"].map(name);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    faults::assert_no_leaks(&server, &[&client], &names).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_replies_fail_the_acquire_and_its_hold_expires() {
    let lease = Duration::from_secs(1);
    let base = common::prefix("faults-dropped-replies");
    let name = |part: &str| format!("{base}:{part}");
    let (server, proxy, client) = proxied(lease, &name("warm")).await;

    // Every reply dropped for a while: the acquire and its read-back time out, so try_lock fails,
    // and a hold it may have taken is not counted locally and expires by its lease.
    let lock = client.lock(name("dropped"));
    proxy.set_mode(Mode::DropReplies);
    let outcome = timeout(Duration::from_secs(15), lock.try_lock())
        .await
        .expect("try_lock hung with replies dropped");
    proxy.set_mode(Mode::Pass);
    proxy.cut();
    assert!(
        outcome.is_err(),
        "no reply came back, yet try_lock returned {outcome:?}"
    );
    assert_eq!(
        client.stats().holds,
        0,
        "a failed acquire left a local hold"
    );
    settle_lost_acquire(&server, &client, &name("dropped"), outcome, lease).await;

    // After the cut the client reconnects and locks work again.
    assert!(
        eventually(Duration::from_secs(10), || async {
            match lock.try_lock().await {
                Ok(Some(guard)) => guard.unlock().await.is_ok(),
                _ => false,
            }
        })
        .await,
        "locks do not work again after the connections were cut"
    );
    assert!(!raw_exists(&server, &name("dropped")));
    let names = ["warm", "dropped"].map(name);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    faults::assert_no_leaks(&server, &[&client], &names).await;
}

// ---- 6. SCRIPT FLUSH ----

/// `errorstat_<prefix>` count in `INFO errorstats` (0 when none).
fn error_count(server: &RedisServer, prefix: &str) -> u64 {
    let info = server.cmd(&["INFO", "errorstats"]);
    let key = format!("errorstat_{prefix}:count=");
    info.lines()
        .find_map(|line| line.strip_prefix(&key))
        .map(|n| n.trim().parse().unwrap())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_mid_run_keeps_every_operation_working() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(2);
    let cmd = Duration::from_secs(2);
    let clients = [
        connect(&server.url(), lease, cmd).await,
        connect(&server.url(), lease, cmd).await,
    ];
    let name = common::prefix("faults-script-flush");
    let register = Arc::new(Register::default());
    let overlaps = Arc::new(Overlaps::default());
    let stop = Arc::new(AtomicBool::new(false));

    let workers: Vec<_> = (0..4)
        .map(|i| {
            tokio::spawn(worker(
                clients[i % 2].lock(&name),
                format!("worker-{i}"),
                register.clone(),
                overlaps.clone(),
                stop.clone(),
            ))
        })
        .collect();
    const FLUSHES: usize = 8;
    let flushes = AtomicUsize::new(0);
    for _ in 0..FLUSHES {
        let before = register.value();
        assert!(
            eventually(Duration::from_secs(10), || async {
                register.value() >= before + 3
            })
            .await,
            "the workers stalled after {} flushes",
            flushes.load(Ordering::Relaxed)
        );
        assert!(server.cmd(&["SCRIPT", "FLUSH"]).starts_with("+OK"));
        flushes.fetch_add(1, Ordering::Relaxed);
    }
    let before = register.value();
    assert!(
        eventually(Duration::from_secs(10), || async {
            register.value() >= before + 3
        })
        .await
    );
    stop.store(true, Ordering::Relaxed);
    let sections = join_workers(workers, Duration::from_secs(20)).await;
    let noscript = error_count(&server, "NOSCRIPT");
    println!("{sections} sections across {FLUSHES} flushes, {noscript} NOSCRIPT replies");
    assert!(noscript >= 1, "the flushes never made a script reload");
    register.assert_exact(sections);
    overlaps.assert_none();
    assert!(!raw_exists(&server, &name));
    faults::assert_no_leaks(&server, &[&clients[0], &clients[1]], &[&name]).await;
}

// ---- 7. The lock key deleted or evicted under its holder ----

/// Waits for `lost()`, then checks that nothing re-creates the lock for a few renewal periods.
async fn lost_and_never_recreated(server: &RedisServer, guard: &LockGuard, lease: Duration) {
    timeout(lease * 2 + Duration::from_secs(4), guard.lost())
        .await
        .expect("lost() did not fire for a lock that is gone");
    let end = Instant::now() + lease;
    while Instant::now() < end {
        assert!(
            !raw_exists(server, guard.name()),
            "the lost lock was re-created"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_lock_is_lost_and_its_unlock_spares_the_next_holder() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(900);
    let cmd = Duration::from_secs(2);
    let holder = connect(&server.url(), lease, cmd).await;
    let other = connect(&server.url(), lease, cmd).await;
    let name = common::prefix("faults-deleted");

    let held = holder.lock(&name).lock().await.unwrap();
    assert_eq!(common::resp_int(&server.cmd(&["DEL", &name])), 1);
    lost_and_never_recreated(&server, &held, lease).await;

    let taken = other.lock(&name).try_lock().await.unwrap().expect("free");
    let err = held.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "unlock of the deleted hold: {err:?}");
    assert!(
        raw_hexists(&server, &name, &field_of(&other, &taken)),
        "the stale unlock freed the next holder's lock"
    );
    taken.unlock().await.unwrap();
    faults::assert_no_leaks(&server, &[&holder, &other], &[&name]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicted_lock_is_lost_and_never_recreated() {
    let server =
        RedisServer::start_with(&["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-random"]);
    let lease = Duration::from_millis(900);
    let holder = connect(&server.url(), lease, Duration::from_secs(2)).await;
    let filler = common::fred_client(&server).await;
    let name = common::prefix("faults-evicted");

    let held = holder.lock(&name).lock().await.unwrap();
    let value = "x".repeat(8 * 1024);
    let started = Instant::now();
    let mut written = 0;
    while raw_exists(&server, &name) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the lock survived {written} filler keys"
        );
        for _ in 0..10 {
            let key = format!("{name}:filler:{written}");
            let _: () = filler
                .set(key, value.as_str(), None, None, false)
                .await
                .unwrap();
            written += 1;
        }
    }
    let info = server.cmd(&["INFO", "stats"]);
    let evicted: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("evicted_keys:"))
        .map(|n| n.trim().parse().unwrap())
        .unwrap();
    println!("the lock was evicted after {written} filler keys ({evicted} evictions)");
    assert!(evicted > 0);

    lost_and_never_recreated(&server, &held, lease).await;
    let err = held.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "unlock of the evicted hold: {err:?}");
    faults::assert_no_leaks(&server, &[&holder], &[&name]).await;
}
