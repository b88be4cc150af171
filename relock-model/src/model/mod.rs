//! relock's clients as state machines beside the simulated server, each model checked over
//! every interleaving within a bound (`relock-model check`). Each model's file says which
//! functions of relock it stands for; `docs/model.md` has the whole map and what is left out.

use std::fmt::Write as _;

pub mod election;
pub mod fair;
pub mod lock;
pub mod rw;
pub mod semaphore;
pub mod trace;

/// How far a check goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// The bound `.ci/run` checks: every model within a few minutes on 2 cores.
    Ci,
    /// A deeper bound for a long run (documented in `docs/model.md`).
    Deep,
}

/// One model's bounded check, as `relock-model check` prints it last.
#[derive(Clone, Debug)]
pub struct Report {
    /// The model's name (`lock`, `semaphore`, …).
    pub model: String,
    /// Distinct states visited.
    pub states: usize,
    /// The greatest depth reached (steps from an initial state).
    pub depth: usize,
    /// Properties checked (`always` and `sometimes` alike).
    pub properties: usize,
    /// `always` properties with a counterexample, and `sometimes` properties never met.
    pub violations: usize,
    /// Wall-clock seconds the check took.
    pub seconds: f64,
}

impl Report {
    /// The report as one JSON line: `{"model": …, "states": …, "depth": …, "properties": …,
    /// "violations": …, "seconds": …}`.
    pub fn json(&self) -> String {
        let mut out = String::new();
        write!(
            out,
            "{{\"model\": {:?}, \"states\": {}, \"depth\": {}, \"properties\": {}, \"violations\": {}, \"seconds\": {:.1}}}",
            self.model, self.states, self.depth, self.properties, self.violations, self.seconds
        )
        .unwrap();
        out
    }
}
