//! Reading what a server holds: [`Client::inspect`](crate::Client::inspect), [`Client::find`](crate::Client::find) and
//! [`Client::connections`](crate::Client::connections), whose work is the `inspect` module's.

use super::Client;
use crate::error::{Error, Result};
use crate::inspect::{ClientConnection, Found, Inspection, Kind};

impl Client {
    /// Everything relock and Redisson keep under `name`: what it is, who holds it (with the
    /// process behind each relock holder), its lease, its waiters, token, lock-delay, count.
    /// It writes nothing.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// let seen = client.inspect("order:42").await?;
    /// for holder in &seen.holders {
    ///     match holder.party.process() {
    ///         Some(p) => println!("{} holds: pid {} on {}", holder.party.owner, p.pid.unwrap_or(0), p.host),
    ///         None if holder.party.is_gone() => println!("its holder is gone; frees in {} ms", seen.pttl_ms),
    ///         None => println!("a Redisson client holds it"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty name, [`Error::Redis`](crate::Error::Redis) when the server cannot
    /// be read.
    pub async fn inspect(&self, name: &str) -> Result<Inspection> {
        self.shared.inspect(name).await
    }

    /// The locks and synchronizers whose names match `pattern` (a `SCAN MATCH` glob), on
    /// every primary of a cluster, each as [`inspect`](Self::inspect) tells it; at most
    /// `limit` of them. It never runs `KEYS` and writes nothing. Names whose only key is an
    /// auxiliary one are found too: a free fenced lock (its token), a fair queue whose holder
    /// left, a lock-delay in force.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty pattern or a zero limit, [`Error::Redis`](crate::Error::Redis) when
    /// a server cannot be read.
    pub async fn find(&self, pattern: &str, limit: usize) -> Result<Found> {
        self.shared.find(pattern, limit).await
    }

    /// Every connection to the server (each primary of a cluster), from `CLIENT LIST`: relock's
    /// carry [`ClientConnection::process`].
    ///
    /// # Errors
    ///
    /// [`Error::Redis`](crate::Error::Redis) when a server cannot be read (or refuses `CLIENT LIST`).
    pub async fn connections(&self) -> Result<Vec<ClientConnection>> {
        self.shared.connections().await
    }
}

/// Makes [`Client::force_unlock`] of the kinds in the primitives' table: each lock kind is freed
/// as its row says.
macro_rules! force_unlock {
    (
        primitives { $($primitives:tt)* }
        kinds {
            $(
                $(#[$doc:meta])* $Kind:ident = $label:literal, $words:literal,
                $class:ident $((|$client:ident, $seen:ident| $unlock:expr))?,
                keys { $($keys:tt)* }
            )*
        }
    ) => {
        impl Client {
            /// Frees what [`inspect`](Self::inspect) found, whoever holds it, as its kind is
            /// freed: a lock's or fenced lock's `force_unlock`, a fair lock's (its queue kept),
            /// a read-write lock's side in [`Inspection::mode`], an election's
            /// [`force_vacate`](crate::Election::force_vacate). A lock-delay in force ends too.
            /// What the `relock unlock --force` command runs. Its holder is not told at once: as
            /// with the type's own force-unlock, it learns when a renewal or its release finds
            /// the lock gone.
            ///
            /// True when something was freed; false when it was free already (it may have been
            /// released since it was inspected).
            ///
            /// ```no_run
            /// # async fn run(client: relock::Client) -> relock::Result<()> {
            /// let seen = client.inspect("order:42").await?;
            /// if seen.kind.is_lock() && seen.holders.iter().all(|h| h.party.is_gone()) {
            ///     client.force_unlock(&seen).await?;
            /// }
            /// # Ok(()) }
            /// ```
            ///
            /// # Errors
            ///
            /// [`Error::InvalidArgument`] when it found no lock (a synchronizer, nothing, a key
            /// of another kind), [`Error::Redis`](crate::Error::Redis) when the server cannot
            /// be reached.
            pub async fn force_unlock(&self, seen: &Inspection) -> Result<bool> {
                match &seen.kind {
                    $($(Kind::$Kind => {
                        let $client = self;
                        let $seen = seen;
                        $unlock
                    })?)*
                    kind => Err(Error::invalid(format!(
                        "`{}` is a {}, not a lock: only a lock can be force-unlocked",
                        seen.name,
                        kind.words()
                    ))),
                }
            }
        }
    };
}

crate::primitive::with_primitives!(force_unlock);
