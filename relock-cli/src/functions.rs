//! relock's Redis function libraries on the command line: `functions` lists them, `functions
//! remove-old` removes those of other relock builds, and `info` says which server it is and how
//! relock sends its scripts there.
//!
//! On Redis 7.0 and later (and Valkey) a relock client loads its scripts as one function library,
//! `relock_<16 hex digits>` (a hash of its text: [`relock::library_name`]), and calls them by
//! `FCALL`. Every relock build whose scripts differ loads a library of its own, so the libraries
//! of earlier builds stay on a server after an upgrade.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};

use relock::fred::clients::{Client as Redis, WithOptions};
use relock::fred::interfaces::{ClientLike, FunctionInterface};
use relock::fred::types::config::{Options, Server};
use relock::fred::types::{InfoKind, Value};
use relock::{Client, Evalsha, ScriptCalls};
use serde_json::{json, Value as Json};

use crate::{Failure, Outcome};

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

/// One library as `functions --json` lists it.
fn library_json(node: &Node, library: &Library) -> Json {
    json!({
        "node": node.label,
        "name": library.name,
        "functions": library.functions,
        "current": library.current(),
    })
}

/// One library as a line: its name, how many functions, whose.
fn library_line(library: &Library) -> String {
    let functions = match library.functions {
        1 => "1 function".to_owned(),
        n => format!("{n} functions"),
    };
    let whose = if library.current() {
        "current"
    } else {
        "other build"
    };
    format!("{}  {functions:>13}  {whose}", library.name)
}

/// Says where functions are unavailable: on stdout for a person, on stderr beside JSON.
fn say_unavailable(seen: &[Seen], clustered: bool, json: bool) {
    for s in seen {
        let Some(why) = s.libraries.unavailable() else {
            continue;
        };
        let line = if clustered {
            format!("{}: {why}", s.node.label)
        } else {
            why
        };
        if json {
            eprintln!("relock: {line}");
        } else {
            println!("{line}");
        }
    }
}

/// `relock functions`: relock's libraries on the server (on each primary of a cluster), this
/// build's marked `current`.
pub(crate) async fn list(client: &Client, json: bool) -> Outcome {
    let seen = survey(client).await?;
    let clustered = client.redis().is_clustered();
    if json {
        let items: Vec<Json> = seen
            .iter()
            .flat_map(|s| {
                s.libraries
                    .listed()
                    .iter()
                    .map(|l| library_json(&s.node, l))
            })
            .collect();
        println!("{}", Json::Array(items));
        say_unavailable(&seen, clustered, json);
        return Ok(());
    }
    let mut out = String::new();
    for s in &seen {
        let indent = if clustered {
            let _ = writeln!(out, "{}", s.node.label);
            "  "
        } else {
            ""
        };
        match &s.libraries {
            Libraries::Listed(listed) if listed.is_empty() => {
                let _ = writeln!(out, "{indent}no relock library");
            }
            Libraries::Listed(listed) => {
                for library in listed {
                    let _ = writeln!(out, "{indent}{}", library_line(library));
                }
            }
            other => {
                let why = other.unavailable().unwrap_or_default();
                let _ = writeln!(out, "{indent}{why}");
            }
        }
    }
    print!("{out}");
    Ok(())
}

/// `relock functions remove-old`: `FUNCTION DELETE` of every relock library but this build's,
/// on every server; without `yes`, asks on a terminal and refuses without one.
pub(crate) async fn remove_old(client: &Client, yes: bool, json: bool) -> Outcome {
    let seen = survey(client).await?;
    let clustered = client.redis().is_clustered();
    say_unavailable(&seen, clustered, json);
    let old: Vec<(&Node, &Library)> = seen
        .iter()
        .flat_map(|s| {
            s.libraries
                .listed()
                .iter()
                .filter(|l| !l.current())
                .map(move |l| (&s.node, l))
        })
        .collect();
    let described = |(node, library): &(&Node, &Library)| {
        let mut line = library_line(library);
        if clustered {
            line.push_str(&format!(" on {}", node.label));
        }
        line
    };
    let report = |removed: &[(&Node, &Library)], would: &[(&Node, &Library)]| {
        let list = |all: &[(&Node, &Library)]| {
            all.iter()
                .map(|(node, library)| library_json(node, library))
                .collect::<Vec<_>>()
        };
        println!(
            "{}",
            json!({"removed": list(removed), "would_remove": list(would)})
        );
    };
    if old.is_empty() {
        if json {
            report(&[], &[]);
        } else {
            println!("no relock library of another build to remove");
        }
        return Ok(());
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            if json {
                report(&[], &old);
            } else {
                for entry in &old {
                    println!("would remove {}", described(entry));
                }
            }
            return Err(Failure::Usage(
                "functions remove-old asks for confirmation on a terminal; pass --yes to remove \
                 them without one (nothing was removed)"
                    .into(),
            ));
        }
        for entry in &old {
            eprintln!("{}", described(entry));
        }
        eprint!(
            "Remove {} relock librar{} of other builds? Their running clients load theirs again \
             when they next call it. [y/N] ",
            old.len(),
            if old.len() == 1 { "y" } else { "ies" }
        );
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(Failure::Error("not confirmed: nothing was removed".into()));
        }
    }
    let redis = client.redis();
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    for entry in &old {
        let (node, library) = *entry;
        match on(redis, node)
            .function_delete::<Value, _>(library.name.as_str())
            .await
        {
            Ok(_) => removed.push(*entry),
            // Removed by someone else in the meantime: gone all the same.
            Err(e) if e.details().contains("Library not found") => {}
            Err(e) => errors.push(format!(
                "FUNCTION DELETE {} on {}: {e}",
                library.name, node.label
            )),
        }
    }
    if json {
        report(&removed, &[]);
    } else {
        let mut out = std::io::stdout().lock();
        for entry in &removed {
            let _ = writeln!(out, "removed {}", described(entry));
        }
    }
    if !errors.is_empty() {
        return Err(Failure::Error(errors.join("; ")));
    }
    Ok(())
}

