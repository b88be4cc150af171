//! Campaign options of `Election`: metadata written with the election (`with_metadata`,
//! `campaign_with`), a bounded campaign (`campaign_for`) and an election's own lease
//! (`with_lease`).

use crate::common;

use std::time::Duration;

use futures::StreamExt;

use common::HANG;
use relock::Error;

/// The election's key on Redis, as the docs name it.
fn key(name: &str) -> String {
    format!("relock_election:{name}")
}

/// Metadata given at campaign time is written with the election: `leader()` and the watch's
/// `Elected` carry it from the term's first moment, before any proclaim; a proclaim replaces
/// it, and the next term (campaigned without) has none.
#[tokio::test]
async fn metadata_given_at_campaign_time_shows_from_the_first_moment() {
    let (_server, first, second, name) =
        common::setup_two("election_metadata", Duration::from_secs(30)).await;
    let watcher = second.election(&name);
    let mut watch = watcher.watch();
    let term = first
        .election(&name)
        .campaign_with("10.0.0.7:8080")
        .await
        .unwrap();
    let leader = watcher.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.epoch, term.epoch());
    assert_eq!(leader.metadata.as_deref(), Some("10.0.0.7:8080"));
    let elected = watch.next().await.unwrap().unwrap();
    match &elected {
        relock::Change::Elected {
            epoch, metadata, ..
        } => {
            assert_eq!(*epoch, term.epoch());
            assert_eq!(metadata.as_deref(), Some("10.0.0.7:8080"));
        }
        other => panic!("expected Elected, got {other:?}"),
    }
    term.proclaim("10.0.0.8:8080").await.unwrap();
    let leader = watcher.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.metadata.as_deref(), Some("10.0.0.8:8080"));
    term.resign().await.unwrap();
    let plain = watcher.campaign().await.unwrap();
    let leader = watcher.leader().await.unwrap().expect("a leader");
    assert_eq!(leader.epoch, plain.epoch());
    assert_eq!(leader.metadata, None);
}

/// `campaign_for` gives up after its wait while another leads, leaving no candidate behind,
/// and leads once the leader resigns within it.
#[tokio::test]
async fn campaign_for_waits_at_most_its_wait() {
    let (server, first, second, name) =
        common::setup_two("election_campaign_for", Duration::from_secs(30)).await;
    let term = first.election(&name).campaign().await.unwrap();
    let election = second.election(&name);
    let wait = Duration::from_millis(200);
    let started = std::time::Instant::now();
    assert!(election.campaign_for(wait).await.unwrap().is_none());
    assert!(started.elapsed() >= wait);
    assert_eq!(second.stats().waiters, 0, "the candidate was withdrawn");
    let waiting = tokio::spawn({
        let election = election.clone();
        async move { election.campaign_for(HANG).await }
    });
    common::until_waiters(&second, 1).await;
    let old = term.epoch();
    term.resign().await.unwrap();
    let next = common::within(HANG, waiting, "never led").await.unwrap();
    let next = next.expect("led once the leader resigned");
    assert!(next.epoch() > old);
    assert!(common::raw_exists(&server, &key(&name)));
}

