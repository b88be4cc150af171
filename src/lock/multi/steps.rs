//! How a [`MultiLock`](super::MultiLock) takes its parts: the plan (the parts in one global
//! order, duplicates merged, neighbouring plain locks of one client and slot grouped into one
//! step), and the steps, tried at once or waited for in order.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::time::Instant;

use super::super::guard::LockGuard;
use super::super::handle::Handle;
use super::super::kind::Hold;
use super::batch::{self, BatchAttempt};
use crate::error::{Error, Result};
use crate::wait::time_left;

/// What an acquire does in one go: one part, or the plain locks of one client and slot.
pub(super) enum Step {
    One(Handle),
    Together(Vec<Handle>),
}

/// The parts in the order they are taken, duplicates merged, grouped into steps.
pub(super) fn plan(parts: &[Handle]) -> Result<Vec<Step>> {
    if parts.is_empty() {
        return Err(Error::invalid("a multi-lock needs at least one lock"));
    }
    let mut ordered = Vec::with_capacity(parts.len());
    for part in parts {
        let name = part.keys()?.name.clone();
        let redis = &part.shared().redis;
        let slot = if fred::interfaces::ClientLike::is_clustered(&**redis) {
            fred::util::redis_keyslot(name.as_bytes())
        } else {
            0
        };
        ordered.push((name, redis.server.clone(), slot, part));
    }
    ordered.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let mut merged: Vec<(u16, &Handle)> = Vec::with_capacity(ordered.len());
    for (i, (name, _, slot, part)) in ordered.iter().enumerate() {
        let mut duplicate = false;
        // The parts of one name are next to each other: compare with those before.
        for (prev_name, _, _, prev) in ordered[..i].iter().rev() {
            if prev_name != name {
                break;
            }
            if !prev.shared().same_server(part.shared()) {
                continue;
            }
            if !Arc::ptr_eq(prev.shared(), part.shared()) {
                return Err(Error::invalid(format!(
                    "lock `{name}` is listed through two clients of one server ({} and {}): its parts would wait for each other",
                    prev.shared().redis.server, part.shared().redis.server
                )));
            }
            if prev.kind().primitive() != part.kind().primitive() {
                return Err(Error::invalid(format!(
                    "lock `{name}` is listed as two types (such as its read and write sides): its parts would wait for each other"
                )));
            }
            duplicate = true; // the same lock: one part
        }
        if !duplicate {
            merged.push((*slot, part));
        }
    }
    let mut steps: Vec<Step> = Vec::with_capacity(merged.len());
    let mut group_slot = None;
    for (slot, part) in merged {
        let plain = part.kind().batches();
        if let (true, Some(Step::Together(group))) = (plain, steps.last_mut()) {
            if Arc::ptr_eq(group[0].shared(), part.shared()) && group_slot == Some(slot) {
                group.push(part.clone());
                continue;
            }
        }
        group_slot = plain.then_some(slot);
        steps.push(if plain {
            Step::Together(vec![part.clone()])
        } else {
            Step::One(part.clone())
        });
    }
    Ok(steps)
}

/// What one step took: its parts' guards, whether that is all of them, and whether one script
/// can release them together.
pub(super) struct Taken {
    pub(super) guards: Vec<LockGuard>,
    pub(super) complete: bool,
    together: bool,
}

/// The parts taken so far, in order, and how they are released: in runs, each either one part
/// or several released by one script (see `batch`).
#[derive(Default)]
pub(super) struct Held {
    pub(super) parts: Vec<LockGuard>,
    pub(super) runs: Vec<usize>,
}

impl Held {
    pub(super) fn add(&mut self, taken: Taken) {
        let count = taken.guards.len();
        if taken.together && count > 1 {
            self.runs.push(count);
        } else {
            self.runs.extend(std::iter::repeat(1).take(count));
        }
        self.parts.extend(taken.guards);
    }
}

impl IntoIterator for Held {
    type Item = LockGuard;
    type IntoIter = std::vec::IntoIter<LockGuard>;

    fn into_iter(self) -> Self::IntoIter {
        self.parts.into_iter()
    }
}

/// Tries every step at once, one attempt per part (on several servers, in one round trip):
/// the guards of the steps taken before the first that was not, in order, and that step's
/// index. What was taken past it is given back, so the acquire can go on waiting in order from
/// there; an error of that step is the acquire's.
pub(super) async fn take_at_once(steps: &[Step], lease: Option<Duration>) -> Result<(Held, usize)> {
    let mut taken = Held::default();
    if steps.len() < 2 {
        return Ok((taken, 0));
    }
    let tries = steps
        .iter()
        .map(|step| take(step, lease, Some(Duration::ZERO)));
    let (mut next, mut spare, mut failed) = (0, Vec::new(), None);
    for (i, outcome) in join_all(tries).await.into_iter().enumerate() {
        match outcome {
            Ok(step_taken) if step_taken.complete && next == i => {
                taken.add(step_taken);
                next += 1;
            }
            Ok(step_taken) => spare.extend(step_taken.guards),
            // A later step's error comes back, if it lasts, when that step's turn comes.
            Err(error) if next == i => failed = Some(error),
            Err(_) => {}
        }
    }
    give_back(spare).await;
    match failed {
        Some(error) => {
            give_back(taken).await;
            Err(error)
        }
        None => Ok((taken, next)),
    }
}

