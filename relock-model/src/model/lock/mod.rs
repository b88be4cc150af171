//! The plain reentrant [`Lock`](relock::Lock)'s model: two or three clients (a process each,
//! with its own UUID, one task as the owner) run a plan of `lock()` and `unlock()` calls against
//! the simulated server, which runs relock's own scripts (`relock::testing::scripts`), while the
//! world loses messages and replies, crashes clients, restarts the server (empty, or from an AOF
//! with every write) and lets time pass.
//! Each client is the state machine relock's code makes of it:
//!
//! | step | relock |
//! |---|---|
//! | [`Action::Acquire`] | `lock::attempt::Hold::try_once` (LOCK_ACQUIRE), the claim priority of `lock::turns::ClaimGuard::next`, the wait bound of `PlainTurns::next_turn` |
//! | [`Action::Subscribe`] | `PlainTurns::start` (`wait::subscribe`), then the attempt `until_taken` makes right after |
//! | [`Action::AcquireLost`], [`Action::ReadBack`] | `Hold::try_once` after an ambiguous error: `Sending::read_back` (INSPECT), then `Sending::taken` or the `lock()`'s error (the task calls it again) |
//! | [`Action::ReadBackFails`], [`Action::OrphanCheck`] | the read-back failing too: `OrphanCheck`'s drop (INSPECT, then `Hold::release_orphan` of a hold no guard stands for) |
//! | [`Action::Cancel`], [`Action::Unclaim`] | dropping a waiting `lock()` (or one whose attempt's outcome is unknown: its orphan check first): `pubsub::Waiter`'s drop, `ClaimGuard`'s drop (UNCLAIM in the background) |
//! | [`Action::Release`], [`Action::ReleaseReplyLost`] | `lock::release::Hold::release_as` (LOCK_RELEASE), `wait::until_answered`, `Outgoing::settle`, the sweeper's delete |
//! | [`Action::Renew`] | `watchdog::Watchdog::renew_all` (LOCK_RENEW), `Registry::renewed` / `found_gone` |
//! | [`Action::DropLost`] | `lock::attempt::Sending::gate` after a local lapse: `Registry::lapsed_hold`, `Hold::release_orphan` (LOCK_RELEASE with a TTL of 0) |
//! | [`Action::Deliver`], [`Action::LoseMessage`] | the hub waking a waiter (`pubsub::Waiter::wait` returns `Message`), or the message lost |
//! | [`Action::Crash`], [`Action::Restart`], [`Action::RestartFromAof`], [`Action::Tick`] | the world |
//!
//! The local deadline is `registry::holds`'s lapse moment (the send time of the latest command
//! that confirmed the lease, plus the lease), which `LockGuard::lost` completes at.

use stateright::{Model, Property};

use super::{Bound, Report};

mod acquire;
pub(crate) mod calls;
pub mod properties;
mod release;
pub mod state;
pub mod steps;
mod trace;

pub use state::{LockState, Op};
pub use steps::Action;
pub use trace::render as trace_render;

/// The script texts the model runs: relock's own, or a mutant's.
#[derive(Clone, Debug)]
pub struct Scripts {
    /// LOCK_ACQUIRE.
    pub acquire: String,
    /// LOCK_RELEASE.
    pub release: String,
    /// LOCK_RENEW.
    pub renew: String,
    /// UNCLAIM.
    pub unclaim: String,
    /// INSPECT.
    pub inspect: String,
    /// The lease the client sends with them (ms).
    pub lease_ms: u64,
    /// The claim window the client sends with them (ms).
    pub window_ms: u64,
}

impl Default for Scripts {
    fn default() -> Scripts {
        use relock::testing::scripts::{INSPECT, LOCK_ACQUIRE, LOCK_RELEASE, LOCK_RENEW, UNCLAIM};
        Scripts {
            acquire: LOCK_ACQUIRE.to_string(),
            release: LOCK_RELEASE.to_string(),
            renew: LOCK_RENEW.to_string(),
            unclaim: UNCLAIM.to_string(),
            inspect: INSPECT.to_string(),
            lease_ms: state::LEASE,
            window_ms: state::WINDOW,
        }
    }
}

