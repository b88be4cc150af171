//! The semaphore, Redisson's `RSemaphore` in async Rust: a counter of available permits.
//!
//! The counter is the string `<name>`; taking permits decrements it when it has enough, giving
//! them back increments it and publishes the new count on `redisson_sc:{<name>}`, which wakes up
//! to that many waiters of every process (Redisson's and relock's alike). A permit is a number,
//! not a holder: nothing ties it to whoever took it. Scripts: `lua/semaphore/`.
//!
//! Each acquire leaves a short-lived request key with what it took
//! (`relock_request:{<name>}:<client-id>:<n>`), so an acquire whose reply was lost is read back,
//! and one dropped after it was sent gives its permits back; each release leaves one too, so its
//! retry after a lost reply counts once. The client deletes them once the reply is in.

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use futures::future::BoxFuture;
use once_cell::sync::Lazy;

use super::counter::{
    add, check_permits, counter, counter_handle, delete, request_ttl_ms, script_error, try_set,
    under_request, wakes, SendRequest,
};
use crate::background::Ended;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::names::CounterKeys;
use crate::primitive::Primitive;
use crate::scripts::{self, catalogue, integer, ms_arg, text, Script};
use crate::shared::Shared;
use crate::wait::{measured, until_answered, Counted, OnChannel, Try};

static ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_ACQUIRE));
static UNDO: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_UNDO));
static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_RELEASE));
static DRAIN: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_DRAIN));

counter_handle! {
    /// A distributed semaphore: a count of permits in Redis, shared by every process that uses the
    /// same name (Redisson's `RSemaphore`, on the same key and channel). A cheap handle that does
    /// no I/O until used.
    ///
    /// Set the permits once with [`try_set_permits`](Self::try_set_permits); then
    /// [`acquire`](Self::acquire) takes some (waiting until enough are available) and
    /// [`release`](Self::release) gives them back.
    ///
    /// **A permit is not tied to whoever took it**: any caller may release permits, and the
    /// permits of a process that dies before it releases them are gone until someone adds them
    /// back ([`add_permits`](Self::add_permits)). That is a semaphore's contract (Redisson's and
    /// the JDK's). When permits must come back by themselves when their holder dies, use a
    /// [`PermitSemaphore`](crate::PermitSemaphore): each permit has an id and a lease that the
    /// watchdog renews while its holder lives.
    ///
    /// Waiting is on pub/sub: a release wakes as many waiters in each process as the permits it
    /// frees serve. This client's waiters take turns in arrival order, so a waiter for many permits
    /// is not passed by later waiters for fewer; across processes the order is not fair (as
    /// Redisson's). A lost message costs at most the poll interval
    /// ([`Config::with_poll_interval`](crate::Config::with_poll_interval)).
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// let downloads = client.semaphore("downloads");
    /// downloads.try_set_permits(4).await?; // false if another process set them first
    /// downloads.acquire(1).await?;
    /// // ... at most 4 of these run at once, across every process ...
    /// downloads.release(1).await?;
    /// # Ok(()) }
    /// ```
    Semaphore, CounterKeys::semaphore
}

