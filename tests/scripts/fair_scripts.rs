//! Every branch of the fair lock's Lua scripts (`lua/fair/`), as the client composes them
//! (`relock::testing::scripts`), run directly with `EVAL` on a
//! real server: the reply, the Redis state it leaves (the lock hash, the queue, the waiters'
//! deadlines against the server's clock, replay keys) and who was woken on which waiter's channel.
//! The last tests interleave Redisson's own fair lock scripts with relock's on one name.

use super::fixture::{self, assert_within, assert_wrongtype, int, pairs, Lua, LEASE_MS};
use crate::common;

use std::time::Duration;

use common::{redisson_fair, resp, RawSubscriber, Resp};
use fred::types::Value;
use relock::testing::scripts::{
    FAIR_ACQUIRE as ACQUIRE, FAIR_FORCE_RELEASE as FORCE_RELEASE, FAIR_LEAVE as LEAVE,
    FAIR_RELEASE as RELEASE,
};

/// The holder in most tests, and the waiters queued behind it.
const X: &str = "0a0a0a0a-0000-4000-8000-00000000000x:holder";
const A: &str = "1a1a1a1a-1111-4111-8111-11111111111a:1";
const B: &str = "2b2b2b2b-2222-4222-8222-22222222222b:2";
const C: &str = "3c3c3c3c-3333-4333-8333-33333333333c:3";
/// A waiter that died in the queue.
const DEAD: &str = "dddddddd-dddd-4ddd-8ddd-dddddddddddd:dead";

/// W: a waiter that has not run the acquire script for this long is dead.
const WAITER_TIMEOUT_MS: i64 = 10_000;
const REPLAY_TTL_MS: i64 = 8_000;

fixture::lua_fixture! {
    /// A server, a raw fred connection and one fair lock's keys.
    struct Fixture for lua {
        queue: String = common::fair_queue_key(&lua.name),
        deadlines: String = common::fair_timeout_key(&lua.name),
        channels: String = common::lock_channel(&lua.name),
        /// relock's liveness record of its waiters.
        alive: String = common::fair_alive_key(&lua.name),
        /// Q, the Redisson per-waiter wait the scripts are given (0 in the tests of relock's own
        /// rules: deadlines are then the liveness deadlines, now + W).
        wait_q: i64 = 0,
    }
}

impl Fixture {
    async fn with_wait(test: &str, wait_q: i64) -> Fixture {
        Fixture {
            wait_q,
            ..Fixture::new(test).await
        }
    }

    // ---- the scripts, as relock calls them

    async fn acquire(
        &self,
        lease_ms: i64,
        field: &str,
        mode: &str,
    ) -> Result<Value, fred::error::Error> {
        self.eval(
            ACQUIRE,
            &[&self.name, &self.queue, &self.deadlines, &self.alive],
            &[
                &lease_ms.to_string(),
                field,
                &WAITER_TIMEOUT_MS.to_string(),
                mode,
                &self.wait_q.to_string(),
            ],
        )
        .await
    }

    /// `lock()`: take the lock, or queue up / prove to be alive.
    async fn wait(&self, field: &str) -> Result<Value, fred::error::Error> {
        self.acquire(LEASE_MS, field, "wait").await
    }

    /// `try_lock()` without a wait: never queues.
    async fn attempt(&self, field: &str) -> Result<Value, fred::error::Error> {
        self.acquire(LEASE_MS, field, "try").await
    }

    /// A release request's first send.
    async fn release(&self, field: &str, request: &str) -> Result<Value, fred::error::Error> {
        self.send_release(field, request, "0", "1", LEASE_MS).await
    }

    /// The same release request sent again (its reply was lost).
    async fn retry_release(&self, field: &str, request: &str) -> Result<Value, fred::error::Error> {
        self.send_release(field, request, "1", "1", LEASE_MS).await
    }

    /// A release whose last hold writes no replay key (`replay_last` 0), and its retry.
    async fn release_unrecorded(
        &self,
        field: &str,
        request: &str,
        sent_before: &str,
    ) -> Result<Value, fred::error::Error> {
        self.send_release(field, request, sent_before, "0", LEASE_MS)
            .await
    }

    /// A release sent with a TTL of 0: the client keeps no hold of the owner's.
    async fn release_keeping_nothing(
        &self,
        field: &str,
        request: &str,
    ) -> Result<Value, fred::error::Error> {
        self.send_release(field, request, "0", "0", 0).await
    }

    /// A release request, keeping `keep_ms` for the owner's remaining holds.
    async fn send_release(
        &self,
        field: &str,
        request: &str,
        sent_before: &str,
        replay_last: &str,
        keep_ms: i64,
    ) -> Result<Value, fred::error::Error> {
        let replay = self.replay_key(request);
        self.eval(
            RELEASE,
            &[
                &self.name,
                &self.queue,
                &self.deadlines,
                &self.channels,
                &replay,
                &self.alive,
            ],
            &[
                "0",
                &keep_ms.to_string(),
                field,
                "PUBLISH",
                &REPLAY_TTL_MS.to_string(),
                sent_before,
                "0",
                replay_last,
            ],
        )
        .await
    }

    async fn force_release(&self) -> Result<Value, fred::error::Error> {
        self.eval(
            FORCE_RELEASE,
            &[
                &self.name,
                &self.queue,
                &self.deadlines,
                &self.channels,
                &self.alive,
            ],
            &["0", "PUBLISH"],
        )
        .await
    }

    async fn leave(&self, field: &str) -> Result<Value, fred::error::Error> {
        self.eval(
            LEAVE,
            &[
                &self.name,
                &self.queue,
                &self.deadlines,
                &self.channels,
                &self.alive,
            ],
            &[field, "PUBLISH", "0", &self.wait_q.to_string()],
        )
        .await
    }

    // ---- state, read with raw commands

    /// The server's clock, in epoch ms.
    fn now(&self) -> i64 {
        common::raw_time_ms(&self.server)
    }

    fn queued(&self) -> Vec<String> {
        common::raw_lrange(&self.server, &self.queue)
    }

    fn deadline(&self, field: &str) -> Option<i64> {
        common::raw_zscore(&self.server, &self.deadlines, field)
    }

    fn deadline_count(&self) -> i64 {
        common::resp_int(&self.cmd(&["ZCARD", &self.deadlines]))
    }

    fn hash(&self) -> Vec<(String, String)> {
        self.hash_of(&self.name)
    }

    fn replay_key(&self, request: &str) -> String {
        format!("redisson_unlock_latch:{{{}}}:{request}", self.name)
    }

    fn replayed(&self, request: &str) -> Resp {
        resp(&self.cmd(&["GET", &self.replay_key(request)]))
    }

