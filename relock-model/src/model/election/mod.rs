//! The [`Election`](relock::Election)'s model: two candidates (a process each) campaign, proclaim
//! and resign, and one watcher follows the history, against the simulated primary (which runs
//! relock's own scripts, `relock::testing::scripts`) and, in the failover runs, a replica whose
//! keyspace is a copy of the primary's as of its last replication. The world loses messages and
//! replies, crashes candidates, replicates, fails over to the replica (losing what it lacked),
//! restarts the server empty, deletes history's newest entry, and lets time pass.
//!
//! | step | relock |
//! |---|---|
//! | [`Action::Acquire`], [`Action::Subscribe`] | `Election::campaign` → `lock::acquire::acquire` → `Hold::try_once` → `Office::take` (ELECTION_ACQUIRE), the waits of `PlainTurns` (subscribe, then try again; wait for a message or the leader's PTTL), the claim priority of `ClaimGuard::next`; `Term::new` (the epoch is the reply's) |
//! | [`Action::Renew`], [`Action::RenewUnacked`] | `watchdog::Watchdog::renew_all` (LOCK_RENEW; with replica sync, `WAIT` after it), `Registry::renewed` / `found_gone`: the local deadline is the send time + lease of the last renewal (with replica sync: the last one a replica acknowledged) |
//! | [`Action::Proclaim`] | `Term::proclaim` → `history::proclaim` (ELECTION_PROCLAIM) |
//! | [`Action::Release`], [`Action::ReleaseReplyLost`] | `Term::resign` → `LockGuard::unlock` → `Office::give_back` (ELECTION_RELEASE), `wait::until_answered`'s retry, the sweeper's delete of the replay key |
//! | [`Action::WatchRead`] | `watch::Watcher::next` (subscribe first, then `history::observe`: ELECTION_OBSERVE) and `Watcher::take` (the gap rule, the next read at the lease's end) |
//! | [`Action::Deliver`], [`Action::WatchDeliver`], [`Action::LoseMessage`], [`Action::WatchLoseMessage`] | the hub waking a waiter or a watch, or the message lost |
//! | [`Action::Replicate`], [`Action::Failover`] | a replica catching up; a failover promoting it (the clients reconnect: the hub resubscribes and wakes every waiter and watch) |
//! | [`Action::Crash`], [`Action::Restart`], [`Action::DeleteNewest`], [`Action::Tick`] | the world |
//!
//! With `replica_sync` (`Config::with_replica_sync`), a term is granted only once a replica has
//! it (`acquire::guard`'s `await_replica`): the acquire step replicates then.

use stateright::{Model, Property};

use super::{Bound, Report};

mod calls;
pub mod properties;
pub mod state;
pub mod steps;
mod trace;
mod watch;

pub use state::{ElectionState, Op};
pub use steps::Action;

/// The script texts the model runs: relock's own, or a mutant's.
#[derive(Clone, Debug)]
pub struct Scripts {
    /// ELECTION_ACQUIRE.
    pub acquire: String,
    /// ELECTION_RELEASE.
    pub release: String,
    /// ELECTION_PROCLAIM.
    pub proclaim: String,
    /// ELECTION_OBSERVE.
    pub observe: String,
    /// LOCK_RENEW.
    pub renew: String,
}

impl Default for Scripts {
    fn default() -> Scripts {
        use relock::testing::scripts::{
            ELECTION_ACQUIRE, ELECTION_OBSERVE, ELECTION_PROCLAIM, ELECTION_RELEASE, LOCK_RENEW,
        };
        Scripts {
            acquire: ELECTION_ACQUIRE.to_string(),
            release: ELECTION_RELEASE.to_string(),
            proclaim: ELECTION_PROCLAIM.to_string(),
            observe: ELECTION_OBSERVE.to_string(),
            renew: LOCK_RENEW.to_string(),
        }
    }
}

/// Which faults the world may inject.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// A published message never reaches a subscriber.
    pub lose_message: bool,
    /// A resign's script runs, its reply is lost.
    pub lose_reply: bool,
    /// A candidate's process dies.
    pub crash: bool,
    /// The primary fails over to the replica, losing what was not replicated.
    pub failover: bool,
    /// The server restarts empty (at once; its data is gone).
    pub restart: bool,
    /// History's newest entry is deleted (`XDEL`, wave5.md C5).
    pub delete_newest: bool,
}

