//! Fault injection on real processes, and the checkers every fault test judges its run with.
//!
//! Faults: pause and resume a process (`SIGSTOP` / `SIGCONT`), stall a server with `DEBUG SLEEP`,
//! cut its connections with `CLIENT KILL`. Checkers: a lost-update register kept outside Redis,
//! an overlap checker for critical sections in one process, and a leak check for the end of a
//! test.

#![allow(dead_code, unreachable_pub)]

use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::server::{raw_command, RedisServer};

// ---- Faults ----

fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid} failed: {status}");
}

/// Freezes process `pid` (`SIGSTOP`): it runs no code, its sockets stay open.
pub fn stop(pid: u32) {
    signal(pid, "-STOP");
}

/// Resumes a process frozen by [`stop`] (`SIGCONT`).
pub fn resume(pid: u32) {
    signal(pid, "-CONT");
}

/// A process frozen by [`Frozen::stop`], resumed when this is dropped, so a failing test never
/// leaves it frozen.
pub struct Frozen(u32);

impl Frozen {
    /// Freezes process `pid` (see [`stop`]) until the returned value is dropped.
    pub fn stop(pid: u32) -> Frozen {
        stop(pid);
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        resume(self.0);
    }
}

/// A `DEBUG SLEEP` in progress: the server runs nothing else until it ends.
pub struct DebugSleep {
    /// When the command was sent; the server sleeps from a moment after.
    pub sent_at: Instant,
    thread: std::thread::JoinHandle<String>,
}

impl DebugSleep {
    /// Waits until the server answered, that is, woke up. Returns when it did.
    pub async fn woken(self) -> Instant {
        let reply = tokio::task::spawn_blocking(move || self.thread.join())
            .await
            .unwrap()
            .expect("the DEBUG SLEEP thread panicked");
        assert!(reply.starts_with("+OK"), "DEBUG SLEEP failed: {reply:?}");
        Instant::now()
    }
}

/// Blocks the whole server for `secs` seconds with `DEBUG SLEEP`, sent from its own thread and
/// connection so the caller goes on. Wall time runs on meanwhile: keys whose lease ends during
/// the sleep are expired when it ends.
pub fn debug_sleep(server: &RedisServer, secs: f64) -> DebugSleep {
    let port = server.port();
    let secs = secs.to_string();
    let sent_at = Instant::now();
    let thread = std::thread::spawn(move || {
        raw_command(port, &["DEBUG", "SLEEP", &secs]).expect("DEBUG SLEEP")
    });
    DebugSleep { sent_at, thread }
}

/// `CLIENT KILL TYPE <kind>` (`normal`, `pubsub`, ...): closes those connections, not the one
/// sending the command. Returns how many were closed.
pub fn client_kill(server: &RedisServer, kind: &str) -> i64 {
    super::resp_int(&server.cmd(&["CLIENT", "KILL", "TYPE", kind]))
}

/// Waits (at most 30 s each) for `waiters`, each returning the moment it was served, and checks
/// that each was served after `freed` (the release that let them through) and within `bound` of it.
pub async fn assert_served_within(
    waiters: Vec<tokio::task::JoinHandle<Instant>>,
    freed: Instant,
    bound: Duration,
) {
    for waiter in waiters {
        let at = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("a waiter was never served")
            .unwrap();
        assert!(at >= freed, "a waiter was served before the release");
        assert!(
            at - freed < bound,
            "a waiter took {:?} after the release (bound {bound:?})",
            at - freed
        );
    }
}

// ---- Checker 1: lost updates ----

/// A counter kept outside Redis that each critical section bumps with a read, an await and a
/// write, in separate steps: two sections that overlap lose an update.
#[derive(Default)]
pub struct Register {
    value: Mutex<u64>,
}

impl Register {
    /// Reads the value, waits `think`, writes it back plus one.
    pub async fn increment(&self, think: Duration) {
        let read = *self.value.lock().unwrap();
        tokio::time::sleep(think).await;
        *self.value.lock().unwrap() = read + 1;
    }

    /// The current value.
    pub fn value(&self) -> u64 {
        *self.value.lock().unwrap()
    }