/// A deliberate bug in the modelled client, to show the checker finds it (never relock's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The client as relock's code is.
    None,
    /// A cancelled waiter skips withdrawing its claim.
    SkipUnclaim,
    /// A holder believes it holds until it releases, whatever its local deadline says.
    IgnoreDeadline,
    /// A release's retry says it was never sent before (ARGV\[7\] always 0).
    ReplayFlagZero,
    /// relock's client before it dropped a lapsed hold before acquiring again and sent 0 ("free
    /// the lock whatever its count") on its last release: an owner re-entered a hold it lost
    /// locally while Redis still had it, and its last release kept that hold 1 ms, which then
    /// lapsed with no wake-up.
    ReentersLostHold,
    /// An owner whose holds lapsed locally acquires again without dropping its field first
    /// (its last release does free the lock whatever its count): a read-back after a lost
    /// request takes the lapsed hold Redis still counts for one the acquire took.
    SkipsDrop,
    /// An acquire whose reply was lost is taken as not taken, without a read-back: the hold
    /// its script took stays on Redis with no guard.
    SkipReadBack,
    /// A replay key lives only the retries' window (relock's client before it outlived the
    /// TTL the release leaves and the lease): a retry stalled past it counts twice.
    ShortReplayKey,
}

/// Which faults the world may inject.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    /// A published message never reaches a subscriber.
    pub lose_message: bool,
    /// A release's script runs, its reply is lost.
    pub lose_reply: bool,
    /// An acquire's request or reply is lost (the client reads the lock back), or its
    /// read-back fails too (the orphan check reads it in the background).
    pub lose_acquire: bool,
    /// A client's process dies.
    pub crash: bool,
    /// The server restarts empty (down for a lease first).
    pub restart: bool,
    /// The server restarts from an AOF that has every write (`appendfsync always`), down for
    /// a third of a lease first: the holds outlive it.
    pub restart_aof: bool,
}

/// The lock model and its bounds.
#[derive(Clone, Debug)]
pub struct LockModel {
    /// Each client's plan, in order.
    pub plans: Vec<Vec<Op>>,
    /// Which clients' waiting `lock()` may be cancelled.
    pub cancellable: Vec<bool>,
    /// The most faults of any kind in one run.
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
    /// Stop at the first `always` violation (for mutants).
    pub stop_early: bool,
    /// Let a release's retry go out later than relock's timing allows (a stalled process):
    /// off in relock's own model, on to show what the replay key's lifetime guards against.
    pub stalled_retries: bool,
    /// Stop after about this many checked states (`None`: explore to the end).
    pub target_states: Option<usize>,
}

pub use super::Outcome;

impl LockModel {
    /// The model at `bound` with relock's own scripts and client.
    pub fn new(bound: Bound) -> LockModel {
        use Op::{Lock, Unlock};
        // Client 0 re-enters (two holds, two releases); clients 1 and 2 take it once each.
        let plans = vec![
            vec![Lock, Lock, Unlock, Unlock],
            vec![Lock, Unlock],
            vec![Lock, Unlock],
        ];
        let (max_faults, horizon, target_states) = match bound {
            Bound::Ci => (1, 40, None),
            // A cap: stateright counts every state it checks, revisits included.
            Bound::Deep => (2, 60, Some(3_000_000)),
        };
        LockModel {
            cancellable: vec![true; plans.len()],
            plans,
            max_faults,
            max_cancels: 1,
            horizon,
            faults: Faults {
                lose_message: true,
                lose_reply: true,
                // Lost acquire replies, with their read-back and orphan check: 1.9 million
                // states at the CI bound (744,333 without).
                lose_acquire: true,
                crash: true,
                restart: true,
                // At the CI bound they would double the states (a million); `--deep` and the
                // walks have them.
                restart_aof: bound == Bound::Deep,
            },
            scripts: Scripts::default(),
            mutation: Mutation::None,
            stop_early: false,
            stalled_retries: false,
            target_states,
        }
    }

    /// Runs the BFS checker over every interleaving within the bounds; prints each `always`
    /// counterexample's trace to stderr.
    pub fn run(self, threads: usize) -> Outcome {
        let run = super::Run {
            name: "lock",
            threads,
            stop_early: self.stop_early,
            target_states: self.target_states,
        };
        super::run_bfs(self, run, trace::render)
    }
}

impl Model for LockModel {
    type State = LockState;
    type Action = Action;

    fn init_states(&self) -> Vec<LockState> {
        let server = crate::server::Server::new(crate::server::Version::Redis7);
        vec![LockState {
            server,
            clients: vec![state::Client::new(); self.plans.len()],
            faults: 0,
            cancels: 0,
            free_since: Some(0),
            freed_by_expiry: false,
            restarted_from_aof: false,
        }]
    }

    fn actions(&self, state: &LockState, actions: &mut Vec<Action>) {
        self.enabled(state, actions);
    }

    fn next_state(&self, state: &LockState, action: Action) -> Option<LockState> {
        Some(self.step(state, action, &mut None))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}

/// Checks the lock's model within `bound`.
pub fn check(bound: Bound) -> Report {
    LockModel::new(bound).run(2).report
}

/// Random walks over the lock's model at the deep bound (see [`super::Walk`]).
pub fn walk(walk: super::Walk) -> Report {
    super::run_walk(LockModel::new(Bound::Deep), "lock", walk, trace::render).report
}
