//! `SpinLock`: the plain lock's hash on Redis, waiters that poll with a jittered exponential
//! backoff and never subscribe. Checked on what Redis holds (`HGET`, `HGETALL`, `PUBSUB NUMSUB`)
//! and how often it was asked (`INFO commandstats`), not on what the client says of itself.

use crate::common;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use common::RedisServer;
use rand::{Rng, SeedableRng};
use relock::{Backoff, Client, LockGuard, Owner, SpinLock};

/// The watchdog timeout of the tests' clients: a lock taken without a lease lasts this long
/// unless renewed, far longer than any wait the tests expect.
const WATCHDOG: Duration = Duration::from_secs(5);
/// Bounds any wait, so a waiter that never gets the lock fails the test instead of hanging it.
const HANG: Duration = Duration::from_secs(30);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A quick backoff (1 ms doubling to 16 ms), so tests with many hand-offs stay fast.
fn quick() -> Backoff {
    Backoff::exponential(ms(1), ms(16), 2.0).unwrap()
}

/// How many `EVALSHA`s the server ran: every acquire attempt is one (as are releases, renewals
/// and inspections, which the tests keep out of the windows they count).
fn evalsha_calls(server: &RedisServer) -> u64 {
    common::raw_script_calls(server)
}

/// How many subscribe commands of each kind the server ran.
fn subscribe_calls(server: &RedisServer) -> [u64; 3] {
    ["subscribe", "ssubscribe", "psubscribe"].map(|cmd| common::raw_command_calls(server, cmd))
}

/// The holder field of `owner` on `client`: `<client-id>:<owner-id>`.
fn field(client: &Client, owner: &Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

/// Waits until the server has run `more` `EVALSHA`s beyond `from`: waiters are retrying.
async fn until_attempts(server: &RedisServer, from: u64, more: u64) {
    let retried = common::eventually(Duration::from_secs(10), || async {
        evalsha_calls(server) >= from + more
    })
    .await;
    assert!(
        retried,
        "no {more} attempts were made (waiters are not retrying)"
    );
}

/// Checks that `clients` track nothing: no hold, no renewal, no channel, no waiter.
fn assert_clients_idle(clients: &[&Client]) {
    for client in clients {
        let stats = client.stats();
        assert_eq!(
            (stats.holds, stats.renewing, stats.channels, stats.waiters),
            (0, 0, 0, 0),
            "client {} still tracks something: {stats:?}",
            client.id()
        );
    }
}

/// Spawns a task that takes `lock` (at most [`HANG`]): when it got it, and the guard.
fn spawn_waiter(lock: SpinLock) -> tokio::task::JoinHandle<(Instant, LockGuard)> {
    common::spawn_acquire("the spin waiter", async move { lock.lock().await })
}

/// The most acquire attempts a waiter can make within `window` of its first one: the first at
/// once, then one after each pause, every pause at least half its ceiling c_k = min(max,
/// initial · multiplier^k).
fn most_attempts(backoff: Backoff, window: Duration) -> u64 {
    let (mut attempts, mut elapsed, mut k) = (1u64, Duration::ZERO, 0i32);
    loop {
        let ceiling = (backoff.initial().as_secs_f64() * backoff.multiplier().powi(k))
            .min(backoff.max().as_secs_f64());
        elapsed += Duration::from_secs_f64(ceiling / 2.0);
        if elapsed > window {
            return attempts;
        }
        attempts += 1;
        k += 1;
    }
}

/// Tasks on three clients increment a counter with a read, a pause and a write, under one spin
/// lock: no increment is lost and no two tasks are ever inside at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_waiters_on_several_clients_exclude_each_other() {
    const TASKS: usize = 9;
    const ROUNDS: u64 = 6;
    let (server, clients, name) = common::setup_clients("spin-exclusion", 3, WATCHDOG).await;
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let lock = clients[i % 3].spin_lock(&name).with_backoff(quick());
        let (counter, inside) = (counter.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock.lock().await.unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                let value = counter.load(Ordering::SeqCst);
                tokio::time::sleep(ms(1)).await;
                counter.store(value + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }
        }));
    }
    common::all_within(tasks, HANG, "the contending tasks hung").await;
    assert_eq!(counter.load(Ordering::SeqCst), TASKS as u64 * ROUNDS);
    assert!(!common::raw_exists(&server, &name));
    assert_clients_idle(&clients.iter().collect::<Vec<_>>());
}

