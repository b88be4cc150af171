//! The synchronizers on real servers and in real processes: `Semaphore`, `PermitSemaphore` and
//! `CountDownLatch`.
//!
//! Across processes (children run by `common::child`): eight processes take and give
//! back permits at random, with acquires cut at random points, while a checker samples the server
//! on a connection of its own (never more permits out than there are, none lost at the end); a
//! SIGKILLed holder's permits come back one lease later (a permit semaphore's) or stay gone (a
//! plain semaphore's, as documented); a latch wakes the waiters of four processes at zero and not
//! before.
//!
//! Then each type under the faults the lock family is tested with (`family.rs`, `faults.rs`), on
//! a single server: a restart, `DEBUG SLEEP`, a permit holder paused past its lease, `CLIENT
//! KILL` while waiting and acquiring, `SCRIPT FLUSH`, and replies lost in a proxy. Last,
//! `Client::shutdown` gives permits back (drops off the runtime are in `drop_release.rs`).
//!
//! Every test checks that permits and counts are conserved, and ends with [`assert_settled`]: the
//! clients track nothing and have nothing in flight, no request key of theirs is left (after
//! faults, [`assert_settled_after_faults`] lets the key of an operation that failed go with its
//! TTL), no subscriber is left on the channels.

use crate::common;
use common::child;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::faults::{self, Frozen};
use common::proxy::{Mode, Proxy};
use common::sync_family::{sync_tests, AnySync, Closed, Passed, Synchronizer};
use common::{eventually, raw_count, raw_numsub, stays, RedisServer, Resp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use relock::{Client, CountDownLatch, Permit, PermitSemaphore, Semaphore};
use tokio::time::{timeout, Instant};

sync_tests!(
    restart_ends_every_wait_and_waiters_wake_again,
    client_kill_keeps_waiters_waking_and_counts_conserved,
    script_flush_keeps_every_operation_working,
);

/// The command timeout of the fault tests' clients: a stall longer than it makes replies
/// ambiguous.
const CMD: Duration = Duration::from_secs(1);
/// A poll interval no test waits out: a waiter that returns within [`common::PROMPT`] of a
/// release was woken by its message.
const NO_POLL: Duration = Duration::from_secs(60);
/// A watchdog timeout far longer than any test: only a release or a shutdown frees such a permit.
const LONG: Duration = Duration::from_secs(30);
/// How long a request key of an operation that failed lives: six command timeouts.
const REQUEST_TTL: Duration = Duration::from_secs(6);
/// What a bound derived from a lease or a poll adds for a busy machine.
const SLACK: Duration = Duration::from_secs(5);

async fn connect(url: &str, watchdog: Duration, command: Duration, poll: Duration) -> Client {
    let config = common::config(url)
        .with_watchdog_timeout(watchdog)
        .with_command_timeout(command)
        .with_poll_interval(poll);
    Client::new(config).await.expect("connect")
}

/// Waits (at most 10 s) until `client`'s command connection answers again.
async fn until_connected(client: &Client) {
    use fred::interfaces::ClientLike;
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.redis().ping::<String>(None).await.is_ok()
        })
        .await,
        "the client did not reconnect"
    );
}

// ---- What the server holds ----

/// Reads a semaphore's counter and its number of leases in one script: one moment's state.
const STATE_LUA: &str = "return {redis.call('get', KEYS[1]), redis.call('zcard', KEYS[2])}";

fn parse_state(reply: &str) -> (Option<i64>, i64) {
    let Resp::Array(Some(items)) = common::resp(reply) else {
        panic!("unexpected state reply {reply:?}");
    };
    match items.as_slice() {
        [Resp::Bulk(count), Resp::Int(out)] => {
            (count.as_ref().map(|n| n.parse().expect("a count")), *out)
        }
        other => panic!("unexpected state reply {other:?}"),
    }
}

/// A semaphore's available permits (`None`: no counter) and its permits out (its leases: 0 for
/// a plain semaphore), at one moment.
pub(crate) fn state(server: &RedisServer, name: &str) -> (Option<i64>, i64) {
    let leases = common::leases_key(name);
    parse_state(&server.cmd(&["EVAL", STATE_LUA, "2", name, &leases]))
}

/// The ids of the permits out, in lease order.
fn lease_ids(server: &RedisServer, name: &str) -> Vec<String> {
    let leases = common::raw_zrange_hex(server, &common::leases_key(name));
    leases.into_iter().map(|(id, _)| id).collect()
}

/// The moment (server ms) the lease of permit `id` ends.
fn lease_end(server: &RedisServer, name: &str, id: &str) -> Option<i64> {
    let leases = common::raw_zrange_hex(server, &common::leases_key(name));
    leases
        .into_iter()
        .find(|(i, _)| i == id)
        .map(|(_, end)| end)
}

/// The request keys of synchronizer `name` and their PTTL.
fn request_keys(server: &RedisServer, name: &str) -> Vec<(String, i64)> {
    let pattern = format!("{}:*", common::braced("relock_request", name));
    let Resp::Array(Some(items)) = common::resp(&server.cmd(&["KEYS", &pattern])) else {
        panic!("KEYS {pattern} did not return an array");
    };
    items
        .into_iter()
        .map(|item| match item {
            Resp::Bulk(Some(key)) => {
                let ttl = common::raw_pttl(server, &key);
                (key, ttl)
            }
            other => panic!("unexpected KEYS item {other:?}"),
        })
        .collect()
}

/// Panics, saying what it returned, when any of `waiters` has returned.
async fn assert_still_waiting<T: std::fmt::Debug>(waiters: &mut [tokio::task::JoinHandle<T>]) {
    for waiter in waiters.iter_mut() {
        if waiter.is_finished() {
            let returned = waiter.await;
            panic!("a waiter returned early: {returned:?}");
        }
    }
}

/// The SHA1 a script is sent under, for the proxy to recognise it.
fn sha(lua: &str) -> String {
    common::sent_as(lua)
}

// ---- The leak check ----

/// What `clients` and the server still have of `names`, or nothing.
fn leaks(server: &RedisServer, clients: &[&Client], names: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let s = client.stats();
        if (s.holds, s.renewing, s.waiters, s.channels, s.in_flight) != (0, 0, 0, 0, 0) {
            found.push(format!("client {i} still tracks {s:?}"));
        }
    }
    for name in names {
        for (key, ttl) in request_keys(server, name) {
            let ours = clients
                .iter()
                .any(|client| key.contains(&format!(":{}:", client.id())));
            if ttl == -1 {
                found.push(format!("request key `{key}` has no TTL"));
            } else if ours {
                found.push(format!("request key `{key}` is left ({ttl} ms to live)"));
            }
        }
        for channel in [common::semaphore_channel(name), common::latch_channel(name)] {
            let subscribers = raw_numsub(server, &channel);
            if subscribers != 0 {
                found.push(format!("{subscribers} subscriber(s) left on `{channel}`"));
            }
        }
    }
    found
}

/// The end of every test: `clients` track nothing (no permit, waiter, channel) and have nothing
/// in flight, no request key of theirs is left (each is deleted once its reply is in), every
/// other one has a TTL, nobody listens on the channels of `names`. Polls for a moment first.
async fn assert_settled(server: &RedisServer, clients: &[&Client], names: &[&str]) {
    settled_within(server, clients, names, Duration::from_secs(2)).await;
}

/// As [`assert_settled`], after faults that may have failed operations: the request key of
/// one that failed is left to its TTL, so this polls for a request key's life and some.
async fn assert_settled_after_faults(server: &RedisServer, clients: &[&Client], names: &[&str]) {
    settled_within(server, clients, names, REQUEST_TTL + SLACK).await;
}

async fn settled_within(
    server: &RedisServer,
    clients: &[&Client],
    names: &[&str],
    within: Duration,
) {
    faults::until_no_leaks(within, || leaks(server, clients, names)).await;
}

/// Waits (at most 10 s) until nothing of `clients` is in flight.
async fn until_idle(clients: &[&Client]) {
    assert!(
        eventually(Duration::from_secs(10), || async {
            clients.iter().all(|c| c.stats().in_flight == 0)
        })
        .await,
        "still in flight: {:?}",
        clients.iter().map(|c| c.stats()).collect::<Vec<_>>()
    );
}

/// Waits (at most 10 s) until `client` has `waiters` waiters and `server` has `subscribers`
/// subscriber connections on `channel`.
async fn until_waiting(
    server: &RedisServer,
    client: &Client,
    channel: &str,
    waiters: usize,
    subscribers: i64,
) {
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.stats().waiters == waiters && raw_numsub(server, channel) == subscribers
        })
        .await,
        "not waiting: {:?}, {} subscriber(s) on {channel}",
        client.stats(),
        raw_numsub(server, channel)
    );
}

// ---- The checker: samples a semaphore's state as fast as the server answers ----

/// Samples a semaphore's counter and leases on a connection of its own (reconnecting when a
/// fault cuts it) until [`finish`](Sampler::finish), checking each sample.
struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, Vec<String>)>,
}

type Check = fn(u64, Option<i64>, i64) -> Result<(), String>;

/// A plain semaphore's counter is never below 0 nor above its total, and it has no leases.
fn plain_check(total: u64, count: Option<i64>, out: i64) -> Result<(), String> {
    match count {
        Some(c) if (0..=total as i64).contains(&c) && out == 0 => Ok(()),
        _ => Err(format!("counter {count:?}, leases {out} (total {total})")),
    }
}

/// A permit semaphore's permits out plus those available are its total, at every moment: never
/// more out than it has.
fn permit_check(total: u64, count: Option<i64>, out: i64) -> Result<(), String> {
    match count {
        Some(c) if c >= 0 && out <= total as i64 && c + out == total as i64 => Ok(()),
        _ => Err(format!("counter {count:?}, leases {out} (total {total})")),
    }
}

impl Sampler {
    fn start(server: &RedisServer, name: &str, total: u64, check: Check) -> Sampler {
        let port = server.port();
        let (name, leases) = (name.to_owned(), common::leases_key(name));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let (mut samples, mut bad) = (0u64, Vec::new());
                let mut stream: Option<std::net::TcpStream> = None;
                while !stop.load(Ordering::Relaxed) {
                    if stream.is_none() {
                        match std::net::TcpStream::connect(("127.0.0.1", port)) {
                            Ok(s) => stream = Some(s),
                            Err(_) => {
                                std::thread::sleep(Duration::from_millis(10));
                                continue;
                            }
                        }
                    }
                    let conn = stream.as_mut().unwrap();
                    let args = ["EVAL", STATE_LUA, "2", &name, &leases];
                    match common::server::command_on(conn, &args) {
                        Ok(reply) if reply.starts_with('*') => {
                            let (count, out) = parse_state(&reply);
                            samples += 1;
                            if let Err(e) = check(total, count, out) {
                                if bad.len() < 10 {
                                    bad.push(e);
                                }
                            }
                        }
                        // A killed connection: sample on a new one.
                        _ => stream = None,
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                (samples, bad)
            }
        });
        Sampler { stop, thread }
    }

    /// A sampler of semaphore `name`'s `total` permits with the check of its type; none for a
    /// latch, which has no permits.
    fn of(sync: Synchronizer, server: &RedisServer, name: &str, total: u64) -> Option<Sampler> {
        let check: Check = match sync {
            Synchronizer::Semaphore => plain_check,
            Synchronizer::Permit => permit_check,
            Synchronizer::Latch => return None,
        };
        Some(Sampler::start(server, name, total, check))
    }

    /// Stops sampling; fails if a sample broke the invariant. How many samples were taken.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let (samples, bad) = self.thread.join().expect("the sampler panicked");
        assert!(
            bad.is_empty(),
            "{} of {samples} samples broke the invariant, e.g. {bad:?}",
            bad.len()
        );
        samples
    }
}

