//! The release side of a lock client's steps: one send of `Hold::release_as`, its lost reply
//! and its retry, and `Outgoing::settle` once the reply comes.

use crate::server::Reply;

use super::calls::{self, Log, ReleaseArgs};
use super::state::{field, replay_key, LockState, Phase, LEASE, REPLAY_TTL};
use super::{LockModel, Mutation};

impl LockModel {
    /// `Hold::release_as`: one send of a release (its reply lost when `lose`), and, when the
    /// reply comes, `Outgoing::settle`.
    pub(super) fn release(&self, s: &mut LockState, i: usize, lose: bool, log: &mut Log) {
        let now = s.server.now();
        let c = &mut s.clients[i];
        if c.holds == 0 {
            // A guard of a lost generation: `Registry::unregister` says `Leaving::Lost`.
            (c.stale, c.pc) = (c.stale - 1, c.pc + 1);
            return;
        }
        let (sent_at, replay_last, tries) = match c.phase {
            Phase::Releasing {
                sent_at,
                replay_last,
                tries,
            } => (sent_at, replay_last, tries),
            _ => {
                c.requests += 1;
                // `Hold::outgoing`: the last release writes a replay key when the hold could
                // lapse (the local deadline) before the last retry.
                (now, c.deadline <= now + REPLAY_TTL, 0)
            }
        };
        let sent_before = tries > 0 && self.mutation != Mutation::ReplayFlagZero;
        // `Hold::outgoing`: what the owner's live holds need once this one goes: the watchdog
        // lease while another guard of its generation lives, else 0 (no hold of the owner's
        // may remain: the script frees the lock whatever count Redis has).
        let keep_ms = match (c.holds > 1, self.mutation) {
            (true, _) => LEASE,
            (false, Mutation::ReentersLostHold) => 1,
            (false, _) => 0,
        };
        // The replay key outlives the retries' window by the longer of the TTL this release
        // leaves and the lease (a renewal sent before a stall).
        let replay_ttl = match self.mutation {
            Mutation::ShortReplayKey => REPLAY_TTL,
            _ => REPLAY_TTL + keep_ms.max(LEASE),
        };
        let how = ReleaseArgs {
            keep_ms,
            replay_ttl,
            request: c.requests,
            sent_before,
            replay_last,
        };
        let reply = calls::release(
            &self.scripts,
            &mut s.server,
            log,
            &field(i),
            &replay_key(i, how.request),
            &how,
        );
        let c = &mut s.clients[i];
        if lose {
            s.faults += 1;
            c.phase = Phase::Releasing {
                sent_at,
                replay_last,
                tries: tries + 1,
            };
            return;
        }
        let sweep = match reply {
            // A retry that finds the field gone: freed by its earlier send (or, past the
            // lapse moment, `LeaseLost`). Either way this guard is gone.
            Reply::Nil => false,
            Reply::Int(0) => {
                // `Registry::lease_set`: the TTL was set to what the remaining holds need.
                c.deadline = self.believed(sent_at + keep_ms);
                true
            }
            Reply::Int(_) => replay_last,
            other => panic!("LOCK_RELEASE answered {other:?}"),
        };
        c.holds = c.holds.saturating_sub(1);
        if c.holds == 0 {
            (c.deadline, c.lost, c.renew_due) = (0, false, 0);
        }
        c.pc += 1;
        c.phase = Phase::Idle;
        if sweep {
            calls::sweep(&mut s.server, log, &replay_key(i, how.request));
        }
    }
}
