//! The blocking leader loop: [`Election::lead`] and its [`Leadership`], whose work runs on a
//! thread of its own with a [`TermContext`].

use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::{block, call, outside_async, Election, Runtime};
use crate::error::Result;
use crate::{Role, TermEnd};

impl Election {
    /// Leads for as long as the loop runs, as [`crate::Election::lead`] does, with `work` on a
    /// thread of its own: campaigns, runs `work` for the term won (given the term's
    /// [`TermContext`]), and when the term ends (the work returned, or the term may have ended
    /// first) campaigns again, waiting with backoff (100 ms doubling to 5 s) after a failed
    /// campaign. The returned [`Leadership`] is an [`Iterator`] of the [`Role`] changes.
    ///
    /// **Nothing can stop a thread's work at the term's deadline**, as the async loop stops its
    /// work: the work must check [`TermContext::is_lost`] between its steps (or wait in
    /// [`TermContext::wait_lost`]) and return once it is `true`, which it becomes at the
    /// earliest moment the term's lease can have run out and when the loop is stopped. Pass
    /// [`TermContext::epoch`] to a [`Fence`](crate::Fence) for writes that must never land after
    /// the term. The loop never runs two works at once: after a term that may have ended, it
    /// waits for the work to return before it campaigns again (and reports
    /// [`Role::Lost`] then), so a work that runs past its term delays the next one; and a term
    /// is given back only after its work has returned.
    ///
    /// The work runs on a plain thread (not one of a tokio runtime), where the blocking API
    /// works. A work that panics stops the loop: its term is given back and reported as
    /// [`TermEnd::Stopped`].
    ///
    /// ```no_run
    /// # fn run(client: relock::blocking::Client) -> relock::Result<()> {
    /// use relock::Role;
    /// let election = client.election("reporter").with_metadata("10.0.0.7:8080");
    /// let mut leadership = election.lead(|term| {
    ///     while !term.is_lost() {
    ///         // One step of work, fenced by `term.epoch()`.
    ///         std::thread::sleep(std::time::Duration::from_millis(100));
    ///     }
    /// })?;
    /// for role in leadership.by_ref().take(3) {
    ///     match role {
    ///         Role::Leading { epoch } => println!("leading, epoch {epoch}"),
    ///         Role::Following { leader, .. } => println!("{} leads", leader.host),
    ///         Role::Lost { reason, .. } => println!("term ended: {reason:?}"),
    ///         _ => {}
    ///     }
    /// }
    /// leadership.stop();
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty name, or inside an
    /// async runtime; [`Error::Closed`](crate::Error::Closed) once the client has shut down.
    pub fn lead<F>(&self, work: F) -> Result<Leadership>
    where
        F: FnMut(&TermContext) + Send + 'static,
    {
        outside_async()?;
        self.inner.check_lead()?;
        let (roles, receiver) = mpsc::unbounded_channel();
        let (stop, stopped) = watch::channel(false);
        let looping = Looping {
            election: self.inner.clone(),
            runtime: self.runtime.clone(),
            roles,
            stopped,
        };
        let task = self.runtime.spawn(looping.run(work));
        Ok(Leadership {
            roles: receiver,
            stop,
            task: Some(task),
            runtime: self.runtime.clone(),
        })
    }
}

/// What a blocking leader loop's work is given of its term, from [`Election::lead`]: the epoch
/// to fence with, whether the term may have ended, and `proclaim`. Cheap to clone; it does not
/// keep the term. As the async [`crate::TermContext`], but [`is_lost`](Self::is_lost) also
/// turns `true` when the loop is stopped: the work returns then.
#[derive(Clone)]
pub struct TermContext {
    inner: crate::TermContext,
    runtime: Runtime,
    /// Set when the work must return: the term may have ended, or the loop is stopping.
    ended: watch::Receiver<bool>,
}

impl std::fmt::Debug for TermContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl TermContext {
    /// The term's epoch (see [`crate::Term::epoch`]): pass it to a [`Fence`](crate::Fence).
    pub fn epoch(&self) -> u64 {
        self.inner.epoch()
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        self.inner.election()
    }

    /// Whether the work must return: the term may have ended (see [`crate::Term::is_lost`],
    /// checked against the clock without a round trip), or the loop is stopping. Check it
    /// between the work's steps.
    pub fn is_lost(&self) -> bool {
        *self.ended.borrow() || self.inner.is_lost()
    }

    /// Blocks until [`is_lost`](Self::is_lost), at most `timeout`; `true` if it is. Inside an
    /// async runtime, `false` at once.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let lost = self.inner.lost();
        let mut ended = self.ended.clone();
        let waiting = async move {
            tokio::select! {
                () = lost => {}
                _ = ended.wait_for(|ended| *ended) => {}
            }
        };
        let _enter = self.runtime.enter();
        let waited = tokio::time::timeout(timeout, waiting);
        drop(_enter);
        block(&self.runtime, waited).is_ok_and(|waited| waited.is_ok()) || self.is_lost()
    }

    /// Proclaims `metadata` for this term (see [`crate::Term::proclaim`]).
    ///
    /// # Errors
    ///
    /// As [`crate::Term::proclaim`]; [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// inside an async runtime.
    pub fn proclaim(&self, metadata: impl AsRef<str>) -> Result<u64> {
        call(&self.runtime, self.inner.proclaim(metadata))
    }

    /// The async context underneath.
    pub fn as_async(&self) -> &crate::TermContext {
        &self.inner
    }
}

