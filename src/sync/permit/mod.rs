//! The permit semaphore, Redisson's `RPermitExpirableSemaphore` in async Rust: permits with
//! ids and leases, renewed by the watchdog while their holder lives.
//!
//! The available count is the string `<name>` (a [`Semaphore`](crate::Semaphore)'s counter);
//! each permit out is a member of the sorted set `{<name>}:timeout`, its 16-byte id scored by
//! the moment its lease ends. A script that finds a lease ended gives its permit back (Redisson's
//! lazy reclaim), so a holder that dies returns its permits one lease later. Releases publish
//! the count on `redisson_sc:{<name>}`, the channel both semaphores share. Scripts:
//! `lua/permit/`, and `lua/semaphore/` for setting, adding and deleting.
//!
//! A [`Permit`] is registered with the client's registry as a lock's hold is (under the
//! semaphore's name and the permit's id), so the watchdog renews it (many permits per script
//! call) and tells its guard when it is lost, and a shutdown gives it back.

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use once_cell::sync::Lazy;
use tokio::time::Instant;

use super::counter::{self, counter_handle, wakes};
use crate::config::millis;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::names::CounterKeys;
use crate::primitive::Primitive;
use crate::registry::HoldKey;
use crate::scripts::{self, catalogue, integer, ms_arg, text, Script};
use crate::shared::Shared;
use crate::wait::{measured, Counted, OnChannel, Try};

mod guard;

pub use guard::Permit;
use guard::{give_back, Released, ResumeRelease, PERMITS};

static ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::PERMIT_ACQUIRE));
static STATE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::PERMIT_STATE));

/// Redisson's score of a permit taken without a lease: a moment that never comes.
const NO_LEASE: &str = "922337203685477";

counter_handle! {
    /// A distributed semaphore whose permits have ids and leases (Redisson's
    /// `RPermitExpirableSemaphore`, on the same keys and channel): a permit taken by a process that
    /// dies comes back by itself when its lease ends. A cheap handle that does no I/O until used.
    ///
    /// Set the permits once with [`try_set_permits`](Self::try_set_permits); then
    /// [`acquire`](Self::acquire) takes one and returns it as a [`Permit`], which gives it back when
    /// released or dropped. By default the client's watchdog renews a permit's lease for as long as
    /// its `Permit` lives, as it renews locks (many permits per script call), so **a permit never
    /// expires while its holder lives, and comes back one watchdog timeout after its holder dies**.
    /// [`acquire_with_lease`](Self::acquire_with_lease) takes one with a fixed lease that nobody
    /// renews instead.
    ///
    /// Redisson processes can share the semaphore: their permits (with a lease or without) and
    /// relock's count against one total, and each side's releases wake the other's waiters. Leases
    /// are scored on the server's clock by relock and on the client's by Redisson, so a mixed fleet
    /// should keep its clocks in step.
    ///
    /// Waiting is as a [`Semaphore`](crate::Semaphore)'s, and a waiter also looks again when the
    /// earliest lease of a permit that is out ends (it may have been left by a holder that died).
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// let workers = client.permit_semaphore("gpu-slots");
    /// workers.try_set_permits(2).await?;
    /// let permit = workers.acquire().await?;
    /// tokio::select! {
    ///     _ = permit.lost() => eprintln!("permit lost: stop using the slot"),
    ///     _ = async { /* ... use one of the 2 slots ... */ } => {}
    /// }
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    PermitSemaphore, CounterKeys::semaphore
}

impl PermitSemaphore {
    /// The semaphore's name, which is also the Redis key of its available count.
    pub fn name(&self) -> &str {
        self.counter.name()
    }

    /// Sets the semaphore's permits to `permits`, unless it has permits set already. Returns
    /// whether it set them.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::try_set_permits`](crate::Semaphore::try_set_permits).
    pub async fn try_set_permits(&self, permits: u64) -> Result<bool> {
        counter::try_set(&self.counter.shared, self.counter.keys()?, permits, true).await
    }

