//! Bad input gives a typed error, never a panic, and writes nothing to Redis: bad names, bad
//! leases, keys of another type, a closed client, bad settings and unreachable servers.

use crate::common;

use std::future::Future;
use std::time::Duration;

use common::proxy::{Mode, Proxy};
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

/// Makes lock `name` held by another (Java) client for `ttl_ms`, written with raw commands.
fn held_elsewhere(server: &RedisServer, name: &str, ttl_ms: &str) {
    server.cmd(&["HSET", name, "java-client:1", "1"]);
    server.cmd(&["PEXPIRE", name, ttl_ms]);
}

/// Waits (at most 5 s) until `client` has exactly one waiter parked.
async fn until_one_waits(client: &Client) {
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            client.stats().waiters == 1
        })
        .await
    );
}

/// A task taking lock `name` with `lock()` behind a hold by another client of `ttl_ms`, returned
/// once it is parked; it ends with what `lock()` gave.
async fn parked_waiter(
    server: &RedisServer,
    client: &Client,
    name: &str,
    ttl_ms: &str,
) -> tokio::task::JoinHandle<Result<(), Error>> {
    held_elsewhere(server, name, ttl_ms);
    let waiter = tokio::spawn({
        let lock = client.lock(name);
        async move { lock.lock().await.map(|_| ()) }
    });
    until_one_waits(client).await;
    waiter
}

/// One call of the API, named, with its result reduced to the error.
type Failing<'a> = (
    &'static str,
    std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + 'a>>,
);

/// `[Failing; N]` from `"name" => call` pairs, each call a future of a `Result`.
macro_rules! failing {
    ($($what:literal => $call:expr),* $(,)?) => {
        [$(($what, Box::pin(async { $call.await.map(drop) }) as _)),*]
    };
}

/// Runs every operation of `lock` that takes a lease or a name and checks each error with
/// `check`. Returns how many operations were checked.
async fn every_operation(lock: &Lock, check: impl Fn(&str, Error)) -> usize {
    let lease = Duration::from_secs(5);
    let wait = Duration::from_millis(200);
    let operations: [Failing<'_>; 10] = failing![
        "lock" => lock.lock(),
        "lock_with_lease" => lock.lock_with_lease(lease),
        "try_lock" => lock.try_lock(),
        "try_lock_for" => lock.try_lock_for(wait, None),
        "force_unlock" => lock.force_unlock(),
        "is_locked" => lock.is_locked(),
        "is_held_by_current_owner" => lock.is_held_by_current_owner(),
        "hold_count" => lock.hold_count(),
        "remaining_lease" => lock.remaining_lease(),
        "with" => lock.with(|_| async { 1 }),
    ];
    let mut n = 0;
    for (what, operation) in operations {
        check(what, soon(what, operation).await.unwrap_err());
        n += 1;
    }
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

/// Braces that would split a name's keys over cluster slots (`user{42`) harm nothing on one
/// server, which has no slots: every lock type, semaphore and latch takes such a name, as
/// Redisson does (a cluster refuses it: see the cluster tests).
#[tokio::test]
async fn names_with_odd_braces_work_on_one_server() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let p = common::prefix("odd-braces");
    for name in [
        format!("{p}user{{42"),
        format!("{p}x{{}}y"),
        format!("{p}}}{{"),
    ] {
        let lock = client.lock(name.clone());
        let guard = lock.lock().await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(raw_exists(&server, &name));
        assert!(lock.try_lock().await.unwrap().is_some(), "{name}: re-entry");
        guard.unlock().await.unwrap();
        let fair = client.fair_lock(name.clone()).lock().await.unwrap();
        fair.unlock().await.unwrap();
        let write = client.rw_lock(name.clone()).write().lock().await.unwrap();
        write.unlock().await.unwrap();
        let fenced = client.fenced_lock(name.clone()).lock().await.unwrap();
        fenced.unlock().await.unwrap();

        let sem = client.semaphore(format!("{name}:sem"));
        assert!(sem.try_set_permits(1).await.unwrap(), "{name}");
        sem.acquire(1).await.unwrap();
        sem.release(1).await.unwrap();
        let permits = client.permit_semaphore(format!("{name}:permits"));
        assert!(permits.try_set_permits(1).await.unwrap(), "{name}");
        permits.acquire().await.unwrap().release().await.unwrap();
        let latch = client.count_down_latch(format!("{name}:latch"));
        assert!(latch.try_set_count(1).await.unwrap(), "{name}");
        latch.count_down().await.unwrap();
        latch.wait().await.unwrap();
    }
    assert_eq!(client.stats().holds, 0);
}

