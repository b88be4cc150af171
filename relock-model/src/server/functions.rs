//! Redis 7 functions: `FUNCTION LOAD | DELETE | FLUSH | LIST | STATS | KILL`, `FCALL` and
//! `FCALL_RO`, answered as Redis 7.0 answers them (its `functions.c`, `function_lua.c` and
//! `script.c`, word for word).
//!
//! A library is server state, not keyspace: `FLUSHALL` and `SCRIPT FLUSH` leave it, a restart
//! without persistence loses it ([`Server::restart_empty`]), one that reloads its AOF keeps it.
//! [`Functions`] is plain data (the library's name, text and the functions it registered, with
//! their flags); the Lua side of a library, its callbacks and the top-level locals they share,
//! lives in the thread's interpreter ([`super::lua`]), made when the library is loaded (or the
//! first time a thread calls it) and kept for as long as that load lasts, so the locals persist
//! from one call to the next as on Redis. The library's top-level chunk runs where Redis runs
//! it: with `redis.register_function`, `redis.log`, `redis.LOG_*` and `redis.REDIS_VERSION*`
//! and nothing else (no `redis.call`, no `string`); its callbacks run with the scripts' globals
//! (`redis.call` and the rest, no `KEYS` or `ARGV`), which they may read but not assign.
//!
//! On [`Version::Redis6`](super::Version::Redis6) none of these commands exists: each is an unknown command, in Redis
//! 6.2's words.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::numbers::int;
use super::{errors, Bytes, Outcome, Reply, Server};

/// The flags a function may carry, in the order Redis lists them (`scripts_flags_def`).
pub const FLAGS: [&str; 5] = [
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

/// The bit of `no-writes` in [`Function::flags`].
pub const NO_WRITES: u8 = 1;

/// The libraries a server has loaded, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Functions {
    libraries: BTreeMap<String, Library>,
}

impl Functions {
    /// The libraries, by name.
    pub fn libraries(&self) -> impl Iterator<Item = &Library> {
        self.libraries.values()
    }

    /// Every library gone (`FUNCTION FLUSH`, a restart without persistence).
    pub fn clear(&mut self) {
        self.libraries.clear();
    }

    /// Every library loaded again, as a restart that reloads its AOF loads them: the same
    /// functions, their top-level locals new.
    pub fn reload(&mut self) {
        for library in self.libraries.values_mut() {
            library.load = LOADS.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The function named `name` (as `FCALL` finds it: whatever its case), and its library.
    fn find(&self, name: &[u8]) -> Option<(&Library, &Function)> {
        self.libraries.values().find_map(|library| {
            library
                .functions
                .iter()
                .find(|f| f.name.as_bytes().eq_ignore_ascii_case(name))
                .map(|f| (library, f))
        })
    }
}

/// A loaded library: its name, its text (as `FUNCTION LOAD` took it, the `#!lua` line first)
/// and the functions it registered, in order. Two compare and hash without their load (which
/// Lua instance of the library a thread runs).
#[derive(Clone, Debug)]
pub struct Library {
    name: String,
    code: Arc<[u8]>,
    /// Where the body starts in `code`: at the newline that ends the `#!lua` line (so the
    /// body's first line is line 2, as on Redis).
    body: usize,
    functions: Vec<Function>,
    load: u64,
}

impl PartialEq for Library {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.code == other.code && self.functions == other.functions
    }
}

impl Eq for Library {}

impl std::hash::Hash for Library {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.code.hash(state);
        self.functions.hash(state);
    }
}

impl Library {
    /// The library's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The functions it registered, in order.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The code the library's Lua chunk is compiled from (the text after its `#!lua` line).
    pub(crate) fn body(&self) -> &[u8] {
        &self.code[self.body..]
    }

    /// Which load of the library this is: the interpreters key their Lua instances by it.
    pub(crate) fn load(&self) -> u64 {
        self.load
    }
}

/// A function a library registered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Function {
    /// Its name, as registered.
    pub name: String,
    /// Its description, if it was given one.
    pub description: Option<Bytes>,
    /// Its flags: bit `i` is [`FLAGS`]`[i]`.
    pub flags: u8,
}

/// Every load of a library is a Lua instance of its own.
static LOADS: AtomicU64 = AtomicU64::new(1);

