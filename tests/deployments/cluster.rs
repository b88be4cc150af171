//! relock on a 3-master Cluster (`redis-cluster://` URL): lock scripts route by key slot,
//! waiters subscribe their lock channels with `SSUBSCRIBE` on the slot's master and releases
//! `SPUBLISH` there (on Redis 6, which has no sharded pub/sub: `SUBSCRIBE` and `PUBLISH`, which
//! every node broadcasts; `Cluster::subscribers` counts either), the watchdog renews per slot (never a CROSSSLOT batch), and names with a
//! `{tag}` keep all their keys in the tag's slot while names whose braces would split them are
//! rejected.
//!
//! Every test starts its own cluster, spreads its lock names over all three masters
//! (`keys_per_master`) and checks each lock's state on the master that owns it, with raw commands
//! that bypass relock. Each ends with the cluster leak check.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::connect::{self, field_of};
use common::faults::{self, critical_section, Overlaps, Register};
use common::topology::{self, Cluster};
use common::{eventually, lock_channel, raw_exists, raw_holds, raw_numsub, raw_pttl, RedisServer};
use relock::{Client, LockGuard};
use tokio::time::timeout;

/// A fixed lease far longer than any wake-up the tests accept: a waiter that gets the lock
/// within [`PROMPT`] of a release was woken by the release's (sharded) message.
const LONG: Duration = Duration::from_secs(20);
/// How long a critical section waits between reading and writing the register.
const THINK: Duration = Duration::from_millis(2);

fn start_cluster() -> Cluster {
    let started = Instant::now();
    let cluster = Cluster::start(3);
    eprintln!("3-master cluster up in {:?}", started.elapsed());
    cluster
}

/// What most tests start with: a cluster of their own, two clients of it with `watchdog`, and
/// a prefix of their own for names (as [`common::setup`] for one server).
async fn setup(test: &str, watchdog: Duration) -> (Cluster, [Client; 2], String) {
    let cluster = start_cluster();
    let clients = [
        connect(&cluster, watchdog).await,
        connect(&cluster, watchdog).await,
    ];
    (cluster, clients, common::prefix(test))
}

/// A relock client on the cluster's `redis-cluster://` URL.
async fn connect(cluster: &Cluster, watchdog: Duration) -> Client {
    connect::connected(cluster_config(cluster, watchdog)).await
}

/// The settings of the tests' cluster clients: `watchdog`, and a 3 s command timeout.
fn cluster_config(cluster: &Cluster, watchdog: Duration) -> relock::Config {
    connect::config(&cluster.url(), watchdog, Duration::from_secs(3))
}

/// Checks that each of `clients` holds and waits for nothing, then shuts them down.
async fn idle_then_shut_down(clients: &[&Client]) {
    for client in clients {
        let stats = client.stats();
        assert_eq!((stats.holds, stats.waiters), (0, 0), "{stats:?}");
    }
    for client in clients {
        client.shutdown().await.unwrap();
    }
}

/// `name` as the hash tag of the keys made from it: as it is when it holds a `{tag}`, else in
/// braces.
fn hash_tag(name: &str) -> String {
    if name.contains('{') {
        name.to_owned()
    } else {
        format!("{{{name}}}")
    }
}

/// One lock name per master, each with the master that owns it.
fn one_per_master<'a>(cluster: &'a Cluster, prefix: &str) -> Vec<(&'a RedisServer, String)> {
    cluster
        .keys_per_master(prefix, 1)
        .into_iter()
        .map(|(node, mut keys)| (node, keys.pop().unwrap()))
        .collect()
}

/// Waits (bounded) until `client` has `waiters` waiters and each of `names` has a subscriber:
/// on a cluster with sharded pub/sub, a shard subscriber on the master that owns it and no
/// classic subscriber on any node; on a Redis 6 cluster, a classic one.
async fn until_subscribed(cluster: &Cluster, client: &Client, names: &[&str], waiters: usize) {
    let ready = eventually(Duration::from_secs(10), || async {
        client.stats().waiters == waiters
            && names
                .iter()
                .all(|name| cluster.subscribers(&lock_channel(name)) >= 1)
    })
    .await;
    assert!(
        ready,
        "waiters never subscribed: {:?}; subscribers {:?}",
        client.stats(),
        names
            .iter()
            .map(|n| cluster.subscribers(&lock_channel(n)))
            .collect::<Vec<_>>()
    );
    if !cluster.sharded() {
        return;
    }
    for name in names {
        for node in cluster.nodes() {
            assert_eq!(
                raw_numsub(node, &lock_channel(name)),
                0,
                "a classic SUBSCRIBE on node {} for {name}: cluster waiters must use SSUBSCRIBE",
                node.port()
            );
        }
    }
}

