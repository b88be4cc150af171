//! The one error type of relock.
//!
//! Contention is not an error: a lock that is busy gives `Ok(None)` from the `try_*` methods.
//! Errors are what the caller has to act on: a hold that is not there, a lease that was lost, bad
//! input, a key that is not a lock, or Redis itself failing.

use std::fmt;

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
    /// released, or it expired and someone else may hold it now.
    NotHeld {
        /// The lock's name.
        lock: String,
        /// The holder field that was asked for, `<client-uuid>:<owner>`.
        owner: String,
    },
    /// The lease ended while the guard was alive: the watchdog found the lock gone, or could not
    /// renew it for a whole lease, or a fixed lease ran out. Another owner may hold the lock now.
    LeaseLost {
        /// The lock's name.
        lock: String,
        /// The holder field, `<client-uuid>:<owner>`.
        owner: String,
    },
    /// The key exists but is not a lock (someone stored another type under the lock's name).
    WrongType {
        /// The key that holds the wrong type.
        key: String,
    },
    /// Replica sync is on and no replica acknowledged the acquire in time. The hold was
    /// released again (or, if that failed too, expires with its lease).
    NotReplicated {
        /// The lock's name.
        lock: String,
    },
    /// Redis failed, timed out or could not be reached.
    Redis(fred::error::Error),
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

    /// True when the lock's key holds a value of another type.
    pub fn is_wrong_type(&self) -> bool {
        matches!(self, Error::WrongType { .. })
    }

    /// True when no replica acknowledged an acquire in time (replica sync).
    pub fn is_not_replicated(&self) -> bool {
        matches!(self, Error::NotReplicated { .. })
    }

    /// True when Redis failed or could not be reached.
    pub fn is_redis(&self) -> bool {
        matches!(self, Error::Redis(_))
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

    /// Maps a Redis error met while working on `key`.
    pub(crate) fn from_redis(error: fred::error::Error, key: &str) -> Error {
        if error.details().contains("WRONGTYPE") {
            Error::WrongType {
                key: key.to_owned(),
            }
        } else {
            Error::Redis(error)
        }
    }

    /// True when a command may or may not have run: the connection broke or the reply timed out.
    pub(crate) fn is_ambiguous(&self) -> bool {
        use fred::error::ErrorKind;
        match self {
            Error::Redis(e) => match e.kind() {
                ErrorKind::IO | ErrorKind::Timeout | ErrorKind::Canceled => true,
                // fred's answer to a command that was in flight when its connection dropped and
                // may not be written again (the client sends every command once).
                ErrorKind::Unknown => e.details().contains("write attempts"),
                _ => false,
            },
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument { reason } => write!(f, "invalid argument: {reason}"),
            Error::NotHeld { lock, owner } => {
                write!(f, "lock `{lock}` is not held by owner `{owner}`")
            }
            Error::LeaseLost { lock, owner } => write!(
                f,
                "the lease of lock `{lock}` held by `{owner}` was lost; another owner may hold it"
            ),
            Error::WrongType { key } => {
                write!(f, "key `{key}` holds a value of another type, not a lock")
            }
            Error::NotReplicated { lock } => write!(
                f,
                "lock `{lock}` was taken but no replica acknowledged it in time, so it was released"
            ),
            Error::Redis(e) => write!(f, "redis error: {e}"),
            Error::Closed => write!(f, "the relock client was shut down"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<fred::error::Error> for Error {
    fn from(error: fred::error::Error) -> Error {
        Error::Redis(error)
    }
}

/// The result type of relock.
pub type Result<T> = std::result::Result<T, Error>;
