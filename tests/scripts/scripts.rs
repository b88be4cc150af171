//! Every branch of every Lua script in `lua/lock/` (`abandon.lua` included), and of `lua/inspect.lua` and
//! `lua/unclaim.lua`, run directly with `EVAL` on a real server (each as the client composes it,
//! from `relock::testing::scripts`): the
//! reply, the Redis state it leaves (hash fields, TTLs, replay keys) and whether it published on
//! the lock's channel.

use super::fixture::{self, assert_within, ints, pairs, Lua};
use super::fixture::{CLAIM_WINDOW_MS, LATCH_TTL_MS, ME, OTHER};
use crate::common;

use std::time::Duration;

use common::{resp, resp_int, RawSubscriber, Resp};
use fred::types::Value;
use relock::testing::scripts::{
    INSPECT, LOCK_ABANDON as ABANDON, LOCK_ACQUIRE as ACQUIRE, LOCK_FORCE_RELEASE as FORCE_RELEASE,
    LOCK_RELEASE as RELEASE, LOCK_RENEW as RENEW, UNCLAIM,
};

/// How a release request is sent.
#[derive(Clone, Copy)]
enum Sent {
    /// Its first send, as relock sends it: its replay key is not read.
    First,
    /// Sent again (its reply was lost): its replay key is read first.
    Retry,
    /// A first send that asks for a replay key even on the last hold, as relock sends a release
    /// that starts while an acquire by the same owner is in flight.
    FirstReplayingLast,
}
use Sent::{First, FirstReplayingLast, Retry};

fixture::lua_fixture! {
    /// A server, a raw fred connection and one lock's keys.
    struct Fixture for lua {
        channel: String = common::lock_channel(&lua.name),
    }
}

impl Fixture {
    fn hash(&self) -> Vec<(String, String)> {
        self.hash_of(&self.name)
    }

    fn latch(&self, id: &str) -> String {
        format!("redisson_unlock_latch:{{{}}}:{id}", self.name)
    }

    async fn subscribe(&self) -> RawSubscriber {
        self.subscribe_to(&[&self.channel]).await
    }

    /// ME takes the lock and releases it (the request `latch`, sent as `sent`) while a
    /// subscriber listens: checks that the release freed the lock, and returns the subscriber.
    async fn take_and_free(&self, sent: Sent, latch: &str) -> RawSubscriber {
        let sub = self.subscribe().await;
        self.take(10_000, ME).await;
        let reply = self.release(sent, latch, 20_000, ME).await.unwrap();
        // 1 + the subscribed connections the wake-up reached: the one raw subscriber here.
        assert_eq!(reply.as_i64(), Some(2), "{reply:?}");
        assert!(!self.exists(&self.name), "the lock hash is gone");
        sub
    }

    /// Sends the release `latch` again: checks that it replays `replayed` and leaves ME's one
    /// hold as it is, publishing nothing.
    async fn assert_retry_replays(&self, sub: &mut RawSubscriber, latch: &str, replayed: i64) {
        let reply = self.release(Retry, latch, 20_000, ME).await.unwrap();
        assert_eq!(reply.as_i64(), Some(replayed));
        assert_eq!(self.hash(), pairs(&[(ME, "1")]));
        self.assert_quiet(sub).await;
    }

    /// `holder` takes the lock for 30 s, and `claimant`, finding it busy, claims its next
    /// hand-off (priority 1): checks the claim lasts the holder's lease.
    async fn claimed_behind(&self, holder: &str, claimant: &str) {
        self.take(30_000, holder).await;
        self.acquire_claiming(30_000, claimant, 1).await.unwrap();
        assert!(self.pttl(&self.claim) > 29_000);
    }

    /// ME acquires with `lease_ms`: checks that it took the lock, holds it `holds` times now,
    /// and that the lease was set to `lease_ms`.
    async fn take_and_hold(&self, lease_ms: u64, holds: &str) {
        self.take(lease_ms, ME).await;
        let lease = lease_ms as i64;
        self.assert_held(&[(ME, holds)], lease - 1_000, lease, "pttl");
    }

    /// Checks the lock's `holds`, and its PTTL within [`low`, `high`] (`what` names it).
    fn assert_held(&self, holds: &[(&str, &str)], low: i64, high: i64, what: &str) {
        assert_eq!(self.hash(), pairs(holds));
        assert_within(self.pttl(&self.name), low, high, what);
    }

