//! `FairLock`: strict FIFO across clients and processes, dead waiters skipped at their deadline,
//! waiters that give up leave the queue, and Redisson's fair-lock bugs kept out.

use crate::common;
use common::child;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{
    eventually, fair_queue_key, fair_timeout_key, raw_command_calls, raw_exists, raw_lrange,
    raw_script_calls, raw_time_ms, RedisServer,
};
use fred::interfaces::ListInterface;
use relock::Owner;
use tokio::time::Instant;

/// A client with a short fair waiter timeout, as tests want.
pub(crate) async fn fair_client(server: &RedisServer, waiter_timeout: Duration) -> relock::Client {
    fair_client_at(&server.url(), waiter_timeout).await
}

/// [`common::setup`] with a [`fair_client`].
async fn fair_setup(test: &str, waiter_timeout: Duration) -> (RedisServer, relock::Client, String) {
    let server = RedisServer::start();
    let client = fair_client(&server, waiter_timeout).await;
    (server, client, common::prefix(test))
}

/// A client on `url` with a short fair waiter timeout.
async fn fair_client_at(url: &str, waiter_timeout: Duration) -> relock::Client {
    let config = common::config(url)
        .with_watchdog_timeout(Duration::from_secs(5))
        .with_command_timeout(Duration::from_secs(2))
        .with_fair_waiter_timeout(waiter_timeout);
    relock::Client::new(config).await.expect("connect")
}

/// Waiters on several clients queue while the lock is held; they get it in the order the queue
/// on Redis shows they joined it.
#[tokio::test]
async fn waiters_of_several_clients_get_the_lock_in_queue_order() {
    let server = RedisServer::start();
    let name = common::prefix("fair-order");
    let clients = [
        fair_client(&server, Duration::from_secs(10)).await,
        fair_client(&server, Duration::from_secs(10)).await,
        fair_client(&server, Duration::from_secs(10)).await,
    ];
    let holder = clients[0].fair_lock(&name).lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..12 {
        let client = clients[i % 3].clone();
        let (lock_name, order) = (name.clone(), order.clone());
        let owner = Owner::new();
        let field = format!("{}:{}", client.id(), owner.id());
        tasks.push(tokio::spawn(async move {
            let guard = client
                .fair_lock(&lock_name)
                .owned_by(owner)
                .lock()
                .await
                .unwrap();
            order.lock().unwrap().push(field);
            tokio::time::sleep(Duration::from_millis(2)).await;
            guard.unlock().await.unwrap();
        }));
        // Let each join the queue before the next.
        let queue = fair_queue_key(&name);
        assert!(
            common::eventually(Duration::from_secs(5), || {
                let len = raw_lrange(&server, &queue).len();
                async move { len == i + 1 }
            })
            .await
        );
    }
    let queued = raw_lrange(&server, &fair_queue_key(&name));
    holder.unlock().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), queued);
    assert!(raw_lrange(&server, &fair_queue_key(&name)).is_empty());
    assert!(!common::raw_exists(&server, &fair_timeout_key(&name)));
}

