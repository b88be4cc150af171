//! TLS for real: `rediss://` speaks TLS or fails, never plaintext, and a private CA can be
//! trusted with `Config::with_tls_root_certificates`. Each test makes a throwaway CA and server
//! certificate and starts a `redis-server` that listens on a TLS port only.

#![cfg(feature = "tls")]

use crate::common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fred::interfaces::HashesInterface;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use relock::{Client, Config};

/// A CA, and a server certificate it signed for `127.0.0.1` and `localhost`, as PEM.
struct Certs {
    ca: String,
    cert: String,
    key: String,
}

fn certs() -> Certs {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let params = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    Certs {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

/// A `redis-server` with TLS on `port` and no plaintext port, killed when dropped.
struct TlsServer {
    port: u16,
    child: Child,
    dir: PathBuf,
    certs: Certs,
}

impl TlsServer {
    fn start() -> TlsServer {
        let certs = certs();
        let dir = std::env::temp_dir().join(format!(
            "relock-tls-{}-{}",
            std::process::id(),
            common::prefix("tls").replace(':', "-")
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for (file, pem) in [
            ("ca.crt", &certs.ca),
            ("server.crt", &certs.cert),
            ("server.key", &certs.key),
        ] {
            std::fs::write(dir.join(file), pem).unwrap();
        }
        for _ in 0..20 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new("redis-server")
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(dir.join("server.crt"))
                .arg("--tls-key-file")
                .arg(dir.join("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(dir.join("ca.crt"))
                .args(["--tls-auth-clients", "no", "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server");
            // Listening is enough to know it is up: a TLS handshake is the tests' own business.
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // exited: most likely the port was taken meanwhile
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return TlsServer {
                        port,
                        child,
                        dir,
                        certs,
                    };
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("could not start redis-server with TLS");
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn config(url: &str) -> Config {
    Config::from_url(url)
        .unwrap()
        .with_command_timeout(Duration::from_secs(2))
}

/// Fails the test instead of hanging on a connection that should end one way or the other.
async fn connect(config: Config) -> relock::Result<Client> {
    tokio::time::timeout(Duration::from_secs(20), Client::new(config))
        .await
        .expect("connecting must end, not hang")
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

#[tokio::test]
async fn plaintext_to_the_tls_port_fails() {
    let server = TlsServer::start();
    let e = connect(config(&format!("redis://127.0.0.1:{}", server.port)))
        .await
        .unwrap_err();
    eprintln!("{e}");
    assert!(e.is_redis(), "{e:?}");
}

#[tokio::test]
async fn the_default_roots_do_not_trust_a_private_ca() {
    let server = TlsServer::start();
    let e = connect(config(&format!("rediss://127.0.0.1:{}", server.port)))
        .await
        .unwrap_err();
    let message = e.to_string();
    eprintln!("{message}");
    assert!(e.is_redis(), "{e:?}");
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
