//! The acquire side of an rw client's steps: an attempt and what relock's turns make of its
//! answer, an attempt whose request or reply is lost, the read-back after it and its failure,
//! the orphan check, the registration of a hold taken, a failed or cancelled acquire giving up
//! its turns, and the drop of a side's lapsed holds before it is acquired again.

use crate::server::Reply;

use super::calls::{self, Log};
use super::state::{
    Cancelled, Client, Op, Phase, RwState, Side, Upgrade, CHANNEL, LEASE, RENEW_EVERY,
};
use super::steps::{leave_wait, Loss};
use super::{Mutation, RwModel};

impl RwModel {
    /// The side client `i`'s current `Lock` asks for.
    fn lock_side(&self, s: &RwState, i: usize) -> Side {
        let Some(Op::Lock(side)) = self.op(s, i) else {
            unreachable!("an attempt at a lock")
        };
        side
    }

    /// `Hold::try_once` with `RwTurns::ask` (a writer claims on every attempt) and what
    /// `until_taken` / `RwTurns::wait_turn` make of its answer.
    pub(super) fn attempt(&self, s: &mut RwState, i: usize, log: &mut Log) {
        let now = s.server.now();
        let side = self.lock_side(s, i);
        if side == Side::Write {
            s.clients[i].claimed = true;
        }
        let reply = calls::acquire(&self.scripts, &mut s.server, log, i, side);
        if reply == Reply::Nil {
            return self.taken(s, i, side, now);
        }
        let c = &mut s.clients[i];
        match reply {
            Reply::Int(ms) => {
                c.missed = false;
                c.phase = if c.subscribed {
                    // `RwTurns::wait_turn`: a message, or the hint (no TTL: the watchdog
                    // timeout), at least 1 ms.
                    c.waited = true;
                    let bound = if ms < 0 { LEASE } else { (ms as u64).max(1) };
                    Phase::Waiting { until: now + bound }
                } else {
                    Phase::Subscribing
                };
            }
            Reply::Error(e) if e.starts_with("RELOCK_UPGRADE") => {
                // `Error::UpgradeWouldDeadlock`: the task ends (`?`); the dropped `ClaimGuard`
                // withdraws its claim in the background.
                c.upgrade = if c.read.leaving.is_some() {
                    Upgrade::Releasing
                } else if c.read.holds > 0 {
                    Upgrade::Holding
                } else {
                    Upgrade::Unexplained
                };
                if c.claimed {
                    (c.claimed, c.unclaiming) = (false, true);
                }
                c.pc = self.plans[i].len() as u8;
                c.phase = Phase::Idle;
                leave_wait(s, i);
            }
            other => panic!("{side:?} acquire answered {other:?}"),
        }
    }

    /// `Hold::try_once` whose attempt (the first, the one right after subscribing, or one after
    /// a wait) gets no reply (a fault): its request was lost before the script ran, or its
    /// reply after (`Error::is_ambiguous`). `Sending::arm` counted the owner's live guards of
    /// the side before the send; the client reads the lock back.
    pub(super) fn attempt_lost(&self, s: &mut RwState, i: usize, loss: Loss, log: &mut Log) {
        let now = s.server.now();
        s.faults += 1;
        let side = self.lock_side(s, i);
        if s.clients[i].phase == Phase::Subscribing {
            s.server.subscribe(CHANNEL.as_bytes());
            s.clients[i].subscribed = true;
        }
        let c = &mut s.clients[i];
        if c.phase == Phase::Idle {
            c.waited = false;
        }
        c.woken = false;
        if side == Side::Write {
            c.claimed = true;
        }
        let held_before = c.side(side).live_guards(now);
        if loss == Loss::Reply {
            calls::acquire(&self.scripts, &mut s.server, log, i, side);
        }
        s.clients[i].phase = Phase::ReadingBack {
            side,
            sent_at: now,
            held_before,
        };
    }

    /// `Sending::read_back`: INSPECT with the side's field on the acquire's connection; the
    /// field counting more holds than the live guards before the send means the acquire took
    /// one (`Sending::taken`). Else `lock()` fails with the lost reply's error
    /// (`Sending::not_taken`): its waiter and turns are dropped, and the task calls it again.
    pub(super) fn read_back(&self, s: &mut RwState, i: usize, log: &mut Log) {
        let Phase::ReadingBack {
            side,
            sent_at,
            held_before,
        } = s.clients[i].phase
        else {
            unreachable!("enabled while reading back")
        };
        let took = self.mutation != Mutation::SkipReadBack
            && calls::inspect(&self.scripts, &mut s.server, log, i, side) > u64::from(held_before);
        if took {
            self.taken(s, i, side, sent_at);
        } else {
            leave_wait(s, i);
            let c = &mut s.clients[i];
            self.give_up(c, false);
            c.phase = Phase::Idle;
        }
    }

    /// The read-back fails too (a fault): `lock()` fails with the lost reply's error, its
    /// waiter and turns are dropped, and the `Sending` dropped armed leaves its orphan check.
    pub(super) fn read_back_fails(&self, s: &mut RwState, i: usize) {
        let Phase::ReadingBack { side, .. } = s.clients[i].phase else {
            unreachable!("enabled while reading back")
        };
        s.faults += 1;
        leave_wait(s, i);
        let c = &mut s.clients[i];
        self.give_up(c, false);
        c.phase = Phase::OrphanCheck {
            side,
            cancelled: false,
        };
    }

