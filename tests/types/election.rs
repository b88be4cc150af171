//! `Election`: one leader per name at a time, across clients; epochs that grow and fence; a
//! term given back by `resign`, by drop and by `Client::shutdown`; `Term::run` stopping the
//! leader's work when the term may have ended; `leader()` reading who leads from Redis.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use common::{RedisServer, HANG};
use relock::{Client, Error, Term};

/// The election's key on Redis, as the docs name it.
fn key(name: &str) -> String {
    format!("relock_election:{name}")
}

/// A campaign of `client` on `name`, spawned: it ends when the candidate leads.
fn candidate(client: &Client, name: &str) -> tokio::task::JoinHandle<Term> {
    let election = client.election(name);
    tokio::spawn(async move { election.campaign().await.unwrap() })
}

#[tokio::test]
async fn one_candidate_leads_at_a_time_and_each_term_has_a_higher_epoch() {
    let (_server, first, second, name) =
        common::setup_two("election_one", Duration::from_secs(30)).await;
    let term = first.election(&name).campaign().await.unwrap();
    assert_eq!(term.election(), name);
    assert!(
        second
            .election(&name)
            .try_campaign()
            .await
            .unwrap()
            .is_none(),
        "a second candidate led while the first did"
    );
    // Two campaigns of one task are two candidates: no re-entry.
    assert!(first
        .election(&name)
        .try_campaign()
        .await
        .unwrap()
        .is_none());

    let leader = second.election(&name).leader().await.unwrap().unwrap();
    assert_eq!(leader.epoch, term.epoch());
    assert_eq!(leader.party.client_id, first.id());
    let process = leader.party.process().expect("the leader's process");
    assert_eq!(process.pid, Some(std::process::id()));
    let lease = leader.lease_left.expect("a lease");
    assert!(
        lease > Duration::ZERO && lease <= Duration::from_secs(30),
        "{lease:?}"
    );

    let waiting = candidate(&second, &name);
    common::until_waiters(&second, 1).await;
    let first_epoch = term.epoch();
    term.resign().await.unwrap();
    let next = common::within(HANG, waiting, "the follower never led").await;
    assert!(
        next.epoch() > first_epoch,
        "{} after {first_epoch}",
        next.epoch()
    );
    let leader = first.election(&name).leader().await.unwrap().unwrap();
    assert_eq!(leader.party.client_id, second.id());
    assert_eq!(leader.epoch, next.epoch());
    next.resign().await.unwrap();
    assert_eq!(first.election(&name).leader().await.unwrap(), None);
}

#[tokio::test]
async fn a_dropped_term_and_a_shut_down_client_hand_over_at_once() {
    let (server, name) = (RedisServer::start(), common::prefix("election_drop"));
    let clients = common::clients(&server, 3, Duration::from_secs(30)).await;
    let term = clients[0].election(&name).campaign().await.unwrap();
    let second = candidate(&clients[1], &name);
    common::until_waiters(&clients[1], 1).await;
    drop(term);
    let term = common::within(HANG, second, "no hand-over after a dropped term").await;
    let third = candidate(&clients[2], &name);
    common::until_waiters(&clients[2], 1).await;
    let epoch = term.epoch();
    // The term is alive when its client shuts down: the shutdown gives it back.
    let _kept = term;
    clients[1].shutdown().await.unwrap();
    let term = common::within(HANG, third, "no hand-over after a shutdown").await;
    assert!(term.epoch() > epoch);
}

#[tokio::test]
async fn run_gives_the_term_back_once_the_work_has_ended() {
    let (_server, first, second, name) =
        common::setup_two("election_run", Duration::from_secs(30)).await;
    let term = first.election(&name).campaign().await.unwrap();
    let epoch = term.epoch();
    let election = second.election(&name);
    let out = term
        .run(|info| async move {
            assert_eq!(info.epoch(), epoch);
            // Still the leader while the work runs.
            assert!(election.try_campaign().await.unwrap().is_none());
            info.epoch() * 10
        })
        .await
        .unwrap();
    assert_eq!(out, epoch * 10);
    assert_eq!(second.election(&name).leader().await.unwrap(), None);
    let next = second.election(&name).try_campaign().await.unwrap();
    assert!(next.expect("the term was given back").epoch() > epoch);
}

