//! What a client counts: acquires and their outcomes, waits, holds, lost leases, renewals,
//! unlocks, wake-ups, scripts. Always into a dependency-free tally ([`Client::stats`]); with
//! the `metrics` feature also through the [`metrics`](https://docs.rs/metrics) facade, so the
//! application's recorder (Prometheus, OpenTelemetry, ...) exports them.
//!
//! Labels come from small fixed sets only (`kind`, `outcome`, `reason`, `script`); a lock's name
//! becomes a `name` label only through the mapper the user opts into
//! (`Config::with_metric_name_label`). A client registers the handles of a kind (or script) at
//! its first event of that kind and keeps them, so later events cost an atomic add or two;
//! install the recorder before the first lock is taken.
//!
//! [`Client::stats`]: crate::Client::stats

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

#[cfg(feature = "metrics")]
mod export;
pub(crate) mod stats;

/// A primitive, as metrics label it (`kind`).
use crate::primitive::Primitive as Kind;

/// How an acquire (or a wait) ended: the `outcome` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// It took what it asked for (a latch: it opened).
    Taken,
    /// The wait ran out (a `try_lock` that found it busy).
    Busy,
    /// It failed.
    Failed,
    /// Its future was dropped before it ended.
    Cancelled,
}

impl Acquired {
    /// How an acquire that returned `outcome` ended.
    pub(crate) fn of<T>(outcome: &crate::error::Result<Option<T>>) -> Acquired {
        match outcome {
            Ok(Some(_)) => Acquired::Taken,
            Ok(None) => Acquired::Busy,
            Err(_) => Acquired::Failed,
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Acquired::Taken => "acquired",
            Acquired::Busy => "busy",
            Acquired::Failed => "error",
            Acquired::Cancelled => "cancelled",
        }
    }
}

/// How an unlock (a hold's release, a permit's return) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unlocked {
    /// Released (the lock freed, or the owner's other holds keep it).
    Released,
    /// Its reply was lost; the retry under the same request id found it done.
    Replayed,
    /// There was no hold to release (its lease ran out, or it was force-unlocked).
    NotHeld,
    /// It failed.
    Failed,
}

impl Unlocked {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Unlocked::Released => "released",
            Unlocked::Replayed => "replayed",
            Unlocked::NotHeld => "not_held",
            Unlocked::Failed => "error",
        }
    }
}

/// Why a hold was found lost: the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loss {
    /// A renewal found the lock gone (it expired, or was deleted or force-unlocked).
    Gone,
    /// Renewals did not come back before the lease ran out.
    RenewalLate,
    /// A fixed lease ran out before the release that set it came back.
    Expired,
    /// The client shut down.
    Shutdown,
}

impl Loss {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Loss::Gone => "gone",
            Loss::RenewalLate => "renewal_late",
            Loss::Expired => "expired",
            Loss::Shutdown => "shutdown",
        }
    }

    /// What the warning says.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Loss::Gone => "the lock is gone (expired or deleted)",
            Loss::RenewalLate => "renewals did not come back before the lease ran out",
            Loss::Expired => "its lease ran out before the release that set it came back",
            Loss::Shutdown => "the client shut down",
        }
    }
}

/// How one lock's renewal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Its lease was extended.
    Extended,
    /// The lock was gone while its guards lived (not counted when the hold ended meanwhile).
    Gone,
    /// The renewal failed (the connection, a timeout).
    Failed,
    /// With replica sync: the primary extended the lease but no replica acknowledged it in
    /// time, so the hold's local deadline did not move.
    Unreplicated,
}

/// The dependency-free tally behind [`ClientStats`](crate::ClientStats).
#[derive(Default)]
struct Tally {
    acquired: AtomicU64,
    busy: AtomicU64,
    acquire_errors: AtomicU64,
    cancelled: AtomicU64,
    waits: AtomicU64,
    leases_lost: AtomicU64,
    renewals: AtomicU64,
    renewal_errors: AtomicU64,
    unlocks: AtomicU64,
    replays: AtomicU64,
    wakeups: AtomicU64,
    resubscribes: AtomicU64,
    noscript_reloads: AtomicU64,
}

