//! Every branch of the multi-lock's scripts (`lua/multi/acquire.lua`, `lua/multi/release.lua`),
//! as the client composes them (`relock::testing::scripts`), run directly with `EVAL` on a real server: the reply, the state each part is left in (hash
//! fields, TTLs, claims, replay keys) and what was published on each part's channel.

use super::fixture::{self, assert_within, Lua, CLAIM_WINDOW_MS, LATCH_TTL_MS, ME, OTHER};
use crate::common;

use std::time::Duration;

use common::RawSubscriber;
use fred::types::Value;
use relock::testing::scripts::{MULTI_ACQUIRE, MULTI_RELEASE};

/// A server, a raw fred connection and the keys of `k` locks (their names share a hash tag, as
/// a batch's do on a cluster).
struct Fixture {
    lua: Lua,
    names: Vec<String>,
}

fixture::derefs_to_lua!(Fixture);

impl Fixture {
    async fn new(test: &str, k: usize) -> Fixture {
        let lua = Lua::start(test).await;
        let names = (1..=k)
            .map(|i| format!("{{{}}}:part-{i}", lua.name))
            .collect();
        Fixture { lua, names }
    }

    fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    fn claim(&self, i: usize) -> String {
        common::claim_key(&self.names[i])
    }

    fn channel(&self, i: usize) -> String {
        common::lock_channel(&self.names[i])
    }

    fn latch(&self, i: usize, id: &str) -> String {
        format!("redisson_unlock_latch:{}:{id}", self.names[i])
    }

    fn hash(&self, i: usize) -> Vec<(String, String)> {
        self.hash_of(&self.names[i])
    }

    /// `lua/multi/acquire.lua` over every part.
    async fn acquire(&self, lease_ms: u64, field: &str) -> Result<Value, fred::error::Error> {
        let keys: Vec<String> = (0..self.names.len())
            .flat_map(|i| [self.name(i).to_owned(), self.claim(i)])
            .collect();
        let args = vec![
            lease_ms.to_string(),
            field.to_owned(),
            CLAIM_WINDOW_MS.to_string(),
        ];
        self.lua
            .eval(MULTI_ACQUIRE, &strs(&keys), &strs(&args))
            .await
    }

    /// `lua/multi/release.lua` over every part, under the replay keys `<part latch>:<id>`, keeping
    /// part i's TTL at `keep_ms[i]` while holds remain.
    async fn release(
        &self,
        id: &str,
        field: &str,
        keep_ms: &[u64],
        sent_before: bool,
        replay_last: bool,
    ) -> Result<Value, fred::error::Error> {
        let keys: Vec<String> = (0..self.names.len())
            .flat_map(|i| {
                [
                    self.name(i).to_owned(),
                    self.channel(i),
                    self.latch(i, id),
                    self.claim(i),
                ]
            })
            .collect();
        let flag = |on: bool| if on { "1" } else { "0" }.to_owned();
        let mut args = vec![
            "0".to_owned(),
            field.to_owned(),
            "PUBLISH".to_owned(),
            LATCH_TTL_MS.to_string(),
            CLAIM_WINDOW_MS.to_string(),
            flag(sent_before),
            flag(replay_last),
        ];
        args.extend(keep_ms.iter().map(u64::to_string));
        self.lua
            .eval(MULTI_RELEASE, &strs(&keys), &strs(&args))
            .await
    }

    async fn subscribe(&self) -> RawSubscriber {
        let channels: Vec<String> = (0..self.names.len()).map(|i| self.channel(i)).collect();
        let channels: Vec<&str> = channels.iter().map(String::as_str).collect();
        RawSubscriber::subscribe(&self.server, &channels).await
    }
}

fn held_by(field: &str, holds: u64) -> Vec<(String, String)> {
    vec![(field.to_owned(), holds.to_string())]
}

/// A `{index, ttl}` busy reply.
fn busy(reply: Value) -> (i64, i64) {
    match reply {
        Value::Array(items) => match items.as_slice() {
            [index, ttl] => (index.as_i64().unwrap(), ttl.as_i64().unwrap()),
            other => panic!("expected {{index, ttl}}, got {other:?}"),
        },
        other => panic!("expected a busy reply {{index, ttl}}, got {other:?}"),
    }
}

