//! Redis 6.2: relock's pruned `LOCK_ACQUIRE` / `LOCK_RELEASE` against the unpruned texts (each
//! fragment the script's `-- Needs:` line names, whole), both sent by `EVALSHA` through a bare
//! fred client. The worker process that measures them on the Redis 6.2 binary, and the parent's
//! side that finds that binary, starts the worker and reads its lines.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::interfaces::LuaInterface;
use fred::types::{Key, Value};

use crate::common::clients::{self, Trial as Measured};
use crate::common::{self, worker};
use crate::{workers, TASKS, TRIALS};
use relock::testing::scripts;
use relock::testing::RedisServer;
use relock::{Evalsha, ScriptCalls};

/// The first line of the catalogue's wrapper around a script's parts (src/scripts/catalogue.rs,
/// the `@script` arm of `catalogue!`): everything of a script's text up to it, with it, is the
/// wrapper's head, and everything after the script's own file its tail, so this bench takes
/// both from the catalogue's text rather than keeping a copy.
const WRAP_OPENS: &str = "local function relock_script()\n";

const ACQUIRE_FILE: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/lock/acquire.lua"));
const RELEASE_FILE: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/lock/release.lua"));

/// The fragment `need` of a `-- Needs:` line (`common/claim`), whole, from the catalogue.
fn fragment(need: &str) -> &'static str {
    match need {
        "common/counter" => scripts::COMMON_COUNTER,
        "common/claim" => scripts::COMMON_CLAIM,
        "common/lease" => scripts::COMMON_LEASE,
        "common/delay" => scripts::COMMON_DELAY,
        "common/replay" => scripts::COMMON_REPLAY,
        "common/hash" => scripts::COMMON_HASH,
        other => panic!("no fragment {other} known to this bench"),
    }
}

/// The script of `file` (a non-fragment file of `lua/`) as it was before pruning: every fragment
/// its `-- Needs:` line names, whole and in order, then the file, wrapped as the catalogue wraps
/// a script, its wrapper taken from `pruned` (the catalogue's text of the same script).
fn unpruned(file: &str, pruned: &str) -> String {
    let needs: Vec<&str> = file
        .lines()
        .take_while(|line| line.starts_with("--"))
        .filter_map(|line| line.strip_prefix("-- Needs:"))
        .flat_map(|list| list.split(','))
        .map(str::trim)
        .filter(|need| !need.is_empty())
        .collect();
    assert!(!needs.is_empty(), "the script names no fragments");
    let head = pruned
        .find(WRAP_OPENS)
        .map(|at| &pruned[..at + WRAP_OPENS.len()])
        .expect("the catalogue wraps a script in relock_script (src/scripts/catalogue.rs)");
    let tail = pruned
        .rfind(file)
        .map(|at| &pruned[at + file.len()..])
        .expect("the catalogue's script ends with its own file");
    let mut text = String::from(head);
    for need in needs {
        text.push_str(fragment(need));
    }
    text.push_str(file);
    text.push_str(tail);
    assert!(
        text.len() > pruned.len(),
        "the unpruned text is no longer than the pruned one"
    );
    text
}

/// The acquire's and the release's text of one side of the comparison.
struct Scripts {
    acquire: String,
    release: String,
}

impl Scripts {
    fn pruned() -> Scripts {
        Scripts {
            acquire: scripts::LOCK_ACQUIRE.to_owned(),
            release: scripts::LOCK_RELEASE.to_owned(),
        }
    }

    fn unpruned() -> Scripts {
        Scripts {
            acquire: unpruned(ACQUIRE_FILE, scripts::LOCK_ACQUIRE),
            release: unpruned(RELEASE_FILE, scripts::LOCK_RELEASE),
        }
    }

    fn bytes(&self) -> usize {
        self.acquire.len() + self.release.len()
    }
}

