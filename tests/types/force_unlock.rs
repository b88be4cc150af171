//! `Client::force_unlock`: what `inspect` found is freed as its kind says (the kinds and how each
//! is freed are rows of the primitives' table), and each lock type is found as the kind its row
//! names.

use crate::common;

use std::time::Duration;

use common::rw::{read_hold, write_hold};
use relock::inspect::Kind;
use relock::{Client, Owner};

const WATCHDOG: Duration = Duration::from_secs(5);

/// Inspects `name`, checks it is found as `kind` and held, frees it by `force_unlock`, and checks
/// that none of its holders holds it after.
async fn freed_as(operator: &Client, name: &str, kind: Kind) {
    let seen = operator.inspect(name).await.unwrap();
    assert_eq!(seen.kind, kind, "{name}");
    assert!(!seen.holders.is_empty(), "{name} is held");
    assert!(operator.force_unlock(&seen).await.unwrap(), "{name} freed");
    let after = operator.inspect(name).await.unwrap();
    for held in &seen.holders {
        assert!(
            after
                .holders
                .iter()
                .all(|h| h.party.field != held.party.field),
            "{name}: {after:?}"
        );
    }
}

#[tokio::test]
async fn each_lock_kind_is_freed_as_it_was_found() {
    let (_server, holder, operator, name) = common::setup_two("force-unlock", WATCHDOG).await;

    let plain = format!("{name}:plain");
    let guard = holder.lock(&plain).lock().await.unwrap();
    let seen = operator.inspect(&plain).await.unwrap();
    freed_as(&operator, &plain, Kind::Lock).await;
    assert!(
        !operator.force_unlock(&seen).await.unwrap(),
        "nothing left to free"
    );
    assert!(operator.lock(&plain).try_lock().await.unwrap().is_some());
    drop(guard);

    // A fair lock's queue is kept: its waiter takes the lock once the holder is freed.
    let fair = format!("{name}:fair");
    let _held = holder.fair_lock(&fair).lock().await.unwrap();
    let waiter = tokio::spawn({
        let (holder, fair) = (holder.clone(), fair.clone());
        async move { holder.fair_lock(&fair).owned_by(Owner::new()).lock().await }
    });
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            operator.inspect(&fair).await.unwrap().kind == Kind::FairLock
        })
        .await,
        "the waiter queues"
    );
    freed_as(&operator, &fair, Kind::FairLock).await;
    let taken = tokio::time::timeout(common::HANG, waiter).await;
    assert!(matches!(taken, Ok(Ok(Ok(_)))), "the queued waiter takes it");

    let read = format!("{name}:read");
    let (_r1, _r2) = (
        read_hold(&holder, &read, None).await,
        read_hold(&operator, &read, None).await,
    );
    freed_as(&operator, &read, Kind::RwLock).await;
    let write = format!("{name}:write");
    let _w = write_hold(&holder, &write, None).await;
    freed_as(&operator, &write, Kind::RwLock).await;

    let fenced = format!("{name}:fenced");
    let _f = holder.fenced_lock(&fenced).lock().await.unwrap();
    freed_as(&operator, &fenced, Kind::FencedLock).await;

    let election = format!("{name}:election");
    let term = holder.election(&election).campaign().await.unwrap();
    let lock = format!("relock_election:{election}");
    let seen = operator.inspect(&lock).await.unwrap();
    assert_eq!(seen.election(), Some(election.as_str()));
    freed_as(&operator, &lock, Kind::Election).await;
    assert!(operator
        .election(&election)
        .leader()
        .await
        .unwrap()
        .is_none());
    assert!(
        common::eventually(Duration::from_secs(10), || async { term.is_lost() }).await,
        "the leader's renewals find its term gone"
    );
}