    /// Waits (at most 2 s) for the claim to lapse; fails if it does not.
    async fn claim_lapses(&self) {
        let gone = common::eventually(Duration::from_secs(2), || async {
            !self.exists(&self.claim)
        });
        assert!(gone.await, "the claim did not lapse");
    }

    /// Checks that nothing (more) was published on the lock's channel.
    async fn assert_quiet(&self, sub: &mut RawSubscriber) {
        sub.assert_quiet(&self.server, &self.channel).await;
    }

    /// Acquires for `field`, checking that it took the lock.
    async fn take(&self, lease_ms: u64, field: &str) {
        let reply = self.acquire(lease_ms, field).await.unwrap();
        assert_eq!(reply, Value::Null, "{field} did not take the lock");
    }

    /// Checks that the next message on `sub` (within 5 s) is the lock channel's `0`: the lock
    /// was freed.
    async fn assert_freed(&self, sub: &mut RawSubscriber, what: &str) {
        assert_eq!(
            sub.next_message(Duration::from_secs(5)).await,
            Some((self.channel.clone(), "0".to_owned())),
            "{what}"
        );
    }

    /// Checks that the replay key `latch` records `value`, written just now for
    /// [`LATCH_TTL_MS`].
    fn assert_replay_key(&self, latch: &str, value: &str) {
        assert_eq!(
            self.get(latch).as_deref(),
            Some(value),
            "replay key {latch}"
        );
        let latch_pttl = self.pttl(latch);
        assert!(
            latch_pttl > LATCH_TTL_MS - 1_000 && latch_pttl <= LATCH_TTL_MS,
            "replay key PX: {latch_pttl}"
        );
    }

    async fn acquire(&self, lease_ms: u64, field: &str) -> Result<Value, fred::error::Error> {
        self.acquire_claiming(lease_ms, field, 0).await
    }

    /// An acquire that, finding the lock busy, claims its next hand-off with `priority` (0: no
    /// claim).
    async fn acquire_claiming(
        &self,
        lease_ms: u64,
        field: &str,
        priority: u32,
    ) -> Result<Value, fred::error::Error> {
        let lease = lease_ms.to_string();
        let priority = priority.to_string();
        let window = CLAIM_WINDOW_MS.to_string();
        self.eval(
            ACQUIRE,
            &[&self.name, &self.claim],
            &[&lease, field, &priority, &window],
        )
        .await
    }

    /// The shutdown release of every hold of `field`, with the fair queue's key.
    async fn abandon(&self, field: &str) -> Result<Value, fred::error::Error> {
        let queue = common::fair_queue_key(&self.name);
        let window = CLAIM_WINDOW_MS.to_string();
        self.eval(
            ABANDON,
            &[&self.name, &self.channel, &self.claim, &queue],
            &["0", field, "PUBLISH", &window],
        )
        .await
    }

    async fn unclaim(&self, field: &str) -> Result<Value, fred::error::Error> {
        self.eval(UNCLAIM, &[&self.claim], &[field]).await
    }

    fn claimant(&self) -> Resp {
        resp(&self.cmd(&["GET", &self.claim]))
    }

    /// A release request sent as `send` says (the replay key `latch`).
    async fn release(
        &self,
        send: Sent,
        latch: &str,
        lease_ms: u64,
        field: &str,
    ) -> Result<Value, fred::error::Error> {
        let (sent_before, replay_last) = match send {
            First => ("0", "0"),
            Retry => ("1", "0"),
            FirstReplayingLast => ("0", "1"),
        };
        let lease = lease_ms.to_string();
        let latch_ttl = LATCH_TTL_MS.to_string();
        let window = CLAIM_WINDOW_MS.to_string();
        self.eval(
            RELEASE,
            &[&self.name, &self.channel, latch, &self.claim],
            &[
                "0",
                &lease,
                field,
                "PUBLISH",
                &latch_ttl,
                &window,
                sent_before,
                replay_last,
            ],
        )
        .await
    }

    async fn force_release(&self) -> Result<Value, fred::error::Error> {
        let window = CLAIM_WINDOW_MS.to_string();
        self.eval(
            FORCE_RELEASE,
            &[&self.name, &self.channel, &self.claim],
            &["0", "PUBLISH", &window],
        )
        .await
    }

    async fn inspect(&self, field: &str) -> Result<Value, fred::error::Error> {
        self.eval(INSPECT, &[&self.name], &[field]).await
    }
}

// ---------------------------------------------------------------- acquire

#[tokio::test]
async fn acquire_free_lock_takes_first_hold_with_lease() {
    let fx = Fixture::new("scripts-acquire-free").await;
    fx.take_and_hold(10_000, "1").await;
}

