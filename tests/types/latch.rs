//! `CountDownLatch`: Redisson's latch. Redis's layout and messages, waiters woken together by
//! the count-down that reaches zero and not before, and bad input.

use crate::common;

use std::time::Duration;

use common::{latch_channel, polling_client, raw_count, raw_exists, RawSubscriber, RedisServer};

#[tokio::test]
async fn the_count_is_redissons_and_zero_deletes_it_and_says_so() {
    let (server, client, name) = common::setup("latch-layout", Duration::from_secs(5)).await;
    let latch = client.count_down_latch(name.clone());
    let channel = latch_channel(&name);
    let mut messages = RawSubscriber::subscribe(&server, &[&channel]).await;

    assert_eq!(latch.count().await.unwrap(), 0);
    assert!(latch.try_set_count(2).await.unwrap());
    assert_eq!(raw_count(&server, &name), Some(2));
    assert_eq!(
        messages.next_message(Duration::from_secs(5)).await,
        Some((channel.clone(), "1".into())),
        "a new count is published as Redisson's `1`"
    );
    assert!(!latch.try_set_count(5).await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 2);

    latch.count_down().await.unwrap();
    assert_eq!(raw_count(&server, &name), Some(1));
    messages.assert_quiet(&server, &channel).await;
    latch.count_down().await.unwrap();
    assert!(!raw_exists(&server, &name), "a latch at zero keeps its key");
    assert_eq!(
        messages.next_message(Duration::from_secs(5)).await,
        Some((channel.clone(), "0".into()))
    );
    latch.count_down().await.unwrap();
    assert!(
        !raw_exists(&server, &name),
        "a count-down of an open latch wrote"
    );
    messages.assert_quiet(&server, &channel).await;

    // Open again, it can be set again; deleting it opens it.
    assert!(latch.try_set_count(3).await.unwrap());
    assert!(latch.delete().await.unwrap());
    assert!(!latch.delete().await.unwrap());
    assert_eq!(latch.count().await.unwrap(), 0);
}

#[tokio::test]
async fn waiters_of_two_clients_wake_on_the_last_count_down_and_not_before() {
    let server = RedisServer::start();
    // Waiters poll only every 60 s: only the message explains a prompt wake-up.
    let clients = [
        polling_client(&server, Duration::from_secs(60)).await,
        polling_client(&server, Duration::from_secs(60)).await,
    ];
    let counter = common::client(&server, Duration::from_secs(5)).await;
    let name = common::prefix("latch-wake");
    assert!(counter
        .count_down_latch(name.clone())
        .try_set_count(3)
        .await
        .unwrap());

    let mut waiters = Vec::new();
    for client in &clients {
        for _ in 0..5 {
            let latch = client.count_down_latch(name.clone());
            waiters.push(tokio::spawn(async move {
                latch.wait().await.unwrap();
                std::time::Instant::now()
            }));
        }
    }
    assert!(
        common::until_numsub(&server, &latch_channel(&name), 2, Duration::from_secs(5)).await,
        "one subscription per client"
    );
    let latch = counter.count_down_latch(name.clone());
    for _ in 0..2 {
        latch.count_down().await.unwrap();
        assert!(
            common::stays(Duration::from_millis(200), || async {
                waiters.iter().all(|w| !w.is_finished())
            })
            .await,
            "a waiter woke before zero"
        );
    }
    let last = std::time::Instant::now();
    latch.count_down().await.unwrap();
    for waiter in waiters {
        let woke = common::within(common::HANG, waiter, "a waiter hung").await;
        assert!(woke.duration_since(last) < common::PROMPT);
    }
    for client in &clients {
        assert_eq!(client.stats().waiters, 0);
    }
}

#[tokio::test]
async fn a_deleted_latch_is_open_and_a_timed_wait_ends() {
    let (_server, client, name) =
        common::setup_polling("latch-delete", Duration::from_secs(60)).await;
    let latch = common::latch(&client, &name, 1).await;
    assert!(!latch.wait_for(Duration::from_millis(100)).await.unwrap());

    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait_for(common::HANG).await.unwrap() }
    });
    common::until_waiters(&client, 1).await;
    assert!(latch.delete().await.unwrap());
    assert!(
        common::within(
            common::PROMPT,
            waiter,
            "deleting the latch did not wake its waiter"
        )
        .await
    );
}

#[tokio::test]
async fn bad_input_is_refused_with_nothing_changed() {
    let (server, client, name) = common::setup("latch-bad", Duration::from_secs(5)).await;
    let latch = client.count_down_latch(name.clone());

    assert!(latch
        .try_set_count(0)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(!raw_exists(&server, &name));
    // A tagged name whose channel would hash to another slot than its key is refused on a
    // cluster only; one server has no slots and takes it (see tests/api/bad_input.rs).
    assert_eq!(client.count_down_latch("job{42}").count().await.unwrap(), 0);

    server.cmd(&["LPUSH", &name, "x"]);
    let errors = [
        latch.try_set_count(1).await.unwrap_err(),
        latch.count_down().await.unwrap_err(),
        latch.count().await.unwrap_err(),
        latch.wait().await.unwrap_err(),
        latch.delete().await.unwrap_err(),
    ];
    common::assert_wrong_type(errors, &name);
    assert!(raw_exists(&server, &name), "a failed call deleted the key");
}

#[tokio::test]
async fn one_message_wakes_every_waiter_of_a_client_without_another_read() {
    let server = RedisServer::start();
    // The server counts the waiters' looks by its EVALSHAs.
    let config = common::config(&server.url()).with_poll_interval(Duration::from_secs(60));
    let client = relock::Client::new(config).await.unwrap();
    let name = common::prefix("latch-one-read");
    let latch = common::latch(&client, &name, 1).await;
    // One look first, so the script is loaded: 50 first looks at once would each meet
    // `NOSCRIPT` and count twice below.
    assert!(!latch.wait_for(Duration::ZERO).await.unwrap());
    let spawned = common::raw_script_calls(&server);
    let waiters: Vec<_> = (0..50)
        .map(|_| {
            let latch = latch.clone();
            tokio::spawn(async move { latch.wait().await.unwrap() })
        })
        .collect();
    // Each waiter looks at the count twice before it sleeps (a look, subscribed, a look): all
    // 100 looks done, on a loaded machine too, before the looks after the message are counted.
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            client.stats().waiters == 50 && common::raw_script_calls(&server) - spawned >= 100
        })
        .await,
        "the waiters never settled: {:?}, {} scripts",
        client.stats(),
        common::raw_script_calls(&server) - spawned
    );
    let scripts_before = common::raw_script_calls(&server);
    latch.count_down().await.unwrap();
    common::all_within(waiters, common::HANG, "a waiter hung").await;
    let scripts = common::raw_script_calls(&server) - scripts_before;
    // The count-down is one script; 50 waiters reading the count again would be 50 more.
    assert!(scripts < 10, "{scripts} scripts ran to wake 50 waiters");
}

#[tokio::test]
async fn a_latch_opened_by_hand_is_seen_within_a_poll() {
    let (server, client, name) =
        common::setup_polling("latch-poll", Duration::from_millis(300)).await;
    let latch = common::latch(&client, &name, 5).await;
    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait().await.unwrap() }
    });
    common::until_waiters(&client, 1).await;
    // Deleted without a message: only the poll can tell the waiter.
    server.cmd(&["DEL", &name]);
    common::within(
        Duration::from_secs(10),
        waiter,
        "the waiter slept through its poll",
    )
    .await;
}
