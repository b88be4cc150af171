//! relock's scripts as one function library: loaded at connect on a server with functions and
//! called by `FCALL`, loaded again whenever the server lost it, beside a library of another
//! relock build, and `EVALSHA` where there are no functions, where `FUNCTION LOAD` is refused,
//! or where the client's config says so, each path said in `stats()`.

use crate::common;

use std::time::Duration;

use common::{raw_command_calls, RedisServer};
use relock::{Client, Evalsha, ScriptCalls};

/// Whether the test's server has functions (Redis 7.0 and later, Valkey).
fn has_functions() -> bool {
    relock::testing::server_version().map_or(true, |v| v.at_least(7, 0))
}

/// A client of `url` that calls its scripts as functions where it can, whatever the suite's
/// `RELOCK_TEST_FUNCTIONS` says.
async fn connect(url: &str) -> Client {
    let config = relock::Config::from_url(url)
        .unwrap()
        .with_functions(true)
        .with_watchdog_timeout(Duration::from_secs(3));
    Client::new(config).await.expect("connect")
}

/// The names of the function libraries on `server`.
fn libraries(server: &RedisServer) -> Vec<String> {
    let list = server.cmd(&["FUNCTION", "LIST"]);
    let lines: Vec<&str> = list.lines().map(str::trim).collect();
    lines
        .windows(3)
        .filter(|w| w[0].ends_with("library_name"))
        .map(|w| w[2].to_owned())
        .collect()
}

/// Makes user `name` (password `secret`, every key, channel and command, then `rules`) on
/// `server`, and returns its URL.
fn user(server: &RedisServer, name: &str, rules: &[&str]) -> String {
    let mut setuser = vec!["ACL", "SETUSER", name, "on", ">secret", "~*", "&*", "+@all"];
    setuser.extend(rules);
    let reply = server.cmd(&setuser);
    assert!(reply.starts_with("+OK"), "{reply}");
    format!("redis://{name}:secret@127.0.0.1:{}", server.port())
}

/// One lock and unlock of `name`, which must succeed.
async fn lock_and_unlock(client: &Client, name: &str) {
    let guard = client.lock(name).lock().await.expect("lock");
    assert!(client.lock(name).is_locked().await.unwrap());
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_client_calls_its_scripts_as_functions_of_one_library() {
    let server = RedisServer::start();
    let client = connect(&server.url()).await;
    if !has_functions() {
        assert_eq!(
            client.stats().scripts,
            ScriptCalls::Evalsha(Evalsha::NoFunctions)
        );
        assert!(server.command(&["FUNCTION", "LIST"]).is_err_or_error());
        lock_and_unlock(&client, &common::prefix("functions-none")).await;
        return;
    }
    assert_eq!(client.stats().scripts, ScriptCalls::Functions);
    assert_eq!(libraries(&server), [relock::library_name()]);
    let (fcalls, evalshas) = (
        raw_command_calls(&server, "fcall"),
        raw_command_calls(&server, "evalsha"),
    );
    let name = common::prefix("functions-called");
    lock_and_unlock(&client, &name).await;
    assert!(raw_command_calls(&server, "fcall") >= fcalls + 2);
    assert_eq!(raw_command_calls(&server, "evalsha"), evalshas);
    // A second client of the same build finds the library there and loads nothing new.
    let second = connect(&server.url()).await;
    assert_eq!(second.stats().scripts, ScriptCalls::Functions);
    assert_eq!(libraries(&server), [relock::library_name()]);
    // A script that writes nothing goes by FCALL_RO.
    let ro = raw_command_calls(&server, "fcall_ro");
    let count = client.semaphore(common::prefix("functions-ro"));
    assert_eq!(count.available_permits().await.unwrap(), 0);
    assert_eq!(raw_command_calls(&server, "fcall_ro"), ro + 1);
}

#[tokio::test]
async fn with_functions_off_every_script_goes_by_evalsha() {
    let server = RedisServer::start();
    let config = relock::Config::from_url(&server.url())
        .unwrap()
        .with_functions(false);
    let client = Client::new(config).await.unwrap();
    assert_eq!(
        client.stats().scripts,
        ScriptCalls::Evalsha(Evalsha::Configured)
    );
    let fcalls = raw_command_calls(&server, "fcall");
    let evalshas = raw_command_calls(&server, "evalsha");
    lock_and_unlock(&client, &common::prefix("functions-off")).await;
    assert_eq!(raw_command_calls(&server, "fcall"), fcalls);
    assert!(raw_command_calls(&server, "evalsha") >= evalshas + 2);
    if has_functions() {
        assert!(libraries(&server).is_empty());
    }
}

#[tokio::test]
async fn a_flushed_library_is_loaded_again_and_the_call_succeeds() {
    if !has_functions() {
        return;
    }
    let server = RedisServer::start();
    let client = connect(&server.url()).await;
    let name = common::prefix("functions-flushed");
    lock_and_unlock(&client, &name).await;
    // Flushed while a lock is held: its release, the next call, finds the function gone.
    let guard = client.lock(&name).lock().await.unwrap();
    assert!(server.cmd(&["FUNCTION", "FLUSH"]).starts_with("+OK"));
    assert!(libraries(&server).is_empty());
    let before = client.stats().noscript_reloads;
    guard.unlock().await.expect("the release after the flush");
    assert!(!common::raw_exists(&server, &name));
    assert!(client.stats().noscript_reloads > before);
    assert_eq!(libraries(&server), [relock::library_name()]);
    assert_eq!(client.stats().scripts, ScriptCalls::Functions);
    lock_and_unlock(&client, &name).await;
}

#[tokio::test]
async fn a_restarted_server_without_the_library_gets_it_again() {
    if !has_functions() {
        return;
    }
    let mut server = RedisServer::start();
    let client = connect(&server.url()).await;
    let name = common::prefix("functions-restart");
    lock_and_unlock(&client, &name).await;
    server.restart();
    assert!(
        libraries(&server).is_empty(),
        "a server without persistence"
    );
    // The first call may meet the connection's reconnect; it comes back within the timeout.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match client.lock(&name).try_lock().await {
            Ok(Some(guard)) => {
                guard.unlock().await.unwrap();
                break;
            }
            Ok(None) => panic!("nobody holds {name} on the restarted server"),
            Err(e) if tokio::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no call succeeded after the restart: {e}"),
        }
    }
    assert_eq!(libraries(&server), [relock::library_name()]);
}

