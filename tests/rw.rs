//! `RwLock`: many readers or one writer, on Redisson's layout. Checked on what Redis holds (the
//! hash's `mode` and fields, each read hold's timeout key) and on who got the lock when.

mod common;

use std::time::Duration;

use common::RedisServer;
use relock::{Client, Owner};

const WATCHDOG: Duration = Duration::from_secs(5);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn field(client: &Client, owner: &Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

/// A read hold's timeout key, as Redisson names it.
fn timeout_key(name: &str, field: &str, n: u64) -> String {
    format!("{{{name}}}:{field}:rwlock_timeout:{n}")
}

fn hget(server: &RedisServer, key: &str, field: &str) -> Option<String> {
    common::raw_hgetall(server, key)
        .into_iter()
        .find(|(f, _)| f == field)
        .map(|(_, v)| v)
}

#[tokio::test]
async fn readers_share_and_a_writer_excludes_both() {
    let server = RedisServer::start();
    let name = common::prefix("rw-share");
    let (a, b) = (
        common::client(&server, WATCHDOG).await,
        common::client(&server, WATCHDOG).await,
    );
    let (ra, rb) = (a.rw_lock(&name), b.rw_lock(&name));
    let read_a = ra.read().lock().await.unwrap();
    let read_b = rb.read().lock().await.unwrap();
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("read"));
    assert!(ra.read().is_locked().await.unwrap());
    assert!(!ra.write().is_locked().await.unwrap());
    // A writer of another owner (this task reads on both clients: its own write would be an
    // upgrade).
    let writer = || rb.write().owned_by(Owner::new());
    assert!(
        writer().try_lock().await.unwrap().is_none(),
        "a writer while reading"
    );
    read_a.unlock().await.unwrap();
    assert!(
        writer().try_lock().await.unwrap().is_none(),
        "one reader is left"
    );
    read_b.unlock().await.unwrap();
    assert!(
        !common::raw_exists(&server, &name),
        "the last reader deletes the lock"
    );
    let write = rb.write().lock().await.unwrap();
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("write"));
    assert!(
        ra.read().try_lock().await.unwrap().is_none(),
        "a reader while writing"
    );
    assert!(
        ra.write().try_lock().await.unwrap().is_none(),
        "a second writer"
    );
    write.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn a_reader_asking_for_the_write_lock_gets_an_error_not_a_deadlock() {
    let server = RedisServer::start();
    let name = common::prefix("rw-upgrade");
    let client = common::client(&server, WATCHDOG).await;
    let rw = client.rw_lock(&name);
    let read = rw.read().lock().await.unwrap();
    let upgrade = tokio::time::timeout(Duration::from_secs(5), rw.write().lock())
        .await
        .expect("the upgrade must fail at once, not wait");
    let error = upgrade.unwrap_err();
    assert!(error.is_upgrade_would_deadlock(), "{error}");
    // Nothing changed: the read hold stands, and no claim keeps readers out.
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("read"));
    assert!(!common::raw_exists(&server, &common::claim_key(&name)));
    read.unlock().await.unwrap();
    rw.write().lock().await.unwrap().unlock().await.unwrap();
}

#[tokio::test]
async fn the_writer_may_read_and_keeps_the_lock_as_a_reader() {
    let server = RedisServer::start();
    let name = common::prefix("rw-downgrade");
    let (a, b) = (
        common::client(&server, WATCHDOG).await,
        common::client(&server, WATCHDOG).await,
    );
    let rw = a.rw_lock(&name);
    let write = rw.write().lock().await.unwrap();
    let read = rw.read().lock().await.unwrap();
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("write"));
    assert!(b.rw_lock(&name).read().try_lock().await.unwrap().is_none());
    write.unlock().await.unwrap();
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("read"));
    let other = b.rw_lock(&name).read().try_lock().await.unwrap();
    assert!(other.is_some(), "after the downgrade other readers come in");
    let writer = b.rw_lock(&name).write().owned_by(Owner::new());
    assert!(writer.try_lock().await.unwrap().is_none());
    read.unlock().await.unwrap();
    other.unwrap().unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn each_readers_lease_is_its_own() {
    let server = RedisServer::start();
    let name = common::prefix("rw-leases");
    let (a, b) = (
        common::client(&server, WATCHDOG).await,
        common::client(&server, WATCHDOG).await,
    );
    let short = a
        .rw_lock(&name)
        .read()
        .lock_with_lease(ms(400))
        .await
        .unwrap();
    let long = b
        .rw_lock(&name)
        .read()
        .lock_with_lease(ms(20_000))
        .await
        .unwrap();
    let short_field = field(&a, short.owner());
    let long_field = field(&b, long.owner());
    assert!(common::raw_pttl(&server, &timeout_key(&name, &short_field, 1)) <= 400);
    assert!(common::raw_pttl(&server, &name) > 10_000);
    // The long reader leaves: the lock keeps only the short reader's lease.
    long.unlock().await.unwrap();
    let ttl = common::raw_pttl(&server, &name);
    assert!(
        ttl <= 400,
        "the lock kept the leaving reader's lease: {ttl} ms"
    );
    // The short one lapses: the lock is gone with it.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            !common::raw_exists(&server, &name)
        })
        .await
    );
    assert!(short.unlock().await.unwrap_err().is_lease_lost());
    // A lapsed reader among live ones keeps nothing alive.
    let long = b
        .rw_lock(&name)
        .read()
        .lock_with_lease(ms(20_000))
        .await
        .unwrap();
    let short = a
        .rw_lock(&name)
        .read()
        .lock_with_lease(ms(300))
        .await
        .unwrap();
    tokio::time::sleep(ms(600)).await;
    assert!(!common::raw_exists(
        &server,
        &timeout_key(&name, &short_field, 1)
    ));
    assert_eq!(hget(&server, &name, &short_field).as_deref(), Some("1"));
    long.unlock().await.unwrap();
    assert!(
        !common::raw_exists(&server, &name),
        "a lapsed reader kept the lock: {:?}",
        common::raw_hgetall(&server, &name)
    );
    assert!(short.unlock().await.unwrap_err().is_lease_lost());
    let _ = long_field;
}

#[tokio::test]
async fn the_watchdog_renews_readers_and_a_waiting_writer_gets_the_lock_when_they_leave() {
    let server = RedisServer::start();
    let name = common::prefix("rw-watchdog");
    let (a, b) = (
        common::client(&server, ms(600)).await,
        common::client(&server, ms(600)).await,
    );
    let read = a.rw_lock(&name).read().lock().await.unwrap();
    let read_field = field(&a, read.owner());
    let writer = {
        let rw = b.rw_lock(&name);
        tokio::spawn(async move { rw.write().lock().await })
    };
    tokio::time::sleep(ms(1_500)).await;
    assert!(!read.is_lost());
    assert!(common::raw_exists(
        &server,
        &timeout_key(&name, &read_field, 1)
    ));
    assert!(
        !writer.is_finished(),
        "the writer got in past a live reader"
    );
    // The writer's claim keeps a new reader out.
    assert!(a
        .rw_lock(&name)
        .read()
        .owned_by(Owner::new())
        .try_lock()
        .await
        .unwrap()
        .is_none());
    read.unlock().await.unwrap();
    let write = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer was not woken")
        .unwrap()
        .unwrap();
    assert_eq!(hget(&server, &name, "mode").as_deref(), Some("write"));
    write.unlock().await.unwrap();
}
