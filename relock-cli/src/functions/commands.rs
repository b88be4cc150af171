//! The commands: `functions`, `functions remove-old` and `info`, and how they print what the
//! survey of the server found.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};

use relock::fred::interfaces::{ClientLike, FunctionInterface};
use relock::fred::types::Value;
use relock::{Client, Evalsha, ScriptCalls};
use serde_json::{json, Value as Json};

use super::{on, survey, Libraries, Library, Node, Seen};
use crate::{Failure, Outcome};

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
