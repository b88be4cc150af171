//! What the read-write lock model checks: six `always` properties (a counterexample is a bug)
//! and `sometimes` properties showing the situations they are about are reached at all.

use stateright::Property;

use super::state::{
    claim, field, redis_holds, Cancelled, Phase, RwState, Side, Upgrade, LEASE, WINDOW,
};
use super::RwModel;

/// Whether a client at `phase` has an acquire of `side` whose outcome is not known yet: it
/// reads the lock back after a lost reply, or its orphan check has yet to release a hold
/// nobody received.
fn outcome_unknown(phase: Phase, side: Side) -> bool {
    match phase {
        Phase::ReadingBack { side: of, .. } | Phase::OrphanCheck { side: of, .. } => of == side,
        _ => false,
    }
}

/// Some client reads back an acquire of `side` whose lost reply came after its script took
/// the hold (the side's field counts more than the live guards before the send).
fn reply_lost_after_taking(m: &RwModel, s: &RwState, side: Side) -> bool {
    !m.faults.lose_acquire
        || s.clients.iter().enumerate().any(|(i, c)| match c.phase {
            Phase::ReadingBack {
                side: of,
                held_before,
                ..
            } if of == side => redis_holds(&s.server, i, side) > u64::from(held_before),
            _ => false,
        })
}

/// (1) A writer excludes every other owner, as the clients believe it.
pub const EXCLUSION: &str =
    "a writer excludes everyone else: no writer and other holder both believe they hold";
/// (2) No lost wake-up.
pub const WAKE_UP: &str = "no lost wake-up: a waiter on a free lock tries within the claim window";
/// (2) A free lock's claim lapses within the claim window.
pub const CLAIM_LAPSES: &str = "a free lock's claim lapses within the claim window";
/// (3) Nothing left behind by a cancelled acquire.
pub const CANCEL_CLEAN: &str = "a cancelled acquire leaves no claim once cleaned up";
/// (4) A replayed release counts once.
pub const COUNTS: &str =
    "hold counts on Redis equal each owner's, per side (a replayed release counts once)";
/// (5) An upgrade is refused only to an owner that has a read hold.
pub const UPGRADE: &str = "RELOCK_UPGRADE only while the owner has a read hold on its way";

/// The properties, `always` first.
pub fn all() -> Vec<Property<RwModel>> {
    vec![
        Property::always(EXCLUSION, |_, s| exclusion(s)),
        Property::always(WAKE_UP, |_, s| no_lost_wake_up(s)),
        Property::always(CLAIM_LAPSES, |_, s| claim_lapses(s)),
        Property::always(CANCEL_CLEAN, |_, s| cancel_clean(s)),
        Property::always(COUNTS, |_, s| counts_agree(s)),
        Property::always(UPGRADE, |_, s: &RwState| {
            s.clients.iter().all(|c| c.upgrade != Upgrade::Unexplained)
        }),
        Property::sometimes("two readers share the lock at once", |_, s: &RwState| {
            let now = s.server.now();
            s.clients.iter().filter(|c| c.read.believes(now)).count() >= 2
        }),
        Property::sometimes(
            "a writer waits behind a reader, then takes the lock",
            |_, s: &RwState| {
                let now = s.server.now();
                s.clients
                    .iter()
                    .any(|c| c.waited && c.write.believes(now) && c.read.holds == 0)
            },
        ),
        Property::sometimes(
            "a reader waits behind a writer's claim on a read-locked lock",
            |_, s: &RwState| {
                let now = s.server.now();
                let reading = s.clients.iter().any(|c| c.read.believes(now));
                reading
                    && claim(&s.server).is_some()
                    && s.clients.iter().any(|c| {
                        c.read.holds == 0 && matches!(c.phase, Phase::Waiting { .. })
                    })
            },
        ),
        Property::sometimes("a waiter is woken by a message", |_, s: &RwState| {
            s.clients
                .iter()
                .any(|c| c.woken && matches!(c.phase, Phase::Waiting { .. }))
        }),
        Property::sometimes("a release reply lost and replayed", |_, s: &RwState| {
            s.clients.iter().any(|c| c.replayed)
        }),
        Property::sometimes(
            "a writer cancelled while waiting withdrew its claim",
            |_, s: &RwState| {
                s.clients
                    .iter()
                    .any(|c| c.cancelled == Cancelled::Clean && !c.unclaiming && c.write.holds == 0)
            },
        ),
        Property::sometimes(
            "a read acquire's reply was lost after its script took the hold",
            |m: &RwModel, s: &RwState| reply_lost_after_taking(m, s, Side::Read),
        ),
        Property::sometimes(
            "a write acquire's reply was lost after its script took the hold",
            |m: &RwModel, s: &RwState| reply_lost_after_taking(m, s, Side::Write),
        ),
        Property::sometimes(
            "an acquire cancelled with its outcome unknown left a hold its orphan check finds",
            |m: &RwModel, s: &RwState| {
                let now = s.server.now();
                !m.faults.lose_acquire
                    || m.max_cancels == 0
                    || s.clients.iter().enumerate().any(|(i, c)| match c.phase {
                        Phase::OrphanCheck {
                            side,
                            cancelled: true,
                        } => {
                            let guards = c.side(side).live_guards(now);
                            redis_holds(&s.server, i, side) > u64::from(guards)
                        }
                        _ => false,
                    })
            },
        ),
        Property::sometimes(
            "a write refused as an upgrade while the owner's dropped read guard was still releasing (bb3725d)",
            |_, s: &RwState| s.clients.iter().any(|c| c.upgrade == Upgrade::Releasing),
        ),
    ]
}

