//! The examples that take options answer `--help` with their usage (exit 0), and an option they
//! cannot read with it on stderr (exit 2), before they start anything.

use crate::common;

use std::process::Command;

/// Runs example `name` (built with `feature`) with `--help` and with a bad option.
fn answers_help(name: &str, feature: &str, bad: &[&str]) {
    let exe = common::example(name, feature);
    let help = Command::new(&exe).arg("--help").output().unwrap();
    let stdout = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "{name} --help: {help:?}");
    assert!(stdout.starts_with(&format!("usage: {name}")), "{stdout}");
    assert!(stdout.contains("REDIS_URL"), "{stdout}");

    let wrong = Command::new(&exe).args(bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert_eq!(wrong.status.code(), Some(2), "{name} {bad:?}: {wrong:?}");
    assert!(stderr.contains(&format!("usage: {name}")), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[cfg(feature = "metrics")]
#[test]
fn the_metrics_example_answers_help() {
    answers_help("metrics", "metrics", &["--tasks"]);
    answers_help("metrics", "metrics", &["--rounds", "many"]);
}

#[cfg(feature = "blocking")]
#[test]
fn the_blocking_example_answers_help() {
    answers_help("blocking", "blocking", &["--hold"]);
}

#[test]
fn the_demo_answers_help() {
    answers_help("demo", "testing", &["--fast"]);
}
