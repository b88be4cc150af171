//! Tasks in one or more worker processes contending for one lock, with mutual exclusion checked
//! while they run. Used by the `contended` and `herd` benches, for each lock type ([`LockKind`]:
//! `Lock`, `FairLock`, `SpinLock`; env `KINDS` picks a subset).
//!
//! Every task loops over the normal blocking `lock()` for a window: it stamps the wall clock when
//! it calls `lock()`, when it gets the lock and just before it calls `unlock()`. Inside the lock it
//! `INCR`s a Redis counter that must read 1 and `DECR`s it back to 0 before it releases: a second
//! holder anywhere shows up there. The parent merges the stamps of all processes (they share the
//! machine's wall clock) and checks that no two holds overlap. Either check failing panics, so the
//! bench exits non-zero.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::time::Duration;

use fred::interfaces::KeysInterface;

use super::worker::{self, Worker};
use super::Redis;
use super::{instant_at, now_us, percentile};
use relock::testing::RedisServer;

/// The lock every task contends for.
pub const KEY: &str = "bench:contended";
/// The Redis-side overlap check: how many tasks are inside the lock (must never exceed 1).
pub const INSIDE: &str = "bench:inside";

/// The lock types the benches contend with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// `client.lock(name)`: woken by pub/sub, one waiter per process per release.
    Lock,
    /// `client.fair_lock(name)`: a queue on Redis; a release wakes its head alone.
    Fair,
    /// `client.spin_lock(name)`: no pub/sub; waiters retry after the backoff's pauses.
    Spin,
}

impl LockKind {
    pub const ALL: [LockKind; 3] = [LockKind::Lock, LockKind::Fair, LockKind::Spin];

    /// The name in `KINDS` and in worker arguments.
    pub fn arg(self) -> &'static str {
        match self {
            LockKind::Lock => "lock",
            LockKind::Fair => "fair",
            LockKind::Spin => "spin",
        }
    }

    /// The type's name, as the tables print it.
    pub fn type_name(self) -> &'static str {
        match self {
            LockKind::Lock => "Lock",
            LockKind::Fair => "FairLock",
            LockKind::Spin => "SpinLock",
        }
    }

    /// What the figures of this type start with: nothing for `Lock` (its rows keep the names
    /// they had before the other types were benched), the type's name otherwise.
    pub fn prefix(self) -> &'static str {
        match self {
            LockKind::Lock => "",
            LockKind::Fair => "FairLock ",
            LockKind::Spin => "SpinLock ",
        }
    }

    pub fn parse(arg: &str) -> LockKind {
        match arg.trim().to_ascii_lowercase().as_str() {
            "lock" => LockKind::Lock,
            "fair" | "fairlock" | "fair_lock" => LockKind::Fair,
            "spin" | "spinlock" | "spin_lock" => LockKind::Spin,
            other => panic!("unknown lock kind {other:?}: KINDS takes lock, fair, spin"),
        }
    }

    /// `KINDS` from the environment (comma-separated, say `KINDS=fair,spin`), else all three.
    pub fn from_env() -> Vec<LockKind> {
        match std::env::var("KINDS") {
            Ok(list) if !list.trim().is_empty() => {
                let mut kinds: Vec<LockKind> = list.split(',').map(LockKind::parse).collect();
                kinds.dedup();
                kinds
            }
            _ => LockKind::ALL.to_vec(),
        }
    }
}

/// The spin lock's backoff: `SPIN_BACKOFF_MS=<initial>,<max>` (multiplier 2) from the
/// environment, else `Backoff::default()` (1 ms, 128 ms, ×2). Workers inherit the environment,
/// so parent and workers agree.
pub fn spin_backoff() -> relock::Backoff {
    match std::env::var("SPIN_BACKOFF_MS") {
        Ok(v) => {
            let ms: Vec<u64> = v.split(',').map(|x| x.trim().parse().unwrap()).collect();
            let [initial, max] = ms[..] else {
                panic!("SPIN_BACKOFF_MS takes <initial>,<max> in ms")
            };
            relock::Backoff::exponential(
                Duration::from_millis(initial),
                Duration::from_millis(max),
                2.0,
            )
            .expect("a valid backoff")
        }
        Err(_) => relock::Backoff::default(),
    }
}