#[tokio::test]
async fn acquire_reentry_counts_and_resets_lease() {
    let fx = Fixture::new("scripts-acquire-reentry").await;
    fx.take(10_000, ME).await;
    // Let the lease "run down" to 1 s, then re-enter with a 20 s lease.
    fx.cmd(&["PEXPIRE", &fx.name, "1000"]);
    assert!(fx.pttl(&fx.name) <= 1_000);
    fx.take_and_hold(20_000, "2").await;
}

#[tokio::test]
async fn acquire_busy_returns_pttl_and_changes_nothing() {
    let fx = Fixture::new("scripts-acquire-busy").await;
    fx.take(10_000, OTHER).await;
    let reply = fx.acquire(60_000, ME).await.unwrap();
    let pttl = reply.as_i64().expect("an integer PTTL");
    assert!(pttl > 0 && pttl <= 10_000, "busy reply {pttl}");
    assert_eq!(fx.hash(), pairs(&[(OTHER, "1")]));
    // The busy attempt did not extend the holder's lease to its own 60 s.
    let after = fx.pttl(&fx.name);
    assert!(
        after > 0 && after <= pttl,
        "pttl after {after}, reply {pttl}"
    );
}

#[tokio::test]
async fn acquire_busy_lock_without_ttl_returns_minus_one() {
    let fx = Fixture::new("scripts-acquire-no-ttl").await;
    fx.cmd(&["HSET", &fx.name, OTHER, "3"]);
    let reply = fx.acquire(10_000, ME).await.unwrap();
    assert_eq!(reply.as_i64(), Some(-1), "reply {reply:?}");
    assert_eq!(fx.hash(), pairs(&[(OTHER, "3")]));
    assert_eq!(fx.pttl(&fx.name), -1, "no TTL was added");
}

#[tokio::test]
async fn acquire_on_a_string_key_is_wrongtype_and_leaves_it() {
    let fx = Fixture::new("scripts-acquire-wrongtype").await;
    fx.assert_wrongtype_on_string(&fx.name, || fx.acquire(10_000, ME))
        .await;
    assert_eq!(fx.pttl(&fx.name), -1);
}

// ---------------------------------------------------------------- hand-off claims

/// A claim's value: its priority and holder field.
fn claim_of(priority: u32, field: &str) -> Resp {
    Resp::Bulk(Some(format!("{priority}:{field}")))
}

#[tokio::test]
async fn a_busy_acquire_that_claims_promises_the_next_hand_off_to_its_field() {
    let fx = Fixture::new("scripts-claim-set").await;
    fx.take(10_000, OTHER).await;
    // Without asking to claim: no claim.
    fx.acquire(10_000, ME).await.unwrap();
    assert!(!fx.exists(&fx.claim));

    let reply = fx.acquire_claiming(10_000, ME, 1).await.unwrap();
    let ttl = reply.as_i64().expect("the holder's PTTL");
    assert!(ttl > 0 && ttl <= 10_000, "busy reply {ttl}");
    assert_eq!(fx.claimant(), claim_of(1, ME));
    // The claim lasts the holder's lease plus the window.
    let claim_ttl = fx.pttl(&fx.claim);
    assert!(
        claim_ttl > ttl && claim_ttl <= ttl + CLAIM_WINDOW_MS,
        "claim PTTL {claim_ttl}, lock PTTL {ttl}"
    );

    // A waiter with the same priority does not take it over; the claimant's own renews it.
    let third = "77777777-7777-7777-7777-777777777777:task-3";
    fx.acquire_claiming(10_000, third, 1).await.unwrap();
    assert_eq!(fx.claimant(), claim_of(1, ME));
    fx.cmd(&["PEXPIRE", &fx.claim, "100"]);
    fx.acquire_claiming(10_000, ME, 2).await.unwrap();
    assert_eq!(fx.claimant(), claim_of(2, ME));
    assert!(
        fx.pttl(&fx.claim) > 1_000,
        "the claimant's claim was renewed"
    );

    // One that lost more races does.
    fx.acquire_claiming(10_000, third, 3).await.unwrap();
    assert_eq!(fx.claimant(), claim_of(3, third));
    assert_eq!(fx.hash(), pairs(&[(OTHER, "1")]), "the holder is untouched");
}