#[tokio::test]
async fn a_library_of_another_build_beside_changes_nothing() {
    if !has_functions() {
        return;
    }
    let server = RedisServer::start();
    // Another relock build's library: other functions (failing ones, so a call that reached
    // them would show), under its own id.
    let other = "relock_0123456789abcdef";
    let text = format!(
        "#!lua name={other}\n\
         redis.register_function('{other}_lock_acquire', function() return redis.error_reply('ERR other build') end)\n\
         redis.register_function('{other}_lock_release', function() return redis.error_reply('ERR other build') end)"
    );
    assert_eq!(
        server.cmd(&["FUNCTION", "LOAD", &text]).trim(),
        format!("${}\r\n{other}", other.len()).trim()
    );
    let client = connect(&server.url()).await;
    assert_eq!(client.stats().scripts, ScriptCalls::Functions);
    lock_and_unlock(&client, &common::prefix("functions-beside")).await;
    let mut found = libraries(&server);
    found.sort();
    let mut expected = vec![other.to_owned(), relock::library_name().to_owned()];
    expected.sort();
    assert_eq!(found, expected);
    // Flushed and loaded again by this build: the other's library is not touched either.
    server.cmd(&["FUNCTION", "DELETE", relock::library_name()]);
    lock_and_unlock(&client, &common::prefix("functions-beside")).await;
    let mut found = libraries(&server);
    found.sort();
    assert_eq!(found, expected);
}

#[tokio::test]
async fn a_user_without_function_load_falls_back_to_evalsha() {
    if !has_functions() {
        return;
    }
    let server = RedisServer::start();
    let url = user(&server, "nofunctions", &["-function"]);
    let client = connect(&url).await;
    assert_eq!(
        client.stats().scripts,
        ScriptCalls::Evalsha(Evalsha::Refused)
    );
    assert!(libraries(&server).is_empty());
    let evalshas = raw_command_calls(&server, "evalsha");
    lock_and_unlock(&client, &common::prefix("functions-refused")).await;
    assert!(raw_command_calls(&server, "evalsha") >= evalshas + 2);
}

#[tokio::test]
async fn a_client_that_may_no_longer_load_its_library_goes_on_by_evalsha() {
    if !has_functions() {
        return;
    }
    let server = RedisServer::start();
    let url = user(&server, "shifting", &[]);
    let client = connect(&url).await;
    assert_eq!(client.stats().scripts, ScriptCalls::Functions);
    let name = common::prefix("functions-shifting");
    lock_and_unlock(&client, &name).await;
    // Its user loses FUNCTION, then the library goes: the reload is refused, and the call
    // goes by EVALSHA instead of failing.
    let reply = server.cmd(&["ACL", "SETUSER", "shifting", "-function"]);
    assert!(reply.starts_with("+OK"), "{reply}");
    assert!(server.cmd(&["FUNCTION", "FLUSH"]).starts_with("+OK"));
    let evalshas = raw_command_calls(&server, "evalsha");
    lock_and_unlock(&client, &name).await;
    assert_eq!(
        client.stats().scripts,
        ScriptCalls::Evalsha(Evalsha::Refused)
    );
    assert!(raw_command_calls(&server, "evalsha") >= evalshas + 2);
    assert!(libraries(&server).is_empty());
}