/// An owner re-enters its spin lock (count 2 in its Redis field); other owners, on the same
/// client or another, are kept out until its last release, and a waiting one gets it then.
#[tokio::test]
async fn nested_spin_holds_count_on_redis_and_exclude_others_until_the_last_release() {
    let (server, a, b, name) = common::setup_two("spin-reenter", WATCHDOG).await;
    let me = Owner::new();
    let lock = a.spin_lock(&name).owned_by(me.clone());
    let mine = field(&a, &me);

    let outer = lock.lock().await.unwrap();
    let inner = tokio::time::timeout(Duration::from_secs(5), lock.lock())
        .await
        .expect("a re-entry must not wait")
        .unwrap();
    assert_eq!(common::raw_holds(&server, &name, &mine), 2);
    assert_eq!(
        common::raw_hgetall(&server, &name).len(),
        1,
        "one field per owner"
    );
    assert_eq!(lock.hold_count().await.unwrap(), 2);

    let same_client = a.spin_lock(&name).owned_by(Owner::new());
    assert!(same_client.try_lock().await.unwrap().is_none());
    assert!(b.spin_lock(&name).try_lock().await.unwrap().is_none());

    let other = Owner::new();
    let waiter = spawn_waiter(
        b.spin_lock(&name)
            .with_backoff(quick())
            .owned_by(other.clone()),
    );
    inner.unlock().await.unwrap();
    assert_eq!(common::raw_holds(&server, &name, &mine), 1);
    // The waiter keeps trying, and keeps failing, while one hold is left.
    until_attempts(&server, evalsha_calls(&server), 3).await;
    assert!(
        !waiter.is_finished(),
        "the waiter got a lock still held once"
    );
    assert!(same_client.try_lock().await.unwrap().is_none());

    outer.unlock().await.unwrap();
    let (_, guard) = tokio::time::timeout(HANG, waiter).await.unwrap().unwrap();
    assert_eq!(common::raw_holds(&server, &name, &mine), 0);
    assert_eq!(
        common::raw_hgetall(&server, &name),
        vec![(field(&b, &other), "1".to_owned())]
    );
    guard.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
    assert_clients_idle(&[&a, &b]);
}

/// A spin lock and a plain lock of the same name are one lock on Redis: each keeps the other
/// out, and a spin waiter gets the lock once the plain holder releases it.
#[tokio::test]
async fn a_spin_lock_and_a_plain_lock_of_one_name_exclude_each_other() {
    let (server, a, b, name) = common::setup_two("spin-plain", WATCHDOG).await;
    let plain = a.lock(&name).owned_by(Owner::new());
    let spin_owner = Owner::new();
    let spin = b
        .spin_lock(&name)
        .with_backoff(quick())
        .owned_by(spin_owner.clone());

    let held = plain.lock().await.unwrap();
    assert!(spin.try_lock().await.unwrap().is_none());
    let waiter = spawn_waiter(spin.clone());
    until_attempts(&server, evalsha_calls(&server), 3).await;
    assert!(
        !waiter.is_finished(),
        "the spin waiter got a plainly held lock"
    );
    held.unlock().await.unwrap();
    let (_, guard) = tokio::time::timeout(HANG, waiter).await.unwrap().unwrap();

    // The spin holder's field is in the very hash a plain lock reads.
    assert_eq!(
        common::raw_hgetall(&server, &name),
        vec![(field(&b, &spin_owner), "1".to_owned())]
    );
    assert!(plain.is_locked().await.unwrap());
    assert!(plain.try_lock().await.unwrap().is_none());
    let started = Instant::now();
    assert!(plain.try_lock_for(ms(200), None).await.unwrap().is_none());
    assert!(started.elapsed() >= ms(190));
    guard.unlock().await.unwrap();

    let plain_guard = plain.try_lock().await.unwrap().expect("free again");
    plain_guard.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}

