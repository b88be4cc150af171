//! The Redlock algorithm over N independent masters, built on the plain [`Lock`]: each master's
//! vote is one one-shot attempt of that master's `Lock`, and the guard keeps the `LockGuard`s of
//! the votes it won.

use std::borrow::Borrow;
use std::time::Duration;

use crate::client::Client;
use crate::config::{millis, MAX_MILLIS};
use crate::error::{Error, Result};
use crate::lock::{combined_api, Lock};
use crate::names::LockKeys;
use crate::owner::Owner;
use crate::primitive::Primitive;
use crate::wait::measured;

mod guard;
mod rounds;

pub use guard::RedLockGuard;
use rounds::Rounds;

/// A lock held by a majority of N independent Redis masters: the Redlock algorithm.
///
/// Each master gets one [`Lock`] of the same name (one `client.lock(name)` per client), so a
/// part on one master is a plain Redisson-compatible lock hash, renewed by that client's
/// watchdog. An acquire runs in *rounds*: a round asks every master at once for the lock, each
/// vote bounded by the vote timeout ([`with_vote_timeout`](Self::with_vote_timeout)); a master
/// that is down, stopped, slow or failing is a "no", never an error of the whole. Once a
/// quorum has said yes, the others get a short grace ([`with_quorum_grace`](Self::with_quorum_grace)),
/// so a master that is down costs an acquire little. The round
/// holds when at least a quorum of N/2 + 1 masters said yes and the lease has time left:
/// validity = lease − time the round took − drift, where drift = 2 ms plus the lease × the
/// drift factor ([`with_drift_factor`](Self::with_drift_factor), 0.01 by default). Otherwise every
/// yes is released at once, and, if the lock is busy elsewhere, the next round follows after
/// the retry delay with jitter ([`with_retry_delay`](Self::with_retry_delay), 200 ms ± 100 ms),
/// cut short when a master that refused publishes a release. Without a lease, each part lasts
/// its client's watchdog timeout and is renewed by it; the round's validity is reckoned on the
/// shortest of them.
///
/// Holds are counted per owner, as for a [`Lock`]: the same task re-enters (every master counts
/// one more hold), another owner is excluded.
///
/// # What it guarantees, and what it does not
///
/// While fewer than a quorum of masters lose their data, and every process keeps to its timing
/// assumptions, at most one owner holds a quorum at a time, and the lock stays available while
/// a quorum of masters is up. The timing assumptions are those of every lease: a holder whose
/// process pauses (a stop, a swap storm, a long GC in a neighbour) or whose messages are delayed
/// past its validity can go on working after its hold is gone; and the masters' clocks must run
/// at about the same rate (a key's TTL is counted by its server's clock: a clock that jumps
/// forward on a master expires its part early). Nothing here detects that after the fact.
///
/// A master that restarts **without persistence** comes back empty and forgets its part. If the
/// holder held exactly a quorum, another owner can then win a quorum that shares only the
/// restarted master with the first holder's: both hold the lock (`tests/types/redlock.rs`,
/// `a_master_restarted_empty_lets_a_second_owner_in`, shows it). The mitigation is the one the
/// algorithm's authors give, *delayed restarts*: keep a restarted master out of service (not
/// listening, or not in anyone's list) for at least the longest lease in use, so every part it
/// forgot has expired everywhere else too; or run it with `appendfsync always`.
///
/// The owner values it writes are random, not ordered: they are **not fencing tokens**, and a
/// store cannot tell a stale holder's write from a current one. When correctness matters
/// (not only avoiding duplicate work), prefer a [`FencedLock`](crate::FencedLock) whose tokens a
/// [`Fence`](crate::Fence) checks at the store, on one replicated deployment with
/// [`Config::with_replica_sync`](crate::Config::with_replica_sync) so an acknowledged hold
/// survives a failover.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> relock::Result<()> {
/// use relock::{Client, RedLock};
/// let mut clients = Vec::new();
/// for url in ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"] {
///     clients.push(Client::connect(url).await?);
/// }
/// let lock = RedLock::new(&clients, "nightly-report");
/// let guard = lock.lock().await?;              // held on at least 2 of the 3 masters
/// println!("held on {} masters", guard.held_on());
/// // ... the critical section; `guard.lost()` completes if the quorum is lost ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedLock {
    name: String,
    /// One lock per master, in the order the clients were given.
    parts: Vec<Lock>,
    owner: Option<Owner>,
    retry_delay: Duration,
    retry_jitter: Duration,
    vote_timeout: Option<Duration>,
    quorum_grace: Option<Duration>,
    drift_factor: f64,
    /// What was wrong with the arguments, reported by every operation.
    invalid: Option<Error>,
}

