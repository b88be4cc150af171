//! What every script test here stands on: a server started for the test, a raw fred connection
//! to run scripts with `EVAL` (each as the client composes it), and the raw reads the assertions
//! make. Each file's own `Fixture` adds its type's keys and calls, and derefs to this.

use crate::common::{self, RawSubscriber, RedisServer};
use fred::clients::Client as Redis;
use fred::interfaces::LuaInterface;
use fred::types::Value;

/// A server and a raw connection to it.
pub(crate) struct Lua {
    pub server: RedisServer,
    pub redis: Redis,
}

impl Lua {
    /// A fresh server and a connection to it.
    pub(crate) async fn start() -> Lua {
        let server = RedisServer::start();
        let redis = common::fred_client(&server).await;
        Lua { server, redis }
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

    /// Every field of hash `key`, sorted.
    pub(crate) fn hash_of(&self, key: &str) -> Vec<(String, String)> {
        common::raw_hgetall(&self.server, key)
    }

    /// A raw subscriber to `channels`.
    pub(crate) async fn subscribe_to(&self, channels: &[&str]) -> RawSubscriber {
        RawSubscriber::subscribe(&self.server, channels).await
    }
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

pub(crate) use derefs_to_lua;
