//! What the watchdog asks of the registry and tells it: which holds are due for renewal (each a
//! third of its lease after its last renewal), and what each renewal found (extended, gone, or
//! answered too late), which moves or ends the holds' standing (see `holds`); and the holds
//! marked lost at once at a shutdown.

use std::time::Duration;

use tokio::time::Instant;

use super::holds::{holding, Due, Holding};
use super::{HoldKey, Registry};

impl Registry {
    /// The locks to renew at `now`, with the generation of their entry, their type and the
    /// lease to renew them with; each counts as renewed from `now` on. The locks due by `now`
    /// are renewed, and with them, so they share script calls, every lock due within the shortest
    /// renewal period (a third of a lease) of those, but at most half its own period early.
    /// Also the moment the next lock is due (`None`: none is renewed).
    pub(crate) fn due(&self, now: Instant) -> (Vec<Due>, Option<Instant>) {
        let mut map = self.map.lock().unwrap();
        // The shortest renewal period of the locks due now.
        let shortest = map
            .values()
            .filter_map(|e| e.holding.as_ref())
            .filter_map(|e| Some((e.renewal_due()?, e.renewal_lease()? / 3)))
            .filter(|&(at, _)| at <= now)
            .map(|(_, period)| period)
            .min();
        let holdings = map
            .iter_mut()
            .filter_map(|(k, e)| Some((k, e.holding.as_mut()?)));
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for (key, entry) in holdings {
            let (Some(at), Some(lease)) = (entry.renewal_due(), entry.renewal_lease()) else {
                continue;
            };
            let early = shortest.map(|shortest| shortest.min(lease / 6));
            let at = if early.is_some_and(|early| at <= now + early) {
                due.push((key.clone(), entry.generation, entry.held.clone(), lease));
                entry.renewal_sent = now;
                now + lease / 3
            } else {
                at
            };
            next = Some(next.map_or(at, |next| next.min(at)));
        }
        (due, next)
    }

    /// When the next lock is due for renewal (`None`: none is renewed).
    pub(crate) fn next_due(&self) -> Option<Instant> {
        let map = self.map.lock().unwrap();
        let holdings = map.values().filter_map(|e| e.holding.as_ref());
        holdings.filter_map(Holding::renewal_due).min()
    }

    /// Completes once a watchdog hold with a lease shorter than the client's registered: it may
    /// be due before the watchdog planned to wake.
    pub(crate) async fn due_sooner(&self) {
        self.sooner.notified().await;
    }

    /// A renewal of `key`'s hold of `generation`, sent at `sent_at` with `lease`, extended it.
    pub(crate) fn renewed(
        &self,
        key: &HoldKey,
        generation: u64,
        sent_at: Instant,
        lease: Duration,
    ) {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap();
        if let Some(entry) = holding(&mut map, key) {
            if entry.generation != generation {
                return;
            }
            if entry.lapsed(now) {
                // Its guards may have been told already: a loss is not taken back.
                if entry.lose() {
                    let kind = entry.held.primitive();
                    drop(map);
                    self.log_lost(vec![(key.clone(), kind, crate::meter::Loss::RenewalLate)]);
                }
            } else {
                entry.extended(sent_at, lease);
            }
        }
    }

    /// A renewal found `key`'s hold of `generation` gone: the hold is lost (its guards'
    /// `lost()` completes, renewal stops) and the renewal counts as one that found it gone.
    /// Neither when the hold had ended meanwhile: its guards gone (a renewal that crossed its
    /// holder's release) or the owner holding the lock anew.
    pub(crate) fn found_gone(&self, key: &HoldKey, generation: u64) {
        let mut map = self.map.lock().unwrap();
        let Some(entry) = holding(&mut map, key).filter(|e| e.generation == generation) else {
            return;
        };
        let lost = entry.lose().then(|| entry.held.primitive());
        drop(map);
        if let Some(kind) = lost {
            self.log_lost(vec![(key.clone(), kind, crate::meter::Loss::Gone)]);
        }
        self.meter.renewed(crate::meter::Renewed::Gone);
    }

    /// Marks lost every renewing hold whose lease may have run out.
    pub(crate) fn lose_lapsed(&self) {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap();
        let holdings = map
            .iter_mut()
            .filter_map(|(k, e)| Some((k, e.holding.as_mut()?)));
        let mut lost = Vec::new();
        for (key, entry) in holdings {
            if !entry.renewing.is_empty() && entry.lapsed(now) && entry.lose() {
                let why = crate::meter::Loss::RenewalLate;
                lost.push((key.clone(), entry.held.primitive(), why));
            }
        }
        drop(map);
        self.log_lost(lost);
    }

    /// Marks every hold lost, saying `why`.
    pub(crate) fn lose_all(&self, why: crate::meter::Loss) {
        let mut map = self.map.lock().unwrap();
        let holdings = map
            .iter_mut()
            .filter_map(|(k, e)| Some((k, e.holding.as_mut()?)));
        let lost: Vec<_> = holdings
            .filter_map(|(key, entry)| {
                entry
                    .lose()
                    .then(|| (key.clone(), entry.held.primitive(), why))
            })
            .collect();
        drop(map);
        self.log_lost(lost);
    }
}
