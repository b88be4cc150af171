//! Scoped locking: `lock.with(|_| async { … })` is Redisson's
//! `lock.lock(); try { … } finally { lock.unlock(); }` in one call.
//!
//! The lock is taken, the work runs, and the lock is released whatever the work returned, `Err`
//! included. The result nests: the outer `relock::Result` is about the lock (taking or releasing
//! it failed), the inner value is the work's own, passed through untouched. If the work panics
//! or the future is dropped, the guard's drop releases the lock in the background.
//!
//! Run with `cargo run --example scoped`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server. To copy this
//! into a crate of yours, enable relock's `testing` feature there, or connect to your own URL.

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let client = relock::Client::connect(&url).await?;
    let lock = client.lock(format!("example:scoped:{}", std::process::id()));
    let mut stock = 5;

    // Each call takes the lock, reserves `wanted` items if there are enough, and releases it.
    for wanted in [3, 4] {
        println!("reserve {wanted} of {stock}:");
        let outcome: Result<u32, String> = lock
            .with(|_| async {
                let holds = lock.hold_count().await.map_err(|e| e.to_string())?;
                println!("  inside with():  hold_count = {holds}");
                if wanted > stock {
                    return Err(format!("only {stock} left"));
                }
                stock -= wanted;
                Ok(stock)
            })
            .await?; // `?` here: the lock itself failed (Redis down, say)

        // The work's own outcome, as it returned it.
        match outcome {
            Ok(left) => println!("  work returned:  Ok({left} left)"),
            Err(why) => println!("  work returned:  Err({why:?})"),
        }
        // Released either way: nobody holds the lock between calls.
        println!("  after with():   is_locked = {}", lock.is_locked().await?);
    }

    client.shutdown().await?;
    Ok(())
}