    /// For fault-free runs: every one of `sections` critical sections left its update.
    pub fn assert_exact(&self, sections: u64) {
        let value = self.value();
        assert_eq!(
            value,
            sections,
            "lost updates: {sections} critical sections ran but the register reads {value} \
             ({} lost)",
            sections.saturating_sub(value)
        );
    }
}

// ---- Checker 2: overlapping critical sections ----

/// One critical section: when it was entered and left (one process, one monotonic clock), who
/// ran it, and whether under a shared hold (a read lock's), which may overlap other shared ones.
#[derive(Debug, Clone)]
pub struct Interval {
    pub enter: Instant,
    pub exit: Instant,
    pub who: String,
    pub shared: bool,
}

/// Records critical sections and finds the ones that overlapped.
#[derive(Default)]
pub struct Overlaps {
    sections: Mutex<Vec<Interval>>,
}

impl Overlaps {
    /// Records a section that ran from `enter` until now.
    pub fn record(&self, who: impl Into<String>, enter: Instant) {
        self.push(who.into(), enter, false);
    }

    /// Records a section that ran from `enter` until now under a shared hold: it may overlap
    /// other shared sections, no exclusive one.
    pub fn record_shared(&self, who: impl Into<String>, enter: Instant) {
        self.push(who.into(), enter, true);
    }

    fn push(&self, who: String, enter: Instant, shared: bool) {
        let exit = Instant::now();
        self.sections.lock().unwrap().push(Interval {
            enter,
            exit,
            who,
            shared,
        });
    }

    /// How many sections were recorded.
    pub fn len(&self) -> usize {
        self.sections.lock().unwrap().len()
    }

    /// How many of them were exclusive.
    pub fn exclusive(&self) -> usize {
        let sections = self.sections.lock().unwrap();
        sections.iter().filter(|s| !s.shared).count()
    }

    /// Every pair of sections that overlapped in time, but for two shared ones.
    pub fn overlapping(&self) -> Vec<(Interval, Interval)> {
        let mut sections = self.sections.lock().unwrap().clone();
        sections.sort_by_key(|s| s.enter);
        let mut pairs = Vec::new();
        for (i, a) in sections.iter().enumerate() {
            for b in &sections[i + 1..] {
                if b.enter >= a.exit {
                    break; // sorted by enter: no later section overlaps `a` either
                }
                if !(a.shared && b.shared) {
                    pairs.push((a.clone(), b.clone()));
                }
            }
        }
        pairs
    }

    /// Fails with the overlapping pairs, if there are any.
    pub fn assert_none(&self) {
        let pairs = self.overlapping();
        assert!(
            pairs.is_empty(),
            "{} pair(s) of critical sections overlapped, e.g. {:?} and {:?}",
            pairs.len(),
            pairs[0].0,
            pairs[0].1
        );
    }
}

/// One critical section that both checkers see: enters, bumps the register (read, wait `think`,
/// write), leaves.
pub async fn critical_section(
    register: &Register,
    overlaps: &Overlaps,
    who: &str,
    think: Duration,
) {
    let enter = Instant::now();
    register.increment(think).await;
    overlaps.record(who, enter);
}

/// One critical section under a shared hold: enters, reads the register, waits `think`, reads
/// it again and finds it unchanged (no exclusive section ran meanwhile), leaves.
pub async fn shared_section(register: &Register, overlaps: &Overlaps, who: &str, think: Duration) {
    let enter = Instant::now();
    let before = register.value();
    tokio::time::sleep(think).await;
    assert_eq!(
        register.value(),
        before,
        "{who}: the register changed under a shared hold"
    );
    overlaps.record_shared(who, enter);
}

// ---- Checker 3: leaks ----

