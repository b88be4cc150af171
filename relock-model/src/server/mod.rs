//! A simulated Redis server: the keyspace on a logical clock, the commands relock's and
//! Redisson's scripts use, `EVAL` / `EVALSHA` running the scripts in Lua 5.1 (as Redis embeds
//! it), and pub/sub counted per channel. A [`Server`] is plain data (it clones, compares and
//! hashes), so a model state can carry it; the Lua interpreter that runs its scripts is one per
//! thread ([`lua`]), outside the state.
//!
//! ```
//! use relock_model::server::{Reply, Server, Version};
//! let mut server = Server::new(Version::Redis7);
//! server.command(&["HSET", "lock", "me", "1"]);
//! server.command(&["PEXPIRE", "lock", "100"]);
//! let reply = server.eval("return redis.call('pttl', KEYS[1])", &["lock"], &[] as &[&str]);
//! assert_eq!(reply, Reply::Int(100));
//! server.advance_to(100); // at its expiry instant the key is still there, as on Redis
//! assert_eq!(server.command(&["PTTL", "lock"]), Reply::Int(0));
//! server.advance_to(101); // one ms later it is gone
//! assert_eq!(server.command(&["EXISTS", "lock"]), Reply::Int(0));
//! ```

use std::collections::BTreeMap;

pub mod data;
pub mod functions;
pub mod lua;
pub mod reply;

mod generic;
mod hashes;
mod lists;
mod numbers;
mod streams;
mod strings;
mod zsets;

pub use data::{Bytes, Data, Entry, Keyspace};
pub use reply::{errors, Outcome, Reply};

/// Which Redis the server answers as: where they differ, the scripts see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
    /// Redis 7.0 and later (and Valkey): `redis.REDIS_VERSION` is set, an error table raised by
    /// a script is its error reply, a command's error reaches the script as such a table.
    Redis7,
    /// Redis 6.x: no `redis.REDIS_VERSION`; a script's error raised with a table is no reply
    /// of its own (Redis 6's error handler concatenates it to a string), and a command's
    /// error reaches the script as a string.
    Redis6,
}

/// A simulated server's whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    version: Version,
    /// The logical clock, in ms (what `TIME` says and what expiry is measured against).
    now: u64,
    /// The keys.
    pub keyspace: Keyspace,
    /// Scripts loaded (by `SCRIPT LOAD` or a first `EVAL`), by their SHA1 in lowercase hex.
    scripts: BTreeMap<String, lua::Script>,
    /// The function libraries loaded (`FUNCTION LOAD`, Redis 7).
    functions: functions::Functions,
    /// How many connections are subscribed to each channel (`PUBLISH`'s reply counts them).
    subscribers: BTreeMap<Bytes, i64>,
    /// Messages published and not yet taken by [`Server::take_published`].
    published: Vec<(Bytes, Bytes)>,
    /// The conformance mirror's script clock (no part of the state: equal on every server).
    script: ScriptClock,
}

/// The conformance mirror's tick: from command `tick` of the running script on, the script's
/// clock reads one ms later (see [`Server::set_script_tick`]); and how many commands the
/// running script has run so far. No part of a server's state: any two compare equal.
#[derive(Clone, Debug, Default)]
struct ScriptClock {
    tick: Option<usize>,
    commands: usize,
}

impl PartialEq for ScriptClock {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ScriptClock {}

impl std::hash::Hash for ScriptClock {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl Server {
    /// An empty server at time 0.
    pub fn new(version: Version) -> Server {
        Server {
            version,
            now: 0,
            keyspace: Keyspace::default(),
            scripts: BTreeMap::new(),
            functions: functions::Functions::default(),
            subscribers: BTreeMap::new(),
            published: Vec::new(),
            script: ScriptClock::default(),
        }
    }

    /// The version the server answers as.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The clock, in ms.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The clock a command reads (`TIME`, `PTTL`, the expiry `PEXPIRE` sets): [`now`](Self::now),
    /// or one ms later from the script's tick on.
    pub fn clock(&self) -> u64 {
        match self.script.tick {
            Some(tick) if self.script.commands > tick => self.now + 1,
            _ => self.now,
        }
    }

