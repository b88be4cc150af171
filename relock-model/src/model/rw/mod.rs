//! The [`RwLock`](relock::RwLock)'s model (Redisson's `RReadWriteLock` protocol): two or three
//! clients (a process each, one task as the owner) run a plan of read and write `lock()`,
//! `unlock()` and guard drops against the simulated server, which runs relock's own scripts
//! (`relock::testing::scripts`), while the world loses messages, replies and acquire requests,
//! crashes clients, restarts the server (empty, or from an AOF with every write) and lets time
//! pass. Each client is the state machine relock's code makes of it, with a read side and a
//! write side (two holds, two fields, two leases):
//!
//! | step | relock |
//! |---|---|
//! | [`Action::Acquire`] | `lock::attempt::Hold::try_once` through `Read::acquire` (RW_READ_ACQUIRE) / `Write::acquire` (RW_WRITE_ACQUIRE, claiming on every attempt: `RwTurns::ask`, `ClaimGuard::claim`); `wait::until_taken`; the wait bound of `RwTurns::wait_turn`; `Error::UpgradeWouldDeadlock` (`scripts::rw::acquired`) ending the task |
//! | [`Action::Subscribe`] | `RwTurns::start` (`wait::subscribe`), then the attempt `until_taken` makes at once |
//! | [`Action::DropLost`] | `lock::attempt::Sending::gate` before an acquire of a side whose holds lapsed locally: `Registry::lapsed_hold`, `Hold::release_orphan` (a TTL of 0: `Hold::outgoing`); the gate's wait for the side's release in flight (`Registry::acquiring`) |
//! | [`Action::AcquireLost`] | `Hold::try_once` whose request or reply is lost (`Error::is_ambiguous`), after `Sending::arm` counted the side's live guards (`Sending::held_before`) |
//! | [`Action::ReadBack`] | `Sending::read_back` (INSPECT with the side's field, the writer's ending in `:write`, and the view `""`: `scripts::plain::inspect`), then `Sending::taken` (`Registry::register`, `RwTurns::acquired`), or `Sending::not_taken` and the failed `lock()` dropping its waiter and turns (the task calls it again) |
//! | [`Action::ReadBackFails`], [`Action::OrphanCheck`] | the read-back's error: `lock()` fails, the `Sending` dropped armed; `OrphanCheck`'s drop (`Background::must_run`: INSPECT, then `Hold::release_orphan` while the acquire still counts in flight, so `Hold::outgoing` keeps its lease as the TTL and writes a replay key) |
//! | [`Action::Cancel`], [`Action::Unclaim`] | dropping a waiting `lock()` (or one whose attempt's outcome is unknown: its orphan check follows), or an acquire that failed: `pubsub::Waiter`'s drop, `ClaimGuard`'s drop (`Write::unclaim`: UNCLAIM with a wake, in the background) |
//! | [`Action::StartRelease`], [`Action::Release`], [`Action::ReleaseReplyLost`] | `guard.unlock()` (the task waits) or a guard's drop (`Hold::resume`, in the background): `lock::release::Hold::release_as` (RW_READ_RELEASE / RW_WRITE_RELEASE, replay key always written: `always_replays`), `wait::until_answered`, `Outgoing::settle`, the sweeper's delete; a guard of a lost generation sends nothing (`Leaving::Lost`) |
//! | [`Action::Renew`] | `watchdog::Watchdog::renew_all`: `Read::renew_all` (RW_RENEW_READ), the writer's default (LOCK_RENEW); `Registry::renewed` / `found_gone` |
//! | [`Action::Deliver`], [`Action::LoseMessage`] | the hub waking every waiter of a client (`rw::wakes_all`), or the message lost |
//! | [`Action::Crash`], [`Action::Restart`], [`Action::RestartFromAof`], [`Action::Tick`] | the world |
//!
//! Left out: several tasks of one process (one owner per client), `try_lock` / `lock_with_lease`
//! (a fixed lease and the lapsed-reader pruning of `Read::taken`), `force_unlock`, the shutdown
//! release (RW_ABANDON), replica sync, a late answer (`Try::Late`), the downgrade (a writer
//! taking read holds) unless a plan asks for it, several releases of one side in flight, a
//! release that fails (every send lost: the hold is left to its lease) and an orphan check that
//! fails (its INSPECT unanswered: the same).

use stateright::{Model, Property};

use super::{Bound, Report};

mod acquire;
mod calls;
pub mod properties;
pub mod state;
pub mod steps;
mod trace;

pub use state::{Op, RwState, Side};
pub use steps::{Action, Loss};

/// The script texts the model runs: relock's own, or a mutant's.
#[derive(Clone, Debug)]
pub struct Scripts {
    /// RW_READ_ACQUIRE.
    pub read_acquire: String,
    /// RW_WRITE_ACQUIRE.
    pub write_acquire: String,
    /// RW_READ_RELEASE.
    pub read_release: String,
    /// RW_WRITE_RELEASE.
    pub write_release: String,
    /// RW_RENEW_READ.
    pub renew_read: String,
    /// LOCK_RENEW (the writer's renewal).
    pub renew: String,
    /// UNCLAIM.
    pub unclaim: String,
    /// INSPECT (the read-back and the orphan check).
    pub inspect: String,
}

