//! The one error type of relock.
//!
//! Contention is not an error: a lock that is busy gives `Ok(None)` from the `try_*` methods.
//! Errors are what the caller has to act on: a hold that is not there, a lease that was lost, bad
//! input, a key of another type, or Redis itself failing.

use std::fmt;

use crate::redis_error::{self, Blamed, Headline, What};

/// What relock needs of a server, as [`Error::Unsupported`] says it.
pub(crate) const NEEDS: &str =
    "Redis 6.0 or later (or Valkey) with Lua scripting: EVALSHA and SCRIPT LOAD";

/// What went wrong. Messages read as sentences; [`std::error::Error::source`] keeps the Redis
/// error when there is one.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before anything was sent to Redis: an empty name, a zero lease,
    /// a duration too large to express in milliseconds, a name whose keys would land in different
    /// cluster slots.
    InvalidArgument {
        /// What was wrong, as a sentence fragment.
        reason: String,
    },
    /// The owner holds no hold on the lock: it was never taken by this owner, or it was already
    /// released, or it expired and someone else may hold it now. For a
    /// [`Permit`](crate::Permit): the permit was given back already (by its id, or with its
    /// semaphore deleted).
    NotHeld {
        /// The lock's name (a permit's: its semaphore's).
        lock: String,
        /// The holder field that was asked for, `<client-uuid>:<owner>` (a permit's: its id).
        owner: String,
    },
    /// The lease ended while the guard (or [`Permit`](crate::Permit)) was alive: the watchdog
    /// found the lock or permit gone, or could not renew it for a whole lease, or a fixed lease
    /// ran out. Another owner may hold the lock (or the permit's place) now.
    LeaseLost {
        /// The lock's name (a permit's: its semaphore's).
        lock: String,
        /// The holder field, `<client-uuid>:<owner>` (a permit's: its id).
        owner: String,
    },
    /// The key exists but holds another type than the operation works on: a lock's key that is
    /// not a lock (someone stored another type under the lock's name), or a
    /// [`Fence`](crate::Fence)'s data or fence key of another type.
    WrongType {
        /// The key that holds the wrong type.
        key: String,
    },
    /// The key an operation needs does not exist: a semaphore whose permits were never set
    /// (`try_set_permits` sets them), or one deleted or expired since.
    NotFound {
        /// The missing key.
        key: String,
    },
    /// Replica sync is on and no replica acknowledged the acquire in time. The hold was
    /// released again (or, if that failed too, expires with its lease).
    NotReplicated {
        /// The lock's name.
        lock: String,
    },
    /// The owner holds the read lock of an [`RwLock`](crate::RwLock) and asked for its write
    /// lock. The write lock waits for every reader to leave, this owner included, so the request
    /// would wait for itself forever; it fails at once instead. Release the read holds first (the
    /// other way round, a writer taking read holds, is allowed).
    UpgradeWouldDeadlock {
        /// The lock's name.
        lock: String,
    },
    /// The owner holds this lock already and asked for it again, and the lock's type refuses
    /// re-entry ([`NonReentrantLock`](crate::NonReentrantLock),
    /// [`NonReentrantFairLock`](crate::NonReentrantFairLock), Redisson's non-reentrant locks):
    /// the call fails at once, without waiting, and the hold the owner has is unchanged. It
    /// finds code that takes a lock it holds, which a reentrant lock would let through.
    Reentry {
        /// The lock's name.
        lock: String,
    },
    /// A fenced operation presented a token older than the newest one the resource has seen: a
    /// newer holder of the lock has used it since, so this holder's lease is over and its write
    /// was refused, applied nowhere.
    StaleToken {
        /// The fence key of the resource.
        resource: String,
        /// The highest token the resource has seen.
        seen: u64,
        /// The token this operation presented.
        presented: u64,
    },
    /// A [`RedLock`](crate::RedLock) round could not reach its quorum because too many masters
    /// *failed* (down, timed out or erroring): even had every master that answered said yes,
    /// fewer than `needed` would have. The yes votes it got were released before it returned.
    /// A round that misses its quorum because the lock is *busy* elsewhere is not an error: the
    /// acquire waits, or returns `Ok(None)` at its deadline.
    NoQuorum {
        /// The lock's name.
        lock: String,
        /// Masters that granted the lock in that round.
        granted: usize,
        /// Masters that answered that another owner holds it.
        busy: usize,
        /// Masters that were down, did not answer within the vote timeout, or failed.
        failed: usize,
        /// The quorum: a majority of the masters, N/2 + 1.
        needed: usize,
    },
    /// Redis failed, timed out or could not be reached.
    Redis {
        /// The server relock was talking to, as `host:port` (a cluster or Sentinel deployment
        /// names the nodes it was given); `None` when not known.
        server: Option<String>,
        /// fred's error.
        source: fred::error::Error,
    },
    /// The server is one relock cannot run on: older than Redis 6.0, or without Lua scripting
    /// (`EVALSHA` or `SCRIPT` renamed away, or Valkey's Lua engine unloaded).
    /// [`Client::connect`](crate::Client::connect) refuses such a server; a call whose server
    /// lost its scripting after that fails with this error too.
    Unsupported {
        /// The server, as `host:port` (a cluster or Sentinel deployment names the nodes it was
        /// given).
        server: String,
        /// What relock found there, such as `Redis 5.0.7` or `Valkey 9.1.2 with no scripting
        /// engine loaded`.
        found: String,
        /// What relock needs.
        needs: String,
    },
    /// The client was shut down.
    Closed,
}

