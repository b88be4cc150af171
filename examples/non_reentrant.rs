//! Non-reentrant locks: Redisson's `getNonReentrantLock` and `getNonReentrantFairLock`, with the
//! tokio task in the role of the Java thread.
//!
//! A task that holds one and asks again is refused at once (`Error::Reentry`), where a reentrant
//! `Lock` would count a second hold: code that must never nest finds out the first time it does,
//! instead of holding the lock longer than it meant to. Another task waits as for any lock.
//!
//! Run with `cargo run --example non_reentrant`, which starts a throwaway `redis-server` (it must
//! be installed) through `relock::testing`, or set `REDIS_URL` to use your own server.

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let client = relock::Client::connect(&url).await?;
    let name = format!("example:non_reentrant:{}", std::process::id());

    let lock = client.non_reentrant_lock(&name);
    let guard = lock.lock().await?;
    match lock.lock().await {
        Err(e) if e.is_reentry() => println!("the same task asked again:  refused ({e})"),
        other => return Err(format!("expected a refusal, got {other:?}").into()),
    }
    let count = lock.hold_count().await?;
    println!("its hold is unchanged:      hold_count = {count}");

    // Another task is another owner: it waits, and gets the lock once this task lets go.
    let other = lock.clone();
    let waiter = tokio::spawn(async move {
        let guard = other.lock().await?;
        guard.unlock().await
    });
    guard.unlock().await?;
    waiter.await??;
    println!("a spawned task waited, then took and released it");

    // The fair one: first come, first served, and the same rule for its holder.
    let fair = client.non_reentrant_fair_lock(format!("{name}:fair"));
    let guard = fair.lock().await?;
    let refused = fair.try_lock().await.is_err_and(|e| e.is_reentry());
    println!("the fair one refuses too:   {refused}");
    guard.unlock().await?;

    client.shutdown().await?;
    Ok(())
}