// ---- Child processes ----

/// What a child's reports start with on its stdout.
const MARK: &str = "RELOCK_SYNC ";

fn say(report: impl std::fmt::Display) {
    child::say(format!("{MARK}{report}"));
}

/// The number `key=<n>` in a report.
fn field(report: &str, key: &str) -> u64 {
    let prefix = format!("{key}=");
    report
        .split_whitespace()
        .find_map(|word| word.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {key} in {report:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("a bad {key} in {report:?}"))
}

/// A child process running one `#[ignore]`d test of this module; its reports are what follows
/// [`MARK`] in its lines.
struct Proc(child::Child);

impl Proc {
    fn spawn(test: &str, env: &[(&str, String)]) -> Proc {
        Proc(child::Child::spawn(test, env))
    }

    fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// Its reports so far.
    fn all(&self) -> Vec<String> {
        self.0.reports(MARK)
    }

    /// Its reports so far that start with `word`.
    fn reports(&self, word: &str) -> Vec<String> {
        let all = self.all();
        all.into_iter()
            .filter(|r| r.split_whitespace().next() == Some(word))
            .collect()
    }

    /// Its first report that starts with `word`, waiting at most `within` for it.
    async fn report(&self, word: &str, within: Duration) -> String {
        let found = eventually(within, || async { !self.reports(word).is_empty() }).await;
        assert!(found, "the child never reported {word}: {:?}", self.all());
        self.reports(word).remove(0)
    }

    /// Waits for it to exit, checks that it passed, and returns all its reports.
    async fn finish(self, within: Duration) -> Vec<String> {
        child::reports(&self.0.finish(within).await, MARK)
    }

    /// SIGKILLs it and reaps it.
    async fn kill(&mut self) {
        self.0.kill().await;
    }
}

// ---- 1. Never more permits out than exist: eight processes at random ----

const CHURN_PROCESSES: u64 = 8;
const CHURN_TASKS: u64 = 3;
const CHURN_RUN: Duration = Duration::from_millis(2500);

/// Where an acquire or release is cut, if it is: at a random point of its first 15 ms.
fn cut(rng: &mut StdRng) -> Option<Duration> {
    rng.gen_bool(0.4)
        .then(|| Duration::from_micros(rng.gen_range(0..15_000)))
}

fn hold(rng: &mut StdRng) -> Duration {
    Duration::from_micros(rng.gen_range(0..8_000))
}

/// What a churning task did.
#[derive(Default)]
struct Tally {
    acquired: u64,
    busy: u64,
    cut: u64,
    lost: u64,
}

/// Takes and gives back 1 to 3 permits at random until `deadline`, cutting acquires and
/// releases at random; then takes some to keep. What it did, and the permits it keeps.
async fn plain_churn(sem: Semaphore, mut rng: StdRng, deadline: Instant) -> (Tally, u32) {
    let mut tally = Tally::default();
    while Instant::now() < deadline {
        let n = rng.gen_range(1..=3);
        let wait = Duration::from_millis(rng.gen_range(0..40));
        let attempt = sem.try_acquire_for(n, wait);
        let taken = match cut(&mut rng) {
            Some(after) => match timeout(after, attempt).await {
                Ok(taken) => taken,
                Err(_) => {
                    tally.cut += 1;
                    continue;
                }
            },
            None => attempt.await,
        };
        if !taken.expect("an acquire failed") {
            tally.busy += 1;
            continue;
        }
        tally.acquired += 1;
        tokio::time::sleep(hold(&mut rng)).await;
        // Cut or not, a release that was polled gives its permits back once.
        match cut(&mut rng) {
            Some(after) => {
                if let Ok(released) = timeout(after, sem.release(n)).await {
                    released.expect("a release failed");
                }
            }
            None => sem.release(n).await.expect("a release failed"),
        }
    }
    let n = rng.gen_range(1..=2);
    let kept = sem
        .try_acquire_for(n, Duration::from_millis(200))
        .await
        .expect("an acquire failed");
    (tally, if kept { n } else { 0 })
}

/// As [`plain_churn`], with one or two `Permit`s at a time, taken by `acquire` (cut) or
/// `try_acquire_for`, given back by `release`, a drop, or a cut release.
async fn permit_churn(
    sem: PermitSemaphore,
    mut rng: StdRng,
    deadline: Instant,
) -> (Tally, Vec<Permit>) {
    let mut tally = Tally::default();
    while Instant::now() < deadline {
        let mut mine = Vec::new();
        for _ in 0..rng.gen_range(1..=2) {
            let outcome = if rng.gen_bool(0.3) {
                let after = Duration::from_micros(rng.gen_range(0..30_000));
                timeout(after, sem.acquire()).await.map(|r| r.map(Some))
            } else {
                let wait = Duration::from_millis(rng.gen_range(0..40));
                let attempt = sem.try_acquire_for(wait, None);
                match cut(&mut rng) {
                    Some(after) => timeout(after, attempt).await,
                    None => Ok(attempt.await),
                }
            };
            match outcome {
                Err(_) => {
                    tally.cut += 1;
                    break;
                }
                Ok(taken) => match taken.expect("an acquire failed") {
                    Some(permit) => mine.push(permit),
                    None => {
                        tally.busy += 1;
                        break;
                    }
                },
            }
        }
        tally.acquired += mine.len() as u64;
        tokio::time::sleep(hold(&mut rng)).await;
        for permit in mine {
            let released = match rng.gen_range(0..3) {
                0 => Some(permit.release().await),
                1 => {
                    drop(permit);
                    None
                }
                _ => {
                    let after = Duration::from_micros(rng.gen_range(0..5_000));
                    timeout(after, permit.release()).await.ok()
                }
            };
            match released {
                Some(Err(e)) if e.is_lease_lost() => tally.lost += 1,
                Some(Err(e)) => panic!("a release failed: {e}"),
                _ => {}
            }
        }
    }
    let mut kept = Vec::new();
    for _ in 0..rng.gen_range(1..=2) {
        let wait = Duration::from_millis(200);
        match sem
            .try_acquire_for(wait, None)
            .await
            .expect("an acquire failed")
        {
            Some(permit) => kept.push(permit),
            None => break,
        }
    }
    (tally, kept)
}

/// Not a test on its own: a churning process of the churn tests. Its tasks take and give back
/// permits at random for its run; then it reports what it keeps (`HOLDING n=...`) once nothing
/// of its is in flight, waits for the stop key, gives its permits back and reports `DONE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by the churn tests"]
async fn child_churn() {
    let Some(env) = child::env() else { return };
    let (url, name, kind) = (
        env.text("REDIS_URL"),
        env.text("SYNC_NAME"),
        env.text("SYNC_KIND"),
    );
    let (stop_key, seed): (String, u64) = (env.text("STOP_KEY"), env.number("SEED"));
    // A command timeout no load reaches: any error is a finding.
    let client = connect(&url, Duration::from_secs(2), Duration::from_secs(5), SLACK).await;
    let deadline = Instant::now() + env.millis("RUN_MS");
    let rng = |task: u64| StdRng::seed_from_u64(seed.wrapping_mul(1000).wrapping_add(task));
    let mut tally = Tally::default();
    let mut add = |t: Tally| {
        tally.acquired += t.acquired;
        tally.busy += t.busy;
        tally.cut += t.cut;
        tally.lost += t.lost;
    };
    let mut plain_kept = Vec::new();
    let mut permits_kept = Vec::new();
    if kind == "plain" {
        let tasks: Vec<_> = (0..CHURN_TASKS)
            .map(|t| tokio::spawn(plain_churn(client.semaphore(&name), rng(t), deadline)))
            .collect();
        for task in tasks {
            let (t, kept) = task.await.expect("a churning task failed");
            add(t);
            plain_kept.push(kept);
        }
    } else {
        let tasks: Vec<_> = (0..CHURN_TASKS)
            .map(|t| {
                tokio::spawn(permit_churn(
                    client.permit_semaphore(&name),
                    rng(t),
                    deadline,
                ))
            })
            .collect();
        for task in tasks {
            let (t, kept) = task.await.expect("a churning task failed");
            add(t);
            permits_kept.extend(kept);
        }
    }
    let n = plain_kept.iter().sum::<u32>() as usize + permits_kept.len();
    until_idle(&[&client]).await;
    let lost_kept = permits_kept.iter().filter(|p| p.is_lost()).count();
    say(format!(
        "HOLDING n={n} acquired={} busy={} cut={} lost={} lost_kept={lost_kept} seed={seed}",
        tally.acquired, tally.busy, tally.cut, tally.lost
    ));

    let stopped = eventually(Duration::from_secs(60), || async {
        use fred::interfaces::KeysInterface;
        client
            .redis()
            .exists::<i64, _>(&stop_key)
            .await
            .unwrap_or(0)
            == 1
    });
    assert!(stopped.await, "never told to stop");
    let sem = client.semaphore(&name);
    for kept in plain_kept.into_iter().filter(|n| *n > 0) {
        sem.release(kept).await.expect("a release failed");
    }
    for permit in permits_kept {
        match permit.release().await {
            Ok(()) => {}
            Err(e) if e.is_lease_lost() => {}
            Err(e) => panic!("a release failed: {e}"),
        }
    }
    until_idle(&[&client]).await;
    client.shutdown().await.unwrap();
    say("DONE");
}

/// Eight processes churn (see [`child_churn`]) on one semaphore of `total` permits while the
/// checker samples it (`check`). Once they all stopped, what they report they keep plus what is
/// available is the total; once they gave it back, everything is available, no permit is out
/// and no request key is left.
async fn churn_across_processes(kind: &str, total: u64, check: Check) {
    let server = RedisServer::start();
    let admin = common::client(&server, LONG).await;
    let name = common::prefix(&format!("sync-churn-{kind}"));
    let stop_key = format!("{name}:stop");
    let set = if kind == "plain" {
        admin.semaphore(&name).try_set_permits(total).await
    } else {
        admin.permit_semaphore(&name).try_set_permits(total).await
    };
    assert!(set.unwrap());
    let seed: u64 = rand::random::<u32>().into();
    println!("{kind} churn: seed {seed}");

    let sampler = Sampler::start(&server, &name, total, check);
    let children: Vec<Proc> = (0..CHURN_PROCESSES)
        .map(|i| {
            Proc::spawn(
                concat!(module_path!(), "::child_churn"),
                &[
                    ("REDIS_URL", server.url()),
                    ("SYNC_NAME", name.clone()),
                    ("SYNC_KIND", kind.to_owned()),
                    ("STOP_KEY", stop_key.clone()),
                    ("SEED", (seed + i).to_string()),
                    ("RUN_MS", CHURN_RUN.as_millis().to_string()),
                ],
            )
        })
        .collect();

    // Every process stopped and reports what it keeps: that and what is available is the total.
    let mut holding = 0;
    let mut acquired = 0;
    let mut cuts = 0;
    for child in &children {
        let report = child
            .report("HOLDING", CHURN_RUN + Duration::from_secs(60))
            .await;
        println!("{kind} churn: {report}");
        holding += field(&report, "n");
        acquired += field(&report, "acquired");
        cuts += field(&report, "cut");
    }
    let (count, out) = state(&server, &name);
    if kind == "plain" {
        assert_eq!(
            (count, out),
            (Some((total - holding) as i64), 0),
            "the processes keep {holding} of {total} permits"
        );
    } else {
        assert_eq!(
            (count, out),
            (Some((total - holding) as i64), holding as i64),
            "the processes keep {holding} of {total} permits"
        );
    }
    assert!(
        acquired >= 20 && cuts >= 5,
        "too little churn: {acquired} acquires, {cuts} cuts"
    );

    server.cmd(&["SET", &stop_key, "1"]);
    for child in children {
        let reports = child.finish(Duration::from_secs(60)).await;
        assert!(reports.iter().any(|r| r == "DONE"), "{reports:?}");
    }
    let samples = sampler.finish();
    println!("{kind} churn: {acquired} acquires, {cuts} cut, {samples} samples");
    assert!(samples >= 100, "only {samples} samples");
    assert_eq!(state(&server, &name), (Some(total as i64), 0));
    assert!(
        eventually(SLACK, || async { request_keys(&server, &name).is_empty() }).await,
        "request keys left: {:?}",
        request_keys(&server, &name)
    );
    assert_settled(&server, &[&admin], &[&name]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_never_lends_more_permits_than_it_has_across_processes() {
    churn_across_processes("plain", 6, plain_check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_semaphore_never_lends_more_permits_than_it_has_across_processes() {
    churn_across_processes("permit", 5, permit_check).await;
}

// ---- 2. A holder SIGKILLed, or paused past its lease ----

/// Not a test on its own: a holder process. It takes `PERMITS` permits of a plain semaphore and
/// reports `HELD`, then waits to be killed; or takes that many `Permit`s (watchdog lease
/// `WATCHDOG_MS`), reports `HELD ids=...`, and once a pause past its lease lost them reports
/// `LOST` with what `is_lost` says, then each release's outcome (`RELEASED ...`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by the killed and paused holder tests"]
async fn child_holder() {
    let Some(env) = child::env() else { return };
    let (url, name, kind) = (
        env.text("REDIS_URL"),
        env.text("SYNC_NAME"),
        env.text("SYNC_KIND"),
    );
    let (permits, lease): (u32, _) = (env.number("PERMITS"), env.millis("WATCHDOG_MS"));
    let client = connect(&url, lease, Duration::from_secs(2), SLACK).await;
    if kind == "plain" {
        client.semaphore(&name).acquire(permits).await.unwrap();
        say("HELD");
        tokio::time::sleep(Duration::from_secs(60)).await;
        panic!("the holder was not killed");
    }
    let sem = client.permit_semaphore(&name);
    let mut held = Vec::new();
    for _ in 0..permits {
        held.push(sem.acquire().await.unwrap());
    }
    let ids: Vec<&str> = held.iter().map(Permit::id).collect();
    say(format!("HELD ids={}", ids.join(",")));
    timeout(Duration::from_secs(60), held[0].lost())
        .await
        .expect("the permit was never lost");
    let all_lost = held.iter().all(Permit::is_lost);
    say(format!("LOST is_lost={}", u8::from(all_lost)));
    for permit in held {
        let outcome = match permit.release().await {
            Ok(()) => "ok".to_owned(),
            Err(e) if e.is_lease_lost() => "lease-lost".to_owned(),
            Err(e) if e.is_not_held() => "not-held".to_owned(),
            Err(e) => format!("error {e}"),
        };
        say(format!("RELEASED {outcome}"));
    }
    client.shutdown().await.unwrap();
}

fn holder_env(
    server: &RedisServer,
    name: &str,
    kind: &str,
    permits: u32,
    lease: Duration,
) -> Vec<(&'static str, String)> {
    vec![
        ("REDIS_URL", server.url()),
        ("SYNC_NAME", name.to_owned()),
        ("SYNC_KIND", kind.to_owned()),
        ("PERMITS", permits.to_string()),
        ("WATCHDOG_MS", lease.as_millis().to_string()),
    ]
}

/// A process holding both permits of a permit semaphore is SIGKILLed: its permits come back one
/// lease after its last renewal, to a waiter here, and not before their leases end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_permit_holder_gives_its_permits_back_by_its_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let client = connect(&server.url(), LONG, CMD, NO_POLL).await;
    let name = common::prefix("sync-killed-permit");
    let sem = client.permit_semaphore(&name);
    assert!(sem.try_set_permits(2).await.unwrap());

    let mut holder = Proc::spawn(
        concat!(module_path!(), "::child_holder"),
        &holder_env(&server, &name, "permit", 2, lease),
    );
    let held = holder.report("HELD", Duration::from_secs(30)).await;
    let mut ids: Vec<String> = held["HELD ids=".len()..]
        .split(',')
        .map(str::to_owned)
        .collect();
    ids.sort();
    let mut out = lease_ids(&server, &name);
    out.sort();
    assert_eq!(out, ids);
    assert_eq!(state(&server, &name), (Some(0), 2));

    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let sem = sem.clone();
            tokio::spawn(async move {
                let permit = sem.try_acquire_for(lease * 4 + SLACK, None).await;
                (permit, Instant::now())
            })
        })
        .collect();
    until_waiting(&server, &client, &common::semaphore_channel(&name), 2, 1).await;
    holder.kill().await;
    let killed = Instant::now();
    // Nobody renews them now: the latest end of their leases, on the server's clock.
    let ends: Vec<i64> = common::raw_zrange_hex(&server, &common::leases_key(&name))
        .into_iter()
        .map(|(_, end)| end)
        .collect();
    assert_eq!(ends.len(), 2, "the dead holder's permits are out");
    let earliest = *ends.iter().min().unwrap();

    let mut taken = Vec::new();
    for waiter in waiters {
        let (permit, at) = common::within(lease * 4 + SLACK * 2, waiter, "a waiter hung").await;
        let permit = permit.unwrap().expect("the dead holder's permit came back");
        let now = common::raw_time_ms(&server);
        assert!(
            now >= earliest,
            "a permit came back {} ms before the dead holder's lease ended",
            earliest - now
        );
        let after = at - killed;
        println!("a killed holder's permit came back {after:?} after the kill");
        assert!(
            after < lease + SLACK,
            "its permit came back {after:?} after the kill (lease {lease:?})"
        );
        taken.push(permit);
    }
    let mut mine: Vec<String> = taken.iter().map(|p| p.id().to_owned()).collect();
    mine.sort();
    let mut out = lease_ids(&server, &name);
    out.sort();
    assert_eq!(out, mine, "only the new holders' permits are out");
    assert_eq!(state(&server, &name), (Some(0), 2));
    for permit in taken {
        permit.release().await.unwrap();
    }
    assert_eq!(state(&server, &name), (Some(2), 0));
    assert_settled(&server, &[&client], &[&name]).await;
}

/// A process holding two of three permits of a plain semaphore is SIGKILLed: they stay gone (a
/// semaphore's permits are not tied to a holder), until someone adds them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_semaphore_holder_keeps_its_permits() {
    let server = RedisServer::start();
    let client = connect(&server.url(), LONG, CMD, NO_POLL).await;
    let name = common::prefix("sync-killed-plain");
    let sem = client.semaphore(&name);
    assert!(sem.try_set_permits(3).await.unwrap());

    let mut holder = Proc::spawn(
        concat!(module_path!(), "::child_holder"),
        &holder_env(&server, &name, "plain", 2, Duration::from_secs(1)),
    );
    holder.report("HELD", Duration::from_secs(30)).await;
    assert_eq!(raw_count(&server, &name), Some(1));
    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move { sem.try_acquire_for(2, common::HANG).await }
    });
    until_waiting(&server, &client, &common::semaphore_channel(&name), 1, 1).await;
    holder.kill().await;

    // Several of the holder's leases, had it had any: nothing gives its permits back.
    assert!(
        stays(Duration::from_secs(2), || async {
            raw_count(&server, &name) == Some(1) && !waiter.is_finished()
        })
        .await,
        "the killed holder's permits came back: {:?}",
        raw_count(&server, &name)
    );
    assert!(!sem.try_acquire(2).await.unwrap());
    let added = Instant::now();
    client.semaphore(&name).add_permits(2).await.unwrap();
    let taken = common::within(
        common::PROMPT,
        waiter,
        "the waiter was not woken by the added permits",
    )
    .await;
    assert!(taken.unwrap());
    assert!(added.elapsed() < common::PROMPT);
    assert_eq!(raw_count(&server, &name), Some(1));
    sem.release(2).await.unwrap();
    assert_eq!(raw_count(&server, &name), Some(3));
    assert_settled(&server, &[&client], &[&name]).await;
}

