//! What the lock model checks: five `always` properties (a counterexample is a bug) and a
//! `sometimes` beside each, showing the situation it is about is reached at all.

use stateright::Property;

use super::state::{claim, field, redis_holds, Cancelled, LockState, Op, Phase, LEASE, WINDOW};
use super::LockModel;

/// (1) Mutual exclusion as the clients believe it.
pub const MUTEX: &str =
    "mutual exclusion: no two owners believe they hold it before their deadlines";
/// (2) No lost wake-up.
pub const WAKE_UP: &str = "no lost wake-up: a waiter on a free lock tries within the claim window";
/// (2) A free lock's claim lapses within the claim window.
pub const CLAIM_LAPSES: &str = "a free lock's claim lapses within the claim window";
/// (3) Nothing left behind by a cancelled acquire.
pub const CANCEL_CLEAN: &str = "a cancelled acquire leaves no claim and no hold once cleaned up";
/// (4) A replayed release counts once.
pub const COUNTS: &str = "hold count on Redis equals the owner's (a replayed release counts once)";

/// The properties, `always` first.
pub fn all() -> Vec<Property<LockModel>> {
    vec![
        Property::always(MUTEX, |_, s| mutual_exclusion(s)),
        Property::always(WAKE_UP, |_, s| no_lost_wake_up(s)),
        Property::always(CLAIM_LAPSES, |_, s| claim_lapses(s)),
        Property::always(CANCEL_CLEAN, |_, s| cancel_clean(s)),
        Property::always(COUNTS, |_, s| counts_agree(s)),
        Property::sometimes("two clients contend and one waits", |_, s: &LockState| {
            let now = s.server.now();
            let waits = s
                .clients
                .iter()
                .any(|c| matches!(c.phase, Phase::Waiting { .. }));
            waits && s.clients.iter().any(|c| c.believes_held(now))
        }),
        Property::sometimes("a waiter is woken by a message", |_, s: &LockState| {
            s.clients
                .iter()
                .any(|c| c.woken && matches!(c.phase, Phase::Waiting { .. }))
        }),
        Property::sometimes(
            "a lock freed by a release carries a claim",
            |_, s: &LockState| {
                s.free_since.is_some() && !s.freed_by_expiry && claim(&s.server).is_some()
            },
        ),
        Property::sometimes(
            "an acquire cancelled while waiting withdrew its claim",
            |_, s: &LockState| {
                s.clients
                    .iter()
                    .any(|c| c.cancelled == Cancelled::Withdrawn)
            },
        ),
        Property::sometimes(
            "a re-entered hold's release reply was lost and is replayed",
            |_, s: &LockState| {
                s.clients
                    .iter()
                    .any(|c| c.holds >= 2 && matches!(c.phase, Phase::Releasing { .. }))
            },
        ),
        Property::sometimes(
            "a lock was released after a restart from the AOF (when the bound has them)",
            |m: &LockModel, s: &LockState| {
                let released = s.free_since.is_some() && !s.freed_by_expiry;
                !m.faults.restart_aof || (s.restarted_from_aof && released)
            },
        ),
        Property::sometimes(
            "an acquire's reply was lost after its script took the hold (when the bound has them)",
            |m: &LockModel, s: &LockState| {
                !m.faults.lose_acquire
                    || s.clients.iter().enumerate().any(|(i, c)| match c.phase {
                        Phase::ReadingBack { held_before, .. } => {
                            redis_holds(&s.server, i) > u64::from(held_before)
                        }
                        _ => false,
                    })
            },
        ),
        Property::sometimes(
            "an acquire cancelled with its outcome unknown left a hold its orphan check finds \
             (when the bound has lost acquires)",
            |m: &LockModel, s: &LockState| {
                !m.faults.lose_acquire
                    || s.clients.iter().enumerate().any(|(i, c)| {
                        c.phase == (Phase::OrphanCheck { cancelled: true })
                            && redis_holds(&s.server, i) > 0
                    })
            },
        ),
        Property::sometimes(
            "an owner locks again after a local loss while Redis still counts the lost hold",
            |m: &LockModel, s: &LockState| {
                let now = s.server.now();
                let mut clients = s.clients.iter().enumerate();
                clients.any(|(i, c)| {
                    let locks = m.plans[i].get(c.pc as usize) == Some(&Op::Lock);
                    let lapsed = c.holds > 0 && (c.lost || now >= c.deadline);
                    c.phase == Phase::Idle && locks && lapsed && redis_holds(&s.server, i) > 0
                })
            },
        ),
    ]
}

