//! The permit semaphore's model: relock's `PermitSemaphore` clients (`src/sync/permit/`, waiting
//! through `src/wait/`) as state machines beside a simulated Redis that runs relock's own
//! `lua/permit/` scripts, checked over every interleaving within a bound.
//!
//! Each step stands for relock code:
//!
//! | step | relock |
//! |---|---|
//! | `Acquire` | `PermitSemaphore::acquire_within` → `wait::until_taken` → `permit::take` (fresh id) |
//! | `Run` of an acquire | `PERMIT_ACQUIRE` (reclaims ended leases, publishes, takes or answers busy) |
//! | `Deliver` of an acquire | `take`'s reply handling: `{1, left}` → `Permit` (or `Try::Late`, whose `ResumeRelease` gives it back); `{0, ms}` → `OnChannel::start` (subscribe, try again at once) or `wait_turn` (timer `min(poll, ms)`, at once when woken); nil → `Error::NotFound` |
//! | `Lose` of an acquire | `take`'s ambiguous error: `ZSCORE` read-back on the same connection; its failure leaves the orphan armed |
//! | `Message`, `Wake`, `Timer` | `Channel::deliver` (the slot's wake-up), `Waiter::wait` returning `Message` / `Timeout` |
//! | `Cancel` | dropping the acquire future: the `Waiter` leaves; an attempt in flight leaves a `ResumeRelease` |
//! | `Release`, and its `Lose` | `Permit::release` → `until_answered` (3 tries) → `give_back` (`PERMIT_RELEASE`), and its outcome mapping |
//! | `Renew` | the watchdog's `Permits::renew` (`PERMIT_RENEW`); a 0 marks the permit lost |
//! | `LateRenew` | a renewal sent before the holder's deadline that runs after it (`PERMIT_RENEW`); its reply comes past the deadline, so the permit is lost (`Registry::renewed`) |
//! | background `Run` / `Deliver` / `Lose` | `ResumeRelease`'s job: `until_answered(true, give_back)` |
//! | `Crash`, `Restart`, `RestartFromAof`, `Tick`, `DropMessage` | the world: a process dies, Redis restarts empty or from an AOF with every write (hubs resubscribe and wake all), time passes to the next due moment, a message is lost |
//!
//! Left out: several tasks in one process (the in-process waiter queue, `queue_first`,
//! `Wakes::Permits` hand-on between a process's waiters), `try_acquire` / `try_acquire_for`
//! deadlines, fixed leases (every permit is the watchdog's, its renewals bounded and at any
//! moment rather than every third of the lease), a cancelled release, `release_id`,
//! `add_permits` / `delete` / the state reads, the poll's jitter, clock skew between client and
//! server, a request that runs after its connection reported it lost, and Redisson clients.

use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model};

use super::{Bound, Report};

mod canon;
mod client;
pub mod props;
pub mod state;
pub mod step;
mod trace;

pub use state::State;
pub use step::{Action, Lane};

/// The scripts the model runs: relock's own by default; a test passes a mutant here.
#[derive(Clone, Debug)]
pub struct Scripts {
    /// `PERMIT_ACQUIRE`.
    pub acquire: String,
    /// `PERMIT_RELEASE`.
    pub release: String,
    /// `PERMIT_RENEW`.
    pub renew: String,
    /// `SEMAPHORE_TRY_SET` (sets the permits in the initial state).
    pub try_set: String,
}

impl Default for Scripts {
    fn default() -> Scripts {
        use relock::testing::scripts::{
            PERMIT_ACQUIRE, PERMIT_RELEASE, PERMIT_RENEW, SEMAPHORE_TRY_SET,
        };
        Scripts {
            acquire: PERMIT_ACQUIRE.to_string(),
            release: PERMIT_RELEASE.to_string(),
            renew: PERMIT_RENEW.to_string(),
            try_set: SEMAPHORE_TRY_SET.to_string(),
        }
    }
}

/// The model's size and timing (ms on the server's clock).
#[derive(Clone, Debug)]
pub struct Setup {
    /// Client processes (one task each).
    pub clients: u8,
    /// The semaphore's permits.
    pub permits: u8,
    /// Operations (acquire, then release) per client.
    pub ops: u8,
    /// Each permit's lease (the watchdog timeout).
    pub lease: u64,
    /// The poll interval: the longest a waiter sleeps without a message.
    pub poll: u64,
    /// Time stops here.
    pub horizon: u64,
    /// Faults in all (lost requests, replies, messages; crashes; a restart).
    pub faults: u8,
    /// Renewals per permit.
    pub renewals: u8,
    /// Clients may crash.
    pub crashes: bool,
    /// The server may restart empty.
    pub restart: bool,
    /// The server may restart from an AOF that has every write (`appendfsync always`): the
    /// keys stay, subscriptions and scripts go.
    pub restart_aof: bool,
    /// Acquires may be cancelled.
    pub cancel: bool,
    /// Messages may be lost.
    pub message_loss: bool,
}

