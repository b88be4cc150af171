//! Who holds what in this client: one entry per (lock name, holder field) with its live guards,
//! the leases they need and what they know of their hold.
//!
//! Every live guard is counted here under its lock name and holder field, with the lease its
//! hold needs: a watchdog hold needs the watchdog timeout, renewed; a fixed hold needs its own
//! deadline (its acquire's send time plus its lease). All holds of one owner share the lock's one
//! TTL, so relock keeps this rule: **the lock's TTL is never shorter than what any live hold
//! needs, and never longer than the longest of them.** An acquire and a renewal only ever extend
//! the TTL (`lua/lock/acquire.lua`, `lua/lock/renew.lua`), and a release that leaves holds
//! behind sets it to what the holds that remain need, as computed here ([`Holds::need`]).
//!
//! The watchdog (`watchdog`) renews the entries with watchdog holds and reports back here. A
//! release stops renewal before it sends anything, so renewal and release never race.
//!
//! Each field also keeps the earliest moment its hold can lapse: the send time of the latest
//! command that confirmed its lease, plus that lease (the server applied it after it was sent).
//! Past that moment a guard reports itself lost at once, before any round trip: a holder whose
//! process was stopped past its lease learns it as soon as it runs again. A loss is final for the
//! holds it struck; a later acquire by the same owner starts a new *generation* with a fresh
//! signal. A release hands the lapse moment on: a last release whose hold could lapse before its
//! last retry writes a replay key (see `inflight`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use fred::bytes_utils::Str;
use tokio::sync::watch;
use tokio::time::Instant;

/// A lock name and a holder field.
pub(crate) type HoldKey = (Str, Str);

/// Whether and how the watchdog renews a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renew {
    /// A fixed lease: nobody renews it.
    No,
    /// The watchdog extends the lock while the holder field is there.
    Field,
    /// A read-write lock's reader: the watchdog extends the reader's own timeout keys (and the
    /// lock with them) while one of them lives.
    Reader,
}

/// What the guards of one field know of their hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Standing {
    /// Known lost: the lock was found gone, the lease ran out, or the client shut down.
    pub(crate) lost: bool,
    /// The earliest moment the hold can lapse.
    pub(crate) lapses_after: Instant,
}

impl Standing {
    /// Whether the hold may be gone at `now`.
    pub(crate) fn is_lost(&self, now: Instant) -> bool {
        self.lost || now >= self.lapses_after
    }
}

struct Entry {
    /// Live guards of this field, of every generation.
    guards: u32,
    /// This generation's live watchdog holds.
    renewing: u32,
    /// This generation's live fixed holds: registration id and deadline.
    fixed: Vec<(u64, Instant)>,
    /// Tells an older generation's guards and renewals from this one's.
    generation: u64,
    /// Whether the field is a read-write lock's reader (see [`Renew::Reader`]).
    reader: bool,
    standing: watch::Sender<Standing>,
    /// When the latest release that set the TTL outright was sent: a command sent before it
    /// was overridden by it.
    set_sent_at: Instant,
}

impl Entry {
    fn lapsed(&self, now: Instant) -> bool {
        self.standing.borrow().is_lost(now)
    }

    /// A command sent at `sent_at` that only extends the TTL (an acquire, a renewal) was
    /// confirmed with `lease`.
    fn extended(&mut self, sent_at: Instant, lease: Duration) {
        if sent_at < self.set_sent_at {
            return;
        }
        let lapses_after = sent_at + lease;
        self.standing.send_if_modified(|s| {
            let later = lapses_after > s.lapses_after;
            if later {
                s.lapses_after = lapses_after;
            }
            later
        });
    }

    /// Marks this generation lost, once.
    fn lose(&mut self, key: &HoldKey, why: &str) {
        if !self.standing.borrow().lost {
            self.standing.send_modify(|s| s.lost = true);
            self.renewing = 0;
            self.fixed.clear();
            tracing::warn!(lock = %key.0, holder = %key.1, "lock lease lost: {why}");
        }
    }
}

/// The holds of one client.
pub(crate) struct Holds {
    map: Mutex<HashMap<HoldKey, Entry>>,
    next_id: AtomicU64,
    /// The lease of a watchdog hold.
    watchdog: Duration,
}

/// What a guard keeps of its registration.
pub(crate) struct Registration {
    id: u64,
    generation: u64,
    renew: bool,
    pub(crate) standing: watch::Receiver<Standing>,
}

/// What [`Holds::unregister`] tells the release of a hold.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Leaving {
    /// Send the release: the hold can lapse from `lapses_after` on, as far as this client knows.
    Release { lapses_after: Instant },
    /// Send nothing: the hold was lost and the owner has taken the lock again since, so a
    /// release would strike the new hold.
    Lost,
}

impl Holds {
    pub(crate) fn new(watchdog: Duration) -> Holds {
        Holds {
            map: Mutex::default(),
            next_id: AtomicU64::new(1),
            watchdog,
        }
    }

    /// This generation's live holds of `key`.
    pub(crate) fn guards(&self, key: &HoldKey) -> u32 {
        self.map
            .lock()
            .unwrap()
            .get(key)
            .map_or(0, |e| e.renewing + e.fixed.len() as u32)
    }

