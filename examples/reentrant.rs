//! Re-entry and owners: relock's `Lock` is Redisson's `RLock`, with the tokio task in the role of
//! the Java thread.
//!
//! A task that holds a lock takes it again at once and its hold count goes up (`getHoldCount()`);
//! the lock is free only when every hold is released. A spawned task is another owner, as a new
//! thread is in Java. To keep one hold across tasks, give the handle an explicit
//! [`relock::Owner`]: every task using it counts as that owner.
//!
//! Run with `cargo run --example reentrant`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server. To copy this
//! into a crate of yours, enable relock's `testing` feature there, or connect to your own URL.

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let client = relock::Client::connect(&url).await?;
    let name = format!("example:reentrant:{}", std::process::id());

    // Like `rLock.lock(); rLock.lock();` in one Java thread: the second call re-enters.
    let lock = client.lock(&name);
    let outer = lock.lock().await?;
    let inner = lock.lock().await?;
    let count = lock.hold_count().await?;
    println!("held twice by this task:  hold_count = {count}");

    // A spawned task is a different owner: it has no hold and cannot take the lock.
    let probe = lock.clone();
    let (count, taken) = tokio::spawn(async move {
        let count = probe.hold_count().await?;
        Ok::<_, relock::Error>((count, probe.try_lock().await?.is_some()))
    })
    .await??;
    println!("a spawned task:           hold_count = {count}, try_lock took it: {taken}");

    inner.unlock().await?;
    let count = lock.hold_count().await?;
    println!("after one unlock:         hold_count = {count}");
    outer.unlock().await?;
    let locked = lock.is_locked().await?;
    println!("after both:               is_locked = {locked}");

    // An explicit owner: the hold belongs to `owner`, whichever task runs the code.
    let owner = relock::Owner::new();
    let shared = client.lock(&name).owned_by(owner.clone());
    let guard = shared.lock().await?;
    let worker = shared.clone();
    let count = tokio::spawn(async move {
        let again = worker.lock().await?; // the same owner: re-enters without waiting
        let count = worker.hold_count().await?;
        again.unlock().await?;
        Ok::<_, relock::Error>(count)
    })
    .await??;
    let who = format!("spawned task as {owner}:");
    println!("{who:<25} hold_count = {count} (re-entered)");

    // A guard remembers its owner, so it can be released from any task.
    tokio::spawn(async move { guard.unlock().await }).await??;
    let locked = lock.is_locked().await?;
    println!("released in another task: is_locked = {locked}");

    client.shutdown().await?;
    Ok(())
}
