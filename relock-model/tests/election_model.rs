//! The election model: relock's own scripts keep every promise without failover (0 violations),
//! with history's newest entry deleted (C5), with seqs past history (C6), and across a failover
//! that only history can feel (C1); scratch mutants, the old behaviours and the known bugs of
//! wave5.md C that remain (C2) are found. Each mutant's script text is
//! changed here, in the test, never in `lua/`.

use std::time::Instant;

use relock_model::model::election::{properties, ElectionModel, Faults, Op};
use relock_model::model::Bound;

/// The fault-free configuration at a small bound: no lost message, reply or crash (those are in
/// `Bound::Ci`, which `relock-model check` runs), horizon 32 ms (a lease and a bit).
fn small() -> ElectionModel {
    let mut model = ElectionModel::new(Bound::Ci);
    model.max_faults = 0;
    model
}

/// Runs `model` to its first violation; the violated properties and each trace's length.
fn find(name: &str, mut model: ElectionModel) -> Vec<(&'static str, usize)> {
    model.stop_early = true;
    let started = Instant::now();
    let outcome = model.run();
    eprintln!(
        "{name}: {:?} in {:.1} s ({} states)",
        outcome.violated,
        started.elapsed().as_secs_f64(),
        outcome.report.states
    );
    outcome.violated
}

