//! Every branch of the read-write lock's Lua scripts (`lua/rw/`, and the read-write side of
//! `lua/rw/abandon.lua`), each as the client composes it (`relock::testing::scripts`: after the
//! readers' rules, `lua/rw/readers.lua`), run directly with `EVAL` on a real server: the reply, what the lock hash, the readers'
//! timeout keys, the claim and the replay keys hold afterwards, and what was published on the
//! lock's channel. The last tests interleave Redisson's own read-write scripts with relock's on
//! one lock.

use super::fixture::{self, assert_error, assert_within, int, ints, pairs, Lua};
use super::fixture::{CLAIM_WINDOW_MS, LATCH_TTL_MS, LEASE_MS};
use crate::common;

use std::time::Duration;

use common::{resp, RawSubscriber, Resp};
use fred::types::Value;
use relock::testing::scripts::{
    INSPECT, RW_ABANDON as ABANDON, RW_FORCE_RELEASE as FORCE_RELEASE,
    RW_READ_ACQUIRE as READ_ACQUIRE, RW_READ_RELEASE as READ_RELEASE, RW_RENEW_READ as RENEW_READ,
    RW_WRITE_ACQUIRE as WRITE_ACQUIRE, RW_WRITE_RELEASE as WRITE_RELEASE, UNCLAIM,
};

/// Declares an owner's reader field `$reader` and its writer field `$writer` (the reader's with
/// `:write`).
macro_rules! owner {
    ($reader:ident, $writer:ident = $field:literal) => {
        const $reader: &str = $field;
        const $writer: &str = concat!($field, ":write");
    };
}

// Three owners of relock clients: each one's reader field and writer field.
owner!(A, A_W = "aaaaaaaa-0000-4000-8000-00000000000a:1");
owner!(B, B_W = "bbbbbbbb-0000-4000-8000-00000000000b:2");
owner!(C, C_W = "cccccccc-0000-4000-8000-00000000000c:3");

/// What a PTTL may have lost between a script setting it and the test reading it, on a busy
/// machine.
const SLACK_MS: i64 = 1_500;

fixture::lua_fixture! {
    /// A server, a raw fred connection and one read-write lock's keys.
    struct Fixture for lua {
        channel: String = rw_channel(&lua.name),
    }
}

impl Fixture {
    async fn named(name: String) -> Fixture {
        Fixture::on(Lua::named(name).await)
    }

    fn hash(&self) -> Vec<(String, String)> {
        self.hash_of(&self.name)
    }

    /// Reader `field`'s timeout key of hold `n`, as Redisson names it.
    fn timeout(&self, field: &str, n: u32) -> String {
        if self.name.contains('{') {
            format!("{}:{field}:rwlock_timeout:{n}", self.name)
        } else {
            format!("{{{}}}:{field}:rwlock_timeout:{n}", self.name)
        }
    }

    /// Every timeout key of this lock that exists, sorted.
    fn timeouts(&self) -> Vec<String> {
        let pattern = if self.name.contains('{') {
            format!("{}:*:rwlock_timeout:*", self.name)
        } else {
            format!("{{{}}}:*:rwlock_timeout:*", self.name)
        };
        let Resp::Array(Some(items)) = resp(&self.cmd(&["KEYS", &pattern])) else {
            panic!("KEYS did not return an array");
        };
        let mut keys: Vec<String> = items
            .into_iter()
            .map(|item| match item {
                Resp::Bulk(Some(key)) => key,
                other => panic!("bad KEYS item {other:?}"),
            })
            .collect();
        keys.sort();
        keys
    }

    fn latch(&self, request: &str) -> String {
        format!("redisson_unlock_latch:{{{}}}:{request}", self.name)
    }

    fn replayed(&self, request: &str) -> Resp {
        resp(&self.cmd(&["GET", &self.latch(request)]))
    }

    fn claimant(&self) -> Resp {
        resp(&self.cmd(&["GET", &self.claim]))
    }

    async fn subscribe(&self) -> RawSubscriber {
        self.subscribe_to(&[&self.channel]).await
    }

    // ---- relock's scripts, as the client calls them

    /// A read hold for `reader` with `lease_ms`.
    async fn read(&self, lease_ms: i64, reader: &str) -> Result<Value, fred::error::Error> {
        let writer = format!("{reader}:write");
        self.eval(
            READ_ACQUIRE,
            &[&self.name, &self.claim],
            &[
                &lease_ms.to_string(),
                reader,
                &writer,
                &CLAIM_WINDOW_MS.to_string(),
            ],
        )
        .await
    }

    /// A write hold for `writer`; a `priority` above 0 claims a read-locked lock.
    async fn write(
        &self,
        lease_ms: i64,
        writer: &str,
        priority: u32,
    ) -> Result<Value, fred::error::Error> {
        let reader = writer.strip_suffix(":write").expect("a writer field");
        self.eval(
            WRITE_ACQUIRE,
            &[&self.name, &self.claim],
            &[
                &lease_ms.to_string(),
                writer,
                reader,
                &priority.to_string(),
                &CLAIM_WINDOW_MS.to_string(),
            ],
        )
        .await
    }

    /// A release of one of `reader`'s read holds, its remaining holds needing `keep_ms`.
    async fn read_release(
        &self,
        reader: &str,
        keep_ms: i64,
        request: &str,
        sent_before: bool,
    ) -> Result<Value, fred::error::Error> {
        self.release(READ_RELEASE, "0", reader, keep_ms, request, sent_before)
            .await
    }

    /// A release of one of `writer`'s write holds, its remaining holds needing `keep_ms`.
    async fn write_release(
        &self,
        writer: &str,
        keep_ms: i64,
        request: &str,
        sent_before: bool,
    ) -> Result<Value, fred::error::Error> {
        self.release(WRITE_RELEASE, "1", writer, keep_ms, request, sent_before)
            .await
    }

    async fn release(
        &self,
        lua: &str,
        message: &str,
        field: &str,
        keep_ms: i64,
        request: &str,
        sent_before: bool,
    ) -> Result<Value, fred::error::Error> {
        let latch = self.latch(request);
        self.eval(
            lua,
            &[&self.name, &self.channel, &latch, &self.claim],
            &[
                message,
                &keep_ms.to_string(),
                field,
                "PUBLISH",
                &LATCH_TTL_MS.to_string(),
                &CLAIM_WINDOW_MS.to_string(),
                if sent_before { "1" } else { "0" },
            ],
        )
        .await
    }

    async fn force_release(&self, mode: &str) -> Result<Value, fred::error::Error> {
        self.eval(
            FORCE_RELEASE,
            &[&self.name, &self.channel, &self.claim],
            &[mode, "PUBLISH", &CLAIM_WINDOW_MS.to_string()],
        )
        .await
    }

    /// The watchdog's renewal of `readers` (lock, reader field) to `lease_ms`.
    async fn renew(
        &self,
        lease_ms: i64,
        readers: &[(&str, &str)],
    ) -> Result<Value, fred::error::Error> {
        let keys: Vec<&str> = readers.iter().map(|(name, _)| *name).collect();
        let lease = lease_ms.to_string();
        let mut args = vec![lease.as_str()];
        args.extend(readers.iter().map(|(_, field)| *field));
        self.eval(RENEW_READ, &keys, &args).await
    }

    /// The shutdown release of every hold of `field`.
    async fn abandon(&self, field: &str) -> Result<Value, fred::error::Error> {
        self.eval(
            ABANDON,
            &[&self.name, &self.channel, &self.claim],
            &[field, "PUBLISH", &CLAIM_WINDOW_MS.to_string()],
        )
        .await
    }

    /// A waiting writer's withdrawal of its claim, as a read-write lock's writer sends it: the
    /// lock's channel is woken when the claim goes.
    async fn unclaim(&self, writer: &str) -> Result<Value, fred::error::Error> {
        self.eval(
            UNCLAIM,
            &[&self.claim, &self.channel],
            &[writer, "PUBLISH", "0"],
        )
        .await
    }

