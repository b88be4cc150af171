//! The conformance mirror as the tests run it: a `relock-model mirror` process in front of a
//! real `redis-server`, reporting to a file of its own.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

use relock::testing::{command, RedisServer};

/// A mirror process in front of `server`, reporting to a file of its own.
pub struct Mirror {
    port: u16,
    child: Child,
    report: std::path::PathBuf,
}

impl Mirror {
    /// Starts one in front of `server`; `test` names its report file.
    pub fn start(server: &RedisServer, test: &str) -> Mirror {
        let report =
            std::env::temp_dir().join(format!("relock-mirror-{test}-{}.txt", server.port()));
        let _ = std::fs::remove_file(&report);
        let mut child = Command::new(env!("CARGO_BIN_EXE_relock-model"))
            .args(["mirror", "--real", &server.port().to_string(), "--report"])
            .arg(&report)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the mirror");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Mirror {
            port: line.trim().parse().expect("the mirror's port"),
            child,
            report,
        }
    }

    /// One command, on a connection of its own.
    pub fn cmd(&self, args: &[&str]) -> String {
        command(self.port, args).expect("a reply through the mirror")
    }

    /// What it reported so far (empty: every reply and key agreed).
    pub fn report(&self) -> String {
        std::fs::read_to_string(&self.report).unwrap_or_default()
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.report);
    }
}