#[tokio::test]
async fn a_claimed_free_lock_goes_only_to_its_claimant() {
    let fx = Fixture::new("scripts-claim-honoured").await;
    fx.cmd(&["SET", &fx.claim, &format!("1:{ME}"), "PX", "5000"]);

    // Free but promised to ME: another field is told to wait out the claim, and nothing changes.
    let reply = fx.acquire(10_000, OTHER).await.unwrap();
    let wait = reply.as_i64().expect("the claim's PTTL");
    assert!(wait > 0 && wait <= 5_000, "refused with {wait}");
    assert!(!fx.exists(&fx.name), "the refused acquire took nothing");
    assert_eq!(fx.claimant(), claim_of(1, ME));

    // The claimant takes it, and the claim is used up.
    fx.take(10_000, ME).await;
    assert_eq!(fx.hash(), pairs(&[(ME, "1")]));
    assert!(!fx.exists(&fx.claim), "the claim is spent");

    // A claim that lapsed promises nothing.
    fx.cmd(&["DEL", &fx.name]);
    fx.cmd(&["SET", &fx.claim, &format!("1:{ME}"), "PX", "1"]);
    fx.claim_lapses().await;
    fx.take(10_000, OTHER).await;
}

#[tokio::test]
async fn a_claim_on_a_lock_freed_without_a_release_is_cut_to_the_window() {
    let fx = Fixture::new("scripts-claim-stale").await;
    // ME claimed the next hand-off of a lock with a 30 s lease. Then the lock went away without
    // a release to cut the claim (a DEL here; an eviction or another library's unlock alike),
    // and ME is gone: its claim would hold the free lock back for the rest of that lease.
    fx.claimed_behind(OTHER, ME).await;
    fx.cmd(&["DEL", &fx.name]);

    // The next acquire leaves the claimant the window from now on, and no more.
    let wait = fx.acquire(30_000, OTHER).await.unwrap();
    let wait = wait.as_i64().expect("refused for the claim");
    assert!(
        wait > 0 && wait <= CLAIM_WINDOW_MS,
        "told to wait {wait} ms"
    );
    let left = fx.pttl(&fx.claim);
    assert!(left > 0 && left <= CLAIM_WINDOW_MS, "claim PTTL {left}");
    assert_eq!(fx.claimant(), claim_of(1, ME), "the claim is still ME's");
    assert!(!fx.exists(&fx.name), "the refused acquire took nothing");
    fx.claim_lapses().await;
    fx.take(30_000, OTHER).await;
}

#[tokio::test]
async fn a_claim_relock_did_not_write_is_ignored() {
    let fx = Fixture::new("scripts-claim-foreign").await;
    // Not "<n>:<field>", or without an expiry: neither blocks the lock.
    for (value, px) in [
        ("someone's data", Some("5000")),
        (&*format!("1:{OTHER}"), None),
    ] {
        fx.cmd(&["DEL", &fx.name]);
        match px {
            Some(px) => fx.cmd(&["SET", &fx.claim, value, "PX", px]),
            None => fx.cmd(&["SET", &fx.claim, value]),
        };
        assert_eq!(
            fx.acquire(10_000, ME).await.unwrap(),
            Value::Null,
            "{value}"
        );
        assert_eq!(fx.hash(), pairs(&[(ME, "1")]));
    }
}

#[tokio::test]
async fn the_last_release_and_force_unlock_cut_a_claim_to_the_window() {
    let fx = Fixture::new("scripts-claim-window").await;
    fx.claimed_behind(OTHER, ME).await;

    // A release that leaves holds does not touch the claim.
    fx.take(30_000, OTHER).await;
    fx.release(First, &fx.latch("r1"), 30_000, OTHER)
        .await
        .unwrap();
    assert!(fx.pttl(&fx.claim) > 29_000);

    // The last release cuts it to the window: a claimant that died delays others no longer.
    fx.release(First, &fx.latch("r2"), 30_000, OTHER)
        .await
        .unwrap();
    let left = fx.pttl(&fx.claim);
    assert!(left > 0 && left <= CLAIM_WINDOW_MS, "claim PTTL {left}");

    // So does force-unlock.
    fx.cmd(&["DEL", &fx.claim]);
    fx.claimed_behind(ME, OTHER).await;
    assert_eq!(fx.force_release().await.unwrap().as_i64(), Some(1));
    let left = fx.pttl(&fx.claim);
    assert!(left > 0 && left <= CLAIM_WINDOW_MS, "claim PTTL {left}");

    // A claim already shorter than the window keeps its own end.
    fx.cmd(&["SET", &fx.claim, &format!("1:{OTHER}"), "PX", "50"]);
    fx.cmd(&["HSET", &fx.name, ME, "1"]);
    fx.release(First, &fx.latch("r3"), 30_000, ME)
        .await
        .unwrap();
    assert!(fx.pttl(&fx.claim) <= 50);
}