/// A server, a client on it and a lock named for `test` (see [`common::setup`]).
async fn setup_lock(test: &str) -> (RedisServer, Client, Lock) {
    let (server, client, name) = common::setup(test, Duration::from_secs(30)).await;
    let lock = client.lock(name);
    (server, client, lock)
}

/// Checks that `lock` refuses each of `leases`, given to `lock_with_lease` and to `try_lock_for`
/// (waiting `wait`), as `InvalidArgument` whose message says `says`, and that nothing was
/// written to `server`.
async fn leases_refused(
    server: &RedisServer,
    lock: &Lock,
    leases: [Duration; 3],
    wait: Duration,
    says: &str,
) {
    for lease in leases {
        let e = soon("lock_with_lease", lock.lock_with_lease(lease))
            .await
            .unwrap_err();
        assert!(e.is_invalid_argument(), "lock_with_lease({lease:?}): {e:?}");
        assert!(e.to_string().contains(says), "{e}");
        let e = soon("try_lock_for", lock.try_lock_for(wait, Some(lease)))
            .await
            .unwrap_err();
        assert!(e.is_invalid_argument(), "try_lock_for({lease:?}): {e:?}");
        assert!(e.to_string().contains(says), "{e}");
    }
    assert_eq!(dbsize(server), 0);
}

#[tokio::test]
async fn zero_and_sub_millisecond_leases_are_invalid() {
    let (server, _client, lock) = setup_lock("bad-lease-zero").await;
    let under_1_ms = [
        Duration::ZERO,
        Duration::from_micros(500),
        Duration::from_nanos(999_999),
    ];
    leases_refused(&server, &lock, under_1_ms, Duration::from_secs(1), "lease").await;
    // One millisecond is the smallest lease accepted: it is sent. (On a loaded machine a round
    // trip can outlast it, three times in a row: that is the lease running out, not a refusal.)
    match lock.lock_with_lease(Duration::from_millis(1)).await {
        Ok(guard) => drop(guard),
        Err(e) => assert!(
            e.to_string()
                .contains("ran out before Redis's reply came back"),
            "a 1 ms lease is valid: {e}"
        ),
    }
}

/// A lease with a part of a millisecond reaches Redis rounded up to the next whole one, and
/// the guard or permit reports the lease Redis got.
#[tokio::test]
async fn a_fraction_of_a_millisecond_is_rounded_up() {
    let (server, client, lock) = setup_lock("lease-fraction").await;
    // Long enough to outlast a round trip on a loaded machine (a 2 ms lease may not).
    let guard = lock
        .lock_with_lease(Duration::from_micros(4_999_999))
        .await
        .unwrap();
    assert_eq!(guard.lease(), Some(Duration::from_millis(5_000)));
    drop(guard);
    let _ = lock.force_unlock().await;

    let asked = Duration::from_micros(60_000_500);
    let guard = lock.lock_with_lease(asked).await.unwrap();
    assert_eq!(guard.lease(), Some(Duration::from_millis(60_001)));
    let pttl = raw_pttl(&server, lock.name());
    assert!((59_000..=60_001).contains(&pttl), "pttl {pttl}");
    let guard = lock
        .try_lock_for(Duration::ZERO, Some(asked))
        .await
        .unwrap()
        .expect("a re-entry");
    assert_eq!(guard.lease(), Some(Duration::from_millis(60_001)));
    drop(guard);
    let _ = lock.force_unlock().await;

    let permits = client.permit_semaphore(common::prefix("lease-fraction-permits"));
    assert!(permits.try_set_permits(1).await.unwrap());
    let permit = permits.acquire_with_lease(asked).await.unwrap();
    assert_eq!(permit.lease(), Some(Duration::from_millis(60_001)));
}