    /// `{locked, pttl, holds}` of `field`, with `view` "read" or "write".
    async fn inspect(&self, field: &str, view: &str) -> Vec<i64> {
        ints(
            self.eval(INSPECT, &[&self.name], &[field, view])
                .await
                .expect("inspect"),
        )
    }

    // ---- state set by hand

    /// Gives reader `field` a count of `holds` in the hash without any timeout key: a reader
    /// whose holds all lapsed.
    fn lapsed_reader(&self, field: &str, holds: u32) {
        self.cmd(&["HSET", &self.name, field, &holds.to_string()]);
    }

    /// Sets the claim to `value`, living `px` ms (none: without a TTL).
    fn set_claim(&self, value: &str, px: Option<i64>) {
        match px {
            Some(px) => self.cmd(&["SET", &self.claim, value, "PX", &px.to_string()]),
            None => self.cmd(&["SET", &self.claim, value]),
        };
    }
}

/// The read-write lock's channel: `redisson_rwlock:{<name>}`.
fn rw_channel(name: &str) -> String {
    common::braced("redisson_rwlock", name)
}

fn sorted(keys: &[String]) -> Vec<String> {
    let mut keys = keys.to_vec();
    keys.sort();
    keys
}

/// A PTTL that a script set to `ms` a moment ago.
fn assert_about(value: i64, ms: i64, what: &str) {
    assert_within(value, ms - SLACK_MS, ms, what);
}

/// A lock's PTTL that a script set to what a timeout key had left, `key_ttl` (read just
/// before): at most a millisecond above it (each PTTL is rounded), and not far below.
fn assert_follows(lock_ttl: i64, key_ttl: i64, what: &str) {
    assert_within(lock_ttl, key_ttl - SLACK_MS, key_ttl + 1, what);
}

const TAKEN: Value = Value::Null;

// ---------------------------------------------------------------- read acquire

#[tokio::test]
async fn a_read_of_a_free_lock_sets_read_mode_one_hold_and_its_timeout_key() {
    let fx = Fixture::new("rws-read-free").await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1")]));
    assert_eq!(fx.timeouts(), [fx.timeout(A, 1)]);
    assert_eq!(fx.get(&fx.timeout(A, 1)).as_deref(), Some("1"));
    assert_about(
        fx.pttl(&fx.timeout(A, 1)),
        LEASE_MS,
        "the hold's timeout key",
    );
    assert_about(fx.pttl(&fx.name), LEASE_MS, "the lock");
    assert!(!fx.exists(&fx.claim));
}

#[tokio::test]
async fn a_tagged_name_keeps_its_timeout_keys_on_its_own_tag() {
    let name = format!("{{{}}}:rw", common::prefix("rws-tagged"));
    let fx = Fixture::named(name.clone()).await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    let key = format!("{name}:{A}:rwlock_timeout:1");
    assert!(fx.exists(&key), "no timeout key {key}");
    assert_eq!(fx.timeouts(), [key]);
    assert_eq!(int(fx.read_release(A, 1, "r1", false).await.unwrap()), 1);
    assert!(fx.timeouts().is_empty() && !fx.exists(&name));
}

#[tokio::test]
async fn readers_share_and_each_hold_has_its_own_lease_while_the_lock_keeps_the_longest() {
    let fx = Fixture::new("rws-read-share").await;
    assert_eq!(fx.read(20_000, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(5_000, A).await.unwrap(), TAKEN, "a re-entry");
    assert_eq!(fx.read(30_000, B).await.unwrap(), TAKEN, "another reader");
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "2"), (B, "1")]));
    assert_about(fx.pttl(&fx.timeout(A, 1)), 20_000, "A's first hold");
    assert_about(fx.pttl(&fx.timeout(A, 2)), 5_000, "A's second hold");
    assert_about(fx.pttl(&fx.timeout(B, 1)), 30_000, "B's hold");
    assert_about(
        fx.pttl(&fx.name),
        30_000,
        "the lock is raised to the longest",
    );
    // A shorter lease never shortens the lock.
    assert_eq!(fx.read(1_000, C).await.unwrap(), TAKEN);
    assert_about(fx.pttl(&fx.name), 30_000, "the lock after a short reader");
    assert_about(
        fx.pttl(&fx.timeout(C, 1)),
        1_000,
        "C's own key keeps C's lease",
    );
}

#[tokio::test]
async fn a_read_of_a_write_locked_lock_is_busy_unless_the_reader_is_the_writer() {
    let fx = Fixture::new("rws-read-write-locked").await;
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    let ttl = int(fx.read(LEASE_MS, B).await.unwrap());
    assert_within(
        ttl,
        LEASE_MS - SLACK_MS,
        LEASE_MS,
        "B waits for the writer's lease",
    );
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A_W, "1")]));
    assert!(fx.timeouts().is_empty());
    // The writer reads: a downgrade's first step. The mode stays `write`.
    assert_eq!(fx.read(30_000, A).await.unwrap(), TAKEN);
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A, "1"), (A_W, "1")]));
    assert_about(fx.pttl(&fx.timeout(A, 1)), 30_000, "the writer's read hold");
    assert_about(fx.pttl(&fx.name), 30_000, "the lock covers the read hold");
    assert!(
        int(fx.read(LEASE_MS, B).await.unwrap()) > 0,
        "B still waits"
    );
}

#[tokio::test]
async fn a_read_of_another_types_hash_is_busy_and_of_a_string_wrongtype() {
    let fx = Fixture::new("rws-read-foreign").await;
    fx.plant(&fx.name, &[(C, "1")], &LEASE_MS.to_string());
    let ttl = int(fx.read(LEASE_MS, A).await.unwrap());
    assert_within(ttl, LEASE_MS - SLACK_MS, LEASE_MS, "a plain lock's lease");
    assert_eq!(fx.hash(), pairs(&[(C, "1")]));
    assert!(fx.timeouts().is_empty());

    fx.cmd(&["DEL", &fx.name]);
    fx.cmd(&["SET", &fx.name, "x"]);
    assert_error(fx.read(LEASE_MS, A).await, "WRONGTYPE");
    assert_eq!(fx.get(&fx.name).as_deref(), Some("x"));
    assert!(fx.timeouts().is_empty());
}

#[tokio::test]
async fn a_writers_claim_keeps_new_readers_out_but_lets_holders_and_its_own_owner_in() {
    let fx = Fixture::new("rws-read-claimed").await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert!(int(fx.write(LEASE_MS, B_W, 1).await.unwrap()) > 0);
    assert_eq!(fx.claimant(), Resp::Bulk(Some(format!("1:{B_W}"))));
    // A new reader waits for the lock's lease (the claim lives as long, and a window).
    let ttl = int(fx.read(LEASE_MS, C).await.unwrap());
    assert_within(ttl, LEASE_MS - SLACK_MS, LEASE_MS, "C's wait");
    assert!(!common::raw_hexists(&fx.server, &fx.name, C));
    // A reader that holds re-enters.
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(common::raw_holds(&fx.server, &fx.name, A), 2);
    // The claimant's own owner may read (its writer waits for readers, not for itself).
    assert_eq!(fx.read(LEASE_MS, B).await.unwrap(), TAKEN);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "2"), (B, "1")]));
    assert_eq!(fx.claimant(), Resp::Bulk(Some(format!("1:{B_W}"))));
}

#[tokio::test]
async fn a_claim_on_a_free_lock_holds_readers_back_for_the_claim_window_at_most() {
    let fx = Fixture::new("rws-read-claimed-free").await;
    fx.set_claim(&format!("1:{B_W}"), Some(60_000));
    let wait = int(fx.read(LEASE_MS, C).await.unwrap());
    assert_eq!(wait, CLAIM_WINDOW_MS, "a long claim is cut to the window");
    assert_within(
        fx.pttl(&fx.claim),
        1,
        CLAIM_WINDOW_MS,
        "the claim after the cut",
    );
    assert!(!fx.exists(&fx.name));
    // A claim with less than the window left: what is left, never 0.
    fx.set_claim(&format!("1:{B_W}"), Some(200));
    assert_within(
        int(fx.read(LEASE_MS, C).await.unwrap()),
        1,
        200,
        "a short claim",
    );
    // The claimant's owner reads.
    assert_eq!(fx.read(LEASE_MS, B).await.unwrap(), TAKEN);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (B, "1")]));
}

