//! `PermitSemaphore`: Redisson's permits with ids and leases. Redis's layout after each
//! operation, the watchdog keeping a live holder's permit, a fixed lease running out, and bad
//! input.

use crate::common;

use std::time::Duration;

use common::{
    leases_key, raw_count, raw_exists, raw_zrange_hex, semaphore_channel, RawSubscriber,
    RedisServer,
};

/// Redisson's score for a permit without a lease.
const NO_LEASE: i64 = 922_337_203_685_477;

#[tokio::test]
async fn a_permit_is_an_id_in_redissons_leases_given_back_on_release() {
    let (server, client, name) = common::setup("permit-layout", Duration::from_secs(5)).await;
    let sem = common::permit_semaphore(&client, &name, 2).await;
    let mut messages = RawSubscriber::subscribe(&server, &[&semaphore_channel(&name)]).await;

    let before = common::raw_time_ms(&server);
    let permit = sem
        .acquire_with_lease(Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(permit.id().len(), 32);
    assert!(permit
        .id()
        .chars()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert_eq!(permit.lease(), Some(Duration::from_secs(20)));
    assert_eq!(raw_count(&server, &name), Some(1));
    let leases = raw_zrange_hex(&server, &leases_key(&name));
    assert_eq!(leases.len(), 1);
    assert_eq!(
        leases[0].0,
        permit.id(),
        "the leases hold the id's 16 bytes"
    );
    let ends = leases[0].1 - before;
    assert!(
        (19_000..=21_000).contains(&ends),
        "the score is the server's now + the lease: {ends} ms"
    );
    assert_eq!(sem.available_permits().await.unwrap(), 1);
    assert_eq!(sem.acquired_permits().await.unwrap(), 1);
    assert_eq!(sem.permits().await.unwrap(), 2);

    messages
        .assert_quiet(&server, &semaphore_channel(&name))
        .await;
    permit.release().await.unwrap();
    assert_eq!(raw_count(&server, &name), Some(2));
    assert!(raw_zrange_hex(&server, &leases_key(&name)).is_empty());
    assert_eq!(
        messages.next_message(Duration::from_secs(5)).await,
        Some((semaphore_channel(&name), "2".into())),
        "a release publishes the count, as Redisson's does"
    );
    assert_eq!(client.stats().holds, 0);
    assert!(sem.delete().await.unwrap());
    assert!(!raw_exists(&server, &name));
}

#[tokio::test]
async fn the_watchdog_keeps_a_live_holders_permit_past_many_leases() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let client = common::client(&server, lease).await;
    let rival = common::client(&server, lease).await;
    let name = common::prefix("permit-watchdog");
    let sem = common::permit_semaphore(&client, &name, 1).await;
    let permit = sem.acquire().await.unwrap();
    assert_eq!(permit.lease(), None);
    assert_eq!(client.stats().renewing, 1);

    let others = rival.permit_semaphore(name.clone());
    assert!(
        common::stays(lease * 4, || async {
            others.try_acquire().await.unwrap().is_none()
        })
        .await,
        "the permit lapsed while its holder lived"
    );
    assert!(!permit.is_lost());
    let score = raw_zrange_hex(&server, &leases_key(&name))[0].1;
    let left = score - common::raw_time_ms(&server);
    assert!(
        left > 0 && left <= lease.as_millis() as i64,
        "renewed to {left} ms"
    );
    permit.release().await.unwrap();
    let next = others.try_acquire().await.unwrap().expect("given back");
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_fixed_lease_runs_out_and_the_permit_comes_back() {
    let (server, client, name) =
        common::setup_polling("permit-fixed", Duration::from_secs(60)).await;
    let sem = common::permit_semaphore(&client, &name, 1).await;
    let lease = Duration::from_millis(300);
    let started = std::time::Instant::now();
    let permit = sem.acquire_with_lease(lease).await.unwrap();

    // A waiter needs no message: it looks again when the earliest lease ends.
    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move { sem.acquire().await.unwrap() }
    });
    tokio::time::timeout(common::HANG, permit.lost())
        .await
        .expect("lost() never completed");
    assert!(permit.is_lost());
    assert!(started.elapsed() >= lease);
    let next = common::within(
        common::HANG,
        waiter,
        "the waiter never got the lapsed permit",
    )
    .await;
    let error = permit.release().await.unwrap_err();
    assert!(error.is_lease_lost(), "{error:?}");
    assert_eq!(
        raw_count(&server, &name),
        Some(0),
        "the lapsed release gave back twice"
    );
    next.release().await.unwrap();
    assert_eq!(raw_count(&server, &name), Some(1));
}

#[tokio::test]
async fn a_dropped_permit_and_a_shutdown_give_permits_back() {
    let (server, client, name) = common::setup("permit-drop", Duration::from_secs(5)).await;
    let sem = common::permit_semaphore(&client, &name, 3).await;

    drop(sem.acquire().await.unwrap());
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            raw_count(&server, &name) == Some(3)
        })
        .await,
        "a dropped permit stayed out"
    );

    let held = [sem.acquire().await.unwrap(), sem.acquire().await.unwrap()];
    assert_eq!(raw_count(&server, &name), Some(1));
    client.shutdown().await.unwrap();
    assert_eq!(
        raw_count(&server, &name),
        Some(3),
        "shutdown kept permits out"
    );
    assert!(raw_zrange_hex(&server, &leases_key(&name)).is_empty());
    for permit in held {
        assert!(permit.is_lost());
        assert!(permit.release().await.unwrap_err().is_closed());
    }
}