    fn channel(&self, field: &str) -> String {
        common::fair_waiter_channel(&self.name, field)
    }

    /// `lock()` by `field`, checking that it took the lock.
    async fn take(&self, field: &str) {
        let reply = self.wait(field).await.unwrap();
        assert_eq!(reply, Value::Null, "{field} did not take the lock");
    }

    /// `lock()` by `field`, checking that it was told to wait (it queues).
    async fn queue_up(&self, field: &str) {
        let reply = self.wait(field).await.unwrap();
        assert!(int(reply) > 0, "{field} was not told to wait");
    }

    /// Puts `field` at the tail of the queue by hand, with a live deadline (now + W).
    fn enqueue_live(&self, field: &str) {
        self.enqueue_raw(field, Some(self.now() + WAITER_TIMEOUT_MS));
    }

    /// Checks the lock's `holds` and who is queued, head first.
    fn assert_state(&self, holds: &[(&str, &str)], queued: &[&str]) {
        assert_eq!(self.hash(), pairs(holds), "the lock's holds");
        assert_eq!(self.queued(), fields(queued), "the queue");
    }

    /// X takes the lock and `waiters` queue behind it, in that order.
    async fn held_with_queue(&self, waiters: &[&str]) {
        self.take(X).await;
        for waiter in waiters {
            self.queue_up(waiter).await;
        }
    }

    /// Checks that the next message on `sub` (within 5 s) is `0` on `field`'s channel: it was
    /// woken.
    async fn assert_woken(&self, sub: &mut RawSubscriber, field: &str) {
        assert_eq!(
            sub.next_message(Duration::from_secs(5)).await,
            Some((self.channel(field), "0".to_owned()))
        );
    }

    /// Checks that nothing (more) reached `sub`, listening on `field`'s channel among others.
    async fn assert_quiet(&self, sub: &mut RawSubscriber, field: &str) {
        sub.assert_quiet(&self.server, &self.channel(field)).await;
    }

    /// Checks that release `request`'s replay key records `value`, written just now for
    /// [`REPLAY_TTL_MS`].
    fn assert_replay_key(&self, request: &str, value: &str) {
        assert_eq!(self.replayed(request), Resp::Bulk(Some(value.into())));
        assert_within(
            self.pttl(&self.replay_key(request)),
            REPLAY_TTL_MS - 1_000,
            REPLAY_TTL_MS,
            "replay key TTL",
        );
    }

    /// A raw subscriber on the wake-up channels of `fields`.
    async fn subscribe(&self, fields: &[&str]) -> RawSubscriber {
        let channels: Vec<String> = fields.iter().map(|f| self.channel(f)).collect();
        let channels: Vec<&str> = channels.iter().map(String::as_str).collect();
        RawSubscriber::subscribe(&self.server, &channels).await
    }

    /// Puts `field` at the tail of the queue by hand, with `deadline` (none: a list entry alone).
    fn enqueue_raw(&self, field: &str, deadline: Option<i64>) {
        self.cmd(&["RPUSH", &self.queue, field]);
        if let Some(deadline) = deadline {
            self.cmd(&["ZADD", &self.deadlines, &deadline.to_string(), field]);
        }
    }

    /// Gives the lock to `field` by hand: `holds` holds, the usual lease.
    fn hold_raw(&self, field: &str, holds: u32) {
        self.plant(
            &self.name,
            &[(field, &holds.to_string())],
            &LEASE_MS.to_string(),
        );
    }
}

fn fields(items: &[&str]) -> Vec<String> {
    items.iter().map(|f| f.to_string()).collect()
}

/// Runs `script` between two reads of the server clock: its reply and the clock's bounds.
async fn timed<F, Fut>(fx: &Fixture, script: F) -> (Result<Value, fred::error::Error>, i64, i64)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Value, fred::error::Error>>,
{
    let before = fx.now();
    let reply = script().await;
    (reply, before, fx.now())
}

// ---------------------------------------------------------------- acquire

#[tokio::test]
async fn acquire_of_a_free_lock_takes_it_in_both_modes_and_queues_nothing() {
    for mode in ["wait", "try"] {
        let fx = Fixture::new(&format!("fair-acquire-free-{mode}")).await;
        assert_eq!(fx.acquire(LEASE_MS, A, mode).await.unwrap(), Value::Null);
        assert_eq!(fx.hash(), pairs(&[(A, "1")]));
        assert_within(fx.pttl(&fx.name), LEASE_MS - 1_000, LEASE_MS, "lease");
        assert!(!fx.exists(&fx.queue) && !fx.exists(&fx.deadlines));
    }
}

#[tokio::test]
async fn a_busy_wait_queues_at_the_tail_with_a_deadline_on_the_server_clock() {
    let fx = Fixture::new("fair-acquire-enqueue").await;
    fx.take(X).await;

    // The head's hint is the lock's PTTL.
    let (reply, before, after) = timed(&fx, || fx.wait(A)).await;
    let lock_ttl = fx.pttl(&fx.name);
    assert_within(int(reply.unwrap()), lock_ttl, LEASE_MS, "head's hint");
    assert_eq!(fx.queued(), fields(&[A]));
    assert_within(
        fx.deadline(A).unwrap(),
        before + WAITER_TIMEOUT_MS,
        after + WAITER_TIMEOUT_MS,
        "A's deadline",
    );

    // Behind A, the hint is A's deadline - now, whatever the lock's TTL.
    fx.cmd(&["PEXPIRE", &fx.name, "60000"]);
    let (reply, before, after) = timed(&fx, || fx.wait(B)).await;
    let a = fx.deadline(A).unwrap();
    assert_within(int(reply.unwrap()), a - after, a - before, "B's hint");
    assert_eq!(fx.queued(), fields(&[A, B]));
    assert_within(
        fx.deadline(B).unwrap(),
        before + WAITER_TIMEOUT_MS,
        after + WAITER_TIMEOUT_MS,
        "B's deadline",
    );
    assert_eq!(fx.hash(), pairs(&[(X, "1")]), "the holder is untouched");
}

#[tokio::test]
async fn heartbeats_keep_a_deadline_within_w_of_now_and_never_accumulate() {
    let fx = Fixture::new("fair-acquire-heartbeat").await;
    fx.take(X).await;
    let mut last = 0;
    for _ in 0..50 {
        let (reply, before, after) = timed(&fx, || fx.wait(A)).await;
        assert!(int(reply.unwrap()) > 0);
        let deadline = fx.deadline(A).unwrap();
        // Redisson #1104/#2099: deadlines drifted into the future as waiters polled.
        assert_within(
            deadline,
            before + WAITER_TIMEOUT_MS,
            after + WAITER_TIMEOUT_MS,
            "deadline after a heartbeat",
        );
        assert!(deadline >= last, "a heartbeat lowered the deadline");
        last = deadline;
    }
    assert_eq!(fx.queued(), fields(&[A]), "heartbeats never queue twice");

    // A deadline further out (a patient Redisson waiter's) is kept, never lowered.
    let far = fx.now() + 10 * WAITER_TIMEOUT_MS;
    fx.cmd(&["ZADD", &fx.deadlines, &far.to_string(), A]);
    fx.queue_up(A).await;
    assert_eq!(fx.deadline(A), Some(far));
}

