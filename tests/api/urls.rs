//! `Config::from_url` takes the schemes relock connects with and refuses every other one by
//! name, before any connection is tried.

use crate::common;

use common::RedisServer;
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
