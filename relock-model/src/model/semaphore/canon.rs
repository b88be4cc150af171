//! States that differ only in the numbers of their permit ids are one state: relock draws a
//! fresh random id per attempt, so what matters is which ids are the same, not their values.
//! After each step each client's ids still in use (in the leases, on the wire, in its task or
//! among the attempts it let go of) are renumbered 0, 1, … in their order, and its next id is
//! the next number. An attempt let go of whose id is neither out nor on the wire is forgotten.

use std::collections::BTreeMap;

use super::state::{Call, Id, Phase, Request, State, LEASES};
use crate::server::Data;

fn request_id(request: &mut Request) -> &mut Id {
    match request {
        Request::Acquire { id, .. }
        | Request::ReadBack { id, .. }
        | Request::Release { id, .. } => id,
    }
}

/// The id that 16 bytes name, when they are one of the model's.
fn parse(bytes: &[u8]) -> Option<Id> {
    let text = std::str::from_utf8(bytes).ok()?;
    let rest = text.strip_prefix("permit-c")?;
    let (client, n) = rest.split_once("-n")?;
    Some(Id {
        client: client.parse().ok()?,
        n: n.parse().ok()?,
    })
}

/// Renumbers `state`'s ids as the module says.
pub fn canonical(state: &mut State) {
    let out: Vec<Id> = state
        .leases()
        .iter()
        .filter_map(|(m, _)| parse(m))
        .collect();
    for (c, client) in state.clients.iter_mut().enumerate() {
        let c = c as u8;
        let mut calls: Vec<&mut Call> = client
            .main
            .iter_mut()
            .chain(client.background.iter_mut())
            .collect();
        let wired: Vec<Id> = calls
            .iter_mut()
            .map(|call| *request_id(&mut call.request))
            .collect();
        client
            .abandoned
            .retain(|id| out.contains(id) || wired.contains(id));
        let mut used: Vec<u8> = out
            .iter()
            .filter(|id| id.client == c)
            .map(|id| id.n)
            .collect();
        used.extend(wired.iter().map(|id| id.n));
        used.extend(client.abandoned.iter().map(|id| id.n));
        if let Phase::Holding { id, .. } | Phase::Releasing { id } = &client.phase {
            used.push(id.n);
        }
        used.sort_unstable();
        used.dedup();
        let map: BTreeMap<u8, u8> = used
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, i as u8))
            .collect();
        client.next_n = used.len() as u8;
        if map.iter().all(|(n, i)| n == i) {
            continue;
        }
        let renamed = |id: &mut Id| id.n = map[&id.n];
        for call in client.main.iter_mut().chain(client.background.iter_mut()) {
            renamed(request_id(&mut call.request));
        }
        client.abandoned.iter_mut().for_each(renamed);
        if let Phase::Holding { id, .. } | Phase::Releasing { id } = &mut client.phase {
            renamed(id);
        }
        if let Some(entry) = state.server.keyspace.keys.get_mut(LEASES.as_bytes()) {
            if let Data::ZSet(set) = &mut entry.data {
                let members = std::mem::take(&mut set.0);
                set.0 = members
                    .into_iter()
                    .map(|(member, score)| match parse(&member) {
                        Some(mut id) if id.client == c => {
                            renamed(&mut id);
                            (id.bytes(), score)
                        }
                        _ => (member, score),
                    })
                    .collect();
            }
        }
    }
}
