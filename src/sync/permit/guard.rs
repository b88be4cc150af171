//! A [`Permit`]: one permit out, renewed by the watchdog while it lives (its type, [`Permits`],
//! is what the registry keeps), given back when released or dropped.

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use futures::future::BoxFuture;
use once_cell::sync::Lazy;
use tokio::time::Instant;

use crate::background::Ended;
use crate::connection::Connection;
use crate::error::{Call, Error, Result};
use crate::meter::Unlocked;
use crate::names::CounterKeys;
use crate::primitive::Primitive;
use crate::registry::{Closing, Held, HoldKey, Leaving, Registration, Releasing, Renewal};
use crate::scripts::{self, catalogue, integer, ms_arg, text, Script};
use crate::shared::Shared;
use crate::wait::{until_answered, Lost};

use super::{blamed, from_hex, RELEASE_KEYS};

static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(catalogue::PERMIT_RELEASE));
static RENEW: Lazy<Script> = Lazy::new(|| Script::new(catalogue::PERMIT_RENEW));

/// One permit of a [`PermitSemaphore`](crate::PermitSemaphore), taken by this client. Release it with
/// [`release`](Permit::release); dropping it releases it in the background (on the client's
/// runtime, or on a thread of its own where no runtime runs, as a
/// [`LockGuard`](crate::LockGuard) does).
#[must_use = "dropping the permit gives it back at once"]
pub struct Permit {
    pub(super) shared: Arc<Shared>,
    pub(super) keys: Arc<CounterKeys>,
    /// The id as shown: 32 lowercase hex characters.
    pub(super) id: Str,
    /// The id as stored: 16 raw bytes.
    pub(super) bytes: [u8; 16],
    pub(super) lease: Option<Duration>,
    pub(super) registration: Registration,
    pub(super) released: bool,
    /// When it was taken, for its hold time in metrics.
    pub(super) taken_at: Instant,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("semaphore", &self.keys.name)
            .field("id", &self.id)
            .field("lease", &self.lease)
            .finish()
    }
}

impl Permit {
    /// The permit's id: 32 lowercase hex characters (Redis stores the 16 bytes they spell, as
    /// Redisson does).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The fixed lease of this permit, or `None` when the watchdog renews it.
    pub fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// A future that completes as soon as this client knows the permit may be gone, so another
    /// holder may have it: its lease may have run out (the send time of the latest acquire or
    /// renewal Redis confirmed, plus its lease: no round trip needed), the watchdog found it
    /// gone, or the client shut down. A loss is final. It completes too once the permit is
    /// released. The same snapshot caveat as [`LockGuard::lost`](crate::LockGuard::lost)
    /// applies.
    pub fn lost(&self) -> Lost {
        Lost::from_future(self.registration.standing.clone().lost())
    }

    /// Whether [`lost`](Self::lost) has completed (or would complete at once), checked against
    /// the clock without a round trip.
    pub fn is_lost(&self) -> bool {
        self.registration.standing.is_lost()
    }

    /// Gives the permit back and wakes the semaphore's waiters. Renewal stops before the
    /// release is sent.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the permit's lease had ended (the permit went back to the
    /// semaphore then, or goes back now), [`Error::NotHeld`] when the permit was gone otherwise
    /// (released by id, or the semaphore deleted), [`Error::Closed`] after the client shut down
    /// (which gave it back), [`Error::Redis`] when Redis fails. A release whose reply was lost
    /// is sent again: giving back a permit twice gives it back once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the release runs to its end in the background.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let was_lost = self.is_lost();
        let leaving = self.stop_renewal();
        self.shared.check_open()?;
        let Leaving::Release { lapses_after } = leaving else {
            return Err(self.lease_lost());
        };
        let (shared, keys) = (&self.shared, &self.keys);
        let in_flight = (keys.name.clone(), self.id.clone());
        let mut resume = ResumeRelease {
            pending: Some((
                shared.clone(),
                keys.clone(),
                self.bytes,
                shared.registry.releasing(in_flight),
            )),
        };
        let bytes = self.bytes;
        let send = |_| give_back(shared, None, keys, &bytes);
        let (outcome, sent_before) = until_answered(false, send).await;
        resume.pending = None;
        let ended = outcome.and_then(|released| match released {
            Released::Given => Ok(()),
            Released::Lapsed => Err(self.lease_lost()),
            // A retry that finds it gone: the first send gave it back, unless it lapsed.
            Released::NotOut if sent_before && Instant::now() < lapses_after => Ok(()),
            Released::NotOut if was_lost || self.is_lost() => Err(self.lease_lost()),
            Released::NotOut => Err(Error::NotHeld {
                lock: self.keys.name.to_string(),
                owner: self.id.to_string(),
            }),
        });
        let counted = match &ended {
            Ok(()) if sent_before => Unlocked::Replayed,
            Ok(()) => Unlocked::Released,
            Err(e) if e.is_lease_lost() || e.is_not_held() => Unlocked::NotHeld,
            Err(_) => Unlocked::Failed,
        };
        let meter = shared.meter();
        meter.unlocked(Primitive::PermitSemaphore, &keys.name, counted);
        ended
    }

    fn lease_lost(&self) -> Error {
        Error::LeaseLost {
            lock: self.keys.name.to_string(),
            owner: self.id.to_string(),
        }
    }

    fn stop_renewal(&self) -> Leaving {
        let meter = self.shared.meter();
        meter.let_go(Primitive::PermitSemaphore, &self.keys.name, self.taken_at);
        let key = (self.keys.name.clone(), self.id.clone());
        self.shared.registry.unregister(&key, &self.registration)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        if !matches!(self.stop_renewal(), Leaving::Release { .. }) {
            return;
        }
        if self.shared.check_open().is_err() {
            return;
        }
        let in_flight = (self.keys.name.clone(), self.id.clone());
        drop(ResumeRelease {
            pending: Some((
                self.shared.clone(),
                self.keys.clone(),
                self.bytes,
                self.shared.registry.releasing(in_flight),
            )),
        });
    }
}

