//! Releasing a hold so that it counts exactly once, whatever happens to the reply, and finishing
//! releases that their caller left behind (a dropped guard, a dropped `unlock()`, an acquire
//! cancelled after it took the hold).
//!
//! Each release request has a replay key (its request id). A retry after a lost reply reads it
//! first, so the release is applied once. A release that leaves holds behind sets the lock's TTL
//! to what the owner's remaining holds need (see the lease rule in `holds`). The plain lock's
//! last release writes no replay key unless a retry could need it (see `inflight`); every other
//! type writes one on every release, as Redisson does.

use std::sync::Arc;
use std::time::Duration;

use fred::types::Key;
use futures::future::BoxFuture;
use tokio::time::Instant;
use tracing::Instrument;

use super::kind::ReleaseCall;
use super::kind::{Hold, Lease};
use super::replies::{ReleaseHow, Released};
use crate::background::Ended;
use crate::config::ceil_millis;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::handoff::ReleaseMark;
use crate::registry::Releasing;
use crate::wait::{until_answered, TRIES};

/// How one release is sent.
pub(crate) struct ReleaseAs<'a> {
    /// The connection to send it on, when not the client's own (a rescue run's).
    pub(crate) redis: Option<&'a Connection>,
    /// The replay key: the request id.
    pub(crate) replay: &'a Key,
    /// Whether the request may have reached the server already (an `unlock()` dropped
    /// mid-flight), so even its first send here looks for a replay.
    pub(crate) sent_before: bool,
    /// The earliest the hold can lapse; `None` when not known.
    pub(crate) lapses_after: Option<Instant>,
}

/// Finishes a release in the background when the `unlock()` that sent it was dropped.
pub(crate) struct ResumeRelease<'a> {
    /// The hold, and the token that keeps its release counted in flight until the `unlock()`
    /// or its resumption ends; `None` once the release has ended.
    pub(crate) pending: Option<(&'a Hold, Releasing)>,
    pub(crate) replay: &'a Key,
    pub(crate) lapses_after: Instant,
}

impl Drop for ResumeRelease<'_> {
    fn drop(&mut self) {
        if let Some((hold, releasing)) = self.pending.take() {
            hold.resume(
                self.replay.clone(),
                true,
                self.lapses_after,
                Arc::new(releasing),
            );
        }
    }
}

impl Hold {
    /// Counts a release of this hold in flight until the token drops.
    pub(crate) fn releasing(&self) -> Releasing {
        self.shared.registry.releasing(self.hold_key())
    }

    /// A release of this hold in flight, which could lapse at `lapses_after`: another release
    /// of the owner's holds that leaves holds behind keeps the lock at least that long.
    pub(crate) fn releasing_until(&self, lapses_after: Instant) -> Releasing {
        let releasing = self.releasing();
        self.shared
            .registry
            .release_lapses(&releasing, lapses_after);
        releasing
    }

    /// Sends (or finishes) a release under the request id `replay` in the background; see
    /// `background` for what happens when no runtime can run it.
    pub(crate) fn resume(
        &self,
        replay: Key,
        sent_before: bool,
        lapses_after: Instant,
        releasing: Arc<Releasing>,
    ) {
        let hold = self.clone();
        let job = move |fresh: Option<Arc<Connection>>| {
            let (hold, replay, releasing) = (hold.clone(), replay.clone(), releasing.clone());
            let span = tracing::debug_span!("relock.release", lock = %hold.keys.name, holder = %hold.field);
            let release = async move {
                let how = ReleaseAs {
                    redis: fresh.as_deref(),
                    replay: &replay,
                    // A rescue run may follow a send that reached the server.
                    sent_before: sent_before || fresh.is_some(),
                    lapses_after: Some(lapses_after),
                };
                let released = hold.release_as(how, &releasing).await;
                if let Err(error) = &released {
                    tracing::debug!(lock = %hold.keys.name, %error, "background release failed");
                }
                Ended::of(&released)
            };
            Box::pin(release.instrument(span)) as BoxFuture<'static, Ended>
        };
        self.shared.background.must_run(Arc::new(job));
    }

    /// Releases a hold no guard stands for: one a cancelled acquire took, or, before the owner
    /// acquires again (`Sending::gate`), its holds that lapsed locally or that a release or
    /// check of its left on Redis when it ended unanswered (with no live hold of the owner's it
    /// sends a TTL of 0, which drops the owner's field whatever its count).
    pub(crate) async fn release_orphan(
        &self,
        redis: Option<&Connection>,
        releasing: &Releasing,
    ) -> Ended {
        let replay = self.keys.replay_key(&self.shared.id);
        let how = ReleaseAs {
            redis,
            replay: &replay,
            sent_before: false,
            lapses_after: None,
        };
        Ended::of(&self.release_as(how, releasing).await)
    }

