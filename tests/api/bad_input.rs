//! Bad input gives a typed error, never a panic, and writes nothing to Redis: bad names, bad
//! leases, keys of another type, a closed client, bad settings and unreachable servers.

use crate::common;

use std::future::Future;
use std::time::Duration;

use common::{raw_exists, raw_pttl, resp, resp_int, RedisServer, Resp};
use relock::{Client, Config, Error, Lock};

/// Fails the test instead of hanging on a call that should return at once.
async fn soon<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .unwrap_or_else(|_| panic!("{what} did not return within 10 s"))
}

fn dbsize(server: &RedisServer) -> i64 {
    resp_int(&server.cmd(&["DBSIZE"]))
}

/// Runs every operation of `lock` that takes a lease or a name and checks each error with
/// `check`. Returns how many operations were checked.
async fn every_operation(lock: &Lock, check: impl Fn(&str, Error)) -> usize {
    let mut n = 0;
    let mut seen = |what: &str, e: Error| {
        check(what, e);
        n += 1;
    };
    seen("lock", soon("lock", lock.lock()).await.unwrap_err());
    seen(
        "lock_with_lease",
        soon(
            "lock_with_lease",
            lock.lock_with_lease(Duration::from_secs(5)),
        )
        .await
        .unwrap_err(),
    );
    seen(
        "try_lock",
        soon("try_lock", lock.try_lock()).await.unwrap_err(),
    );
    seen(
        "try_lock_for",
        soon(
            "try_lock_for",
            lock.try_lock_for(Duration::from_millis(200), None),
        )
        .await
        .unwrap_err(),
    );
    seen(
        "force_unlock",
        soon("force_unlock", lock.force_unlock()).await.unwrap_err(),
    );
    seen(
        "is_locked",
        soon("is_locked", lock.is_locked()).await.unwrap_err(),
    );
    seen(
        "is_held_by_current_owner",
        soon("is_held", lock.is_held_by_current_owner())
            .await
            .unwrap_err(),
    );
    seen(
        "hold_count",
        soon("hold_count", lock.hold_count()).await.unwrap_err(),
    );
    seen(
        "remaining_lease",
        soon("remaining_lease", lock.remaining_lease())
            .await
            .unwrap_err(),
    );
    seen(
        "with",
        soon("with", lock.with(|_| async { 1 })).await.unwrap_err(),
    );
    n
}

#[tokio::test]
async fn empty_name_is_invalid_argument_and_writes_nothing() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("");
    let checked = every_operation(&lock, |what, e| {
        assert!(matches!(e, Error::InvalidArgument { .. }), "{what}: {e:?}");
        assert!(e.to_string().contains("empty"), "{what}: {e}");
    })
    .await;
    assert_eq!(checked, 10);
    assert_eq!(dbsize(&server), 0);
    assert_eq!(client.stats().holds, 0);
    assert_eq!(client.stats().channels, 0);
}

#[tokio::test]
async fn names_whose_braces_split_slots_are_invalid() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let p = common::prefix("bad-braces");
    for name in [format!("{p}a{{b"), format!("{p}x{{}}y"), format!("{p}}}{{")] {
        let lock = client.lock(name.clone());
        every_operation(&lock, |what, e| {
            assert!(e.is_invalid_argument(), "{name} {what}: {e:?}");
            assert!(e.to_string().contains(&name), "{name} {what}: {e}");
        })
        .await;
        assert!(!raw_exists(&server, &name));
    }
    assert_eq!(dbsize(&server), 0);
    assert_eq!(client.stats().channels, 0);
}

