//! How long a spin lock's waiter sleeps between attempts.
//!
//! A spin lock is not woken by pub/sub: its waiter retries the acquire script, sleeping between
//! attempts. [`Backoff`] is the policy (how the sleeps grow and where they stop); `Delays` is
//! one waiting acquire's walk through it, with its own source of jitter so that waiters which
//! retried at the same moment spread apart.

use std::time::Duration;

use crate::error::{Error, Result};

/// The shortest delay a backoff accepts: shorter sleeps are below what a timer resolves and
/// would turn a waiter into a busy loop against Redis.
const MIN_DELAY: Duration = Duration::from_millis(1);

/// The longest delay a backoff accepts. A longer one is almost certainly a unit mistake
/// (seconds given as milliseconds), and would leave a free lock untaken for that long.
const MAX_DELAY: Duration = Duration::from_secs(60 * 60);

/// The largest multiplier a backoff accepts.
const MAX_MULTIPLIER: f64 = 100.0;

/// How a spin lock's waiter spaces its retries: exponentially growing delays, capped, with
/// jitter.
///
/// A spin lock's waiter is not woken when the lock is freed; it tries again after a delay. The
/// first delay is about `initial`, each next one about `multiplier` times longer, until they
/// reach `max` and stay there. Numbering the delays of one waiting acquire from `k = 0`, the
/// k-th delay's ceiling is
///
/// > c<sub>k</sub> = min(`max`, `initial` · `multiplier`<sup>k</sup>)
///
/// and the delay itself is drawn uniformly from [c<sub>k</sub> / 2, c<sub>k</sub>] ("equal
/// jitter"). The lower half bound keeps a waiter from hammering Redis; the random upper half
/// spreads apart waiters that retried at the same moment, so they do not collide again on every
/// retry. Every delay therefore lies between `initial / 2` and `max`.
///
/// [`Backoff::default()`] has Redisson's defaults for its spin lock (`LockOptions.defaults()`):
/// 1 ms initial, 128 ms at most, multiplier 2. Redisson's jitter differs: it adds a random
/// 0 to n − 1 ms to the n-th failed attempt's delay, a spread that is large for the first,
/// short delays and small for the long ones; relock's is proportional to each delay.
///
/// # Bounds
///
/// [`exponential`](Self::exponential) and [`constant`](Self::constant) refuse, with
/// [`Error::InvalidArgument`]:
///
/// * an initial delay (or constant delay) shorter than 1 ms;
/// * a `max` shorter than `initial`;
/// * a `max` (or constant delay) longer than 1 hour;
/// * a `multiplier` that is not finite, below 1.0 or above 100.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use relock::Backoff;
///
/// // 2 ms, 3 ms, 4.5 ms, ... up to 50 ms, each with jitter.
/// let backoff = Backoff::exponential(Duration::from_millis(2), Duration::from_millis(50), 1.5)?;
/// assert_eq!(backoff.max(), Duration::from_millis(50));
///
/// assert!(Backoff::exponential(Duration::ZERO, Duration::from_millis(50), 1.5).is_err());
/// # Ok::<(), relock::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    multiplier: f64,
}

impl Backoff {
    /// Delays that start at about `initial` and grow by `multiplier` after each retry, up to
    /// `max`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `initial` is shorter than 1 ms, `max` is shorter than
    /// `initial` or longer than 1 hour, or `multiplier` is not a finite number from 1.0 to 100.
    pub fn exponential(initial: Duration, max: Duration, multiplier: f64) -> Result<Backoff> {
        check_delay(initial, "a backoff's initial delay")?;
        check_delay(max, "a backoff's longest delay")?;
        if max < initial {
            return Err(Error::invalid(format!(
                "a backoff's longest delay ({max:?}) must not be shorter than its initial delay \
                 ({initial:?})"
            )));
        }
        if !(1.0..=MAX_MULTIPLIER).contains(&multiplier) {
            return Err(Error::invalid(format!(
                "a backoff's multiplier must be a number from 1 to {MAX_MULTIPLIER}, got \
                 {multiplier}"
            )));
        }
        Ok(Backoff {
            initial,
            max,
            multiplier,
        })
    }