/// The holder field of `owner` on `client`.
fn field(client: &relock::Client, owner: &Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

/// Waits until the lock's queue on Redis holds `len` waiters.
pub(crate) async fn until_queued(server: &RedisServer, name: &str, len: usize) -> Vec<String> {
    let queue = fair_queue_key(name);
    let reached = eventually(Duration::from_secs(10), || {
        let now = raw_lrange(server, &queue).len();
        async move { now == len }
    })
    .await;
    let queued = raw_lrange(server, &queue);
    assert!(reached, "the queue never held {len} waiters: {queued:?}");
    queued
}

/// Not a test on its own: a worker process of the tests below. It starts `WAITERS` waiters on
/// the fair lock, each with its own owner; each, once it holds the lock, appends its holder field
/// to the list `<name>:log` and releases. Without its settings it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by the cross-process tests"]
async fn child_fair_waiters() {
    let Some(env) = child::env() else { return };
    let url = env.text("REDIS_URL");
    let client = fair_client_at(&url, env.millis("WAITER_TIMEOUT_MS")).await;
    let name = env.text("LOCK_NAME");
    let log = format!("{name}:log");
    let mut tasks = Vec::new();
    for _ in 0..env.number::<usize>("WAITERS") {
        let (client, name, log) = (client.clone(), name.clone(), log.clone());
        tasks.push(tokio::spawn(async move {
            let owner = Owner::new();
            let me = field(&client, &owner);
            child::say(format!("WAITING {me}"));
            let guard = client
                .fair_lock(&name)
                .owned_by(owner)
                .lock()
                .await
                .unwrap();
            let _: i64 = client.redis().rpush(&log, &me).await.unwrap();
            guard.unlock().await.unwrap();
        }));
    }
    let work = futures::future::join_all(tasks);
    let done = tokio::time::timeout(Duration::from_secs(60), work).await;
    for task in done.expect("child timed out") {
        task.unwrap();
    }
    child::say("DONE");
}

fn spawn_waiters(
    server: &RedisServer,
    name: &str,
    waiters: usize,
    waiter_timeout: Duration,
) -> child::Child {
    child::Child::spawn(
        concat!(module_path!(), "::child_fair_waiters"),
        &[
            ("REDIS_URL", server.url()),
            ("LOCK_NAME", name.to_owned()),
            ("WAITERS", waiters.to_string()),
            ("WAITER_TIMEOUT_MS", waiter_timeout.as_millis().to_string()),
        ],
    )
}

/// Strict FIFO across processes: 4 processes × 4 waiters queue while the lock is held; the order
/// in which they get it (logged on Redis by each holder) is the order of the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_four_processes_get_the_lock_in_queue_order() {
    let (server, client, name) = fair_setup("fair-4proc", Duration::from_secs(10)).await;
    let holder = client.fair_lock(&name).lock().await.unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| spawn_waiters(&server, &name, 4, Duration::from_secs(10)))
        .collect();
    let queued = until_queued(&server, &name, 16).await;
    holder.unlock().await.unwrap();
    for child in children {
        child.finish(Duration::from_secs(60)).await;
    }
    let log = raw_lrange(&server, &format!("{name}:log"));
    assert_eq!(log, queued, "the lock went out of queue order");
    assert!(!raw_exists(&server, &fair_queue_key(&name)));
    assert!(!raw_exists(&server, &fair_timeout_key(&name)));
    assert!(!raw_exists(&server, &name));
}

/// A waiter killed at the head of the queue holds the next one back until its deadline (the fair
/// waiter timeout after its last renewal), no longer, and the next one does not poll meanwhile
/// (Redisson's queue stuck behind a dead head, and its waiters busy-polling a free lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_at_the_head_delays_the_next_by_at_most_its_deadline() {
    let waiter_timeout = Duration::from_millis(1500);
    let (server, client, name) = fair_setup("fair-dead-head", waiter_timeout).await;
    let holder = client.fair_lock(&name).lock().await.unwrap();
    let mut child = spawn_waiters(&server, &name, 1, waiter_timeout);
    let dead = until_queued(&server, &name, 1).await.remove(0);

    let next = Owner::new();
    let next_field = field(&client, &next);
    let lock = client.fair_lock(&name).owned_by(next);
    let waiting = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        (Instant::now(), guard)
    });
    assert_eq!(
        until_queued(&server, &name, 2).await,
        [dead.clone(), next_field]
    );

    child.kill().await;
    let killed = Instant::now();
    let calls_before = raw_script_calls(&server);
    holder.unlock().await.unwrap();
    let (acquired, guard) = common::within(
        Duration::from_secs(30),
        waiting,
        "the queue is stuck behind a dead head",
    )
    .await;
    let calls = raw_script_calls(&server) - calls_before;
    let waited = acquired - killed;
    // The dead waiter renewed its place at most a waiter timeout before it was killed.
    assert!(
        waited <= waiter_timeout + Duration::from_secs(3),
        "the next waiter waited {waited:?} behind a dead head with a {waiter_timeout:?} timeout"
    );
    // A few renewals (every third of the timeout) and the attempts at the dead head's deadline;
    // a busy poll would be thousands.
    let most = 10 + 4 * (waited.as_millis() as u64 / (waiter_timeout.as_millis() as u64 / 3));
    assert!(
        calls <= most,
        "{calls} script calls in {waited:?}: the waiter polled"
    );
    assert!(!raw_lrange(&server, &fair_queue_key(&name)).contains(&dead));
    guard.unlock().await.unwrap();
}

