//! The references for relock's client cost: the same lock + unlock pair — relock's own acquire
//! and release scripts by `EVALSHA`, with the arguments relock's `lock()` and `unlock()` send —
//! sent from `tasks` tasks through a bare client with no relock code at all. **fred alone** (the
//! client relock is built on) shows what relock adds on top of its client; **redis-rs** (one
//! multiplexed connection) what another Rust Redis client costs for the same two round trips.
//!
//! Each task builds its keys and arguments once and sends them by reference count (fred) or
//! from borrowed strings (redis-rs), so the references pay for their client and nothing else;
//! only the release's replay key is made per pair, as relock makes it.

use std::time::Instant;

use fred::bytes_utils::Str;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::{Key, Value};

use relock::testing::scripts::{LOCK_ACQUIRE as ACQUIRE, LOCK_RELEASE as RELEASE};

/// One trial of a loop: pairs per second, and this process's CPU time per pair in µs.
#[derive(Clone, Copy, Debug)]
pub struct Trial {
    pub per_sec: f64,
    pub cpu_us_per_pair: f64,
}

impl Trial {
    /// Times `run` (which does `pairs` pairs in all), with this process's CPU time over it.
    pub async fn measure<F: std::future::Future<Output = ()>>(pairs: usize, run: F) -> Trial {
        let (cpu, started) = (super::cpu_ns(), Instant::now());
        run.await;
        let elapsed = started.elapsed().as_secs_f64();
        let cpu = (super::cpu_ns() - cpu) as f64;
        Trial {
            per_sec: pairs as f64 / elapsed,
            cpu_us_per_pair: cpu / 1e3 / pairs as f64,
        }
    }
}

impl Trial {
    /// Spawns `tasks` (doing `pairs` pairs in all) and measures them until the last one ends.
    async fn spawned<F>(pairs: usize, tasks: Vec<F>) -> Trial
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        Trial::measure(pairs, async {
            for handle in tasks.into_iter().map(tokio::spawn).collect::<Vec<_>>() {
                handle.await.unwrap();
            }
        })
        .await
    }
}

/// The keys of task `t`'s lock in a reference loop, as relock names them.
struct Names {
    name: String,
    claim: String,
    channel: String,
}

impl Names {
    fn new(client: &str, t: usize) -> Names {
        let name = format!("bench:ref:{client}:{t}");
        Names {
            claim: format!("relock_claim:{{{name}}}"),
            channel: format!("redisson_lock__channel:{{{name}}}"),
            name,
        }
    }

    /// The release's replay key of pair `i` (relock makes one per release).
    fn latch(&self, i: usize) -> String {
        format!("redisson_unlock_latch:{{{}}}:{i}", self.name)
    }
}

/// The acquire's arguments after the field: a 30 s lease (the watchdog's default), no claim
/// priority, no claim window. The release's: the unlock message, the lease, then (after the
/// field) the publish command, the replay key's and the claim's lifetimes, a first send, no
/// replay key on a last release.
const ACQUIRE_ARGS: [&str; 3] = ["30000", "0", "0"];
const RELEASE_ARGS: [&str; 7] = ["0", "30000", "PUBLISH", "12000", "10", "0", "0"];

/// A bare fred client, connected as fred connects by default.
pub async fn fred_client(url: &str) -> fred::clients::Client {
    let config = fred::types::config::Config::from_url(url).unwrap();
    let client = fred::clients::Client::new(config, None, None, None);
    client.init().await.unwrap();
    client
}

/// `tasks` tasks each take and release their own lock `pairs` times through `client`.
pub async fn fred_pairs(client: &fred::clients::Client, tasks: usize, pairs: usize) -> Trial {
    let acquire: Str = client
        .script_load::<String, _>(ACQUIRE)
        .await
        .unwrap()
        .into();
    let release: Str = client
        .script_load::<String, _>(RELEASE)
        .await
        .unwrap()
        .into();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (client, acquire, release) = (client.clone(), acquire.clone(), release.clone());
            let names = Names::new("fred", t);
            let s = |text: &str| Value::String(Str::from(text));
            let field = s(&format!("bench-fred:{t}"));
            let key = |k: &str| Key::from(k);
            let acquire_keys = vec![key(&names.name), key(&names.claim)];
            let mut acquire_args = vec![s(ACQUIRE_ARGS[0]), field.clone()];
            acquire_args.extend(ACQUIRE_ARGS[1..].iter().map(|a| s(a)));
            let mut release_args: Vec<Value> = RELEASE_ARGS[..2].iter().map(|a| s(a)).collect();
            release_args.push(field);
            release_args.extend(RELEASE_ARGS[2..].iter().map(|a| s(a)));
            async move {
                for i in 0..pairs {
                    let taken: Value = client
                        .evalsha(acquire.clone(), acquire_keys.clone(), acquire_args.clone())
                        .await
                        .unwrap();
                    assert!(
                        taken.is_null(),
                        "fred reference: the lock was busy: {taken:?}"
                    );
                    let release_keys = vec![
                        acquire_keys[0].clone(),
                        key(&names.channel),
                        Key::from(names.latch(i)),
                        acquire_keys[1].clone(),
                    ];
                    let _: Value = client
                        .evalsha(release.clone(), release_keys, release_args.clone())
                        .await
                        .unwrap();
                }
            }
        })
        .collect();
    Trial::spawned(tasks * pairs, handles).await
}

/// A redis-rs multiplexed connection (one socket shared by every task, as fred's is).
pub async fn redis_rs_connection(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// [`fred_pairs`] through redis-rs.
pub async fn redis_rs_pairs(
    connection: &redis::aio::MultiplexedConnection,
    tasks: usize,
    pairs: usize,
) -> Trial {
    let mut loader = connection.clone();
    let load = |lua: &str| redis::cmd("SCRIPT").arg("LOAD").arg(lua).to_owned();
    let acquire: String = load(ACQUIRE).query_async(&mut loader).await.unwrap();
    let release: String = load(RELEASE).query_async(&mut loader).await.unwrap();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (mut connection, acquire, release) =
                (connection.clone(), acquire.clone(), release.clone());
            let names = Names::new("redis-rs", t);
            let field = format!("bench-redis-rs:{t}");
            async move {
                for i in 0..pairs {
                    let taken: redis::Value = redis::cmd("EVALSHA")
                        .arg(&acquire)
                        .arg(2)
                        .arg(&names.name)
                        .arg(&names.claim)
                        .arg(ACQUIRE_ARGS[0])
                        .arg(&field)
                        .arg(&ACQUIRE_ARGS[1..])
                        .query_async(&mut connection)
                        .await
                        .unwrap();
                    assert!(
                        matches!(taken, redis::Value::Nil),
                        "redis-rs reference: the lock was busy: {taken:?}"
                    );
                    let _: redis::Value = redis::cmd("EVALSHA")
                        .arg(&release)
                        .arg(4)
                        .arg(&names.name)
                        .arg(&names.channel)
                        .arg(names.latch(i))
                        .arg(&names.claim)
                        .arg(&RELEASE_ARGS[..2])
                        .arg(&field)
                        .arg(&RELEASE_ARGS[2..])
                        .query_async(&mut connection)
                        .await
                        .unwrap();
                }
            }
        })
        .collect();
    Trial::spawned(tasks * pairs, handles).await
}
