//! The model's steps: what each client may do next (relock's code, function by function) and
//! what the world may do (run a script, deliver or lose a reply or a message, let time pass,
//! crash a client, restart the server).

use stateright::{Model, Property};

use super::client::{attempt, route, run, unsubscribe};
use super::state::{seen, Call, Client, Phase, Request, State, CHANNEL, LEASES, NAME, NO_LEASE};
use super::SemaphoreModel;
use crate::server::{Reply, Server, Version};

/// Which of a client's requests a world step concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// The task's own request.
    Main,
    /// The first background job.
    Background,
}

/// One step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The client starts an acquire (`acquire_within` → `until_taken` → `take`).
    Acquire(u8),
    /// The server runs the client's request (a script runs atomically).
    Run(u8, Lane),
    /// The request's reply reaches the client, which acts on it.
    Deliver(u8, Lane),
    /// Fault: the request is lost before it runs, or its reply after it ran.
    Lose(u8, Lane),
    /// The client's hub receives the first message on its way (`Channel::deliver`).
    Message(u8),
    /// Fault: that message is lost.
    DropMessage(u8),
    /// A woken waiter tries again (`Waiter::wait` returned `Message`).
    Wake(u8),
    /// A waiter's timer fired (`Waiter::wait` returned `Timeout`).
    Timer(u8),
    /// The caller drops the acquire future (cancel safety: `ResumeRelease`).
    Cancel(u8),
    /// The holder calls `Permit::release`.
    Release(u8),
    /// The watchdog renews the permit (`Permits::renew`); `true`: its reply is lost (a fault).
    Renew(u8, bool),
    /// A renewal the watchdog sent before the holder's deadline, delayed on its way (a slow
    /// network, a stalled server), runs now, past the deadline; its reply comes too late to
    /// count (`Registry::renewed`: a loss is final).
    LateRenew(u8),
    /// Fault: the client process dies.
    Crash(u8),
    /// Fault: the server restarts empty; every hub resubscribes and wakes its waiters.
    Restart,
    /// Fault: the server restarts from an AOF with every write (the keys stay); every hub
    /// resubscribes and wakes its waiters.
    RestartFromAof,
    /// Time passes to the next moment something is due.
    Tick(u64),
}

/// The script text and arguments a request runs, and its keys.
pub fn request_text<'a>(
    model: &'a SemaphoreModel,
    request: &Request,
) -> (&'a str, Vec<&'static str>, Vec<Vec<u8>>) {
    let s = &model.scripts;
    match request {
        Request::Acquire { id, .. } => (
            s.acquire.as_str(),
            vec![NAME, LEASES, CHANNEL],
            vec![
                model.setup.lease.to_string().into_bytes(),
                id.bytes(),
                b"PUBLISH".to_vec(),
                NO_LEASE.as_bytes().to_vec(),
            ],
        ),
        Request::ReadBack { id, .. } => ("ZSCORE", vec![LEASES], vec![id.bytes()]),
        Request::Release { id, .. } => (
            s.release.as_str(),
            vec![NAME, CHANNEL, LEASES],
            vec![id.bytes(), b"PUBLISH".to_vec()],
        ),
    }
}