impl std::fmt::Debug for RedLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLock")
            .field("name", &self.name)
            .field("masters", &self.parts.len())
            .field("owner", &self.owner)
            .finish()
    }
}

combined_api!(
    RedLock,
    RedLockGuard,
    lock: [
        " Takes the lock, as long as it takes; each part is renewed by its client's watchdog until",
        " the guard is released or dropped.",
        "",
        " # Errors",
        "",
        " [`Error::NoQuorum`] as soon as a round finds too many masters failed to reach a quorum",
        " (a busy lock only makes it wait); [`Error::InvalidArgument`] for bad arguments (see",
        " [`new`](Self::new)).",
        "",
        " # Cancel safety",
        "",
        " Cancel safe: the votes of a dropped round release what they took, in the background.",
    ],
    lock_with_lease: [
        " Takes the lock with a fixed lease on every master, as long as it takes. Nobody renews it:",
        " the guard is lost at the latest when the round's validity ends.",
    ],
    try_lock: [
        " One round: the lock if a quorum grants it now, `Ok(None)` when it is busy elsewhere.",
    ],
    try_lock_for: [
        " Takes the lock, waiting at most `wait` (a round that started before the deadline runs to",
        " its end, at most one vote timeout); `Ok(None)` when it was still busy then. With",
        " `lease: None` the watchdogs renew the parts, else each lasts `lease`.",
    ],
    with: [
        " Runs `work` under the lock and releases it afterwards. `work` gets the guard's",
        " [`Lost`](crate::Lost) signal (see [`RedLockGuard::lost`]).",
        "",
        " # Errors",
        "",
        " As [`lock`](Self::lock), and [`Error::LeaseLost`] from the release when the quorum was",
        " lost meanwhile (the value is dropped then: the work ran unprotected).",
        "",
        " # Cancel safety",
        "",
        " Cancel safe: the guard's drop releases the parts in the background.",
    ],
);

impl RedLock {
    /// A RedLock named `name` over the masters behind `clients`, one client per independent
    /// master (a `&Client` or a `Client` each). No I/O happens until it is used; bad arguments
    /// (no clients, the same client twice, an empty or badly braced name) are reported by the
    /// first operation as [`Error::InvalidArgument`], before anything is written.
    ///
    /// Each master must be given once: two clients of one server (connected to the same
    /// address, or to two addresses of it such as `127.0.0.1` and `localhost`, told apart by
    /// the server's `run_id` read at connect) are refused the same way, as
    /// [`Error::InvalidArgument`] at the first operation: they would count one master twice, and
    /// the second's vote would find the first's hold busy, so no round could ever hold. (On a
    /// cluster, where no `run_id` is read, only the same address is detected.)
    pub fn new<I>(clients: I, name: impl Into<String>) -> RedLock
    where
        I: IntoIterator,
        I::Item: Borrow<Client>,
    {
        let name = name.into();
        let clients: Vec<Client> = clients.into_iter().map(|c| c.borrow().clone()).collect();
        let clustered = clients.iter().any(|c| c.shared.clustered());
        let mut invalid = LockKeys::new(&name)
            .and_then(|k| k.checked_for(clustered))
            .err();
        if clients.is_empty() {
            invalid = Some(Error::invalid("a RedLock needs at least one client"));
        }
        for (i, client) in clients.iter().enumerate() {
            if clients[..i].iter().any(|c| c.id() == client.id()) {
                invalid = Some(Error::invalid(format!(
                    "a RedLock was given the same client twice (client {}): each master counts once",
                    client.id()
                )));
            } else if let Some(prev) = clients[..i]
                .iter()
                .find(|c| c.shared.same_server(&client.shared))
            {
                // Its own hold on the first would make the second vote busy, round after round.
                invalid = Some(Error::invalid(format!(
                    "a RedLock was given two clients of one server ({} and {}): each master counts once",
                    prev.shared.redis.server, client.shared.redis.server
                )));
            }
        }
        RedLock {
            parts: clients.iter().map(|c| c.lock(name.clone())).collect(),
            name,
            owner: None,
            retry_delay: Duration::from_millis(200),
            retry_jitter: Duration::from_millis(100),
            vote_timeout: None,
            quorum_grace: None,
            drift_factor: 0.01,
            invalid,
        }
    }

