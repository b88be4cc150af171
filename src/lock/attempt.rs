//! One attempt to take a hold, the same for every lock type: wait for the owner's releases of
//! the lock still in flight, and its leaves of the lock's queue (see `inflight`), run the type's
//! acquire script (its `LockType`'s), resolve a lost reply by reading the lock back, and register
//! the hold with the client's registry, which renews it and tells its guards when it is lost.
//! With replica sync on, the guard's maker then waits for a replica to have the hold
//! ([`Hold::await_replica`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::hash;
use super::kind::AcquireCall;
use super::kind::Ask;
use super::kind::{Hold, Lease};
use super::replies::Answer;
use crate::background::Ended;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::registry::Acquiring;
use crate::registry::Registration;
use crate::shared::ReplicaSync;

/// What one attempt found.
pub(crate) enum Attempt {
    /// Taken: the hold's registration, for its guard, and a fenced lock's token.
    Acquired(Registration, Option<u64>),
    /// Held by another owner (or, for a fair lock, not this waiter's turn): how long to wait at
    /// most before the next attempt (`None`: no bound known, such as a lock without expiry).
    Busy(Option<Duration>),
    /// Taken, but answered after the lease could have run out: given back, to try again.
    Late,
}

impl Hold {
    /// One attempt. Cancel safe: dropped between sending the script and making the guard, it
    /// leaves an [`OrphanCheck`] behind that releases a hold nobody received.
    pub(crate) async fn try_once(&self, ask: Ask) -> Result<Attempt> {
        let shared = &self.shared;
        shared.check_open()?;
        // With replica sync the acquire goes on the connection its WAIT will go on.
        let redis = shared.acquire_connection();
        let sending = Sending::start(self).await;
        let sent_at = Instant::now();
        let outcome = self
            .kind
            .acquire(AcquireCall {
                shared,
                redis,
                hold: self.holder(),
                lease_ms: self.lease_ms,
                ask,
            })
            .await;
        let token = match outcome {
            Ok(Answer::Taken { token }) => token,
            Ok(Answer::Busy(retry_ms)) => {
                sending.not_taken();
                return Ok(Attempt::Busy(
                    u64::try_from(retry_ms).ok().map(Duration::from_millis),
                ));
            }
            Ok(Answer::Delayed(left_ms)) => {
                // Free, but its last holder's lease ran out without an unlock: nobody publishes
                // when the delay ends, so the wait sleeps until then (its bound).
                sending.not_taken();
                let left = Duration::from_millis(left_ms.max(1) as u64);
                tracing::debug!(lock = %self.keys.name, ?left, "lock-delay in force: the last holder's lease ran out without an unlock");
                return Ok(Attempt::Busy(Some(left)));
            }
            Err(error) if error.is_ambiguous() => match sending.read_back(redis).await {
                // The owner holds the lock, so the counter still has its token. On an error
                // the orphan check gives the hold back.
                Ok(true) => self.kind.token(redis, &self.keys).await?,
                Ok(false) => {
                    sending.not_taken();
                    return Err(error);
                }
                Err(_) => return Err(error),
            },
            Err(error) => {
                sending.not_taken();
                return Err(error);
            }
        };
        if self.answered_late(sent_at) {
            // The orphan check gives the hold back (and the owner's next attempt waits for
            // it); the caller tries again.
            drop(sending);
            return Ok(Attempt::Late);
        }
        Ok(Attempt::Acquired(sending.taken(sent_at), token))
    }

    /// Whether an acquire sent at `sent_at` was answered after the hold could have lapsed (a
    /// stall longer than the lease): the lock may be another owner's by now, and a guard would
    /// be lost on arrival, so the hold is given back instead.
    pub(super) fn answered_late(&self, sent_at: Instant) -> bool {
        let late = Instant::now() >= sent_at + Duration::from_millis(self.lease_ms);
        if late {
            tracing::debug!(lock = %self.keys.name, "acquire answered after its lease could have run out; giving the hold back");
        }
        late
    }

