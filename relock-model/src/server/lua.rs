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

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use mlua::{Function, Lua, MultiValue, Table, Value};
use sha1::{Digest, Sha1};

use super::functions::{self, Library};
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

/// A Lua state set up as Redis sets its own up, the scripts compiled in it, and the function
/// libraries loaded in it.
struct Interpreter {
    lua: Lua,
    /// Runs a script's function: (true, its value) or (false, whether an error table, text).
    trampoline: Function,
    /// Runs a library's chunk as `FUNCTION LOAD` does: (true, what it registered) or (false,
    /// the error's text).
    loader: Function,
    compiled: HashMap<String, Function>,
    /// Each library loaded in this interpreter, by its load: its callbacks by function name.
    libraries: HashMap<u64, HashMap<String, Function>>,
}

/// A function a library's chunk registered: what the server keeps, and its callback.
struct Registered {
    function: functions::Function,
    callback: Function,
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
        let (trampoline, loader): (Function, Function) =
            lua.load(library(version)).set_name("=redis").eval()?;
        // Redis's sandbox: no file or process access.
        for name in ["loadfile", "dofile", "io", "os", "require", "module"] {
            lua.globals().raw_set(name, Value::Nil)?;
        }
        Ok(Interpreter {
            lua,
            trampoline,
            loader,
            compiled: HashMap::new(),
            libraries: HashMap::new(),
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

    /// Compiles a library's `body` and runs it in its load environment: the functions it
    /// registered, in order, or `FUNCTION LOAD`'s error.
    fn run_library(&self, body: &[u8]) -> Result<Vec<Registered>, Reply> {
        let chunk = self
            .lua
            .load(body)
            .set_name("@user_function")
            .into_function()
            .map_err(|e| {
                Reply::error(format!("ERR Error compiling function: {}", first_line(&e)))
            })?;
        let (ok, result): (bool, Value) = self.loader.call(chunk).map_err(internal)?;
        let registered = match result {
            Value::Table(t) if ok => t,
            other => {
                let message = match other {
                    Value::String(s) => s.to_string_lossy(),
                    _ => String::new(),
                };
                return Err(Reply::error(format!(
                    "ERR Error registering functions: {message}"
                )));
            }
        };
        let mut out = Vec::new();
        for entry in registered.sequence_values::<Table>() {
            let entry = entry.map_err(internal)?;
            let name: mlua::LuaString = entry.get("name").map_err(internal)?;
            let description: Option<mlua::LuaString> =
                entry.get("description").map_err(internal)?;
            out.push(Registered {
                function: functions::Function {
                    name: name.to_string_lossy(),
                    description: description.map(|d| d.as_bytes().to_vec()),
                    flags: entry.get("flags").map_err(internal)?,
                },
                callback: entry.get("callback").map_err(internal)?,
            });
        }
        Ok(out)
    }

    /// The callback of `library`'s function `name`: from this interpreter's instance of that
    /// load, made now if this thread has none yet.
    fn callback(&mut self, library: &Library, name: &str) -> Result<Function, Reply> {
        if !self.libraries.contains_key(&library.load()) {
            let registered = self.run_library(library.body())?;
            self.keep(library.load(), &registered);
        }
        self.libraries
            .get(&library.load())
            .and_then(|callbacks| callbacks.get(name))
            .cloned()
            .ok_or_else(|| Reply::error("ERR Function not found"))
    }

    fn keep(&mut self, load: u64, registered: &[Registered]) {
        let callbacks = registered
            .iter()
            .map(|r| (r.function.name.clone(), r.callback.clone()))
            .collect();
        self.libraries.insert(load, callbacks);
    }

    /// Runs `f` with `args` on `server` (read-only when `read_only`): its reply, or (whether it
    /// raised an error table, the error's text).
    fn invoke(
        &self,
        server: &mut Server,
        f: Function,
        args: impl mlua::IntoLuaMulti,
        read_only: bool,
    ) -> Result<Result<Reply, (bool, String)>, Reply> {
        let lua = &self.lua;
        let redis: Table = lua.globals().get("redis").map_err(internal)?;
        let cell = RefCell::new(server);
        let result = lua.scope(|scope| {
            let raw = scope
                .create_function(|lua, args: MultiValue| command(lua, &cell, args, read_only))?;
            redis.raw_set("__raw", raw)?;
            self.trampoline
                .call::<(bool, Value, Option<mlua::LuaString>)>((f, args))
        });
        let _ = redis.raw_set("__raw", Value::Nil);
        Ok(match result.map_err(internal)? {
            (true, value, _) => Ok(to_reply(&value)),
            (false, raised, message) => Err((
                matches!(raised, Value::Boolean(true)),
                message.map(|m| m.to_string_lossy()).unwrap_or_default(),
            )),
        })
    }
}

/// The first line of a Lua error's message (its traceback cut off; a syntax error's message
/// as Lua gives it).
fn first_line(e: &mlua::Error) -> String {
    let text = match e {
        mlua::Error::CallbackError { cause, .. } => return first_line(cause),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => other.to_string(),
    };
    text.lines().next().unwrap_or("").to_string()
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

/// The `redis` library's Lua side: `redis.call` raises a command's error (Redis 7 as the error
/// table, Redis 6 as its text), `redis.pcall` returns it; both reach the server through
/// `redis.__raw`, set for each run. Then the trampoline every script and function runs
/// through: it tells an error table from a string. Then the loader of a function library
/// (Redis 7.0's `function_lua.c`): it runs the library's chunk in an environment of the
/// library's own, which only Redis's load API backs (`redis.register_function`, `redis.log`,
/// the log levels and the version) until the chunk returned, and the scripts' globals after
/// (without `KEYS` and `ARGV`), both read-only, a missing name an error, as Redis's are.
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
local pcall, error, type, tostring, select, pairs = pcall, error, type, tostring, select, pairs
local rawget, setmetatable, setfenv, lower, match = rawget, setmetatable, setfenv, string.lower, string.match
local G = _G

local function trampoline(f, ...)
    local ok, result = pcall(f, ...)
    if ok then
        return true, result, nil
    end
    if type(result) == 'table' then
        return false, true, tostring(result.err)
    end
    return false, false, tostring(result)
end

local function readonly()
    error('Attempt to modify a readonly table', 2)
end
local function nonexistent(name)
    return "Script attempted to access nonexistent global variable '" .. tostring(name) .. "'"
end
local function fail(message)
    error({{err = 'ERR ' .. message}})
end
local function is_string(v)
    return type(v) == 'string' or type(v) == 'number'
end
local FLAGS = {{['no-writes'] = 1, ['allow-oom'] = 2, ['allow-stale'] = 4, ['no-cluster'] = 8,
    ['allow-cross-slot-keys'] = 16}}

-- What the chunk being loaded registered so far (nil: no load runs).
local registering = nil

local function register_function(...)
    if registering == nil then
        fail('redis.register_function can only be called on FUNCTION LOAD command')
    end
    local argc = select('#', ...)
    if argc < 1 or argc > 2 then
        fail('wrong number of arguments to redis.register_function')
    end
    local name, callback, flags, description = nil, nil, 0, nil
    if argc == 1 then
        local named = ...
        if type(named) ~= 'table' then
            fail('calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).')
        end
        for key, value in pairs(named) do
            if not is_string(key) then
                fail('named argument key given to redis.register_function is not a string')
            end
            key = lower(tostring(key))
            if key == 'function_name' then
                if not is_string(value) then
                    fail('function_name argument given to redis.register_function must be a string')
                end
                name = tostring(value)
            elseif key == 'description' then
                if not is_string(value) then
                    fail('description argument given to redis.register_function must be a string')
                end
                description = tostring(value)
            elseif key == 'callback' then
                if type(value) ~= 'function' then
                    fail('callback argument given to redis.register_function must be a function')
                end
                callback = value
            elseif key == 'flags' then
                if type(value) ~= 'table' then
                    fail('flags argument to redis.register_function must be a table representing function flags')
                end
                local seen = {{}}
                local i = 1
                while value[i] ~= nil do
                    local flag = value[i]
                    local bit = is_string(flag) and FLAGS[lower(tostring(flag))]
                    if not bit then
                        fail('unknown flag given')
                    end
                    if not seen[bit] then
                        seen[bit] = true
                        flags = flags + bit
                    end
                    i = i + 1
                end
            else
                fail('unknown argument given to redis.register_function')
            end
        end
        if name == nil then
            fail('redis.register_function must get a function name argument')
        end
        if callback == nil then
            fail('redis.register_function must get a callback argument')
        end
    else
        local first, second = ...
        if not is_string(first) then
            fail('first argument to redis.register_function must be a string')
        end
        if type(second) ~= 'function' then
            fail('second argument to redis.register_function must be a function')
        end
        name, callback = tostring(first), second
    end
    if not match(name, '^[a-zA-Z0-9_]+$') then
        fail('Library names can only contain letters, numbers, or underscores(_) and must be at least one character long')
    end
    for _, known in pairs(registering) do
        if known.name == name then
            fail('Function already exists in the library')
        end
    end
    registering[#registering + 1] = {{name = name, callback = callback, flags = flags,
        description = description}}
end

-- The `redis` table a library's chunk sees while it loads.
local load_api = {{register_function = register_function}}
for _, field in pairs({{'log', 'LOG_DEBUG', 'LOG_VERBOSE', 'LOG_NOTICE', 'LOG_WARNING',
        'REDIS_VERSION', 'REDIS_VERSION_NUM'}}) do
    load_api[field] = redis[field]
end
local load_redis = setmetatable({{}}, {{
    __index = function(_, name)
        local value = load_api[name]
        if value == nil then
            error(nonexistent(name), 2)
        end
        return value
    end,
    __newindex = readonly,
}})
local function load_index(_, name)
    if name == 'redis' then
        return load_redis
    end
    error(nonexistent(name), 2)
end
local function runtime_index(_, name)
    if name ~= 'KEYS' and name ~= 'ARGV' then
        local value = rawget(G, name)
        if value ~= nil then
            return value
        end
    end
    error(nonexistent(name), 2)
end

local function load_library(chunk)
    local meta = {{__index = load_index, __newindex = readonly}}
    setfenv(chunk, setmetatable({{}}, meta))
    registering = {{}}
    local ok, err = pcall(chunk)
    local registered = registering
    registering = nil
    meta.__index = runtime_index
    if ok then
        return true, registered
    end
    if type(err) == 'table' then
        return false, tostring(err.err)
    end
    return false, 'ERR ' .. tostring(err)
end

return trampoline, load_library
"#
    )
}