#[tokio::test]
async fn zero_and_sub_millisecond_leases_are_invalid() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let lock = client.lock(common::prefix("bad-lease-zero"));
    for lease in [
        Duration::ZERO,
        Duration::from_micros(500),
        Duration::from_nanos(999_999),
    ] {
        let e = lock.lock_with_lease(lease).await.unwrap_err();
        assert!(e.is_invalid_argument(), "lock_with_lease({lease:?}): {e:?}");
        let e = lock
            .try_lock_for(Duration::from_secs(1), Some(lease))
            .await
            .unwrap_err();
        assert!(e.is_invalid_argument(), "try_lock_for({lease:?}): {e:?}");
        assert!(e.to_string().contains("lease"), "{e}");
    }
    assert_eq!(dbsize(&server), 0);
    // One millisecond is the smallest lease accepted.
    let guard = lock
        .lock_with_lease(Duration::from_millis(1))
        .await
        .expect("a 1 ms lease is valid");
    drop(guard);
}

#[tokio::test]
async fn leases_too_long_for_milliseconds_are_invalid() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let lock = client.lock(common::prefix("bad-lease-long"));
    for lease in [
        Duration::MAX,
        Duration::from_secs(u64::MAX),
        Duration::from_millis(1 << 53),
    ] {
        let e = soon("lock_with_lease", lock.lock_with_lease(lease))
            .await
            .unwrap_err();
        assert!(e.is_invalid_argument(), "lock_with_lease({lease:?}): {e:?}");
        assert!(e.to_string().contains("too long"), "{e}");
        let e = soon(
            "try_lock_for",
            lock.try_lock_for(Duration::ZERO, Some(lease)),
        )
        .await
        .unwrap_err();
        assert!(e.is_invalid_argument(), "try_lock_for({lease:?}): {e:?}");
    }
    assert_eq!(dbsize(&server), 0);

    // The largest accepted lease, 2^53 - 1 ms, reaches Redis as it is.
    let guard = lock
        .lock_with_lease(Duration::from_millis((1 << 53) - 1))
        .await
        .expect("2^53 - 1 ms is the largest valid lease");
    let pttl = raw_pttl(&server, lock.name());
    assert!(pttl > (1 << 53) - 60_000, "pttl {pttl}");
    guard.unlock().await.unwrap();
    // The lock is gone at once, and the last release leaves no replay key behind.
    assert!(!common::raw_exists(&server, lock.name()));
    assert_eq!(dbsize(&server), 0, "a key was left behind");
}

#[tokio::test]
async fn an_unbounded_wait_on_a_free_lock_works() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let lock = client.lock(common::prefix("bad-wait-max"));
    let guard = soon("try_lock_for(MAX)", lock.try_lock_for(Duration::MAX, None))
        .await
        .unwrap()
        .expect("a free lock is taken at once");
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    let pttl = raw_pttl(&server, lock.name());
    assert!((25_000..=30_000).contains(&pttl), "watchdog lease {pttl}");

    // A huge wait on a busy lock waits, and gets it once the holder lets go.
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = lock
                .try_lock_for(Duration::from_secs(u64::MAX), Some(Duration::from_secs(5)))
                .await
                .unwrap()
                .expect("taken after the release");
            guard.unlock().await.unwrap();
        }
    });
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            client.stats().waiters == 1
        })
        .await
    );
    guard.unlock().await.unwrap();
    soon("the waiter", waiter).await.unwrap();
    // The release's replay key goes with the sweeper's next `DEL`, a few ms later.
    assert!(common::eventually(Duration::from_secs(5), || async { dbsize(&server) == 0 }).await);
}