/// Spin waiters never subscribe, on the server or in the client, and a spin release publishes
/// nothing on the lock's channel.
#[tokio::test]
async fn spin_waiters_never_subscribe_and_a_release_publishes_nothing() {
    let server = RedisServer::start();
    let holder_client = common::client(&server, WATCHDOG).await;
    let waiter_clients = [
        common::client(&server, WATCHDOG).await,
        common::client(&server, WATCHDOG).await,
    ];
    let name = common::prefix("spin-quiet");
    let channel = common::lock_channel(&name);
    let subscribes_before = subscribe_calls(&server);

    let holder = holder_client.spin_lock(&name).lock().await.unwrap();
    let from = evalsha_calls(&server);
    let mut waiters = Vec::new();
    for i in 0..4 {
        let lock = waiter_clients[i % 2]
            .spin_lock(&name)
            .with_backoff(Backoff::exponential(ms(1), ms(20), 2.0).unwrap());
        waiters.push(tokio::spawn(async move {
            let guard = tokio::time::timeout(HANG, lock.lock())
                .await
                .expect("a spin waiter never got the lock")
                .unwrap();
            guard.unlock().await.unwrap();
        }));
    }
    // Every waiter has retried a few times: they are well into their wait.
    until_attempts(&server, from, 16).await;
    assert_eq!(common::raw_numsub(&server, &channel), 0);
    for client in [&holder_client, &waiter_clients[0], &waiter_clients[1]] {
        let stats = client.stats();
        assert_eq!((stats.channels, stats.waiters), (0, 0), "{stats:?}");
    }
    assert_eq!(subscribe_calls(&server), subscribes_before);

    // Listen on the channel from outside relock, then let the waiters through.
    let mut listener = common::RawSubscriber::subscribe(&server, &[&channel]).await;
    holder.unlock().await.unwrap();
    common::all_within(waiters, HANG, "a task hung").await;
    listener.assert_quiet(&server, &channel).await;

    let [subscribe, ssubscribe, psubscribe] = subscribe_calls(&server);
    assert_eq!(
        [subscribe, ssubscribe, psubscribe],
        [
            subscribes_before[0] + 1, // the listener's own
            subscribes_before[1],
            subscribes_before[2]
        ]
    );
    assert_eq!(
        common::raw_numsub(&server, &channel),
        1,
        "only the listener"
    );
    assert!(!common::raw_exists(&server, &name));
    assert_clients_idle(&[&holder_client, &waiter_clients[0], &waiter_clients[1]]);
}

/// A waiter kept out for about a second retries no more often than its backoff allows (every
/// pause at least half its ceiling), and gets the freed lock within about one longest pause.
#[tokio::test]
async fn a_spin_waiter_retries_within_its_backoff_bounds() {
    let backoff = Backoff::exponential(ms(20), ms(80), 2.0).unwrap();
    let (server, holder_client, waiter_client, name) =
        common::setup_two("spin-backoff", WATCHDOG).await;
    // A fixed lease far beyond the test: the holder sends nothing (no renewal) until it releases,
    // so every EVALSHA in the window is one of the waiter's attempts.
    let holder = holder_client
        .spin_lock(&name)
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();

    let from = evalsha_calls(&server);
    let started = Instant::now();
    let waiter = spawn_waiter(waiter_client.spin_lock(&name).with_backoff(backoff));
    // The hold being measured: the waiter is kept out this long.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let attempts = evalsha_calls(&server) - from;
    let held = started.elapsed();
    assert!(!waiter.is_finished(), "the waiter got a held lock");

    let most = most_attempts(backoff, held);
    let fewest = (held.as_secs_f64() / backoff.max().as_secs_f64()) as u64;
    eprintln!("kept out {held:?}: {attempts} attempts (backoff allows {fewest} to {most})");
    assert!(
        attempts <= most + 2,
        "{attempts} attempts in {held:?}: more than the backoff allows ({most})"
    );
    // Pauses are at most `max` each, so about `fewest` attempts are due; a loaded machine can
    // only make fewer, so this is checked loosely.
    assert!(attempts >= 2, "only {attempts} attempts in {held:?}");

    let released = Instant::now();
    holder.unlock().await.unwrap();
    let (acquired, guard) = tokio::time::timeout(HANG, waiter).await.unwrap().unwrap();
    let waited = acquired.saturating_duration_since(released);
    eprintln!("got the lock {waited:?} after its release");
    assert!(
        waited < backoff.max() + Duration::from_secs(1),
        "got the lock {waited:?} after its release; the longest pause is {:?}",
        backoff.max()
    );
    guard.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}