/// What is still leaking, or an empty list.
fn leaks(server: &RedisServer, clients: &[&relock::Client], names: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for name in names {
        // The lock key and its replay keys (the channel is no key).
        let mut keys = vec![name.to_string()];
        let latches = format!("redisson_unlock_latch:{{{name}}}:*");
        if let super::Resp::Array(Some(items)) = super::resp(&server.cmd(&["KEYS", &latches])) {
            keys.extend(items.into_iter().filter_map(|item| match item {
                super::Resp::Bulk(Some(key)) => Some(key),
                _ => None,
            }));
        }
        for key in keys {
            let pttl = super::raw_pttl(server, &key);
            if pttl == -1 {
                found.push(format!("key `{key}` has no TTL"));
            }
        }
        let channel = super::lock_channel(name);
        let subscribers = super::raw_numsub(server, &channel);
        if subscribers != 0 {
            found.push(format!("{subscribers} subscriber(s) left on `{channel}`"));
        }
    }
    for (i, client) in clients.iter().enumerate() {
        let stats = client.stats();
        if (stats.holds, stats.renewing, stats.waiters, stats.channels) != (0, 0, 0, 0) {
            found.push(format!("client {i} still tracks {stats:?}"));
        }
    }
    found
}

/// The end-of-test leak check: no lock key (or replay key) of `names` without a TTL, no
/// subscriber left on their channels, and nothing tracked by `clients` (no holds, renewals,
/// waiters or channels). Background releases and unsubscribes take a moment, so it polls for up
/// to 10 s before failing.
pub async fn assert_no_leaks(server: &RedisServer, clients: &[&relock::Client], names: &[&str]) {
    until_no_leaks(Duration::from_secs(10), || leaks(server, clients, names)).await;
}

/// Polls `leaks` every 50 ms until it finds none; fails with what it found after `within`.
pub async fn until_no_leaks(within: Duration, mut leaks: impl FnMut() -> Vec<String>) {
    let deadline = Instant::now() + within;
    loop {
        let found = leaks();
        if found.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "leaks after {within:?}: {}",
            found.join("; ")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---- Checker 3, cluster variant ----

/// The prefix of a lock's replay keys, as relock names them (the name in braces unless it has
/// its own hash tag).
fn latch_prefix(name: &str) -> String {
    if name.contains('{') {
        format!("redisson_unlock_latch:{name}")
    } else {
        format!("redisson_unlock_latch:{{{name}}}")
    }
}

/// What is still leaking on a cluster, or an empty list: checked on the master that owns each
/// name's slot (keys and sharded subscribers), and on every node for classic subscribers.
fn cluster_leaks(
    cluster: &super::topology::Cluster,
    clients: &[&relock::Client],
    names: &[&str],
) -> Vec<String> {
    let mut found = Vec::new();
    for name in names {
        let node = cluster.node_for_key(name);
        let mut keys = vec![name.to_string()];
        let latches = format!("{}:*", latch_prefix(name));
        if let super::Resp::Array(Some(items)) = super::resp(&node.cmd(&["KEYS", &latches])) {
            keys.extend(items.into_iter().filter_map(|item| match item {
                super::Resp::Bulk(Some(key)) => Some(key),
                _ => None,
            }));
        }
        for key in keys {
            if super::raw_pttl(node, &key) == -1 {
                found.push(format!("key `{key}` has no TTL on node {}", node.port()));
            }
        }
        let channel = super::lock_channel(name);
        let sharded = if cluster.sharded() {
            super::topology::shard_numsub(node, &channel)
        } else {
            0
        };
        if sharded != 0 {
            found.push(format!(
                "{sharded} shard subscriber(s) left on `{channel}` on node {}",
                node.port()
            ));
        }
        for other in cluster.nodes() {
            let classic = super::raw_numsub(other, &channel);
            if classic != 0 {
                found.push(format!(
                    "{classic} subscriber(s) left on `{channel}` on node {}",
                    other.port()
                ));
            }
        }
    }
    for (i, client) in clients.iter().enumerate() {
        let stats = client.stats();
        if (stats.holds, stats.renewing, stats.waiters, stats.channels) != (0, 0, 0, 0) {
            found.push(format!("client {i} still tracks {stats:?}"));
        }
    }
    found
}

/// [`assert_no_leaks`] on a cluster: each name is checked on the master that owns its slot
/// (no lock or replay key without a TTL, no shard subscriber on its channel), no node keeps a
/// classic subscriber on it, and `clients` track nothing. Polls for up to 10 s.
pub async fn assert_no_leaks_cluster(
    cluster: &super::topology::Cluster,
    clients: &[&relock::Client],
    names: &[&str],
) {
    until_no_leaks(Duration::from_secs(10), || {
        cluster_leaks(cluster, clients, names)
    })
    .await;
}
