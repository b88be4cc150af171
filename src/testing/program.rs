//! Which server binary the harness runs, and what it is: asked once, so that a server is started
//! with only the options its version has (Redis 6.x refuses `--enable-debug-command`, a 7.0
//! option, as a fatal config error).

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::process::Command;
use std::sync::OnceLock;

use super::StartError;

/// The environment variable that names the server binary the harness runs.
pub const PROGRAM_VARIABLE: &str = "RELOCK_REDIS_SERVER";

/// The server binary that [`RedisServer`](super::RedisServer) and the test topologies run: the
/// path or name in `RELOCK_REDIS_SERVER` when it is set and not empty, else `redis-server` (found
/// on `PATH`). Sentinels are the same binary with `--sentinel`.
///
/// ```
/// let program = relock::testing::server_program();
/// if std::env::var_os("RELOCK_REDIS_SERVER").is_none() {
///     assert_eq!(program, "redis-server");
/// }
/// ```
pub fn server_program() -> OsString {
    match std::env::var_os(PROGRAM_VARIABLE) {
        Some(program) if !program.is_empty() => program,
        _ => OsString::from("redis-server"),
    }
}

/// A server build as its binary describes itself (`redis-server --version`): which server and
/// which version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerVersion {
    /// `"Redis"` or `"Valkey"`: the first word of its `--version` line.
    pub server: String,
    /// Major, minor and patch numbers (`6.0.9` is `(6, 0, 9)`).
    pub version: (u32, u32, u32),
}

impl ServerVersion {
    /// Whether this is Valkey (which reports a Redis-compatible `redis_version` of 7.2.4 to
    /// clients, whatever its own version).
    pub fn is_valkey(&self) -> bool {
        self.server.eq_ignore_ascii_case("valkey")
    }

    /// Whether it is at least `major.minor`, by its own numbering (Valkey 7.2 and later have
    /// every option of Redis 7.0).
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.version.0, self.version.1) >= (major, minor)
    }

    /// Reads the `--version` line, e.g. `Redis server v=7.0.15 sha=00000000:0 malloc=…`.
    fn parse(line: &str) -> Option<ServerVersion> {
        let server = line.split_whitespace().next()?.to_owned();
        let number = line
            .split_whitespace()
            .find_map(|word| word.strip_prefix("v="))?;
        let mut parts = number.split('.').map(|part| part.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(ServerVersion {
            server,
            version: (major, minor, patch),
        })
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor, patch) = self.version;
        write!(f, "{} {major}.{minor}.{patch}", self.server)
    }
}

/// What [`server_program`] is, asked once per process (`--version`) and remembered.
///
/// ```
/// # fn main() -> Result<(), relock::testing::StartError> {
/// let found = relock::testing::server_version()?; // NotInstalled without a server
/// assert!(found.at_least(6, 0), "{found}");
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`StartError::NotInstalled`] when the binary is not there; [`StartError::Failed`] when its
/// `--version` says no version.
pub fn server_version() -> Result<ServerVersion, StartError> {
    static FOUND: OnceLock<Result<ServerVersion, String>> = OnceLock::new();
    match FOUND.get_or_init(ask_version) {
        Ok(found) => Ok(found.clone()),
        Err(reason) if reason.is_empty() => Err(StartError::NotInstalled),
        Err(reason) => Err(StartError::Failed {
            reason: reason.clone(),
        }),
    }
}

/// Runs `<program> --version`: the build, or why not (empty when it is not installed).
fn ask_version() -> Result<ServerVersion, String> {
    let program = server_program();
    let output = match Command::new(&program).arg("--version").output() {
        Ok(output) => output,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Err(String::new()),
        Err(error) => return Err(format!("{program:?} --version: {error}")),
    };
    let said = String::from_utf8_lossy(&output.stdout);
    ServerVersion::parse(said.trim())
        .ok_or_else(|| format!("{program:?} --version says no version: {:?}", said.trim()))
}

/// The options relock's servers get that not every version has: `DEBUG` from loopback
/// connections (for `DEBUG SLEEP` in fault tests) is an option from 7.0, and allowed by default
/// before.
pub(super) fn version_options(found: &ServerVersion) -> &'static [&'static str] {
    if found.at_least(7, 0) {
        &["--enable-debug-command", "local"]
    } else {
        &[]
    }
}

#[cfg(test)]
mod tests {
    use super::ServerVersion;

    #[test]
    fn version_lines_of_each_server_are_read() {
        let redis6 = "Redis server v=6.0.9 sha=00000000:0 malloc=jemalloc-5.1.0 bits=64 build=1b1a";
        let found = ServerVersion::parse(redis6).unwrap();
        assert_eq!((found.server.as_str(), found.version), ("Redis", (6, 0, 9)));
        assert!(!found.at_least(7, 0) && found.at_least(6, 0) && !found.is_valkey());
        let valkey = "Valkey server v=9.1.2 sha=00000000:1 malloc=libc bits=64 build=1536";
        let found = ServerVersion::parse(valkey).unwrap();
        assert!(found.is_valkey() && found.at_least(7, 0));
        assert_eq!(found.to_string(), "Valkey 9.1.2");
        assert_eq!(
            ServerVersion::parse("redis-server: command not found"),
            None
        );
    }
}