    /// Makes the next script's clock read one ms later from its `tick`th command on (0: the
    /// first), as a real server's clock may move on while a script runs: Redis 7.0 tells
    /// whether a key expired by the script's start, but `TIME`, `PTTL` and `PEXPIRE` read the
    /// moving clock. The conformance mirror tries each tick; the models never set one.
    pub fn set_script_tick(&mut self, tick: Option<usize>) {
        self.script.tick = tick;
    }

    /// How many commands the last script ran.
    pub fn script_commands(&self) -> usize {
        self.script.commands
    }

    /// Moves the clock to `ms` (never back) and expires what is due.
    pub fn advance_to(&mut self, ms: u64) {
        self.now = self.now.max(ms);
        self.keyspace.purge(self.now);
    }

    /// Sets the clock to `ms`, back or forth: the conformance mirror follows a real server's
    /// clock, which a script's reply was computed against.
    pub fn set_clock(&mut self, ms: u64) {
        self.now = ms;
        self.keyspace.purge(self.now);
    }

    /// The first moment a key that expires is gone (its expiry + 1 ms: at its expiry a key
    /// is still there), if any key expires.
    pub fn next_expiry(&self) -> Option<u64> {
        self.keyspace.next_expiry()
    }

    /// Runs one command (its name first), as a client sends it.
    pub fn command<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Reply {
        let args: Vec<Bytes> = args.iter().map(|a| a.as_ref().to_vec()).collect();
        self.call(&args)
    }

    /// Runs `script` with `EVAL`.
    pub fn eval<K: AsRef<[u8]>, A: AsRef<[u8]>>(
        &mut self,
        script: &str,
        keys: &[K],
        args: &[A],
    ) -> Reply {
        let mut call: Vec<Bytes> = vec![b"EVAL".to_vec(), script.as_bytes().to_vec()];
        call.push(keys.len().to_string().into_bytes());
        call.extend(keys.iter().map(|k| k.as_ref().to_vec()));
        call.extend(args.iter().map(|a| a.as_ref().to_vec()));
        self.call(&call)
    }

    /// Runs one command given as its arguments.
    pub fn call(&mut self, args: &[Bytes]) -> Reply {
        self.keyspace.purge(self.now);
        match self.dispatch(args, false) {
            Ok(reply) | Err(reply) => reply,
        }
    }

    /// Messages published since the last call, oldest first: (channel, message).
    pub fn take_published(&mut self) -> Vec<(Bytes, Bytes)> {
        std::mem::take(&mut self.published)
    }

    /// Counts one more connection subscribed to `channel`.
    pub fn subscribe(&mut self, channel: &[u8]) {
        *self.subscribers.entry(channel.to_vec()).or_default() += 1;
    }

    /// Counts one connection fewer subscribed to `channel`.
    pub fn unsubscribe(&mut self, channel: &[u8]) {
        if let Some(n) = self.subscribers.get_mut(channel) {
            *n -= 1;
            if *n <= 0 {
                self.subscribers.remove(channel);
            }
        }
    }

    /// A restart that lost everything (no persistence): keys, scripts, function libraries,
    /// subscriptions.
    pub fn restart_empty(&mut self) {
        self.keyspace = Keyspace::default();
        self.scripts.clear();
        self.functions.clear();
        self.subscribers.clear();
        self.published.clear();
    }

    /// A restart that reloaded every write (an AOF fsynced on every write, `appendfsync
    /// always`): the keys stay, with their expiries (absolute, as the AOF keeps them), and so
    /// do the function libraries (the AOF loads them again); scripts and subscriptions are gone.
    pub fn restart_keeping_data(&mut self) {
        self.scripts.clear();
        self.functions.reload();
        self.subscribers.clear();
        self.published.clear();
    }

