//! Taking a lock without waiting, or waiting a bounded time, as Redisson's `tryLock` does.
//!
//! | Redisson                          | relock                                   |
//! |-----------------------------------|------------------------------------------|
//! | `tryLock()`                       | `try_lock()`                             |
//! | `tryLock(wait, unit)`             | `try_lock_for(wait, None)` (watchdog)    |
//! | `tryLock(wait, lease, unit)`      | `try_lock_for(wait, Some(lease))`        |
//!
//! Where Redisson returns `false`, relock returns `Ok(None)`: a busy lock is not an error.
//!
//! Run with `cargo run --example try_lock`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server. To copy this
//! into a crate of yours, enable relock's `testing` feature there, or connect to your own URL.

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let client = relock::Client::connect(&url).await?;
    let name = format!("example:try_lock:{}", std::process::id());

    // Two owners of one lock: `mine` for this task, `rival` with an explicit owner of its own,
    // as if it were another task or another service.
    let mine = client.lock(&name);
    let rival = client.lock(&name).owned_by(relock::Owner::new());

    let guard = mine.try_lock().await?.expect("the lock is free");
    println!("try_lock() on a free lock:      acquired");

    let busy = rival.try_lock().await; // Debug-printed as it comes: Ok(None)
    println!("rival try_lock():               {busy:?} (busy is not an error)");

    let t = Instant::now();
    let busy = rival.try_lock_for(Duration::from_millis(300), None).await;
    println!(
        "rival waits up to 300 ms:       {busy:?} after {} ms",
        t.elapsed().as_millis()
    );

    // Release ours in 200 ms; the rival waits up to 1 s, then holds it with a fixed 500 ms lease
    // (no watchdog: the lock frees itself when the lease ends, guard or no guard).
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.unlock().await
    });
    let t = Instant::now();
    let leased = rival
        .try_lock_for(Duration::from_secs(1), Some(Duration::from_millis(500)))
        .await?
        .expect("freed within the wait");
    let waited = t.elapsed().as_millis();
    println!(
        "rival waits up to 1000 ms:      acquired after {waited} ms, lease {:?}",
        leased.lease()
    );

    tokio::time::sleep(Duration::from_millis(600)).await;
    let locked = mine.is_locked().await?;
    println!(
        "600 ms later: is_locked = {locked}, guard.is_lost() = {}",
        leased.is_lost()
    );
    match leased.unlock().await {
        Err(e) if e.is_lease_lost() => println!("unlock() after the lease ended: lease lost"),
        other => println!("unlock() after the lease ended: {other:?}"),
    }
    client.shutdown().await?;
    Ok(())
}