#[tokio::test]
async fn a_lock_delay_in_force_is_ended() {
    let (server, client, name) = common::setup("force-unlock-delay", WATCHDOG).await;
    let delayed = client
        .lock(&name)
        .with_lock_delay(Duration::from_secs(30))
        .unwrap();
    // A holder that never unlocks: its lease runs out, and the lock-delay begins.
    let lease = Duration::from_millis(300);
    std::mem::forget(delayed.lock_with_lease(lease).await.unwrap());
    assert!(common::until_gone(&server, &name, lease + Duration::from_secs(5)).await);
    let seen = client.inspect(&name).await.unwrap();
    assert_eq!(seen.kind, Kind::Lock);
    assert!(seen.holders.is_empty());
    assert!(seen.delay_ms.is_some(), "{seen:?}");

    assert!(client.force_unlock(&seen).await.unwrap(), "the delay ended");
    assert_eq!(delayed.lock_delay_left().await.unwrap(), None);
    assert_eq!(client.inspect(&name).await.unwrap().kind, Kind::Nothing);
    assert!(client.lock(&name).try_lock().await.unwrap().is_some());
}

#[tokio::test]
async fn a_synchronizer_nothing_or_a_foreign_key_is_not_force_unlocked() {
    let (server, client, name) = common::setup("force-unlock-sync", WATCHDOG).await;
    let semaphore = client.semaphore(&name);
    assert!(semaphore.try_set_permits(2).await.unwrap());
    let seen = client.inspect(&name).await.unwrap();
    assert_eq!(seen.kind, Kind::Counter);
    let refused = client.force_unlock(&seen).await.unwrap_err();
    assert!(refused.is_invalid_argument(), "{refused}");
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);

    let nothing = client.inspect(&format!("{name}:none")).await.unwrap();
    assert_eq!(nothing.kind, Kind::Nothing);
    assert!(client
        .force_unlock(&nothing)
        .await
        .unwrap_err()
        .is_invalid_argument());

    let foreign = format!("{name}:foreign");
    server.cmd(&["SET", &foreign, "not a lock"]);
    let seen = client.inspect(&foreign).await.unwrap();
    assert_eq!(seen.kind, Kind::Other("string".into()));
    let refused = client.force_unlock(&seen).await.unwrap_err();
    assert!(refused.is_invalid_argument(), "{refused}");
    assert_eq!(
        common::raw_get(&server, &foreign).as_deref(),
        Some("not a lock")
    );
}

#[tokio::test]
async fn each_lock_type_is_found_as_the_kind_its_row_names() {
    let (_server, client, name) = common::setup("found-as", WATCHDOG).await;
    let at = |t: &str| format!("{name}:{t}");
    let guards = vec![
        client.lock(at("lock")).lock().await.unwrap(),
        client.spin_lock(at("spin")).lock().await.unwrap(),
        client.fair_lock(at("fair")).lock().await.unwrap(),
        client.non_reentrant_lock(at("nr")).lock().await.unwrap(),
        client
            .non_reentrant_fair_lock(at("nrfair"))
            .lock()
            .await
            .unwrap(),
        read_hold(&client, &at("read"), None).await,
        write_hold(&client, &at("write"), None).await,
    ];
    let _fenced = client.fenced_lock(at("fenced")).lock().await.unwrap();
    let found = [
        ("lock", Kind::Lock),
        ("spin", Kind::Lock),
        // A fair lock nobody waits for keeps a plain lock's keys.
        ("fair", Kind::Lock),
        ("nr", Kind::Lock),
        ("nrfair", Kind::Lock),
        ("read", Kind::RwLock),
        ("write", Kind::RwLock),
        ("fenced", Kind::FencedLock),
    ];
    for (t, kind) in found {
        let seen = client.inspect(&at(t)).await.unwrap();
        assert_eq!(seen.kind, kind, "{t}");
        assert!(seen.kind.is_lock(), "{t}");
        assert_eq!(seen.election(), None, "{t}");
        assert_eq!(seen.holders.len(), 1, "{t}");
    }
    drop(guards);
}
