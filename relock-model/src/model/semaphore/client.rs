//! A client's reactions, as relock's code has them: to a reply, to a lost reply, to a
//! cancellation; and the requests' execution on the server.

use super::state::{Call, Client, Id, Phase, Request, State, CHANNEL};
use super::step::request_text;
use super::SemaphoreModel;
use crate::server::{Reply, Server};
/// Runs `request` on the server.
pub(super) fn run(model: &SemaphoreModel, server: &mut Server, request: &Request) -> Reply {
    let (script, keys, args) = request_text(model, request);
    if script == "ZSCORE" {
        let mut call: Vec<Vec<u8>> = vec![b"ZSCORE".to_vec(), keys[0].as_bytes().to_vec()];
        call.extend(args);
        return server.command(&call);
    }
    server.eval(script, &keys, &args)
}

/// Hands the messages the server published to the clients subscribed now.
pub(super) fn route(state: &mut State) {
    for (channel, message) in state.server.take_published() {
        if channel != CHANNEL.as_bytes() {
            continue;
        }
        for client in &mut state.clients {
            if client.subscribed {
                client.inbox.push(message.clone());
            }
        }
    }
}

pub(super) fn subscribe(server: &mut Server, client: &mut Client) {
    if !client.subscribed {
        client.subscribed = true;
        server.subscribe(CHANNEL.as_bytes());
    }
}

/// The waiter leaves (taken, cancelled or failed): the hub unsubscribes; messages on their way
/// find no waiter.
pub(super) fn unsubscribe(server: &mut Server, client: &mut Client) {
    if client.subscribed {
        client.subscribed = false;
        server.unsubscribe(CHANNEL.as_bytes());
    }
    client.woken = false;
    client.inbox.clear();
}

/// `take`: sends a new attempt with a fresh id.
pub(super) fn attempt(client: &mut Client, index: u8, now: u64, late: u8) {
    let id = Id {
        client: index,
        n: client.next_n,
    };
    client.next_n += 1;
    client.main = Some(Call::sent(Request::Acquire { id, sent_at: now }));
    client.phase = Phase::Acquiring { late };
}

impl SemaphoreModel {
    /// `until_taken` after an attempt found it busy with `hint` (ms, `None`: no bound) from a
    /// script that ran at `ran_at`: the first busy attempt subscribes and tries again at once
    /// (`start`, then `wait_turn` without parking); later ones wait for a message or the
    /// timer, at once when a wake-up is already in the slot.
    fn busy(&self, state: &mut State, c: usize, hint: Option<u64>, ran_at: u64, late: u8) {
        let now = state.server.now();
        let client = &mut state.clients[c];
        if !client.subscribed {
            subscribe(&mut state.server, client);
            attempt(client, c as u8, now, late);
            return;
        }
        if client.woken {
            client.woken = false;
            attempt(client, c as u8, now, late);
            return;
        }
        let bound = hint.map_or(self.setup.poll, |h| h.min(self.setup.poll));
        client.phase = Phase::Waiting {
            deadline: now + bound.max(1),
            promised: ran_at + bound,
            late,
        };
    }

    /// `take` after the script took permit `id` (or the read-back found it), then `taken`.
    fn taken(&self, state: &mut State, c: usize, id: Id, sent_at: u64, late: u8) {
        let now = state.server.now();
        let lease = self.setup.lease;
        if now >= sent_at + lease {
            // Try::Late: the orphan gives it back; judged busy for no time, 3 in a row fail.
            let client = &mut state.clients[c];
            client
                .background
                .push(Call::sent(Request::Release { id, tries: 1 }));
            client.abandoned.push(id);
            if late + 1 >= 3 {
                unsubscribe(&mut state.server, client);
                client.phase = Phase::Idle;
                return;
            }
            return self.busy(state, c, Some(0), now, late + 1);
        }
        let client = &mut state.clients[c];
        unsubscribe(&mut state.server, client);
        client.phase = Phase::Holding {
            id,
            lapses_at: sent_at + lease,
            lost: false,
            renewals: self.setup.renewals,
        };
    }

