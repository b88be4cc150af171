//! What the synchronizers share: the handle of a counter in Redis ([`Counter`]: a semaphore's
//! permits, a permit semaphore's, a latch's count), the scripts every one of them runs on it
//! (set, add, delete, read), their errors, and requests that must apply once, sent under a
//! request key ([`under_request`]).

use std::sync::Arc;

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use futures::future::BoxFuture;
use once_cell::sync::Lazy;

use crate::background::Ended;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::names::CounterKeys;
use crate::pubsub::Wakes;
use crate::registry::Releasing;
use crate::scripts::{catalogue, integer, text, Script};
use crate::shared::Shared;
use crate::wait::until_answered;

/// A synchronizer's handle type: `$Type`, holding its [`Counter`], with its `Debug` and its
/// constructor on the keys `$keys` makes of a name.
macro_rules! counter_handle {
    ($(#[$doc:meta])* $Type:ident, $keys:path) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $Type {
            counter: $crate::sync::counter::Counter,
        }

        impl std::fmt::Debug for $Type {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.counter.fmt_as(stringify!($Type), f)
            }
        }

        impl $Type {
            pub(crate) fn new(
                shared: std::sync::Arc<$crate::shared::Shared>,
                name: String,
            ) -> $Type {
                $Type {
                    counter: $crate::sync::counter::Counter::new(shared, name, $keys),
                }
            }
        }
    };
}
pub(crate) use counter_handle;

static TRY_SET: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_TRY_SET));
static ADD: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_ADD));
static DELETE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_DELETE));
static COUNTER: Lazy<Script> = Lazy::new(|| Script::new(catalogue::COUNTER));

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