#[tokio::test]
async fn unlock_by_a_non_owner_is_not_held_and_leaves_the_holder_alone() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let name = common::prefix("bad-not-held");
    let channel = format!("redisson_lock__channel:{{{name}}}");

    let mine = relock::Owner::new();
    let guard = client
        .lock(name.clone())
        .owned_by(mine.clone())
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    // Someone force-unlocks it and another owner takes it.
    assert!(client.lock(name.clone()).force_unlock().await.unwrap());
    let theirs = relock::Owner::new();
    let other = client.lock(name.clone()).owned_by(theirs.clone());
    let their_guard = other.lock().await.unwrap();
    let their_field = format!("{}:{}", client.id(), theirs.id());
    let before = common::raw_hgetall(&server, &name);
    assert_eq!(before, vec![(their_field, "1".to_owned())]);

    let mut sub = common::RawSubscriber::subscribe(&server, &[&channel]).await;
    let e = guard.unlock().await.unwrap_err();
    let my_field = format!("{}:{}", client.id(), mine.id());
    match &e {
        Error::NotHeld { lock, owner } => {
            assert_eq!(lock, &name);
            assert_eq!(owner, &my_field);
        }
        other => panic!("expected NotHeld, got {other:?}"),
    }
    assert!(e.is_not_held());
    let message = e.to_string();
    assert!(message.contains(&name), "{message}");
    assert!(message.contains(&my_field), "{message}");

    // The real holder's hold is untouched, and nobody was woken.
    assert_eq!(common::raw_hgetall(&server, &name), before);
    assert_eq!(other.hold_count().await.unwrap(), 1);
    sub.assert_quiet(&server, &channel).await;
    their_guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_key_of_another_type_is_wrong_type_and_kept() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let name = common::prefix("bad-wrong-type");
    server.cmd(&["SET", &name, "user-data"]);
    let lock = client.lock(name.clone());
    every_operation(&lock, |what, e| match &e {
        Error::WrongType { key } => {
            assert_eq!(key, &name, "{what}");
            assert!(e.to_string().contains(&name), "{what}: {e}");
        }
        other => panic!("{what}: expected WrongType, got {other:?}"),
    })
    .await;
    assert_eq!(
        resp(&server.cmd(&["GET", &name])),
        Resp::Bulk(Some("user-data".into()))
    );
    assert_eq!(raw_pttl(&server, &name), -1);
    assert_eq!(dbsize(&server), 1);
    let stats = client.stats();
    assert_eq!((stats.holds, stats.waiters), (0, 0), "{stats:?}");
}

#[tokio::test]
async fn a_closed_client_fails_every_operation_with_closed() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let held_name = common::prefix("bad-closed-held");
    let held = client
        .lock(held_name.clone())
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    client.shutdown_keeping_locks().await.unwrap();
    client
        .shutdown()
        .await
        .expect("a second shutdown is a no-op");

    let name = common::prefix("bad-closed");
    let lock = client.lock(name.clone());
    every_operation(&lock, |what, e| {
        assert!(matches!(e, Error::Closed), "{what}: {e:?}");
    })
    .await;
    let e = soon("guard.hold_count", held.hold_count())
        .await
        .unwrap_err();
    assert!(e.is_closed(), "guard.hold_count: {e:?}");
    let e = soon("guard.unlock", held.unlock()).await.unwrap_err();
    assert!(e.is_closed(), "guard.unlock: {e:?}");

    // Nothing new was written; the hold taken before shutdown stays until its lease ends.
    assert!(!raw_exists(&server, &name));
    assert_eq!(dbsize(&server), 1);
    let hash = common::raw_hgetall(&server, &held_name);
    assert_eq!(hash.len(), 1);
    assert_eq!(hash[0].1, "1");
}