    /// The client's task acts on the reply to its own request.
    pub(super) fn deliver_main(&self, state: &mut State, c: usize, call: Call) {
        let (reply, ran_at) = call.reply.expect("delivered after it ran");
        let late = match state.clients[c].phase {
            Phase::Acquiring { late } => late,
            _ => 0,
        };
        match call.request {
            Request::Acquire { id, sent_at } => match reply {
                Reply::Array(items) => match items.as_slice() {
                    [Reply::Int(1), Reply::Int(_)] => self.taken(state, c, id, sent_at, late),
                    [Reply::Int(0), Reply::Int(ms)] => {
                        let hint = u64::try_from(*ms).ok();
                        self.busy(state, c, hint, ran_at, 0)
                    }
                    _ => self.fail(state, c),
                },
                // Nil: Error::NotFound; anything else: an error too.
                _ => self.fail(state, c),
            },
            Request::ReadBack { id, sent_at } => match reply {
                Reply::Bulk(_) => self.taken(state, c, id, sent_at, late),
                _ => self.fail(state, c),
            },
            Request::Release { .. } => state.clients[c].phase = Phase::Idle,
        }
    }

    /// The operation ends with an error: the waiter is dropped.
    pub(super) fn fail(&self, state: &mut State, c: usize) {
        let client = &mut state.clients[c];
        unsubscribe(&mut state.server, client);
        client.phase = Phase::Idle;
    }

    /// A request of the task was lost, or its reply (an ambiguous error).
    pub(super) fn lose_main(&self, state: &mut State, c: usize, call: Call) {
        let client = &mut state.clients[c];
        match call.request {
            // `take`: read back on the same connection whether the permit is in the leases.
            Request::Acquire { id, sent_at } => {
                client.main = Some(Call::sent(Request::ReadBack { id, sent_at }));
            }
            // The read-back failed: `?` returns with the orphan armed, which gives it back.
            Request::ReadBack { id, .. } => {
                client
                    .background
                    .push(Call::sent(Request::Release { id, tries: 1 }));
                client.abandoned.push(id);
                self.fail(state, c);
            }
            // `until_answered`: sent again, up to 3 tries; then the error is returned.
            Request::Release { id, tries } if tries < 3 => {
                client.main = Some(Call::sent(Request::Release {
                    id,
                    tries: tries + 1,
                }));
            }
            Request::Release { .. } => client.phase = Phase::Idle,
        }
    }

    /// The caller drops a waiting or in-flight acquire: the waiter leaves; an attempt whose
    /// outcome is unknown leaves a `ResumeRelease` behind (after its own request, which the
    /// connection runs first when it has not run yet).
    pub(super) fn cancel(&self, state: &mut State, c: usize) {
        let client = &mut state.clients[c];
        if let Some(call) = client.main.take() {
            let id = match &call.request {
                Request::Acquire { id, .. } | Request::ReadBack { id, .. } => *id,
                Request::Release { id, .. } => *id,
            };
            if call.reply.is_none() && matches!(call.request, Request::Acquire { .. }) {
                client.background.push(call);
            }
            client
                .background
                .push(Call::sent(Request::Release { id, tries: 1 }));
            client.abandoned.push(id);
        }
        self.fail(state, c);
    }

    /// Loads the scripts (relock's `EVALSHA` falls back to `EVAL`, which loads them), so a
    /// state's script cache does not tell paths apart.
    pub(super) fn load_scripts(&self, server: &mut Server) {
        let s = &self.scripts;
        for script in [&s.acquire, &s.release, &s.renew, &s.try_set] {
            server.command(&["SCRIPT", "LOAD", script.as_str()]);
        }
    }

    /// The next moment something is due after `now`, within the horizon.
    pub(super) fn next_moment(&self, state: &State) -> Option<u64> {
        let now = state.server.now();
        let mut moments: Vec<u64> = state.leases().into_iter().map(|(_, end)| end).collect();
        moments.extend(state.server.next_expiry());
        for client in &state.clients {
            match client.phase {
                Phase::Waiting { deadline, .. } => moments.push(deadline),
                Phase::Holding { lapses_at, .. } => moments.push(lapses_at),
                _ => {}
            }
            for call in client.main.iter().chain(&client.background) {
                if let Request::Acquire { sent_at, .. } | Request::ReadBack { sent_at, .. } =
                    call.request
                {
                    moments.push(sent_at + self.setup.lease);
                }
            }
        }
        moments
            .into_iter()
            .filter(|&m| m > now && m <= self.setup.horizon)
            .min()
    }
}