/// One handle of any of the types: they share `lock()` and `LockGuard`.
#[derive(Clone)]
enum AnyLock {
    Lock(relock::Lock),
    Fair(relock::FairLock),
    Spin(relock::SpinLock),
}

impl AnyLock {
    fn new(client: &relock::Client, kind: LockKind, name: impl Into<String>) -> AnyLock {
        match kind {
            LockKind::Lock => AnyLock::Lock(client.lock(name)),
            LockKind::Fair => AnyLock::Fair(client.fair_lock(name)),
            LockKind::Spin => AnyLock::Spin(client.spin_lock(name).with_backoff(spin_backoff())),
        }
    }

    async fn lock(&self) -> relock::Result<relock::LockGuard> {
        match self {
            AnyLock::Lock(lock) => lock.lock().await,
            AnyLock::Fair(lock) => lock.lock().await,
            AnyLock::Spin(lock) => lock.lock().await,
        }
    }
}

/// What to run.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub kind: LockKind,
    pub tasks: usize,
    /// Worker processes to spread the tasks over (at most one per task).
    pub procs: usize,
    /// How long each holder keeps the lock (plus the two check commands).
    pub hold: Duration,
    pub window: Duration,
}

/// One hold: wall-clock µs when its owner called `lock()`, got it, called `unlock()`, and
/// `unlock()` returned.
#[derive(Clone, Copy, Debug)]
pub struct Hold {
    pub owner: u64,
    pub called: u64,
    pub acquired: u64,
    pub released: u64,
    /// When its `unlock()` returned.
    pub unlocked: u64,
}

/// A wait still open when the window closed.
#[derive(Clone, Copy, Debug)]
pub struct OpenWait {
    pub owner: u64,
    /// Wall-clock µs when its owner called `lock()`.
    pub called: u64,
    /// How long it had waited, µs (a lower bound of the whole wait).
    pub waited: u64,
}

/// Acquisitions that overtook an earlier waiter (see [`Outcome::order`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Order {
    /// Acquisitions made while a task whose wait began more than the slack earlier still waited.
    pub violations: usize,
    /// The largest of those head starts, µs: how much earlier the overtaken waiter began.
    pub worst_us: u64,
}

/// Everything the workers saw, merged.
pub struct Outcome {
    /// Every hold, in acquire order.
    pub holds: Vec<Hold>,
    pub tasks: usize,
    /// Processes that ran tasks.
    pub procs: usize,
    /// Tasks that never got the lock in the window.
    pub starved: usize,
    /// Waits still open when the window closed.
    pub open_waits: Vec<OpenWait>,
    pub start_us: u64,
    pub end_us: u64,
    /// Each task's holder field (`<client id>:<owner id>`) on Redis.
    pub fields: std::collections::HashMap<u64, String>,
}

/// Figures over the holds acquired in a span of the window.
pub struct Stats {
    pub acquisitions: usize,
    pub per_sec: f64,
    /// Release → acquire by a different owner, ms.
    pub gaps_ms: Vec<f64>,
    /// Acquisitions by the owner that released just before.
    pub retakes: usize,
    /// From calling `lock()` to getting it, open waits included, ms.
    pub longest_wait_ms: f64,
    pub mean_hold_ms: f64,
    /// How long each `unlock()` call took, ms.
    pub unlock_ms: Vec<f64>,
}

impl Stats {
    pub fn gap_ms(&self, p: f64) -> f64 {
        percentile(&self.gaps_ms, p)
    }