/// The leader's lease ends behind its back (its key deleted, as a lapse or a failover to a
/// replica without it would): `run` stops the work, fails with `LeaseLost`, and the work does
/// nothing more; the next leader's epoch is higher and a fence refuses the old one. A `run`
/// that let its work go on past the term (a work handed to a task of its own and not stopped,
/// say) fails the last check: the work steps every 5 ms.
#[tokio::test]
async fn run_stops_the_work_when_the_term_may_have_ended() {
    let (server, first, second, name) =
        common::setup_two("election_lost", Duration::from_secs(1)).await;
    let term = first.election(&name).campaign().await.unwrap();
    let old_epoch = term.epoch();
    let steps = Arc::new(AtomicU64::new(0));
    let started = std::time::Instant::now();
    let running = tokio::spawn({
        let steps = steps.clone();
        term.run(move |_| async move {
            loop {
                steps.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    });
    while steps.load(Ordering::SeqCst) < 3 {
        tokio::task::yield_now().await;
    }
    // How long a step took here, now: the wait below is many of them.
    let step = started.elapsed() / 3;
    server.cmd(&["DEL", &key(&name)]);
    let ended = common::within(HANG, running, "the work was never stopped").await;
    match ended {
        Err(Error::LeaseLost { lock, owner }) => {
            assert_eq!(lock, name);
            assert!(owner.starts_with(first.id()), "{owner}");
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    let stopped_at = steps.load(Ordering::SeqCst);
    let next = second.election(&name).campaign().await.unwrap();
    assert!(next.epoch() > old_epoch);
    let fence = second.fence(format!("{name}:data"));
    let data = format!("{name}:data");
    fence.set(next.epoch(), &data, "new").await.unwrap();
    assert!(matches!(
        fence.set(old_epoch, &data, "old").await,
        Err(Error::StaleToken { .. })
    ));
    // The work ran no step after `run` returned, in the time of 20 of its steps.
    tokio::time::sleep((step * 20).max(Duration::from_millis(100))).await;
    assert_eq!(steps.load(Ordering::SeqCst), stopped_at);
}

/// `run` reads the term's deadline before every poll of the work: work woken again and again
/// (here it yields at every step) never resumes once the term may have ended, though `lost()`
/// completes only when the runtime's timer turns, on the next whole millisecond or later (so
/// without the check, the work is polled many more times: hundreds, here). The
/// leader's renewals are held back (`CLIENT PAUSE`), so the term ends by its local deadline.
#[tokio::test]
async fn run_never_resumes_the_work_past_the_terms_deadline() {
    let (server, first, _second, name) =
        common::setup_two("election_deadline", Duration::from_millis(600)).await;
    let term = first.election(&name).campaign().await.unwrap();
    let (polls, late) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let running = tokio::spawn({
        let (polls, late) = (polls.clone(), late.clone());
        term.run(move |term| async move {
            loop {
                polls.fetch_add(1, Ordering::SeqCst);
                if term.is_lost() {
                    late.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
            }
        })
    });
    while polls.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    server.cmd(&["CLIENT", "PAUSE", "2000"]);
    let ended = common::within(HANG, running, "the work was never stopped").await;
    assert!(matches!(ended, Err(Error::LeaseLost { .. })), "{ended:?}");
    let late = late.load(Ordering::SeqCst);
    println!(
        "{} polls, {late} saw the term lost",
        polls.load(Ordering::SeqCst)
    );
    // The poll during which the deadline passed may see it (it began before); none after it.
    assert!(
        late <= 1,
        "the work was polled {late} times after the term's deadline"
    );
}

#[tokio::test]
async fn a_cancelled_campaign_leaves_no_candidate_behind() {
    let (_server, first, second, name) =
        common::setup_two("election_cancel", Duration::from_secs(30)).await;
    let term = first.election(&name).campaign().await.unwrap();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(100),
        second.election(&name).campaign(),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "the campaign led while another term lived"
    );
    term.resign().await.unwrap();
    let settled = common::eventually(Duration::from_secs(5), || async {
        let stats = second.stats();
        stats.waiters == 0 && stats.in_flight == 0
    })
    .await;
    assert!(
        settled,
        "the cancelled campaign left work behind: {:?}",
        second.stats()
    );
    assert_eq!(first.election(&name).leader().await.unwrap(), None);
    assert!(first
        .election(&name)
        .try_campaign()
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn bad_input_is_refused_with_a_typed_error() {
    let (server, client, name) = common::setup("election_bad", Duration::from_secs(30)).await;
    let empty = client.election("");
    assert!(matches!(
        empty.campaign().await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        empty.try_campaign().await,
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        empty.leader().await,
        Err(Error::InvalidArgument { .. })
    ));
    server.cmd(&["SET", &key(&name), "not an election"]);
    let election = client.election(&name);
    assert!(matches!(
        election.try_campaign().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        election.leader().await,
        Err(Error::WrongType { .. })
    ));
}

/// What the leader in a child process says once it leads, before its epoch.
const LEADS: &str = "LEADS ";

/// In a child: a client on `REDIS_URL` (watchdog `WATCHDOG_MS`) that leads `ELECTION`, and
/// says so with the term's epoch.
async fn child_leads(env: &common::child::Settings) -> (Client, Term) {
    let config =
        common::config(&env.text("REDIS_URL")).with_watchdog_timeout(env.millis("WATCHDOG_MS"));
    let client = Client::new(config).await.unwrap();
    let mut election = client.election(env.text("ELECTION"));
    if let Some(delay) = env.optional_millis("DELAY_MS") {
        election = election.with_lock_delay(delay).unwrap();
    }
    let term = election.campaign().await.unwrap();
    common::child::say(format!("{LEADS}{}", term.epoch()));
    (client, term)
}

/// Leads the election `ELECTION` on `REDIS_URL` (watchdog `WATCHDOG_MS`), says so with its epoch,
/// and keeps the term until it is killed.
#[tokio::test]
#[ignore = "a child process of a_killed_leader_is_followed_once_its_lease_ends_and_not_before"]
async fn election_child_leader() {
    let Some(env) = common::child::env() else {
        return;
    };
    let (_client, _term) = child_leads(&env).await;
    std::future::pending::<()>().await;
}

/// A leader in another process is SIGKILLed: the follower leads once the leader's lease has run
/// out on the server (never before: nobody gave the term back), with a higher epoch; before the
/// kill, `leader()` names the child's process, and a watch reports the dead leader's term
/// lapsed before the follower's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_followed_once_its_lease_ends_and_not_before() {
    killed_leader_followed(None).await;
}

/// As [`a_killed_leader_is_followed_once_its_lease_ends_and_not_before`], every candidate with a
/// lock-delay: the follower leads once the lease and the delay have run out, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_lock_delay_a_killed_leader_is_followed_after_its_lease_and_the_delay() {
    killed_leader_followed(Some(Duration::from_millis(700))).await;
}

async fn killed_leader_followed(delay: Option<Duration>) {
    let server = RedisServer::start();
    let name = common::prefix("election_killed");
    let lease = Duration::from_millis(800);
    let mut env = vec![
        ("REDIS_URL", server.url()),
        ("ELECTION", name.clone()),
        ("WATCHDOG_MS", lease.as_millis().to_string()),
    ];
    if let Some(delay) = delay {
        env.push(("DELAY_MS", delay.as_millis().to_string()));
    }
    let mut child =
        common::child::Child::spawn(concat!(module_path!(), "::election_child_leader"), &env);
    let said = child.said(LEADS, Duration::from_secs(10)).await;
    let child_epoch: u64 = said.trim().parse().expect("an epoch");
    let follower = common::client(&server, lease).await;
    let mut election = follower.election(&name);
    if let Some(delay) = delay {
        election = election.with_lock_delay(delay).unwrap();
    }
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.epoch, child_epoch);
    let process = leader.party.process().expect("the leader's process");
    assert_eq!(process.pid, Some(child.pid()));
    // Watched from a client of its own: a watch counts among its client's waiters, and the
    // follower's must count its campaign alone.
    let watcher = common::client(&server, lease).await;
    let mut watch = watcher.election(&name).watch();
    let first = watch.next().await.unwrap().unwrap();
    assert!(
        matches!(&first, relock::Change::Elected { epoch, leader, .. }
            if *epoch == child_epoch && leader.pid == child.pid()),
        "{first:?}"
    );

    let waiting = tokio::spawn({
        let election = election.clone();
        async move { election.campaign().await.unwrap() }
    });
    common::until_waiters(&follower, 1).await;
    let read_at = std::time::Instant::now();
    let left = common::raw_pttl(&server, &key(&name));
    assert!(left > 0, "the child's term has a lease: {left}");
    child.kill().await;
    let term = common::within(HANG, waiting, "nobody led after the leader died").await;
    let took = read_at.elapsed();
    let floor = Duration::from_millis(left as u64) + delay.unwrap_or_default();
    println!("led {took:?} after a PTTL of {left} ms was read, lease {lease:?}, delay {delay:?}");
    assert!(
        took >= floor,
        "the follower led {took:?} after the read, before the dead leader's {left} ms and the delay {delay:?} ran out"
    );
    assert!(term.epoch() > child_epoch);
    let lapsed = watch.next().await.unwrap().unwrap();
    assert!(
        matches!(lapsed, relock::Change::Vacant { epoch, reason: relock::Vacancy::Lapsed, .. }
            if epoch == child_epoch),
        "{lapsed:?}"
    );
    let elected = watch.next().await.unwrap().unwrap();
    assert!(
        matches!(elected, relock::Change::Elected { epoch, .. } if epoch == term.epoch()),
        "{elected:?}"
    );
    // A resign (with the lock-delay's shadow lease, when there is one) imposes no delay.
    term.resign().await.unwrap();
    let next = election.try_campaign().await.unwrap();
    assert!(next.is_some(), "the election stayed closed after a resign");
}

/// On a 3-master cluster, an election on each master: one leader at a time, the epoch growing,
/// the term's keys on the master that owns the election's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_on_every_master_of_a_cluster() {
    let cluster = common::topology::Cluster::start(3);
    let connect = || async {
        let config = common::config(&cluster.url())
            .with_watchdog_timeout(Duration::from_secs(30))
            .with_command_timeout(Duration::from_secs(3));
        tokio::time::timeout(Duration::from_secs(10), Client::new(config))
            .await
            .expect("the cluster client did not connect within 10 s")
            .expect("connect to the cluster")
    };
    let (first, second) = (connect().await, connect().await);
    let prefix = key(&common::prefix("election-cluster"));
    for (master, keys) in cluster.keys_per_master(&prefix, 1) {
        let name = keys[0].strip_prefix("relock_election:").unwrap();
        let term = first.election(name).campaign().await.unwrap();
        assert!(
            common::raw_exists(master, &key(name)),
            "{name}: the term is on the master that owns its slot"
        );
        assert!(second
            .election(name)
            .try_campaign()
            .await
            .unwrap()
            .is_none());
        let leader = second.election(name).leader().await.unwrap().unwrap();
        assert_eq!(leader.epoch, term.epoch());
        let epoch = term.epoch();
        term.resign().await.unwrap();
        let next = second.election(name).try_campaign().await.unwrap();
        assert!(
            next.expect("the term was given back").epoch() > epoch,
            "{name}"
        );
    }
}

/// What the stopped leader says: each step of its work, and how `run` ended.
const STEP: &str = "STEP ";
const ENDED: &str = "ENDED ";

/// Leads `ELECTION` on `REDIS_URL` (watchdog `WATCHDOG_MS`) and runs work that writes its step
/// through a fence on `DATA` every 10 ms, saying each; says how `run` ended.
#[tokio::test]
#[ignore = "a child process of a_leader_stopped_past_its_lease_does_no_work_on_resume"]
async fn election_child_worker() {
    let Some(env) = common::child::env() else {
        return;
    };
    let (client, term) = child_leads(&env).await;
    let (fence, data) = (client.fence(env.text("DATA")), env.text("DATA"));
    let ended = term
        .run(|term| async move {
            for step in 0i64.. {
                fence.set(term.epoch(), &data, step).await.unwrap();
                common::child::say(format!("{STEP}{step}"));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    common::child::say(format!(
        "{ENDED}{}",
        matches!(ended, Err(Error::LeaseLost { .. }))
    ));
}

/// A leader SIGSTOPped past its lease: a follower leads with a higher epoch and writes through
/// the fence; resumed, the old leader's `run` ends with `LeaseLost` without one more step of its
/// work, and the fence holds the new leader's write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_past_its_lease_does_no_work_on_resume() {
    let server = RedisServer::start();
    let name = common::prefix("election_stopped");
    let data = format!("{name}:data");
    let lease = Duration::from_millis(600);
    let env = [
        ("REDIS_URL", server.url()),
        ("ELECTION", name.clone()),
        ("DATA", data.clone()),
        ("WATCHDOG_MS", lease.as_millis().to_string()),
    ];
    let child =
        common::child::Child::spawn(concat!(module_path!(), "::election_child_worker"), &env);
    let old_epoch: u64 = child
        .said(LEADS, Duration::from_secs(10))
        .await
        .trim()
        .parse()
        .unwrap();
    child.said(STEP, Duration::from_secs(10)).await;
    let follower = common::client(&server, lease).await;
    let frozen = common::faults::Frozen::stop(child.pid());
    // What it said before it stopped has all arrived.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let steps = child.count(STEP);
    let term = follower.election(&name).campaign().await.unwrap();
    assert!(term.epoch() > old_epoch);
    let fence = follower.fence(data.clone());
    fence.set(term.epoch(), &data, "new").await.unwrap();
    drop(frozen);
    let ended = child.said(ENDED, HANG).await;
    assert_eq!(ended.trim(), "true", "run ended with LeaseLost");
    assert_eq!(
        child.count(STEP),
        steps,
        "the old leader's work ran a step after resuming"
    );
    assert_eq!(
        common::raw_get(&server, &data).as_deref(),
        Some("new"),
        "the fence kept the new leader's write"
    );
}