#[tokio::test]
async fn a_queued_waiter_whose_list_entry_is_gone_queues_again() {
    let fx = Fixture::new("fair-acquire-zset-only").await;
    fx.hold_raw(X, 1);
    let deadline = fx.now() + 3_000;
    fx.cmd(&["ZADD", &fx.deadlines, &deadline.to_string(), A]);
    let (reply, before, after) = timed(&fx, || fx.wait(A)).await;
    assert!(int(reply.unwrap()) > 0);
    assert_eq!(fx.queued(), fields(&[A]));
    assert_within(
        fx.deadline(A).unwrap(),
        before + WAITER_TIMEOUT_MS,
        after + WAITER_TIMEOUT_MS,
        "deadline",
    );

    // On a free lock, the same debris does not stop it from taking the lock.
    fx.cmd(&["DEL", &fx.name, &fx.queue]);
    fx.take(A).await;
    assert_eq!(fx.hash(), pairs(&[(A, "1")]));
    assert_eq!(fx.deadline(A), None);
}

#[tokio::test]
async fn a_busy_lock_without_ttl_gives_its_head_minus_one() {
    let fx = Fixture::new("fair-acquire-no-ttl").await;
    fx.cmd(&["HSET", &fx.name, X, "1"]);
    assert_eq!(int(fx.wait(A).await.unwrap()), -1);
    assert_eq!(int(fx.attempt(A).await.unwrap()), -1);
    // Behind A: A's deadline, not -1.
    fx.queue_up(B).await;
    assert_eq!(fx.pttl(&fx.name), -1, "no TTL was added");
}

#[tokio::test]
async fn try_mode_never_queues_and_leaves_an_entry_as_it_is() {
    let fx = Fixture::new("fair-acquire-try").await;
    fx.take(X).await;

    // Busy, nobody queued: the lock's PTTL, and no trace.
    let hint = int(fx.attempt(A).await.unwrap());
    assert_within(hint, 1, LEASE_MS, "hint");
    assert!(!fx.exists(&fx.queue) && !fx.exists(&fx.deadlines));

    // A queued waiter's try neither heartbeats nor moves it.
    fx.queue_up(A).await;
    let short = fx.now() + 3_000;
    fx.cmd(&["ZADD", &fx.deadlines, &short.to_string(), A]);
    assert!(int(fx.attempt(A).await.unwrap()) > 0);
    assert_eq!(fx.deadline(A), Some(short));
    assert_eq!(fx.queued(), fields(&[A]));

    // Behind A: A's deadline, and still no entry.
    let (reply, before, after) = timed(&fx, || fx.attempt(B)).await;
    assert_within(int(reply.unwrap()), short - after, short - before, "hint");
    assert_eq!(fx.queued(), fields(&[A]));
    assert_eq!(fx.deadline(B), None);

    // Free, but A heads the queue: not taken, told to wait for A's deadline (never 0).
    fx.cmd(&["DEL", &fx.name]);
    let (reply, before, after) = timed(&fx, || fx.attempt(B)).await;
    let hint = int(reply.unwrap());
    assert!(hint > 0, "a try behind a live head got {hint}");
    assert_within(hint, short - after, short - before, "hint");
    assert!(!fx.exists(&fx.name));
}

#[tokio::test]
async fn reentry_counts_and_never_shortens_the_ttl() {
    let fx = Fixture::new("fair-acquire-reentry").await;
    fx.take(A).await;
    // Others queue meanwhile: a re-entry does not wait behind them.
    fx.queue_up(B).await;

    assert_eq!(fx.acquire(1_000, A, "wait").await.unwrap(), Value::Null);
    assert_eq!(fx.hash(), pairs(&[(A, "2")]));
    assert_within(
        fx.pttl(&fx.name),
        LEASE_MS - 1_000,
        LEASE_MS,
        "not shortened",
    );

    fx.cmd(&["PEXPIRE", &fx.name, "1000"]);
    assert_eq!(fx.acquire(20_000, A, "try").await.unwrap(), Value::Null);
    assert_eq!(fx.hash(), pairs(&[(A, "3")]));
    assert_within(fx.pttl(&fx.name), 19_000, 20_000, "raised to the lease");
    assert_eq!(fx.queued(), fields(&[B]));
    assert_eq!(fx.deadline(A), None);
}

#[tokio::test]
async fn acquire_on_a_string_key_is_wrongtype_and_queues_nothing() {
    let fx = Fixture::new("fair-acquire-wrongtype").await;
    fx.cmd(&["SET", &fx.name, "user-data"]);
    for mode in ["wait", "try"] {
        assert_wrongtype(fx.acquire(LEASE_MS, A, mode).await);
    }
    assert_eq!(fx.get(&fx.name).as_deref(), Some("user-data"));
    assert_eq!(fx.pttl(&fx.name), -1);
    assert!(!fx.exists(&fx.queue) && !fx.exists(&fx.deadlines));

    // A queue key of another type is an error too.
    fx.cmd(&["DEL", &fx.name]);
    fx.assert_wrongtype_on_string(&fx.queue, || fx.wait(A))
        .await;
    assert!(!fx.exists(&fx.name), "nothing was taken");
}

// ---------------------------------------------------------------- FIFO and wake-ups

