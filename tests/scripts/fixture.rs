//! What every script test here stands on: a server started for the test, a raw fred connection
//! to run scripts with `EVAL` (each as the client composes it), and the raw reads the assertions
//! make. Each file's own `Fixture` adds its type's keys and calls, and derefs to this.

use crate::common::{self, RawSubscriber, RedisServer};
use fred::clients::Client as Redis;
use fred::interfaces::LuaInterface;
use fred::types::Value;

/// The holder in the lock tests, and another client's task.
pub(crate) const ME: &str = "11111111-2222-3333-4444-555555555555:task-1";
pub(crate) const OTHER: &str = "99999999-8888-7777-6666-555555555555:task-2";
/// The lease the tests take.
pub(crate) const LEASE_MS: i64 = 10_000;
/// How long a release's replay key (`redisson_unlock_latch`) lives.
pub(crate) const LATCH_TTL_MS: i64 = 8_000;
/// How long a release's hand-off claim lives.
pub(crate) const CLAIM_WINDOW_MS: i64 = 500;

/// A server, a raw connection to it, and the name of the test's lock with its claim key.
pub(crate) struct Lua {
    pub server: RedisServer,
    pub redis: Redis,
    /// The lock's name (the key of its hash).
    pub name: String,
    /// The lock's hand-off claim key.
    pub claim: String,
}

impl Lua {
    /// A fresh server and a connection to it, for a lock named after `test`.
    pub(crate) async fn start(test: &str) -> Lua {
        Lua::named(common::prefix(test)).await
    }

    /// A fresh server and a connection to it, for the lock `name`.
    pub(crate) async fn named(name: String) -> Lua {
        let server = RedisServer::start();
        let redis = common::fred_client(&server).await;
        let claim = common::claim_key(&name);
        Lua {
            server,
            redis,
            name,
            claim,
        }
    }

    /// Runs `lua` with `EVAL`, its keys and arguments as given.
    pub(crate) async fn eval(
        &self,
        lua: &str,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Value, fred::error::Error> {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        self.redis.eval::<Value, _, _, _>(lua, keys, args).await
    }

    /// A raw command, its reply as text (`redis-cli`'s).
    pub(crate) fn cmd(&self, args: &[&str]) -> String {
        self.server.cmd(args)
    }

    pub(crate) fn pttl(&self, key: &str) -> i64 {
        common::raw_pttl(&self.server, key)
    }

    pub(crate) fn exists(&self, key: &str) -> bool {
        common::raw_exists(&self.server, key)
    }

    /// The string at `key` (`GET`), `None` when there is none.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        match common::resp(&self.cmd(&["GET", key])) {
            common::Resp::Bulk(value) => value,
            other => panic!("GET {key}: {other:?}"),
        }
    }

    /// Writes the lock hash `key` by hand: each (field, holds) of `holds`, expiring in `ms`.
    pub(crate) fn plant(&self, key: &str, holds: &[(&str, &str)], ms: &str) {
        let mut hset = vec!["HSET", key];
        for (field, n) in holds {
            hset.extend([*field, *n]);
        }
        self.cmd(&hset);
        self.cmd(&["PEXPIRE", key, ms]);
    }

    /// Puts a string at `key`, checks that `script` then fails with WRONGTYPE and that the
    /// string is still there as it was.
    pub(crate) async fn assert_wrongtype_on_string<Fut>(
        &self,
        key: &str,
        script: impl FnOnce() -> Fut,
    ) where
        Fut: std::future::Future<Output = Result<Value, fred::error::Error>>,
    {
        self.cmd(&["SET", key, "user-data"]);
        assert_wrongtype(script().await);
        assert_eq!(
            self.get(key).as_deref(),
            Some("user-data"),
            "the string at {key}"
        );
    }

    /// Every field of hash `key`, sorted.
    pub(crate) fn hash_of(&self, key: &str) -> Vec<(String, String)> {
        common::raw_hgetall(&self.server, key)
    }

    /// A raw subscriber to `channels`.
    pub(crate) async fn subscribe_to(&self, channels: &[&str]) -> RawSubscriber {
        RawSubscriber::subscribe(&self.server, channels).await
    }
}

/// `items` as owned (field, value) pairs, sorted: what [`Lua::hash_of`] returns for that hash.
pub(crate) use crate::common::pairs;

/// The integer of a reply that must be one (a retry hint, a count).
pub(crate) fn int(reply: Value) -> i64 {
    reply
        .as_i64()
        .unwrap_or_else(|| panic!("expected an integer reply, got {reply:?}"))
}

/// The integers of an array reply.
pub(crate) fn ints(value: Value) -> Vec<i64> {
    match value {
        Value::Array(items) => items.into_iter().map(int).collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

/// Checks `low <= value <= high`, naming `what` when it is not.
pub(crate) fn assert_within(value: i64, low: i64, high: i64, what: &str) {
    assert!(
        (low..=high).contains(&value),
        "{what}: {value} not in [{low}, {high}]"
    );
}

/// Checks that a script failed with the error `code` (`WRONGTYPE`, `RELOCK_UPGRADE`, ...).
pub(crate) fn assert_error(result: Result<Value, fred::error::Error>, code: &str) {
    match result {
        Err(e) => assert!(
            e.details().contains(code) || e.to_string().contains(code),
            "expected {code}, got {e:?}"
        ),
        Ok(v) => panic!("expected a {code} error, got {v:?}"),
    }
}

/// Checks that a script failed on a key of another type.
pub(crate) fn assert_wrongtype(result: Result<Value, fred::error::Error>) {
    assert_error(result, "WRONGTYPE");
}

/// Declares a file's `Fixture`: a [`Lua`] (which it derefs to) and the keys made from it, each
/// field given with the expression of `$lua` that makes it; `Fixture::new(test)` starts it.
macro_rules! lua_fixture {
    (
        $(#[$meta:meta])*
        struct $Fixture:ident for $lua:ident {
            $($(#[$field_meta:meta])* $field:ident: $ty:ty = $value:expr,)*
        }
    ) => {
        $(#[$meta])*
        struct $Fixture {
            lua: Lua,
            $($(#[$field_meta])* $field: $ty,)*
        }

        $crate::fixture::derefs_to_lua!($Fixture);

        impl $Fixture {
            /// A fresh server, and the keys of the lock named after `test`.
            async fn new(test: &str) -> $Fixture {
                $Fixture::on(Lua::start(test).await)
            }

            /// The keys of `$lua`'s lock.
            fn on($lua: Lua) -> $Fixture {
                $Fixture {
                    $($field: $value,)*
                    lua: $lua,
                }
            }
        }
    };
}

/// Lets a file's `Fixture` (a struct with a `lua: Lua` field) be used as its [`Lua`].
macro_rules! derefs_to_lua {
    ($Fixture:ident) => {
        impl std::ops::Deref for $Fixture {
            type Target = Lua;

            fn deref(&self) -> &Lua {
                &self.lua
            }
        }
    };
}

pub(crate) use {derefs_to_lua, lua_fixture};
