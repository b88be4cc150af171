//! An owner whose hold lapsed locally (its process stalled past the lease) while Redis still had
//! it (a renewal that ran, its reply never heard), and who then takes the lock again. Before,
//! its acquire re-entered the lost hold on Redis (count 2) while the client counted one new hold
//! and the lost guard sent nothing on unlock, so the owner's last unlock left a hold that lapsed
//! later with no wake-up; the model checker found that schedule (`docs/model.md`, "What the
//! models found in relock"). Now the owner drops its lapsed holds on Redis before it acquires
//! again (which wakes the waiters, who go first), so it never re-enters them, and its next
//! acquire never takes the stale hold for a new one when the acquire's request is lost (the
//! read-back after it finds only what the acquire took). Checked on every lock type.

use crate::common;

use std::time::Duration;

use super::family::{lock_name, served_promptly, spawn_waiter, CMD, LONG};
use common::family::{connect, AnyGuard, Family};
use common::proxy::{Mode, Proxy};
use common::{raw_pttl, RedisServer};
use tokio::time::Instant;

/// The watchdog timeout of the owner: its process stalls for twice it.
const WATCHDOG: Duration = Duration::from_millis(900);

/// Sets the TTL of lock `name`, and of its readers' timeout keys, to `ms`: what a renewal the
/// client sent but never heard back from leaves on Redis.
const LATE_RENEWAL: &str = "local n = redis.call('pexpire', KEYS[1], ARGV[2]) \
     for _, key in ipairs(redis.call('keys', ARGV[1])) do \
         n = n + redis.call('pexpire', key, ARGV[2]) end \
     return n";

/// Makes a module `$module` with one test per lock type of `$invariant(family)`, each on a
/// runtime of one thread: blocking it stalls the owner's process, watchdog and all.
macro_rules! per_type {
    ($module:ident: $invariant:ident) => {
        mod $module {
            use super::Family;

            per_type!(@test $invariant, lock => Lock, fair => Fair, spin => Spin, fenced => Fenced,
                write => Write, read => Read);
        }
    };
    (@test $invariant:ident, $($test:ident => $family:ident),*) => {$(
        #[tokio::test(flavor = "current_thread")]
        async fn $test() {
            super::$invariant(Family::$family).await;
        }
    )*};
}

per_type!(lock_again: locking_again_after_a_loss_drops_the_lost_hold_first);
per_type!(lost_request: an_acquire_after_a_loss_never_takes_the_lost_hold_for_its_own);
per_type!(failed_release: an_acquire_after_a_failed_release_never_takes_the_left_hold_for_its_own);

/// The owner's hold lapses locally while Redis keeps it a while longer; the owner takes the
/// lock again with a long fixed lease, and that acquire's request is lost (it never reaches
/// Redis). The read-back after it must not find the lapsed hold and take it for the new one (a
/// guard that believes in a lease Redis does not have): the hold the owner ends up with is one
/// an acquire took, with the lease it asked for.
async fn an_acquire_after_a_loss_never_takes_the_lost_hold_for_its_own(family: Family) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = connect(&proxy.url(), WATCHDOG, CMD).await;
    let name = lock_name(family, "relapse-lost-request");
    let lock = family.lock(&client, &name);
    let lost = lock.lock().await.unwrap();
    let field = family.field_of(&client, &lost);

    // A renewal ran on Redis (a lease of 4 s), then the process stalled past its lease.
    let timeouts = format!("{{{name}}}:*:rwlock_timeout:*");
    server.cmd(&["EVAL", LATE_RENEWAL, "1", &name, &timeouts, "4000"]);
    std::thread::sleep(WATCHDOG * 2);
    assert!(lost.is_lost());
    assert_eq!(
        family.holds(&server, &name, &field),
        1,
        "Redis lost the hold"
    );

    // The next acquire's request is lost; the owner tries again until it holds the lock.
    proxy.drop_next_request(&[&family.acquire_sha(), &name]);
    let mut tries = 0;
    let again = loop {
        tries += 1;
        assert!(tries <= 5, "the owner never got the lock back");
        if let Ok(guard) = lock.lock_with_lease(LONG).await {
            break guard;
        }
    };
    assert!(!again.is_lost());
    assert_eq!(family.holds(&server, &name, &field), 1);
    let pttl = raw_pttl(&server, &name);
    assert!(
        pttl > (LONG / 2).as_millis() as i64,
        "the owner's guard believes in a lease of {LONG:?}, Redis keeps the lock {pttl} ms"
    );
    again.unlock().await.unwrap();
    let error = lost.unlock().await.unwrap_err();
    assert!(error.is_lease_lost(), "{error}");
    family.assert_no_leaks(&server, &[&client], &[&name]).await;
}