impl Setup {
    /// The setup checked at `bound`.
    pub fn at(bound: Bound) -> Setup {
        let small = Setup {
            clients: 2,
            permits: 1,
            ops: 1,
            lease: 20,
            poll: 15,
            horizon: 50,
            faults: 2,
            renewals: 1,
            crashes: true,
            restart: true,
            restart_aof: true,
            cancel: true,
            message_loss: true,
        };
        match bound {
            Bound::Ci => Setup {
                lease: 6,
                poll: 4,
                horizon: 8,
                faults: 1,
                ..small
            },
            Bound::Deep => Setup {
                clients: 3,
                permits: 2,
                horizon: 60,
                ..small
            },
        }
    }
}

/// The model: a setup and the scripts it runs.
#[derive(Clone, Debug)]
pub struct SemaphoreModel {
    /// Size and timing.
    pub setup: Setup,
    /// The scripts.
    pub scripts: Scripts,
}

/// A property's counterexample (an `always` violated) or a `sometimes` never met.
#[derive(Clone, Debug)]
pub struct Finding {
    /// The property's name.
    pub property: &'static str,
    /// Steps in the counterexample (0 for a `sometimes` never met).
    pub steps: usize,
}

/// A check's report and its findings.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The report.
    pub report: Report,
    /// The violations, `always` ones first.
    pub findings: Vec<Finding>,
}

/// How far a run goes.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Stop after about this many states.
    pub states: usize,
    /// Explore no deeper than this.
    pub depth: usize,
    /// Stop at the first `always` violation (for mutants).
    pub stop_at_violation: bool,
    /// Stop after this long.
    pub timeout: Duration,
}

impl Limits {
    /// The limits of `bound`.
    pub fn at(bound: Bound) -> Limits {
        match bound {
            Bound::Ci => Limits {
                states: 50_000_000,
                depth: 80,
                stop_at_violation: false,
                timeout: Duration::from_secs(3_600),
            },
            // A cap, as the other models' deep bounds have.
            Bound::Deep => Limits {
                states: 3_000_000,
                depth: 80,
                stop_at_violation: false,
                timeout: Duration::from_secs(3_600),
            },
        }
    }
}

/// Checks the semaphore's model within `bound`, on relock's scripts.
pub fn check(bound: Bound) -> Report {
    let model = SemaphoreModel {
        setup: Setup::at(bound),
        scripts: Scripts::default(),
    };
    run(model, Limits::at(bound)).report
}

/// Random walks over the semaphore's model at the deep bound (see [`super::Walk`]).
pub fn walk(walk: super::Walk) -> Report {
    let model = SemaphoreModel {
        setup: Setup::at(Bound::Deep),
        scripts: Scripts::default(),
    };
    let print = |model: &SemaphoreModel, property: &str, path: &[(State, Option<Action>)]| {
        trace::print(model, property, path.to_vec());
        String::new()
    };
    super::run_walk(model, "semaphore", walk, print).report
}

/// Runs stateright's BFS checker on `model` within `limits`; prints each `always` violation's
/// trace to stderr.
pub fn run(model: SemaphoreModel, limits: Limits) -> Outcome {
    let started = Instant::now();
    let printer = model.clone();
    let mut checker = model
        .checker()
        .threads(2)
        .target_state_count(limits.states)
        .target_max_depth(limits.depth)
        .timeout(limits.timeout);
    if limits.stop_at_violation {
        checker = checker.finish_when(HasDiscoveries::AnyFailures);
    }
    let checker = checker.spawn_bfs().join();
    let mut findings = Vec::new();
    for property in props::ALWAYS {
        if let Some(path) = checker.discovery(property) {
            let steps = path.clone().into_actions().len();
            trace::print(&printer, property, path.into_vec());
            findings.push(Finding { property, steps });
        }
    }
    // A run the state cap stopped need not have reached every situation: its unmet
    // `sometimes` are printed, not counted.
    let capped = checker.state_count() >= limits.states;
    for property in printer.properties() {
        let sometimes = property.expectation == stateright::Expectation::Sometimes;
        if sometimes && checker.discovery(property.name).is_none() {
            eprintln!("semaphore: never met: \"{}\"", property.name);
            if !capped {
                findings.push(Finding {
                    property: property.name,
                    steps: 0,
                });
            }
        }
    }
    let report = Report {
        model: "semaphore".to_string(),
        states: checker.unique_state_count(),
        depth: checker.max_depth(),
        properties: printer.properties().len(),
        violations: findings.len(),
        seconds: started.elapsed().as_secs_f64(),
    };
    Outcome { report, findings }
}
