//! A server relock cannot run on is refused with one typed error naming the server, what was
//! found and what relock needs: script commands renamed away, and Valkey 9 with its Lua engine
//! unloaded, before connect and after.

use crate::common;

use std::time::Duration;

use common::RedisServer;
use relock::{Client, Config, Error};

async fn connect(server: &RedisServer) -> relock::Result<Client> {
    let config = Config::from_url(&server.url())
        .unwrap()
        .with_command_timeout(Duration::from_secs(2));
    Client::new(config).await
}

/// The `Unsupported` error's fields, or a panic saying what came instead.
fn unsupported(result: relock::Result<Client>) -> (String, String, String) {
    match result {
        Err(Error::Unsupported {
            server,
            found,
            needs,
        }) => (server, found, needs),
        Err(other) => panic!("expected Unsupported, got {other:?}"),
        Ok(_) => panic!("expected Unsupported, but the client connected"),
    }
}

#[tokio::test]
async fn script_commands_renamed_away_are_refused_at_connect() {
    for (command, renamed) in [("EVALSHA", ""), ("SCRIPT", "hidden-script")] {
        let server = RedisServer::start_with(&["--rename-command", command, renamed]);
        let error = connect(&server).await.map(|_| ()).unwrap_err();
        let message = error.to_string();
        assert!(error.is_unsupported(), "{error:?}");
        let (at, found, needs) = unsupported(connect(&server).await);
        assert_eq!(at, format!("127.0.0.1:{}", server.port()));
        assert!(
            found.contains(&format!("without the {command} command")),
            "{found}"
        );
        assert!(needs.contains("EVALSHA and SCRIPT LOAD"), "{needs}");
        assert!(
            message.contains(&at) && message.contains(&found),
            "{message}"
        );
        // Nothing was written, nothing loaded.
        assert_eq!(server.cmd(&["DBSIZE"]), ":0\r\n");
    }
}

/// Valkey 9 loads Lua as a module an operator can unload: a client connected before fails its
/// next call with `Unsupported` (not a `NOSCRIPT` loop), and a new client is refused at connect.
/// Other servers have no such module: there the test checks that `MODULE UNLOAD lua` is refused
/// and locks still work.
#[tokio::test]
async fn valkey_without_its_lua_engine_is_refused() {
    let found = relock::testing::server_version().expect("the server binary answers --version");
    let valkey9 = found.is_valkey() && found.at_least(9, 0);
    // `MODULE` from loopback connections is an option from 7.0 (a fatal one before).
    let server = if found.at_least(7, 0) {
        RedisServer::start_with(&["--enable-module-command", "local"])
    } else {
        RedisServer::start()
    };
    let client = connect(&server).await.expect("connect");
    let name = common::prefix("unsupported-engine");
    let lock = client.lock(&name);
    lock.lock().await.unwrap().unlock().await.unwrap();

    let unloaded = server.cmd(&["MODULE", "UNLOAD", "lua"]);
    if !valkey9 {
        assert!(unloaded.starts_with('-'), "{unloaded}");
        lock.lock().await.unwrap().unlock().await.unwrap();
        eprintln!("not Valkey 9: its Lua engine cannot be unloaded here");
        return;
    }
    assert_eq!(unloaded, "+OK\r\n");
    let error = lock.lock().await.map(|_| ()).unwrap_err();
    let message = error.to_string();
    assert!(error.is_unsupported(), "{error:?}");
    assert!(
        message.contains("Could not find scripting engine"),
        "{message}"
    );
    assert!(!common::raw_exists(&server, &name), "nothing was taken");

    let (at, found, _) = unsupported(connect(&server).await);
    assert_eq!(at, format!("127.0.0.1:{}", server.port()));
    assert!(found.starts_with("Valkey 9."), "{found}");
    assert!(
        found.ends_with("with no scripting engine loaded"),
        "{found}"
    );
    client.shutdown().await.ok();
}
