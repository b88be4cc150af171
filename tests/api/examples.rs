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

#[test]
fn the_election_example_answers_help() {
    answers_help("election", "testing", &["--members", "many"]);
    answers_help("election", "testing", &["--member"]);
}

/// The election example against a server of the test's: the leader it kills is followed by
/// another member with a higher epoch, and the killed leader's late write is refused.
#[test]
fn in_the_election_example_a_follower_takes_over_from_the_killed_leader() {
    let server = common::RedisServer::start();
    let stdout = common::run_example("election", "testing", &server);
    // "member 2 took over with epoch 2 (the killed leader's was 1), 1863 ms after the kill"
    let took = stdout
        .lines()
        .find(|line| line.contains(" took over with epoch "))
        .unwrap_or_else(|| panic!("no takeover in:\n{stdout}"));
    let number_after = |marker: &str| -> u64 {
        let rest = &took[took.find(marker).unwrap() + marker.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap_or_else(|_| panic!("{took}"))
    };
    let (new, old) = (
        number_after("took over with epoch "),
        number_after("killed leader's was "),
    );
    assert!(new > old, "{took}");
    assert!(
        stdout.contains(&format!("epoch {old} is refused")),
        "{stdout}"
    );
    assert!(stdout.contains("the counter only went forward"), "{stdout}");
    // The members stopped their loops: the last term was given back, nobody leads.
    let name = stdout
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("no election name in:\n{stdout}"));
    assert!(name.starts_with("example:election:"), "{stdout}");
    assert!(
        !common::raw_exists(&server, &format!("relock_election:{name}")),
        "{stdout}"
    );
}
