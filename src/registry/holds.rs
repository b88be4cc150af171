//! Who holds what in this client: the part of a registry entry (one per lock name and holder
//! field) with its live guards, the leases they need and what they know of their hold.
//!
//! Every live guard is counted here under its lock name and holder field, with the lease its
//! hold needs: a watchdog hold needs its watchdog lease (the client's watchdog timeout, or one of
//! its own), renewed; a fixed hold needs its own deadline (its acquire's send time plus its
//! lease). All holds of one owner share the lock's one
//! TTL, so relock keeps this rule: **the lock's TTL is never shorter than what any live hold
//! needs, and never longer than the longest of them.** An acquire and a renewal only ever extend
//! the TTL (`lua/lock/acquire.lua`, `lua/lock/renew.lua`), and a release that leaves holds
//! behind sets it to what the holds that remain need, as computed here ([`Registry::need`]).
//!
//! The watchdog (`watchdog`) renews the entries with watchdog holds and reports back here. A
//! release stops renewal before it sends anything, so renewal and release never race.
//!
//! Each field also keeps the earliest moment its hold can lapse: the send time of the latest
//! command that confirmed its lease, plus that lease (the server applied it after it was sent).
//! With replica sync, a command confirms a lease only once a replica acknowledged it (the
//! watchdog reports a renewal here only then), so a failover to that replica keeps the moment.
//! Past that moment a guard reports itself lost at once, before any round trip: a holder whose
//! process was stopped past its lease learns it as soon as it runs again. A loss is final for the
//! holds it struck; a later acquire by the same owner starts a new *generation* with a fresh
//! signal. Redis may still count the lost holds (the lapse moment is the earliest they can
//! lapse, not the moment they do), so the owner drops them there before it acquires again
//! ([`Registry::lapsed_hold`]); a lost generation's guards send nothing on release
//! ([`Leaving::Lost`]), and the owner's last release frees the lock whatever count Redis has
//! (`lock::release` sends a TTL of 0 when no hold of the owner's may remain). A release hands the lapse moment on: a last
//! release whose hold could lapse before its last retry writes a replay key (see `inflight`).
//!
//! Holds Redis may still count that no live guard stands for (lapsed, or left by a release that
//! ended unanswered) are kept in `leftover`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::standing::{Signal, Standing};
use super::{Held, HoldKey, Registry};

/// The holds of one lock name and holder field, while it has live guards.
pub(super) struct Holding {
    /// Live guards of this field, of every generation.
    guards: u32,
    /// This generation's live watchdog holds: registration id and lease (the client's watchdog
    /// timeout, or the hold's own). The field is renewed with the longest of them.
    pub(super) renewing: Vec<(u64, Duration)>,
    /// When the watchdog last sent a renewal of this field (at first, when its first hold's
    /// acquire was sent): it is due again a third of its lease later.
    pub(super) renewal_sent: Instant,
    /// This generation's live fixed holds: registration id and deadline.
    pub(super) fixed: Vec<(u64, Instant)>,
    /// Tells an older generation's guards and renewals from this one's.
    pub(super) generation: u64,
    /// The type of the hold, which renews it and lets go of it at shutdown.
    pub(super) held: Arc<dyn Held>,
    standing: Arc<Signal>,
    /// When the latest release that set the TTL outright was sent: a command sent before it
    /// was overridden by it.
    set_sent_at: Instant,
    /// The lapsed generation whose holds were dropped on Redis (see [`Registry::lapsed_hold`]).
    pub(super) dropped: Option<u64>,
}

impl Holding {
    pub(super) fn lapsed(&self, now: Instant) -> bool {
        self.standing.get().is_lost(now)
    }

    /// A command sent at `sent_at` that only extends the TTL (an acquire, a renewal) was
    /// confirmed with `lease`.
    pub(super) fn extended(&mut self, sent_at: Instant, lease: Duration) {
        if sent_at < self.set_sent_at {
            return;
        }
        let lapses_after = sent_at + lease;
        self.standing.change(|s| {
            let later = lapses_after > s.lapses_after;
            if later {
                s.lapses_after = lapses_after;
            }
            later
        });
    }

    /// Marks this generation lost, once; whether it was not lost before. The caller logs the
    /// loss once it has let go of the registry (a `tracing` subscriber is user code, which must
    /// not run under the registry's lock: should it panic, it would poison it).
    pub(super) fn lose(&mut self) -> bool {
        if self.standing.get().lost {
            return false;
        }
        self.standing.change(|s| {
            s.lost = true;
            true
        });
        self.renewing.clear();
        self.fixed.clear();
        true
    }