/// A running blocking leader loop, from [`Election::lead`]: an [`Iterator`] of its [`Role`]
/// changes, in order, each `next()` blocking until the next one (`None` once the loop has
/// ended and every change has been read; inside an async runtime, `None` at once). The loop
/// runs until [`stop`](Self::stop), until this handle is dropped, or until its client shuts
/// down.
///
/// Changes are kept until read: one that is never read grows by a few items per term.
#[must_use = "dropping the leadership stops its loop"]
pub struct Leadership {
    roles: mpsc::UnboundedReceiver<Role>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    runtime: Runtime,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Leadership")
            .finish_non_exhaustive()
    }
}

impl Iterator for Leadership {
    type Item = Role;

    /// Blocks until the next role change; `None` once the loop has ended and its changes are
    /// read, and inside an async runtime.
    fn next(&mut self) -> Option<Role> {
        block(&self.runtime, self.roles.recv()).ok().flatten()
    }
}

impl Leadership {
    /// As [`next`](Iterator::next), waiting at most `timeout`: `Ok(None)` when no change came
    /// within it, or the loop has ended and its changes are read.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) inside an async runtime.
    pub fn next_within(&mut self, timeout: Duration) -> Result<Option<Role>> {
        // The timer is made inside the runtime, which it needs.
        let roles = &mut self.roles;
        let next = block(&self.runtime, async move {
            tokio::time::timeout(timeout, roles.recv()).await
        })?;
        Ok(next.ok().flatten())
    }

    /// Stops the loop and waits until it has: a campaign in progress is dropped (it leaves no
    /// candidate behind); a term's work is told to return ([`TermContext::is_lost`] turns
    /// `true`) and **waited for**, then the term is given back, the answer awaited, and
    /// reported as [`TermEnd::Stopped`]. The iterator then yields the changes not read yet,
    /// and ends. Inside an async runtime it only tells the loop to stop.
    pub fn stop(&mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            // A loop that panicked has stopped too.
            let _ = block(&self.runtime, task);
        }
    }

    /// Whether the loop has ended (stopped, or its client shut down).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().map_or(true, JoinHandle::is_finished)
    }
}

impl Drop for Leadership {
    /// Tells the loop to stop, without waiting: it gives the term back once the work has
    /// returned, in the background.
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// A blocking leader loop's state, run as a task on the client's runtime.
struct Looping {
    election: crate::Election,
    runtime: Runtime,
    roles: mpsc::UnboundedSender<Role>,
    stopped: watch::Receiver<bool>,
}

/// How a term's wait ended.
enum Waited<F> {
    /// The work returned (`None`: it panicked).
    Returned(Option<F>),
    /// The term may have ended first.
    Lost,
    /// The loop was stopped.
    Stopped,
}

impl Looping {
    async fn run<F>(self, mut work: F)
    where
        F: FnMut(&TermContext) + Send + 'static,
    {
        loop {
            let mut stop = self.stopped.clone();
            let Some(term) = self.election.next_term(&self.roles, &mut stop).await else {
                return;
            };
            let epoch = term.epoch();
            self.report(Role::Leading { epoch });

            let (end, ended) = watch::channel(false);
            let context = TermContext {
                inner: term.context(),
                runtime: self.runtime.clone(),
                ended,
            };
            let (back, mut returned) = oneshot::channel();
            let thread = std::thread::Builder::new()
                .name("relock-leader".into())
                .spawn(move || {
                    work(&context);
                    drop(context);
                    // Unless the work panicked: the sender is dropped then.
                    let _ = back.send(work);
                });
            if let Err(error) = thread {
                let election = self.election.name();
                tracing::warn!(election, %error, "a leader loop cannot start its work's thread");
                self.give_back(term).await;
                self.report(Role::Lost {
                    epoch,
                    reason: TermEnd::Stopped,
                });
                return;
            }
            let mut waited = tokio::select! {
                biased;
                _ = stop.wait_for(|stop| *stop) => Waited::Stopped,
                () = term.lost() => Waited::Lost,
                work = &mut returned => Waited::Returned(work.ok()),
            };
            // The work is waited for whatever ended the term: never two works at once, and the
            // term is given back only after its work has returned.
            let (back, reason) = match &mut waited {
                Waited::Returned(work) => (work.take(), TermEnd::WorkDone),
                Waited::Lost | Waited::Stopped => {
                    end.send_replace(true);
                    let back = returned.await.ok();
                    let closed = self.election.check_lead().is_err();
                    let reason = match waited {
                        Waited::Lost if !closed => TermEnd::LeaseLost,
                        _ => TermEnd::Stopped,
                    };
                    (back, reason)
                }
            };
            // A context the work kept says the term is over from here on.
            end.send_replace(true);
            if matches!(waited, Waited::Lost) {
                // The term may have ended already (or the client shut down): dropped, it is
                // given back in the background if it has not.
                drop(term);
            } else {
                self.give_back(term).await;
            }
            let reason = if back.is_none() {
                TermEnd::Stopped
            } else {
                reason
            };
            self.report(Role::Lost { epoch, reason });
            match back {
                Some(back) if reason != TermEnd::Stopped => work = back,
                _ => return,
            }
        }
    }

    /// Gives a term back and waits for the answer.
    async fn give_back(&self, term: crate::Term) {
        if let Err(e) = term.resign().await {
            // The term ends by its lease then: the watchdog no longer renews it.
            let election = self.election.name();
            tracing::warn!(election, error = %e, "resigning a term failed");
        }
    }

    /// Reports a role change; nobody reading is no error.
    fn report(&self, role: Role) {
        let _ = self.roles.send(role);
    }
}
