//! The leader loop: [`Election::lead`] campaigns, runs the work for each term, and campaigns
//! again, until its [`Leadership`] is stopped or dropped, or the client shuts down; each role
//! change is an item of the [`Leadership`] stream.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::history::{Candidate, Change};
use super::term::{Ended, TermContext};
use super::Election;
use crate::error::{Error, Result};
use crate::lock::{Backoff, Delays};
use crate::owner::Owner;

/// The first wait after a failed campaign; each next one doubles, up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two failed campaigns.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// A role change of a leader loop ([`Election::lead`]), an item of its [`Leadership`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// This candidate leads: its term of `epoch` began, and its work runs.
    Leading {
        /// The term's epoch.
        epoch: u64,
    },
    /// Another candidate leads (as the election's history names it), and this one waits for
    /// its turn. Reported once per term while this one campaigns.
    Following {
        /// The leader's epoch.
        epoch: u64,
        /// Who leads.
        leader: Candidate,
    },
    /// This candidate's term of `epoch` ended, for `reason`; unless the loop stops, it
    /// campaigns again.
    Lost {
        /// The term's epoch.
        epoch: u64,
        /// Why it ended.
        reason: TermEnd,
    },
}

/// Why a leader loop's term ended, in [`Role::Lost`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TermEnd {
    /// The work returned: the term was given back (a waiting candidate leads at once).
    WorkDone,
    /// The term may have ended before the work did (its lease ran out unrenewed: the process
    /// stalled or lost Redis; or a renewal found it gone: ended by hand or by a failover): the
    /// work was stopped at the term's local deadline, as [`Term::run`](crate::Term::run) does.
    LeaseLost,
    /// The loop was stopped ([`Leadership::stop`]) or its client shut down: the work was
    /// stopped and the term given back.
    Stopped,
}

/// A running leader loop, from [`Election::lead`]: a [`Stream`] of its [`Role`] changes, in
/// order. The loop runs until [`stop`](Self::stop) (which waits for the work to stop and the
/// term to be given back), until this handle is dropped (the work is dropped and the term
/// given back in the background), or until its client shuts down; the stream ends then.
///
/// The stream keeps every change until read: one that is never polled grows by a few items
/// per term.
#[must_use = "dropping the leadership stops its loop"]
pub struct Leadership {
    roles: mpsc::UnboundedReceiver<Role>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership").finish_non_exhaustive()
    }
}

impl Stream for Leadership {
    type Item = Role;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Role>> {
        self.roles.poll_recv(cx)
    }
}

impl Leadership {
    /// Stops the loop and waits until it has: a campaign in progress is dropped (it leaves no
    /// candidate behind); a term's work is dropped and the term given back, the answer
    /// awaited, and reported as [`TermEnd::Stopped`]. The stream then yields the changes not
    /// read yet, and ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the loop stops all the same; dropping the future only stops waiting for it.
    pub async fn stop(&mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            // A loop that panicked has stopped too.
            let _ = task.await;
        }
    }

    /// Whether the loop has ended (stopped, or its client shut down).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().map_or(true, JoinHandle::is_finished)
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            // The work and the term are dropped with the task: the term is given back in the
            // background.
            task.abort();
        }
    }
}

impl Election {
    /// Leads for as long as this process runs: campaigns, runs `work` for the term won (as
    /// [`Term::run`](crate::Term::run) does: stopped at the term's local deadline, given the
    /// term's [`TermContext`]), and when the term ends (the work returned, or the term may have
    /// ended first) campaigns again, waiting with backoff (100 ms doubling to 5 s) after a
    /// failed campaign. The returned [`Leadership`] reports each [`Role`] change: `Leading`,
    /// `Following` (another candidate leads, as client-go's `OnNewLeader`) and `Lost`; the
    /// loop runs until it is stopped or dropped, or the client shuts down.
    ///
    /// The work handles its own errors: what it returns is not looked at. Like `run`, the loop
    /// cannot stop work the work handed to another task (`tokio::spawn`); keep such tasks in
    /// the work, or watch [`TermContext::lost`] in them.
    ///
    /// ```no_run
    /// # async fn run(client: relock::Client) -> relock::Result<()> {
    /// use futures::StreamExt;
    /// use relock::Role;
    /// let fence = client.fence("report:cursor");
    /// let mut leadership = client.election("reporter").lead(move |term| {
    ///     let fence = fence.clone();
    ///     async move {
    ///         // Refused once a newer leader has written.
    ///         let _ = fence.set(term.epoch(), "report:cursor", 7).await;
    ///         term.lost().await; // lead until the term ends
    ///     }
    /// })?;
    /// while let Some(role) = leadership.next().await {
    ///     match role {
    ///         Role::Leading { epoch } => println!("leading, epoch {epoch}"),
    ///         Role::Following { leader, .. } => println!("{} leads", leader.host),
    ///         Role::Lost { reason, .. } => println!("term ended: {reason:?}"),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, or when called outside a tokio runtime
    /// while the client's own runtime cannot run the loop (a current-thread runtime);
    /// [`Error::Closed`] once the client has shut down.
    pub fn lead<F, Fut>(&self, work: F) -> Result<Leadership>
    where
        F: FnMut(TermContext) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.check_lead()?;
        let shared = &self.shared;
        let runtime = shared.background.runtime().ok_or_else(|| {
            Error::invalid("a leader loop must be started inside a tokio runtime")
        })?;
        let (roles, receiver) = mpsc::unbounded_channel();
        let (stop, stopped) = watch::channel(false);
        let looping = Looping {
            election: self.clone(),
            roles,
            stopped,
        };
        let task = runtime.spawn(looping.run(work));
        Ok(Leadership {
            roles: receiver,
            stop,
            task: Some(task),
        })
    }
}

