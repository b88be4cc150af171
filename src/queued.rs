//! The places this client's waiters hold on Redis, in fair locks' queues and as claims on locks'
//! next hand-offs, so that a client that shuts down gives them up before it closes its
//! connection: a waiter of a closed client leaves no place behind for the others to wait out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fred::bytes_utils::Str;

use crate::holds::Held;

/// Places in fair queues (or claims), per (lock name, holder field): how many waiters of this
/// client hold each (waiters that share an owner share its place), and the lock's type, which
/// gives the place up at shutdown.
#[derive(Default)]
pub(crate) struct Queued(Mutex<HashMap<(Str, Str), Place>>);

/// How many waiters hold one place, and the type of its lock.
type Place = (usize, Arc<dyn Held>);

impl Queued {
    /// A waiter may have taken the place of `field` in the queue of lock `name`, of type `held`.
    pub(crate) fn enter(&self, name: &Str, field: &Str, held: &Arc<dyn Held>) {
        self.0
            .lock()
            .unwrap()
            .entry((name.clone(), field.clone()))
            .or_insert_with(|| (0, held.clone()))
            .0 += 1;
    }

    /// That waiter has left the queue, or is leaving it.
    pub(crate) fn leave(&self, name: &Str, field: &Str) {
        let mut map = self.0.lock().unwrap();
        let key = (name.clone(), field.clone());
        if let Some((count, _)) = map.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                map.remove(&key);
            }
        }
    }

    /// Every place held now, with the type of its lock.
    pub(crate) fn all(&self) -> Vec<((Str, Str), Arc<dyn Held>)> {
        let map = self.0.lock().unwrap();
        map.iter()
            .map(|(k, (_, held))| (k.clone(), held.clone()))
            .collect()
    }
}
