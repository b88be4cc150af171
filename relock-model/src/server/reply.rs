//! A command's or a script's reply, as RESP2 carries it, and the errors Redis answers with.

use std::fmt;

use super::data::Bytes;

/// A reply, as RESP2 carries it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// `+OK` and the like.
    Status(String),
    /// `-ERR …`, `-WRONGTYPE …`: the whole message, its code first.
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$n` and the bytes.
    Bulk(Bytes),
    /// `$-1`: no value.
    Nil,
    /// `*-1`: no array (a Lua `false` inside an array is a `Nil` instead).
    NilArray,
    /// `*n` and the items.
    Array(Vec<Reply>),
}

/// What a command handler returns: its reply, or its error reply.
pub type Outcome = Result<Reply, Reply>;

impl Reply {
    /// `+OK`.
    pub fn ok() -> Reply {
        Reply::Status("OK".into())
    }

    /// A bulk string of `text`.
    pub fn bulk(text: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(text.as_ref().to_vec())
    }

    /// An error reply with `message` (its code first: `ERR …`).
    pub fn error(message: impl Into<String>) -> Reply {
        Reply::Error(message.into())
    }

    /// Whether this is an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// The reply as RESP2 bytes.
    pub fn to_resp(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_resp(&mut out);
        out
    }

    fn write_resp(&self, out: &mut Vec<u8>) {
        match self {
            Reply::Status(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
            Reply::Error(s) => out.extend_from_slice(format!("-{s}\r\n").as_bytes()),
            Reply::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
            Reply::Bulk(b) => {
                out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
                out.extend_from_slice(b);
                out.extend_from_slice(b"\r\n");
            }
            Reply::Nil => out.extend_from_slice(b"$-1\r\n"),
            Reply::NilArray => out.extend_from_slice(b"*-1\r\n"),
            Reply::Array(items) => {
                out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
                for item in items {
                    item.write_resp(out);
                }
            }
        }
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Status(s) => write!(f, "+{s}"),
            Reply::Error(s) => write!(f, "-{s}"),
            Reply::Int(n) => write!(f, "{n}"),
            Reply::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Reply::Nil => write!(f, "nil"),
            Reply::NilArray => write!(f, "nil[]"),
            Reply::Array(items) => {
                write!(f, "[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{item}")?;
                }
                write!(f, "]")
            }
        }
    }
}

/// The errors Redis answers with, word for word (Redis 7.0).
pub mod errors {
    use super::Reply;

    /// A command on a key of another type.
    pub fn wrong_type() -> Reply {
        Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value")
    }

    /// An argument, or a string value, that is no integer.
    pub fn not_integer() -> Reply {
        Reply::error("ERR value is not an integer or out of range")
    }

    /// A hash field that is no integer (`HINCRBY`).
    pub fn hash_not_integer() -> Reply {
        Reply::error("ERR hash value is not an integer")
    }

    /// An argument that is no float.
    pub fn not_float() -> Reply {
        Reply::error("ERR value is not a valid float")
    }

    /// `INCRBY` past `i64`.
    pub fn overflow() -> Reply {
        Reply::error("ERR increment or decrement would overflow")
    }

    /// A malformed option list.
    pub fn syntax() -> Reply {
        Reply::error("ERR syntax error")
    }

    /// Too few or too many arguments for `command`.
    pub fn arity(command: &str) -> Reply {
        Reply::error(format!(
            "ERR wrong number of arguments for '{}' command",
            command.to_lowercase()
        ))
    }

    /// `EVALSHA` of a script the server does not have.
    pub fn no_script() -> Reply {
        Reply::error("NOSCRIPT No matching script. Please use EVAL.")
    }
}
