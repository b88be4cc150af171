//! Lock-delay, after Chubby's and Consul's: a lock whose holder vanished without an unlock (its
//! lease ran out) stays unavailable a little longer, so that the lost holder's requests still in
//! flight land before the next holder starts. A clean unlock hands off at once.
//!
//! Redisson knows nothing of it: a Redisson client (or a relock handle without the option) takes
//! a delayed lock at once. It is a mitigation; a `FencedLock` with a `Fence` is the protection.
//!
//! Run with `cargo run --example lock_delay`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server.

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let client = relock::Client::connect(&url).await?;
    let name = format!("example:lock_delay:{}", std::process::id());
    let delay = Duration::from_secs(1);

    // Every handle on the name sets the same lock-delay.
    let lock = client.lock(&name).with_lock_delay(delay)?;
    let crashed = lock.clone().owned_by(relock::Owner::new());
    let next = lock.clone().owned_by(relock::Owner::new());

    // A holder that "crashes": it never unlocks, and its 300 ms lease runs out.
    std::mem::forget(crashed.lock_with_lease(Duration::from_millis(300)).await?);
    tokio::time::sleep(Duration::from_millis(350)).await;
    println!("lease ran out:   is_locked = {}", lock.is_locked().await?);
    println!(
        "                 lock_delay_left = {:?}",
        lock.lock_delay_left().await?
    );
    println!(
        "                 try_lock = {:?}",
        next.try_lock().await?.map(|_| "taken")
    );

    // A waiter sleeps until the delay ends (no polling: the script says when), then takes it.
    let t = Instant::now();
    let guard = next.lock().await?;
    println!(
        "taken after the delay, {} ms later",
        t.elapsed().as_millis()
    );

    // A clean unlock imposes no delay: the next owner gets the lock at once.
    guard.unlock().await?;
    let t = Instant::now();
    let again = lock
        .try_lock()
        .await?
        .expect("free at once after a clean unlock");
    println!(
        "after a clean unlock: taken in {} ms",
        t.elapsed().as_millis()
    );
    again.unlock().await?;
    client.shutdown().await?;
    Ok(())
}
