//! Child processes: a test that needs a holder in a process of its own (to kill it, stop it, or
//! run many side by side) runs an `#[ignore]`d test of its own binary as a child. The parent passes
//! settings in the environment; the child reports on its stdout, a line at a time.

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

/// Set in every child's environment: an `#[ignore]`d child test run without it (by `--ignored`)
/// does nothing.
const CHILD: &str = "RELOCK_TEST_CHILD";

/// Runs the `#[ignore]`d test `path` of this test binary as a child process with `env` set, stdout
/// piped, killed when dropped. `path` is the test function's full path,
/// `concat!(module_path!(), "::name")`; the runner's crate name in front is dropped, as the test
/// harness names tests without it.
pub fn spawn_child_test(path: &str, env: &[(&str, String)]) -> tokio::process::Child {
    let name = path.split_once("::").map_or(path, |(_, name)| name);
    tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", name, "--nocapture"])
        .env(CHILD, "1")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the child process")
}

/// The settings this process was started with as a child, or `None` when it was not started as
/// one (its test then does nothing).
pub fn env() -> Option<Settings> {
    std::env::var_os(CHILD).map(|_| Settings(()))
}

/// A child's settings, read by name from its environment; a missing or malformed one panics
/// with its name.
pub struct Settings(());

impl Settings {
    /// Setting `key` as it was given.
    pub fn text(&self, key: &str) -> String {
        std::env::var(key).unwrap_or_else(|_| panic!("the child's setting {key} is missing"))
    }

    /// Setting `key`, parsed.
    pub fn number<T: FromStr>(&self, key: &str) -> T {
        let text = self.text(key);
        text.parse()
            .unwrap_or_else(|_| panic!("the child's setting {key} is not a number: {text:?}"))
    }

    /// Setting `key`, a number of milliseconds.
    pub fn millis(&self, key: &str) -> Duration {
        Duration::from_millis(self.number(key))
    }

    /// Setting `key`, a number of milliseconds, if it was given.
    pub fn optional_millis(&self, key: &str) -> Option<Duration> {
        std::env::var_os(key).map(|_| self.millis(key))
    }
}

/// Writes `line` on stdout at once: the parent reads it while this child runs on.
pub fn say(line: impl std::fmt::Display) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// What follows `marker` in each of `lines` that holds it, trimmed.
pub fn reports(lines: &[String], marker: &str) -> Vec<String> {
    lines
        .iter()
        .filter_map(|line| line.find(marker).map(|at| line[at + marker.len()..].trim()))
        .map(str::to_owned)
        .collect()
}

/// A running child process, its stdout lines gathered as they come.
pub struct Child {
    process: tokio::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Child {
    /// Runs child test `path` with `env` (see [`spawn_child_test`]).
    pub fn spawn(path: &str, env: &[(&str, String)]) -> Child {
        let mut process = spawn_child_test(path, env);
        let stdout = process.stdout.take().expect("the child's stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let reader = tokio::spawn({
            let lines = lines.clone();
            async move {
                let mut stdout = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = stdout.next_line().await {
                    lines.lock().unwrap().push(line);
                }
            }
        });
        Child {
            process,
            lines,
            reader,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.process.id().expect("the child runs")
    }

    /// Its lines so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// What follows `marker` in its first line that holds it, trimmed, if it said it yet.
    pub fn find(&self, marker: &str) -> Option<String> {
        let lines = self.lines.lock().unwrap();
        lines.iter().find_map(|line| {
            line.find(marker)
                .map(|at| line[at + marker.len()..].trim().to_owned())
        })
    }

    /// What follows `marker` in each of its lines so far that holds it, trimmed.
    pub fn reports(&self, marker: &str) -> Vec<String> {
        reports(&self.lines(), marker)
    }

    /// How many of its lines so far hold `marker`.
    pub fn count(&self, marker: &str) -> usize {
        let lines = self.lines.lock().unwrap();
        lines.iter().filter(|line| line.contains(marker)).count()
    }

    /// What follows `marker` in its first line that holds it, waiting at most `within` for it.
    pub async fn said(&self, marker: &str, within: Duration) -> String {
        let said = super::eventually(within, || async { self.find(marker).is_some() }).await;
        assert!(
            said,
            "the child did not say {marker:?} within {within:?}: {:?}",
            self.lines()
        );
        self.find(marker).unwrap()
    }

    /// Waits at most `within` for it to exit, checks that it passed, and returns all it said.
    pub async fn finish(mut self, within: Duration) -> Vec<String> {
        let status = tokio::time::timeout(within, self.process.wait())
            .await
            .unwrap_or_else(|_| panic!("a child hung: {:?}", self.lines()))
            .unwrap();
        let _ = (&mut self.reader).await;
        let lines = self.lines();
        assert!(status.success(), "a child failed: {status}, {lines:?}");
        lines
    }

    /// SIGKILLs it and reaps it.
    pub async fn kill(&mut self) {
        self.process.kill().await.expect("kill the child process");
    }
}
