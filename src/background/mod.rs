//! Work that must finish after whoever started it is gone: the release of a dropped guard, the
//! check after a cancelled acquire, a claim withdrawn by a waiter that left.
//!
//! `Drop` cannot await, so such work is spawned. A drop inside a tokio runtime spawns it there. A
//! drop outside any runtime (a guard dropped on a plain thread, or after the runtime that ran
//! `main` ended) spawns it on the runtime the client was made on, when that runtime has worker
//! threads of its own to run it. Work that must happen ([`Background::must_run`]) is not lost when
//! that is not possible: when there is no such runtime, or the runtime shuts down before the work
//! ends (its tasks are dropped then), the work runs again on the client's rescue thread, which
//! has a runtime and a Redis connection of its own, and the thread that dropped it waits for it,
//! a few command timeouts at most. The rescue thread serves every such job of the client while
//! it lives (a runtime that shuts down drops its tasks' guards one after another: they share one
//! thread and one connection) and ends a second after the last. The same happens when the work ran but could not reach Redis because the
//! shutdown had already dropped the client's connection task. So a process that returns from
//! `main` holding a guard still releases it before it exits. A second run is safe: a release is
//! retried under its request id, and every other job only reads before it acts.

use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::ClientLike;
use fred::types::Builder;
use futures::future::BoxFuture;
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::connection::Connection;
use crate::error::Result;

mod sweeper;
pub(crate) use sweeper::Sweeper;

/// A job: given `None` it uses the client's own connections, given `Some` the fresh connection
/// of a rescue run.
pub(crate) type Job =
    Arc<dyn Fn(Option<Arc<Connection>>) -> BoxFuture<'static, Ended> + Send + Sync>;

/// How a job's run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It did its work, or got an answer that settles it.
    Done,
    /// It could not reach Redis: the client's connection may be gone with its runtime.
    Unreached,
}

impl Ended {
    /// How a job whose last step returned `result` ended.
    pub(crate) fn of<T>(result: &Result<T>) -> Ended {
        match result {
            Err(error) if error.is_redis() => Ended::Unreached,
            _ => Ended::Done,
        }
    }
}

/// Where background work runs.
pub(crate) struct Background {
    /// The runtime the client was made on.
    runtime: Handle,
    /// Builds a connection like the client's own, for a rescue run.
    builder: Builder,
    /// The server as errors name it.
    server: Arc<str>,
    /// The longest a rescue run may keep the dropping thread waiting.
    patience: Duration,
    /// The thread rescue runs go to.
    rescuer: Arc<Rescuer>,
}

impl Background {
    pub(crate) fn new(
        runtime: Handle,
        builder: Builder,
        server: &str,
        command_timeout: Duration,
    ) -> Background {
        Background {
            runtime,
            builder,
            server: server.into(),
            // Connecting, the job's command and its retries.
            patience: command_timeout * 4,
            rescuer: Arc::default(),
        }
    }

    /// Runs `job` in the background if a runtime can run it; else it is dropped (a claim lapses
    /// on its own).
    pub(crate) fn spawn(&self, job: BoxFuture<'static, ()>) {
        if let Some(runtime) = self.runtime() {
            runtime.spawn(job);
        }
    }

    /// Runs `job` in the background, and on a thread of its own when no runtime can (see the
    /// module docs).
    pub(crate) fn must_run(&self, job: Job) {
        let mut rescue = Rescue {
            job: Some(job.clone()),
            builder: self.builder.clone(),
            server: self.server.clone(),
            patience: self.patience,
            rescuer: self.rescuer.clone(),
        };
        let task = async move {
            if job(None).await == Ended::Unreached {
                if let Ok(runtime) = Handle::try_current() {
                    // A runtime that shuts down drops the client's connection task, so the job
                    // fails without reaching Redis. A task spawned now tells which case this is:
                    // a runtime that shuts down drops it unrun, and its rescue runs the job on a
                    // connection of its own; a live one runs it, and the hold is left to its
                    // lease as after any failed release.
                    runtime.spawn(async move { rescue.disarm() });
                    return;
                }
            }
            rescue.disarm();
        };
        match self.runtime() {
            Some(runtime) => drop(runtime.spawn(task)),
            None => drop(task), // the rescue runs it now
        }
    }

