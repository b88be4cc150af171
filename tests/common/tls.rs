//! A throwaway CA and a `redis-server` that listens on a TLS port only, for the TLS tests.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

/// A CA, and a server certificate it signed for `127.0.0.1` and `localhost`, as PEM.
pub struct Certs {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

pub fn certs() -> Certs {
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
pub struct TlsServer {
    pub port: u16,
    child: Child,
    dir: PathBuf,
    pub certs: Certs,
}

impl TlsServer {
    pub fn start() -> TlsServer {
        let certs = certs();
        let dir = std::env::temp_dir().join(format!(
            "relock-tls-{}-{}",
            std::process::id(),
            super::prefix("tls").replace(':', "-")
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