    /// `OrphanCheck`'s drop, in the background: INSPECT with the side's field, and
    /// `Hold::release_orphan` when it counts more holds than the owner's live guards of the
    /// side (`Registry::guards`).
    pub(super) fn orphan_check(&self, s: &mut RwState, i: usize, log: &mut Log) {
        let now = s.server.now();
        let Phase::OrphanCheck { side, .. } = s.clients[i].phase else {
            unreachable!("enabled while checking")
        };
        let guards = s.clients[i].side(side).live_guards(now);
        if calls::inspect(&self.scripts, &mut s.server, log, i, side) > u64::from(guards) {
            self.release_orphan(s, i, side, log);
        }
        s.clients[i].phase = Phase::Idle;
    }

    /// `Hold::release_orphan` from an orphan check: one hold of `side` released while its
    /// acquire still counts in flight (`OrphanCheck` drops before `Acquiring`), so
    /// `Hold::outgoing` keeps the acquire's lease as the TTL (`Releasing::acquire_lease_ms`,
    /// ARGV\[2\] of RW_READ_RELEASE / RW_WRITE_RELEASE, never 0) and writes a replay key
    /// (`beside_acquire`), which the sweeper deletes once the reply is in; `Outgoing::settle`
    /// sets the lease of the owner's remaining holds (`Registry::lease_set`).
    fn release_orphan(&self, s: &mut RwState, i: usize, side: Side, log: &mut Log) {
        let now = s.server.now();
        let h = s.clients[i].side_mut(side);
        h.requests += 1;
        let request = h.requests;
        let reply = calls::release(
            &self.scripts,
            &mut s.server,
            log,
            i,
            side,
            request,
            LEASE,
            false,
        );
        let h = s.clients[i].side_mut(side);
        match reply {
            Reply::Nil => return,
            Reply::Int(0) if h.holds > 0 => {
                if h.lost || now >= h.deadline {
                    h.lost = true;
                } else {
                    h.deadline = self.believed(now + LEASE);
                }
            }
            Reply::Int(_) => {}
            other => panic!("{side:?} orphan release answered {other:?}"),
        }
        calls::sweep(&mut s.server, log, i, side, request);
    }

    /// `Sending::taken`: the hold of `side` an acquire sent at `sent_at` took is registered
    /// (`Registry::register`): a new generation when the owner held nothing live on this side,
    /// else an extension; `RwTurns::acquired` (taking the lock used up the claim).
    pub(super) fn taken(&self, s: &mut RwState, i: usize, side: Side, sent_at: u64) {
        let now = s.server.now();
        let c = &mut s.clients[i];
        let h = c.side_mut(side);
        if h.holds > 0 && h.leaving.is_none() && (h.lost || now >= h.deadline) {
            (h.stale, h.holds) = (h.stale + h.holds, 0);
        }
        if h.holds == 0 {
            (h.deadline, h.lost) = (sent_at + LEASE, false);
            h.renew_due = sent_at + RENEW_EVERY;
        }
        h.deadline = self.believed(h.deadline.max(sent_at + LEASE));
        h.holds += 1;
        c.claimed = false;
        c.pc += 1;
        c.phase = Phase::Idle;
        leave_wait(s, i);
    }

    /// A failed (or, `cancelled`, dropped) `lock()` drops its turns: `ClaimGuard`'s drop
    /// withdraws a writer's claim in the background (UNCLAIM, `Write::unclaim`).
    pub(super) fn give_up(&self, c: &mut Client, cancelled: bool) {
        let skip = cancelled && self.mutation == Mutation::SkipUnclaim;
        let unclaims = c.claimed && !skip;
        c.unclaiming |= unclaims;
        if cancelled {
            c.cancelled = if unclaims {
                Cancelled::Pending
            } else {
                Cancelled::Clean
            };
        }
        c.claimed = false;
    }

    /// `Sending::gate` after a local loss of the side it acquires (`Registry::lapsed_hold`):
    /// the owner's field dropped on Redis by `Hold::release_orphan` with a TTL of 0 (no live
    /// hold, no acquire in flight yet: `Hold::outgoing`), the sweeper deleting its replay key
    /// once the reply is in; the lapsed guards are stale from here on (`Leaving::Lost`).
    pub(super) fn drop_lost(&self, s: &mut RwState, i: usize, log: &mut Log) {
        let side = self.lock_side(s, i);
        let h = s.clients[i].side_mut(side);
        h.requests += 1;
        let request = h.requests;
        let reply = calls::release(
            &self.scripts,
            &mut s.server,
            log,
            i,
            side,
            request,
            0,
            false,
        );
        if matches!(reply, Reply::Int(_)) {
            calls::sweep(&mut s.server, log, i, side, request);
        }
        let h = s.clients[i].side_mut(side);
        (h.stale, h.holds) = (h.stale + h.holds, 0);
        (h.deadline, h.lost, h.renew_due) = (0, false, 0);
    }
}