/// Waits (bounded) until nobody is subscribed to `name`'s channel.
async fn until_unsubscribed(cluster: &Cluster, name: &str) {
    let channel = lock_channel(name);
    let gone = eventually(Duration::from_secs(10), || async {
        cluster.subscribers(&channel) == 0
    })
    .await;
    assert!(
        gone,
        "{channel} still has {} subscriber(s)",
        cluster.subscribers(&channel)
    );
}

/// (a) Lock, re-enter and unlock names on every master: hold counts are read with HGET on the
/// master that owns each name, leases with PTTL there, and the last release deletes the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_reenter_and_unlock_on_every_master() {
    let cluster = start_cluster();
    let client = connect(&cluster, Duration::from_secs(5)).await;
    let prefix = common::prefix("cluster-basic");
    let spread = cluster.keys_per_master(&prefix, 2);
    let mut names = Vec::new();

    for (node, keys) in &spread {
        for name in keys {
            names.push(name.clone());
            assert_eq!(cluster.node_for_key(name).port(), node.port());
            let lock = client.lock(name.as_str());
            let outer = lock.lock().await.unwrap();
            let field = field_of(&client, &outer);
            assert_eq!(
                raw_holds(node, name, &field),
                1,
                "{name} on {}",
                node.port()
            );
            let pttl = raw_pttl(node, name);
            assert!(0 < pttl && pttl <= 5_000, "{name}: PTTL {pttl}");

            let inner = lock.lock().await.unwrap();
            assert_eq!(raw_holds(node, name, &field), 2, "{name}: re-entry");
            assert_eq!(lock.hold_count().await.unwrap(), 2);
            assert!(lock.is_locked().await.unwrap());
            assert!(lock.is_held_by_current_owner().await.unwrap());
            assert_eq!(client.stats().holds, 1);
            assert_eq!(client.stats().renewing, 1);

            inner.unlock().await.unwrap();
            assert_eq!(raw_holds(node, name, &field), 1, "{name}: one hold left");
            assert!(raw_pttl(node, name) > 0);
            outer.unlock().await.unwrap();
            assert!(
                !raw_exists(node, name),
                "{name}: the last release deletes it"
            );
            assert!(!lock.is_locked().await.unwrap());
            assert_eq!(lock.hold_count().await.unwrap(), 0);
            assert!(lock.remaining_lease().await.unwrap() == relock::RemainingLease::Unlocked);

            // A fixed lease lands on the same master with that lease.
            let fixed = lock
                .lock_with_lease(Duration::from_millis(1500))
                .await
                .unwrap();
            let pttl = raw_pttl(node, name);
            assert!(0 < pttl && pttl <= 1_500, "{name}: fixed-lease PTTL {pttl}");
            assert_eq!(raw_holds(node, name, &field_of(&client, &fixed)), 1);
            fixed.unlock().await.unwrap();
            assert!(!raw_exists(node, name));
        }
    }

    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(names.len(), 6);
    faults::assert_no_leaks_cluster(&cluster, &[&client], &names).await;
    client.shutdown().await.unwrap();
}

