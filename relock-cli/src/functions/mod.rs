//! relock's Redis function libraries on the command line: `functions` lists them, `functions
//! remove-old` removes those of other relock builds, and `info` says which server it is and how
//! relock sends its scripts there.
//!
//! On Redis 7.0 and later (and Valkey) a relock client loads its scripts as one function library,
//! `relock_<16 hex digits>` (a hash of its text: [`relock::library_name`]), and calls them by
//! `FCALL`. Every relock build whose scripts differ loads a library of its own, so the libraries
//! of earlier builds stay on a server after an upgrade.

use relock::fred::clients::{Client as Redis, WithOptions};
use relock::fred::interfaces::{ClientLike, FunctionInterface};
use relock::fred::types::config::{Options, Server};
use relock::fred::types::{InfoKind, Value};
use relock::Client;

use crate::Failure;

mod commands;
pub(crate) use commands::{info, list, remove_old};

/// What every relock library's name starts with.
const PREFIX: &str = "relock_";
/// `FUNCTION LIST LIBRARYNAME` takes a glob (matched without regard to case): relock's libraries,
/// and any other whose name starts so, which [`is_relock_library`] then leaves out.
const PATTERN: &str = "relock_*";

/// Whether `name` is a relock library's: `relock_` and 16 lowercase hex digits.
fn is_relock_library(name: &str) -> bool {
    name.strip_prefix(PREFIX).is_some_and(|id| {
        id.len() == 16 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// A server to ask: the one server, or one primary of a cluster.
struct Node {
    /// `host:port`.
    label: String,
    /// The primary, on a cluster; `None` on one server.
    target: Option<Server>,
}

/// One relock library on a server.
struct Library {
    name: String,
    functions: usize,
}

impl Library {
    fn current(&self) -> bool {
        self.name == relock::library_name()
    }
}

/// What a server said to `FUNCTION LIST`.
enum Libraries {
    /// relock's libraries there: this build's first, then by name.
    Listed(Vec<Library>),
    /// No `FUNCTION` command on a server older than Redis 7.0 (or of unknown version).
    NoFunctions(String),
    /// Functions refused: an ACL without them (`NOPERM`), or the command renamed away on a
    /// server that has it.
    Refused(String),
}

impl Libraries {
    fn listed(&self) -> &[Library] {
        match self {
            Libraries::Listed(libraries) => libraries,
            _ => &[],
        }
    }

    /// `available`, `none` or `refused`, as `info --json` says it.
    fn label(&self) -> &'static str {
        match self {
            Libraries::Listed(_) => "available",
            Libraries::NoFunctions(_) => "none",
            Libraries::Refused(_) => "refused",
        }
    }

    /// Why there is nothing to list, for a person; `None` when listed.
    fn unavailable(&self) -> Option<String> {
        match self {
            Libraries::Listed(_) => None,
            Libraries::NoFunctions(why) => Some(format!(
                "the server has no functions ({why}): relock sends its scripts by EVALSHA there \
                 and loads no library"
            )),
            Libraries::Refused(why) => Some(format!(
                "the server does not allow functions ({why}): no relock library there"
            )),
        }
    }
}

/// What one server is and holds.
struct Seen {
    node: Node,
    /// `redis_version` of `INFO server` (Valkey says 7.2.4), if it could be read.
    redis_version: Option<String>,
    /// `valkey_version`, on Valkey.
    valkey_version: Option<String>,
    libraries: Libraries,
}

impl Seen {
    /// "Redis 7.0.15", "Valkey 9.1.2 (redis_version 7.2.4)", or that `INFO` said nothing.
    fn version(&self) -> String {
        match (&self.valkey_version, &self.redis_version) {
            (Some(valkey), Some(redis)) => format!("Valkey {valkey} (redis_version {redis})"),
            (Some(valkey), None) => format!("Valkey {valkey}"),
            (None, Some(redis)) => format!("Redis {redis}"),
            (None, None) => "unknown (INFO server could not be read)".to_owned(),
        }
    }

    fn major(&self) -> Option<u32> {
        self.redis_version
            .as_deref()?
            .split('.')
            .next()?
            .parse()
            .ok()
    }
}

/// The servers to ask: each primary of a cluster, or the one server.
fn nodes(redis: &Redis) -> Vec<Node> {
    let connected = redis.active_connections();
    if redis.is_clustered() {
        let mut nodes: Vec<Node> = connected
            .into_iter()
            .map(|server| Node {
                label: server.to_string(),
                target: Some(server),
            })
            .collect();
        nodes.sort_by(|a, b| a.label.cmp(&b.label));
        nodes
    } else {
        let label = connected
            .first()
            .map_or_else(|| "the server".to_owned(), ToString::to_string);
        vec![Node {
            label,
            target: None,
        }]
    }
}

/// `redis`, its commands sent to `node`.
fn on(redis: &Redis, node: &Node) -> WithOptions<Redis> {
    redis.with_options(&Options {
        cluster_node: node.target.clone(),
        ..Default::default()
    })
}

/// Every server's version and relock libraries.
async fn survey(client: &Client) -> Result<Vec<Seen>, Failure> {
    let redis = client.redis();
    let mut all = Vec::new();
    for node in nodes(redis) {
        let info = on(redis, &node)
            .info::<String>(Some(InfoKind::Server))
            .await
            .unwrap_or_default();
        let mut seen = Seen {
            redis_version: field(&info, "redis_version"),
            valkey_version: field(&info, "valkey_version"),
            libraries: Libraries::Listed(Vec::new()),
            node,
        };
        seen.libraries = libraries(redis, &seen).await?;
        all.push(seen);
    }
    Ok(all)
}

/// The value of `name` in an `INFO` reply.
fn field(info: &str, name: &str) -> Option<String> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim().to_owned())
    })
}