    pub fn retake_share(&self) -> f64 {
        self.retakes as f64 / (self.acquisitions.max(2) - 1) as f64
    }
}

/// Runs `spec` against `server`. `during(start_us, end_us)` runs in the parent once the window
/// is set (for probes taken while the tasks contend). Panics on any mutual exclusion violation.
pub fn run(server: &RedisServer, spec: Spec, during: impl FnOnce(u64, u64)) -> Outcome {
    // The fair lock's queue and deadlines too: a worker that exits as its waits time out may
    // leave places behind, which would hold the next configuration's waiters back for the
    // whole waiter timeout.
    server.cmd(&["DEL", KEY, &fair_key("queue"), &fair_key("timeout")]);
    server.cmd(&["SET", INSIDE, "0"]);
    let procs = spec.procs.clamp(1, spec.tasks);
    let mut workers: Vec<Worker> = (0..procs)
        .map(|p| {
            let tasks = spec.tasks / procs + usize::from(p < spec.tasks % procs);
            Worker::spawn(&[
                "contend".into(),
                server.url(),
                tasks.to_string(),
                spec.hold.as_micros().to_string(),
                p.to_string(),
                spec.kind.arg().into(),
            ])
        })
        .collect();
    for w in &mut workers {
        w.expect("ready");
    }
    let start_us = now_us() + 300_000;
    let end_us = start_us + spec.window.as_micros() as u64;
    for w in &mut workers {
        w.send(&format!("go {start_us} {end_us}"));
    }
    during(start_us, end_us);

    let mut outcome = Outcome {
        holds: Vec::new(),
        tasks: spec.tasks,
        procs,
        starved: 0,
        open_waits: Vec::new(),
        start_us,
        end_us,
        fields: Default::default(),
    };
    let mut violations = 0;
    for w in workers {
        for line in w.finish() {
            if let Some(rest) = line.strip_prefix("f ") {
                let (owner, field) = rest.split_once(' ').expect("f <owner> <field>");
                outcome
                    .fields
                    .insert(owner.parse().unwrap(), field.to_owned());
                continue;
            }
            let f: Vec<u64> = line
                .split(' ')
                .skip(1)
                .map(|x| x.parse().unwrap())
                .collect();
            match line.split(' ').next() {
                Some("h") => outcome.holds.push(Hold {
                    owner: f[0],
                    called: f[1],
                    acquired: f[2],
                    released: f[3],
                    unlocked: f[4],
                }),
                Some("o") => outcome.open_waits.push(OpenWait {
                    owner: f[0],
                    waited: f[1],
                    called: f[2],
                }),
                Some("s") => outcome.starved += 1,
                Some("v") => violations += f[0],
                _ => {}
            }
        }
    }
    assert_eq!(
        violations, 0,
        "MUTUAL EXCLUSION VIOLATED: the Redis-side inside counter was not 1 in {violations} holds"
    );
    let inside = server.cmd(&["GET", INSIDE]);
    assert!(
        inside.ends_with("\r\n0\r\n"),
        "inside counter is {inside:?} after the run"
    );
    outcome.holds.sort_by_key(|h| h.acquired);
    for pair in outcome.holds.windows(2) {
        assert!(
            pair[1].acquired >= pair[0].released,
            "MUTUAL EXCLUSION VIOLATED: holds overlap: {:?} and {:?}",
            pair[0],
            pair[1]
        );
    }
    outcome
}

