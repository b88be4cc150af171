//! The watcher's read: `watch::Watcher::next` (subscribed before its first read) and
//! `Watcher::take` (the gap rules: trimmed, shorter, rewritten at its place by the stamp of the
//! entry there; and when to read again), with the ghost check of what it delivered against the
//! history it read.

use crate::server::Reply;

use super::calls::{self, Log};
use super::state::{describe, history, ElectionState, WatchPhase, AFTER_ERROR, CHANGES, LEASE};
use super::steps::failed;
use super::ElectionModel;

/// One entry as `history::entry` parses it: seq, epoch, stamp, and the model's description.
struct Seen {
    seq: u64,
    epoch: u64,
    /// Its stamp, or (an entry without one) its description: `Mark::of`.
    mark: String,
    text: String,
}

/// Parses OBSERVE's entries (`[id, [field, value, ...]]` each).
fn entries(reply: &Reply) -> Vec<Seen> {
    let Reply::Array(list) = reply else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in list {
        let Reply::Array(parts) = entry else { continue };
        let (Some(Reply::Bulk(id)), Some(Reply::Array(values))) = (parts.first(), parts.get(1))
        else {
            continue;
        };
        let id = String::from_utf8_lossy(id);
        let seq = id
            .split('-')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut fields = Vec::new();
        for pair in values.chunks(2) {
            if let [Reply::Bulk(f), Reply::Bulk(v)] = pair {
                fields.push((f.clone(), v.clone()));
            }
        }
        let epoch = fields
            .iter()
            .find(|(f, _)| f == b"epoch")
            .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(0);
        let text = describe(&fields);
        let mark = match fields.iter().find(|(f, _)| f == b"stamp") {
            Some((_, stamp)) => format!("stamp {}", String::from_utf8_lossy(stamp)),
            None => format!("entry {text}"),
        };
        out.push(Seen {
            seq,
            epoch,
            mark,
            text,
        });
    }
    out
}

impl ElectionModel {
    /// `Watcher::next`: subscribe (first poll), read with ELECTION_OBSERVE, `take` what came.
    pub(super) fn watch_read(&self, s: &mut ElectionState, log: &mut Log) {
        let now = s.server.now();
        if s.watcher.phase == WatchPhase::Start {
            s.server.subscribe(CHANGES.as_bytes());
        }
        s.watcher.woken = false;
        let reply = calls::observe(&self.scripts, &mut s.server, log, s.watcher.after);
        let parts = match &reply {
            Reply::Array(parts) if parts.len() == 7 => parts.clone(),
            other => {
                // A failed read is an item; the watch reads again after AFTER_ERROR.
                failed(s, "ELECTION_OBSERVE", other);
                s.watcher.phase = WatchPhase::Waiting {
                    until: now + AFTER_ERROR,
                };
                return;
            }
        };
        let pttl = match parts[1] {
            Reply::Int(ms) => ms,
            _ => -2,
        };
        let seq = |reply: &Reply| match reply {
            Reply::Bulk(text) => std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0),
            _ => 0,
        };
        let (newest, oldest) = (seq(&parts[3]), seq(&parts[6]));
        let seen = entries(&parts[4]);
        let at_after = entries(&parts[5]).into_iter().next();
        // `take`: the bound of the next wait.
        let mut bound = if pttl > 0 { pttl as u64 + 1 } else { LEASE };
        let w = &mut s.watcher;
        let before = (w.seen.len(), w.gaps);
        match w.after {
            None => {
                w.after = Some(0);
                for e in seen {
                    deliver(w, e);
                }
            }
            Some(after)
                if (seen.is_empty() && newest < after)
                    || match (&w.mark, &at_after) {
                        (Some(mark), Some(there)) => *mark != there.mark,
                        (Some(_), None) => newest >= after && oldest <= after,
                        (None, _) => false,
                    } =>
            {
                // History was rewritten behind the watch: shorter than what it saw, or no
                // longer holding at its place what it delivered there.
                gap(w);
                w.after = Some(newest.saturating_sub(1));
                w.mark = None;
                w.last_epoch = 0;
                bound = 0;
            }
            Some(_) => {
                // Each change that does not follow the one before comes after a gap.
                for e in seen {
                    let after = w.after.unwrap_or(0);
                    if after.checked_add(1) != Some(e.seq) || e.epoch < w.last_epoch {
                        gap(w);
                        w.last_epoch = 0;
                    }
                    deliver(w, e);
                }
            }
        }
        w.phase = WatchPhase::Waiting { until: now + bound };
        // With changes to hand out, `next` reads again as soon as they are taken.
        w.woken |= bound == 0 || (w.seen.len(), w.gaps) != before;
        // Ghost: what it delivered since its last gap must be what history holds at those
        // places; a difference is a change it will never deliver, with no gap said.
        let now_history = history(&s.server.keyspace);
        let w = &mut s.watcher;
        if w.broken.is_none() {
            for (seq, text) in &w.seen {
                if let Some((_, there)) = now_history.iter().find(|(s, _)| s == seq) {
                    if there != text {
                        w.broken = Some(format!(
                            "delivered seq {seq} as [{text}], history now has [{there}] there, and no gap was reported"
                        ));
                        break;
                    }
                }
            }
        }
    }
}

/// `Watcher::deliver`, with the ghost check that deliveries are consecutive since the last gap.
fn deliver(w: &mut super::state::Watcher, e: Seen) {
    if let Some((prev, _)) = w.seen.last() {
        if e.seq != prev + 1 && w.broken.is_none() {
            w.broken = Some(format!(
                "delivered seq {} right after seq {prev} without a gap",
                e.seq
            ));
        }
    }
    w.after = Some(e.seq);
    w.mark = Some(e.mark);
    w.last_epoch = e.epoch;
    w.seen.push((e.seq, e.text));
}

/// A gap reported: what was delivered before it no longer binds the watch.
fn gap(w: &mut super::state::Watcher) {
    w.gaps = w.gaps.saturating_add(1);
    w.seen.clear();
}