/// `Result<String>` of a raw command: whether it failed or answered an error.
trait ErrorReply {
    fn is_err_or_error(&self) -> bool;
}

impl ErrorReply for std::io::Result<String> {
    fn is_err_or_error(&self) -> bool {
        self.as_ref().map_or(true, |reply| reply.starts_with('-'))
    }
}

#[tokio::test]
async fn on_a_full_server_a_holder_renews_and_releases_and_nobody_acquires() {
    if !has_functions() {
        return;
    }
    let server = RedisServer::start();
    let config = relock::Config::from_url(&server.url())
        .unwrap()
        .with_functions(true)
        .with_watchdog_timeout(Duration::from_millis(900));
    let client = Client::new(config).await.unwrap();
    let (held, other) = (
        common::prefix("functions-oom-held"),
        common::prefix("functions-oom-other"),
    );
    let guard = client.lock(&held).lock().await.unwrap();
    // Full: any memory in use is over the limit, and nothing may be evicted.
    server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    assert!(server
        .cmd(&["CONFIG", "SET", "maxmemory", "1"])
        .starts_with("+OK"));
    let refused = client.lock(&other).try_lock().await;
    let error = refused.expect_err("an acquire on a full server");
    assert!(error.to_string().contains("OOM"), "{error}");
    assert!(!common::raw_exists(&server, &other));
    // Three leases long, the watchdog keeps the hold: its renewals run (allow-oom).
    let renewals = client.stats().renewals;
    tokio::select! {
        _ = guard.lost() => panic!("the hold was lost on a full server"),
        _ = tokio::time::sleep(Duration::from_millis(2700)) => {}
    }
    assert!(client.stats().renewals >= renewals + 3);
    assert!(common::raw_pttl(&server, &held) > 0);
    guard.unlock().await.expect("a release on a full server");
    assert!(!common::raw_exists(&server, &held));
    server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
}

/// A writer into a shared buffer, for a `tracing` subscriber's lines.
#[derive(Clone, Default)]
struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Lines {
    type Writer = Lines;

    fn make_writer(&'a self) -> Lines {
        self.clone()
    }
}

/// What relock logs at debug level while a client connects to `url` with `functions`.
fn connect_logged(url: &str, functions: bool) -> (String, ScriptCalls) {
    let lines = Lines::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(lines.clone())
        .finish();
    let _logged = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let calls = runtime.block_on(async {
        let config = relock::Config::from_url(url)
            .unwrap()
            .with_functions(functions);
        let client = Client::new(config).await.unwrap();
        let calls = client.stats().scripts;
        client.shutdown().await.unwrap();
        calls
    });
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let said: Vec<&str> = text
        .lines()
        .filter(|line| {
            line.contains("relock calls its scripts") || line.contains("relock sends its scripts")
        })
        .collect();
    assert_eq!(said.len(), 1, "said once at connect: {text}");
    (said[0].to_owned(), calls)
}

#[test]
fn the_path_a_client_takes_is_said_once_in_a_debug_line_at_connect() {
    let server = RedisServer::start();
    let (line, calls) = connect_logged(&server.url(), false);
    assert_eq!(calls, ScriptCalls::Evalsha(Evalsha::Configured));
    assert!(
        line.contains("EVALSHA") && line.contains("Config::with_functions(false)"),
        "{line}"
    );
    let (line, calls) = connect_logged(&server.url(), true);
    if has_functions() {
        assert_eq!(calls, ScriptCalls::Functions);
        assert!(
            line.contains("FCALL") && line.contains(relock::library_name()),
            "{line}"
        );
        let url = user(&server, "logged", &["-function"]);
        let (line, calls) = connect_logged(&url, true);
        assert_eq!(calls, ScriptCalls::Evalsha(Evalsha::Refused));
        // The server's answer, as it gave it.
        assert!(
            line.contains("refused FUNCTION LOAD") && line.contains("NOPERM"),
            "{line}"
        );
    } else {
        assert_eq!(calls, ScriptCalls::Evalsha(Evalsha::NoFunctions));
        assert!(line.contains("no functions"), "{line}");
    }
}
