//! The watchdog against a real server: watchdog leases free themselves about one lease after the
//! holder's process dies, are never re-created once deleted, are pushed back up every period,
//! and are renewed in batches; fixed leases report their end. (A watchdog hold outliving its
//! timeout while its guard lives is a family invariant, in `tests/invariants/family.rs`.)

use crate::common;
use common::child;

use std::time::Duration;

use common::{raw_exists, raw_hexists, raw_pttl, raw_script_calls, resp_int};
use tokio::time::Instant;

/// The marker the child process prints once it holds the lock, followed by its holder field.
const HELD_MARKER: &str = "RELOCK_CHILD_HELD field=";

fn holder_field(client: &relock::Client, guard: &relock::LockGuard) -> String {
    format!("{}:{}", client.id(), guard.owner().id())
}

/// Not a test on its own: the holder process of
/// [`killed_holder_process_frees_the_lock_after_one_lease`], which runs this binary again with
/// only this test and its settings in the environment. Without them it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by killed_holder_process_frees_the_lock_after_one_lease"]
async fn child_holder() {
    let Some(env) = child::env() else { return };
    let watchdog = env.millis("WATCHDOG_MS");
    let client = common::client_at(&env.text("REDIS_URL"), watchdog).await;
    let guard = client
        .lock(env.text("LOCK_NAME"))
        .lock()
        .await
        .expect("lock");
    child::say(format!("{HELD_MARKER}{}", holder_field(&client, &guard)));
    // Held until the parent kills this process; the bound only limits an orphan's life.
    tokio::time::sleep(Duration::from_secs(60)).await;
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_process_frees_the_lock_after_one_lease() {
    let server = common::RedisServer::start();
    let lease = Duration::from_millis(1500);
    let period = lease / 3;
    let name = common::prefix("watchdog-killed");

    let mut child = child::Child::spawn(
        concat!(module_path!(), "::child_holder"),
        &[
            ("REDIS_URL", server.url()),
            ("LOCK_NAME", name.clone()),
            ("WATCHDOG_MS", lease.as_millis().to_string()),
        ],
    );
    let field = child.said(HELD_MARKER, Duration::from_secs(10)).await;
    let held_at = Instant::now();
    assert!(
        raw_hexists(&server, &name, &field),
        "the child's field is there"
    );

    // The child's watchdog keeps it past one lease.
    let client = common::client(&server, lease).await;
    while held_at.elapsed() < lease + lease / 2 {
        assert!(
            raw_hexists(&server, &name, &field),
            "the child's hold vanished after {:?}: its watchdog did not renew it",
            held_at.elapsed()
        );
        assert!(raw_pttl(&server, &name) > 0);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(client.lock(&name).try_lock().await.unwrap().is_none());

    // Kill the holder's process: no release is ever sent, only the lease can free the lock.
    // The lease left is read just before: the lock cannot be free before it has run out.
    let read_at = Instant::now();
    let ttl_at_kill = raw_pttl(&server, &name);
    assert!(
        ttl_at_kill > 0 && ttl_at_kill <= lease.as_millis() as i64,
        "PTTL {ttl_at_kill} before the kill"
    );
    let killed_at = Instant::now();
    child.kill().await;

    let waiter = client.lock(&name);
    let guard = waiter
        .try_lock_for(lease + Duration::from_secs(3), None)
        .await
        .unwrap()
        .expect("the lock frees itself after the dead holder's lease");
    let freed_after = killed_at.elapsed();
    let freed_after_read = read_at.elapsed();
    println!(
        "ttl at kill {ttl_at_kill} ms, taken {freed_after:?} after the kill (renewal period \
         {period:?})"
    );
    assert!(
        freed_after_read >= Duration::from_millis(ttl_at_kill as u64),
        "freed {freed_after_read:?} after its PTTL read {ttl_at_kill} ms: before the lease ended"
    );
    assert!(
        freed_after <= lease + Duration::from_secs(3),
        "freed only {freed_after:?} after the kill"
    );
    assert!(
        !raw_hexists(&server, &name, &field),
        "the dead holder's field is gone"
    );
    assert!(raw_hexists(&server, &name, &holder_field(&client, &guard)));
    guard.unlock().await.unwrap();
    assert!(!raw_exists(&server, &name));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_lock_is_lost_and_never_recreated() {
    let server = common::RedisServer::start();
    let lease = Duration::from_millis(600);
    let period = lease / 3;
    let client = common::client(&server, lease).await;
    let name = common::prefix("watchdog-deleted");

    let guard = client.lock(&name).lock().await.unwrap();
    assert!(!guard.is_lost());
    assert_eq!(resp_int(&server.cmd(&["DEL", &name])), 1);
    let deleted_at = Instant::now();

    // The next renewal finds the lock gone; the bound only turns "never" into a failure.
    tokio::time::timeout(lease * 10, guard.lost())
        .await
        .expect("lost() completes once a renewal finds the lock deleted");
    println!("lost {:?} after the delete", deleted_at.elapsed());
    assert!(guard.is_lost());
    assert_eq!(client.stats().renewing, 0, "renewal stops for a lost hold");

    // Several more periods: the renewal never brings the lock back.
    let watched = Instant::now();
    while watched.elapsed() < period * 5 {
        assert!(
            !raw_exists(&server, &name),
            "the lock was re-created {:?} after being lost",
            watched.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(!raw_exists(&server, &name));

    let err = guard.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "unlock of a lost hold: {err:?}");
    assert!(!raw_exists(&server, &name));
    assert_eq!(client.stats().holds, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_lease_ends_and_watchdog_lease_is_refreshed() {
    let server = common::RedisServer::start();
    let lease = Duration::from_millis(900);
    let period = lease / 3;
    let client = common::client(&server, lease).await;

    // A fixed lease is not renewed: lost() completes when it runs out.
    let fixed_name = common::prefix("watchdog-fixed");
    let fixed_lease = Duration::from_millis(500);
    // Before the acquire is sent: its lease cannot end before this plus the lease.
    let taken_at = Instant::now();
    let fixed = client
        .lock(&fixed_name)
        .lock_with_lease(fixed_lease)
        .await
        .unwrap();
    assert_eq!(fixed.lease(), Some(fixed_lease));
    assert!(!fixed.is_lost());
    assert_eq!(client.stats().renewing, 0, "a fixed lease is not renewed");
    tokio::time::timeout(fixed_lease + Duration::from_secs(2), fixed.lost())
        .await
        .expect("lost() completes when the fixed lease ends");
    let lost_after = taken_at.elapsed();
    assert!(
        lost_after >= fixed_lease,
        "lost() after {lost_after:?}, before the {fixed_lease:?} lease ended"
    );
    assert!(fixed.is_lost());
    assert!(
        common::until_gone(&server, &fixed_name, Duration::from_secs(2)).await,
        "the fixed-lease lock expires"
    );
    let err = fixed.unlock().await.unwrap_err();
    assert!(
        err.is_lease_lost(),
        "unlock after the lease ran out: {err:?}"
    );

    // A watchdog lease is pushed back up every period.
    let name = common::prefix("watchdog-refreshed");
    let guard = client.lock(&name).lock().await.unwrap();
    let started = Instant::now();
    let half = lease.as_millis() as i64 / 2;
    let windows = 3;
    let mut high_in_window = vec![0u32; windows];
    let mut rises = 0;
    let mut last = raw_pttl(&server, &name);
    while started.elapsed() < lease * windows as u32 {
        let window = (started.elapsed().as_millis() / lease.as_millis()) as usize;
        let ttl = raw_pttl(&server, &name);
        assert!(ttl > 0, "PTTL {ttl} after {:?}", started.elapsed());
        if ttl > half && window < windows {
            high_in_window[window] += 1;
        }
        if ttl > last {
            rises += 1;
        }
        last = ttl;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    println!("PTTL > {half} ms per lease window: {high_in_window:?}; refreshes seen: {rises}");
    assert!(
        high_in_window.iter().all(|&n| n > 0),
        "PTTL stayed under half the lease for a whole lease: {high_in_window:?}"
    );
    let expected = (lease * windows as u32).as_millis() / period.as_millis();
    assert!(
        rises as u128 >= expected / 2,
        "saw {rises} refreshes of the PTTL in {windows} leases, expected about {expected}"
    );
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    assert!(!raw_exists(&server, &name));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_are_batched() {
    const LOCKS: usize = 250;
    let server = common::RedisServer::start();
    let lease = Duration::from_millis(1200);
    let period = lease / 3;
    let client = common::client(&server, lease).await;
    let prefix = common::prefix("watchdog-batch");
    let names: Vec<String> = (0..LOCKS).map(|i| format!("{prefix}:{i}")).collect();

    let guards = futures::future::join_all(names.iter().map(|name| {
        let lock = client.lock(name);
        async move { lock.try_lock().await }
    }))
    .await
    .into_iter()
    .map(|r| r.unwrap().expect("a free lock"))
    .collect::<Vec<_>>();
    assert_eq!(client.stats().renewing, LOCKS);
    let mut exists_args = vec!["EXISTS"];
    exists_args.extend(names.iter().map(String::as_str));
    assert_eq!(resp_int(&server.cmd(&exists_args)) as usize, LOCKS);

    // Nothing but the watchdog talks to this server from here on.
    let before = raw_script_calls(&server);
    let started = Instant::now();
    let mut checks = 0;
    while started.elapsed() < lease * 3 {
        // One lock per check keeps the check cheap; all are checked at the end.
        let name = &names[checks % LOCKS];
        assert!(raw_pttl(&server, name) > 0, "{name} lapsed");
        checks += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = raw_script_calls(&server);
    let elapsed = started.elapsed();
    let periods = elapsed.as_millis() as f64 / period.as_millis() as f64;
    let calls = after - before;
    let per_period = calls as f64 / periods;
    println!("{calls} EVALSHA in {elapsed:?} ({periods:.1} periods): {per_period:.2} per period");
    assert!(
        calls >= LOCKS.div_ceil(100) as u64,
        "no whole renewal round in {elapsed:?}: {calls} calls"
    );
    assert!(
        per_period <= 5.0,
        "{calls} renewal calls in {periods:.1} periods: not batched"
    );
    // Every lock outlived three leases.
    assert_eq!(resp_int(&server.cmd(&exists_args)) as usize, LOCKS);
    assert!(guards.iter().all(|g| !g.is_lost()));

    drop(guards);
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            resp_int(&server.cmd(&exists_args)) == 0
        })
        .await,
        "dropped guards release their locks"
    );
    assert_eq!(client.stats().holds, 0);
}

/// A `tracing` subscriber that panics on every warning: user code that misbehaves.
struct PanicsOnWarnings;

impl tracing::Subscriber for PanicsOnWarnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        panic!("a subscriber that panics on {}", event.metadata().name());
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The watchdog's "lease lost" warning goes to a subscriber that panics. The panic kills the
/// watchdog's round, but runs with no lock of the client's held: the client keeps working (a
/// warning logged under the registry's lock would poison it, and every later lock operation
/// would panic).
#[test]
fn a_tracing_subscriber_that_panics_does_not_poison_the_client() {
    let server = common::RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _panicking = tracing::subscriber::set_default(PanicsOnWarnings);
    runtime.block_on(async {
        let client = common::client(&server, Duration::from_millis(300)).await;
        let name = common::prefix("panicking-subscriber");
        let guard = client.lock(name.clone()).lock().await.unwrap();
        // Deleted under its holder: the watchdog finds it gone and warns.
        server.cmd(&["DEL", &name]);
        tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .expect("the watchdog never found the lock gone");
        // Give the watchdog's round (and its warning) time to finish.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let other = common::prefix("panicking-subscriber-after");
        let after = tokio::spawn({
            let lock = client.lock(other.clone());
            async move {
                let guard = lock.try_lock().await?.expect("free");
                guard.unlock().await
            }
        })
        .await;
        match after {
            Ok(outcome) => outcome.unwrap(),
            Err(panicked) => panic!("the client was poisoned: {panicked}"),
        }
        assert!(!raw_exists(&server, &other));
        drop(guard);
    });
}