    /// Adds `delta` permits to those available (a negative `delta` takes them away).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::add_permits`](crate::Semaphore::add_permits).
    pub async fn add_permits(&self, delta: i64) -> Result<()> {
        counter::add(&self.counter.shared, self.counter.keys()?, delta, true)
            .await
            .map(drop)
    }

    /// The permits available now, once the permits whose lease ended are given back; 0 when
    /// the semaphore does not exist.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::try_set_permits`](crate::Semaphore::try_set_permits).
    pub async fn available_permits(&self) -> Result<i64> {
        Ok(self.state().await?.0.unwrap_or(0))
    }

    /// The permits out now (taken, their lease not ended), by relock and Redisson alike.
    ///
    /// # Errors
    ///
    /// As [`available_permits`](Self::available_permits).
    pub async fn acquired_permits(&self) -> Result<u64> {
        Ok(self.state().await?.1)
    }

    /// All the semaphore's permits: those available plus those out; 0 when it does not exist.
    ///
    /// # Errors
    ///
    /// As [`available_permits`](Self::available_permits).
    pub async fn permits(&self) -> Result<i64> {
        match self.state().await? {
            (Some(available), acquired) => Ok(available + acquired as i64),
            (None, _) => Ok(0),
        }
    }

    /// (available, out) after giving back the permits whose lease ended.
    async fn state(&self) -> Result<(Option<i64>, u64)> {
        let keys = self.counter.keys()?;
        let shared = &self.counter.shared;
        let redis = &shared.redis;
        let sent = [
            Key::from(&keys.name),
            Key::from(&keys.leases),
            Key::from(&keys.channel),
        ];
        let reply = STATE.run(redis, &sent, &[text(shared.publish)]).await;
        let reply = reply.map_err(|e| blamed(e, keys, redis, ACQUIRE_KEYS))?;
        let Value::Array(mut items) = reply else {
            return Err(scripts::unexpected(&reply, &keys.name, &redis.server));
        };
        if items.len() != 2 {
            let reply = Value::Array(items);
            return Err(scripts::unexpected(&reply, &keys.name, &redis.server));
        }
        let acquired = integer(items.pop().expect("two"), &keys.name, &redis.server)?;
        let available = match items.pop().expect("two") {
            Value::Null => None,
            other => Some(integer(other, &keys.name, &redis.server)?),
        };
        Ok((available, acquired.max(0) as u64))
    }

    /// Deletes the semaphore: its available count and its permits out (whose holders find
    /// their permits lost). `true` when there was something to delete.
    ///
    /// # Errors
    ///
    /// As [`available_permits`](Self::available_permits).
    pub async fn delete(&self) -> Result<bool> {
        counter::delete(&self.counter.shared, self.counter.keys()?, true).await
    }

    /// Takes a permit, waiting as long as it takes. The watchdog renews its lease until the
    /// permit is released or dropped.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::NotFound`] when the semaphore does
    /// not exist (its permits were never set, or it was deleted or expired: waiting for it
    /// would wait forever), [`Error::WrongType`] when one of its keys holds something else,
    /// [`Error::Redis`] when Redis fails, [`Error::Closed`] after shutdown.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call holds no permit. If its last attempt had reached Redis, the
    /// permit it took, if any, is given back in the background.
    pub async fn acquire(&self) -> Result<Permit> {
        let permit = self.acquire_within(None, None).await?;
        Ok(permit.expect("an unbounded wait ends only with a permit"))
    }