    /// Counts a new guard; its acquire was sent at `sent_at` and asked for `lease`, renewed by
    /// the watchdog as `renew` says.
    pub(crate) fn register(
        &self,
        key: HoldKey,
        renew: Renew,
        sent_at: Instant,
        lease: Duration,
    ) -> Registration {
        let reader = renew == Renew::Reader;
        let renew = renew != Renew::No;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut map = self.map.lock().unwrap();
        let entry = map.entry(key).or_insert_with(|| Entry {
            guards: 0,
            renewing: 0,
            fixed: Vec::new(),
            generation: 0,
            reader,
            standing: watch::Sender::new(Standing {
                lost: true,
                lapses_after: sent_at,
            }),
            set_sent_at: sent_at,
        });
        if entry.lapsed(now) {
            // A fresh hold, or one after a loss: a new signal for the guards from here on. The
            // old signal stays lost for the guards that have it.
            if entry.standing.receiver_count() > 0 {
                entry.standing.send_modify(|s| s.lost = true);
            }
            entry.generation = id;
            entry.standing = watch::Sender::new(Standing {
                lost: false,
                lapses_after: sent_at + lease,
            });
            entry.renewing = 0;
            entry.fixed.clear();
            entry.set_sent_at = sent_at;
        }
        entry.guards += 1;
        if renew {
            entry.renewing += 1;
        } else {
            entry.fixed.push((id, sent_at + lease));
        }
        if entry.generation != id {
            entry.extended(sent_at, lease); // a re-entry; a new generation starts with it
        }
        Registration {
            id,
            generation: entry.generation,
            renew,
            standing: entry.standing.subscribe(),
        }
    }

    /// Forgets a guard. Called before its release is sent, so no renewal follows the release.
    pub(crate) fn unregister(&self, key: &HoldKey, registration: &Registration) -> Leaving {
        let mut map = self.map.lock().unwrap();
        let Some(entry) = map.get_mut(key) else {
            return Leaving::Lost;
        };
        entry.guards = entry.guards.saturating_sub(1);
        let current = entry.generation == registration.generation;
        if current {
            if registration.renew {
                entry.renewing = entry.renewing.saturating_sub(1);
            } else {
                entry.fixed.retain(|(id, _)| *id != registration.id);
            }
        }
        let lapses_after = entry.standing.borrow().lapses_after;
        if entry.guards == 0 {
            map.remove(key);
        }
        if current {
            Leaving::Release { lapses_after }
        } else {
            Leaving::Lost
        }
    }

    /// How long the live holds of `key` need the lock from now: the watchdog timeout while a
    /// watchdog hold lives, else what is left of the latest fixed deadline (`None`: no live
    /// hold, or only fixed ones past their deadline).
    pub(crate) fn need(&self, key: &HoldKey) -> Option<Duration> {
        let map = self.map.lock().unwrap();
        let entry = map.get(key)?;
        if entry.renewing > 0 {
            return Some(self.watchdog);
        }
        let now = Instant::now();
        let latest = entry.fixed.iter().map(|(_, deadline)| *deadline).max()?;
        (latest > now).then(|| latest - now)
    }

    /// Notes that a release sent at `sent_at` left holds behind and set the TTL to `lease`.
    pub(crate) fn lease_set(&self, key: &HoldKey, sent_at: Instant, lease: Duration) {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap();
        let Some(entry) = map.get_mut(key) else {
            return;
        };
        if entry.lapsed(now) {
            entry.lose(
                key,
                "its lease ran out before the release that set it came back",
            );
        } else if sent_at >= entry.set_sent_at {
            entry.set_sent_at = sent_at;
            entry
                .standing
                .send_modify(|s| s.lapses_after = sent_at + lease);
        }
    }

    /// The locks to renew now, with the generation of their entry and whether the field is a
    /// reader's.
    pub(crate) fn due(&self) -> Vec<(HoldKey, u64, bool)> {
        let map = self.map.lock().unwrap();
        map.iter()
            .filter(|(_, e)| e.renewing > 0 && !e.standing.borrow().lost)
            .map(|(k, e)| (k.clone(), e.generation, e.reader))
            .collect()
    }

    pub(crate) fn renewed(&self, key: &HoldKey, generation: u64, sent_at: Instant) {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap();
        if let Some(entry) = map.get_mut(key) {
            if entry.generation != generation {
                return;
            }
            if entry.lapsed(now) {
                // Its guards may have been told already: a loss is not taken back.
                entry.lose(key, "its lease ran out before its renewal came back");
            } else {
                entry.extended(sent_at, self.watchdog);
            }
        }
    }

    /// Marks a hold lost: its guards' `lost()` completes and renewal stops.
    pub(crate) fn lose(&self, key: &HoldKey, generation: u64, why: &str) {
        let mut map = self.map.lock().unwrap();
        if let Some(entry) = map.get_mut(key) {
            if entry.generation == generation {
                entry.lose(key, why);
            }
        }
    }

    /// Marks lost every renewing hold whose lease may have run out.
    pub(crate) fn lose_lapsed(&self) {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap();
        for (key, entry) in map.iter_mut() {
            if entry.renewing > 0 && entry.lapsed(now) {
                entry.lose(key, "renewals did not come back before the lease ran out");
            }
        }
    }

    /// Every lock and field with live guards.
    pub(crate) fn keys(&self) -> Vec<HoldKey> {
        self.map.lock().unwrap().keys().cloned().collect()
    }

    /// Marks every hold lost, saying `why`.
    pub(crate) fn lose_all(&self, why: &str) {
        let mut map = self.map.lock().unwrap();
        for (key, entry) in map.iter_mut() {
            entry.lose(key, why);
        }
    }

    /// (holds, of which renewing) for leak checks.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let map = self.map.lock().unwrap();
        (map.len(), map.values().filter(|e| e.renewing > 0).count())
    }
}
