//! The [`FairLock`](relock::FairLock)'s model (Redisson's `RFairLock` protocol): two or three
//! clients (a process each, one task as the owner) run a plan of `lock_with_lease()` and
//! `unlock()` calls against the simulated server, which runs relock's own fair scripts
//! (`relock::testing::scripts::FAIR_*`) on the queue `redisson_lock_queue:{lock}`, the deadlines
//! `redisson_lock_timeout:{lock}` and the liveness record `relock_fair_alive:{lock}`, while the
//! world loses messages and replies, crashes clients and lets time pass. Each client is the
//! state machine relock's code makes of it:
//!
//! | step | relock |
//! |---|---|
//! | [`Action::Acquire`] | `lock::attempt::Hold::try_once` with `FairTurns::ask` = `Ask::Queue` (FAIR_ACQUIRE "wait": queues, or renews the place), then `FairTurns::wait_turn`'s bound: the hint, at most W/3 |
//! | [`Action::Subscribe`] | `FairTurns::start` (`wait::subscribe` on `<channel>:<field>`), then the attempt `until_taken` makes at once |
//! | [`Action::AcquireLost`] | `Hold::try_once` whose request or reply is lost (`Error::is_ambiguous`): the script ran only if the reply was lost |
//! | [`Action::ReadBack`] | `Sending::read_back` (INSPECT on the lock hash: the owner's field counting more holds than its guards before the send means taken), then `Sending::taken`, or `lock()` fails: its `FairTurns` drop (`LeaveQueue`'s drop) and the task calls `lock()` again |
//! | [`Action::ReadBackFails`] | the read-back's own error: `lock()` fails, `Sending` dropped armed (`OrphanCheck`), its turns dropped (`LeaveQueue`) |
//! | [`Action::OrphanCheck`] | `OrphanCheck`'s drop, in the background: INSPECT, then `Hold::release_orphan` (FAIR_RELEASE beside the acquire: its lease kept, a replay key written) if the field counts more holds than the owner's guards |
//! | [`Action::Cancel`], [`Action::Leave`] | dropping a waiting `lock()` (or one reading back: its `OrphanCheck` too): `LeaveQueue`'s drop (FAIR_LEAVE in the background), as a failed `lock()`'s |
//! | [`Action::Release`], [`Action::ReleaseReplyLost`] | `lock::release::Hold::release_as` (FAIR_RELEASE), `wait::until_answered`, `Outgoing::settle`, the sweeper's delete |
//! | [`Action::DropLost`] | `lock::attempt::Sending::gate` after a local lapse: `Registry::lapsed_hold`, `Hold::release_orphan` (FAIR_RELEASE with a TTL of 0) |
//! | [`Action::Deliver`], [`Action::LoseMessage`] | the hub waking the waiter (`pubsub::Waiter::wait` returns), or the message lost |
//! | [`Action::Crash`], [`Action::Tick`] | the world |
//!
//! The local deadline is the registry's lapse moment of a fixed lease (the send time of the
//! acquire, plus the lease).

use stateright::{Model, Property};

use super::{Bound, Report};

mod acquire;
mod calls;
pub mod properties;
pub mod state;
pub mod steps;
mod trace;

pub use state::{FairState, Op};
pub use steps::{Action, Loss};

/// The script texts the model runs: relock's own, or a mutant's.
#[derive(Clone, Debug)]
pub struct Scripts {
    /// FAIR_ACQUIRE.
    pub acquire: String,
    /// FAIR_RELEASE.
    pub release: String,
    /// FAIR_LEAVE.
    pub leave: String,
    /// INSPECT (the read-back and the orphan check).
    pub inspect: String,
}

impl Default for Scripts {
    fn default() -> Scripts {
        use relock::testing::scripts::{FAIR_ACQUIRE, FAIR_LEAVE, FAIR_RELEASE, INSPECT};
        Scripts {
            acquire: FAIR_ACQUIRE.to_string(),
            release: FAIR_RELEASE.to_string(),
            leave: FAIR_LEAVE.to_string(),
            inspect: INSPECT.to_string(),
        }
    }
}

/// A deliberate bug in the modelled client, to show the checker finds it (never relock's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The client as relock's code is.
    None,
    /// A waiter sleeps the whole hint, without renewing its place every W/3.
    NoRenewCap,
    /// A cancelled waiter never leaves the queue.
    SkipLeave,
    /// relock's client before it dropped a lapsed hold before acquiring again and sent 0 ("free
    /// the lock whatever its count") on its last release: an owner re-entered a hold it lost
    /// locally while Redis still had it, and its last release kept that hold 1 ms.
    ReentersLostHold,
    /// An acquire whose reply was lost is taken as not taken, without a read-back: the hold
    /// its script took stays on Redis with no guard.
    SkipReadBack,
}