#[tokio::test]
async fn leases_too_long_for_milliseconds_are_invalid() {
    let (server, _client, lock) = setup_lock("bad-lease-long").await;
    let over_2_53_ms = [
        Duration::MAX,
        Duration::from_secs(u64::MAX),
        Duration::from_millis(1 << 53),
    ];
    leases_refused(&server, &lock, over_2_53_ms, Duration::ZERO, "too long").await;

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
    let (server, client, lock) = setup_lock("bad-wait-max").await;
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
    until_one_waits(&client).await;
    guard.unlock().await.unwrap();
    soon("the waiter", waiter).await.unwrap();
    // The release's replay key goes with the sweeper's next `DEL`, a few ms later.
    assert!(common::eventually(Duration::from_secs(5), || async { dbsize(&server) == 0 }).await);
}

#[tokio::test]
async fn unlock_by_a_non_owner_is_not_held_and_leaves_the_holder_alone() {
    let (server, client, name) = common::setup("bad-not-held", Duration::from_secs(30)).await;
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
    let (server, client, name) = common::setup("bad-wrong-type", Duration::from_secs(30)).await;
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

/// A setting of [`Config`] that takes a duration.
type Setting = fn(Config, Duration) -> Config;

/// Checks that a client of `server` is refused as `InvalidArgument`, before it connects, with
/// each of the values given for each setting.
async fn settings_refused(server: &RedisServer, bad: &[(&str, Setting, &[Duration])]) {
    for (setting, with, values) in bad {
        for value in *values {
            let what = format!("{setting} of {value:?}");
            let config = with(Config::from_url(&server.url()).unwrap(), *value);
            let e = soon(&what, Client::new(config)).await.unwrap_err();
            assert!(e.is_invalid_argument(), "{what}: {e:?}");
        }
    }
}

#[tokio::test]
async fn bad_settings_are_refused_before_connecting() {
    let server = RedisServer::start();
    let base = || Config::from_url(&server.url()).unwrap();
    settings_refused(
        &server,
        &[
            (
                "watchdog",
                Config::with_watchdog_timeout,
                &[Duration::ZERO, Duration::from_millis(2), Duration::MAX],
            ),
            (
                "fair waiter timeout",
                Config::with_fair_waiter_timeout,
                &[Duration::from_millis(2), Duration::MAX],
            ),
            (
                "command timeout",
                Config::with_command_timeout,
                &[Duration::ZERO, Duration::MAX],
            ),
            (
                "hand-off grace",
                Config::with_handoff_grace,
                &[Duration::MAX],
            ),
            (
                "claim window",
                Config::with_claim_window,
                &[Duration::from_micros(500), Duration::MAX],
            ),
        ],
    )
    .await;
    let e = soon(
        "zero renewal batch",
        Client::new(base().with_renewal_batch(0)),
    )
    .await
    .unwrap_err();
    assert!(e.is_invalid_argument(), "zero renewal batch: {e:?}");
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

/// The errors `Config::from_url` and `Client::connect` give for `url`, the first checked to be
/// `InvalidArgument`.
async fn url_refused(url: &str) -> (Error, Error) {
    let e = Config::from_url(url).unwrap_err();
    assert!(e.is_invalid_argument(), "{url:?}: {e:?}");
    (e, soon(url, Client::connect(url)).await.unwrap_err())
}

#[tokio::test]
async fn bad_urls_are_invalid_argument() {
    for url in [
        "not a url",
        "",
        "redis://127.0.0.1:6379/not-a-db",
        "redis://127.0.0.1:6379/1/2",
    ] {
        let (_, e) = url_refused(url).await;
        assert!(e.is_invalid_argument(), "{url:?}: {e:?}");
        assert!(e.to_string().contains("URL"), "{url:?}: {e}");
    }
}

#[tokio::test]
async fn a_url_without_a_scheme_says_redis_is_missing() {
    for url in [
        "127.0.0.1:6379",
        "localhost:6379",
        "localhost",
        "",
        "not a url",
    ] {
        let (parsing, connecting) = url_refused(url).await;
        let message = parsing.to_string();
        assert!(message.contains("`redis://`"), "{url:?}: {message}");
        assert!(message.contains("no scheme"), "{url:?}: {message}");
        assert!(!message.contains("RelativeUrl"), "{url:?}: {message}");
        let message = connecting.to_string();
        assert!(message.contains("`redis://`"), "{url:?}: {message}");
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
    let (server, client, name) =
        common::setup("bad-wrong-type-waiting", Duration::from_secs(30)).await;
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let waiter = parked_waiter(&server, &client, &name, "30000").await;
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
    let (server, client, name) = common::setup("bad-closed-waiting", Duration::from_secs(30)).await;
    let waiter = parked_waiter(&server, &client, &name, "20000").await;
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

/// Every duration the public API takes, at its extremes, is either used or refused as
/// `InvalidArgument`: nothing overflows into a panic. A busy RedLock whose retry delay does
/// not fit milliseconds is refused before its first round; endless waits on busy locks,
/// semaphores and latches just wait; endless leases are refused; and a client whose every
/// setting is the largest accepted one works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_durations_are_used_or_refused_never_a_panic() {
    use relock::{Backoff, MultiLock, Owner, RedLock};
    const MAX_MS: Duration = Duration::from_millis((1 << 53) - 1);
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let p = common::prefix("bad-extremes");
    let short = Duration::from_millis(300);
    let busy = |name: &str| held_elsewhere(&server, name, "30000");

    // A RedLock: a retry delay past 2^53 ms is refused at the first operation, before any
    // round; the largest accepted delays and jitters, and endless vote timeouts and graces,
    // just wait.
    let red_name = format!("{p}:red");
    busy(&red_name);
    for (delay, jitter) in [
        (Duration::MAX, Duration::from_millis(100)),
        (Duration::MAX, Duration::MAX),
        (Duration::MAX, Duration::ZERO),
        (MAX_MS + Duration::from_millis(1), Duration::ZERO),
    ] {
        let lock = RedLock::new([&client], &red_name).with_retry_delay(delay, jitter);
        for outcome in [
            soon("try_lock", lock.try_lock()).await,
            soon("try_lock_for", lock.try_lock_for(short, None)).await,
            soon("lock", lock.lock()).await.map(Some),
        ] {
            let e = outcome.map(|_| ()).unwrap_err();
            assert!(e.is_invalid_argument(), "retry delay {delay:?}: {e:?}");
            assert!(e.to_string().contains("retry delay"), "{e}");
        }
    }
    for lock in [
        RedLock::new([&client], &red_name).with_retry_delay(MAX_MS, MAX_MS),
        RedLock::new([&client], &red_name).with_retry_delay(MAX_MS, Duration::ZERO),
        RedLock::new([&client], &red_name)
            .with_vote_timeout(Duration::MAX)
            .with_quorum_grace(Duration::MAX),
    ] {
        let outcome = soon("try_lock_for", lock.try_lock_for(short, None)).await;
        assert!(outcome.unwrap().is_none(), "{lock:?}");
        let outcome = soon("try_lock_for(MAX)", async {
            tokio::time::timeout(short, lock.try_lock_for(Duration::MAX, None)).await
        })
        .await;
        assert!(outcome.is_err(), "still busy: {lock:?}");
        let e = lock.lock_with_lease(Duration::MAX).await.unwrap_err();
        assert!(e.is_invalid_argument(), "{e:?}");
    }
    server.cmd(&["DEL", &red_name]);
    let guard = RedLock::new([&client], &red_name)
        .with_retry_delay(MAX_MS, MAX_MS)
        .with_vote_timeout(Duration::MAX)
        .with_quorum_grace(Duration::MAX)
        .try_lock_for(Duration::MAX, None)
        .await
        .unwrap()
        .expect("a free lock");
    guard.unlock().await.unwrap();

    // Every lock type, and a multi-lock: an endless wait on a busy lock waits, an endless
    // lease is refused.
    let spin_name = format!("{p}:spin");
    busy(&spin_name);
    let spin = client.spin_lock(&spin_name).with_backoff(
        Backoff::exponential(Duration::from_millis(1), Duration::from_secs(3600), 100.0).unwrap(),
    );
    let fair_name = format!("{p}:fair");
    let fair = client.fair_lock(&fair_name);
    let _fair_held = fair
        .clone()
        .owned_by(Owner::new())
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    let plain_name = format!("{p}:plain");
    busy(&plain_name);
    let multi = MultiLock::new([client.lock(&plain_name), client.lock(format!("{p}:other"))]);
    macro_rules! waits_and_refuses {
        ($what:expr, $lock:expr) => {{
            let waited = tokio::time::timeout(short, $lock.try_lock_for(Duration::MAX, None)).await;
            assert!(
                waited.is_err(),
                "{}: the endless wait ended: {waited:?}",
                $what
            );
            let waited = tokio::time::timeout(
                short,
                $lock.try_lock_for(Duration::from_secs(u64::MAX), None),
            )
            .await;
            assert!(
                waited.is_err(),
                "{}: the endless wait ended: {waited:?}",
                $what
            );
            let e = soon(
                $what,
                $lock.try_lock_for(Duration::MAX, Some(Duration::MAX)),
            )
            .await
            .unwrap_err();
            assert!(e.is_invalid_argument(), "{}: {e:?}", $what);
            let e = soon($what, $lock.lock_with_lease(Duration::MAX))
                .await
                .unwrap_err();
            assert!(e.is_invalid_argument(), "{}: {e:?}", $what);
        }};
    }
    waits_and_refuses!("spin", spin);
    waits_and_refuses!("fair", fair);
    waits_and_refuses!("fenced", client.fenced_lock(&plain_name));
    waits_and_refuses!("multi", multi);

    // Synchronizers: endless waits wait, endless permit leases are refused.
    let semaphore = client.semaphore(format!("{p}:sem"));
    assert!(semaphore.try_set_permits(0).await.unwrap());
    let waited = tokio::time::timeout(short, semaphore.try_acquire_for(1, Duration::MAX)).await;
    assert!(waited.is_err(), "{waited:?}");
    let permits = client.permit_semaphore(format!("{p}:permits"));
    assert!(permits.try_set_permits(0).await.unwrap());
    let waited = tokio::time::timeout(short, permits.try_acquire_for(Duration::MAX, None)).await;
    assert!(waited.is_err(), "{waited:?}");
    let e = soon("permit lease", permits.acquire_with_lease(Duration::MAX))
        .await
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e:?}");
    let e = soon(
        "permit lease",
        permits.try_acquire_for(Duration::MAX, Some(Duration::MAX)),
    )
    .await
    .unwrap_err();
    assert!(e.is_invalid_argument(), "{e:?}");
    let latch = client.count_down_latch(format!("{p}:latch"));
    assert!(latch.try_set_count(1).await.unwrap());
    let waited = tokio::time::timeout(short, latch.wait_for(Duration::MAX)).await;
    assert!(waited.is_err(), "{waited:?}");

    // The largest accepted settings, every one at once: a client that works.
    let config = Config::from_url(&server.url())
        .unwrap()
        .with_watchdog_timeout(MAX_MS)
        .with_command_timeout(MAX_MS)
        .with_handoff_grace(MAX_MS)
        .with_claim_window(MAX_MS)
        .with_fair_waiter_timeout(MAX_MS)
        .with_poll_interval(MAX_MS);
    let big = soon("Client::new", Client::new(config)).await.unwrap();
    let lock = big.lock(format!("{p}:big"));
    let guard = soon("lock", lock.lock()).await.unwrap();
    guard.unlock().await.unwrap();
    let guard = soon("fair lock", big.fair_lock(format!("{p}:big-fair")).lock())
        .await
        .unwrap();
    guard.unlock().await.unwrap();
    let waited = tokio::time::timeout(short, big.lock(&plain_name).lock()).await;
    assert!(waited.is_err(), "{waited:?}");
    let waited = tokio::time::timeout(short, big.semaphore(format!("{p}:sem")).acquire(1)).await;
    assert!(waited.is_err(), "{waited:?}");
    big.shutdown().await.unwrap();
    settings_refused(
        &server,
        &[
            (
                "poll interval",
                Config::with_poll_interval,
                &[Duration::MAX],
            ),
            ("replica sync", Config::with_replica_sync, &[Duration::MAX]),
            (
                "watchdog",
                Config::with_watchdog_timeout,
                &[MAX_MS + Duration::from_millis(1)],
            ),
        ],
    )
    .await;
}

/// Writes a key of another type than the lock expects there with the command `plant` (its
/// key is `plant[1]`), then runs `attempt` three times and checks each fails with `WrongType`
/// naming that key, with nothing written: the server holds the key alone, as it was. Deletes
/// the key afterwards.
async fn wrong_type_names<F, Fut, T>(server: &RedisServer, plant: &[&str], attempt: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
    T: std::fmt::Debug,
{
    let key = plant[1];
    server.cmd(plant);
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
    server.cmd(&["DEL", key]);
}

/// A fenced lock whose token counter is not a number: every acquire fails, naming the counter,
/// and leaves no hold behind (it took the lock hash for a lease before).
#[tokio::test]
async fn a_fenced_lock_with_a_bad_token_counter_fails_naming_it_and_holds_nothing() {
    let (server, client, name) = common::setup("bad-token", Duration::from_secs(30)).await;
    let counter = format!("redisson_lock_token:{{{name}}}");
    let lock = client.fenced_lock(name.clone());
    let plant = ["SET", &counter, "not-a-number"];
    wrong_type_names(&server, &plant, || lock.try_lock()).await;
    assert!(!raw_exists(&server, &name));
    let stats = client.stats();
    assert_eq!((stats.holds, stats.waiters), (0, 0), "{stats:?}");
}

/// A fair lock whose queue holds another type: the error names the queue, not the lock (which
/// does not exist), and nothing is written.
#[tokio::test]
async fn a_fair_queue_of_another_type_is_named_and_kept() {
    let (server, client, name) = common::setup("bad-fair-queue", Duration::from_secs(30)).await;
    let lock = client.fair_lock(name.clone());
    let queue = common::fair_queue_key(&name);
    wrong_type_names(&server, &["SET", &queue, "x"], || lock.lock()).await;
    let timeouts = common::fair_timeout_key(&name);
    wrong_type_names(&server, &["SET", &timeouts, "x"], || lock.try_lock()).await;
    let alive = common::fair_alive_key(&name);
    wrong_type_names(&server, &["SET", &alive, "x"], || lock.try_lock()).await;
}

/// A plain lock whose hand-off claim key holds another type: the error names the claim key.
#[tokio::test]
async fn a_claim_key_of_another_type_is_named_and_kept() {
    let (server, client, name) = common::setup("bad-claim", Duration::from_secs(30)).await;
    let claim = common::claim_key(&name);
    let lock = client.lock(name.clone());
    wrong_type_names(&server, &["RPUSH", &claim, "x"], || lock.lock()).await;
    let writer = client.rw_lock(name.clone()).write();
    wrong_type_names(&server, &["RPUSH", &claim, "x"], || writer.lock()).await;
}

/// A server, a proxy in front of it (see [`common::proxy`]), a client through the proxy, and a
/// name for `test`.
async fn behind_a_proxy(test: &str) -> (RedisServer, Proxy, Client, String) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = common::client_at(&proxy.url(), Duration::from_secs(30)).await;
    (server, proxy, client, common::prefix(test))
}

/// Checks that `acquire`, with a 5 ms lease against a server 20 ms away, fails as
/// `InvalidArgument` saying the lease is shorter than a round trip.
async fn refused_for_the_round_trip<T: std::fmt::Debug>(
    acquire: impl Future<Output = Result<T, Error>>,
) {
    let error = soon("the acquire", acquire).await.unwrap_err();
    assert!(error.is_invalid_argument(), "{error:?}");
    assert!(error.to_string().contains("round trip"), "{error}");
}

/// Against a server 20 ms away, a 5 ms lease runs out before every reply comes back: the
/// acquire fails after a few tries with an error that says so, instead of taking and giving
/// back the lock for ever; nothing is left held. A lease that outlasts the round trip works.
#[tokio::test]
async fn a_lease_shorter_than_a_round_trip_fails_instead_of_looping() {
    let (server, proxy, client, name) = behind_a_proxy("bad-lease-under-rtt").await;
    proxy.set_mode(Mode::Delay(Duration::from_millis(20)));
    let lock = client.lock(name.clone());
    refused_for_the_round_trip(lock.lock_with_lease(Duration::from_millis(5))).await;
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            !common::raw_exists(&server, &name)
        })
        .await,
        "a late hold was left behind"
    );
    let guard = lock.lock_with_lease(Duration::from_secs(5)).await.unwrap();
    guard.unlock().await.unwrap();
}

/// The same for a permit: a 5 ms permit lease against a server 20 ms away fails with an error
/// that says so, and no permit stays out.
#[tokio::test]
async fn a_permit_lease_shorter_than_a_round_trip_fails_instead_of_looping() {
    let (server, proxy, client, name) = behind_a_proxy("bad-permit-under-rtt").await;
    let permits = client.permit_semaphore(name.clone());
    assert!(permits.try_set_permits(1).await.unwrap());
    proxy.set_mode(Mode::Delay(Duration::from_millis(20)));
    refused_for_the_round_trip(permits.acquire_with_lease(Duration::from_millis(5))).await;
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            common::raw_count(&server, &name) == Some(1)
        })
        .await,
        "a late permit stayed out"
    );
}