/// `redis.__raw`: runs the command on the server and converts its reply to Lua (an error as
/// an error table). A read-only run (`read_only`) may run no write command.
fn command(
    lua: &Lua,
    server: &RefCell<&mut Server>,
    args: MultiValue,
    read_only: bool,
) -> mlua::Result<Value> {
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
    if read_only && is_write(&argv[0]) {
        return to_lua(
            lua,
            &Reply::error("ERR Write commands are not allowed from read-only scripts."),
        );
    }
    let outcome = server.borrow_mut().dispatch(&argv, true);
    match outcome {
        Ok(reply) | Err(reply) => to_lua(lua, &reply),
    }
}

/// Whether Redis 7.0 flags the command `name` `write` or `may-replicate`: what a read-only
/// script may not run (the commands the simulated server has, and the other common writes,
/// so that a read-only script is refused them before the server finds it lacks them).
fn is_write(name: &[u8]) -> bool {
    const WRITES: &[&str] = &[
        // keys
        "del",
        "unlink",
        "expire",
        "pexpire",
        "expireat",
        "pexpireat",
        "persist",
        "rename",
        "renamenx",
        "copy",
        "move",
        "restore",
        "migrate",
        "flushall",
        "flushdb",
        "swapdb",
        "sort",
        // strings
        "set",
        "setnx",
        "setex",
        "psetex",
        "getset",
        "getdel",
        "getex",
        "append",
        "setrange",
        "incr",
        "decr",
        "incrby",
        "decrby",
        "incrbyfloat",
        "mset",
        "msetnx",
        "setbit",
        "bitop",
        "bitfield",
        "pfadd",
        "pfmerge",
        "pfcount",
        // hashes
        "hset",
        "hmset",
        "hsetnx",
        "hdel",
        "hincrby",
        "hincrbyfloat",
        // lists
        "lpush",
        "rpush",
        "lpushx",
        "rpushx",
        "lpop",
        "rpop",
        "lrem",
        "lset",
        "linsert",
        "ltrim",
        "rpoplpush",
        "lmove",
        "lmpop",
        // sets
        "sadd",
        "srem",
        "spop",
        "smove",
        "sinterstore",
        "sunionstore",
        "sdiffstore",
        // sorted sets
        "zadd",
        "zincrby",
        "zrem",
        "zremrangebyscore",
        "zremrangebyrank",
        "zremrangebylex",
        "zpopmin",
        "zpopmax",
        "zmpop",
        "zunionstore",
        "zinterstore",
        "zdiffstore",
        "zrangestore",
        // streams
        "xadd",
        "xdel",
        "xtrim",
        "xgroup",
        "xack",
        "xclaim",
        "xautoclaim",
        "xsetid",
        "xreadgroup",
        // geo
        "geoadd",
        "georadius",
        "georadiusbymember",
        // may-replicate
        "publish",
        "spublish",
    ];
    let name = String::from_utf8_lossy(name).to_lowercase();
    WRITES.contains(&name.as_str())
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