fn caught(found: &[(&'static str, usize)], property: &str) -> bool {
    found.iter().any(|(p, _)| *p == property)
}

/// `text` with `from` replaced by `to`, which must be there.
fn mutate(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "mutant: {from:?} not in the script");
    text.replace(from, to)
}

#[test]
fn real_scripts_hold_without_failover() {
    let outcome = small().run();
    eprintln!("{}", outcome.report.json());
    assert!(outcome.violated.is_empty(), "{:?}", outcome.violated);
    assert!(outcome.unmet.is_empty(), "{:?}", outcome.unmet);
}

#[test]
fn mutant_acquire_without_incr_breaks_epochs() {
    let mut model = small();
    model.scripts.acquire = mutate(
        &model.scripts.acquire,
        "epoch = redis.call('incr', KEYS[3])",
        "epoch = tonumber(redis.call('get', KEYS[3]) or '0')",
    );
    assert!(caught(&find("no incr", model), properties::EPOCHS));
}

#[test]
fn mutant_release_without_history_entry_is_caught() {
    let mut model = small();
    let text = mutate(
        &model.scripts.release,
        "history_add(6, seq, history_now(), KEYS[7], ARGV[2],",
        "local unwritten = {6, seq, history_now(), KEYS[7], ARGV[2],",
    );
    model.scripts.release = mutate(&text, "'reason', 'resigned')", "'reason', 'resigned'}");
    assert!(caught(
        &find("no resign entry", model),
        properties::RESIGN_RECORDED
    ));
}

#[test]
fn mutant_acquire_ignoring_the_leader_makes_two() {
    let mut model = small();
    model.scripts.acquire = mutate(
        &model.scripts.acquire,
        "if on_key(1, 'hlen') == 0 then",
        "if true then",
    );
    assert!(caught(
        &find("ignores leader", model),
        properties::ONE_LEADER
    ));
}

/// The fault-free configuration with one deletion of history's newest entry (`XDEL`) at any
/// moment.
fn delete_newest() -> ElectionModel {
    let mut model = small();
    model.max_faults = 1;
    model.faults = Faults {
        delete_newest: true,
        ..Faults::default()
    };
    model
}

/// Runs `model` in full: its violated properties and the `sometimes` ones never reached.
fn full(name: &str, model: ElectionModel) -> (Vec<(&'static str, usize)>, Vec<&'static str>) {
    let started = Instant::now();
    let outcome = model.run();
    eprintln!(
        "{name}: violated {:?}, unmet {:?} in {:.1} s ({} states)",
        outcome.violated,
        outcome.unmet,
        started.elapsed().as_secs_f64(),
        outcome.report.states
    );
    (outcome.violated, outcome.unmet)
}

/// wave5.md C5, fixed: with history's newest entry deleted (`XDEL`) at any moment, every later
/// change is still written (its seq follows the stream's last ID, not the newest entry left),
/// no script fails, and the watcher reports a gap where it lost an entry.
#[test]
fn c5_a_deleted_newest_entry_fails_no_change() {
    let (violated, unmet) = full("C5", delete_newest());
    assert!(violated.is_empty(), "{violated:?}");
    assert!(unmet.is_empty(), "{unmet:?}");
}

/// The old ID rule (the newest entry's seq + 1) is caught: after an `XDEL` of the newest entry,
/// `XADD` refuses the ID and the change's script fails.
#[test]
fn mutant_the_old_id_rule_fails_after_a_deleted_newest_entry() {
    let mut model = delete_newest();
    let old_rule = |text: &str| {
        mutate(
            text,
            "local next = history_next(i)",
            "local next = tostring((seq or 0) + 1)",
        )
    };
    model.scripts.acquire = old_rule(&model.scripts.acquire);
    model.scripts.release = old_rule(&model.scripts.release);
    model.scripts.proclaim = old_rule(&model.scripts.proclaim);
    model.scripts.observe = old_rule(&model.scripts.observe);
    assert!(caught(&find("old id rule", model), properties::NO_ERROR));
}

/// wave5.md C6, fixed: `watch_after(u64::MAX)` and `watch_after(2^60)`, seqs no history
/// reaches, give a gap and then every change; no read fails.
#[test]
fn c6_a_seq_past_history_gives_a_gap() {
    for seq in [u64::MAX, 1 << 60] {
        let mut model = small();
        model.watch_from = Some(seq);
        let (violated, unmet) = full("C6", model);
        assert!(violated.is_empty(), "{seq}: {violated:?}");
        assert!(unmet.is_empty(), "{seq}: {unmet:?}");
    }
}

/// A start ID counted in Lua (a double, printed `1.1529215046068e+18`) is caught: Redis
/// refuses the ID and every read of the watch fails.
#[test]
fn mutant_a_start_id_counted_in_lua_fails_the_watch() {
    let mut model = small();
    model.watch_from = Some(1 << 60);
    model.scripts.observe = mutate(
        &model.scripts.observe,
        "redis.call('xrange', KEYS[3], ARGV[2], '+', 'COUNT', ARGV[3])",
        "redis.call('xrange', KEYS[3], tonumber(string.match(ARGV[2], '^[0-9]+')) .. '-0', '+', \
         'COUNT', ARGV[3])",
    );
    assert!(caught(
        &find("start id in Lua", model),
        properties::NO_ERROR
    ));
}

/// A failover configuration where only history can go wrong: replica sync, a leader that
/// proclaims twice (so a proclaim lost by the failover is followed by another that takes its
/// seq) and a second candidate, within 20 ms (less than a lease: no term ends by its lease, so
/// C2's second leader cannot come).
fn failover_history() -> ElectionModel {
    let mut model = ElectionModel::failover(Bound::Ci, true);
    model.plans = vec![
        vec![Op::Campaign, Op::Proclaim, Op::Proclaim],
        vec![Op::Campaign],
    ];
    model.horizon = 20;
    model
}

/// wave5.md C1, fixed: a failover that loses the newest changes, after which new changes take
/// their seqs, is a gap for the watcher, which then follows the new history.
#[test]
fn c1_a_rewritten_history_is_a_gap_after_a_failover() {
    let (violated, unmet) = full("C1", failover_history());
    assert!(violated.is_empty(), "{violated:?}");
    // Its plans hold no resign and no second term: only the gap is to be reached.
    assert!(!unmet.contains(&properties::GAP_REPORTED), "{unmet:?}");
}

/// Stamps that tell no history from another (the old entries, without a stamp, as the old
/// watcher compared nothing) are caught: after a failover that lost a proclaim the watcher had
/// delivered, the new proclaim at that seq is never delivered and no gap is reported.
#[test]
fn mutant_stamps_that_tell_nothing_miss_a_rewritten_history() {
    let mut model = failover_history();
    let blind = |text: &str| {
        mutate(
            text,
            "local stamp = string.sub(redis.sha1hex(",
            "local stamp = '0' or string.sub(redis.sha1hex(",
        )
    };
    model.scripts.acquire = blind(&model.scripts.acquire);
    model.scripts.release = blind(&model.scripts.release);
    model.scripts.proclaim = blind(&model.scripts.proclaim);
    model.scripts.observe = blind(&model.scripts.observe);
    assert!(caught(&find("blind stamps", model), properties::WATCH));
}

/// Across a failover that loses un-replicated writes, without replica sync: two candidates
/// take the same epoch and both lead (wave5.md C2's kin; epochs need replica sync, as
/// docs/election.md says). Known, not relock's to fix without the deployment's help.
#[test]
fn known_failover_without_replica_sync() {
    let found = find("failover", ElectionModel::failover(Bound::Ci, false));
    assert!(!found.is_empty());
}

/// wave5.md C2, fixed: with `Config::with_replica_sync` a term is granted once the replica has
/// it, and a renewal moves the leader's local deadline only once a replica acknowledged it (the
/// watchdog's `WAIT`), so a renewal the primary confirmed and the replica lacks leaves the
/// deadline at what the promoted replica keeps: no second candidate leads there while the first
/// still does. The plans hold no proclaim and no resign, so only a renewal could do it.
#[test]
fn c2_a_renewal_the_replica_lacks_lets_no_second_leader_in() {
    let mut model = ElectionModel::failover(Bound::Ci, true);
    model.plans = vec![vec![Op::Campaign], vec![Op::Campaign]];
    let found = find("C2", model);
    assert!(found.is_empty(), "{found:?}");
}

/// The watchdog before the fix (a renewal moves the deadline whether a replica has it or not)
/// is caught: two leaders at once.
#[test]
fn mutant_renewals_that_do_not_wait_for_the_replica_make_two_leaders() {
    let mut model = ElectionModel::failover(Bound::Ci, true);
    model.plans = vec![vec![Op::Campaign], vec![Op::Campaign]];
    model.renew_without_wait = true;
    assert!(caught(&find("C2 mutant", model), properties::ONE_LEADER));
}

/// The same with `Config::with_replica_sync`, the deployment docs/election.md asks for: a
/// resign the primary confirmed and the replica lacks is rolled back by the failover, so
/// history names the resigned term as leading again (left open: a resign does not wait for
/// a replica).
#[test]
fn known_failover_with_replica_sync() {
    let found = find("failover synced", ElectionModel::failover(Bound::Ci, true));
    assert!(!found.is_empty());
    assert!(!caught(&found, properties::ONE_LEADER), "{found:?}");
}

/// The `Bound::Ci` check `relock-model check` runs, and both failover configurations in full
/// (every property's first counterexample): minutes, so ignored by default.
#[test]
#[ignore]
fn ci_bound_and_failover_in_full() {
    let report = relock_model::model::election::check(Bound::Ci);
    eprintln!("{}", report.json());
    assert_eq!(report.violations, 0);
    for outcome in relock_model::model::election::check_failover(Bound::Ci) {
        eprintln!(
            "{} {:?} unmet {:?}",
            outcome.report.json(),
            outcome.violated,
            outcome.unmet
        );
    }
}