#[tokio::test]
async fn a_claim_without_ttl_or_of_another_shape_is_ignored() {
    let fx = Fixture::new("rws-read-odd-claim").await;
    fx.set_claim(&format!("1:{B_W}"), None);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN, "no TTL");
    assert_eq!(
        fx.read_release(A, 1, "r1", false).await.unwrap(),
        Value::Integer(1)
    );
    fx.set_claim("not a claim", Some(60_000));
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN, "no priority");
    // Neither is touched by a reader.
    assert_eq!(fx.claimant(), Resp::Bulk(Some("not a claim".into())));
}

#[tokio::test]
async fn a_reader_whose_holds_lapsed_starts_afresh() {
    let fx = Fixture::new("rws-read-lapsed").await;
    // Alone: its stale field goes with the lock, and it takes a fresh one.
    fx.cmd(&["HSET", &fx.name, "mode", "read"]);
    fx.lapsed_reader(A, 2);
    fx.cmd(&["PEXPIRE", &fx.name, "60000"]);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1")]));
    assert_eq!(fx.timeouts(), [fx.timeout(A, 1)]);
    assert_about(
        fx.pttl(&fx.name),
        LEASE_MS,
        "a fresh lock, not the stale one's TTL",
    );

    // Among live readers: only its own field starts afresh.
    assert_eq!(fx.read(30_000, B).await.unwrap(), TAKEN);
    fx.cmd(&["HSET", &fx.name, A, "3"]);
    fx.cmd(&["DEL", &fx.timeout(A, 1)]);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1"), (B, "1")]));
    assert_eq!(fx.timeouts(), sorted(&[fx.timeout(A, 1), fx.timeout(B, 1)]));
}

// ---------------------------------------------------------------- write acquire

#[tokio::test]
async fn a_write_of_a_free_lock_takes_it_with_the_lease_and_reentry_only_raises_it() {
    let fx = Fixture::new("rws-write-free").await;
    assert_eq!(fx.write(LEASE_MS, A_W, 1).await.unwrap(), TAKEN);
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A_W, "1")]));
    assert_about(fx.pttl(&fx.name), LEASE_MS, "the writer's lease");
    assert!(!fx.exists(&fx.claim) && fx.timeouts().is_empty());
    assert_eq!(fx.write(30_000, A_W, 1).await.unwrap(), TAKEN);
    assert_about(
        fx.pttl(&fx.name),
        30_000,
        "a longer re-entry raises the TTL",
    );
    assert_eq!(fx.write(1_000, A_W, 1).await.unwrap(), TAKEN);
    assert_about(fx.pttl(&fx.name), 30_000, "a shorter one keeps it");
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A_W, "3")]));
}

#[tokio::test]
async fn a_write_of_a_write_locked_lock_is_busy_and_claims_nothing() {
    let fx = Fixture::new("rws-write-busy").await;
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    let ttl = int(fx.write(LEASE_MS, B_W, 1).await.unwrap());
    assert_within(ttl, LEASE_MS - SLACK_MS, LEASE_MS, "B waits for A's lease");
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A_W, "1")]));
    assert!(!fx.exists(&fx.claim), "a writer claims only from readers");
}

#[tokio::test]
async fn a_waiting_writer_claims_a_read_locked_lock_and_a_one_shot_does_not() {
    let fx = Fixture::new("rws-write-claim").await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert!(int(fx.write(LEASE_MS, B_W, 0).await.unwrap()) > 0);
    assert!(!fx.exists(&fx.claim), "a one-shot claims nothing");
    let ttl = int(fx.write(LEASE_MS, B_W, 1).await.unwrap());
    assert_within(
        ttl,
        LEASE_MS - SLACK_MS,
        LEASE_MS,
        "B waits for the readers' lease",
    );
    assert_eq!(fx.claimant(), Resp::Bulk(Some(format!("1:{B_W}"))));
    assert_within(
        fx.pttl(&fx.claim),
        ttl,
        ttl + CLAIM_WINDOW_MS,
        "the claim outlives the readers' lease by a window",
    );
    // Another writer of the same priority leaves it; a higher one takes it over.
    assert!(int(fx.write(LEASE_MS, C_W, 1).await.unwrap()) > 0);
    assert_eq!(fx.claimant(), Resp::Bulk(Some(format!("1:{B_W}"))));
    assert!(int(fx.write(LEASE_MS, C_W, 2).await.unwrap()) > 0);
    assert_eq!(fx.claimant(), Resp::Bulk(Some(format!("2:{C_W}"))));
    // The claimant renews its own claim whatever its priority.
    fx.cmd(&["PEXPIRE", &fx.claim, "100"]);
    assert!(int(fx.write(LEASE_MS, C_W, 1).await.unwrap()) > 0);
    assert_eq!(fx.claimant(), Resp::Bulk(Some(format!("1:{C_W}"))));
    assert!(fx.pttl(&fx.claim) > 1_000, "the claim was renewed");
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1")]));
}

#[tokio::test]
async fn a_reader_asking_to_write_gets_the_upgrade_error_and_nothing_changes() {
    let fx = Fixture::new("rws-write-upgrade").await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(LEASE_MS, B).await.unwrap(), TAKEN);
    let before = fx.hash();
    let keys = fx.timeouts();
    assert_error(fx.write(LEASE_MS, A_W, 1).await, "RELOCK_UPGRADE");
    assert_error(fx.write(LEASE_MS, A_W, 0).await, "RELOCK_UPGRADE");
    assert_eq!(fx.hash(), before);
    assert_eq!(fx.timeouts(), keys);
    assert!(!fx.exists(&fx.claim), "the refused writer claimed nothing");
    // Another writer's claim stands.
    assert!(int(fx.write(LEASE_MS, C_W, 1).await.unwrap()) > 0);
    assert_error(fx.write(LEASE_MS, A_W, 1).await, "RELOCK_UPGRADE");
    assert_eq!(fx.claimant(), Resp::Bulk(Some(format!("1:{C_W}"))));
}

#[tokio::test]
async fn a_writer_whose_read_holds_lapsed_is_not_refused() {
    let fx = Fixture::new("rws-write-lapsed-reader").await;
    // Its lapsed read holds were all there was: the lock is its.
    fx.cmd(&["HSET", &fx.name, "mode", "read"]);
    fx.lapsed_reader(A, 2);
    fx.cmd(&["PEXPIRE", &fx.name, "60000"]);
    assert_eq!(fx.write(LEASE_MS, A_W, 1).await.unwrap(), TAKEN);
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A_W, "1")]));
    assert_about(fx.pttl(&fx.name), LEASE_MS, "the writer's own lease");
    fx.cmd(&["DEL", &fx.name]);

    // With a live reader besides: its stale field goes, and it waits (claiming) like any writer.
    assert_eq!(fx.read(LEASE_MS, B).await.unwrap(), TAKEN);
    fx.lapsed_reader(A, 1);
    assert!(int(fx.write(LEASE_MS, A_W, 1).await.unwrap()) > 0);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (B, "1")]));
    assert_eq!(fx.claimant(), Resp::Bulk(Some(format!("1:{A_W}"))));
}

