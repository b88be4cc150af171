//! The properties, as relock promises them (README.md's "at most N at a time, and a holder that
//! dies must give its permits back"; docs/redisson.md's "a cancelled acquire takes nothing, a
//! release whose reply was lost counts once"; `OnChannel`'s "a lost message costs latency,
//! never a hang"), each `always` with a `sometimes` beside it that shows its situation arises.

use stateright::Property;

use super::state::{seen, Call, Phase, Request, State};
use super::SemaphoreModel;
use crate::server::Reply;

/// Names of the `always` properties (a discovery is a violation).
pub const ALWAYS: [&str; 6] = [
    "at most N permits out at a time",
    "permits conserved: available + out == N",
    "a permit its holder believes live is out on the server",
    "no lost wake-up",
    "nothing left by a cancelled acquire",
    "a renewal only extends a lease that has not ended",
];

/// Every property of the model.
pub fn properties() -> Vec<Property<SemaphoreModel>> {
    vec![
        Property::always(ALWAYS[0], at_most_n),
        Property::sometimes("all N permits out", all_out),
        Property::always(ALWAYS[1], conserved),
        Property::sometimes("an ended lease is reclaimed", |_, s: &State| {
            s.seen & seen::RECLAIMED != 0
        }),
        Property::always(ALWAYS[2], believed_out),
        Property::sometimes("a waiter takes a permit after waiting", waiter_takes),
        Property::sometimes("a renewal extends a lease", |_, s: &State| {
            s.seen & seen::RENEWED != 0
        }),
        Property::sometimes("a release retried after a lost reply is answered", retried),
        Property::always(ALWAYS[3], no_lost_wakeup),
        Property::sometimes("a waiter's wake-up message is on its way", wake_up_on_way),
        Property::always(ALWAYS[5], |_, s: &State| s.seen & seen::ENDED_RENEWED == 0),
        Property::sometimes(
            "a renewal delayed on its way meets a lease that has ended",
            |_, s: &State| s.seen & seen::LATE_RENEWAL != 0,
        ),
        Property::always(ALWAYS[4], nothing_left_by_cancel),
        Property::sometimes(
            "a cancelled or late attempt's permit is given back",
            orphan_back,
        ),
    ]
}

fn all_out(model: &SemaphoreModel, state: &State) -> bool {
    state.available() == Some(0) && state.leases().len() == model.setup.permits as usize
}

/// The reply on `call`'s way back, if it ran.
fn answer(call: Option<&Call>) -> Option<(&Request, &Reply)> {
    let call = call?;
    call.reply.as_ref().map(|(reply, _)| (&call.request, reply))
}

/// A subscribed client (one that waited) has a `{1, left}` acquire reply on its way.
fn waiter_takes(_: &SemaphoreModel, state: &State) -> bool {
    state.clients.iter().any(|c| {
        c.subscribed
            && matches!(answer(c.main.as_ref()), Some((Request::Acquire { .. }, Reply::Array(r)))
                if r.first() == Some(&Reply::Int(1)))
    })
}

/// A release's second or third try has run.
fn retried(_: &SemaphoreModel, state: &State) -> bool {
    state.clients.iter().any(|c| {
        matches!(answer(c.main.as_ref()), Some((Request::Release { tries, .. }, _)) if *tries > 1)
    })
}

fn wake_up_on_way(_: &SemaphoreModel, state: &State) -> bool {
    state
        .clients
        .iter()
        .any(|c| matches!(c.phase, Phase::Waiting { .. }) && !c.inbox.is_empty())
}

/// A background release answered that it gave the permit back.
fn orphan_back(_: &SemaphoreModel, state: &State) -> bool {
    state.clients.iter().any(|c| {
        matches!(
            answer(c.background.first()),
            Some((Request::Release { .. }, Reply::Int(1 | 2)))
        )
    })
}

/// Permits not yet reclaimed whose lease has ended by now.
fn ended(state: &State) -> i64 {
    let now = state.server.now();
    state.leases().iter().filter(|(_, end)| *end <= now).count() as i64
}

/// At most N permits are available or out with a live lease, and at most N clients believe
/// they hold one (with one permit: never two holders at once). Holds under every fault.
fn at_most_n(model: &SemaphoreModel, state: &State) -> bool {
    let n = model.setup.permits as i64;
    let live = state.leases().len() as i64 - ended(state);
    let now = state.server.now();
    let believers = state.clients.iter().filter(|c| c.believes(now).is_some());
    state.available().unwrap_or(0).max(0) + live <= n && (believers.count() as i64) <= n
}

/// No permit is made or lost: the available count is never negative and, with the permits
/// out (their lease ended or not, as a reclaim would count them), makes N. Not after the server
/// restarted empty (the semaphore is gone then; acquires fail with `NotFound`).
fn conserved(model: &SemaphoreModel, state: &State) -> bool {
    if state.restarted {
        return true;
    }
    let n = model.setup.permits as i64;
    matches!(state.available(), Some(a) if a >= 0 && a + state.leases().len() as i64 == n)
}

/// A holder whose `Permit` is not `is_lost()` has its id in the leases with a lease that has
/// not ended: `lost()` tells the truth at once. Not after a restart (README: a restarted server
/// drops holds, and holders find out through `lost()` at their next renewal).
fn believed_out(_: &SemaphoreModel, state: &State) -> bool {
    if state.restarted {
        return true;
    }
    let now = state.server.now();
    state
        .clients
        .iter()
        .all(|client| match client.believes(now) {
            Some(id) => state.lease_of(id).is_some_and(|end| end > now),
            None => true,
        })
}

/// When a permit is available (or its lease ended, which any acquire reclaims) and no client is
/// about to look (an attempt on the wire, a wake-up or a message on its way, a timer due), no
/// waiter sleeps past what the server told it: each waiter's bound (the reply's hint from when
/// its script ran, or the poll) has come. So a permit given back always publishes, and a busy
/// reply's hint covers each lease that ends. Not once a message was lost (the poll covers it)
/// or the server restarted.
fn no_lost_wakeup(_: &SemaphoreModel, state: &State) -> bool {
    if state.lost_message || state.restarted {
        return true;
    }
    let now = state.server.now();
    if state.available().unwrap_or(0) + ended(state) < 1 {
        return true;
    }
    let looking = state.clients.iter().any(|c| match c.phase {
        Phase::Acquiring { .. } => true,
        Phase::Waiting { deadline, .. } => c.woken || !c.inbox.is_empty() || deadline <= now,
        _ => false,
    });
    looking
        || state.clients.iter().all(|c| match c.phase {
            Phase::Waiting { promised, .. } => promised <= now,
            _ => true,
        })
}

/// Once a client's background releases are done, no attempt it let go of (cancelled, late, or
/// whose read-back failed) has its permit out.
fn nothing_left_by_cancel(_: &SemaphoreModel, state: &State) -> bool {
    state.clients.iter().all(|client| {
        client.phase == Phase::Crashed
            || !client.background.is_empty()
            || client
                .abandoned
                .iter()
                .all(|id| state.lease_of(*id).is_none())
    })
}
