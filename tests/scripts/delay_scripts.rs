//! The lock-delay's branches of the lock and fair scripts, run directly with `EVAL` on a real
//! server: the shadow lease `relock_lease:{<name>}` set by acquires, re-entries, renewals and
//! partial releases to outlive the lock by the delay, deleted by the last release, a shutdown's
//! release and a force-unlock; and a free lock whose shadow lives answered as delayed.

use super::fixture::{self, Lua, ME, OTHER};
use crate::common;

use common::{raw_exists, resp, resp_int, Resp};
use fred::types::Value;
use relock::testing::scripts::{
    FAIR_ACQUIRE, FAIR_FORCE_RELEASE, FAIR_RELEASE, LOCK_ABANDON, LOCK_ACQUIRE, LOCK_DELAY_LEFT,
    LOCK_FORCE_RELEASE, LOCK_RELEASE, LOCK_RENEW_DELAYED,
};

const LEASE: i64 = 10_000;
const DELAY: i64 = 5_000;

fixture::lua_fixture! {
    /// A server, a raw fred connection and the keys of one lock, its shadow lease and its fair
    /// queue.
    struct Fixture for lua {
        channel: String = common::lock_channel(&lua.name),
        shadow: String = common::braced("relock_lease", &lua.name),
        queue: String = common::fair_queue_key(&lua.name),
        timeouts: String = common::fair_timeout_key(&lua.name),
    }
}

impl Fixture {
    /// A script that must not fail.
    async fn eval(&self, lua: &str, keys: &[&str], args: &[&str]) -> Value {
        self.try_eval(lua, keys, args).await.expect("script")
    }