/// A release reply: one result per part, `None` for nil.
fn results(reply: Value) -> Vec<Option<i64>> {
    match reply {
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::Null => None,
                other => Some(other.as_i64().unwrap_or_else(|| panic!("{other:?}"))),
            })
            .collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

fn assert_wrongtype_of_part(result: Result<Value, fred::error::Error>, part: usize) {
    match result {
        Err(e) => {
            let text = format!("{} {}", e.details(), e);
            assert!(text.contains("WRONGTYPE"), "expected WRONGTYPE, got {e:?}");
            assert!(
                text.contains(&format!("[part {part}]")),
                "the error does not name part {part}: {e:?}"
            );
        }
        Ok(v) => panic!("expected a WRONGTYPE error, got {v:?}"),
    }
}

// ---------------------------------------------------------------- acquire

#[tokio::test]
async fn all_free_parts_are_taken_with_the_lease() {
    let fx = Fixture::new("multi-acquire-free", 3).await;
    assert_eq!(fx.acquire(10_000, ME).await.unwrap(), Value::Null);
    for i in 0..3 {
        assert_eq!(fx.hash(i), held_by(ME, 1), "part {i}");
        assert_within(fx.pttl(fx.name(i)), 9_000, 10_000, "part TTL");
    }
}

#[tokio::test]
async fn one_busy_part_takes_nothing_and_names_itself() {
    let fx = Fixture::new("multi-acquire-busy", 3).await;
    fx.plant(fx.name(1), &[(OTHER, "1")], "10000");
    let (index, ttl) = busy(fx.acquire(60_000, ME).await.unwrap());
    assert_eq!(index, 2, "the busy part, 1-based");
    assert_within(ttl, 1, 10_000, "the holder's PTTL");
    assert!(
        !fx.exists(fx.name(0)),
        "a part before the busy one was taken"
    );
    assert!(
        !fx.exists(fx.name(2)),
        "a part after the busy one was taken"
    );
    assert_eq!(fx.hash(1), held_by(OTHER, 1), "the holder is untouched");
    assert_within(
        fx.pttl(fx.name(1)),
        1,
        ttl,
        "the holder's lease was extended",
    );
}

#[tokio::test]
async fn the_first_busy_part_is_named() {
    let fx = Fixture::new("multi-acquire-first-busy", 4).await;
    for i in [1, 3] {
        fx.plant(fx.name(i), &[(OTHER, "1")], "10000");
    }
    let (index, _) = busy(fx.acquire(10_000, ME).await.unwrap());
    assert_eq!(index, 2);
    assert!(!fx.exists(fx.name(0)) && !fx.exists(fx.name(2)));
}

#[tokio::test]
async fn a_part_held_without_expiry_answers_minus_one() {
    let fx = Fixture::new("multi-acquire-no-ttl", 2).await;
    fx.cmd(&["HSET", fx.name(1), OTHER, "3"]);
    let (index, ttl) = busy(fx.acquire(10_000, ME).await.unwrap());
    assert_eq!((index, ttl), (2, -1));
    assert!(!fx.exists(fx.name(0)));
    assert_eq!(fx.pttl(fx.name(1)), -1, "no TTL was added");
    assert_eq!(fx.hash(1), held_by(OTHER, 3));
}

#[tokio::test]
async fn a_free_part_claimed_by_another_field_is_busy_and_its_claim_cut_to_the_window() {
    let fx = Fixture::new("multi-acquire-claimed", 3).await;
    let claim = fx.claim(1);
    fx.cmd(&["SET", &claim, &format!("1:{OTHER}"), "PX", "30000"]);
    let (index, wait) = busy(fx.acquire(10_000, ME).await.unwrap());
    assert_eq!(index, 2);
    assert_within(wait, 1, CLAIM_WINDOW_MS, "told to wait");
    assert_within(fx.pttl(&claim), 1, CLAIM_WINDOW_MS, "the claim's PTTL");
    assert_eq!(
        fx.get(&claim).as_deref(),
        Some(&*format!("1:{OTHER}")),
        "the claim is still the other field's"
    );
    for i in 0..3 {
        assert!(!fx.exists(fx.name(i)), "part {i} was taken");
    }
    // Once the claim lapses, the parts are free for anyone.
    assert!(common::eventually(Duration::from_secs(2), || async { !fx.exists(&claim) }).await);
    assert_eq!(fx.acquire(10_000, ME).await.unwrap(), Value::Null);
}

