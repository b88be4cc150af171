//! Lock-delay (`with_lock_delay`) against a real server, for `Lock` and `FairLock`: a holder
//! that dies without an unlock leaves its lock unavailable for its lease plus the delay, measured
//! against the server's PTTLs; a clean unlock hands off at once; the delay ends by itself with
//! no client alive; a force-unlock ends it at once; bad delays are refused.

use crate::common;
use common::child;

use std::time::Duration;

use common::{raw_exists, raw_pttl};
use tokio::time::Instant;

/// The marker the child process prints once it holds the lock.
const HELD_MARKER: &str = "RELOCK_DELAY_CHILD_HELD";

/// A `Lock` or a `FairLock` with a lock-delay, for tests run on both.
#[derive(Clone)]
enum Delayed {
    Lock(relock::Lock),
    Fair(relock::FairLock),
}

macro_rules! on_both {
    ($self:ident, $lock:ident => $body:expr) => {
        match $self {
            Delayed::Lock($lock) => $body,
            Delayed::Fair($lock) => $body,
        }
    };
}

impl Delayed {
    /// Lock `name` of `kind` (`"lock"` or `"fair"`) on `client`, with a lock-delay of `delay`.
    fn new(client: &relock::Client, kind: &str, name: &str, delay: Duration) -> Delayed {
        match kind {
            "lock" => Delayed::Lock(client.lock(name).with_lock_delay(delay).unwrap()),
            "fair" => Delayed::Fair(client.fair_lock(name).with_lock_delay(delay).unwrap()),
            other => panic!("unknown kind {other}"),
        }
    }

    fn owned_by(self, owner: relock::Owner) -> Delayed {
        match self {
            Delayed::Lock(lock) => Delayed::Lock(lock.owned_by(owner)),
            Delayed::Fair(lock) => Delayed::Fair(lock.owned_by(owner)),
        }
    }

    async fn lock(&self) -> relock::LockGuard {
        on_both!(self, lock => lock.lock().await.unwrap())
    }

    async fn lock_with_lease(&self, lease: Duration) -> relock::LockGuard {
        on_both!(self, lock => lock.lock_with_lease(lease).await.unwrap())
    }

    async fn try_lock(&self) -> Option<relock::LockGuard> {
        on_both!(self, lock => lock.try_lock().await.unwrap())
    }

    async fn try_lock_for(&self, wait: Duration) -> Option<relock::LockGuard> {
        on_both!(self, lock => lock.try_lock_for(wait, None).await.unwrap())
    }

    async fn delay_left(&self) -> Option<Duration> {
        on_both!(self, lock => lock.lock_delay_left().await.unwrap())
    }
}

const KINDS: [&str; 2] = ["lock", "fair"];

fn shadow_key(name: &str) -> String {
    format!("relock_lease:{{{name}}}")
}

