//! Clients connected within a bound: a deployment that does not answer (a cluster, Sentinels,
//! a TLS port) fails the test instead of hanging it. And what a client's hold writes: its
//! holder field.

use std::time::Duration;

use relock::{Client, Config, LockGuard};

/// How long [`connected`] lets a client take to connect.
pub const CONNECT: Duration = Duration::from_secs(10);

/// A config for `url` with a watchdog of `watchdog` and a command timeout of `command`.
pub fn config(url: &str, watchdog: Duration, command: Duration) -> Config {
    super::config(url)
        .with_watchdog_timeout(watchdog)
        .with_command_timeout(command)
}

/// `Client::new(config)`, failing the test unless it ends, one way or the other, within
/// `within`.
pub async fn ends_within(within: Duration, config: Config) -> relock::Result<Client> {
    tokio::time::timeout(within, Client::new(config))
        .await
        .unwrap_or_else(|_| panic!("connecting did not end within {within:?}"))
}

/// A client with `config`, connected within [`CONNECT`].
pub async fn connected(config: Config) -> Client {
    ends_within(CONNECT, config)
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// The holder field `guard` wrote: `<client-uuid>:<owner>`.
pub fn field_of(client: &Client, guard: &LockGuard) -> String {
    format!("{}:{}", client.id(), guard.owner().id())
}

/// A hold of lock `name` by `client` (with `lease`, or the watchdog's without one), and the
/// holder field it wrote.
pub async fn held(client: &Client, name: &str, lease: Option<Duration>) -> (LockGuard, String) {
    let lock = client.lock(name);
    let guard = match lease {
        Some(lease) => lock.lock_with_lease(lease).await,
        None => lock.lock().await,
    }
    .unwrap();
    let field = field_of(client, &guard);
    (guard, field)
}