#[tokio::test]
async fn a_claimed_free_lock_goes_only_to_its_writer_which_spends_the_claim() {
    let fx = Fixture::new("rws-write-claimed-free").await;
    fx.set_claim(&format!("1:{B_W}"), Some(60_000));
    assert_eq!(
        int(fx.write(LEASE_MS, C_W, 1).await.unwrap()),
        CLAIM_WINDOW_MS
    );
    assert!(!fx.exists(&fx.name));
    assert_eq!(fx.write(LEASE_MS, B_W, 1).await.unwrap(), TAKEN);
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (B_W, "1")]));
    assert!(!fx.exists(&fx.claim), "taking the lock spent the claim");
}

#[tokio::test]
async fn a_write_of_another_types_hash_is_busy_and_of_a_string_wrongtype() {
    let fx = Fixture::new("rws-write-foreign").await;
    fx.plant(&fx.name, &[(C, "1")], &LEASE_MS.to_string());
    assert!(int(fx.write(LEASE_MS, A_W, 1).await.unwrap()) > 0);
    assert_eq!(fx.hash(), pairs(&[(C, "1")]));
    assert!(!fx.exists(&fx.claim));
    fx.cmd(&["DEL", &fx.name]);
    fx.cmd(&["SET", &fx.name, "x"]);
    assert_error(fx.write(LEASE_MS, A_W, 1).await, "WRONGTYPE");
    assert!(!fx.exists(&fx.claim));
}

#[tokio::test]
async fn a_writer_withdrawing_its_claim_wakes_the_readers_it_kept_out() {
    let fx = Fixture::new("rws-unclaim").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert!(int(fx.write(LEASE_MS, B_W, 1).await.unwrap()) > 0);
    assert!(int(fx.read(LEASE_MS, C).await.unwrap()) > 0, "kept out");
    // Another writer's withdrawal takes nothing and wakes nobody.
    assert_eq!(int(fx.unclaim(C_W).await.unwrap()), 0);
    assert_eq!(fx.claimant(), Resp::Bulk(Some(format!("1:{B_W}"))));
    sub.assert_quiet(&fx.server, &fx.channel).await;
    // The claimant's own goes, and the readers it kept out are told.
    assert_eq!(int(fx.unclaim(B_W).await.unwrap()), 1);
    assert!(!fx.exists(&fx.claim));
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "0".to_owned()))
    );
    assert_eq!(fx.read(LEASE_MS, C).await.unwrap(), TAKEN);
    assert_eq!(int(fx.unclaim(B_W).await.unwrap()), 0, "withdrawn already");
    sub.assert_quiet(&fx.server, &fx.channel).await;
}

// ---------------------------------------------------------------- read release

#[tokio::test]
async fn a_read_release_with_holds_left_keeps_the_lock_and_gives_them_the_lease_they_need() {
    let fx = Fixture::new("rws-read-release-partial").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(30_000, A).await.unwrap(), TAKEN);
    assert_eq!(
        int(fx.read_release(A, 5_000, "r1", false).await.unwrap()),
        0
    );
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1")]));
    assert_eq!(
        fx.timeouts(),
        [fx.timeout(A, 1)],
        "the released hold's key is gone"
    );
    assert_about(
        fx.pttl(&fx.timeout(A, 1)),
        5_000,
        "the remaining hold's lease",
    );
    assert_about(
        fx.pttl(&fx.name),
        5_000,
        "the lock follows what the readers need",
    );
    assert_eq!(fx.replayed("r1"), Resp::Bulk(Some("0".into())));
    assert_within(fx.pttl(&fx.latch("r1")), 1, LATCH_TTL_MS, "the replay key");
    sub.assert_quiet(&fx.server, &fx.channel).await;
}

#[tokio::test]
async fn a_leaving_reader_takes_its_lease_with_it() {
    let fx = Fixture::new("rws-read-release-lease").await;
    assert_eq!(fx.read(30_000, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(5_000, B).await.unwrap(), TAKEN);
    assert_about(fx.pttl(&fx.name), 30_000, "the long reader's lease");
    assert_eq!(int(fx.read_release(A, 1, "r1", false).await.unwrap()), 0);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (B, "1")]));
    let b_left = fx.pttl(&fx.timeout(B, 1));
    assert_follows(fx.pttl(&fx.name), b_left, "the lock keeps B's lease");
}

#[tokio::test]
async fn the_last_reader_out_deletes_everything_cuts_the_claim_and_publishes_zero() {
    let fx = Fixture::new("rws-read-release-last").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert!(int(fx.write(LEASE_MS, B_W, 1).await.unwrap()) > 0);
    assert!(fx.pttl(&fx.claim) > CLAIM_WINDOW_MS);
    assert_eq!(
        int(fx.read_release(A, 1, "r1", false).await.unwrap()),
        2,
        "freed, and one subscriber told"
    );
    assert!(!fx.exists(&fx.name) && fx.timeouts().is_empty());
    assert_within(
        fx.pttl(&fx.claim),
        1,
        CLAIM_WINDOW_MS,
        "the claim is cut to the window",
    );
    assert_eq!(fx.replayed("r1"), Resp::Bulk(Some("1".into())));
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "0".to_owned()))
    );
    // The claimant is not held back by its own claim.
    assert_eq!(fx.write(LEASE_MS, B_W, 1).await.unwrap(), TAKEN);
}

#[tokio::test]
async fn readers_whose_holds_lapsed_keep_nothing_alive_when_the_last_live_one_leaves() {
    let fx = Fixture::new("rws-read-release-lapsed").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(LEASE_MS, B).await.unwrap(), TAKEN);
    assert_eq!(fx.read(LEASE_MS, B).await.unwrap(), TAKEN);
    // B's first hold lapsed, its second lives: B is alive, and keeps the lock.
    fx.cmd(&["DEL", &fx.timeout(B, 1)]);
    assert_eq!(int(fx.read_release(A, 1, "r1", false).await.unwrap()), 0);
    // B's last key lapses too: the next release frees the lock, B's field and keys included.
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    fx.cmd(&["DEL", &fx.timeout(B, 2)]);
    assert_eq!(int(fx.read_release(A, 1, "r2", false).await.unwrap()), 2);
    assert!(!fx.exists(&fx.name), "left: {:?}", fx.hash());
    assert!(fx.timeouts().is_empty());
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "0".to_owned()))
    );
}

/// A read release that keeps nothing (TTL 0) drops the reader's field and every timeout key of
/// it whatever its count (holds the client lost locally and the owner re-entered); the other
/// readers keep the lock.
#[tokio::test]
async fn a_read_release_keeping_nothing_drops_the_reader_whatever_its_count() {
    let fx = Fixture::new("rws-read-release-keep-nothing").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(30_000, B).await.unwrap(), TAKEN);
    assert_eq!(int(fx.read_release(A, 0, "r1", false).await.unwrap()), 0);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (B, "1")]));
    assert_eq!(fx.timeouts(), [fx.timeout(B, 1)], "A's timeout keys stay");
    assert_about(fx.pttl(&fx.name), 30_000, "B's lease");
    sub.assert_quiet(&fx.server, &fx.channel).await;

    // The last reader's, with two holds, frees the lock.
    assert_eq!(fx.read(LEASE_MS, B).await.unwrap(), TAKEN);
    assert_eq!(int(fx.read_release(B, 0, "r2", false).await.unwrap()), 2);
    assert!(!fx.exists(&fx.name), "a read hold was left behind");
    assert!(fx.timeouts().is_empty(), "timeout keys left behind");
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "0".to_owned()))
    );
}

#[tokio::test]
async fn a_read_release_under_the_owners_write_hold_keeps_the_write_lock() {
    let fx = Fixture::new("rws-read-release-under-write").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(int(fx.read_release(A, 1, "r1", false).await.unwrap()), 0);
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A_W, "1")]));
    assert!(fx.timeouts().is_empty());
    assert_eq!(fx.replayed("r1"), Resp::Bulk(Some("0".into())));
    sub.assert_quiet(&fx.server, &fx.channel).await;
}

