//! fred's errors as relock understands them: the one place that reads their kinds and texts.
//!
//! relock decides a few things from a Redis error: whether a script must be loaded again
//! (`NOSCRIPT`), whether a key holds another type (`WRONGTYPE`), whether a command never left
//! (fred's "Failed to route command."), whether one may or may not have run (the connection broke,
//! the reply timed out, or fred gave up re-sending it), and what relock's own scripts refused
//! (`RELOCK_<code> <payload>`). The rest of the crate asks [`classify`] and [`headline`] and never
//! looks at an error's text itself.
//!
//! Some of these words are fred's, not Redis's: a fred release that words them otherwise would
//! change what relock does without failing to compile. The tests of this module provoke each
//! error from a real `redis-server` and pin fred's literal text and kind, so such a release fails
//! them first (docs/design.md says what each miss would cost).

use fred::error::{Error as RedisError, ErrorKind};

/// What a Redis error means to relock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum What<'a> {
    /// fred found no connection to send the command on ("Failed to route command."): nothing
    /// was sent, so it may be sent again.
    NotRouted,
    /// A cluster node answered `MOVED` or `ASK` (a slot resharded, a failover), and fred, told
    /// to follow no redirection (see [`Client::new`](crate::Client::new)), gave the command
    /// back unsent to the node named: it ran nowhere. fred has synced its slot map by then,
    /// so sending it again reaches the slot's owner.
    Redirected,
    /// The server does not know the script's SHA1 (`NOSCRIPT`: after a restart, a failover or
    /// `SCRIPT FLUSH`): load it and run it again.
    NoScript,
    /// The server does not know the function (`ERR Function not found`: relock's library is
    /// not loaded there, after a restart, a failover, `FUNCTION FLUSH` or on a new cluster
    /// master): load the library and call it again.
    NoFunction,
    /// A key holds another type than the command works on (`WRONGTYPE`, from Redis or from a
    /// relock script that answers as Redis would).
    WrongType(Blamed),
    /// An acquire script refused an owner's re-entry of a lock it holds
    /// (`NON_REENTRANT_REACQUIRE`, Redisson's words for it): nothing was written.
    Reentry,
    /// An error reply of relock's own scripts: `RELOCK_<code> <payload>`, such as
    /// `RELOCK_STALE 7` (`code` is `RELOCK_STALE`, `payload` is `7`).
    Relock {
        /// The first word, `RELOCK_` included.
        code: &'a str,
        /// What follows the first space, empty when nothing does.
        payload: &'a str,
    },
    /// The connection broke, or could not be made: fred's I/O errors ("Connection closed.",
    /// a refused connection).
    Broken,
    /// The TLS handshake did not accept the server's certificate (an I/O error that names
    /// `InvalidCertificate`).
    Certificate,
    /// No reply came within the command timeout.
    TimedOut,
    /// fred canceled the command: its connection closed before the reply came.
    Canceled,
    /// fred did not send again a command that was in flight when its connection dropped (the
    /// client sends every command once): "Too many failed write attempts.".
    NotResent,
    /// The server cannot run scripts: Valkey's Lua engine was unloaded ("Could not find
    /// scripting engine"), or a script command was renamed away ("unknown command" naming
    /// `EVALSHA` or `SCRIPT`).
    NoScripting,
    /// Anything else: an error reply of Redis, refused credentials, a bad reply.
    Other,
}

/// Which key a `WRONGTYPE` is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blamed {
    /// The key the command or script worked on.
    Command,
    /// A [`Fence`](crate::Fence)'s fence key (`lua/fence/check.lua` answers
    /// `WRONGTYPE relock fence ...`).
    Fence,
    /// Part `i` (1-based) of a multi-lock script, which appends ` [part <i>]`.
    Part(usize),
    /// `KEYS[i]` of a semaphore's or latch's script, which appends ` [key <i>]`
    /// (`lua/common/counter.lua`).
    Key(usize),
}

impl What<'_> {
    /// Whether the command may or may not have run: the connection broke or the reply timed
    /// out while it was out.
    pub(crate) fn may_have_run(self) -> bool {
        self.broke() || self == What::NotResent
    }

    /// Whether the connection broke or stopped answering.
    pub(crate) fn broke(self) -> bool {
        matches!(
            self,
            What::Broken | What::Certificate | What::TimedOut | What::Canceled
        )
    }
}

