//! `RedLock`: a quorum lock over independent masters, each test on 5 `redis-server`s of its own.
//! Holds are checked on each server with raw commands (the lock hash and its holder field
//! `<client-uuid>:<owner>`).

use crate::common;
use common::child;

use std::time::Duration;

use common::{faults, RedisServer};
use relock::{Client, Error, Owner, RedLock};
use tokio::time::Instant;

const WATCHDOG: Duration = Duration::from_secs(5);
/// Generous for loopback on a busy 2-core machine; a stopped master costs a round this long.
const VOTE: Duration = Duration::from_millis(500);

/// Independent servers and a client on each.
struct Masters {
    servers: Vec<RedisServer>,
    clients: Vec<Client>,
}

impl Masters {
    /// Five servers, a client with `watchdog` on each, and a lock name of the test's own.
    async fn five(test: &str, watchdog: Duration) -> (Masters, String) {
        let servers: Vec<_> = (0..5).map(|_| RedisServer::start()).collect();
        let mut clients = Vec::new();
        for server in &servers {
            clients.push(common::client(server, watchdog).await);
        }
        (Masters { servers, clients }, common::prefix(test))
    }

    /// A RedLock whose rounds wait for every vote (up to the vote timeout), so a guard holds
    /// on every master that is up, however slowly a loaded machine lets it answer.
    fn lock(&self, name: &str, owner: &Owner) -> RedLock {
        RedLock::new(&self.clients, name)
            .owned_by(owner.clone())
            .with_vote_timeout(VOTE)
            .with_quorum_grace(Duration::MAX)
    }

    /// The hold count of `owner` on master `i`.
    fn holds(&self, i: usize, name: &str, owner: &Owner) -> u64 {
        let field = format!("{}:{}", self.clients[i].id(), owner.id());
        common::raw_holds(&self.servers[i], name, &field)
    }

    /// Whether any lock hash `name` is on master `i`.
    fn exists(&self, i: usize, name: &str) -> bool {
        common::raw_exists(&self.servers[i], name)
    }
}

/// Takes the free `lock` and gives it back at once; how long that took.
async fn free_round(lock: &RedLock) -> Duration {
    let started = Instant::now();
    let guard = lock.try_lock().await.unwrap().expect("a free lock");
    guard.unlock().await.unwrap();
    started.elapsed()
}

/// Resumes a stopped process when dropped, whatever the test did.
struct Stopped(u32);