#[tokio::test]
async fn a_read_release_by_a_non_reader_returns_nil_and_a_lapsed_readers_drops_its_field() {
    let fx = Fixture::new("rws-read-release-none").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(
        fx.read_release(A, 1, "r0", false).await.unwrap(),
        Value::Null,
        "free"
    );
    assert!(!fx.exists(&fx.name));
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(
        fx.read_release(B, 1, "r1", false).await.unwrap(),
        Value::Null
    );
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1")]));
    assert_eq!(fx.replayed("r1"), Resp::Bulk(None), "nothing to replay");
    // B's holds lapsed: its release is refused, and its stale field goes.
    fx.lapsed_reader(B, 2);
    assert_eq!(
        fx.read_release(B, 1, "r2", false).await.unwrap(),
        Value::Null
    );
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1")]));
    assert_eq!(fx.timeouts(), [fx.timeout(A, 1)]);
    // A writer's field is not a reader's.
    fx.cmd(&["DEL", &fx.name, &fx.timeout(A, 1)]);
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(
        fx.read_release(A, 1, "r3", false).await.unwrap(),
        Value::Null
    );
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A_W, "1")]));
    sub.assert_quiet(&fx.server, &fx.channel).await;
}

#[tokio::test]
async fn a_retried_read_release_replays_its_first_reply_and_a_first_send_reads_no_replay_key() {
    let fx = Fixture::new("rws-read-release-replay").await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(
        int(fx.read_release(A, LEASE_MS, "r1", false).await.unwrap()),
        0
    );
    assert_eq!(
        int(fx.read_release(A, LEASE_MS, "r1", true).await.unwrap()),
        0
    );
    assert_eq!(
        common::raw_holds(&fx.server, &fx.name, A),
        1,
        "the retry counted once"
    );
    // A first send does not read the key: a stale "0" left by another request is not its reply.
    fx.cmd(&["SET", &fx.latch("r2"), "0", "PX", "60000"]);
    assert_eq!(int(fx.read_release(A, 1, "r2", false).await.unwrap()), 1);
    assert!(!fx.exists(&fx.name));
    assert_eq!(
        int(fx.read_release(A, 1, "r2", true).await.unwrap()),
        1,
        "replayed"
    );
}

#[tokio::test]
async fn a_read_release_on_a_string_is_wrongtype_and_leaves_it() {
    let fx = Fixture::new("rws-read-release-string").await;
    fx.cmd(&["SET", &fx.name, "x"]);
    assert_error(fx.read_release(A, 1, "r1", false).await, "WRONGTYPE");
    assert_eq!(fx.get(&fx.name).as_deref(), Some("x"));
    assert_error(fx.write_release(A_W, 1, "w1", false).await, "WRONGTYPE");
}

// ---------------------------------------------------------------- write release

#[tokio::test]
async fn a_write_release_with_holds_left_returns_zero_and_keeps_what_the_read_holds_need() {
    let fx = Fixture::new("rws-write-release-partial").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(
        int(fx.write_release(A_W, 3_000, "w1", false).await.unwrap()),
        0
    );
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A_W, "1")]));
    assert_about(
        fx.pttl(&fx.name),
        3_000,
        "what the remaining write hold needs",
    );
    assert_eq!(fx.replayed("w1"), Resp::Bulk(Some("0".into())));
    // With a read hold of its own besides, the lock keeps the longer of the two.
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.read(30_000, A).await.unwrap(), TAKEN);
    assert_eq!(
        int(fx.write_release(A_W, 3_000, "w2", false).await.unwrap()),
        0
    );
    assert_about(fx.pttl(&fx.name), 30_000, "the read hold's lease");
    sub.assert_quiet(&fx.server, &fx.channel).await;
}

#[tokio::test]
async fn the_last_write_release_frees_the_lock_cuts_the_claim_and_publishes_one() {
    let fx = Fixture::new("rws-write-release-last").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    fx.set_claim(&format!("1:{B_W}"), Some(60_000));
    assert_eq!(int(fx.write_release(A_W, 1, "w1", false).await.unwrap()), 2);
    assert!(!fx.exists(&fx.name));
    assert_within(fx.pttl(&fx.claim), 1, CLAIM_WINDOW_MS, "the claim is cut");
    assert_eq!(fx.replayed("w1"), Resp::Bulk(Some("1".into())));
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "1".to_owned()))
    );
    assert_eq!(
        int(fx.write_release(A_W, 1, "w1", true).await.unwrap()),
        1,
        "the replay key says freed"
    );
}

#[tokio::test]
async fn the_last_write_release_of_a_writer_that_reads_downgrades_and_wakes_everyone() {
    let fx = Fixture::new("rws-write-release-downgrade").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.read(30_000, A).await.unwrap(), TAKEN);
    assert_eq!(int(fx.write_release(A_W, 1, "w1", false).await.unwrap()), 2);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1")]));
    let a_left = fx.pttl(&fx.timeout(A, 1));
    assert_follows(fx.pttl(&fx.name), a_left, "the read hold's lease");
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "1".to_owned()))
    );
    // Other readers come in; a writer waits.
    assert_eq!(fx.read(LEASE_MS, B).await.unwrap(), TAKEN);
    assert!(int(fx.write(LEASE_MS, C_W, 0).await.unwrap()) > 0);
}

/// A write release that keeps nothing (TTL 0) drops the writer's field whatever its count (a
/// hold the client lost locally and the owner re-entered): the lock is freed, or turned into a
/// read lock when the writer reads too, and everyone is woken.
#[tokio::test]
async fn a_write_release_keeping_nothing_drops_the_writer_whatever_its_count() {
    let fx = Fixture::new("rws-write-release-keep-nothing").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    fx.set_claim(&format!("1:{B_W}"), Some(60_000));
    assert_eq!(int(fx.write_release(A_W, 0, "w1", false).await.unwrap()), 2);
    assert!(!fx.exists(&fx.name), "a write hold was left behind");
    assert_within(fx.pttl(&fx.claim), 1, CLAIM_WINDOW_MS, "the claim is cut");
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "1".to_owned()))
    );

    // With a read hold of its own, the lock becomes a read lock.
    fx.cmd(&["DEL", &fx.claim]);
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.read(30_000, A).await.unwrap(), TAKEN);
    assert_eq!(int(fx.write_release(A_W, 0, "w2", false).await.unwrap()), 2);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1")]));
    assert_about(fx.pttl(&fx.name), 30_000, "the read hold's lease");
}

#[tokio::test]
async fn a_write_release_by_a_non_writer_returns_nil_and_changes_nothing() {
    let fx = Fixture::new("rws-write-release-none").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(
        fx.write_release(A_W, 1, "w0", false).await.unwrap(),
        Value::Null,
        "free"
    );
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(
        fx.write_release(A_W, 1, "w1", false).await.unwrap(),
        Value::Null,
        "read-locked, even by the same owner"
    );
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1")]));
    fx.cmd(&["DEL", &fx.name, &fx.timeout(A, 1)]);
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(
        fx.write_release(B_W, 1, "w2", false).await.unwrap(),
        Value::Null
    );
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A_W, "1")]));
    for request in ["w0", "w1", "w2"] {
        assert_eq!(fx.replayed(request), Resp::Bulk(None));
    }
    sub.assert_quiet(&fx.server, &fx.channel).await;
}

// ---------------------------------------------------------------- force release