#[tokio::test]
async fn unclaim_withdraws_only_its_own_claim() {
    let fx = Fixture::new("scripts-unclaim").await;
    assert_eq!(fx.unclaim(ME).await.unwrap().as_i64(), Some(0), "no claim");
    fx.cmd(&["SET", &fx.claim, &format!("4:{OTHER}"), "PX", "5000"]);
    assert_eq!(fx.unclaim(ME).await.unwrap().as_i64(), Some(0));
    assert_eq!(fx.claimant(), claim_of(4, OTHER));
    assert_eq!(fx.unclaim(OTHER).await.unwrap().as_i64(), Some(1));
    assert!(!fx.exists(&fx.claim));
}

// ---------------------------------------------------------------- release

#[tokio::test]
async fn release_with_replay_key_replays_its_value_and_changes_nothing() {
    let fx = Fixture::new("scripts-release-replay").await;
    let mut sub = fx.subscribe().await;
    fx.plant(&fx.name, &[(ME, "3")], "10000");
    let latch_one = fx.latch("one");
    let latch_zero = fx.latch("zero");
    fx.cmd(&["SET", &latch_one, "1", "PX", "5000"]);
    fx.cmd(&["SET", &latch_zero, "0", "PX", "5000"]);

    let reply = fx.release(Retry, &latch_one, 30_000, ME).await.unwrap();
    assert_eq!(reply.as_i64(), Some(1), "replayed 1: {reply:?}");
    let reply = fx.release(Retry, &latch_zero, 30_000, ME).await.unwrap();
    assert_eq!(reply.as_i64(), Some(0), "replayed 0: {reply:?}");

    // Nothing applied: the count, the lease (not reset to 30 s) and the replay keys are as set.
    fx.assert_held(&[(ME, "3")], 1, 10_000, "pttl");
    assert_eq!(fx.get(&latch_one).as_deref(), Some("1"));
    let latch_pttl = fx.pttl(&latch_one);
    assert!(latch_pttl > 0 && latch_pttl <= 5_000, "{latch_pttl}");
    fx.assert_quiet(&mut sub).await;
}

#[tokio::test]
async fn release_on_first_send_does_not_read_a_replay_key() {
    let fx = Fixture::new("scripts-release-first-send").await;
    fx.plant(&fx.name, &[(ME, "3")], "10000");
    // A first send's request id is fresh, so relock never sends one whose replay key exists;
    // planted here, it shows the script did not read it.
    let latch = fx.latch("fresh");
    fx.cmd(&["SET", &latch, "1", "PX", "5000"]);

    let reply = fx.release(First, &latch, 30_000, ME).await.unwrap();
    assert_eq!(reply.as_i64(), Some(0), "applied, holds remain: {reply:?}");
    assert_eq!(fx.hash(), pairs(&[(ME, "2")]));
    assert_eq!(
        fx.get(&latch).as_deref(),
        Some("0"),
        "the replay key now records this release"
    );
}

#[tokio::test]
async fn release_by_a_non_holder_returns_nil_and_writes_nothing() {
    let fx = Fixture::new("scripts-release-not-holder").await;
    let mut sub = fx.subscribe().await;

    // No lock at all.
    let latch = fx.latch("a");
    assert_eq!(
        fx.release(First, &latch, 30_000, ME).await.unwrap(),
        Value::Null
    );
    assert!(!fx.exists(&fx.name), "the lock was not created");
    assert!(!fx.exists(&latch), "no replay key for a no-op");

    // Someone else's lock.
    fx.plant(&fx.name, &[(OTHER, "2")], "10000");
    let latch = fx.latch("b");
    assert_eq!(
        fx.release(First, &latch, 30_000, ME).await.unwrap(),
        Value::Null
    );
    fx.assert_held(&[(OTHER, "2")], 1, 10_000, "lease untouched");
    assert!(!fx.exists(&latch), "no replay key for a no-op");
    fx.assert_quiet(&mut sub).await;
}