impl Outcome {
    /// Figures over the holds acquired in [`from_us`, `to_us`).
    pub fn stats(&self, from_us: u64, to_us: u64) -> Stats {
        let holds: Vec<&Hold> = self
            .holds
            .iter()
            .filter(|h| (from_us..to_us).contains(&h.acquired))
            .collect();
        let mut gaps_ms = Vec::new();
        let mut retakes = 0;
        for pair in holds.windows(2) {
            if pair[0].owner == pair[1].owner {
                retakes += 1;
            } else {
                gaps_ms.push((pair[1].acquired - pair[0].released) as f64 / 1e3);
            }
        }
        let longest_us = holds
            .iter()
            .map(|h| h.acquired - h.called)
            .chain(self.open_waits.iter().map(|w| w.waited))
            .max()
            .unwrap_or(0);
        let held_us: u64 = holds.iter().map(|h| h.released - h.acquired).sum();
        Stats {
            acquisitions: holds.len(),
            per_sec: holds.len() as f64 / ((to_us - from_us) as f64 / 1e6),
            gaps_ms,
            retakes,
            longest_wait_ms: longest_us as f64 / 1e3,
            mean_hold_ms: held_us as f64 / 1e3 / holds.len().max(1) as f64,
            unlock_ms: holds
                .iter()
                .map(|h| (h.unlocked - h.released) as f64 / 1e3)
                .collect(),
        }
    }
}

/// `redisson_lock_<what>:{bench:contended}`: the fair lock's queue or deadlines.
fn fair_key(what: &str) -> String {
    format!("redisson_lock_{what}:{{{KEY}}}")
}

/// The worker side: `contend <url> <tasks> <hold µs> <process index> <kind>`. Says `ready`,
/// waits for `go <start µs> <end µs>`, contends until the end, then prints its stamps and exits.
pub fn worker_main(args: &[String]) {
    let [mode, url, tasks, hold_us, proc, kind] = args else {
        panic!("worker arguments: contend <url> <tasks> <hold µs> <process> <kind>")
    };
    assert_eq!(mode, "contend");
    let kind = LockKind::parse(kind);
    let (tasks, proc): (u64, u64) = (tasks.parse().unwrap(), proc.parse().unwrap());
    let hold = Duration::from_micros(hold_us.parse().unwrap());
    let parent = worker::parent_lines();
    let runtime = super::runtime(super::env_or("WORKER_THREADS", 0));
    let logs = runtime.block_on(async {
        let client = relock::Client::connect(url).await.unwrap();
        // Warm up: scripts loaded, both connections used once.
        let warm = AnyLock::new(&client, kind, format!("{KEY}:warm:{proc}"));
        warm.lock().await.unwrap().unlock().await.unwrap();
        println!("ready");
        let go = tokio::task::spawn_blocking(move || parent.recv().unwrap())
            .await
            .unwrap();
        let window: Vec<u64> = go.split(' ').skip(1).map(|x| x.parse().unwrap()).collect();
        let handles: Vec<_> = (0..tasks)
            .map(|t| {
                let owner = proc * 1_000_000 + t;
                let lock = AnyLock::new(&client, kind, KEY);
                let redis = client.redis().clone();
                let id = client.id().to_owned();
                tokio::spawn(contend(lock, redis, id, owner, hold, window[0], window[1]))
            })
            .collect();
        let mut logs = Vec::new();
        for h in handles {
            logs.push(h.await.unwrap());
        }
        logs
    });
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for log in logs {
        writeln!(out, "f {} {}", log.owner, log.field).unwrap();
        for h in &log.holds {
            writeln!(
                out,
                "h {} {} {} {} {}",
                h.owner, h.called, h.acquired, h.released, h.unlocked
            )
            .unwrap();
        }
        if let Some((called, wait)) = log.open_wait {
            writeln!(out, "o {} {wait} {called}", log.owner).unwrap();
        }
        if log.holds.is_empty() {
            writeln!(out, "s {}", log.owner).unwrap();
        }
        writeln!(out, "v {}", log.violations).unwrap();
    }
    out.flush().unwrap();
}

struct TaskLog {
    owner: u64,
    /// The task's holder field on Redis.
    field: String,
    holds: Vec<Hold>,
    /// (called, waited) of a wait the window's end cut short.
    open_wait: Option<(u64, u64)>,
    violations: u64,
}