/// A permit holder process is paused (SIGSTOP) past its lease: a waiter here takes the permit
/// once the lease ended; the holder, resumed, learns its loss (`lost()` and `is_lost()`), its
/// renewals never bring its permit back, and its release fails with `LeaseLost` without
/// touching the new holder's permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_permit_holder_learns_its_loss_and_spares_the_next_holder() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(800);
    let client = connect(&server.url(), Duration::from_secs(3), CMD, NO_POLL).await;
    let name = common::prefix("sync-paused-permit");
    let sem = client.permit_semaphore(&name);
    assert!(sem.try_set_permits(1).await.unwrap());

    let holder = Proc::spawn(
        concat!(module_path!(), "::child_holder"),
        &holder_env(&server, &name, "permit", 1, lease),
    );
    let held = holder.report("HELD", Duration::from_secs(30)).await;
    let old_id = held["HELD ids=".len()..].to_owned();
    assert_eq!(lease_ids(&server, &name), vec![old_id.clone()]);

    let frozen = Frozen::stop(holder.pid());
    let old_end = lease_end(&server, &name, &old_id).expect("the paused holder's permit");
    let permit = sem
        .try_acquire_for(lease + SLACK, None)
        .await
        .unwrap()
        .expect("the paused holder's lease ends");
    let now = common::raw_time_ms(&server);
    assert!(
        now >= old_end,
        "taken {} ms before the paused holder's lease ended",
        old_end - now
    );
    assert_eq!(lease_ids(&server, &name), vec![permit.id().to_owned()]);

    drop(frozen);
    let resumed = Instant::now();
    // Until a while after the holder learnt of its loss, only the new permit is out.
    let mut lost_seen: Option<Instant> = None;
    loop {
        assert_eq!(
            lease_ids(&server, &name),
            vec![permit.id().to_owned()],
            "the paused holder's permit came back"
        );
        assert_eq!(state(&server, &name), (Some(0), 1));
        if lost_seen.is_none() && !holder.reports("RELEASED").is_empty() {
            lost_seen = Some(Instant::now());
        }
        if lost_seen.is_some_and(|at| at.elapsed() > lease) {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(15),
            "the holder never learnt of its loss: {:?}",
            holder.all()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let reports = holder.finish(Duration::from_secs(15)).await;
    assert!(
        reports.contains(&"LOST is_lost=1".to_owned()),
        "{reports:?}"
    );
    assert!(
        reports.contains(&"RELEASED lease-lost".to_owned()),
        "{reports:?}"
    );
    assert_eq!(lease_ids(&server, &name), vec![permit.id().to_owned()]);
    assert!(!permit.is_lost());
    permit.release().await.unwrap();
    assert_eq!(state(&server, &name), (Some(1), 0));
    assert_settled(&server, &[&client], &[&name]).await;
}

// ---- 3. A latch across four processes ----

/// Not a test on its own: a process whose `TASKS` tasks wait on the latch. It reports `WAITING`
/// once they all wait, and each task `RETURNED` with the count it reads right after its wait
/// returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper process, run by a_latch_wakes_waiters_of_four_processes_at_zero_only"]
async fn child_latch_waiter() {
    let Some(env) = child::env() else { return };
    let (url, name, tasks) = (
        env.text("REDIS_URL"),
        env.text("SYNC_NAME"),
        env.number("TASKS"),
    );
    let client = connect(&url, LONG, Duration::from_secs(2), NO_POLL).await;
    let latch = client.count_down_latch(&name);
    let waiters: Vec<_> = (0..tasks)
        .map(|task| {
            let latch = latch.clone();
            tokio::spawn(async move {
                let open = latch.wait_for(common::HANG).await.unwrap();
                let count = latch.count().await.unwrap();
                say(format!(
                    "RETURNED task={task} open={} count={count}",
                    u8::from(open)
                ));
            })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.stats().waiters == tasks
        })
        .await,
        "the tasks did not wait: {:?}",
        client.stats()
    );
    say("WAITING");
    for waiter in waiters {
        waiter.await.unwrap();
    }
    client.shutdown().await.unwrap();
}

