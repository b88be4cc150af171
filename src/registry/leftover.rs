//! Holds of an owner that Redis may still count while no live guard stands for them: a
//! generation that lapsed locally (Redis may still have it: a lapse is the earliest it can end),
//! and a hold a release (or the check after a cancelled acquire) left to its lease when it ended
//! unanswered. The owner drops its field on Redis before it acquires again
//! (`lock::attempt::Sending::gate`), so that the acquire starts from nothing there and a
//! read-back after its lost request or reply can tell a hold it took from one left over.

use tokio::time::Instant;

use super::holds::holding;
use super::{HoldKey, Registry};

impl Registry {
    /// Whether the owner's current generation of holds of `key` lapsed while guards of it
    /// live, and was not dropped on Redis yet: Redis may still count those holds (a lapse is
    /// the earliest they can end), and the owner's next acquire would re-enter them there, so
    /// that a read-back after its lost reply could not tell a stale hold from a new one. Marks
    /// the generation lost (no renewal follows); the caller drops the owner's field (see
    /// `lock::attempt::Sending::gate`) and then calls [`dropped`](Registry::dropped).
    pub(crate) fn lapsed_hold(&self, key: &HoldKey) -> bool {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap();
        let Some(entry) = holding(&mut map, key) else {
            return false;
        };
        if !entry.lapsed(now) || entry.dropped == Some(entry.generation) {
            return false;
        }
        if entry.lose() {
            let kind = entry.held.primitive();
            drop(map);
            self.log_lost(vec![(key.clone(), kind, crate::meter::Loss::Expired)]);
        }
        true
    }

    /// The owner's field of `key` was dropped on Redis (after its generation lapsed, or after a
    /// release or check of its ended unanswered): nothing of it is left there.
    pub(crate) fn dropped(&self, key: &HoldKey) {
        let mut map = self.map.lock().unwrap();
        Registry::forget(&mut map, key, |entry| entry.left = false);
        if let Some(entry) = holding(&mut map, key) {
            entry.dropped = Some(entry.generation);
        }
    }

    /// A release of the owner's holds of `key`, or the check after an acquire of its cancelled
    /// mid-flight, ended without an answer that settles it (a Redis error: every send went
    /// unanswered, or none went out): a hold of the owner's may be left on Redis, to its lease,
    /// with no guard for it. Its next acquire with no live hold of `key` would take it for the
    /// hold it took, should its own request be lost (the read-back counts the owner's field
    /// against its live guards), so that acquire drops the field first
    /// ([`left_hold`](Registry::left_hold)).
    pub(crate) fn left_behind(&self, key: &HoldKey) {
        let mut map = self.map.lock().unwrap();
        map.entry(key.clone()).or_default().left = true;
    }

    /// Whether a hold of the owner's may be left on Redis by a release or check of `key` that
    /// ended unanswered ([`left_behind`](Registry::left_behind)) while the owner has no live
    /// hold of `key`: the caller drops the owner's field (see `lock::attempt::Sending::gate`)
    /// and then calls [`dropped`](Registry::dropped). While holds of the owner's live the field
    /// is theirs too, and stays: the owner's last release drops it whatever its count.
    pub(crate) fn left_hold(&self, key: &HoldKey) -> bool {
        let map = self.map.lock().unwrap();
        map.get(key).is_some_and(|entry| {
            let live = entry.holding.as_ref();
            entry.left && live.map_or(true, |h| h.renewing.is_empty() && h.fixed.is_empty())
        })
    }

    /// An answered release left nothing of the owner's field of `key` on Redis (it freed the
    /// lock, found no hold, or dropped the field whatever its count): no hold a release or
    /// check left behind remains.
    pub(crate) fn field_gone(&self, key: &HoldKey) {
        let mut map = self.map.lock().unwrap();
        Registry::forget(&mut map, key, |entry| entry.left = false);
    }
}