#[tokio::test]
async fn release_with_holds_remaining_returns_zero_and_renews_lease() {
    let fx = Fixture::new("scripts-release-still-held").await;
    let mut sub = fx.subscribe().await;
    fx.take(10_000, ME).await;
    fx.take(10_000, ME).await;
    fx.cmd(&["PEXPIRE", &fx.name, "1000"]);

    let latch = fx.latch("req-1");
    let reply = fx.release(First, &latch, 20_000, ME).await.unwrap();
    assert_eq!(reply.as_i64(), Some(0), "{reply:?}");
    fx.assert_held(&[(ME, "1")], 19_000, 20_000, "lease set again");
    fx.assert_replay_key(&latch, "0");
    fx.assert_quiet(&mut sub).await;

    // A retry of the same request counts once: replayed, the hold is still there.
    fx.assert_retry_replays(&mut sub, &latch, 0).await;
}

#[tokio::test]
async fn release_of_last_hold_deletes_publishes_and_writes_no_replay_key() {
    // Nobody listening: the reply is 1 (freed, the wake-up reached no one).
    let quiet = Fixture::new("scripts-release-last-quiet").await;
    quiet.take(10_000, ME).await;
    let reply = quiet
        .release(First, &quiet.latch("req-q"), 20_000, ME)
        .await
        .unwrap();
    assert_eq!(reply.as_i64(), Some(1), "{reply:?}");

    let fx = Fixture::new("scripts-release-last").await;
    let latch = fx.latch("req-2");
    let mut sub = fx.take_and_free(First, &latch).await;
    fx.assert_freed(&mut sub, "the release published 0 on the lock channel")
        .await;
    // The last release writes no replay key: the client holds back the owner's own acquires
    // until it has the reply, so a retry that finds the field gone knows its first send freed it.
    assert!(!fx.exists(&latch), "the last release wrote a replay key");

    // A retry finds the field gone: nil, nothing published, the lock not re-created.
    let reply = fx.release(Retry, &latch, 20_000, ME).await.unwrap();
    assert_eq!(reply, Value::Null);
    assert!(!fx.exists(&fx.name));
    assert!(!fx.exists(&latch));
    fx.assert_quiet(&mut sub).await;
}

/// A release sent with a TTL of 0 (the client keeps no hold of the owner's) frees the lock
/// whatever count Redis has: a count the client does not know of is a hold it lost locally
/// while Redis still had it, which the owner re-entered. It deletes, publishes and cuts a claim
/// as any last release does.
#[tokio::test]
async fn release_keeping_nothing_frees_the_lock_whatever_its_count() {
    let fx = Fixture::new("scripts-release-keep-nothing").await;
    fx.claimed_behind(ME, OTHER).await;
    fx.take(30_000, ME).await;
    fx.assert_held(&[(ME, "2")], 29_000, 30_000, "two holds");
    let mut sub = fx.subscribe().await;

    let latch = fx.latch("req-0");
    let reply = fx.release(First, &latch, 0, ME).await.unwrap();
    assert_eq!(reply.as_i64(), Some(2), "{reply:?}");
    assert!(!fx.exists(&fx.name), "a hold was left behind");
    fx.assert_freed(&mut sub, "0 on the lock channel").await;
    let left = fx.pttl(&fx.claim);
    assert!(left > 0 && left <= CLAIM_WINDOW_MS, "claim PTTL {left}");
    assert!(!fx.exists(&latch), "the last release wrote a replay key");

    // Not held by this field: nil, nothing written, as with any TTL.
    fx.take(30_000, OTHER).await;
    let reply = fx.release(First, &fx.latch("req-1"), 0, ME).await.unwrap();
    assert_eq!(reply, Value::Null);
    fx.assert_held(&[(OTHER, "1")], 29_000, 30_000, "the other's hold");
    fx.assert_quiet(&mut sub).await;
}

#[tokio::test]
async fn release_of_last_hold_asked_to_replay_writes_one_and_replays_it() {
    let fx = Fixture::new("scripts-release-last-replay").await;
    let latch = fx.latch("req-4");
    let mut sub = fx.take_and_free(FirstReplayingLast, &latch).await;
    fx.assert_freed(&mut sub, "0 on the lock channel").await;
    fx.assert_replay_key(&latch, "1");

    // The owner took the lock again before the retry arrived: the retry replays "freed" and
    // leaves the new hold alone.
    fx.take(10_000, ME).await;
    fx.assert_retry_replays(&mut sub, &latch, 1).await;
}

#[tokio::test]
async fn release_on_a_string_key_is_wrongtype_and_leaves_it() {
    let fx = Fixture::new("scripts-release-wrongtype").await;
    let mut sub = fx.subscribe().await;
    let latch = fx.latch("req-3");
    fx.assert_wrongtype_on_string(&fx.name, || fx.release(First, &latch, 20_000, ME))
        .await;
    assert_eq!(fx.pttl(&fx.name), -1);
    assert!(!fx.exists(&latch), "no replay key after an error");
    fx.assert_quiet(&mut sub).await;
}