async fn contend(
    lock: AnyLock,
    redis: fred::clients::Client,
    client_id: String,
    owner: u64,
    hold: Duration,
    start: u64,
    end: u64,
) -> TaskLog {
    let mut log = TaskLog {
        owner,
        field: format!("{client_id}:{}", relock::Owner::current()),
        holds: Vec::new(),
        open_wait: None,
        violations: 0,
    };
    // Diagnostic: a pause between `unlock()` and the next `lock()` (env `THINK_MS`, default 0),
    // so that a releaser's next request does not run alongside the hand-off it started.
    let think = Duration::from_millis(super::env_or("THINK_MS", 0));
    tokio::time::sleep_until(instant_at(start)).await;
    let deadline = instant_at(end);
    loop {
        let called = now_us();
        if called >= end {
            break;
        }
        let guard = match tokio::time::timeout_at(deadline, lock.lock()).await {
            Ok(guard) => guard.expect("lock()"),
            Err(_) => {
                log.open_wait = Some((called, now_us() - called));
                break;
            }
        };
        let acquired = now_us();
        let inside: i64 = redis.incr(INSIDE).await.unwrap();
        if !hold.is_zero() {
            tokio::time::sleep(hold).await;
        }
        let left: i64 = redis.decr(INSIDE).await.unwrap();
        if inside != 1 || left != 0 {
            log.violations += 1;
        }
        let released = now_us();
        guard.unlock().await.expect("unlock()");
        log.holds.push(Hold {
            owner,
            called,
            acquired,
            released,
            unlocked: now_us(),
        });
        if !think.is_zero() {
            tokio::time::sleep(think).await;
        }
    }
    log
}

impl Outcome {
    /// Order: the acquisitions in [`from_us`, `to_us`) that overtook an earlier waiter. An
    /// acquisition by task B, whose `lock()` call began at `called_B`, is a violation when, at
    /// the moment B got the lock (`acquired_B`), some other task A was still waiting (it called
    /// `lock()` before and got the lock only after B, or never within the window) and A's call
    /// began more than `slack_us` before B's: `called_A + slack_us < called_B`. All stamps are
    /// the wall clock of one machine (µs since the epoch), shared by every process. The slack
    /// covers the time between a task's stamp and its first attempt reaching Redis, where the
    /// fair lock's queue orders waiters. With `DEBUG_ORDER=1` the first few are printed to
    /// stderr.
    pub fn order(&self, from_us: u64, to_us: u64, slack_us: u64) -> Order {
        self.order_by(from_us, to_us, slack_us, |_, called| Some(called))
    }

    /// [`order`](Self::order) with each wait's start taken from the server: the first fair
    /// acquire asking to wait that `MONITOR` saw for the task's holder field at or after its
    /// `called` stamp (see `common/monitor.rs`), and no slack. Waits whose arrival was not seen
    /// are left out.
    pub fn order_by_arrival(
        &self,
        from_us: u64,
        to_us: u64,
        arrivals: &std::collections::HashMap<String, Vec<u64>>,
    ) -> Order {
        self.order_by(from_us, to_us, 0, |owner, called| {
            let times = arrivals.get(self.fields.get(&owner)?)?;
            let first = times.partition_point(|&t| t < called);
            times.get(first).copied()
        })
    }

    /// For each wait whose arrival `MONITOR` saw: from its `called` stamp to that arrival, ms.
    pub fn arrival_delays_ms(
        &self,
        arrivals: &std::collections::HashMap<String, Vec<u64>>,
    ) -> Vec<f64> {
        self.holds
            .iter()
            .filter_map(|h| {
                let times = arrivals.get(self.fields.get(&h.owner)?)?;
                let first = times.partition_point(|&t| t < h.called);
                Some((times.get(first)? - h.called) as f64 / 1e3)
            })
            .collect()
    }