/// No two clients both believe they hold the lock: each uses a hold, none known lost, and
/// neither's local deadline has passed.
pub fn mutual_exclusion(s: &LockState) -> bool {
    let now = s.server.now();
    s.clients.iter().filter(|c| c.believes_held(now)).count() <= 1
}

/// A client waiting on a free lock (no message reached it or is on its way) has its timer set
/// no later than the claim window after the lock became free; after a lost message, or when
/// the lock went by expiry rather than a release, no later than a lease and the claim window. Plus 1 ms: a key lives through its expiry's millisecond
/// (as on Redis), so a claim cut to the window still answers a 1 ms wait at its end.
pub fn no_lost_wake_up(s: &LockState) -> bool {
    let Some(free) = s.free_since else {
        return true;
    };
    s.clients.iter().all(|c| match c.phase {
        Phase::Waiting { until } if !c.woken && !c.inbox => {
            // A lock gone by expiry (a holder that crashed or stalled) was freed by no release
            // to wake anyone: a waiter sleeps to its timer, which a lease bounds, as after a
            // lost message.
            let slack = if c.missed || s.freed_by_expiry {
                LEASE + WINDOW
            } else {
                WINDOW
            } + 1;
            until <= free + slack
        }
        _ => true,
    })
}

/// While the lock is free by a release, its claim expires no later than the claim window after
/// it became free. A lock gone by expiry had no release to cut its claim: the next acquire of
/// another field cuts it to the window (`lua/common/claim.lua`), and `no_lost_wake_up` bounds
/// every other waiter's wait from the moment the lock became free either way (a claimant that died delays the others by no more than that).
pub fn claim_lapses(s: &LockState) -> bool {
    let Some(free) = s.free_since.filter(|_| !s.freed_by_expiry) else {
        return true;
    };
    match claim(&s.server) {
        Some((_, Some(expires))) => expires <= free + WINDOW,
        _ => true,
    }
}

/// Once a cancelled acquire's cleanup ran, no claim names its owner and it holds nothing.
pub fn cancel_clean(s: &LockState) -> bool {
    s.clients.iter().enumerate().all(|(i, c)| {
        if c.cancelled == Cancelled::No || c.phase == Phase::Crashed {
            return true;
        }
        let claimant = claim(&s.server)
            .and_then(|(text, _)| text.split_once(':').map(|(_, holder)| holder.to_string()));
        claimant.as_deref() != Some(field(i).as_str()) && redis_holds(&s.server, i) == 0
    })
}

/// No operation in flight (a release's retry, an acquire's read-back or orphan check): the
/// owner's hold count on Redis is what it believes it holds (while
/// its holds live: not known lost, deadline not passed), plus at most the holds of its lost
/// generation that Redis may still count (its stale guards'); an owner holding nothing has no
/// field.
pub fn counts_agree(s: &LockState) -> bool {
    let now = s.server.now();
    s.clients.iter().enumerate().all(|(i, c)| {
        let in_flight = matches!(
            c.phase,
            Phase::Crashed
                | Phase::Releasing { .. }
                | Phase::ReadingBack { .. }
                | Phase::OrphanCheck { .. }
        );
        if in_flight {
            return true;
        }
        let redis = redis_holds(&s.server, i);
        if c.holds == 0 {
            redis == 0
        } else if !c.lost && now < c.deadline {
            let holds = u64::from(c.holds);
            (holds..=holds + u64::from(c.stale)).contains(&redis)
        } else {
            true
        }
    })
}
