//! The blocking election's parity with the async one (feature `blocking`): `campaign_for`,
//! `campaign_with`, `with_metadata`, `force_vacate`, and the leader loop with its work on a
//! thread of its own.

#![cfg(feature = "blocking")]

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::blocking::{connect, wait_until};
use common::RedisServer;

/// The next role change of a blocking loop, at most [`common::HANG`] away.
fn next_role(leadership: &mut relock::blocking::Leadership, who: &str) -> relock::Role {
    leadership
        .next_within(common::HANG)
        .unwrap()
        .unwrap_or_else(|| panic!("{who}: no role change within {:?}", common::HANG))
}

fn leading_epoch(role: &relock::Role) -> u64 {
    match role {
        relock::Role::Leading { epoch } => *epoch,
        other => panic!("expected Leading, got {other:?}"),
    }
}

/// Work that leads until its term ends (or its loop stops), checking between steps.
fn until_lost(term: &relock::blocking::TermContext) {
    while !term.wait_lost(Duration::from_secs(1)) {}
}

#[test]
fn campaign_for_times_out_while_another_leads_and_leads_once_it_resigns() {
    let server = RedisServer::start();
    let (first, second) = (connect(&server), connect(&server));
    let name = common::prefix("blocking_campaign_for");
    let term = first.election(&name).campaign_with("first").unwrap();
    let leader = second.election(&name).leader().unwrap().unwrap();
    assert_eq!(
        (leader.epoch, leader.metadata.as_deref()),
        (term.epoch(), Some("first")),
        "campaign_with writes the metadata with the election"
    );

    let started = Instant::now();
    let timed_out = second
        .election(&name)
        .campaign_for(Duration::from_millis(300))
        .unwrap();
    assert!(timed_out.is_none(), "another leads");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(second.stats().waiters, 0, "no candidate left behind");
    let still = second.election(&name).leader().unwrap().unwrap();
    assert_eq!(
        (still.epoch, still.party.client_id.as_str()),
        (term.epoch(), first.id())
    );

    let follower = std::thread::spawn({
        let election = second.election(&name).with_metadata("second");
        move || election.campaign_for(common::HANG).unwrap()
    });
    assert!(wait_until(Duration::from_secs(5), || second
        .stats()
        .waiters
        == 1));
    let epoch = term.epoch();
    term.resign().unwrap();
    let next = follower
        .join()
        .unwrap()
        .expect("it leads once the leader resigns");
    assert!(next.epoch() > epoch);
    let leader = first.election(&name).leader().unwrap().unwrap();
    assert_eq!(
        (
            leader.epoch,
            leader.party.client_id.as_str(),
            leader.metadata.as_deref()
        ),
        (next.epoch(), second.id(), Some("second")),
        "with_metadata's candidate leads with its metadata"
    );
    next.resign().unwrap();
    assert!(first.election(&name).leader().unwrap().is_none());
}

#[test]
fn force_vacate_ends_anothers_term() {
    let server = RedisServer::start();
    let (leader, operator) = (connect(&server), connect(&server));
    let name = common::prefix("blocking_force_vacate");
    let term = leader.election(&name).campaign().unwrap();
    let epoch = term.epoch();
    let mut changes = operator.election(&name).watch();
    assert!(matches!(
        changes.next().unwrap().unwrap(),
        relock::Change::Elected { epoch: e, .. } if e == epoch
    ));

    assert!(operator.election(&name).force_vacate().unwrap());
    assert!(operator.election(&name).leader().unwrap().is_none());
    assert!(!common::raw_exists(
        &server,
        &format!("relock_election:{name}")
    ));
    let vacant = changes.next_within(common::HANG).unwrap();
    assert!(
        matches!(
            vacant,
            Some(relock::Change::Vacant { epoch: e, reason: relock::Vacancy::Forced, .. }) if e == epoch
        ),
        "{vacant:?}"
    );
    // The leader is not told: its renewals find the term gone.
    assert!(
        wait_until(Duration::from_secs(10), || term.is_lost()),
        "the leader's renewals notice the term is over"
    );
    assert!(
        !operator.election(&name).force_vacate().unwrap(),
        "nothing left to end"
    );
    let next = operator
        .election(&name)
        .try_campaign()
        .unwrap()
        .expect("the election is vacant");
    assert!(next.epoch() > epoch);
    assert!(term.resign().unwrap_err().is_lease_lost());
    next.resign().unwrap();
}

