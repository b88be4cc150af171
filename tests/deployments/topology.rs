//! The multi-process topologies of the test harness come up for real: a replica pair links and
//! replicates, a cluster covers all 16384 slots on every node, three Sentinels agree on the
//! primary and a failover really moves it; and a plain fred client reaches each topology through
//! its URL.

use crate::common;

use std::time::{Duration, Instant};

use common::topology::{self, Cluster, ReplicaPair, Sentinels, SLOTS};
use common::{parse_resp, RedisServer, Resp};
use fred::interfaces::{ClientLike, KeysInterface};

/// A fred client for `url`, reconnecting forever every 100 ms, connected.
async fn fred_client(url: &str) -> fred::clients::Client {
    let config = fred::types::config::Config::from_url(url)
        .unwrap_or_else(|e| panic!("fred rejects the URL {url}: {e:?}"));
    let client = fred::types::Builder::from_config(config)
        .set_policy(fred::types::config::ReconnectPolicy::new_constant(0, 100))
        .build()
        .expect("build fred client");
    tokio::time::timeout(Duration::from_secs(10), client.init())
        .await
        .unwrap_or_else(|_| panic!("fred did not connect through {url} within 10 s"))
        .unwrap_or_else(|e| panic!("fred could not connect through {url}: {e:?}"));
    client
}

/// The value of `key` on `server`, read with a raw `GET`.
fn raw_get(server: &RedisServer, key: &str) -> Option<String> {
    match parse_resp(server.cmd(&["GET", key]).as_bytes()) {
        Some((Resp::Bulk(value), _)) => value,
        other => panic!("unexpected GET reply {other:?}"),
    }
}

/// The integer of a raw `:<n>` reply.
fn int(reply: &str) -> i64 {
    match parse_resp(reply.as_bytes()) {
        Some((Resp::Int(n), _)) => n,
        other => panic!("not an integer reply: {reply:?} ({other:?})"),
    }
}

