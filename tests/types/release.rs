//! Releasing a lock: explicitly, by dropping its guard, after scoped work (whatever it returned),
//! by force; a release by someone who no longer holds the lock fails and changes nothing; the
//! last release publishes the wake-up message.

use crate::common;

use std::time::{Duration, Instant};

use relock::{Error, Owner};

const WATCHDOG: Duration = Duration::from_secs(3);
/// How long anything that should happen at once may take on a shared machine.
const SOON: Duration = Duration::from_secs(10);

#[tokio::test]
async fn an_explicit_unlock_frees_the_lock() {
    let (server, client, name, lock) = common::setup_lock("release-explicit", WATCHDOG).await;
    let guard = lock.lock().await.unwrap();
    assert!(common::raw_exists(&server, &name));
    assert_eq!(client.stats().holds, 1);
    guard.unlock().await.unwrap();
    assert!(
        !common::raw_exists(&server, &name),
        "unlock returns after the key is gone"
    );
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(
        lock.remaining_lease().await.unwrap(),
        relock::RemainingLease::Unlocked
    );
    assert_eq!(client.stats().holds, 0);

    // Free again for anyone: another client takes it at once.
    let other = common::client(&server, WATCHDOG).await;
    let guard = common::taken(other.lock(name.clone()).try_lock().await, "free");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn dropping_a_guard_releases_its_hold_in_the_background() {
    let (server, client, name, lock) = common::setup_lock("release-drop", WATCHDOG).await;
    let owner = Owner::new();
    let field = format!("{}:{}", client.id(), owner.id());
    let lock = lock.owned_by(owner);

    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    assert_eq!(common::raw_holds(&server, &name, &field), 2);
    drop(inner);
    let one_left = common::eventually(SOON, || async {
        common::raw_holds(&server, &name, &field) == 1
    })
    .await;
    assert!(one_left, "dropping the inner guard releases one hold");
    assert!(common::raw_exists(&server, &name), "the outer hold remains");
    assert_eq!(lock.hold_count().await.unwrap(), 1);

    drop(outer);
    let gone = common::eventually(SOON, || async { !common::raw_exists(&server, &name) }).await;
    assert!(gone, "dropping the last guard frees the lock");
    assert_eq!(client.stats().holds, 0);
    assert_eq!(client.stats().renewing, 0);
}

#[tokio::test]
async fn scoped_work_releases_the_lock_whatever_it_returns() {
    let (server, client, name, lock) = common::setup_lock("release-with", WATCHDOG).await;

    let outcome = lock
        .with(|_| async {
            assert_eq!(lock.hold_count().await.unwrap(), 1, "held during the work");
            Err::<(), _>("the work failed")
        })
        .await
        .expect("the lock itself worked");
    assert_eq!(outcome, Err("the work failed"));
    assert!(
        !common::raw_exists(&server, &name),
        "released after failed work"
    );

    let value = lock
        .with(|_| async {
            assert!(common::raw_exists(&server, &name));
            42
        })
        .await
        .unwrap();
    assert_eq!(value, 42);
    assert!(
        !common::raw_exists(&server, &name),
        "released after work that succeeded"
    );

    // Work that panics: the guard's drop releases the lock.
    let panicked = tokio::spawn({
        let lock = lock.clone();
        async move {
            lock.with(|_| async { panic!("the work panicked") })
                .await
                .unwrap();
        }
    })
    .await
    .unwrap_err();
    assert!(panicked.is_panic());
    let gone = common::eventually(SOON, || async { !common::raw_exists(&server, &name) }).await;
    assert!(gone, "released after work that panicked");
    assert_eq!(client.stats().holds, 0);
}

#[tokio::test]
async fn unlocking_a_hold_that_is_gone_fails_and_leaves_the_new_holder_alone() {
    let (server, first, second, name) = common::setup_two("release-not-held", WATCHDOG).await;
    let owner = Owner::new();
    let stale_field = format!("{}:{}", first.id(), owner.id());

    // A fixed lease nobody renews, so no watchdog notices the loss: the release is what finds it.
    let stale = first
        .lock(name.clone())
        .owned_by(owner)
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    assert!(first.lock(name.clone()).force_unlock().await.unwrap());
    let current = common::taken(
        second.lock(name.clone()).try_lock().await,
        "free after the forced unlock",
    );
    let before = common::raw_hgetall(&server, &name);
    assert_eq!(before.len(), 1);
    assert!(before[0].0.starts_with(second.id()), "{before:?}");

    let err = stale.unlock().await.unwrap_err();
    match &err {
        Error::NotHeld { lock, owner } => {
            assert_eq!(lock, &name);
            assert_eq!(owner, &stale_field);
        }
        other => panic!("expected NotHeld, got {other:?}"),
    }
    assert!(err.is_not_held());
    let message = err.to_string();
    assert!(
        message.contains(&name) && message.contains(&stale_field),
        "{message}"
    );

    assert_eq!(
        common::raw_hgetall(&server, &name),
        before,
        "the new hold is untouched"
    );
    assert!(
        common::raw_pttl(&server, &name) > 0,
        "the lease is untouched"
    );
    assert_eq!(current.hold_count().await.unwrap(), 1);
    current.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn unlocking_a_hold_another_owner_of_the_same_client_took_over_fails() {
    let (server, client, name) = common::setup("release-not-held-same-client", WATCHDOG).await;
    let stale_lock = client.lock(name.clone()).owned_by(Owner::new());
    let stale = stale_lock
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    assert!(stale_lock.force_unlock().await.unwrap());
    let current_lock = client.lock(name.clone()).owned_by(Owner::new());
    let current = current_lock.try_lock().await.unwrap().expect("free");
    let before = common::raw_hgetall(&server, &name);

    let err = stale.unlock().await.unwrap_err();
    assert!(err.is_not_held(), "{err:?}");
    assert_eq!(common::raw_hgetall(&server, &name), before);
    assert!(common::raw_pttl(&server, &name) > 0);
    assert_eq!(current_lock.hold_count().await.unwrap(), 1);
    assert_eq!(stale_lock.hold_count().await.unwrap(), 0);
    current.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn force_unlock_reports_whether_there_was_a_lock_and_wakes_a_waiter() {
    let (server, client, name, lock) =
        common::setup_lock("release-force", Duration::from_secs(20)).await;
    assert!(!lock.force_unlock().await.unwrap(), "nothing to delete yet");

    let holder = lock.lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = tokio::time::timeout(Duration::from_secs(60), lock.lock())
                .await
                .expect("the waiter was never woken")
                .unwrap();
            (Instant::now(), guard)
        }
    });
    let channel = common::lock_channel(&name);
    let waiting = common::eventually(SOON, || async {
        client.stats().waiters == 1 && common::raw_numsub(&server, &channel) == 1
    })
    .await;
    assert!(waiting, "the waiter never registered");

    let forced = Instant::now();
    assert!(lock.force_unlock().await.unwrap(), "a lock was deleted");
    let (acquired, guard) = waiter.await.unwrap();
    // The holder's 20 s watchdog lease was far from over: the force unlock's message woke it.
    let waited = acquired.saturating_duration_since(forced);
    assert!(
        waited < Duration::from_secs(5),
        "woken {waited:?} after the force unlock"
    );
    assert_eq!(guard.hold_count().await.unwrap(), 1);

    let err = holder.unlock().await.unwrap_err();
    assert!(err.is_not_held() || err.is_lease_lost(), "{err}");
    assert_eq!(
        guard.hold_count().await.unwrap(),
        1,
        "the waiter's hold is untouched"
    );
    assert!(lock.force_unlock().await.unwrap());
    assert!(!common::raw_exists(&server, &name));
    assert!(!lock.force_unlock().await.unwrap());
    drop(guard);
}