/// `FUNCTION LIST LIBRARYNAME relock_*` on `seen`'s server.
async fn libraries(redis: &Redis, seen: &Seen) -> Result<Libraries, Failure> {
    let reply = on(redis, &seen.node)
        .function_list::<Value, _>(Some(PATTERN), false)
        .await;
    let error = match reply {
        Ok(reply) => return Ok(Libraries::Listed(parse(reply))),
        Err(error) => error,
    };
    let said = error.details().trim().to_owned();
    if said.contains("unknown command") {
        // No FUNCTION command: Redis 6.x has none; a server of 7.0 or later had it taken away.
        return Ok(match (seen.major(), seen.valkey_version.is_some()) {
            (Some(major), false) if major < 7 => {
                Libraries::NoFunctions(format!("{}: functions are Redis 7.0's", seen.version()))
            }
            (None, false) => Libraries::NoFunctions(said),
            _ => Libraries::Refused(format!(
                "FUNCTION is renamed away or disabled on {}",
                seen.version()
            )),
        });
    }
    // What the library takes for a refusal of `FUNCTION LOAD` (an ACL, a managed service).
    let refusals = ["NOPERM", "unknown subcommand", "not allowed", "disabled"];
    if refusals.iter().any(|word| said.contains(word)) {
        return Ok(Libraries::Refused(said));
    }
    Err(Failure::Error(format!(
        "FUNCTION LIST on {}: {error}",
        seen.node.label
    )))
}

/// The relock libraries of a `FUNCTION LIST` reply (an array of maps in RESP3, of flat
/// key-value arrays in RESP2): this build's first, then by name.
fn parse(reply: Value) -> Vec<Library> {
    let mut found: Vec<Library> = match reply {
        Value::Array(entries) => entries
            .into_iter()
            .filter_map(|entry| {
                let mut name = None;
                let mut functions = 0;
                for (key, value) in pairs(entry) {
                    match key.as_str() {
                        "library_name" => name = value.into_string(),
                        "functions" => {
                            functions = match value {
                                Value::Array(list) => list.len(),
                                _ => 0,
                            }
                        }
                        _ => {}
                    }
                }
                let name = name.filter(|name| is_relock_library(name))?;
                Some(Library { name, functions })
            })
            .collect(),
        _ => Vec::new(),
    };
    found.sort_by(|a, b| (!a.current(), &a.name).cmp(&(!b.current(), &b.name)));
    found
}

/// The fields of one map of a reply, whichever way it came.
fn pairs(value: Value) -> Vec<(String, Value)> {
    match value {
        Value::Map(map) => map
            .inner()
            .into_iter()
            .filter_map(|(key, value)| Some((key.into_string()?, value)))
            .collect(),
        Value::Array(items) => {
            let mut items = items.into_iter();
            let mut out = Vec::new();
            while let (Some(key), Some(value)) = (items.next(), items.next()) {
                if let Some(key) = key.into_string() {
                    out.push((key, value));
                }
            }
            out
        }
        _ => Vec::new(),
    }
}