/// `FUNCTION <subcommand> …`.
pub(super) fn function_command(server: &mut Server, args: &[Bytes]) -> Outcome {
    let Some(sub) = args.first() else {
        return Err(errors::arity("function"));
    };
    let lower = String::from_utf8_lossy(sub).to_lowercase();
    // (subcommand, its arity as Redis's command table gives it: negative is a minimum)
    let arity: i64 = match lower.as_str() {
        "load" | "restore" => -3,
        "list" | "flush" => -2,
        "delete" => 3,
        "stats" | "kill" | "dump" | "help" => 2,
        _ => {
            return Err(Reply::error(format!(
                "ERR unknown subcommand '{}'. Try FUNCTION HELP.",
                truncated(sub, 128)
            )))
        }
    };
    let argc = args.len() as i64 + 1;
    if (arity > 0 && argc != arity) || (arity < 0 && argc < -arity) {
        return Err(Reply::error(format!(
            "ERR wrong number of arguments for 'function|{lower}' command"
        )));
    }
    let rest = &args[1..];
    match lower.as_str() {
        "load" => load_command(server, rest),
        "delete" => {
            let name = String::from_utf8_lossy(&rest[0]).into_owned();
            let version = server.version();
            match server.functions_mut().libraries.remove(&name) {
                Some(library) => {
                    super::lua::forget_library(version, library.load);
                    Ok(Reply::ok())
                }
                None => Err(Reply::error("ERR Library not found")),
            }
        }
        "flush" => flush(server, sub, rest),
        "list" => list(server, rest),
        "stats" => Ok(stats(server)),
        "kill" => Err(Reply::error("NOTBUSY No scripts in execution right now.")),
        other => Err(Reply::error(format!(
            "ERR relock-model does not model FUNCTION {}",
            other.to_uppercase()
        ))),
    }
}

/// `FUNCTION FLUSH [ASYNC|SYNC]`.
fn flush(server: &mut Server, sub: &[u8], args: &[Bytes]) -> Outcome {
    match args {
        [] => {}
        [mode] if mode.eq_ignore_ascii_case(b"sync") || mode.eq_ignore_ascii_case(b"async") => {}
        [_] => {
            return Err(Reply::error(
                "ERR FUNCTION FLUSH only supports SYNC|ASYNC option",
            ))
        }
        _ => {
            return Err(Reply::error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
                truncated(sub, 128)
            )))
        }
    }
    let version = server.version();
    for library in std::mem::take(&mut server.functions_mut().libraries).into_values() {
        super::lua::forget_library(version, library.load);
    }
    Ok(Reply::ok())
}

/// `FUNCTION LOAD [REPLACE] <code>`.
fn load_command(server: &mut Server, args: &[Bytes]) -> Outcome {
    let (code, options) = args.split_last().expect("arity checked");
    let mut replace = false;
    for option in options {
        if option.eq_ignore_ascii_case(b"replace") {
            replace = true;
        } else {
            return Err(Reply::error(format!(
                "ERR Unknown option given: {}",
                String::from_utf8_lossy(option)
            )));
        }
    }
    load(server, code, replace).map(Reply::bulk)
}

/// Loads the library `code` (replacing the one of its name when `replace`) and answers its
/// name, or the error Redis answers.
pub fn load(server: &mut Server, code: &[u8], replace: bool) -> Result<String, Reply> {
    let (name, engine, body) = metadata(code).map_err(|e| Reply::error(format!("ERR {e}")))?;
    if !valid_name(&name) {
        return Err(Reply::error(format!("ERR {BAD_NAME}")));
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(Reply::error(format!("ERR Engine '{engine}' not found")));
    }
    if !replace && server.functions().libraries.contains_key(&name) {
        return Err(Reply::error(format!("ERR Library '{name}' already exists")));
    }
    let version = server.version();
    let load = LOADS.fetch_add(1, Ordering::Relaxed);
    let registered = super::lua::load_library(version, load, &code[body..])?;
    let forget = |reply: Reply| {
        super::lua::forget_library(version, load);
        reply
    };
    if registered.is_empty() {
        return Err(forget(Reply::error("ERR No functions registered")));
    }
    let others = server
        .functions()
        .libraries
        .values()
        .filter(|library| library.name != name);
    for library in others {
        for function in &library.functions {
            if let Some(clash) = registered
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case(&function.name))
            {
                return Err(forget(Reply::error(format!(
                    "ERR Function {} already exists",
                    clash.name
                ))));
            }
        }
    }
    let library = Library {
        name: name.clone(),
        code: Arc::from(code),
        body,
        functions: registered,
        load,
    };
    if let Some(old) = server
        .functions_mut()
        .libraries
        .insert(name.clone(), library)
    {
        super::lua::forget_library(version, old.load);
    }
    Ok(name)
}

