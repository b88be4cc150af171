//! An election across a failover whose replica missed the leader's last renewals.
//!
//! With `Config::with_replica_sync`, a term's local deadline (what `Term::lost()` and
//! `Term::run` go by) counts only from renewals a replica acknowledged. A primary + replica pair
//! is failed over by hand (`REPLICAOF NO ONE` on the replica) while the leader's client stays on
//! the old primary, which goes on confirming its renewals: none of them reaches the promoted
//! replica. A second candidate campaigning there must not lead before the first leader's local
//! deadline, and the first leader must learn that its term may be over.
//!
//! The same on Sentinel: the replica's link is cut (it can no longer sync) while the primary
//! goes on confirming the leader's renewals, then `SENTINEL FAILOVER` promotes that replica.

use crate::common;

use std::time::Duration;

use common::topology::{replication_info, role, ReplicaPair, Sentinels};
use common::{raw_pttl, RedisServer, HANG};
use tokio::time::{timeout, Instant};

/// The first leader's watchdog lease: renewed every third of it.
const LEASE: Duration = Duration::from_secs(2);
/// The first leader's replica sync timeout.
const SYNC: Duration = Duration::from_millis(300);

/// A leader whose client waits for a replica: a failover to a replica that lacks the renewals
/// the old primary confirmed after it detached never lets a second candidate lead while the
/// first still believes it leads. Past the promotion the first term is lost at its local
/// deadline (the last replicated renewal's send time plus the lease), no later than the second
/// candidate is elected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_elects_no_one_before_the_old_leaders_deadline() {
    let pair = ReplicaPair::start();
    pair.wait_in_sync(Duration::from_secs(10));
    let config = common::connect::config(&pair.primary().url(), LEASE, Duration::from_secs(2));
    let first = common::connect::connected(config.with_replica_sync(SYNC)).await;
    let name = common::prefix("failover-election");

    let term = timeout(HANG, first.election(name.as_str()).campaign())
        .await
        .expect("the first campaign hung")
        .unwrap();
    let lost = term.lost();
    let stopped = tokio::spawn(async move {
        lost.await;
        Instant::now()
    });

    // Renewals a replica acknowledged keep the term: past its lease it still leads.
    tokio::time::sleep(LEASE + LEASE / 4).await;
    assert!(
        !term.is_lost(),
        "replicated renewals did not keep the term past its lease"
    );

    // The failover. From here on the old primary confirms the first leader's renewals, but no
    // replica has them: the promoted one stopped following it.
    pair.promote_replica();
    let promoted_at = Instant::now();
    let second = common::client_at(&pair.replica().url(), Duration::from_secs(30)).await;
    let next = timeout(HANG, second.election(name.as_str()).campaign())
        .await
        .expect("the second campaign hung")
        .unwrap();
    let elected_at = Instant::now();
    // Read at once, against the clock: the first leader's local deadline must have passed.
    let first_lost = term.is_lost();
    let elected_after = elected_at - promoted_at;
    assert!(
        first_lost,
        "a second candidate leads ({elected_after:?} after the promotion) while the first still \
         believes it leads"
    );
    assert!(next.epoch() > term.epoch(), "the epoch did not grow");

    // The first's lost() completed: its work would have been stopped.
    let lost_at = common::within(HANG, stopped, "the first term's lost() never completed").await;
    eprintln!(
        "after the promotion: first term lost at {:?}, second elected at {elected_after:?}",
        lost_at.saturating_duration_since(promoted_at)
    );
    // Its last acknowledged renewal was sent before the promotion: its deadline came at most a
    // lease after it (with what the second's election took as slack for a busy machine).
    assert!(
        lost_at <= promoted_at + LEASE.max(elected_after) + Duration::from_secs(1),
        "the first term was lost only {:?} after the promotion",
        lost_at - promoted_at
    );

    next.resign().await.unwrap();
    drop(term);
    second.shutdown().await.unwrap();
    first.shutdown().await.unwrap();
}

/// Waits at most `within` for a renewal of `key` on `server`: its PTTL, read every 10 ms, rises
/// by more than a sixth of [`LEASE`] (half the watchdog's period) over the reading before.
/// Whether one came.
async fn renewal_on(server: &RedisServer, key: &str, within: Duration) -> bool {
    let mut before = raw_pttl(server, key);
    common::eventually(within, || {
        let pttl = raw_pttl(server, key);
        let rose = pttl > 0 && pttl - before > (LEASE / 6).as_millis() as i64;
        before = pttl;
        async move { rose }
    })
    .await
}