/// An election's own lease: on clients whose watchdog timeout is 30 s, a term of a 600 ms lease
/// is renewed with it (its TTL never above 600 ms, alive after several of them), and once its
/// leader stops renewing (its client shut down keeping its holds) the next candidate leads
/// after that lease, far sooner than the client's.
#[tokio::test]
async fn an_election_with_its_own_lease_is_renewed_and_followed_by_it() {
    let (server, first, second, name) =
        common::setup_two("election_own_lease", Duration::from_secs(30)).await;
    let lease = Duration::from_millis(600);
    let term = first
        .election(&name)
        .with_lease(lease)
        .unwrap()
        .campaign()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    while started.elapsed() < lease * 3 {
        let left = common::raw_pttl(&server, &key(&name));
        assert!(left > 0 && left <= 600, "a TTL of {left} ms");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!term.is_lost(), "the term was not renewed with its lease");
    let election = second.election(&name).with_lease(lease).unwrap();
    assert!(election.try_campaign().await.unwrap().is_none());
    first.shutdown_keeping_locks().await.unwrap();
    let stopped = std::time::Instant::now();
    let next = election.campaign().await.unwrap();
    let took = stopped.elapsed();
    println!("followed {took:?} after the leader stopped renewing a {lease:?} lease");
    assert!(next.epoch() > term.epoch());
    assert!(
        took < Duration::from_secs(15),
        "followed after {took:?}: the client's 30 s lease, not the election's"
    );
    assert!(matches!(
        second.election(&name).with_lease(Duration::from_millis(2)),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        second.election(&name).with_lease(Duration::ZERO),
        Err(Error::InvalidArgument { .. })
    ));
}

/// A client of `url` whose claims on a hand-off outlive the lease they wait on by `window`.
async fn claiming(url: &str, window: Duration) -> relock::Client {
    let config = common::config(url)
        .with_watchdog_timeout(Duration::from_secs(5))
        .with_command_timeout(Duration::from_secs(2))
        .with_claim_window(window);
    relock::Client::new(config).await.expect("connect")
}

/// In a child: a candidate on `ELECTION` at `REDIS_URL` whose claims outlive the lease they
/// wait on by `CLAIM_MS`; it campaigns and waits.
#[tokio::test]
#[ignore = "a child process of try_campaign_yields_to_a_candidate_that_claimed_the_hand_off"]
async fn election_child_candidate() {
    let Some(env) = common::child::env() else {
        return;
    };
    let client = claiming(&env.text("REDIS_URL"), env.millis("CLAIM_MS")).await;
    let _term = client
        .election(env.text("ELECTION"))
        .campaign()
        .await
        .unwrap();
    common::child::say("LEADS");
    std::future::pending::<()>().await;
}

/// `try_campaign` says `None` on a vacant election whose hand-off a waiting candidate has
/// claimed, until that candidate leads or its claim lapses (here the waiting candidate, in a
/// child process, is stopped after it claimed, so it never comes to lead, and its claim lapses
/// at the resigning client's claim window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_campaign_yields_to_a_candidate_that_claimed_the_hand_off() {
    let server = common::RedisServer::start();
    let name = common::prefix("election_claimed");
    let window = Duration::from_millis(1500);
    let leader = claiming(&server.url(), window).await;
    let other = claiming(&server.url(), window).await;
    let term = leader.election(&name).campaign().await.unwrap();
    let env = [
        ("REDIS_URL", server.url()),
        ("ELECTION", name.clone()),
        ("CLAIM_MS", window.as_millis().to_string()),
    ];
    let path = concat!(module_path!(), "::election_child_candidate");
    let mut child = common::child::Child::spawn(path, &env);
    let claim = format!("relock_claim:{{{}}}", key(&name));
    let claimed = common::eventually(HANG, || async { common::raw_exists(&server, &claim) }).await;
    assert!(claimed, "the waiting candidate never claimed the hand-off");
    let frozen = common::faults::Frozen::stop(child.pid());
    term.resign().await.unwrap();
    let resigned = std::time::Instant::now();
    let election = other.election(&name);
    let first = election.try_campaign().await.unwrap();
    if resigned.elapsed() < window / 2 {
        assert!(first.is_none(), "led past a live claim");
    }
    let mut led = first;
    let deadline = std::time::Instant::now() + HANG;
    while led.is_none() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        led = election.try_campaign().await.unwrap();
    }
    let took = resigned.elapsed();
    let term = led.expect("the claim never lapsed");
    println!("led {took:?} after the resign, with a claim window of {window:?}");
    assert!(
        took >= window / 2,
        "led {took:?} after the resign, before the claim could lapse"
    );
    assert_eq!(child.count("LEADS"), 0);
    drop(frozen);
    child.kill().await;
    term.resign().await.unwrap();
}
