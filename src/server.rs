//! What the server is, learned once at connect: which server and version, its `run_id`, and
//! whether relock can run there at all.
//!
//! relock needs Redis 6.0 or later (`lua/semaphore/drain.lua` sets a count with `SET … KEEPTTL`,
//! new in 6.0), or any Valkey, with Lua scripting: `EVALSHA` and `SCRIPT LOAD`. Below that, or
//! with scripting gone (the commands renamed away with `rename-command`, or Valkey 9's Lua engine,
//! a module, unloaded), [`Client::connect`](crate::Client::connect) fails with
//! [`Error::Unsupported`] naming the server, what it found and what relock needs, instead of a
//! lock call failing later with `ERR unknown command` or loading its script again and again.
//! Only what the server says counts against it: a user whose ACL forbids `INFO` or `COMMAND`
//! is not refused for that.

use fred::clients::Client as Redis;
use fred::interfaces::ClientLike;
use fred::types::{InfoKind, Value};

use crate::error::{Error, NEEDS};

/// The oldest Redis relock runs on: `SET … KEEPTTL` is 6.0's.
const OLDEST: (u32, u32) = (6, 0);

/// The commands relock runs its scripts with.
const SCRIPT_COMMANDS: [&str; 2] = ["EVALSHA", "SCRIPT"];

/// What the server said of itself at connect.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    /// Its `run_id`, which tells it apart whatever address reaches it.
    pub(crate) run_id: Option<String>,
    /// Its Redis-compatible major version (`redis_version`; Valkey reports 7.2.4); 0 when
    /// `INFO` could not be read.
    pub(crate) major: u32,
}

/// Reads what relock needs to know of the server behind `redis` (`INFO server`, `COMMAND
/// INFO EVALSHA SCRIPT`, and on Valkey `INFO scriptingengines`).
///
/// # Errors
///
/// [`Error::Unsupported`] when the server is older than Redis 6.0 or has no scripting.
pub(crate) async fn learn(redis: &Redis, server: &str) -> Result<Facts, Error> {
    let Ok(info) = redis.info::<String>(Some(InfoKind::Server)).await else {
        return Ok(Facts::default());
    };
    let about = About::read(&info);
    let facts = Facts {
        run_id: field(&info, "run_id").map(str::to_owned),
        major: about.major(),
    };
    let commands = redis
        .custom::<Value, _>(
            fred::cmd!("COMMAND"),
            ["INFO"]
                .into_iter()
                .chain(SCRIPT_COMMANDS)
                .collect::<Vec<_>>(),
        )
        .await
        .ok();
    let missing = commands.and_then(|reply| missing_command(&reply));
    let engines = if about.valkey.is_some() {
        redis
            .custom::<String, _>(fred::cmd!("INFO"), vec!["scriptingengines"])
            .await
            .ok()
    } else {
        None
    };
    match about.refusal(missing, engines.as_deref()) {
        Some(found) => Err(Error::Unsupported {
            server: server.to_owned(),
            found,
            needs: NEEDS.to_owned(),
        }),
        None => Ok(facts),
    }
}

/// The value of `name` in an `INFO` reply.
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim())
    })
}

/// Which server `INFO server` describes.
#[derive(Debug, PartialEq, Eq)]
struct About {
    /// `redis_version`: what the server answers as (Valkey says 7.2.4).
    redis: Option<String>,
    /// `valkey_version`, on Valkey.
    valkey: Option<String>,
}

impl About {
    fn read(info: &str) -> About {
        About {
            redis: field(info, "redis_version").map(str::to_owned),
            valkey: field(info, "valkey_version").map(str::to_owned),
        }
    }

    /// `(major, minor)` of `redis_version`.
    fn version(&self) -> Option<(u32, u32)> {
        let mut parts = self.redis.as_deref()?.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        Some((major, minor))
    }

    fn major(&self) -> u32 {
        self.version().map_or(0, |(major, _)| major)
    }

    /// "Redis 7.0.15", "Valkey 9.1.2", or "a server" when `INFO` said neither.
    fn name(&self) -> String {
        match (&self.valkey, &self.redis) {
            (Some(valkey), _) => format!("Valkey {valkey}"),
            (None, Some(redis)) => format!("Redis {redis}"),
            (None, None) => "a server".to_owned(),
        }
    }

    /// What relock found that it cannot run on, or `None`: a version below 6.0, a script
    /// command the server does not know (`missing`), or a Valkey whose `INFO scriptingengines`
    /// (`engines`) counts none.
    fn refusal(&self, missing: Option<&str>, engines: Option<&str>) -> Option<String> {
        if self.version().is_some_and(|version| version < OLDEST) {
            return Some(self.name());
        }
        if let Some(command) = missing {
            return Some(format!(
                "{} without the {command} command (renamed away or disabled)",
                self.name()
            ));
        }
        if engines.and_then(|text| field(text, "engines_count")) == Some("0") {
            return Some(format!("{} with no scripting engine loaded", self.name()));
        }
        None
    }
}

/// The first of [`SCRIPT_COMMANDS`] that a `COMMAND INFO` reply says the server does not have
/// (a nil in its place), if any.
fn missing_command(reply: &Value) -> Option<&'static str> {
    let Value::Array(entries) = reply else {
        return None;
    };
    SCRIPT_COMMANDS
        .iter()
        .zip(entries)
        .find(|(_, entry)| matches!(entry, Value::Null))
        .map(|(command, _)| *command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn about(info: &str) -> About {
        About::read(info)
    }

    #[test]
    fn versions_before_six_are_refused_by_name() {
        let old = about("# Server\r\nredis_version:5.0.7\r\nredis_mode:standalone\r\n");
        assert_eq!(old.refusal(None, None).as_deref(), Some("Redis 5.0.7"));
        let six = about("redis_version:6.0.9\r\nrun_id:abc\r\n");
        assert_eq!(six.refusal(None, None), None);
        assert_eq!(six.major(), 6);
        let unknown = about("# Server\r\n");
        assert_eq!(unknown.refusal(None, None), None);
    }

    #[test]
    fn valkey_is_named_by_its_own_version_and_refused_without_an_engine() {
        let info = "redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
        let valkey = about(info);
        assert_eq!(valkey.major(), 7);
        let none = "# Scripting Engines\r\nengines_count:0\r\nengines_total_used_memory:0\r\n";
        assert_eq!(
            valkey.refusal(None, Some(none)).as_deref(),
            Some("Valkey 9.1.2 with no scripting engine loaded")
        );
        let lua = "# Scripting Engines\r\nengines_count:1\r\nengine_0:name=LUA,module=lua\r\n";
        assert_eq!(valkey.refusal(None, Some(lua)), None);
    }

    #[test]
    fn a_script_command_missing_from_command_info_is_named() {
        let seven = about("redis_version:7.0.15\r\n");
        let reply = Value::Array(vec![Value::Array(vec![]), Value::Null]);
        let missing = missing_command(&reply);
        assert_eq!(missing, Some("SCRIPT"));
        assert_eq!(
            seven.refusal(missing, None).as_deref(),
            Some("Redis 7.0.15 without the SCRIPT command (renamed away or disabled)")
        );
        let both = Value::Array(vec![Value::Array(vec![]), Value::Array(vec![])]);
        assert_eq!(missing_command(&both), None);
    }
}
