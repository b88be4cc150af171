//! TLS for real: `rediss://` speaks TLS or fails, never plaintext, and a private CA can be
//! trusted with `Config::with_tls_root_certificates`. Each test makes a throwaway CA and server
//! certificate and starts a `redis-server` that listens on a TLS port only.

#![cfg(feature = "tls")]

use crate::common;

use std::time::Duration;

use common::tls::TlsServer;
use fred::interfaces::HashesInterface;
use relock::{Client, Config};

fn config(url: &str) -> Config {
    Config::from_url(url)
        .unwrap()
        .with_command_timeout(Duration::from_secs(2))
}

/// Fails the test instead of hanging on a connection that should end one way or the other.
async fn connect(config: Config) -> relock::Result<Client> {
    common::connect::ends_within(Duration::from_secs(20), config).await
}

#[tokio::test]
async fn a_lock_is_taken_and_released_over_tls() {
    let server = TlsServer::start();
    let url = format!("rediss://127.0.0.1:{}", server.port);
    let client = connect(
        config(&url)
            .with_tls_root_certificates(&server.certs.ca)
            .unwrap(),
    )
    .await
    .expect("connect over TLS");
    let name = common::prefix("tls-lock");
    let lock = client.lock(name.clone());
    let guard = lock.lock().await.unwrap();
    // The server has no plaintext port: whatever answers here answered over TLS.
    let hash: Vec<(String, String)> = client.redis().hgetall(name.as_str()).await.unwrap();
    assert_eq!(hash.len(), 1, "{hash:?}");
    assert!(hash[0].0.starts_with(client.id()), "{hash:?}");
    assert_eq!(hash[0].1, "1");
    guard.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    client.shutdown().await.unwrap();
}

/// Connects to a [`TlsServer`] of its own through a `scheme://` URL, trusting only the default
/// roots, and returns the error's message, checked to be a Redis error's.
async fn refused_by_a_tls_server(scheme: &str) -> String {
    let server = TlsServer::start();
    let e = connect(config(&format!("{scheme}://127.0.0.1:{}", server.port)))
        .await
        .unwrap_err();
    eprintln!("{e}");
    assert!(e.is_redis(), "{e:?}");
    e.to_string()
}

#[tokio::test]
async fn plaintext_to_the_tls_port_fails() {
    refused_by_a_tls_server("redis").await;
}

#[tokio::test]
async fn the_default_roots_do_not_trust_a_private_ca() {
    let message = refused_by_a_tls_server("rediss").await;
    assert!(message.contains("certificate"), "{message}");
}

#[tokio::test]
async fn rediss_never_falls_back_to_plaintext() {
    let server = common::RedisServer::start();
    let url = format!("rediss://127.0.0.1:{}", server.port());
    let outcome = connect(config(&url)).await;
    assert!(
        outcome.is_err(),
        "rediss:// connected to a plaintext server"
    );
}

/// `rediss://` against a plaintext server: the handshake gets no answer, and the error says
/// so and asks whether the server is plaintext, not only that Redis did not answer in time.
#[tokio::test]
async fn rediss_to_a_plaintext_server_asks_whether_it_is_plaintext() {
    let server = common::RedisServer::start();
    let url = format!("rediss://127.0.0.1:{}", server.port());
    let e = connect(config(&url)).await.unwrap_err();
    let message = e.to_string();
    eprintln!("{message}");
    assert!(e.is_redis(), "{e:?}");
    assert!(message.contains("TLS handshake got no answer"), "{message}");
    assert!(message.contains("plaintext"), "{message}");
    assert!(message.contains("`redis://`"), "{message}");
    assert!(
        message.contains(&format!("127.0.0.1:{}", server.port())),
        "{message}"
    );
}

#[tokio::test]
async fn bad_root_certificates_are_invalid_argument() {
    for pem in [
        "",
        "not a certificate",
        "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n",
    ] {
        let e = config("rediss://127.0.0.1:6380")
            .with_tls_root_certificates(pem)
            .unwrap_err();
        assert!(e.is_invalid_argument(), "{pem:?}: {e:?}");
    }
}