/// Waiters in four processes (three tasks each) wait on a latch of 4 counted down here one at a
/// time: none returns while the count is above 0, all return once it reaches 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_wakes_waiters_of_four_processes_at_zero_only() {
    const PROCESSES: usize = 4;
    const TASKS: usize = 3;
    const COUNT: u64 = 4;
    let server = RedisServer::start();
    let client = connect(&server.url(), LONG, CMD, NO_POLL).await;
    let name = common::prefix("sync-latch-procs");
    let latch = client.count_down_latch(&name);
    assert!(latch.try_set_count(COUNT).await.unwrap());

    let children: Vec<Proc> = (0..PROCESSES)
        .map(|_| {
            Proc::spawn(
                concat!(module_path!(), "::child_latch_waiter"),
                &[
                    ("REDIS_URL", server.url()),
                    ("SYNC_NAME", name.clone()),
                    ("TASKS", TASKS.to_string()),
                ],
            )
        })
        .collect();
    for child in &children {
        child.report("WAITING", Duration::from_secs(30)).await;
    }
    let channel = common::latch_channel(&name);
    assert!(
        eventually(Duration::from_secs(10), || async {
            raw_numsub(&server, &channel) == PROCESSES as i64
        })
        .await,
        "the processes did not all subscribe"
    );
    let returned = || -> usize { children.iter().map(|c| c.reports("RETURNED").len()).sum() };

    for done in 1..COUNT {
        latch.count_down().await.unwrap();
        assert_eq!(latch.count().await.unwrap(), COUNT - done);
        assert!(
            stays(Duration::from_millis(200), || async { returned() == 0 }).await,
            "a waiter returned with the count at {}",
            COUNT - done
        );
    }
    assert_eq!(returned(), 0);
    let last = Instant::now();
    latch.count_down().await.unwrap();
    assert!(
        eventually(common::PROMPT, || async { returned() == PROCESSES * TASKS }).await,
        "{} of {} waiters returned within {:?} of the last count-down",
        returned(),
        PROCESSES * TASKS,
        common::PROMPT
    );
    println!(
        "every waiter returned {:?} after the last count-down",
        last.elapsed()
    );
    for child in children {
        let reports = child.finish(Duration::from_secs(30)).await;
        for report in reports.iter().filter(|r| r.starts_with("RETURNED")) {
            assert_eq!(field(report, "open"), 1, "{report}");
            assert_eq!(
                field(report, "count"),
                0,
                "a waiter returned early: {report}"
            );
        }
    }
    assert!(
        !common::raw_exists(&server, &name),
        "the latch at 0 is deleted"
    );
    assert_settled(&server, &[&client], &[&name]).await;
}

// ---- 4. Faults: workers in this process ----

/// Workers that take and give back permits in a loop until stopped, on clients that may see
/// faults: an error that says Redis failed is allowed (a failed acquire holds nothing: what it
/// took is read back or given back), and a failed release is counted as unsure (it may or may
/// not have given its permits back).
struct Churn {
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    unsure: Arc<AtomicU64>,
    lost: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// What the workers of a [`Churn`] did: rounds (or count-downs) that succeeded, operations that
/// failed, permits (or count-downs) of failed releases that may or may not have applied, and
/// permits whose release found them lost.
struct Ended {
    rounds: u64,
    errors: u64,
    unsure: u64,
    lost: u64,
}

impl Churn {
    fn new() -> Churn {
        Churn {
            stop: Arc::default(),
            rounds: Arc::default(),
            errors: Arc::default(),
            unsure: Arc::default(),
            lost: Arc::default(),
            tasks: Vec::new(),
        }
    }

    /// The workers of `syncs`' type on them (in turn): four taking 1 or 2 permits of a
    /// semaphore each round, three taking a `Permit`, or four counting a latch down `each` times.
    fn on(syncs: &[AnySync], each: u64) -> Churn {
        match syncs[0].kind() {
            Synchronizer::Semaphore => {
                let sems: Vec<Semaphore> = syncs
                    .iter()
                    .filter_map(AnySync::as_semaphore)
                    .cloned()
                    .collect();
                Churn::semaphore(&sems, 4)
            }
            Synchronizer::Permit => {
                let sems: Vec<PermitSemaphore> = syncs
                    .iter()
                    .filter_map(AnySync::as_permit)
                    .cloned()
                    .collect();
                Churn::permits(&sems, 3)
            }
            Synchronizer::Latch => {
                let latches: Vec<CountDownLatch> = syncs
                    .iter()
                    .filter_map(AnySync::as_latch)
                    .cloned()
                    .collect();
                Churn::count_downs(&latches, 4, each)
            }
        }
    }

    /// `workers` workers taking 1 or 2 permits of `sems` (in turn) each round.
    fn semaphore(sems: &[Semaphore], workers: usize) -> Churn {
        let sems: Vec<AnySync> = sems.iter().cloned().map(AnySync::Semaphore).collect();
        Churn::takers(&sems, workers, |i| 1 + (i % 2) as u32)
    }

    /// `workers` workers taking a permit of `sems` (in turn) each round.
    fn permits(sems: &[PermitSemaphore], workers: usize) -> Churn {
        let sems: Vec<AnySync> = sems.iter().cloned().map(AnySync::Permit).collect();
        Churn::takers(&sems, workers, |_| 1)
    }

