//! The acquire scripts' "refuse" argument (`lua/lock/acquire.lua`, `lua/fair/acquire.lua`), as
//! the non-reentrant locks send it: a holder field that asks again gets Redisson's error
//! `NON_REENTRANT_REACQUIRE` and nothing is written; anyone else is answered as without it.

use super::fixture::{Lua, CLAIM_WINDOW_MS, LEASE_MS, ME, OTHER};
use crate::common;

use fred::types::Value;
use relock::testing::scripts::{FAIR_ACQUIRE, LOCK_ACQUIRE};

/// The fair acquire's waiter timeout and Redisson's per-waiter wait, as the fair tests send them.
const WAITER_MS: &str = "30000";
const WAIT_Q_MS: &str = "300000";

/// Whether `reply` is the refusal of a re-entry, as Redisson's clients recognise it (anywhere
/// in the error's text: a server may put `ERR ` before it).
fn refused(reply: Result<Value, fred::error::Error>) -> bool {
    match reply {
        Err(e) => e.details().contains("NON_REENTRANT_REACQUIRE"),
        Ok(value) => panic!("a re-entry was answered {value:?}, not refused"),
    }
}

/// The plain acquire of `field`: claim priority 0, the test's claim window, then `extra` (the
/// lock-delay or "", and "refuse").
async fn plain(lua: &Lua, keys: &[&str], field: &str, extra: &[&str]) -> Value {
    try_plain(lua, keys, field, extra).await.unwrap()
}

async fn try_plain(
    lua: &Lua,
    keys: &[&str],
    field: &str,
    extra: &[&str],
) -> Result<Value, fred::error::Error> {
    let (lease, window) = (LEASE_MS.to_string(), CLAIM_WINDOW_MS.to_string());
    let mut args = vec![lease.as_str(), field, "0", window.as_str()];
    args.extend_from_slice(extra);
    lua.eval(LOCK_ACQUIRE, keys, &args).await
}

#[tokio::test]
async fn a_plain_acquire_that_refuses_answers_its_holder_redissons_error_and_writes_nothing() {
    let lua = Lua::start("scripts-refuse-plain").await;
    let keys = [lua.name.as_str(), lua.claim.as_str()];
    let refuse = ["", "refuse"];
    assert_eq!(plain(&lua, &keys, ME, &refuse).await, Value::Null);
    let ttl = lua.pttl(&lua.name);

    assert!(refused(try_plain(&lua, &keys, ME, &refuse).await));
    let hash = common::raw_hgetall(&lua.server, &lua.name);
    assert_eq!(hash, common::pairs(&[(ME, "1")]));
    assert!(
        lua.pttl(&lua.name) <= ttl,
        "a refusal does not extend the lease"
    );
    assert!(!lua.exists(&lua.claim));

    // Another field is busy, as without the argument: the lock's PTTL.
    let Value::Integer(busy) = plain(&lua, &keys, OTHER, &refuse).await else {
        panic!("busy answers the PTTL");
    };
    assert!(busy > 0 && busy <= LEASE_MS, "{busy}");
    // Without it, the holder re-enters: the argument alone makes the difference.
    assert_eq!(plain(&lua, &keys, ME, &[]).await, Value::Null);
    let hash = common::raw_hgetall(&lua.server, &lua.name);
    assert_eq!(hash, common::pairs(&[(ME, "2")]));
}

#[tokio::test]
async fn with_a_lock_delay_the_refusal_leaves_the_shadow_lease_as_it_was() {
    let lua = Lua::start("scripts-refuse-delay").await;
    let shadow = format!("relock_lease:{}", common::tagged(&lua.name));
    let keys = [lua.name.as_str(), lua.claim.as_str(), shadow.as_str()];
    let refuse = ["5000", "refuse"];
    assert_eq!(plain(&lua, &keys, ME, &refuse).await, Value::Null);
    let (ttl, shadow_ttl) = (lua.pttl(&lua.name), lua.pttl(&shadow));
    assert!(
        shadow_ttl > ttl,
        "the shadow outlives the lock by the delay"
    );

    assert!(refused(try_plain(&lua, &keys, ME, &refuse).await));
    let hash = common::raw_hgetall(&lua.server, &lua.name);
    assert_eq!(hash, common::pairs(&[(ME, "1")]));
    assert!(lua.pttl(&lua.name) <= ttl && lua.pttl(&shadow) <= shadow_ttl);
}

#[tokio::test]
async fn a_fair_acquire_that_refuses_never_queues_its_holder_and_keeps_the_queue() {
    let lua = Lua::start("scripts-refuse-fair").await;
    let (queue, deadlines, alive) = (
        common::fair_queue_key(&lua.name),
        common::fair_timeout_key(&lua.name),
        common::fair_alive_key(&lua.name),
    );
    let keys = [
        lua.name.as_str(),
        queue.as_str(),
        deadlines.as_str(),
        alive.as_str(),
    ];
    let lease = LEASE_MS.to_string();
    let fair = |field: &'static str, mode: &'static str| {
        let args = [
            lease.as_str(),
            field,
            WAITER_MS,
            mode,
            WAIT_Q_MS,
            "",
            "refuse",
        ];
        let lua = &lua;
        let keys = &keys;
        async move { lua.eval(FAIR_ACQUIRE, keys, &args).await }
    };
    assert_eq!(fair(ME, "wait").await.unwrap(), Value::Null);
    // Another waiter queues behind the holder.
    assert!(matches!(
        fair(OTHER, "wait").await.unwrap(),
        Value::Integer(_)
    ));
    assert_eq!(
        common::raw_lrange(&lua.server, &queue),
        vec![OTHER.to_owned()]
    );
    let deadline = common::raw_zscore(&lua.server, &deadlines, OTHER);

    // The holder asks again, waiting or not: refused, never queued, the queue as it was.
    for mode in ["wait", "try"] {
        assert!(refused(fair(ME, mode).await), "{mode}");
        assert_eq!(
            common::raw_lrange(&lua.server, &queue),
            vec![OTHER.to_owned()]
        );
        assert_eq!(common::raw_zscore(&lua.server, &deadlines, ME), None);
        assert_eq!(common::raw_zscore(&lua.server, &deadlines, OTHER), deadline);
        let hash = common::raw_hgetall(&lua.server, &lua.name);
        assert_eq!(hash, common::pairs(&[(ME, "1")]));
    }
}