    /// The same ceiling for every retry: each delay lies between `delay / 2` and `delay`
    /// (multiplier 1, `initial` and `max` both `delay`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let backoff = relock::Backoff::constant(Duration::from_millis(64))?;
    /// assert_eq!(backoff.initial(), backoff.max());
    /// assert_eq!(backoff.multiplier(), 1.0);
    /// # Ok::<(), relock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `delay` is shorter than 1 ms or longer than 1 hour.
    pub fn constant(delay: Duration) -> Result<Backoff> {
        check_delay(delay, "a constant backoff's delay")?;
        Ok(Backoff {
            initial: delay,
            max: delay,
            multiplier: 1.0,
        })
    }

    /// The ceiling of the first delay.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The ceiling the delays grow to and stay at.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// How much each delay's ceiling grows over the one before, until it reaches
    /// [`max`](Self::max).
    pub fn multiplier(&self) -> f64 {
        self.multiplier
    }
}

/// Redisson's spin lock defaults: 1 ms initial, 128 ms at most, multiplier 2.
impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            initial: Duration::from_millis(1),
            max: Duration::from_millis(128),
            multiplier: 2.0,
        }
    }
}

/// Refuses a delay outside [`MIN_DELAY`, `MAX_DELAY`].
fn check_delay(delay: Duration, what: &str) -> Result<()> {
    if delay < MIN_DELAY {
        return Err(Error::invalid(format!(
            "{what} must be at least 1 ms, got {delay:?}"
        )));
    }
    if delay > MAX_DELAY {
        return Err(Error::invalid(format!(
            "{what} must be at most 1 hour, got {delay:?}"
        )));
    }
    Ok(())
}

/// The delays of one waiting acquire: the k-th call of [`next`](Self::next) draws the k-th
/// delay of its [`Backoff`].
#[derive(Debug)]
pub(crate) struct Delays {
    backoff: Backoff,
    /// k: how many delays were drawn since the start. It stops counting once
    /// the ceiling reaches `max`.
    retry: u32,
    /// Seeded at the first draw: most acquires never pause, and seeding reads the system's
    /// random source.
    rng: Option<SplitMix64>,
}

impl Delays {
    pub(crate) fn new(backoff: Backoff) -> Delays {
        Delays {
            backoff,
            retry: 0,
            rng: None,
        }
    }

    /// The next delay to sleep: uniform in [c_k / 2, c_k].
    pub(crate) fn next(&mut self) -> Duration {
        let ceiling = self.ceiling();
        if ceiling < self.backoff.max {
            self.retry = self.retry.saturating_add(1);
        }
        // The ceiling is at most an hour, 3.6e12 ns: it fits a u64.
        let hi = ceiling.as_nanos() as u64;
        let lo = hi / 2;
        let span = hi - lo + 1;
        // The high half of a 64 × 64-bit product maps a uniform u64 onto 0..span, without the
        // division of `%` (its bias, span / 2^64, is below 1e-7 either way).
        let draw = self.rng.get_or_insert_with(SplitMix64::seeded).next();
        let offset = ((u128::from(draw) * u128::from(span)) >> 64) as u64;
        Duration::from_nanos(lo + offset)
    }

    /// c_k = min(max, initial · multiplier^k), never below `initial`.
    fn ceiling(&self) -> Duration {
        let Backoff {
            initial,
            max,
            multiplier,
        } = self.backoff;
        // In f64, `powf` goes to infinity rather than overflowing, and a float-to-integer `as`
        // saturates, so a huge k gives u64::MAX, which the clamp brings down to `max`. The
        // clamp is sound: a `Backoff` always has `initial <= max`.
        let nanos = initial.as_nanos() as f64 * multiplier.powf(f64::from(self.retry));
        Duration::from_nanos(nanos as u64).clamp(initial, max)
    }
}

