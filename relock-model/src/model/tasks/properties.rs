//! What the tasks model checks: four `always` properties (a counterexample is a bug) and
//! `sometimes` beside them, showing the situations they are about are reached at all.

use stateright::Property;

use super::state::{
    claim_holder, field, redis_holds, Phase, Stage, TasksState, COMMAND_TIMEOUT, GRACE, LEASE,
    WINDOW,
};
use super::TasksModel;

/// Mutual exclusion among every task of every process.
pub const MUTEX: &str =
    "mutual exclusion: no two tasks believe they hold it before their deadlines";
/// No lost wake-up, with several waiters in a process.
pub const WAKE_UP: &str =
    "no lost wake-up: on a free lock some waiter tries within the claim window, grace and a reply";
/// The hand-off grace holds.
pub const HANDOFF: &str =
    "a release that woke other processes is not taken back by its own process within the grace";
/// Nothing left behind by a cancelled acquire.
pub const CANCEL_CLEAN: &str = "a cancelled acquire leaves no claim and no hold once cleaned up";

/// The properties, `always` first.
pub fn all() -> Vec<Property<TasksModel>> {
    vec![
        Property::always(MUTEX, |_, s| mutual_exclusion(s)),
        Property::always(WAKE_UP, |_, s| no_lost_wake_up(s)),
        Property::always(HANDOFF, |_, s: &TasksState| !s.barged),
        Property::always(CANCEL_CLEAN, |_, s| cancel_clean(s)),
        Property::sometimes("two tasks of one process wait", |_, s: &TasksState| {
            s.processes.iter().any(|p| p.queue.len() >= 2)
        }),
        Property::sometimes(
            "a waiter parks behind another of its process",
            |_, s: &TasksState| {
                waiting(s, |stage| {
                    matches!(stage, Stage::Park { .. } | Stage::ParkOnce)
                })
            },
        ),
        Property::sometimes(
            "a waiter waits out its process's hand-off grace",
            |_, s: &TasksState| waiting(s, |stage| stage == Stage::Grace),
        ),
        Property::sometimes(
            "a woken waiter waits for its process's release reply",
            |_, s: &TasksState| {
                waiting(s, |stage| stage == Stage::Reply)
                    && s.processes.iter().any(|p| p.awaiting_reply > 0)
            },
        ),
        Property::sometimes(
            "a waiter took a wake-up passed on by one that left",
            |_, s: &TasksState| {
                s.tasks.iter().any(|gone| {
                    gone.cancelled
                        && s.tasks
                            .iter()
                            .any(|task| task.process == gone.process && task.woken && task.waits())
                })
            },
        ),
    ]
}

/// Whether a task waits at a stage `stage` accepts.
fn waiting(s: &TasksState, stage: fn(Stage) -> bool) -> bool {
    s.tasks.iter().any(|task| match task.phase {
        Phase::Waiting { stage: at, .. } => stage(at),
        _ => false,
    })
}

/// No two tasks both believe they hold the lock.
pub fn mutual_exclusion(s: &TasksState) -> bool {
    let now = s.server.now();
    s.tasks
        .iter()
        .filter(|task| task.believes_held(now))
        .count()
        <= 1
}

/// While the lock is free and a task waits, a step is pending that makes one of them try: one
/// of them can run now (a wake-up in hand or on its way to the process's first waiter not
/// woken yet, a verdict in, its turn come), or the soonest wait's bound is no later than the
/// claim window, the grace and two command timeouts after the lock became free (or a waiter
/// registered on the free lock); after a lost message or an expiry (no message then), a lease
/// more. Plus 1 ms: a key lives through its
/// expiry's millisecond.
pub fn no_lost_wake_up(s: &TasksState) -> bool {
    let Some(free) = s.free_since else {
        return true;
    };
    // `None`: it can run now; else the bound of its wait.
    let due = |t: usize| -> Option<Option<u64>> {
        let task = &s.tasks[t];
        let process = &s.processes[task.process as usize];
        match task.phase {
            Phase::Subscribing { .. } | Phase::Ready => Some(None),
            Phase::Waiting { stage, until } => {
                let next_woken = process.inbox > 0
                    && process.queue.iter().find(|&&q| !s.tasks[q as usize].woken)
                        == Some(&(t as u8));
                let ready = match stage {
                    Stage::Reply => process.awaiting_reply == 0,
                    _ => task.woken || next_woken,
                };
                Some((!ready).then_some(until))
            }
            _ => None,
        }
    };
    let dues: Vec<Option<u64>> = (0..s.tasks.len()).filter_map(due).collect();
    if dues.iter().any(Option::is_none) {
        return true;
    }
    let Some(soonest) = dues.into_iter().flatten().min() else {
        return true;
    };
    let mut slack = WINDOW + GRACE + 2 * COMMAND_TIMEOUT + 1;
    if s.unannounced {
        slack += LEASE;
    }
    soonest <= free.max(s.registered_at) + slack
}

/// Once a cancelled acquire's cleanup ran, no claim names its task and it holds nothing.
pub fn cancel_clean(s: &TasksState) -> bool {
    (0..s.tasks.len()).all(|t| {
        let task = &s.tasks[t];
        if !task.cancelled || task.phase == Phase::Crashed {
            return true;
        }
        let field = field(s, t);
        claim_holder(&s.server).as_deref() != Some(field.as_str())
            && redis_holds(&s.server, &field) == 0
    })
}