#[tokio::test]
async fn waiters_are_served_in_fifo_order_and_only_the_head_is_woken() {
    let fx = Fixture::new("fair-fifo").await;
    let mut sub = fx.subscribe(&[A, B, C]).await;
    fx.held_with_queue(&[A, B, C]).await;
    assert_eq!(fx.queued(), fields(&[A, B, C]));

    // X releases: the lock is free, and only A, the head, hears of it.
    assert_eq!(int(fx.release(X, "x1").await.unwrap()), 2);
    assert!(!fx.exists(&fx.name));
    fx.assert_woken(&mut sub, A).await;
    fx.assert_quiet(&mut sub, B).await;

    // B runs first: A heads, so B waits (for A's deadline, not 0), in both modes.
    for mode in ["wait", "try"] {
        let (reply, before, after) = timed(&fx, || fx.acquire(LEASE_MS, B, mode)).await;
        let a = fx.deadline(A).unwrap();
        assert_within(int(reply.unwrap()), a - after, a - before, mode);
        assert!(!fx.exists(&fx.name), "B took the lock ahead of A");
    }
    assert_eq!(fx.queued(), fields(&[A, B, C]));

    // A takes it and leaves the queue; B heads it now.
    fx.take(A).await;
    fx.assert_state(&[(A, "1")], &[B, C]);
    assert_eq!(fx.deadline(A), None);
    let hint = int(fx.wait(B).await.unwrap());
    assert_within(hint, fx.pttl(&fx.name), LEASE_MS, "B's hint is A's PTTL");
    let (reply, before, after) = timed(&fx, || fx.wait(C)).await;
    let b = fx.deadline(B).unwrap();
    assert_within(int(reply.unwrap()), b - after, b - before, "C's hint");

    // A releases: B is woken, then B takes it, then C.
    assert_eq!(int(fx.release(A, "a1").await.unwrap()), 2);
    fx.assert_woken(&mut sub, B).await;
    assert!(int(fx.wait(C).await.unwrap()) > 0, "C is behind B");
    fx.take(B).await;
    assert_eq!(int(fx.release(B, "b1").await.unwrap()), 2);
    fx.assert_woken(&mut sub, C).await;
    fx.take(C).await;
    assert!(fx.queued().is_empty());
    assert_eq!(fx.deadline_count(), 0);
    fx.assert_quiet(&mut sub, A).await;
}

// ---------------------------------------------------------------- dead heads

#[tokio::test]
async fn every_script_drops_a_dead_head() {
    let fx = Fixture::new("fair-dead-head-any").await;
    let scripts = [
        "acquire wait",
        "acquire try",
        "release",
        "force_release",
        "leave",
    ];
    for script in scripts {
        fx.cmd(&["DEL", &fx.name, &fx.queue, &fx.deadlines]);
        fx.hold_raw(X, 1);
        let now = fx.now();
        fx.enqueue_raw(DEAD, Some(now - 1_000));
        fx.enqueue_raw(A, Some(now + WAITER_TIMEOUT_MS));
        let reply = match script {
            "acquire wait" => fx.wait(B).await,
            "acquire try" => fx.attempt(B).await,
            "release" => fx.release(B, "not-held").await,
            "force_release" => fx.force_release().await,
            _ => fx.leave(B).await,
        };
        reply.unwrap_or_else(|e| panic!("{script}: {e:?}"));
        assert_eq!(fx.queued()[0], A, "{script} left the dead head");
        assert_eq!(fx.deadline(DEAD), None, "{script} left its deadline");
    }
}

#[tokio::test]
async fn dead_heads_in_a_row_all_go_in_one_run() {
    let fx = Fixture::new("fair-dead-heads").await;
    // Past deadlines, and a list entry with no deadline at all (debris): all dead.
    let now = fx.now();
    fx.enqueue_raw(DEAD, Some(now - 5_000));
    fx.enqueue_raw("debris:no-deadline", None);
    fx.enqueue_raw(C, Some(now - 1));
    fx.enqueue_raw(A, Some(now + WAITER_TIMEOUT_MS));

    // The lock is free: B's one try drops all three dead heads and stops at A, who is alive.
    let (reply, before, after) = timed(&fx, || fx.attempt(B)).await;
    let a = fx.deadline(A).unwrap();
    assert_within(int(reply.unwrap()), a - after, a - before, "B's hint");
    assert_eq!(fx.queued(), fields(&[A]));
    assert_eq!(fx.deadline_count(), 1);

    // A queue of dead waiters alone never keeps a free lock from its next taker.
    fx.cmd(&["DEL", &fx.queue, &fx.deadlines]);
    fx.enqueue_raw("debris:no-deadline", None);
    fx.enqueue_raw(DEAD, Some(now - 5_000));
    assert_eq!(fx.attempt(B).await.unwrap(), Value::Null);
    assert_eq!(fx.hash(), pairs(&[(B, "1")]));
    assert!(!fx.exists(&fx.queue) && !fx.exists(&fx.deadlines));
}

#[tokio::test]
async fn a_waiter_behind_a_live_head_of_a_free_lock_is_told_the_heads_deadline_never_zero() {
    let fx = Fixture::new("fair-hint-free").await;
    fx.held_with_queue(&[A]).await;
    // X's lease ran out: free, with a queue (Redisson answers 0 here, and its waiters spin).
    fx.cmd(&["DEL", &fx.name]);
    for _ in 0..3 {
        let (reply, before, after) = timed(&fx, || fx.wait(B)).await;
        let a = fx.deadline(A).unwrap();
        let hint = int(reply.unwrap());
        assert!(hint >= 1, "hint {hint}");
        assert_within(hint, a - after, a - before, "B's hint");
    }
    assert!(!fx.exists(&fx.name));
    assert_eq!(fx.queued(), fields(&[A, B]));

    // Once A's deadline passes (A is dead), B's run drops A and takes the lock.
    fx.cmd(&["ZADD", &fx.deadlines, &(fx.now() - 1).to_string(), A]);
    fx.take(B).await;
    assert_eq!(fx.hash(), pairs(&[(B, "1")]));
    assert!(fx.queued().is_empty());
}

#[tokio::test]
async fn a_head_past_its_deadline_keeps_its_place_when_it_runs_first() {
    let fx = Fixture::new("fair-dead-head-self").await;
    fx.hold_raw(X, 1);
    let now = fx.now();
    fx.enqueue_raw(A, Some(now - 1_000));
    fx.enqueue_raw(B, Some(now + WAITER_TIMEOUT_MS));

    // A was late (a pause, a shift by a Redisson peer), but it is its own run: A is alive.
    let (reply, before, after) = timed(&fx, || fx.wait(A)).await;
    assert_within(int(reply.unwrap()), 1, LEASE_MS, "A's hint is the PTTL");
    assert_eq!(fx.queued(), fields(&[A, B]));
    assert_within(
        fx.deadline(A).unwrap(),
        before + WAITER_TIMEOUT_MS,
        after + WAITER_TIMEOUT_MS,
        "A's deadline",
    );

    // Had anyone else run first, A would have been dropped, and would queue again at the tail.
    fx.cmd(&["ZADD", &fx.deadlines, &(fx.now() - 1).to_string(), A]);
    fx.queue_up(B).await;
    assert_eq!(fx.queued(), fields(&[B]));
    fx.queue_up(A).await;
    assert_eq!(fx.queued(), fields(&[B, A]));
}

// ---------------------------------------------------------------- release