/// The fair lock model and its bounds.
#[derive(Clone, Debug)]
pub struct FairModel {
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
    /// A published message may be lost.
    pub lose_message: bool,
    /// A release's reply may be lost after its script ran.
    pub lose_reply: bool,
    /// An acquire's request or reply may be lost (the client reads the lock back), or its
    /// read-back fail too (the orphan check reads it in the background).
    pub lose_acquire: bool,
    /// A failed `lock()`'s background leave may run after the owner's next `lock()` sent its
    /// first attempt, as relock's client allowed before the model found it (`LeaveQueue`'s
    /// drop spawned the leave, and nothing ordered it before the owner's next acquire): the
    /// stale leave takes the new waiter's place out of the queue, and a waiter that asked after
    /// it takes the lock first (strict FIFO fails). relock's client now counts the leave in
    /// flight and the owner's next acquire waits for it (`LeavingQueue`): the model with this
    /// off.
    pub leave_races: bool,
    /// A client's process may die.
    pub crash: bool,
    /// The scripts the server runs.
    pub scripts: Scripts,
    /// A client bug, or none.
    pub mutation: Mutation,
    /// Stop at the first `always` violation (for mutants).
    pub stop_early: bool,
    /// Stop after this many distinct states (0: none).
    pub target_states: usize,
    /// Hold the head of a free lock's queue to its message or timer even when it became head
    /// behind a waiter that left while the lock was held, and the lock then lapsed: on in
    /// relock's own check since FAIR_LEAVE wakes the new head whenever the head leaves (it
    /// woke it only of a free lock, which bounded that wait by the renewal, W/3, only).
    pub strict_wake_up: bool,
}

pub use super::Outcome;

impl FairModel {
    /// The model at `bound` with relock's own scripts and client.
    pub fn new(bound: Bound) -> FairModel {
        use Op::{Lock, Unlock};
        let (plans, max_faults, horizon, target_states) = match bound {
            // Three clients taking it once each, one fault of any kind, one cancel.
            Bound::Ci => (vec![vec![Lock, Unlock]; 3], 1, 20, 0),
            // A cap: stateright counts every state it checks, revisits included.
            Bound::Deep => (
                vec![
                    vec![Lock, Lock, Unlock, Unlock, Lock, Unlock],
                    vec![Lock, Unlock],
                    vec![Lock, Unlock],
                ],
                2,
                40,
                3_000_000,
            ),
        };
        FairModel {
            cancellable: vec![true; plans.len()],
            plans,
            max_faults,
            max_cancels: 1,
            horizon,
            lose_message: true,
            lose_reply: true,
            // Lost acquire replies, with their read-back and orphan check: 454,718 states at
            // the CI bound (96,665 without).
            lose_acquire: true,
            leave_races: false,
            crash: true,
            scripts: Scripts::default(),
            mutation: Mutation::None,
            stop_early: false,
            target_states,
            strict_wake_up: true,
        }
    }

    /// Runs stateright's BFS over every interleaving within the bounds; prints each `always`
    /// counterexample's trace to stderr.
    pub fn run(self) -> Outcome {
        let run = super::Run {
            name: "fair",
            threads: 2,
            stop_early: self.stop_early,
            target_states: (self.target_states > 0).then_some(self.target_states),
        };
        super::run_bfs(self, run, trace::render)
    }
}

impl Model for FairModel {
    type State = FairState;
    type Action = Action;

    fn init_states(&self) -> Vec<FairState> {
        let server = crate::server::Server::new(crate::server::Version::Redis7);
        vec![FairState {
            server,
            clients: vec![state::Client::new(); self.plans.len()],
            faults: 0,
            cancels: 0,
            next_ticket: 0,
            overtaken: None,
            head: None,
            free_since: Some(0),
        }]
    }

    fn actions(&self, state: &FairState, actions: &mut Vec<Action>) {
        self.enabled(state, actions);
    }

    fn next_state(&self, state: &FairState, action: Action) -> Option<FairState> {
        Some(self.step(state, action, &mut None))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}

/// Checks the fair lock's model within `bound`.
pub fn check(bound: Bound) -> Report {
    FairModel::new(bound).run().report
}

/// Random walks over the fair lock's model at the deep bound (see [`super::Walk`]).
pub fn walk(walk: super::Walk) -> Report {
    super::run_walk(FairModel::new(Bound::Deep), "fair", walk, trace::render).report
}