    /// The command `args` names, run; inside a script when `in_script`.
    pub(crate) fn dispatch(&mut self, args: &[Bytes], in_script: bool) -> Outcome {
        let Some(name) = args.first() else {
            return Err(Reply::error("ERR empty command"));
        };
        let name = String::from_utf8_lossy(name).to_lowercase();
        let rest = &args[1..];
        if in_script {
            self.script.commands += 1;
        } else {
            self.script.commands = 0;
        }
        match name.as_str() {
            "function" | "fcall" | "fcall_ro" if self.version == Version::Redis6 => {
                Err(functions::unknown_command_redis6(args))
            }
            "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" | "function"
                if in_script =>
            {
                Err(Reply::error(
                    "ERR This Redis command is not allowed from script",
                ))
            }
            "eval" => lua::eval(self, rest, false, false),
            "eval_ro" => lua::eval(self, rest, false, true),
            "evalsha" => lua::eval(self, rest, true, false),
            "evalsha_ro" => lua::eval(self, rest, true, true),
            "script" => lua::script_command(self, rest),
            "function" => functions::function_command(self, rest),
            "fcall" => functions::fcall(self, rest, false),
            "fcall_ro" => functions::fcall(self, rest, true),
            "publish" | "spublish" => self.publish(&name, rest),
            _ => generic::dispatch(self, &name, rest)
                .or_else(|| strings::dispatch(self, &name, rest))
                .or_else(|| hashes::dispatch(self, &name, rest))
                .or_else(|| zsets::dispatch(self, &name, rest))
                .or_else(|| lists::dispatch(self, &name, rest))
                .or_else(|| streams::dispatch(self, &name, rest))
                .unwrap_or_else(|| Err(unknown_command(&name, rest))),
        }
    }

    fn publish(&mut self, name: &str, args: &[Bytes]) -> Outcome {
        let [channel, message] = args else {
            return Err(errors::arity(name));
        };
        self.published.push((channel.clone(), message.clone()));
        Ok(Reply::Int(
            self.subscribers.get(channel).copied().unwrap_or(0),
        ))
    }

    /// The function libraries loaded.
    pub fn functions(&self) -> &functions::Functions {
        &self.functions
    }

    /// The function libraries loaded, mutable.
    pub(crate) fn functions_mut(&mut self) -> &mut functions::Functions {
        &mut self.functions
    }

    /// The scripts loaded, by SHA1.
    pub(crate) fn scripts_mut(&mut self) -> &mut BTreeMap<String, lua::Script> {
        &mut self.scripts
    }

    /// The live entry at `key`, if any.
    pub(crate) fn entry(&self, key: &[u8]) -> Option<&Entry> {
        self.keyspace.keys.get(key).filter(|e| e.alive_at(self.now))
    }

    /// The live entry at `key`, mutable.
    pub(crate) fn entry_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let now = self.now;
        self.keyspace.keys.get_mut(key).filter(|e| e.alive_at(now))
    }

    /// Deletes `key` when its container is empty (Redis never keeps an empty hash, list or set).
    pub(crate) fn drop_if_empty(&mut self, key: &[u8]) {
        if self
            .keyspace
            .keys
            .get(key)
            .is_some_and(|e| e.data.is_empty_container())
        {
            self.keyspace.keys.remove(key);
        }
    }

    /// The value at `key` through `pick` (None: the key holds another type), creating it with
    /// `empty` when there is none.
    pub(crate) fn value_or_new<T>(
        &mut self,
        key: &[u8],
        empty: Data,
        pick: impl FnOnce(&mut Data) -> Option<&mut T>,
    ) -> Result<&mut T, Reply> {
        if self.entry(key).is_none() {
            self.keyspace.keys.insert(
                key.to_vec(),
                Entry {
                    data: empty,
                    expires_at: None,
                },
            );
        }
        let entry = self.entry_mut(key).expect("just made");
        pick(&mut entry.data).ok_or_else(errors::wrong_type)
    }
}

/// `ERR unknown command 'x', with args beginning with: 'a' 'b' `, as Redis words it.
fn unknown_command(name: &str, args: &[Bytes]) -> Reply {
    let mut message = format!("ERR unknown command '{name}', with args beginning with: ");
    for arg in args.iter().take(20) {
        message.push_str(&format!("'{}' ", String::from_utf8_lossy(arg)));
    }
    Reply::Error(message)
}

/// Checks the argument count: exactly `n` when `exact`, at least `n` otherwise.
pub(crate) fn arity(name: &str, args: &[Bytes], n: usize, exact: bool) -> Result<(), Reply> {
    if args.len() == n || (!exact && args.len() > n) {
        Ok(())
    } else {
        Err(errors::arity(name))
    }
}