/// fred's text for a command it found no connection for.
const NOT_ROUTED: &str = "Failed to route";
/// fred's text for a command that met more `MOVED` or `ASK` replies than it may follow.
const REDIRECTED: &str = "Too many redirections";
/// Redis's reply to `EVALSHA` of a script it does not know.
const NO_SCRIPT: &str = "NOSCRIPT";
/// Redis's reply to `FCALL` of a function it does not know.
const NO_FUNCTION: &str = "ERR Function not found";
/// Redis's reply to a command on a key of another type.
const WRONG_TYPE: &str = "WRONGTYPE";
/// The start of `lua/fence/check.lua`'s answer for a fence key of another type.
const FENCE_WRONG_TYPE: &str = "WRONGTYPE relock fence";
/// The first word of relock's own scripts' error replies.
const RELOCK: &str = "RELOCK_";
/// Redisson's error reply to an owner's re-entry of a non-reentrant lock (relock's scripts
/// answer it too): found anywhere in the text, as Redisson looks for it (a server may put `ERR `
/// before it).
const NON_REENTRANT: &str = "NON_REENTRANT_REACQUIRE";
/// Valkey's reply to a script command when no Lua engine is loaded.
const NO_ENGINE: &str = "Could not find scripting engine";
/// The start of Redis's reply to a command it does not know (`ERR unknown command 'evalsha'…`).
const UNKNOWN_COMMAND: &str = "unknown command";
/// fred's words for a command it did not send again after its connection dropped.
const WRITE_ATTEMPTS: &str = "write attempts";
/// What a rustls error that refused a certificate is named in fred's text.
const INVALID_CERTIFICATE: &str = "InvalidCertificate";

/// What `error` means to relock.
pub(crate) fn classify(error: &RedisError) -> What<'_> {
    let text = error.details();
    match error.kind() {
        ErrorKind::IO if text.contains(INVALID_CERTIFICATE) => return What::Certificate,
        ErrorKind::IO => return What::Broken,
        ErrorKind::Timeout => return What::TimedOut,
        ErrorKind::Canceled => return What::Canceled,
        _ => {}
    }
    if text.starts_with(NOT_ROUTED) {
        What::NotRouted
    } else if text.starts_with(REDIRECTED) {
        What::Redirected
    } else if text.starts_with(NO_SCRIPT) {
        What::NoScript
    } else if text.starts_with(NO_FUNCTION) {
        What::NoFunction
    } else if text.contains(NON_REENTRANT) {
        What::Reentry
    } else if let Some(reply) = text.find(RELOCK).map(|at| &text[at..]) {
        let (code, payload) = reply.split_once(' ').unwrap_or((reply, ""));
        What::Relock { code, payload }
    } else if text.contains(WRONG_TYPE) {
        What::WrongType(if text.starts_with(FENCE_WRONG_TYPE) {
            Blamed::Fence
        } else {
            let key = tagged(text, "[key ").map(Blamed::Key);
            key.or(tagged(text, "[part ").map(Blamed::Part))
                .unwrap_or(Blamed::Command)
        })
    } else if text.contains(NO_ENGINE) || unknown_script_command(text) {
        What::NoScripting
    } else if *error.kind() == ErrorKind::Unknown && text.contains(WRITE_ATTEMPTS) {
        What::NotResent
    } else {
        What::Other
    }
}

/// Whether `text` is Redis's "unknown command" for a script command.
fn unknown_script_command(text: &str) -> bool {
    let Some(at) = text.find(UNKNOWN_COMMAND) else {
        return false;
    };
    let named = text[at + UNKNOWN_COMMAND.len()..].trim_start();
    let named = named.trim_start_matches(['\'', '`']).to_ascii_lowercase();
    named.starts_with("evalsha") || named.starts_with("script")
}

/// The number a script's error names after `tag`: ` [part <i>]` (a multi-lock script's part,
/// at the end of the error), ` [key <i>]` (a semaphore's or latch's key; Redis may follow it
/// with where the script raised it).
fn tagged(text: &str, tag: &str) -> Option<usize> {
    text.rsplit_once(tag)
        .and_then(|(_, rest)| rest.split_once(']'))
        .and_then(|(i, _)| i.parse().ok())
}

/// How an error message starts: what failed, as far as the error's kind tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Headline {
    /// The TLS handshake did not accept the server's certificate.
    Certificate,
    /// The server could not be reached, or the connection broke.
    Unreachable,
    /// No reply in time.
    TimedOut,
    /// The connection closed before the reply came.
    ClosedEarly,
    /// The server refused the credentials.
    Refused,
    /// Anything else.
    Failed,
}

