//! What the election model checks: five `always` properties (a counterexample is a bug) and
//! `sometimes` properties showing the situations they are about are reached.

use stateright::Property;

use super::state::{history, holder, last_id, ElectionState, Phase};
use super::ElectionModel;

/// (1) Each term's epoch is above every earlier term's.
pub const EPOCHS: &str = "epochs strictly increase: each term granted is above every earlier one";
/// (2) At most one leader believes it leads at any instant.
pub const ONE_LEADER: &str =
    "at most one leader: no two candidates believe they lead before their local deadlines";
/// (3) The watcher sees every change once, in order, or reports a gap.
pub const WATCH: &str = "every change in history is delivered once, in order, or a gap is reported";
/// (4) History records a resign.
pub const RESIGN_RECORDED: &str =
    "history's newest entry never names a term whose resign the server confirmed";
/// (5) No script of relock's fails.
pub const NO_ERROR: &str = "no script answers an error";
/// The watcher reported a gap (reached where history is rewritten, damaged, or resumed past).
pub const GAP_REPORTED: &str = "the watcher reports a gap";

/// The properties, `always` first; the `sometimes` ones depend on the faults `model` injects.
pub fn all(model: &ElectionModel) -> Vec<Property<ElectionModel>> {
    let mut all = vec![
        Property::always(EPOCHS, |_, s: &ElectionState| epochs_increase(s)),
        Property::always(ONE_LEADER, |_, s: &ElectionState| one_leader(s)),
        Property::always(WATCH, |_, s: &ElectionState| s.watcher.broken.is_none()),
        Property::always(RESIGN_RECORDED, |_, s: &ElectionState| resign_recorded(s)),
        Property::always(NO_ERROR, |_, s: &ElectionState| s.failed.is_none()),
        Property::sometimes(
            "a second term is granted (two epochs)",
            |_, s: &ElectionState| s.epochs.len() >= 2,
        ),
        Property::sometimes(
            "a candidate waits while another leads",
            |_, s: &ElectionState| {
                let now = s.server.now();
                let waits = s
                    .candidates
                    .iter()
                    .any(|c| matches!(c.phase, Phase::Waiting { .. }));
                waits && s.candidates.iter().any(|c| c.believes_leads(now))
            },
        ),
        Property::sometimes(
            "the watcher delivered an election, a proclaim and a resign's vacancy",
            |_, s: &ElectionState| {
                let seen = |what: &str| s.watcher.seen.iter().any(|(_, t)| t.contains(what));
                seen("elected") && seen("proclaimed") && seen("resigned")
            },
        ),
        Property::sometimes(
            "a resign is recorded in history as the newest entry",
            |_, s: &ElectionState| {
                let h = history(&s.server.keyspace);
                h.last().is_some_and(|(_, t)| t.contains("resigned"))
            },
        ),
    ];
    if model.faults.crash {
        all.push(Property::sometimes(
            "a crashed leader's lapse is recorded and a new term follows",
            |_, s: &ElectionState| {
                let h = history(&s.server.keyspace);
                let lapsed = h.iter().any(|(_, t)| t.contains("lapsed"));
                lapsed && h.last().is_some_and(|(_, t)| t.starts_with("elected"))
            },
        ));
    }
    if model.watch_from.is_some() || model.faults.delete_newest || model.faults.failover {
        all.push(Property::sometimes(GAP_REPORTED, |_, s: &ElectionState| {
            s.watcher.gaps > 0
        }));
    }
    if model.faults.delete_newest {
        all.push(Property::sometimes(
            "a term is granted and written to history past a deleted entry",
            |_, s: &ElectionState| {
                let h = history(&s.server.keyspace);
                let skips = h.windows(2).any(|w| w[1].0 > w[0].0 + 1);
                skips && h.last().is_some_and(|(_, t)| t.starts_with("elected"))
            },
        ));
    }
    if model.faults.failover {
        all.push(Property::sometimes(
            "a term is granted after a failover",
            |_, s: &ElectionState| s.faults > 0 && s.epochs.len() >= 2,
        ));
    }
    all
}

/// Each epoch granted is above every epoch granted before it.
pub fn epochs_increase(s: &ElectionState) -> bool {
    s.epochs.windows(2).all(|w| w[0] < w[1])
}

/// No two candidates believe they lead at the same instant.
pub fn one_leader(s: &ElectionState) -> bool {
    let now = s.server.now();
    s.candidates
        .iter()
        .filter(|c| c.believes_leads(now))
        .count()
        <= 1
}

/// History's newest entry, when it is a term's (`elected`, `proclaimed`), is not of a term
/// whose resign the server confirmed; and while a candidate's field holds the lock, the newest
/// entry is that candidate's.
pub fn resign_recorded(s: &ElectionState) -> bool {
    let h = history(&s.server.keyspace);
    let Some((seq, newest)) = h.last() else {
        return true;
    };
    if last_id(&s.server.keyspace) != Some(*seq) {
        // The last entry written is gone (deleted by the world): no record to check.
        return true;
    }
    if newest.starts_with("vacant") {
        return holder(&s.server.keyspace).is_none();
    }
    let resigned = s
        .resigned
        .iter()
        .any(|e| newest.contains(&format!("epoch={e} ")));
    let leads_other = holder(&s.server.keyspace).is_some_and(|f| !newest.contains(&f));
    !resigned && !leads_other
}
