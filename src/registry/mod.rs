//! The client's registry: one entry per (lock name, holder field), with everything this client
//! has going on that lock as that holder, in one place:
//!
//! - its holds: the live guards, the leases they need and what they know of their hold
//!   (`holds`);
//! - the acquires, releases and leaves of a queue in flight, which order an owner's acquires
//!   after its releases and leaves (`inflight`);
//! - the places its waiters hold on Redis: in the lock's queue (a fair lock's), and claims on the
//!   lock's next hand-off, which a shutdown gives up before it closes the connection, so a
//!   closed client's waiter leaves no place behind for the others to wait out.
//!
//! An entry keeps the type of what it holds ([`Held`]), which renews its holds and lets go of
//! them at shutdown: neither the watchdog nor `Client::close` asks which type it is. An entry
//! goes as soon as all its parts are empty.

mod holds;
mod inflight;
mod leftover;
mod renewals;
mod standing;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::bytes_utils::Str;
use tokio::sync::Notify;

use crate::connection::Connection;
use crate::error::Call;
use crate::meter::Meter;

pub(crate) use holds::{Leaving, Registration};
pub(crate) use inflight::{Acquiring, Releasing};
pub(crate) use standing::Signal;

/// A lock name and a holder field.
pub(crate) type HoldKey = (Str, Str);

/// What the client's own machinery (the watchdog, and a shutdown) needs of the type of a thing
/// it holds on Redis: each type says it once, and neither the watchdog nor `Client::close`
/// looks at which type it is. The lock family implements it through its `LockType` (see
/// `lock::kind`).
pub(crate) trait Held: Send + Sync + 'static {
    /// The renewals this type's holds join: holds whose types name the same one are renewed
    /// together, by one [`renew`](Held::renew) call per batch (and cluster slot).
    fn renewal(&self) -> &'static str;

    /// The primitive it is, as metrics label it.
    fn primitive(&self) -> crate::primitive::Primitive;

    /// Extends each of the renewal's locks whose hold is still there; `true` per renewed lock,
    /// in order.
    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> Call<'a, Vec<bool>>;

    /// Shutdown: drops every hold of `held`'s field on its lock at once, waking whom a release
    /// that frees it wakes; `true` when it had any.
    fn close_holds<'a>(&'a self, closing: &'a Closing<'a>, held: &'a HoldKey) -> Call<'a, bool>;

    /// Shutdown: gives up the place `held`'s waiters hold in its lock's queue; `true` when
    /// there was one. Nothing for a type without queues (the default).
    fn close_place<'a>(&'a self, _closing: &'a Closing<'a>, _held: &'a HoldKey) -> Call<'a, bool> {
        Box::pin(futures::future::ready(Ok(false)))
    }

    /// Shutdown: withdraws `held`'s claim on its lock's next hand-off; `true` when there
    /// was one. Nothing for a type without claims (the default).
    fn close_claim<'a>(&'a self, _closing: &'a Closing<'a>, _held: &'a HoldKey) -> Call<'a, bool> {
        Box::pin(futures::future::ready(Ok(false)))
    }
}

/// One renewal call: the holds it extends (lock name, holder field), by how much, and the
/// connection it goes on.
#[derive(Clone, Copy)]
pub(crate) struct Renewal<'a> {
    pub(crate) redis: &'a Connection,
    pub(crate) locks: &'a [HoldKey],
    pub(crate) lease_ms: u64,
}

/// What a closing client hands each held thing so it can let go.
pub(crate) struct Closing<'a> {
    pub(crate) redis: &'a Connection,
    /// The client's publish command.
    pub(crate) publish: &'static str,
    /// The claim window in ms.
    pub(crate) claim_window_ms: u64,
}

/// What a waiter may hold on Redis besides a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// A place in the lock's queue.
    Queue,
    /// A claim on the lock's next hand-off.
    Claim,
}

