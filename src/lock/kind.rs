//! What sets the lock types apart on the wire: which scripts take, release and force-release a
//! hold, and whether a release publishes a wake-up and leaves a hand-off grace.
//!
//! Every type keeps its holds in the same Redisson hash (`<name>`: holder field → count), so
//! inspection, renewal and the shutdown release are shared; how waiters are ordered and woken is
//! the job of each type's turns (`turns`, `fair`, `spin`).

use std::sync::Arc;

use fred::bytes_utils::Str;
use fred::interfaces::KeysInterface;

use crate::backoff::Backoff;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::names::{FairKeys, LockKeys};
use crate::scripts::{self, Answer, Claim, ReleaseHow, Released, NO_PUBLISH};
use crate::shared::Shared;

/// Who asks: the lock's keys and the holder field.
pub(crate) struct Holder<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) field: &'a Str,
}

/// A lock type, as the shared core sees it.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// [`Lock`](crate::Lock): waiters woken one per process by a message on the lock's channel.
    Reentrant,
    /// [`FairLock`](crate::FairLock): a queue on Redis; a release wakes its first waiter alone.
    Fair(Arc<FairKeys>),
    /// [`SpinLock`](crate::SpinLock): no messages; waiters retry after growing pauses.
    Spin(Backoff),
    /// [`FencedLock`](crate::FencedLock): the plain lock, whose new owners also take a token
    /// from this counter.
    Fenced(Str),
    /// The read lock of an [`RwLock`](crate::RwLock): many readers, each with its own lease.
    Read,
    /// The write lock of an [`RwLock`](crate::RwLock): one writer, which may also read.
    Write,
}

/// What one acquire attempt asks the script for, beyond the hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    /// The hold if free, and nothing else.
    Now,
    /// The plain lock (and a read-write lock's writer): the hold, or else a claim on its next
    /// hand-off with this priority.
    Claim(u32),
    /// The fair lock: the hold if it is this waiter's turn, or else a place in the queue (a
    /// new one at its tail, or the one it has, renewed).
    Queue,
}

impl Kind {
    /// The holder field of `owner_field` (`<client-uuid>:<owner>`) for this type: a read-write
    /// lock's writer appends `:write`, as Redisson's does.
    pub(crate) fn field(&self, owner_field: String) -> Str {
        match self {
            Kind::Write => scripts::rw::writer_field(&owner_field),
            _ => owner_field.into(),
        }
    }

    /// Runs the type's acquire script.
    pub(crate) async fn acquire(
        &self,
        shared: &Shared,
        redis: &Connection,
        hold: Holder<'_>,
        lease_ms: u64,
        ask: Ask,
    ) -> Result<Answer> {
        let window = shared.claim_window_ms;
        let (keys, field) = (hold.keys, hold.field);
        let claim = match ask {
            Ask::Claim(priority) => Claim::For { priority },
            Ask::Now | Ask::Queue => Claim::No,
        };
        Ok(match self {
            Kind::Reentrant | Kind::Spin(_) => {
                scripts::acquire(redis, keys, lease_ms, field, claim, window, None).await?
            }
            Kind::Fenced(token) => {
                scripts::acquire(redis, keys, lease_ms, field, claim, window, Some(token)).await?
            }
            Kind::Fair(fair) => {
                let queue = ask == Ask::Queue;
                let waiter = shared.fair_waiter_ms;
                scripts::fair::acquire(redis, keys, fair, lease_ms, field, waiter, queue)
                    .await?
                    .into()
            }
            Kind::Read => scripts::rw::read_acquire(redis, keys, lease_ms, field, window)
                .await?
                .into(),
            Kind::Write => {
                let claim = claim != Claim::No;
                scripts::rw::write_acquire(redis, keys, lease_ms, field, claim, window)
                    .await?
                    .into()
            }
        })
    }

