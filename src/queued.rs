//! The places this client's waiters hold on Redis, in fair locks' queues and as claims on locks'
//! next hand-offs, so that a client that shuts down gives them up before it closes its
//! connection: a waiter of a closed client leaves no place behind for the others to wait out.

use std::collections::HashMap;
use std::sync::Mutex;

use fred::bytes_utils::Str;

/// Places in fair queues (or claims), per (lock name, holder field): how many waiters of this
/// client hold each (waiters that share an owner share its place).
#[derive(Default)]
pub(crate) struct Queued(Mutex<HashMap<(Str, Str), usize>>);

impl Queued {
    /// A waiter may have taken the place of `field` in the queue of lock `name`.
    pub(crate) fn enter(&self, name: &Str, field: &Str) {
        *self
            .0
            .lock()
            .unwrap()
            .entry((name.clone(), field.clone()))
            .or_default() += 1;
    }

    /// That waiter has left the queue, or is leaving it.
    pub(crate) fn leave(&self, name: &Str, field: &Str) {
        let mut map = self.0.lock().unwrap();
        let key = (name.clone(), field.clone());
        if let Some(count) = map.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                map.remove(&key);
            }
        }
    }

    /// Every place held now.
    pub(crate) fn all(&self) -> Vec<(Str, Str)> {
        self.0.lock().unwrap().keys().cloned().collect()
    }
}
