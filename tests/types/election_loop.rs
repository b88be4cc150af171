//! The leader loop (`Election::lead`): it campaigns, runs the work for each term, and campaigns
//! again; its `Leadership` reports each role change. Leaders that resign, are cut off from
//! Redis, are stopped (`SIGSTOP`) past their lease and are killed: the others take over, and a
//! loop that comes back campaigns again and follows.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::StreamExt;
use relock::{Client, Leadership, Role, TermContext, TermEnd};
use tokio::sync::Notify;

use common::proxy::Proxy;
use common::{RedisServer, HANG};

/// The election's key on Redis.
fn key(name: &str) -> String {
    format!("relock_election:{name}")
}

/// The next role change, at most [`HANG`] away.
async fn next(leadership: &mut Leadership, who: &str) -> Role {
    tokio::time::timeout(HANG, leadership.next())
        .await
        .unwrap_or_else(|_| panic!("{who}: no role change within {HANG:?}"))
        .unwrap_or_else(|| panic!("{who}: the loop ended"))
}

fn leading(role: &Role) -> u64 {
    match role {
        Role::Leading { epoch } => *epoch,
        other => panic!("expected Leading, got {other:?}"),
    }
}

/// What a [`steady`] work saw: its steps, those taken after the term may have ended (none must
/// be), and when its first and last steps ran.
#[derive(Clone, Default)]
struct Steps(Arc<Mutex<Seen>>);