/// splitmix64 (Steele, Lea and Flood, 2014): a 64-bit generator whose every seed, zero
/// included, gives a full-period, well-mixed stream.
///
/// It is enough here because the randomness only spreads out retries: nothing depends on the
/// delays being unpredictable, so a cryptographic generator would buy nothing. What matters is
/// that two waiters, in one process or in many, draw different streams; each seed comes from a
/// v4 UUID, 122 bits from the operating system's generator, once per waiting acquire.
#[derive(Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn seeded() -> SplitMix64 {
        let bits = uuid::Uuid::new_v4().as_u128();
        SplitMix64((bits >> 64) as u64 ^ bits as u64)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const HOUR: Duration = Duration::from_secs(3600);
    const DRAWS: usize = 10_000;

    /// initial · multiplier^k capped at max, computed apart from `Delays::ceiling`.
    fn expected_ceiling(backoff: Backoff, k: i32) -> f64 {
        let ideal = backoff.initial.as_secs_f64() * backoff.multiplier.powi(k);
        ideal.min(backoff.max.as_secs_f64())
    }

    fn policies() -> Vec<Backoff> {
        vec![
            Backoff::default(),
            Backoff::exponential(2 * MS, 50 * MS, 1.5).unwrap(),
            Backoff::exponential(MS, 1000 * MS, 3.0).unwrap(),
            Backoff::exponential(Duration::from_micros(1500), 7 * MS, 1.1).unwrap(),
            Backoff::exponential(5 * MS, 5 * MS, 2.0).unwrap(),
            Backoff::exponential(MS, HOUR, 100.0).unwrap(),
            Backoff::exponential(MS, 64 * MS, 1.0).unwrap(),
            Backoff::constant(64 * MS).unwrap(),
        ]
    }

    #[test]
    fn defaults_are_redissons() {
        let backoff = Backoff::default();
        assert_eq!(backoff.initial(), Duration::from_millis(1));
        assert_eq!(backoff.max(), Duration::from_millis(128));
        assert_eq!(backoff.multiplier(), 2.0);
        assert_eq!(
            Backoff::exponential(MS, 128 * MS, 2.0).unwrap(),
            Backoff::default()
        );
    }

    #[test]
    fn bad_input_is_an_invalid_argument() {
        let bad = [
            (Duration::ZERO, 128 * MS, 2.0),
            (Duration::from_micros(999), 128 * MS, 2.0),
            (10 * MS, 9 * MS, 2.0),
            (10 * MS, Duration::from_micros(9_999), 2.0),
            (MS, HOUR + Duration::from_nanos(1), 2.0),
            (2 * HOUR, 2 * HOUR, 2.0),
            (MS, Duration::MAX, 2.0),
            (MS, 128 * MS, f64::NAN),
            (MS, 128 * MS, f64::INFINITY),
            (MS, 128 * MS, f64::NEG_INFINITY),
            (MS, 128 * MS, 0.999_999),
            (MS, 128 * MS, 0.0),
            (MS, 128 * MS, -2.0),
            (MS, 128 * MS, 100.000_001),
            (MS, 128 * MS, 1e300),
        ];
        for (initial, max, multiplier) in bad {
            let e = Backoff::exponential(initial, max, multiplier).unwrap_err();
            assert!(
                e.is_invalid_argument(),
                "{initial:?}, {max:?}, {multiplier}: {e:?}"
            );
        }
        for delay in [
            Duration::ZERO,
            Duration::from_micros(999),
            HOUR + Duration::from_nanos(1),
            Duration::MAX,
        ] {
            let e = Backoff::constant(delay).unwrap_err();
            assert!(e.is_invalid_argument(), "{delay:?}: {e:?}");
        }
    }

    #[test]
    fn the_bounds_themselves_are_accepted() {
        for (initial, max, multiplier) in [
            (MS, MS, 1.0),
            (MS, HOUR, 100.0),
            (HOUR, HOUR, 1.0),
            (7 * MS, 7 * MS, 2.0),
        ] {
            let backoff = Backoff::exponential(initial, max, multiplier).unwrap();
            assert_eq!(
                (backoff.initial(), backoff.max(), backoff.multiplier()),
                (initial, max, multiplier)
            );
        }
        for delay in [MS, HOUR] {
            let backoff = Backoff::constant(delay).unwrap();
            assert_eq!(
                (backoff.initial(), backoff.max(), backoff.multiplier()),
                (delay, delay, 1.0)
            );
        }
    }

    #[test]
    fn every_draw_lies_in_the_upper_half_of_its_ceiling() {
        for backoff in policies() {
            let mut delays = Delays::new(backoff);
            for k in 0..40 {
                delays.retry = k;
                let ceiling = delays.ceiling();
                let mut low = Duration::MAX;
                let mut high = Duration::ZERO;
                for _ in 0..DRAWS {
                    delays.retry = k;
                    let delay = delays.next();
                    assert!(
                        ceiling / 2 <= delay && delay <= ceiling,
                        "{backoff:?}, k = {k}: {delay:?} outside [{:?}, {ceiling:?}]",
                        ceiling / 2
                    );
                    assert!(backoff.initial / 2 <= delay && delay <= backoff.max);
                    low = low.min(delay);
                    high = high.max(delay);
                }
                // Jitter covers the whole upper half, not one corner of it.
                let margin = ceiling / 20;
                assert!(low < ceiling / 2 + margin, "{backoff:?}, k = {k}: {low:?}");
                assert!(high > ceiling - margin, "{backoff:?}, k = {k}: {high:?}");
            }
        }
    }

    #[test]
    fn ceilings_grow_by_the_multiplier_and_stop_at_max() {
        for backoff in policies() {
            let mut delays = Delays::new(backoff);
            for k in 0..200 {
                let ceiling = delays.ceiling().as_secs_f64();
                let expected = expected_ceiling(backoff, k);
                // Within the nanosecond the ceiling is rounded down to.
                assert!(
                    (ceiling - expected).abs() <= 1e-9 + expected * 1e-12,
                    "{backoff:?}, k = {k}: {ceiling} s, expected {expected} s"
                );
                assert!(backoff.initial <= delays.ceiling());
                assert!(delays.ceiling() <= backoff.max);
                delays.next();
            }
        }
    }

    #[test]
    fn the_delays_reach_max_and_stay_there() {
        let backoff = Backoff::default();
        let mut delays = Delays::new(backoff);
        // 1, 2, 4, ..., 64 ms: seven ceilings below 128 ms.
        for k in 0..7 {
            let delay = delays.next();
            let ceiling = MS * (1 << k);
            assert!(
                ceiling / 2 <= delay && delay <= ceiling,
                "k = {k}: {delay:?}"
            );
        }
        for _ in 0..DRAWS {
            assert_eq!(delays.ceiling(), backoff.max);
            let delay = delays.next();
            assert!(64 * MS <= delay && delay <= 128 * MS, "{delay:?}");
        }
    }

    #[test]
    fn constant_delays_lie_between_half_and_whole() {
        for delay in [MS, 3 * MS, 64 * MS, Duration::from_secs(1), HOUR] {
            let mut delays = Delays::new(Backoff::constant(delay).unwrap());
            for _ in 0..DRAWS {
                let drawn = delays.next();
                assert!(delay / 2 <= drawn && drawn <= delay, "{delay:?}: {drawn:?}");
            }
        }
    }

    #[test]
    fn two_waiters_draw_different_delays() {
        let backoff = Backoff::default();
        let draw = || {
            let mut delays = Delays::new(backoff);
            (0..20).map(|_| delays.next()).collect::<Vec<_>>()
        };
        assert_ne!(draw(), draw());
    }

    #[test]
    fn extreme_policies_neither_overflow_nor_panic() {
        let extremes = [
            Backoff::exponential(MS, HOUR, 100.0).unwrap(),
            Backoff::exponential(HOUR, HOUR, 100.0).unwrap(),
            Backoff::exponential(MS, HOUR, 1.0 + f64::EPSILON).unwrap(),
            Backoff::exponential(MS, MS, 100.0).unwrap(),
            Backoff::constant(HOUR).unwrap(),
        ];
        for backoff in extremes {
            let mut delays = Delays::new(backoff);
            for _ in 0..1000 {
                let delay = delays.next();
                assert!(backoff.initial / 2 <= delay && delay <= backoff.max);
            }
            // However many retries came before.
            delays.retry = u32::MAX;
            for _ in 0..3 {
                let delay = delays.next();
                assert!(backoff.initial / 2 <= delay && delay <= backoff.max);
            }
        }
        let mut delays = Delays::new(Backoff::exponential(MS, HOUR, 100.0).unwrap());
        for _ in 0..5 {
            delays.next();
        }
        for _ in 0..DRAWS {
            let delay = delays.next();
            assert!(HOUR / 2 <= delay && delay <= HOUR, "{delay:?}");
        }
    }
}
