//! A spin lock: Redisson's `RSpinLock`, a lock whose waiters poll instead of listening.
//!
//! A [`relock::SpinLock`] keeps the plain lock's data on Redis (so it excludes a `Lock` of the
//! same name), but its waiters never subscribe to pub/sub: they retry after pauses drawn from a
//! [`relock::Backoff`], growing from `initial` by `multiplier` up to `max`, each with jitter and
//! never past the holder's lease. Use it where pub/sub is unavailable or costly; a hand-off then
//! waits for the next retry instead of a message.
//!
//! Run with `cargo run --example spin`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server. To copy this
//! into a crate of yours, enable relock's `testing` feature there, or connect to your own URL.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relock::{Backoff, Owner};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let client = relock::Client::connect(&url).await?;
    let name = format!("example:spin:{}", std::process::id());

    // Pauses of about 2, 4, 8, 16, then 25 ms at most (each drawn from the upper half).
    let backoff = Backoff::exponential(Duration::from_millis(2), Duration::from_millis(25), 2.0)?;
    let lock = client.spin_lock(&name).with_backoff(backoff);
    let rival = client
        .spin_lock(&name)
        .with_backoff(backoff)
        .owned_by(Owner::new());

    let guard = lock.lock().await?;
    println!(
        "held by this task; a plain Lock of the name sees it: is_locked = {}",
        client.lock(&name).is_locked().await?
    );
    let busy = rival.try_lock().await?;
    println!("rival try_lock():           {busy:?}");

    let t = Instant::now();
    let busy = rival.try_lock_for(Duration::from_millis(200), None).await?;
    println!(
        "rival waits up to 200 ms:   {busy:?} after {} ms (pub/sub channels used: {})",
        t.elapsed().as_millis(),
        client.stats().channels
    );

    // Release in 150 ms; the rival, waiting up to 1 s, takes it at its next retry.
    let t = Instant::now();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        guard.unlock().await
    });
    let taken = rival
        .try_lock_for(Duration::from_secs(1), None)
        .await?
        .expect("released within the wait");
    println!(
        "rival waits up to 1000 ms:  acquired after {} ms (released at 150 ms)",
        t.elapsed().as_millis()
    );
    taken.unlock().await?;

    // Four tasks share a counter through the lock: a read, a pause and a write, never overlapped.
    let counter = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (lock, counter) = (
            client.spin_lock(&name).with_backoff(backoff),
            counter.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                lock.with(|_lost| async {
                    let value = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    counter.store(value + 1, Ordering::SeqCst);
                })
                .await?;
            }
            Ok::<_, relock::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    println!(
        "4 tasks × 5 increments:     counter = {} in {} ms",
        counter.load(Ordering::SeqCst),
        t.elapsed().as_millis()
    );

    client.shutdown().await?;
    Ok(())
}
