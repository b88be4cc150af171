//! Several tasks of one process on the plain [`Lock`](relock::Lock): what the lock model leaves
//! out. Process 0 runs two tasks (two owners sharing one pub/sub hub and one hand-off state),
//! process 1 one; their plans of `lock()` and `unlock()` run against the simulated server,
//! which runs relock's own scripts, while the world loses messages, kills a process and lets
//! time pass. Each task is the state machine relock's code makes of it:
//!
//! | step | relock |
//! |---|---|
//! | [`Action::Run`] from idle | `PlainTurns::new` (queue first behind this process's waiters or a grace), `until_taken`'s first attempt (`Hold::try_once`), or `unlock()`: `Handoffs::mark`, LOCK_RELEASE |
//! | [`Action::Run`] subscribing | `PlainTurns::start` (`Hub::register`, one SUBSCRIBE per process), then `next_turn` |
//! | [`Action::Run`] waiting | a wait ends (`Waiter::wait`: a wake-up or its bound; `Handoffs::await_release_reply`) and `next_turn` / `park_behind` / the grace loop go on |
//! | [`Action::Run`] ready | `Hold::try_once` with `ClaimGuard::next`'s priority, then `PlainTurns::acquired` or `next_turn` |
//! | [`Action::Reply`] | `Outgoing::settle`: `Handoffs::released`, the `ReleaseMark` dropped |
//! | [`Action::Deliver`], [`Action::LoseMessage`] | the hub task: `Channel::deliver` (`wake_one`), or the message lost |
//! | [`Action::Cancel`], [`Action::Unclaim`] | dropping a waiting `lock()`: `Waiter`'s drop (passes a wake-up on), `ClaimGuard`'s drop |
//! | [`Action::Renew`] | the watchdog (`Watchdog::renew_all`, LOCK_RENEW) |
//! | [`Action::Crash`], [`Action::Tick`] | the world |

use stateright::{Model, Property};

use super::lock::Scripts;
use super::{Bound, Report};

pub mod properties;
pub mod state;
mod steps;
mod trace;
mod turns;

pub use state::{Op, TasksState};
pub use steps::Action;
pub use trace::render as trace_render;

pub use super::Outcome;

/// A deliberate bug in the modelled client, to show the checker finds it (never relock's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The client as relock's code is.
    None,
    /// A waiter that leaves without the lock does not wake the next one (`Waiter`'s drop
    /// without `wake_one`): a wake-up it had received and not used is lost.
    NoPassOn,
    /// A woken waiter does not wait for its process's release reply: it may take the lock back
    /// before the reply says other processes were woken.
    NoReplyWait,
    /// A newcomer tries at once, whatever this process's waiters and grace.
    NewcomerBarges,
    /// relock's client before the model found it: a release counted as awaiting its reply only
    /// when its process had waiters, and a newcomer did not look at releases on their way; a
    /// task calling `lock()` between its process's release and the reply took the lock back
    /// from the other processes' woken waiters.
    NewcomerBeforeReply,
    /// No hand-off grace.
    NoGrace,
    /// The hand-off loop goes round again only after a reply wait, not after a grace wait: a
    /// release by another task of the process during the grace is not waited for.
    SingleRound,
}

/// Which faults the world may inject.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    /// A published message never reaches a process.
    pub lose_message: bool,
    /// A process dies.
    pub crash: bool,
}

/// The tasks model and its bounds.
#[derive(Clone, Debug)]
pub struct TasksModel {
    /// Each task's process.
    pub processes: Vec<u8>,
    /// Each task's plan, in order.
    pub plans: Vec<Vec<Op>>,
    /// Which tasks' waiting `lock()` may be cancelled.
    pub cancellable: Vec<bool>,
    /// The most faults in one run.
    pub max_faults: u8,
    /// The most cancelled acquires in one run.
    pub max_cancels: u8,
    /// No time passes beyond this moment (ms).
    pub horizon: u64,
    /// The faults the world may inject.
    pub faults: Faults,
    /// The scripts the server runs.
    pub scripts: Scripts,
    /// A client bug, or none.
    pub mutation: Mutation,
    /// Holders unlock before any time passes: no renewals, no waiter's timer while the lock is
    /// held (a bound on the states; a crashed holder's lease still runs out).
    pub prompt_holders: bool,
    /// Stop at the first `always` violation (for mutants).
    pub stop_early: bool,
    /// Stop after about this many checked states (`None`: explore to the end).
    pub target_states: Option<usize>,
}

impl TasksModel {
    /// The model at `bound` with relock's own scripts and client.
    pub fn new(bound: Bound) -> TasksModel {
        use Op::{Lock, Unlock};
        // Tasks 0 and 1 share process 0 (one releases while the other waits or comes anew: the
        // hand-off grace's case), task 2 is process 1; at the deep bound task 0 locks twice.
        let mut plans = vec![vec![Lock, Unlock]; 3];
        if bound == Bound::Deep {
            plans[0] = vec![Lock, Unlock, Lock, Unlock];
        }
        // Past a lease (12 ms): a dead process's hold expires within the horizon.
        let (max_faults, horizon, target_states) = match bound {
            Bound::Ci => (2, 20, None),
            Bound::Deep => (2, 24, Some(3_000_000)),
        };
        TasksModel {
            processes: vec![0, 0, 1],
            cancellable: vec![true; plans.len()],
            plans,
            max_faults,
            max_cancels: 1,
            horizon,
            faults: Faults {
                lose_message: true,
                crash: true,
            },
            scripts: Scripts {
                lease_ms: state::LEASE,
                window_ms: state::WINDOW,
                ..Scripts::default()
            },
            mutation: Mutation::None,
            // At the deep bound holders may hold while time passes (renewals, timers firing
            // on a held lock); at the CI bound that would be 30 times the states.
            prompt_holders: bound == Bound::Ci,
            stop_early: false,
            target_states,
        }
    }

    /// Runs the BFS checker over every interleaving within the bounds; prints each `always`
    /// counterexample's trace to stderr.
    pub fn run(self, threads: usize) -> Outcome {
        let run = super::Run {
            name: "tasks",
            threads,
            stop_early: self.stop_early,
            target_states: self.target_states,
        };
        super::run_bfs(self, run, trace::render)
    }
}

impl Model for TasksModel {
    type State = TasksState;
    type Action = Action;

    fn init_states(&self) -> Vec<TasksState> {
        let server = crate::server::Server::new(crate::server::Version::Redis7);
        let count = self.processes.iter().max().map_or(0, |&p| p as usize + 1);
        vec![TasksState {
            server,
            processes: vec![state::Process::new(); count],
            tasks: self
                .processes
                .iter()
                .map(|&p| state::Task::new(p))
                .collect(),
            faults: 0,
            cancels: 0,
            free_since: Some(0),
            registered_at: 0,
            unannounced: false,
            released_by: None,
            barged: false,
        }]
    }

    fn actions(&self, state: &TasksState, actions: &mut Vec<Action>) {
        self.enabled(state, actions);
    }

    fn next_state(&self, state: &TasksState, action: Action) -> Option<TasksState> {
        Some(self.step(state, action, &mut None))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}

/// Checks the tasks model within `bound`.
pub fn check(bound: Bound) -> Report {
    TasksModel::new(bound).run(2).report
}

/// Random walks over the tasks model at the deep bound (see [`super::Walk`]).
pub fn walk(walk: super::Walk) -> Report {
    super::run_walk(TasksModel::new(Bound::Deep), "tasks", walk, trace::render).report
}