impl Model for SemaphoreModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut server = Server::new(Version::Redis7);
        let permits = self.setup.permits.to_string();
        let reply = server.eval(
            &self.scripts.try_set,
            &[NAME, CHANNEL, LEASES],
            &[permits.as_str(), "PUBLISH"],
        );
        assert_eq!(reply, Reply::Int(1), "try_set_permits");
        server.take_published();
        self.load_scripts(&mut server);
        let clients = (0..self.setup.clients)
            .map(|_| Client::new(self.setup.ops))
            .collect();
        vec![State {
            server,
            clients,
            faults: 0,
            lost_message: false,
            restarted: false,
            seen: 0,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let now = state.server.now();
        let fault = state.faults < self.setup.faults;
        let mut timer_due = false;
        for (i, client) in state.clients.iter().enumerate() {
            let c = i as u8;
            if client.phase == Phase::Crashed {
                continue;
            }
            // A request the connection holds behind a cancelled attempt's acquire waits for it.
            let ghost = client.background.iter().any(|call| {
                call.reply.is_none() && matches!(call.request, Request::Acquire { .. })
            });
            if let Some(call) = &client.main {
                if call.reply.is_none() && !ghost {
                    actions.push(Action::Run(c, Lane::Main));
                }
                if call.reply.is_some() {
                    actions.push(Action::Deliver(c, Lane::Main));
                }
                if fault {
                    actions.push(Action::Lose(c, Lane::Main));
                }
            }
            if let Some(call) = client.background.first() {
                actions.push(if call.reply.is_none() {
                    Action::Run(c, Lane::Background)
                } else {
                    Action::Deliver(c, Lane::Background)
                });
                if fault {
                    actions.push(Action::Lose(c, Lane::Background));
                }
            }
            if !client.inbox.is_empty() {
                actions.push(Action::Message(c));
                if fault && self.setup.message_loss {
                    actions.push(Action::DropMessage(c));
                }
            }
            match client.phase {
                Phase::Idle if client.ops > 0 => actions.push(Action::Acquire(c)),
                Phase::Acquiring { .. } if self.setup.cancel => actions.push(Action::Cancel(c)),
                Phase::Waiting { deadline, .. } => {
                    // A wake-up kept in the slot (or a reconnect's) ends the wait at once.
                    if client.woken {
                        actions.push(Action::Wake(c));
                    }
                    if deadline <= now {
                        timer_due = true;
                        actions.push(Action::Timer(c));
                    }
                    if self.setup.cancel {
                        actions.push(Action::Cancel(c));
                    }
                }
                Phase::Holding {
                    lapses_at,
                    lost,
                    renewals,
                    ..
                } => {
                    actions.push(Action::Release(c));
                    if renewals > 0
                        && !lost
                        && now < lapses_at
                        && now + self.setup.lease > lapses_at
                    {
                        actions.push(Action::Renew(c, false));
                        if fault {
                            actions.push(Action::Renew(c, true));
                        }
                    }
                    if renewals > 0 && !lost && now >= lapses_at {
                        actions.push(Action::LateRenew(c));
                    }
                }
                _ => {}
            }
            if fault && self.setup.crashes {
                actions.push(Action::Crash(c));
            }
        }
        if fault && self.setup.restart && !state.restarted {
            actions.push(Action::Restart);
        }
        if fault && self.setup.restart_aof && !state.restarted {
            actions.push(Action::RestartFromAof);
        }
        if !timer_due {
            if let Some(moment) = self.next_moment(state) {
                actions.push(Action::Tick(moment));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.server.now();
        match action {
            Action::Acquire(c) => {
                let client = &mut state.clients[c as usize];
                client.ops -= 1;
                attempt(client, c, now, 0);
            }
            Action::Run(c, lane) => {
                let ended: Vec<_> = state
                    .leases()
                    .into_iter()
                    .filter(|(_, end)| *end <= now)
                    .collect();
                let client = &mut state.clients[c as usize];
                let call = match lane {
                    Lane::Main => client.main.as_mut()?,
                    Lane::Background => client.background.first_mut()?,
                };
                let request = call.request.clone();
                let reply = run(self, &mut state.server, &request);
                let call = match lane {
                    Lane::Main => state.clients[c as usize].main.as_mut()?,
                    Lane::Background => state.clients[c as usize].background.first_mut()?,
                };
                // Only a busy acquire's reply needs when it ran (its hint counts from then).
                let ran_at = if matches!(request, Request::Acquire { .. }) {
                    now
                } else {
                    0
                };
                call.reply = Some((reply, ran_at));
                route(&mut state);
                // A lease that had ended is gone, and not by its own release: reclaimed.
                let released = match &request {
                    Request::Release { id, .. } => id.bytes(),
                    _ => Vec::new(),
                };
                let after = state.leases();
                if ended
                    .iter()
                    .any(|(m, _)| *m != released && after.iter().all(|(a, _)| a != m))
                {
                    state.seen |= seen::RECLAIMED;
                }
            }
            Action::Deliver(c, Lane::Main) => {
                let call = state.clients[c as usize].main.take()?;
                self.deliver_main(&mut state, c as usize, call);
            }
            Action::Deliver(c, Lane::Background) => {
                // The job is done (a ghost acquire's reply is dropped unread).
                state.clients[c as usize].background.remove(0);
            }
            Action::Lose(c, lane) => {
                state.faults += 1;
                let client = &mut state.clients[c as usize];
                match lane {
                    Lane::Main => {
                        let call = client.main.take()?;
                        self.lose_main(&mut state, c as usize, call);
                    }
                    Lane::Background => {
                        let call = client.background.remove(0);
                        // `until_answered(true, …)`: a release is sent again, 3 tries in all.
                        if let Request::Release { id, tries } = call.request {
                            if tries < 3 {
                                let retry = Call::sent(Request::Release {
                                    id,
                                    tries: tries + 1,
                                });
                                client.background.insert(0, retry);
                            }
                        }
                    }
                }
            }
            Action::Message(c) => {
                let client = &mut state.clients[c as usize];
                client.inbox.remove(0);
                if let Phase::Waiting { late, .. } = client.phase {
                    // The parked task wakes and tries again (`Waiter::wait` → `Message`).
                    client.woken = false;
                    attempt(client, c, now, late);
                } else if client.subscribed {
                    // The slot keeps the wake-up for the next `wait` (an attempt is in flight).
                    client.woken = true;
                }
            }
            Action::DropMessage(c) => {
                state.faults += 1;
                state.lost_message = true;
                state.clients[c as usize].inbox.remove(0);
            }
            Action::Wake(c) | Action::Timer(c) => {
                let client = &mut state.clients[c as usize];
                let Phase::Waiting { late, .. } = client.phase else {
                    return None;
                };
                client.woken = false;
                attempt(client, c, now, late);
            }
            Action::Cancel(c) => self.cancel(&mut state, c as usize),
            Action::Release(c) => {
                let client = &mut state.clients[c as usize];
                let Phase::Holding { id, .. } = client.phase else {
                    return None;
                };
                client.main = Some(Call::sent(Request::Release { id, tries: 1 }));
                client.phase = Phase::Releasing { id };
            }
            Action::LateRenew(c) => {
                let Phase::Holding { id, .. } = state.clients[c as usize].phase else {
                    return None;
                };
                let before = state.lease_of(id);
                let lease = self.setup.lease.to_string().into_bytes();
                state
                    .server
                    .eval(&self.scripts.renew, &[LEASES], &[lease, id.bytes()]);
                if before.is_some_and(|end| end <= now) {
                    state.seen |= seen::LATE_RENEWAL;
                    if state.lease_of(id) > before {
                        state.seen |= seen::ENDED_RENEWED;
                    }
                }
                if let Phase::Holding { lost, renewals, .. } = &mut state.clients[c as usize].phase
                {
                    (*lost, *renewals) = (true, *renewals - 1);
                }
            }
            Action::Renew(c, reply_lost) => {
                let Phase::Holding { id, .. } = state.clients[c as usize].phase else {
                    return None;
                };
                let lease = self.setup.lease.to_string().into_bytes();
                let reply = state
                    .server
                    .eval(&self.scripts.renew, &[LEASES], &[lease, id.bytes()]);
                if reply_lost {
                    state.faults += 1;
                }
                let client = &mut state.clients[c as usize];
                if let Phase::Holding {
                    lapses_at,
                    lost,
                    renewals,
                    ..
                } = &mut client.phase
                {
                    *renewals -= 1;
                    if !reply_lost {
                        if reply == Reply::Array(vec![Reply::Int(1)]) {
                            *lapses_at = now + self.setup.lease;
                            state.seen |= seen::RENEWED;
                        } else {
                            *lost = true;
                        }
                    }
                }
            }
            Action::Crash(c) => {
                state.faults += 1;
                let client = &mut state.clients[c as usize];
                unsubscribe(&mut state.server, client);
                client.main = None;
                client.background.clear();
                client.phase = Phase::Crashed;
            }
            Action::Restart | Action::RestartFromAof => {
                state.faults += 1;
                if action == Action::Restart {
                    state.restarted = true;
                    state.server.restart_empty();
                } else {
                    state.server.restart_keeping_data();
                }
                self.load_scripts(&mut state.server);
                // Each hub resubscribes after its reconnect and wakes every waiter.
                for client in &mut state.clients {
                    if client.subscribed {
                        state.server.subscribe(CHANNEL.as_bytes());
                        client.woken = true;
                    }
                }
            }
            Action::Tick(moment) => state.server.advance_to(moment),
        }
        super::canon::canonical(&mut state);
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        super::props::properties()
    }
}