#[tokio::test]
async fn force_unlock_leaves_a_key_of_another_type_alone() {
    let (server, client, name) = common::setup("release-force-wrong-type", WATCHDOG).await;
    server.cmd(&["SET", &name, "not a lock"]);
    let err = client.lock(name.clone()).force_unlock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err:?}");
    assert_eq!(
        common::resp(&server.cmd(&["GET", &name])),
        common::Resp::Bulk(Some("not a lock".to_owned()))
    );
}

#[tokio::test]
async fn only_the_last_release_publishes_the_wake_up_message() {
    let (server, client, name) = common::setup("release-publish", WATCHDOG).await;
    let channel = common::lock_channel(&name);
    let mut sub = common::RawSubscriber::subscribe(&server, &[&channel]).await;

    let lock = client.lock(name.clone());
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    inner.unlock().await.unwrap();
    // A marker after the inner release: had that release published, its message would come first.
    assert_eq!(
        common::resp_int(&server.cmd(&["PUBLISH", &channel, "marker"])),
        1
    );
    outer.unlock().await.unwrap();

    assert_eq!(
        sub.next_message(SOON).await,
        Some((channel.clone(), "marker".to_owned()))
    );
    assert_eq!(
        sub.next_message(SOON).await,
        Some((channel.clone(), "0".to_owned())),
        "the last release publishes `0`"
    );

    // A release that finds nothing to release publishes nothing; a force unlock publishes `0`.
    let stale = lock.lock_with_lease(Duration::from_secs(30)).await.unwrap();
    assert!(lock.force_unlock().await.unwrap());
    assert_eq!(
        sub.next_message(SOON).await,
        Some((channel.clone(), "0".to_owned())),
        "a force unlock publishes `0`"
    );
    assert!(stale.unlock().await.unwrap_err().is_not_held());
    // The raw subscriber, and possibly the client's own subscription still lingering.
    assert!(common::resp_int(&server.cmd(&["PUBLISH", &channel, "marker"])) >= 1);
    assert_eq!(
        sub.next_message(SOON).await,
        Some((channel.clone(), "marker".to_owned()))
    );

    // A dropped guard's background release publishes too.
    drop(lock.lock().await.unwrap());
    assert_eq!(
        sub.next_message(SOON).await,
        Some((channel, "0".to_owned()))
    );
}

