//! Who is who: each connection of a relock client names itself, so that `CLIENT LIST` on the
//! server maps a holder field (`<client-uuid>:<owner>`) to the process behind it.
//!
//! The name is `relock|<client-uuid>|<role>|<pid>|<host>|<program>`, set with `CLIENT SETNAME`
//! when the connection is made and again after every reconnect (a new connection has no name).
//! It costs nothing on the acquire path. A server that refuses the command (a managed Redis that
//! disables `CLIENT`) only makes the client harder to find: the refusal is logged and ignored.

use fred::interfaces::ClientLike;
use fred::types::config::Server;
use fred::types::{ClusterHash, CustomCommand, Value};

/// What a connection of a relock client is for, the third part of its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The command connection: scripts, renewals, releases.
    Commands,
    /// The subscriber connection: wake-ups.
    Pubsub,
    /// The replica-sync connection (`WAIT` after each lock change).
    Sync,
}

impl Role {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Role::Commands => "cmd",
            Role::Pubsub => "sub",
            Role::Sync => "sync",
        }
    }
}

/// The name of client `id`'s connection for `role`, from this process's pid, host and program.
pub(crate) fn connection_name(id: &str, role: Role) -> String {
    format!(
        "relock|{id}|{}|{}|{}|{}",
        role.as_str(),
        std::process::id(),
        printable(&host()),
        printable(&program()),
    )
}

/// This machine's host name, as the kernel has it; `?` when it cannot be read.
pub(crate) fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "?".to_owned())
}

/// This process's program: the file name of its executable; `?` when unknown.
pub(crate) fn program() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| std::env::args().next())
        .unwrap_or_else(|| "?".to_owned())
}

/// `text` as a part of a connection name: Redis takes only `!`..`~` there, and `|` separates
/// the parts, so anything else becomes `_`; at most 64 characters.
fn printable(text: &str) -> String {
    text.chars()
        .take(64)
        .map(|c| match c {
            '!'..='~' if c != '|' => c,
            _ => '_',
        })
        .collect()
}

/// Names `redis`'s connection to `server` (on a cluster; `None`: its one connection) `name`.
pub(crate) async fn set_name<C: ClientLike>(redis: &C, server: Option<&Server>, name: &str) {
    let command = CustomCommand::new_static("CLIENT", ClusterHash::Random, false);
    let args = vec![Value::from("SETNAME"), Value::from(name)];
    let result = crate::connection::on_node(redis, server)
        .custom::<Value, _>(command, args)
        .await;
    if let Err(error) = result {
        tracing::debug!(%error, "CLIENT SETNAME refused; this client's connections stay unnamed");
    }
}

/// Names every connection `redis` has now (each primary of a cluster) `name`.
pub(crate) async fn set_name_everywhere<C: ClientLike>(redis: &C, clustered: bool, name: &str) {
    if clustered {
        for server in redis.active_connections() {
            set_name(redis, Some(&server), name).await;
        }
    } else {
        set_name(redis, None, name).await;
    }
}

/// Names `redis`'s connections `name` again after each reconnect, until `shutdown` changes.
pub(crate) async fn keep_name(
    redis: fred::clients::Client,
    name: String,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    use fred::interfaces::EventInterface;
    use tokio::sync::broadcast::error::RecvError;
    let mut reconnects = redis.reconnect_rx();
    let clustered = redis.is_clustered();
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            reconnect = reconnects.recv() => match reconnect {
                Ok(server) => set_name(&redis, clustered.then_some(&server), &name).await,
                Err(RecvError::Lagged(_)) => set_name_everywhere(&redis, clustered, &name).await,
                Err(RecvError::Closed) => return,
            },
        }
    }
}

/// A relock connection's name, read back: `None` for any other name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Parsed<'a> {
    pub(crate) client_id: &'a str,
    pub(crate) role: &'a str,
    pub(crate) pid: Option<u32>,
    pub(crate) host: &'a str,
    pub(crate) program: &'a str,
}

pub(crate) fn parse(name: &str) -> Option<Parsed<'_>> {
    let mut parts = name.split('|');
    if parts.next()? != "relock" {
        return None;
    }
    let parsed = Parsed {
        client_id: parts.next()?,
        role: parts.next()?,
        pid: parts.next()?.parse().ok(),
        host: parts.next()?,
        program: parts.next()?,
    };
    parts.next().is_none().then_some(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_reads_back_and_has_no_character_redis_refuses() {
        let name = connection_name("3f2a-77", Role::Pubsub);
        assert!(name.chars().all(|c| ('!'..='~').contains(&c)), "{name}");
        let parsed = parse(&name).expect("a relock name");
        assert_eq!(parsed.client_id, "3f2a-77");
        assert_eq!(parsed.role, "sub");
        assert_eq!(parsed.pid, Some(std::process::id()));
        assert_eq!(printable("my prog|x\u{e9}"), "my_prog_x_");
        assert_eq!(parse("fred-abc"), None);
        assert_eq!(parse("relock|a|cmd|1|h|p|extra"), None);
    }
}