/// `CLUSTER INFO` of `server` as field → value.
fn cluster_info(server: &RedisServer) -> std::collections::BTreeMap<String, String> {
    let reply = server.cmd(&["CLUSTER", "INFO"]);
    reply
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

fn assert_cluster_whole(cluster: &Cluster, masters: usize) {
    for node in cluster.nodes() {
        let info = cluster_info(node);
        assert_eq!(info["cluster_state"], "ok", "node {}", node.port());
        assert_eq!(info["cluster_slots_assigned"], SLOTS.to_string());
        assert_eq!(info["cluster_slots_ok"], SLOTS.to_string());
        assert_eq!(info["cluster_known_nodes"], masters.to_string());
        assert_eq!(info["cluster_size"], masters.to_string());
    }
    let slots = cluster.slots();
    let mut next = 0u16;
    for &(first, last, _) in &slots {
        assert_eq!(first, next, "slot map has a gap or overlap: {slots:?}");
        next = last + 1;
    }
    assert_eq!(
        next, SLOTS,
        "slot map does not reach the last slot: {slots:?}"
    );
    let mut owners: Vec<u16> = slots.iter().map(|&(_, _, port)| port).collect();
    owners.sort_unstable();
    owners.dedup();
    assert_eq!(owners, {
        let mut ports = cluster.ports();
        ports.sort_unstable();
        ports
    });
}

#[test]
fn replica_pair_links_replicates_and_promotes() {
    let started = Instant::now();
    let pair = ReplicaPair::start();
    eprintln!("replica pair up in {:?}", started.elapsed());
    let (p, r) = (pair.primary().port(), pair.replica().port());
    let rep = topology::replication_info(r).expect("replica answers");
    assert_eq!(rep["role"], "slave");
    assert_eq!(rep["master_port"], p.to_string());
    assert_eq!(rep["master_link_status"], "up");
    let pri = topology::replication_info(p).expect("primary answers");
    assert_eq!(pri["role"], "master");
    assert_eq!(pri["connected_slaves"], "1");

    assert!(pair.primary().cmd(&["SET", "k", "v"]).starts_with("+OK"));
    // WAIT 1 replica, 5 s: the write reached the replica.
    assert_eq!(int(&pair.primary().cmd(&["WAIT", "1", "5000"])), 1);
    assert_eq!(raw_get(pair.replica(), "k").as_deref(), Some("v"));
    assert!(pair
        .replica()
        .cmd(&["SET", "k", "w"])
        .starts_with("-READONLY"));

    pair.promote_replica();
    assert_eq!(topology::role(r).as_deref(), Some("master"));
    assert!(pair.replica().cmd(&["SET", "k", "w"]).starts_with("+OK"));
    assert_eq!(raw_get(pair.replica(), "k").as_deref(), Some("w"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_pair_fred_writes_primary_reads_replica() {
    let pair = ReplicaPair::start();
    let primary = fred_client(&pair.primary().url()).await;
    let replica = fred_client(&pair.replica().url()).await;
    let () = primary
        .set("fred-key", "1", None, None, false)
        .await
        .unwrap();
    let mut seen = None;
    for _ in 0..250 {
        seen = replica.get::<Option<String>, _>("fred-key").await.unwrap();
        if seen.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen.as_deref(), Some("1"));
    primary.quit().await.unwrap();
    replica.quit().await.unwrap();
}

#[test]
fn cluster_of_three_covers_all_slots_on_every_node() {
    let started = Instant::now();
    let cluster = Cluster::start(3);
    eprintln!("3-master cluster up in {:?}", started.elapsed());
    assert_cluster_whole(&cluster, 3);

    // node_for_key routes for real: the owner takes the write, another node answers MOVED.
    for key in ["a", "b", "c", "lock:{x}", "lock:{y}"] {
        let owner = cluster.node_for_key(key);
        let slot = Cluster::keyslot(key);
        assert_eq!(
            int(&owner.cmd(&["CLUSTER", "KEYSLOT", key])),
            i64::from(slot)
        );
        assert!(owner.cmd(&["SET", key, "v"]).starts_with("+OK"));
        for other in cluster.nodes().iter().filter(|n| n.port() != owner.port()) {
            let reply = other.cmd(&["GET", key]);
            assert!(
                reply.starts_with(&format!("-MOVED {slot} 127.0.0.1:{}", owner.port())),
                "{reply:?}"
            );
        }
    }

    // keys_per_master: 4 keys per master, each really owned by that master.
    let spread = cluster.keys_per_master("spread", 4);
    assert_eq!(spread.len(), 3);
    for (node, keys) in &spread {
        assert_eq!(keys.len(), 4);
        for key in keys {
            assert_eq!(cluster.node_for_key(key).port(), node.port());
            assert!(node.cmd(&["SET", key, "v"]).starts_with("+OK"), "{key}");
        }
    }
}

#[test]
fn cluster_of_one_and_two_masters_cover_all_slots() {
    for masters in [1, 2] {
        let started = Instant::now();
        let cluster = Cluster::start(masters);
        eprintln!("{masters}-master cluster up in {:?}", started.elapsed());
        assert_cluster_whole(&cluster, masters);
        let spread = cluster.keys_per_master("k", 2);
        assert_eq!(spread.len(), masters);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_fred_set_get_through_url() {
    let cluster = Cluster::start(3);
    let url = cluster.url();
    assert!(url.starts_with("redis-cluster://127.0.0.1:"), "{url}");
    let client = fred_client(&url).await;
    for (node, keys) in cluster.keys_per_master("fred", 3) {
        for key in keys {
            let () = client
                .set(&key, node.port(), None, None, false)
                .await
                .unwrap();
            let got: u16 = client.get(&key).await.unwrap();
            assert_eq!(got, node.port());
            // The value landed on the master that owns the key.
            assert_eq!(raw_get(node, &key), Some(node.port().to_string()));
        }
    }
    client.quit().await.unwrap();
}

#[test]
fn sentinels_agree_on_primary_replica_and_each_other() {
    let started = Instant::now();
    let sentinels = Sentinels::start();
    eprintln!("sentinel topology up in {:?}", started.elapsed());
    let primary = sentinels.servers()[0].port();
    assert_eq!(sentinels.primary_port(), primary);
    assert_eq!(sentinels.primary().port(), primary);
    assert_eq!(sentinels.replica().port(), sentinels.servers()[1].port());
    for s in sentinels.sentinels() {
        assert_eq!(s.primary_port(), Some(primary));
        let state = s.master_state().expect("SENTINEL MASTER");
        assert_eq!(state["flags"], "master");
        assert_eq!(state["num-slaves"], "1");
        assert_eq!(state["num-other-sentinels"], "2");
        assert_eq!(state["quorum"], "2");
    }
    assert_eq!(topology::role(primary).as_deref(), Some("master"));
}

#[test]
fn sentinel_failover_moves_the_primary_and_back() {
    let sentinels = Sentinels::start();
    let first = sentinels.primary_port();
    assert!(sentinels
        .primary()
        .cmd(&["SET", "k", "before"])
        .starts_with("+OK"));
    assert_eq!(int(&sentinels.primary().cmd(&["WAIT", "1", "5000"])), 1);

    let started = Instant::now();
    let second = sentinels.failover();
    eprintln!("sentinel failover took {:?}", started.elapsed());
    assert_ne!(second, first);
    assert_eq!(sentinels.primary_port(), second);
    for s in sentinels.sentinels() {
        assert_eq!(s.primary_port(), Some(second));
    }
    assert_eq!(topology::role(second).as_deref(), Some("master"));
    // The data survived, and the new primary takes writes.
    assert_eq!(
        raw_get(sentinels.server(second), "k").as_deref(),
        Some("before")
    );
    assert!(sentinels
        .server(second)
        .cmd(&["SET", "k", "after"])
        .starts_with("+OK"));

    // The Sentinels turn the old primary into a replica of the new one on their own.
    let started = Instant::now();
    sentinels.converge(Duration::from_secs(40));
    eprintln!(
        "sentinels converged {:?} after the failover",
        started.elapsed()
    );
    let old = topology::replication_info(first).expect("old primary answers");
    assert_eq!(old["role"], "slave");
    assert_eq!(old["master_port"], second.to_string());
    assert_eq!(old["master_link_status"], "up");

    // And back again, converging at once this time.
    let started = Instant::now();
    let third = sentinels.failover();
    sentinels.demote_old_primary();
    eprintln!(
        "second failover + demote_old_primary took {:?}",
        started.elapsed()
    );
    assert_eq!(third, first);
    assert_eq!(topology::role(first).as_deref(), Some("master"));
    let old = topology::replication_info(second).expect("old primary answers");
    assert_eq!(old["role"], "slave");
    assert_eq!(old["master_port"], first.to_string());
    assert_eq!(old["master_link_status"], "up");
    assert_eq!(
        raw_get(sentinels.server(first), "k").as_deref(),
        Some("after")
    );
}

#[test]
fn sentinels_fail_over_when_the_primary_dies() {
    let mut sentinels = Sentinels::start();
    let started = Instant::now();
    let old = sentinels.kill_primary();
    let new = sentinels.wait_new_primary(old, Duration::from_secs(30));
    eprintln!("automatic failover after kill took {:?}", started.elapsed());
    assert_ne!(new, old);
    assert!(sentinels
        .server(new)
        .cmd(&["SET", "k", "v"])
        .starts_with("+OK"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_fred_set_get_through_url_and_after_failover() {
    let sentinels = Sentinels::start();
    let url = sentinels.url();
    assert!(url.starts_with("redis-sentinel://127.0.0.1:"), "{url}");
    let client = fred_client(&url).await;
    let () = client.set("k", "before", None, None, false).await.unwrap();
    let got: String = client.get("k").await.unwrap();
    assert_eq!(got, "before");
    let first = sentinels.primary_port();
    assert_eq!(
        raw_get(sentinels.server(first), "k").as_deref(),
        Some("before")
    );

    // At the Sentinels' own pace: fred writes to the new primary within 20 s.
    let second = tokio::task::block_in_place(|| sentinels.failover());
    assert_ne!(second, first);
    let primary = sentinels.server(second);
    write_reaches(
        &client,
        primary,
        "after",
        Duration::from_secs(20),
        "the failover",
    )
    .await;

    // Converged at once with demote_old_primary: fred follows within 5 s.
    let third = tokio::task::block_in_place(|| {
        sentinels.converge(Duration::from_secs(40));
        let third = sentinels.failover();
        sentinels.demote_old_primary();
        third
    });
    assert_eq!(third, first);
    let primary = sentinels.server(third);
    let after = "failover + demote_old_primary";
    write_reaches(&client, primary, "again", Duration::from_secs(5), after).await;
    client.quit().await.unwrap();
}

/// SETs `k` to `value` through `client` until the write shows on `primary` (read raw), within
/// `within`, and prints how long that took after `after`; then reads `value` back through
/// `client`.
async fn write_reaches(
    client: &fred::clients::Client,
    primary: &RedisServer,
    value: &str,
    within: Duration,
    after: &str,
) {
    let started = Instant::now();
    let took = loop {
        let attempt = tokio::time::timeout(
            Duration::from_secs(2),
            client.set::<(), _, _>("k", value, None, None, false),
        )
        .await;
        if matches!(attempt, Ok(Ok(()))) && raw_get(primary, "k").as_deref() == Some(value) {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "fred did not write to the primary {} within {within:?}; last attempt: {attempt:?}",
            primary.port()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("fred wrote to the new primary {took:?} after {after}");
    let got: String = client.get("k").await.unwrap();
    assert_eq!(got, value);
}