/// (a) Mutual exclusion on every master at once: 3 tasks in each of two clients take turns on one
/// name per master; the lost-update register is exact and no two sections overlap. Then
/// `try_lock` on a held name gives `Ok(None)` to the other client and to another task of the
/// holder's client, and `try_lock_for` gives up after its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_and_try_lock_contention_on_every_master() {
    const TASKS_PER_CLIENT: usize = 3;
    const ROUNDS: u64 = 20;
    let (cluster, clients, prefix) = setup("cluster-mutex", Duration::from_secs(5)).await;
    let spread = one_per_master(&cluster, &prefix);

    let started = Instant::now();
    let mut checkers = Vec::new();
    let mut workers = Vec::new();
    for (_, name) in &spread {
        let register = Arc::new(Register::default());
        let overlaps = Arc::new(Overlaps::default());
        checkers.push((name.clone(), register.clone(), overlaps.clone()));
        for (c, client) in clients.iter().enumerate() {
            for t in 0..TASKS_PER_CLIENT {
                let lock = client.lock(name.as_str());
                let (register, overlaps) = (register.clone(), overlaps.clone());
                let who = format!("client{c}-task{t}");
                workers.push(tokio::spawn(async move {
                    for _ in 0..ROUNDS {
                        let guard = lock.lock().await.unwrap();
                        critical_section(&register, &overlaps, &who, THINK).await;
                        guard.unlock().await.unwrap();
                    }
                }));
            }
        }
    }
    for worker in workers {
        timeout(Duration::from_secs(40), worker)
            .await
            .expect("a worker hung")
            .expect("a worker failed");
    }
    eprintln!("contended rounds on 3 masters took {:?}", started.elapsed());
    let sections = ROUNDS * (2 * TASKS_PER_CLIENT) as u64;
    for (name, register, overlaps) in &checkers {
        register.assert_exact(sections);
        assert_eq!(overlaps.len() as u64, sections, "{name}");
        overlaps.assert_none();
    }

    // try_lock contention, on every master.
    let [a, b] = &clients;
    for (node, name) in &spread {
        let guard = a.lock(name.as_str()).lock().await.unwrap();
        assert_eq!(raw_holds(node, name, &field_of(a, &guard)), 1);
        assert!(
            b.lock(name.as_str()).try_lock().await.unwrap().is_none(),
            "{name}: the other client took a held lock"
        );
        let same_client = {
            let lock = a.lock(name.as_str());
            tokio::spawn(async move { lock.try_lock().await.unwrap().is_none() })
        };
        assert!(
            same_client.await.unwrap(),
            "{name}: another task of the holder's client took it"
        );
        let tried = Instant::now();
        let none = b
            .lock(name.as_str())
            .try_lock_for(Duration::from_millis(300), None)
            .await
            .unwrap();
        assert!(none.is_none(), "{name}: try_lock_for took a held lock");
        assert!(tried.elapsed() >= Duration::from_millis(290));
        assert_eq!(b.stats().waiters, 0);

        guard.unlock().await.unwrap();
        let taken = b.lock(name.as_str()).try_lock().await.unwrap();
        let taken = taken.expect("a free lock is taken by try_lock");
        assert_eq!(raw_holds(node, name, &field_of(b, &taken)), 1);
        taken.unlock().await.unwrap();
    }

    let names: Vec<&str> = spread.iter().map(|(_, n)| n.as_str()).collect();
    faults::assert_no_leaks_cluster(&cluster, &[&clients[0], &clients[1]], &names).await;
    for client in &clients {
        client.shutdown().await.unwrap();
    }
}

/// (a) Waiters on a name on each master, parked at once behind 20 s leases: each channel is
/// shard-subscribed on its own master (and on no node as a classic channel; on Redis 6, classic)
/// while they wait; a release, a `force_unlock` and a dropped guard each wake their waiter
/// within 5 s, and each channel's subscription is gone once its waiter is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_and_force_unlock_wake_cluster_waiters_promptly() {
    let (cluster, [holder, waiting], prefix) = setup("cluster-wake", Duration::from_secs(5)).await;
    let spread = one_per_master(&cluster, &prefix);
    let names: Vec<&str> = spread.iter().map(|(_, n)| n.as_str()).collect();

    let mut holds = Vec::new();
    for name in &names {
        holds.push(holder.lock(*name).lock_with_lease(LONG).await.unwrap());
    }
    let mut waiters: Vec<_> = names
        .iter()
        .map(|name| Some(common::spawn_waiter(waiting.lock(*name))))
        .collect();
    until_subscribed(&cluster, &waiting, &names, 3).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        waiters.iter().flatten().all(|w| !w.is_finished()),
        "a waiter got a held lock"
    );
    let mut holds = holds.into_iter();

    // 1. An explicit release on the first master.
    let released = Instant::now();
    holds.next().unwrap().unlock().await.unwrap();
    let guard = common::woken_promptly(waiters[0].take().unwrap(), released, "unlock").await;
    let (node, name) = &spread[0];
    assert_eq!(raw_holds(node, name, &field_of(&waiting, &guard)), 1);
    assert!(waiters.iter().flatten().all(|w| !w.is_finished()));
    guard.unlock().await.unwrap();
    until_unsubscribed(&cluster, name).await;
    until_subscribed(&cluster, &waiting, &names[1..], 2).await;

    // 2. force_unlock on the second master, from a handle of the waiting client.
    let held = holds.next().unwrap();
    let released = Instant::now();
    assert!(waiting.lock(names[1]).force_unlock().await.unwrap());
    let guard = common::woken_promptly(waiters[1].take().unwrap(), released, "force_unlock").await;
    let (node, name) = &spread[1];
    assert_eq!(raw_holds(node, name, &field_of(&waiting, &guard)), 1);
    assert_eq!(raw_holds(node, name, &field_of(&holder, &held)), 0);
    let err = held.unlock().await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
    guard.unlock().await.unwrap();
    until_unsubscribed(&cluster, name).await;

    // 3. A guard dropped on the third master: its background release wakes the waiter too.
    let released = Instant::now();
    drop(holds.next().unwrap());
    let guard = common::woken_promptly(waiters[2].take().unwrap(), released, "drop").await;
    guard.unlock().await.unwrap();
    until_unsubscribed(&cluster, &spread[2].1).await;

    faults::assert_no_leaks_cluster(&cluster, &[&holder, &waiting], &names).await;
    holder.shutdown().await.unwrap();
    waiting.shutdown().await.unwrap();
}

