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
//! An uncaught error's reply carries no `script: <sha>, on @user_script:<line>.` suffix here:
//! the conformance mirror compares error replies without it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use mlua::{Function, Lua, MultiValue, Table, Value};
use sha1::{Digest, Sha1};

use super::numbers::int;
use super::{errors, Bytes, Outcome, Reply, Server, Version};

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

/// `EVAL script numkeys key… arg…` (or `EVALSHA sha …` when `by_sha`).
pub(super) fn eval(server: &mut Server, args: &[Bytes], by_sha: bool) -> Outcome {
    let name = if by_sha { "evalsha" } else { "eval" };
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
    run(server, &script, keys, argv)
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

thread_local! {
    static INTERPRETERS: RefCell<HashMap<Version, Interpreter>> = RefCell::new(HashMap::new());
}

fn with_interpreter<T>(version: Version, f: impl FnOnce(&mut Interpreter) -> T) -> T {
    INTERPRETERS.with(|all| {
        let mut all = all.borrow_mut();
        let interp = all
            .entry(version)
            .or_insert_with(|| Interpreter::new(version).expect("a Lua interpreter"));
        f(interp)
    })
}

/// A Lua state set up as Redis sets its own up, and the scripts compiled in it.
struct Interpreter {
    lua: Lua,
    /// Runs a script's function: (true, its value) or (false, whether an error table, text).
    trampoline: Function,
    compiled: HashMap<String, Function>,
}

impl Interpreter {
    fn new(version: Version) -> mlua::Result<Interpreter> {
        let lua = Lua::new();
        let redis = lua.create_table()?;
        redis.set(
            "error_reply",
            lua.create_function(|lua, message: mlua::LuaString| {
                let t = lua.create_table()?;
                t.set("err", message)?;
                Ok(t)
            })?,
        )?;
        redis.set(
            "status_reply",
            lua.create_function(|lua, message: mlua::LuaString| {
                let t = lua.create_table()?;
                t.set("ok", message)?;
                Ok(t)
            })?,
        )?;
        redis.set(
            "sha1hex",
            lua.create_function(|_, text: mlua::LuaString| Ok(sha1_hex(&text.as_bytes())))?,
        )?;
        redis.set("log", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
        for (i, level) in ["LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"]
            .iter()
            .enumerate()
        {
            redis.set(*level, i)?;
        }
        if version == Version::Redis7 {
            redis.set("REDIS_VERSION", "7.0.15")?;
            redis.set("REDIS_VERSION_NUM", 0x07000f)?;
        }
        lua.globals().set("redis", redis)?;
        let trampoline: Function = lua.load(library(version)).set_name("=redis").eval()?;
        // Redis's sandbox: no file or process access.
        for name in ["loadfile", "dofile", "io", "os", "require", "module"] {
            lua.globals().raw_set(name, Value::Nil)?;
        }
        Ok(Interpreter {
            lua,
            trampoline,
            compiled: HashMap::new(),
        })
    }

    /// The compiled function of `script`; compiles it the first time.
    fn compiled(&mut self, script: &Script) -> Result<Function, Reply> {
        if let Some(f) = self.compiled.get(&script.sha) {
            return Ok(f.clone());
        }
        let f = self
            .lua
            .load(&script.text[..])
            .set_name("@user_script")
            .into_function()
            .map_err(|e| {
                Reply::error(format!(
                    "ERR Error compiling script (new function): {}",
                    first_line(&e)
                ))
            })?;
        self.compiled.insert(script.sha.clone(), f.clone());
        Ok(f)
    }
}

/// The first line of a Lua error's message (its traceback cut off).
fn first_line(e: &mlua::Error) -> String {
    let text = match e {
        mlua::Error::CallbackError { cause, .. } => return first_line(cause),
        other => other.to_string(),
    };
    text.lines().next().unwrap_or("").to_string()
}

/// Runs a loaded script on `server` with `keys` and `argv`.
fn run(server: &mut Server, script: &Script, keys: &[Bytes], argv: &[Bytes]) -> Outcome {
    let version = server.version();
    with_interpreter(version, |interp| {
        let f = interp.compiled(script)?;
        let lua = &interp.lua;
        let globals = lua.globals();
        let set_list = |name: &str, items: &[Bytes]| -> mlua::Result<()> {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, lua.create_string(item)?)?;
            }
            globals.raw_set(name, t)
        };
        set_list("KEYS", keys).map_err(internal)?;
        set_list("ARGV", argv).map_err(internal)?;
        let redis: Table = globals.get("redis").map_err(internal)?;
        let cell = RefCell::new(server);
        let result = lua.scope(|scope| {
            let raw = scope.create_function(|lua, args: MultiValue| command(lua, &cell, args))?;
            redis.raw_set("__raw", raw)?;
            interp
                .trampoline
                .call::<(bool, Value, Option<mlua::LuaString>)>(f)
        });
        let _ = redis.raw_set("__raw", Value::Nil);
        match result.map_err(internal)? {
            (true, value, _) => Ok(to_reply(&value)),
            (false, raised, message) => {
                let message = message.map(|m| m.to_string_lossy()).unwrap_or_default();
                Err(script_error(
                    matches!(raised, Value::Boolean(true)),
                    message,
                    &script.sha,
                    version,
                ))
            }
        }
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

/// The `redis` library's Lua side: `redis.call` raises a command's error (Redis 7 as the error
/// table, Redis 6 as its text), `redis.pcall` returns it; both reach the server through
/// `redis.__raw`, set for each run. Then the trampoline every script runs through: it tells
/// an error table from a string.
fn library(version: Version) -> String {
    let raise = match version {
        Version::Redis7 => "error(reply, 0)",
        Version::Redis6 => "error(reply.err, 0)",
    };
    format!(
        r#"
redis.pcall = function(...) return redis.__raw(...) end
redis.call = function(...)
    local reply = redis.__raw(...)
    if type(reply) == 'table' and reply.err ~= nil then
        {raise}
    end
    return reply
end
return function(f)
    local ok, result = pcall(f)
    if ok then
        return true, result, nil
    end
    if type(result) == 'table' then
        return false, true, tostring(result.err)
    end
    return false, false, tostring(result)
end
"#
    )
}

/// `redis.__raw`: runs the command on the server and converts its reply to Lua (an error as
/// an error table).
fn command(lua: &Lua, server: &RefCell<&mut Server>, args: MultiValue) -> mlua::Result<Value> {
    let mut argv = Vec::with_capacity(args.len());
    for arg in args.iter() {
        match arg {
            Value::String(s) => argv.push(s.as_bytes().to_vec()),
            Value::Integer(n) => argv.push(n.to_string().into_bytes()),
            Value::Number(n) => argv.push(lua_number_text(*n).into_bytes()),
            _ => {
                return to_lua(
                    lua,
                    &Reply::error(
                        "ERR Lua redis lib command arguments must be strings or integers",
                    ),
                )
            }
        }
    }
    if argv.is_empty() {
        return to_lua(
            lua,
            &Reply::error("ERR Please specify at least one argument for this redis lib call"),
        );
    }
    let outcome = server.borrow_mut().dispatch(&argv, true);
    match outcome {
        Ok(reply) | Err(reply) => to_lua(lua, &reply),
    }
}

/// A Lua number as Redis passes it to a command: whole numbers as integers.
fn lua_number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// A reply as Redis hands it to Lua.
fn to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Int(n) => Value::Number(*n as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(b)?),
        Reply::Nil | Reply::NilArray => Value::Boolean(false),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.set("ok", s.as_str())?;
            Value::Table(t)
        }
        Reply::Error(s) => {
            let t = lua.create_table()?;
            t.set("err", s.as_str())?;
            Value::Table(t)
        }
        Reply::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

/// A script's returned value as Redis turns it into a reply.
fn to_reply(value: &Value) -> Reply {
    match value {
        Value::Integer(n) => Reply::Int(*n),
        Value::Number(n) => Reply::Int(*n as i64),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Boolean(true) => Reply::Int(1),
        Value::Table(t) => {
            if let Ok(Value::String(err)) = t.raw_get::<Value>("err") {
                return Reply::Error(err.to_string_lossy());
            }
            if let Ok(Value::String(ok)) = t.raw_get::<Value>("ok") {
                return Reply::Status(ok.to_string_lossy());
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(item) => items.push(to_reply(&item)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}