impl Error {
    /// True when the caller asked to release or query a hold it does not have.
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// True when the lease ended while the guard was alive.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Error::LeaseLost { .. })
    }

    /// True when an argument was rejected before any I/O.
    pub fn is_invalid_argument(&self) -> bool {
        matches!(self, Error::InvalidArgument { .. })
    }

    /// True when a key holds a value of another type than the operation works on.
    pub fn is_wrong_type(&self) -> bool {
        matches!(self, Error::WrongType { .. })
    }

    /// True when a key the operation needs does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// True when no replica acknowledged an acquire in time (replica sync).
    pub fn is_not_replicated(&self) -> bool {
        matches!(self, Error::NotReplicated { .. })
    }

    /// True when an owner holding a read lock asked for the write lock of the same lock.
    pub fn is_upgrade_would_deadlock(&self) -> bool {
        matches!(self, Error::UpgradeWouldDeadlock { .. })
    }

    /// True when an owner asked again for a non-reentrant lock it holds.
    pub fn is_reentry(&self) -> bool {
        matches!(self, Error::Reentry { .. })
    }

    /// True when a fenced operation was refused for a token older than one already seen.
    pub fn is_stale_token(&self) -> bool {
        matches!(self, Error::StaleToken { .. })
    }

    /// True when a [`RedLock`](crate::RedLock) round failed for too many failed masters.
    pub fn is_no_quorum(&self) -> bool {
        matches!(self, Error::NoQuorum { .. })
    }

    /// True when Redis failed or could not be reached.
    pub fn is_redis(&self) -> bool {
        matches!(self, Error::Redis { .. })
    }

    /// True when the server is one relock cannot run on (too old, or without scripting).
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Error::Unsupported { .. })
    }

    /// True when the client was shut down.
    pub fn is_closed(&self) -> bool {
        matches!(self, Error::Closed)
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Error {
        Error::InvalidArgument {
            reason: reason.into(),
        }
    }

    /// A Redis error met on the connection to `server`: [`Error::Unsupported`] when it says
    /// the server cannot run scripts (any more).
    pub(crate) fn redis(source: fred::error::Error, server: &str) -> Error {
        if redis_error::classify(&source) == What::NoScripting {
            return Error::Unsupported {
                server: server.to_owned(),
                found: format!("a server that said \"{}\"", redis_error::reason(&source)),
                needs: NEEDS.to_owned(),
            };
        }
        Error::Redis {
            server: Some(server.to_owned()),
            source,
        }
    }

    /// Maps a Redis error met on the connection to `server` while working on `key`.
    pub(crate) fn from_redis(error: fred::error::Error, key: &str, server: &str) -> Error {
        match redis_error::classify(&error) {
            What::WrongType(_) => Error::WrongType {
                key: key.to_owned(),
            },
            _ => Error::redis(error, server),
        }
    }

    /// Maps a Redis error met on the connection to `server` while running a script on `keys`:
    /// a `WRONGTYPE` names the key the script blamed (`[key <i>]`), or else the first; a refused
    /// re-entry names the first key, the lock.
    pub(crate) fn from_script(error: fred::error::Error, keys: &[&str], server: &str) -> Error {
        match redis_error::classify(&error) {
            What::WrongType(Blamed::Key(i)) => Error::WrongType {
                key: keys.get(i.wrapping_sub(1)).unwrap_or(&keys[0]).to_string(),
            },
            What::Reentry => Error::Reentry {
                lock: keys[0].to_string(),
            },
            _ => Error::from_redis(error, keys[0], server),
        }
    }

    /// True when a command may or may not have run: the connection broke or the reply timed out.
    pub(crate) fn is_ambiguous(&self) -> bool {
        match self {
            Error::Redis { source, .. } => redis_error::classify(source).may_have_run(),
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument { reason } => write!(f, "invalid argument: {reason}"),
            Error::NotHeld { lock, owner } => {
                write!(f, "`{}` is not held by `{}`", Shown(lock), Shown(owner))
            }
            Error::LeaseLost { lock, owner } => write!(
                f,
                "the lease on `{}` held by `{}` was lost; another holder may have it now",
                Shown(lock),
                Shown(owner)
            ),
            Error::WrongType { key } => write!(
                f,
                "key `{}` holds a value of another type than the operation works on",
                Shown(key)
            ),
            Error::NotFound { key } => write!(
                f,
                "key `{}` does not exist: a semaphore's permits must be set first \
                 (`try_set_permits`)",
                Shown(key)
            ),
            Error::NotReplicated { lock } => write!(
                f,
                "lock `{}` was taken but no replica acknowledged it in time, so it was released",
                Shown(lock)
            ),
            Error::UpgradeWouldDeadlock { lock } => write!(
                f,
                "the owner holds the read lock of `{}` and asked for its write lock, which would \
                 wait for itself forever; release the read holds first",
                Shown(lock)
            ),
            Error::Reentry { lock } => write!(
                f,
                "lock `{}` is non-reentrant and its owner holds it already",
                Shown(lock)
            ),
            Error::StaleToken {
                resource,
                seen,
                presented,
            } => write!(
                f,
                "fencing token {presented} refused by `{}`, which has seen token {seen}: a newer \
                 holder of the lock has used it since",
                Shown(resource)
            ),
            Error::NoQuorum {
                lock,
                granted,
                busy,
                failed,
                needed,
            } => write!(
                f,
                "lock `{}` could not reach a quorum of {needed} masters: {failed} failed or did \
                 not answer in time ({granted} granted, {busy} busy)",
                Shown(lock)
            ),
            Error::Redis { server, source } => {
                let at = server
                    .as_deref()
                    .map(|s| format!(" at {s}"))
                    .unwrap_or_default();
                let reason = redis_error::reason(source);
                match redis_error::headline(source) {
                    Headline::Certificate => write!(
                        f,
                        "could not reach Redis{at}: its TLS certificate was not accepted ({reason})"
                    ),
                    Headline::Unreachable => write!(f, "could not reach Redis{at}: {reason}"),
                    Headline::TimedOut => write!(f, "Redis{at} did not answer in time: {reason}"),
                    Headline::ClosedEarly => write!(
                        f,
                        "the connection to Redis{at} closed before the reply came: {reason}"
                    ),
                    Headline::Refused => write!(f, "Redis{at} refused the credentials: {reason}"),
                    Headline::Failed => write!(f, "Redis{at} failed: {reason}"),
                }
            }
            Error::Unsupported {
                server,
                found,
                needs,
            } => write!(
                f,
                "relock cannot run on {server}: it found {found}, and needs {needs}"
            ),
            Error::Closed => write!(f, "the relock client was shut down"),
        }
    }
}