// ---------------------------------------------------------------- renew

#[tokio::test]
async fn renew_extends_only_held_locks_and_creates_none() {
    let fx = Fixture::new("scripts-renew").await;
    // All keys share the name's hash tag, as relock requires of one renewal batch.
    let tag = &fx.name;
    let held = format!("{{{tag}}}:held");
    let held_no_ttl = format!("{{{tag}}}:held-no-ttl");
    let foreign = format!("{{{tag}}}:foreign");
    let missing = format!("{{{tag}}}:missing");
    let string = format!("{{{tag}}}:string");
    fx.plant(&held, &[(ME, "1")], "1000");
    fx.cmd(&["HSET", &held_no_ttl, ME, "2"]);
    fx.plant(&foreign, &[(OTHER, "1")], "1000");
    fx.cmd(&["SET", &string, "user-data"]);

    let keys = [
        held.as_str(),
        foreign.as_str(),
        missing.as_str(),
        string.as_str(),
        held_no_ttl.as_str(),
    ];
    let reply = fx
        .eval(RENEW, &keys, &["30000", ME, ME, ME, ME, ME])
        .await
        .unwrap();
    assert_eq!(ints(reply), vec![1, 0, 0, 0, 1]);

    for key in [&held, &held_no_ttl] {
        let pttl = fx.pttl(key);
        assert!((29_000..=30_000).contains(&pttl), "{key} renewed: {pttl}");
    }
    let pttl = fx.pttl(&foreign);
    assert!(pttl > 0 && pttl <= 1_000, "foreign lock untouched: {pttl}");
    assert_eq!(fx.hash_of(&foreign), pairs(&[(OTHER, "1")]));
    assert!(!fx.exists(&missing), "a missing lock is not created");
    assert_eq!(fx.get(&string).as_deref(), Some("user-data"));
    assert_eq!(fx.pttl(&string), -1, "the string got no TTL");
    // Counts are untouched by a renewal.
    assert_eq!(fx.hash_of(&held), pairs(&[(ME, "1")]));
    assert_eq!(fx.hash_of(&held_no_ttl), pairs(&[(ME, "2")]));
}

// ---------------------------------------------------------------- force_release

#[tokio::test]
async fn force_release_without_lock_returns_zero_silently() {
    let fx = Fixture::new("scripts-force-none").await;
    let mut sub = fx.subscribe().await;
    let reply = fx.force_release().await.unwrap();
    assert_eq!(reply.as_i64(), Some(0), "{reply:?}");
    assert!(!fx.exists(&fx.name));
    assert_eq!(resp_int(&fx.cmd(&["DBSIZE"])), 0);
    fx.assert_quiet(&mut sub).await;
}

#[tokio::test]
async fn force_release_deletes_any_holders_lock_and_publishes() {
    let fx = Fixture::new("scripts-force-hash").await;
    let mut sub = fx.subscribe().await;
    fx.plant(&fx.name, &[(OTHER, "2"), (ME, "1")], "10000");
    let reply = fx.force_release().await.unwrap();
    assert_eq!(reply.as_i64(), Some(1), "{reply:?}");
    assert!(!fx.exists(&fx.name));
    fx.assert_freed(&mut sub, "0 on the lock channel").await;
    fx.assert_quiet(&mut sub).await;
}

#[tokio::test]
async fn force_release_on_a_string_is_wrongtype_and_keeps_it() {
    let fx = Fixture::new("scripts-force-wrongtype").await;
    let mut sub = fx.subscribe().await;
    fx.assert_wrongtype_on_string(&fx.name, || fx.force_release())
        .await;
    fx.assert_quiet(&mut sub).await;
}

// ---------------------------------------------------------------- inspect

#[tokio::test]
async fn inspect_reports_unlocked() {
    let fx = Fixture::new("scripts-inspect-none").await;
    assert_eq!(ints(fx.inspect(ME).await.unwrap()), vec![0, -2, 0]);
    assert!(!fx.exists(&fx.name));
}

#[tokio::test]
async fn inspect_reports_own_holds_and_lease() {
    let fx = Fixture::new("scripts-inspect-mine").await;
    for _ in 0..3 {
        fx.take(10_000, ME).await;
    }
    let state = ints(fx.inspect(ME).await.unwrap());
    assert_eq!(state[0], 1);
    assert!(state[1] > 9_000 && state[1] <= 10_000, "pttl {}", state[1]);
    assert_eq!(state[2], 3);
    assert_eq!(fx.hash(), pairs(&[(ME, "3")]), "inspect changed nothing");
}

