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

use crate::background::Ended;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::lock::until_answered;
use crate::lock::wait::{measured, Counted, OnChannel, Try};
use crate::meter::Kind;
use crate::names::CounterKeys;
use crate::pubsub::Wakes;
use crate::registry::Releasing;
use crate::scripts::{self, catalogue, integer, ms_arg, text, Script};
use crate::shared::Shared;

static ACQUIRE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_ACQUIRE));
static UNDO: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_UNDO));
static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_RELEASE));
static TRY_SET: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_TRY_SET));
static ADD: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_ADD));
static DRAIN: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_DRAIN));
static DELETE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_DELETE));
static COUNTER: Lazy<Script> = Lazy::new(|| Script::new(catalogue::COUNTER));

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
#[derive(Clone)]
pub struct Semaphore {
    counter: Counter,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.counter.fmt_as("Semaphore", f)
    }
}

impl Semaphore {
    pub(crate) fn new(shared: Arc<Shared>, name: String) -> Semaphore {
        Semaphore {
            counter: Counter::new(shared, name, CounterKeys::semaphore),
        }
    }

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
        Ok(measured(meter, Kind::Semaphore, &keys.name, waiting, wait)
            .await?
            .is_some())
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

/// What each synchronizer's handle holds (a [`Semaphore`]'s, a
/// [`PermitSemaphore`](crate::PermitSemaphore)'s, a [`CountDownLatch`](crate::CountDownLatch)'s):
/// the client, the keys of its name, or the error the name gets (the first operation reports
/// it), and the name as given.
#[derive(Clone)]
pub(crate) struct Counter {
    pub(crate) shared: Arc<Shared>,
    keys: std::result::Result<Arc<CounterKeys>, Error>,
    name: Arc<str>,
}

impl Counter {
    /// The handle of `name`, whose keys `keys` makes.
    pub(crate) fn new(
        shared: Arc<Shared>,
        name: String,
        keys: fn(&str) -> Result<CounterKeys>,
    ) -> Counter {
        let keys = keys(&name).and_then(|k| k.checked_for(shared.clustered()));
        Counter {
            shared,
            keys: keys.map(Arc::new),
            name: name.into(),
        }
    }

    /// The name as given, which is also the counter's Redis key.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The keys, once the client is known open and the name good.
    pub(crate) fn keys(&self) -> Result<&Arc<CounterKeys>> {
        self.shared.check_open()?;
        self.keys.as_ref().map_err(Clone::clone)
    }