    /// The lease the watchdog renews this field with: the longest of its live watchdog holds'
    /// (`None`: it has none).
    pub(super) fn renewal_lease(&self) -> Option<Duration> {
        self.renewing.iter().map(|&(_, lease)| lease).max()
    }

    /// When the watchdog is due to renew this field: a third of its lease after the last
    /// renewal was sent (`None`: nothing to renew).
    pub(super) fn renewal_due(&self) -> Option<Instant> {
        if self.standing.get().lost {
            return None;
        }
        Some(self.renewal_sent + self.renewal_lease()? / 3)
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.standing.end();
    }
}

/// A lock due for renewal: its key, the generation of its entry, its type and its lease.
pub(crate) type Due = (HoldKey, u64, Arc<dyn Held>, Duration);

/// A hold just found lost: its key, its primitive, and why.
type Loss = (HoldKey, crate::primitive::Primitive, crate::meter::Loss);

/// What a guard keeps of its registration.
pub(crate) struct Registration {
    id: u64,
    generation: u64,
    renew: bool,
    pub(crate) standing: Arc<Signal>,
}

/// What [`Registry::unregister`] tells the release of a hold.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Leaving {
    /// Send the release: the hold can lapse from `lapses_after` on, as far as this client knows.
    Release { lapses_after: Instant },
    /// Send nothing: the hold was lost and the owner has taken the lock again since, so a
    /// release would strike the new hold.
    Lost,
}

/// The holds of the entry of `key`, if any.
pub(super) fn holding<'a>(map: &'a mut super::Map, key: &HoldKey) -> Option<&'a mut Holding> {
    map.get_mut(key).and_then(|entry| entry.holding.as_mut())
}

impl Registry {
    /// This generation's live holds of `key`.
    pub(crate) fn guards(&self, key: &HoldKey) -> u32 {
        let map = self.map.lock().unwrap();
        let holding = map.get(key).and_then(|e| e.holding.as_ref());
        holding.map_or(0, |e| (e.renewing.len() + e.fixed.len()) as u32)
    }

