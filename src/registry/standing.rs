//! What the guards of one hold generation know of their hold, and how they learn that it
//! changed.
//!
//! One [`Signal`] per generation: the registry entry writes it (a renewal extends the lapse
//! moment, a loss marks it lost) and its guards read it. A guard's `lost()` waits on it. It is
//! made once per generation, on the acquire path, so it is kept light: a mutex over two fields
//! and one `Notify`, told when the standing changes and when the generation ends (its last
//! guard went).

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

/// What the guards of one field know of their hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Standing {
    /// Known lost: the lock was found gone, the lease ran out, or the client shut down.
    pub(crate) lost: bool,
    /// The earliest moment the hold can lapse.
    pub(crate) lapses_after: Instant,
}

impl Standing {
    /// Whether the hold may be gone at `now`.
    pub(crate) fn is_lost(&self, now: Instant) -> bool {
        self.lost || now >= self.lapses_after
    }
}

/// One generation's standing, shared by its registry entry and its guards.
pub(crate) struct Signal {
    state: Mutex<State>,
    changed: Notify,
}

struct State {
    standing: Standing,
    /// The registry let go of this generation (its guards are all gone, or a new generation
    /// replaced it): nothing will change it any more.
    ended: bool,
}

impl Signal {
    pub(super) fn new(standing: Standing) -> Arc<Signal> {
        Arc::new(Signal {
            state: Mutex::new(State {
                standing,
                ended: false,
            }),
            changed: Notify::new(),
        })
    }

    /// The standing now.
    pub(crate) fn get(&self) -> Standing {
        self.state.lock().unwrap().standing
    }

    /// Whether the hold may be gone now, checked against the clock.
    pub(crate) fn is_lost(&self) -> bool {
        self.get().is_lost(Instant::now())
    }

    /// Applies `change`; the waiters are told when it says it changed something.
    pub(super) fn change(&self, change: impl FnOnce(&mut Standing) -> bool) {
        let changed = change(&mut self.state.lock().unwrap().standing);
        if changed {
            self.changed.notify_waiters();
        }
    }

    /// Nothing changes this standing any more; the waiters are told.
    pub(super) fn end(&self) {
        self.state.lock().unwrap().ended = true;
        self.changed.notify_waiters();
    }

    /// Completes once the hold may be gone (see `LockGuard::lost`), or once the generation
    /// ended (its holds were released).
    pub(crate) async fn lost(self: Arc<Self>) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the state is read, so a change made after the read wakes it.
            changed.as_mut().enable();
            let (known, ended) = {
                let state = self.state.lock().unwrap();
                (state.standing, state.ended)
            };
            if ended || known.is_lost(Instant::now()) {
                return;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(known.lapses_after) => return,
                _ = changed => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn signal(lease: Duration) -> Arc<Signal> {
        Signal::new(Standing {
            lost: false,
            lapses_after: Instant::now() + lease,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn lost_completes_at_the_lapse_moment_a_renewal_moves() {
        let signal = signal(Duration::from_secs(10));
        let waiting = tokio::spawn(signal.clone().lost());
        tokio::time::sleep(Duration::from_secs(5)).await;
        signal.change(|s| {
            s.lapses_after += Duration::from_secs(10);
            true
        });
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(!waiting.is_finished(), "completed at the old lapse moment");
        assert!(!signal.is_lost());
        tokio::time::timeout(Duration::from_secs(7), waiting)
            .await
            .expect("not completed past the new lapse moment")
            .unwrap();
        assert!(signal.is_lost());
    }

    #[tokio::test(start_paused = true)]
    async fn lost_completes_on_a_loss_and_on_the_end() {
        for end in [false, true] {
            let signal = signal(Duration::from_secs(60));
            let waiting = tokio::spawn(signal.clone().lost());
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(!waiting.is_finished());
            if end {
                signal.end();
            } else {
                signal.change(|s| {
                    s.lost = true;
                    true
                });
            }
            tokio::time::timeout(Duration::from_millis(1), waiting)
                .await
                .expect("lost() did not complete")
                .unwrap();
            assert_eq!(signal.is_lost(), !end);
        }
    }
}
