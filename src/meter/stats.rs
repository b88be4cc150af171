//! [`ClientStats`]: what a client counts, read by [`Client::stats`](crate::Client::stats).

/// What a client tracks locally, from [`Client::stats`](crate::Client::stats).
///
#[doc = include_str!("../../docs/metrics.md")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientStats {
    /// Distinct (lock, owner) pairs with live guards, and live [`Permit`](crate::Permit)s.
    pub holds: usize,
    /// Of those, the ones the watchdog renews.
    pub renewing: usize,
    /// Channels with a local subscription entry, but a fair lock's channel kept subscribed
    /// unused for its owner's next wait (see [`FairLock`](crate::FairLock)).
    pub channels: usize,
    /// Waiters registered on those channels: acquires waiting, and each live election
    /// [`Watch`](crate::Watch).
    pub waiters: usize,
    /// Acquire scripts sent and releases started that have not ended yet (of locks, permits,
    /// semaphore permits and latch count-downs), including those finished in the background:
    /// the release of a dropped guard or permit or of a dropped `unlock()`, and the check that
    /// gives back what an acquire dropped after its script was sent took (the script may still
    /// run on the server after the drop), and a fair waiter's leave of the queue once its
    /// `lock()` gave up. Once it is 0, nothing this client started can still
    /// change a lock or synchronizer on Redis, save the watchdog's renewals.
    pub in_flight: usize,
    /// Acquires (and synchronizer waits) that took what they asked for, since the client was
    /// made. The counts below are the same events the `metrics` feature exports (see the
    /// metrics section below), without it.
    pub acquired: u64,
    /// Acquires whose wait ran out (a `try_lock` that found the lock busy).
    pub busy: u64,
    /// Acquires that failed.
    pub acquire_errors: u64,
    /// Acquires whose future was dropped before they ended.
    pub cancelled: u64,
    /// Acquires whose first attempt found it busy, so they waited.
    pub waits: u64,
    /// Holds (and permits) found lost: their lock gone, renewals late, a lease run out, the
    /// client shut down.
    pub leases_lost: u64,
    /// Watchdog renewals of one lock or permit that got an answer (renewed, gone while its
    /// guards lived, or, with replica sync, renewed but not acknowledged by a replica in time;
    /// not a renewal that crossed its holder's release).
    pub renewals: u64,
    /// Watchdog renewals that failed (the connection, a timeout).
    pub renewal_errors: u64,
    /// Releases of a hold or permit that ended, whatever their outcome.
    pub unlocks: u64,
    /// Of those, releases whose reply was lost, settled by a retry.
    pub replays: u64,
    /// Pub/sub messages that woke waiters.
    pub wakeups: u64,
    /// Subscriptions brought back after a reconnect, or waiters all woken after missed
    /// messages.
    pub resubscribes: u64,
    /// Scripts the server did not know (`NOSCRIPT`, or `ERR Function not found` for the
    /// function library), loaded and run again.
    pub noscript_reloads: u64,
    /// How the client sends its scripts: as functions of relock's library (`FCALL`), or by
    /// `EVALSHA`, and why.
    pub scripts: ScriptCalls,
}

/// How a client sends its scripts ([`ClientStats::scripts`]), chosen at connect.
///
/// ```no_run
/// # async fn f(client: relock::Client) {
/// use relock::ScriptCalls;
/// match client.stats().scripts {
///     ScriptCalls::Functions => println!("FCALL, library {}", relock::library_name()),
///     ScriptCalls::Evalsha(why) => println!("EVALSHA: {why}"),
///     _ => {}
/// }
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScriptCalls {
    /// As functions of relock's library ([`library_name`](crate::library_name)), loaded at
    /// connect: `FCALL`, or `FCALL_RO` for a script that writes nothing. The server makes the
    /// scripts' shared Lua functions once, when it loads the library, instead of on every call.
    Functions,
    /// By `EVALSHA` of each script's text (of each fragment, the functions it reaches).
    Evalsha(Evalsha),
}

/// Why a client sends its scripts by `EVALSHA` ([`ScriptCalls::Evalsha`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Evalsha {
    /// [`Config::with_functions(false)`](crate::Config::with_functions).
    Configured,
    /// The server has no functions (Redis 6.x).
    NoFunctions,
    /// The server refused `FUNCTION LOAD` (an ACL without it, a managed service without
    /// functions); the debug log line at connect has its answer.
    Refused,
}

impl std::fmt::Display for Evalsha {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Evalsha::Configured => "functions turned off by Config::with_functions(false)",
            Evalsha::NoFunctions => "the server has no functions (before Redis 7.0)",
            Evalsha::Refused => "the server refused FUNCTION LOAD",
        })
    }
}
