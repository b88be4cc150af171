//! Error messages read as sentences: a Redis error names the server and says what happened in
//! words, never in `Debug` form, and a huge lock name is cut to a readable length.

use crate::common;

use std::error::Error as _;
use std::time::Duration;

use common::RedisServer;
use fred::interfaces::KeysInterface;
use relock::{Client, Config};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn an_unreachable_server_is_named_in_words() {
    let port = free_port();
    let config = Config::from_url(&format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .with_command_timeout(Duration::from_secs(1));
    let e = tokio::time::timeout(Duration::from_secs(20), Client::new(config))
        .await
        .expect("connecting to a closed port must fail, not hang")
        .unwrap_err();
    let message = e.to_string();
    eprintln!("{message}");
    assert!(e.is_redis(), "{e:?}");
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
    assert!(message.contains("connection refused"), "{message}");
    assert!(
        !message.contains("Os {") && !message.contains("kind:"),
        "{message}"
    );
    assert!(e.source().is_some(), "the fred error is kept as the source");
}

#[tokio::test]
async fn a_huge_name_on_a_key_of_another_type_gives_a_short_message() {
    let server = RedisServer::start();
    let client = common::client(&server, Duration::from_secs(30)).await;
    let name = format!("{}:{}", common::prefix("errors-huge"), "x".repeat(1 << 20));
    client
        .redis()
        .set::<(), _, _>(name.as_str(), "user-data", None, None, false)
        .await
        .unwrap();
    let e = client.lock(name.clone()).try_lock().await.unwrap_err();
    assert!(e.is_wrong_type(), "{e:?}");
    let message = e.to_string();
    assert!(message.len() < 300, "a {} byte message", message.len());
    assert!(
        message.contains(&format!("({} bytes)", name.len())),
        "{message}"
    );
    assert!(
        message.starts_with(&format!("key `{}", &name[..50])),
        "{message}"
    );
}

#[tokio::test]
async fn a_dead_server_is_named_when_a_command_fails() {
    let mut server = RedisServer::start();
    let port = server.port();
    let config = Config::from_url(&server.url())
        .unwrap()
        .with_command_timeout(Duration::from_secs(1));
    let client = Client::new(config).await.unwrap();
    server.kill();
    let e = client
        .lock(common::prefix("errors-dead"))
        .try_lock()
        .await
        .unwrap_err();
    let message = e.to_string();
    eprintln!("{message}");
    assert!(e.is_redis(), "{e:?}");
    assert!(
        message.contains(&format!("Redis at 127.0.0.1:{port}")),
        "{message}"
    );
    assert!(
        !message.contains("Os {") && !message.contains("kind:"),
        "{message}"
    );
}
