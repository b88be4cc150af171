//! A fenced lock and a fenced write: a holder that was paused past its lease cannot overwrite
//! the work of the holder that came after it.
//!
//! `alice` takes the lock with a short lease, reads the balance and then stalls (a GC pause, a
//! stopped VM: here a sleep) past her lease. `bob` takes the lock meanwhile, with a higher
//! fencing token, and writes. When `alice` wakes up and writes, the [`relock::Fence`] on the
//! balance has seen Bob's token, so hers is refused with `Error::StaleToken`, and Bob's write
//! stands. A plain `SET` in her place would have overwritten it.
//!
//! Run with `cargo run --example fenced`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server.

use std::time::Duration;

use relock::Owner;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (_server, url) = relock::testing::from_env_or_start()?;
    let client = relock::Client::connect(&url).await?;
    let name = format!("example:fenced:{}", std::process::id());
    let balance = format!("{name}:balance");
    let fence = client.fence(&balance);
    let lease = Duration::from_millis(300);

    let alice = client.fenced_lock(&name).owned_by(Owner::new());
    let guard = alice.lock_with_lease(lease).await?;
    let alice_token = guard.token();
    // A fenced read records the token: from now on, no older holder may write.
    let seen: Option<i64> = fence.get(alice_token, &balance).await?;
    let alices_balance = seen.unwrap_or(100);
    println!("alice holds the lock with token {alice_token} and reads {alices_balance}");
    println!("alice stalls past her {lease:?} lease...");
    tokio::time::sleep(lease * 2).await;

    let bob = client.fenced_lock(&name).owned_by(Owner::new());
    let bobs = bob.lock().await?;
    let bobs_balance: Option<i64> = fence.get(bobs.token(), &balance).await?;
    let bobs_balance = bobs_balance.unwrap_or(100) + 50;
    fence.set(bobs.token(), &balance, bobs_balance).await?;
    println!(
        "bob took the lock with token {} and wrote {bobs_balance}",
        bobs.token()
    );
    bobs.unlock().await?;

    // Alice wakes up. Checking `is_lost()` here would tell her, but a pause can come right
    // after the check; the fence decides on the server, at the moment of the write.
    match fence.set(alice_token, &balance, alices_balance - 30).await {
        Err(error) if error.is_stale_token() => println!("alice's late write is refused: {error}"),
        other => panic!("alice's stale write was not refused: {other:?}"),
    }
    let stands: Option<i64> = fence.get(bob.token().await?, &balance).await?;
    println!("the balance stays at bob's {}", stands.unwrap_or_default());
    if let Err(error) = guard.unlock().await {
        println!("alice's unlock: {error}");
    }
    client.shutdown().await?;
    Ok(())
}