/// `tasks` tasks each take and release a lock of their own `pairs` times through a bare fred
/// client, by `EVALSHA` of `shas` (acquire, release), with the keys and arguments relock's
/// `lock()` and `unlock()` send (`src/lock/hash.rs`): a 30 s lease, no claim priority, the
/// default 10 ms claim window; a release that keeps nothing (`ARGV[2]` 0: the owner's last
/// hold), publishes, a 48 s replay key on a first send, no replay key on a last release. Each
/// reply is checked: nil for the acquire (taken), 1 for the release (freed, nobody subscribed).
async fn fred_pairs(
    client: &fred::clients::Client,
    (acquire, release): (&Str, &Str),
    side: &str,
    tasks: usize,
    pairs: usize,
) -> Measured {
    let s = |text: &str| Value::String(Str::from(text));
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (client, acquire, release) = (client.clone(), acquire.clone(), release.clone());
            let lock = format!("bench:functions:62:{side}:{t}");
            let field = s(&format!("bench-{side}:{t}"));
            let side = side.to_owned();
            let acquire_keys = vec![
                Key::from(lock.as_str()),
                Key::from(format!("relock_claim:{{{lock}}}")),
            ];
            let acquire_args = vec![s("30000"), field.clone(), s("0"), s("10")];
            let channel = Key::from(format!("redisson_lock__channel:{{{lock}}}"));
            let release_args = vec![
                s("0"),
                s("0"),
                field,
                s("PUBLISH"),
                s("48000"),
                s("10"),
                s("0"),
                s("0"),
            ];
            async move {
                for i in 0..pairs {
                    let taken: Value = client
                        .evalsha(acquire.clone(), acquire_keys.clone(), acquire_args.clone())
                        .await
                        .unwrap();
                    assert!(taken.is_null(), "{side} acquire: not taken: {taken:?}");
                    let release_keys = vec![
                        acquire_keys[0].clone(),
                        channel.clone(),
                        Key::from(format!("redisson_unlock_latch:{{{lock}}}:{side}:{i}")),
                        acquire_keys[1].clone(),
                    ];
                    let freed: Value = client
                        .evalsha(release.clone(), release_keys, release_args.clone())
                        .await
                        .unwrap();
                    assert!(
                        matches!(freed, Value::Integer(1)),
                        "{side} release: not freed: {freed:?}"
                    );
                }
            }
        })
        .collect();
    Measured::measure(tasks * pairs, async {
        for task in handles.into_iter().map(tokio::spawn).collect::<Vec<_>>() {
            task.await.unwrap();
        }
    })
    .await
}

/// Worker `redis-6.2 <runs> <pairs>`, run with `RELOCK_REDIS_SERVER` naming Redis 6.2: prints
/// `version <v>`, `bytes <pruned> <unpruned>`, then per run `run <pruned server µs/pair>
/// <unpruned server µs/pair> <pruned pairs/s> <unpruned pairs/s>`; or `skip <why>` when the
/// server does not start.
pub(crate) fn redis62_worker(args: &[String]) {
    let [_, runs, pairs] = args else {
        panic!("worker arguments: redis-6.2 <runs> <pairs>")
    };
    let (runs, pairs): (usize, usize) = (runs.parse().unwrap(), pairs.parse().unwrap());
    let _parent = worker::parent_lines();
    let server = match RedisServer::start() {
        Ok(server) => server,
        Err(error) => {
            println!("skip Redis 6.2 did not start: {error}");
            return;
        }
    };
    let version = common::redis_version(&server);
    assert!(
        version.starts_with("6.2."),
        "expected Redis 6.2, got {version}"
    );
    println!("version {version}");
    let runtime = common::runtime(workers());
    let url = server.url();
    let fred = runtime.block_on(async {
        // relock itself takes the EVALSHA path there: the server has no functions.
        let relock = relock::Client::connect(&url).await.unwrap();
        let scripts = relock.stats().scripts;
        assert_eq!(
            scripts,
            ScriptCalls::Evalsha(Evalsha::NoFunctions),
            "a relock client on Redis {version}"
        );
        relock.shutdown().await.unwrap();
        clients::fred_client(&url).await
    });
    let sides = [Scripts::pruned(), Scripts::unpruned()];
    println!("bytes {} {}", sides[0].bytes(), sides[1].bytes());
    let shas: Vec<(Str, Str)> = runtime.block_on(async {
        let mut shas = Vec::new();
        for side in &sides {
            let acquire: String = fred.script_load(side.acquire.as_str()).await.unwrap();
            let release: String = fred.script_load(side.release.as_str()).await.unwrap();
            shas.push((acquire.into(), release.into()));
        }
        shas
    });
    let names = ["pruned", "unpruned"];
    let trial = |k: usize, pairs| {
        let before = common::server_cpu(&server);
        let run = runtime.block_on(fred_pairs(
            &fred,
            (&shas[k].0, &shas[k].1),
            names[k],
            TASKS,
            pairs,
        ));
        (run, common::server_cpu(&server) - before)
    };
    for k in 0..2 {
        trial(k, 20); // warm-up, and the replies checked
    }
    for _ in 0..runs {
        let mut cpu = [Duration::ZERO; 2];
        let mut per_sec = [0.0f64; 2];
        for i in 0..TRIALS {
            let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
            for k in order {
                let (run, server_cpu) = trial(k, pairs);
                cpu[k] += server_cpu;
                per_sec[k] = per_sec[k].max(run.per_sec);
            }
        }
        let us = cpu.map(|c| c.as_secs_f64() * 1e6 / (TRIALS * TASKS * pairs) as f64);
        println!("run {} {} {} {}", us[0], us[1], per_sec[0], per_sec[1]);
    }
}