    /// The owner's fencing token, read back after an acquire whose reply was lost but which the
    /// read-back showed took the hold (`None` for the types without tokens).
    pub(crate) async fn token(&self, redis: &Connection, keys: &LockKeys) -> Result<Option<u64>> {
        let Kind::Fenced(token) = self else {
            return Ok(None);
        };
        // Boxed: fred's command future is large, and every waiting lock() would carry it.
        let value: Option<u64> = Box::pin(redis.get(token.clone()))
            .await
            .map_err(|e| Error::from_redis(e, &keys.name, &redis.server))?;
        // The acquire wrote it; gone since (deleted by hand), the hold has no token to give.
        let gone = || {
            let why = format!("the fencing token counter `{token}` is gone");
            Error::redis(crate::redis_error::missing(why), &redis.server)
        };
        value.map(Some).ok_or_else(gone)
    }

    /// What [`inspect`](scripts::inspect) counts as locked for this type (see `lua/inspect.lua`).
    pub(crate) fn view(&self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            _ => "",
        }
    }

    /// Whether a withdrawn claim of this type's waiter wakes the lock's waiters: a read-write
    /// lock's writer's claim keeps new readers out of a read-locked lock, and they may come in
    /// once it goes (see `lua/unclaim.lua`).
    pub(crate) fn wakes_on_unclaim(&self) -> bool {
        matches!(self, Kind::Write)
    }

    /// Whether the watchdog renews this type's holds as a read-write lock's readers (each with
    /// its own timeout keys).
    pub(crate) fn renews_readers(&self) -> bool {
        matches!(self, Kind::Read)
    }

    /// Runs the type's release script for one hold; `keep_ms` is the TTL the owner's remaining
    /// holds need.
    pub(crate) async fn release(
        &self,
        hold: Holder<'_>,
        redis: &Connection,
        keep_ms: u64,
        how: ReleaseHow<'_>,
    ) -> Result<Released> {
        match self {
            Kind::Reentrant | Kind::Spin(_) | Kind::Fenced(_) => {
                scripts::release(redis, hold.keys, hold.field, keep_ms, how).await
            }
            Kind::Fair(fair) => {
                scripts::fair::release(redis, hold.keys, fair, hold.field, keep_ms, how).await
            }
            Kind::Read | Kind::Write => {
                let write = matches!(self, Kind::Write);
                scripts::rw::release(redis, hold.keys, hold.field, write, keep_ms, how).await
            }
        }
    }

    /// Deletes the lock whoever holds it and wakes whom the type wakes; `true` when there was
    /// one.
    pub(crate) async fn force_release(&self, shared: &Shared, keys: &LockKeys) -> Result<bool> {
        let publish = self.publish(shared);
        let window = shared.claim_window_ms;
        match self {
            Kind::Reentrant | Kind::Spin(_) | Kind::Fenced(_) => {
                scripts::force_release(&shared.redis, keys, publish, window).await
            }
            Kind::Fair(fair) => {
                scripts::fair::force_release(&shared.redis, keys, fair, publish).await
            }
            Kind::Read | Kind::Write => {
                let mode = self.view();
                scripts::rw::force_release(&shared.redis, keys, mode, publish, window).await
            }
        }
    }

    /// The publish command of the type's releases.
    pub(crate) fn publish(&self, shared: &Shared) -> &'static str {
        match self {
            Kind::Spin(_) => NO_PUBLISH,
            _ => shared.publish,
        }
    }

    /// Whether this client's release of the lock leaves other processes' waiters a hand-off
    /// grace (the plain lock's turn-taking; see `turns`).
    pub(crate) fn hands_off_with_grace(&self) -> bool {
        matches!(self, Kind::Reentrant | Kind::Fenced(_))
    }

    /// Whether every release writes a replay key. The plain and spin locks skip it on a last
    /// release when no retry can need it (see `inflight`); the fair and read-write locks'
    /// releases move more than the hash (a queue, readers' timeout keys), so they always keep
    /// one, as Redisson does.
    pub(crate) fn always_replays(&self) -> bool {
        matches!(self, Kind::Fair(_) | Kind::Read | Kind::Write)
    }
}