/// `relock info`: each server's address and version, its relock libraries, and how this client
/// sends its scripts.
pub(crate) async fn info(client: &Client, json: bool) -> Outcome {
    let seen = survey(client).await?;
    let scripts = client.stats().scripts;
    if json {
        let (via, reason, message) = match scripts {
            ScriptCalls::Functions => ("functions", None, None),
            ScriptCalls::Evalsha(why) => {
                ("evalsha", Some(evalsha_label(why)), Some(why.to_string()))
            }
            _ => ("unknown", None, None),
        };
        let servers: Vec<Json> = seen
            .iter()
            .map(|s| {
                let listed =
                    matches!(s.libraries, Libraries::Listed(_)).then(|| s.libraries.listed());
                json!({
                    "node": s.node.label,
                    "redis_version": s.redis_version,
                    "valkey_version": s.valkey_version,
                    "functions": s.libraries.label(),
                    "relock_libraries": listed.map(<[Library]>::len),
                    "other_builds": listed.map(|l| l.iter().filter(|l| !l.current()).count()),
                })
            })
            .collect();
        println!(
            "{}",
            json!({
                "library": relock::library_name(),
                "scripts": via,
                "evalsha_reason": reason,
                "evalsha_message": message,
                "servers": servers,
            })
        );
        return Ok(());
    }
    let mut out = String::new();
    for s in &seen {
        let _ = writeln!(out, "{:<10} {}", "server", s.node.label);
        let _ = writeln!(out, "{:<10} {}", "version", s.version());
        let _ = writeln!(out, "{:<10} {}", "libraries", libraries_line(&s.libraries));
    }
    let scripts = match scripts {
        ScriptCalls::Functions => format!("functions (library {})", relock::library_name()),
        ScriptCalls::Evalsha(why) => format!("EVALSHA: {why}"),
        _ => "unknown".to_owned(),
    };
    let _ = writeln!(out, "{:<10} {scripts}", "scripts");
    print!("{out}");
    Ok(())
}

/// `configured`, `no_functions`, `refused`: why a client sends its scripts by `EVALSHA`.
fn evalsha_label(why: Evalsha) -> &'static str {
    match why {
        Evalsha::Configured => "configured",
        Evalsha::NoFunctions => "no_functions",
        Evalsha::Refused => "refused",
        _ => "other",
    }
}

/// How many relock libraries a server has, and whose, in a line.
fn libraries_line(libraries: &Libraries) -> String {
    let listed = match libraries {
        Libraries::Listed(listed) => listed,
        other => return format!("none: {}", other.unavailable().unwrap_or_default()),
    };
    let others = listed.iter().filter(|l| !l.current()).count();
    let current = listed.len() > others;
    let count = match listed.len() {
        1 => "1 relock library".to_owned(),
        n => format!("{n} relock libraries"),
    };
    let remove = "`relock functions remove-old` removes";
    match (current, others) {
        (_, 0) if listed.is_empty() => "no relock library".to_owned(),
        (true, 0) => format!("{count} (this build's)"),
        (true, 1) => format!("{count}: this build's and 1 of another build ({remove} it)"),
        (true, n) => format!("{count}: this build's and {n} of other builds ({remove} them)"),
        (false, 1) => format!("{count}, of another build ({remove} it)"),
        (false, _) => format!("{count}, of other builds ({remove} them)"),
    }
}
