//! A loopback TCP proxy between a client and a `redis-server`, with switches that lose replies
//! and cut connections, for the faults a network causes and a server alone cannot.
//!
//! Every accepted connection gets its own upstream connection and one task that pumps bytes both
//! ways. The switches act on bytes, not on RESP values: a "lost reply" is every byte the server
//! sent back while the switch was on.

#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What happens to bytes going server → client. Client → server bytes always go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Everything goes through.
    Pass,
    /// Replies are read from the server and thrown away. Connections that lost replies are out of
    /// step with their client (it still waits for them): [`Proxy::cut`] them when done.
    DropReplies,
    /// Every reply is held this long before it goes on (a far-away server).
    Delay(Duration),
}

struct Shared {
    mode: Mutex<Mode>,
    /// Byte strings that the next request to swallow must all contain, and how long its
    /// connection stays open, passing requests but no replies, before it closes; `None` when
    /// unarmed.
    armed: Mutex<Option<(Vec<Vec<u8>>, Duration)>>,
    /// Byte strings that the next request to drop must all contain; `None` when unarmed.
    drop_armed: Mutex<Option<Vec<Vec<u8>>>>,
    /// Bumped by [`Proxy::cut`]: every connection open at that moment closes.
    cut: watch::Sender<u64>,
    swallowed: AtomicUsize,
    connections: AtomicUsize,
    /// While set, every new connection is closed at once ([`Proxy::set_down`]).
    down: std::sync::atomic::AtomicBool,
}

/// A running proxy; it stops (and closes its connections) when dropped.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:<upstream_port>`.
    pub async fn start(upstream_port: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Pass),
            armed: Mutex::new(None),
            drop_armed: Mutex::new(None),
            cut: watch::Sender::new(0),
            swallowed: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            down: std::sync::atomic::AtomicBool::new(false),
        });
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    if shared.down.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    shared.connections.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(serve(client, upstream_port, shared.clone()));
                }
            }
        });
        Proxy { port, shared, task }
    }

    /// `redis://127.0.0.1:<proxy port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sets what happens to replies from now on.
    pub fn set_mode(&self, mode: Mode) {
        *self.shared.mode.lock().unwrap() = mode;
    }

    /// Cuts the client off the server (`true`: every connection open now closes and new ones
    /// are closed at once, as a partition that resets connections would) or lets it back.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
        if down {
            self.cut();
        }
    }

    /// Closes every connection open now; the client's reconnects get fresh ones.
    pub fn cut(&self) {
        self.shared.cut.send_modify(|generation| *generation += 1);
    }

    /// Arms the "lost reply, then reconnect" fault: the next request (one read from a client)
    /// that contains every one of `patterns` goes through to the server, but its reply is
    /// swallowed and that client connection is closed.
    pub fn swallow_next_reply(&self, patterns: &[&str]) {
        self.swallow_next_reply_for(patterns, Duration::ZERO);
    }

    /// As [`swallow_next_reply`](Self::swallow_next_reply), but the connection stays open for
    /// `hold` first: requests sent on it meanwhile still reach the server and run, and their
    /// replies are lost with it.
    pub fn swallow_next_reply_for(&self, patterns: &[&str], hold: Duration) {
        let patterns = patterns.iter().map(|p| p.as_bytes().to_vec()).collect();
        *self.shared.armed.lock().unwrap() = Some((patterns, hold));
    }

    /// Arms the "lost request" fault: the next request (one read from a client) that contains
    /// every one of `patterns` never reaches the server, and its connection is closed.
    pub fn drop_next_request(&self, patterns: &[&str]) {
        let patterns = patterns.iter().map(|p| p.as_bytes().to_vec()).collect();
        *self.shared.drop_armed.lock().unwrap() = Some(patterns);
    }

    /// Whether an armed swallow is still waiting for its request.
    pub fn is_armed(&self) -> bool {
        self.shared.armed.lock().unwrap().is_some()
    }

    /// How many replies were swallowed so far.
    pub fn swallowed(&self) -> usize {
        self.shared.swallowed.load(Ordering::Relaxed)
    }

    /// How many client connections were accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.cut();
    }
}

/// Takes the armed swallow if `request` matches it: how long to hold the connection.
fn take_if_armed(shared: &Shared, request: &[u8]) -> Option<Duration> {
    let mut armed = shared.armed.lock().unwrap();
    let matches = armed.as_ref().is_some_and(|(patterns, _)| {
        patterns
            .iter()
            .all(|p| request.windows(p.len()).any(|w| w == p.as_slice()))
    });
    if matches {
        armed.take().map(|(_, hold)| hold)
    } else {
        None
    }
}

/// Takes the armed drop if `request` matches it.
fn take_drop_if_armed(shared: &Shared, request: &[u8]) -> bool {
    let mut armed = shared.drop_armed.lock().unwrap();
    let matches = armed.as_ref().is_some_and(|patterns| {
        patterns
            .iter()
            .all(|p| request.windows(p.len()).any(|w| w == p.as_slice()))
    });
    if matches {
        *armed = None;
    }
    matches
}

/// The bytes one side of a connection sends, read a chunk at a time into a buffer of its own.
struct Chunks {
    rx: OwnedReadHalf,
    buf: Vec<u8>,
}

impl Chunks {
    /// Reads from `rx` into a 16 KiB buffer.
    fn new(rx: OwnedReadHalf) -> Chunks {
        Chunks {
            rx,
            buf: vec![0u8; 16 * 1024],
        }
    }

    /// The next chunk read, or `None` once the side closed or failed.
    async fn next(&mut self) -> Option<&[u8]> {
        match self.rx.read(&mut self.buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(&self.buf[..n]),
        }
    }
}

/// Pumps one client connection until either side closes, a cut, or a swallowed reply.
async fn serve(client: TcpStream, upstream_port: u16, shared: Arc<Shared>) {
    let mut cut = shared.cut.subscribe();
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)).await else {
        return; // the client sees its connection close, as if the server were down
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (client_rx, mut client_tx) = client.into_split();
    let (server_rx, mut server_tx) = server.into_split();
    // Set to how long to hold the connection once a swallowed request went through.
    let swallow: Mutex<Option<Duration>> = Mutex::new(None);

    let upstream = async {
        let mut requests = Chunks::new(client_rx);
        while let Some(request) = requests.next().await {
            if take_drop_if_armed(&shared, request) {
                return;
            }
            // Set before the request is forwarded, so its reply cannot slip through.
            if let Some(hold) = take_if_armed(&shared, request) {
                *swallow.lock().unwrap() = Some(hold);
            }
            if server_tx.write_all(request).await.is_err() {
                return;
            }
        }
    };
    let downstream = async {
        let mut replies = Chunks::new(server_rx);
        while let Some(reply) = replies.next().await {
            let swallowed = *swallow.lock().unwrap();
            if let Some(hold) = swallowed {
                shared.swallowed.fetch_add(1, Ordering::Relaxed);
                // The reply is dropped with the connection, and so is every reply after it.
                tokio::time::sleep(hold).await;
                return;
            }
            let mode = *shared.mode.lock().unwrap();
            if let Mode::Delay(delay) = mode {
                tokio::time::sleep(delay).await;
            }
            let passes = matches!(mode, Mode::Pass | Mode::Delay(_));
            if passes && client_tx.write_all(reply).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = cut.changed() => {}
    }
    // Dropping the halves closes both sockets.
}