    /// Sends one release, retrying a lost reply under the same request id so the release
    /// applies once.
    ///
    /// A release that leaves holds behind sets the lock's TTL to what the owner's remaining
    /// holds need (and what an acquire of the owner's in flight asks for), and writes a replay
    /// key, so its retry replays "still held". A plain lock's last release writes one only when
    /// a retry could not do without it (see `inflight`): when an acquire of the owner's was in
    /// flight as it started, or when the hold could lapse (`lapses_after`, the earliest it can,
    /// or unknown) before the last retry. Else a retry that finds the field gone knows its
    /// earlier send freed the lock: the field was there when that send ran, and no new hold of
    /// the owner's can have come in between. Should a retry still come after `lapses_after` (a
    /// stalled process), it cannot tell that from a lapse, and the release ends in
    /// [`Error::LeaseLost`](crate::Error::LeaseLost).
    pub(crate) async fn release_as(
        &self,
        how: ReleaseAs<'_>,
        releasing: &Releasing,
    ) -> Result<Released> {
        let redis = how.redis.unwrap_or(&self.shared.redis);
        let outgoing = self.outgoing(&how, releasing, false);
        let send = |sent_before| {
            let script = outgoing.script(sent_before);
            self.kind.release(ReleaseCall {
                hold: self.holder(),
                redis,
                keep_ms: outgoing.keep_ms,
                how: script,
            })
        };
        let (outcome, sent_before) = until_answered(how.sent_before, send).await;
        let settled = outcome.and_then(|released| outgoing.settle(released, sent_before));
        outgoing.count(&settled, sent_before);
        settled
    }

    /// What a release of this hold sends, and how its reply is taken. `replay_last`: the last
    /// release writes a replay key whatever the rule in [`release_as`](Self::release_as) says.
    pub(super) fn outgoing<'a>(
        &'a self,
        how: &ReleaseAs<'a>,
        releasing: &Releasing,
        replay_last: bool,
    ) -> Outgoing<'a> {
        let shared = &self.shared;
        // Each try may wait a command timeout for the connection and another for the reply, so
        // the last one is sent within 2 * TRIES - 1 command timeouts.
        let retries = shared.command_timeout * (2 * TRIES);
        // Another release of the owner's holds may still be on its way: the holds it releases
        // are still on Redis, and the TTL set here must not let them lapse before it arrives.
        let beside = shared
            .registry
            .other_release_lapse(&self.hold_key())
            .map_or(0, |lapse| {
                ceil_millis(lapse.saturating_duration_since(Instant::now())) as u64
            });
        let need = shared.registry.need(&self.hold_key());
        // No live hold of the owner's, no acquire of its in flight, no other release of its
        // on the way: no hold of this owner may remain, so the release frees the lock whatever
        // count Redis has (`keep_ms` 0). A count this client does not know of (a hold it lost
        // locally while Redis still had it; `Sending::gate` drops those before the owner
        // acquires again) would otherwise outlive every guard, then lapse with no wake-up.
        let keeps_nothing = need.is_none()
            && !releasing.beside_acquire
            && !shared.registry.releases_beside(&self.hold_key());
        let keep_ms = if keeps_nothing {
            0
        } else {
            need.map_or(0, |need| ceil_millis(need).max(1) as u64)
                .max(releasing.acquire_lease_ms)
                .max(beside)
                .max(1)
        };
        // Only the plain lock's hand-offs take turns with a grace (see `turns`).
        let mark = self
            .kind
            .hands_off_with_grace()
            .then(|| shared.handoffs.mark(&shared.hub, &self.keys.channel));
        let sent_at = Instant::now();
        let replay_last = replay_last
            || self.kind.always_replays()
            || releasing.beside_acquire
            || how
                .lapses_after
                .map_or(true, |lapse| lapse <= sent_at + retries);
        // The replay key outlives the last retry, and any retry later than that: one from a
        // process that stalled between its sends (its watchdog stalled with it) may still find
        // holds of the owner's on Redis for as long as this release's TTL, or a renewal sent
        // before the stall, keeps them, so the key outlives both and the retry never counts
        // twice while a hold it could strike lives.
        // A hold renewed with a lease of its own (an election's) is renewed with that lease.
        let renewed_for = match self.lease {
            Lease::Watchdog => Duration::from_millis(self.lease_ms).max(shared.watchdog_timeout),
            Lease::Fixed(_) => shared.watchdog_timeout,
        };
        let replay_ttl = retries + Duration::from_millis(keep_ms).max(renewed_for);
        Outgoing {
            hold: self,
            replay: how.replay,
            lapses_after: how.lapses_after,
            replay_ttl_ms: ceil_millis(replay_ttl) as u64,
            keep_ms,
            mark,
            sent_at,
            replay_last,
        }
    }
}

