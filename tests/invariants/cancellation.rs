//! Cancellation against a real server, beyond the family invariant (acquires of a held lock
//! dropped at random points, in `family.rs`): an acquire of a free lock dropped after its first
//! poll gives its hold back; a retried release with the same replay key counts once; a dropped
//! unlock still releases; work left in flight is counted until it ends.

use crate::common;

use std::time::Duration;

use common::{
    lock_channel, raw_command_calls, raw_exists, raw_hgetall, raw_numsub, raw_pttl, stays,
};
use fred::interfaces::LuaInterface;
use fred::types::Value;
use futures::FutureExt;
use relock::testing::scripts::LOCK_RELEASE as RELEASE_LUA;

/// Whether `client` has nothing left locally: no hold, no waiter, no channel, and nothing in
/// flight (a dropped acquire's script may still run on the server until its check ends).
fn idle(client: &relock::Client) -> bool {
    let stats = client.stats();
    stats.holds == 0
        && stats.renewing == 0
        && stats.waiters == 0
        && stats.channels == 0
        && stats.in_flight == 0
}

/// Waits (at most 10 s) until `client`'s stats pass `check`; else fails with `what` and the
/// stats.
async fn until_stats(
    client: &relock::Client,
    what: &str,
    check: impl Fn(&relock::ClientStats) -> bool,
) {
    let passed = common::eventually(Duration::from_secs(10), || async { check(&client.stats()) });
    assert!(passed.await, "{what}: {:?}", client.stats());
}

/// A fresh client takes the lock `name` at once, and its release deletes it.
async fn fresh_client_takes_and_frees(server: &common::RedisServer, name: &str) {
    let fresh = common::client(server, Duration::from_secs(3)).await;
    let taken = fresh.lock(name).try_lock().await.unwrap();
    taken
        .expect("nothing holds the lock")
        .unlock()
        .await
        .unwrap();
    assert!(!raw_exists(server, name));
}