    async fn try_eval(
        &self,
        lua: &str,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Value, fred::error::Error> {
        self.lua.eval(lua, keys, args).await
    }

    /// The plain acquire with the lock-delay (KEYS[3] the shadow, ARGV[5] the delay).
    async fn acquire(&self, field: &str) -> Value {
        let (lease, delay) = (LEASE.to_string(), DELAY.to_string());
        let keys = [&*self.name, &self.claim, &self.shadow];
        self.eval(LOCK_ACQUIRE, &keys, &[&lease, field, "0", "500", &delay])
            .await
    }

    /// The plain acquire without a lock-delay, as every lock without one sends it.
    async fn acquire_plain(&self, field: &str) -> Value {
        let lease = LEASE.to_string();
        let keys = [&*self.name, &self.claim];
        self.eval(LOCK_ACQUIRE, &keys, &[&lease, field, "0", "500"])
            .await
    }

    async fn release(&self, latch: &str, keep_ms: i64, field: &str) -> Value {
        let (keep, delay) = (keep_ms.to_string(), DELAY.to_string());
        let keys = [&*self.name, &self.channel, latch, &self.claim, &self.shadow];
        let args = [
            "0", &keep, field, "PUBLISH", "8000", "500", "0", "0", &delay,
        ];
        self.eval(LOCK_RELEASE, &keys, &args).await
    }

    async fn fair_acquire(&self, field: &str, mode: &str) -> Value {
        let (lease, delay) = (LEASE.to_string(), DELAY.to_string());
        let alive = common::fair_alive_key(&self.name);
        let keys = [
            &*self.name,
            &self.queue,
            &self.timeouts,
            &alive,
            &self.shadow,
        ];
        // Q, Redisson's per-waiter wait, then the delay (lua/fair/acquire.lua).
        let args = [&*lease, field, "30000", mode, "300000", &delay];
        self.eval(FAIR_ACQUIRE, &keys, &args).await
    }

    /// Expires the lock at once, as a holder's lease that ran out, leaving the shadow.
    fn lapse(&self) {
        assert_eq!(resp_int(&self.server.cmd(&["DEL", &self.name])), 1);
    }

    /// The shadow outlives the lock by the delay (within a few ms of clock between the reads).
    fn assert_shadow_ahead(&self) {
        let gap = self.pttl(&self.shadow) - self.pttl(&self.name);
        assert!(
            (gap - DELAY).abs() <= 20,
            "the shadow is {gap} ms ahead, not {DELAY}"
        );
    }
}

/// A `{ms, 'delayed'}` reply: the ms.
fn delayed(reply: &Value) -> Option<i64> {
    match reply {
        Value::Array(items)
            if items.len() == 2 && items[1].as_str().as_deref() == Some("delayed") =>
        {
            items[0].as_i64()
        }
        _ => None,
    }
}

#[tokio::test]
async fn an_acquire_sets_the_shadow_and_a_lapsed_lock_is_delayed_until_it_expires() {
    let f = Fixture::new("delay-acquire").await;
    assert_eq!(f.acquire(ME).await, Value::Null);
    let value = resp(&f.server.cmd(&["GET", &f.shadow]));
    assert_eq!(value, Resp::Bulk(Some(format!("{DELAY}:{ME}"))));
    f.assert_shadow_ahead();

    // A re-entry raises both.
    f.server.cmd(&["PEXPIRE", &f.name, "3000"]);
    assert_eq!(f.acquire(ME).await, Value::Null);
    f.assert_shadow_ahead();

    // Busy for another field: the lock's PTTL, not delayed.
    let busy = f.acquire(OTHER).await;
    assert!(busy.as_i64().is_some_and(|ms| ms > 0), "{busy:?}");

    // The lease ran out: delayed for what the shadow has left, for everyone, nothing written.
    f.lapse();
    let shadow_before = f.pttl(&f.shadow);
    for field in [OTHER, ME] {
        let reply = f.acquire(field).await;
        let left = delayed(&reply).unwrap_or_else(|| panic!("delayed, not {reply:?}"));
        assert!(left > 0 && left <= shadow_before, "{left} ms left");
        assert!(!raw_exists(&f.server, &f.name));
    }
    let left = f.eval(LOCK_DELAY_LEFT, &[&f.name, &f.shadow], &[]).await;
    assert!(left
        .as_i64()
        .is_some_and(|ms| ms > 0 && ms <= shadow_before));

    // An acquire without a lock-delay does not read the shadow (as Redisson's does not).
    assert_eq!(f.acquire_plain(OTHER).await, Value::Null);
    let left = f.eval(LOCK_DELAY_LEFT, &[&f.name, &f.shadow], &[]).await;
    assert_eq!(left.as_i64(), Some(0), "a held lock is not delayed");
    f.lapse();

    // Once the shadow expires, the lock is free to take.
    f.server.cmd(&["PEXPIRE", &f.shadow, "1"]);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(f.acquire(OTHER).await, Value::Null);
}

#[tokio::test]
async fn a_partial_release_extends_the_shadow_and_the_last_deletes_it() {
    let f = Fixture::new("delay-release").await;
    f.acquire(ME).await;
    f.acquire(ME).await;
    let latch = format!("redisson_unlock_latch:{{{}}}:r1", f.name);
    assert_eq!(f.release(&latch, 4000, ME).await.as_i64(), Some(0));
    f.assert_shadow_ahead();
    let latch = format!("redisson_unlock_latch:{{{}}}:r2", f.name);
    assert_eq!(f.release(&latch, 4000, ME).await.as_i64(), Some(1));
    assert!(!raw_exists(&f.server, &f.name));
    assert!(
        !raw_exists(&f.server, &f.shadow),
        "a clean release leaves no delay"
    );
    assert_eq!(f.acquire(OTHER).await, Value::Null);
}

#[tokio::test]
async fn renewal_pushes_the_shadow_on_with_the_lock() {
    let f = Fixture::new("delay-renew").await;
    f.acquire(ME).await;
    f.server.cmd(&["PEXPIRE", &f.name, "100"]);
    f.server.cmd(&["PEXPIRE", &f.shadow, "200"]);
    let lease = LEASE.to_string();
    let renewed = f
        .eval(LOCK_RENEW_DELAYED, &[&f.name, &f.shadow], &[&lease, ME])
        .await;
    assert_eq!(renewed, Value::Array(vec![Value::Integer(1)]));
    f.assert_shadow_ahead();
    // A lock that is gone is not renewed, nor its shadow.
    f.lapse();
    let renewed = f
        .eval(LOCK_RENEW_DELAYED, &[&f.name, &f.shadow], &[&lease, ME])
        .await;
    assert_eq!(renewed, Value::Array(vec![Value::Integer(0)]));
    assert!(!raw_exists(&f.server, &f.name));
}

#[tokio::test]
async fn force_release_and_a_shutdowns_release_delete_the_shadow() {
    let f = Fixture::new("delay-force").await;
    // A lapsed lock: the force-unlock ends the delay, says so and wakes the waiters.
    f.acquire(ME).await;
    f.lapse();
    let mut sub = common::RawSubscriber::subscribe(&f.server, &[&f.channel]).await;
    let keys = [&*f.name, &f.channel, &f.claim, &f.shadow];
    let forced = f
        .eval(LOCK_FORCE_RELEASE, &keys, &["0", "PUBLISH", "500"])
        .await;
    assert_eq!(forced.as_i64(), Some(1));
    assert!(!raw_exists(&f.server, &f.shadow));
    assert!(sub
        .next_message(std::time::Duration::from_secs(2))
        .await
        .is_some());
    // Neither lock nor delay: nothing to do.
    let forced = f
        .eval(LOCK_FORCE_RELEASE, &keys, &["0", "PUBLISH", "500"])
        .await;
    assert_eq!(forced.as_i64(), Some(0));

    // A held lock goes with its shadow.
    f.acquire(ME).await;
    let forced = f
        .eval(LOCK_FORCE_RELEASE, &keys, &["0", "PUBLISH", "500"])
        .await;
    assert_eq!(forced.as_i64(), Some(1));
    assert!(!raw_exists(&f.server, &f.name) && !raw_exists(&f.server, &f.shadow));

    // A shutdown's release is a clean one.
    f.acquire(ME).await;
    let keys = [&*f.name, &f.channel, &f.claim, &f.queue, &f.shadow];
    let dropped = f
        .eval(LOCK_ABANDON, &keys, &["0", ME, "PUBLISH", "500"])
        .await;
    assert_eq!(dropped.as_i64(), Some(2));
    assert!(!raw_exists(&f.server, &f.shadow));
}

#[tokio::test]
async fn a_shadow_of_another_type_fails_the_acquire_naming_it_with_nothing_written() {
    let f = Fixture::new("delay-wrongtype").await;
    f.server.cmd(&["RPUSH", &f.shadow, "x"]);
    let (lease, delay) = (LEASE.to_string(), DELAY.to_string());
    let keys = [&*f.name, &f.claim, &f.shadow];
    let err = f
        .try_eval(LOCK_ACQUIRE, &keys, &[&lease, ME, "0", "500", &delay])
        .await
        .unwrap_err();
    assert!(err.details().contains("[key 3]"), "{err:?}");
    assert!(!raw_exists(&f.server, &f.name));
}

#[tokio::test]
async fn a_fair_lock_in_its_delay_keeps_its_queue_and_answers_delayed() {
    let f = Fixture::new("delay-fair").await;
    assert_eq!(f.fair_acquire(ME, "wait").await, Value::Null);
    f.assert_shadow_ahead();
    // A waiter queues behind the holder.
    assert!(f.fair_acquire(OTHER, "wait").await.as_i64().is_some());
    f.lapse();
    // The queue's head finds the lock delayed; it keeps its place.
    let reply = f.fair_acquire(OTHER, "wait").await;
    assert!(delayed(&reply).is_some_and(|ms| ms > 0), "{reply:?}");
    assert_eq!(resp_int(&f.server.cmd(&["LLEN", &f.queue])), 1);
    assert!(!raw_exists(&f.server, &f.name));
    // A one-shot try is delayed too.
    let reply = f.fair_acquire(ME, "try").await;
    assert!(
        reply.as_i64().is_some() || delayed(&reply).is_some(),
        "{reply:?}"
    );
    assert!(!raw_exists(&f.server, &f.name));

    // A force-unlock ends it; the head takes the lock and a clean release deletes the shadow.
    let alive = common::fair_alive_key(&f.name);
    let keys = [
        &*f.name,
        &f.queue,
        &f.timeouts,
        &f.channel,
        &alive,
        &f.shadow,
    ];
    let forced = f.eval(FAIR_FORCE_RELEASE, &keys, &["0", "PUBLISH"]).await;
    assert_eq!(forced.as_i64(), Some(1));
    assert_eq!(f.fair_acquire(OTHER, "wait").await, Value::Null);
    f.assert_shadow_ahead();
    let latch = format!("redisson_unlock_latch:{{{}}}:f1", f.name);
    let delay = DELAY.to_string();
    let keys = [
        &*f.name,
        &f.queue,
        &f.timeouts,
        &f.channel,
        &latch,
        &alive,
        &f.shadow,
    ];
    let args = ["0", "4000", OTHER, "PUBLISH", "8000", "0", &delay, "0"];
    assert_eq!(f.eval(FAIR_RELEASE, &keys, &args).await.as_i64(), Some(1));
    assert!(!raw_exists(&f.server, &f.shadow));
}