/// One hold's release as it is sent: what it asks of the script, and how its reply is taken.
pub(super) struct Outgoing<'a> {
    hold: &'a Hold,
    replay: &'a Key,
    lapses_after: Option<Instant>,
    /// How long the replay key lives (see [`Hold::outgoing`]).
    pub(super) replay_ttl_ms: u64,
    /// The TTL the owner's remaining holds need, should holds remain; 0 when no hold of the
    /// owner's may remain, so the release frees the lock whatever its count.
    pub(super) keep_ms: u64,
    /// The hand-off mark of a plain lock's release, taken before it is first sent.
    mark: Option<ReleaseMark>,
    sent_at: Instant,
    /// Whether a last release writes a replay key too.
    pub(super) replay_last: bool,
}

impl<'a> Outgoing<'a> {
    /// Counts how this release ended (`sent_before`: its answer came to a retry). One that
    /// ended without an answer that settles it (a Redis error: every send went unanswered, or
    /// none went out) may leave its hold on Redis, to its lease: the registry remembers it, and
    /// the owner's next acquire with no live hold drops the owner's field first
    /// (`Registry::left_behind`, `Sending::gate`).
    pub(super) fn count(&self, settled: &Result<Released>, sent_before: bool) {
        if settled.as_ref().is_err_and(Error::is_redis) {
            let hold = self.hold;
            hold.shared.registry.left_behind(&hold.hold_key());
        }
        use crate::meter::Unlocked;
        let outcome = match settled {
            Ok(Released::NotHeld) => Unlocked::NotHeld,
            Ok(_) if sent_before => Unlocked::Replayed,
            Ok(_) => Unlocked::Released,
            Err(error) if error.is_lease_lost() || error.is_not_held() => Unlocked::NotHeld,
            Err(_) => Unlocked::Failed,
        };
        let hold = self.hold;
        let kind = hold.kind.metered();
        hold.shared.meter().unlocked(kind, &hold.keys.name, outcome);
    }

    /// The script's arguments for a send (`sent_before`: a retry).
    pub(super) fn script(&self, sent_before: bool) -> ReleaseHow<'a> {
        let shared = &self.hold.shared;
        ReleaseHow {
            replay: self.replay,
            replay_ttl_ms: self.replay_ttl_ms,
            publish: self.hold.kind.publish(shared),
            claim_window_ms: shared.claim_window_ms,
            sent_before,
            replay_last: self.replay_last,
        }
    }

    /// Takes the script's answer for this hold (`sent_before`: the answering send was a retry):
    /// notes the hand-off and the lease that remains, and queues a spent replay key.
    pub(super) fn settle(&self, released: Released, sent_before: bool) -> Result<Released> {
        let hold = self.hold;
        let shared = &hold.shared;
        if self.keep_ms == 0 || released != Released::StillHeld {
            // Nothing of the owner's field is left on Redis: not a hold that a release or
            // check of its left behind either.
            shared.registry.field_gone(&hold.hold_key());
        }
        if released == Released::NotHeld && sent_before {
            if !self
                .lapses_after
                .is_some_and(|lapse| Instant::now() < lapse)
            {
                return Err(Error::LeaseLost {
                    lock: hold.keys.name.to_string(),
                    owner: hold.field.to_string(),
                });
            }
            tracing::debug!(lock = %hold.keys.name, "release reply lost; the retry finds the lock freed by it");
            if let Some(mark) = &self.mark {
                shared.handoffs.released(&hold.keys.channel, 0, mark);
            }
            tracing::debug!(lock = %hold.keys.name, holder = %hold.field, "lock released");
            return Ok(Released::Freed { woken: 0 });
        }
        let replay_key = match released {
            Released::StillHeld => true,
            Released::Freed { .. } => self.replay_last,
            Released::NotHeld => false,
        };
        if replay_key {
            // The reply arrived, so no retry will need the replay key any more.
            shared.sweeper.delete(self.replay.clone());
        }
        match released {
            Released::StillHeld => {
                let keep = Duration::from_millis(self.keep_ms);
                shared
                    .registry
                    .lease_set(&hold.hold_key(), self.sent_at, keep);
                tracing::debug!(lock = %hold.keys.name, holder = %hold.field, keep_ms = self.keep_ms, "one hold released; the owner still holds the lock");
            }
            Released::Freed { woken } => {
                if let Some(mark) = &self.mark {
                    shared.handoffs.released(&hold.keys.channel, woken, mark);
                }
                tracing::debug!(lock = %hold.keys.name, holder = %hold.field, woken, "lock released");
            }
            Released::NotHeld => {
                tracing::debug!(lock = %hold.keys.name, holder = %hold.field, "release found no hold");
            }
        }
        Ok(released)
    }
}