/// One place, shared by the waiters of one holder field (waiters that share an owner share its
/// place): how many hold it, and the type of its lock.
struct Shared {
    waiters: usize,
    held: Arc<dyn Held>,
}

/// Everything of one lock name and holder field.
#[derive(Default)]
struct Entry {
    holding: Option<holds::Holding>,
    in_flight: inflight::Counts,
    queued: Option<Shared>,
    claimed: Option<Shared>,
    /// A release of the owner's, or the check after its acquire cancelled mid-flight, ended
    /// unanswered: a hold of the owner's may be left on Redis, to its lease, with no guard (see
    /// [`Registry::left_behind`]).
    left: bool,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.holding.is_none()
            && self.in_flight.is_empty()
            && self.queued.is_none()
            && self.claimed.is_none()
            && !self.left
    }

    fn place(&mut self, place: Place) -> &mut Option<Shared> {
        match place {
            Place::Queue => &mut self.queued,
            Place::Claim => &mut self.claimed,
        }
    }
}

/// The registry's map: a fast hasher seeded per process (lock names may come from outside).
type Map = HashMap<HoldKey, Entry, foldhash::fast::RandomState>;

/// The registry of one client.
pub(crate) struct Registry {
    map: Mutex<Map>,
    /// Told whenever a lock and field has no release or leave in flight any more.
    settled: Notify,
    next_id: AtomicU64,
    /// The lease of a watchdog hold without one of its own (the client's watchdog timeout).
    watchdog: Duration,
    /// Told when a watchdog hold with a shorter lease registers (see [`Registry::due_sooner`]).
    sooner: Notify,
    /// Where holds found lost are counted.
    pub(crate) meter: Arc<Meter>,
}

impl Registry {
    /// An empty registry; `watchdog` is the lease of a watchdog hold.
    pub(crate) fn new(watchdog: Duration, meter: Arc<Meter>) -> Registry {
        Registry {
            map: Mutex::default(),
            settled: Notify::new(),
            next_id: AtomicU64::new(1),
            watchdog,
            sooner: Notify::new(),
            meter,
        }
    }

    /// Applies `change` to the entry of `key` and drops the entry if that left it empty.
    fn forget(map: &mut Map, key: &HoldKey, change: impl FnOnce(&mut Entry)) {
        if let Some(entry) = map.get_mut(key) {
            change(entry);
            if entry.is_empty() {
                map.remove(key);
            }
        }
    }

    /// A waiter may have taken `place` for `field` on lock `name`, of type `held`.
    pub(crate) fn enter(&self, place: Place, name: &Str, field: &Str, held: &Arc<dyn Held>) {
        let mut map = self.map.lock().unwrap();
        let entry = map.entry((name.clone(), field.clone())).or_default();
        let shared = entry.place(place).get_or_insert_with(|| Shared {
            waiters: 0,
            held: held.clone(),
        });
        shared.waiters += 1;
    }

    /// That waiter has left `place`, or is leaving it; whether it was the last of its field's
    /// waiters there (no other waiter holds the place now).
    pub(crate) fn leave(&self, place: Place, name: &Str, field: &Str) -> bool {
        let mut map = self.map.lock().unwrap();
        let key = (name.clone(), field.clone());
        let mut last = true;
        Registry::forget(&mut map, &key, |entry| {
            let shared = entry.place(place);
            if let Some(held) = shared {
                held.waiters -= 1;
                last = held.waiters == 0;
                if last {
                    *shared = None;
                }
            }
        });
        last
    }

    /// Every `place` held now, with the type of its lock.
    pub(crate) fn places(&self, place: Place) -> Vec<(HoldKey, Arc<dyn Held>)> {
        let mut map = self.map.lock().unwrap();
        let places = map.iter_mut().filter_map(|(key, entry)| {
            let shared = entry.place(place).as_ref()?;
            Some((key.clone(), shared.held.clone()))
        });
        places.collect()
    }

    /// How many entries there are.
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.map.lock().unwrap().len()
    }
}