#[tokio::test]
async fn a_partial_release_keeps_the_lock_and_replays_zero() {
    let fx = Fixture::new("fair-release-partial").await;
    let mut sub = fx.subscribe(&[A]).await;
    fx.hold_raw(X, 2);
    fx.cmd(&["PEXPIRE", &fx.name, "1000"]);
    fx.queue_up(A).await;

    assert_eq!(int(fx.release(X, "r1").await.unwrap()), 0);
    assert_eq!(fx.hash(), pairs(&[(X, "1")]));
    assert_within(fx.pttl(&fx.name), LEASE_MS - 1_000, LEASE_MS, "keep TTL");
    fx.assert_replay_key("r1", "0");

    // Its retry replays 0 and counts nothing.
    assert_eq!(int(fx.retry_release(X, "r1").await.unwrap()), 0);
    fx.assert_state(&[(X, "1")], &[A]);
    fx.assert_quiet(&mut sub, A).await;
}

#[tokio::test]
async fn the_last_release_frees_wakes_the_head_and_replays_one() {
    let fx = Fixture::new("fair-release-last").await;
    let mut sub = fx.subscribe(&[A, B]).await;
    fx.held_with_queue(&[A, B]).await;

    assert_eq!(int(fx.release(X, "r1").await.unwrap()), 2);
    assert!(!fx.exists(&fx.name));
    fx.assert_replay_key("r1", "1");
    fx.assert_woken(&mut sub, A).await;
    assert_eq!(fx.queued(), fields(&[A, B]), "the head stays queued");

    // X takes the lock again before its retry arrives (say A died): the retry replays 1 and
    // leaves the new hold and the queue alone, and wakes nobody.
    fx.cmd(&["DEL", &fx.queue, &fx.deadlines]);
    fx.take(X).await;
    fx.enqueue_live(B);
    assert_eq!(int(fx.retry_release(X, "r1").await.unwrap()), 1);
    fx.assert_state(&[(X, "1")], &[B]);
    fx.assert_quiet(&mut sub, B).await;
}

/// A release that keeps nothing (TTL 0) frees the lock whatever count Redis has (a hold the
/// client lost locally and the owner re-entered), and wakes the head.
#[tokio::test]
async fn a_release_keeping_nothing_frees_the_lock_whatever_its_count_and_wakes_the_head() {
    let fx = Fixture::new("fair-release-keep-nothing").await;
    let mut sub = fx.subscribe(&[A, B]).await;
    fx.held_with_queue(&[A, B]).await;
    fx.take(X).await;
    assert_eq!(fx.hash(), pairs(&[(X, "2")]));

    assert_eq!(int(fx.release_keeping_nothing(X, "r1").await.unwrap()), 2);
    assert!(!fx.exists(&fx.name), "a hold was left behind");
    assert!(!fx.exists(&fx.replay_key("r1")), "wrote a replay key");
    fx.assert_woken(&mut sub, A).await;
    assert_eq!(fx.queued(), fields(&[A, B]), "the head stays queued");
    fx.assert_quiet(&mut sub, B).await;
}

#[tokio::test]
async fn a_last_release_not_asked_to_record_writes_no_replay_key_and_its_retry_changes_nothing() {
    let fx = Fixture::new("fair-release-unrecorded").await;
    let mut sub = fx.subscribe(&[A]).await;
    fx.held_with_queue(&[A]).await;

    assert_eq!(int(fx.release_unrecorded(X, "r1", "0").await.unwrap()), 2);
    assert!(!fx.exists(&fx.name));
    assert!(!fx.exists(&fx.replay_key("r1")), "no replay key");
    fx.assert_woken(&mut sub, A).await;
    // A takes the lock before X's retry arrives: the retry finds X's field gone (nil, "freed by
    // the first send") and leaves A's hold and the queue alone, waking nobody.
    fx.take(A).await;
    fx.enqueue_live(B);
    let mut sub_b = fx.subscribe(&[B]).await;
    assert_eq!(
        fx.release_unrecorded(X, "r1", "1").await.unwrap(),
        Value::Null
    );
    fx.assert_state(&[(A, "1")], &[B]);
    fx.assert_quiet(&mut sub_b, B).await;
}

#[tokio::test]
async fn an_uncontended_pair_writes_the_lock_alone() {
    let fx = Fixture::new("fair-uncontended").await;
    let calls = |command| common::raw_command_calls(&fx.server, command);
    fx.take(X).await;
    assert_eq!(int(fx.release_unrecorded(X, "r1", "0").await.unwrap()), 1);
    assert!(!fx.exists(&fx.name));
    // Nobody queued, so nothing to take out of the queue or its deadlines, and no deadline to
    // lower; a last release not asked to record writes no replay key. Nor is a deadline read,
    // or the clock, and the acquire reads no queue: one EXISTS says none of the three is there
    // (the release reads the queue's head, to wake it).
    for command in [
        "zrem", "zrange", "zadd", "zincrby", "lpop", "set", "zscore", "time",
    ] {
        assert_eq!(calls(command), 0, "{command} calls");
    }
    assert_eq!((calls("hset"), calls("del")), (1, 1));
    assert_eq!(calls("lindex"), 1, "lindex calls");
}

#[tokio::test]
async fn the_last_release_without_a_queue_publishes_nothing() {
    let fx = Fixture::new("fair-release-alone").await;
    let mut sub = fx.subscribe(&[A]).await;
    fx.take(X).await;
    assert_eq!(int(fx.release(X, "r1").await.unwrap()), 1);
    assert!(!fx.exists(&fx.name));
    assert_eq!(fx.replayed("r1"), Resp::Bulk(Some("1".into())));
    fx.assert_quiet(&mut sub, A).await;
}

#[tokio::test]
async fn the_last_release_wakes_the_first_live_waiter_past_dead_ones() {
    let fx = Fixture::new("fair-release-dead-head").await;
    let mut sub = fx.subscribe(&[DEAD, A]).await;
    fx.hold_raw(X, 1);
    let now = fx.now();
    fx.enqueue_raw(DEAD, Some(now - 1_000));
    fx.enqueue_raw(A, Some(now + WAITER_TIMEOUT_MS));
    assert_eq!(int(fx.release(X, "r1").await.unwrap()), 2);
    fx.assert_woken(&mut sub, A).await;
    assert_eq!(fx.queued(), fields(&[A]));
    fx.assert_quiet(&mut sub, DEAD).await;
}

#[tokio::test]
async fn a_release_by_a_non_holder_returns_nil_and_writes_nothing() {
    let fx = Fixture::new("fair-release-not-held").await;
    let mut sub = fx.subscribe(&[A]).await;

    // No lock, no queue.
    assert_eq!(fx.release(X, "r1").await.unwrap(), Value::Null);
    assert_eq!(fx.retry_release(X, "r2").await.unwrap(), Value::Null);
    assert!(!fx.exists(&fx.name));
    assert!(!fx.exists(&fx.replay_key("r1")) && !fx.exists(&fx.replay_key("r2")));

    // Someone else's lock, with a queue: nothing changes, nobody is woken.
    fx.hold_raw(B, 2);
    fx.queue_up(A).await;
    assert_eq!(fx.release(X, "r3").await.unwrap(), Value::Null);
    assert_eq!(fx.hash(), pairs(&[(B, "2")]));
    assert_within(fx.pttl(&fx.name), 1, LEASE_MS, "lease untouched");
    assert!(!fx.exists(&fx.replay_key("r3")));
    assert_eq!(fx.queued(), fields(&[A]));
    fx.assert_quiet(&mut sub, A).await;
}