/// After a force-unlock, a guard's `unlock()` says whether the guard knew: `NotHeld` before its
/// `lost()` completed (no renewal has run since: the watchdog timeout is 30 s), `LeaseLost` once
/// the watchdog's renewal found the lock gone and `lost()` completed. Neither releases anything.
#[tokio::test]
async fn unlock_after_a_force_unlock_says_whether_the_guard_knew() {
    let (server, _unaware, _name, lock) =
        common::setup_lock("release-forced-unaware", Duration::from_secs(30)).await;
    let guard = lock.lock().await.unwrap();
    assert!(lock.force_unlock().await.unwrap());
    assert!(!guard.is_lost(), "the guard cannot know yet");
    let err = guard.unlock().await.unwrap_err();
    assert!(err.is_not_held(), "{err:?}");

    let aware = common::client(&server, Duration::from_millis(600)).await;
    let name = common::prefix("release-forced-aware");
    let lock = aware.lock(name.clone());
    let guard = lock.lock().await.unwrap();
    assert!(lock.force_unlock().await.unwrap());
    tokio::time::timeout(SOON, guard.lost())
        .await
        .expect("the watchdog never found the lock gone");
    assert!(guard.is_lost());
    let err = guard.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "{err:?}");
    assert!(!common::raw_exists(&server, &name));
}

/// A re-entry guard dropped (its release goes on in the background) and the other guard
/// unlocked at once: two releases of the owner's holds in flight together. The one that runs
/// first leaves a hold behind, and must keep the lock for it until the other arrives, not cut
/// the TTL to what the owner's local holds need (none by then: 1 ms, after which the other
/// release found the lock expired and answered `NotHeld`, seen under load). Every release
/// script sent is read back from the server's slow log, which logs each command here: the TTL
/// each asked for (its `ARGV[2]`) covers the 30 s lease of the hold still being released.
#[tokio::test]
async fn a_dropped_re_entry_and_an_unlock_at_once_keep_the_lock_for_each_other() {
    let server = common::RedisServer::start_with(&[
        "--slowlog-log-slower-than",
        "0",
        "--slowlog-max-len",
        "100000",
    ]);
    let client = common::client(&server, Duration::from_secs(30)).await;
    let name = common::prefix("release-two-at-once");
    let lock = client.lock(name.clone());
    let sha = fred::util::sha1_hash(relock::testing::scripts::LOCK_RELEASE);
    let function = format!("{}_lock_release", relock::library_name());
    for round in 0..20 {
        let guard = lock.lock().await.unwrap();
        drop(lock.try_lock().await.unwrap().expect("a re-entry"));
        guard
            .unlock()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let freed = common::eventually(SOON, || async { !common::raw_exists(&server, &name) });
        assert!(freed.await, "round {round}: the lock was never freed");
    }
    let logged = server.cmd(&["SLOWLOG", "GET", "1000"]);
    let common::Resp::Array(Some(entries)) = common::resp(&logged) else {
        panic!("SLOWLOG GET: {logged:?}");
    };
    let mut keeps = Vec::new();
    for entry in entries {
        let common::Resp::Array(Some(fields)) = entry else {
            continue;
        };
        let Some(common::Resp::Array(Some(args))) = fields.get(3) else {
            continue;
        };
        let args: Vec<String> = args
            .iter()
            .filter_map(|arg| match arg {
                common::Resp::Bulk(Some(text)) => Some(text.clone()),
                _ => None,
            })
            .collect();
        // By EVALSHA of the release script, or FCALL of its function.
        let release = (args.len() > 3)
            && ((args[0].eq_ignore_ascii_case("evalsha") && args[1] == sha)
                || (args[0].eq_ignore_ascii_case("fcall") && args[1] == function));
        if release {
            let keys: usize = args[2].parse().unwrap();
            keeps.push(args[3 + keys + 1].parse::<u64>().unwrap());
        }
    }
    assert!(keeps.len() >= 40, "two releases a round: {keeps:?}");
    assert!(
        keeps.iter().all(|&keep| keep >= 10_000),
        "a release cut the lock's TTL below the hold still being released: {keeps:?}"
    );
    client.shutdown().await.unwrap();
}
