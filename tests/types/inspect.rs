//! `Client::inspect`, `Client::find`, `Client::connections`: who holds, who waits, which process,
//! read from a real server's keys and `CLIENT LIST`.

use crate::common;

use std::time::Duration;

use common::rw::{read_hold, write_hold};
use common::RedisServer;
use relock::inspect::{Inspection, Kind};
use relock::{Client, Owner};

const WATCHDOG: Duration = Duration::from_secs(5);

/// Polls `client.inspect(name)` until `shows` holds on what it reads, for at most `within`;
/// whether it came to hold.
async fn until_shown(
    client: &Client,
    name: &str,
    within: Duration,
    shows: impl Fn(&Inspection) -> bool,
) -> bool {
    common::eventually(within, || async {
        shows(&client.inspect(name).await.unwrap())
    })
    .await
}

/// Spawns `waiter` (one that waits on `name`) and checks that `client.inspect(name)` comes to
/// show it (`shows` holds) within 5 s, failing with `what`; the waiter's task.
async fn spawn_shown<T: Send + 'static>(
    client: &Client,
    name: &str,
    waiter: impl std::future::Future<Output = T> + Send + 'static,
    shows: impl Fn(&Inspection) -> bool,
    what: &str,
) -> tokio::task::JoinHandle<T> {
    let waiter = tokio::spawn(waiter);
    assert!(
        until_shown(client, name, Duration::from_secs(5), shows).await,
        "{what}"
    );
    waiter
}

