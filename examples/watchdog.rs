//! The lock watchdog, as in Redisson: a lock taken without a lease gets the client's watchdog
//! timeout (`lockWatchdogTimeout`, 30 s by default, 1 s here) and is renewed every third of it
//! for as long as its guard lives. If the holder dies, renewals stop and the lock expires.
//!
//! Unlike Redisson, relock also tells the holder when it lost the lock: `guard.lost()` completes
//! when a renewal finds the lock gone (here another client force-unlocks it behind its back).
//! Race it against the work with `tokio::select!` to stop writing as soon as the lock is no
//! longer yours.
//!
//! Run with `cargo run --example watchdog`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server. To copy this
//! into a crate of yours, enable relock's `testing` feature there, or connect to your own URL.

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let config = relock::Config::from_url(&url)?.with_watchdog_timeout(Duration::from_secs(1));
    let client = relock::Client::new(config).await?;
    let lock = client.lock(format!("example:watchdog:{}", std::process::id()));

    // Held well past its 1 s lease: the watchdog keeps pushing the expiry back to 1000 ms.
    let start = Instant::now();
    let at = move || start.elapsed().as_millis();
    let guard = lock.lock().await?;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let left = lock
            .remaining_lease()
            .await?
            .expires_in()
            .unwrap_or_default();
        println!("{:>5} ms held, lease left {:>4} ms", at(), left.as_millis());
    }

    // Someone deletes the lock behind our back: here an operator's `force_unlock()` from another
    // client (Redisson's `forceUnlock()`); a lease that ran out while this process was paused
    // looks the same to the holder.
    let operator = relock::Client::connect(&url).await?;
    let behind_our_back = operator.lock(lock.name());
    let deleter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        behind_our_back
            .force_unlock()
            .await
            .map(|_| start.elapsed())
    });

    // The work: writes that are only safe under the lock. Stop as soon as the lock is lost.
    let work = async {
        for step in 1.. {
            tokio::time::sleep(Duration::from_millis(200)).await;
            println!("{:>5} ms work step {step}", at());
        }
    };
    let lost_at = tokio::select! {
        _ = guard.lost() => start.elapsed(),
        _ = work => unreachable!("the work never ends on its own"),
    };
    let deleted_at = deleter.await??;
    println!(
        "{:>5} ms an operator force-unlocked it",
        deleted_at.as_millis()
    );
    let noticed = (lost_at - deleted_at).as_millis();
    println!(
        "{:>5} ms lost() completed {noticed} ms later: work stopped",
        lost_at.as_millis()
    );

    // Releasing a lost hold reports it: Redisson would throw IllegalMonitorStateException.
    match guard.unlock().await {
        Err(e) if e.is_lease_lost() => println!("unlock(): {e}"),
        other => println!("unlock(): unexpected {other:?}"),
    }
    operator.shutdown().await?;
    client.shutdown().await?;
    Ok(())
}
