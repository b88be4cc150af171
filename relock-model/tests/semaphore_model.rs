//! The permit semaphore's model: no violation on relock's scripts at a small bound, and each
//! scratch mutant of a script (passed in as text, never written anywhere) caught by the
//! property that should catch it.

use std::time::Duration;

use relock_model::model::semaphore::{run, Limits, Outcome, Scripts, SemaphoreModel, Setup};
use relock_model::model::Bound;

/// Two clients, one permit, short leases, no faults (cancellations, renewals and late replies
/// stay in): small enough for a debug build. `relock-model check` runs the bigger bound.
fn small() -> Setup {
    Setup {
        lease: 6,
        poll: 4,
        horizon: 8,
        faults: 0,
        ..Setup::at(Bound::Ci)
    }
}

fn check(setup: Setup, scripts: Scripts, stop_at_violation: bool) -> Outcome {
    let limits = Limits {
        states: 2_000_000,
        depth: 40,
        stop_at_violation,
        timeout: Duration::from_secs(300),
    };
    run(SemaphoreModel { setup, scripts }, limits)
}

/// `text` with `from` replaced by `to`, which must occur exactly once.
fn mutated(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "`{from}` once in the script");
    text.replace(from, to)
}

/// Checks `scripts` and asserts that `property` found a counterexample.
fn caught(scripts: Scripts, property: &str) {
    let outcome = check(small(), scripts, true);
    let found = outcome.findings.iter().find(|f| f.property == property);
    let found =
        found.unwrap_or_else(|| panic!("`{property}` not violated: {:?}", outcome.findings));
    eprintln!(
        "caught by `{}` in {} steps, {:.1} s ({} states)",
        found.property, found.steps, outcome.report.seconds, outcome.report.states
    );
    assert!(found.steps > 0);
}

#[test]
fn relocks_scripts_keep_every_property() {
    let outcome = check(small(), Scripts::default(), false);
    eprintln!("{}", outcome.report.json());
    // Without faults no release is retried: that `sometimes` is the only one left unmet.
    let unmet: Vec<_> = outcome
        .findings
        .iter()
        .map(|f| (f.property, f.steps))
        .collect();
    let retried = "a release retried after a lost reply is answered";
    assert_eq!(unmet, [(retried, 0)]);
    assert!(outcome.report.states > 10_000);
}

#[test]
fn a_release_without_its_publish_strands_a_waiter() {
    let real = Scripts::default();
    let release = mutated(
        &real.release,
        "redis.call(ARGV[2], KEYS[2], count)",
        "local _ = count",
    );
    caught(Scripts { release, ..real }, "no lost wake-up");
}

#[test]
fn a_reclaim_that_forgets_the_permit_loses_it() {
    let real = Scripts::default();
    let acquire = mutated(
        &real.acquire,
        "redis.call('incrby', counter, #ended)",
        "redis.call('incrby', counter, 0)",
    );
    caught(
        Scripts { acquire, ..real },
        "permits conserved: available + out == N",
    );
}

#[test]
fn an_acquire_that_does_not_check_the_count_lets_two_in() {
    let real = Scripts::default();
    let acquire = mutated(&real.acquire, "if available < 1 then", "if false then");
    caught(
        Scripts { acquire, ..real },
        "at most N permits out at a time",
    );
}

/// A renewal delayed on its way past the holder's deadline meets a lease that has ended:
/// `PERMIT_RENEW` must not extend it (README: "a renewal only ever extends a lock its holder
/// still has"). A script that renews whatever it finds is caught.
#[test]
fn a_renewal_that_extends_an_ended_lease_is_caught() {
    let real = Scripts::default();
    let renew = mutated(
        &real.renew,
        "if type(score) == 'string' and tonumber(score) > now then",
        "if type(score) == 'string' then",
    );
    caught(
        Scripts { renew, ..real },
        "a renewal only extends a lease that has not ended",
    );
}