    /// Order violations with each wait starting at `start(owner, called)` (waits without a start
    /// are left out).
    fn order_by(
        &self,
        from_us: u64,
        to_us: u64,
        slack_us: u64,
        start: impl Fn(u64, u64) -> Option<u64>,
    ) -> Order {
        // Every wait: (start, acquired, owner), open waits never acquired.
        let starts: Vec<Option<u64>> = self
            .holds
            .iter()
            .map(|h| start(h.owner, h.called))
            .collect();
        let mut waits: Vec<(u64, u64, u64)> = self
            .holds
            .iter()
            .zip(&starts)
            .filter_map(|(h, s)| Some((*s.as_ref()?, h.acquired, h.owner)))
            .chain(
                self.open_waits
                    .iter()
                    .filter_map(|w| Some((start(w.owner, w.called)?, u64::MAX, w.owner))),
            )
            .collect();
        waits.sort_unstable();
        let debug = std::env::var("DEBUG_ORDER").is_ok();
        let mut order = Order::default();
        // Waits begun so far, earliest first; those acquired by now are dropped lazily.
        let mut waiting = BinaryHeap::new();
        let mut next = 0;
        for (b, b_start) in self.holds.iter().zip(&starts) {
            while next < waits.len() && waits[next].0 <= b.acquired {
                waiting.push(Reverse(waits[next]));
                next += 1;
            }
            while waiting
                .peek()
                .is_some_and(|Reverse((_, acquired, _))| *acquired <= b.acquired)
            {
                waiting.pop();
            }
            let Some(b_start) = *b_start else { continue };
            if !(from_us..to_us).contains(&b.acquired) {
                continue;
            }
            let Some(Reverse((a_start, _, owner_a))) = waiting.peek() else {
                continue;
            };
            if a_start + slack_us < b_start {
                order.violations += 1;
                order.worst_us = order.worst_us.max(b_start - a_start);
                if debug && order.violations <= 5 {
                    eprintln!(
                        "order: {} (started +{} µs) acquired at +{} µs while {owner_a} (started +{} µs) waited",
                        b.owner,
                        b_start.saturating_sub(self.start_us),
                        b.acquired.saturating_sub(self.start_us),
                        a_start.saturating_sub(self.start_us),
                    );
                }
            }
        }
        order
    }

    /// With `DEBUG_WAITS=1`: the five longest waits, each with where in the window it began, how
    /// many holds of others it sat through, and the longest hold and gap among them (stderr).
    pub fn debug_waits(&self) {
        if std::env::var("DEBUG_WAITS").is_err() {
            return;
        }
        let mut waits: Vec<&Hold> = self.holds.iter().collect();
        waits.sort_by_key(|h| std::cmp::Reverse(h.acquired - h.called));
        for w in waits.iter().take(5) {
            let during: Vec<&Hold> = self
                .holds
                .iter()
                .filter(|h| h.acquired >= w.called && h.acquired < w.acquired)
                .collect();
            let longest_hold = during.iter().map(|h| h.released - h.acquired).max();
            let mut prev = self
                .holds
                .iter()
                .filter(|h| h.released <= w.called)
                .map(|h| h.released)
                .max()
                .unwrap_or(w.called);
            let mut longest_gap = 0;
            for h in during.iter().copied().chain([*w]) {
                longest_gap = longest_gap.max(h.acquired.saturating_sub(prev.max(w.called)));
                prev = h.released;
            }
            let mut by_process = std::collections::BTreeMap::new();
            for h in &during {
                *by_process.entry(h.owner / 1_000_000).or_insert(0) += 1;
            }
            eprintln!(
                "wait {} µs by {} from +{} µs: {} holds of others {by_process:?}, longest hold {:?} µs, longest gap {} µs",
                w.acquired - w.called,
                w.owner,
                w.called.saturating_sub(self.start_us),
                during.len(),
                longest_hold,
                longest_gap
            );
        }
        let open: Vec<u64> = self.open_waits.iter().map(|w| w.waited).collect();
        eprintln!("open waits (µs): {open:?}");
    }
}