    /// `workers` workers taking `permits(i)` permits (worker `i`'s) of `sems` (in turn) each
    /// round, and giving them back: a release that failed is unsure, one that found its permit
    /// lost is counted as lost.
    fn takers(sems: &[AnySync], workers: usize, permits: impl Fn(usize) -> u32) -> Churn {
        let mut churn = Churn::new();
        for i in 0..workers {
            let sem = sems[i % sems.len()].clone();
            let n = permits(i);
            let (stop, rounds, errors, unsure) = churn.counters();
            let lost = churn.lost.clone();
            churn.tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    match sem.take_for(n, SLACK).await {
                        Ok(Some(taken)) => {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            match taken.give_back().await {
                                Ok(()) => {}
                                Err(e) if e.is_lease_lost() => {
                                    lost.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => {
                                    assert!(e.is_redis(), "a release failed: {e}");
                                    println!("a release failed: {e}");
                                    unsure.fetch_add(n.into(), Ordering::Relaxed);
                                    errors.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            rounds.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            assert!(e.is_redis(), "an acquire failed: {e}");
                            errors.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
            }));
        }
        churn
    }

    /// `workers` workers counting down `latches` (in turn), each as many times as `each` says.
    fn count_downs(latches: &[CountDownLatch], workers: usize, each: u64) -> Churn {
        let mut churn = Churn::new();
        for i in 0..workers {
            let latch = latches[i % latches.len()].clone();
            let (stop, rounds, errors, unsure) = churn.counters();
            churn.tasks.push(tokio::spawn(async move {
                for _ in 0..each {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    match latch.count_down().await {
                        Ok(()) => {
                            rounds.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            assert!(e.is_redis(), "a count-down failed: {e}");
                            println!("a count-down failed: {e}");
                            errors.fetch_add(1, Ordering::Relaxed);
                            unsure.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
        churn
    }

    #[allow(clippy::type_complexity)]
    fn counters(
        &self,
    ) -> (
        Arc<AtomicBool>,
        Arc<AtomicU64>,
        Arc<AtomicU64>,
        Arc<AtomicU64>,
    ) {
        (
            self.stop.clone(),
            self.rounds.clone(),
            self.errors.clone(),
            self.unsure.clone(),
        )
    }

    fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Whether the workers went `by` rounds further (within 10 s).
    async fn progress(&self, by: u64) -> bool {
        let before = self.rounds.load(Ordering::Relaxed);
        eventually(Duration::from_secs(10), || async {
            self.rounds.load(Ordering::Relaxed) >= before + by
        })
        .await
    }

    /// Stops the workers and joins them.
    async fn stop(self) -> Ended {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            timeout(Duration::from_secs(30), task)
                .await
                .expect("a worker hung")
                .expect("a worker failed");
        }
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Ended {
            rounds: load(&self.rounds),
            errors: load(&self.errors),
            unsure: load(&self.unsure),
            lost: load(&self.lost),
        }
    }
}

/// A plain semaphore of `total` whose workers stopped and whose clients have nothing in
/// flight: every permit is back, but those of releases that failed, which may be.
fn assert_plain_conserved(server: &RedisServer, name: &str, total: u64, unsure: u64) {
    let count = raw_count(server, name).expect("the semaphore") as u64;
    assert!(
        count <= total && count + unsure >= total,
        "{count} of {total} permits are back ({unsure} unsure)"
    );
    if unsure > 0 {
        println!("{count} of {total} permits back, {unsure} of failed releases unsure");
    }
}

/// A permit semaphore of `total` whose permits were all given back or lapsed: once the lapsed
/// ones are reclaimed, all are available and none is out.
async fn assert_permits_back(server: &RedisServer, sem: &PermitSemaphore, total: u64) {
    assert!(
        eventually(LONG, || async {
            sem.available_permits().await.ok() == Some(total as i64)
        })
        .await,
        "not every permit came back: {:?}",
        state(server, sem.name())
    );
    assert_eq!(state(server, sem.name()), (Some(total as i64), 0));
}

// ---- Faults: a server restart ----

/// The server is killed and restarted (empty) while three tasks wait at a closed gate (a holder
/// has every permit; a latch counts 2): each wait ends, none hangs. A semaphore is gone
/// (`NotFound`, or a Redis error); a latch is gone, so open (or a Redis error). Then a plain
/// semaphore's holder re-creates it with its release, as Redisson's does; a permit holder's
/// permits are lost (`lost()` fires, the release fails with `LeaseLost`) and it is set again; a
/// latch reads 0 and is set again. Closed again, its gate wakes a waiter at once when opened.
async fn restart_ends_every_wait_and_waiters_wake_again(sync: Synchronizer) {
    let mut server = RedisServer::start();
    // A permit holder's lease: the restart wipes out its permits, lost within two of them.
    let lease = match sync {
        Synchronizer::Permit => Duration::from_secs(1),
        _ => LONG,
    };
    let holder = connect(&server.url(), lease, CMD, NO_POLL).await;
    let waiting = connect(&server.url(), LONG, CMD, NO_POLL).await;
    let name = common::prefix(&format!("sync-restart-{sync:?}"));
    let channel = sync.channel(&name);
    let held = sync.on(&holder, &name);
    let total = match sync {
        Synchronizer::Semaphore => 3,
        _ => 2,
    };
    let closed = held.close(total).await.unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let waiter = sync.on(&waiting, &name);
            tokio::spawn(async move { waiter.wait().await })
        })
        .collect();
    until_waiting(&server, &waiting, &channel, 3, 1).await;

    server.kill();
    server.restart();
    let restarted = Instant::now();
    for waiter in waiters {
        let outcome = common::within(
            Duration::from_secs(15),
            waiter,
            "a wait did not end after the restart",
        )
        .await;
        match outcome {
            Ok(Passed::Open) if sync == Synchronizer::Latch => {}
            Err(e) if e.is_redis() => println!("a wait ended: {e}"),
            Err(e) if e.is_not_found() && sync != Synchronizer::Latch => {
                println!("a wait ended: {e}")
            }
            other => panic!("a wait across the restart: {other:?}"),
        }
    }
    println!(
        "every wait ended {:?} after the restart",
        restarted.elapsed()
    );

    let mut closed = match closed {
        Closed::Permits(sem, n) => {
            until_connected(&holder).await;
            sem.release(n).await.unwrap();
            assert_eq!(raw_count(&server, &name), Some(3));
            held.take_all(total).await.unwrap()
        }
        Closed::Permit(permits) => {
            for permit in &permits {
                timeout(lease * 2 + SLACK, permit.lost())
                    .await
                    .expect("lost() did not fire for a permit the restart wiped out");
            }
            for permit in permits {
                let err = permit.release().await.unwrap_err();
                assert!(
                    err.is_lease_lost(),
                    "the release of a wiped-out permit: {err:?}"
                );
            }
            until_connected(&holder).await;
            held.close(total).await.expect("set again")
        }
        Closed::Count(latch, _) => {
            until_connected(&holder).await;
            assert_eq!(
                latch.count().await.unwrap(),
                0,
                "the restart wiped the count"
            );
            held.close(1).await.unwrap()
        }
    };
    let waiter = tokio::spawn({
        let waiter = sync.on(&waiting, &name);
        async move { waiter.wait_for(common::HANG).await }
    });
    until_waiting(&server, &waiting, &channel, 1, 1).await;
    let released = Instant::now();
    closed.open_one().await.unwrap();
    let passed = common::within(common::PROMPT, waiter, "no waiter woken after the restart")
        .await
        .unwrap()
        .expect("the waiter got past the gate");
    assert!(released.elapsed() < common::PROMPT);
    if sync == Synchronizer::Permit {
        assert_eq!(state(&server, &name), (Some(0), 2));
    }
    passed.give_back().await.unwrap();
    closed.open().await.unwrap();
    match sync {
        Synchronizer::Semaphore => assert_eq!(raw_count(&server, &name), Some(3)),
        Synchronizer::Permit => assert_eq!(state(&server, &name), (Some(2), 0)),
        Synchronizer::Latch => {}
    }
    assert_settled_after_faults(&server, &[&holder, &waiting], &[&name]).await;
}

// ---- Faults: DEBUG SLEEP ----

/// The server stalls under churning workers, for less than the command timeout (nothing fails)
/// and for longer (replies are late: acquires are read back or given back, releases retried
/// under their request id): the counter stays within its bounds throughout and every permit is
/// back at the end. A release and an acquire sent during the long stall: the release counts
/// once, the acquire has its permit or gave it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_debug_sleep_loses_no_permit() {
    const TOTAL: u64 = 3;
    let server = RedisServer::start();
    let clients = [
        connect(&server.url(), LONG, CMD, SLACK).await,
        connect(&server.url(), LONG, CMD, SLACK).await,
    ];
    let name = common::prefix("sync-sleep-plain");
    let direct = format!("{name}:direct");
    let sems: Vec<Semaphore> = clients.iter().map(|c| c.semaphore(&name)).collect();
    assert!(sems[0].try_set_permits(TOTAL).await.unwrap());
    let sampler = Sampler::start(&server, &name, TOTAL, plain_check);
    let sem = clients[0].semaphore(&direct);
    assert!(sem.try_set_permits(2).await.unwrap());
    assert!(sem.try_acquire(2).await.unwrap());

    let churn = Churn::semaphore(&sems, 4);
    assert!(churn.progress(5).await, "the workers did not start");
    faults::debug_sleep(&server, 0.2).woken().await;
    assert!(churn.progress(5).await, "the workers stalled");
    assert_eq!(
        churn.errors(),
        0,
        "a stall shorter than the command timeout failed something"
    );

    let sleep = faults::debug_sleep(&server, 1.5);
    assert!(common::family::until_asleep(&server).await);
    let release = tokio::spawn({
        let sem = sem.clone();
        async move { sem.release(2).await }
    });
    let acquire = tokio::spawn({
        let sem = sem.clone();
        async move { sem.try_acquire(1).await }
    });
    sleep.woken().await;
    release
        .await
        .unwrap()
        .expect("a release answered late is retried");
    let taken = acquire.await.unwrap();
    println!("an acquire answered late: {taken:?}");
    until_idle(&[&clients[0]]).await;
    match taken {
        Ok(true) => {
            assert_eq!(raw_count(&server, &direct), Some(1));
            sem.release(1).await.unwrap();
        }
        Ok(false) => assert_eq!(raw_count(&server, &direct), Some(2)),
        Err(_) => {}
    }
    assert_eq!(raw_count(&server, &direct), Some(2), "a permit was lost");

    assert!(churn.progress(5).await, "the workers stalled");
    let ended = churn.stop().await;
    println!("{} rounds, {} errors", ended.rounds, ended.errors);
    until_idle(&[&clients[0], &clients[1]]).await;
    assert_plain_conserved(&server, &name, TOTAL, ended.unsure);
    sampler.finish();
    assert_settled_after_faults(&server, &[&clients[0], &clients[1]], &[&name, &direct]).await;
}

/// The server stalls for less than a permit's lease while one is held and workers churn on the
/// others: nothing fails, the held permit outlives the stall by a lease, permits are conserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_debug_sleep_shorter_than_the_lease_loses_nothing() {
    const TOTAL: u64 = 3;
    let server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let holder = connect(&server.url(), lease, CMD, SLACK).await;
    let workers = connect(&server.url(), lease, CMD, SLACK).await;
    let name = common::prefix("sync-sleep-short-permit");
    let sem = holder.permit_semaphore(&name);
    assert!(sem.try_set_permits(TOTAL).await.unwrap());
    let sampler = Sampler::start(&server, &name, TOTAL, permit_check);
    let held = sem.acquire().await.unwrap();

    let churn = Churn::permits(&[workers.permit_semaphore(&name)], 3);
    assert!(churn.progress(5).await, "the workers did not start");
    let woke = faults::debug_sleep(&server, 0.4).woken().await;
    assert!(churn.progress(5).await, "the workers stalled");
    let remaining = (woke + lease).saturating_duration_since(Instant::now());
    assert!(
        timeout(remaining, held.lost()).await.is_err(),
        "lost() fired after a stall shorter than the lease"
    );
    let ended = churn.stop().await;
    println!("{} rounds", ended.rounds);
    assert_eq!(
        (ended.errors, ended.lost),
        (0, 0),
        "a stall shorter than the lease failed something"
    );
    assert!(lease_ids(&server, &name).contains(&held.id().to_owned()));
    held.release().await.unwrap();
    until_idle(&[&holder, &workers]).await;
    assert_eq!(state(&server, &name), (Some(TOTAL as i64), 0));
    sampler.finish();
    assert_settled(&server, &[&holder, &workers], &[&name]).await;
}

/// The server stalls for longer than the lease of the only permit: its holder learns it lost
/// it, a waiter (with a lease that outlasts the stall) takes it once the lease ended, and the
/// old holder's renewals and release never touch the new holder's permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_debug_sleep_longer_than_the_lease_loses_the_permit() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(800);
    let stall = Duration::from_millis(1600);
    let holder = connect(&server.url(), lease, CMD, SLACK).await;
    // Its acquire waits out the stall in the server: a command timeout longer than the stall.
    let other = connect(&server.url(), LONG, SLACK, SLACK).await;
    let name = common::prefix("sync-sleep-long-permit");
    let sem = holder.permit_semaphore(&name);
    assert!(sem.try_set_permits(1).await.unwrap());
    let sampler = Sampler::start(&server, &name, 1, permit_check);
    let held = sem.acquire().await.unwrap();

    let sleep = faults::debug_sleep(&server, stall.as_secs_f64());
    let waiter = tokio::spawn({
        let sem = other.permit_semaphore(&name);
        async move { sem.try_acquire_for(Duration::from_secs(15), None).await }
    });
    sleep.woken().await;
    timeout(SLACK, held.lost())
        .await
        .expect("lost() did not fire after a stall longer than the lease");
    let taken = common::within(Duration::from_secs(20), waiter, "the waiter hung")
        .await
        .unwrap()
        .expect("the permit comes back once its lease ended");
    assert_eq!(lease_ids(&server, &name), vec![taken.id().to_owned()]);
    // The old holder's renewals never bring its permit back.
    assert!(
        stays(lease, || async {
            lease_ids(&server, &name) == vec![taken.id().to_owned()]
        })
        .await,
        "the lost permit came back"
    );
    let err = held.release().await.unwrap_err();
    assert!(
        err.is_lease_lost(),
        "the release of the lost permit: {err:?}"
    );
    assert_eq!(lease_ids(&server, &name), vec![taken.id().to_owned()]);
    taken.release().await.unwrap();
    assert_eq!(state(&server, &name), (Some(1), 0));
    sampler.finish();
    assert_settled(&server, &[&holder, &other], &[&name]).await;
}

/// An acquire sent while the server stalls for longer than the watchdog timeout takes a free
/// permit when the server wakes. `acquire()` promises that the watchdog renews the permit until
/// it is released: so the `Permit` it returns must not be lost, and its lease must stay on
/// Redis for several watchdog timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_acquire_answered_after_its_lease_keeps_its_permit() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(500);
    let stall = Duration::from_millis(1200);
    // Its acquire waits out the whole stall in the server.
    let client = connect(&server.url(), watchdog, SLACK, SLACK).await;
    let name = common::prefix("sync-late-permit");
    let sem = client.permit_semaphore(&name);
    assert!(sem.try_set_permits(2).await.unwrap());
    // Loads the scripts, so the acquire below is one command.
    sem.acquire().await.unwrap().release().await.unwrap();

    let sleep = faults::debug_sleep(&server, stall.as_secs_f64());
    assert!(
        common::family::until_asleep(&server).await,
        "the server never slept"
    );
    let permit = sem.acquire().await.unwrap();
    let woke = sleep.woken().await;
    println!(
        "lost on arrival: {}, leases {:?}",
        permit.is_lost(),
        common::raw_zrange_hex(&server, &common::leases_key(&name))
    );
    while woke.elapsed() < watchdog * 4 {
        let now = common::raw_time_ms(&server);
        let end = lease_end(&server, &name, permit.id());
        assert!(
            end.is_some_and(|end| end > now) && !permit.is_lost(),
            "the permit lapsed {:?} after it was taken (lease end {end:?}, now {now}), lost() says {}",
            woke.elapsed(),
            permit.is_lost()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    permit.release().await.unwrap();
    until_idle(&[&client]).await;
    assert_eq!(state(&server, &name), (Some(2), 0));
    assert_settled(&server, &[&client], &[&name]).await;
}

/// Count-downs sent while the server stalls, for longer than the command timeout (the first
/// send times out, the retry replays it) and for less: each counts once, and waiters return at
/// zero only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_debug_sleep_counts_each_count_down_once() {
    let server = RedisServer::start();
    let counter = connect(&server.url(), LONG, CMD, NO_POLL).await;
    // The stalls are the count-downs' to ride out. A waiter that looks at the count during one
    // (after a count-down's message) would fail its wait with a timeout at CMD, which a loaded
    // machine can stretch a 0.3 s stall into: the waiters' client waits out the stalls.
    let waiting = connect(&server.url(), LONG, SLACK, NO_POLL).await;
    let name = common::prefix("sync-sleep-latch");
    let channel = common::latch_channel(&name);
    let latch = counter.count_down_latch(&name);
    assert!(latch.try_set_count(3).await.unwrap());
    let mut waiters: Vec<_> = (0..3)
        .map(|_| {
            let latch = waiting.count_down_latch(&name);
            tokio::spawn(async move { latch.wait_for(common::HANG).await })
        })
        .collect();
    until_waiting(&server, &waiting, &channel, 3, 1).await;

    let sleep = faults::debug_sleep(&server, 1.5);
    assert!(common::family::until_asleep(&server).await);
    latch
        .count_down()
        .await
        .expect("a count-down across a long stall");
    sleep.woken().await;
    assert_eq!(
        raw_count(&server, &name),
        Some(2),
        "counted twice or not at all"
    );

    let sleep = faults::debug_sleep(&server, 0.3);
    assert!(common::family::until_asleep(&server).await);
    latch
        .count_down()
        .await
        .expect("a count-down across a short stall");
    sleep.woken().await;
    assert_eq!(raw_count(&server, &name), Some(1));
    assert_still_waiting(&mut waiters).await;

    let counted = Instant::now();
    latch.count_down().await.unwrap();
    for waiter in waiters {
        let open = common::within(common::PROMPT, waiter, "a waiter was not woken at zero").await;
        assert!(open.unwrap());
    }
    assert!(counted.elapsed() < common::PROMPT);
    assert!(!common::raw_exists(&server, &name));
    assert_settled(&server, &[&counter, &waiting], &[&name]).await;
}

// ---- Faults: CLIENT KILL ----

/// Every connection of the clients is cut while three waiters wait at a closed gate (a holder
/// has every permit, the one of a permit semaphore with a long fixed lease; a latch counts 2) and
/// workers churn on another synchronizer of the type; a permit semaphore's holder also has a
/// permit the watchdog renews. The waiters' channel is subscribed again; the watchdog renews on
/// the new connection; the gate opened, the waiters are served at once (a permit semaphore's one
/// after another); acquires cut in flight are read back or given back and permits conserved, each
/// count-down that succeeded counted once (the count is exactly what is left, give or take those
/// that failed).
async fn client_kill_keeps_waiters_waking_and_counts_conserved(sync: Synchronizer) {
    const COUNTED: u64 = 400;
    let server = RedisServer::start();
    let lease = match sync {
        Synchronizer::Permit => Duration::from_millis(900),
        _ => LONG,
    };
    let holder = connect(&server.url(), lease, CMD, NO_POLL).await;
    let waiting = connect(&server.url(), lease, CMD, NO_POLL).await;
    // Its own client, so the waiters' count is the waiters'.
    let churning = connect(&server.url(), lease, CMD, NO_POLL).await;
    let waited = common::prefix(&format!("sync-kill-{sync:?}"));
    let renewed = format!("{waited}:renewed");
    let churned = format!("{waited}:churn");
    let channel = sync.channel(&waited);
    let mut gate = match sync.on(&holder, &waited) {
        AnySync::Permit(sem) => {
            assert!(sem.try_set_permits(1).await.unwrap());
            Closed::Permit(vec![sem.acquire_with_lease(LONG).await.unwrap()])
        }
        AnySync::Semaphore(_) => sync.on(&holder, &waited).close(3).await.unwrap(),
        AnySync::Latch(_) => sync.on(&holder, &waited).close(2).await.unwrap(),
    };
    let kept = match sync {
        Synchronizer::Permit => {
            let sem = holder.permit_semaphore(&renewed);
            assert!(sem.try_set_permits(1).await.unwrap());
            Some(sem.acquire().await.unwrap())
        }
        _ => None,
    };
    let total = match sync {
        Synchronizer::Latch => COUNTED,
        _ => 2,
    };
    assert!(sync.on(&holder, &churned).set(total).await.unwrap());
    let sampler = Sampler::of(sync, &server, &churned, total);
    let churn = Churn::on(
        &[sync.on(&holder, &churned), sync.on(&churning, &churned)],
        COUNTED / 4,
    );
    let mut waiters: Vec<_> = (0..3)
        .map(|i| {
            let waiter = sync.on(&waiting, &waited);
            tokio::spawn(async move {
                // An attempt in flight when its connection is cut fails with a Redis error; such
                // a waiter waits again.
                let passed = loop {
                    match waiter.wait_for(Duration::from_secs(30)).await {
                        Ok(Some(passed)) => break passed,
                        Ok(None) => panic!("waiter-{i}: not through the gate within 30 s"),
                        Err(e) if e.is_redis() => println!("waiter-{i}: an attempt failed: {e}"),
                        Err(e) => panic!("waiter-{i}: the wait failed: {e}"),
                    }
                };
                let at = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                passed.give_back().await.unwrap();
                at
            })
        })
        .collect();
    until_waiting(&server, &waiting, &channel, 3, 1).await;
    // Rounds enough to show the workers going: count-downs are quick.
    let rounds = match sync {
        Synchronizer::Latch => 20,
        _ => 5,
    };
    assert!(churn.progress(rounds).await, "the workers did not start");

    let normal = faults::client_kill(&server, "normal");
    let pubsub = faults::client_kill(&server, "pubsub");
    let cut_at = Instant::now();
    assert!(normal >= 3, "killed {normal} command connections");
    assert!(pubsub >= 1, "killed {pubsub} subscriber connections");
    until_waiting(&server, &waiting, &channel, 3, 1).await;
    // The watchdog renews on the new connection: the permit outlives two leases after the cut.
    while let Some(kept) = kept.as_ref().filter(|_| cut_at.elapsed() < lease * 2) {
        let now = common::raw_time_ms(&server);
        assert!(
            !kept.is_lost(),
            "lost() fired {:?} after the cut",
            cut_at.elapsed()
        );
        assert!(
            lease_end(&server, &renewed, kept.id()).is_some_and(|end| end > now),
            "the renewed permit lapsed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        churn.progress(rounds).await,
        "the workers stalled after the cut"
    );
    assert_still_waiting(&mut waiters).await;

    while gate.steps() > 1 {
        gate.open_one().await.unwrap();
    }
    let opened = Instant::now();
    gate.open_one().await.unwrap();
    // A permit semaphore's three in a row, each after the one before released.
    let bound = match sync {
        Synchronizer::Permit => common::PROMPT * 3,
        _ => common::PROMPT,
    };
    faults::assert_served_within(waiters, opened, bound).await;
    let ended = churn.stop().await;
    println!(
        "{} rounds, {} errors, {} unsure, {} lost",
        ended.rounds, ended.errors, ended.unsure, ended.lost
    );
    if let Some(kept) = kept {
        kept.release().await.unwrap();
    }
    until_idle(&[&holder, &waiting, &churning]).await;
    let mut names = vec![waited.as_str(), churned.as_str()];
    match sync {
        Synchronizer::Semaphore => {
            assert_eq!(raw_count(&server, &waited), Some(3));
            assert_plain_conserved(&server, &churned, 2, ended.unsure);
        }
        Synchronizer::Permit => {
            assert_eq!(state(&server, &waited), (Some(1), 0));
            assert_eq!(state(&server, &renewed), (Some(1), 0));
            assert_permits_back(&server, &holder.permit_semaphore(&churned), 2).await;
            names.push(&renewed);
        }
        Synchronizer::Latch => {
            let left = raw_count(&server, &churned).unwrap_or(0) as u64;
            let (done, unsure) = (ended.rounds, ended.unsure);
            assert!(
                left + done <= COUNTED && left + done + unsure >= COUNTED,
                "{done} count-downs ({unsure} more unsure) left {left} of {COUNTED}"
            );
        }
    }
    if let Some(sampler) = sampler {
        sampler.finish();
    }
    assert_settled_after_faults(&server, &[&holder, &waiting, &churning], &names).await;
}

// ---- Faults: SCRIPT FLUSH ----

const FLUSHES: usize = 4;

/// Flushes the script cache `FLUSHES` times while `churn` goes on; then checks that scripts were
/// loaded again and that nothing failed.
async fn flush_under(server: &RedisServer, churn: &Churn) {
    for flush in 0..FLUSHES {
        assert!(
            churn.progress(3).await,
            "the workers stalled after {flush} flushes"
        );
        common::flush_scripts(server);
    }
    assert!(churn.progress(3).await, "the workers stalled");
    // The last flush emptied the cache and the workers went on: what it holds was loaded again.
    // (Waited for: on a loaded machine the rounds counted above may be replies that came
    // before the flush and were read after it.)
    let reloaded = eventually(Duration::from_secs(10), || async {
        common::raw_loaded_scripts(server) >= 1
    })
    .await;
    println!(
        "{FLUSHES} flushes, {} scripts loaded again",
        common::raw_loaded_scripts(server)
    );
    assert!(reloaded, "the flushes never made a script reload");
    assert_eq!(churn.errors(), 0, "an operation failed across a flush");
}

/// The script cache is flushed again and again under churning workers (taking and giving back
/// permits; counting down): every script is loaded again on `NOSCRIPT` and nothing fails. Every
/// permit is back (a permit semaphore's with one held and renewed by the watchdog throughout);
/// each count-down counts once, and the latch's waiter returns at zero only.
async fn script_flush_keeps_every_operation_working(sync: Synchronizer) {
    const COUNT: u64 = 400;
    let server = RedisServer::start();
    let (watchdog, poll) = match sync {
        Synchronizer::Semaphore => (LONG, SLACK),
        Synchronizer::Permit => (Duration::from_millis(600), SLACK),
        Synchronizer::Latch => (LONG, NO_POLL),
    };
    let clients = [
        connect(&server.url(), watchdog, CMD, poll).await,
        connect(&server.url(), watchdog, CMD, poll).await,
    ];
    let name = common::prefix(&format!("sync-flush-{sync:?}"));
    let syncs: Vec<AnySync> = clients.iter().map(|c| sync.on(c, &name)).collect();
    let total = match sync {
        Synchronizer::Latch => COUNT,
        _ => 3,
    };
    assert!(syncs[0].set(total).await.unwrap());
    let sampler = Sampler::of(sync, &server, &name, total);
    // Kept through the flushes: a permit the watchdog renews; a waiter at the latch.
    let kept = match &syncs[0] {
        AnySync::Permit(sem) => Some(sem.acquire().await.unwrap()),
        _ => None,
    };
    let waiter = match &syncs[1] {
        AnySync::Latch(latch) => {
            let latch = latch.clone();
            let waiter = tokio::spawn(async move { latch.wait_for(common::HANG).await });
            until_waiting(&server, &clients[1], &sync.channel(&name), 1, 1).await;
            Some(waiter)
        }
        _ => None,
    };
    let churn = Churn::on(&syncs, COUNT / 4 - 1);
    flush_under(&server, &churn).await;
    let done = churn.stop().await.rounds;
    if let Some(kept) = kept {
        assert!(!kept.is_lost(), "the renewals failed across a flush");
        kept.release().await.unwrap();
    }
    until_idle(&[&clients[0], &clients[1]]).await;
    match sync {
        Synchronizer::Semaphore => assert_eq!(raw_count(&server, &name), Some(3)),
        Synchronizer::Permit => assert_eq!(state(&server, &name), (Some(3), 0)),
        Synchronizer::Latch => {
            assert_eq!(raw_count(&server, &name), Some((COUNT - done) as i64));
        }
    }
    if let (Some(waiter), Some(latch)) = (waiter, syncs[0].as_latch()) {
        assert!(!waiter.is_finished(), "the waiter returned early");
        for _ in done..COUNT {
            latch.count_down().await.unwrap();
        }
        assert!(timeout(common::PROMPT, waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap());
    }
    if let Some(sampler) = sampler {
        sampler.finish();
    }
    assert_settled(&server, &[&clients[0], &clients[1]], &[&name]).await;
}

// ---- Faults: lost replies ----

/// A server, a proxy in front of it and a client through the proxy (1 s command timeout).
async fn proxied(watchdog: Duration) -> (RedisServer, Proxy, Client) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = connect(&proxy.url(), watchdog, CMD, NO_POLL).await;
    (server, proxy, client)
}

/// Semaphore replies lost in the proxy: a `try_acquire`'s and a waiter's acquire whose reply was
/// lost are read back (the caller has the permits) or given back; a release whose reply was
/// lost is sent again and counts once, also when its caller dropped it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_lost_replies_conserve_permits() {
    let (server, proxy, client) = proxied(LONG).await;
    let other = connect(&server.url(), LONG, CMD, NO_POLL).await;
    let base = common::prefix("sync-lost-plain");
    let name = |part: &str| format!("{base}:{part}");
    let acquire = sha(relock::testing::scripts::SEMAPHORE_ACQUIRE);
    let release = sha(relock::testing::scripts::SEMAPHORE_RELEASE);
    // Loads the scripts, so no lost reply is a NOSCRIPT one.
    let warm = client.semaphore(name("warm"));
    assert!(warm.try_set_permits(1).await.unwrap());
    assert!(warm.try_acquire(1).await.unwrap());
    warm.release(1).await.unwrap();

    /// Judges an acquire of 2 of 3 permits whose reply was lost.
    async fn settle(
        server: &RedisServer,
        client: &Client,
        sem: &Semaphore,
        taken: relock::Result<bool>,
    ) {
        until_idle(&[client]).await;
        match taken {
            Ok(true) => {
                assert_eq!(
                    raw_count(server, sem.name()),
                    Some(1),
                    "taken twice, or given back"
                );
                sem.release(2).await.unwrap();
            }
            Ok(false) => panic!("enough permits were free"),
            Err(e) => println!("an acquire whose reply was lost failed: {e}"),
        }
        assert_eq!(raw_count(server, sem.name()), Some(3), "a permit was lost");
    }

    // A try_acquire whose reply is lost.
    let sem = client.semaphore(name("try"));
    assert!(sem.try_set_permits(3).await.unwrap());
    proxy.swallow_next_reply(&[&acquire, &name("try")]);
    let taken = timeout(Duration::from_secs(15), sem.try_acquire(2))
        .await
        .expect("try_acquire hung after a lost reply");
    assert_eq!(proxy.swallowed(), 1, "the fault did not happen");
    settle(&server, &client, &sem, taken).await;

    // A waiter's attempt, woken by a release, whose reply is lost.
    let sem = client.semaphore(name("wait"));
    assert!(sem.try_set_permits(3).await.unwrap());
    let blocker = other.semaphore(name("wait"));
    assert!(blocker.try_acquire(2).await.unwrap());
    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move { sem.try_acquire_for(2, Duration::from_secs(15)).await }
    });
    until_waiting(
        &server,
        &client,
        &common::semaphore_channel(&name("wait")),
        1,
        1,
    )
    .await;
    proxy.swallow_next_reply(&[&acquire, &name("wait")]);
    blocker.release(2).await.unwrap();
    let taken = common::within(
        Duration::from_secs(20),
        waiter,
        "the waiter hung after a lost reply",
    )
    .await;
    assert_eq!(proxy.swallowed(), 2, "the fault did not happen");
    settle(&server, &client, &sem, taken).await;

    // A release whose reply is lost is sent again: it counts once.
    let sem = client.semaphore(name("release"));
    assert!(sem.try_set_permits(3).await.unwrap());
    assert!(sem.try_acquire(2).await.unwrap());
    proxy.swallow_next_reply(&[&release, &name("release")]);
    timeout(Duration::from_secs(15), sem.release(2))
        .await
        .expect("release hung after a lost reply")
        .expect("a retried release succeeds");
    assert_eq!(proxy.swallowed(), 3, "the fault did not happen");
    assert_eq!(
        raw_count(&server, &name("release")),
        Some(3),
        "counted twice"
    );

    // The same, the release dropped by its caller mid-flight: finished in the background.
    assert!(sem.try_acquire(2).await.unwrap());
    proxy.swallow_next_reply(&[&release, &name("release")]);
    assert!(timeout(Duration::ZERO, sem.release(2)).await.is_err());
    until_idle(&[&client]).await;
    assert_eq!(proxy.swallowed(), 4, "the fault did not happen");
    assert_eq!(
        raw_count(&server, &name("release")),
        Some(3),
        "counted twice"
    );

    let names = ["warm", "try", "wait", "release"].map(name);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_settled_after_faults(&server, &[&client, &other], &names).await;
}

/// An acquire whose reply and read-back are lost fails; the permits it took are given back once
/// the connection works again, also when the first attempt to give them back was lost with the
/// connection (here, by `EVALSHA`, its script was not loaded yet, and the `NOSCRIPT` reply was
/// dropped; as a function, it ran and its reply was dropped, and it counts once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_acquire_gives_its_permits_back_once_the_connection_works_again() {
    let (server, proxy, client) = proxied(LONG).await;
    let name = common::prefix("sync-undo");
    let sem = client.semaphore(&name);
    assert!(sem.try_set_permits(3).await.unwrap());
    // Loads the acquire script (not the one that gives permits back).
    assert!(sem.try_acquire(1).await.unwrap());
    sem.release(1).await.unwrap();
    let noscript = common::raw_noscript_replies(&server);