#[tokio::test]
async fn bad_settings_are_refused_before_connecting() {
    let server = RedisServer::start();
    let base = || Config::from_url(&server.url()).unwrap();
    let bad = [
        (
            "zero watchdog",
            base().with_watchdog_timeout(Duration::ZERO),
        ),
        (
            "2 ms watchdog",
            base().with_watchdog_timeout(Duration::from_millis(2)),
        ),
        (
            "endless watchdog",
            base().with_watchdog_timeout(Duration::MAX),
        ),
        (
            "2 ms fair waiter timeout",
            base().with_fair_waiter_timeout(Duration::from_millis(2)),
        ),
        (
            "endless fair waiter timeout",
            base().with_fair_waiter_timeout(Duration::MAX),
        ),
        (
            "zero command timeout",
            base().with_command_timeout(Duration::ZERO),
        ),
        (
            "endless command timeout",
            base().with_command_timeout(Duration::MAX),
        ),
        ("zero renewal batch", base().with_renewal_batch(0)),
        (
            "endless hand-off grace",
            base().with_handoff_grace(Duration::MAX),
        ),
        (
            "sub-millisecond claim window",
            base().with_claim_window(Duration::from_micros(500)),
        ),
        (
            "endless claim window",
            base().with_claim_window(Duration::MAX),
        ),
    ];
    for (what, config) in bad {
        let e = soon(what, Client::new(config)).await.unwrap_err();
        assert!(e.is_invalid_argument(), "{what}: {e:?}");
    }
    // The smallest valid settings pass validation: 3 ms watchdog, one lock per batch, no grace
    // and no claims, and a 1 ms command timeout (which may or may not be long enough to connect,
    // but is not invalid).
    let client = Client::new(
        base()
            .with_watchdog_timeout(Duration::from_millis(3))
            .with_renewal_batch(1)
            .with_handoff_grace(Duration::ZERO)
            .with_claim_window(Duration::ZERO),
    )
    .await
    .map(|_| ());
    assert!(client.is_ok(), "{client:?}");
    let outcome = soon(
        "1 ms command timeout",
        Client::new(base().with_command_timeout(Duration::from_millis(1))),
    )
    .await;
    if let Err(e) = outcome {
        assert!(
            !e.is_invalid_argument(),
            "1 ms is a valid command timeout: {e:?}"
        );
    }
    assert_eq!(dbsize(&server), 0);
}

#[tokio::test]
async fn bad_urls_are_invalid_argument() {
    for url in [
        "not a url",
        "",
        "redis://127.0.0.1:6379/not-a-db",
        "redis://127.0.0.1:6379/1/2",
    ] {
        let e = Config::from_url(url).unwrap_err();
        assert!(e.is_invalid_argument(), "{url:?}: {e:?}");
        let e = soon(url, Client::connect(url)).await.unwrap_err();
        assert!(e.is_invalid_argument(), "{url:?}: {e:?}");
        assert!(e.to_string().contains("URL"), "{url:?}: {e}");
    }
}

#[tokio::test]
async fn connecting_to_a_port_without_a_server_fails() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = Config::from_url(&format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .with_command_timeout(Duration::from_secs(1));
    let outcome = tokio::time::timeout(Duration::from_secs(20), Client::new(config))
        .await
        .expect("connecting to a closed port must fail, not hang");
    let e = outcome.unwrap_err();
    assert!(e.is_redis(), "{e:?}");
}

/// A waiter parked behind another holder when the key turns into a string gets `WrongType`
/// on its next attempt, and leaves the string alone.
#[tokio::test]
async fn a_waiter_meeting_a_key_of_another_type_gets_wrong_type() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let name = common::prefix("bad-wrong-type-waiting");
    let channel = format!("redisson_lock__channel:{{{name}}}");
    server.cmd(&["HSET", &name, "java-client:1", "1"]);
    server.cmd(&["PEXPIRE", &name, "30000"]);
    let waiter = tokio::spawn({
        let lock = client.lock(name.clone());
        async move { lock.lock().await.map(|_| ()) }
    });
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            client.stats().waiters == 1
        })
        .await
    );
    // The lock's key becomes a user string; a release message wakes the waiter.
    server.cmd(&["SET", &name, "user-data"]);
    server.cmd(&["PUBLISH", &channel, "0"]);
    let e = soon("the waiter", waiter).await.unwrap().unwrap_err();
    match &e {
        Error::WrongType { key } => assert_eq!(key, &name),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert_eq!(
        resp(&server.cmd(&["GET", &name])),
        Resp::Bulk(Some("user-data".into()))
    );
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            let stats = client.stats();
            stats.waiters == 0 && stats.holds == 0
        })
        .await,
        "{:?}",
        client.stats()
    );
}

