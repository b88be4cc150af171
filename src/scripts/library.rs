//! relock's scripts as one Redis function library, the way a client runs them on Redis 7.0 and
//! later (and Valkey), and the `EVALSHA` path it falls back to.
//!
//! A script sent by `EVALSHA` is its whole text run from the top on every call, which makes
//! each `local function` of its fragments again; a function library makes them once, when it
//! is loaded (`FUNCTION LOAD`), and `FCALL` runs only the script's own body. So at connect a
//! client loads [`LIBRARY`] (every script of the catalogue, `build.rs` writes it) and calls
//! its scripts by `FCALL`, or `FCALL_RO` for those flagged `no-writes`. The library's name
//! carries a hash of its text (`relock_<16 hex digits>`), and so does each function's name
//! (`relock_<id>_lock_acquire`): two relock versions against one server load two libraries
//! and never replace each other's functions (function names are global across libraries).
//!
//! A library can go missing as a script can: a restarted server without persistence,
//! `FUNCTION FLUSH`, a failover to a replica that never had it, a cluster master added after
//! the connect. `FCALL` then fails with `ERR Function not found`, before anything ran, and the
//! client loads the library again and resends, as it does on `NOSCRIPT`.
//!
//! Where there are no functions (Redis 6.x), where `FUNCTION LOAD` is refused (an ACL, a
//! managed service), or where [`Config::with_functions`](crate::Config::with_functions) turned
//! them off, the client sends its scripts by `EVALSHA` as before; which path it took, and why,
//! shows in [`ClientStats::scripts`](crate::ClientStats::scripts) and in a debug log line at
//! connect. Scripts made at run time (a fenced user script) always go by `EVALSHA`.

use fred::bytes_utils::Str;
use fred::clients::Client as Redis;
use fred::interfaces::FunctionInterface;
use once_cell::sync::Lazy;

use super::catalogue;
use crate::meter::stats::{Evalsha, ScriptCalls};

/// relock's function library: its name and the text `FUNCTION LOAD` takes.
pub(crate) struct Library {
    /// `relock_<id>`, the id being the first 16 hex digits of the SHA1 of the library's body.
    pub(crate) name: String,
    /// The shebang line, then the body with the id in place of each `@ID@`.
    pub(crate) text: Str,
    id: String,
}

/// This build's library, made once per process.
pub(crate) static LIBRARY: Lazy<Library> = Lazy::new(|| {
    let body = catalogue::LIBRARY_BODY;
    let id = fred::util::sha1_hash(body)[..16].to_owned();
    let name = format!("{PREFIX}{id}");
    let text = format!("#!lua name={name}\n{}", body.replace("@ID@", &id));
    Library {
        name,
        text: text.into(),
        id,
    }
});

/// What every relock library's name starts with (the command line finds them by it).
pub(crate) const PREFIX: &str = "relock_";

impl Library {
    /// The function name of the catalogue's script `constant` (`LOCK_ACQUIRE` is
    /// `relock_<id>_lock_acquire`).
    pub(crate) fn function(&self, constant: &str) -> Str {
        format!("{PREFIX}{}_{}", self.id, constant.to_lowercase()).into()
    }
}

/// The name of the function library this build of relock loads (`relock_<16 hex digits>`):
/// every build whose scripts differ has its own. The `relock functions` command lists the
/// libraries of other builds on a server and removes them.
///
/// ```
/// let name = relock::library_name();
/// assert!(name.starts_with("relock_") && name.len() == "relock_".len() + 16);
/// ```
pub fn library_name() -> &'static str {
    &LIBRARY.name
}

/// Loads [`LIBRARY`] where `redis` sends its commands: on a cluster, on every master (where
/// it is there already it is replaced by itself, which changes nothing); elsewhere once, a
/// library of that name already there being this very text.
pub(crate) async fn load<C: FunctionInterface + Sync>(
    redis: &C,
    clustered: bool,
) -> Result<(), fred::error::Error> {
    let text = LIBRARY.text.clone();
    let loaded = if clustered {
        redis.function_load_cluster::<(), _>(true, text).await
    } else {
        redis.function_load::<(), _>(false, text).await
    };
    match loaded {
        Err(e) if e.details().contains("already exists") => Ok(()),
        result => result,
    }
}

/// How a client connected to `server` by `redis` sends its scripts: as functions when `wanted`
/// (the client's config) and the server loads the library (which this loads), by `EVALSHA`
/// otherwise. `major` is the server's Redis version (0: unknown, so tried). Said once, in a
/// debug log line.
pub(crate) async fn choose(
    redis: &Redis,
    clustered: bool,
    wanted: bool,
    major: u32,
    server: &str,
) -> ScriptCalls {
    if !wanted {
        tracing::debug!(
            server,
            "relock sends its scripts by EVALSHA: {}",
            Evalsha::Configured
        );
        return ScriptCalls::Evalsha(Evalsha::Configured);
    }
    if major != 0 && major < 7 {
        tracing::debug!(
            server,
            "relock sends its scripts by EVALSHA: {}",
            Evalsha::NoFunctions
        );
        return ScriptCalls::Evalsha(Evalsha::NoFunctions);
    }
    match load(redis, clustered).await {
        Ok(()) => {
            tracing::debug!(server, library = %LIBRARY.name, "relock calls its scripts as functions (FCALL)");
            ScriptCalls::Functions
        }
        Err(e) => {
            // No such command on a server that should have it: renamed away, refused.
            let why = if e.details().contains("unknown command") && major < 7 {
                Evalsha::NoFunctions
            } else {
                Evalsha::Refused
            };
            tracing::debug!(server, "relock sends its scripts by EVALSHA: {why} ({e})");
            ScriptCalls::Evalsha(why)
        }
    }
}

/// Whether `error`, `FUNCTION LOAD`'s, says the server will not load a library for this
/// client: no such command (Redis 6.x, a managed service, the command renamed away), an ACL
/// that does not allow it, no Lua engine (Valkey's unloaded: `EVALSHA` then says so, and the
/// call fails `Unsupported` as a connect would), or functions refused otherwise.
pub(crate) fn refused(error: &fred::error::Error) -> bool {
    let text = error.details();
    [
        "unknown command",
        "NOPERM",
        "unknown subcommand",
        "not allowed",
        "disabled",
        "Engine 'lua' not found",
    ]
    .iter()
    .any(|word| text.contains(word))
}