/// The lock is free and the acquire future is dropped right after its first poll: the attempt it
/// sent takes the lock in the background, finds nobody to hand the guard to, and releases it.
/// A single-threaded runtime makes "pending after one poll" certain: the attempt cannot get its
/// reply before the test yields.
///
/// What is checked is behaviour, not timing: the owner's next acquire waits for that release (so
/// it finds no hold of the dropped attempt's left: a hold count of 1), and once it is released
/// the lock is gone and the client idle. Redis's own count of `HINCRBY` tells whether each
/// dropped attempt reached it (+1 to take, +1 to release) and that every hold it took was
/// released rather than left to expire (the count of an iteration is even).
#[tokio::test(flavor = "current_thread")]
async fn dropped_acquire_of_a_free_lock_is_released() {
    let (server, canceller, name) = common::setup("cancel-free", Duration::from_secs(3)).await;
    let channel = lock_channel(&name);
    let lock = canceller.lock(&name);
    let hincrby = || raw_command_calls(&server, "hincrby");
    let expired = || common::raw_expired_keys(&server);

    // A warm-up round trip (it also loads the scripts).
    let warm = lock.lock().await.unwrap();
    warm.unlock().await.unwrap();
    const DROPS: u64 = 20;
    let mut reached = 0;
    for i in 0..DROPS {
        let (before, expired_before) = (hincrby(), expired());
        let outcome = if i % 2 == 0 {
            lock.lock().now_or_never().map(|r| r.map(Some))
        } else {
            lock.try_lock_for(Duration::from_secs(30), None)
                .now_or_never()
        };
        assert!(
            outcome.is_none(),
            "an acquire cannot finish within its first poll"
        );
        // The same owner again, awaited: it waits for the release of the dropped attempt's hold
        // (if it took one), so the only hold it finds is its own. A hold left behind would be
        // re-entered here (count 2), or found still held by the release after it.
        let next = tokio::time::timeout(Duration::from_secs(10), lock.try_lock())
            .await
            .expect("the owner's next acquire hung")
            .unwrap()
            .expect("nothing else holds the lock");
        assert_eq!(
            lock.hold_count().await.unwrap(),
            1,
            "drop {i}: the dropped acquire's hold was still there for the owner's next acquire"
        );
        next.unlock().await.unwrap();
        assert!(
            common::eventually(Duration::from_secs(5), || async {
                idle(&canceller) && !raw_exists(&server, &name)
            })
            .await,
            "drop {i}: a dropped acquire left a hold: {:?}, lock {:?}",
            canceller.stats(),
            raw_hgetall(&server, &name)
        );
        // Every hold was released by its owner (deleted), none expired.
        assert_eq!(
            expired(),
            expired_before,
            "drop {i}: a hold was not released by its owner but expired"
        );
        // One HINCRBY for the awaited acquire (its release frees the lock with a DEL), one more
        // if the dropped attempt reached Redis (it does unless it was still waiting behind a
        // release of the owner's in flight when dropped), and one more if that attempt's
        // release ran beside the owner's next acquire (it keeps a hold for it).
        let calls = hincrby() - before;
        assert!((1..=3).contains(&calls), "drop {i}: {calls} HINCRBY");
        if calls >= 2 {
            reached += 1;
        }
    }
    // The drops must exercise what this test is about: attempts that reached Redis and were
    // released by nobody's guard. Nothing is in flight as each drop starts, so most do.
    println!("{reached} of {DROPS} dropped acquires reached Redis");
    assert!(
        reached >= DROPS / 2,
        "only {reached} of {DROPS} dropped acquires reached Redis"
    );
    assert_eq!(raw_numsub(&server, &channel), 0);

    fresh_client_takes_and_frees(&server, &name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_release_applies_once() {
    let server = common::RedisServer::start();
    // A long lease: the watchdog stays out of this test.
    let lease = Duration::from_secs(30);
    let client = common::client(&server, lease).await;
    let name = common::prefix("cancel-replay");
    let lock = client.lock(&name);

    let first = lock.lock().await.unwrap();
    let second = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    let field = format!("{}:{}", client.id(), first.owner().id());
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(field.clone(), "2".to_owned())]
    );

    let release = |latch: String| {
        let keys = vec![
            name.clone(),
            lock_channel(&name),
            latch,
            common::claim_key(&name),
        ];
        let args = vec![
            "0".to_owned(),
            lease.as_millis().to_string(),
            field.clone(),
            "PUBLISH".to_owned(),
            "10000".to_owned(),
            "10".to_owned(),
            // Sent again under the same request id, as relock retries: the replay key is read.
            "1".to_owned(),
        ];
        let redis = client.redis().clone();
        async move {
            redis
                .eval::<Value, _, _, _>(RELEASE_LUA, keys, args)
                .await
                .unwrap()
        }
    };

    let latch = format!("redisson_unlock_latch:{{{name}}}:retried-request");
    assert_eq!(release(latch.clone()).await, Value::Integer(0));
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(field.clone(), "1".to_owned())]
    );
    assert!(raw_exists(&server, &latch), "the replay key is written");
    // The same request again (a retry after a lost reply): replayed, not applied.
    assert_eq!(release(latch.clone()).await, Value::Integer(0));
    assert_eq!(
        raw_hgetall(&server, &name),
        vec![(field.clone(), "1".to_owned())],
        "a retried release counted twice"
    );
    assert!(raw_pttl(&server, &name) > 0);

    // A new request releases the last hold.
    let latch = format!("redisson_unlock_latch:{{{name}}}:next-request");
    assert_eq!(release(latch.clone()).await, Value::Integer(1));
    assert!(
        !raw_exists(&server, &name),
        "the last release deletes the lock"
    );
    // It writes no replay key: its retry finds the field gone and touches nothing (relock
    // holds the owner's acquires back until a release has its reply, so no new hold of the
    // field can be there for the retry to take).
    assert!(
        !raw_exists(&server, &latch),
        "the last release wrote a replay key"
    );
    assert_eq!(release(latch).await, Value::Null);
    assert!(!raw_exists(&server, &name));

    // The guards' holds were released behind their back.
    let err = second.unlock().await.unwrap_err();
    assert!(err.is_not_held(), "{err:?}");
    let err = first.unlock().await.unwrap_err();
    assert!(err.is_not_held(), "{err:?}");
    assert_eq!(client.stats().holds, 0);
}

