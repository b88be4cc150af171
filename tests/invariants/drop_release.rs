//! Releases that happen: a guard dropped where no runtime runs, or while its runtime shuts down,
//! still frees its lock, and a `Permit` dropped where no runtime runs is given back likewise;
//! `Client::shutdown_keeping_locks()` leaves the client's locks to their leases.
//! (`Client::shutdown()` releasing every lock to a waiter is a family invariant, in
//! `family.rs`.)

use crate::common;

use std::any::Any;
use std::time::Duration;

use common::RedisServer;
use tokio::runtime::Runtime;

use super::synchronizers::state;

/// The default watchdog lease: a lock left behind would stay this long.
const WATCHDOG: Duration = Duration::from_secs(30);
const SOON: Duration = Duration::from_secs(10);

/// A runtime of two workers, multi-thread or current-thread.
fn runtime(multi_thread: bool) -> Runtime {
    let mut builder = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.worker_threads(2).enable_all().build().unwrap()
}

/// What is dropped away from its runtime: a lock's guard, or a permit semaphore's `Permit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Guard,
    Permit,
}

impl Hold {
    /// What it is called in messages.
    fn name(self) -> &'static str {
        match self {
            Hold::Guard => "guard",
            Hold::Permit => "permit",
        }
    }

    /// Takes the lock `name` (the one permit of semaphore `name`) on `runtime`, with a client
    /// made there, and checks that it is held.
    fn take(self, runtime: &Runtime, server: &RedisServer, name: &str) -> Box<dyn Any + Send> {
        runtime.block_on(async {
            let client = common::client(server, WATCHDOG).await;
            match self {
                Hold::Guard => {
                    let guard = client.lock(name).lock().await.unwrap();
                    assert!(common::raw_exists(server, name));
                    Box::new(guard) as Box<dyn Any + Send>
                }
                Hold::Permit => {
                    let sem = client.permit_semaphore(name);
                    assert!(sem.try_set_permits(1).await.unwrap());
                    let permit = sem.acquire().await.unwrap();
                    assert_eq!(state(server, name), (Some(0), 1));
                    Box::new(permit)
                }
            }
        })
    }

    /// Whether what it took is given back: the lock gone, the permit available again.
    fn released(self, server: &RedisServer, name: &str) -> bool {
        match self {
            Hold::Guard => !common::raw_exists(server, name),
            Hold::Permit => state(server, name) == (Some(1), 0),
        }
    }

    /// What is left of it on the server, for a message: the lock's holders, the semaphore's
    /// available permits and permits out.
    fn left(self, server: &RedisServer, name: &str) -> String {
        match self {
            Hold::Guard => format!("lock {:?}", common::raw_hgetall(server, name)),
            Hold::Permit => format!("(available, out) {:?}", state(server, name)),
        }
    }
}

/// Takes `hold` (on a server of its own, named for `test`) on a multi-thread runtime and drops
/// it on a plain thread: it is given back within `within`.
fn dropped_on_a_plain_thread(hold: Hold, test: &str, within: Duration) {
    let server = RedisServer::start();
    let runtime = runtime(true);
    let name = common::prefix(test);
    let held = hold.take(&runtime, &server, &name);
    std::thread::spawn(move || drop(held)).join().unwrap();
    runtime.block_on(async {
        let given_back = common::eventually(within, || async { hold.released(&server, &name) });
        assert!(
            given_back.await,
            "a {} dropped on a plain thread was kept: {}",
            hold.name(),
            hold.left(&server, &name)
        );
    });
}

/// On a current-thread runtime, then a multi-thread one (each with a server of its own and a
/// name for `test`): takes `hold`, lets `end` end the runtime and what it took, and checks at
/// once that it was given back (`when`: how it ended, for the message).
fn on_each_runtime(hold: Hold, test: &str, when: &str, end: impl Fn(Runtime, Box<dyn Any + Send>)) {
    for multi_thread in [false, true] {
        let server = RedisServer::start();
        let runtime = runtime(multi_thread);
        let name = common::prefix(test);
        let held = hold.take(&runtime, &server, &name);
        end(runtime, held);
        assert!(
            hold.released(&server, &name),
            "a {} {when} was kept (multi-thread: {multi_thread}): {}",
            hold.name(),
            hold.left(&server, &name)
        );
    }
}

/// Drops `hold` after its runtime ended, on each runtime: the drop gives it back before it
/// returns.
fn dropped_after_its_runtime(hold: Hold, test: &str) {
    on_each_runtime(hold, test, "that outlived its runtime", |runtime, held| {
        drop(runtime);
        drop(held); // waits for the release
    });
}

#[test]
fn a_guard_dropped_on_a_plain_thread_is_released() {
    dropped_on_a_plain_thread(Hold::Guard, "drop-plain-thread", SOON);
}

