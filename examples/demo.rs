//! A tour of relock in about ten seconds: re-entry across nested async calls, contention between
//! tasks and processes woken by pub/sub, the watchdog keeping a lock past its lease, and the lock
//! of a killed holder freeing itself when its lease ends.
//!
//! ```text
//! cargo run --example demo                                  # starts a throwaway redis-server
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example demo # uses that server
//! RUST_LOG=relock=debug cargo run --example demo            # and shows relock's tracing
//! ```
//!
//! The throwaway server comes from `relock::testing` (the `testing` feature, on for relock's own
//! examples and tests) and needs `redis-server` installed: `scripts/install-redis.sh`.
//!
//! The demo spawns its own executable as helper processes (`demo contender <url> <lock>` and
//! `demo holder <url> <lock>`). Helpers print nothing for people: they talk to the parent over
//! their stdout, and they exit on their own when the parent goes away (their stdin closes) or
//! after [`HELPER_LIFETIME`]. Tracing goes to stderr, in the demo and its helpers alike, so it
//! never mixes with that talk; `RUST_LOG` picks what is shown (warnings when it is not set).

use std::future::Future;
use std::io::IsTerminal;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use relock::{Client, Config, Lock};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::Notify;
use tokio::time::{sleep_until, timeout};
use tracing_subscriber::EnvFilter;

const USAGE: &str = "\
usage: demo

A tour of relock in about ten seconds: re-entry, tasks and a second process contending with
pub/sub wake-ups, the watchdog, and a killed holder whose lock frees itself. It takes no options.
REDIS_URL picks a server of your own; else a throwaway redis-server is started.
RUST_LOG=relock=debug adds relock's tracing, on stderr.";

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = std::result::Result<T, BoxError>;

/// How long each contender holds the lock.
const HOLD: Duration = Duration::from_millis(100);
/// Contending tasks in this process and in the contender process.
const LOCAL_TASKS: usize = 4;
const HELPER_TASKS: usize = 2;
/// The longest a helper process lives, whatever happens to its parent.
const HELPER_LIFETIME: Duration = Duration::from_secs(15);
/// The watchdog timeout (the lease of locks taken without one) of the killed holder.
const HOLDER_LEASE: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() -> Res<()> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match (args.first().map(String::as_str), args.get(1), args.get(2)) {
        (Some("contender"), Some(url), Some(name)) => helper(|go| contender(url, name, go)).await,
        (Some("holder"), Some(url), Some(name)) => helper(|_| holder(url, name)).await,
        (None, _, _) => demo().await,
        (Some("--help" | "-h"), None, _) => {
            println!("{USAGE}");
            Ok(())
        }
        _ => {
            eprintln!("demo: cannot read {args:?}\n\n{USAGE}");
            std::process::exit(2);
        }
    }
}

