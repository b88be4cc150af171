//! `EVAL`, `EVALSHA` and `SCRIPT`: scripts run in Lua 5.1, the version Redis embeds, with the
//! `redis` table Redis gives them (`call`, `pcall`, `error_reply`, `status_reply`, `sha1hex`,
//! `log`) and Redis's conversions between Lua values and replies.
//!
//! One interpreter per thread and [`Version`] holds every script compiled so far; a script's
//! `redis.call` reaches the [`Server`] it runs on through functions scoped to that one run. A
//! script runs to its end with nothing else between its commands, as on Redis, and the
//! clock stands still while it runs (Redis 7 computes every expiry of a script from its start).
//!
//! Where Redis versions differ ([`Version`]): Redis 7 passes an error table raised by a script
//! (`error({err = …})`) through as the error reply and hands a command's error to the script
//! as such a table; Redis 6 raises a command's error as a string, and an error table raised
//! to the top is no reply of its own (`ERR Error running script … attempt to concatenate …`).
//! An uncaught error's reply carries no `script: <sha>, on @user_script:<line>.` suffix here
//! (nor a function's `script: <name>, on @user_function:<line>.`): the conformance mirror
//! compares error replies without it.
//!
//! The same interpreter runs the libraries of Redis 7 functions ([`super::functions`]): each
//! library's chunk runs once per load in an environment of its own, which Redis's load API
//! backs while it registers its functions and the scripts' globals back afterwards, so its
//! callbacks share its top-level locals from one `FCALL` to the next. `EVAL_RO`, `FCALL_RO` and
//! a `no-writes` function run read-only: a write command is refused to them as Redis refuses it.
//!
//! The parts: `interpreter` (the Lua state of each thread and [`Version`], what is compiled
//! and loaded in it, and a run's way to the server), `prelude` (the Lua text of the `redis`
//! library, the trampoline and the function loader), `writes` (the commands a read-only run
//! may not call) and `convert` (Redis's conversions between Lua values and replies). This
//! file holds the commands and what [`super::functions`] calls.

use std::sync::Arc;

use mlua::{Lua, Table};
use sha1::{Digest, Sha1};

use super::functions::{self, Library};
use super::numbers::int;
use super::{errors, Bytes, Outcome, Reply, Server, Version};

mod convert;
mod interpreter;
mod prelude;
mod writes;

use interpreter::with_interpreter;

/// A script the server has loaded: its SHA1 and its text. Two compare and hash by SHA1 alone.
#[derive(Clone, Debug)]
pub struct Script {
    sha: String,
    text: Arc<[u8]>,
}

impl PartialEq for Script {
    fn eq(&self, other: &Self) -> bool {
        self.sha == other.sha
    }
}

impl Eq for Script {}

impl std::hash::Hash for Script {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.sha.hash(state);
    }
}

