//! An election's history and `watch()`: every change once, in order, in every process that
//! watches, through a killed subscriber connection; a lapsed term reported vacant; trimmed or
//! lost history reported as a gap; `proclaim` and `leader()`'s metadata; and cancellation of a
//! campaign at each of its awaits.

use crate::common;

use std::time::Duration;

use futures::StreamExt;
use relock::{Change, Client, Election, Vacancy, Watch};

use common::{RedisServer, HANG};

/// The election's key on Redis, as the docs name it.
pub(super) fn key(name: &str) -> String {
    format!("relock_election:{name}")
}

/// The election's history stream on Redis.
pub(super) fn history(name: &str) -> String {
    format!("relock_election_log:{{relock_election:{name}}}")
}

/// The next change of `watch`, which must come within [`HANG`].
pub(super) async fn next(watch: &mut Watch) -> Change {
    tokio::time::timeout(HANG, watch.next())
        .await
        .expect("no change came")
        .expect("the watch ended")
        .expect("the watch failed")
}

/// `n` changes of `watch`.
async fn take(watch: &mut Watch, n: usize) -> Vec<Change> {
    let mut changes = Vec::new();
    for _ in 0..n {
        changes.push(next(watch).await);
    }
    changes
}

/// A change in one line: its place, what it is and its epoch (for a gap: where it ends).
pub(super) fn line(change: &Change) -> String {
    match change {
        Change::Elected { seq, epoch, .. } => format!("{seq} elected {epoch}"),
        Change::Proclaimed {
            seq,
            epoch,
            metadata,
            ..
        } => format!("{seq} proclaimed {epoch} {metadata}"),
        Change::Vacant {
            seq, epoch, reason, ..
        } => format!("{seq} vacant {epoch} {reason:?}"),
        Change::Gap { after, next } => format!("gap {after} {next}"),
        other => format!("{other:?}"),
    }
}

/// Whether `watch` stays quiet for `window`: nothing more came.
async fn quiet(watch: &mut Watch, window: Duration) -> bool {
    tokio::time::timeout(window, watch.next()).await.is_err()
}

#[tokio::test]
async fn every_change_is_watched_once_in_order_and_leader_shows_the_term() {
    let (_server, first, second, name) =
        common::setup_two("election_watch", Duration::from_secs(30)).await;
    let election = first.election(&name);
    let mut early = election.watch();
    // An election that never had a leader has nothing to report yet. A watch waits on the
    // election's channel, and counts among its client's waiters.
    assert!(quiet(&mut early, Duration::from_millis(200)).await);
    assert_eq!(first.stats().waiters, 1);

    let term = election.campaign().await.unwrap();
    let e1 = term.epoch();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!((leader.epoch, leader.metadata.as_deref()), (e1, None));
    let since = leader.since.expect("the term's start");
    assert!(since.elapsed().unwrap_or_default() < HANG, "{since:?}");
    let seq = term.proclaim("10.0.0.1:8080").await.unwrap();
    assert_eq!(seq, 2);
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.metadata.as_deref(), Some("10.0.0.1:8080"));
    assert_eq!(
        leader.since,
        Some(since),
        "a proclaim keeps the term's start"
    );

    // A watch started now begins with the newest change.
    let mut late = second.election(&name).watch();
    assert_eq!(
        line(&next(&mut late).await),
        format!("2 proclaimed {e1} 10.0.0.1:8080")
    );

    term.resign().await.unwrap();
    let term = second.election(&name).campaign().await.unwrap();
    let e2 = term.epoch();
    assert!(e2 > e1);
    assert!(term.proclaim("other").await.is_ok());
    drop(term);

    let changes = take(&mut early, 6).await;
    let lines: Vec<String> = changes.iter().map(line).collect();
    assert_eq!(
        lines,
        [
            format!("1 elected {e1}"),
            format!("2 proclaimed {e1} 10.0.0.1:8080"),
            format!("3 vacant {e1} Resigned"),
            format!("4 elected {e2}"),
            format!("5 proclaimed {e2} other"),
            format!("6 vacant {e2} Resigned"),
        ]
    );
    let Change::Elected { leader, .. } = &changes[0] else {
        unreachable!()
    };
    assert!(leader.field.starts_with(first.id()), "{leader:?}");
    assert_eq!(leader.pid, std::process::id());
    let Change::Elected { leader, .. } = &changes[3] else {
        unreachable!()
    };
    assert!(leader.field.starts_with(second.id()), "{leader:?}");

    let rest: Vec<String> = take(&mut late, 4).await.iter().map(line).collect();
    assert_eq!(rest[..], lines[2..]);
    assert!(quiet(&mut early, Duration::from_millis(200)).await);
    assert!(quiet(&mut late, Duration::from_millis(10)).await);

    // Resumed from a place kept elsewhere: what came after it.
    let mut resumed = first.election(&name).watch_after(4);
    let after: Vec<String> = take(&mut resumed, 2).await.iter().map(line).collect();
    assert_eq!(after[..], lines[4..]);
    assert_eq!(election.leader().await.unwrap(), None);
    drop((early, resumed));
    assert_eq!(first.stats().waiters, 0, "a dropped watch leaves no waiter");
}