async fn demo() -> Res<()> {
    let started = Instant::now();
    // Keep the server (if we start one) alive until the end: dropping it kills it.
    let (server, url) = relock::testing::from_env_or_start()?;
    match &server {
        None => println!("Redis: {url} (from REDIS_URL)"),
        Some(server) => println!(
            "Redis: throwaway redis-server at {url} (pid {}); set REDIS_URL to use yours",
            server
                .pid()
                .map_or_else(|| "?".to_owned(), |pid| pid.to_string())
        ),
    }
    println!("This process: pid {}", std::process::id());
    // Unique names, so the demo can run against a shared server.
    let name = |section: &str| format!("relock-demo:{}:{section}", std::process::id());

    let counts = reentry(&url, &name("reentry")).await?;
    let handoff = contention(&url, &name("contention")).await?;
    let refused = watchdog(&url, &name("watchdog")).await?;
    let freed = killed_holder(&url, &name("killed")).await?;

    let counts: Vec<String> = counts.iter().map(u64::to_string).collect();
    println!(
        "\nSummary: re-entry {} · {} hand-offs ≤ {:.1} ms · a 1000 ms lease kept 3000 ms \
         ({refused} try_locks refused) · killed holder's lock free after {} ms · {:.1} s",
        counts.join("→"),
        LOCAL_TASKS + HELPER_TASKS - 1,
        ms_f(handoff),
        ms(freed),
        started.elapsed().as_secs_f64(),
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// a) Re-entry

/// Takes the lock, then calls [`inner`] which takes it again: the same task, so it re-enters.
async fn outer(lock: &Lock, counts: &mut Vec<u64>) -> relock::Result<()> {
    let guard = lock.lock().await?;
    step("outer() took the lock", lock, counts).await?;
    inner(lock, counts).await?;
    step("back in outer()", lock, counts).await?;
    guard.unlock().await?;
    step("outer() released it", lock, counts).await
}

async fn inner(lock: &Lock, counts: &mut Vec<u64>) -> relock::Result<()> {
    let t = Instant::now();
    let guard = lock.lock().await?;
    let took = t.elapsed();
    step(
        &format!("inner() re-entered in {:.1} ms", ms_f(took)),
        lock,
        counts,
    )
    .await?;
    guard.unlock().await
}

async fn step(what: &str, lock: &Lock, counts: &mut Vec<u64>) -> relock::Result<()> {
    let count = lock.hold_count().await?;
    counts.push(count);
    println!("  {what:<34} hold_count = {count}");
    Ok(())
}

async fn reentry(url: &str, name: &str) -> Res<Vec<u64>> {
    section("a) Re-entry: nested async calls in one task");
    let client = Client::connect(url).await?;
    let lock = client.lock(name);
    // Holds belong to the current tokio task (Redisson: the current thread), so run it in one.
    let counts = tokio::spawn(async move {
        println!("  owner: {} (the current task)", relock::Owner::current());
        let mut counts = Vec::new();
        outer(&lock, &mut counts).await.map(|()| counts)
    })
    .await??;
    client.shutdown().await?;
    Ok(counts)
}

// ---------------------------------------------------------------------------------------------
// b) Contention across tasks and processes

/// One acquisition: who, and when (µs since the Unix epoch, comparable across processes) it
/// asked, got and released the lock.
struct Record {
    who: String,
    asked: u64,
    got: u64,
    released: u64,
}

impl Record {
    fn line(&self) -> String {
        format!(
            "acq\t{}\t{}\t{}\t{}",
            self.who, self.asked, self.got, self.released
        )
    }

    fn parse(line: &str) -> Option<Record> {
        let mut parts = line.strip_prefix("acq\t")?.split('\t');
        Some(Record {
            who: parts.next()?.to_owned(),
            asked: parts.next()?.parse().ok()?,
            got: parts.next()?.parse().ok()?,
            released: parts.next()?.parse().ok()?,
        })
    }
}

/// Waits for the lock, holds it for [`HOLD`], releases it.
async fn hold_once(lock: Lock, who: String) -> relock::Result<Record> {
    let asked = now_us();
    let guard = lock.lock().await?;
    let got = now_us();
    tokio::time::sleep(HOLD).await;
    let released = now_us();
    guard.unlock().await?;
    Ok(Record {
        who,
        asked,
        got,
        released,
    })
}

/// Returns the slowest hand-off.
async fn contention(url: &str, name: &str) -> Res<Duration> {
    section("b) Contention: tasks here and in another process, one lock");
    // The default watchdog timeout: a 30 s lease. A waiter woken by the lease would wait that long.
    let client = Client::connect(url).await?;
    let mut helper = spawn_self("contender", url, name)?;
    let mut out = lines(&mut helper);
    expect(&mut out, "ready").await?;
    let helper_pid = helper.id().unwrap_or_default();
    println!(
        "  {LOCAL_TASKS} tasks in pid {} and {HELPER_TASKS} in pid {helper_pid}, each holding \
         it {} ms; lease 30000 ms",
        std::process::id(),
        ms(HOLD)
    );

    let mut stdin = helper.stdin.take().ok_or("no stdin")?;
    stdin.write_all(b"go\n").await?;
    let local: Vec<_> = (1..=LOCAL_TASKS)
        .map(|n| {
            let who = format!("pid {} task {n}", std::process::id());
            tokio::spawn(hold_once(client.lock(name), who))
        })
        .collect();
    let mut records = Vec::new();
    for task in local {
        records.push(task.await??);
    }
    while let Some(line) = timeout(Duration::from_secs(10), out.next_line()).await?? {
        records.extend(Record::parse(&line));
    }
    helper.wait().await?;
    drop(stdin);
    client.shutdown().await?;
    if records.len() != LOCAL_TASKS + HELPER_TASKS {
        return Err(format!("expected {} acquisitions", LOCAL_TASKS + HELPER_TASKS).into());
    }

    records.sort_by_key(|r| r.got);
    println!("\n   #  holder                 waited  hand-off");
    let mut slowest = Duration::ZERO;
    for (i, r) in records.iter().enumerate() {
        let waited = Duration::from_micros(r.got - r.asked);
        let handoff = match i.checked_sub(1).map(|p| &records[p]) {
            Some(prev) => {
                let d = Duration::from_micros(r.got.saturating_sub(prev.released));
                slowest = slowest.max(d);
                format!("{:>6.1} ms", ms_f(d))
            }
            None => format!("{:>9}", "-"),
        };
        let mark = if r.who.starts_with(&format!("pid {helper_pid} ")) {
            "  ← other process"
        } else {
            ""
        };
        println!(
            "  {:>2}  {:<20} {:>5} ms {handoff}{mark}",
            i + 1,
            r.who,
            ms(waited)
        );
    }
    println!(
        "\n  hand-off: from the previous holder's unlock() to this acquire. Each waiter slept until\n  \
         a release message woke it: hand-offs took at most {:.1} ms, and waits grew by one {} ms\n  \
         hold per place in line, not by the 30000 ms lease.",
        ms_f(slowest),
        ms(HOLD)
    );
    Ok(slowest)
}

/// Helper mode: contends from another process with [`HELPER_TASKS`] tasks, once `go` arrives.
async fn contender(url: &str, name: &str, go: Arc<Notify>) -> Res<()> {
    let client = Client::connect(url).await?;
    println!("ready");
    go.notified().await;
    let tasks: Vec<_> = (1..=HELPER_TASKS)
        .map(|n| {
            let who = format!("pid {} task {n}", std::process::id());
            tokio::spawn(hold_once(client.lock(name), who))
        })
        .collect();
    for task in tasks {
        println!("{}", task.await??.line());
    }
    client.shutdown().await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// c) The watchdog

/// Returns how many try_locks of another client were refused.
async fn watchdog(url: &str, name: &str) -> Res<usize> {
    section("c) Watchdog: a 1000 ms lease held for 3000 ms");
    let config = Config::from_url(url)?.with_watchdog_timeout(Duration::from_secs(1));
    let client = Client::new(config).await?;
    let other = Client::connect(url).await?;
    let lock = client.lock(name);

    let start = Instant::now();
    let guard = lock.lock().await?;
    println!("  renewed every 333 ms back to 1000 ms; another client tries to take it meanwhile\n");
    println!("       at  remaining lease  other client's try_lock");
    let mut refused = 0;
    for i in 0..=6 {
        sleep_until((start + Duration::from_millis(500 * i)).into()).await;
        let at = start.elapsed();
        let left = lock
            .remaining_lease()
            .await?
            .expires_in()
            .ok_or("the lock is gone")?;
        let attempt = other.lock(name).try_lock().await?;
        let verdict = match attempt {
            None => {
                refused += 1;
                "refused (Ok(None))"
            }
            Some(_) => "TAKEN: the lease was lost!",
        };
        println!("  {:>4} ms  {:>12} ms  {verdict}", ms(at), ms(left));
    }
    guard.unlock().await?;
    let after = other.lock(name).try_lock().await?;
    println!(
        "  after unlock() the other client's try_lock {}",
        if after.is_some() {
            "takes it"
        } else {
            "is still refused!"
        }
    );
    if let Some(guard) = after {
        guard.unlock().await?;
    }
    other.shutdown().await?;
    client.shutdown().await?;
    Ok(refused)
}

// ---------------------------------------------------------------------------------------------
// d) A killed holder

/// Returns how long after the kill the lock freed itself.
async fn killed_holder(url: &str, name: &str) -> Res<Duration> {
    section("d) A killed holder: its lease frees the lock");
    let mut helper = spawn_self("holder", url, name)?;
    let pid = helper.id().unwrap_or_default();
    let mut out = lines(&mut helper);
    expect(&mut out, "holding").await?;

    let client = Client::connect(url).await?;
    let lock = client.lock(name);
    let left = lock
        .remaining_lease()
        .await?
        .expires_in()
        .ok_or("the holder does not hold it")?;
    println!(
        "  pid {pid} holds it with a {} ms watchdog lease ({} ms left)",
        ms(HOLDER_LEASE),
        ms(left)
    );
    helper.kill().await?; // SIGKILL, then reap: no release, no more renewals
    let killed = Instant::now();
    println!("  SIGKILLed pid {pid}; waiting in lock() …");
    let guard = timeout(HOLDER_LEASE * 3, lock.lock())
        .await
        .map_err(|_| "lock() still waiting long after the lease")??;
    let freed = killed.elapsed();
    println!(
        "  got the lock {} ms after the kill (the lease left at the kill: {} ms)",
        ms(freed),
        ms(left)
    );
    guard.unlock().await?;
    client.shutdown().await?;
    Ok(freed)
}

/// Helper mode: takes the lock with a short watchdog lease, says so, and holds it until killed.
async fn holder(url: &str, name: &str) -> Res<()> {
    let config = Config::from_url(url)?.with_watchdog_timeout(HOLDER_LEASE);
    let client = Client::new(config).await?;
    let _guard = client.lock(name).lock().await?;
    println!("holding");
    std::future::pending().await
}

// ---------------------------------------------------------------------------------------------
// Helper processes

/// Starts this executable in helper `mode`. Its stdin stays a pipe from us: when we go away it
/// closes and the helper exits. `kill_on_drop` covers our own early returns.
fn spawn_self(mode: &str, url: &str, name: &str) -> Res<Child> {
    Ok(Command::new(std::env::current_exe()?)
        .args([mode, url, name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?)
}

fn lines(child: &mut Child) -> Lines<BufReader<ChildStdout>> {
    BufReader::new(child.stdout.take().expect("piped stdout")).lines()
}

async fn expect(out: &mut Lines<BufReader<ChildStdout>>, want: &str) -> Res<()> {
    match timeout(Duration::from_secs(10), out.next_line()).await?? {
        Some(line) if line == want => Ok(()),
        other => Err(format!("helper said {other:?}, expected {want:?}").into()),
    }
}

/// Runs a helper mode until its work ends, its stdin closes (the parent is gone) or
/// [`HELPER_LIFETIME`] passes. A line on stdin notifies `go`.
async fn helper<F, Fut>(work: F) -> Res<()>
where
    F: FnOnce(Arc<Notify>) -> Fut,
    Fut: Future<Output = Res<()>>,
{
    let go = Arc::new(Notify::new());
    let notify = go.clone();
    // A plain thread: a blocking stdin read must not keep the runtime from shutting down.
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            match line {
                Ok(_) => notify.notify_one(),
                Err(_) => break,
            }
        }
        std::process::exit(0); // the parent closed our stdin: it is gone or done with us
    });
    timeout(HELPER_LIFETIME, work(go))
        .await
        .unwrap_or_else(|_| Err("helper lifetime over".into()))
}

// ---------------------------------------------------------------------------------------------
// Output

fn section(title: &str) {
    println!("\n{title}\n{}", "─".repeat(title.chars().count()));
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