/// Takes one step's parts, waiting at most `wait` in all; on an error, what it took is given
/// back. The plain locks of one client and slot are first tried by one script; if it finds one
/// busy (and the step may wait), they are taken one by one, in order.
pub(super) async fn take(
    step: &Step,
    lease: Option<Duration>,
    wait: Option<Duration>,
) -> Result<Taken> {
    let (parts, holds) = match step {
        Step::One(part) => (std::slice::from_ref(part), Vec::new()),
        Step::Together(parts) => {
            let holds = parts
                .iter()
                .map(|part| part.hold(lease))
                .collect::<Result<Vec<_>>>()?;
            (parts.as_slice(), holds)
        }
    };
    // One owner's holds only: parts listed with different owners go one by one.
    let together = holds.len() > 1 && holds.iter().all(|hold| hold.field == holds[0].field);
    if together {
        return take_together(parts, &holds, lease, wait).await;
    }
    let deadline = wait.and_then(|wait| Instant::now().checked_add(wait));
    let mut guards = Vec::with_capacity(parts.len());
    for part in parts {
        let part_wait = wait.map(|_| time_left(deadline).unwrap_or(Duration::ZERO));
        match acquire_part(part, lease, part_wait).await {
            Ok(Some(guard)) => guards.push(guard),
            Ok(None) => {
                return Ok(Taken {
                    guards,
                    complete: false,
                    together,
                })
            }
            Err(error) => {
                give_back(guards).await;
                return Err(error);
            }
        }
    }
    Ok(Taken {
        guards,
        complete: true,
        together,
    })
}

/// Takes the plain locks of one client, slot and owner: all by one script if they are free;
/// else the free ones before the first busy part by one script, then the busy part alone,
/// waiting as a [`Lock`](crate::Lock) waits, then the rest again by one script, and so on, always in order.
async fn take_together(
    parts: &[Handle],
    holds: &[Hold],
    lease: Option<Duration>,
    wait: Option<Duration>,
) -> Result<Taken> {
    let deadline = wait.and_then(|wait| Instant::now().checked_add(wait));
    let mut guards: Vec<LockGuard> = Vec::with_capacity(parts.len());
    let taken = |guards, complete| Taken {
        guards,
        complete,
        together: true,
    };
    loop {
        let from = guards.len();
        let index = match Box::pin(batch::try_all(&holds[from..])).await {
            Ok(BatchAttempt::Acquired(rest)) => {
                guards.extend(rest);
                return Ok(taken(guards, true));
            }
            Ok(BatchAttempt::Busy { .. }) if wait == Some(Duration::ZERO) => {
                return Ok(taken(guards, false));
            }
            Ok(BatchAttempt::Busy { index, .. }) => index,
            Err(error) => {
                give_back(guards).await;
                return Err(error);
            }
        };
        if index > 0 {
            // The parts before the busy one were free a moment ago.
            match Box::pin(batch::try_all(&holds[from..from + index])).await {
                Ok(BatchAttempt::Acquired(free)) => guards.extend(free),
                Ok(BatchAttempt::Busy { .. }) => continue, // taken meanwhile: look again
                Err(error) => {
                    give_back(guards).await;
                    return Err(error);
                }
            }
        }
        let part_wait = wait.map(|_| time_left(deadline).unwrap_or(Duration::ZERO));
        match acquire_part(&parts[from + index], lease, part_wait).await {
            Ok(Some(guard)) => guards.push(guard),
            Ok(None) => return Ok(taken(guards, false)),
            Err(error) => {
                give_back(guards).await;
                return Err(error);
            }
        }
        if guards.len() == parts.len() {
            return Ok(taken(guards, true));
        }
    }
}

/// One part's acquire, waiting as its type waits.
async fn acquire_part(
    part: &Handle,
    lease: Option<Duration>,
    wait: Option<Duration>,
) -> Result<Option<LockGuard>> {
    // Boxed: an acquire future is large, and a multi-lock's would carry one per step.
    Box::pin(part.acquire(lease, wait)).await
}

/// Releases the parts an acquire took before it gave up, all at once.
pub(super) async fn give_back(taken: impl IntoIterator<Item = LockGuard>) {
    for outcome in join_all(taken.into_iter().map(LockGuard::unlock)).await {
        if let Err(error) = outcome {
            tracing::debug!(%error, "could not give back a part of a multi-lock; it expires with its lease");
        }
    }
}
