//! The conformance mirror itself, in front of a real `redis-server`: it passes replies through,
//! agrees where the simulated server answers as Redis does, and reports where it does not.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

use relock::testing::{command, RedisServer};

/// A mirror process in front of `server`, reporting to a file of its own.
struct Mirror {
    port: u16,
    child: Child,
    report: std::path::PathBuf,
}

impl Mirror {
    fn start(server: &RedisServer) -> Mirror {
        let report = std::env::temp_dir().join(format!("relock-mirror-test-{}.txt", server.port()));
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

    fn cmd(&self, args: &[&str]) -> String {
        command(self.port, args).expect("a reply through the mirror")
    }

    fn report(&self) -> String {
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

#[test]
fn relocks_scripts_agree_and_a_command_the_simulation_lacks_is_reported() {
    let server = RedisServer::start().expect("redis-server");
    let mirror = Mirror::start(&server);
    let acquire = relock::testing::scripts::LOCK_ACQUIRE;
    let field = "11111111-2222-3333-4444-555555555555:1";
    let args = [
        "EVAL",
        acquire,
        "2",
        "m",
        "relock_claim:{m}",
        "10000",
        field,
        "0",
        "500",
    ];
    assert_eq!(mirror.cmd(&args), "$-1\r\n");
    assert_eq!(mirror.cmd(&["HGET", "m", field]), "$1\r\n1\r\n");
    // The real server has the hold: the mirror passed the script through.
    assert_eq!(
        server.command(&["HGET", "m", field]).unwrap(),
        "$1\r\n1\r\n"
    );
    assert_eq!(mirror.report(), "", "relock's acquire agrees");

    // APPEND is no command of the simulated server: the real one answers, the mirror reports.
    assert_eq!(mirror.cmd(&["APPEND", "s", "abc"]), ":3\r\n");
    let report = mirror.report();
    assert!(report.contains("\"APPEND\" \"s\" \"abc\""), "{report}");
    assert!(
        report.contains("sim reply:  -ERR unknown command 'append'"),
        "{report}"
    );
    assert!(
        report.contains("key \"s\":\n  real: string \"abc\""),
        "{report}"
    );
}
