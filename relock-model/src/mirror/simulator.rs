//! The simulator: the one thread that runs the simulated server's commands for every
//! connection of the mirror.

use std::io;
use std::sync::mpsc;
use std::sync::Mutex;

use super::State;
use crate::server::{Server, Version};

/// The one thread that runs the simulated server's commands, whichever connection sent them:
/// Lua interpreters are one per thread, and a function library's top-level locals persist
/// from one `FCALL` to the next whatever connection sends it, as on one real server.
pub(super) struct Simulator {
    jobs: Mutex<mpsc::Sender<Job>>,
}

type Job = Box<dyn FnOnce() + Send>;

impl Simulator {
    pub(super) fn start() -> Simulator {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            for job in queue {
                // A job that panicked drops its reply channel: its connection sees an error.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
        });
        Simulator {
            jobs: Mutex::new(jobs),
        }
    }

    /// Runs `f` on the simulator's thread and returns what it returned.
    fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
        let (done, result) = mpsc::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(f());
        });
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job)
            .map_err(|_| io::Error::other("the simulator's thread is gone"))?;
        result
            .recv()
            .map_err(|_| io::Error::other("the simulated server panicked"))
    }

    /// Runs `f` on `state`'s server, on the simulator's thread.
    pub(super) fn with_server<T: Send + 'static>(
        &self,
        state: &mut State,
        f: impl FnOnce(&mut Server) -> T + Send + 'static,
    ) -> io::Result<T> {
        let mut server = std::mem::replace(&mut state.server, Server::new(Version::Redis7));
        let (server, out) = self.run(move || {
            let out = f(&mut server);
            (server, out)
        })?;
        state.server = server;
        Ok(out)
    }
}
