//! The `metrics` side of the meter: handles for every fixed label set, registered once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics::{counter, gauge, histogram, Counter, Gauge, Histogram};

use super::{Acquired, Kind, Loss, Renewed, ScriptId, Unlocked, SCRIPT_SLOTS};
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
        let k = kind.tag();
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
    kinds: [OnceLock<PerKind>; Kind::ALL.len()],
    /// The user's mapper from a lock's name to its `name` label, and the handles of each
    /// (kind, label) met so far: the mapper's labels are few by design.
    names: Option<(NameLabel, Mutex<Labelled>)>,
    renewals: OnceLock<[Counter; 4]>,
    renewal_lag: OnceLock<Histogram>,
    wakeups: OnceLock<Counter>,
    resubscribes: OnceLock<Counter>,
    vacancies: OnceLock<Histogram>,
    /// Per script (by [`ScriptId::slot`]): its duration, and its `NOSCRIPT` reloads.
    scripts: [OnceLock<(Histogram, Counter)>; SCRIPT_SLOTS],
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
            vacancies: OnceLock::new(),
            scripts: [const { OnceLock::new() }; SCRIPT_SLOTS],
        }
    }

    /// The handles for `kind` on lock `name`: the shared ones, or with a mapper, the ones
    /// labelled with the name it maps to.
    fn with<R>(&self, kind: Kind, name: &str, f: impl FnOnce(&PerKind) -> R) -> R {
        let k = kind as usize;
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
            Renewed::Unreplicated => 3,
        };
        let renewals = self.renewals.get_or_init(|| {
            ["renewed", "gone", "error", "unreplicated"]
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

    pub(super) fn vacancy(&self, name: &str, vacant: Duration) {
        match &self.names {
            // A name label only through the user's mapper, as for every other metric.
            Some((map, _)) => {
                histogram!("relock_election_vacancy_seconds", "name" => map(name))
                    .record(vacant.as_secs_f64());
            }
            None => self
                .vacancies
                .get_or_init(|| histogram!("relock_election_vacancy_seconds"))
                .record(vacant.as_secs_f64()),
        }
    }

    pub(super) fn script(&self, script: ScriptId, took: Duration, reloaded: bool) {
        let Some(handles) = self.scripts.get(script.slot) else {
            return;
        };
        let (duration, reloads) = handles.get_or_init(|| {
            let name = script.name.to_lowercase();
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
        "Watchdog renewals per lock, by outcome: renewed, gone, error, unreplicated (replica sync: no replica acknowledged it in time)."
    );
    describe_histogram!("relock_renewal_lag_seconds", Unit::Seconds, "How late the watchdog's rounds start: a starved runtime shows here before leases are lost.");
    describe_counter!(
        "relock_wakeups_total",
        Unit::Count,
        "Pub/sub messages that woke waiters."
    );
    describe_counter!("relock_resubscribes_total", Unit::Count, "Subscriptions brought back after a reconnect, or every waiter woken after missed messages.");
    describe_histogram!("relock_election_vacancy_seconds", Unit::Seconds, "How long an election was vacant before a term of this process began, as its history records it (a term that ended without a resign counts from when its vacancy was first noticed).");
    describe_histogram!(
        "relock_script_duration_seconds",
        Unit::Seconds,
        "A Lua script's round trip, by script."
    );
    describe_counter!("relock_noscript_reloads_total", Unit::Count, "Scripts the server did not know (NOSCRIPT: a restart, failover or SCRIPT FLUSH; or their function library, Function not found), loaded and run again.");
}
