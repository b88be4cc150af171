//! Helpers shared by every benchmark: the throwaway server, settings from the environment,
//! statistics, clocks, process and Redis probes. Each bench uses a subset of them.

#![allow(dead_code, unreachable_pub)]

pub mod ceiling;
pub mod clients;
pub mod contend;
pub mod monitor;
pub mod report;
pub mod wake;
pub mod worker;

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Something that runs one Redis command and returns its raw reply: the server this process
/// started, or (in a worker process) the parent's server by its port.
pub trait Redis {
    fn cmd(&self, args: &[&str]) -> String;
    fn port(&self) -> u16;
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port())
    }
}

impl Redis for relock::testing::RedisServer {
    fn cmd(&self, args: &[&str]) -> String {
        self.command(args).expect("redis command failed")
    }
    fn port(&self) -> u16 {
        relock::testing::RedisServer::port(self)
    }
}

/// The parent's server, seen from a worker.
pub struct Remote(pub u16);

impl Redis for Remote {
    fn cmd(&self, args: &[&str]) -> String {
        relock::testing::command(self.0, args).expect("redis command failed")
    }
    fn port(&self) -> u16 {
        self.0
    }
}

/// `RUNS` from the environment, else `default`.
pub fn runs(default: usize) -> usize {
    env_or("RUNS", default).max(1)
}

/// A multi-threaded tokio runtime with `workers` worker threads (0: tokio's default, one per
/// core).
pub fn runtime(workers: usize) -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if workers > 0 {
        builder.worker_threads(workers);
    }
    builder.enable_all().build().expect("a tokio runtime")
}

/// A comma-separated list from the environment variable `name` (say `TASKS=2,16`), else
/// `default`: runs a subset of a bench's configurations.
pub fn env_list<T: std::str::FromStr + Copy>(name: &str, default: &[T]) -> Vec<T> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.split(',').map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// A number from the environment variable `name`, else `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Wall-clock microseconds since the epoch: comparable between processes on one machine.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The `tokio` instant at wall-clock time `us` (now, if it has passed).
pub fn instant_at(us: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_micros(us.saturating_sub(now_us()))
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The median of `values` (NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    percentile(values, 50.0)
}

/// The `p`th percentile of `values` by the nearest-rank method (NaN when empty).
pub fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The server's version, from `INFO server`.
pub fn redis_version(server: &impl Redis) -> String {
    info_field(&server.cmd(&["INFO", "server"]), "redis_version").unwrap_or_else(|| "?".into())
}

fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

/// CPU time redis-server has used (user + system, all its threads), from `INFO cpu`.
pub fn server_cpu(server: &impl Redis) -> Duration {
    let info = server.cmd(&["INFO", "cpu"]);
    let seconds = |field| {
        info_field(&info, field)
            .and_then(|v| v.parse::<f64>().ok())
            .expect("INFO cpu")
    };
    Duration::from_secs_f64(seconds("used_cpu_user") + seconds("used_cpu_sys"))
}

/// Calls per command from `INFO commandstats` (commands run by scripts included).
pub fn command_calls(server: &impl Redis) -> HashMap<String, u64> {
    server
        .cmd(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|s| s.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// `after - before` per command, leaving out `ignore` (the bench's own probes).
pub fn calls_delta(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
    ignore: &[&str],
) -> HashMap<String, u64> {
    after
        .iter()
        .filter(|(name, _)| !ignore.contains(&name.as_str()))
        .map(|(name, n)| (name.clone(), n - before.get(name).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// This process's user + system CPU time, from `/proc/self/stat` (clock ticks of 10 ms).
pub fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // Fields after the command name (which may hold spaces) start at "state"; utime and stime are
    // fields 14 and 15 of the whole line, so 12 and 13 after it.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// This process's CPU time in ns: the time on a CPU of each of its threads, from
/// `/proc/self/task/<tid>/schedstat` (nanoseconds, where `/proc/self/stat` counts 10 ms ticks).
/// Threads that ended between two readings drop out of the second, so measure over a span in
/// which the threads doing the work live (a runtime's workers, a client's tasks).
pub fn cpu_ns() -> u64 {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .filter_map(|task| {
            let path = task.ok()?.path().join("schedstat");
            let stat = std::fs::read_to_string(path).ok()?;
            stat.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// This process's resident memory in bytes, from `VmRSS` in `/proc/self/status`.
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// The machine's own stalls: the longest round trip of back-to-back `PING`s on one plain TCP
/// connection (no client library) for `window`, in ms. On a shared VM a sleeping process now and
/// then takes milliseconds to be woken; any wait measured here can include such a stall.
pub fn longest_ping_ms(port: u16, window: Duration) -> f64 {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect for PING");
    conn.set_nodelay(true).unwrap();
    let end = std::time::Instant::now() + window;
    let mut longest = Duration::ZERO;
    while std::time::Instant::now() < end {
        let sent = std::time::Instant::now();
        relock::testing::command_on(&mut conn, &["PING"]).expect("PING");
        longest = longest.max(sent.elapsed());
    }
    ms(longest)
}

/// The p50 round trip of `count` sequential `PING`s sent by fred (one client on a tokio
/// runtime, as relock sends its commands), in ms.
pub fn fred_ping_p50_ms(url: &str, count: usize) -> f64 {
    use fred::interfaces::ClientLike;
    let runtime = runtime(0);
    runtime.block_on(async {
        let config = fred::types::config::Config::from_url(url).unwrap();
        let client = fred::clients::Client::new(config, None, None, None);
        client.init().await.unwrap();
        let mut trips = Vec::with_capacity(count);
        for _ in 0..count {
            let sent = std::time::Instant::now();
            let _: String = client.ping(None).await.unwrap();
            trips.push(ms(sent.elapsed()));
        }
        client.quit().await.unwrap();
        percentile(&trips, 50.0)
    })
}
