//! The acquire side of a lock client's steps: an attempt and what relock's turns make of its
//! answer, the registration of a hold taken, the read-back's and the orphan check's outcomes,
//! a failed or cancelled acquire giving up its turn, and the drop of lapsed holds.

use crate::server::Reply;

use super::calls::{self, Log, ReleaseArgs};
use super::state::{
    field, replay_key, Cancelled, Client, LockState, Phase, LEASE, RENEW_EVERY, REPLAY_TTL,
};
use super::steps::leave_wait;
use super::{LockModel, Mutation};

impl LockModel {
    /// `PlainTurns::ask` / `ClaimGuard::next`: the claim priority of a subscribed waiter's next
    /// attempt: nothing on its first try as first waiter, then the races it lost.
    pub(super) fn ask(&self, c: &mut Client) -> u32 {
        c.tries += 1;
        if c.tries < 2 {
            return 0;
        }
        c.claimed = true;
        u32::from(c.tries - 1)
    }

    /// `Hold::try_once` and what `until_taken` / `PlainTurns` make of its answer.
    pub(super) fn attempt(&self, s: &mut LockState, i: usize, priority: u32, log: &mut Log) {
        let now = s.server.now();
        let reply = calls::acquire(&self.scripts, &mut s.server, log, &field(i), priority);
        match reply {
            Reply::Nil => self.taken(s, i, now),
            Reply::Int(ms) => {
                let c = &mut s.clients[i];
                c.missed = false;
                c.phase = if c.subscribed {
                    // `next_turn`: wait for a message, at most the hint (no TTL: the watchdog
                    // timeout), at least 1 ms.
                    let bound = if ms < 0 { LEASE } else { (ms as u64).max(1) };
                    Phase::Waiting { until: now + bound }
                } else {
                    Phase::Subscribing
                };
            }
            other => panic!("LOCK_ACQUIRE answered {other:?}"),
        }
    }

    /// `Sending::taken`: the hold of an acquire sent at `sent_at` is registered: a new
    /// generation when the owner held nothing live, else an extension (`Holding::extended`).
    pub(super) fn taken(&self, s: &mut LockState, i: usize, sent_at: u64) {
        let now = s.server.now();
        let c = &mut s.clients[i];
        if c.holds > 0 && (c.lost || now >= c.deadline) {
            // `Registry::register` after a loss: a new generation; the old guards' releases
            // will send nothing.
            (c.stale, c.holds) = (c.stale + c.holds, 0);
        }
        if c.holds == 0 {
            (c.deadline, c.lost, c.renew_due) = (sent_at + LEASE, false, sent_at + RENEW_EVERY);
        }
        c.deadline = self.believed(c.deadline.max(sent_at + LEASE));
        c.holds += 1;
        (c.claimed, c.tries, c.missed) = (false, 0, false);
        c.pc += 1;
        c.phase = Phase::Idle;
        leave_wait(s, i);
    }

    /// The owner's live guards (`Registry::guards`): none once its holds lapsed locally.
    pub(super) fn live_guards(&self, c: &Client, now: u64) -> u8 {
        if c.lost || now >= c.deadline {
            0
        } else {
            c.holds
        }
    }

    /// A cancelled (`cancelled`) or failed acquire, its orphan checked, gives up its turn:
    /// `ClaimGuard`'s drop withdraws a claim it may have left (in the background).
    pub(super) fn give_up(&self, c: &mut Client, cancelled: bool) {
        (c.tries, c.missed) = (0, false);
        if c.claimed && self.mutation != Mutation::SkipUnclaim {
            c.phase = Phase::Unclaiming { cancelled };
            return;
        }
        if cancelled {
            c.cancelled = if c.claimed {
                Cancelled::Withdrawn
            } else {
                Cancelled::Plain
            };
        }
        c.claimed = false;
        c.phase = Phase::Idle;
    }

    /// `Hold::release_orphan` from an orphan check: one hold released, counted as a release
    /// beside the acquire it stands for (`Releasing::beside_acquire`: the TTL kept is the
    /// acquire's lease, and a replay key is written, which the sweeper deletes once the reply
    /// is in). Its sends retry until answered (`background::must_run`).
    pub(super) fn release_orphan(&self, s: &mut LockState, i: usize, log: &mut Log) {
        self.release_unheld(s, i, LEASE, log);
    }

    /// One release of a hold no guard stands for, keeping `keep_ms`, under a request of its own
    /// that writes its replay key, deleted by the sweeper once the reply is in.
    fn release_unheld(&self, s: &mut LockState, i: usize, keep_ms: u64, log: &mut Log) {
        let c = &mut s.clients[i];
        c.requests += 1;
        let how = ReleaseArgs {
            keep_ms,
            replay_ttl: REPLAY_TTL + LEASE,
            request: c.requests,
            sent_before: false,
            replay_last: true,
        };
        let replay = replay_key(i, how.request);
        calls::release(&self.scripts, &mut s.server, log, &field(i), &replay, &how);
        calls::sweep(&mut s.server, log, &replay);
    }

    /// `Sending::gate` after a local loss: the owner's field dropped on Redis (a release with a
    /// TTL of 0 under a request of its own, asked to write its replay key, which the sweeper
    /// deletes once the reply is in); the lost guards are stale from here on.
    pub(super) fn drop_lost(&self, s: &mut LockState, i: usize, log: &mut Log) {
        self.release_unheld(s, i, 0, log);
        let c = &mut s.clients[i];
        (c.stale, c.holds) = (c.stale + c.holds, 0);
        (c.deadline, c.lost, c.renew_due) = (0, false, 0);
    }
}