impl Semaphore {
    /// The semaphore's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        self.counter.name()
    }

    /// Sets the semaphore's permits to `permits`, unless it has permits set already (by anyone,
    /// at any count, 0 included). Returns whether it set them; a set that frees permits wakes
    /// the waiters.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name or more than 2^53 − 1 permits,
    /// [`Error::WrongType`] when the key holds something else, [`Error::Redis`] when Redis
    /// fails (a lost reply is not retried: read the permits to know whether it was set).
    pub async fn try_set_permits(&self, permits: u64) -> Result<bool> {
        let keys = self.counter.keys()?;
        try_set(&self.counter.shared, keys, permits, false).await
    }

    /// Adds `delta` permits (a negative `delta` takes them away, which may leave the count
    /// below 0: acquires then wait until releases raise it again). A missing semaphore counts
    /// as 0 permits and is created. Wakes the waiters when permits are available after it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a `delta` of 0 or beyond ±(2^53 − 1), and as
    /// [`try_set_permits`](Self::try_set_permits).
    pub async fn add_permits(&self, delta: i64) -> Result<()> {
        let keys = self.counter.keys()?;
        add(&self.counter.shared, keys, delta, false)
            .await
            .map(drop)
    }

    /// The permits available now: 0 when the semaphore does not exist, below 0 when more were
    /// taken away ([`add_permits`](Self::add_permits)) than were available.
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    pub async fn available_permits(&self) -> Result<i64> {
        let keys = self.counter.keys()?;
        Ok(counter(&self.counter.shared, keys).await?.unwrap_or(0))
    }

    /// Takes every available permit at once and returns how many there were (0 when the
    /// semaphore does not exist; a count below 0 is raised to 0 and returned as it was).
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    pub async fn drain_permits(&self) -> Result<i64> {
        let keys = self.counter.keys()?;
        let redis = &self.counter.shared.redis;
        let reply = DRAIN.run(redis, &[Key::from(&keys.name)], &[]).await;
        let reply = reply.map_err(|e| script_error(e, keys, redis))?;
        integer(reply, &keys.name, &redis.server)
    }

    /// Deletes the semaphore (its permits are gone); `true` when it existed. Waiters that try
    /// again fail with [`Error::NotFound`].
    ///
    /// # Errors
    ///
    /// As [`try_set_permits`](Self::try_set_permits).
    pub async fn delete(&self) -> Result<bool> {
        let keys = self.counter.keys()?;
        delete(&self.counter.shared, keys, false).await
    }

    /// Takes `permits` permits, waiting as long as it takes until that many are available.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 permits or a bad name, [`Error::NotFound`] when the
    /// semaphore does not exist (its permits were never set, or it was deleted or expired:
    /// waiting for it would wait forever), [`Error::WrongType`] when the key holds something
    /// else, [`Error::Redis`] when Redis fails, [`Error::Closed`] after shutdown.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call takes no permit. If its last attempt had reached Redis, the
    /// permits it took, if any, are given back in the background.
    pub async fn acquire(&self, permits: u32) -> Result<()> {
        let taken = self.acquire_within(permits, None).await?;
        debug_assert!(taken, "an unbounded wait ends only with the permits");
        Ok(())
    }

    /// Takes `permits` permits if that many are available now (one attempt, no waiting);
    /// `false` when not.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, permits: u32) -> Result<bool> {
        self.acquire_within(permits, Some(Duration::ZERO)).await
    }

    /// Takes `permits` permits, waiting at most `wait` for that many to be available; `false`
    /// when the wait ran out.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_for(&self, permits: u32, wait: Duration) -> Result<bool> {
        self.acquire_within(permits, Some(wait)).await
    }

    async fn acquire_within(&self, permits: u32, wait: Option<Duration>) -> Result<bool> {
        let keys = self.counter.keys()?;
        check_permits(permits)?;
        let shared = &self.counter.shared;
        let takes_turns = wait != Some(Duration::ZERO);
        let attempt = |_| take(shared, keys, permits);
        let channel = &keys.channel;
        let waiting = OnChannel::new(shared, channel, wakes, permits.into(), takes_turns, attempt);
        let meter = shared.meter();
        Ok(
            measured(meter, Primitive::Semaphore, &keys.name, waiting, wait)
                .await?
                .is_some(),
        )
    }

    /// Gives `permits` permits back and wakes as many waiters as they serve. Nothing checks
    /// that the caller took them: a release adds permits whoever calls it (a semaphore's
    /// contract). A missing semaphore is created with these permits, as Redisson does.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 permits or a bad name, [`Error::WrongType`] when the
    /// key holds something else, [`Error::Redis`] when Redis fails, [`Error::Closed`] after
    /// shutdown. A release whose reply was lost is sent again under the same request id, so it
    /// counts once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: once sent, the release runs to its end in the background.
    pub async fn release(&self, permits: u32) -> Result<()> {
        let keys = self.counter.keys()?;
        check_permits(permits)?;
        let sent = keys.clone();
        let send: SendRequest = Arc::new(move |shared, fresh, request, sent_before| {
            let keys = sent.clone();
            Box::pin(async move {
                let fresh = fresh.as_deref();
                give_back(&shared, fresh, &keys, &request, permits, sent_before).await
            })
        });
        under_request(&self.counter.shared, keys, "release", send)
            .await
            .map(drop)
    }
}

