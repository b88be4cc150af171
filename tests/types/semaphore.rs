//! `Semaphore`: Redisson's counter of permits. What Redis holds after each operation, who waits
//! and who is woken, and the bad input each operation refuses with nothing changed.

use crate::common;

use std::time::Duration;

use common::{
    polling_client, raw_count, raw_exists, raw_pttl, resp, semaphore_channel, RawSubscriber,
    RedisServer, Resp,
};

#[tokio::test]
async fn permits_are_a_redisson_counter_taken_and_given_back() {
    let (server, client, name) = common::setup("sem-counter", Duration::from_secs(5)).await;
    let sem = client.semaphore(name.clone());
    let mut messages = RawSubscriber::subscribe(&server, &[&semaphore_channel(&name)]).await;

    assert!(sem.try_set_permits(3).await.unwrap());
    assert_eq!(raw_count(&server, &name), Some(3));
    assert_eq!(raw_pttl(&server, &name), -1, "a counter without a TTL");
    assert_eq!(
        messages.next_message(Duration::from_secs(5)).await,
        Some((semaphore_channel(&name), "3".into())),
        "setting permits wakes Redisson's waiters with the count"
    );
    assert!(!sem.try_set_permits(10).await.unwrap(), "set twice");
    assert_eq!(raw_count(&server, &name), Some(3));

    assert!(sem.try_acquire(2).await.unwrap());
    assert_eq!(raw_count(&server, &name), Some(1));
    assert!(!sem.try_acquire(2).await.unwrap(), "only 1 left");
    assert_eq!(
        raw_count(&server, &name),
        Some(1),
        "a refused acquire wrote"
    );
    assert_eq!(sem.available_permits().await.unwrap(), 1);

    sem.release(2).await.unwrap();
    assert_eq!(raw_count(&server, &name), Some(3));
    assert_eq!(
        messages.next_message(Duration::from_secs(5)).await,
        Some((semaphore_channel(&name), "3".into())),
        "a release publishes the count after it"
    );
    sem.add_permits(-4).await.unwrap();
    assert_eq!(sem.available_permits().await.unwrap(), -1);
    messages
        .assert_quiet(&server, &semaphore_channel(&name))
        .await;
    sem.add_permits(3).await.unwrap();
    assert_eq!(
        messages.next_message(Duration::from_secs(5)).await,
        Some((semaphore_channel(&name), "2".into()))
    );
    assert_eq!(sem.drain_permits().await.unwrap(), 2);
    assert_eq!(raw_count(&server, &name), Some(0));
    assert!(sem.delete().await.unwrap());
    assert!(!raw_exists(&server, &name));
    assert!(!sem.delete().await.unwrap());

    // The client leaves no request key behind once its replies are in.
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            resp(&server.cmd(&["KEYS", "relock_request:*"])) == Resp::Array(Some(vec![]))
        })
        .await,
        "request keys were left behind"
    );
}

#[tokio::test]
async fn a_waiter_is_woken_by_a_release_in_another_process() {
    let server = RedisServer::start();
    // Waiters poll only every 60 s: only a message explains a prompt wake-up.
    let client = polling_client(&server, Duration::from_secs(60)).await;
    let other = common::client(&server, Duration::from_secs(5)).await;
    let name = common::prefix("sem-wake");
    let sem = common::semaphore(&client, &name, 1).await;
    assert!(sem.try_acquire(1).await.unwrap());

    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move {
            sem.acquire(1).await.unwrap();
            std::time::Instant::now()
        }
    });
    assert!(
        common::until_numsub(
            &server,
            &semaphore_channel(&name),
            1,
            Duration::from_secs(5)
        )
        .await,
        "the waiter never subscribed"
    );
    assert!(!waiter.is_finished());
    let released = std::time::Instant::now();
    other.semaphore(name.clone()).release(1).await.unwrap();
    let woken = common::within(common::HANG, waiter, "the waiter hung").await;
    assert!(woken.duration_since(released) < common::PROMPT);
    assert_eq!(
        raw_count(&server, &name),
        Some(0),
        "the waiter took the permit"
    );
    assert_eq!(client.stats().waiters, 0);
}

#[tokio::test]
async fn a_release_of_k_permits_lets_k_waiters_in_at_once() {
    let (server, client, name) = common::setup_polling("sem-k", Duration::from_secs(60)).await;
    let sem = common::semaphore(&client, &name, 0).await;
    let waiters: Vec<_> = (0..4)
        .map(|_| {
            let sem = sem.clone();
            tokio::spawn(async move { sem.try_acquire_for(1, common::HANG).await.unwrap() })
        })
        .collect();
    common::until_waiters(&client, 4).await;
    sem.release(3).await.unwrap();
    assert!(
        common::eventually(common::PROMPT, || async {
            waiters.iter().filter(|w| w.is_finished()).count() == 3
        })
        .await,
        "a release of 3 did not let 3 waiters in"
    );
    assert_eq!(raw_count(&server, &name), Some(0));
    assert_eq!(waiters.iter().filter(|w| w.is_finished()).count(), 3);
    sem.release(1).await.unwrap();
    for waiter in waiters {
        assert!(waiter.await.unwrap());
    }
}