/// The scenario on Sentinel: a leader through the Sentinels, with replica sync, whose
/// replica stops receiving the primary's writes (its link cut, it cannot sync again) while the
/// primary goes on confirming the leader's renewals; then `SENTINEL FAILOVER` promotes that
/// replica. A second candidate, through the Sentinels, is elected there no earlier than the first
/// leader's local deadline: at that moment the first term already reads as lost, against the
/// clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_to_a_replica_that_missed_renewals_elects_no_one_before_the_deadline() {
    let started = Instant::now();
    let sentinels = Sentinels::start();
    let url = sentinels.url();
    let (old, promoted) = (sentinels.primary_port(), sentinels.replica().port());
    let (primary, replica) = (sentinels.server(old), sentinels.server(promoted));
    let config = common::connect::config(&url, LEASE, Duration::from_secs(2));
    let first = common::connect::connected(config.with_replica_sync(SYNC)).await;
    let name = common::prefix("sentinel-failover-election");
    let key = format!("relock_election:{name}");

    let term = timeout(HANG, first.election(name.as_str()).campaign())
        .await
        .expect("the first campaign hung")
        .unwrap();
    let lost = term.lost();
    let stopped = tokio::spawn(async move {
        lost.await;
        Instant::now()
    });

    // While the replica follows, the watchdog's renewals reach it.
    assert!(
        renewal_on(replica, &key, LEASE).await,
        "no renewal reached the replica (PTTL there {})",
        raw_pttl(replica, &key)
    );
    assert!(!term.is_lost(), "replicated renewals did not keep the term");

    // The replica's link is cut: from here on it misses every write of the primary, which goes
    // on confirming the leader's renewals. The leader's last acknowledged renewal was sent
    // before the cut is done, so its local deadline is at most a lease after that.
    tokio::task::block_in_place(|| sentinels.cut_replica_link());
    let cut_at = Instant::now();
    assert!(
        renewal_on(primary, &key, LEASE).await,
        "the primary confirmed no renewal after the replica's link was cut (PTTL {})",
        raw_pttl(primary, &key)
    );
    let (on_primary, on_replica) = (raw_pttl(primary, &key), raw_pttl(replica, &key));
    assert!(
        on_primary - on_replica > (LEASE / 6).as_millis() as i64,
        "the replica has the renewal the primary confirmed: PTTL {on_replica} ms there, \
         {on_primary} ms on the primary"
    );
    let link = replication_info(promoted).expect("the replica answers INFO");
    assert_eq!(
        link.get("master_link_status").map(String::as_str),
        Some("down"),
        "the replica's link came back: {link:?}"
    );
    eprintln!(
        "{:?} after the cut: PTTL {on_primary} ms on the primary, {on_replica} ms on the \
         replica, whose link is down since {:?} s",
        cut_at.elapsed(),
        link.get("master_link_down_since_seconds")
    );

    // The failover, to the replica that missed the renewals. The old primary stays a primary
    // with the leader's client on it, confirming its renewals until the term is lost (the
    // Sentinels demote it only some 10 s later): demoting it now would move the leader's
    // renewals to the new primary.
    let failover_at = Instant::now();
    let new = tokio::task::block_in_place(|| sentinels.failover());
    let failed_over = failover_at.elapsed();
    assert_eq!(new, promoted, "the Sentinels promoted another server");
    assert_eq!(
        role(old).as_deref(),
        Some("master"),
        "the old primary was demoted"
    );

    let second =
        common::connect::connected(common::connect::config(&url, LEASE, Duration::from_secs(2)))
            .await;
    let next = timeout(HANG, second.election(name.as_str()).campaign())
        .await
        .expect("the second campaign hung")
        .unwrap();
    let elected_at = Instant::now();
    // Read at once, against the clock: the first leader's local deadline must have passed.
    let first_lost = term.is_lost();
    let elected_after = elected_at - cut_at;
    assert!(
        first_lost,
        "a second candidate leads ({elected_after:?} after the cut, the failover took \
         {failed_over:?}) while the first still believes it leads"
    );
    assert!(next.epoch() > term.epoch(), "the epoch did not grow");

    // The first's lost() completed: its work would have been stopped.
    let lost_at = common::within(HANG, stopped, "the first term's lost() never completed").await;
    eprintln!(
        "after the cut: first term lost at {:?}, failover done at {:?} (took {failed_over:?}), \
         second elected at {elected_after:?}",
        lost_at.saturating_duration_since(cut_at),
        failover_at.saturating_duration_since(cut_at) + failed_over,
    );
    // No acknowledged renewal was sent after the cut: the deadline came at most a lease after
    // it (with a second for a busy machine's timers), and lost() completed at it.
    assert!(
        lost_at <= cut_at + LEASE + Duration::from_secs(1),
        "the first term was lost only {:?} after the cut",
        lost_at - cut_at
    );

    next.resign().await.unwrap();
    drop(term);
    second.shutdown().await.unwrap();
    first.shutdown().await.unwrap();
    eprintln!("whole test took {:?}", started.elapsed());
}
