//! Fenced writes: Redis data that refuses a write from a lock holder whose lease is over.
//!
//! Each operation is one script: the check of `lua/fence/check.lua`, then the operation's own
//! part (`lua/fence/{set,hset,get}.lua`, or a user's Lua body), run atomically. The check takes
//! the fence key and the token off the end of `KEYS` and `ARGV`, refuses a token older than the
//! one stored at the fence key, and stores a passing one, which never lowers it. The rule, why reads are fenced
//! too, the keys on a cluster and how to fence a store outside Redis are told once, on [`Fence`],
//! where users read them.

use std::sync::Arc;

use fred::bytes_utils::Str;
use fred::types::{FromValue, Value};

use crate::error::{Error, Result, Shown};
use crate::names::prefixed;
use crate::shared::Shared;

mod scripts;

/// A fence on one resource: reads and writes of Redis data that pass only with a fencing token at
/// least as new as any the resource has seen, so a lock holder whose lease is over cannot write
/// after a newer holder. Made by [`Client::fence`](crate::Client::fence); cheap to clone.
///
/// A lock's lease can end while its holder still runs: a long GC pause, a stalled VM or a network
/// partition outlasts the lease, another owner takes the lock, and the first holder wakes up and
/// writes, believing it still holds the lock. [`LockGuard::lost`](crate::LockGuard::lost) tells
/// the holder, but only once it looks; a write already on its way is not stopped by it. Fencing
/// tokens, as Martin Kleppmann describes them, make the *resource* refuse that write: each new
/// holder of a fenced lock gets a token one higher than the last holder's, it presents the token
/// with every write, and the resource refuses a token older than one it has already seen.
///
/// A `Fence` is that check for data in Redis. It takes tokens as plain `u64`s, so it works with
/// any source of them, but they must all come from **one counter per resource**: the fenced lock
/// that guards it. Each operation presenting `token` runs as one Lua script, atomically:
///
/// - `token` **passes** when it is at least the highest token the resource has seen (an equal
///   one passes: one holder writes many times). It is then recorded as seen (seen never goes
///   down), and the operation is applied.
/// - Otherwise nothing is applied and the call fails with [`Error::StaleToken`], which names the
///   highest token seen and the one presented: a newer holder has used the resource, so this
///   holder's lease is over. Stop: a retry would be refused too.
///
/// ```no_run
/// # async fn run(client: relock::Client, token: u64) -> relock::Result<()> {
/// // `token` came with the lock on "orders:42" (from a fenced lock's guard).
/// let fence = client.fence("orders:42");
/// let count: Option<i64> = fence.get(token, "orders:42").await?; // a fenced read
/// match fence.set(token, "orders:42", count.unwrap_or(0) + 1).await {
///     Ok(()) => {}
///     Err(e) if e.is_stale_token() => {
///         // A newer holder has used "orders:42": this holder's lease is over; nothing was written.
///     }
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
///
/// # Why reads are fenced too
///
/// A read-modify-write (read a counter, write the counter plus one) is only safe if its *read* is
/// fenced as well. Holder A (token 5) reads 10 and is paused past its lease; B (token 6) takes the
/// lock and reads 10 too. If A now wakes and writes 11 before B writes, a fence on writes alone
/// accepts it (the highest token seen is still 5), and then accepts B's 11 as well: one increment
/// is lost, and no write was ever refused. [`Fence::get`] records its token like a write does, so
/// B's read raises the highest seen to 6 *before* B computes anything, and A's late write is
/// refused. Read through the fence whatever a fenced write is computed from.
///
/// # Keys, and Redis Cluster
///
/// The highest token seen of resource `<resource>` is a string at `relock_fence:{<resource>}`
/// (a resource that holds a `{tag}` of its own keeps it: `relock_fence:<resource>`). It has no
/// TTL: it must last as long as the data it guards. Deleting it lets any token pass again, so
/// delete it only with the data, once no holder of the lock can still write.
///
/// Every key an operation touches goes into one script with the fence key, so on a cluster they
/// must all hash to the fence key's slot. A resource named like its data key guards that key as
/// it is: `{orders:42}` and `orders:42` hash alike, so `client.fence("orders:42")` fences the key
/// `orders:42`. Other keys need the resource as their tag: `{orders:42}:lines`. A key in another
/// slot fails with [`Error::Redis`] and nothing is applied: Redis's own `CROSSSLOT` error, or
/// fred's refusal to send keys that live on different nodes.
///
/// Only writes made through the fence are checked: a plain `SET` on the same key bypasses it.
///
/// # Fencing a store outside Redis
///
/// The rule carries to any store that can compare and write in one step. In SQL, keep the highest
/// token seen beside the data, in a `fence_token` column (0 for a new row), and make each write
/// conditional on it:
///
/// ```sql
/// UPDATE accounts
///    SET balance = $balance, fence_token = $token
///  WHERE id = $id AND fence_token <= $token
/// ```
///
/// One row updated: the write passed and raised the row's token. Zero rows: the token is stale
/// (or there is no such row), and nothing was written. A fenced read is the same statement
/// setting only `fence_token`, with `RETURNING balance`; a store that does the read-modify-write
/// in one statement (`SET balance = balance + $delta, fence_token = $token WHERE ...`) needs no
/// fenced read. `examples/fenced_store.rs` runs this rule on an in-process table.
///
/// An object store with conditional writes does the same with the object's version: keep the
/// token in the object (or its metadata), read the object and its ETag (S3) or generation (GCS),
/// stop if its token is newer than yours, and write the new object, with your token, under
/// `If-Match: <etag>` (`x-goog-if-generation-match: <generation>`). A `412 Precondition Failed`
/// means someone wrote in between: read again, and stop if their token is newer.
#[derive(Clone)]
pub struct Fence {
    shared: Arc<Shared>,
    resource: String,
    /// The fence key, or why the resource was refused.
    key: std::result::Result<Str, Error>,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("resource", &self.resource)
            .finish()
    }
}

