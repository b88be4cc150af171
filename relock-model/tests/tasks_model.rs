//! The model of several tasks per process: relock's client passes at a small bound, and
//! mutants of its local rules (the waiter queue, the hand-off grace, the release-reply wait)
//! are caught. `cargo test -p relock-model --release --test tasks_model -- --ignored
//! --nocapture mutation_table` prints the mutation table.

use std::time::Instant;

use relock_model::model::tasks::properties::{HANDOFF, WAKE_UP};
use relock_model::model::tasks::{Mutation, Outcome, TasksModel};
use relock_model::model::Bound;

/// A bound small enough for a test: one cancel, no faults.
fn small() -> TasksModel {
    let mut model = TasksModel::new(Bound::Ci);
    model.max_faults = 0;
    model
}

/// The CI bound with `mutation`, stopped at its first counterexample.
fn mutant(mutation: Mutation) -> Outcome {
    let mut model = TasksModel::new(Bound::Ci);
    (model.mutation, model.stop_early) = (mutation, true);
    model.run(2)
}

fn caught(outcome: &Outcome, property: &str) -> bool {
    outcome.violated.iter().any(|(p, _)| *p == property)
}

#[test]
fn relock_s_client_passes() {
    let outcome = small().run(2);
    assert_eq!(outcome.violated, Vec::<(&str, usize)>::new());
    assert_eq!(outcome.unmet, Vec::<&str>::new());
    assert!(outcome.report.states > 1_000, "{outcome:?}");
}

/// Found by this model in relock's client, and fixed: a task calling `lock()` between its
/// process's release and the release's reply tried at once (no waiters, no grace yet) and took
/// the lock back from the other processes' woken waiters. `tests/types/fairness.rs` shows it on
/// a real server.
#[test]
fn a_newcomer_that_does_not_wait_for_its_process_s_release_reply_is_caught() {
    let outcome = mutant(Mutation::NewcomerBeforeReply);
    assert!(caught(&outcome, HANDOFF), "{outcome:?}");
}

#[test]
fn a_waiter_that_leaves_without_passing_its_wake_up_on_is_caught() {
    let outcome = mutant(Mutation::NoPassOn);
    assert!(caught(&outcome, WAKE_UP), "{outcome:?}");
}

#[test]
fn a_woken_waiter_that_does_not_wait_for_the_release_reply_is_caught() {
    let outcome = mutant(Mutation::NoReplyWait);
    assert!(caught(&outcome, HANDOFF), "{outcome:?}");
}

/// Found by this model in a reordering of the hand-off loop (never released): after waiting out
/// a grace the loop tried without asking whether another task of the process had released the
/// lock meanwhile.
#[test]
fn a_hand_off_loop_that_does_not_go_round_after_a_grace_is_caught() {
    let outcome = mutant(Mutation::SingleRound);
    assert!(caught(&outcome, HANDOFF), "{outcome:?}");
}

/// Every mutant at the `Ci` bound, as a table: mutant, the properties that caught it, the
/// counterexample's steps, states, seconds.
#[test]
#[ignore = "the Ci bound: run in --release"]
fn mutation_table() {
    let mutants = [
        (
            "waiter leaves without passing its wake-up on",
            Mutation::NoPassOn,
        ),
        (
            "woken waiter skips the release-reply wait",
            Mutation::NoReplyWait,
        ),
        ("newcomer tries at once", Mutation::NewcomerBarges),
        ("no hand-off grace", Mutation::NoGrace),
        (
            "newcomer before the release reply (old client)",
            Mutation::NewcomerBeforeReply,
        ),
        (
            "hand-off loop ends after a grace wait",
            Mutation::SingleRound,
        ),
    ];
    let mut missed = Vec::new();
    for (name, mutation) in mutants {
        let started = Instant::now();
        let outcome = mutant(mutation);
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "| {name} | {:?} | {} states | {seconds:.1} s |",
            outcome.violated, outcome.report.states
        );
        if outcome.violated.is_empty() {
            missed.push(name);
        }
    }
    assert!(missed.is_empty(), "not caught: {missed:?}");
}
