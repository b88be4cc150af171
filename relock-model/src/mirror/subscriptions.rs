//! A client connection once it subscribed: the real server's pushes go through as they come,
//! and the simulated server counts the connection's channels as the real one confirms them.

use std::collections::BTreeSet;
use std::io::{self, BufReader, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use super::{Link, Shared};
use crate::resp::{self, command_args, encode_command};
use crate::server::Reply;

/// How long to wait for the real server to confirm a subscription change.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection that subscribed: the real server's pushes go through as they come; each
/// subscription change is counted on the simulated server once the real one confirmed it.
pub(super) fn subscribed(
    shared: &Shared,
    first: Vec<Vec<u8>>,
    mut reader: BufReader<TcpStream>,
    writer: TcpStream,
    upstream: Link,
) -> io::Result<()> {
    let (confirmed, confirmations) = mpsc::channel::<(bool, Option<Vec<u8>>, i64)>();
    let Link {
        reader: mut up_reader,
        writer: mut up_writer,
    } = upstream;
    let mut to_client = writer.try_clone()?;
    let pump = std::thread::spawn(move || {
        while let Ok(Some(message)) = resp::read(&mut up_reader) {
            if let Reply::Array(parts) = &message {
                if let [Reply::Bulk(kind), channel, Reply::Int(left)] = &parts[..] {
                    let kind = String::from_utf8_lossy(kind).to_lowercase();
                    let channel = match channel {
                        Reply::Bulk(c) => Some(c.clone()),
                        _ => None,
                    };
                    if kind.ends_with("unsubscribe") {
                        let _ = confirmed.send((false, channel, *left));
                    } else if kind.ends_with("subscribe") {
                        let _ = confirmed.send((true, channel, *left));
                    }
                }
            }
            if to_client.write_all(&message.to_resp()).is_err() {
                break;
            }
        }
    });
    let mut channels: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut next = Some(first);
    while let Some(args) = next.take() {
        let name = String::from_utf8_lossy(&args[0]).to_lowercase();
        {
            let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
            if up_writer.write_all(&encode_command(&args)).is_err() {
                break;
            }
            let expected = match name.as_str() {
                "subscribe" | "ssubscribe" | "psubscribe" | "unsubscribe" | "sunsubscribe"
                | "punsubscribe" => args.len().saturating_sub(1),
                _ => 0,
            };
            let all = expected == 0 && name.ends_with("unsubscribe");
            let mut seen = 0;
            while seen < expected || all {
                let Ok((subscribe, channel, left)) = confirmations.recv_timeout(CONFIRM_TIMEOUT)
                else {
                    break;
                };
                seen += 1;
                if let Some(channel) = channel.filter(|_| !name.starts_with('p')) {
                    if subscribe && channels.insert(channel.clone()) {
                        state.server.subscribe(&channel);
                    } else if !subscribe && channels.remove(&channel) {
                        state.server.unsubscribe(&channel);
                    }
                }
                if all && left == 0 {
                    break;
                }
            }
        }
        match resp::read(&mut reader) {
            Ok(Some(value)) => next = command_args(value).filter(|a| !a.is_empty()),
            _ => break,
        }
    }
    {
        let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
        let _ = up_writer.shutdown(std::net::Shutdown::Both);
        for channel in &channels {
            state.server.unsubscribe(channel);
        }
    }
    let _ = pump.join();
    let _ = writer.shutdown(std::net::Shutdown::Both);
    Ok(())
}
