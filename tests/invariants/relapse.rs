//! An owner whose hold lapsed locally (its process stalled past the lease) while Redis still had
//! it (a renewal that ran, its reply never heard), and who then took the lock again: Redis counts
//! a re-entry, the client a new hold, and the lost guard sends nothing on unlock. The owner's
//! last unlock must still free the lock, whatever count Redis has, and wake its waiters as any
//! release does. The model checker found this schedule (`docs/model.md`, "What the models found
//! in relock"); checked here on every lock type.

use crate::common;

use std::time::Duration;

use super::family::{lock_name, served_promptly, spawn_waiter, CMD, LONG};
use common::family::{connect, Family};
use common::RedisServer;
use tokio::time::Instant;

/// The watchdog timeout of the owner: its process stalls for twice it.
const WATCHDOG: Duration = Duration::from_millis(900);

/// Sets the TTL of lock `name`, and of its readers' timeout keys, to `ms`: what a renewal the
/// client sent but never heard back from leaves on Redis.
const LATE_RENEWAL: &str = "local n = redis.call('pexpire', KEYS[1], ARGV[2]) \
     for _, key in ipairs(redis.call('keys', ARGV[1])) do \
         n = n + redis.call('pexpire', key, ARGV[2]) end \
     return n";

macro_rules! per_type {
    ($($test:ident => $family:ident),* $(,)?) => {$(
        /// One thread: blocking it stalls the owner's process, watchdog and all.
        #[tokio::test(flavor = "current_thread")]
        async fn $test() {
            the_last_unlock_after_a_re_entry_of_a_lost_hold_frees_the_lock(Family::$family).await;
        }
    )*};
}

per_type!(lock => Lock, fair => Fair, spin => Spin, fenced => Fenced, write => Write, read => Read);

async fn the_last_unlock_after_a_re_entry_of_a_lost_hold_frees_the_lock(family: Family) {
    let server = RedisServer::start();
    let client = connect(&server.url(), WATCHDOG, CMD).await;
    let rival = connect(&server.url(), LONG, CMD).await;
    let name = lock_name(family, "relapse");
    let lock = family.lock(&client, &name);
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

    // The owner takes the lock again: a re-entry on Redis, a new hold for the client.
    let again = lock.lock().await.unwrap();
    assert!(!again.is_lost());
    assert_eq!(family.holds(&server, &name, &field), 2, "not a re-entry");
    let released = Instant::now();
    again.unlock().await.unwrap();
    assert_eq!(
        family.holds(&server, &name, &field),
        0,
        "the owner's last unlock left a hold behind"
    );
    let taken = served_promptly(family, waiter, released, "after the owner's last unlock").await;
    let rival_field = family.rival().field_of(&rival, &taken);
    assert_eq!(family.rival().holds(&server, &name, &rival_field), 1);

    // The lost guard releases nothing: not the rival's hold, not a hold of its owner's.
    let error = lost.unlock().await.unwrap_err();
    assert!(error.is_lease_lost(), "{error}");
    assert_eq!(family.rival().holds(&server, &name, &rival_field), 1);
    taken.unlock().await.unwrap();
    family
        .assert_no_leaks(&server, &[&client, &rival], &[&name])
        .await;
}
