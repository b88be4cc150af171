//! How a [`Client`](crate::Client) connects and how long its leases and commands last.
//!
//! Connection settings are fred's own [`fred::types::config::Config`], passed through as they are,
//! so anything fred can reach (a URL, TLS, a password, a database number) relock can too.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result, Shown};

/// The largest lease or timeout relock sends: 2^53 − 1 ms, the largest whole number a Lua script
mod url;

use url::{check_scheme, Redacted};
pub(crate) use url::{redacted_url, server_name};
/// reads exactly (about 285,000 years). Anything longer is rejected as an invalid argument.
pub(crate) const MAX_MILLIS: u128 = (1 << 53) - 1;

/// Settings of a [`Client`](crate::Client).
///
/// | setting | default | meaning |
/// |---|---|---|
/// | `watchdog_timeout` | 30 s | the lease of a lock taken without one; renewed every third of it |
/// | `command_timeout` | 3 s | the longest a single Redis command may take before it fails |
/// | `renewal_batch` | 100 | the most locks renewed by one script call |
/// | `replica_sync` | off | wait for a replica to acknowledge each acquire, at most this long |
/// | `handoff_grace` | 2 ms | after a release that woke other processes' waiters, how long this client's tasks let them go first |
/// | `claim_window` | 10 ms | how long a waiter's claim on a lock's next hand-off outlives the lease it waits on |
/// | `fair_waiter_timeout` | 30 s | how long a fair lock's waiter that stopped answering keeps its place in the queue |
/// | `poll_interval` | 5 s | how long a semaphore's or latch's waiter sleeps without a message before it looks again |
/// | `functions` | on | call the scripts as functions of relock's library (`FCALL`) where the server allows, else by `EVALSHA` |
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let config = relock::Config::from_url("redis://127.0.0.1:6379")?
///     .with_watchdog_timeout(Duration::from_secs(10))
///     .with_command_timeout(Duration::from_secs(1));
/// assert_eq!(config.watchdog_timeout(), Duration::from_secs(10));
/// # Ok::<(), relock::Error>(())
/// ```
#[derive(Clone)]
pub struct Config {
    pub(crate) redis: fred::types::config::Config,
    pub(crate) watchdog_timeout: Duration,
    pub(crate) command_timeout: Duration,
    pub(crate) renewal_batch: usize,
    pub(crate) replica_sync: Option<Duration>,
    pub(crate) handoff_grace: Duration,
    pub(crate) claim_window: Duration,
    pub(crate) fair_waiter_timeout: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) functions: bool,
    /// The `metrics` feature's mapper from a lock's name to its `name` label.
    #[cfg(feature = "metrics")]
    pub(crate) metric_names: Option<NameLabel>,
}

/// A mapper from a lock's (or synchronizer's) name to the `name` label of its metrics.
#[cfg(feature = "metrics")]
pub(crate) type NameLabel = std::sync::Arc<dyn Fn(&str) -> String + Send + Sync>;

impl Config {
    /// Settings for the server at `url`, with the defaults. The schemes are fred's:
    /// `redis://host:port/db` for one server, `redis-cluster://` for a cluster,
    /// `redis-sentinel://` for Sentinel, each with a TLS form (`rediss://`, `rediss-cluster://`,
    /// `rediss-sentinel://`) and a `valkey` spelling (`valkey://`, `valkeys://`, …).
    ///
    /// A TLS URL trusts the system's root certificates; for a private CA see
    /// [`with_tls_root_certificates`](Self::with_tls_root_certificates).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a scheme relock does not connect with (`http://`, a Unix
    /// socket), for a TLS URL when relock was built without its `tls` feature, and when fred
    /// cannot parse the URL.
    pub fn from_url(url: &str) -> Result<Config> {
        check_scheme(url)?;
        let redis = fred::types::config::Config::from_url(url).map_err(|e| {
            let problem = crate::redis_error::details(&e);
            let url = redacted_url(url);
            Error::invalid(format!("bad Redis URL `{}`: {problem}", Shown(&url)))
        })?;
        Ok(Config::new(redis))
    }

