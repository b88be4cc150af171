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

/// What was acquired or waited for: the `kind` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Lock,
    FairLock,
    SpinLock,
    ReadLock,
    WriteLock,
    FencedLock,
    MultiLock,
    RedLock,
    Semaphore,
    PermitSemaphore,
    Latch,
}

#[cfg(feature = "metrics")]
const KINDS: [Kind; 11] = [
    Kind::Lock,
    Kind::FairLock,
    Kind::SpinLock,
    Kind::ReadLock,
    Kind::WriteLock,
    Kind::FencedLock,
    Kind::MultiLock,
    Kind::RedLock,
    Kind::Semaphore,
    Kind::PermitSemaphore,
    Kind::Latch,
];

impl Kind {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::FairLock => "fair_lock",
            Kind::SpinLock => "spin_lock",
            Kind::ReadLock => "read_lock",
            Kind::WriteLock => "write_lock",
            Kind::FencedLock => "fenced_lock",
            Kind::MultiLock => "multi_lock",
            Kind::RedLock => "red_lock",
            Kind::Semaphore => "semaphore",
            Kind::PermitSemaphore => "permit_semaphore",
            Kind::Latch => "latch",
        }
    }

    /// The kind of a lock type's tag (`LockType::tag`, the same words).
    pub(crate) fn of_tag(tag: &str) -> Kind {
        match tag {
            "fair_lock" => Kind::FairLock,
            "spin_lock" => Kind::SpinLock,
            "read_lock" => Kind::ReadLock,
            "write_lock" => Kind::WriteLock,
            "fenced_lock" => Kind::FencedLock,
            "permit_semaphore" => Kind::PermitSemaphore,
            _ => Kind::Lock,
        }
    }
}

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

    /// Script `script` (a catalogue name in lower case) ran for `took`; `reloaded`: the server
    /// did not know it (`NOSCRIPT`), so it was loaded and run again.
    pub(crate) fn script(&self, script: usize, took: Duration, reloaded: bool) {
        if reloaded {
            add(&self.tally.noscript_reloads);
        }
        #[cfg(feature = "metrics")]
        self.export.script(script, took, reloaded);
        let _ = (script, took);
    }
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

#[cfg(feature = "metrics")]
mod export {
    //! The `metrics` side of the meter: handles for every fixed label set, registered once.

    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    use std::time::Duration;