#[tokio::test]
async fn a_waiter_for_many_permits_is_not_passed_by_later_waiters_for_fewer() {
    let (server, client, name) = common::setup_polling("sem-order", Duration::from_secs(60)).await;
    let sem = common::semaphore(&client, &name, 0).await;

    let big = tokio::spawn({
        let sem = sem.clone();
        async move { sem.try_acquire_for(4, common::HANG).await.unwrap() }
    });
    common::until_waiters(&client, 1).await;
    let small = tokio::spawn({
        let sem = sem.clone();
        async move { sem.try_acquire_for(1, common::HANG).await.unwrap() }
    });
    common::until_waiters(&client, 2).await;

    // 3 permits: enough for the later waiter, not for the first. The first keeps its turn.
    sem.release(3).await.unwrap();
    assert!(
        common::stays(Duration::from_millis(300), || async {
            !small.is_finished()
        })
        .await,
        "a later waiter for 1 permit passed the waiter for 4"
    );
    assert_eq!(raw_count(&server, &name), Some(3));
    sem.release(2).await.unwrap();
    assert!(tokio::time::timeout(common::HANG, big)
        .await
        .unwrap()
        .unwrap());
    assert!(tokio::time::timeout(common::HANG, small)
        .await
        .unwrap()
        .unwrap());
    assert_eq!(raw_count(&server, &name), Some(0));
}

#[tokio::test]
async fn a_lost_message_costs_one_poll_not_a_hang() {
    let (server, client, name) =
        common::setup_polling("sem-poll", Duration::from_millis(300)).await;
    let sem = common::semaphore(&client, &name, 0).await;
    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move { sem.try_acquire_for(1, common::HANG).await.unwrap() }
    });
    common::until_waiters(&client, 1).await;
    // Permits written by hand: nothing is published.
    server.cmd(&["SET", &name, "1"]);
    assert!(
        common::within(
            Duration::from_secs(10),
            waiter,
            "the waiter slept through its poll"
        )
        .await
    );
    assert_eq!(raw_count(&server, &name), Some(0));
}

#[tokio::test]
async fn a_cancelled_acquire_leaves_no_permit_taken() {
    let (server, client, name) = common::setup_polling("sem-cancel", Duration::from_secs(60)).await;
    let sem = common::semaphore(&client, &name, 2).await;
    // Cut the acquire at every point of its flight; none may keep a permit.
    for micros in [0u64, 50, 100, 200, 400, 800, 1600, 3200] {
        let acquire = sem.acquire(2);
        let _ = tokio::time::timeout(Duration::from_micros(micros), acquire).await;
        assert!(
            common::eventually(Duration::from_secs(5), || async {
                client.stats().in_flight == 0
            })
            .await
        );
        let left = raw_count(&server, &name);
        if left == Some(0) {
            // That one completed before the cut: the caller has the permits.
            sem.release(2).await.unwrap();
        }
        assert_eq!(
            raw_count(&server, &name),
            Some(2),
            "after a cut at {micros} µs"
        );
    }
}

#[tokio::test]
async fn bad_input_is_refused_with_nothing_changed() {
    let (server, client, name) = common::setup("sem-bad", Duration::from_secs(5)).await;
    let sem = client.semaphore(name.clone());

    assert!(sem.acquire(0).await.unwrap_err().is_invalid_argument());
    assert!(sem.release(0).await.unwrap_err().is_invalid_argument());
    assert!(sem.add_permits(0).await.unwrap_err().is_invalid_argument());
    assert!(sem
        .try_set_permits(1 << 60)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(client
        .semaphore("")
        .try_acquire(1)
        .await
        .unwrap_err()
        .is_invalid_argument());

    // A semaphore nobody set: waiting for it would wait forever.
    let error = sem.acquire(1).await.unwrap_err();
    assert!(error.is_not_found(), "{error:?}");
    assert!(error.to_string().contains(&name), "{error}");
    assert!(!raw_exists(&server, &name));

    // A key of another type, named in the error; nothing written.
    server.cmd(&["HSET", &name, "f", "1"]);
    let errors = [
        sem.try_acquire(1).await.unwrap_err(),
        sem.release(1).await.unwrap_err(),
        sem.try_set_permits(1).await.unwrap_err(),
        sem.add_permits(1).await.unwrap_err(),
        sem.drain_permits().await.unwrap_err(),
        sem.available_permits().await.unwrap_err(),
        sem.delete().await.unwrap_err(),
    ];
    common::assert_wrong_type(errors, &name);
    assert_eq!(
        common::raw_hgetall(&server, &name),
        vec![("f".into(), "1".into())]
    );
    // A string that is not a count.
    server.cmd(&["SET", &name, "many"]);
    assert!(sem.try_acquire(1).await.unwrap_err().is_wrong_type());
    assert!(sem.release(1).await.unwrap_err().is_wrong_type());
    assert_eq!(
        resp(&server.cmd(&["GET", &name])),
        Resp::Bulk(Some("many".into()))
    );
}
