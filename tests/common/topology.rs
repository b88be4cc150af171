//! Real multi-process Redis topologies for tests: a primary with a replica, a Redis Cluster of N
//! masters, and a primary/replica pair watched by three Sentinels.
//!
//! Everything listens on 127.0.0.1 on free ports. Every process is killed, and every temporary
//! directory (cluster node files, Sentinel config files) removed, when the topology is dropped.
//! Startup polls with short sleeps and bounded waits that panic with a clear message.

#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::server::{raw_command, RedisServer};
use super::{parse_resp, Resp};

/// How often the waits below poll.
const POLL: Duration = Duration::from_millis(20);

/// Polls `check` until it returns `Some`, or panics after `within` with `what` and the last
/// state `check` described through `last`.
fn wait_for<T>(within: Duration, what: &str, mut check: impl FnMut(&mut String) -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    let mut last = String::new();
    loop {
        if let Some(value) = check(&mut last) {
            return value;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {within:?} waiting for {what}; last seen: {last}");
        }
        std::thread::sleep(POLL);
    }
}

/// The `field:value` lines of an `INFO` or `CLUSTER INFO` reply sent to `port`, or `None` when
/// the server does not answer.
fn info(port: u16, args: &[&str]) -> Option<BTreeMap<String, String>> {
    let reply = raw_command(port, args).ok()?;
    let Some((Resp::Bulk(Some(text)), _)) = parse_resp(reply.as_bytes()) else {
        return None;
    };
    Some(
        text.lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
            .collect(),
    )
}

/// `INFO replication` of the server on `port`.
pub fn replication_info(port: u16) -> Option<BTreeMap<String, String>> {
    info(port, &["INFO", "replication"])
}

/// The `role` of the server on `port` (`master` or `slave`), if it answers.
pub fn role(port: u16) -> Option<String> {
    replication_info(port)?.remove("role")
}