    /// Takes a permit with a fixed lease, waiting as long as it takes. Nobody renews the lease:
    /// the permit comes back when it ends, `Permit` or no `Permit`.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), and [`Error::InvalidArgument`] for a lease under 1 ms or
    /// over 2^53 ms.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_with_lease(&self, lease: Duration) -> Result<Permit> {
        let permit = self.acquire_within(Some(lease), None).await?;
        Ok(permit.expect("an unbounded wait ends only with a permit"))
    }

    /// Takes a permit if one is available now (one attempt, no waiting), renewed by the
    /// watchdog; `None` when none is.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<Option<Permit>> {
        self.acquire_within(None, Some(Duration::ZERO)).await
    }

    /// Takes a permit, waiting at most `wait`, with a fixed `lease` (`None`: renewed by the
    /// watchdog); `None` when the wait ran out.
    ///
    /// # Errors
    ///
    /// As [`acquire_with_lease`](Self::acquire_with_lease).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<Permit>> {
        self.acquire_within(lease, Some(wait)).await
    }

    async fn acquire_within(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<Permit>> {
        let keys = self.counter.keys()?;
        let shared = &self.counter.shared;
        // The lease as Redis gets it: whole milliseconds, a remainder rounded up.
        let (lease, lease_ms) = match lease {
            Some(lease) => {
                let ms = millis(lease, "permit lease")?;
                (Some(Duration::from_millis(ms)), ms)
            }
            None => (None, shared.watchdog_ms),
        };
        let takes_turns = wait != Some(Duration::ZERO);
        let attempt = |_| take(shared, keys, lease, lease_ms);
        let waiting = OnChannel::new(shared, &keys.channel, wakes, 1, takes_turns, attempt);
        let (meter, kind) = (shared.meter(), Primitive::PermitSemaphore);
        let taken = measured(meter, kind, &keys.name, waiting, wait).await?;
        Ok(taken.map(|(permit, _)| permit))
    }

    /// Gives back the permit with id `id` (32 hex characters, as [`Permit::id`] shows it, or
    /// as Redisson returns it), whoever holds it: for an operator, or a process that keeps ids
    /// rather than `Permit`s. `true` when it was out. A relock holder of it finds its permit
    /// lost at its next renewal.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an id that is not 32 hex characters, and as
    /// [`available_permits`](Self::available_permits).
    pub async fn release_id(&self, id: &str) -> Result<bool> {
        let keys = self.counter.keys()?;
        let bytes = from_hex(id).ok_or_else(|| {
            Error::invalid(format!(
                "a permit id is 32 hexadecimal characters, got `{}`",
                crate::error::Shown(id)
            ))
        })?;
        let released = give_back(&self.counter.shared, None, keys, &bytes).await?;
        Ok(released != Released::NotOut)
    }
}

/// The order of the keys the acquire and state scripts take.
const ACQUIRE_KEYS: [Blame; 3] = [Blame::Name, Blame::Leases, Blame::Channel];
/// The order of the keys the release script takes.
const RELEASE_KEYS: [Blame; 3] = [Blame::Name, Blame::Channel, Blame::Leases];

/// Which of a permit semaphore's keys a script's `KEYS[i]` is.
#[derive(Clone, Copy)]
enum Blame {
    Name,
    Channel,
    Leases,
}

/// A script's error, a `WRONGTYPE` naming the key (in the script's order `order`) it blamed.
fn blamed(
    error: fred::error::Error,
    keys: &CounterKeys,
    redis: &Connection,
    order: [Blame; 3],
) -> Error {
    let names = order.map(|blame| match blame {
        Blame::Name => &*keys.name,
        Blame::Channel => &*keys.channel,
        Blame::Leases => &*keys.leases,
    });
    Error::from_script(error, &names, &redis.server)
}