/// Single-threaded, so the release task an unlock spawns cannot finish before the test yields.
#[tokio::test(flavor = "current_thread")]
async fn dropped_unlock_still_releases() {
    let (server, client, other, name) =
        common::setup_two("cancel-unlock", Duration::from_secs(3)).await;
    let lock = client.lock(&name);
    let field_count = |server: &common::RedisServer| raw_hgetall(server, &name);

    // Hold count 2: a dropped unlock releases exactly one hold.
    let first = lock.lock().await.unwrap();
    let second = lock.lock().await.unwrap();
    let field = format!("{}:{}", client.id(), first.owner().id());
    let outcome = second.unlock().now_or_never();
    assert!(
        outcome.is_none(),
        "an unlock cannot finish within its first poll: {outcome:?}"
    );
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            field_count(&server) == vec![(field.clone(), "1".to_owned())]
        })
        .await,
        "the dropped unlock released one hold: {:?}",
        field_count(&server)
    );
    assert!(other.lock(&name).try_lock().await.unwrap().is_none());

    // The last hold, dropped the same way: the lock is freed.
    assert!(first.unlock().now_or_never().is_none());
    assert!(
        common::until_gone(&server, &name, Duration::from_secs(5)).await,
        "the dropped unlock freed the lock: {:?}",
        field_count(&server)
    );
    assert_eq!(client.stats().holds, 0);

    // An unlock future dropped before it was ever polled releases too (through the guard).
    let guard = lock.lock().await.unwrap();
    drop(guard.unlock());
    assert!(
        common::until_gone(&server, &name, Duration::from_secs(5)).await,
        "an unpolled unlock freed the lock"
    );

    let taken = other.lock(&name).try_lock().await.unwrap();
    taken.expect("the lock is free").unlock().await.unwrap();
    assert!(idle(&client));
}

/// `stats().in_flight` counts an acquire whose future was dropped after its script went out
/// until the check that follows it ends, and a dropped guard's release until it ends: here the
/// server is frozen (`SIGSTOP`) so both stay in flight, and run once it resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_left_in_flight_is_counted_until_it_ends() {
    let server = common::RedisServer::start();
    let pid = server.pid().expect("the server's pid");
    // A command timeout the frozen moments below cannot reach, even on a busy machine.
    let config = common::config(&server.url()).with_command_timeout(Duration::from_secs(20));
    let client = relock::Client::new(config).await.unwrap();
    let held = common::prefix("in-flight-held");
    let taken = common::prefix("in-flight-taken");
    let guard = client.lock(&held).lock().await.unwrap();
    assert_eq!(client.stats().in_flight, 0);

    let frozen = common::faults::Frozen::stop(pid);
    drop(guard); // its release is sent and waits for the frozen server
    let lock = client.lock(&taken);
    let acquire = tokio::spawn(async move { lock.lock().await });
    until_stats(&client, "the release and the acquire in flight", |s| {
        s.in_flight == 2
    })
    .await;
    acquire.abort();
    assert!(acquire.await.unwrap_err().is_cancelled());
    // The acquire's script went out: the check that gives its hold back is in flight now.
    let stats = client.stats();
    assert_eq!((stats.in_flight, stats.holds), (2, 0), "{stats:?}");
    drop(frozen);

    until_stats(&client, "still in flight after the server resumed", |s| {
        s.in_flight == 0
    })
    .await;
    // Once nothing is in flight, both locks are free and stay so.
    assert!(
        stays(Duration::from_millis(300), || async {
            !raw_exists(&server, &held) && !raw_exists(&server, &taken)
        })
        .await,
        "held {:?}, taken {:?}",
        raw_hgetall(&server, &held),
        raw_hgetall(&server, &taken)
    );
    assert!(idle(&client));
}

