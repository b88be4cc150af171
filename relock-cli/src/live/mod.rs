//! The live views: `watch NAME` (one name: holders with their lease draining, waiters, releases
//! per second) and `top` (the busiest names; Enter watches one). Both redraw every interval,
//! quit on `q`, Esc or Ctrl-C, and give the terminal back as they found it (ratatui's `init` /
//! `restore`, also on a panic). With `--json`, `watch` prints one NDJSON line per interval
//! instead, and `top` one JSON document of the ranking.

mod top;
mod watch;

pub(crate) use top::top;
pub(crate) use watch::watch;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use relock::fred::clients::SubscriberClient;
use relock::fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use relock::Config;

/// Release messages seen on a name's channels, for a rate over the last few seconds.
struct Releases {
    subscriber: Option<SubscriberClient>,
    messages: Option<tokio::sync::broadcast::Receiver<relock::fred::types::Message>>,
    seen: VecDeque<Instant>,
}

/// How far back the release rate looks.
const RATE_WINDOW: Duration = Duration::from_secs(5);

impl Releases {
    /// Subscribes (by pattern) to every channel a release of `name` publishes on: the lock's,
    /// each fair waiter's, the read-write lock's, the semaphore's and the latch's. On a cluster
    /// (sharded pub/sub, which has no patterns) it counts nothing and says so.
    async fn start(url: &str, name: &str) -> Releases {
        let none = Releases {
            subscriber: None,
            messages: None,
            seen: VecDeque::new(),
        };
        let Ok(config) = Config::from_url(url) else {
            return none;
        };
        if config.redis().server.is_clustered() {
            return none;
        }
        let Ok(subscriber) = relock::fred::types::Builder::from_config(config.redis().clone())
            .build_subscriber_client()
        else {
            return none;
        };
        if subscriber.init().await.is_err() {
            return none;
        }
        let messages = subscriber.message_rx();
        let patterns = relock::inspect::release_patterns(name);
        if subscriber.psubscribe(patterns).await.is_err() {
            return none;
        }
        Releases {
            subscriber: Some(subscriber),
            messages: Some(messages),
            seen: VecDeque::new(),
        }
    }

    /// Releases per second over the last [`RATE_WINDOW`]; `None` when not counted.
    fn rate(&mut self) -> Option<f64> {
        let messages = self.messages.as_mut()?;
        let now = Instant::now();
        while let Ok(_message) = messages.try_recv() {
            self.seen.push_back(now);
        }
        while self.seen.front().is_some_and(|t| now - *t > RATE_WINDOW) {
            self.seen.pop_front();
        }
        Some(self.seen.len() as f64 / RATE_WINDOW.as_secs_f64())
    }

    async fn stop(self) {
        if let Some(subscriber) = self.subscriber {
            let _ = subscriber.quit().await;
        }
    }
}

/// What a key asks of a view.
enum Asked {
    Nothing,
    Quit,
    Back,
    Up,
    Down,
    Pick,
}

fn asked(key: KeyEvent) -> Asked {
    if key.kind != KeyEventKind::Press {
        return Asked::Nothing;
    }
    match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Asked::Quit,
        KeyCode::Char('q') => Asked::Quit,
        KeyCode::Esc | KeyCode::Char('b') | KeyCode::Backspace => Asked::Back,
        KeyCode::Up | KeyCode::Char('k') => Asked::Up,
        KeyCode::Down | KeyCode::Char('j') => Asked::Down,
        KeyCode::Enter => Asked::Pick,
        _ => Asked::Nothing,
    }
}