    proxy.set_mode(Mode::DropReplies);
    let taken = timeout(Duration::from_secs(15), sem.try_acquire(2))
        .await
        .expect("try_acquire hung with replies dropped");
    assert!(
        taken.is_err(),
        "no reply came, yet try_acquire returned {taken:?}"
    );
    // The acquire ran (by EVALSHA the permits stay taken until the connection works again;
    // as a function, giving them back may have run already).
    let functions = common::functions_in_use();
    let count = raw_count(&server, &name);
    let after = if functions {
        vec![Some(1), Some(3)]
    } else {
        vec![Some(1)]
    };
    assert!(after.contains(&count), "the acquire ran: {count:?}");
    // Giving the permits back reached the server, and its reply was dropped too: by EVALSHA
    // as a NOSCRIPT (the script was not loaded yet), as a function having run.
    assert!(
        eventually(SLACK, || async {
            if functions {
                raw_count(&server, &name) == Some(3)
            } else {
                common::raw_noscript_replies(&server) > noscript
            }
        })
        .await,
        "the permits were not given back: {:?}",
        client.stats()
    );
    proxy.set_mode(Mode::Pass);
    proxy.cut();
    until_idle(&[&client]).await;
    assert_eq!(
        raw_count(&server, &name),
        Some(3),
        "the failed acquire's permits were not given back"
    );
    assert!(sem.try_acquire(3).await.unwrap());
    sem.release(3).await.unwrap();
    assert_settled_after_faults(&server, &[&client], &[&name]).await;
}

/// A release and a count-down whose callers dropped them mid-flight are finished in the
/// background, and their request keys deleted once their replies are in, as the callers' own
/// would be: none is left for its TTL (a minute here). Single-threaded, so neither can finish
/// before the test yields.
#[tokio::test(flavor = "current_thread")]
async fn work_finished_in_the_background_leaves_no_request_key() {
    use futures::FutureExt;
    let server = RedisServer::start();
    let client = connect(&server.url(), LONG, Duration::from_secs(10), NO_POLL).await;
    let name = common::prefix("sync-background-keys");
    let latched = format!("{name}:latch");
    let sem = client.semaphore(&name);
    assert!(sem.try_set_permits(2).await.unwrap());
    assert!(sem.try_acquire(2).await.unwrap());
    assert!(sem.release(2).now_or_never().is_none());
    let latch = client.count_down_latch(&latched);
    assert!(latch.try_set_count(2).await.unwrap());
    assert!(latch.count_down().now_or_never().is_none());
    until_idle(&[&client]).await;
    assert_eq!(raw_count(&server, &name), Some(2));
    assert_eq!(raw_count(&server, &latched), Some(1));
    assert_settled(&server, &[&client], &[&name, &latched]).await;
}

/// Two waiters for a permit each. A release wakes the first, whose acquire runs but whose reply
/// the proxy holds back; meanwhile a second permit is released, and its message comes while the
/// first waiter's attempt (which did not see that permit) is in flight. The first takes its
/// permit, and the second must be woken for the other one rather than sleep through its poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_comes_while_a_waiter_takes_permits_is_passed_on() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    let client = connect(&proxy.url(), LONG, SLACK, NO_POLL).await;
    let other = connect(&server.url(), LONG, CMD, NO_POLL).await;
    let name = common::prefix("sync-pass-on");
    let channel = common::semaphore_channel(&name);
    let acquire = sha(relock::testing::scripts::SEMAPHORE_ACQUIRE);
    let warm = client.semaphore(format!("{name}:warm"));
    assert!(warm.try_set_permits(1).await.unwrap());
    assert!(warm.try_acquire(1).await.unwrap());
    warm.release(1).await.unwrap();