impl Fence {
    pub(crate) fn new(shared: Arc<Shared>, resource: String) -> Fence {
        Fence {
            key: fence_key(&resource),
            shared,
            resource,
        }
    }

    /// The resource's name.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The highest token the resource has seen, 0 when none.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty resource name, [`Error::WrongType`] when the fence
    /// key holds another type, [`Error::Redis`] when Redis failed or the fence key holds
    /// something other than a token, [`Error::Closed`] after shutdown.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn seen(&self) -> Result<u64> {
        let key = self.ready()?;
        scripts::seen(&self.shared.redis, key).await
    }

    /// Sets `key` to `value`, as `SET` does (any TTL is dropped), if `token` passes.
    ///
    /// # Errors
    ///
    /// [`Error::StaleToken`] when a newer token has been seen: nothing was written.
    /// [`Error::InvalidArgument`] for token 0, an empty key or a bad resource name, before any
    /// I/O.
    /// [`Error::WrongType`] when the fence key holds another type. [`Error::Redis`] when Redis
    /// failed (on a cluster, for a key outside the fence key's slot: see [`Fence`]);
    /// [`Error::Closed`] after shutdown.
    ///
    /// A connection that broke with the script in flight leaves unknown whether it ran; sending
    /// the same write with the same token again is safe (an equal token passes).
    ///
    /// # Cancel safety
    ///
    /// A call dropped after its script was sent may or may not have written, as with a broken
    /// connection.
    pub async fn set(&self, token: u64, key: &str, value: impl Into<Value>) -> Result<()> {
        let fence = self.ready_for(token, &[key])?;
        scripts::set(&self.shared.redis, fence, token, key, value.into()).await
    }

    /// Sets `field` of the hash `key` to `value`, as `HSET` does, if `token` passes.
    ///
    /// # Errors
    ///
    /// As [`set`](Self::set), and [`Error::WrongType`] when `key` is not a hash (the token is
    /// recorded all the same: it passed).
    ///
    /// # Cancel safety
    ///
    /// As [`set`](Self::set).
    pub async fn hset(
        &self,
        token: u64,
        key: &str,
        field: &str,
        value: impl Into<Value>,
    ) -> Result<()> {
        let fence = self.ready_for(token, &[key])?;
        scripts::hset(&self.shared.redis, fence, token, key, field, value.into()).await
    }

    /// Reads `key`, as `GET` does, if `token` passes, and records the token: a fenced read, so
    /// that no older holder can write after it (see [why reads are fenced too](Fence#why-reads-are-fenced-too)). A missing
    /// key reads as nil (`Option::None`).
    ///
    /// # Errors
    ///
    /// As [`set`](Self::set), and [`Error::WrongType`] when `key` is not a string (the token is
    /// recorded all the same: it passed). [`Error::Redis`] when the value does not convert to
    /// `R`.
    ///
    /// # Cancel safety
    ///
    /// A call dropped after its script was sent may or may not have recorded its token.
    pub async fn get<R: FromValue>(&self, token: u64, key: &str) -> Result<R> {
        let fence = self.ready_for(token, &[key])?;
        let value = scripts::get(&self.shared.redis, fence, token, key).await?;
        self.convert(value)
    }

    /// Runs the Lua `body` with its own `keys` and `args` if `token` passes, and returns its
    /// reply: any fenced operation of your own, such as a read-modify-write in one step.
    ///
    /// The body runs in the same script, after the check: it sees `KEYS` and `ARGV` as `keys`
    /// and `args` (the fence key and token are taken off before it runs), and `return`s as a
    /// script does (it is a script's body, not a whole script: no `#!lua` line, since the check
    /// comes first). On a cluster every key must be in the fence key's slot. Scripts are run by
    /// `EVALSHA` and cached by Redis like relock's own. Line numbers in Lua error messages count
    /// from the start of the check, which comes first.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client, token: u64) -> relock::Result<()> {
    /// let fence = client.fence("stock:{sku-7}");
    /// let left: i64 = fence
    ///     .eval(
    ///         token,
    ///         "return redis.call('decrby', KEYS[1], ARGV[1])",
    ///         &["stock:{sku-7}:count"],
    ///         &[3.into()],
    ///     )
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`set`](Self::set): on [`Error::StaleToken`] the body did not run. An error the body
    /// raises is [`Error::Redis`], or [`Error::WrongType`] for a `WRONGTYPE` when `keys` holds
    /// one key (with several, Redis's message says which); what the body wrote before it is
    /// kept, as in any script. [`Error::Redis`] when the reply does not convert to `R`.
    ///
    /// A connection that broke with the script in flight leaves unknown whether the body ran:
    /// read back before sending a body that is not idempotent again.
    ///
    /// # Cancel safety
    ///
    /// A call dropped after its script was sent may or may not have run the body.
    pub async fn eval<R: FromValue>(
        &self,
        token: u64,
        body: &str,
        keys: &[&str],
        args: &[Value],
    ) -> Result<R> {
        let fence = self.ready_for(token, keys)?;
        let value = scripts::eval(&self.shared.redis, fence, token, body, keys, args).await?;
        self.convert(value)
    }

    /// The fence key, once the client is open and the resource's name is good.
    fn ready(&self) -> Result<&Str> {
        self.shared.check_open()?;
        self.key.as_ref().map_err(Clone::clone)
    }

    /// As [`ready`](Self::ready), for an operation presenting `token` on `keys`.
    fn ready_for(&self, token: u64, keys: &[&str]) -> Result<&Str> {
        let fence = self.ready()?;
        if token == 0 {
            return Err(Error::invalid(
                "a fencing token must be at least 1 (tokens count from 1)",
            ));
        }
        if keys.iter().any(|key| key.is_empty()) {
            return Err(Error::invalid("a fenced key must not be empty"));
        }
        Ok(fence)
    }

    fn convert<R: FromValue>(&self, value: Value) -> Result<R> {
        R::from_value(value).map_err(|e| Error::redis(e, &self.shared.redis.server))
    }
}

/// The fence key of `resource`: `relock_fence:{<resource>}`, by Redisson's prefix rule, which
/// keeps it in the resource's own cluster slot.
fn fence_key(resource: &str) -> Result<Str> {
    if resource.is_empty() {
        return Err(Error::invalid("a fence's resource name must not be empty"));
    }
    let key = prefixed(crate::names::prefix::FENCE, resource);
    if fred::util::redis_keyslot(key.as_bytes()) != fred::util::redis_keyslot(resource.as_bytes()) {
        return Err(Error::invalid(format!(
            "resource `{}` has braces that would put its fence key in another cluster slot; use \
             one non-empty `{{tag}}`, or no braces",
            Shown(resource)
        )));
    }
    Ok(key.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_keys_follow_the_prefix_rule() {
        assert_eq!(fence_key("orders:42").unwrap(), "relock_fence:{orders:42}");
        assert_eq!(
            fence_key("{user:7}:profile").unwrap(),
            "relock_fence:{user:7}:profile"
        );
    }

    #[test]
    fn bad_resources_are_refused() {
        for resource in ["", "a{b", "x{}y", "}{"] {
            let err = fence_key(resource).unwrap_err();
            assert!(err.is_invalid_argument(), "{resource:?}: {err}");
        }
    }
}