/// Holds lock `name` with a fixed `lease` and lets a waiter with `backoff` take it: how long after
/// the hold was taken the waiter got it, and in how many attempts.
async fn wait_out_a_lease(test: &str, lease: Duration, backoff: Backoff) -> (Duration, u64) {
    let server = RedisServer::start();
    let holder_client = common::client(&server, WATCHDOG).await;
    let waiter_client = common::client(&server, WATCHDOG).await;
    let name = common::prefix(test);

    let started = Instant::now();
    let _expiring = holder_client
        .spin_lock(&name)
        .lock_with_lease(lease)
        .await
        .unwrap();
    let from = evalsha_calls(&server);
    let waiter = spawn_waiter(waiter_client.spin_lock(&name).with_backoff(backoff));
    let (acquired, guard) = tokio::time::timeout(HANG, waiter).await.unwrap().unwrap();
    let attempts = evalsha_calls(&server) - from;
    let waited = acquired.saturating_duration_since(started);
    eprintln!(
        "{test}: got the lock {waited:?} after a {lease:?} lease was taken, in {attempts} attempts"
    );
    assert!(
        waited >= lease - ms(20),
        "{test}: got the lock {waited:?} into a {lease:?} lease"
    );
    guard.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
    (waited, attempts)
}

/// A waiter whose pauses grow to 5..10 s still gets the lock as soon as the holder's short lease
/// ends: a pause never goes past the lease the busy attempt before it read.
#[tokio::test]
async fn a_spin_waiter_never_sleeps_past_the_holders_lease() {
    // Ceilings 1 ms, 100 ms, then 10 s: the third pause and later would be 5 s at least.
    let backoff = Backoff::exponential(ms(1), Duration::from_secs(10), 100.0).unwrap();
    let lease = ms(500);
    let (waited, attempts) = wait_out_a_lease("spin-lease", lease, backoff).await;
    assert!(
        waited < Duration::from_secs(4),
        "got the lock only {waited:?} after a {lease:?} lease: it slept past the lease"
    );
    assert!(
        attempts <= 6,
        "{attempts} attempts, for two short pauses and a lease-bounded one"
    );
}

/// The same for the very first pause, after the opening attempt found the lock busy: with a
/// constant 10 s backoff (every pause 5..10 s) the waiter must still get the lock when the
/// holder's 300 ms lease ends.
#[tokio::test]
async fn a_spin_waiters_first_pause_is_bounded_by_the_holders_lease_too() {
    let backoff = Backoff::constant(Duration::from_secs(10)).unwrap();
    let lease = ms(300);
    let (waited, attempts) = wait_out_a_lease("spin-first-pause", lease, backoff).await;
    // Any pause of the backoff is 5 s at least: only the lease bound explains an earlier one.
    assert!(
        waited < Duration::from_secs(4),
        "got the lock only {waited:?} after a {lease:?} lease, in {attempts} attempts: the pause \
         after the opening attempt ignored the holder's lease"
    );
    assert!(
        attempts <= 4,
        "{attempts} attempts for one lease-bounded pause"
    );
}

/// Polls `future` `polls` times (yielding to the runtime in between) and drops it unless it
/// finished: a cancellation at an arbitrary await point. Its output, if it finished.
async fn poll_then_drop<F: Future>(future: F, polls: usize) -> Option<F::Output> {
    let mut future = pin!(future);
    for _ in 0..polls {
        if let Poll::Ready(output) = futures::poll!(future.as_mut()) {
            return Some(output);
        }
        tokio::task::yield_now().await;
    }
    None
}

/// Counts relock's "releasing the hold of a cancelled acquire" events per lock name: how often a
/// dropped `lock()` had taken the lock on Redis before it could hand over a guard, so the
/// cancellation test can tell that its random drops reach that window. Diagnostic only: it reads
/// a log message.
mod orphans {
    use std::collections::HashMap;
    use std::sync::{Mutex, Once};

    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::Layer;

    static SEEN: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

    struct Count;