/// No client believes it holds the write side while another believes it holds either side
/// (each: a guard it uses, not known lost, its local deadline not passed).
pub fn exclusion(s: &RwState) -> bool {
    let now = s.server.now();
    s.clients.iter().enumerate().all(|(i, w)| {
        !w.write.believes(now)
            || s.clients
                .iter()
                .enumerate()
                .all(|(j, o)| i == j || !(o.read.believes(now) || o.write.believes(now)))
    })
}

/// A client waiting on a free lock (no message reached it or is on its way) has its timer set
/// no later than the claim window after the lock became free; after a lost message, or when
/// the lock went by expiry rather than a release, no later than a lease and the claim window.
pub fn no_lost_wake_up(s: &RwState) -> bool {
    let Some(free) = s.free_since else {
        return true;
    };
    s.clients.iter().all(|c| match c.phase {
        Phase::Waiting { until } if !c.woken && !c.inbox => {
            // Plus 1 ms: a key lives through its expiry's millisecond (as on Redis), so a claim
            // cut to the window still answers a 1 ms wait at its end.
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
/// every other waiter's wait from the moment the lock became free either way.
pub fn claim_lapses(s: &RwState) -> bool {
    let Some(free) = s.free_since.filter(|_| !s.freed_by_expiry) else {
        return true;
    };
    match claim(&s.server) {
        Some((_, Some(expires))) => expires <= free + WINDOW,
        _ => true,
    }
}

/// Once a cancelled acquire's cleanup ran, no claim names its writer field.
pub fn cancel_clean(s: &RwState) -> bool {
    s.clients.iter().enumerate().all(|(i, c)| {
        if c.cancelled != Cancelled::Clean || c.phase == Phase::Crashed {
            return true;
        }
        let claimant = claim(&s.server)
            .and_then(|(text, _)| text.split_once(':').map(|(_, holder)| holder.to_string()));
        claimant.as_deref() != Some(field(i, Side::Write).as_str())
    })
}

/// For each side with no release in flight and no acquire whose outcome is unknown (a
/// read-back, or an orphan check to run): the owner's hold count on Redis is what it believes
/// it holds while its holds live, plus at most the holds of its lost generation that Redis may
/// still count (its stale guards': a re-entry whose read-back came after the side lapsed
/// locally starts a new generation); an owner holding nothing has nothing on Redis.
pub fn counts_agree(s: &RwState) -> bool {
    let now = s.server.now();
    s.clients.iter().enumerate().all(|(i, c)| {
        c.phase == Phase::Crashed
            || [Side::Read, Side::Write].into_iter().all(|side| {
                let h = c.side(side);
                if h.leaving.is_some() || outcome_unknown(c.phase, side) {
                    return true;
                }
                let redis = redis_holds(&s.server, i, side);
                if h.holds == 0 {
                    redis == 0
                } else if !h.lost && now < h.deadline {
                    let holds = u64::from(h.holds);
                    (holds..=holds + u64::from(h.stale)).contains(&redis)
                } else {
                    true
                }
            })
    })
}