/// One attempt to take `permits`. Cancel safe: dropped after the script was sent, it leaves an
/// [`Undo`] behind that gives back what the script took.
async fn take(
    shared: &Arc<Shared>,
    keys: &Arc<CounterKeys>,
    permits: u32,
) -> Result<Try<Counted<()>>> {
    shared.check_open()?;
    let redis = &shared.redis;
    let request = keys.request(&shared.id);
    let in_flight = (keys.name.clone(), request.clone());
    let acquiring = shared.registry.acquiring(&in_flight, 0).await;
    let mut undo = Undo {
        shared: shared.clone(),
        keys: keys.clone(),
        request: Some(request.clone()),
    };
    let sent = [Key::from(&keys.name), Key::from(&request)];
    let args = [
        Value::Integer(permits.into()),
        ms_arg(request_ttl_ms(shared)),
    ];
    let outcome = match ACQUIRE.run(redis, &sent, &args).await {
        Ok(Value::Null) => Err(Error::NotFound {
            key: keys.name.to_string(),
        }),
        Ok(Value::Array(reply)) if reply.len() == 2 => {
            let [taken, count] = [&reply[0], &reply[1]].map(Value::as_i64);
            match (taken, count) {
                (Some(1), Some(left)) => Ok(Try::Taken(((), left.max(0) as u64))),
                (Some(0), Some(_)) => Ok(Try::Busy(None)),
                _ => Err(unexpected(Value::Array(reply), keys, redis)),
            }
        }
        Ok(other) => Err(unexpected(other, keys, redis)),
        Err(error) => {
            let error = script_error(error, keys, redis);
            if !error.is_ambiguous() {
                Err(error)
            } else {
                // Read back on the same connection, after the acquire: its request key is
                // there when it took the permits. On an error the undo gives them back.
                let exists = fred::interfaces::KeysInterface::exists::<i64, _>(
                    &**redis,
                    Key::from(&request),
                )
                .await;
                match exists {
                    Ok(1) => Ok(Try::Taken(((), 0))),
                    Ok(_) => Err(error),
                    Err(_) => return Err(error),
                }
            }
        }
    };
    undo.request = None;
    drop(acquiring);
    if matches!(outcome, Ok(Try::Taken(_))) {
        shared.sweeper.delete(Key::from(request));
    }
    outcome
}

fn unexpected(reply: Value, keys: &CounterKeys, redis: &Connection) -> Error {
    scripts::unexpected(&reply, &keys.name, &redis.server)
}

/// Armed while an acquire may have taken permits nobody received: dropped armed (the caller
/// gave up with the acquire in flight), it gives them back in the background, if it took any.
struct Undo {
    shared: Arc<Shared>,
    keys: Arc<CounterKeys>,
    request: Option<Str>,
}

impl Drop for Undo {
    fn drop(&mut self) {
        let Some(request) = self.request.take() else {
            return;
        };
        let (shared, keys) = (self.shared.clone(), self.keys.clone());
        let in_flight = (keys.name.clone(), request.clone());
        let releasing = Arc::new(shared.registry.releasing(in_flight));
        let job = move |fresh: Option<Arc<Connection>>| {
            let (shared, keys, request) = (shared.clone(), keys.clone(), request.clone());
            let releasing = releasing.clone();
            Box::pin(async move {
                let redis = fresh.as_deref().unwrap_or(&shared.redis);
                let sent = [
                    Key::from(&keys.name),
                    Key::from(&keys.channel),
                    Key::from(&request),
                ];
                // Sent again when its reply is lost: the request key goes with the permits, so a
                // second run gives back nothing more.
                let send = |_| async {
                    let undone = UNDO.run(redis, &sent, &[text(shared.publish)]).await;
                    undone.map_err(|e| script_error(e, &keys, redis))
                };
                let (undone, _) = until_answered(true, send).await;
                if let Err(error) = &undone {
                    tracing::debug!(semaphore = %keys.name, %error, "could not give back the permits of a cancelled acquire");
                }
                drop(releasing);
                Ended::of(&undone)
            }) as BoxFuture<'static, Ended>
        };
        self.shared.background.must_run(Arc::new(job));
    }
}

/// Sends one release of `permits` under the request key `request` (`sent_before`: it may have
/// reached the server before, so its replay key is read first); the count after it.
async fn give_back(
    shared: &Shared,
    fresh: Option<&Connection>,
    keys: &CounterKeys,
    request: &Str,
    permits: u32,
    sent_before: bool,
) -> Result<i64> {
    let redis = fresh.unwrap_or(&shared.redis);
    let sent = [
        Key::from(&keys.name),
        Key::from(&keys.channel),
        Key::from(request),
    ];
    let args = [
        Value::Integer(permits.into()),
        text(shared.publish),
        ms_arg(request_ttl_ms(shared)),
        text(if sent_before { "1" } else { "0" }),
    ];
    let reply = RELEASE.run(redis, &sent, &args).await;
    let reply = reply.map_err(|e| script_error(e, keys, redis))?;
    integer(reply, &keys.name, &redis.server)
}