/// A `lock()` parked behind another holder when the client shuts down ends promptly with
/// `Closed`, and writes nothing.
#[tokio::test]
async fn a_waiter_parked_at_shutdown_ends_with_closed() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let name = common::prefix("bad-closed-waiting");
    server.cmd(&["HSET", &name, "java-client:1", "1"]);
    server.cmd(&["PEXPIRE", &name, "20000"]);
    let waiter = tokio::spawn({
        let lock = client.lock(name.clone());
        async move { lock.lock().await.map(|_| ()) }
    });
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            client.stats().waiters == 1
        })
        .await
    );
    client.shutdown().await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter must end soon after shutdown, not at the holder's TTL")
        .unwrap();
    let e = outcome.unwrap_err();
    assert!(e.is_closed(), "expected Closed, got {e:?}");
    assert_eq!(
        common::raw_hgetall(&server, &name),
        vec![("java-client:1".to_owned(), "1".to_owned())]
    );
}

/// Runs `attempt` three times against a server holding only `key` (of another type than the
/// lock expects there) and checks each fails with `WrongType` naming `key`, with nothing written:
/// the server holds `key` alone, as it was.
async fn wrong_type_names<F, Fut, T>(server: &RedisServer, key: &str, attempt: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
    T: std::fmt::Debug,
{
    let before = server.cmd(&["DUMP", key]);
    for _ in 0..3 {
        match soon("the acquire", attempt()).await {
            Err(Error::WrongType { key: named }) => assert_eq!(named, key),
            other => panic!("expected WrongType naming {key}, got {other:?}"),
        }
    }
    assert_eq!(dbsize(server), 1, "the failed acquires wrote a key");
    assert_eq!(server.cmd(&["DUMP", key]), before);
    assert_eq!(raw_pttl(server, key), -1);
}

/// A fenced lock whose token counter is not a number: every acquire fails, naming the counter,
/// and leaves no hold behind (it took the lock hash for a lease before).
#[tokio::test]
async fn a_fenced_lock_with_a_bad_token_counter_fails_naming_it_and_holds_nothing() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let name = common::prefix("bad-token");
    let counter = format!("redisson_lock_token:{{{name}}}");
    server.cmd(&["SET", &counter, "not-a-number"]);
    let lock = client.fenced_lock(name.clone());
    wrong_type_names(&server, &counter, || lock.try_lock()).await;
    assert!(!raw_exists(&server, &name));
    let stats = client.stats();
    assert_eq!((stats.holds, stats.waiters), (0, 0), "{stats:?}");
}

/// A fair lock whose queue holds another type: the error names the queue, not the lock (which
/// does not exist), and nothing is written.
#[tokio::test]
async fn a_fair_queue_of_another_type_is_named_and_kept() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let name = common::prefix("bad-fair-queue");
    let queue = common::fair_queue_key(&name);
    server.cmd(&["SET", &queue, "x"]);
    let lock = client.fair_lock(name.clone());
    wrong_type_names(&server, &queue, || lock.lock()).await;
    let timeouts = common::fair_timeout_key(&name);
    server.cmd(&["DEL", &queue]);
    server.cmd(&["SET", &timeouts, "x"]);
    wrong_type_names(&server, &timeouts, || lock.try_lock()).await;
}

/// A plain lock whose hand-off claim key holds another type: the error names the claim key.
#[tokio::test]
async fn a_claim_key_of_another_type_is_named_and_kept() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let name = common::prefix("bad-claim");
    let claim = common::claim_key(&name);
    server.cmd(&["RPUSH", &claim, "x"]);
    let lock = client.lock(name.clone());
    wrong_type_names(&server, &claim, || lock.lock()).await;
    let writer = client.rw_lock(name.clone()).write();
    wrong_type_names(&server, &claim, || writer.lock()).await;
}