#[tokio::test]
async fn a_term_whose_key_is_deleted_is_reported_lapsed_at_its_lease_end_once() {
    let lease = Duration::from_millis(600);
    let (server, client, name) = common::setup("election_lapse", lease).await;
    let election = client.election(&name);
    let term = election.campaign().await.unwrap();
    let mut watch = election.watch();
    assert_eq!(
        line(&next(&mut watch).await),
        format!("1 elected {}", term.epoch())
    );
    // The term ends without a resign: nothing on Redis says so but the missing key, which a
    // watch reads when the lease would have ended.
    server.cmd(&["DEL", &key(&name)]);
    let lapsed = next(&mut watch).await;
    assert_eq!(line(&lapsed), format!("2 vacant {} Lapsed", term.epoch()));
    assert!(matches!(
        lapsed,
        Change::Vacant {
            reason: Vacancy::Lapsed,
            ..
        }
    ));
    // Read again by `leader()` and by the next campaign: written once.
    assert_eq!(election.leader().await.unwrap(), None);
    drop(term);
    let next_term = election.campaign().await.unwrap();
    assert_eq!(
        line(&next(&mut watch).await),
        format!("3 elected {}", next_term.epoch())
    );
    assert_eq!(common::resp_int(&server.cmd(&["XLEN", &history(&name)])), 3);
}

#[tokio::test]
async fn a_trimmed_or_lost_history_shows_as_a_gap() {
    let (server, client, name) = common::setup("election_gap", Duration::from_secs(30)).await;
    let election = client.election(&name);
    for _ in 0..2 {
        let term = election.campaign().await.unwrap();
        term.proclaim("x").await.unwrap();
        term.resign().await.unwrap();
    }
    // Six changes; history keeps the last two.
    server.cmd(&["XTRIM", &history(&name), "MAXLEN", "2"]);
    let mut resumed = election.watch_after(1);
    let lines: Vec<String> = take(&mut resumed, 3).await.iter().map(line).collect();
    assert_eq!(lines[0], "gap 1 5");
    assert!(lines[1].starts_with("5 proclaimed"), "{lines:?}");
    assert!(lines[2].starts_with("6 vacant"), "{lines:?}");

    // History lost behind a watch (a server that lost its data): the new history follows a
    // gap, and the epoch still grows, as its counter was kept.
    server.cmd(&["DEL", &history(&name)]);
    let term = election.campaign().await.unwrap();
    let lines: Vec<String> = take(&mut resumed, 2).await.iter().map(line).collect();
    assert_eq!(
        lines,
        ["gap 6 1".to_owned(), format!("1 elected {}", term.epoch())]
    );
    assert_eq!(term.epoch(), 3);
}

/// A term ended by `force_vacate`, with a lease far longer than the test may wait: the watch
/// reports it `Forced` at once (not at the lease's end), and the next candidate leads without
/// waiting for the lease or the lock-delay.
#[tokio::test]
async fn a_forced_vacancy_is_reported_at_once_and_frees_the_election() {
    let lease = Duration::from_secs(300);
    assert!(lease > HANG * 2);
    let (_server, first, second, name) = common::setup_two("election_force", lease).await;
    let delay = Duration::from_secs(60);
    let election = first.election(&name).with_lock_delay(delay).unwrap();
    let term = election.campaign().await.unwrap();
    let mut watch = second.election(&name).watch();
    assert!(line(&next(&mut watch).await).starts_with("1 elected"));
    assert!(second.election(&name).force_vacate().await.unwrap());
    let forced = next(&mut watch).await;
    assert!(
        matches!(
            forced,
            Change::Vacant {
                seq: 2,
                reason: Vacancy::Forced,
                ..
            }
        ),
        "{forced:?}"
    );
    let candidate = second.election(&name).with_lock_delay(delay).unwrap();
    let next_term = candidate.try_campaign().await.unwrap();
    let next_term = next_term.expect("the forced election stayed closed");
    next_term.resign().await.unwrap();
    // Nothing to end now: no term, no lock-delay.
    assert!(!candidate.force_vacate().await.unwrap());
    drop(term);
}