#[tokio::test]
async fn release_by_id_and_redissons_permits_without_a_lease() {
    let (server, client, name) = common::setup("permit-by-id", Duration::from_secs(5)).await;
    let sem = common::permit_semaphore(&client, &name, 2).await;

    // A Redisson holder's permit without a lease: scored 922337203685477, never reclaimed.
    let java_id = [7u8; 16];
    let java_hex = "07".repeat(16);
    server.cmd(&["DECR", &name]);
    let member = String::from_utf8(java_id.to_vec()).unwrap();
    server.cmd(&["ZADD", &leases_key(&name), &NO_LEASE.to_string(), &member]);
    assert_eq!(sem.acquired_permits().await.unwrap(), 1);

    let permit = sem.acquire().await.unwrap();
    assert!(
        sem.try_acquire().await.unwrap().is_none(),
        "both permits are out"
    );
    assert!(sem.release_id(&java_hex).await.unwrap());
    assert!(
        !sem.release_id(&java_hex).await.unwrap(),
        "given back twice"
    );
    assert_eq!(raw_count(&server, &name), Some(1));

    // Released by id under its holder: the holder's release finds it gone.
    assert!(sem.release_id(permit.id()).await.unwrap());
    let error = permit.release().await.unwrap_err();
    assert!(error.is_not_held(), "{error:?}");
    assert_eq!(raw_count(&server, &name), Some(2));

    assert!(sem
        .release_id("not-an-id")
        .await
        .unwrap_err()
        .is_invalid_argument());
}

#[tokio::test]
async fn bad_input_is_refused_with_nothing_changed() {
    let (server, client, name) = common::setup("permit-bad", Duration::from_secs(5)).await;
    let sem = client.permit_semaphore(name.clone());

    let error = sem.acquire().await.unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
    assert!(sem
        .acquire_with_lease(Duration::ZERO)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(sem.add_permits(0).await.unwrap_err().is_invalid_argument());
    assert!(!raw_exists(&server, &name));

    // The leases key of another type is the one the error names; nothing is written.
    assert!(sem.try_set_permits(1).await.unwrap());
    server.cmd(&["SET", &leases_key(&name), "x"]);
    let error = sem.try_acquire().await.unwrap_err();
    match &error {
        relock::Error::WrongType { key } => assert_eq!(key, &leases_key(&name)),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(sem.available_permits().await.unwrap_err().is_wrong_type());
    assert_eq!(raw_count(&server, &name), Some(1));
    assert_eq!(client.stats().holds, 0);
    assert_eq!(client.stats().in_flight, 0);

    // A name whose counter holds another type: giving back an id that is not out fails too,
    // naming the counter, as every other call does (the script once read only the leases).
    let other = common::prefix("permit-bad-counter");
    server.cmd(&["HSET", &other, "f", "v"]);
    let sem = client.permit_semaphore(other.clone());
    for id in ["00112233445566778899aabbccddeeff", "not-an-id"] {
        match sem.release_id(id).await {
            Err(relock::Error::WrongType { key }) if id.len() == 32 => assert_eq!(key, other),
            Err(e) if id.len() != 32 => assert!(e.is_invalid_argument(), "{e:?}"),
            outcome => panic!("release_id({id:?}) on a hash: {outcome:?}"),
        }
    }
    assert_eq!(common::raw_hgetall(&server, &other).len(), 1);
    assert!(!raw_exists(&server, &leases_key(&other)));
}

#[tokio::test]
async fn the_watchdog_renews_many_permits_per_script_call() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let client = common::client(&server, lease).await;
    let name = common::prefix("permit-batch");
    let sem = client.permit_semaphore(name.clone());
    const HELD: usize = 30;
    assert!(sem.try_set_permits(HELD as u64).await.unwrap());
    let mut permits = Vec::new();
    for _ in 0..HELD {
        permits.push(sem.acquire().await.unwrap());
    }
    let before = common::raw_script_calls(&server);
    let started = std::time::Instant::now();
    tokio::time::sleep(lease * 3).await;
    let scripts = common::raw_script_calls(&server) - before;
    // One renewal period is a third of the lease: count how many passed, with one to spare.
    let periods = (started.elapsed().as_millis() / (lease / 3).as_millis()) as u64 + 1;
    assert!(
        scripts <= 2 * periods,
        "{scripts} scripts in {periods} renewal periods for {HELD} permits: not batched"
    );
    let now = common::raw_time_ms(&server);
    let leases = raw_zrange_hex(&server, &leases_key(&name));
    assert_eq!(leases.len(), HELD);
    assert!(
        leases.iter().all(|(_, ends)| *ends > now),
        "a permit lapsed"
    );
    assert!(permits.iter().all(|p| !p.is_lost()));
    for permit in permits {
        permit.release().await.unwrap();
    }
    assert_eq!(raw_count(&server, &name), Some(HELD as i64));
}
