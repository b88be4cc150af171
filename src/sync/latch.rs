//! The count-down latch, Redisson's `RCountDownLatch` in async Rust.
//!
//! The count is the string `<name>`, deleted when it reaches 0; the channel is
//! `redisson_countdownlatch__channel__{<name>}`, on which `0` says the count reached zero (every
//! waiter wakes) and `1` that a count was set. Scripts: `lua/latch/`, and `lua/counter.lua` to
//! read the count.
//!
//! A count-down is not idempotent, so it is never sent twice blindly: it leaves a short-lived
//! replay key with what it did, and a retry after a lost reply replays that instead of counting
//! down again.

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use once_cell::sync::Lazy;

use super::counter::{
    counter, counter_handle, request_ttl_ms, script_error, under_request, SendRequest,
};
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::names::CounterKeys;
use crate::primitive::Primitive;
use crate::pubsub::Wakes;
use crate::scripts::{catalogue, integer, ms_arg, text, Script};
use crate::shared::Shared;
use crate::wait::{measured, Counted, OnChannel, Try};

static TRY_SET: Lazy<Script> = Lazy::new(|| Script::new(catalogue::LATCH_TRY_SET));
static COUNT_DOWN: Lazy<Script> = Lazy::new(|| Script::new(catalogue::LATCH_COUNT_DOWN));
static DELETE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::LATCH_DELETE));

/// The message that says the count reached zero.
const ZERO_MESSAGE: &str = "0";

counter_handle! {
    /// A distributed count-down latch: tasks in any process wait until a count set once reaches
    /// zero by count-downs from anywhere (Redisson's `RCountDownLatch`, on the same key and
    /// channel). A cheap handle that does no I/O until used.
    ///
    /// Set the count with [`try_set_count`](Self::try_set_count) before anyone waits: a latch
    /// without a count is open, and [`wait`](Self::wait) returns at once. Once it reaches zero the
    /// count is deleted, so the latch can be set again.
    ///
    /// Waiting is on pub/sub: the count-down that reaches zero wakes every waiter of every process
    /// with one message per process. A lost message costs at most the poll interval
    /// ([`Config::with_poll_interval`](crate::Config::with_poll_interval)).
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// let ready = client.count_down_latch("workers-ready");
    /// ready.try_set_count(3).await?;
    /// // ... each of three workers, in any process, calls `ready.count_down().await?` ...
    /// ready.wait().await?; // returns once all three have
    /// # Ok(()) }
    /// ```
    CountDownLatch, CounterKeys::latch
}

impl CountDownLatch {
    /// The latch's name, which is also its Redis key.
    pub fn name(&self) -> &str {
        self.counter.name()
    }