#[tokio::test]
async fn a_release_of_an_expired_lock_wakes_the_head() {
    let fx = Fixture::new("fair-release-expired").await;
    let mut sub = fx.subscribe(&[A, B]).await;
    fx.held_with_queue(&[A, B]).await;
    fx.cmd(&["PEXPIRE", &fx.name, "20"]);
    assert!(
        common::eventually(Duration::from_secs(5), || async { !fx.exists(&fx.name) }).await,
        "the lease ran out"
    );

    // The late release is not X's to make (nil), but the head may take the lock now.
    assert_eq!(fx.release(X, "r1").await.unwrap(), Value::Null);
    fx.assert_woken(&mut sub, A).await;
    assert!(!fx.exists(&fx.replay_key("r1")));
    assert_eq!(fx.queued(), fields(&[A, B]));
    // The same from a retry whose first send never arrived.
    assert_eq!(fx.retry_release(X, "r2").await.unwrap(), Value::Null);
    fx.assert_woken(&mut sub, A).await;
    fx.assert_quiet(&mut sub, B).await;
}

#[tokio::test]
async fn release_on_a_string_key_is_wrongtype_and_leaves_it() {
    let fx = Fixture::new("fair-release-wrongtype").await;
    let mut sub = fx.subscribe(&[A]).await;
    fx.enqueue_live(A);
    fx.assert_wrongtype_on_string(&fx.name, || fx.release(X, "r1"))
        .await;
    assert_eq!(fx.pttl(&fx.name), -1);
    assert!(
        !fx.exists(&fx.replay_key("r1")),
        "no replay key after an error"
    );
    assert_eq!(fx.queued(), fields(&[A]));
    fx.assert_quiet(&mut sub, A).await;
}

// ---------------------------------------------------------------- force_release

#[tokio::test]
async fn force_release_deletes_any_holders_lock_and_wakes_the_head() {
    let fx = Fixture::new("fair-force").await;
    let mut sub = fx.subscribe(&[A, B]).await;
    fx.hold_raw(X, 2);
    fx.cmd(&["HSET", &fx.name, C, "1"]);
    fx.queue_up(A).await;
    fx.queue_up(B).await;

    assert_eq!(int(fx.force_release().await.unwrap()), 1);
    assert!(!fx.exists(&fx.name));
    fx.assert_woken(&mut sub, A).await;
    assert_eq!(
        fx.queued(),
        fields(&[A, B]),
        "the waiters keep their places"
    );
    fx.assert_quiet(&mut sub, B).await;

    // Nothing to delete: 0, and nobody is woken.
    assert_eq!(int(fx.force_release().await.unwrap()), 0);
    fx.assert_quiet(&mut sub, A).await;

    // A lock without a queue: deleted, no message.
    fx.cmd(&["DEL", &fx.queue, &fx.deadlines]);
    fx.hold_raw(X, 1);
    assert_eq!(int(fx.force_release().await.unwrap()), 1);
    assert!(!fx.exists(&fx.name));
    fx.assert_quiet(&mut sub, A).await;
}

#[tokio::test]
async fn force_release_on_a_string_is_wrongtype_and_keeps_it() {
    let fx = Fixture::new("fair-force-wrongtype").await;
    let mut sub = fx.subscribe(&[A]).await;
    fx.enqueue_live(A);
    fx.assert_wrongtype_on_string(&fx.name, || fx.force_release())
        .await;
    assert_eq!(fx.queued(), fields(&[A]));
    fx.assert_quiet(&mut sub, A).await;
}

// ---------------------------------------------------------------- leave

#[tokio::test]
async fn leave_when_not_queued_returns_zero_and_changes_nothing() {
    let fx = Fixture::new("fair-leave-none").await;
    let mut sub = fx.subscribe(&[A]).await;
    assert_eq!(int(fx.leave(B).await.unwrap()), 0);
    fx.enqueue_live(A);
    assert_eq!(int(fx.leave(B).await.unwrap()), 0);
    assert_eq!(fx.queued(), fields(&[A]));
    assert!(!fx.exists(&fx.name));
    fx.assert_quiet(&mut sub, A).await;
}

#[tokio::test]
async fn a_head_leaving_a_free_lock_wakes_the_next_head() {
    let fx = Fixture::new("fair-leave-head-free").await;
    let mut sub = fx.subscribe(&[A, B, C]).await;
    fx.held_with_queue(&[A, B, C]).await;
    let b_deadline = fx.deadline(B);
    assert_eq!(int(fx.release(X, "x1").await.unwrap()), 2);
    fx.assert_woken(&mut sub, A).await;

    // A gives up before it took the lock: B is head now, and may take it at once.
    assert_eq!(int(fx.leave(A).await.unwrap()), 1);
    assert_eq!(fx.queued(), fields(&[B, C]));
    assert_eq!(fx.deadline(A), None);
    assert_eq!(fx.deadline(B), b_deadline, "deadlines are not shifted");
    fx.assert_woken(&mut sub, B).await;
    fx.assert_quiet(&mut sub, C).await;
    fx.take(B).await;
}

#[tokio::test]
async fn leave_wakes_the_next_head_only_when_the_head_leaves() {
    let fx = Fixture::new("fair-leave-quiet").await;
    let mut sub = fx.subscribe(&[A, B, C]).await;
    fx.held_with_queue(&[A, B, C]).await;

    // The head leaves a held lock: the next head is woken to learn the lease that is left (it
    // was told, behind the head, only when the head could be dead: asleep, it would wait for
    // its renewal after the lock lapsed, up to a third of the waiter timeout). Nobody else is.
    assert_eq!(int(fx.leave(A).await.unwrap()), 1);
    assert_eq!(fx.queued(), fields(&[B, C]));
    fx.assert_woken(&mut sub, B).await;
    fx.assert_quiet(&mut sub, C).await;

    // A waiter behind the head leaves a free lock: the head was told already.
    fx.cmd(&["DEL", &fx.name]);
    assert_eq!(int(fx.leave(C).await.unwrap()), 1);
    assert_eq!(fx.queued(), fields(&[B]));
    assert_eq!(fx.deadline(C), None);
    fx.assert_quiet(&mut sub, B).await;

    // An entry in the deadlines alone still counts as queued.
    fx.cmd(&["ZADD", &fx.deadlines, &(fx.now() + 5_000).to_string(), C]);
    assert_eq!(int(fx.leave(C).await.unwrap()), 1);
    assert_eq!(fx.deadline(C), None);
}