/// (b) Names with the hash tag `{order}` keep the lock hash, channel and replay keys in the tag's
/// slot: they land on the tag's master, re-enter, exclude, and their waiters (two channels of one
/// slot, subscribed together) are woken by releases. A name whose braces would split its keys
/// over slots is rejected with InvalidArgument by every operation, before any I/O.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_tagged_names_stay_on_the_tag_slot_and_split_braces_are_rejected() {
    // The cluster is this test's own, so the tag can be exactly `{order}`: no prefix.
    let (cluster, [holder, waiting], _) = setup("cluster-tags", Duration::from_secs(5)).await;
    let names = ["{order}:1", "{order}:2"];
    let node = cluster.node_for_key("order");
    let slot = Cluster::keyslot("order");
    for name in names {
        assert_eq!(Cluster::keyslot(name), slot);
        assert_eq!(Cluster::keyslot(&lock_channel(name)), slot);
    }

    let lock1 = holder.lock(names[0]);
    let first = lock1.lock_with_lease(LONG).await.unwrap();
    let again = lock1.lock_with_lease(LONG).await.unwrap();
    let second = holder.lock(names[1]).lock_with_lease(LONG).await.unwrap();
    let field = field_of(&holder, &first);
    assert_eq!(raw_holds(node, names[0], &field), 2, "re-entry on a tag");
    assert_eq!(raw_holds(node, names[1], &field_of(&holder, &second)), 1);
    for other in cluster.nodes().iter().filter(|n| n.port() != node.port()) {
        let reply = other.cmd(&["HGET", names[0], &field]);
        assert!(
            reply.starts_with(&format!("-MOVED {slot} ")),
            "node {} answered {reply:?}",
            other.port()
        );
    }
    assert!(waiting.lock(names[0]).try_lock().await.unwrap().is_none());
    assert!(waiting.lock(names[1]).try_lock().await.unwrap().is_none());

    let waiter1 = common::spawn_waiter(waiting.lock(names[0]));
    let waiter2 = common::spawn_waiter(waiting.lock(names[1]));
    until_subscribed(&cluster, &waiting, &names, 2).await;
    assert_eq!(waiting.stats().channels, 2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter1.is_finished() && !waiter2.is_finished());

    again.unlock().await.unwrap();
    assert_eq!(raw_holds(node, names[0], &field), 1);
    let released = Instant::now();
    first.unlock().await.unwrap();
    let guard1 = common::woken_promptly(waiter1, released, "{order}:1").await;
    assert_eq!(raw_holds(node, names[0], &field_of(&waiting, &guard1)), 1);
    assert!(!waiter2.is_finished());
    let released = Instant::now();
    second.unlock().await.unwrap();
    let guard2 = common::woken_promptly(waiter2, released, "{order}:2").await;
    assert_eq!(raw_holds(node, names[1], &field_of(&waiting, &guard2)), 1);
    guard1.unlock().await.unwrap();
    guard2.unlock().await.unwrap();
    for name in names {
        until_unsubscribed(&cluster, name).await;
        assert!(!raw_exists(node, name));
    }

    // Braces that would put the lock hash and its channel in different slots.
    for bad in ["a{b", "x{}y", "}{", "user{42"] {
        let lock = holder.lock(bad);
        let errors = [
            lock.lock().await.map(drop).unwrap_err(),
            lock.try_lock().await.map(drop).unwrap_err(),
            lock.lock_with_lease(LONG).await.map(drop).unwrap_err(),
            lock.try_lock_for(Duration::from_millis(100), None)
                .await
                .map(drop)
                .unwrap_err(),
            lock.force_unlock().await.map(drop).unwrap_err(),
            lock.is_locked().await.map(drop).unwrap_err(),
            lock.hold_count().await.map(drop).unwrap_err(),
        ];
        for err in errors {
            assert!(err.is_invalid_argument(), "{bad}: {err}");
        }
        let sem = holder.semaphore(bad).try_set_permits(1).await.unwrap_err();
        assert!(sem.is_invalid_argument(), "{bad}: {sem}");
        let permits = holder
            .permit_semaphore(bad)
            .try_acquire()
            .await
            .unwrap_err();
        assert!(permits.is_invalid_argument(), "{bad}: {permits}");
        let latch = holder
            .count_down_latch(bad)
            .try_set_count(1)
            .await
            .unwrap_err();
        assert!(latch.is_invalid_argument(), "{bad}: {latch}");
        assert!(
            !raw_exists(cluster.node_for_key(bad), bad),
            "{bad} was written"
        );
    }
    assert_eq!(holder.stats().holds, 0);
    assert_eq!(holder.stats().waiters, 0);

    faults::assert_no_leaks_cluster(&cluster, &[&holder, &waiting], &names).await;
    holder.shutdown().await.unwrap();
    waiting.shutdown().await.unwrap();
}