/// Takes fenced lock `name` and gives it back: a free fenced lock, with its token counter left.
async fn fenced_once(client: &Client, name: &str) {
    let guard = client.fenced_lock(name).lock().await.unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_holder_is_named_with_its_process_and_shows_as_gone_once_its_client_is() {
    let (_server, holder, operator, name) = common::setup_two("inspect-holder", WATCHDOG).await;
    let lock = holder.lock(&name).owned_by(Owner::new());
    let first = lock.lock().await.unwrap();
    let second = lock.lock().await.unwrap();

    let seen = operator.inspect(&name).await.unwrap();
    assert_eq!(seen.kind, Kind::Lock);
    assert_eq!(seen.holders.len(), 1, "{seen:?}");
    let held = &seen.holders[0];
    assert_eq!(held.holds, 2);
    assert_eq!(held.party.client_id, holder.id());
    assert!(held.party.owner.starts_with("owner-"), "{:?}", held.party);
    let process = held.party.process().expect("the holder's process");
    assert_eq!(process.pid, Some(std::process::id()));
    assert!(!process.host.is_empty() && !process.program.is_empty());
    // The command and the subscriber connection, both named.
    let roles: Vec<&str> = held
        .party
        .connections
        .iter()
        .filter_map(|c| c.process.as_ref().map(|p| p.role.as_str()))
        .collect();
    assert!(
        roles.contains(&"cmd") && roles.contains(&"sub"),
        "{roles:?}"
    );
    assert!(!held.party.is_gone());
    assert!(seen.pttl_ms > 0 && seen.pttl_ms <= WATCHDOG.as_millis() as i64);

    drop((first, second));
    let lock = holder.lock(&name).owned_by(Owner::new());
    let _held = lock.lock().await.unwrap();
    holder.shutdown_keeping_locks().await.unwrap();
    let gone = until_shown(&operator, &name, Duration::from_secs(5), |seen| {
        seen.holders.len() == 1 && seen.holders[0].party.is_gone()
    })
    .await;
    assert!(gone, "a holder whose client closed shows as gone");
    let seen = operator.inspect(&name).await.unwrap();
    assert!(
        seen.pttl_ms > 0,
        "the lock frees when its lease ends: {seen:?}"
    );
}

#[tokio::test]
async fn a_redisson_holder_and_keys_that_are_no_locks_are_told_apart() {
    let (server, client, base) = common::setup("inspect-kinds", WATCHDOG).await;
    let redisson = format!("{base}:redisson");
    server.cmd(&[
        "HSET",
        &redisson,
        "2f1c8a52-0b7e-4d2a-9a31-5e0f8d1c2b3a:57",
        "1",
    ]);
    server.cmd(&["PEXPIRE", &redisson, "30000"]);
    let seen = client.inspect(&redisson).await.unwrap();
    assert_eq!(seen.kind, Kind::Lock);
    let party = &seen.holders[0].party;
    assert!(party.redisson && !party.is_gone() && party.process().is_none());
    assert_eq!(party.owner, "57");

    let list = format!("{base}:list");
    server.cmd(&["RPUSH", &list, "a"]);
    assert_eq!(
        client.inspect(&list).await.unwrap().kind,
        Kind::Other("list".into())
    );
    let profile = format!("{base}:profile");
    server.cmd(&["HSET", &profile, "email", "a@example.com"]);
    assert_eq!(
        client.inspect(&profile).await.unwrap().kind,
        Kind::Other("hash".into())
    );
    let json = format!("{base}:json");
    server.cmd(&["SET", &json, "{\"a\":1}"]);
    assert_eq!(
        client.inspect(&json).await.unwrap().kind,
        Kind::Other("string".into())
    );
    let absent = client.inspect(&format!("{base}:absent")).await.unwrap();
    assert_eq!((absent.kind, absent.pttl_ms), (Kind::Nothing, -2));
    assert!(client.inspect("").await.unwrap_err().is_invalid_argument());
    // Nothing was written.
    assert_eq!(
        common::resp(&server.cmd(&["HLEN", &profile])),
        common::Resp::Int(1)
    );
    assert_eq!(
        common::resp(&server.cmd(&["HLEN", &redisson])),
        common::Resp::Int(1)
    );
}

#[tokio::test]
async fn a_fair_queue_a_read_write_lock_and_a_fenced_token_are_shown() {
    let (_server, a, b, base) = common::setup_two("inspect-family", WATCHDOG).await;

    let fair = format!("{base}:fair");
    let held = a.fair_lock(&fair).lock().await.unwrap();
    let lock = b.fair_lock(&fair);
    let waiter = spawn_shown(
        &a,
        &fair,
        async move { lock.lock().await.map(drop) },
        |seen| seen.queue.len() == 1 && seen.queue[0].subscribers > 0,
        "the waiter shows in the queue, subscribed",
    )
    .await;
    let seen = a.inspect(&fair).await.unwrap();
    assert_eq!(seen.kind, Kind::FairLock);
    assert_eq!(seen.queue_len, 1);
    // Each fair waiter listens on a channel of its own: counted there.
    assert_eq!(seen.subscribers, 1);
    let place = &seen.queue[0];
    assert_eq!(place.party.client_id, b.id());
    assert!(place.left_ms.unwrap() > 0, "a live place: {place:?}");
    assert_eq!(seen.holders[0].party.client_id, a.id());
    held.unlock().await.unwrap();
    waiter.await.unwrap().unwrap();

    let rw = format!("{base}:rw");
    let r1 = a.rw_lock(&rw).read().lock().await.unwrap();
    let r2 = b.rw_lock(&rw).read().lock().await.unwrap();
    let seen = a.inspect(&rw).await.unwrap();
    assert_eq!(
        (seen.kind.clone(), seen.mode.as_deref()),
        (Kind::RwLock, Some("read"))
    );
    assert_eq!(seen.holders.len(), 2);
    assert!(seen.holders.iter().all(|h| h.live && !h.writer));
    r1.unlock().await.unwrap();
    r2.unlock().await.unwrap();
    let _writer = write_hold(&b, &rw, None).await;
    let seen = a.inspect(&rw).await.unwrap();
    assert_eq!(seen.mode.as_deref(), Some("write"));
    assert!(seen.holders[0].writer);

    let fenced = format!("{base}:fenced");
    fenced_once(&a, &fenced).await;
    let guard = a
        .fenced_lock(&fenced)
        .owned_by(Owner::new())
        .lock()
        .await
        .unwrap();
    let seen = a.inspect(&fenced).await.unwrap();
    assert_eq!(
        (seen.kind.clone(), seen.token),
        (Kind::FencedLock, Some(guard.token()))
    );
    guard.unlock().await.unwrap();
    let free = a.inspect(&fenced).await.unwrap();
    assert_eq!(
        (free.kind, free.token, free.holders.len()),
        (Kind::FencedLock, Some(2), 0)
    );
}

#[tokio::test]
async fn semaphores_and_latches_show_their_counts_and_waiters() {
    let (_server, client, base) = common::setup("inspect-sync", WATCHDOG).await;

    let sem = format!("{base}:sem");
    assert!(client.semaphore(&sem).try_set_permits(2).await.unwrap());
    let seen = client.inspect(&sem).await.unwrap();
    assert_eq!(
        (seen.kind, seen.count),
        (Kind::Counter, Some(2)),
        "no waiter: a count"
    );
    client.semaphore(&sem).acquire(2).await.unwrap();
    let semaphore = client.semaphore(&sem);
    let waiter = spawn_shown(
        &client,
        &sem,
        async move { semaphore.acquire(1).await },
        |seen| seen.kind == Kind::Semaphore,
        "a waiter on the semaphore's channel tells it is one",
    )
    .await;
    assert_eq!(client.inspect(&sem).await.unwrap().subscribers, 1);
    client.semaphore(&sem).release(1).await.unwrap();
    waiter.await.unwrap().unwrap();

    let latch = format!("{base}:latch");
    let count_down = client.count_down_latch(&latch);
    assert!(count_down.try_set_count(3).await.unwrap());
    let waiting = count_down.clone();
    let waiter = spawn_shown(
        &client,
        &latch,
        async move { waiting.wait().await },
        |seen| seen.kind == Kind::CountDownLatch && seen.count == Some(3),
        "a waiter on the latch shows it with its count",
    )
    .await;
    count_down.delete().await.unwrap();
    waiter.await.unwrap().unwrap();

    let permits = format!("{base}:permits");
    let permit_semaphore = client.permit_semaphore(&permits);
    assert!(permit_semaphore.try_set_permits(3).await.unwrap());
    let permit = permit_semaphore.acquire().await.unwrap();
    let seen = client.inspect(&permits).await.unwrap();
    assert_eq!(
        (seen.kind.clone(), seen.count, seen.leases_len),
        (Kind::PermitSemaphore, Some(2), 1)
    );
    assert_eq!(seen.leases[0].id, permit.id());
    assert!(seen.leases[0].left_ms > 0);
    permit.release().await.unwrap();
}

#[tokio::test]
async fn find_lists_the_locks_under_a_pattern_and_stops_at_its_limit() {
    let (server, client, base) = common::setup("inspect-find", WATCHDOG).await;
    let mut guards = Vec::new();
    for i in 0..5 {
        guards.push(common::hold(&client, format!("{base}:lock:{i}")).await);
    }
    // A free fenced lock has only its token key; a user's keys are no locks.
    let fenced = format!("{base}:fenced");
    fenced_once(&client, &fenced).await;
    server.cmd(&["SET", &format!("{base}:user"), "hello"]);
    server.cmd(&["RPUSH", &format!("{base}:queue"), "job"]);

    let found = client.find(&format!("{base}:*"), 100).await.unwrap();
    let names: Vec<&str> = found.items.iter().map(|i| i.name.as_str()).collect();
    let mut want: Vec<String> = (0..5).map(|i| format!("{base}:lock:{i}")).collect();
    want.push(fenced.clone());
    want.sort();
    assert_eq!(names, want, "{found:?}");
    assert!(!found.more);
    assert!(found
        .items
        .iter()
        .filter(|i| i.kind == Kind::Lock)
        .all(|i| i.holders.len() == 1));

    let cut = client.find(&format!("{base}:lock:*"), 2).await.unwrap();
    assert_eq!(cut.items.len(), 2);
    assert!(cut.more);
    assert!(client.find("", 1).await.unwrap_err().is_invalid_argument());
    assert!(client.find("*", 0).await.unwrap_err().is_invalid_argument());
}

#[tokio::test]
async fn connections_are_named_again_after_a_reconnect() {
    let server = RedisServer::start();
    let client = common::client(&server, WATCHDOG).await;
    let named = |list: &str| {
        list.lines()
            .filter(|l| l.contains(&format!("name=relock|{}|", client.id())))
            .map(|l| l.to_owned())
            .collect::<Vec<_>>()
    };
    let before = named(&server.cmd(&["CLIENT", "LIST"]));
    assert_eq!(
        before.len(),
        2,
        "the command and the subscriber connection: {before:?}"
    );
    server.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    let again = common::eventually(Duration::from_secs(10), || async {
        named(&server.cmd(&["CLIENT", "LIST"])).len() == 2
    })
    .await;
    assert!(
        again,
        "both connections named after reconnecting: {}",
        server.cmd(&["CLIENT", "LIST"])
    );
    // Still working, and still subscribed where it must be.
    let name = common::prefix("inspect-reconnect");
    let guard = client.lock(&name).lock().await.unwrap();
    let seen = client.inspect(&name).await.unwrap();
    assert_eq!(seen.holders[0].party.client_id, client.id());
    assert!(seen.holders[0].party.process().is_some());
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_lapsed_reader_a_lock_delay_and_a_lock_without_expiry_are_reported() {
    let (server, client, base) = common::setup("inspect-lapses", WATCHDOG).await;

    // Two readers; the one with a 150 ms lease lapses while the other keeps the lock.
    let rw = format!("{base}:rw");
    let short = read_hold(&client, &rw, Some(Duration::from_millis(150))).await;
    let _long = read_hold(&client, &rw, None).await;
    let short_field = format!("{}:{}", client.id(), short.owner());
    let lapsed = until_shown(&client, &rw, Duration::from_secs(3), |seen| {
        seen.holders
            .iter()
            .any(|h| h.party.field == short_field && !h.live)
    })
    .await;
    assert!(
        lapsed,
        "the reader whose lease ran out shows as holding nothing"
    );
    let seen = client.inspect(&rw).await.unwrap();
    assert!(
        seen.holders.iter().any(|h| h.live),
        "the other reader still holds"
    );

    // A lock whose lease ran out without an unlock, in its lock-delay.
    let delayed = format!("{base}:delayed");
    let lock = client
        .lock(&delayed)
        .with_lock_delay(Duration::from_secs(5))
        .unwrap()
        .owned_by(Owner::new());
    let guard = lock
        .lock_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .unwrap();
    let in_delay = until_shown(&client, &delayed, Duration::from_secs(3), |seen| {
        seen.kind == Kind::Lock && seen.holders.is_empty() && seen.delay_ms.is_some()
    })
    .await;
    assert!(in_delay, "{:?}", client.inspect(&delayed).await.unwrap());
    drop(guard);

    // A lock hash someone wrote without a TTL.
    let forever = format!("{base}:forever");
    server.cmd(&[
        "HSET",
        &forever,
        "2f1c8a52-0b7e-4d2a-9a31-5e0f8d1c2b3a:57",
        "1",
    ]);
    let seen = client.inspect(&forever).await.unwrap();
    assert_eq!((seen.kind, seen.pttl_ms), (Kind::Lock, -1));
}