/// The most characters of a name an error message shows.
const SHOWN_CHARS: usize = 100;

/// A lock name or key as an error message shows it: cut to [`SHOWN_CHARS`] characters, with
/// its full length after, so a huge name cannot make a huge message.
pub(crate) struct Shown<'a>(pub(crate) &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(SHOWN_CHARS) {
            None => f.write_str(self.0),
            Some((end, _)) => write!(f, "{}… ({} bytes)", &self.0[..end], self.0.len()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A Redis error whose server is not known; relock's own calls say which server they were on.
impl From<fred::error::Error> for Error {
    fn from(source: fred::error::Error) -> Error {
        Error::Redis {
            server: None,
            source,
        }
    }
}

/// The result type of relock.
pub type Result<T> = std::result::Result<T, Error>;

/// A call to Redis made by a trait's method (a lock type's script call, a renewal, a shutdown's
/// release): a boxed future of its [`Result`].
pub(crate) type Call<'a, T> = futures::future::BoxFuture<'a, Result<T>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut() {
        let name = "n".repeat(1 << 20);
        let shown = Shown(&name).to_string();
        assert!(shown.len() < 130, "{} bytes", shown.len());
        assert!(
            shown.ends_with(&format!("… ({} bytes)", 1 << 20)),
            "{shown}"
        );
        assert_eq!(Shown("order:42").to_string(), "order:42");
        let wide = "é".repeat(SHOWN_CHARS + 1);
        assert!(Shown(&wide)
            .to_string()
            .starts_with(&"é".repeat(SHOWN_CHARS)));
    }
}