/// A fair `lock()` that ends without the lock (here a `try_lock_for` that ran out while queued)
/// leaves the queue in the background, and its owner's next `lock()` must not be overtaken by that
/// leave. On a runtime of one thread the spawned leave ran only once the next `lock()` had sent
/// its first attempt, and took out the place that attempt had just kept: the owner waited out of
/// the queue (until its renewal, a third of the fair waiter timeout), and a newcomer that asked
/// after it found the lock free and the queue empty and went first. relock-model's fair lock
/// model found the schedule (`a_failed_lock_s_leave_after_the_next_lock_breaks_fifo`). Now the
/// owner's next acquire of the lock waits for its leave, as it waits for its releases in flight.
///
/// Client 2 hears the server late from its second `lock()` on, so the window between that
/// `lock()`'s first attempt and its second (after it subscribes) is wide: the test looks at the
/// queue once the `lock()` waits, then lets the holder release and the newcomer ask.
#[tokio::test(flavor = "current_thread")]
async fn a_fair_lock_given_up_leaves_the_queue_before_its_owners_next_lock() {
    use common::proxy::{Mode, Proxy};

    const DELAY: Duration = Duration::from_millis(250);
    let server = common::RedisServer::start();
    let name = common::prefix("cancel-fair-leave");
    // A place lost stays lost for the whole test: a waiter renews it every 20 s.
    let fair_client = |url: String| async move {
        let config = common::config(&url)
            .with_watchdog_timeout(Duration::from_secs(5))
            .with_command_timeout(Duration::from_secs(2))
            .with_fair_waiter_timeout(Duration::from_secs(60));
        relock::Client::new(config).await.unwrap()
    };
    let proxy = Proxy::start(server.port()).await;
    let holder = fair_client(server.url()).await;
    let newcomer = fair_client(server.url()).await;
    let client = fair_client(proxy.url()).await;
    // Loaded now, so that the leave is one round trip like the rest (the first run of a script
    // loads it on `NOSCRIPT`).
    server.cmd(&["SCRIPT", "LOAD", relock::testing::scripts::FAIR_LEAVE]);

    let owner = relock::Owner::new();
    let lock = client.fair_lock(&name).owned_by(owner.clone());
    let field = format!("{}:{}", client.id(), owner.id());
    let queue = || common::raw_lrange(&server, &common::fair_queue_key(&name));

    // Client 0 holds; client 2 queues behind it and gives up. Its leave is spawned as the
    // `try_lock_for` returns, and nothing has yielded since: it has not run yet.
    let held = holder.fair_lock(&name).lock().await.unwrap();
    let gave_up = lock.try_lock_for(Duration::from_millis(100), None).await;
    assert!(gave_up.unwrap().is_none(), "client 2 got a held lock");
    assert_eq!(
        queue(),
        std::slice::from_ref(&field),
        "client 2 did not queue"
    );

    // Client 2 asks again at once, and hears the server late from now on.
    proxy.set_mode(Mode::Delay(DELAY));
    let (got_tx, mut got_rx) = tokio::sync::mpsc::unbounded_channel();
    let again = {
        let got_tx = got_tx.clone();
        async move {
            let guard = lock.lock().await.unwrap();
            got_tx.send("client 2, which asked first").unwrap();
            guard.unlock().await.unwrap();
        }
    };
    let then = async {
        // Its `lock()` waits: its first attempt was answered, and it subscribes.
        common::until_waiters(&client, 1).await;
        let queued = queue();
        // Client 0 releases, and client 1, a newcomer, asks for the lock after client 2 did.
        held.unlock().await.unwrap();
        let newcomer = tokio::spawn({
            let lock = newcomer.fair_lock(&name);
            async move {
                let guard = lock.lock().await.unwrap();
                got_tx.send("client 1, the newcomer").unwrap();
                guard.unlock().await.unwrap();
            }
        });
        (queued, newcomer)
    };
    let both = tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(again, then) });
    let ((), (queued, newcomer)) = both.await.expect("client 2's lock() hung");
    common::within(Duration::from_secs(10), newcomer, "the newcomer hung").await;
    let order = [got_rx.recv().await.unwrap(), got_rx.recv().await.unwrap()];
    assert_eq!(
        order,
        ["client 2, which asked first", "client 1, the newcomer"],
        "the newcomer went first; the queue held {queued:?} once client 2's lock() waited"
    );
    assert_eq!(
        queued,
        [field],
        "client 2's place was not in the queue once its lock() waited"
    );
    proxy.set_mode(Mode::Pass);
    assert!(queue().is_empty());
}