/// A live waiter keeps its place however long the holder keeps the lock: it renews its deadline
/// (in Redisson a head whose deadline passed while the lock was held loses its place).
#[tokio::test]
async fn a_live_waiter_keeps_its_place_past_the_waiter_timeout() {
    let waiter_timeout = Duration::from_millis(300);
    let (server, client, name) = fair_setup("fair-long-hold", waiter_timeout).await;
    let holder = client.fair_lock(&name).lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for who in ["first", "second", "third"] {
        let (lock, order) = (
            client.fair_lock(&name).owned_by(Owner::new()),
            order.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            order.lock().unwrap().push(who);
            guard.unlock().await.unwrap();
        }));
        until_queued(&server, &name, tasks.len()).await;
    }
    // Hold for several waiter timeouts, checking the queue stays whole.
    let queued = raw_lrange(&server, &fair_queue_key(&name));
    let until = Instant::now() + waiter_timeout * 5;
    while Instant::now() < until {
        assert_eq!(raw_lrange(&server, &fair_queue_key(&name)), queued);
        tokio::time::sleep(waiter_timeout / 10).await;
    }
    holder.unlock().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["first", "second", "third"]);
}

/// Deadlines never drift however many waiters come and go (Redisson's once drifted far into the
/// future): the tail's deadline, by Redisson's arithmetic (wait Q = 300 s), stays within the
/// lock's lease + Q per queued waiter of the server's clock, and relock's liveness record within
/// one waiter timeout. The queue is empty after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlines_never_grow_past_one_waiter_timeout() {
    const REDISSON_WAIT_MS: i64 = 300_000;
    const LEASE_MS: i64 = 5_000;
    /// One atomic sample: the server's clock, the queue's length, the latest deadline and the
    /// latest liveness.
    const SAMPLE: &str = "local t = redis.call('time') \
        local function last(key) \
            local top = redis.call('zrange', key, -1, -1, 'withscores') \
            return top[2] or '-1' end \
        return {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), \
            redis.call('llen', KEYS[1]), last(KEYS[2]), last(KEYS[3])}";
    let waiter_timeout = Duration::from_millis(1000);
    let (server, client, name) = fair_setup("fair-drift", waiter_timeout).await;
    let stop = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let lock = client.fair_lock(&name).owned_by(Owner::new());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop {
                let wait = Duration::from_millis(20 + 37 * i % 200);
                if let Some(guard) = lock.try_lock_for(wait, None).await.unwrap() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    guard.unlock().await.unwrap();
                }
            }
        }));
    }
    let timeouts = fair_timeout_key(&name);
    let alive = common::fair_alive_key(&name);
    let queue = fair_queue_key(&name);
    let mut samples = 0;
    while Instant::now() < stop {
        let reply = server.cmd(&["EVAL", SAMPLE, "3", &queue, &timeouts, &alive]);
        let common::Resp::Array(Some(items)) = common::resp(&reply) else {
            panic!("bad sample {reply}");
        };
        let [common::Resp::Int(now), common::Resp::Int(queued), common::Resp::Bulk(Some(latest)), common::Resp::Bulk(Some(beat))] =
            items.as_slice()
        else {
            panic!("bad sample {items:?}");
        };
        let latest = latest.parse::<f64>().unwrap() as i64;
        let beat = beat.parse::<f64>().unwrap() as i64;
        if latest >= 0 {
            assert!(
                latest - now <= LEASE_MS + queued * REDISSON_WAIT_MS + 50,
                "a deadline {} ms ahead of the server clock, {queued} queued",
                latest - now
            );
            samples += 1;
        }
        if beat >= 0 {
            assert!(
                beat - now <= waiter_timeout.as_millis() as i64 + 50,
                "a liveness record {} ms ahead of the server clock",
                beat - now
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(samples > 0, "no waiter was ever queued");
    assert!(
        eventually(Duration::from_secs(5), || async {
            !raw_exists(&server, &fair_queue_key(&name)) && !raw_exists(&server, &timeouts)
        })
        .await,
        "waiters that gave up left entries: {:?}",
        raw_lrange(&server, &fair_queue_key(&name))
    );
}

/// A waiter whose wait runs out leaves the queue at once, and the next one moves up (Redisson
/// left entries behind when `tryLock` gave up on a timeout).
#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_queue_at_once() {
    let (server, client, name) = fair_setup("fair-give-up", Duration::from_secs(30)).await;
    let holder = client.fair_lock(&name).lock().await.unwrap();
    let quitter = client.fair_lock(&name).owned_by(Owner::new());
    let stayer = Owner::new();
    let stayer_field = field(&client, &stayer);
    let gave_up = tokio::spawn(async move {
        quitter
            .try_lock_for(Duration::from_millis(300), None)
            .await
            .unwrap()
            .is_none()
    });
    until_queued(&server, &name, 1).await;
    let staying = client.fair_lock(&name).owned_by(stayer);
    let stays = tokio::spawn(async move { staying.lock().await.unwrap() });
    until_queued(&server, &name, 2).await;
    assert!(gave_up.await.unwrap());
    assert_eq!(until_queued(&server, &name, 1).await, [stayer_field]);
    holder.unlock().await.unwrap();
    let guard = common::within(
        Duration::from_secs(5),
        stays,
        "the next waiter was not woken",
    )
    .await;
    guard.unlock().await.unwrap();
    assert!(!raw_exists(&server, &fair_timeout_key(&name)));
}

/// `try_lock` never jumps the queue: with the lock free but a waiter queued, it fails.
#[tokio::test]
async fn try_lock_does_not_jump_the_queue() {
    let (server, client, name) = fair_setup("fair-try", Duration::from_secs(30)).await;
    // A waiter of another (Redisson-style) client at the head of the queue, alive.
    let deadline = raw_time_ms(&server) + 20_000;
    server.cmd(&["RPUSH", &fair_queue_key(&name), "java-uuid:1"]);
    server.cmd(&[
        "ZADD",
        &fair_timeout_key(&name),
        &deadline.to_string(),
        "java-uuid:1",
    ]);
    assert!(client.fair_lock(&name).try_lock().await.unwrap().is_none());
    assert!(!raw_exists(&server, &name));
    // Once that waiter leaves, the lock is free for anyone.
    server.cmd(&["DEL", &fair_queue_key(&name), &fair_timeout_key(&name)]);
    let guard = common::taken(client.fair_lock(&name).try_lock().await, "free");
    guard.unlock().await.unwrap();
}

/// A waiter whose attempt failed (the server stalled past the command timeout) leaves no entry
/// for long: it leaves the queue once the server answers, or loses its place at its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_fails_leaves_no_entry_behind() {
    let waiter_timeout = Duration::from_millis(900);
    let (server, holder_client, name) = fair_setup("fair-fails", waiter_timeout).await;
    let holder = holder_client.fair_lock(&name).lock().await.unwrap();
    let config = common::config(&server.url())
        .with_command_timeout(Duration::from_millis(300))
        .with_fair_waiter_timeout(waiter_timeout);
    let client = relock::Client::new(config).await.unwrap();
    let lock = client.fair_lock(&name);
    let waiting = tokio::spawn(async move { lock.lock().await.map(|_| ()) });
    until_queued(&server, &name, 1).await;
    // The waiter renews its place every 300 ms: a 1 s stall makes one renewal time out.
    let sleep = common::faults::debug_sleep(&server, 1.0);
    let outcome = common::within(
        Duration::from_secs(10),
        waiting,
        "the waiter neither failed nor got the lock",
    )
    .await;
    sleep.woken().await;
    assert!(
        outcome.is_err(),
        "the waiter should fail while the server stalls"
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            // Any script of the lock's purges a dead head; the holder's re-entry runs one.
            let again = holder_client.fair_lock(&name).try_lock().await.unwrap();
            drop(again);
            raw_lrange(&server, &fair_queue_key(&name)).is_empty()
        })
        .await,
        "a failed waiter stayed queued"
    );
    holder.unlock().await.unwrap();
}