#[tokio::test]
async fn a_part_claimed_by_this_field_is_taken_and_the_claim_spent() {
    let fx = Fixture::new("multi-acquire-own-claim", 2).await;
    let claim = fx.claim(0);
    fx.cmd(&["SET", &claim, &format!("2:{ME}"), "PX", "30000"]);
    // A claim relock did not write (no expiry) is ignored, and left alone.
    let foreign = fx.claim(1);
    fx.cmd(&["SET", &foreign, &format!("1:{OTHER}")]);
    assert_eq!(fx.acquire(10_000, ME).await.unwrap(), Value::Null);
    assert_eq!(fx.hash(0), held_by(ME, 1));
    assert_eq!(fx.hash(1), held_by(ME, 1));
    assert!(!fx.exists(&claim), "the claim is spent");
    assert!(fx.exists(&foreign), "a foreign claim was touched");
}

#[tokio::test]
async fn re_entries_and_fresh_parts_are_taken_together() {
    let fx = Fixture::new("multi-acquire-reentry", 4).await;
    // Part 0: held by ME, lease run down to 1 s: the re-entry extends it to the lease.
    fx.plant(fx.name(0), &[(ME, "1")], "1000");
    // Part 1: held by ME for 60 s: the re-entry does not shorten it.
    fx.plant(fx.name(1), &[(ME, "2")], "60000");
    // Part 2: held by ME without expiry: the re-entry gives it the lease.
    fx.cmd(&["HSET", fx.name(2), ME, "1"]);
    // Part 3: free.
    assert_eq!(fx.acquire(20_000, ME).await.unwrap(), Value::Null);
    assert_eq!(fx.hash(0), held_by(ME, 2));
    assert_within(fx.pttl(fx.name(0)), 19_000, 20_000, "part 0 TTL");
    assert_eq!(fx.hash(1), held_by(ME, 3));
    assert_within(fx.pttl(fx.name(1)), 59_000, 60_000, "part 1 TTL");
    assert_eq!(fx.hash(2), held_by(ME, 2));
    assert_within(fx.pttl(fx.name(2)), 19_000, 20_000, "part 2 TTL");
    assert_eq!(fx.hash(3), held_by(ME, 1));
    assert_within(fx.pttl(fx.name(3)), 19_000, 20_000, "part 3 TTL");
}

#[tokio::test]
async fn a_re_entry_beside_a_busy_part_takes_nothing() {
    let fx = Fixture::new("multi-acquire-reentry-busy", 2).await;
    fx.plant(fx.name(0), &[(ME, "1")], "1000");
    fx.plant(fx.name(1), &[(OTHER, "1")], "10000");
    let (index, _) = busy(fx.acquire(20_000, ME).await.unwrap());
    assert_eq!(index, 2);
    assert_eq!(fx.hash(0), held_by(ME, 1), "the re-entry was counted");
    assert!(
        fx.pttl(fx.name(0)) <= 1_000,
        "the re-entry's TTL was extended"
    );
}

#[tokio::test]
async fn a_part_that_is_not_a_hash_is_wrongtype_and_takes_nothing() {
    let fx = Fixture::new("multi-acquire-wrongtype", 3).await;
    fx.cmd(&["SET", fx.name(1), "user-data"]);
    assert_wrongtype_of_part(fx.acquire(10_000, ME).await, 2);
    assert!(!fx.exists(fx.name(0)) && !fx.exists(fx.name(2)));
    assert_eq!(fx.get(fx.name(1)).as_deref(), Some("user-data"));
}

// ---------------------------------------------------------------- release