/// A leader loop's state.
struct Looping {
    election: Election,
    roles: mpsc::UnboundedSender<Role>,
    stopped: watch::Receiver<bool>,
}

impl Looping {
    async fn run<F, Fut>(self, mut work: F)
    where
        F: FnMut(TermContext) -> Fut,
        Fut: Future<Output = ()>,
    {
        loop {
            let mut stop = self.stopped.clone();
            let Some(term) = self.election.next_term(&self.roles, &mut stop).await else {
                return;
            };
            let epoch = term.epoch();
            self.report(Role::Leading { epoch });
            let stopping = async move {
                let _ = stop.wait_for(|stop| *stop).await;
            };
            let ended = term.run_until(&mut work, stopping).await;
            let closed = self.election.shared.check_open().is_err();
            let reason = match ended {
                Ended::Done(()) => TermEnd::WorkDone,
                Ended::Lost if !closed => TermEnd::LeaseLost,
                Ended::Lost | Ended::Stopped => TermEnd::Stopped,
            };
            self.report(Role::Lost { epoch, reason });
            if reason == TermEnd::Stopped {
                return;
            }
        }
    }

    /// Reports a role change; nobody reading is no error.
    fn report(&self, role: Role) {
        let _ = self.roles.send(role);
    }
}

impl Election {
    /// What [`lead`](Self::lead) checks before it starts a loop (the blocking loop's too): the
    /// name, and that the client is open.
    pub(crate) fn check_lead(&self) -> Result<()> {
        self.check()?;
        self.shared.check_open()
    }

    /// A leader loop's next term (the blocking loop's too): campaigns as a new candidate,
    /// reporting on `roles` a [`Role::Following`] for each other candidate elected meanwhile,
    /// and after a failed campaign waits (100 ms doubling to 5 s, with jitter) and campaigns
    /// again. `None` once `stop` turns true or the client has shut down.
    pub(crate) async fn next_term(
        &self,
        roles: &mpsc::UnboundedSender<Role>,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<super::Term> {
        let backoff = Backoff::exponential(RETRY_FIRST, RETRY_MAX, 2.0).expect("a valid backoff");
        let mut delays = Delays::new(backoff);
        loop {
            let campaign = tokio::select! {
                biased;
                _ = stop.wait_for(|stop| *stop) => return None,
                campaign = self.campaign_following(roles) => campaign,
            };
            let error = match campaign {
                Ok(term) => return Some(term),
                Err(Error::Closed) => return None,
                Err(error) => error,
            };
            let election = self.name();
            tracing::warn!(election, %error, "a leader loop's campaign failed; retrying");
            let pause = delays.next();
            tokio::select! {
                biased;
                _ = stop.wait_for(|stop| *stop) => return None,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Campaigns as a new candidate, reporting on `roles` each other candidate elected
    /// meanwhile (told apart from this one by its holder field).
    async fn campaign_following(&self, roles: &mpsc::UnboundedSender<Role>) -> Result<super::Term> {
        let owner = Owner::new();
        let field = self.shared.holder_field(&owner);
        let campaign = self.campaign_as(owner);
        tokio::pin!(campaign);
        let mut changes = Some(self.watch());
        let mut reported = 0;
        loop {
            let Some(watching) = changes.as_mut() else {
                return campaign.await;
            };
            tokio::select! {
                biased;
                term = &mut campaign => return term,
                change = watching.next() => match change {
                    None => changes = None,
                    Some(Ok(Change::Elected { epoch, leader, .. } | Change::Proclaimed { epoch, leader, .. }))
                        if leader.field != field && epoch > reported =>
                    {
                        reported = epoch;
                        let _ = roles.send(Role::Following { epoch, leader });
                    }
                    Some(_) => {}
                },
            }
        }
    }
}