fn text(value: &Resp) -> Option<String> {
    match value {
        Resp::Bulk(Some(s)) | Resp::Simple(s) => Some(s.clone()),
        Resp::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A temporary directory under `std::env::temp_dir()`, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(kind: &str) -> TempDir {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "relock-{kind}-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create temp dir {}: {e}", path.display()));
        TempDir(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---- Primary + replica ----

/// A primary and one replica (`--replicaof`), linked.
pub struct ReplicaPair {
    primary: RedisServer,
    replica: RedisServer,
}

impl ReplicaPair {
    /// Starts a primary and a replica of it, and waits until the replica's link is up and the
    /// primary counts it.
    pub fn start() -> ReplicaPair {
        // No 5 s wait for more replicas before a (diskless) full sync, on either side: the
        // replica syncs from the primary now, and the primary from it after a failover.
        let no_delay = ["--repl-diskless-sync-delay", "0"];
        let primary = RedisServer::start_with(&no_delay);
        let port = primary.port().to_string();
        let replica = RedisServer::start_with(
            &[&no_delay[..], &["--replicaof", "127.0.0.1", &port]].concat(),
        );
        let pair = ReplicaPair { primary, replica };
        pair.wait_linked(Duration::from_secs(10));
        // "Linked" is not yet "online": until the primary lists the replica as online, a WAIT
        // answers 0.
        pair.wait_in_sync(Duration::from_secs(10));
        pair
    }

    /// Waits until the replica reports `master_link_status:up` and the primary
    /// `connected_slaves:1`.
    pub fn wait_linked(&self, within: Duration) {
        wait_linked(&self.primary, &self.replica, within);
    }

    /// The server started as the primary.
    pub fn primary(&self) -> &RedisServer {
        &self.primary
    }

    /// The server started as the primary, mutably (to kill or restart it).
    pub fn primary_mut(&mut self) -> &mut RedisServer {
        &mut self.primary
    }

    /// The server started as the replica.
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// The server started as the replica, mutably (to kill or restart it).
    pub fn replica_mut(&mut self) -> &mut RedisServer {
        &mut self.replica
    }

    /// Sends `REPLICAOF NO ONE` to the replica and waits until it reports `role:master`. The old
    /// primary keeps running as a (now unrelated) primary.
    pub fn promote_replica(&self) {
        let reply = self.replica.cmd(&["REPLICAOF", "NO", "ONE"]);
        assert!(
            reply.starts_with("+OK"),
            "REPLICAOF NO ONE failed: {reply:?}"
        );
        let port = self.replica.port();
        wait_for(
            Duration::from_secs(5),
            "the replica to become a master",
            |last| {
                let role = role(port);
                *last = format!("{role:?}");
                (role.as_deref() == Some("master")).then_some(())
            },
        );
    }

    fn into_servers(self) -> (RedisServer, RedisServer) {
        (self.primary, self.replica)
    }
}

/// Waits until `replica` reports its link to `primary` up and `primary` counts one replica.
fn wait_linked(primary: &RedisServer, replica: &RedisServer, within: Duration) {
    let (p, r) = (primary.port(), replica.port());
    wait_for(
        within,
        &format!("replica {r} to link to primary {p}"),
        |last| {
            let rep = replication_info(r)?;
            let pri = replication_info(p)?;
            *last = format!(
                "replica role={:?} master_port={:?} link={:?}; primary role={:?} connected_slaves={:?}",
                rep.get("role"),
                rep.get("master_port"),
                rep.get("master_link_status"),
                pri.get("role"),
                pri.get("connected_slaves"),
            );
            let ok = rep.get("role").map(String::as_str) == Some("slave")
                && rep.get("master_port") == Some(&p.to_string())
                && rep.get("master_link_status").map(String::as_str) == Some("up")
                && pri.get("role").map(String::as_str) == Some("master")
                && pri.get("connected_slaves").map(String::as_str) == Some("1");
            ok.then_some(())
        },
    );
}

// ---- Cluster ----

/// The number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// A Redis Cluster of N masters (no replicas), all slots assigned.
pub struct Cluster {
    // Declared before `dir`, so the servers are killed before their files are removed.
    nodes: Vec<RedisServer>,
    dir: TempDir,
}

/// Makes every node of the cluster on `ports` forget the nodes that are not its own. Tests start
/// clusters side by side: a node of a cluster being torn down can still gossip to a node of a new
/// one that took a port it freed, which then learns the dying cluster's nodes, and a node once
/// known stays known (as failed) until it is forgotten.
fn forget_strangers(ports: &[u16]) {
    for &port in ports {
        let Ok(nodes) = raw_command(port, &["CLUSTER", "NODES"]) else {
            continue;
        };
        for line in nodes.lines() {
            let mut fields = line.split_whitespace();
            let (Some(id), Some(address)) = (fields.next(), fields.next()) else {
                continue;
            };
            let node_port = address
                .split('@')
                .next()
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse::<u16>().ok());
            if node_port.is_some_and(|p| !ports.contains(&p)) {
                for &ours in ports {
                    let _ = raw_command(ours, &["CLUSTER", "FORGET", id]);
                }
            }
        }
    }
}

impl Cluster {
    /// Starts `masters` cluster-enabled servers, joins them into one cluster with the slots split
    /// evenly (`CLUSTER ADDSLOTS` and `CLUSTER MEET`, as every server version understands), and
    /// waits until every node reports
    /// `cluster_state:ok` and the same slot map covering all 16384 slots.
    pub fn start(masters: usize) -> Cluster {
        assert!(masters >= 1, "a cluster needs at least one master");
        let dir = TempDir::new("cluster");
        let nodes: Vec<RedisServer> = (0..masters)
            .map(|i| {
                let file = dir.path().join(format!("nodes-{i}.conf"));
                let file = file.to_str().expect("utf-8 temp path");
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    file,
                    "--cluster-node-timeout",
                    "2000",
                    "--dir",
                    dir.path().to_str().expect("utf-8 temp path"),
                ])
            })
            .collect();
        let cluster = Cluster { nodes, dir };
        cluster.create();
        cluster.wait_ok(Duration::from_secs(20));
        cluster
    }

    /// Gives each node its share of the slots (`CLUSTER ADDSLOTS`, which every version has:
    /// `ADDSLOTSRANGE` is 7.0's) and a config epoch of its own, then has them meet the first.
    fn create(&self) {
        let n = self.nodes.len();
        let per = SLOTS as usize / n;
        for (i, node) in self.nodes.iter().enumerate() {
            let first = i * per;
            let last = if i + 1 == n {
                SLOTS as usize - 1
            } else {
                first + per - 1
            };
            let slots: Vec<String> = (first..=last).map(|slot| slot.to_string()).collect();
            let mut args = vec!["CLUSTER", "ADDSLOTS"];
            args.extend(slots.iter().map(String::as_str));
            let reply = node.cmd(&args);
            assert!(reply.starts_with("+OK"), "CLUSTER ADDSLOTS: {reply:?}");
            let epoch = (i + 1).to_string();
            let reply = node.cmd(&["CLUSTER", "SET-CONFIG-EPOCH", &epoch]);
            assert!(
                reply.starts_with("+OK"),
                "CLUSTER SET-CONFIG-EPOCH: {reply:?}"
            );
        }
        let first = self.nodes[0].port().to_string();
        for node in &self.nodes[1..] {
            let reply = node.cmd(&["CLUSTER", "MEET", "127.0.0.1", &first]);
            assert!(reply.starts_with("+OK"), "CLUSTER MEET: {reply:?}");
        }
    }

    /// Waits until every node reports `cluster_state:ok`, knows every node, and returns the same
    /// full slot map.
    pub fn wait_ok(&self, within: Duration) {
        let ports: Vec<u16> = self.nodes.iter().map(|n| n.port()).collect();
        let n = ports.len().to_string();
        wait_for(within, "the cluster to be ok on every node", |last| {
            let mut first_map = None;
            for &port in &ports {
                let info = info(port, &["CLUSTER", "INFO"])?;
                let state = (
                    info.get("cluster_state").cloned(),
                    info.get("cluster_slots_ok").cloned(),
                    info.get("cluster_known_nodes").cloned(),
                );
                *last = format!("node {port}: state/slots_ok/known_nodes = {state:?}");
                if state != (Some("ok".into()), Some(SLOTS.to_string()), Some(n.clone())) {
                    let known = state.2.as_deref().and_then(|k| k.parse::<usize>().ok());
                    if known.is_some_and(|known| known > ports.len()) {
                        forget_strangers(&ports);
                    }
                    return None;
                }
                let map = slot_map(port)?;
                let covered: usize = map.iter().map(|&(a, b, _)| (b - a + 1) as usize).sum();
                if covered != SLOTS as usize {
                    *last = format!("node {port} covers {covered} slots");
                    return None;
                }
                match &first_map {
                    None => first_map = Some(map),
                    Some(m) if *m == map => {}
                    Some(m) => {
                        *last = format!("node {port} sees slots {map:?}, another {m:?}");
                        return None;
                    }
                }
            }
            Some(())
        });
    }

    /// The nodes (all masters), in start order.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes, mutably (to kill or restart one).
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// The ports of the nodes, in start order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port()).collect()
    }

    /// fred's cluster URL: `redis-cluster://127.0.0.1:<p1>?node=127.0.0.1:<p2>&node=...`.
    pub fn url(&self) -> String {
        let mut url = format!("redis-cluster://127.0.0.1:{}", self.nodes[0].port());
        for (i, node) in self.nodes[1..].iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&format!("node=127.0.0.1:{}", node.port()));
        }
        url
    }

    /// The current slot map as sorted `(first slot, last slot, master port)` ranges, read with
    /// `CLUSTER SLOTS` from the first node that answers.
    pub fn slots(&self) -> Vec<(u16, u16, u16)> {
        self.nodes
            .iter()
            .find_map(|n| slot_map(n.port()))
            .expect("no cluster node answered CLUSTER SLOTS")
    }

    /// The hash slot of `key` (honouring `{hash tags}`).
    pub fn keyslot(key: &str) -> u16 {
        fred::util::redis_keyslot(key.as_bytes())
    }

    /// The master that owns `key`'s slot.
    pub fn node_for_key(&self, key: &str) -> &RedisServer {
        let slot = Cluster::keyslot(key);
        let port = self
            .slots()
            .into_iter()
            .find(|&(a, b, _)| a <= slot && slot <= b)
            .map(|(_, _, port)| port)
            .unwrap_or_else(|| panic!("no node owns slot {slot} of {key:?}"));
        self.node(port)
    }

    /// Whether relock's waiters use sharded pub/sub here (`SSUBSCRIBE`, Redis 7 and later and
    /// Valkey) or, on a Redis 6 cluster, classic pub/sub (`SUBSCRIBE`, which every node
    /// broadcasts).
    pub fn sharded(&self) -> bool {
        relock::testing::server_version().map_or(true, |found| found.at_least(7, 0))
    }

    /// How many connections are subscribed to `channel` the way relock subscribes here: shard
    /// subscribers on the master that owns the channel's slot ([`Cluster::sharded`]), or else
    /// classic subscribers on every node, added up.
    pub fn subscribers(&self, channel: &str) -> i64 {
        if self.sharded() {
            shard_numsub(self.node_for_key(channel), channel)
        } else {
            self.nodes
                .iter()
                .map(|node| super::raw_numsub(node, channel))
                .sum()
        }
    }

    /// The node listening on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// For each master, in start order, `per_master` key names `<prefix>-<i>` (no hash tags)
    /// whose slots it owns, so tests can spread lock names over every master.
    pub fn keys_per_master(
        &self,
        prefix: &str,
        per_master: usize,
    ) -> Vec<(&RedisServer, Vec<String>)> {
        let slots = self.slots();
        let mut out: Vec<(&RedisServer, Vec<String>)> =
            self.nodes.iter().map(|n| (n, Vec::new())).collect();
        let mut i = 0u64;
        while out.iter().any(|(_, keys)| keys.len() < per_master) {
            let key = format!("{prefix}-{i}");
            i += 1;
            let slot = Cluster::keyslot(&key);
            let (_, _, port) = *slots
                .iter()
                .find(|&&(a, b, _)| a <= slot && slot <= b)
                .expect("all slots are covered");
            let (_, keys) = out
                .iter_mut()
                .find(|(n, _)| n.port() == port)
                .expect("slot owner is one of the nodes");
            if keys.len() < per_master {
                keys.push(key);
            }
            assert!(i < 1_000_000, "could not find keys for every master");
        }
        out
    }

    /// The temporary directory holding the node config files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// `CLUSTER SLOTS` of the node on `port` as sorted `(first, last, master port)` ranges.
