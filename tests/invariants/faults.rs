//! The plain lock under faults the family invariants (`family.rs`) do not cover, on standalone
//! servers: a holder process paused past its lease (Kleppmann's pause, with a fenced write), an
//! owner's next hold racing the retry of its lost last release, every reply dropped, and the lock
//! key deleted or evicted under its holder. A server restart, `DEBUG SLEEP`, `CLIENT KILL`,
//! `SCRIPT FLUSH` and lost acquire and release replies are family invariants, checked on every
//! lock type.
//!
//! Each test ends with the leak check of `common::faults`.

use crate::common;
use common::child;

use std::time::Duration;

use common::family::{AnyGuard, Family};
use common::faults;
use common::proxy::{Mode, Proxy};
use common::{eventually, raw_exists, raw_hexists, raw_hgetall, raw_holds, raw_pttl, RedisServer};
use fred::interfaces::{KeysInterface, LuaInterface};
use relock::{Client, LockGuard, Owner};
use tokio::time::{timeout, Instant};

/// A check-and-set that writes `KEYS[2] = ARGV[2]` only while the lock `KEYS[1]` has the holder
/// field `ARGV[1]`: the fence a resource can apply with the holder's own state.
const FENCED_WRITE: &str = "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then \
     redis.call('set', KEYS[2], ARGV[2]) return 1 end return 0";

fn sha(lua: &str) -> String {
    common::sent_as(lua)
}

fn release_sha() -> String {
    sha(relock::testing::scripts::LOCK_RELEASE)
}

async fn connect(url: &str, lease: Duration, command_timeout: Duration) -> Client {
    let config = common::config(url)
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

// ---- 1. A holder process paused past its lease ----

const CHILD_HELD: &str = "RELOCK_PAUSED_HELD field=";
const CHILD_WROTE: &str = "RELOCK_PAUSED_WROTE ";
const CHILD_LOST: &str = "RELOCK_PAUSED_LOST";
const CHILD_FENCED: &str = "RELOCK_PAUSED_FENCED result=";
const CHILD_UNLOCKED: &str = "RELOCK_PAUSED_UNLOCKED ";

/// Not a test on its own: the holder process of [`paused_holder_is_fenced_off`]. It holds the
/// lock, writes through the fence every 50 ms until `lost()` fires, then tries one more fenced
/// write and unlocks, reporting each step on stdout. Without its settings it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by paused_holder_is_fenced_off"]
async fn child_paused_holder() {
    let Some(env) = child::env() else { return };
    let (name, data) = (env.text("LOCK_NAME"), env.text("DATA_KEY"));
    let lease = env.millis("WATCHDOG_MS");
    let client = connect(&env.text("REDIS_URL"), lease, Duration::from_secs(2)).await;
    let guard = client.lock(&name).lock().await.expect("lock");
    let field = field_of(&client, &guard);
    child::say(format!("{CHILD_HELD}{field}"));
    let work = async {
        let mut seq = 0;
        loop {
            tokio::select! {
                _ = guard.lost() => break,
                _ = tokio::time::sleep(Duration::from_millis(50)) => {
                    seq += 1;
                    let value = format!("child-{seq}");
                    match fenced_write(&client, &name, &data, &field, &value).await {
                        Ok(n) => child::say(format!("{CHILD_WROTE}{seq} ok={n}")),
                        Err(e) => child::say(format!("{CHILD_WROTE}{seq} err={e}")),
                    }
                }
            }
        }
        child::say(CHILD_LOST);
        let fenced = fenced_write(&client, &name, &data, &field, "child-after-lost").await;
        child::say(format!("{CHILD_FENCED}{}", fenced.expect("fenced write")));
        let outcome = match guard.unlock().await {
            Ok(()) => "ok".to_owned(),
            Err(e) if e.is_lease_lost() => "lease-lost".to_owned(),
            Err(e) => format!("error {e}"),
        };
        child::say(format!("{CHILD_UNLOCKED}{outcome}"));
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

    let child = child::Child::spawn(
        concat!(module_path!(), "::child_paused_holder"),
        &[
            ("REDIS_URL", server.url()),
            ("LOCK_NAME", name.clone()),
            ("DATA_KEY", data.clone()),
            ("WATCHDOG_MS", child_lease.as_millis().to_string()),
        ],
    );
    let pid = child.pid();
    let find = |marker: &str| child.find(marker);
    child.said(CHILD_WROTE, Duration::from_secs(15)).await;
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
    let writes_before = child.count(CHILD_WROTE);
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
            child.lines()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    child.said(CHILD_UNLOCKED, Duration::from_secs(10)).await;
    assert_eq!(
        find(CHILD_FENCED).unwrap(),
        "0",
        "the stale holder's fenced write was applied"
    );
    assert_eq!(find(CHILD_UNLOCKED).unwrap(), "lease-lost");
    let lines = child.finish(Duration::from_secs(10)).await;
    let after: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(CHILD_WROTE))
        .skip(writes_before)
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

// ---- 2. Lost replies ----

/// A server, a proxy in front of it, a client through the proxy whose scripts are loaded (so
/// no lost reply is a `NOSCRIPT` one, by a lock `<test's prefix>:warm`), and the test's names:
/// `name(part)` is `<test's prefix>:<part>`.
async fn proxied(
    lease: Duration,
    test: &str,
) -> (RedisServer, Proxy, Client, impl Fn(&str) -> String) {
    let base = common::prefix(test);
    let name = move |part: &str| format!("{base}:{part}");
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = connect(&proxy.url(), lease, Duration::from_secs(1)).await;
    let lock = client.lock(name("warm"));
    let guard = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    guard.unlock().await.unwrap();
    (server, proxy, client, name)
}

/// An owner shared by two tasks: one's last release loses its reply after it freed the lock,
/// and the other locks again before the retry. The retry must not release the new hold: the
/// acquire waits until the release has its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_last_release_reply_never_frees_the_owners_next_hold() {
    let lease = Duration::from_secs(10);
    let (server, proxy, client, name) = proxied(lease, "faults-lost-release-race").await;
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
    let (server, proxy, client, name) = proxied(lease, "faults-dropped-replies").await;

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
    let outcome = outcome.map(|guard| guard.map(AnyGuard::from));
    super::family::settle_lost_acquire(
        Family::Lock,
        &server,
        &client,
        &name("dropped"),
        outcome,
        lease,
    )
    .await;

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

// ---- 3. The lock key deleted or evicted under its holder ----

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