/// Tasks that share an owner share one place in a fair lock's queue: one that gives up while
/// another still waits leaves the place to it. Its leave used to take the place out of the queue
/// anyway, so the owner's other task queued again behind a waiter that came after it, which then
/// went first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_that_gives_up_leaves_its_owners_place_to_the_owners_other_waiter() {
    let server = common::RedisServer::start();
    let name = common::prefix("cancel-fair-shared-place");
    // A place lost stays lost for the whole test: a waiter renews it every 20 s.
    let fair_client = || async {
        let config = common::config(&server.url())
            .with_watchdog_timeout(Duration::from_secs(5))
            .with_command_timeout(Duration::from_secs(2))
            .with_fair_waiter_timeout(Duration::from_secs(60));
        relock::Client::new(config).await.unwrap()
    };
    let (holder, newcomer, client) = (
        fair_client().await,
        fair_client().await,
        fair_client().await,
    );
    let owner = relock::Owner::new();
    let field = format!("{}:{}", client.id(), owner.id());
    let queue = || common::raw_lrange(&server, &common::fair_queue_key(&name));
    let until_queued = |waiters: usize| {
        common::eventually(Duration::from_secs(5), move || async move {
            queue().len() == waiters
        })
    };

    // Client 0 holds; the owner's first task queues, then a newcomer of client 1's behind it.
    let held = holder.fair_lock(&name).lock().await.unwrap();
    let (got_tx, mut got_rx) = tokio::sync::mpsc::unbounded_channel();
    let waiter = tokio::spawn({
        let (lock, got_tx) = (
            client.fair_lock(&name).owned_by(owner.clone()),
            got_tx.clone(),
        );
        async move {
            let guard = lock.lock().await.unwrap();
            got_tx.send("the owner's waiter").unwrap();
            guard.unlock().await.unwrap();
        }
    });
    assert!(until_queued(1).await, "the owner did not queue");
    let newcomer = tokio::spawn({
        let (lock, got_tx) = (newcomer.fair_lock(&name), got_tx.clone());
        async move {
            let guard = lock.lock().await.unwrap();
            got_tx.send("the newcomer").unwrap();
            guard.unlock().await.unwrap();
        }
    });
    until_queued(2).await;
    let queued = queue();
    assert!(
        queued.len() == 2 && queued[0] == field,
        "the newcomer did not queue behind the owner: {queued:?}"
    );

    // The owner's second task waits in the same place, and gives up.
    let lock = client.fair_lock(&name).owned_by(owner.clone());
    let gave_up = lock.try_lock_for(Duration::from_millis(100), None).await;
    assert!(gave_up.unwrap().is_none(), "the owner got a held lock");
    // Whatever it left in flight has ended: the place is still the owner's, first in the queue.
    let settled = common::eventually(Duration::from_secs(5), || async {
        client.stats().in_flight == 0
    });
    assert!(settled.await, "{:?}", client.stats());
    assert_eq!(
        queue(),
        queued,
        "the owner's place left the queue with its second task"
    );

    held.unlock().await.unwrap();
    common::all_within([waiter, newcomer], Duration::from_secs(10), "a waiter hung").await;
    let order = [got_rx.recv().await.unwrap(), got_rx.recv().await.unwrap()];
    assert_eq!(order, ["the owner's waiter", "the newcomer"]);
}