/// Where `scripts/servers.sh redis-6.2` keeps its binary, if it has fetched and checked it.
fn redis62_binary() -> Result<std::path::PathBuf, String> {
    let cache = match std::env::var_os("RELOCK_SERVERS_DIR") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cache")))
            .ok_or("neither RELOCK_SERVERS_DIR, XDG_CACHE_HOME nor HOME is set")?
            .join("relock/servers"),
    };
    let home = cache.join("redis-6.2");
    let binary = home.join("redis-server");
    if home.join("checked").is_file() && binary.exists() {
        Ok(binary)
    } else {
        Err(format!(
            "no Redis 6.2 binary at {} (run scripts/servers.sh redis-6.2 to fetch it)",
            binary.display()
        ))
    }
}

/// What the Redis 6.2 worker measured.
pub(crate) struct Redis62 {
    pub(crate) version: String,
    pub(crate) bytes: (f64, f64),
    /// Per run: (pruned, unpruned) server µs per pair, (pruned, unpruned) pairs/s.
    pub(crate) runs: Vec<([f64; 2], [f64; 2])>,
}

/// Runs the Redis 6.2 part in a worker process; `Err(why)` when it was skipped.
pub(crate) fn redis62(runs: usize, pairs: usize) -> Result<Redis62, String> {
    let binary = redis62_binary()?;
    let mut child = Command::new(std::env::current_exe().expect("current exe"))
        .args([
            "--worker",
            "redis-6.2",
            &runs.to_string(),
            &pairs.to_string(),
        ])
        .env(relock::testing::PROGRAM_VARIABLE, &binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the Redis 6.2 worker");
    let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut found = Redis62 {
        version: String::new(),
        bytes: (f64::NAN, f64::NAN),
        runs: Vec::new(),
    };
    let mut skipped = None;
    for line in stdout.lines() {
        let line = line.expect("read the worker's line");
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |i: usize| -> f64 { words[i].parse().expect("a number") };
        match words.first().copied() {
            Some("skip") => skipped = Some(line["skip ".len()..].to_owned()),
            Some("version") => found.version = words[1].to_owned(),
            Some("bytes") => found.bytes = (number(1), number(2)),
            Some("run") => found
                .runs
                .push(([number(1), number(2)], [number(3), number(4)])),
            _ => eprintln!("functions: Redis 6.2 worker: {line}"),
        }
    }
    drop(child.stdin.take());
    let status = child.wait().expect("wait for the Redis 6.2 worker");
    assert!(status.success(), "the Redis 6.2 worker failed: {status}");
    match skipped {
        Some(why) => Err(why),
        None => Ok(found),
    }
}