#[tokio::test]
async fn inspect_reports_foreign_lock_with_zero_holds() {
    let fx = Fixture::new("scripts-inspect-foreign").await;
    fx.take(10_000, OTHER).await;
    let state = ints(fx.inspect(ME).await.unwrap());
    assert_eq!(state[0], 1);
    assert!(state[1] > 9_000 && state[1] <= 10_000, "pttl {}", state[1]);
    assert_eq!(state[2], 0);

    // Without a TTL the lease reads -1.
    fx.cmd(&["PERSIST", &fx.name]);
    assert_eq!(ints(fx.inspect(OTHER).await.unwrap()), vec![1, -1, 1]);
}

#[tokio::test]
async fn inspect_on_a_string_is_wrongtype() {
    let fx = Fixture::new("scripts-inspect-wrongtype").await;
    fx.assert_wrongtype_on_string(&fx.name, || fx.inspect(ME))
        .await;
}

/// The shutdown release of every hold of one field (`lua/lock/abandon.lua`): 0 when it holds
/// nothing, 1 when other holders remain (nothing published), 2 when it frees the lock: the
/// claim is cut to the window, `0` goes to the lock's channel and to the fair queue's first
/// waiter's. A read-write lock's hash (it has a mode) is left alone.
#[tokio::test]
async fn abandon_drops_every_hold_of_a_field_and_wakes_when_it_frees_the_lock() {
    let fx = Fixture::new("scripts-abandon").await;
    let queue = common::fair_queue_key(&fx.name);
    let head = format!("{}:{}", fx.channel, OTHER);
    assert_eq!(
        fx.abandon(ME).await.unwrap().as_i64(),
        Some(0),
        "nothing held: nothing to drop"
    );

    // Two holds of ME and one of another field: ME's go at once, the lock stays, no message.
    let mut sub = RawSubscriber::subscribe(&fx.server, &[&fx.channel, &head]).await;
    fx.plant(&fx.name, &[(ME, "2"), ("someone", "1")], "30000");
    assert_eq!(fx.abandon(ME).await.unwrap().as_i64(), Some(1));
    assert_eq!(fx.hash(), vec![("someone".to_owned(), "1".to_owned())]);
    fx.assert_quiet(&mut sub).await;

    // The last field: the lock is freed, a long claim is cut to the window, and both the lock's
    // channel and the fair queue's first waiter hear `0`.
    fx.cmd(&["HSET", &fx.name, ME, "1"]);
    fx.cmd(&["HDEL", &fx.name, "someone"]);
    fx.cmd(&["SET", &fx.claim, &format!("1:{OTHER}"), "PX", "60000"]);
    fx.cmd(&["RPUSH", &queue, OTHER]);
    assert_eq!(fx.abandon(ME).await.unwrap().as_i64(), Some(2));
    assert!(!fx.exists(&fx.name), "the lock hash is gone");
    let claim_left = fx.pttl(&fx.claim);
    assert!(
        claim_left > 0 && claim_left <= CLAIM_WINDOW_MS,
        "the claim was not cut to the window: {claim_left} ms left"
    );
    let mut heard = vec![
        sub.next_message(Duration::from_secs(5)).await,
        sub.next_message(Duration::from_secs(5)).await,
    ];
    heard.sort();
    let mut expected = vec![
        Some((fx.channel.clone(), "0".to_owned())),
        Some((head.clone(), "0".to_owned())),
    ];
    expected.sort();
    assert_eq!(heard, expected);

    // A read-write lock's hash with ME as a reader is not this script's to touch.
    fx.cmd(&["HSET", &fx.name, "mode", "read", ME, "1"]);
    assert_eq!(fx.abandon(ME).await.unwrap().as_i64(), Some(0));
    assert_eq!(
        fx.hash().len(),
        2,
        "the read-write lock was touched: {:?}",
        fx.hash()
    );

    // A key of another type is refused, and left alone.
    fx.cmd(&["DEL", &fx.name]);
    fx.cmd(&["SET", &fx.name, "not a lock"]);
    let error = fx.abandon(ME).await.unwrap_err();
    assert!(error.details().starts_with("WRONGTYPE"), "{error:?}");
    assert_eq!(fx.get(&fx.name).as_deref(), Some("not a lock"));
}