#[tokio::test]
async fn force_release_deletes_the_lock_in_its_own_mode_only_with_every_timeout_key() {
    let fx = Fixture::new("rws-force").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(
        int(fx.force_release("read").await.unwrap()),
        0,
        "nothing there"
    );

    // Read-locked: the write side's force does nothing; the read side's deletes all.
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(LEASE_MS, B).await.unwrap(), TAKEN);
    assert!(int(fx.write(LEASE_MS, C_W, 1).await.unwrap()) > 0);
    assert_eq!(int(fx.force_release("write").await.unwrap()), 0);
    assert_eq!(fx.timeouts().len(), 2);
    sub.assert_quiet(&fx.server, &fx.channel).await;
    assert_eq!(int(fx.force_release("read").await.unwrap()), 1);
    assert!(!fx.exists(&fx.name) && fx.timeouts().is_empty());
    assert_within(fx.pttl(&fx.claim), 1, CLAIM_WINDOW_MS, "the claim is cut");
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "0".to_owned()))
    );

    fx.cmd(&["DEL", &fx.claim]);
    // Write-locked by a writer that also reads: the read side's force does nothing (Redisson's
    // rule: the mode is `write`); the write side's deletes the writer's read holds too.
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(int(fx.force_release("read").await.unwrap()), 0);
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A, "1"), (A_W, "1")]));
    sub.assert_quiet(&fx.server, &fx.channel).await;
    assert_eq!(int(fx.force_release("write").await.unwrap()), 1);
    assert!(!fx.exists(&fx.name) && fx.timeouts().is_empty());
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "1".to_owned()))
    );

    // Another type's hash has no mode: left alone. A string: WRONGTYPE, left alone.
    fx.cmd(&["HSET", &fx.name, C, "1"]);
    assert_eq!(int(fx.force_release("read").await.unwrap()), 0);
    assert_eq!(int(fx.force_release("write").await.unwrap()), 0);
    assert_eq!(fx.hash(), pairs(&[(C, "1")]));
    fx.cmd(&["DEL", &fx.name]);
    fx.cmd(&["SET", &fx.name, "x"]);
    assert_error(fx.force_release("read").await, "WRONGTYPE");
    assert!(fx.exists(&fx.name));
}

// ---------------------------------------------------------------- renewal

#[tokio::test]
async fn renewal_extends_only_the_renewed_readers_own_live_keys() {
    let fx = Fixture::new("rws-renew").await;
    assert_eq!(fx.read(2_000, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(2_000, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(3_000, B).await.unwrap(), TAKEN);
    // A's first hold lapsed: renewal never brings it back.
    fx.cmd(&["DEL", &fx.timeout(A, 1)]);
    let renewed = fx.renew(20_000, &[(&fx.name, A)]).await.unwrap();
    assert_eq!(ints(renewed), [1]);
    assert!(!fx.exists(&fx.timeout(A, 1)), "a lapsed hold came back");
    assert_about(fx.pttl(&fx.timeout(A, 2)), 20_000, "A's live hold");
    assert_within(
        fx.pttl(&fx.timeout(B, 1)),
        1,
        3_000,
        "B's key is not A's to renew",
    );
    assert_about(
        fx.pttl(&fx.name),
        20_000,
        "the lock covers A's renewed hold",
    );
    // A shorter renewal shortens nothing.
    assert_eq!(ints(fx.renew(5_000, &[(&fx.name, A)]).await.unwrap()), [1]);
    assert_about(
        fx.pttl(&fx.timeout(A, 2)),
        20_000,
        "A's hold after a shorter renewal",
    );
    assert_about(
        fx.pttl(&fx.name),
        20_000,
        "the lock after a shorter renewal",
    );
}

#[tokio::test]
async fn renewal_of_readers_that_hold_nothing_answers_zero_and_creates_nothing() {
    let fx = Fixture::new("rws-renew-none").await;
    let other = format!("{}:other", fx.name);
    let string = format!("{}:string", fx.name);
    fx.cmd(&["SET", &string, "x"]);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    fx.lapsed_reader(C, 1);
    // One call for many locks (all in one slot here): a live reader, a reader of a lock that is
    // not there, a lapsed reader, a reader that never held, a key of another type.
    let renewed = fx
        .renew(
            30_000,
            &[
                (&fx.name, A),
                (&other, A),
                (&fx.name, C),
                (&fx.name, B),
                (&string, A),
            ],
        )
        .await
        .unwrap();
    assert_eq!(ints(renewed), [1, 0, 0, 0, 0]);
    assert!(!fx.exists(&other));
    assert!(!fx.exists(&fx.timeout(C, 1)) && !fx.exists(&fx.timeout(B, 1)));
    assert_eq!(fx.get(&string).as_deref(), Some("x"));
    assert_about(fx.pttl(&fx.timeout(A, 1)), 30_000, "the live reader");
}

// ---------------------------------------------------------------- shutdown release

#[tokio::test]
async fn abandoning_a_reader_among_others_leaves_the_lock_to_them() {
    let fx = Fixture::new("rws-abandon-reader").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.read(30_000, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(30_000, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(5_000, B).await.unwrap(), TAKEN);
    assert_eq!(
        int(fx.abandon(A).await.unwrap()),
        1,
        "every hold of A's at once"
    );
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (B, "1")]));
    assert_eq!(fx.timeouts(), [fx.timeout(B, 1)]);
    let b_left = fx.pttl(&fx.timeout(B, 1));
    assert_follows(fx.pttl(&fx.name), b_left, "B's lease");
    sub.assert_quiet(&fx.server, &fx.channel).await;
    assert_eq!(int(fx.abandon(A).await.unwrap()), 0, "A holds nothing now");
}

#[tokio::test]
async fn abandoning_the_last_reader_frees_the_lock_and_publishes_zero_on_its_own_channel() {
    let fx = Fixture::new("rws-abandon-last-reader").await;
    let plain = common::lock_channel(&fx.name);
    let mut sub = RawSubscriber::subscribe(&fx.server, &[&fx.channel, &plain]).await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert!(int(fx.write(LEASE_MS, B_W, 1).await.unwrap()) > 0);
    assert_eq!(int(fx.abandon(A).await.unwrap()), 2);
    assert!(!fx.exists(&fx.name) && fx.timeouts().is_empty());
    assert_within(fx.pttl(&fx.claim), 1, CLAIM_WINDOW_MS, "the claim is cut");
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "0".to_owned()))
    );
    sub.assert_quiet(&fx.server, &plain).await;
}

#[tokio::test]
async fn abandoning_a_writer_that_reads_leaves_its_read_holds_then_abandoning_those_frees() {
    let fx = Fixture::new("rws-abandon-writer-reads").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.read(30_000, A).await.unwrap(), TAKEN);
    // The write side first: a downgrade to the owner's read holds, waking everyone.
    assert_eq!(int(fx.abandon(A_W).await.unwrap()), 1);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1")]));
    let a_left = fx.pttl(&fx.timeout(A, 1));
    assert_follows(fx.pttl(&fx.name), a_left, "the read hold's lease");
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "1".to_owned()))
    );
    // Then the read side: freed.
    assert_eq!(int(fx.abandon(A).await.unwrap()), 2);
    assert!(!fx.exists(&fx.name) && fx.timeouts().is_empty());
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "0".to_owned()))
    );

    // The other order: the read side first leaves the write lock; the write side then frees.
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.read(30_000, A).await.unwrap(), TAKEN);
    assert_eq!(int(fx.abandon(A).await.unwrap()), 1);
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A_W, "1")]));
    assert!(fx.timeouts().is_empty());
    sub.assert_quiet(&fx.server, &fx.channel).await;
    assert_eq!(int(fx.abandon(A_W).await.unwrap()), 2);
    assert!(!fx.exists(&fx.name));
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "1".to_owned()))
    );
}

#[tokio::test]
async fn abandoning_a_writer_whose_read_holds_lapsed_frees_the_lock() {
    let fx = Fixture::new("rws-abandon-writer-lapsed").await;
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    fx.cmd(&["DEL", &fx.timeout(A, 1)]);
    assert_eq!(int(fx.abandon(A_W).await.unwrap()), 2);
    assert!(!fx.exists(&fx.name), "left: {:?}", fx.hash());
}

// ---------------------------------------------------------------- inspect