const BAD_NAME: &str = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// Redis's check of a library's or a function's name: `[a-zA-Z0-9_]+`.
fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// The `#!<engine> name=<name>` line of `code`: (name, engine, where the body starts), or the
/// error's text (without its `ERR`).
fn metadata(code: &[u8]) -> Result<(String, String, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let Some(end) = code.iter().position(|&b| b == b'\n') else {
        return Err("Invalid library metadata".into());
    };
    // Redis splits the line as `sdssplitargs` does; relock's and the tests' lines have no
    // quotes, so splitting at whitespace is the same.
    let shebang = String::from_utf8_lossy(&code[..end]);
    let parts: Vec<&str> = shebang.split_ascii_whitespace().collect();
    let Some(first) = parts.first() else {
        return Err("Invalid library metadata".into());
    };
    let engine = first.get(2..).unwrap_or("").to_string();
    let mut name = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case("name=") {
            if name.is_some() {
                return Err(
                    "Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(part[5..].to_string());
            continue;
        }
        return Err(format!("Invalid metadata value given: {part}"));
    }
    let name = name.ok_or_else(|| "Library name was not given".to_string())?;
    Ok((name, engine, end))
}

/// `FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]`: the libraries in name order (Redis lists
/// them, and each library's functions, in its hash tables' order).
fn list(server: &Server, args: &[Bytes]) -> Outcome {
    let mut with_code = false;
    let mut pattern: Option<&Bytes> = None;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        if !with_code && arg.eq_ignore_ascii_case(b"withcode") {
            with_code = true;
        } else if pattern.is_none() && arg.eq_ignore_ascii_case(b"libraryname") {
            if i + 1 >= args.len() {
                return Err(Reply::error("ERR library name argument was not given"));
            }
            i += 1;
            pattern = Some(&args[i]);
        } else {
            return Err(Reply::error(format!(
                "ERR Unknown argument {}",
                String::from_utf8_lossy(arg)
            )));
        }
        i += 1;
    }
    let pattern = pattern.map(|p| p.to_ascii_lowercase());
    let libraries = server
        .functions()
        .libraries
        .values()
        .filter(|library| {
            pattern.as_ref().is_none_or(|p| {
                super::generic::glob(p, library.name.to_ascii_lowercase().as_bytes())
            })
        })
        .map(|library| {
            let functions = library
                .functions
                .iter()
                .map(|f| {
                    Reply::Array(vec![
                        Reply::bulk("name"),
                        Reply::bulk(&f.name),
                        Reply::bulk("description"),
                        f.description.as_ref().map_or(Reply::Nil, Reply::bulk),
                        Reply::bulk("flags"),
                        Reply::Array(
                            FLAGS
                                .iter()
                                .enumerate()
                                .filter(|(bit, _)| f.flags & (1 << bit) != 0)
                                .map(|(_, flag)| Reply::Status(flag.to_string()))
                                .collect(),
                        ),
                    ])
                })
                .collect();
            let mut entry = vec![
                Reply::bulk("library_name"),
                Reply::bulk(&library.name),
                Reply::bulk("engine"),
                Reply::bulk("LUA"),
                Reply::bulk("functions"),
                Reply::Array(functions),
            ];
            if with_code {
                entry.push(Reply::bulk("library_code"));
                entry.push(Reply::bulk(&library.code[..]));
            }
            Reply::Array(entry)
        })
        .collect();
    Ok(Reply::Array(libraries))
}

/// `FUNCTION STATS`: no function runs while a client's command does.
fn stats(server: &Server) -> Reply {
    let libraries = server.functions().libraries.len();
    let functions: usize = server
        .functions()
        .libraries
        .values()
        .map(|l| l.functions.len())
        .sum();
    Reply::Array(vec![
        Reply::bulk("running_script"),
        Reply::Nil,
        Reply::bulk("engines"),
        Reply::Array(vec![
            Reply::bulk("LUA"),
            Reply::Array(vec![
                Reply::bulk("libraries_count"),
                Reply::Int(libraries as i64),
                Reply::bulk("functions_count"),
                Reply::Int(functions as i64),
            ]),
        ]),
    ])
}

/// `FCALL function numkeys key… arg…` (`FCALL_RO` when `read_only`).
pub(super) fn fcall(server: &mut Server, args: &[Bytes], read_only: bool) -> Outcome {
    let name = if read_only { "fcall_ro" } else { "fcall" };
    if args.len() < 2 {
        return Err(errors::arity(name));
    }
    let Some((library, function)) = server.functions().find(&args[0]) else {
        return Err(Reply::error("ERR Function not found"));
    };
    let (library, function) = (library.clone(), function.clone());
    let numkeys = int(&args[1]).ok_or_else(|| Reply::error("ERR Bad number of keys provided"))?;
    if numkeys > (args.len() - 2) as i64 {
        return Err(Reply::error(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    if numkeys < 0 {
        return Err(Reply::error("ERR Number of keys can't be negative"));
    }
    let no_writes = function.flags & NO_WRITES != 0;
    if read_only && !no_writes {
        return Err(Reply::error(
            "ERR Can not execute a script with write flag using *_ro command.",
        ));
    }
    let (keys, argv) = args[2..].split_at(numkeys as usize);
    super::lua::call_function(
        server,
        &library,
        &function.name,
        keys,
        argv,
        read_only || no_writes,
    )
}

/// What Redis 6.2, which has no functions, answers to `FUNCTION`, `FCALL` and `FCALL_RO`:
/// `ERR unknown command `fcall`, with args beginning with: `f`, `0`, ` (the command's name
/// as sent, its arguments up to 128 characters).
pub(super) fn unknown_command_redis6(args: &[Bytes]) -> Reply {
    let mut listed = String::new();
    for arg in &args[1..] {
        if listed.len() >= 128 {
            break;
        }
        let room = 128 - listed.len();
        let text = String::from_utf8_lossy(&arg[..arg.len().min(room)]);
        listed.push_str(&format!("`{text}`, "));
    }
    Reply::Error(format!(
        "ERR unknown command `{}`, with args beginning with: {listed}",
        String::from_utf8_lossy(&args[0])
    ))
}

/// At most `n` bytes of `text`, as `%.128s` prints it.
fn truncated(text: &[u8], n: usize) -> String {
    String::from_utf8_lossy(&text[..text.len().min(n)]).into_owned()
}