#[derive(Default)]
struct Seen {
    count: u64,
    late: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Steps {
    fn count(&self) -> u64 {
        self.0.lock().unwrap().count
    }
    fn late(&self) -> u64 {
        self.0.lock().unwrap().late
    }
    fn first(&self) -> Instant {
        self.0.lock().unwrap().first.expect("a step ran")
    }
    fn last(&self) -> Instant {
        self.0.lock().unwrap().last.expect("a step ran")
    }
}

/// Work that leads until its term ends, a step every 5 ms, each recorded in `steps`.
fn steady(steps: Steps) -> impl FnMut(TermContext) -> BoxFuture<'static, ()> {
    move |term| {
        let steps = steps.clone();
        Box::pin(async move {
            loop {
                {
                    let now = Instant::now();
                    let mut seen = steps.0.lock().unwrap();
                    seen.late += u64::from(term.is_lost());
                    seen.count += 1;
                    seen.first.get_or_insert(now);
                    seen.last = Some(now);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    }
}

/// Two loops: the first leads; its work returns (a resign), the second leads at once and the
/// first, campaigning again, follows it; the second stopped, the first leads again; stopped
/// too, the election is vacant and both streams have ended.
#[tokio::test]
async fn a_loop_whose_work_returns_hands_over_and_campaigns_again() {
    let (_server, first, second, name) =
        common::setup_two("election_loop_resign", Duration::from_secs(30)).await;
    let resign = Arc::new(Notify::new());
    let resigned = Arc::new(AtomicBool::new(false));
    let mut one = first
        .election(&name)
        .lead({
            let (resign, resigned) = (resign.clone(), resigned.clone());
            move |term| {
                let (resign, resigned) = (resign.clone(), resigned.clone());
                async move {
                    if resigned.swap(true, Ordering::SeqCst) {
                        term.lost().await;
                    } else {
                        resign.notified().await;
                    }
                }
            }
        })
        .unwrap();
    let e1 = leading(&next(&mut one, "first").await);
    let steps = Steps::default();
    let mut two = second.election(&name).lead(steady(steps.clone())).unwrap();
    match next(&mut two, "second").await {
        Role::Following { epoch, leader } => {
            assert_eq!(epoch, e1);
            assert!(leader.field.starts_with(first.id()), "{leader:?}");
        }
        other => panic!("expected Following, got {other:?}"),
    }

    resign.notify_one();
    assert_eq!(
        next(&mut one, "first").await,
        Role::Lost {
            epoch: e1,
            reason: TermEnd::WorkDone
        }
    );
    let e2 = leading(&next(&mut two, "second").await);
    assert!(e2 > e1);
    match next(&mut one, "first").await {
        Role::Following { epoch, leader } => {
            assert_eq!(epoch, e2);
            assert!(leader.field.starts_with(second.id()), "{leader:?}");
        }
        other => panic!("expected Following, got {other:?}"),
    }

    two.stop().await;
    let e3 = leading(&next(&mut one, "first").await);
    assert!(e3 > e2);
    one.stop().await;
    let election = second.election(&name);
    assert_eq!(
        election.leader().await.unwrap(),
        None,
        "a stopped loop gave its term back"
    );
    assert!(steps.count() > 0, "the second's work never ran");
    assert_eq!(steps.late(), 0, "a step after the term may have ended");
}

/// A stopped loop reports its term's end as `Stopped`, gives the term back before `stop`
/// returns, and its stream ends; a dropped one gives it back too (in the background).
#[tokio::test]
async fn stopping_or_dropping_a_loop_gives_its_term_back() {
    let (server, first, _second, name) =
        common::setup_two("election_loop_stop", Duration::from_secs(30)).await;
    let election = first.election(&name);
    let steps = Steps::default();
    let mut leadership = election.lead(steady(steps.clone())).unwrap();
    let epoch = leading(&next(&mut leadership, "loop").await);
    while steps.count() == 0 {
        tokio::task::yield_now().await;
    }
    leadership.stop().await;
    assert!(
        !common::raw_exists(&server, &key(&name)),
        "the term was not given back when stop returned"
    );
    assert_eq!(
        next(&mut leadership, "stopped").await,
        Role::Lost {
            epoch,
            reason: TermEnd::Stopped
        }
    );
    assert_eq!(
        leadership.next().await,
        None,
        "a stopped loop's stream ends"
    );
    let stopped_at = steps.count();

    let mut again = election.lead(steady(steps.clone())).unwrap();
    assert!(leading(&next(&mut again, "again").await) > epoch);
    assert!(!again.is_finished());
    drop(again);
    let freed =
        common::eventually(HANG, || async { !common::raw_exists(&server, &key(&name)) }).await;
    assert!(freed, "a dropped loop's term was never given back");
    // Both works were dropped with their loops: no step follows.
    let counted = steps.count();
    assert!(counted > stopped_at, "the second loop's work never ran");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(steps.count(), counted, "a dropped loop's work ran on");
}

/// A leader cut off from Redis (its connections reset, no new one accepted): its loop stops the
/// work at the term's local deadline and reports `Lost`; the other leads once the lease has run
/// out on the server, its work's first step after the first's last; back in reach, the first
/// campaigns again and follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_redis_is_followed_and_follows_when_back() {
    let server = RedisServer::start();
    let name = common::prefix("election_loop_cut");
    let lease = Duration::from_millis(1000);
    let proxy = Proxy::start(server.port()).await;
    let far = common::client_at(&proxy.url(), lease).await;
    let near = common::client(&server, lease).await;
    let (cut_steps, other_steps) = (Steps::default(), Steps::default());
    let mut one = far.election(&name).lead(steady(cut_steps.clone())).unwrap();
    let e1 = leading(&next(&mut one, "cut off").await);
    let mut two = near
        .election(&name)
        .lead(steady(other_steps.clone()))
        .unwrap();
    assert!(matches!(next(&mut two, "other").await, Role::Following { epoch, .. } if epoch == e1));

    proxy.set_down(true);
    assert_eq!(
        next(&mut one, "cut off").await,
        Role::Lost {
            epoch: e1,
            reason: TermEnd::LeaseLost
        }
    );
    let stopped_at = cut_steps.count();
    let e2 = leading(&next(&mut two, "other").await);
    assert!(e2 > e1);
    let _ = common::eventually(HANG, || async { other_steps.count() > 0 }).await;
    assert!(
        cut_steps.last() < other_steps.first(),
        "the other's work ran {:?} before the cut-off leader's stopped",
        cut_steps.last() - other_steps.first()
    );

    proxy.set_down(false);
    match next(&mut one, "back").await {
        Role::Following { epoch, leader } => {
            assert_eq!(epoch, e2);
            assert!(leader.field.starts_with(near.id()), "{leader:?}");
        }
        other => panic!("expected Following, got {other:?}"),
    }
    assert_eq!(cut_steps.count(), stopped_at, "the work ran on after Lost");
    assert_eq!(
        cut_steps.late() + other_steps.late(),
        0,
        "a step after a term may have ended"
    );
    two.stop().await;
    let e3 = leading(&next(&mut one, "back").await);
    assert!(e3 > e2);
    one.stop().await;
}

/// What a leader loop in a child process says of each role change.
const ROLE: &str = "ROLE ";

/// In a child: a leader loop on `ELECTION` at `REDIS_URL` (watchdog `WATCHDOG_MS`) whose work
/// leads until its term ends; says each role change.
#[tokio::test]
#[ignore = "a child process of the leader loop's process tests"]
async fn election_loop_child() {
    let Some(env) = common::child::env() else {
        return;
    };
    let config =
        common::config(&env.text("REDIS_URL")).with_watchdog_timeout(env.millis("WATCHDOG_MS"));
    let client = Client::new(config).await.unwrap();
    let work = steady(Steps::default());
    let mut leadership = client.election(env.text("ELECTION")).lead(work).unwrap();
    while let Some(role) = leadership.next().await {
        let line = match role {
            Role::Leading { epoch } => format!("Leading {epoch}"),
            Role::Following { epoch, .. } => format!("Following {epoch}"),
            Role::Lost { epoch, reason } => format!("Lost {epoch} {reason:?}"),
            other => format!("{other:?}"),
        };
        common::child::say(format!("{ROLE}{line}"));
    }
}

/// A loop in a child process leads; stopped (`SIGSTOP`) past its lease, a loop here leads with
/// a higher epoch once the lease has run out on the server; resumed, the child reports its term
/// lost and follows. This loop stopped, the child leads again; killed, a loop here leads once
/// the dead child's lease has run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_or_killed_leader_loop_is_followed_and_a_resumed_one_follows() {
    let server = RedisServer::start();
    let name = common::prefix("election_loop_child");
    let lease = Duration::from_millis(800);
    let env = [
        ("REDIS_URL", server.url()),
        ("ELECTION", name.clone()),
        ("WATCHDOG_MS", lease.as_millis().to_string()),
    ];
    let path = concat!(module_path!(), "::election_loop_child");
    let mut child = common::child::Child::spawn(path, &env);
    let epoch_said = |said: String| -> u64 { said.parse().expect("an epoch") };
    let e1 = epoch_said(
        child
            .said(&format!("{ROLE}Leading "), Duration::from_secs(10))
            .await,
    );
    let here = common::client(&server, lease).await;
    let mut leadership = here.election(&name).lead(steady(Steps::default())).unwrap();
    assert!(
        matches!(next(&mut leadership, "here").await, Role::Following { epoch, .. } if epoch == e1)
    );

    // Stopped past its lease: this loop leads once the lease has run out on the server.
    let frozen = common::faults::Frozen::stop(child.pid());
    let read_at = Instant::now();
    let left = common::raw_pttl(&server, &key(&name));
    let e2 = leading(&next(&mut leadership, "here").await);
    let took = read_at.elapsed();
    assert!(e2 > e1);
    assert!(
        took >= Duration::from_millis(left.max(0) as u64),
        "led {took:?} after a PTTL of {left} ms was read"
    );
    drop(frozen);
    let lost = child.said(&format!("{ROLE}Lost {e1} "), HANG).await;
    assert_eq!(lost, "LeaseLost");
    let followed = epoch_said(child.said(&format!("{ROLE}Following "), HANG).await);
    assert_eq!(followed, e2, "the resumed loop follows the new leader");

    // This loop steps down: the child leads again; killed, a loop here leads once its lease has
    // run out on the server.
    leadership.stop().await;
    let leads = format!("{ROLE}Leading ");
    let again = common::eventually(HANG, || async { child.reports(&leads).len() >= 2 }).await;
    assert!(again, "the child never led again: {:?}", child.lines());
    let e3 = epoch_said(child.reports(&leads)[1].clone());
    assert!(e3 > e2);
    let mut follower = here.election(&name).lead(steady(Steps::default())).unwrap();
    assert!(
        matches!(next(&mut follower, "follower").await, Role::Following { epoch, .. } if epoch == e3)
    );
    let read_at = Instant::now();
    let left = common::raw_pttl(&server, &key(&name));
    child.kill().await;
    let e4 = leading(&next(&mut follower, "follower").await);
    assert!(e4 > e3);
    assert!(
        read_at.elapsed() >= Duration::from_millis(left.max(0) as u64),
        "led before the killed leader's lease ran out"
    );
    follower.stop().await;
}