#[tokio::test]
async fn a_head_leaving_wakes_the_first_live_waiter_past_dead_ones() {
    let fx = Fixture::new("fair-leave-dead-next").await;
    let mut sub = fx.subscribe(&[A, DEAD, B]).await;
    let now = fx.now();
    fx.enqueue_raw(A, Some(now + WAITER_TIMEOUT_MS));
    fx.enqueue_raw(DEAD, Some(now - 1_000));
    fx.enqueue_raw(B, Some(now + WAITER_TIMEOUT_MS));
    assert_eq!(int(fx.leave(A).await.unwrap()), 1);
    assert_eq!(fx.queued(), fields(&[B]));
    assert_eq!(fx.deadline_count(), 1);
    fx.assert_woken(&mut sub, B).await;
    fx.assert_quiet(&mut sub, DEAD).await;
}

// ---------------------------------------------------------------- Redisson compatibility

// The Java side runs the Redisson peer's scripts (`common/redisson_fair.rs`), with its clock in
// step with the server's.

/// Two threads of one Java client.
const JAVA_1: &str = "5b6c2a1e-9d3f-4e7a-8c1b-2f0e4d6a8b9c:1";
const JAVA_2: &str = "5b6c2a1e-9d3f-4e7a-8c1b-2f0e4d6a8b9c:2";

impl Fixture {
    /// The Java side's `lock()` attempt, its clock in step with the server's.
    async fn java_acquire(&self, field: &str, wait_ms: i64) -> Value {
        self.eval(
            &redisson_fair::acquire_script(),
            &[&self.name, &self.queue, &self.deadlines],
            &[
                &LEASE_MS.to_string(),
                field,
                &wait_ms.to_string(),
                &self.now().to_string(),
            ],
        )
        .await
        .expect("Redisson's acquire")
    }

    /// The Java side's `unlock()`.
    async fn java_unlock(&self, field: &str, request: &str) -> Value {
        let latch = self.replay_key(request);
        self.eval(
            &redisson_fair::unlock_script(),
            &[
                &self.name,
                &self.queue,
                &self.deadlines,
                &self.channels,
                &latch,
            ],
            &[
                "0",
                &LEASE_MS.to_string(),
                field,
                &self.now().to_string(),
                "PUBLISH",
                &REPLAY_TTL_MS.to_string(),
            ],
        )
        .await
        .expect("Redisson's unlock")
    }
}

#[tokio::test]
async fn redisson_and_relock_waiters_share_one_fifo_queue_and_wake_each_other() {
    // The Java side's wait below relock's W: a Java taker's shift leaves relock waiters alive.
    const JAVA_WAIT_MS: i64 = 4_000;
    let fx = Fixture::new("fair-redisson-mixed").await;
    let mut sub = fx.subscribe(&[JAVA_1, A, JAVA_2]).await;

    // relock's X holds; Java 1, relock A and Java 2 queue up, in that order.
    fx.take(X).await;
    assert!(int(fx.java_acquire(JAVA_1, JAVA_WAIT_MS).await) > 0);
    let (reply, before, after) = timed(&fx, || fx.wait(A)).await;
    let java_1 = fx.deadline(JAVA_1).unwrap();
    assert_within(
        int(reply.unwrap()),
        java_1 - after,
        java_1 - before,
        "A's hint",
    );
    assert!(int(fx.java_acquire(JAVA_2, JAVA_WAIT_MS).await) > 0);
    assert_eq!(fx.queued(), fields(&[JAVA_1, A, JAVA_2]));
    // Redisson chains its deadline onto the tail's: A's deadline + its wait.
    assert_eq!(
        fx.deadline(JAVA_2).unwrap(),
        fx.deadline(A).unwrap() + JAVA_WAIT_MS
    );

    // relock's release wakes the Java head on its own channel.
    assert_eq!(int(fx.release(X, "x1").await.unwrap()), 2);
    fx.assert_woken(&mut sub, JAVA_1).await;
    fx.assert_quiet(&mut sub, A).await;
    // Neither A nor Java 2 jumps ahead of Java 1 (Redisson answers 0 here; relock does not).
    fx.queue_up(A).await;
    assert_eq!(int(fx.java_acquire(JAVA_2, JAVA_WAIT_MS).await), 0);
    assert!(!fx.exists(&fx.name));

    // Java 1 takes it, shifting the others' deadlines down by its wait.
    let a_before = fx.deadline(A).unwrap();
    assert_eq!(fx.java_acquire(JAVA_1, JAVA_WAIT_MS).await, Value::Null);
    fx.assert_state(&[(JAVA_1, "1")], &[A, JAVA_2]);
    assert_eq!(fx.deadline(A).unwrap(), a_before - JAVA_WAIT_MS);
    // A's heartbeat puts its deadline back to now + W; A is excluded meanwhile.
    let (reply, before, after) = timed(&fx, || fx.wait(A)).await;
    assert_within(
        int(reply.unwrap()),
        1,
        LEASE_MS,
        "A waits for Java 1's lease",
    );
    assert_within(
        fx.deadline(A).unwrap(),
        before + WAITER_TIMEOUT_MS,
        after + WAITER_TIMEOUT_MS,
        "A's deadline",
    );
    assert!(int(fx.attempt(B).await.unwrap()) > 0);
    assert_eq!(fx.release(A, "a0").await.unwrap(), Value::Null);
    assert_eq!(fx.hash(), pairs(&[(JAVA_1, "1")]));

    // Java 1's unlock wakes relock's A on A's own channel; Java 2 cannot jump ahead.
    assert_eq!(int(fx.java_unlock(JAVA_1, "j1").await), 1);
    fx.assert_woken(&mut sub, A).await;
    assert_eq!(int(fx.java_acquire(JAVA_2, JAVA_WAIT_MS).await), 0);
    assert!(!fx.exists(&fx.name));
    fx.take(A).await;
    assert_eq!(fx.queued(), fields(&[JAVA_2]));

    // A holds: Java 2 is refused; A's release wakes Java 2, which takes it.
    assert!(int(fx.java_acquire(JAVA_2, JAVA_WAIT_MS).await) > 0);
    assert_eq!(fx.hash(), pairs(&[(A, "1")]));
    assert_eq!(int(fx.release(A, "a1").await.unwrap()), 2);
    fx.assert_woken(&mut sub, JAVA_2).await;
    assert_eq!(fx.java_acquire(JAVA_2, JAVA_WAIT_MS).await, Value::Null);
    assert!(fx.queued().is_empty());
    assert_eq!(fx.deadline_count(), 0);

    // Java 2 holds: relock is refused; Java 2's unlock frees it for relock.
    assert!(int(fx.attempt(A).await.unwrap()) > 0);
    assert!(fx.queued().is_empty(), "a try left no entry");
    assert_eq!(int(fx.java_unlock(JAVA_2, "j2").await), 1);
    assert_eq!(fx.attempt(A).await.unwrap(), Value::Null);
    assert_eq!(fx.hash(), pairs(&[(A, "1")]));
    fx.assert_quiet(&mut sub, JAVA_1).await;
}