/// (c) The watchdog on a cluster: 30 watchdog locks (24 plain names spread over the three
/// masters and 6 sharing one `{tag}` slot, renewed in batches of 4) with a 900 ms watchdog are
/// held for three leases. Every lock stays on its master with a positive PTTL, no `lost()` fires,
/// every master ran renewals, and no node ever answered CROSSSLOT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_renews_locks_on_every_master_per_slot() {
    const LEASE: Duration = Duration::from_millis(900);
    let cluster = start_cluster();
    let client = connect::connected(cluster_config(&cluster, LEASE).with_renewal_batch(4)).await;
    let prefix = common::prefix("cluster-watchdog");
    let mut names: Vec<String> = cluster
        .keys_per_master(&prefix, 8)
        .into_iter()
        .flat_map(|(_, keys)| keys)
        .collect();
    names.extend((0..6).map(|i| format!("{{{prefix}-tag}}:{i}")));
    assert_eq!(names.len(), 30);

    let mut guards = Vec::new();
    for name in &names {
        guards.push(client.lock(name.as_str()).lock().await.unwrap());
    }
    assert_eq!(client.stats().renewing, 30);
    let fields: Vec<String> = guards.iter().map(|g| field_of(&client, g)).collect();
    let calls_before: Vec<u64> = cluster
        .nodes()
        .iter()
        .map(common::raw_script_calls)
        .collect();

    let held_for = LEASE * 3;
    let lost = futures::future::select_all(guards.iter().map(LockGuard::lost));
    let watch = async {
        let until = Instant::now() + held_for;
        let mut lowest = i64::MAX;
        while Instant::now() < until {
            for name in &names {
                let pttl = raw_pttl(cluster.node_for_key(name), name);
                assert!(pttl > 0, "{name} expired or vanished (PTTL {pttl})");
                lowest = lowest.min(pttl);
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        lowest
    };
    let lowest = tokio::select! {
        (_, i, _) = lost => panic!("the watchdog lost {}", names[i]),
        lowest = watch => lowest,
    };
    eprintln!("lowest PTTL seen over {held_for:?}: {lowest} ms");
    for ((name, field), guard) in names.iter().zip(&fields).zip(&guards) {
        let node = cluster.node_for_key(name);
        assert_eq!(raw_holds(node, name, field), 1, "{name}");
        assert!(raw_pttl(node, name) > 0, "{name}");
        assert!(!guard.is_lost(), "{name}");
    }
    for (node, before) in cluster.nodes().iter().zip(calls_before) {
        let ran = common::raw_script_calls(node) - before;
        assert!(ran >= 16, "node {} ran only {ran} scripts", node.port());
        assert_eq!(
            topology::error_count(node, "CROSSSLOT"),
            0,
            "node {} answered CROSSSLOT",
            node.port()
        );
    }

    for guard in guards {
        guard.unlock().await.unwrap();
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    faults::assert_no_leaks_cluster(&cluster, &[&client], &names).await;
    client.shutdown().await.unwrap();
}

/// (f) The fair lock on a cluster: its scripts keep the lock, queue and deadlines in one slot on
/// every master, a release `SPUBLISH`es on the first waiter's own shard channel and wakes it
/// (its renewal timer is 10 s, its holder's lease 20 s), and waiters are served in queue order.
/// The spin lock takes and releases on every master without subscribing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_and_spin_locks_on_every_master() {
    let (cluster, [holder, waiting], prefix) = setup("cluster-fair", Duration::from_secs(5)).await;
    for (node, name) in one_per_master(&cluster, &prefix) {
        let held = holder.fair_lock(&name).lock_with_lease(LONG).await.unwrap();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..3 {
            let lock = waiting.fair_lock(&name).owned_by(relock::Owner::new());
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let guard = timeout(Duration::from_secs(15), lock.lock())
                    .await
                    .expect("a fair waiter hung")
                    .unwrap();
                order.lock().unwrap().push(i);
                (Instant::now(), guard)
            }));
            let queue = common::fair_queue_key(&name);
            assert!(
                eventually(Duration::from_secs(10), || async {
                    common::raw_lrange(node, &queue).len() == i + 1
                })
                .await,
                "waiter {i} never queued on node {}",
                node.port()
            );
        }
        let released = Instant::now();
        held.unlock().await.unwrap();
        for task in tasks {
            let (acquired, guard) = task.await.unwrap();
            let waited = acquired.saturating_duration_since(released);
            assert!(
                waited < Duration::from_secs(5),
                "a fair waiter got the lock {waited:?} after the release: no message woke it"
            );
            guard.unlock().await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2]);
        assert!(!raw_exists(node, &common::fair_queue_key(&name)));
        assert!(!raw_exists(node, &common::fair_timeout_key(&name)));
        assert!(!raw_exists(node, &common::fair_alive_key(&name)));

        let spin = waiting.spin_lock(&name);
        let guard = spin.lock().await.unwrap();
        assert_eq!(raw_holds(node, &name, &field_of(&waiting, &guard)), 1);
        assert!(holder.spin_lock(&name).try_lock().await.unwrap().is_none());
        guard.unlock().await.unwrap();
        assert!(!raw_exists(node, &name));
    }
    idle_then_shut_down(&[&holder, &waiting]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_and_fenced_locks_on_every_master() {
    let watchdog = Duration::from_millis(900);
    let (cluster, [reader, writer], prefix) = setup("cluster-rw", watchdog).await;
    // A name with its own tag keeps every reader timeout key on the tag's slot too.
    let mut names = one_per_master(&cluster, &prefix);
    let tagged = format!("{{{prefix}-tag}}:rw");
    let tagged_node = cluster.node_for_key(&tagged);
    names.push((tagged_node, tagged));
    for (node, name) in names {
        let read = reader.rw_lock(&name).read().lock().await.unwrap();
        let field = field_of(&reader, &read);
        let timeout_key = format!("{}:{field}:rwlock_timeout:1", hash_tag(&name));
        assert!(
            raw_exists(node, &timeout_key),
            "no timeout key on node {}",
            node.port()
        );
        let waiting = {
            let lock = writer.rw_lock(&name).write();
            tokio::spawn(async move { timeout(Duration::from_secs(20), lock.lock()).await })
        };
        // The reader outlives its watchdog timeout twice: renewed per slot, timeout key and all.
        tokio::time::sleep(watchdog * 2).await;
        assert!(!read.is_lost(), "the reader's lease was not renewed");
        assert!(raw_exists(node, &timeout_key));
        assert!(
            !waiting.is_finished(),
            "the writer got in past a live reader"
        );
        let released = Instant::now();
        read.unlock().await.unwrap();
        let write = waiting.await.unwrap().expect("the writer hung").unwrap();
        let waited = released.elapsed();
        assert!(
            waited < Duration::from_secs(5),
            "the writer got the lock {waited:?} after the reader left: no message woke it"
        );
        assert!(!raw_exists(node, &timeout_key));
        write.unlock().await.unwrap();
        assert!(!raw_exists(node, &name));

        let fenced = reader.fenced_lock(&name);
        let first = fenced.lock().await.unwrap().token();
        let second = writer.fenced_lock(&name).lock().await.unwrap();
        assert!(second.token() > first);
        let token_key = common::braced("redisson_lock_token", &name);
        assert!(
            raw_exists(node, &token_key),
            "the token counter is not on the lock's node"
        );
        second.unlock().await.unwrap();
    }
    idle_then_shut_down(&[&reader, &writer]).await;
}

/// How far the shadow lease's PTTL is ahead of the lock's, read between two reads of the shadow
/// that show no renewal came between them (a renewal sets both in one script; the watchdog
/// renews a hold a third of its lease after the last renewal, so a read a whole lease after the
/// acquire meets one).
fn shadow_gap(node: &RedisServer, shadow: &str, lock: &str) -> i64 {
    for _ in 0..20 {
        let before = raw_pttl(node, shadow);
        let held = raw_pttl(node, lock);
        let after = raw_pttl(node, shadow);
        if after <= before {
            return (before + after) / 2 - held;
        }
    }
    panic!("{lock}: a renewal between every two reads of its shadow");
}

/// Lock-delay on every master, for a `Lock` and a `FairLock`: the shadow lease lands in the lock's
/// slot (acquire, watchdog renewal per slot, release: never CROSSSLOT), a lapsed lock is delayed
/// until the shadow expires, and a clean unlock leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_on_every_master() {
    let watchdog = Duration::from_millis(900);
    let delay = Duration::from_millis(1500);
    // The lapser's holds lapse (never unlocked): kept apart from the leak check's client.
    let (cluster, [client, lapser], prefix) = setup("cluster-delay", watchdog).await;
    let mut names = Vec::new();
    for (node, name) in one_per_master(&cluster, &prefix) {
        for fair in [false, true] {
            let name = if fair {
                format!("{name}:fair")
            } else {
                name.clone()
            };
            let node = if fair {
                cluster.node_for_key(&name)
            } else {
                node
            };
            names.push(name.clone());
            let shadow = format!("relock_lease:{{{name}}}");
            let (lock, fair_lock) = (
                client.lock(name.as_str()).with_lock_delay(delay).unwrap(),
                client
                    .fair_lock(name.as_str())
                    .with_lock_delay(delay)
                    .unwrap(),
            );
            // A watchdog hold past a renewal: the shadow stays the delay ahead of the lock.
            let guard = if fair {
                fair_lock.lock().await
            } else {
                lock.lock().await
            }
            .unwrap();
            tokio::time::sleep(watchdog).await;
            let gap = shadow_gap(node, &shadow, &name);
            assert!(
                (gap - 1500).abs() <= 20,
                "{name}: the shadow is {gap} ms ahead"
            );
            guard.unlock().await.unwrap();
            assert!(
                !raw_exists(node, &shadow),
                "{name}: a clean unlock deletes the shadow"
            );

            // A hold that lapses (never unlocked): delayed until the shadow expires.
            let lease = Duration::from_millis(300);
            let held = if fair {
                let lapsing = lapser
                    .fair_lock(name.as_str())
                    .with_lock_delay(delay)
                    .unwrap();
                lapsing.lock_with_lease(lease).await
            } else {
                let lapsing = lapser.lock(name.as_str()).with_lock_delay(delay).unwrap();
                lapsing.lock_with_lease(lease).await
            };
            std::mem::forget(held.unwrap());
            let gone = eventually(Duration::from_secs(3), || {
                let gone = !raw_exists(node, &name);
                async move { gone }
            });
            assert!(gone.await, "{name}: the lease ran out");
            let shadow_left = raw_pttl(node, &shadow);
            let read_at = Instant::now();
            assert!(shadow_left > 0, "{name}: delayed");
            let left = if fair {
                fair_lock.lock_delay_left().await
            } else {
                lock.lock_delay_left().await
            };
            assert!(left.unwrap().is_some(), "{name}: lock_delay_left");
            let wait = Duration::from_secs(5);
            let guard = if fair {
                fair_lock.try_lock_for(wait, None).await
            } else {
                lock.try_lock_for(wait, None).await
            };
            let guard = guard.unwrap().expect("taken once the delay ends");
            assert!(
                read_at.elapsed() + Duration::from_millis(20)
                    >= Duration::from_millis(shadow_left as u64)
            );
            guard.unlock().await.unwrap();
            assert!(!raw_exists(node, &shadow));
        }
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    faults::assert_no_leaks_cluster(&cluster, &[&client], &names).await;
    client.shutdown().await.unwrap();
    lapser.shutdown().await.unwrap();
}