    /// `Debug` of the handle of type `what`.
    pub(crate) fn fmt_as(&self, what: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(what).field("name", &self.name).finish()
    }
}

/// Whom a message on a semaphore's channel wakes: as many waiters as the count it carries
/// serves (see [`Wakes::Permits`]); every waiter when it carries none (a reconnect) or not a
/// number.
pub(crate) fn wakes(message: Option<&str>) -> Wakes {
    match message.and_then(|m| m.trim().parse::<i64>().ok()) {
        Some(count) => Wakes::Permits(count.max(0) as u64),
        None => Wakes::All,
    }
}

/// The most permits, or the largest count, a script takes exactly: 2^53 − 1.
const MAX_COUNT: u64 = (1 << 53) - 1;

/// Refuses a count of 0 permits to take or give back.
pub(crate) fn check_permits(permits: u32) -> Result<()> {
    if permits == 0 {
        return Err(Error::invalid("permits must be at least 1, got 0"));
    }
    Ok(())
}

/// A `WRONGTYPE` names the key that has the wrong type; other errors name the counter.
pub(crate) fn script_error(
    error: fred::error::Error,
    keys: &CounterKeys,
    redis: &Connection,
) -> Error {
    let names = [&*keys.name, &*keys.channel, &*keys.leases];
    Error::from_script(error, &names, &redis.server)
}

/// [`Semaphore::try_set_permits`], and the permit semaphore's (`leases`: check its leases key's
/// type too).
pub(crate) async fn try_set(
    shared: &Shared,
    keys: &CounterKeys,
    permits: u64,
    leases: bool,
) -> Result<bool> {
    if permits > MAX_COUNT {
        return Err(Error::invalid(format!(
            "{permits} permits are too many: the most is {MAX_COUNT}"
        )));
    }
    let redis = &shared.redis;
    let mut sent = vec![Key::from(&keys.name), Key::from(&keys.channel)];
    if leases {
        sent.push(Key::from(&keys.leases));
    }
    let args = [Value::Integer(permits as i64), text(shared.publish)];
    let reply = TRY_SET.run(redis, &sent, &args).await;
    let reply = reply.map_err(|e| counter_error(e, keys, redis, leases))?;
    Ok(integer(reply, &keys.name, &redis.server)? == 1)
}

/// [`Semaphore::add_permits`], and the permit semaphore's; the count after it.
pub(crate) async fn add(
    shared: &Shared,
    keys: &CounterKeys,
    delta: i64,
    leases: bool,
) -> Result<i64> {
    if delta == 0 || delta.unsigned_abs() > MAX_COUNT {
        return Err(Error::invalid(format!(
            "permits to add must be non-zero and at most {MAX_COUNT} either way, got {delta}"
        )));
    }
    let redis = &shared.redis;
    let mut sent = vec![Key::from(&keys.name), Key::from(&keys.channel)];
    if leases {
        sent.push(Key::from(&keys.leases));
    }
    let args = [Value::Integer(delta), text(shared.publish)];
    let reply = ADD.run(redis, &sent, &args).await;
    let reply = reply.map_err(|e| counter_error(e, keys, redis, leases))?;
    integer(reply, &keys.name, &redis.server)
}

/// Deletes a semaphore's counter, and its leases (`leases`: a permit semaphore's); `true` when
/// there was something to delete.
pub(crate) async fn delete(shared: &Shared, keys: &CounterKeys, leases: bool) -> Result<bool> {
    let redis = &shared.redis;
    let mut sent = vec![Key::from(&keys.name)];
    if leases {
        sent.push(Key::from(&keys.leases));
    }
    let reply = DELETE.run(redis, &sent, &[]).await;
    let reply = reply.map_err(|e| {
        let names = [&*keys.name, &*keys.leases];
        Error::from_script(e, &names, &redis.server)
    })?;
    Ok(integer(reply, &keys.name, &redis.server)? == 1)
}

/// As [`script_error`], for the scripts whose third key is the leases key.
fn counter_error(
    error: fred::error::Error,
    keys: &CounterKeys,
    redis: &Connection,
    leases: bool,
) -> Error {
    let names = [&*keys.name, &*keys.channel, &*keys.leases];
    let names = if leases { &names[..] } else { &names[..2] };
    Error::from_script(error, names, &redis.server)
}

/// The counter `keys.name` (a semaphore's permits, a latch's count), `None` when it does not
/// exist.
pub(crate) async fn counter(shared: &Shared, keys: &CounterKeys) -> Result<Option<i64>> {
    let redis = &shared.redis;
    let reply = COUNTER.run(redis, &[Key::from(&keys.name)], &[]).await;
    match reply.map_err(|e| script_error(e, keys, redis))? {
        Value::Null => Ok(None),
        other => integer(other, &keys.name, &redis.server).map(Some),
    }
}

/// How long a request key lives: past the last retry of its request (each try may wait a
/// command timeout for the connection and another for the reply), as a lock's replay key.
pub(crate) fn request_ttl_ms(shared: &Shared) -> u64 {
    crate::config::ceil_millis(shared.command_timeout * 6) as u64
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

/// How a request under a request key is sent: `(shared, fresh, request, sent_before)`, on the
/// client's connection or a rescue run's (`fresh`); `sent_before`: it may have reached the
/// server before, so its replay key is read first.
pub(crate) type SendRequest = Arc<
    dyn Fn(Arc<Shared>, Option<Arc<Connection>>, Str, bool) -> BoxFuture<'static, Result<i64>>
        + std::marker::Send
        + Sync,
>;

/// Sends a request that must apply once (a semaphore's release, a latch's count-down) under a
/// fresh request key of `keys`, until it is answered: a retry after a lost reply replays the
/// first outcome. Dropped mid-flight, it is finished in the background under the same key. The
/// key is queued for deletion once the reply is in. `what` names the request in logs.
pub(crate) async fn under_request(
    shared: &Arc<Shared>,
    keys: &CounterKeys,
    what: &'static str,
    send: SendRequest,
) -> Result<i64> {
    let request = keys.request(&shared.id);
    let releasing = shared
        .registry
        .releasing((keys.name.clone(), request.clone()));
    let mut resume = Resume {
        pending: Some((shared.clone(), request.clone(), releasing, send.clone())),
        what,
    };
    let attempt = |sent_before| send(shared.clone(), None, request.clone(), sent_before);
    let (outcome, _) = until_answered(false, attempt).await;
    resume.pending = None;
    if outcome.is_ok() {
        shared.sweeper.delete(Key::from(request));
    }
    outcome
}

/// Finishes in the background a request of [`under_request`] whose caller dropped it
/// mid-flight; it stays counted in flight till then.
struct Resume {
    pending: Option<(Arc<Shared>, Str, Releasing, SendRequest)>,
    what: &'static str,
}

impl Drop for Resume {
    fn drop(&mut self) {
        let Some((shared, request, releasing, send)) = self.pending.take() else {
            return;
        };
        let (releasing, what) = (Arc::new(releasing), self.what);
        let background = shared.clone();
        let job = move |fresh: Option<Arc<Connection>>| {
            let (shared, request, send) = (shared.clone(), request.clone(), send.clone());
            let releasing = releasing.clone();
            Box::pin(async move {
                let attempt = |_| send(shared.clone(), fresh.clone(), request.clone(), true);
                let (outcome, _) = until_answered(true, attempt).await;
                match &outcome {
                    Ok(_) => shared.sweeper.delete(Key::from(request)),
                    Err(error) => tracing::debug!(%error, "background {what} failed"),
                }
                drop(releasing);
                Ended::of(&outcome)
            }) as BoxFuture<'static, Ended>
        };
        background.background.must_run(Arc::new(job));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_wakes_as_many_waiters_as_its_count_serves() {
        assert_eq!(wakes(Some("3")), Wakes::Permits(3));
        assert_eq!(wakes(Some("-2")), Wakes::Permits(0));
        assert_eq!(wakes(Some("x")), Wakes::All);
        assert_eq!(wakes(None), Wakes::All);
    }
}
