//! A script the server forgot is loaded again, and a script flushed once more between that load
//! and its run is sent with its text, so the call still succeeds instead of failing `NOSCRIPT`.

use crate::common;

use std::time::Duration;

use common::proxy::{Mode, Proxy};
use common::{raw_command_calls, raw_exists, raw_script_loads, RedisServer};

/// Replies reach the client this late through the proxy: the window in which the test flushes
/// the cache between the server's `SCRIPT LOAD` and the client's `EVALSHA` that follows.
const LATE: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flushed_between_its_load_and_its_run_is_sent_with_its_text() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port()).await;
    // The script cache's path: by EVALSHA, as on a server without functions.
    let config = relock::Config::from_url(&proxy.url())
        .unwrap()
        .with_functions(false)
        .with_command_timeout(LATE * 8);
    let client = relock::Client::new(config).await.expect("connect");
    let name = common::prefix("reload-twice");
    let lock = client.lock(&name);
    lock.lock().await.unwrap().unlock().await.unwrap();

    assert!(server.cmd(&["SCRIPT", "FLUSH"]).starts_with("+OK"));
    let (loads, evals) = (
        raw_script_loads(&server, 1),
        raw_command_calls(&server, "eval"),
    );
    proxy.set_mode(Mode::Delay(LATE));
    let acquire = tokio::spawn(async move { lock.lock().await.map(|guard| (lock, guard)) });
    // The client got NOSCRIPT and loads the script: flush it again before the reply reaches
    // the client, which then runs it by its SHA1 once more.
    let loaded =
        common::eventually(LATE * 8, || async { raw_script_loads(&server, 1) > loads }).await;
    assert!(loaded, "the client never loaded the script again");
    assert!(server.cmd(&["SCRIPT", "FLUSH"]).starts_with("+OK"));
    let (lock, guard) = acquire
        .await
        .unwrap()
        .expect("the acquire succeeds across two flushes");
    assert!(raw_exists(&server, &name));
    assert_eq!(
        raw_command_calls(&server, "eval"),
        evals + 1,
        "the script was not sent with its text"
    );
    proxy.set_mode(Mode::Pass);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    client.shutdown().await.unwrap();
}