    /// Sets the count, unless the latch has one already. Returns whether it set it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a count of 0 (a latch at zero is one without a count) or
    /// over 2^53 − 1, or a bad name (on a cluster, a name with braces: Redisson's channel for
    /// it would hash to another slot than its key); [`Error::WrongType`] when the key holds
    /// something else; [`Error::Redis`] when Redis fails (a lost reply is not retried: read the
    /// count to know whether it was set).
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        let keys = self.counter.keys()?;
        if count == 0 || count >= 1 << 53 {
            return Err(Error::invalid(format!(
                "a latch's count must be from 1 to 2^53 - 1, got {count}"
            )));
        }
        let redis = &self.counter.shared.redis;
        let sent = [Key::from(&keys.name), Key::from(&keys.channel)];
        let args = [
            Value::Integer(count as i64),
            text(self.counter.shared.publish),
        ];
        let reply = TRY_SET.run(redis, &sent, &args).await;
        let reply = reply.map_err(|e| script_error(e, keys, redis))?;
        Ok(integer(reply, &keys.name, &redis.server)? == 1)
    }

    /// Counts down by one. At zero the count is deleted and every waiter wakes. Counting down
    /// a latch without a count does nothing (it is open).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] when the key holds
    /// something else, [`Error::Redis`] when Redis fails, [`Error::Closed`] after shutdown. A
    /// count-down whose reply was lost is sent again under the same request id, which replays
    /// the first one's outcome: it counts once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: once sent, the count-down runs to its end in the background, and counts
    /// once.
    pub async fn count_down(&self) -> Result<()> {
        let keys = self.counter.keys()?;
        let sent = keys.clone();
        let send: SendRequest = Arc::new(move |shared, fresh, request, sent_before| {
            let keys = sent.clone();
            Box::pin(async move {
                let fresh = fresh.as_deref();
                count_down_once(&shared, fresh, &keys, &request, sent_before).await
            })
        });
        under_request(&self.counter.shared, keys, "count-down", send)
            .await
            .map(drop)
    }

    /// The count now: 0 when the latch has none (never set, or it reached zero).
    ///
    /// # Errors
    ///
    /// As [`try_set_count`](Self::try_set_count).
    pub async fn count(&self) -> Result<u64> {
        let keys = self.counter.keys()?;
        Ok(counter(&self.counter.shared, keys)
            .await?
            .unwrap_or(0)
            .max(0) as u64)
    }

    /// Deletes the count, opening the latch: waiters of every process wake and return,
    /// Redisson's too (it publishes `0`, the zero message; Redisson's own delete publishes `1`,
    /// which leaves Redisson's waiters asleep on an open latch). `true` when it had one.
    ///
    /// # Errors
    ///
    /// As [`try_set_count`](Self::try_set_count).
    pub async fn delete(&self) -> Result<bool> {
        let keys = self.counter.keys()?;
        let redis = &self.counter.shared.redis;
        let sent = [Key::from(&keys.name), Key::from(&keys.channel)];
        let reply = DELETE
            .run(redis, &sent, &[text(self.counter.shared.publish)])
            .await;
        let reply = reply.map_err(|e| script_error(e, keys, redis))?;
        Ok(integer(reply, &keys.name, &redis.server)? == 1)
    }

    /// Waits until the count is zero (or the latch has none), as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`try_set_count`](Self::try_set_count), and [`Error::Closed`] after shutdown.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads and listens.
    pub async fn wait(&self) -> Result<()> {
        let open = self.wait_within(None).await?;
        debug_assert!(open, "an unbounded wait ends only when the latch opens");
        Ok(())
    }

    /// Waits at most `timeout` until the count is zero; `false` when it was not by then.
    ///
    /// # Errors
    ///
    /// As [`wait`](Self::wait).
    ///
    /// # Cancel safety
    ///
    /// As [`wait`](Self::wait).
    pub async fn wait_for(&self, timeout: Duration) -> Result<bool> {
        self.wait_within(Some(timeout)).await
    }

    async fn wait_within(&self, wait: Option<Duration>) -> Result<bool> {
        let keys = self.counter.keys()?;
        let shared = &self.counter.shared;
        let attempt = |done| open(shared, keys, done);
        // Every waiter goes as soon as the latch opens: none waits behind another.
        let waiting = OnChannel::new(shared, &keys.channel, wakes, 1, false, attempt);
        Ok(
            measured(shared.meter(), Primitive::Latch, &keys.name, waiting, wait)
                .await?
                .is_some(),
        )
    }
}

/// One look at the latch: open when the count is gone or at 0, or when a message said it
/// reached zero (`done`) since the last look.
async fn open(shared: &Shared, keys: &CounterKeys, done: bool) -> Result<Try<Counted<()>>> {
    shared.check_open()?;
    if done {
        return Ok(Try::Taken(((), 0)));
    }
    Ok(match counter(shared, keys).await? {
        Some(count) if count > 0 => Try::Busy(None),
        _ => Try::Taken(((), 0)),
    })
}

/// Whom a message on a latch's channel wakes: `0` (zero reached) every waiter, and the wait is
/// over; anything else (a new count, a deletion, a reconnect) every waiter, to look again.
fn wakes(message: Option<&str>) -> Wakes {
    if message == Some(ZERO_MESSAGE) {
        Wakes::AllDone
    } else {
        Wakes::All
    }
}

/// Sends one count-down under the request key `request` (`sent_before`: it may have reached
/// the server before, so its replay key is read first); the count after it.
async fn count_down_once(
    shared: &Shared,
    fresh: Option<&Connection>,
    keys: &CounterKeys,
    request: &Str,
    sent_before: bool,
) -> Result<i64> {
    let redis = fresh.unwrap_or(&shared.redis);
    let sent = [
        Key::from(&keys.name),
        Key::from(&keys.channel),
        Key::from(request),
    ];
    let args = [
        text(shared.publish),
        ms_arg(request_ttl_ms(shared)),
        text(if sent_before { "1" } else { "0" }),
    ];
    let reply = COUNT_DOWN.run(redis, &sent, &args).await;
    let reply = reply.map_err(|e| script_error(e, keys, redis))?;
    integer(reply, &keys.name, &redis.server)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_ends_every_wait_and_anything_else_makes_waiters_look() {
        assert_eq!(wakes(Some("0")), Wakes::AllDone);
        assert_eq!(wakes(Some("1")), Wakes::All);
        assert_eq!(wakes(None), Wakes::All);
    }
}
