//! A counterexample, readable: each step, the script and its arguments with the reply, the
//! keyspace change, and each client's state.

use std::collections::BTreeMap;

use super::state::{Client, Phase, Request, State};
use super::step::{request_text, Action, Lane};
use super::SemaphoreModel;
use crate::server::{Data, Entry, Reply};

/// Bytes as text where they are text.
fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn entry(entry: &Entry) -> String {
    let value = match &entry.data {
        Data::String(text) => format!("{:?}", shown(text)),
        Data::ZSet(set) => {
            let members: Vec<String> = set
                .0
                .iter()
                .map(|(m, s)| format!("{}={}", shown(m), s.0))
                .collect();
            format!("{{{}}}", members.join(", "))
        }
        other => format!("{other:?}"),
    };
    match entry.expires_at {
        Some(at) => format!("{value} (expires at {at})"),
        None => value,
    }
}

fn keys(state: &State) -> BTreeMap<String, String> {
    let keys = &state.server.keyspace.keys;
    keys.iter().map(|(k, e)| (shown(k), entry(e))).collect()
}

fn reply(answer: &Reply) -> String {
    match answer {
        Reply::Bulk(bytes) => format!("{:?}", shown(bytes)),
        Reply::Array(items) => {
            let items: Vec<String> = items.iter().map(self::reply).collect();
            format!("[{}]", items.join(", "))
        }
        other => format!("{other:?}"),
    }
}

/// Which script `text` is.
fn script_name<'a>(model: &SemaphoreModel, text: &'a str) -> &'a str {
    let s = &model.scripts;
    if text == s.acquire {
        "PERMIT_ACQUIRE"
    } else if text == s.release {
        "PERMIT_RELEASE"
    } else if text == s.renew {
        "PERMIT_RENEW"
    } else {
        text
    }
}

fn request(model: &SemaphoreModel, request: &Request) -> String {
    let (text, keys, args) = request_text(model, request);
    let args: Vec<String> = args.iter().map(|a| shown(a)).collect();
    format!(
        "{} KEYS {:?} ARGV {:?}",
        script_name(model, text),
        keys,
        args
    )
}

fn call_of(client: &Client, lane: Lane) -> Option<&super::state::Call> {
    match lane {
        Lane::Main => client.main.as_ref(),
        Lane::Background => client.background.first(),
    }
}

fn client(index: usize, client: &Client) -> String {
    let phase = match &client.phase {
        Phase::Holding {
            id,
            lapses_at,
            lost,
            ..
        } => format!(
            "Holding permit-c{}-n{} until {lapses_at}{}",
            id.client,
            id.n,
            if *lost { " (lost)" } else { "" }
        ),
        other => format!("{other:?}"),
    };
    let mut out = format!("    client {index}: {phase}");
    if let Some(call) = &client.main {
        out += &format!(
            " | on the wire: {:?}{}",
            call.request,
            if call.reply.is_some() { " (ran)" } else { "" }
        );
    }
    if !client.background.is_empty() {
        out += &format!(" | background: {} job(s)", client.background.len());
    }
    if client.subscribed {
        out += " | subscribed";
    }
    if client.woken {
        out += " | woken";
    }
    if !client.inbox.is_empty() {
        let inbox: Vec<String> = client.inbox.iter().map(|m| shown(m)).collect();
        out += &format!(" | messages on the way: {inbox:?}");
    }
    out
}

/// Prints `path`, the counterexample of `property`, to stderr.
pub fn print(model: &SemaphoreModel, property: &str, path: Vec<(State, Option<Action>)>) {
    eprintln!(
        "semaphore model: `{property}` violated in {} steps:",
        path.len() - 1
    );
    let mut prev: Option<&State> = None;
    for (i, (state, action)) in path.iter().enumerate() {
        if let Some(prev) = prev {
            let before = keys(prev);
            let after = keys(state);
            for (key, value) in &after {
                if before.get(key) != Some(value) {
                    eprintln!("    key {key} = {value}");
                }
            }
            for key in before.keys().filter(|k| !after.contains_key(*k)) {
                eprintln!("    key {key} gone");
            }
            for (c, (old, new)) in prev.clients.iter().zip(&state.clients).enumerate() {
                if old.phase != new.phase || old.main != new.main {
                    eprintln!("{}", self::client(c, new));
                }
            }
        } else {
            eprintln!("  initial state at t=0: {:?}", keys(state));
        }
        let Some(action) = action else { break };
        let now = state.server.now();
        let detail = match action {
            Action::Run(c, lane) | Action::Deliver(c, lane) | Action::Lose(c, lane) => {
                let next = path.get(i + 1).map(|(s, _)| s);
                match call_of(&state.clients[*c as usize], *lane) {
                    Some(call) => {
                        let ran = next
                            .and_then(|n| call_of(&n.clients[*c as usize], *lane))
                            .and_then(|c| c.reply.as_ref())
                            .filter(|_| matches!(action, Action::Run(..)))
                            .map(|(r, _)| format!(" -> {}", reply(r)))
                            .unwrap_or_default();
                        let answered = call
                            .reply
                            .as_ref()
                            .map(|(r, _)| format!(" (reply {})", reply(r)));
                        format!(
                            ": {}{ran}{}",
                            request(model, &call.request),
                            answered.unwrap_or_default()
                        )
                    }
                    None => String::new(),
                }
            }
            Action::Renew(c, _) => match &state.clients[*c as usize].phase {
                Phase::Holding { id, .. } => format!(
                    ": PERMIT_RENEW KEYS [{:?}] ARGV [{}, {}]",
                    super::state::LEASES,
                    model.setup.lease,
                    shown(&id.bytes())
                ),
                _ => String::new(),
            },
            _ => String::new(),
        };
        eprintln!("  step {} at t={now}: {action:?}{detail}", i + 1);
        prev = Some(state);
    }
    let last = &path[path.len() - 1].0;
    eprintln!("  final state at t={}:", last.server.now());
    for (c, state) in last.clients.iter().enumerate() {
        eprintln!("{}", client(c, state));
    }
    eprintln!("    keys: {:?}", keys(last));
}