fn slot_map(port: u16) -> Option<Vec<(u16, u16, u16)>> {
    let reply = raw_command(port, &["CLUSTER", "SLOTS"]).ok()?;
    let (Resp::Array(Some(ranges)), _) = parse_resp(reply.as_bytes())? else {
        return None;
    };
    let mut map = Vec::new();
    for range in ranges {
        let Resp::Array(Some(items)) = range else {
            return None;
        };
        let (Some(Resp::Int(a)), Some(Resp::Int(b)), Some(Resp::Array(Some(master)))) =
            (items.first(), items.get(1), items.get(2))
        else {
            return None;
        };
        let Some(Resp::Int(master_port)) = master.get(1) else {
            return None;
        };
        map.push((*a as u16, *b as u16, *master_port as u16));
    }
    map.sort_unstable();
    Some(map)
}

// ---- Sentinel ----

/// The service name the Sentinels monitor.
pub const SERVICE: &str = "mymaster";

/// One Sentinel process with its own writable config file.
pub struct SentinelProcess {
    port: u16,
    child: Option<Child>,
    config: PathBuf,
}

impl SentinelProcess {
    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends one command and returns the raw RESP reply.
    pub fn cmd(&self, args: &[&str]) -> String {
        raw_command(self.port, args).expect("sentinel command failed")
    }

