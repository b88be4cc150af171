//! The Lua interpreter of each thread and [`Version`]: a Lua state set up as Redis sets its
//! own up (the `redis` table, the prelude, the sandbox), the scripts compiled in it and the
//! function libraries loaded in it, and a run of a script or a function with the server it
//! runs on reachable through `redis.__raw`.

use std::cell::RefCell;
use std::collections::HashMap;

use mlua::{Function, Lua, MultiValue, Table, Value};

use super::convert::{lua_number_text, to_lua, to_reply};
use super::prelude::library;
use super::writes::is_write;
use super::{internal, sha1_hex, Script};
use crate::server::functions::{self, Library};
use crate::server::{Reply, Server, Version};

thread_local! {
    static INTERPRETERS: RefCell<HashMap<Version, Interpreter>> = RefCell::new(HashMap::new());
}

pub(super) fn with_interpreter<T>(version: Version, f: impl FnOnce(&mut Interpreter) -> T) -> T {
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
pub(super) struct Interpreter {
    pub(super) lua: Lua,
    /// Runs a script's function: (true, its value) or (false, whether an error table, text).
    trampoline: Function,
    /// Runs a library's chunk as `FUNCTION LOAD` does: (true, what it registered) or (false,
    /// the error's text).
    loader: Function,
    compiled: HashMap<String, Function>,
    /// Each library loaded in this interpreter, by its load: its callbacks by function name.
    pub(super) libraries: HashMap<u64, HashMap<String, Function>>,
}

/// A function a library's chunk registered: what the server keeps, and its callback.
pub(super) struct Registered {
    pub(super) function: functions::Function,
    callback: Function,
}

impl Interpreter {
    fn new(version: Version) -> mlua::Result<Interpreter> {
        let lua = Lua::new();
        let redis = lua.create_table()?;
        redis.set(
            "error_reply",
            lua.create_function(move |lua, message: mlua::LuaString| {
                let t = lua.create_table()?;
                t.set(
                    "err",
                    lua.create_string(error_reply(version, &message.as_bytes()))?,
                )?;
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
    pub(super) fn compiled(&mut self, script: &Script) -> Result<Function, Reply> {
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
    pub(super) fn run_library(&self, body: &[u8]) -> Result<Vec<Registered>, Reply> {
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
    pub(super) fn callback(&mut self, library: &Library, name: &str) -> Result<Function, Reply> {
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

    pub(super) fn keep(&mut self, load: u64, registered: &[Registered]) {
        let callbacks = registered
            .iter()
            .map(|r| (r.function.name.clone(), r.callback.clone()))
            .collect();
        self.libraries.insert(load, callbacks);
    }

    /// Runs `f` with `args` on `server` (read-only when `read_only`): its reply, or (whether it
    /// raised an error table, the error's text).
    pub(super) fn invoke(
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

/// The error a script's `redis.error_reply(message)` makes. Redis 7 makes it `<code> <text>`:
/// a message `-CODE text` or `CODE text` keeps its first word as the code, and a message of one
/// word gets the code `ERR` (`NON_REENTRANT_REACQUIRE` is answered `ERR
/// NON_REENTRANT_REACQUIRE`). Redis 6 keeps the message as it is.
fn error_reply(version: Version, message: &[u8]) -> Vec<u8> {
    if version == Version::Redis6 {
        return message.to_vec();
    }
    let message = message.strip_prefix(b"-").unwrap_or(message);
    let end = message.len()
        - message
            .iter()
            .rev()
            .take_while(|&&b| b == b'\r' || b == b'\n')
            .count();
    let message = &message[..end];
    match message.iter().position(|&b| b == b' ') {
        Some(_) => message.to_vec(),
        None => [b"ERR ".as_slice(), message].concat(),
    }
}
