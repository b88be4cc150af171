//! relock's clients as state machines beside the simulated server, each model checked over
//! every interleaving within a bound (`relock-model check`). Each model's file says which
//! functions of relock it stands for; `docs/model.md` has the whole map and what is left out.

use std::fmt::Write as _;
use std::hash::Hash;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model, UniformChooser};

pub mod election;
pub mod fair;
pub mod lock;
pub mod rw;
pub mod semaphore;
pub mod tasks;
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

/// What one check found: its report, each `always` property with a counterexample (and the
/// counterexample's steps), and the `sometimes` properties never met.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The report `relock-model check` prints.
    pub report: Report,
    /// Each `always` property with a counterexample, and the counterexample's steps.
    pub violated: Vec<(&'static str, usize)>,
    /// `sometimes` properties never met.
    pub unmet: Vec<&'static str>,
}

/// How one breadth-first run goes.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    /// The model's name in the report.
    pub name: &'static str,
    /// Checker threads.
    pub threads: usize,
    /// Stop at the first `always` violation (for mutants); `sometimes` are not counted then.
    pub stop_early: bool,
    /// Stop after about this many checked states (`None`: explore to the end).
    pub target_states: Option<usize>,
}

/// Runs stateright's BFS over every interleaving of `model` within its bounds, prints each
/// `always` counterexample as `render` writes it to stderr, and reports.
pub fn run_bfs<M>(
    model: M,
    run: Run,
    render: impl Fn(&M, &str, &[(M::State, Option<M::Action>)]) -> String,
) -> Outcome
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + PartialEq + Hash + Send + Sync + 'static,
    M::Action: Clone + PartialEq,
{
    let started = Instant::now();
    let mut builder = model.clone().checker().threads(run.threads);
    if run.stop_early {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    if let Some(target) = run.target_states {
        builder = builder.target_state_count(target);
    }
    let checker = builder.spawn_bfs().join();
    let mut outcome = findings(&model, &checker, render, run.name.into(), started);
    // A run the state cap stopped need not have reached every situation: its unmet
    // `sometimes` are printed, not counted.
    let capped = run
        .target_states
        .is_some_and(|cap| checker.state_count() >= cap);
    if run.stop_early {
        outcome.unmet.clear();
    }
    for name in &outcome.unmet {
        eprintln!("{}: never met: \"{name}\"", run.name);
    }
    if capped {
        outcome.unmet.clear();
    }
    outcome.report.violations = outcome.violated.len() + outcome.unmet.len();
    outcome
}

/// What `checker` found on `model`: each `always` property's counterexample (printed as
/// `render` writes it), each `sometimes` never met, and the report (its `violations` counting
/// the counterexamples only), named `name`, timed from `started`.
fn findings<M>(
    model: &M,
    checker: &impl Checker<M>,
    render: impl Fn(&M, &str, &[(M::State, Option<M::Action>)]) -> String,
    name: String,
    started: Instant,
) -> Outcome
where
    M: Model,
    M::State: Clone + PartialEq,
    M::Action: Clone + PartialEq,
{
    let seconds = started.elapsed().as_secs_f64();
    let properties = model.properties();
    let (mut violated, mut unmet) = (Vec::new(), Vec::new());
    for property in &properties {
        let found = checker.discovery(property.name);
        match (property.expectation.discovery_is_failure(), found) {
            (true, Some(path)) => {
                let path = path.into_vec();
                eprintln!("{}", render(model, property.name, &path));
                violated.push((property.name, path.len() - 1));
            }
            (false, None) => unmet.push(property.name),
            _ => {}
        }
    }
    let report = Report {
        model: name,
        states: checker.unique_state_count(),
        depth: checker.max_depth(),
        properties: properties.len(),
        violations: violated.len(),
        seconds,
    };
    Outcome {
        report,
        violated,
        unmet,
    }
}

/// How a random walk goes: walks from the initial states, each step chosen at random among the
/// enabled ones, for a while; for bounds too deep to explore to the end.
#[derive(Clone, Copy, Debug)]
pub struct Walk {
    /// How long to walk, in seconds (walks stop early at the first `always` violation).
    pub seconds: u64,
    /// The first walk's seed (the others' follow from it), printed with the report.
    pub seed: u64,
}

/// The longest walk, in steps: every model's walks end sooner (time stops at the horizon); a
/// cap, should a model ever allow a cycle.
const WALK_STEPS: usize = 1_000;

/// Random walks over `model` (see [`Walk`]) on two threads: prints each `always`
/// counterexample as `render` writes it to stderr, and reports. A `sometimes` property not met
/// by the walks is listed in `unmet` but is no violation: walks need not reach every situation.
pub fn run_walk<M>(
    model: M,
    name: &'static str,
    walk: Walk,
    render: impl Fn(&M, &str, &[(M::State, Option<M::Action>)]) -> String,
) -> Outcome
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Clone + PartialEq + Hash + Send + Sync + 'static,
    M::Action: Clone + PartialEq,
{
    let started = Instant::now();
    let checker = model
        .clone()
        .checker()
        .threads(2)
        .target_max_depth(WALK_STEPS)
        .timeout(Duration::from_secs(walk.seconds))
        .finish_when(HasDiscoveries::AnyFailures)
        .spawn_simulation(walk.seed, UniformChooser)
        .join();
    let name = format!("{name}-walk-seed-{}", walk.seed);
    findings(&model, &checker, render, name, started)
}