#[test]
fn a_blocking_leader_loop_leads_again_after_its_work_returns() {
    let server = RedisServer::start();
    let client = connect(&server);
    let name = common::prefix("blocking_lead_again");
    let works = Arc::new(AtomicUsize::new(0));
    let (proclaimed, proclamations) = std::sync::mpsc::channel();
    let mut leadership = client
        .election(&name)
        .lead({
            let works = works.clone();
            move |term| {
                if works.fetch_add(1, Ordering::SeqCst) == 0 {
                    // A plain thread: the blocking API works here. Then the work returns.
                    proclaimed.send(term.proclaim("first work")).unwrap();
                    return;
                }
                until_lost(term);
            }
        })
        .unwrap();
    let e1 = leading_epoch(&next_role(&mut leadership, "loop"));
    assert!(proclamations.recv_timeout(common::HANG).unwrap().is_ok());
    assert_eq!(
        next_role(&mut leadership, "loop"),
        relock::Role::Lost {
            epoch: e1,
            reason: relock::TermEnd::WorkDone
        }
    );
    let e2 = leading_epoch(&next_role(&mut leadership, "loop"));
    assert!(e2 > e1, "{e2} after {e1}");
    assert!(
        wait_until(Duration::from_secs(5), || works.load(Ordering::SeqCst) == 2),
        "the work runs again in the new term"
    );
    let leader = client.election(&name).leader().unwrap().unwrap();
    assert_eq!(
        (leader.epoch, leader.party.client_id.as_str()),
        (e2, client.id())
    );
    assert!(!leadership.is_finished());

    leadership.stop();
    assert!(leadership.is_finished());
    assert_eq!(
        leadership.next(),
        Some(relock::Role::Lost {
            epoch: e2,
            reason: relock::TermEnd::Stopped
        })
    );
    assert_eq!(leadership.next(), None, "the loop has ended");
    assert!(
        client.election(&name).leader().unwrap().is_none(),
        "stopped, the loop gave its term back"
    );
}

#[test]
fn when_a_blocking_leaders_loop_is_stopped_the_other_leads() {
    let server = RedisServer::start();
    let (first, second) = (connect(&server), connect(&server));
    let name = common::prefix("blocking_two_loops");
    let mut one = first.election(&name).lead(until_lost).unwrap();
    let e1 = leading_epoch(&next_role(&mut one, "first"));
    let mut two = second.election(&name).lead(until_lost).unwrap();
    match next_role(&mut two, "second") {
        relock::Role::Following { epoch, leader } => {
            assert_eq!(epoch, e1);
            assert!(leader.field.starts_with(first.id()), "{leader:?}");
        }
        other => panic!("expected Following, got {other:?}"),
    }

    one.stop();
    assert_eq!(
        one.next(),
        Some(relock::Role::Lost {
            epoch: e1,
            reason: relock::TermEnd::Stopped
        })
    );
    assert_eq!(one.next(), None);
    let e2 = leading_epoch(&next_role(&mut two, "second"));
    assert!(e2 > e1);
    let leader = first.election(&name).leader().unwrap().unwrap();
    assert_eq!(
        (leader.epoch, leader.party.client_id.as_str()),
        (e2, second.id())
    );

    // Dropped, the loop stops in the background: its work returns and the term is given back.
    drop(two);
    assert!(
        wait_until(Duration::from_secs(10), || first
            .election(&name)
            .leader()
            .unwrap()
            .is_none()),
        "a dropped loop gives its term back"
    );
}

#[test]
fn a_work_that_outlives_its_term_delays_the_next_campaign() {
    let server = RedisServer::start();
    let client = connect(&server);
    let name = common::prefix("blocking_overrun");
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let returned = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let (contexts, context) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = std::sync::Mutex::new(released);
    let mut leadership = client
        .election(&name)
        .lead({
            let (inside, overlaps, returned) = (inside.clone(), overlaps.clone(), returned.clone());
            let mut first = true;
            move |term| {
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                contexts.send((term.clone(), Instant::now())).unwrap();
                if std::mem::take(&mut first) {
                    // Ignores the deadline: runs on until the test lets it go.
                    released.lock().unwrap().recv().unwrap();
                } else {
                    until_lost(term);
                }
                *returned.lock().unwrap() = Some(Instant::now());
                inside.fetch_sub(1, Ordering::SeqCst);
            }
        })
        .unwrap();
    let e1 = leading_epoch(&next_role(&mut leadership, "loop"));
    let (term, _) = context.recv_timeout(common::HANG).unwrap();
    assert_eq!(term.epoch(), e1);

    // The term's key goes; the watchdog's next renewal finds it gone.
    server.cmd(&["DEL", &format!("relock_election:{name}")]);
    assert!(
        wait_until(Duration::from_secs(10), || term.is_lost()),
        "the term is lost"
    );
    // The work runs on: the loop does not campaign, nobody leads.
    assert_eq!(
        leadership.next_within(Duration::from_millis(700)).unwrap(),
        None,
        "no role change while the work runs past its term"
    );
    assert!(client.election(&name).leader().unwrap().is_none());
    assert_eq!(client.stats().waiters, 0, "no campaign meanwhile");
    assert_eq!(inside.load(Ordering::SeqCst), 1);

    release.send(()).unwrap();
    assert_eq!(
        next_role(&mut leadership, "loop"),
        relock::Role::Lost {
            epoch: e1,
            reason: relock::TermEnd::LeaseLost
        }
    );
    let e2 = leading_epoch(&next_role(&mut leadership, "loop"));
    assert!(e2 > e1);
    let (second, began) = context.recv_timeout(common::HANG).unwrap();
    assert_eq!(second.epoch(), e2);
    let first_returned = returned.lock().unwrap().expect("the first work returned");
    assert!(began >= first_returned, "the next work began after it");
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "never two works at once"
    );
    let leader = client.election(&name).leader().unwrap().unwrap();
    assert_eq!(leader.epoch, e2);

    leadership.stop();
    assert!(second.is_lost(), "a stopped loop's work is told to return");
    assert_eq!(inside.load(Ordering::SeqCst), 0, "stop waited for the work");
}
