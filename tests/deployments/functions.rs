//! relock's function library on a cluster and behind Sentinel: loaded on every master at
//! connect, loaded again on a master that lost it or took over a slot without it, and still
//! there on a replica that Sentinel promotes (libraries are replicated).

use crate::common;

use std::time::Duration;

use common::connect;
use common::topology::{Cluster, Sentinels};
use common::{raw_holds, RedisServer};
use relock::{Client, ScriptCalls};

/// Whether the test's server has functions (Redis 7.0 and later, Valkey).
fn has_functions() -> bool {
    relock::testing::server_version().map_or(true, |v| v.at_least(7, 0))
}

/// A client of `url` calling its scripts as functions, whatever `RELOCK_TEST_FUNCTIONS` says.
async fn connect(url: &str) -> Client {
    let config = connect::config(url, Duration::from_secs(3), Duration::from_secs(3));
    connect::connected(config.with_functions(true)).await
}

/// Whether `server` holds this build's library.
fn has_library(server: &RedisServer) -> bool {
    let list = server.cmd(&["FUNCTION", "LIST", "LIBRARYNAME", relock::library_name()]);
    list.contains(relock::library_name())
}

/// The bulk string of a raw reply (`$n\r\ntext\r\n`).
fn bulk(reply: &str) -> String {
    reply.lines().nth(1).unwrap_or_default().trim().to_owned()
}

/// Moves `slot`, with its keys, from `from` to `to`, as `redis-cli --cluster reshard` does,
/// telling every master of `cluster`.
fn move_slot(cluster: &Cluster, slot: u16, from: &RedisServer, to: &RedisServer) {
    let (from_id, to_id) = (
        bulk(&from.cmd(&["CLUSTER", "MYID"])),
        bulk(&to.cmd(&["CLUSTER", "MYID"])),
    );
    let slot = slot.to_string();
    let ok = |reply: String| assert!(reply.starts_with("+OK"), "{reply}");
    ok(to.cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]));
    ok(from.cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]));
    let keys = from.cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "1000"]);
    let keys: Vec<&str> = keys
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('*') && !line.starts_with('$'))
        .collect();
    if !keys.is_empty() {
        let port = to.port().to_string();
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend(keys.iter().copied());
        ok(from.cmd(&migrate));
    }
    for node in cluster.nodes() {
        ok(node.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_has_the_library_on_every_master_and_gets_it_again_where_it_went() {
    if !has_functions() {
        return;
    }
    let cluster = Cluster::start(3);
    let client = connect(&cluster.url()).await;
    assert_eq!(client.stats().scripts, ScriptCalls::Functions);
    for node in cluster.nodes() {
        assert!(has_library(node), "node {} lacks the library", node.port());
    }
    let prefix = common::prefix("cluster-functions");
    let per_master = cluster.keys_per_master(&prefix, 1);

    // A master that lost the library (as one that joined after the connect never had it).
    let (lost_on, names) = &per_master[0];
    assert!(lost_on.cmd(&["FUNCTION", "FLUSH"]).starts_with("+OK"));
    let before = client.stats().noscript_reloads;
    let guard = client.lock(names[0].as_str()).lock().await.unwrap();
    let field = connect::field_of(&client, &guard);
    assert_eq!(raw_holds(lost_on, &names[0], &field), 1);
    guard.unlock().await.unwrap();
    assert!(client.stats().noscript_reloads > before);
    assert!(has_library(lost_on));

    // A slot moved to a master without the library: the call follows the slot (MOVED) and
    // finds the function gone there.
    let (from, names) = &per_master[1];
    let (to, _) = &per_master[2];
    let name = names[0].as_str();
    let guard = client.lock(name).lock().await.unwrap();
    guard.unlock().await.unwrap();
    assert!(to.cmd(&["FUNCTION", "FLUSH"]).starts_with("+OK"));
    move_slot(&cluster, Cluster::keyslot(name), from, to);
    let before = client.stats().noscript_reloads;
    let guard = client.lock(name).lock().await.unwrap();
    let field = connect::field_of(&client, &guard);
    assert_eq!(raw_holds(to, name, &field), 1);
    let moved = from.cmd(&["EXISTS", name]);
    assert!(moved.starts_with("-MOVED"), "{moved}");
    guard.unlock().await.unwrap();
    assert!(!common::raw_exists(to, name));
    assert!(client.stats().noscript_reloads > before);
    assert!(has_library(to));
    client.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_has_the_library_and_calls_go_on() {
    if !has_functions() {
        return;
    }
    let sentinels = Sentinels::start();
    let client = connect(&sentinels.url()).await;
    assert_eq!(client.stats().scripts, ScriptCalls::Functions);
    let name = common::prefix("sentinel-functions");
    client
        .lock(&name)
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    assert!(has_library(sentinels.primary()));
    let replicated = common::eventually(Duration::from_secs(5), || async {
        has_library(sentinels.replica())
    });
    assert!(replicated.await, "the library never reached the replica");

    let new = tokio::task::block_in_place(|| {
        let new = sentinels.failover();
        sentinels.demote_old_primary();
        new
    });
    // Through the reconnect to the new primary, a lock and unlock go through there.
    let done = common::eventually(Duration::from_secs(20), || async {
        match client.lock(&name).try_lock().await {
            Ok(Some(guard)) => guard.unlock().await.is_ok(),
            _ => false,
        }
    });
    assert!(done.await, "no lock and unlock after the failover");
    assert!(has_library(sentinels.server(new)));
    assert_eq!(client.stats().scripts, ScriptCalls::Functions);
    client.shutdown().await.unwrap();
}
