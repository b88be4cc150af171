//! What the lock family shares of its scripts' calls: an acquire's answer, a release's outcome
//! and how it is sent, and a lock-delay.

use fred::bytes_utils::Str;
use fred::types::{Key, Value};

use crate::scripts::{ms_arg, text};

/// What an acquire script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The hold was taken; a fenced lock's acquire also gives the owner's fencing token.
    Taken { token: Option<u64> },
    /// Not taken: how long to wait at most before trying again, in ms (-1: no bound known).
    Busy(i64),
    /// Not taken: the lock is free but in its lock-delay (its last holder's lease ran out
    /// without an unlock), which ends in this many ms.
    Delayed(i64),
}

/// A lock's lock-delay: how long a lock whose holder's lease ran out without an unlock stays
/// unavailable, and the shadow lease key that keeps it (`relock_lease:{<name>}`, see
/// `lua/common/delay.lua`).
#[derive(Debug, Clone)]
pub(crate) struct Delay {
    pub(crate) ms: u64,
    pub(crate) shadow: Str,
}

impl Delay {
    /// The delay of `ms` (above 0) on lock `name`.
    pub(crate) fn new(name: &str, ms: u64) -> Delay {
        Delay {
            ms,
            shadow: crate::names::lease_shadow(name).into(),
        }
    }
}

/// What an owner's acquire of a lock it holds does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reentry {
    /// It counts one more hold (Redisson's `RLock`, `RFairLock`).
    Counted,
    /// It fails at once with [`Error::Reentry`](crate::Error::Reentry), changing nothing (Redisson's
    /// non-reentrant locks): the acquire scripts' "refuse" argument.
    Refused,
}

/// The acquire scripts' argument that refuses a re-entry (`lua/lock/acquire.lua`,
/// `lua/fair/acquire.lua`).
pub(crate) const REFUSE: &str = "refuse";

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The field held nothing.
    NotHeld,
    /// One hold released; others remain.
    StillHeld,
    /// The last hold released: the lock is gone, and its wake-up message reached `woken`
    /// subscribed connections (0 when not known: a retry found the lock already freed).
    Freed { woken: u64 },
}

/// How a release is sent: its replay key and the client's settings.
pub(crate) struct ReleaseHow<'a> {
    pub(crate) replay: &'a Key,
    /// How long the replay key lives, in ms.
    pub(crate) replay_ttl_ms: u64,
    /// [`PUBLISH`](crate::scripts::PUBLISH), [`SPUBLISH`](crate::scripts::SPUBLISH) or
    /// [`NO_PUBLISH`](crate::scripts::NO_PUBLISH).
    pub(crate) publish: &'static str,
    /// How long a claim may outlive the release, in ms.
    pub(crate) claim_window_ms: u64,
    /// Whether this request may have reached the server before (a retry): only then can its
    /// replay key exist, so only then does the script read it.
    pub(crate) sent_before: bool,
    /// Whether a last release writes a replay key too (by default only a release that leaves
    /// holds behind writes one).
    pub(crate) replay_last: bool,
}

impl ReleaseHow<'_> {
    /// What the hash's and the multi-lock's release scripts take of it, in their order: how to
    /// publish, the replay key's TTL, the claim's window, whether it was sent before, whether a
    /// last release writes a replay key.
    pub(crate) fn args(&self) -> [Value; 5] {
        let flag = |on: bool| text(if on { "1" } else { "0" });
        [
            text(self.publish),
            ms_arg(self.replay_ttl_ms),
            ms_arg(self.claim_window_ms),
            flag(self.sent_before),
            flag(self.replay_last),
        ]
    }
}