    /// Connects over TLS, trusting only the CA certificates in `pem` (one or more PEM
    /// `CERTIFICATE` blocks): for servers whose certificates come from a private CA. The
    /// connection is TLS whatever the URL's scheme; the server's certificate must name the host
    /// of the URL.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn run() -> relock::Result<()> {
    /// let ca = std::fs::read("ca.crt").expect("the CA certificate");
    /// let config = relock::Config::from_url("rediss://redis.internal:6380")?
    ///     .with_tls_root_certificates(&ca)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `pem` holds no certificate, or one that cannot be read.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn with_tls_root_certificates(mut self, pem: impl AsRef<[u8]>) -> Result<Config> {
        use fred::rustls::pki_types::pem::PemObject;
        use fred::rustls::pki_types::CertificateDer;
        use fred::rustls::{crypto, ClientConfig, RootCertStore};

        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem.as_ref()) {
            let cert = cert
                .map_err(|e| Error::invalid(format!("cannot read a PEM root certificate: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| Error::invalid(format!("cannot use a root certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(Error::invalid(
                "no CERTIFICATE block in the PEM given as TLS root certificates",
            ));
        }
        // The provider is named rather than taken from the process default, which is ambiguous
        // when some other crate turns on a second one.
        let tls = ClientConfig::builder_with_provider(crypto::ring::default_provider().into())
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::invalid(format!("cannot set up TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        self.redis.tls = Some(fred::types::config::TlsConnector::from(tls).into());
        Ok(self)
    }

    /// Settings for a fred connection config, with the defaults.
    pub fn new(redis: fred::types::config::Config) -> Config {
        Config {
            redis,
            watchdog_timeout: Duration::from_secs(30),
            command_timeout: Duration::from_secs(3),
            renewal_batch: 100,
            replica_sync: None,
            handoff_grace: Duration::from_millis(2),
            claim_window: DEFAULT_CLAIM_WINDOW,
            fair_waiter_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_secs(5),
            functions: true,
            #[cfg(feature = "metrics")]
            metric_names: None,
        }
    }

    /// Sets the lease of locks taken without one. The watchdog renews such locks every third of
    /// it, so a holder that dies frees its lock at most this long after its last renewal.
    pub fn with_watchdog_timeout(mut self, timeout: Duration) -> Config {
        self.watchdog_timeout = timeout;
        self
    }

    /// Sets the longest a single Redis command may take before it fails with a timeout.
    pub fn with_command_timeout(mut self, timeout: Duration) -> Config {
        self.command_timeout = timeout;
        self
    }

    /// Sets the most locks the watchdog renews in one script call.
    pub fn with_renewal_batch(mut self, locks: usize) -> Config {
        self.renewal_batch = locks;
        self
    }

    /// Makes every acquire wait until at least one replica has the lock, at most `timeout`
    /// (`WAIT 1 <timeout>` on the connection that ran the acquire; Redisson's
    /// `checkLockSyncedSlaves`). When no replica acknowledged in time, the hold just taken is
    /// released and the acquire fails with [`Error::NotReplicated`]: a failover to a replica could
    /// otherwise lose a lock its holder believes it has. Off by default; with it on, a server
    /// without replicas fails every acquire.
    ///
    /// It covers the watchdog's renewals too, of every watchdog hold (locks, permits and
    /// election terms alike): they go on the same connection, each batch followed by `WAIT 1
    /// <timeout>`, and a hold's local deadline (what [`LockGuard::lost`](crate::LockGuard::lost)
    /// and [`Term::run`](crate::Term::run) go by) counts only from renewals a replica
    /// acknowledged. So after a failover to a replica that acknowledged, nobody else can take
    /// the lock (or lead) before its holder's local deadline. A renewal no replica acknowledged
    /// in time leaves the deadline where it was, and a hold with none acknowledged for a whole
    /// lease is lost, as for a late renewal: keep `timeout` well under a third of the watchdog
    /// timeout, as a renewal round waits for it. Without replica sync, a failover to a replica
    /// that lacks the last renewal lets another take the lock up to one renewal period before
    /// the holder's local deadline (the time between the sends of its last two renewals: a third
    /// of the watchdog timeout plus how late the watchdog's round started), a period more for
    /// each further renewal it lacks, and at once if it lacks the acquire.
    pub fn with_replica_sync(mut self, timeout: Duration) -> Config {
        self.replica_sync = Some(timeout);
        self
    }

    /// Sets how long, after this client freed a lock whose wake-up reached waiters in other
    /// processes, this client's tasks (its next `lock()` of that lock, and its own waiter that
    /// the same wake-up woke) hold back instead of taking it at once. The grace ends early when
    /// another release of the lock is heard: it has changed hands. Without it a process whose
    /// tasks release and lock again keeps the lock among themselves, because its own waiters
    /// are awake and close while waiters elsewhere must first receive the wake-up; with it they
    /// get their turn. Whether the wake-up reached other processes is known from the release's
    /// reply, so a task that calls `lock()` while a release of this client's is on its way (the
    /// lock may be free already) waits for that reply too, then for the grace if there is one. The
    /// grace should cover a wake-up message plus one round trip to Redis; `Duration::ZERO` turns
    /// it off, and the wait for the reply with it. A re-entry and `try_lock()` never wait.
    pub fn with_handoff_grace(mut self, grace: Duration) -> Config {
        self.handoff_grace = grace;
        self
    }

    /// Sets how long a hand-off claim outlives the lease it waits on. A waiter that lost the
    /// race for a freed lock to another process claims the lock's next free moment: from the
    /// next release on, other waiters (of any client using relock) leave the lock to it for at
    /// most this window, so across processes no waiter loses race after race. A claimant that
    /// gave up withdraws its claim; one that died delays the others by at most the window once
    /// the lock is free, however it came to be free (released, expired, deleted, or unlocked by
    /// Redisson). Waiters refused by a claim look again when the window ends, so it should
    /// exceed the time the lock is usually held. `Duration::ZERO` stops this client from
    /// claiming (it still respects others' claims, for at most the default window of 10 ms).
    pub fn with_claim_window(mut self, window: Duration) -> Config {
        self.claim_window = window;
        self
    }

    /// Sets how long a [`FairLock`](crate::FairLock) waiter that stopped answering (its process
    /// died, or it was stopped) keeps its place in the lock's queue. A live waiter renews its
    /// place every third of this (one script call), so it never loses it; a dead waiter at the
    /// head of the queue holds the others back for at most this long once the lock is free.
    /// Must be at least 3 ms.
    pub fn with_fair_waiter_timeout(mut self, timeout: Duration) -> Config {
        self.fair_waiter_timeout = timeout;
        self
    }

    /// Sets how long a waiter of a [`Semaphore`](crate::Semaphore),
    /// [`PermitSemaphore`](crate::PermitSemaphore) or [`CountDownLatch`](crate::CountDownLatch)
    /// sleeps without a wake-up message before it looks again, give or take a fifth (so waiters
    /// do not look all at once). Messages wake waiters at once; this bounds the wait when one is
    /// lost (a Redisson client's release published nothing a relock waiter could hear, a
    /// subscription that was down) or never comes (the counter was written by hand). A permit
    /// semaphore's waiter also looks when the earliest lease of a permit that is out ends.
    pub fn with_poll_interval(mut self, interval: Duration) -> Config {
        self.poll_interval = interval;
        self
    }

    /// Sets whether the client calls its scripts as functions of relock's library (on by
    /// default). On, at connect the client loads the library ([`library_name`](crate::library_name))
    /// where the server has functions (Redis 7.0 and later, Valkey) and allows `FUNCTION LOAD`,
    /// and then calls each script by `FCALL`: the server makes the Lua functions the scripts
    /// share once, at load, not on every call. Off, or where the server has no functions or
    /// refuses the load, it sends each script by `EVALSHA`, as Redis 6.x requires. Either way
    /// the keys, values and messages are the same; [`ClientStats::scripts`](crate::ClientStats::scripts)
    /// says which path a client took, and why.
    pub fn with_functions(mut self, on: bool) -> Config {
        self.functions = on;
        self
    }

    /// Labels the metrics of each lock and synchronizer with `name` => `label(its name)`
    /// (the `metrics` feature). Off by default: names are unbounded (`order:42`, `order:43`,
    /// ...), and a metrics backend keeps one series per label value. Map them to a few
    /// families instead, such as `order:*`:
    ///
    /// ```
    /// let config = relock::Config::from_url("redis://127.0.0.1:6379")?
    ///     .with_metric_name_label(|name| match name.split_once(':') {
    ///         Some((family, _)) => format!("{family}:*"),
    ///         None => name.to_owned(),
    ///     });
    /// # Ok::<(), relock::Error>(())
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn with_metric_name_label(
        mut self,
        label: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> Config {
        self.metric_names = Some(std::sync::Arc::new(label));
        self
    }

    /// The lease of locks taken without one.
    pub fn watchdog_timeout(&self) -> Duration {
        self.watchdog_timeout
    }

    /// The longest a single Redis command may take.
    pub fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// The fred connection config.
    pub fn redis(&self) -> &fred::types::config::Config {
        &self.redis
    }

    /// Checks every setting; the client refuses to start with a bad one.
    pub(crate) fn validate(&self) -> Result<()> {
        let watchdog = millis(self.watchdog_timeout, "watchdog timeout")?;
        if watchdog < 3 {
            return Err(Error::invalid(
                "watchdog timeout must be at least 3 ms so it can be renewed every third of it",
            ));
        }
        millis(self.command_timeout, "command timeout")?;
        if let Some(timeout) = self.replica_sync {
            millis(timeout, "replica sync timeout")?;
        }
        if self.renewal_batch == 0 {
            return Err(Error::invalid("renewal batch must hold at least one lock"));
        }
        if ceil_millis(self.handoff_grace) > MAX_MILLIS {
            return Err(Error::invalid(format!(
                "hand-off grace of {:?} is too long: the most is {MAX_MILLIS} ms",
                self.handoff_grace
            )));
        }
        self.claim_window_ms()?;
        millis(self.poll_interval, "poll interval")?;
        if millis(self.fair_waiter_timeout, "fair waiter timeout")? < 3 {
            return Err(Error::invalid(
                "fair waiter timeout must be at least 3 ms so a waiter can renew its place every third of it",
            ));
        }
        Ok(())
    }

    /// The claim window in whole milliseconds (1 ms to 2^53 ms): the one set, or the default
    /// one for a client that does not claim, which still leaves a claimant its turn and no more.
    pub(crate) fn claim_window_ms(&self) -> Result<u64> {
        if self.claim_window.is_zero() {
            return millis(DEFAULT_CLAIM_WINDOW, "claim window");
        }
        millis(self.claim_window, "claim window")
    }

    /// Whether this client's waiters claim hand-offs.
    pub(crate) fn claims(&self) -> bool {
        !self.claim_window.is_zero()
    }
}

/// Shows every setting but the credentials: the password (and a Sentinel's, which fred keeps in
/// its server settings) never reaches a log through `{:?}`.
impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redis = &self.redis;
        let mut out = f.debug_struct("Config");
        out.field("server", &server_name(&redis.server))
            .field("username", &redis.username)
            .field("password", &redis.password.as_ref().map(|_| Redacted))
            .field("database", &redis.database);
        #[cfg(feature = "tls")]
        out.field("tls", &redis.tls.is_some());
        out.field("watchdog_timeout", &self.watchdog_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("renewal_batch", &self.renewal_batch)
            .field("replica_sync", &self.replica_sync)
            .field("handoff_grace", &self.handoff_grace)
            .field("claim_window", &self.claim_window)
            .field("fair_waiter_timeout", &self.fair_waiter_timeout)
            .field("poll_interval", &self.poll_interval)
            .field("functions", &self.functions)
            .finish()
    }
}

/// The claim window unless set otherwise.
const DEFAULT_CLAIM_WINDOW: Duration = Duration::from_millis(10);

/// `duration` in whole milliseconds, a remainder rounded up: what relock sends Redis for it,
/// so a lease or timeout is never cut short (1.5 ms is 2 ms, never 1).
pub(crate) fn ceil_millis(duration: Duration) -> u128 {
    let ms = duration.as_millis();
    if duration.subsec_nanos() % 1_000_000 == 0 {
        ms
    } else {
        ms + 1
    }
}

/// A duration of at least 1 ms in whole milliseconds, as Redis takes it: a remainder is
/// rounded up ([`ceil_millis`]), so what relock reports of a lease is what Redis got.
pub(crate) fn millis(duration: Duration, what: &str) -> Result<u64> {
    let ms = ceil_millis(duration);
    if duration < Duration::from_millis(1) {
        return Err(Error::invalid(format!(
            "{what} must be at least 1 ms, got {duration:?}"
        )));
    }
    if ms > MAX_MILLIS {
        return Err(Error::invalid(format!(
            "{what} of {duration:?} is too long: the most is {MAX_MILLIS} ms"
        )));
    }
    Ok(ms as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn milliseconds_are_rounded_up() {
        let ms = |d| millis(d, "lease");
        assert_eq!(ms(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(ms(Duration::from_micros(1_999)).unwrap(), 2);
        assert_eq!(ms(Duration::from_nanos(1_000_001)).unwrap(), 2);
        assert_eq!(ms(Duration::from_micros(60_000_500)).unwrap(), 60_001);
        assert!(ms(Duration::from_nanos(999_999)).is_err());
        assert!(ms(Duration::ZERO).is_err());
        assert_eq!(
            ms(Duration::from_millis(MAX_MILLIS as u64)).unwrap() as u128,
            MAX_MILLIS
        );
        assert!(ms(Duration::from_millis(MAX_MILLIS as u64) + Duration::from_nanos(1)).is_err());
        assert_eq!(ceil_millis(Duration::from_secs(3)), 3_000);
        assert_eq!(ceil_millis(Duration::ZERO), 0);
    }

    #[test]
    fn debug_hides_the_password() {
        let config = Config::from_url("redis://someone:hunter2@127.0.0.1:6379/3").unwrap();
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("someone") && shown.contains("127.0.0.1:6379"),
            "{shown}"
        );
        let e = Config::from_url("redis://:hunter2@127.0.0.1:notaport").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        assert!(!format!("{e:?}").contains("hunter2"), "{e:?}");
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn tls_urls_need_the_tls_feature() {
        for url in [
            "rediss://127.0.0.1:6380",
            "rediss-cluster://127.0.0.1:7000",
            "rediss-sentinel://127.0.0.1:26379/0?sentinelServiceName=mymaster",
            "valkeys://127.0.0.1:6380",
        ] {
            let e = Config::from_url(url).unwrap_err();
            assert!(e.is_invalid_argument(), "{url}: {e:?}");
            assert!(e.to_string().contains("`tls` feature"), "{url}: {e}");
        }
    }
}