/// What giving back a permit found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Released {
    /// Given back within its lease.
    Given,
    /// Given back, but its lease had ended (nobody had reclaimed it yet).
    Lapsed,
    /// Not out: given back already, reclaimed after its lease ended, or never taken.
    NotOut,
}

/// Gives back the permit `id` (16 bytes) on `fresh`, or the client's connection.
pub(super) async fn give_back(
    shared: &Shared,
    fresh: Option<&Connection>,
    keys: &CounterKeys,
    id: &[u8; 16],
) -> Result<Released> {
    let redis = fresh.unwrap_or(&shared.redis);
    give_back_on(redis, shared.publish, keys, id).await
}

async fn give_back_on(
    redis: &Connection,
    publish: &'static str,
    keys: &CounterKeys,
    id: &[u8; 16],
) -> Result<Released> {
    let sent = [
        Key::from(&keys.name),
        Key::from(&keys.channel),
        Key::from(&keys.leases),
    ];
    let args = [Value::Bytes(id.to_vec().into()), text(publish)];
    let reply = RELEASE.run(redis, &sent, &args).await;
    let reply = reply.map_err(|e| blamed(e, keys, redis, RELEASE_KEYS))?;
    match integer(reply, &keys.name, &redis.server)? {
        1 => Ok(Released::Given),
        2 => Ok(Released::Lapsed),
        _ => Ok(Released::NotOut),
    }
}

/// Gives back a permit in the background: one whose `Permit` was dropped, whose `release()`
/// was dropped mid-flight, or that a cancelled acquire may have taken. Giving back a permit
/// that is not out does nothing, so it is safe to run whether or not the permit was taken.
pub(super) struct ResumeRelease {
    pub(super) pending: Option<Pending>,
}

/// A permit to give back: its semaphore and id, counted in flight until it is given back.
pub(super) type Pending = (Arc<Shared>, Arc<CounterKeys>, [u8; 16], Releasing);

impl Drop for ResumeRelease {
    fn drop(&mut self) {
        let Some((shared, keys, bytes, releasing)) = self.pending.take() else {
            return;
        };
        let releasing = Arc::new(releasing);
        let background = shared.clone();
        let job = move |fresh: Option<Arc<Connection>>| {
            let (shared, keys) = (shared.clone(), keys.clone());
            let releasing = releasing.clone();
            Box::pin(async move {
                let send = |_| give_back(&shared, fresh.as_deref(), &keys, &bytes);
                let (outcome, _) = until_answered(true, send).await;
                if let Err(error) = &outcome {
                    tracing::debug!(semaphore = %keys.name, %error, "background permit release failed; it comes back when its lease ends");
                }
                drop(releasing);
                Ended::of(&outcome)
            }) as BoxFuture<'static, Ended>
        };
        background.background.must_run(Arc::new(job));
    }
}

/// The permits' type, as the client's registry keeps it: the watchdog renews permits many per
/// script call, and a shutdown gives them back.
struct Permits;

pub(super) static PERMITS: Lazy<Arc<dyn Held>> = Lazy::new(|| Arc::new(Permits));

impl Held for Permits {
    fn renewal(&self) -> &'static str {
        "permit"
    }

    fn primitive(&self) -> crate::primitive::Primitive {
        crate::primitive::Primitive::PermitSemaphore
    }

    fn renew<'a>(&'a self, renewal: Renewal<'a>) -> Call<'a, Vec<bool>> {
        let Renewal {
            redis,
            locks,
            lease_ms,
        } = renewal;
        Box::pin(async move {
            let mut sent = Vec::with_capacity(locks.len());
            let mut args = Vec::with_capacity(locks.len() + 1);
            args.push(ms_arg(lease_ms));
            for (name, id) in locks {
                let keys = CounterKeys::semaphore(name)?;
                sent.push(Key::from(&keys.leases));
                let bytes = from_hex(id).expect("registered with a hex id");
                args.push(Value::Bytes(bytes.to_vec().into()));
            }
            let reply = RENEW.run(redis, &sent, &args).await;
            let reply = reply.map_err(|e| Error::redis(e, &redis.server))?;
            let Value::Array(items) = reply else {
                return Err(scripts::unexpected(&reply, "permit renewal", &redis.server));
            };
            items
                .into_iter()
                .map(|item| Ok(integer(item, "permit renewal", &redis.server)? == 1))
                .collect()
        })
    }

    fn close_holds<'a>(&'a self, closing: &'a Closing<'a>, held: &'a HoldKey) -> Call<'a, bool> {
        Box::pin(async move {
            let keys = CounterKeys::semaphore(&held.0)?;
            let bytes = from_hex(&held.1).expect("registered with a hex id");
            let released = give_back_on(closing.redis, closing.publish, &keys, &bytes).await?;
            Ok(released != Released::NotOut)
        })
    }
}
