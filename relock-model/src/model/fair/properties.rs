//! What the fair lock model checks: five `always` properties (a counterexample is a bug) and
//! `sometimes` properties showing the situations they are about are reached at all.

use stateright::Property;

use super::state::{
    field, queue, redis_holds, score, Cancelled, FairState, Phase, ALIVE, RENEW_EVERY, TIMEOUT,
};
use super::FairModel;

/// (1) Mutual exclusion as the clients believe it.
pub const MUTEX: &str =
    "mutual exclusion: no two owners believe they hold it before their deadlines";
/// (2) Strict FIFO order among live waiters.
pub const FIFO: &str =
    "strict FIFO: no client takes the lock while a live waiter that queued before it waits";
/// (3) No lost wake-up.
pub const WAKE_UP: &str =
    "no lost wake-up: a live waiter heading a free lock's queue is woken or its timer is due";
/// (4) Nothing left behind by a cancelled acquire.
pub const LEAVE_CLEAN: &str =
    "a cancelled acquire, once left, is in neither the queue, the deadlines nor the liveness";
/// (5) A replayed release counts once.
pub const COUNTS: &str = "hold count on Redis equals the owner's (a replayed release counts once)";

/// The properties, `always` first.
pub fn all() -> Vec<Property<FairModel>> {
    vec![
        Property::always(MUTEX, |_, s| mutual_exclusion(s)),
        Property::always(FIFO, |_, s: &FairState| s.overtaken.is_none()),
        Property::always(WAKE_UP, |m: &FairModel, s| {
            no_lost_wake_up(s, m.strict_wake_up)
        }),
        Property::always(LEAVE_CLEAN, |_, s| leave_clean(s)),
        Property::always(COUNTS, |_, s| counts_agree(s)),
        Property::sometimes("two waiters queue behind a holder", |_, s: &FairState| {
            let now = s.server.now();
            queue(&s.server).len() >= 2 && s.clients.iter().any(|c| c.believes_held(now))
        }),
        Property::sometimes(
            "a queued waiter takes the lock with another queued behind it",
            |_, s: &FairState| s.clients.iter().any(|c| c.handed),
        ),
        Property::sometimes(
            "a dead waiter's place was dropped and a live one holds",
            |_, s: &FairState| {
                let now = s.server.now();
                let q = queue(&s.server);
                let dropped = s
                    .clients
                    .iter()
                    .enumerate()
                    .any(|(i, c)| c.died_queued && !q.contains(&field(i).into_bytes()));
                dropped && s.clients.iter().any(|c| c.believes_held(now))
            },
        ),
        Property::sometimes("a waiter is woken by its message", |_, s: &FairState| {
            s.clients
                .iter()
                .any(|c| c.woken && matches!(c.phase, Phase::Waiting { .. }))
        }),
        Property::sometimes(
            "a waiter heads a free lock's queue, not woken (its timer must fire)",
            |_, s: &FairState| {
                s.free_since.is_some()
                    && s.head.is_some_and(|(i, _, _)| {
                        let c = &s.clients[i as usize];
                        matches!(c.phase, Phase::Waiting { .. }) && !c.woken && !c.inbox
                    })
            },
        ),
        Property::sometimes("a cancelled waiter left the queue", |_, s: &FairState| {
            s.clients.iter().any(|c| c.cancelled == Cancelled::Left)
        }),
        // Met at once when the bound loses no acquire (`check`'s CI bound, for time).
        Property::sometimes(
            "an acquire's reply was lost after its script took the hold",
            |m: &FairModel, s: &FairState| {
                !m.lose_acquire
                    || s.clients.iter().enumerate().any(|(i, c)| match c.phase {
                        Phase::ReadingBack { held_before, .. } => {
                            redis_holds(&s.server, i) > u64::from(held_before)
                        }
                        _ => false,
                    })
            },
        ),
        Property::sometimes(
            "an acquire cancelled with its outcome unknown left a hold its orphan check finds",
            |m: &FairModel, s: &FairState| {
                !m.lose_acquire
                    || s.clients.iter().enumerate().any(|(i, c)| {
                        c.phase == Phase::OrphanCheck
                            && c.cancelled != Cancelled::No
                            && redis_holds(&s.server, i) > 0
                    })
            },
        ),
        Property::sometimes(
            "a release reply was lost and the release is sent again",
            |_, s: &FairState| {
                s.clients
                    .iter()
                    .any(|c| matches!(c.phase, Phase::Releasing { .. }))
            },
        ),
    ]
}

/// No two clients both believe they hold the lock.
pub fn mutual_exclusion(s: &FairState) -> bool {
    let now = s.server.now();
    s.clients.iter().filter(|c| c.believes_held(now)).count() <= 1
}

/// A live client waiting while its field heads a free lock's queue (by the scripts' rule of
/// dead heads), with no message for it received or on its way: its timer fires no later than
/// the moment it became the head of a free lock. Two waits are bounded by the renewal (W/3)
/// only: after a lost message, and (unless `strict`) when it became head behind a waiter that
/// left while the lock was held, its timer still that waiter's death, and the lock then lapsed
/// (no message: a lapse publishes nothing, and the leave found the lock held).
pub fn no_lost_wake_up(s: &FairState, strict: bool) -> bool {
    let (Some((head, became, busy)), Some(free)) = (s.head, s.free_since) else {
        return true;
    };
    let c = &s.clients[head as usize];
    match c.phase {
        Phase::Waiting { until } if !c.woken && !c.inbox => {
            let relaxed = c.missed || (!strict && busy && c.behind);
            let slack = if relaxed { RENEW_EVERY } else { 0 };
            until <= free.max(became) + slack
        }
        _ => true,
    }
}

/// A cancelled acquire whose leave ran has no place in the queue, the deadlines or the
/// liveness record.
pub fn leave_clean(s: &FairState) -> bool {
    s.clients.iter().enumerate().all(|(i, c)| {
        if c.cancelled != Cancelled::Left {
            return true;
        }
        let f = field(i).into_bytes();
        !queue(&s.server).contains(&f)
            && score(&s.server, TIMEOUT, &f).is_none()
            && score(&s.server, ALIVE, &f).is_none()
    })
}

/// No operation in flight (a release's retry, an acquire whose outcome is unknown: reading
/// back, or its orphan check pending): the owner's hold count on Redis is what it believes it
/// holds (while its holds live), plus at most the holds of its lost generation that Redis may
/// still count (its stale guards'); an owner holding nothing has no field.
pub fn counts_agree(s: &FairState) -> bool {
    let now = s.server.now();
    s.clients.iter().enumerate().all(|(i, c)| {
        if matches!(c.phase, Phase::Crashed | Phase::Releasing { .. }) || c.unknown() {
            return true;
        }
        let redis = redis_holds(&s.server, i);
        if c.holds == 0 {
            redis == 0
        } else if now < c.deadline {
            // Plus at most the holds of a lost generation Redis may still count.
            let holds = u64::from(c.holds);
            (holds..=holds + u64::from(c.stale)).contains(&redis)
        } else {
            true
        }
    })
}