/// Redisson's default per-waiter wait (`fairLockWaitTimeout`), which relock's scripts are given.
const REDISSON_WAIT_MS: i64 = 300_000;

impl Fixture {
    fn alive_at(&self, field: &str) -> Option<i64> {
        common::raw_zscore(&self.server, &self.alive, field)
    }
}

#[tokio::test]
async fn relock_deadlines_follow_redissons_arithmetic_so_redisson_takers_drop_nobody() {
    let fx = Fixture::with_wait("fair-redisson-arithmetic", REDISSON_WAIT_MS).await;
    let q = REDISSON_WAIT_MS;

    // relock's X holds; Java 1, relock's A, Java 2 and relock's B queue in turn: each deadline
    // is the one before's + Q, whoever wrote it.
    fx.take(X).await;
    assert!(int(fx.java_acquire(JAVA_1, q).await) > 0);
    let (reply, before, after) = timed(&fx, || fx.wait(A)).await;
    assert!(int(reply.unwrap()) > 0);
    assert!(int(fx.java_acquire(JAVA_2, q).await) > 0);
    fx.queue_up(B).await;
    assert_eq!(fx.queued(), fields(&[JAVA_1, A, JAVA_2, B]));
    let java_1 = fx.deadline(JAVA_1).unwrap();
    assert_eq!(fx.deadline(A), Some(java_1 + q));
    assert_eq!(fx.deadline(JAVA_2), Some(java_1 + 2 * q));
    assert_eq!(fx.deadline(B), Some(java_1 + 3 * q));
    // relock's own liveness record: A's last run + W, beside the deadline Redisson reads.
    assert_within(
        fx.alive_at(A).unwrap(),
        before + WAITER_TIMEOUT_MS,
        after + WAITER_TIMEOUT_MS,
        "A's liveness",
    );
    assert!(fx.alive_at(JAVA_1).is_none() && fx.alive_at(JAVA_2).is_none());

    // X's release, Java 1 takes it: everyone left moves up one place, nobody into the past.
    assert_eq!(int(fx.release(X, "x1").await.unwrap()), 1);
    assert_eq!(fx.java_acquire(JAVA_1, q).await, Value::Null);
    assert_eq!(fx.deadline(A), Some(java_1));
    assert_eq!(fx.deadline(JAVA_2), Some(java_1 + q));
    assert_eq!(fx.deadline(B), Some(java_1 + 2 * q));
    // A's heartbeat renews its liveness and leaves a deadline so far out as it is.
    fx.queue_up(A).await;
    assert_eq!(fx.deadline(A), Some(java_1));

    // Java 1's unlock (its purge drops nobody) wakes A, which takes it: the rest move up again.
    let mut sub = fx.subscribe(&[A]).await;
    assert_eq!(int(fx.java_unlock(JAVA_1, "j1").await), 1);
    fx.assert_woken(&mut sub, A).await;
    assert_eq!(fx.queued(), fields(&[A, JAVA_2, B]));
    fx.take(A).await;
    assert_eq!(fx.queued(), fields(&[JAVA_2, B]));
    assert_eq!(fx.deadline(JAVA_2), Some(java_1));
    assert_eq!(fx.deadline(B), Some(java_1 + q));
    assert!(
        fx.alive_at(A).is_none(),
        "a taker leaves no liveness record"
    );

    // A's release; Java 2 takes it; then B.
    assert_eq!(int(fx.release(A, "a1").await.unwrap()), 1);
    assert_eq!(fx.java_acquire(JAVA_2, q).await, Value::Null);
    assert_eq!(fx.deadline(B), Some(java_1));
    assert_eq!(fx.queued(), fields(&[B]));
    assert_eq!(int(fx.java_unlock(JAVA_2, "j2").await), 1);
    fx.take(B).await;
    assert!(fx.queued().is_empty());
    assert!(!fx.exists(&fx.deadlines) && !fx.exists(&fx.alive));
}

#[tokio::test]
async fn a_relock_waiter_dies_by_its_liveness_record_and_a_leaver_moves_the_rest_up() {
    let fx = Fixture::with_wait("fair-redisson-liveness", REDISSON_WAIT_MS).await;
    let q = REDISSON_WAIT_MS;
    fx.held_with_queue(&[A, B, C]).await;
    let a = fx.deadline(A).unwrap();
    assert_eq!(fx.deadline(B), Some(a + q));
    assert_eq!(fx.deadline(C), Some(a + 2 * q));
    // The record outlives the latest relock deadline, so no lapsed entry vanishes early.
    assert!(fx.pttl(&fx.alive) > a + 2 * q - fx.now());

    // B gives up: C moves up into B's place.
    assert_eq!(int(fx.leave(B).await.unwrap()), 1);
    assert_eq!(fx.queued(), fields(&[A, C]));
    assert_eq!(fx.deadline(C), Some(a + q));
    assert!(fx.alive_at(B).is_none());

    // A stopped running W ago: its Redisson deadline is far out, but relock drops it, and C,
    // now first, is told the lock's TTL.
    let past = fx.now() - 1;
    fx.cmd(&["ZADD", &fx.alive, &past.to_string(), A]);
    let hint = int(fx.wait(C).await.unwrap());
    assert_within(hint, 1, LEASE_MS, "C's hint");
    assert_eq!(fx.queued(), fields(&[C]));
    assert!(fx.deadline(A).is_none() && fx.alive_at(A).is_none());
    assert_eq!(fx.deadline(C), Some(a + q), "a purge moves nobody");

    // A live waiter whose deadline is about to pass (a holder kept the lock for Q) keeps it at
    // least max(Q, W) past its run.
    let soon = fx.now() + 5;
    fx.cmd(&["ZADD", &fx.deadlines, &soon.to_string(), C]);
    let (reply, before, after) = timed(&fx, || fx.wait(C)).await;
    assert!(int(reply.unwrap()) > 0);
    assert_within(
        fx.deadline(C).unwrap(),
        before + q,
        after + q,
        "C's deadline",
    );
    assert_eq!(fx.queued(), fields(&[C]));
}
