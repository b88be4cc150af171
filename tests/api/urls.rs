//! `Config::from_url` takes the schemes relock connects with and refuses every other one by
//! name, before any connection is tried.

use crate::common;

use common::RedisServer;
use std::time::Duration;

use relock::{Client, Config};

#[tokio::test]
async fn other_schemes_are_refused_by_name() {
    // A live server on the URL's port: a refused scheme must not fall back to plain TCP.
    let server = RedisServer::start();
    let port = server.port();
    for scheme in [
        "http",
        "https",
        "ftp",
        "tcp",
        "redis+unix",
        "valkey+unix",
        "redis-foo",
    ] {
        let url = format!("{scheme}://127.0.0.1:{port}");
        let e = Config::from_url(&url).unwrap_err();
        assert!(e.is_invalid_argument(), "{url}: {e:?}");
        assert!(e.to_string().contains(&format!("`{scheme}`")), "{url}: {e}");
        let e = Client::connect(&url).await.unwrap_err();
        assert!(e.is_invalid_argument(), "{url}: {e:?}");
    }
}

#[tokio::test]
async fn redis_schemes_are_accepted() {
    let server = RedisServer::start();
    let port = server.port();
    for scheme in ["redis", "REDIS", "valkey"] {
        let url = format!("{scheme}://127.0.0.1:{port}");
        let client = Client::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        client.shutdown().await.unwrap();
    }
    for url in [
        format!("redis-cluster://127.0.0.1:{port}"),
        format!("redis-sentinel://127.0.0.1:{port}/0?sentinelServiceName=mymaster"),
        format!("valkey-cluster://127.0.0.1:{port}"),
    ] {
        Config::from_url(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
    }
}

/// A password given in a URL appears in no error message and no `Debug` or `Display` of
/// relock's types: not for a URL fred cannot parse, a wrong password, a server that is not
/// there, nor in the `Debug` of a config or a client.
#[tokio::test]
async fn the_password_shows_nowhere() {
    const PW: &str = "Pw-s3cret-9f2c";
    const WRONG: &str = "Wr0ng-pw-71ad";
    let server = RedisServer::start_with(&["--requirepass", PW]);
    let port = server.port();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let hidden = |what: &str, shown: String| {
        assert!(
            !shown.contains(PW) && !shown.contains(WRONG),
            "{what} shows the password: {shown}"
        );
    };
    let error = |what: &str, e: &relock::Error| {
        hidden(what, e.to_string());
        hidden(what, format!("{e:?}"));
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            hidden(what, s.to_string());
            source = s.source();
        }
    };

    // URLs that do not parse, of every kind, with and without a user name.
    for url in [
        format!("redis://someone:{PW}@127.0.0.1:notaport"),
        format!("redis://:{PW}@127.0.0.1:notaport"),
        format!("rediss://:{PW}@127.0.0.1:notaport/0"),
        format!("redis-cluster://someone:{PW}@127.0.0.1:notaport"),
        format!("redis-cluster://:{PW}@127.0.0.1:7000?node=127.0.0.1:notaport"),
        format!("redis-sentinel://:{PW}@127.0.0.1:notaport/0?sentinelServiceName=m"),
        format!("redis-sentinel://someone:{PW}@127.0.0.1:26379/0"),
        format!("redis-sentinel://127.0.0.1:26379/x/y?sentinelServiceName=m&sentinelPassword={PW}"),
        format!("redis://:{PW}@127.0.0.1:6379/not-a-db"),
        format!("someone:{PW}@127.0.0.1:6379"),
    ] {
        let e = Config::from_url(&url).unwrap_err();
        assert!(e.is_invalid_argument(), "{url}: {e:?}");
        error(&url, &e);
        let e = Client::connect(&url).await.unwrap_err();
        error(&url, &e);
    }

    // Configs that parse: their `Debug` shows the server and the user, not the password.
    for url in [
        format!("redis://someone:{PW}@127.0.0.1:{port}/2"),
        format!("redis://:{PW}@127.0.0.1:{port}"),
        format!("rediss://:{PW}@127.0.0.1:{port}"),
        format!("redis-cluster://someone:{PW}@127.0.0.1:7000?node=127.0.0.1:7001"),
        format!(
            "redis-sentinel://:{PW}@127.0.0.1:26379/0?sentinelServiceName=m&sentinelPassword={PW}"
        ),
    ] {
        let config = Config::from_url(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
        let shown = format!("{config:?}");
        hidden(&url, shown.clone());
        assert!(shown.contains("127.0.0.1"), "{shown}");
    }

    // A wrong password, for the default user and for a named one; a server that is not there.
    for url in [
        format!("redis://:{WRONG}@127.0.0.1:{port}"),
        format!("redis://default:{WRONG}@127.0.0.1:{port}"),
        format!("redis://someone:{PW}@127.0.0.1:{port}"),
        format!("redis://:{PW}@127.0.0.1:{closed}"),
        format!("redis://someone:{PW}@127.0.0.1:{closed}"),
    ] {
        let config = Config::from_url(&url)
            .unwrap()
            .with_command_timeout(Duration::from_secs(1));
        hidden(&url, format!("{config:?}"));
        let e = tokio::time::timeout(Duration::from_secs(20), Client::new(config))
            .await
            .unwrap_or_else(|_| panic!("{url}: connecting must fail, not hang"))
            .unwrap_err();
        assert!(e.is_redis(), "{url}: {e:?}");
        error(&url, &e);
    }

    // The right password connects; the client's `Debug` does not show it either.
    let client = Client::connect(&format!("redis://:{PW}@127.0.0.1:{port}"))
        .await
        .unwrap();
    hidden("client", format!("{client:?}"));
    let e = client.lock("").try_lock().await.unwrap_err();
    error("an error of a connected client", &e);
    client.shutdown().await.unwrap();
}
