//! The acquire side of a fair lock client's steps: an attempt and what relock's turns make of
//! its answer, an attempt whose request or reply is lost, the read-back after it and the
//! orphan check, the registration of a hold taken, a failed `lock()` giving up its place, and
//! the drop of lapsed holds.

use crate::server::Reply;

use super::calls::{self, Log, ReleaseArgs};
use super::state::{
    channel, field, live_head, queue, redis_holds, Cancelled, FairState, Phase, LEASE, RENEW_EVERY,
};
use super::steps::{leave_wait, Loss};
use super::{FairModel, Mutation};

impl FairModel {
    /// `Hold::try_once` with `Ask::Queue`, and what `until_taken` / `FairTurns` make of its
    /// answer.
    pub(super) fn attempt(&self, s: &mut FairState, i: usize, log: &mut Log) {
        let now = s.server.now();
        match self.send(s, i, log) {
            Reply::Nil => self.taken(s, i, now),
            Reply::Int(ms) => {
                let behind = live_head(&s.server) != Some(i);
                let c = &mut s.clients[i];
                (c.missed, c.behind) = (false, behind);
                c.phase = if c.subscribed {
                    // `FairTurns::wait_turn`: the hint (-1: none), at most W/3 (the renewal),
                    // at least 1 ms.
                    let hint = u64::try_from(ms).unwrap_or(RENEW_EVERY);
                    let bound = if self.mutation == Mutation::NoRenewCap {
                        hint
                    } else {
                        hint.min(RENEW_EVERY)
                    };
                    Phase::Waiting {
                        until: now + bound.max(1),
                    }
                } else {
                    Phase::Subscribing
                };
            }
            other => panic!("FAIR_ACQUIRE answered {other:?}"),
        }
    }

    /// The acquire script of client `i`'s attempt (`FairTurns::ask` = `Ask::Queue`), run on
    /// the server, with the ghosts' bookkeeping of what it did there: the order of queuing, and
    /// an overtaking when it took the lock.
    fn send(&self, s: &mut FairState, i: usize, log: &mut Log) -> Reply {
        let held_before = redis_holds(&s.server, i);
        // Ghost: a `lock()`'s first attempt that finds a failed one's place still queued
        // renews it, and goes on in its order; else it queues anew.
        let me = field(i).into_bytes();
        if s.clients[i].phase == Phase::Idle && !queue(&s.server).contains(&me) {
            s.clients[i].ticket = None;
        }
        let reply = calls::acquire(&self.scripts, &mut s.server, log, i);
        if s.clients[i].ticket.is_none() && queue(&s.server).contains(&me) {
            s.clients[i].ticket = Some(s.next_ticket);
            s.next_ticket += 1;
        }
        if reply == Reply::Nil {
            if held_before == 0 {
                self.took(s, i);
            }
            s.clients[i].ticket = None;
        }
        reply
    }

    /// Client `i` sends an attempt (after subscribing, if it was about to) whose reply never
    /// comes: the script ran only if the reply was lost. `Hold::try_once` then reads back
    /// (`Error::is_ambiguous`).
    pub(super) fn acquire_lost(&self, s: &mut FairState, i: usize, loss: Loss, log: &mut Log) {
        s.faults += 1;
        let now = s.server.now();
        if s.clients[i].phase == Phase::Subscribing {
            s.server.subscribe(channel(i).as_bytes());
            s.clients[i].subscribed = true;
        }
        let c = &mut s.clients[i];
        c.woken = false;
        // `Sending::arm`'s `held_before`: `Registry::guards`, after `Sending::gate` dropped a
        // lapsed generation ([`super::Action::DropLost`] runs first), so the owner's holds.
        let held_before = c.holds;
        if loss == Loss::Reply {
            self.send(s, i, log);
        }
        s.clients[i].phase = Phase::ReadingBack {
            sent_at: now,
            held_before,
        };
    }

    /// `Sending::read_back`: INSPECT on the lock hash; the owner's field counting more holds
    /// than its guards before the send means the acquire took one (`Sending::taken`, its lease
    /// from the send). Else `lock()` fails with the lost reply's error (`Sending::not_taken`
    /// disarms the orphan check), and its task calls `lock()` again.
    pub(super) fn read_back(&self, s: &mut FairState, i: usize, log: &mut Log) {
        let Phase::ReadingBack {
            sent_at,
            held_before,
        } = s.clients[i].phase
        else {
            unreachable!("enabled while reading back")
        };
        let took = self.mutation != Mutation::SkipReadBack
            && calls::inspect(&self.scripts, &mut s.server, log, i) > u64::from(held_before);
        if took {
            self.taken(s, i, sent_at);
        } else {
            self.fail(s, i);
        }
    }

    /// `OrphanCheck`'s drop, in the background: INSPECT, and `Hold::release_orphan` when the
    /// owner's field counts more holds than its guards (`Registry::guards`: this generation's
    /// guards, lapsed or not until the registry marks them lost, so the owner's holds).
    pub(super) fn orphan_check(&self, s: &mut FairState, i: usize, log: &mut Log) {
        let guards = u64::from(s.clients[i].holds);
        if calls::inspect(&self.scripts, &mut s.server, log, i) > guards {
            self.release_orphan(s, i, log);
        }
        s.clients[i].phase = Phase::Idle;
    }