impl Default for Scripts {
    fn default() -> Scripts {
        use relock::testing::scripts::{
            INSPECT, LOCK_RENEW, RW_READ_ACQUIRE, RW_READ_RELEASE, RW_RENEW_READ, RW_WRITE_ACQUIRE,
            RW_WRITE_RELEASE, UNCLAIM,
        };
        Scripts {
            read_acquire: RW_READ_ACQUIRE.to_string(),
            write_acquire: RW_WRITE_ACQUIRE.to_string(),
            read_release: RW_READ_RELEASE.to_string(),
            write_release: RW_WRITE_RELEASE.to_string(),
            renew_read: RW_RENEW_READ.to_string(),
            renew: LOCK_RENEW.to_string(),
            unclaim: UNCLAIM.to_string(),
            inspect: INSPECT.to_string(),
        }
    }
}

/// A deliberate bug in the modelled client, to show the checker finds it (never relock's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// The client as relock's code is.
    None,
    /// A cancelled writer skips withdrawing its claim.
    SkipUnclaim,
    /// A holder believes it holds until it releases, whatever its local deadline says.
    IgnoreDeadline,
    /// A release's retry says it was never sent before (ARGV\[7\] always 0).
    ReplayFlagZero,
    /// An acquire whose reply was lost is taken as not taken, without a read-back: the hold
    /// its script took stays on Redis with no guard.
    SkipReadBack,
}

/// Which faults the world may inject.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    /// A published message never reaches a subscriber.
    pub lose_message: bool,
    /// A release's script runs, its reply is lost.
    pub lose_reply: bool,
    /// A read or write acquire's request or reply is lost (the client reads the lock back), or
    /// its read-back fails too (the orphan check reads it in the background).
    pub lose_acquire: bool,
    /// A client's process dies.
    pub crash: bool,
    /// The server restarts empty (down for a lease first).
    pub restart: bool,
    /// The server restarts from an AOF that has every write (`appendfsync always`), down for
    /// a third of a lease first: the holds outlive it.
    pub restart_aof: bool,
}

/// The read-write lock model and its bounds.
#[derive(Clone, Debug)]
pub struct RwModel {
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
    /// Stop after this many distinct states (`None`: explore the whole bounded space).
    pub target_states: Option<usize>,
}

pub use super::Outcome;

impl RwModel {
    /// The model at `bound` with relock's own scripts and client: client 0 reads, drops its
    /// read guard and asks to write at once (refused as an upgrade while the drop's release is
    /// on its way, as in commit `bb3725d`), client 1 reads, and at `Deep` client 2 writes.
    pub fn new(bound: Bound) -> RwModel {
        use Op::{Drop, Lock, Unlock};
        use Side::{Read, Write};
        let mut plans = vec![
            vec![Lock(Read), Drop(Read), Lock(Write), Unlock(Write)],
            vec![Lock(Read), Unlock(Read)],
        ];
        let (max_faults, horizon, target_states) = match bound {
            // The whole bounded space (about 151,000 states, lost acquires included: 73,000
            // without them).
            Bound::Ci => (1, 40, None),
            // A cap: stateright counts every state it checks, revisits included.
            Bound::Deep => {
                plans.push(vec![Lock(Write), Unlock(Write)]);
                (2, 60, Some(3_000_000))
            }
        };
        RwModel {
            cancellable: vec![true; plans.len()],
            plans,
            max_faults,
            max_cancels: 1,
            horizon,
            faults: Faults {
                lose_message: true,
                lose_reply: true,
                // Lost acquire requests and replies, read-backs and orphan checks double the
                // states at the CI bound (151,000 from 73,000), well within its time: on at
                // every bound.
                lose_acquire: true,
                crash: true,
                restart: true,
                restart_aof: true,
            },
            scripts: Scripts::default(),
            mutation: Mutation::None,
            stop_early: false,
            target_states,
        }
    }

    /// Runs the BFS checker over every interleaving within the bounds; prints each `always`
    /// counterexample's trace to stderr.
    pub fn run(self, threads: usize) -> Outcome {
        let run = super::Run {
            name: "rw",
            threads,
            stop_early: self.stop_early,
            target_states: self.target_states,
        };
        super::run_bfs(self, run, trace::render)
    }
}

impl Model for RwModel {
    type State = RwState;
    type Action = Action;

    fn init_states(&self) -> Vec<RwState> {
        let server = crate::server::Server::new(crate::server::Version::Redis7);
        vec![RwState {
            server,
            clients: vec![state::Client::new(); self.plans.len()],
            faults: 0,
            cancels: 0,
            free_since: Some(0),
            freed_by_expiry: false,
        }]
    }

    fn actions(&self, state: &RwState, actions: &mut Vec<Action>) {
        self.enabled(state, actions);
    }

    fn next_state(&self, state: &RwState, action: Action) -> Option<RwState> {
        Some(self.step(state, action, &mut None))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}

/// Checks the read-write lock's model within `bound`.
pub fn check(bound: Bound) -> Report {
    RwModel::new(bound).run(2).report
}

/// Random walks over the rw lock's model at the deep bound (see [`super::Walk`]).
pub fn walk(walk: super::Walk) -> Report {
    super::run_walk(RwModel::new(Bound::Deep), "rw", walk, trace::render).report
}