    #[derive(Default)]
    struct Fields {
        lock: Option<String>,
        orphan: bool,
    }

    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            match field.name() {
                "message" => self.orphan = format!("{value:?}").contains("cancelled acquire"),
                "lock" => self.lock = Some(format!("{value:?}")),
                _ => {}
            }
        }
    }

    impl<S: tracing::Subscriber> Layer<S> for Count {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            let mut fields = Fields::default();
            event.record(&mut fields);
            if let (true, Some(lock)) = (fields.orphan, fields.lock) {
                let mut seen = SEEN.lock().unwrap();
                *seen
                    .get_or_insert_with(HashMap::new)
                    .entry(lock)
                    .or_default() += 1;
            }
        }
    }

    /// Starts counting (once per test binary).
    pub(crate) fn count() {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            let filter = tracing_subscriber::filter::filter_fn(|meta| {
                meta.target().starts_with("relock") && *meta.level() <= tracing::Level::DEBUG
            });
            let subscriber = tracing_subscriber::registry().with(Count.with_filter(filter));
            let _ = tracing::subscriber::set_global_default(subscriber);
        });
    }

    /// How many holds of cancelled acquires of lock `name` were released so far.
    pub(crate) fn released(name: &str) -> usize {
        let seen = SEEN.lock().unwrap();
        seen.as_ref()
            .and_then(|seen| seen.get(name).copied())
            .unwrap_or(0)
    }
}