    /// Kills it (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// `SENTINEL MASTER <SERVICE>` as field → value, if it answers.
    pub fn master_state(&self) -> Option<BTreeMap<String, String>> {
        let reply = raw_command(self.port, &["SENTINEL", "MASTER", SERVICE]).ok()?;
        let (Resp::Array(Some(items)), _) = parse_resp(reply.as_bytes())? else {
            return None;
        };
        Some(
            items
                .chunks(2)
                .filter_map(|kv| Some((text(kv.first()?)?, text(kv.get(1)?)?)))
                .collect(),
        )
    }

    /// The primary's port according to `SENTINEL GET-MASTER-ADDR-BY-NAME`, if it answers.
    pub fn primary_port(&self) -> Option<u16> {
        let reply =
            raw_command(self.port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]).ok()?;
        let (Resp::Array(Some(items)), _) = parse_resp(reply.as_bytes())? else {
            return None;
        };
        text(items.get(1)?)?.parse().ok()
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts a Sentinel monitoring `127.0.0.1:<primary>` with a config file in `dir`.
fn start_sentinel(dir: &Path, index: usize, primary: u16) -> SentinelProcess {
    for _ in 0..20 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("no free port");
        let config = dir.join(format!("sentinel-{index}.conf"));
        let text = format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             protected-mode no\n\
             daemonize no\n\
             loglevel warning\n\
             logfile \"\"\n\
             dir \"{dir}\"\n\
             sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {SERVICE} 1000\n\
             sentinel failover-timeout {SERVICE} 5000\n\
             sentinel parallel-syncs {SERVICE} 1\n",
            dir = dir.display(),
        );
        std::fs::write(&config, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", config.display()));
        let Ok(mut child) = Command::new(relock::testing::server_program())
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        else {
            panic!(
                "cannot run {:?} --sentinel: is it installed?",
                relock::testing::server_program()
            );
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut up = false;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break; // exited: most likely the port was taken meanwhile
            }
            if raw_command(port, &["PING"]).is_ok_and(|r| r.starts_with("+PONG")) {
                up = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if up {
            return SentinelProcess {
                port,
                child: Some(child),
                config,
            };
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("could not start a sentinel");
}

/// A primary, one replica, and three Sentinels (quorum 2) monitoring them as [`SERVICE`].
pub struct Sentinels {
    // Declared before `dir`, so every process is killed before its files are removed.
    sentinels: Vec<SentinelProcess>,
    servers: Vec<RedisServer>,
    dir: TempDir,
}

impl Sentinels {
    /// Starts a linked primary and replica, then three Sentinels, and waits until every Sentinel
    /// reports the primary, sees the replica and the two other Sentinels.
    pub fn start() -> Sentinels {
        let (primary, replica) = ReplicaPair::start().into_servers();
        let dir = TempDir::new("sentinel");
        let sentinels = (0..3)
            .map(|i| start_sentinel(dir.path(), i, primary.port()))
            .collect();
        let topology = Sentinels {
            sentinels,
            servers: vec![primary, replica],
            dir,
        };
        let port = topology.servers[0].port();
        topology.wait_settled(port, Duration::from_secs(20));
        topology
    }

    /// Waits until every Sentinel reports `primary` as the primary (flags exactly `master`), with
    /// one replica and two other Sentinels.
    pub fn wait_settled(&self, primary: u16, within: Duration) {
        let want = primary.to_string();
        wait_for(
            within,
            &format!("all sentinels to agree on primary {primary} with 1 replica and 2 peers"),
            |last| {
                for s in &self.sentinels {
                    let state = s.master_state()?;
                    let seen = (
                        state.get("port").map(String::as_str),
                        state.get("flags").map(String::as_str),
                        state.get("num-slaves").map(String::as_str),
                        state.get("num-other-sentinels").map(String::as_str),
                    );
                    *last = format!("sentinel {}: port/flags/slaves/peers = {seen:?}", s.port);
                    if seen != (Some(&want), Some("master"), Some("1"), Some("2")) {
                        return None;
                    }
                }
                Some(())
            },
        );
    }

    /// fred's Sentinel URL:
    /// `redis-sentinel://127.0.0.1:<s1>?node=127.0.0.1:<s2>&node=127.0.0.1:<s3>&sentinelServiceName=mymaster`.
    pub fn url(&self) -> String {
        let mut url = format!("redis-sentinel://127.0.0.1:{}?", self.sentinels[0].port);
        for s in &self.sentinels[1..] {
            url.push_str(&format!("node=127.0.0.1:{}&", s.port));
        }
        url.push_str(&format!("sentinelServiceName={SERVICE}"));
        url
    }

    /// The Sentinels.
    pub fn sentinels(&self) -> &[SentinelProcess] {
        &self.sentinels
    }

    /// The Sentinels, mutably (to kill one).
    pub fn sentinels_mut(&mut self) -> &mut [SentinelProcess] {
        &mut self.sentinels
    }

    /// The two data servers (started as primary and replica, in that order; roles change with
    /// failovers).
    pub fn servers(&self) -> &[RedisServer] {
        &self.servers
    }

    /// The data server on `port`.
    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no data server on port {port}"))
    }

    /// The data server on `port`, mutably (to kill or restart it).
    pub fn server_mut(&mut self, port: u16) -> &mut RedisServer {
        self.servers
            .iter_mut()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no data server on port {port}"))
    }

    /// The primary's port, as the first answering Sentinel reports it
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
    pub fn primary_port(&self) -> u16 {
        self.sentinels
            .iter()
            .find_map(SentinelProcess::primary_port)
            .expect("no sentinel reported the primary")
    }

    /// The data server the Sentinels report as primary.
    pub fn primary(&self) -> &RedisServer {
        self.server(self.primary_port())
    }

    /// The data server that is not the reported primary.
    pub fn replica(&self) -> &RedisServer {
        let primary = self.primary_port();
        self.servers
            .iter()
            .find(|s| s.port() != primary)
            .expect("two data servers")
    }

    /// Forces a failover with `SENTINEL FAILOVER` and waits until every Sentinel reports the
    /// other server as primary and it answers `role:master`. Returns the new primary's port.
    ///
    /// The old primary keeps running as a primary, with its clients connected, until the
    /// Sentinels turn it into a replica (`+convert-to-slave`, about 10 s later at their own
    /// pace): wait for that with [`converge`](Self::converge), or do it at once with
    /// [`demote_old_primary`](Self::demote_old_primary).
    pub fn failover(&self) -> u16 {
        let old = self.primary_port();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let reply = self.sentinels[0].cmd(&["SENTINEL", "FAILOVER", SERVICE]);
            if reply.starts_with("+OK") {
                break;
            }
            // -NOGOODSLAVE or -INPROG right after startup or a previous failover: retry.
            assert!(
                Instant::now() < deadline,
                "SENTINEL FAILOVER kept failing: {reply:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        self.wait_new_primary(old, Duration::from_secs(20))
    }

    /// Waits until the topology is whole again at the Sentinels' own pace: the server that is not
    /// the reported primary is its linked replica, and every Sentinel sees the primary, one
    /// replica and two peers. After a [`failover`](Self::failover) this takes about 10-15 s.
    pub fn converge(&self, within: Duration) {
        let primary = self.primary_port();
        wait_linked(self.server(primary), self.replica(), within);
        self.wait_settled(primary, within);
    }

    /// Does now what the Sentinels would do some 10 s after a [`failover`](Self::failover): turns
    /// the old primary into a replica of the new one and disconnects its normal and pub/sub
    /// clients (as Sentinel's `+convert-to-slave` does, so clients reconnect through the
    /// Sentinels), then waits until the topology is whole again.
    pub fn demote_old_primary(&self) {
        let primary = self.primary_port();
        let old = self.replica();
        let reply = old.cmd(&["REPLICAOF", "127.0.0.1", &primary.to_string()]);
        assert!(reply.starts_with("+OK"), "REPLICAOF failed: {reply:?}");
        for kind in ["normal", "pubsub"] {
            let reply = old.cmd(&["CLIENT", "KILL", "TYPE", kind]);
            assert!(reply.starts_with(':'), "CLIENT KILL TYPE {kind}: {reply:?}");
        }
        self.converge(Duration::from_secs(20));
    }

    /// Cuts the replica off the primary for good while both keep running, as a replication link
    /// that failed: the replica is given a wrong `masterauth` (a primary without a password
    /// refuses any `AUTH` too), then the primary drops its replica connection, so every attempt
    /// of the replica to sync again fails at `AUTH`. Waits until the replica reports its link
    /// down and the primary no replica.
    ///
    /// The replica keeps the data it had and stays a replica of the same primary, so the
    /// Sentinels still list it; from here on it receives none of the primary's writes. A forced
    /// failover ([`failover`](Self::failover)) still promotes it while its link has been down
    /// for less than 10 × down-after-milliseconds (10 s here): Sentinel's rule for a replica
    /// fit to promote.
    pub fn cut_replica_link(&self) {
        let primary = self.primary();
        let replica = self.replica();
        let reply = replica.cmd(&["CONFIG", "SET", "masterauth", "relock-test-wrong-password"]);
        assert!(
            reply.starts_with("+OK"),
            "CONFIG SET masterauth failed: {reply:?}"
        );
        // `slave` rather than `replica`: what every server version understands.
        let reply = primary.cmd(&["CLIENT", "KILL", "TYPE", "slave"]);
        assert!(reply.starts_with(':'), "CLIENT KILL TYPE slave: {reply:?}");
        let (p, r) = (primary.port(), replica.port());
        wait_for(
            Duration::from_secs(5),
            &format!("replica {r} to lose its link to primary {p}"),
            |last| {
                let rep = replication_info(r)?;
                let pri = replication_info(p)?;
                *last = format!(
                    "replica role={:?} link={:?}; primary connected_slaves={:?}",
                    rep.get("role"),
                    rep.get("master_link_status"),
                    pri.get("connected_slaves"),
                );
                let cut = rep.get("role").map(String::as_str) == Some("slave")
                    && rep.get("master_link_status").map(String::as_str) == Some("down")
                    && pri.get("connected_slaves").map(String::as_str) == Some("0");
                cut.then_some(())
            },
        );
    }

    /// Waits until every Sentinel reports a primary other than `old`, and that server answers
    /// `role:master`. Returns its port.
    pub fn wait_new_primary(&self, old: u16, within: Duration) -> u16 {
        wait_for(
            within,
            &format!("the sentinels to move the primary away from {old}"),
            |last| {
                let ports: Vec<Option<u16>> = self
                    .sentinels
                    .iter()
                    .map(SentinelProcess::primary_port)
                    .collect();
                *last = format!("sentinels report primary ports {ports:?}");
                let new = ports[0]?;
                if new == old || ports.iter().any(|&p| p != Some(new)) {
                    return None;
                }
                let role = role(new);
                *last = format!("sentinels agree on {new}, its role is {role:?}");
                (role.as_deref() == Some("master")).then_some(new)
            },
        )
    }

    /// Kills (SIGKILL) the server the Sentinels report as primary and returns its port. The
    /// Sentinels then fail over on their own; wait with [`wait_new_primary`](Self::wait_new_primary).
    pub fn kill_primary(&mut self) -> u16 {
        let port = self.primary_port();
        self.server_mut(port).kill();
        port
    }

    /// The temporary directory holding the Sentinel config files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

// ---- Cluster pub/sub and error checks ----

/// How many connections `server` counts on the shard channel `channel`
/// (`PUBSUB SHARDNUMSUB`). Only the master that owns the channel's slot has its subscribers.
pub fn shard_numsub(server: &RedisServer, channel: &str) -> i64 {
    let reply = server.cmd(&["PUBSUB", "SHARDNUMSUB", channel]);
    match parse_resp(reply.as_bytes()) {
        Some((Resp::Array(Some(items)), _)) => match items.as_slice() {
            [_, Resp::Int(n)] => *n,
            other => panic!("bad SHARDNUMSUB reply {other:?}"),
        },
        other => panic!("bad SHARDNUMSUB reply {reply:?} ({other:?})"),
    }
}

/// How many errors with the prefix `code` (`CROSSSLOT`, `MOVED`, ...) `server` has replied
/// (`count` of `errorstat_<code>` in `INFO errorstats`; 0 when none).
pub fn error_count(server: &RedisServer, code: &str) -> u64 {
    let info = info(server.port(), &["INFO", "errorstats"]).expect("INFO errorstats");
    info.get(&format!("errorstat_{code}"))
        .and_then(|v| v.strip_prefix("count="))
        .map(|n| n.split(',').next().unwrap().parse().unwrap())
        .unwrap_or(0)
}

// ---- Primary + replica: in sync ----

/// Sends `SET <probe> 1 PX 60000` and `WAIT 1 <wait_ms>` on one connection to `port`: the number
/// of replicas that acknowledged the write, or `None` when the server did not answer.
fn acknowledged_write(port: u16, wait_ms: u64) -> Option<i64> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(
            Duration::from_millis(wait_ms) + Duration::from_secs(5),
        ))
        .ok()?;
    let wait_ms = wait_ms.to_string();
    let mut request = String::new();
    for args in [
        &["SET", "relock-test:replica-sync-probe", "1", "PX", "60000"][..],
        &["WAIT", "1", &wait_ms][..],
    ] {
        request.push_str(&format!("*{}\r\n", args.len()));
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
    }
    stream.write_all(request.as_bytes()).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some((_, used)) = parse_resp(&buf) {
            if let Some((Resp::Int(n), _)) = parse_resp(&buf[used..]) {
                return Some(n);
            }
        }
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

impl ReplicaPair {
    /// Waits until the replica really follows the primary: the primary reports it
    /// `state=online` and a write on the primary is acknowledged by `WAIT 1` within 200 ms.
    ///
    /// [`start`](Self::start) and [`wait_linked`](Self::wait_linked) can return while the
    /// primary still keeps the replica in `state=wait_bgsave` (the replica already reports its
    /// link up, the primary counts it in `connected_slaves`): a `WAIT` sent then times out.
    pub fn wait_in_sync(&self, within: Duration) {
        let p = self.primary.port();
        wait_for(within, "the replica to acknowledge writes", |last| {
            let slave0 = replication_info(p)?.remove("slave0");
            *last = format!("primary slave0 = {slave0:?}");
            if !slave0?.contains("state=online") {
                return None;
            }
            let acked = acknowledged_write(p, 200);
            *last = format!("{last}; WAIT 1 200 -> {acked:?}");
            (acked == Some(1)).then_some(())
        });
    }
}