/// Waits (polling the server, bounded) until `key` is gone; the time it took.
async fn until_gone(server: &common::RedisServer, key: &str, bound: Duration) -> Duration {
    let start = Instant::now();
    while raw_exists(server, key) {
        assert!(start.elapsed() < bound, "{key} still there after {bound:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

/// Not a test on its own: the holder process of
/// [`a_killed_holder_leaves_the_lock_unavailable_for_its_lease_plus_the_delay`] and
/// [`the_delay_ends_by_itself_with_no_client_alive`], which run this binary again with only this
/// test and its settings in the environment. Without them it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by the lock-delay tests"]
async fn delay_child_holder() {
    let Some(env) = child::env() else { return };
    let url = env.text("REDIS_URL");
    let client = common::client_at(&url, env.millis("WATCHDOG_MS")).await;
    let (kind, name) = (env.text("LOCK_KIND"), env.text("LOCK_NAME"));
    let lock = Delayed::new(&client, &kind, &name, env.millis("DELAY_MS"));
    let guard = match env.optional_millis("LEASE_MS") {
        Some(lease) => lock.lock_with_lease(lease).await,
        None => lock.lock().await,
    };
    child::say(HELD_MARKER);
    // Held until the parent kills this process; the bound only limits an orphan's life.
    tokio::time::sleep(Duration::from_secs(60)).await;
    drop(guard);
}

/// Runs [`delay_child_holder`] on lock `name` and waits until it holds the lock.
async fn spawn_holder(
    server: &common::RedisServer,
    kind: &str,
    name: &str,
    watchdog: Duration,
    delay: Duration,
    lease: Option<Duration>,
) -> child::Child {
    let mut env = vec![
        ("REDIS_URL", server.url()),
        ("LOCK_NAME", name.to_owned()),
        ("LOCK_KIND", kind.to_owned()),
        ("WATCHDOG_MS", watchdog.as_millis().to_string()),
        ("DELAY_MS", delay.as_millis().to_string()),
    ];
    if let Some(lease) = lease {
        env.push(("LEASE_MS", lease.as_millis().to_string()));
    }
    let child = child::Child::spawn(concat!(module_path!(), "::delay_child_holder"), &env);
    child.said(HELD_MARKER, Duration::from_secs(10)).await;
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_leaves_the_lock_unavailable_for_its_lease_plus_the_delay() {
    let server = common::RedisServer::start();
    let lease = Duration::from_millis(900);
    let delay = Duration::from_millis(1500);
    for kind in KINDS {
        let name = common::prefix(&format!("delay-killed-{kind}"));
        let shadow = shadow_key(&name);
        let mut child = spawn_holder(&server, kind, &name, lease, delay, None).await;

        // Past a renewal or two: each renewal pushes the shadow on with the lock.
        tokio::time::sleep(lease + lease / 2).await;
        assert!(
            raw_exists(&server, &name),
            "{kind}: the child's watchdog renews the lock"
        );

        // The lock's and the shadow's PTTLs, read just before the kill: the shadow outlives the
        // lock by the delay (renewals included), and the lock cannot be free before it ends.
        let read_at = Instant::now();
        let lock_ttl = raw_pttl(&server, &name);
        let shadow_ttl = raw_pttl(&server, &shadow);
        child.kill().await;
        println!("{kind}: lock PTTL {lock_ttl} ms, shadow PTTL {shadow_ttl} ms at the kill");
        assert!(lock_ttl > 0 && lock_ttl <= lease.as_millis() as i64);
        let gap = shadow_ttl - lock_ttl;
        assert!(
            (gap - delay.as_millis() as i64).abs() <= 20,
            "{kind}: the shadow outlives the lock by {gap} ms, not the {delay:?} delay"
        );

        let client = common::client(&server, lease).await;
        let waiter = Delayed::new(&client, kind, &name, delay);

        // The lease runs out: the lock key is gone, but the name stays delayed.
        until_gone(&server, &name, lease + Duration::from_secs(2)).await;
        let left = waiter
            .delay_left()
            .await
            .expect("a lock whose lease ran out is delayed");
        assert!(left <= delay, "{kind}: {left:?} of delay left");
        if read_at.elapsed() + Duration::from_millis(200) < Duration::from_millis(shadow_ttl as u64)
        {
            assert!(
                waiter.try_lock().await.is_none(),
                "{kind}: a delayed lock is not free to take"
            );
        }
        // A lock without a lock-delay ignores it, as Redisson does: not tried here, it would
        // take the lock.

        let guard = waiter
            .try_lock_for(lease + delay + Duration::from_secs(3))
            .await
            .expect("the lock is free after the lease and the delay");
        let taken_after = read_at.elapsed();
        println!("{kind}: taken {taken_after:?} after the PTTLs were read");
        assert!(
            taken_after >= Duration::from_millis(shadow_ttl as u64),
            "{kind}: taken {taken_after:?} after the read, before the shadow's {shadow_ttl} ms ran out"
        );
        assert!(
            taken_after <= Duration::from_millis(shadow_ttl as u64) + Duration::from_secs(2),
            "{kind}: taken only {taken_after:?} after the read: the waiter did not wake at the \
             delay's end"
        );
        assert!(waiter.delay_left().await.is_none());
        guard.unlock().await.unwrap();
        assert!(!raw_exists(&server, &name));
        assert!(
            !raw_exists(&server, &shadow),
            "{kind}: a clean unlock deletes the shadow"
        );
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_unlock_hands_off_at_once() {
    let server = common::RedisServer::start();
    let delay = Duration::from_secs(20);
    for kind in KINDS {
        let client = common::client(&server, Duration::from_secs(5)).await;
        let name = common::prefix(&format!("delay-clean-{kind}"));
        let holder = Delayed::new(&client, kind, &name, delay);
        let guard = holder.lock().await;
        assert!(
            raw_pttl(&server, &shadow_key(&name)) > 0,
            "{kind}: the shadow is set"
        );
        // A re-entry and its release keep the shadow ahead of the lock.
        let inner = holder.lock().await;
        inner.unlock().await.unwrap();
        let gap = raw_pttl(&server, &shadow_key(&name)) - raw_pttl(&server, &name);
        assert!(
            (gap - delay.as_millis() as i64).abs() <= 20,
            "{kind}: gap {gap} ms"
        );

        let waiter = Delayed::new(&client, kind, &name, delay).owned_by(relock::Owner::new());
        let waiting = tokio::spawn(async move {
            let guard = waiter.try_lock_for(Duration::from_secs(10)).await;
            (guard, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let unlocked_at = Instant::now();
        guard.unlock().await.unwrap();
        let (taken, taken_at) = waiting.await.unwrap();
        let taken = taken.expect("the waiter gets the lock after a clean unlock");
        let after = taken_at.saturating_duration_since(unlocked_at);
        println!("{kind}: handed off {after:?} after the unlock");
        assert!(
            after < Duration::from_secs(5),
            "{kind}: handed off {after:?} after a clean unlock: a delay was imposed"
        );
        taken.unlock().await.unwrap();
        assert!(!raw_exists(&server, &shadow_key(&name)));
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delay_ends_by_itself_with_no_client_alive() {
    let server = common::RedisServer::start();
    let lease = Duration::from_millis(400);
    let delay = Duration::from_millis(1200);
    for kind in KINDS {
        let name = common::prefix(&format!("delay-alone-{kind}"));
        let shadow = shadow_key(&name);
        // A fixed lease: it is delayed as a watchdog lease is when it runs out.
        let mut child = spawn_holder(
            &server,
            kind,
            &name,
            Duration::from_secs(5),
            delay,
            Some(lease),
        )
        .await;
        child.kill().await;
        let shadow_ttl = raw_pttl(&server, &shadow);
        assert!(
            shadow_ttl > (delay.as_millis() as i64)
                && shadow_ttl <= (lease + delay).as_millis() as i64,
            "{kind}: shadow PTTL {shadow_ttl} ms"
        );
        // No client at all while the lease and the delay run out: the shadow expires on its
        // own.
        let gone_after = until_gone(&server, &shadow, lease + delay + Duration::from_secs(3)).await;
        assert!(gone_after + Duration::from_millis(50) >= Duration::from_millis(shadow_ttl as u64));
        assert!(!raw_exists(&server, &name));

        let client = common::client(&server, Duration::from_secs(5)).await;
        let fresh = Delayed::new(&client, kind, &name, delay);
        assert!(fresh.delay_left().await.is_none());
        let guard = fresh
            .try_lock()
            .await
            .expect("a fresh client takes the lock once the delay has ended");
        guard.unlock().await.unwrap();
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_ends_the_delay_at_once() {
    let server = common::RedisServer::start();
    let lease = Duration::from_millis(300);
    let delay = Duration::from_secs(30);
    for kind in KINDS {
        let client = common::client(&server, Duration::from_secs(5)).await;
        let name = common::prefix(&format!("delay-force-{kind}"));
        let holder = Delayed::new(&client, kind, &name, delay).owned_by(relock::Owner::new());
        // A holder that never unlocks: its fixed lease runs out.
        std::mem::forget(holder.lock_with_lease(lease).await);
        until_gone(&server, &name, lease + Duration::from_secs(2)).await;
        assert!(holder.delay_left().await.is_some(), "{kind}: delayed");

        let waiter = Delayed::new(&client, kind, &name, delay).owned_by(relock::Owner::new());
        let waiting = tokio::spawn(async move {
            let guard = waiter.try_lock_for(Duration::from_secs(10)).await;
            (guard, Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Through a handle without a lock-delay: any force-unlock of the name ends it.
        let forced_at = Instant::now();
        let forced = match kind {
            "lock" => client.lock(&name).force_unlock().await.unwrap(),
            _ => client.fair_lock(&name).force_unlock().await.unwrap(),
        };
        assert!(forced, "{kind}: a force-unlock that ends a delay says so");
        // (The shadow is gone now, but the woken waiter may have set its own already.)
        let (taken, taken_at) = waiting.await.unwrap();
        let taken = taken.expect("the waiter gets the lock once the delay was forced off");
        let after = taken_at.saturating_duration_since(forced_at);
        println!("{kind}: taken {after:?} after the force-unlock");
        assert!(
            after < Duration::from_secs(5),
            "{kind}: taken only {after:?} after"
        );
        taken.unlock().await.unwrap();

        // A force-unlock of a held lock deletes the shadow too: free at once.
        let holder = Delayed::new(&client, kind, &name, delay);
        let guard = holder.lock().await;
        assert!(raw_exists(&server, &shadow_key(&name)));
        let forced = match kind {
            "lock" => client.lock(&name).force_unlock().await.unwrap(),
            _ => client.fair_lock(&name).force_unlock().await.unwrap(),
        };
        assert!(forced);
        assert!(!raw_exists(&server, &shadow_key(&name)));
        let other = Delayed::new(&client, kind, &name, delay).owned_by(relock::Owner::new());
        let taken = other
            .try_lock()
            .await
            .expect("free at once after a force-unlock");
        taken.unlock().await.unwrap();
        drop(guard);
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_lock_delay_is_an_invalid_argument() {
    let server = common::RedisServer::start();
    let client = common::client(&server, Duration::from_secs(5)).await;
    for bad in [
        Duration::from_secs(60) + Duration::from_millis(1),
        Duration::from_secs(3600),
        Duration::from_micros(500),
        Duration::from_nanos(1),
    ] {
        let err = client.lock("d").with_lock_delay(bad).unwrap_err();
        assert!(err.is_invalid_argument(), "Lock, {bad:?}: {err:?}");
        let err = client.fair_lock("d").with_lock_delay(bad).unwrap_err();
        assert!(err.is_invalid_argument(), "FairLock, {bad:?}: {err:?}");
    }
    for good in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_secs(60),
    ] {
        client.lock("d").with_lock_delay(good).unwrap();
        client.fair_lock("d").with_lock_delay(good).unwrap();
    }
    // Zero is off: no shadow is written.
    let name = common::prefix("delay-zero");
    let lock = client.lock(&name).with_lock_delay(Duration::ZERO).unwrap();
    let guard = lock.lock().await.unwrap();
    assert!(!raw_exists(&server, &shadow_key(&name)));
    guard.unlock().await.unwrap();
    client.shutdown().await.unwrap();
}