/// An owner's `unlock()` whose every send goes unanswered (its replies lost, then its
/// connection cut) fails, and leaves its hold on Redis, to its lease, with no guard for it. The
/// owner's next acquire, with a far longer lease, has its request lost (it never reaches Redis):
/// the read-back after it used to find the hold left behind (the owner has no guard, so one hold
/// on Redis looked like the one just taken) and hand out a guard that believes in a lease Redis
/// does not have, the left hold lapsing at its own, shorter one while another owner could take
/// the lock. relock-model found the schedule. Now the owner drops the hold its failed release
/// may have left before it acquires again, and the read-back finds only what the acquire took.
async fn an_acquire_after_a_failed_release_never_takes_the_left_hold_for_its_own(family: Family) {
    /// The lease of the hold the failed release leaves: far shorter than the next acquire's.
    const LEFT: Duration = Duration::from_secs(4);
    /// Short, so that the release's three sends fail within a second or so.
    const QUICK: Duration = Duration::from_millis(250);
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = connect(&proxy.url(), WATCHDOG, QUICK).await;
    let name = lock_name(family, "relapse-failed-release");
    let lock = family.lock(&client, &name);
    let left = lock.lock_with_lease(LEFT).await.unwrap();
    let field = family.field_of(&client, &left);

    // Every send of the release goes unanswered: the unlock fails, the hold stays on Redis (by
    // EVALSHA, the release script was never loaded, so each send meets NOSCRIPT; as a
    // function, the library is flushed first, so each meets `Function not found`).
    if common::functions_in_use() {
        assert!(server.cmd(&["FUNCTION", "FLUSH"]).starts_with("+OK"));
    }
    proxy.set_mode(Mode::DropReplies);
    let error = left.unlock().await.unwrap_err();
    assert!(error.is_redis(), "{error}");
    proxy.set_mode(Mode::Pass);
    proxy.cut();
    assert_eq!(
        family.holds(&server, &name, &field),
        1,
        "the failed release left no hold"
    );

    // The next acquire's request is lost; the owner tries again until it holds the lock.
    proxy.drop_next_request(&[&family.acquire_sha(), &name]);
    let mut tries = 0;
    let again = loop {
        tries += 1;
        assert!(tries <= 5, "the owner never got the lock back");
        if let Ok(guard) = lock.lock_with_lease(LONG).await {
            break guard;
        }
    };
    assert!(!again.is_lost());
    assert_eq!(family.holds(&server, &name, &field), 1);
    let pttl = raw_pttl(&server, &name);
    assert!(
        pttl > (LONG / 2).as_millis() as i64,
        "the owner's guard believes in a lease of {LONG:?}, Redis keeps the lock {pttl} ms \
         (the hold the failed release left, taken {tries} tries in)"
    );
    assert!(tries > 1, "the acquire's request was not lost");
    again.unlock().await.unwrap();
    family.assert_no_leaks(&server, &[&client], &[&name]).await;
}

async fn locking_again_after_a_loss_drops_the_lost_hold_first(family: Family) {
    let server = RedisServer::start();
    let client = connect(&server.url(), WATCHDOG, CMD).await;
    let rival = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "relapse");
    // One owner for the test's task and the one it spawns.
    let lock = family.lock(&client, &name).owned_by(relock::Owner::new());
    let lost = lock.lock().await.unwrap();
    let field = family.field_of(&client, &lost);

    // A renewal ran on Redis, then the owner's process stalled past its lease.
    let timeouts = format!("{{{name}}}:*:rwlock_timeout:*");
    let late = LONG.as_millis().to_string();
    server.cmd(&["EVAL", LATE_RENEWAL, "1", &name, &timeouts, &late]);
    std::thread::sleep(WATCHDOG * 2);
    assert!(lost.is_lost(), "a hold past its local deadline");
    assert_eq!(
        family.holds(&server, &name, &field),
        1,
        "Redis lost the hold"
    );

    let watch = family.watch_waiters(&server);
    let waiter = spawn_waiter(family.contender(&rival, &name));
    assert!(
        watch.until_waiting(&server, &name, &[(&rival, 1)]).await,
        "the rival never waited"
    );

    // The owner locks again: it first drops the hold it lost (which wakes the rival), then
    // acquires. Whoever takes the lock first, it is a hold of its own: the owner never
    // re-enters the lost hold (count 2), and the other is served once it is unlocked.
    let mut again = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await.unwrap() }
    });
    let mut waiter = waiter;
    let rival_holds = |guard: &AnyGuard| {
        let rival_field = family.rival().field_of(&rival, guard);
        family.rival().holds(&server, &name, &rival_field)
    };
    let (again, taken) = tokio::select! {
        owner = &mut again => {
            let owner = owner.unwrap();
            assert_eq!(family.holds(&server, &name, &field), 1, "the owner re-entered its lost hold");
            assert!(!waiter.is_finished(), "the rival holds it beside the owner");
            let released = Instant::now();
            owner.unlock().await.unwrap();
            let taken = served_promptly(family, waiter, released, "after the owner's unlock").await;
            assert_eq!(rival_holds(&taken), 1);
            (None, taken)
        }
        rival_first = &mut waiter => {
            let (_, taken) = rival_first.unwrap();
            assert_eq!(rival_holds(&taken), 1);
            assert_eq!(family.holds(&server, &name, &field), 0, "the lost hold is still on Redis");
            (Some(again), taken)
        }
    };

    // The lost guard releases nothing: not the rival's hold.
    let error = lost.unlock().await.unwrap_err();
    assert!(error.is_lease_lost(), "{error}");
    assert_eq!(rival_holds(&taken), 1);
    taken.unlock().await.unwrap();
    if let Some(again) = again {
        let again = tokio::time::timeout(LONG, again).await.unwrap().unwrap();
        assert_eq!(family.holds(&server, &name, &field), 1);
        again.unlock().await.unwrap();
    }
    family
        .assert_no_leaks(&server, &[&client, &rival], &[&name])
        .await;
}