#[tokio::test]
async fn proclaim_after_the_term_ended_is_refused() {
    let (server, client, name) = common::setup("election_proclaim", Duration::from_secs(30)).await;
    let election = client.election(&name);
    let term = election.campaign().await.unwrap();
    server.cmd(&["DEL", &key(&name)]);
    assert!(matches!(
        term.proclaim("late").await,
        Err(relock::Error::LeaseLost { .. })
    ));
    assert_eq!(election.leader().await.unwrap(), None);
    // The refused proclaim wrote nothing: the history ends with the lapse `leader()` found.
    let mut watch = election.watch();
    assert!(line(&next(&mut watch).await).starts_with("2 vacant"));
}

/// A campaign dropped after each number of polls, while another candidate leads and while the
/// election is vacant: each leaves no candidate, claim or term behind, and the election goes to
/// the next candidate as if it had never been.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_cancelled_at_any_await_leaves_nothing_behind() {
    let (server, first, second, name) =
        common::setup_two("election_cancel_each", Duration::from_secs(30)).await;
    let claim = format!("relock_claim:{{relock_election:{name}}}");
    for polls in 0..24 {
        let leading = polls % 2 == 0;
        let term = if leading {
            Some(first.election(&name).campaign().await.unwrap())
        } else {
            None
        };
        let election = second.election(&name);
        let mut campaign = Box::pin(election.campaign());
        for _ in 0..polls / 2 {
            if futures::poll!(&mut campaign).is_ready() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(campaign);
        let settled = common::eventually(HANG, || async {
            let stats = second.stats();
            stats.waiters == 0 && stats.in_flight == 0 && stats.holds == 0
        })
        .await;
        assert!(settled, "after {polls} polls: {:?}", second.stats());
        if let Some(term) = term {
            term.resign().await.unwrap();
        }
        let gone = common::eventually(HANG, || async {
            common::resp_int(&server.cmd(&["EXISTS", &key(&name), &claim])) == 0
        })
        .await;
        assert!(gone, "after {polls} polls a term or claim stayed");
        let term = first.election(&name).try_campaign().await.unwrap();
        assert!(
            term.is_some(),
            "after {polls} polls the election was not free"
        );
        term.unwrap().resign().await.unwrap();
    }
}

/// What a watcher in a child process says for each change: its line (see [`line`]).
const SAW: &str = "SAW ";

/// In a child: watches `ELECTION` on `REDIS_URL` and says each change.
#[tokio::test]
#[ignore = "a child process of every_process_watching_sees_the_same_changes"]
async fn election_child_watcher() {
    let Some(env) = common::child::env() else {
        return;
    };
    let config = common::config(&env.text("REDIS_URL")).with_watchdog_timeout(REREAD);
    let client = Client::new(config).await.unwrap();
    let mut watch = client.election(env.text("ELECTION")).watch();
    while let Some(change) = watch.next().await {
        common::child::say(format!("{SAW}{}", line(&change.unwrap())));
    }
}

/// The watchdog timeout of [`every_process_watching_sees_the_same_changes`]'s clients: a watch
/// that missed a message reads again only when the leader's lease would end (up to this long)
/// or, nobody leading, after this long.
const REREAD: Duration = Duration::from_secs(60);