#[tokio::test]
async fn last_releases_free_every_part_and_publish_once_on_each_channel() {
    let fx = Fixture::new("multi-release-free", 3).await;
    assert_eq!(fx.acquire(30_000, ME).await.unwrap(), Value::Null);
    // A claim on part 1 from a waiter: the release cuts it to the window.
    let claim = fx.claim(1);
    fx.cmd(&["SET", &claim, &format!("1:{OTHER}"), "PX", "30000"]);
    let mut sub = fx.subscribe().await;
    let reply = fx
        .release("r1", ME, &[30_000; 3], false, true)
        .await
        .unwrap();
    // Each wake-up reached the one subscribed connection.
    assert_eq!(results(reply), vec![Some(2), Some(2), Some(2)]);
    for i in 0..3 {
        assert!(!fx.exists(fx.name(i)), "part {i} is still there");
        let message = sub.next_message(Duration::from_secs(5)).await;
        assert_eq!(message, Some((fx.channel(i), "0".to_owned())), "part {i}");
        // The replay key says "freed" for a retry.
        let latch = fx.latch(i, "r1");
        assert_eq!(fx.get(&latch).as_deref(), Some("1"));
        assert_within(fx.pttl(&latch), 1, LATCH_TTL_MS, "replay key TTL");
    }
    for i in 0..3 {
        sub.assert_quiet(&fx.server, &fx.channel(i)).await;
    }
    assert_within(fx.pttl(&claim), 1, CLAIM_WINDOW_MS, "the claim's PTTL");
}

#[tokio::test]
async fn a_last_release_without_replay_last_writes_no_replay_key() {
    let fx = Fixture::new("multi-release-no-replay", 2).await;
    assert_eq!(fx.acquire(30_000, ME).await.unwrap(), Value::Null);
    let reply = fx.release("r1", ME, &[1; 2], false, false).await.unwrap();
    assert_eq!(results(reply), vec![Some(1), Some(1)], "nobody subscribed");
    for i in 0..2 {
        assert!(!fx.exists(fx.name(i)));
        assert!(!fx.exists(&fx.latch(i, "r1")));
    }
}

#[tokio::test]
async fn releases_that_leave_holds_set_each_parts_ttl_and_replay_key() {
    let fx = Fixture::new("multi-release-still-held", 2).await;
    assert_eq!(fx.acquire(30_000, ME).await.unwrap(), Value::Null);
    assert_eq!(fx.acquire(30_000, ME).await.unwrap(), Value::Null);
    let mut sub = fx.subscribe().await;
    let reply = fx
        .release("r1", ME, &[5_000, 9_000], false, true)
        .await
        .unwrap();
    assert_eq!(results(reply), vec![Some(0), Some(0)]);
    assert_eq!(fx.hash(0), held_by(ME, 1));
    assert_eq!(fx.hash(1), held_by(ME, 1));
    assert_within(fx.pttl(fx.name(0)), 4_000, 5_000, "part 0 keeps its TTL");
    assert_within(fx.pttl(fx.name(1)), 8_000, 9_000, "part 1 keeps its TTL");
    for i in 0..2 {
        let latch = fx.latch(i, "r1");
        assert_eq!(fx.get(&latch).as_deref(), Some("0"));
        assert_within(fx.pttl(&latch), 1, LATCH_TTL_MS, "replay key TTL");
        sub.assert_quiet(&fx.server, &fx.channel(i)).await;
    }
}

/// A part released with a TTL of 0 (the client keeps no hold of the owner's on it) is freed
/// whatever its count; a part with a TTL keeps its remaining hold.
#[tokio::test]
async fn a_part_released_keeping_nothing_is_freed_whatever_its_count() {
    let fx = Fixture::new("multi-release-keep-nothing", 2).await;
    assert_eq!(fx.acquire(30_000, ME).await.unwrap(), Value::Null);
    assert_eq!(fx.acquire(30_000, ME).await.unwrap(), Value::Null);
    let mut sub = fx.subscribe().await;
    let reply = fx
        .release("r1", ME, &[0, 9_000], false, false)
        .await
        .unwrap();
    assert_eq!(results(reply), vec![Some(2), Some(0)]);
    assert!(!fx.exists(fx.name(0)), "part 0 kept a hold");
    let message = sub.next_message(Duration::from_secs(5)).await;
    assert_eq!(message, Some((fx.channel(0), "0".to_owned())));
    assert_eq!(fx.hash(1), held_by(ME, 1));
    assert_within(fx.pttl(fx.name(1)), 8_000, 9_000, "part 1 keeps its TTL");
    sub.assert_quiet(&fx.server, &fx.channel(1)).await;
}

