//! Worker processes: the bench binary re-executes itself as `<exe> --worker <args…>`.
//!
//! The parent talks to a worker by lines on its stdin and reads lines from its stdout. A worker
//! exits on its own when its stdin closes (the parent is gone) or its lifetime runs out, so a
//! killed bench never leaves workers behind.

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The longest any worker lives, whatever happens to its parent.
const LIFETIME: Duration = Duration::from_secs(300);

/// The arguments after `--worker` when this process is a worker.
pub fn args() -> Option<Vec<String>> {
    let mut args = std::env::args().skip_while(|a| a != "--worker");
    args.next()?;
    Some(args.collect())
}

/// In a worker: the lines the parent sends. Exits the process when stdin closes or the
/// lifetime runs out.
pub fn parent_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            match line {
                Ok(line) => {
                    let _ = tx.send(line);
                }
                Err(_) => break,
            }
        }
        std::process::exit(3); // the parent closed our stdin: it is gone
    });
    std::thread::spawn(|| {
        std::thread::sleep(LIFETIME);
        std::process::exit(4);
    });
    rx
}

/// A running worker, seen from the parent.
pub struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    /// Starts this executable as `--worker <args…>`.
    pub fn spawn(args: &[String]) -> Worker {
        let mut child = Command::new(std::env::current_exe().expect("current exe"))
            .arg("--worker")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a worker process");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        Worker {
            child,
            stdin,
            stdout,
        }
    }

    /// The next line the worker prints; panics when it exits instead.
    pub fn line(&mut self) -> String {
        match self.stdout.next() {
            Some(Ok(line)) => line,
            other => panic!("worker stopped early: {other:?}"),
        }
    }

    /// Reads lines until one equals `want`.
    pub fn expect(&mut self, want: &str) {
        while self.line() != want {}
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write to worker");
    }

    /// Every remaining line until the worker exits, which it must do with success.
    pub fn finish(mut self) -> Vec<String> {
        let lines: Vec<String> = self.stdout.by_ref().map_while(Result::ok).collect();
        drop(self.stdin.take());
        let status = self.child.wait().expect("wait for worker");
        assert!(status.success(), "worker failed: {status}");
        lines
    }

    /// SIGKILLs the worker now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}