    use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};

    use super::{Acquired, Kind, Loss, Renewed, Unlocked, KINDS};
    use crate::config::NameLabel;

    const ACQUIRED: [Acquired; 4] = [
        Acquired::Taken,
        Acquired::Busy,
        Acquired::Failed,
        Acquired::Cancelled,
    ];
    const UNLOCKED: [Unlocked; 4] = [
        Unlocked::Released,
        Unlocked::Replayed,
        Unlocked::NotHeld,
        Unlocked::Failed,
    ];
    const LOSSES: [Loss; 4] = [Loss::Gone, Loss::RenewalLate, Loss::Expired, Loss::Shutdown];

    /// The handles of one kind.
    struct PerKind {
        acquires: [Counter; 4],
        acquire_seconds: [Histogram; 4],
        attempts: Histogram,
        waits: Counter,
        waiters: Gauge,
        held: Gauge,
        hold_seconds: Histogram,
        unlocks: [Counter; 4],
        lost: [Counter; 4],
    }

    impl PerKind {
        fn new(kind: Kind, name: Option<String>) -> PerKind {
            let k = kind.label();
            macro_rules! labels {
                ($($key:literal => $value:expr),*) => {{
                    let mut labels = vec![("kind", k.to_owned()) $(, ($key, $value.to_owned()))*];
                    if let Some(name) = &name {
                        labels.push(("name", name.clone()));
                    }
                    labels
                }};
            }
            PerKind {
                acquires: ACQUIRED
                    .map(|o| counter!("relock_acquire_total", &labels!("outcome" => o.label()))),
                acquire_seconds: ACQUIRED.map(|o| {
                    histogram!(
                        "relock_acquire_duration_seconds",
                        &labels!("outcome" => o.label())
                    )
                }),
                attempts: histogram!("relock_acquire_attempts", &labels!()),
                waits: counter!("relock_waits_total", &labels!()),
                waiters: gauge!("relock_waiters", &labels!()),
                held: gauge!("relock_held", &labels!()),
                hold_seconds: histogram!("relock_hold_duration_seconds", &labels!()),
                unlocks: UNLOCKED
                    .map(|o| counter!("relock_unlocks_total", &labels!("outcome" => o.label()))),
                lost: LOSSES
                    .map(|r| counter!("relock_leases_lost_total", &labels!("reason" => r.label()))),
            }
        }
    }

    /// Every handle of a client, each kind's and script's registered at its first event (so a
    /// client shows series only for what it used).
    pub(super) struct Export {
        kinds: [OnceLock<PerKind>; KINDS.len()],
        /// The user's mapper from a lock's name to its `name` label, and the handles of each
        /// (kind, label) met so far: the mapper's labels are few by design.
        names: Option<(NameLabel, Mutex<Labelled>)>,
        renewals: OnceLock<[Counter; 3]>,
        renewal_lag: OnceLock<Histogram>,
        wakeups: OnceLock<Counter>,
        resubscribes: OnceLock<Counter>,
        /// Per catalogue script: its duration, and its `NOSCRIPT` reloads.
        scripts: Vec<OnceLock<(Histogram, Counter)>>,
    }

    /// The handles of each (kind, `name` label) met so far.
    type Labelled = HashMap<(usize, String), Arc<PerKind>>;

    fn index<T: PartialEq>(all: &[T], one: T) -> usize {
        all.iter().position(|x| *x == one).unwrap_or(0)
    }

    impl Export {
        pub(super) fn new(names: Option<NameLabel>) -> Export {
            describe();
            Export {
                kinds: Default::default(),
                names: names.map(|map| (map, Mutex::default())),
                renewals: OnceLock::new(),
                renewal_lag: OnceLock::new(),
                wakeups: OnceLock::new(),
                resubscribes: OnceLock::new(),
                scripts: crate::scripts::catalogue::ALL
                    .iter()
                    .map(|_| OnceLock::new())
                    .collect(),
            }
        }

        /// The handles for `kind` on lock `name`: the shared ones, or with a mapper, the ones
        /// labelled with the name it maps to.
        fn with<R>(&self, kind: Kind, name: &str, f: impl FnOnce(&PerKind) -> R) -> R {
            let k = index(&KINDS, kind);
            match &self.names {
                None => f(self.kinds[k].get_or_init(|| PerKind::new(kind, None))),
                Some((map, seen)) => {
                    let label = map(name);
                    let handles = seen
                        .lock()
                        .unwrap()
                        .entry((k, label))
                        .or_insert_with_key(|(_, label)| {
                            Arc::new(PerKind::new(kind, Some(label.clone())))
                        })
                        .clone();
                    f(&handles)
                }
            }
        }

        pub(super) fn acquired(
            &self,
            kind: Kind,
            name: &str,
            outcome: Acquired,
            took: Duration,
            attempts: u32,
        ) {
            self.with(kind, name, |k| {
                let i = index(&ACQUIRED, outcome);
                k.acquires[i].increment(1);
                k.acquire_seconds[i].record(took.as_secs_f64());
                if attempts > 0 {
                    k.attempts.record(f64::from(attempts));
                }
            });
        }

        pub(super) fn waiting(&self, kind: Kind, name: &str, delta: f64) {
            self.with(kind, name, |k| {
                if delta > 0.0 {
                    k.waits.increment(1);
                }
                k.waiters.increment(delta);
            });
        }

        pub(super) fn held(&self, kind: Kind, name: &str, delta: f64) {
            self.with(kind, name, |k| k.held.increment(delta));
        }

        pub(super) fn let_go(&self, kind: Kind, name: &str, held_for: Duration) {
            self.with(kind, name, |k| {
                k.held.decrement(1.0);
                k.hold_seconds.record(held_for.as_secs_f64());
            });
        }

        pub(super) fn unlocked(&self, kind: Kind, name: &str, outcome: Unlocked) {
            self.with(kind, name, |k| {
                k.unlocks[index(&UNLOCKED, outcome)].increment(1)
            });
        }

        pub(super) fn lost(&self, kind: Kind, name: &str, reason: Loss) {
            self.with(kind, name, |k| k.lost[index(&LOSSES, reason)].increment(1));
        }

        pub(super) fn renewed(&self, outcome: Renewed) {
            let i = match outcome {
                Renewed::Extended => 0,
                Renewed::Gone => 1,
                Renewed::Failed => 2,
            };
            let renewals = self.renewals.get_or_init(|| {
                ["renewed", "gone", "error"]
                    .map(|o| counter!("relock_renewals_total", "outcome" => o))
            });
            renewals[i].increment(1);
        }

        pub(super) fn renewal_lag(&self, lag: Duration) {
            let lag_seconds = self
                .renewal_lag
                .get_or_init(|| histogram!("relock_renewal_lag_seconds"));
            lag_seconds.record(lag.as_secs_f64());
        }

        pub(super) fn woke(&self) {
            let wakeups = self
                .wakeups
                .get_or_init(|| counter!("relock_wakeups_total"));
            wakeups.increment(1);
        }

        pub(super) fn resubscribed(&self) {
            let resubscribes = self
                .resubscribes
                .get_or_init(|| counter!("relock_resubscribes_total"));
            resubscribes.increment(1);
        }

        pub(super) fn script(&self, script: usize, took: Duration, reloaded: bool) {
            let Some(handles) = self.scripts.get(script) else {
                return; // a script made at run time
            };
            let (duration, reloads) = handles.get_or_init(|| {
                let name = crate::scripts::catalogue::ALL[script].0.to_lowercase();
                (
                    histogram!("relock_script_duration_seconds", "script" => name.clone()),
                    counter!("relock_noscript_reloads_total", "script" => name),
                )
            });
            duration.record(took.as_secs_f64());
            if reloaded {
                reloads.increment(1);
            }
        }
    }

    /// Describes every metric, with its unit, in this one place. Each client describes them
    /// to the recorder installed when it is made (describing again changes nothing).
    fn describe() {
        use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
        describe_counter!("relock_acquire_total", Unit::Count, "Acquires (and waits) by kind and outcome: acquired, busy (the wait ran out), error, cancelled.");
        describe_histogram!(
            "relock_acquire_duration_seconds",
            Unit::Seconds,
            "From an acquire's call to its end, waiting included, by kind and outcome."
        );
        describe_histogram!(
            "relock_acquire_attempts",
            Unit::Count,
            "Attempts (script runs, or RedLock rounds) per acquire."
        );
        describe_counter!(
            "relock_waits_total",
            Unit::Count,
            "Acquires whose first attempt found it busy, so they waited."
        );
        describe_gauge!(
            "relock_waiters",
            Unit::Count,
            "Acquires of this process waiting now."
        );
        describe_gauge!(
            "relock_held",
            Unit::Count,
            "Guards and permits this process holds now."
        );
        describe_histogram!(
            "relock_hold_duration_seconds",
            Unit::Seconds,
            "From a guard's (or permit's) acquire to its release."
        );
        describe_counter!("relock_unlocks_total", Unit::Count, "Releases by kind and outcome: released, replayed (a lost reply, settled by the retry), not_held, error.");
        describe_counter!(
            "relock_leases_lost_total",
            Unit::Count,
            "Holds found lost, by kind and reason: gone, renewal_late, expired, shutdown."
        );
        describe_counter!(
            "relock_renewals_total",
            Unit::Count,
            "Watchdog renewals per lock, by outcome: renewed, gone, error."
        );
        describe_histogram!("relock_renewal_lag_seconds", Unit::Seconds, "How late the watchdog's rounds start: a starved runtime shows here before leases are lost.");
        describe_counter!(
            "relock_wakeups_total",
            Unit::Count,
            "Pub/sub messages that woke waiters."
        );
        describe_counter!("relock_resubscribes_total", Unit::Count, "Subscriptions brought back after a reconnect, or every waiter woken after missed messages.");
        describe_histogram!(
            "relock_script_duration_seconds",
            Unit::Seconds,
            "A Lua script's round trip, by script."
        );
        describe_counter!("relock_noscript_reloads_total", Unit::Count, "Scripts the server did not know (NOSCRIPT: a restart, failover or SCRIPT FLUSH), loaded and run again.");
    }
}