#[tokio::test]
async fn inspect_sees_the_read_and_the_write_side_as_redisson_does() {
    let fx = Fixture::new("rws-inspect").await;
    assert_eq!(fx.inspect(A, "read").await, [0, -2, 0]);
    assert_eq!(fx.inspect(A_W, "write").await, [0, -2, 0]);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    let read = fx.inspect(A, "read").await;
    assert_eq!((read[0], read[2]), (1, 2), "read-locked, A holds 2");
    assert_about(read[1], LEASE_MS, "the lock's TTL");
    assert_eq!(fx.inspect(B, "read").await[2], 0);
    assert_eq!(fx.inspect(A_W, "write").await[0], 0, "not write-locked");
    fx.cmd(&["DEL", &fx.name]);
    assert_eq!(fx.write(LEASE_MS, A_W, 0).await.unwrap(), TAKEN);
    let write = fx.inspect(A_W, "write").await;
    assert_eq!((write[0], write[2]), (1, 1), "write-locked, A holds 1");
    assert_eq!(
        fx.inspect(A, "read").await[0],
        0,
        "a writer alone: not read-locked"
    );
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(
        fx.inspect(B, "read").await[0],
        1,
        "a writer that reads: read-locked"
    );
}

// ---------------------------------------------------------------- Redisson's scripts

/// Redisson's read acquire (`RedissonReadLock.tryLockInnerAsync`), rebuilt from its documented
/// steps: KEYS = [name, the owner's timeout prefix `{name}:<field>:rwlock_timeout`], ARGV =
/// [lease, reader field, writer field]. It ignores claims.
const REDISSON_READ: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1)
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local key = KEYS[2] .. ':' .. n
    redis.call('set', key, 1)
    redis.call('pexpire', key, ARGV[1])
    local remain = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(remain, ARGV[1]))
    return nil
end
return redis.call('pttl', KEYS[1])
"#;

/// Redisson's read unlock (`RedissonReadLock.unlockInnerAsync`), rebuilt: KEYS = [name, channel,
/// the owner's timeout prefix, the key prefix `{name}`, unlock latch], ARGV = [0, reader field,
/// publish command, latch TTL]. The TTL of what remains is the longest PTTL among every
/// numeric field's timeout keys.
const REDISSON_READ_UNLOCK: &str = r#"
local replay = redis.call('get', KEYS[5])
if replay ~= false then return tonumber(replay) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call(ARGV[3], KEYS[2], ARGV[1])
    redis.call('set', KEYS[5], 1, 'px', ARGV[4])
    return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if counter == 0 then redis.call('hdel', KEYS[1], ARGV[2]) end
redis.call('del', KEYS[3] .. ':' .. (counter + 1))
if redis.call('hlen', KEYS[1]) > 1 then
    local maxRemainTime = -3
    local keys = redis.call('hkeys', KEYS[1])
    for _, key in ipairs(keys) do
        local count = tonumber(redis.call('hget', KEYS[1], key))
        if type(count) == 'number' then
            for i = count, 1, -1 do
                local remain = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i)
                maxRemainTime = math.max(remain, maxRemainTime)
            end
        end
    end
    if maxRemainTime > 0 then
        redis.call('pexpire', KEYS[1], maxRemainTime)
        redis.call('set', KEYS[5], 0, 'px', ARGV[4])
        return 0
    end
    if mode == 'write' then
        redis.call('set', KEYS[5], 0, 'px', ARGV[4])
        return 0
    end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[4])
return 1
"#;

/// Redisson's write acquire (`RedissonWriteLock.tryLockInnerAsync`), rebuilt: KEYS = [name],
/// ARGV = [lease, writer field]. A re-entry adds the lease to what is left.
const REDISSON_WRITE: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write')
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local remain = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], remain + ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
"#;

/// Redisson's write unlock (`RedissonWriteLock.unlockInnerAsync`), rebuilt: KEYS = [name,
/// channel, unlock latch], ARGV = [1, lease, writer field, publish command, latch TTL].
const REDISSON_WRITE_UNLOCK: &str = r#"
local replay = redis.call('get', KEYS[3])
if replay ~= false then return tonumber(replay) end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
    redis.call(ARGV[4], KEYS[2], ARGV[1])
    redis.call('set', KEYS[3], 1, 'px', ARGV[5])
    return nil
end
if mode == 'write' then
    if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
    local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
    if counter > 0 then
        redis.call('pexpire', KEYS[1], ARGV[2])
        redis.call('set', KEYS[3], 0, 'px', ARGV[5])
        return 0
    end
    redis.call('hdel', KEYS[1], ARGV[3])
    if redis.call('hlen', KEYS[1]) == 1 then
        redis.call('del', KEYS[1])
        redis.call(ARGV[4], KEYS[2], ARGV[1])
    else
        redis.call('hset', KEYS[1], 'mode', 'read')
    end
    redis.call('set', KEYS[3], 1, 'px', ARGV[5])
    return 1
end
return nil
"#;

// Two threads of one Java client: their reader and writer fields.
owner!(JAVA_1, JAVA_1_W = "5b6c2a1e-9d3f-4e7a-8c1b-2f0e4d6a8b9c:1");
/// The second thread's reader field.
const JAVA_2: &str = "5b6c2a1e-9d3f-4e7a-8c1b-2f0e4d6a8b9c:2";

impl Fixture {
    /// `{name}`: the prefix of every timeout key (Redisson's `getKeyPrefix`).
    fn key_prefix(&self) -> String {
        format!("{{{}}}", self.name)
    }

    fn timeout_prefix(&self, field: &str) -> String {
        format!("{}:{field}:rwlock_timeout", self.key_prefix())
    }

    async fn java_read(&self, lease_ms: i64, reader: &str) -> Value {
        let writer = format!("{reader}:write");
        self.eval(
            REDISSON_READ,
            &[&self.name, &self.timeout_prefix(reader)],
            &[&lease_ms.to_string(), reader, &writer],
        )
        .await
        .expect("Redisson's read acquire")
    }

    async fn java_read_unlock(&self, reader: &str, request: &str) -> Value {
        self.eval(
            REDISSON_READ_UNLOCK,
            &[
                &self.name,
                &self.channel,
                &self.timeout_prefix(reader),
                &self.key_prefix(),
                &self.latch(request),
            ],
            &["0", reader, "PUBLISH", &LATCH_TTL_MS.to_string()],
        )
        .await
        .expect("Redisson's read unlock")
    }

    async fn java_write(&self, lease_ms: i64, writer: &str) -> Value {
        self.eval(
            REDISSON_WRITE,
            &[&self.name],
            &[&lease_ms.to_string(), writer],
        )
        .await
        .expect("Redisson's write acquire")
    }

    async fn java_write_unlock(&self, writer: &str, request: &str) -> Value {
        self.eval(
            REDISSON_WRITE_UNLOCK,
            &[&self.name, &self.channel, &self.latch(request)],
            &[
                "1",
                &LEASE_MS.to_string(),
                writer,
                "PUBLISH",
                &LATCH_TTL_MS.to_string(),
            ],
        )
        .await
        .expect("Redisson's write unlock")
    }
}

#[tokio::test]
async fn a_relock_reader_and_a_redisson_writer_exclude_each_other() {
    let fx = Fixture::new("rws-java-writer").await;
    let mut sub = fx.subscribe().await;
    // relock reads: Redisson's writer is refused.
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert!(int(fx.java_write(LEASE_MS, JAVA_1_W).await) > 0);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "1")]));
    // relock's last reader out frees it and its "0" is on Redisson's channel.
    assert_eq!(int(fx.read_release(A, 1, "r1", false).await.unwrap()), 2);
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "0".to_owned()))
    );
    // Redisson writes: relock's reader and writer are refused.
    assert_eq!(fx.java_write(LEASE_MS, JAVA_1_W).await, TAKEN);
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (JAVA_1_W, "1")]));
    assert!(int(fx.read(LEASE_MS, A).await.unwrap()) > 0);
    assert!(int(fx.write(LEASE_MS, A_W, 1).await.unwrap()) > 0);
    assert!(fx.timeouts().is_empty() && !fx.exists(&fx.claim));
    // Redisson's write unlock wakes relock's waiters with "1", and relock reads again.
    assert_eq!(int(fx.java_write_unlock(JAVA_1_W, "j1").await), 1);
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "1".to_owned()))
    );
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
}