    /// Counts a new guard of a hold of type `held`; its acquire was sent at `sent_at` and asked
    /// for `lease`, renewed by the watchdog when `renew` (a watchdog lease: the client's
    /// watchdog timeout, or one of the hold's own, which the watchdog then renews every third
    /// of, and the field with the longest lease of its live watchdog holds).
    pub(crate) fn register(
        &self,
        key: HoldKey,
        held: &Arc<dyn Held>,
        renew: bool,
        sent_at: Instant,
        lease: Duration,
    ) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut map = self.map.lock().unwrap();
        let entry = map.entry(key).or_default();
        // A first hold starts its first generation here: one signal made, none replaced.
        let entry = entry.holding.get_or_insert_with(|| Holding {
            guards: 0,
            renewing: Vec::new(),
            renewal_sent: sent_at,
            fixed: Vec::new(),
            generation: id,
            held: held.clone(),
            standing: Signal::new(Standing {
                lost: false,
                lapses_after: sent_at + lease,
            }),
            set_sent_at: sent_at,
            dropped: None,
        });
        if entry.generation != id && entry.lapsed(now) {
            // A hold after a loss (or after the lease may have run out): a new generation and
            // signal for the guards from here on. The old signal stays lost for the guards that
            // have it.
            entry.standing.change(|s| {
                s.lost = true;
                true
            });
            entry.standing.end();
            entry.generation = id;
            entry.standing = Signal::new(Standing {
                lost: false,
                lapses_after: sent_at + lease,
            });
            entry.renewing.clear();
            entry.renewal_sent = sent_at;
            entry.fixed.clear();
            entry.set_sent_at = sent_at;
        }
        entry.guards += 1;
        if renew {
            if entry.renewing.is_empty() {
                // Its first watchdog hold: due a third of the lease after this acquire.
                entry.renewal_sent = sent_at;
            }
            entry.renewing.push((id, lease));
        } else {
            entry.fixed.push((id, sent_at + lease));
        }
        if entry.generation != id {
            entry.extended(sent_at, lease); // a re-entry; a new generation starts with it
        }
        let registration = Registration {
            id,
            generation: entry.generation,
            renew,
            standing: entry.standing.clone(),
        };
        drop(map);
        if renew && lease < self.watchdog {
            // Due sooner than the watchdog may plan to wake.
            self.sooner.notify_one();
        }
        registration
    }

    /// Forgets a guard. Called before its release is sent, so no renewal follows the release.
    pub(crate) fn unregister(&self, key: &HoldKey, registration: &Registration) -> Leaving {
        let mut map = self.map.lock().unwrap();
        let Some(entry) = holding(&mut map, key) else {
            return Leaving::Lost;
        };
        entry.guards = entry.guards.saturating_sub(1);
        let current = entry.generation == registration.generation;
        if current {
            if registration.renew {
                entry.renewing.retain(|(id, _)| *id != registration.id);
            } else {
                entry.fixed.retain(|(id, _)| *id != registration.id);
            }
        }
        let lapses_after = entry.standing.get().lapses_after;
        if entry.guards == 0 {
            Registry::forget(&mut map, key, |entry| entry.holding = None);
        }
        if current {
            Leaving::Release { lapses_after }
        } else {
            Leaving::Lost
        }
    }

    /// How long the live holds of `key` need the lock from now: the longest lease of its live
    /// watchdog holds while one lives, else what is left of the latest fixed deadline (`None`:
    /// no live hold, or only fixed ones past their deadline).
    pub(crate) fn need(&self, key: &HoldKey) -> Option<Duration> {
        let map = self.map.lock().unwrap();
        let entry = map.get(key)?.holding.as_ref()?;
        if let Some(lease) = entry.renewal_lease() {
            return Some(lease);
        }
        let now = Instant::now();
        let latest = entry.fixed.iter().map(|(_, deadline)| *deadline).max()?;
        (latest > now).then(|| latest - now)
    }

    /// Notes that a release sent at `sent_at` left holds behind and set the TTL to `lease`.
    pub(crate) fn lease_set(&self, key: &HoldKey, sent_at: Instant, lease: Duration) {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap();
        let Some(entry) = holding(&mut map, key) else {
            return;
        };
        if entry.lapsed(now) {
            if entry.lose() {
                let kind = entry.held.primitive();
                drop(map);
                self.log_lost(vec![(key.clone(), kind, crate::meter::Loss::Expired)]);
            }
        } else if sent_at >= entry.set_sent_at {
            entry.set_sent_at = sent_at;
            entry.standing.change(|s| {
                s.lapses_after = sent_at + lease;
                true
            });
        }
    }

    /// Every lock and field with live guards, with the type of its holds.
    pub(crate) fn holds(&self) -> Vec<(HoldKey, Arc<dyn Held>)> {
        let map = self.map.lock().unwrap();
        let holdings = map
            .iter()
            .filter_map(|(k, e)| Some((k, e.holding.as_ref()?)));
        holdings.map(|(k, e)| (k.clone(), e.held.clone())).collect()
    }

    /// Logs and counts the holds just found lost; called with the registry unlocked.
    pub(super) fn log_lost(&self, lost: Vec<Loss>) {
        for (key, kind, why) in lost {
            self.meter.lost(kind, &key.0, why);
            tracing::warn!(lock = %key.0, holder = %key.1, "lock lease lost: {}", why.why());
        }
    }

    /// (holds, of which renewing) for leak checks.
    pub(crate) fn hold_counts(&self) -> (usize, usize) {
        let map = self.map.lock().unwrap();
        let holdings = map.values().filter_map(|e| e.holding.as_ref());
        let (mut holds, mut renewing) = (0, 0);
        for holding in holdings {
            holds += 1;
            renewing += usize::from(!holding.renewing.is_empty());
        }
        (holds, renewing)
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    use crate::error::Call;
    use crate::meter::Meter;
    use crate::registry::{Closing, Renewal};

    /// A type the registry only counts: nothing here reaches Redis.
    struct Counted;

    impl Held for Counted {
        fn renewal(&self) -> &'static str {
            "lock"
        }

        fn primitive(&self) -> crate::primitive::Primitive {
            crate::primitive::Primitive::Lock
        }

        fn renew<'a>(&'a self, _: Renewal<'a>) -> Call<'a, Vec<bool>> {
            unreachable!("no watchdog runs here")
        }

        fn close_holds<'a>(&'a self, _: &'a Closing<'a>, _: &'a HoldKey) -> Call<'a, bool> {
            unreachable!("no shutdown runs here")
        }
    }

    #[tokio::test]
    async fn a_hold_left_behind_is_dropped_only_while_the_owner_holds_none() {
        let registry = Registry::new(Duration::from_secs(30), Arc::new(Meter::detached()));
        let held: Arc<dyn Held> = Arc::new(Counted);
        let key: HoldKey = ("orders:42".into(), "client:task-1".into());
        registry.left_behind(&key);
        assert!(registry.left_hold(&key));
        let live = registry.register(
            key.clone(),
            &held,
            true,
            Instant::now(),
            Duration::from_secs(30),
        );
        assert!(!registry.left_hold(&key), "the field has a live hold");
        registry.unregister(&key, &live);
        assert!(registry.left_hold(&key), "forgotten with the last guard");
        registry.field_gone(&key);
        assert!(!registry.left_hold(&key));
        assert_eq!(registry.entries(), 0, "a spent entry is kept");
        registry.left_behind(&key);
        registry.dropped(&key);
        assert!(!registry.left_hold(&key));
        assert_eq!(registry.entries(), 0, "a spent entry is kept");
    }

    #[tokio::test]
    async fn a_renewal_that_crossed_its_holders_release_is_no_loss() {
        let registry = Registry::new(Duration::from_secs(30), Arc::new(Meter::detached()));
        let held: Arc<dyn Held> = Arc::new(Counted);
        let key: HoldKey = ("orders:42".into(), "client:task-1".into());
        let hold =
            |sent_at| registry.register(key.clone(), &held, true, sent_at, Duration::from_secs(30));

        // Released: its guard left before the renewal's answer came.
        let released = hold(Instant::now());
        assert!(matches!(
            registry.unregister(&key, &released),
            Leaving::Release { .. }
        ));
        registry.found_gone(&key, released.generation);
        let counts = registry.meter.counts();
        assert_eq!((counts.leases_lost, counts.renewals), (0, 0));

        // Still held: lost once, and counted at each answer that found it gone.
        let live = hold(Instant::now());
        registry.found_gone(&key, live.generation);
        assert!(live.standing.get().lost);
        registry.found_gone(&key, live.generation);
        let counts = registry.meter.counts();
        assert_eq!((counts.leases_lost, counts.renewals), (1, 2));

        // Held anew (a new generation after the loss): the old generation's answer is stale.
        let anew = hold(Instant::now());
        assert_ne!(anew.generation, live.generation);
        registry.found_gone(&key, live.generation);
        assert!(!anew.standing.get().lost);
        let counts = registry.meter.counts();
        assert_eq!((counts.leases_lost, counts.renewals), (1, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn each_field_is_due_a_third_of_its_own_lease_after_its_last_renewal() {
        let client = Duration::from_secs(30);
        let registry = Registry::new(client, Arc::new(Meter::detached()));
        let held: Arc<dyn Held> = Arc::new(Counted);
        let long: HoldKey = ("orders:long".into(), "client:task-1".into());
        let short: HoldKey = ("orders:short".into(), "client:task-1".into());
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let _long = registry.register(long.clone(), &held, true, t0, client);
        let short_hold = registry.register(short.clone(), &held, true, t0, s(3));
        assert_eq!(registry.need(&short), Some(s(3)));
        assert_eq!(registry.next_due(), Some(t0 + s(1)));

        // Not before half its period has passed.
        let (due, next) = registry.due(t0 + Duration::from_millis(400));
        assert!(due.is_empty());
        assert_eq!(next, Some(t0 + s(1)));
        let (due, next) = registry.due(t0 + s(1));
        let renewed: Vec<_> = due.iter().map(|d| (d.0.clone(), d.3)).collect();
        assert_eq!(renewed, vec![(short.clone(), s(3))]);
        assert_eq!(next, Some(t0 + s(2)));

        // A field due within the period of one due now is renewed with it: the long one (due
        // at 10 s) not at 5 s, but at 9 s, with the short one (due at 2 s, renewed late).
        let (due, _) = registry.due(t0 + s(5));
        let renewed: Vec<_> = due.iter().map(|d| d.0.clone()).collect();
        assert_eq!(renewed, vec![short.clone()]);
        let (due, _) = registry.due(t0 + s(9));
        let mut renewed: Vec<_> = due.iter().map(|d| (d.0.clone(), d.3)).collect();
        renewed.sort();
        assert_eq!(renewed, vec![(long.clone(), client), (short.clone(), s(3))]);

        // A renewal extends the field's deadline by the lease it was sent with.
        registry.renewed(&short, short_hold.generation, t0 + s(9), s(3));
        assert_eq!(short_hold.standing.get().lapses_after, t0 + s(12));

        // A re-entry with a longer lease of its own: the field is renewed with the longest.
        let longer = registry.register(short.clone(), &held, true, t0 + s(9), s(60));
        assert_eq!(registry.need(&short), Some(s(60)));
        assert_eq!(registry.next_due(), Some(t0 + s(19)), "the long field's");
        registry.unregister(&short, &longer);
        assert_eq!(registry.need(&short), Some(s(3)));

        // Released: no longer renewed.
        assert_eq!(registry.next_due(), Some(t0 + s(10)));
        registry.unregister(&short, &short_hold);
        assert_eq!(registry.next_due(), Some(t0 + s(19)), "the long field's");
        let (due, _) = registry.due(t0 + s(12));
        assert!(due.is_empty());
    }
}