    let sem = client.semaphore(&name);
    assert!(sem.try_set_permits(0).await.unwrap());
    let waiter = |sem: Semaphore| {
        tokio::spawn(async move {
            let taken = sem.try_acquire_for(1, Duration::from_secs(15)).await;
            (taken, Instant::now())
        })
    };
    let first = waiter(sem.clone());
    until_waiting(&server, &client, &channel, 1, 1).await;
    let second = waiter(sem.clone());
    until_waiting(&server, &client, &channel, 2, 1).await;

    proxy.swallow_next_reply_for(&[&acquire, &name], Duration::from_secs(2));
    other.semaphore(&name).release(1).await.unwrap();
    assert!(
        eventually(SLACK, || async { raw_count(&server, &name) == Some(0) }).await,
        "the first waiter's acquire never ran"
    );
    let released = Instant::now();
    other.semaphore(&name).release(1).await.unwrap();
    for waiter in [first, second] {
        let (taken, at) = common::within(Duration::from_secs(20), waiter, "a waiter hung").await;
        assert!(taken.unwrap(), "a waiter got no permit");
        let after = at - released;
        assert!(
            after < common::PROMPT,
            "a waiter got its permit {after:?} after the second release"
        );
    }
    assert_eq!(proxy.swallowed(), 1, "the fault did not happen");
    assert_eq!(raw_count(&server, &name), Some(0));
    sem.release(2).await.unwrap();
    let names = [name.as_str(), &format!("{name}:warm")].map(str::to_owned);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_settled_after_faults(&server, &[&client, &other], &names).await;
}

