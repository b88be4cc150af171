//! A release whose reply was lost, retried by a process that stalled between its sends, counts
//! once: the replay key outlives every hold of the owner's the retry could still find on Redis
//! (the TTL the release left, or a renewal sent before the stall), not only the retries' window
//! of a few command timeouts. The model checker's stalled retry (`docs/model.md`, "What the
//! models found in relock") on a real server.

use crate::common;

use std::time::Duration;

use common::family::raw_keys;
use common::proxy::Proxy;
use common::{raw_holds, raw_script_calls, RedisServer};
use relock::Client;

/// The owner's watchdog timeout: the lock outlives the stall by far.
const WATCHDOG: Duration = Duration::from_secs(6);
/// The command timeout: a retry normally goes out within 2 × 3 − 1 of them, and the replay key
/// used to live 2 × 3 of them (1.8 s).
const COMMAND: Duration = Duration::from_millis(300);
/// The stall between the release's first send and its retry: past the old replay key's life,
/// well inside the lease.
const STALL: Duration = Duration::from_millis(2_500);

/// A proxy whose tasks run on a thread of their own, so it keeps forwarding while the test's
/// runtime is stalled; it stops when dropped.
struct ProxyBeside {
    proxy: Proxy,
    _stop: tokio::sync::oneshot::Sender<()>,
}

fn proxy_beside(port: u16) -> ProxyBeside {
    let (started, proxy) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            started.send(Proxy::start(port).await).unwrap();
            let _ = stopped.await;
        });
    });
    ProxyBeside {
        proxy: proxy.recv().unwrap(),
        _stop: stop,
    }
}

/// One thread: blocking it stalls the owner's process, its connection's tasks and watchdog
/// with it.
#[tokio::test(flavor = "current_thread")]
async fn a_release_retried_after_a_stall_counts_once() {
    let server = RedisServer::start();
    let beside = proxy_beside(server.port());
    let config = common::config(&beside.proxy.url())
        .with_watchdog_timeout(WATCHDOG)
        .with_command_timeout(COMMAND);
    let client = Client::new(config).await.unwrap();
    let name = common::prefix("stalled-release");
    let lock = client.lock(&name);
    lock.lock().await.unwrap().unlock().await.unwrap(); // loads the scripts
    let kept = lock.lock().await.unwrap();
    let released = lock.lock().await.unwrap();
    let field = format!("{}:{}", client.id(), kept.owner().id());
    assert_eq!(raw_holds(&server, &name, &field), 2);

    // The release's first send runs; its reply is lost with its connection.
    let release_sha = common::sent_as(relock::testing::scripts::LOCK_RELEASE);
    beside.proxy.swallow_next_reply(&[&release_sha, &name]);
    let scripts_before = raw_script_calls(&server);
    let unlock = tokio::spawn(released.unlock());
    // Until the reply is swallowed this task yields, so the unlock can send; from then on it
    // blocks the thread, so the client cannot see the closed connection and retry before the
    // stall.
    let ran = 'ran: {
        for _ in 0..200 {
            tokio::task::yield_now().await;
            for _ in 0..10 {
                if beside.proxy.swallowed() == 1 {
                    break 'ran true;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        false
    };
    assert!(ran, "the release never reached the server");
    std::thread::sleep(STALL);
    assert_eq!(
        raw_script_calls(&server),
        scripts_before + 1,
        "the retry went out before the stall: the schedule was not the one under test"
    );
    assert_eq!(raw_holds(&server, &name, &field), 1, "the first send ran");
    let replays = raw_keys(&server, &format!("redisson_unlock_latch:{{{name}}}:*"));
    assert_eq!(replays.len(), 1, "the replay key did not outlive the stall");

    unlock.await.unwrap().expect("the retried release");
    assert_eq!(
        raw_holds(&server, &name, &field),
        1,
        "the retry counted the release twice"
    );
    assert!(!kept.is_lost());
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    kept.unlock().await.unwrap();
    common::family::Family::Lock
        .assert_no_leaks(&server, &[&client], &[&name])
        .await;
}
