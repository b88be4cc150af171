//! `relock::testing`: the throwaway server starts, serves locks, and is gone once dropped; without
//! `redis-server` on `PATH` starting it is an error that says to install it, not a panic; it
//! runs the binary `RELOCK_REDIS_SERVER` names, and says so when that is not there.

use std::net::TcpStream;
use std::process::Command;

use relock::testing::{RedisServer, StartError};

#[tokio::test]
async fn serves_locks_and_is_gone_after_drop() {
    let server = RedisServer::start().expect("redis-server starts");
    let (port, pid) = (server.port(), server.pid().expect("it runs"));
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}"));

    let client = relock::Client::connect(&server.url()).await.unwrap();
    let lock = client.lock("testing-server:lock");
    let guard = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    client.shutdown().await.unwrap();

    drop(server); // kills the process and waits for it
    let refused = TcpStream::connect(("127.0.0.1", port)).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    if cfg!(target_os = "linux") {
        let proc = format!("/proc/{pid}");
        assert!(!std::path::Path::new(&proc).exists(), "{proc} still exists");
    }
}

/// A killed server refuses connections and has no pid; restarted, it is back on the same port,
/// as a new process, empty; raw commands reach it without relock.
#[test]
fn kill_restart_and_raw_commands() {
    let mut server = RedisServer::start().expect("redis-server starts");
    let (port, first) = (server.port(), server.pid().expect("it runs"));
    assert_eq!(server.command(&["SET", "k", "v"]).unwrap(), "+OK\r\n");
    assert_eq!(server.command(&["GET", "k"]).unwrap(), "$1\r\nv\r\n");
    let error = server.command(&["NOSUCHCOMMAND"]).unwrap();
    assert!(error.starts_with("-ERR unknown command"), "{error}");
    assert!(server.command(&["DEBUG", "SLEEP", "0"]).unwrap() == "+OK\r\n");

    server.kill();
    assert_eq!(server.pid(), None);
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(server.command(&["PING"]).is_err());

    server.restart().expect("restarts");
    let second = server.pid().expect("it runs again");
    assert_ne!(first, second);
    assert_eq!(server.port(), port);
    assert_eq!(server.command(&["EXISTS", "k"]).unwrap(), ":0\r\n");
    let keys = server.command(&["KEYS", "*"]).unwrap();
    assert_eq!(keys, "*0\r\n");
}

/// Runs the ignored test `name` of this module in a child process with `env` set, as the
/// environment is shared by every test thread of this process, and checks that it passed.
fn in_child(name: &str, env: &[(&str, &str)], unset: &[&str]) {
    let mut child = Command::new(std::env::current_exe().unwrap());
    let path = format!("{}::{name}", module_path!().split_once("::").unwrap().1);
    child.args([path.as_str(), "--exact", "--ignored", "--nocapture"]);
    child
        .env("RELOCK_TESTING_CHILD", "1")
        .envs(env.iter().copied());
    for name in unset {
        child.env_remove(name);
    }
    let out = child.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    assert!(stdout.contains("1 passed"), "child did not run: {stdout}");
}

/// In a child of [`in_child`], checks that starting a server fails with `NotInstalled`, and
/// returns the error's message.
fn not_installed_in_this_child() -> String {
    assert!(std::env::var_os("RELOCK_TESTING_CHILD").is_some());
    let error = RedisServer::start().unwrap_err();
    assert!(matches!(error, StartError::NotInstalled), "{error:?}");
    error.to_string()
}

/// [`not_installed_in_child`] with a `PATH` that has no `redis-server`.
#[test]
fn without_redis_server_start_says_to_install_it() {
    let env = [("PATH", "/nonexistent")];
    in_child("not_installed_in_child", &env, &["RELOCK_REDIS_SERVER"]);
}

/// [`program_missing_in_child`] with `RELOCK_REDIS_SERVER` naming a binary that is not there.
#[test]
fn a_missing_relock_redis_server_is_named() {
    let env = [("RELOCK_REDIS_SERVER", "/nonexistent/redis-server")];
    in_child("program_missing_in_child", &env, &[]);
}

#[test]
#[ignore = "run by a_missing_relock_redis_server_is_named with RELOCK_REDIS_SERVER set"]
fn program_missing_in_child() {
    let message = not_installed_in_this_child();
    assert_eq!(
        relock::testing::server_program(),
        "/nonexistent/redis-server"
    );
    assert!(
        message.contains("RELOCK_REDIS_SERVER names \"/nonexistent/redis-server\""),
        "{message}"
    );
}

/// The server the harness starts is the one `RELOCK_REDIS_SERVER` names (Debian's
/// `redis-server` without it): the version the binary states is the one the server reports.
#[test]
fn the_server_started_is_the_binary_named() {
    let found = relock::testing::server_version().expect("the server binary answers --version");
    let server = RedisServer::start().expect("redis-server starts");
    let info = server.command(&["INFO", "server"]).unwrap();
    let field = if found.is_valkey() {
        "valkey_version"
    } else {
        "redis_version"
    };
    let (major, minor, patch) = found.version;
    let line = format!("{field}:{major}.{minor}.{patch}\r\n");
    assert!(info.contains(&line), "{found} started, INFO says: {info}");
}

#[test]
#[ignore = "run by without_redis_server_start_says_to_install_it with PATH emptied"]
fn not_installed_in_child() {
    let message = not_installed_in_this_child();
    assert!(
        message.contains("redis-server is not installed"),
        "{message}"
    );
    assert!(
        message.contains("apt-get install redis-server"),
        "{message}"
    );
}