    /// Waits for one replica to acknowledge the hold just taken (taken on `sync`'s connection,
    /// whose every earlier write the `WAIT` covers).
    pub(crate) async fn await_replica(&self, sync: &ReplicaSync) -> Result<()> {
        let slot = fred::util::redis_keyslot(self.keys.name.as_bytes());
        if crate::watchdog::replica_acknowledged(sync, slot).await? {
            Ok(())
        } else {
            Err(Error::NotReplicated {
                lock: self.keys.name.to_string(),
            })
        }
    }
}

/// One hold's acquire, from just before its script is sent until its outcome is known: counted
/// in flight (after the owner's releases of the lock still in flight, see `inflight`), with an
/// armed [`OrphanCheck`]. Dropped before [`taken`](Sending::taken) or
/// [`not_taken`](Sending::not_taken) (the caller gave up mid-flight, or the hold was answered too
/// late), the check gives back the hold the acquire may have taken. A batch of holds sent by one
/// script keeps one per hold.
pub(super) struct Sending<'a> {
    hold: &'a Hold,
    /// Dropped before `acquiring`, so a release it starts sees the acquire still in flight.
    orphan: OrphanCheck<'a>,
    acquiring: Acquiring,
    /// The owner's live holds of the lock before the acquire was sent.
    held_before: u32,
}