/// One attempt to take a permit. Cancel safe: dropped after the script was sent, it leaves an
/// [`ResumeRelease`] behind that gives back the permit the script may have taken.
async fn take(
    shared: &Arc<Shared>,
    keys: &Arc<CounterKeys>,
    lease: Option<Duration>,
    lease_ms: u64,
) -> Result<Try<Counted<Permit>>> {
    shared.check_open()?;
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let id: Str = to_hex(&bytes).into();
    let key: HoldKey = (keys.name.clone(), id.clone());
    let acquiring = shared.registry.acquiring(&key, lease_ms).await;
    // Armed until the outcome is known: dropped armed, it gives the permit back, if taken.
    let mut orphan = ResumeRelease {
        pending: Some((
            shared.clone(),
            keys.clone(),
            bytes,
            shared.registry.releasing(key.clone()),
        )),
    };
    let redis = &shared.redis;
    let sent = [
        Key::from(&keys.name),
        Key::from(&keys.leases),
        Key::from(&keys.channel),
    ];
    let args = [
        ms_arg(lease_ms),
        Value::Bytes(bytes.to_vec().into()),
        text(shared.publish),
        text(NO_LEASE),
    ];
    let sent_at = Instant::now();
    let reply = ACQUIRE.run(redis, &sent, &args).await;
    let not_taken = |orphan: &mut ResumeRelease| orphan.pending = None;
    let left = match reply {
        Ok(Value::Null) => {
            not_taken(&mut orphan);
            return Err(Error::NotFound {
                key: keys.name.to_string(),
            });
        }
        Ok(Value::Array(reply)) if reply.len() == 2 => {
            match [&reply[0], &reply[1]].map(Value::as_i64) {
                [Some(1), Some(left)] => left.max(0) as u64,
                [Some(0), Some(wait_ms)] => {
                    not_taken(&mut orphan);
                    let bound = u64::try_from(wait_ms).ok().map(Duration::from_millis);
                    return Ok(Try::Busy(bound));
                }
                _ => {
                    not_taken(&mut orphan);
                    let reply = Value::Array(reply);
                    return Err(scripts::unexpected(&reply, &keys.name, &redis.server));
                }
            }
        }
        Ok(other) => {
            not_taken(&mut orphan);
            return Err(scripts::unexpected(&other, &keys.name, &redis.server));
        }
        Err(error) => {
            let error = blamed(error, keys, redis, ACQUIRE_KEYS);
            if !error.is_ambiguous() {
                not_taken(&mut orphan);
                return Err(error);
            }
            // Read back on the same connection, after the acquire: the permit is in the leases
            // when it took it. On an error the orphan's release gives it back, if taken.
            let score = fred::interfaces::SortedSetsInterface::zscore::<Option<f64>, _, _>(
                &**redis,
                Key::from(&keys.leases),
                Value::Bytes(bytes.to_vec().into()),
            )
            .await
            .map_err(|_| error.clone())?;
            if score.is_none() {
                not_taken(&mut orphan);
                return Err(error);
            }
            tracing::debug!(semaphore = %keys.name, "acquire reply lost; the read-back shows the permit");
            0
        }
    };
    let lease_for = Duration::from_millis(lease_ms);
    if Instant::now() >= sent_at + lease_for {
        // Answered after its lease could have run out (a stall longer than the lease): the
        // permit would be lost on arrival, and may be another's by now. The orphan gives it
        // back; the caller tries again.
        tracing::debug!(semaphore = %keys.name, "acquire answered after its lease could have run out; giving the permit back");
        return Ok(Try::Late { lease_ms });
    }
    let renew = lease.is_none();
    let registry = &shared.registry;
    let registration = registry.register(key, &PERMITS, renew, sent_at, lease_for);
    not_taken(&mut orphan);
    drop(acquiring);
    shared.meter().held(Primitive::PermitSemaphore, &keys.name);
    let permit = Permit {
        shared: shared.clone(),
        keys: keys.clone(),
        id,
        bytes,
        lease,
        registration,
        released: false,
        taken_at: Instant::now(),
    };
    Ok(Try::Taken((permit, left)))
}

/// 16 bytes as 32 lowercase hex characters.
fn to_hex(bytes: &[u8; 16]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(32), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

/// 32 hex characters (either case) as 16 bytes.
fn from_hex(hex: &str) -> Option<[u8; 16]> {
    let hex = hex.as_bytes();
    if hex.len() != 32 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut bytes = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        bytes[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_back_as_they_were_shown() {
        let bytes = *uuid::Uuid::new_v4().as_bytes();
        let hex = to_hex(&bytes);
        assert_eq!(hex.len(), 32);
        assert_eq!(hex, hex.to_lowercase());
        assert_eq!(from_hex(&hex), Some(bytes));
        assert_eq!(from_hex(&hex.to_uppercase()), Some(bytes));
        assert_eq!(from_hex("xyz"), None);
        assert_eq!(from_hex(&"g".repeat(32)), None);
    }
}