/// `lock()` futures dropped at random points (mid-attempt, mid-pause, right after the lock was
/// taken) leave no hold on Redis and nothing tracked in the clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_spin_acquires_leave_no_hold_behind() {
    const ROUNDS: usize = 40;
    const TASKS: usize = 6;
    let (server, clients, name) = common::setup_clients("spin-cancel", 3, WATCHDOG).await;
    orphans::count();
    let seed: u64 = rand::thread_rng().gen();
    eprintln!("seed {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (taken, cancelled) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));

    for _ in 0..ROUNDS {
        let holder = tokio::time::timeout(
            HANG,
            clients[0].spin_lock(&name).with_backoff(quick()).lock(),
        )
        .await
        .expect("the holder never got the lock")
        .unwrap();
        let mut tasks = Vec::new();
        for i in 0..TASKS {
            let lock = clients[i % 3].spin_lock(&name).with_backoff(quick());
            let by_polls = rng.gen_bool(0.5);
            let polls = rng.gen_range(0..400);
            let after = Duration::from_micros(rng.gen_range(0..30_000));
            let unlock = rng.gen_bool(0.5);
            let (taken, cancelled) = (taken.clone(), cancelled.clone());
            tasks.push(tokio::spawn(async move {
                let outcome = if by_polls {
                    poll_then_drop(lock.lock(), polls).await
                } else {
                    tokio::time::timeout(after, lock.lock()).await.ok()
                };
                match outcome {
                    Some(guard) => {
                        taken.fetch_add(1, Ordering::Relaxed);
                        let guard = guard.unwrap();
                        if unlock {
                            guard.unlock().await.unwrap();
                        } // else dropped: released in the background
                    }
                    None => {
                        cancelled.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_micros(rng.gen_range(0..20_000))).await;
        if rng.gen_bool(0.5) {
            holder.unlock().await.unwrap();
        } else {
            drop(holder);
        }
        common::all_within(tasks, HANG, "a task hung").await;
    }
    let (taken, cancelled) = (
        taken.load(Ordering::Relaxed),
        cancelled.load(Ordering::Relaxed),
    );
    eprintln!("{taken} acquires completed, {cancelled} cancelled");
    assert!(cancelled > 0, "no acquire was cancelled");

    let clean = common::eventually(Duration::from_secs(10), || async {
        common::raw_hgetall(&server, &name).is_empty()
            && clients.iter().all(|c| c.stats().holds == 0)
    })
    .await;
    assert!(
        clean,
        "holds left behind: {:?} on Redis, {:?} in the clients",
        common::raw_hgetall(&server, &name),
        clients.iter().map(Client::stats).collect::<Vec<_>>()
    );
    eprintln!(
        "{} cancelled acquires had taken the lock (released by their orphan check)",
        orphans::released(&name)
    );
    assert!(!common::raw_exists(&server, &name));
    assert_clients_idle(&clients.iter().collect::<Vec<_>>());
    // A cancelled waiter's hand-off claim may outlive it, promising the free lock to nobody
    // until the claim's own TTL (what was left of the lease, plus the claim window) ends.
    let claim = format!("relock_claim:{{{name}}}");
    assert!(
        common::until_gone(&server, &claim, Duration::from_secs(10)).await,
        "a claim outlived its TTL"
    );
    // And the lock works as before. Once in a clean-clone run (Redis 8.2, calls combined) a
    // try_lock here found it busy with nothing on Redis before: what stands in the way is
    // printed, and the lock must still come within the wait of a hang.
    let lock = clients[1].spin_lock(&name);
    let guard = match lock.try_lock().await.unwrap() {
        Some(guard) => guard,
        None => {
            eprintln!(
                "try_lock found the lock busy; keys of {name}: {:?}",
                common::family::raw_keys(&server, &format!("*{name}*"))
            );
            let guard = lock.try_lock_for(HANG, None).await.unwrap();
            guard.expect("the lock came free within a hang's wait")
        }
    };
    guard.unlock().await.unwrap();
}

/// `try_lock` on a busy spin lock makes one attempt and returns `None` at once; `try_lock_for`
/// returns `None` when its wait runs out, however long the backoff's pauses, and takes a lock
/// freed within its wait.
#[tokio::test]
async fn try_lock_gives_up_at_once_and_try_lock_for_keeps_its_wait() {
    let (server, holder_client, client, name) = common::setup_two("spin-try", WATCHDOG).await;
    // A fixed lease: the holder renews nothing, so the EVALSHAs counted are the contender's.
    let holder = holder_client
        .spin_lock(&name)
        .lock_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let lock = client.spin_lock(&name);

    let from = evalsha_calls(&server);
    let started = Instant::now();
    assert!(lock.try_lock().await.unwrap().is_none());
    let took = started.elapsed();
    assert_eq!(
        evalsha_calls(&server) - from,
        1,
        "try_lock made more than one attempt"
    );
    assert!(took < Duration::from_secs(1), "try_lock took {took:?}");

    let wait = ms(300);
    for backoff in [
        Backoff::default(),
        Backoff::constant(Duration::from_secs(10)).unwrap(),
    ] {
        let started = Instant::now();
        let got = lock
            .clone()
            .with_backoff(backoff)
            .try_lock_for(wait, None)
            .await;
        let took = started.elapsed();
        eprintln!("try_lock_for({wait:?}) with {backoff:?}: None after {took:?}");
        assert!(got.unwrap().is_none());
        assert!(
            took >= wait - ms(10),
            "gave up after {took:?}, before its {wait:?} wait"
        );
        assert!(
            took < wait + Duration::from_millis(1500),
            "gave up only after {took:?} for a {wait:?} wait"
        );
    }
    holder.unlock().await.unwrap();

    // A lock freed within the wait is taken.
    let _expiring = holder_client
        .spin_lock(&name)
        .lock_with_lease(ms(300))
        .await
        .unwrap();
    let guard = lock
        .try_lock_for(Duration::from_secs(10), Some(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("the lease ended within the wait");
    assert_eq!(guard.lease(), Some(Duration::from_secs(5)));
    guard.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}

/// A custom backoff is accepted by a spin lock; a bad one is refused when made; an empty name is
/// refused by `lock()` before any I/O.
#[tokio::test]
async fn spin_lock_arguments_are_checked() {
    let (server, client, name) = common::setup("spin-args", WATCHDOG).await;

    let backoff = Backoff::exponential(ms(2), ms(50), 1.5).unwrap();
    let lock = client.spin_lock(&name).with_backoff(backoff);
    let guard = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    guard.unlock().await.unwrap();

    let bad = Backoff::exponential(Duration::ZERO, ms(50), 1.5).unwrap_err();
    assert!(bad.is_invalid_argument(), "{bad:?}");
    let bad = Backoff::exponential(ms(50), ms(10), 2.0).unwrap_err();
    assert!(bad.is_invalid_argument(), "{bad:?}");

    let from = evalsha_calls(&server);
    let empty = client.spin_lock("");
    let error = empty.lock().await.unwrap_err();
    assert!(error.is_invalid_argument(), "{error:?}");
    let error = empty.try_lock().await.unwrap_err();
    assert!(error.is_invalid_argument(), "{error:?}");
    assert_eq!(evalsha_calls(&server), from, "a refused name reached Redis");
    assert_clients_idle(&[&client]);
}