/// The counts of a [`Meter`], read at once.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Counts {
    pub(crate) acquired: u64,
    pub(crate) busy: u64,
    pub(crate) acquire_errors: u64,
    pub(crate) cancelled: u64,
    pub(crate) waits: u64,
    pub(crate) leases_lost: u64,
    pub(crate) renewals: u64,
    pub(crate) renewal_errors: u64,
    pub(crate) unlocks: u64,
    pub(crate) replays: u64,
    pub(crate) wakeups: u64,
    pub(crate) resubscribes: u64,
    pub(crate) noscript_reloads: u64,
}

/// A client's meter (see the module's documentation).
pub(crate) struct Meter {
    tally: Tally,
    #[cfg(feature = "metrics")]
    export: export::Export,
}

fn add(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Meter {
    /// A meter; with the `metrics` feature its handles are registered with the recorder
    /// installed now, and `names` maps a lock's name to its `name` label.
    pub(crate) fn new(
        #[cfg(feature = "metrics")] names: Option<crate::config::NameLabel>,
    ) -> Meter {
        Meter {
            tally: Tally::default(),
            #[cfg(feature = "metrics")]
            export: export::Export::new(names),
        }
    }

    /// A meter that only tallies (a rescue connection's).
    pub(crate) fn detached() -> Meter {
        Meter::new(
            #[cfg(feature = "metrics")]
            None,
        )
    }

    pub(crate) fn counts(&self) -> Counts {
        let t = &self.tally;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counts {
            acquired: get(&t.acquired),
            busy: get(&t.busy),
            acquire_errors: get(&t.acquire_errors),
            cancelled: get(&t.cancelled),
            waits: get(&t.waits),
            leases_lost: get(&t.leases_lost),
            renewals: get(&t.renewals),
            renewal_errors: get(&t.renewal_errors),
            unlocks: get(&t.unlocks),
            replays: get(&t.replays),
            wakeups: get(&t.wakeups),
            resubscribes: get(&t.resubscribes),
            noscript_reloads: get(&t.noscript_reloads),
        }
    }

    /// The start of an acquire of `name`: it ends (and is counted) when the returned value does.
    pub(crate) fn acquiring<'a>(&'a self, kind: Kind, name: &'a str) -> Acquiring<'a> {
        Acquiring {
            meter: self,
            kind,
            name,
            started: Instant::now(),
            waiting: false,
            attempts: 0,
            ended: false,
        }
    }

    /// A guard (or permit) of `kind` was taken.
    pub(crate) fn held(&self, kind: Kind, name: &str) {
        #[cfg(feature = "metrics")]
        self.export.held(kind, name, 1.0);
        let _ = (kind, name);
    }

    /// A guard (or permit) of `kind` taken at `since` ended.
    pub(crate) fn let_go(&self, kind: Kind, name: &str, since: Instant) {
        #[cfg(feature = "metrics")]
        self.export.let_go(kind, name, since.elapsed());
        let _ = (kind, name, since);
    }

    pub(crate) fn unlocked(&self, kind: Kind, name: &str, outcome: Unlocked) {
        add(&self.tally.unlocks);
        if outcome == Unlocked::Replayed {
            add(&self.tally.replays);
        }
        #[cfg(feature = "metrics")]
        self.export.unlocked(kind, name, outcome);
        let _ = (kind, name);
    }

    pub(crate) fn lost(&self, kind: Kind, name: &str, reason: Loss) {
        add(&self.tally.leases_lost);
        #[cfg(feature = "metrics")]
        self.export.lost(kind, name, reason);
        let _ = (kind, name, reason);
    }

    /// A term of election `name` began after the election was vacant for `vacant`, as its
    /// history records it.
    pub(crate) fn vacancy(&self, name: &str, vacant: Duration) {
        #[cfg(feature = "metrics")]
        self.export.vacancy(name, vacant);
        let _ = (name, vacant);
    }

    /// One lock's renewal ended as `outcome`.
    pub(crate) fn renewed(&self, outcome: Renewed) {
        match outcome {
            Renewed::Failed => add(&self.tally.renewal_errors),
            _ => add(&self.tally.renewals),
        }
        #[cfg(feature = "metrics")]
        self.export.renewed(outcome);
    }

    /// The watchdog's round that was due at `due` started `lag` late.
    pub(crate) fn renewal_lag(&self, lag: Duration) {
        #[cfg(feature = "metrics")]
        self.export.renewal_lag(lag);
        let _ = lag;
    }

    /// A pub/sub message woke waiters.
    pub(crate) fn woke(&self) {
        add(&self.tally.wakeups);
        #[cfg(feature = "metrics")]
        self.export.woke();
    }

    /// The subscriptions were brought back after a reconnect, or every waiter woken after
    /// messages were missed.
    pub(crate) fn resubscribed(&self) {
        add(&self.tally.resubscribes);
        #[cfg(feature = "metrics")]
        self.export.resubscribed();
    }

    /// Script `script` ran for `took`; `reloaded`: the server did not know it (`NOSCRIPT`, or its
    /// function: `ERR Function not found`), so it (or the library) was loaded and run again.
    pub(crate) fn script(&self, script: ScriptId, took: Duration, reloaded: bool) {
        if reloaded {
            add(&self.tally.noscript_reloads);
        }
        #[cfg(feature = "metrics")]
        self.export.script(script, took, reloaded);
        let _ = (script, took);
    }
}

/// How many scripts the meter keeps apart (`relock_script_*{script}`): at least as many as the
/// catalogue has (a unit test of `scripts` checks it).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const SCRIPT_SLOTS: usize = 64;

/// A script as the meter labels it: its slot (below [`SCRIPT_SLOTS`]; a script without one, such
/// as one made at run time, is counted in the tally but not exported) and its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct ScriptId {
    pub(crate) slot: usize,
    pub(crate) name: &'static str,
}