    /// The same lock, held and released on behalf of `owner` instead of the current task.
    pub fn owned_by(mut self, owner: Owner) -> RedLock {
        self.owner = Some(owner);
        self
    }

    /// The pause between rounds when the lock is busy: `delay` ± a uniform random `jitter`
    /// (200 ms ± 100 ms by default). A release published by a master that refused cuts the pause
    /// short, to a random moment within half the jitter (so that contenders woken together do
    /// not all ask at once). A `jitter` over `delay` is cut to `delay`. A `delay` over 2^53 ms
    /// (such as `Duration::MAX`) is reported by the first operation as
    /// [`Error::InvalidArgument`], as every other duration past what milliseconds hold.
    pub fn with_retry_delay(mut self, delay: Duration, jitter: Duration) -> RedLock {
        if delay.as_millis() > MAX_MILLIS {
            self.invalid = Some(Error::invalid(format!(
                "a RedLock's retry delay of {delay:?} is too long: the most is {MAX_MILLIS} ms"
            )));
        }
        self.retry_delay = delay;
        self.retry_jitter = jitter.min(delay);
        self
    }

    /// The most one master's vote may take; a master that has not answered by then counts as a
    /// failed vote (its late hold, if any, is released in the background). By default a tenth of
    /// the lease (the shortest watchdog timeout without one), at most 100 ms and at least 1 ms.
    /// It should be small next to the lease: the time a round takes comes off its validity.
    pub fn with_vote_timeout(mut self, timeout: Duration) -> RedLock {
        if timeout.is_zero() {
            self.invalid = Some(Error::invalid("a RedLock's vote timeout must not be zero"));
        }
        self.vote_timeout = Some(timeout);
        self
    }

    /// How long a round waits for the other masters once a quorum has granted the lock. Their
    /// holds are a margin (the guard stays held while a quorum of its parts does), but a master
    /// that is down or stopped should not slow every acquire down by a whole vote timeout. By
    /// default as long again as the quorum took (tokio's timer rounds it up to a millisecond);
    /// the votes still out then are dropped (a late hold is released in the background).
    /// `Duration::MAX` waits for every vote, up to the vote timeout.
    pub fn with_quorum_grace(mut self, grace: Duration) -> RedLock {
        self.quorum_grace = Some(grace);
        self
    }

    /// The share of the lease set aside for the masters' clocks running at different rates
    /// (0.01 by default, as the Redlock algorithm has it); 2 ms are set aside besides.
    pub fn with_drift_factor(mut self, factor: f64) -> RedLock {
        if !(0.0..1.0).contains(&factor) {
            self.invalid = Some(Error::invalid(format!(
                "a RedLock's drift factor must be in [0, 1), got {factor}"
            )));
        }
        self.drift_factor = factor;
        self
    }

    /// The lock's name, which is also its key on every master.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many masters it spans.
    pub fn masters(&self) -> usize {
        self.parts.len()
    }

    /// How many masters must grant the lock: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.parts.len() / 2 + 1
    }

    async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<RedLockGuard>> {
        if let Some(invalid) = &self.invalid {
            return Err(invalid.clone());
        }
        // A fixed lease as each master gets it: whole milliseconds, a remainder rounded up.
        let lease = match lease {
            Some(lease) => Some(Duration::from_millis(millis(lease, "lease")?)),
            None => None,
        };
        let length = match lease {
            Some(lease) => lease,
            None => self.parts.iter().map(Lock::watchdog_timeout).min().unwrap(),
        };
        let vote_timeout = self.vote_timeout.unwrap_or_else(|| {
            (length / 10).clamp(Duration::from_millis(1), Duration::from_millis(100))
        });
        let rounds = Rounds {
            lock: self,
            owner: self.owner.clone().unwrap_or_else(Owner::current),
            lease,
            length,
            vote_timeout,
            waiters: self.parts.iter().map(|_| None).collect(),
            busy_at: Vec::new(),
        };
        let meter = self.parts[0].shared().meter();
        let taken = measured(meter, Primitive::RedLock, self.name(), rounds, wait).await?;
        Ok(taken.map(|(guard, _)| guard))
    }
}