/// Permit semaphore replies lost in the proxy: an acquire whose reply was lost is read back (a
/// `Permit` whose lease is on Redis) or given back; a release whose reply was lost is sent again
/// and gives the permit back once, also from a dropped `Permit`; with every reply dropped an
/// acquire fails and the permit it took comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_lost_replies_conserve_permits() {
    let lease = Duration::from_secs(1);
    let (server, proxy, client) = proxied(lease).await;
    let other = connect(&server.url(), LONG, CMD, NO_POLL).await;
    let base = common::prefix("sync-lost-permit");
    let name = |part: &str| format!("{base}:{part}");
    let acquire = sha(relock::testing::scripts::PERMIT_ACQUIRE);
    let release = sha(relock::testing::scripts::PERMIT_RELEASE);
    let warm = client.permit_semaphore(name("warm"));
    assert!(warm.try_set_permits(1).await.unwrap());
    warm.try_acquire()
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(warm.available_permits().await.unwrap(), 1);

    /// Judges an acquire of one of 2 permits whose reply was lost.
    async fn settle(
        server: &RedisServer,
        client: &Client,
        sem: &PermitSemaphore,
        taken: relock::Result<Option<Permit>>,
    ) {
        match taken {
            Ok(Some(permit)) => {
                assert_eq!(lease_ids(server, sem.name()), vec![permit.id().to_owned()]);
                assert_eq!(state(server, sem.name()), (Some(1), 1));
                assert!(!permit.is_lost());
                permit.release().await.unwrap();
            }
            Ok(None) => panic!("a free permit was reported busy"),
            Err(e) => println!("an acquire whose reply was lost failed: {e}"),
        }
        until_idle(&[client]).await;
        assert_eq!(state(server, sem.name()), (Some(2), 0), "a permit was lost");
    }

    // A try_acquire whose reply is lost.
    let sem = client.permit_semaphore(name("try"));
    assert!(sem.try_set_permits(2).await.unwrap());
    proxy.swallow_next_reply(&[&acquire, &name("try")]);
    let taken = timeout(Duration::from_secs(15), sem.try_acquire())
        .await
        .expect("try_acquire hung after a lost reply");
    assert_eq!(proxy.swallowed(), 1, "the fault did not happen");
    settle(&server, &client, &sem, taken).await;

    // A waiter's attempt, woken by a release, whose reply is lost.
    let sem = client.permit_semaphore(name("wait"));
    assert!(sem.try_set_permits(2).await.unwrap());
    let blocker = other.permit_semaphore(name("wait"));
    let blocking = [
        blocker.acquire().await.unwrap(),
        blocker.acquire().await.unwrap(),
    ];
    let waiter = tokio::spawn({
        let sem = sem.clone();
        async move { sem.try_acquire_for(Duration::from_secs(15), None).await }
    });
    until_waiting(
        &server,
        &client,
        &common::semaphore_channel(&name("wait")),
        1,
        1,
    )
    .await;
    proxy.swallow_next_reply(&[&acquire, &name("wait")]);
    let [first, second] = blocking;
    first.release().await.unwrap();
    let taken = common::within(
        Duration::from_secs(20),
        waiter,
        "the waiter hung after a lost reply",
    )
    .await;
    assert_eq!(proxy.swallowed(), 2, "the fault did not happen");
    second.release().await.unwrap();
    settle(&server, &client, &sem, taken).await;

    // A release whose reply is lost is sent again: the permit is given back once.
    let sem = client.permit_semaphore(name("release"));
    assert!(sem.try_set_permits(2).await.unwrap());
    let permit = sem.acquire().await.unwrap();
    proxy.swallow_next_reply(&[&release, &name("release")]);
    timeout(Duration::from_secs(15), permit.release())
        .await
        .expect("release hung after a lost reply")
        .expect("a retried release succeeds");
    assert_eq!(proxy.swallowed(), 3, "the fault did not happen");
    assert_eq!(
        state(&server, &name("release")),
        (Some(2), 0),
        "counted twice"
    );

    // A dropped Permit whose release reply is lost: given back in the background, once.
    let permit = sem.acquire().await.unwrap();
    proxy.swallow_next_reply(&[&release, &name("release")]);
    drop(permit);
    until_idle(&[&client]).await;
    assert_eq!(proxy.swallowed(), 4, "the fault did not happen");
    assert_eq!(
        state(&server, &name("release")),
        (Some(2), 0),
        "counted twice"
    );

    // Every reply dropped: the acquire fails, and the permit it took comes back.
    let sem = client.permit_semaphore(name("dropped"));
    assert!(sem.try_set_permits(2).await.unwrap());
    proxy.set_mode(Mode::DropReplies);
    let taken = timeout(Duration::from_secs(15), sem.try_acquire())
        .await
        .expect("try_acquire hung with replies dropped");
    assert!(
        taken.is_err(),
        "no reply came, yet try_acquire returned {taken:?}"
    );
    until_idle(&[&client]).await;
    proxy.set_mode(Mode::Pass);
    proxy.cut();
    until_connected(&client).await;
    assert_permits_back(&server, &sem, 2).await;

    let names = ["warm", "try", "wait", "release", "dropped"].map(name);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_settled_after_faults(&server, &[&client, &other], &names).await;
}

/// Latch replies lost in the proxy: a count-down whose reply was lost is sent again and counts
/// once (the last one too, which wakes the waiters); so does one whose replies are dropped past
/// the command timeout before its connection is cut, and one whose caller dropped it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_lost_count_down_replies_count_once() {
    let (server, proxy, client) = proxied(LONG).await;
    let waiting = connect(&server.url(), LONG, CMD, NO_POLL).await;
    let base = common::prefix("sync-lost-latch");
    let name = |part: &str| format!("{base}:{part}");
    let count_down = sha(relock::testing::scripts::LATCH_COUNT_DOWN);
    let warm = client.count_down_latch(name("warm"));
    assert!(warm.try_set_count(1).await.unwrap());
    warm.count_down().await.unwrap();
    assert_eq!(warm.count().await.unwrap(), 0);

    // A count-down whose reply is lost.
    let latch = client.count_down_latch(name("once"));
    assert!(latch.try_set_count(2).await.unwrap());
    let mut waiters: Vec<_> = (0..2)
        .map(|_| {
            let latch = waiting.count_down_latch(name("once"));
            tokio::spawn(async move { latch.wait_for(common::HANG).await })
        })
        .collect();
    until_waiting(
        &server,
        &waiting,
        &common::latch_channel(&name("once")),
        2,
        1,
    )
    .await;
    proxy.swallow_next_reply(&[&count_down, &name("once")]);
    timeout(Duration::from_secs(15), latch.count_down())
        .await
        .expect("count_down hung after a lost reply")
        .expect("a retried count-down succeeds");
    assert_eq!(proxy.swallowed(), 1, "the fault did not happen");
    assert_eq!(raw_count(&server, &name("once")), Some(1), "counted twice");
    assert_still_waiting(&mut waiters).await;

    // The last count-down, its reply lost: the latch opens once, the waiters return.
    proxy.swallow_next_reply(&[&count_down, &name("once")]);
    let counted = Instant::now();
    timeout(Duration::from_secs(15), latch.count_down())
        .await
        .expect("count_down hung after a lost reply")
        .expect("a retried count-down succeeds");
    assert_eq!(proxy.swallowed(), 2, "the fault did not happen");
    assert!(!common::raw_exists(&server, &name("once")));
    for waiter in waiters {
        let open = common::within(common::PROMPT, waiter, "a waiter was not woken at zero").await;
        assert!(open.unwrap());
    }
    assert!(counted.elapsed() < common::PROMPT + Duration::from_secs(15));

    // Replies dropped past the command timeout, then the connection cut: the retry replays.
    let latch = client.count_down_latch(name("dropped"));
    assert!(latch.try_set_count(3).await.unwrap());
    proxy.set_mode(Mode::DropReplies);
    let sent = Instant::now();
    let pending = tokio::spawn({
        let latch = latch.clone();
        async move { latch.count_down().await }
    });
    assert!(
        eventually(SLACK, || async {
            raw_count(&server, &name("dropped")) == Some(2)
        })
        .await,
        "the count-down never ran"
    );
    // Its first send timed out and the retry went out, its reply dropped too.
    tokio::time::sleep_until(sent + CMD + CMD / 2).await;
    proxy.set_mode(Mode::Pass);
    proxy.cut();
    common::within(Duration::from_secs(15), pending, "count_down hung")
        .await
        .expect("the retry replays the count-down");
    assert_eq!(
        raw_count(&server, &name("dropped")),
        Some(2),
        "counted twice"
    );

    // A count-down dropped by its caller mid-flight, its reply lost: finished in the
    // background, once.
    until_connected(&client).await;
    proxy.swallow_next_reply(&[&count_down, &name("dropped")]);
    assert!(timeout(Duration::ZERO, latch.count_down()).await.is_err());
    until_idle(&[&client]).await;
    assert_eq!(proxy.swallowed(), 3, "the fault did not happen");
    assert_eq!(
        raw_count(&server, &name("dropped")),
        Some(1),
        "counted twice"
    );
    latch.count_down().await.unwrap();
    assert!(!common::raw_exists(&server, &name("dropped")));

    let names = ["warm", "once", "dropped"].map(name);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_settled_after_faults(&server, &[&client, &waiting], &names).await;
}

// ---- 5. Shutdown and drops off the runtime ----

/// `Client::shutdown` gives back every permit the client holds (watchdog-renewed and fixed
/// lease alike), which wakes waiters in another client at once; its `Permit`s then say they are
/// lost, and releasing them fails with `Closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_back_every_permit_to_waiters_elsewhere() {
    let server = RedisServer::start();
    let holder = connect(&server.url(), LONG, CMD, NO_POLL).await;
    let waiting = connect(&server.url(), LONG, CMD, NO_POLL).await;
    let renewed = common::prefix("sync-shutdown-renewed");
    let fixed = common::prefix("sync-shutdown-fixed");
    let renewed_sem = holder.permit_semaphore(&renewed);
    let fixed_sem = holder.permit_semaphore(&fixed);
    assert!(renewed_sem.try_set_permits(2).await.unwrap());
    assert!(fixed_sem.try_set_permits(1).await.unwrap());
    let held = [
        renewed_sem.acquire().await.unwrap(),
        renewed_sem.acquire().await.unwrap(),
        fixed_sem.acquire_with_lease(LONG).await.unwrap(),
    ];
    let waiters: Vec<_> = [&renewed, &renewed, &fixed]
        .into_iter()
        .map(|name| {
            let sem = waiting.permit_semaphore(name);
            tokio::spawn(async move { sem.try_acquire_for(common::HANG, None).await })
        })
        .collect();
    for name in [&renewed, &fixed] {
        let channel = common::semaphore_channel(name);
        until_waiting(&server, &waiting, &channel, 3, 1).await;
    }

    let shut = Instant::now();
    holder.shutdown().await.unwrap();
    let mut taken = Vec::new();
    for waiter in waiters {
        let permit = common::within(
            common::PROMPT,
            waiter,
            "a waiter was not woken by the shutdown",
        )
        .await
        .unwrap()
        .expect("a permit");
        taken.push(permit);
    }
    assert!(shut.elapsed() < common::PROMPT);
    assert_eq!(state(&server, &renewed), (Some(0), 2));
    assert_eq!(state(&server, &fixed), (Some(0), 1));
    let [first, second, third] = held;
    assert!(first.is_lost() && second.is_lost() && third.is_lost());
    let err = first.release().await.unwrap_err();
    assert!(err.is_closed(), "a release after the shutdown: {err:?}");
    drop((second, third));
    for permit in taken {
        permit.release().await.unwrap();
    }
    assert_eq!(state(&server, &renewed), (Some(2), 0));
    assert_eq!(state(&server, &fixed), (Some(1), 0));
    assert_settled(&server, &[&holder, &waiting], &[&renewed, &fixed]).await;
}