impl ScriptId {
    /// A script the meter does not export.
    pub(crate) const UNNAMED: ScriptId = ScriptId {
        slot: usize::MAX,
        name: "",
    };
}

/// One acquire being measured; counted as cancelled if dropped before [`end`](Self::end).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Acquiring<'a> {
    meter: &'a Meter,
    kind: Kind,
    name: &'a str,
    started: Instant,
    waiting: bool,
    attempts: u32,
    ended: bool,
}

impl Acquiring<'_> {
    /// The attempts so far.
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// How long since the acquire started.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// One more attempt.
    pub(crate) fn attempt(&mut self) {
        self.attempts += 1;
    }

    /// The first attempt found it busy: from here on it waits.
    pub(crate) fn waits(&mut self) {
        if self.waiting {
            return;
        }
        self.waiting = true;
        add(&self.meter.tally.waits);
        #[cfg(feature = "metrics")]
        self.meter.export.waiting(self.kind, self.name, 1.0);
    }

    pub(crate) fn end(mut self, outcome: Acquired) {
        self.record(outcome);
    }

    fn record(&mut self, outcome: Acquired) {
        self.ended = true;
        let tally = &self.meter.tally;
        add(match outcome {
            Acquired::Taken => &tally.acquired,
            Acquired::Busy => &tally.busy,
            Acquired::Failed => &tally.acquire_errors,
            Acquired::Cancelled => &tally.cancelled,
        });
        #[cfg(feature = "metrics")]
        {
            let export = &self.meter.export;
            if self.waiting {
                export.waiting(self.kind, self.name, -1.0);
            }
            export.acquired(
                self.kind,
                self.name,
                outcome,
                self.started.elapsed(),
                self.attempts,
            );
        }
    }
}

impl Drop for Acquiring<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.record(Acquired::Cancelled);
        }
    }
}