#[tokio::test]
async fn a_retry_replays_each_part_and_changes_nothing() {
    let fx = Fixture::new("multi-release-retry", 3).await;
    // Parts 0 and 1 held twice, part 2 once: the release leaves 0 and 1 held, frees 2.
    assert_eq!(fx.acquire(30_000, ME).await.unwrap(), Value::Null);
    fx.cmd(&["HINCRBY", fx.name(0), ME, "1"]);
    fx.cmd(&["HINCRBY", fx.name(1), ME, "1"]);
    let first = fx
        .release("r1", ME, &[30_000; 3], false, true)
        .await
        .unwrap();
    assert_eq!(results(first), vec![Some(0), Some(0), Some(1)]);
    // The owner takes part 2 again; the retry of r1 must not release it, nor parts 0 and 1
    // once more.
    fx.cmd(&["HSET", fx.name(2), ME, "1"]);
    let mut sub = fx.subscribe().await;
    let retry = fx
        .release("r1", ME, &[30_000; 3], true, true)
        .await
        .unwrap();
    assert_eq!(results(retry), vec![Some(0), Some(0), Some(1)], "replayed");
    for i in 0..3 {
        assert_eq!(fx.hash(i), held_by(ME, 1), "part {i} was released twice");
        sub.assert_quiet(&fx.server, &fx.channel(i)).await;
    }
    // A retry whose replay keys are gone (never written: its first send did not run) releases.
    let unsent = fx
        .release("r2", ME, &[30_000; 3], true, true)
        .await
        .unwrap();
    assert_eq!(results(unsent), vec![Some(2), Some(2), Some(2)]);
}

#[tokio::test]
async fn a_first_send_does_not_read_replay_keys() {
    let fx = Fixture::new("multi-release-first-send", 2).await;
    assert_eq!(fx.acquire(30_000, ME).await.unwrap(), Value::Null);
    // A stale key under the same id (it cannot exist for a fresh request; here it does).
    fx.cmd(&["SET", &fx.latch(0, "r1"), "0", "PX", "5000"]);
    let reply = fx.release("r1", ME, &[1; 2], false, true).await.unwrap();
    assert_eq!(results(reply), vec![Some(1), Some(1)]);
    assert!(
        !fx.exists(fx.name(0)),
        "the replay key was read on a first send"
    );
}

#[tokio::test]
async fn a_part_the_field_does_not_hold_answers_nil_and_the_others_are_released() {
    let fx = Fixture::new("multi-release-not-held", 3).await;
    assert_eq!(fx.acquire(30_000, ME).await.unwrap(), Value::Null);
    // Part 1 was force-unlocked and taken by another owner meanwhile.
    fx.cmd(&["DEL", fx.name(1)]);
    fx.plant(fx.name(1), &[(OTHER, "1")], "10000");
    let mut sub = fx.subscribe().await;
    let reply = fx
        .release("r1", ME, &[30_000; 3], false, true)
        .await
        .unwrap();
    assert_eq!(results(reply), vec![Some(2), None, Some(2)]);
    assert_eq!(
        fx.hash(1),
        held_by(OTHER, 1),
        "another owner's hold was touched"
    );
    assert_within(fx.pttl(fx.name(1)), 1, 10_000, "its TTL");
    assert!(
        !fx.exists(&fx.latch(1, "r1")),
        "a part not held wrote a replay key"
    );
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel(0), "0".to_owned()))
    );
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel(2), "0".to_owned()))
    );
    sub.assert_quiet(&fx.server, &fx.channel(1)).await;
    // Nothing held at all: every part answers nil.
    let none = fx
        .release("r2", ME, &[30_000; 3], false, true)
        .await
        .unwrap();
    assert_eq!(results(none), vec![None, None, None]);
}

#[tokio::test]
async fn a_release_with_a_part_that_is_not_a_hash_is_wrongtype_and_releases_nothing() {
    let fx = Fixture::new("multi-release-wrongtype", 3).await;
    assert_eq!(fx.acquire(30_000, ME).await.unwrap(), Value::Null);
    fx.cmd(&["DEL", fx.name(2)]);
    fx.cmd(&["SET", fx.name(2), "user-data"]);
    assert_wrongtype_of_part(fx.release("r1", ME, &[1; 3], false, true).await, 3);
    assert_eq!(fx.hash(0), held_by(ME, 1));
    assert_eq!(fx.hash(1), held_by(ME, 1));
    assert!(!fx.exists(&fx.latch(0, "r1")));
}

/// `strings` as the `&str`s a script call takes.
fn strs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}