    /// A `lock()` that fails: `until_taken` returns the attempt's error, and its turns drop
    /// (`FairTurns`): the waiter unsubscribes, and `LeaveQueue`'s drop leaves the queue in the
    /// background. The plan's operation stays: the task calls `lock()` again. Ghost: its place
    /// keeps its order while it stays queued (the leave ends it, see [`FairModel::left`]).
    pub(super) fn fail(&self, s: &mut FairState, i: usize) {
        leave_wait(s, i);
        let queued = queue(&s.server).contains(&field(i).into_bytes());
        let c = &mut s.clients[i];
        c.ticket = c.ticket.filter(|_| queued);
        (c.phase, c.behind, c.leaving) = (Phase::Idle, false, true);
    }

    /// `LeaveQueue`'s drop, in the background: FAIR_LEAVE takes the owner's field out of the
    /// queue, the deadlines and the liveness record, and wakes the next head if it headed the
    /// queue. Ghost: the place's order ends with it, unless a `lock()` of the owner's started
    /// since and waits on it (the stale leave of `FairModel::leave_races` took the place of a
    /// live waiter, which keeps its order).
    pub(super) fn left(&self, s: &mut FairState, i: usize, log: &mut Log) {
        let reply = calls::leave(&self.scripts, &mut s.server, log, i);
        assert!(
            matches!(reply, Reply::Int(_)),
            "FAIR_LEAVE answered {reply:?}"
        );
        let c = &mut s.clients[i];
        c.leaving = false;
        if c.cancelled == Cancelled::Pending {
            c.cancelled = Cancelled::Left;
        }
        if !(c.waits() || matches!(c.phase, Phase::ReadingBack { .. })) {
            c.ticket = None;
        }
    }

    /// `Sending::taken`: the hold of an acquire sent at `sent_at` is registered
    /// (`Registry::register`: a new generation when the owner's holds lapsed, else one more
    /// hold, its deadline the later of the two), and the waiter's turns end
    /// (`FairTurns::acquired`: the script took its place out of the queue).
    fn taken(&self, s: &mut FairState, i: usize, sent_at: u64) {
        let now = s.server.now();
        let c = &mut s.clients[i];
        if c.holds > 0 && now >= c.deadline {
            // A lapsed generation: its guards' releases send nothing.
            (c.stale, c.holds) = (c.stale + c.holds, 0);
        }
        c.deadline = c.deadline.max(sent_at + LEASE);
        c.holds += 1;
        c.pc += 1;
        (c.phase, c.ticket, c.behind) = (Phase::Idle, None, false);
        leave_wait(s, i);
    }

    /// Ghost bookkeeping of a new hold of client `i` (its field was not on Redis): an
    /// overtaking when a live waiter that queued before it (or at all, if `i` never queued)
    /// still waits, or still waits for its attempt's answer (reading back).
    fn took(&self, s: &mut FairState, i: usize) {
        let mine = s.clients[i].ticket;
        let mut behind = false;
        for (j, c) in s.clients.iter().enumerate() {
            let waits = c.waits() || matches!(c.phase, Phase::ReadingBack { .. });
            let Some(theirs) = c.ticket.filter(|_| j != i && waits) else {
                continue;
            };
            if mine.is_none_or(|m| theirs < m) {
                s.overtaken = s.overtaken.or(Some((i as u8, j as u8)));
            } else {
                behind = true;
            }
        }
        s.clients[i].handed = mine.is_some() && behind;
    }

    /// `Hold::release_orphan` from an orphan check: one hold released, counted as a release
    /// beside the acquire it stands for (`OrphanCheck`'s drop takes `Hold::releasing` while the
    /// acquire still counts in flight, so `Hold::outgoing` keeps the acquire's lease as the TTL
    /// and writes a replay key, which the sweeper deletes once the reply is in). Its sends
    /// retry until answered (`background::must_run`).
    fn release_orphan(&self, s: &mut FairState, i: usize, log: &mut Log) {
        let c = &mut s.clients[i];
        c.requests += 1;
        let how = ReleaseArgs {
            request: c.requests,
            keep: LEASE,
            sent_before: false,
            replay_last: true,
        };
        let reply = calls::release(&self.scripts, &mut s.server, log, i, &how);
        if matches!(reply, Reply::Int(_)) {
            calls::sweep(&mut s.server, log, i, how.request);
        }
    }

    /// `Sending::gate` after a local loss: a release with a TTL of 0 under a request of its
    /// own, asked to write its replay key, which the sweeper deletes once the reply is in; the
    /// lost guards are stale from here on.
    pub(super) fn drop_lost(&self, s: &mut FairState, i: usize, log: &mut Log) {
        let c = &mut s.clients[i];
        c.requests += 1;
        let how = ReleaseArgs {
            request: c.requests,
            keep: 0,
            sent_before: false,
            replay_last: true,
        };
        calls::release(&self.scripts, &mut s.server, log, i, &how);
        calls::sweep(&mut s.server, log, i, how.request);
        let c = &mut s.clients[i];
        (c.stale, c.holds, c.deadline) = (c.stale + c.holds, 0, 0);
    }
}