#[test]
fn a_permit_dropped_on_a_plain_thread_is_given_back() {
    dropped_on_a_plain_thread(Hold::Permit, "sync-drop-thread", Duration::from_secs(5));
}

#[test]
fn a_guard_dropped_after_its_runtime_ended_is_released() {
    dropped_after_its_runtime(Hold::Guard, "drop-after-runtime");
}

#[test]
fn a_permit_dropped_after_its_runtime_ended_is_given_back() {
    dropped_after_its_runtime(Hold::Permit, "sync-drop-after-runtime");
}

/// How many times the race of a guard dropped as `main` returns is run: the runtime's shutdown
/// may drop the client's connection task before or after the release is sent (before, the
/// release fails without reaching Redis; it used to be lost in about 1 run in 50).
const SHUTDOWN_RACES: usize = 100;

#[test]
fn a_guard_dropped_as_main_returns_is_released() {
    let server = RedisServer::start();
    for (multi_thread, runs) in [(false, 10), (true, SHUTDOWN_RACES)] {
        let mut kept = Vec::new();
        for run in 0..runs {
            let runtime = runtime(multi_thread);
            let name = common::prefix("drop-main-returns");
            // As `#[tokio::main]` does: the guard drops at the end of the block, and the runtime
            // right after.
            runtime.block_on(async {
                let client = common::client(&server, WATCHDOG).await;
                let _guard = client.lock(name.clone()).lock().await.unwrap();
            });
            drop(runtime);
            if common::raw_exists(&server, &name) {
                kept.push(run);
            }
        }
        assert!(
            kept.is_empty(),
            "guards dropped as main returned kept their locks in runs {kept:?} of {runs} \
             (multi-thread: {multi_thread})"
        );
    }
}

#[test]
fn a_guard_held_by_a_task_when_its_runtime_shuts_down_is_released() {
    let when = "dropped by the runtime's shutdown";
    on_each_runtime(Hold::Guard, "drop-in-shutdown", when, |runtime, guard| {
        runtime.spawn(async move {
            let _guard = guard;
            futures::future::pending::<()>().await;
        });
        drop(runtime);
    });
}

#[tokio::test]
async fn shutdown_keeping_locks_leaves_them_to_their_leases() {
    let server = RedisServer::start();
    let watchdog = Duration::from_secs(1);
    let client = common::client(&server, watchdog).await;
    let rival = common::client(&server, watchdog).await;
    let name = common::prefix("shutdown-keep");
    let guard = client.lock(name.clone()).lock().await.unwrap();
    client.shutdown_keeping_locks().await.unwrap();
    assert!(common::raw_exists(&server, &name), "the lock was released");
    assert!(common::raw_pttl(&server, &name) > 0);
    // Nobody renews it: it frees itself with its lease.
    let taken = rival
        .lock(name.clone())
        .try_lock_for(SOON, None)
        .await
        .unwrap()
        .expect("the kept lock never expired");
    drop(guard);
    taken.unlock().await.unwrap();
}

/// Connections the server has accepted so far (`total_connections_received`).
fn connections_received(server: &RedisServer) -> u64 {
    let info = server.cmd(&["INFO", "stats"]);
    info.lines()
        .find_map(|line| line.strip_prefix("total_connections_received:"))
        .map(|n| n.trim().parse().unwrap())
        .unwrap()
}

/// A runtime shut down while its tasks hold 40 guards: every lock is released, through one
/// rescue connection (and its thread and runtime) for all of them, not one each.
#[test]
fn many_guards_dropped_by_a_shutting_down_runtime_share_one_rescue_connection() {
    const GUARDS: usize = 40;
    for multi_thread in [false, true] {
        let server = RedisServer::start();
        let runtime = runtime(multi_thread);
        let prefix = common::prefix("drop-many-in-shutdown");
        let names: Vec<String> = (0..GUARDS).map(|i| format!("{prefix}:{i}")).collect();
        let guards = runtime.block_on(async {
            let client = common::client(&server, WATCHDOG).await;
            let mut guards = Vec::new();
            for name in &names {
                guards.push(client.lock(name.as_str()).lock().await.unwrap());
            }
            guards
        });
        for guard in guards {
            runtime.spawn(async move {
                let _guard = guard;
                futures::future::pending::<()>().await;
            });
        }
        let before = connections_received(&server);
        let started = std::time::Instant::now();
        drop(runtime);
        let opened = connections_received(&server) - before;
        eprintln!(
            "{GUARDS} guards rescued in {:?} over {opened} connection(s) (multi-thread: {multi_thread})",
            started.elapsed()
        );
        let kept: Vec<&String> = names
            .iter()
            .filter(|name| common::raw_exists(&server, name))
            .collect();
        assert!(
            kept.is_empty(),
            "locks kept: {kept:?} (multi-thread: {multi_thread})"
        );
        assert!(
            opened <= 3,
            "{opened} connections opened to rescue {GUARDS} guards (multi-thread: {multi_thread})"
        );
    }
}