impl Stopped {
    fn stop(server: &RedisServer) -> Stopped {
        let pid = server.pid().expect("running");
        faults::stop(pid);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        faults::resume(self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_on_every_master_reenters_and_excludes_others() {
    let (m, name) = Masters::five("redlock-all", WATCHDOG).await;
    let (a, b) = (Owner::new(), Owner::new());
    let lock = m.lock(&name, &a);
    assert_eq!((lock.masters(), lock.quorum()), (5, 3));
    let outer = lock.try_lock().await.unwrap().expect("a free lock");
    assert_eq!(outer.held_on(), 5);
    assert_eq!(outer.lease(), None);
    for i in 0..5 {
        assert_eq!(m.holds(i, &name, &a), 1, "master {i}");
        let ttl = common::raw_pttl(&m.servers[i], &name);
        assert!(
            ttl > 0 && ttl <= WATCHDOG.as_millis() as i64,
            "master {i}: {ttl}"
        );
    }
    let inner = lock.lock().await.unwrap();
    assert_eq!(inner.held_on(), 5);
    assert!(
        (0..5).all(|i| m.holds(i, &name, &a) == 2),
        "re-entered everywhere"
    );
    let other = m.lock(&name, &b);
    assert!(other.try_lock().await.unwrap().is_none());
    assert!(other
        .try_lock_for(Duration::from_millis(300), None)
        .await
        .unwrap()
        .is_none());
    assert!(
        (0..5).all(|i| m.holds(i, &name, &b) == 0),
        "no vote of b left"
    );
    inner.unlock().await.unwrap();
    assert!((0..5).all(|i| m.holds(i, &name, &a) == 1));
    outer.unlock().await.unwrap();
    assert!((0..5).all(|i| !m.exists(i, &name)), "freed on every master");
    let value = other.with(|_| async { 7 }).await.unwrap();
    assert_eq!(value, 7);
    assert!((0..5).all(|i| !m.exists(i, &name)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_masters_down_still_leave_a_quorum() {
    let (mut m, name) = Masters::five("redlock-two-down", WATCHDOG).await;
    let a = Owner::new();
    m.servers[3].kill();
    m.servers[4].kill();
    let guard = m.lock(&name, &a).try_lock().await.unwrap().expect("3 of 5");
    assert_eq!(guard.held_on(), 3);
    assert!((0..3).all(|i| m.holds(i, &name, &a) == 1));
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    assert!((0..3).all(|i| !m.exists(i, &name)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_masters_down_is_no_quorum_and_leaves_nothing() {
    let (mut m, name) = Masters::five("redlock-three-down", WATCHDOG).await;
    let a = Owner::new();
    for i in 2..5 {
        m.servers[i].kill();
    }
    let lock = m.lock(&name, &a);
    for wait in [None, Some(Duration::ZERO), Some(Duration::from_secs(30))] {
        let started = Instant::now();
        let outcome = match wait {
            None => lock.lock().await.map(Some),
            Some(wait) => lock.try_lock_for(wait, None).await,
        };
        let took = started.elapsed();
        match outcome {
            Err(Error::NoQuorum {
                granted: 2,
                busy: 0,
                failed: 3,
                needed: 3,
                ..
            }) => {}
            other => panic!("wait {wait:?}: expected NoQuorum, got {other:?}"),
        }
        // One round: the dead masters' votes end by the vote timeout at the latest.
        assert!(took < VOTE * 2, "wait {wait:?}: took {took:?}");
        assert!(
            !m.exists(0, &name) && !m.exists(1, &name),
            "the live masters' votes were given back"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_master_costs_one_vote_timeout_when_every_vote_is_awaited() {
    let (m, name) = Masters::five("redlock-stopped", WATCHDOG).await;
    let a = Owner::new();
    let lease = Duration::from_secs(10);
    let lock = m.lock(&name, &a);
    free_round(&lock).await; // connections warm
    let stopped = Stopped::stop(&m.servers[4]);
    let started = Instant::now();
    let guard = lock
        .try_lock_for(Duration::ZERO, Some(lease))
        .await
        .unwrap()
        .expect("4 of 5");
    let took = started.elapsed();
    // The round waited for the stopped vote, no longer; the validity is what is left of the
    // lease after the round and the drift allowance (1% + 2 ms). The round, as the lock timed
    // it, lasted the stopped vote's timeout at least (this test's own clock, read before the
    // call, may run ahead of the lock's by however long a busy machine takes to start it).
    let drift = lease / 100 + Duration::from_millis(2);
    assert!(
        took >= VOTE,
        "returned before the stopped vote timed out: {took:?}"
    );
    assert!(took < VOTE * 2, "{took:?}");
    assert!(guard.validity() <= lease - VOTE - drift);
    assert!(guard.validity() > lease - VOTE * 2 - drift);
    assert_eq!(guard.held_on(), 4);
    assert!((0..4).all(|i| m.holds(i, &name, &a) == 1));
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    assert!((0..4).all(|i| !m.exists(i, &name)));
    drop(stopped);
}

/// With the default quorum grace, a stopped master costs an acquire little: once a quorum has
/// said yes, the round waits for the others only about as long again as the quorum took. The
/// stopped master's vote, dropped, leaves nothing behind once the master runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_master_costs_only_the_quorum_grace() {
    let (m, name) = Masters::five("redlock-grace", WATCHDOG).await;
    let a = Owner::new();
    let lock = RedLock::new(&m.clients, &name)
        .owned_by(a.clone())
        .with_vote_timeout(VOTE);
    // A round with every master up: how long a quorum takes here, the floor for what follows.
    let floor = free_round(&lock).await;
    let stopped = Stopped::stop(&m.servers[4]);
    let started = Instant::now();
    let guard = lock.try_lock().await.unwrap().expect("4 of 5 are up");
    let took = started.elapsed();
    assert!(
        took < VOTE / 2,
        "the round waited for the stopped master: {took:?} (a round with all up: {floor:?})"
    );
    assert!(guard.held_on() >= 3, "{}", guard.held_on());
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    // A live master's vote still out when the grace ended (a busy machine) was dropped: its
    // hold, taken late, is given back in the background.
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            m.clients[..4].iter().all(|c| c.stats().in_flight == 0)
        })
        .await,
        "votes still in flight: {:?}",
        m.clients.iter().map(|c| c.stats()).collect::<Vec<_>>()
    );
    assert!(
        (0..4).all(|i| !m.exists(i, &name)),
        "held on {:?}",
        (0..4).filter(|&i| m.exists(i, &name)).collect::<Vec<_>>()
    );
    drop(stopped);
    // The dropped vote reaches the master when it runs again; its hold is given back.
    assert!(
        common::eventually(Duration::from_secs(10), || async { !m.exists(4, &name) }).await,
        "the stopped master kept the dropped vote's hold"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_on_a_quorum_waits_and_is_woken_by_the_release() {
    let (m, name) = Masters::five("redlock-busy", WATCHDOG).await;
    let (a, c) = (Owner::new(), Owner::new());
    // Another owner holds plain locks on masters 0..3.
    let mut held = Vec::new();
    for client in &m.clients[..3] {
        held.push(client.lock(&name).owned_by(c.clone()).lock().await.unwrap());
    }
    let lock = m
        .lock(&name, &a)
        .with_retry_delay(Duration::from_secs(2), Duration::ZERO);
    assert!(lock.try_lock().await.unwrap().is_none());
    assert!(
        !m.exists(3, &name) && !m.exists(4, &name),
        "votes given back"
    );
    let wait = Duration::from_secs(20);
    let started = Instant::now();
    let waiter = tokio::spawn(async move { lock.try_lock_for(wait, None).await });
    // The waiter listens on the busy masters' channels before they are freed.
    for server in &m.servers[..3] {
        assert!(common::until_subscribed(server, &name, 1).await);
    }
    let released = Instant::now();
    for guard in held {
        guard.unlock().await.unwrap();
    }
    let guard = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("freed within the wait");
    let after = released.elapsed();
    eprintln!(
        "woken {after:?} after the release, {:?} into the wait",
        started.elapsed()
    );
    // Its retry delay is 2 s: only the release messages explain a wake-up well before it.
    assert!(
        after < Duration::from_secs(1),
        "{after:?} after the release"
    );
    assert!(started.elapsed() < wait / 2);
    // The first release may already make a quorum with masters 3 and 4.
    assert!(guard.held_on() >= 3);
    guard.unlock().await.unwrap();
    for client in &m.clients {
        assert_eq!(client.stats().waiters, 0, "no waiter left behind");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_quorum_and_losing_it_fires_lost() {
    let watchdog = Duration::from_secs(1);
    let (mut m, name) = Masters::five("redlock-watchdog", watchdog).await;
    let a = Owner::new();
    let guard = m.lock(&name, &a).lock().await.unwrap();
    assert_eq!(guard.held_on(), 5);
    tokio::select! {
        _ = guard.lost() => panic!("lost while every master was up"),
        _ = tokio::time::sleep(watchdog * 3) => {}
    }
    let still = (0..5).filter(|&i| m.holds(i, &name, &a) == 1).count();
    assert!(still >= 3, "held on {still} masters after 3 leases");
    assert!(!guard.is_lost());
    let lost = guard.lost();
    for i in 2..5 {
        m.servers[i].kill();
    }
    let killed = Instant::now();
    tokio::time::timeout(watchdog * 5, lost)
        .await
        .expect("lost() did not fire after 3 masters died");
    eprintln!("lost {:?} after the kill", killed.elapsed());
    assert!(guard.is_lost());
    assert!(guard.unlock().await.unwrap_err().is_lease_lost());
}

/// The documented Redlock hazard: A holds exactly 3 of 5, one of its masters restarts empty,
/// and B wins a quorum (the restarted master and the two A never had) while A's lease runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_lets_a_second_owner_in() {
    let (mut m, name) = Masters::five("redlock-restart", WATCHDOG).await;
    let (a, b, c) = (Owner::new(), Owner::new(), Owner::new());
    let mut third = Vec::new();
    for client in &m.clients[3..] {
        third.push(client.lock(&name).owned_by(c.clone()).lock().await.unwrap());
    }
    let lease = Duration::from_secs(30);
    let held_a = m
        .lock(&name, &a)
        .try_lock_for(Duration::ZERO, Some(lease))
        .await
        .unwrap()
        .expect("masters 0..3");
    assert_eq!(held_a.held_on(), 3);
    for guard in third {
        guard.unlock().await.unwrap();
    }
    m.servers[0].restart(); // no persistence: it comes back empty
    let held_b = m
        .lock(&name, &b)
        .try_lock_for(Duration::from_secs(10), Some(lease))
        .await
        .unwrap()
        .expect("masters 0, 3 and 4");
    assert_eq!(held_b.held_on(), 3);
    assert!(
        !held_a.is_lost(),
        "A still believes it holds the lock: both hold it"
    );
    assert_eq!(m.holds(0, &name, &b), 1);
    assert_eq!((m.holds(1, &name, &a), m.holds(2, &name, &a)), (1, 1));
    // A finds out only when it releases: its part on master 0 was gone.
    assert!(held_a.unlock().await.unwrap_err().is_lease_lost());
    held_b.unlock().await.unwrap();
}

/// A holder process for `many_processes_never_overlap`: `TASKS` tasks take the RedLock over
/// `REDIS_URLS` again and again for `MILLIS` ms; inside, each bumps `<name>:inside` on the
/// check server `CHECK_URL` and counts a violation when it is not 1, and counts its turns in
/// `<name>:turns:<IDX>`. Without its settings it does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by many_processes_never_overlap"]
async fn child_redlock_holders() {
    use fred::interfaces::KeysInterface;
    let Some(env) = child::env() else { return };
    let mut clients = Vec::new();
    for url in env.text("REDIS_URLS").split(',') {
        clients.push(common::client_at(url, WATCHDOG).await);
    }
    let check = Client::connect(&env.text("CHECK_URL")).await.unwrap();
    let (name, idx) = (env.text("LOCK_NAME"), env.text("IDX"));
    let lock = RedLock::new(&clients, &name)
        .with_vote_timeout(Duration::from_secs(1))
        .with_retry_delay(Duration::from_millis(50), Duration::from_millis(40));
    let until = Instant::now() + env.millis("MILLIS");
    let mut all = Vec::new();
    for _ in 0..env.number::<usize>("TASKS") {
        let (lock, redis, name, idx) = (
            lock.clone(),
            check.redis().clone(),
            name.clone(),
            idx.clone(),
        );
        all.push(tokio::spawn(async move {
            while Instant::now() < until {
                let guard = match lock.lock().await {
                    Ok(guard) => guard,
                    Err(error) if error.is_no_quorum() => continue,
                    Err(error) => panic!("{error}"),
                };
                let inside: i64 = redis.incr(format!("{name}:inside")).await.unwrap();
                if inside != 1 {
                    let _: i64 = redis.incr(format!("{name}:violations")).await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _: i64 = redis.decr(format!("{name}:inside")).await.unwrap();
                let _: i64 = redis.incr(format!("{name}:turns:{idx}")).await.unwrap();
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in all {
        task.await.unwrap();
    }
    for client in clients {
        client.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_processes_never_overlap() {
    let servers: Vec<_> = (0..5).map(|_| RedisServer::start()).collect();
    let check = RedisServer::start();
    let name = common::prefix("redlock-procs");
    let urls: Vec<_> = servers.iter().map(|s| s.url()).collect();
    let procs = 4;
    let children: Vec<_> = (0..procs)
        .map(|idx| {
            child::Child::spawn(
                concat!(module_path!(), "::child_redlock_holders"),
                &[
                    ("REDIS_URLS", urls.join(",")),
                    ("CHECK_URL", check.url()),
                    ("LOCK_NAME", name.clone()),
                    ("TASKS", "3".to_owned()),
                    ("MILLIS", "3000".to_owned()),
                    ("IDX", idx.to_string()),
                ],
            )
        })
        .collect();
    for child in children {
        child.finish(Duration::from_secs(60)).await;
    }
    let get = |key: String| match common::resp(&check.cmd(&["GET", &key])) {
        common::Resp::Bulk(Some(n)) => n.parse::<u64>().unwrap(),
        _ => 0,
    };
    let turns: Vec<u64> = (0..procs)
        .map(|i| get(format!("{name}:turns:{i}")))
        .collect();
    eprintln!("turns per process: {turns:?}");
    assert_eq!(
        get(format!("{name}:violations")),
        0,
        "two holders overlapped"
    );
    assert!(
        turns.iter().all(|&t| t > 0),
        "a process never got the lock: {turns:?}"
    );
    for server in &servers {
        assert!(!common::raw_exists(server, &name), "a hold left behind");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error() {
    let (server, client, name) = common::setup("redlock-bad", WATCHDOG).await;
    let invalid = |outcome: relock::Result<Option<relock::RedLockGuard>>| match outcome {
        Err(error) => assert!(error.is_invalid_argument(), "{error}"),
        Ok(guard) => panic!("accepted: {guard:?}"),
    };
    invalid(RedLock::new(Vec::<Client>::new(), &name).try_lock().await);
    invalid(RedLock::new([&client, &client], &name).try_lock().await);
    invalid(
        RedLock::new([client.clone(), client.clone()], &name)
            .lock()
            .await
            .map(Some),
    );
    invalid(RedLock::new([&client], "").try_lock().await);
    let lock = RedLock::new([&client], &name);
    invalid(
        lock.try_lock_for(Duration::ZERO, Some(Duration::ZERO))
            .await,
    );
    invalid(lock.lock_with_lease(Duration::ZERO).await.map(Some));
    invalid(
        lock.lock_with_lease(Duration::from_secs(u64::MAX))
            .await
            .map(Some),
    );
    invalid(
        lock.clone()
            .with_vote_timeout(Duration::ZERO)
            .try_lock()
            .await,
    );
    invalid(lock.clone().with_drift_factor(f64::NAN).try_lock().await);
    assert!(!common::raw_exists(&server, &name));
    // One master is a quorum of one.
    let guard = lock.try_lock().await.unwrap().unwrap();
    assert_eq!(guard.held_on(), 1);
    guard.unlock().await.unwrap();
}

/// Two clients of one server are one master, not two: a RedLock over them would find its own
/// hold busy on the second and wait forever. Refused at the first operation, whether the clients
/// were given the same address or two addresses of the server (`127.0.0.1` and `localhost`),
/// among other masters too, before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_of_one_server_are_refused() {
    let server = RedisServer::start();
    let other = RedisServer::start();
    let connect = |host: &str, port: u16| {
        let url = format!("redis://{host}:{port}");
        async move { Client::connect(&url).await.unwrap() }
    };
    let a = connect("127.0.0.1", server.port()).await;
    let same_url = connect("127.0.0.1", server.port()).await;
    let by_host = connect("localhost", server.port()).await;
    let elsewhere = connect("127.0.0.1", other.port()).await;
    let name = common::prefix("redlock-one-server");
    let refused = |what: &str, outcome: relock::Result<Option<relock::RedLockGuard>>| match outcome
    {
        Err(error) => {
            assert!(error.is_invalid_argument(), "{what}: {error:?}");
            assert!(error.to_string().contains("server"), "{what}: {error}");
        }
        Ok(guard) => panic!("{what}: accepted: {guard:?}"),
    };
    let soon = Duration::from_secs(3);
    for (what, clients) in [
        ("the same URL", vec![&a, &same_url]),
        ("two addresses", vec![&a, &by_host]),
        ("among other masters", vec![&a, &elsewhere, &by_host]),
    ] {
        let lock = RedLock::new(clients, &name).with_vote_timeout(VOTE);
        let outcome = tokio::time::timeout(soon, lock.try_lock()).await;
        refused(what, outcome.expect("try_lock returns at once"));
        let outcome = tokio::time::timeout(soon, lock.lock()).await;
        refused(what, outcome.expect("lock returns at once").map(Some));
        let outcome = tokio::time::timeout(soon, lock.try_lock_for(soon, None)).await;
        refused(what, outcome.expect("try_lock_for returns at once"));
    }
    assert!(!common::raw_exists(&server, &name), "nothing written");
    assert!(!common::raw_exists(&other, &name), "nothing written");
    for client in [&a, &same_url, &by_host, &elsewhere] {
        let stats = client.stats();
        assert_eq!((stats.holds, stats.channels), (0, 0), "{stats:?}");
    }
    // Each server once is a valid RedLock.
    let guard = RedLock::new([&a, &elsewhere], &name)
        .try_lock()
        .await
        .unwrap()
        .expect("a free lock");
    assert_eq!(guard.held_on(), 2);
    guard.unlock().await.unwrap();
}
