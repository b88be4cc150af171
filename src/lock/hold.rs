//! A hold as an acquire asks for it and a guard keeps it: the lock, its type, the owner and the
//! lease. Plain data; `attempt` takes it, `release` gives it back.

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;

use super::kind::{Holder, Kind};
use crate::names::LockKeys;
use crate::owner::Owner;
use crate::registry::HoldKey;
use crate::shared::Shared;

/// How long a hold lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// The watchdog timeout, renewed by the watchdog while the guard lives.
    Watchdog,
    /// A fixed lease that nobody renews.
    Fixed(Duration),
}

/// A hold: the lock, its type, the owner and the lease.
#[derive(Clone)]
pub(crate) struct Hold {
    pub(crate) shared: Arc<Shared>,
    pub(crate) kind: Kind,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) owner: Owner,
    /// The holder field, `<client-uuid>:<owner>`, shared with script arguments and the
    /// registry of holds.
    pub(crate) field: Str,
    pub(crate) lease: Lease,
    pub(crate) lease_ms: u64,
}

impl Hold {
    pub(crate) fn hold_key(&self) -> HoldKey {
        (self.keys.name.clone(), self.field.clone())
    }

    pub(crate) fn holder(&self) -> Holder<'_> {
        Holder {
            keys: &self.keys,
            field: &self.field,
        }
    }
}