#[tokio::test]
async fn a_redisson_reader_and_a_relock_writer_exclude_each_other() {
    let fx = Fixture::new("rws-java-reader").await;
    let mut sub = fx.subscribe().await;
    // Redisson reads: relock's writer waits, claiming the lock.
    assert_eq!(fx.java_read(LEASE_MS, JAVA_1).await, TAKEN);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (JAVA_1, "1")]));
    assert!(fx.exists(&fx.timeout(JAVA_1, 1)));
    assert!(int(fx.write(LEASE_MS, A_W, 1).await.unwrap()) > 0);
    assert_eq!(fx.claimant(), Resp::Bulk(Some(format!("1:{A_W}"))));
    // A new relock reader stays out; Redisson's readers ignore the claim (documented).
    assert!(int(fx.read(LEASE_MS, B).await.unwrap()) > 0);
    assert_eq!(fx.java_read(LEASE_MS, JAVA_2).await, TAKEN);
    // Redisson's readers leave; the last one's unlock frees the lock and wakes relock's writer.
    assert_eq!(int(fx.java_read_unlock(JAVA_2, "j2").await), 0);
    assert_eq!(int(fx.java_read_unlock(JAVA_1, "j1").await), 1);
    assert!(!fx.exists(&fx.name) && fx.timeouts().is_empty());
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "0".to_owned()))
    );
    assert_eq!(fx.write(LEASE_MS, A_W, 1).await.unwrap(), TAKEN);
    assert!(!fx.exists(&fx.claim), "the writer spent its claim");
    // relock writes: Redisson's reader and writer are refused.
    assert!(int(fx.java_read(LEASE_MS, JAVA_1).await) > 0);
    assert!(int(fx.java_write(LEASE_MS, JAVA_1_W).await) > 0);
    assert_eq!(fx.hash(), pairs(&[("mode", "write"), (A_W, "1")]));
    assert!(fx.timeouts().is_empty());
    // relock's write release wakes Redisson's waiters with its write unlock message.
    assert_eq!(int(fx.write_release(A_W, 1, "w1", false).await.unwrap()), 2);
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "1".to_owned()))
    );
    assert_eq!(fx.java_read(LEASE_MS, JAVA_1).await, TAKEN);
}

#[tokio::test]
async fn a_relock_readers_release_keeps_the_lock_alive_for_redisson_readers() {
    let fx = Fixture::new("rws-java-ttl").await;
    assert_eq!(fx.read(60_000, A).await.unwrap(), TAKEN);
    assert_eq!(fx.java_read(20_000, JAVA_1).await, TAKEN);
    assert_eq!(fx.java_read(20_000, JAVA_1).await, TAKEN);
    assert_eq!(fx.java_read(5_000, JAVA_2).await, TAKEN);
    // Redisson's timeout keys are relock's: one per hold, each with its lease.
    assert_about(
        fx.pttl(&fx.timeout(JAVA_1, 2)),
        20_000,
        "Java 1's second hold",
    );
    assert_about(fx.pttl(&fx.name), 60_000, "the lock keeps A's lease");
    // A leaves: the lock lives on for the longest Redisson hold, no longer.
    assert_eq!(int(fx.read_release(A, 1, "r1", false).await.unwrap()), 0);
    let longest = fx
        .pttl(&fx.timeout(JAVA_1, 1))
        .max(fx.pttl(&fx.timeout(JAVA_1, 2)));
    assert_follows(fx.pttl(&fx.name), longest, "Java 1's lease");
    assert_eq!(
        fx.hash(),
        pairs(&[("mode", "read"), (JAVA_1, "2"), (JAVA_2, "1")])
    );
    // Java 1's holds lapse (deleted here): the lock follows Java 2's.
    assert_eq!(fx.read(60_000, A).await.unwrap(), TAKEN);
    fx.cmd(&["DEL", &fx.timeout(JAVA_1, 1), &fx.timeout(JAVA_1, 2)]);
    assert_eq!(int(fx.read_release(A, 1, "r2", false).await.unwrap()), 0);
    let java_2 = fx.pttl(&fx.timeout(JAVA_2, 1));
    assert_follows(fx.pttl(&fx.name), java_2, "Java 2's lease");
}

#[tokio::test]
async fn redissons_read_unlock_after_relock_readers_leaves_a_correct_state() {
    let fx = Fixture::new("rws-java-read-unlock").await;
    let mut sub = fx.subscribe().await;
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert_eq!(fx.read(30_000, B).await.unwrap(), TAKEN);
    assert_eq!(fx.java_read(5_000, JAVA_1).await, TAKEN);
    // Redisson leaves first: the lock's TTL comes from relock's timeout keys.
    assert_eq!(int(fx.java_read_unlock(JAVA_1, "j1").await), 0);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (A, "2"), (B, "1")]));
    let b_left = fx.pttl(&fx.timeout(B, 1));
    assert_follows(fx.pttl(&fx.name), b_left, "B's lease");
    assert_eq!(fx.timeouts().len(), 3, "relock's keys are untouched");
    sub.assert_quiet(&fx.server, &fx.channel).await;

    // Redisson joins again; relock's readers all leave; Redisson's unlock is the last.
    assert_eq!(fx.java_read(5_000, JAVA_1).await, TAKEN);
    for (field, request) in [(A, "a1"), (A, "a2"), (B, "b1")] {
        let reply = fx.read_release(field, LEASE_MS, request, false).await;
        assert_eq!(int(reply.unwrap()), 0);
    }
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (JAVA_1, "1")]));
    assert_eq!(fx.timeouts(), [fx.timeout(JAVA_1, 1)]);
    let java_left = fx.pttl(&fx.timeout(JAVA_1, 1));
    assert_follows(fx.pttl(&fx.name), java_left, "Java's lease");
    assert_eq!(int(fx.java_read_unlock(JAVA_1, "j2").await), 1);
    assert!(!fx.exists(&fx.name), "left: {:?}", fx.hash());
    assert!(fx.timeouts().is_empty());
    assert_eq!(
        sub.next_message(Duration::from_secs(5)).await,
        Some((fx.channel.clone(), "0".to_owned()))
    );
    // relock takes it afresh, in either mode.
    assert_eq!(fx.write(LEASE_MS, A_W, 1).await.unwrap(), TAKEN);
}

#[tokio::test]
async fn a_redisson_writer_downgrades_and_relock_readers_share_with_its_read_hold() {
    let fx = Fixture::new("rws-java-downgrade").await;
    assert_eq!(fx.java_write(LEASE_MS, JAVA_1_W).await, TAKEN);
    assert_eq!(fx.java_read(30_000, JAVA_1).await, TAKEN);
    assert!(int(fx.read(LEASE_MS, A).await.unwrap()) > 0, "write-locked");
    // Redisson's write unlock turns it into a read lock (and publishes nothing: Redisson).
    assert_eq!(int(fx.java_write_unlock(JAVA_1_W, "j1").await), 1);
    assert_eq!(fx.hash(), pairs(&[("mode", "read"), (JAVA_1, "1")]));
    assert_eq!(fx.read(LEASE_MS, A).await.unwrap(), TAKEN);
    assert!(int(fx.write(LEASE_MS, B_W, 1).await.unwrap()) > 0);
    // relock's reader leaves: the lock keeps Redisson's read hold's lease.
    assert_eq!(int(fx.read_release(A, 1, "r1", false).await.unwrap()), 0);
    let java_left = fx.pttl(&fx.timeout(JAVA_1, 1));
    assert_follows(fx.pttl(&fx.name), java_left, "Java's lease");
    assert_eq!(int(fx.java_read_unlock(JAVA_1, "j2").await), 1);
    assert!(!fx.exists(&fx.name) && fx.timeouts().is_empty());
    assert_eq!(fx.write(LEASE_MS, B_W, 1).await.unwrap(), TAKEN);
}