/// The SHA1 of `text` in lowercase hex, as `SCRIPT LOAD` answers.
pub fn sha1_hex(text: &[u8]) -> String {
    Sha1::digest(text)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `EVAL script numkeys key… arg…` (or `EVALSHA sha …` when `by_sha`; `EVAL_RO` and
/// `EVALSHA_RO` when `read_only`).
pub(super) fn eval(server: &mut Server, args: &[Bytes], by_sha: bool, read_only: bool) -> Outcome {
    let name = match (by_sha, read_only) {
        (false, false) => "eval",
        (true, false) => "evalsha",
        (false, true) => "eval_ro",
        (true, true) => "evalsha_ro",
    };
    if args.len() < 2 {
        return Err(errors::arity(name));
    }
    let numkeys = int(&args[1]).ok_or_else(errors::not_integer)?;
    if numkeys < 0 {
        return Err(Reply::error("ERR Number of keys can't be negative"));
    }
    if numkeys as usize > args.len() - 2 {
        return Err(Reply::error(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let (keys, argv) = args[2..].split_at(numkeys as usize);
    let script = if by_sha {
        let sha = String::from_utf8_lossy(&args[0]).to_lowercase();
        server
            .scripts_mut()
            .get(&sha)
            .cloned()
            .ok_or_else(errors::no_script)?
    } else {
        load(server, &args[0])?
    };
    run(server, &script, keys, argv, read_only)
}

/// `SCRIPT LOAD | EXISTS | FLUSH`.
pub(super) fn script_command(server: &mut Server, args: &[Bytes]) -> Outcome {
    let Some(sub) = args.first() else {
        return Err(errors::arity("script"));
    };
    match String::from_utf8_lossy(sub).to_lowercase().as_str() {
        "load" if args.len() == 2 => Ok(Reply::bulk(load(server, &args[1])?.sha)),
        "exists" if args.len() >= 2 => Ok(Reply::Array(
            args[1..]
                .iter()
                .map(|sha| {
                    let sha = String::from_utf8_lossy(sha).to_lowercase();
                    Reply::Int(server.scripts_mut().contains_key(&sha) as i64)
                })
                .collect(),
        )),
        "flush" if args.len() <= 2 => {
            server.scripts_mut().clear();
            Ok(Reply::ok())
        }
        other => Err(Reply::error(format!(
            "ERR unknown subcommand '{other}'. Try SCRIPT HELP."
        ))),
    }
}

/// Compiles `text` (an error reply when it does not compile) and keeps it under its SHA1.
fn load(server: &mut Server, text: &[u8]) -> Result<Script, Reply> {
    let sha = sha1_hex(text);
    if let Some(script) = server.scripts_mut().get(&sha) {
        return Ok(script.clone());
    }
    let script = Script {
        sha: sha.clone(),
        text: Arc::from(text),
    };
    with_interpreter(server.version(), |interp| {
        interp.compiled(&script).map(|_| ())
    })?;
    server.scripts_mut().insert(sha, script.clone());
    Ok(script)
}

/// Runs a loaded script on `server` with `keys` and `argv` (read-only when `read_only`).
fn run(
    server: &mut Server,
    script: &Script,
    keys: &[Bytes],
    argv: &[Bytes],
    read_only: bool,
) -> Outcome {
    let version = server.version();
    with_interpreter(version, |interp| {
        let f = interp.compiled(script)?;
        let lua = &interp.lua;
        let globals = lua.globals();
        globals
            .raw_set("KEYS", list(lua, keys)?)
            .map_err(internal)?;
        globals
            .raw_set("ARGV", list(lua, argv)?)
            .map_err(internal)?;
        interp
            .invoke(server, f, (), read_only)?
            .map_err(|(table, message)| script_error(table, message, &script.sha, version))
    })
}

/// `items` as a Lua array of strings.
fn list(lua: &Lua, items: &[Bytes]) -> Result<Table, Reply> {
    let t = lua.create_table().map_err(internal)?;
    for (i, item) in items.iter().enumerate() {
        let s = lua.create_string(item).map_err(internal)?;
        t.raw_set(i + 1, s).map_err(internal)?;
    }
    Ok(t)
}

/// Runs `library`'s chunk as `FUNCTION LOAD` does, as its load `load`: the functions it
/// registered, in order, or the error Redis answers. The interpreter keeps the instance until
/// [`forget_library`].
pub(super) fn load_library(
    version: Version,
    load: u64,
    body: &[u8],
) -> Result<Vec<functions::Function>, Reply> {
    with_interpreter(version, |interp| {
        let registered = interp.run_library(body)?;
        interp.keep(load, &registered);
        Ok(registered.into_iter().map(|r| r.function).collect())
    })
}

/// Drops this thread's instance of the library load `load` (deleted, replaced or refused).
pub(super) fn forget_library(version: Version, load: u64) {
    with_interpreter(version, |interp| {
        interp.libraries.remove(&load);
    });
}

/// `FCALL` of `library`'s function `name` with `keys` and `argv` (read-only when `read_only`:
/// `FCALL_RO`, or a `no-writes` function).
pub(super) fn call_function(
    server: &mut Server,
    library: &Library,
    name: &str,
    keys: &[Bytes],
    argv: &[Bytes],
    read_only: bool,
) -> Outcome {
    let version = server.version();
    with_interpreter(version, |interp| {
        let f = interp.callback(library, name)?;
        let keys = list(&interp.lua, keys)?;
        let argv = list(&interp.lua, argv)?;
        interp
            .invoke(server, f, (keys, argv), read_only)?
            .map_err(|(table, message)| match table {
                true => Reply::Error(message),
                false => Reply::Error(format!("ERR {message}")),
            })
    })
}

fn internal(e: mlua::Error) -> Reply {
    Reply::error(format!("ERR relock-model: {e}"))
}

/// The error reply of a script that raised an error to the top: an error table (`table`) with
/// its `err`, or a string.
fn script_error(table: bool, message: String, sha: &str, version: Version) -> Reply {
    match (table, version) {
        (true, Version::Redis7) => Reply::Error(message),
        (true, Version::Redis6) => Reply::Error(format!(
            "ERR Error running script (call to f_{sha}): @user_script:?: attempt to concatenate local 'err' (a table value)"
        )),
        (false, Version::Redis7) => Reply::Error(format!("ERR {message}")),
        (false, Version::Redis6) => Reply::Error(format!(
            "ERR Error running script (call to f_{sha}): @{message}"
        )),
    }
}