/// Three processes watch one election while terms come and go, and every subscriber
/// connection is killed in the middle (the changes made while they reconnect included): each
/// sees the same changes, once each, in order, within a third of the time a watch takes to read
/// again by itself: only a watch that reads again on the reconnect passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_watching_sees_the_same_changes() {
    let within = REREAD / 3;
    let server = RedisServer::start();
    let name = common::prefix("election_watch_3");
    let client = common::client(&server, REREAD).await;
    let election = client.election(&name);
    let term = election.campaign().await.unwrap();
    let mut own = election.watch();
    let first = line(&next(&mut own).await);
    assert_eq!(first, format!("1 elected {}", term.epoch()));
    let env = [("REDIS_URL", server.url()), ("ELECTION", name.clone())];
    let path = concat!(module_path!(), "::election_child_watcher");
    let children = [
        common::child::Child::spawn(path, &env),
        common::child::Child::spawn(path, &env),
    ];
    for child in &children {
        child.said(SAW, HANG).await;
    }

    term.proclaim("a").await.unwrap();
    let killed = common::resp_int(&server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]));
    assert!(killed >= 3, "every watcher's subscriber: {killed}");
    term.resign().await.unwrap();
    let other = common::client(&server, REREAD).await;
    let term = other.election(&name).campaign().await.unwrap();
    term.proclaim("b").await.unwrap();
    term.resign().await.unwrap();

    let mut seen = vec![first];
    let rest = tokio::time::timeout(within, take(&mut own, 5)).await;
    seen.extend(rest.expect("the watch missed the changes").iter().map(line));
    assert_eq!(seen.len(), 6);
    for (i, line) in seen.iter().enumerate() {
        assert!(line.starts_with(&format!("{} ", i + 1)), "{seen:?}");
    }
    for child in &children {
        let all = common::eventually(within, || async { child.reports(SAW).len() >= 6 }).await;
        assert!(all, "a child missed changes: {:?}", child.reports(SAW));
        assert_eq!(child.reports(SAW), seen, "a child saw another history");
    }
    assert!(quiet(&mut own, Duration::from_millis(300)).await);
    for child in &children {
        assert_eq!(child.reports(SAW).len(), 6, "a change came twice");
    }
}

/// Watching an election with a name or key that cannot be watched fails with a typed error.
#[tokio::test]
async fn a_bad_election_cannot_be_watched() {
    let (server, client, name) = common::setup("election_watch_bad", Duration::from_secs(30)).await;
    let mut empty = client.election("").watch();
    assert!(matches!(
        empty.next().await,
        Some(Err(relock::Error::InvalidArgument { .. }))
    ));
    assert!(empty.next().await.is_none());
    server.cmd(&["SET", &history(&name), "not a stream"]);
    let election: Election = client.election(&name);
    let mut watch = election.watch();
    assert!(matches!(
        watch.next().await,
        Some(Err(relock::Error::WrongType { .. }))
    ));
    assert!(matches!(
        election.try_campaign().await,
        Err(relock::Error::WrongType { .. })
    ));
}

/// A watch waiting for the next change when its client shuts down ends at once: `Closed`, then
/// nothing more (not after the leader's lease, which the watch would otherwise wait out).
#[tokio::test]
async fn a_watch_ends_when_its_client_shuts_down() {
    let lease = Duration::from_secs(300);
    assert!(lease > HANG * 2);
    let (_server, leader, watcher, name) = common::setup_two("election_watch_end", lease).await;
    let _term = leader.election(&name).campaign().await.unwrap();
    let mut watch = watcher.election(&name).watch();
    assert!(line(&next(&mut watch).await).starts_with("1 elected"));
    let waiting = tokio::spawn(async move {
        let end = watch.next().await;
        (end, watch.next().await)
    });
    common::until_waiters(&watcher, 1).await;
    watcher.shutdown().await.unwrap();
    let (end, after) = common::within(HANG, waiting, "the watch never ended").await;
    assert!(matches!(end, Some(Err(relock::Error::Closed))), "{end:?}");
    assert!(after.is_none());
}

/// History keeps about the last 1,000 changes: trimmed as it grows (by whole stream nodes, so a
/// little more may stay), its newest change always kept.
#[tokio::test]
async fn history_keeps_about_the_last_thousand_changes() {
    let (server, client, name) =
        common::setup("election_history_len", Duration::from_secs(30)).await;
    let election = client.election(&name);
    let term = election.campaign().await.unwrap();
    let mut last = 0;
    for i in 0..1_300 {
        last = term.proclaim(i.to_string()).await.unwrap();
    }
    assert_eq!(last, 1_301);
    let kept = common::resp_int(&server.cmd(&["XLEN", &history(&name)]));
    assert!(
        (1_000..1_301).contains(&kept),
        "history kept {kept} changes"
    );
    let mut watch = election.watch();
    assert_eq!(
        line(&next(&mut watch).await),
        format!("1301 proclaimed {} 1299", term.epoch())
    );
}