/// The election model and its bounds.
#[derive(Clone, Debug)]
pub struct ElectionModel {
    /// The run's name, in its report.
    pub name: &'static str,
    /// Each candidate's plan.
    pub plans: Vec<Vec<Op>>,
    /// Where the watcher starts: `None` for `watch()`, `Some(seq)` for `watch_after(seq)`.
    pub watch_from: Option<u64>,
    /// The most faults in one run.
    pub max_faults: u8,
    /// No time passes beyond this moment (ms).
    pub horizon: u64,
    /// The faults the world may inject.
    pub faults: Faults,
    /// `Config::with_replica_sync`: a term is granted once the replica has it, and a renewal
    /// moves the leader's local deadline once the replica has it.
    pub replica_sync: bool,
    /// A mutant of the watchdog before issue 44: with replica sync, a renewal moves the local
    /// deadline whether or not a replica acknowledged it (wave5.md C2).
    pub renew_without_wait: bool,
    /// The scripts the server runs.
    pub scripts: Scripts,
    /// Stop at the first `always` violation (for mutants and known bugs).
    pub stop_early: bool,
    /// Stop after about this many checked states (`None`: explore to the end).
    pub target_states: Option<usize>,
}

pub use super::Outcome;

impl ElectionModel {
    /// relock's own scripts and client, without failover or restart: lost messages, a lost
    /// resign reply, a crashed candidate. relock's promises must hold here.
    pub fn new(bound: Bound) -> ElectionModel {
        use Op::{Campaign, Proclaim, Resign};
        let (max_faults, horizon, target_states) = match bound {
            Bound::Ci => (1, 32, None),
            // A cap: stateright counts every state it checks, revisits included.
            Bound::Deep => (2, 45, Some(3_000_000)),
        };
        ElectionModel {
            name: "election",
            plans: vec![vec![Campaign, Proclaim, Resign], vec![Campaign, Resign]],
            watch_from: None,
            max_faults,
            horizon,
            faults: Faults {
                lose_message: true,
                lose_reply: bound == Bound::Deep,
                crash: true,
                ..Faults::default()
            },
            replica_sync: false,
            renew_without_wait: false,
            scripts: Scripts::default(),
            stop_early: false,
            target_states,
        }
    }

    /// A replica beside the primary and one failover to it, which loses what the replica
    /// lacked; with `replica_sync`, terms are granted once the replica has them (the deployment
    /// `docs/election.md` asks for). relock's promises are known not to hold all here
    /// (wave5.md C2, and epochs without replica sync; issue 44). C1 (a rewritten history the
    /// watcher missed) is fixed: `tests/election_model.rs`'s `c1_…`.
    pub fn failover(bound: Bound, replica_sync: bool) -> ElectionModel {
        let name = if replica_sync {
            "election-failover-synced"
        } else {
            "election-failover"
        };
        ElectionModel {
            name,
            max_faults: 1,
            faults: Faults {
                failover: true,
                ..Faults::default()
            },
            replica_sync,
            ..ElectionModel::new(bound)
        }
    }

    /// Runs the BFS checker over every interleaving within the bounds; prints each `always`
    /// counterexample's trace to stderr.
    pub fn run(self) -> Outcome {
        let run = super::Run {
            name: self.name,
            threads: 2,
            stop_early: self.stop_early,
            target_states: self.target_states,
        };
        super::run_bfs(self, run, trace::render)
    }
}

impl Model for ElectionModel {
    type State = ElectionState;
    type Action = Action;

    fn init_states(&self) -> Vec<ElectionState> {
        let server = crate::server::Server::new(crate::server::Version::Redis7);
        let replica = self.faults.failover.then(|| server.keyspace.clone());
        vec![ElectionState {
            server,
            replica,
            candidates: vec![state::Candidate::new(); self.plans.len()],
            watcher: state::Watcher::new(self.watch_from),
            faults: 0,
            epochs: Vec::new(),
            resigned: Vec::new(),
            failed: None,
        }]
    }

    fn actions(&self, state: &ElectionState, actions: &mut Vec<Action>) {
        self.enabled(state, actions);
    }

    fn next_state(&self, state: &ElectionState, action: Action) -> Option<ElectionState> {
        Some(self.step(state, action, &mut None))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all(self)
    }
}

/// Checks the election's model within `bound`: the configuration without failover, where
/// relock's promises must hold. [`check_failover`] runs the failover configurations apart.
pub fn check(bound: Bound) -> Report {
    ElectionModel::new(bound).run().report
}

/// Random walks over the election's model (without failover) at the deep bound (see
/// [`super::Walk`]).
pub fn walk(walk: super::Walk) -> Report {
    let model = ElectionModel::new(Bound::Deep);
    super::run_walk(model, "election", walk, trace::render).report
}

/// Checks the failover configurations (without and with replica sync) within `bound`; their
/// violations are the known bugs of issue 44, printed with their traces.
pub fn check_failover(bound: Bound) -> Vec<Outcome> {
    [false, true]
        .into_iter()
        .map(|sync| ElectionModel::failover(bound, sync).run())
        .collect()
}
