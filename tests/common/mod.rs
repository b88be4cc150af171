//! The shared test harness: real Redis servers and helpers every test file uses.

#![allow(dead_code, unreachable_pub)]

pub mod server;

use std::time::Duration;

pub use server::RedisServer;

/// A unique key prefix per test, so tests share servers without sharing keys.
pub fn prefix(test: &str) -> String {
    format!("{test}:{}", uuid_like())
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A client with a short watchdog timeout, as tests want.
pub async fn client(server: &RedisServer, watchdog: Duration) -> relock::Client {
    let config = relock::Config::from_url(&server.url())
        .unwrap()
        .with_watchdog_timeout(watchdog)
        .with_command_timeout(Duration::from_secs(2));
    relock::Client::new(config).await.expect("connect")
}

/// Polls `check` every 10 ms until it is true or `within` passes; returns the last result.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
