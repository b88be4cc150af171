//! Reading what a server holds: [`Client::inspect`](crate::Client::inspect), [`Client::find`](crate::Client::find) and
//! [`Client::connections`](crate::Client::connections), whose work is the `inspect` module's.

use super::Client;
use crate::error::Result;
use crate::inspect::{ClientConnection, Found, Inspection};

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