/// What an error message about `error` leads with.
pub(crate) fn headline(error: &RedisError) -> Headline {
    match error.kind() {
        ErrorKind::IO if error.details().contains(INVALID_CERTIFICATE) => Headline::Certificate,
        ErrorKind::IO | ErrorKind::Routing => Headline::Unreachable,
        ErrorKind::Timeout => Headline::TimedOut,
        ErrorKind::Canceled => Headline::ClosedEarly,
        ErrorKind::Auth => Headline::Refused,
        _ => Headline::Failed,
    }
}

/// fred's words for `error`, as they are (a URL fred could not parse).
pub(crate) fn details(error: &RedisError) -> &str {
    error.details()
}

/// A command relock did not send: the connection was down and did not come back in time.
/// It reads as "could not reach", and may be retried (it never ran).
pub(crate) fn not_sent(reason: String) -> RedisError {
    RedisError::new(ErrorKind::Routing, reason)
}

/// What a TLS connection that got no answer in `timeout` fails with, in place of fred's
/// timeout: a `rediss://` URL against a plaintext server sends a handshake the server never
/// answers, and "did not answer in time" alone does not say why. `None` for other errors.
pub(crate) fn tls_unanswered(
    error: &RedisError,
    timeout: std::time::Duration,
) -> Option<RedisError> {
    (*error.kind() == ErrorKind::Timeout).then(|| {
        RedisError::new(
            ErrorKind::Timeout,
            format!(
                "the TLS handshake got no answer within {timeout:?}: is the server plaintext? \
                 Then connect with `redis://`, or turn on TLS on the server"
            ),
        )
    })
}

/// A reply relock did not expect.
pub(crate) fn unexpected(reason: String) -> RedisError {
    RedisError::new(ErrorKind::Protocol, reason)
}

/// A value relock could not read (a fence key that is not a token).
pub(crate) fn unreadable(reason: String) -> RedisError {
    RedisError::new(ErrorKind::Parse, reason)
}

/// A key relock wrote and found gone.
pub(crate) fn missing(reason: String) -> RedisError {
    RedisError::new(ErrorKind::NotFound, reason)
}

/// fred's error details as words, for an error message. fred keeps an I/O error as its `Debug`
/// text (`Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }`): this takes
/// the message out, or spells out the error names (`InvalidCertificate(UnknownIssuer)` reads
/// "invalid certificate: unknown issuer").
pub(crate) fn reason(error: &RedisError) -> String {
    plain(error.details())
}

fn plain(details: &str) -> String {
    let details = details.trim();
    if let Some(message) = field(details, "message: ") {
        return sentence_case(unquote(message));
    }
    if let Some(error) = field(details, "error: ") {
        return spelled(error);
    }
    if let Some(kind) = details
        .strip_prefix("Kind(")
        .and_then(|k| k.strip_suffix(')'))
    {
        return words(kind);
    }
    sentence_case(details.trim_end_matches('.'))
}

/// The value of `name` in a `Debug` struct text: up to the struct's closing brace.
fn field<'a>(details: &'a str, name: &str) -> Option<&'a str> {
    let at = details.find(name)? + name.len();
    let value = details[at..].strip_suffix('}').unwrap_or(&details[at..]);
    Some(value.trim().trim_end_matches(',').trim())
}

/// A `Debug` value as words: a quoted string as it is, `Name(inner)` as "name: inner".
fn spelled(value: &str) -> String {
    let value = value.trim();
    if value.starts_with('"') {
        return sentence_case(unquote(value));
    }
    match value.split_once('(') {
        Some((name, rest)) if is_name(name) && rest.ends_with(')') => {
            format!("{}: {}", words(name), spelled(&rest[..rest.len() - 1]))
        }
        _ if is_name(value) => words(value),
        _ => value.to_owned(),
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric())
}

/// `ConnectionRefused` as "connection refused".
fn words(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push(' ');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn unquote(s: &str) -> &str {
    s.trim()
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
}

/// Lower-cases the first letter of a message that starts a sentence ("Connection refused"),
/// not of an acronym ("IO").
fn sentence_case(s: &str) -> String {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(first), Some(second)) if first.is_uppercase() && !second.is_uppercase() => first
            .to_lowercase()
            .chain(s[first.len_utf8()..].chars())
            .collect(),
        _ => s.to_owned(),
    }
}

#[cfg(test)]
mod tests;