impl<'a> Sending<'a> {
    /// Waits for the owner's releases of the lock still in flight, then counts the acquire in
    /// flight and arms its orphan check.
    pub(super) async fn start(hold: &'a Hold) -> Sending<'a> {
        let acquiring = Sending::gate(hold).await;
        Sending::arm(hold, acquiring)
    }

    /// Waits for the owner's releases of the lock still in flight, then counts the acquire in
    /// flight. A release of the owner's still in flight may be a last one, which leaves no
    /// replay key: a hold taken now could be the one its retry finds and releases. It goes
    /// first. So does a leave of the lock's queue by a waiter of the owner's that gave up (a fair
    /// lock's, see `lock::fair`): run after this acquire, it would take out the place the
    /// acquire queues.
    ///
    /// Once they have ended, an owner whose holds lapsed locally while their guards live (a
    /// renewal answered late, a stalled process) drops its field on Redis, where those holds may
    /// still count (`Registry::lapsed_hold`); so does an owner with no live hold whose release,
    /// or orphan check, ended unanswered and may have left its hold there, to its lease
    /// (`Registry::left_hold`). The acquire then starts from nothing there, so a read-back after
    /// its lost request or reply tells a hold it took from one lost or left behind, and its
    /// guard's lease is the only one on the field. The field is dropped (a release with a TTL of
    /// 0, `Hold::release_orphan`) with no acquire of the owner's counted in flight, which would
    /// make it keep the field, and at most once per attempt: a drop that fails leaves the mark
    /// for the next.
    pub(super) async fn gate(hold: &Hold) -> Acquiring {
        let registry = &hold.shared.registry;
        let key = hold.hold_key();
        let mut dropped = false;
        loop {
            // Checked after the owner's releases in flight, which may end unanswered.
            let acquiring = registry.acquiring(&key, hold.lease_ms).await;
            if dropped || !(registry.lapsed_hold(&key) || registry.left_hold(&key)) {
                return acquiring;
            }
            drop(acquiring);
            let releasing = hold.releasing();
            if hold.release_orphan(None, &releasing).await == Ended::Done {
                registry.dropped(&key);
            }
            dropped = true;
        }
    }

    /// Arms the orphan check of an acquire counted in flight (by [`gate`](Sending::gate)), just
    /// before it is sent.
    pub(super) fn arm(hold: &'a Hold, acquiring: Acquiring) -> Sending<'a> {
        Sending {
            hold,
            orphan: OrphanCheck::arm(hold),
            acquiring,
            held_before: hold.shared.registry.guards(&hold.hold_key()),
        }
    }

    /// The acquire took nothing.
    pub(super) fn not_taken(mut self) {
        self.orphan.disarm();
    }

    /// After a lost request or reply: whether the acquire took the hold, read back on the
    /// acquire's connection (after it). The owner's field holding more than its live guards
    /// means it did: [`gate`](Sending::gate) dropped whatever of the field no guard stands for
    /// (a lapsed hold, or one a failed release left), and a reader's holds count only while
    /// they live (its type's view: a reader field whose timeout keys are all gone holds nothing,
    /// and is dropped).
    pub(super) async fn read_back(&self, redis: &Connection) -> Result<bool> {
        let hold = self.hold;
        let view = hold.kind.view();
        let state = hash::inspect(redis, &hold.keys, &hold.field, view).await?;
        let took = state.holds > u64::from(self.held_before);
        if took {
            tracing::debug!(lock = %hold.keys.name, "acquire reply lost; the read-back shows the hold");
        }
        Ok(took)
    }

    /// The acquire sent at `sent_at` took the hold: registered with the client's registry,
    /// while still counted in flight, so a release that starts from here on counts this hold
    /// among those that remain.
    pub(super) fn taken(mut self, sent_at: Instant) -> Registration {
        let hold = self.hold;
        let renew = hold.lease == Lease::Watchdog;
        let lease = Duration::from_millis(hold.lease_ms);
        let held = hold.kind.held();
        let registration =
            hold.shared
                .registry
                .register(hold.hold_key(), held, renew, sent_at, lease);
        self.orphan.disarm();
        drop(self.acquiring);
        registration
    }
}

/// Armed while an acquire may have taken a hold that no guard stands for yet. Dropped armed (the
/// caller gave up mid-flight), it reads the lock back and releases one hold if the owner's field
/// counts more holds than its live guards. The read goes on the acquire's connection, after it,
/// so it sees what the acquire did. Should the read (or the release) go unanswered, the hold is
/// left to its lease, and the registry remembers it (`Registry::left_behind`): the owner's next
/// acquire drops it first (`Sending::gate`).
struct OrphanCheck<'a> {
    hold: Option<&'a Hold>,
}

impl<'a> OrphanCheck<'a> {
    fn arm(hold: &'a Hold) -> OrphanCheck<'a> {
        OrphanCheck { hold: Some(hold) }
    }

    fn disarm(&mut self) {
        self.hold = None;
    }
}

impl Drop for OrphanCheck<'_> {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take().cloned() else {
            return;
        };
        // The owner's next acquire of this lock waits for the check, as for any release.
        let releasing = Arc::new(hold.releasing());
        let shared = hold.shared.clone();
        shared
            .background
            .must_run(Arc::new(move |fresh: Option<Arc<Connection>>| {
                let (hold, releasing) = (hold.clone(), releasing.clone());
                Box::pin(async move {
                    let shared = &hold.shared;
                    let redis = fresh
                        .as_deref()
                        .unwrap_or_else(|| shared.acquire_connection());
                    let view = hold.kind.view();
                    let inspected = hash::inspect(redis, &hold.keys, &hold.field, view).await;
                    let Ok(state) = &inspected else {
                        // The hold, if any, expires with its lease; the owner's next acquire
                        // drops it first.
                        if inspected.as_ref().is_err_and(Error::is_redis) {
                            shared.registry.left_behind(&hold.hold_key());
                        }
                        return Ended::of(&inspected);
                    };
                    if state.holds > u64::from(shared.registry.guards(&hold.hold_key())) {
                        tracing::debug!(lock = %hold.keys.name, "releasing the hold of a cancelled acquire");
                        return hold.release_orphan(fresh.as_deref(), &releasing).await;
                    }
                    Ended::Done
                })
            }));
    }
}