/// Shutting down a client that holds a fair lock wakes the next waiter at once.
#[tokio::test]
async fn shutdown_of_the_holder_wakes_the_next_waiter() {
    let (server, holder_client, name) = fair_setup("fair-shutdown", Duration::from_secs(30)).await;
    let _held = holder_client
        .fair_lock(&name)
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let client = fair_client(&server, Duration::from_secs(30)).await;
    let lock = client.fair_lock(&name);
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    until_queued(&server, &name, 1).await;
    let shut = Instant::now();
    holder_client.shutdown().await.unwrap();
    let guard = common::within(
        Duration::from_secs(5),
        waiting,
        "the waiter was not woken by the shutdown",
    )
    .await;
    // Woken by the message: its own timer was set to the holder's 60 s lease or 10 s renewals.
    assert!(shut.elapsed() < Duration::from_secs(5));
    guard.unlock().await.unwrap();
}

/// An owner that waits again finds its channel still subscribed from its last wait: its first
/// attempt is then its last before it waits, so a hand-off runs three scripts (the release, the
/// attempt that queues it, its attempt once woken) where try → subscribe → try → wait runs
/// four. The channel is unsubscribed once it has lingered unused.
#[tokio::test]
async fn an_owner_that_waits_again_gets_a_hand_off_in_three_scripts() {
    let (server, client, name) = fair_setup("fair-scripts", Duration::from_secs(30)).await;
    // Fixed leases: no watchdog renewal runs a script meanwhile.
    let lease = Duration::from_secs(20);
    let lock = |owner: &Owner| client.fair_lock(&name).owned_by(owner.clone());
    let spawn_waiter = |owner: &Owner| {
        let lock = lock(owner);
        tokio::spawn(async move { lock.lock_with_lease(lease).await.unwrap() })
    };
    let (first, looping) = (Owner::new(), Owner::new());
    let channel = format!(
        "{}:{}",
        common::lock_channel(&name),
        field(&client, &looping)
    );
    // The looping owner waits once (try → subscribe → try → wait) and gets the lock.
    let held = lock(&first).lock_with_lease(lease).await.unwrap();
    let waiting = spawn_waiter(&looping);
    until_queued(&server, &name, 1).await;
    held.unlock().await.unwrap();
    waiting.await.unwrap().unlock().await.unwrap();

    // It waits again.
    let held = lock(&first).lock_with_lease(lease).await.unwrap();
    let scripts_before = raw_script_calls(&server);
    let subscribes_before = raw_command_calls(&server, "subscribe");
    let waiting = spawn_waiter(&looping);
    assert_eq!(
        until_queued(&server, &name, 1).await,
        [field(&client, &looping)]
    );
    held.unlock().await.unwrap();
    let guard = waiting.await.unwrap();
    let scripts = raw_script_calls(&server) - scripts_before;
    assert!(scripts <= 3, "the hand-off ran {scripts} scripts");
    assert_eq!(
        raw_command_calls(&server, "subscribe"),
        subscribes_before,
        "subscribed again"
    );
    guard.unlock().await.unwrap();
    assert!(raw_lrange(&server, &fair_queue_key(&name)).is_empty());
    assert_eq!(
        client.stats().channels,
        0,
        "a lingering channel counts as in use"
    );
    // Unused, it goes.
    assert!(
        eventually(Duration::from_secs(30), || {
            let subscribed = common::raw_numsub(&server, &channel);
            async move { subscribed == 0 }
        })
        .await,
        "the lingering channel was never unsubscribed"
    );
}