    /// The runtime to spawn on: the current one, else the client's if it runs by itself.
    pub(crate) fn runtime(&self) -> Option<Handle> {
        match Handle::try_current() {
            Ok(current) => Some(current),
            Err(_) if self.runtime.runtime_flavor() == RuntimeFlavor::MultiThread => {
                Some(self.runtime.clone())
            }
            // A current-thread runtime runs only while its owner drives it: no telling when.
            Err(_) => None,
        }
    }
}

/// Dropped with its job still set (the task never ran, or its runtime dropped it mid-way), it
/// hands the job to the client's rescue thread and waits for it.
struct Rescue {
    job: Option<Job>,
    builder: Builder,
    server: Arc<str>,
    patience: Duration,
    rescuer: Arc<Rescuer>,
}

impl Rescue {
    fn disarm(&mut self) {
        self.job = None;
    }
}

impl Drop for Rescue {
    fn drop(&mut self) {
        let Some(job) = self.job.take() else {
            return;
        };
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let started = self.rescuer.hand(job, done, || {
            let (builder, server) = (self.builder.clone(), self.server.clone());
            let rescuer = self.rescuer.clone();
            std::thread::Builder::new()
                .name("relock-rescue".into())
                .spawn(move || rescuer.run(builder, server))
                .is_ok()
        });
        if started && finished.recv_timeout(self.patience).is_err() {
            tracing::warn!(
                "a background release did not finish in time; its lock expires with its lease"
            );
        }
    }
}

/// The client's rescue thread: one thread, with a runtime and a Redis connection of its own,
/// runs every job handed to it while it lives (all that are waiting at once, on its one
/// connection), and lingers a moment for the next before it ends. A runtime that shuts down
/// with many guards in its tasks drops them one after another: they share the thread and its
/// connection instead of one each.
#[derive(Default)]
struct Rescuer {
    state: std::sync::Mutex<Waiting>,
    /// Told when a job is queued.
    queued: tokio::sync::Notify,
}

/// The jobs waiting for the rescue thread, and whether it runs.
#[derive(Default)]
struct Waiting {
    jobs: Vec<(Job, std::sync::mpsc::Sender<()>)>,
    running: bool,
}

/// How long the rescue thread waits for another job before it ends.
const LINGER: Duration = Duration::from_secs(1);

impl Rescuer {
    /// Queues `job`, whose end is told on `done`, and starts the thread with `start` when it
    /// does not run; `false` when it could not be started.
    fn hand(
        &self,
        job: Job,
        done: std::sync::mpsc::Sender<()>,
        start: impl FnOnce() -> bool,
    ) -> bool {
        let mut state = self.state.lock().unwrap();
        state.jobs.push((job, done));
        if state.running {
            self.queued.notify_one();
            return true;
        }
        state.running = start();
        if !state.running {
            state.jobs.clear();
        }
        state.running
    }

    /// The rescue thread: connects once, then runs the jobs as they come.
    fn run(&self, builder: Builder, server: Arc<str>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        let connection = runtime.as_ref().ok().and_then(|runtime| {
            runtime.block_on(async {
                let redis = builder.build().ok()?;
                let meter = Arc::new(crate::meter::Meter::detached());
                let connection = Arc::new(Connection::new(redis, &server, meter));
                connection.init().await.ok()?;
                Some(connection)
            })
        });
        let (Ok(runtime), Some(connection)) = (runtime, connection) else {
            // Nothing can reach Redis from here: the jobs' holds expire with their leases.
            self.stop();
            return;
        };
        runtime.block_on(async {
            loop {
                let jobs = std::mem::take(&mut self.state.lock().unwrap().jobs);
                if jobs.is_empty() {
                    let woken = tokio::time::timeout(LINGER, self.queued.notified()).await;
                    if woken.is_err() {
                        // Nothing came for a while: end, unless a job came just now.
                        let mut state = self.state.lock().unwrap();
                        if state.jobs.is_empty() {
                            state.running = false;
                            break;
                        }
                    }
                    continue;
                }
                let runs = jobs.into_iter().map(|(job, done)| {
                    let connection = connection.clone();
                    async move {
                        job(Some(connection)).await;
                        let _ = done.send(());
                    }
                });
                futures::future::join_all(runs).await;
            }
            let _ = connection.quit().await;
        });
    }

    /// Ends the thread without running its jobs (their senders drop: their waiters go on).
    fn stop(&self) {
        let mut state = self.state.lock().unwrap();
        state.jobs.clear();
        state.running = false;
    }
}
