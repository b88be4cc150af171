//! A fair lock: first come, first served, as Redisson's `RFairLock`.
//!
//! Five workers ask for a lock that is held; each finds it busy and joins a queue kept on Redis
//! (the list `redisson_lock_queue:{<name>}`, shared with Redisson clients). When the holder lets
//! go, the workers get the lock strictly in the order they joined, each woken alone by the one
//! before it. A newcomer cannot jump the queue, not even with `try_lock()`.
//!
//! Each worker has its own [`relock::Owner`]: the owner is who a hold belongs to, and tasks of one
//! owner would share a single place in the queue.
//!
//! Run with `cargo run --example fair`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server. To copy this
//! into a crate of yours, enable relock's `testing` feature there, or connect to your own URL.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relock::fred::interfaces::ListInterface;
use relock::Owner;

const WORKERS: [&str; 5] = ["ada", "brian", "carmen", "dmitri", "eve"];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let client = relock::Client::connect(&url).await?;
    let name = format!("example:fair:{}", std::process::id());
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let started = Instant::now();

    let holder = client.fair_lock(&name).lock().await?;
    println!("main holds the lock; the workers arrive one by one:");

    let served = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for (place, worker) in WORKERS.into_iter().enumerate() {
        let lock = client.fair_lock(&name).owned_by(Owner::new());
        let served = served.clone();
        workers.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            let at = started.elapsed().as_millis();
            println!("  {at:>4} ms  {worker} got the lock");
            served.lock().unwrap().push(worker);
            tokio::time::sleep(Duration::from_millis(20)).await; // the critical section
            guard.unlock().await
        }));
        // Wait until this worker is in the queue on Redis before the next one comes.
        while client.redis().llen::<usize, _>(&queue).await? < place + 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let at = started.elapsed().as_millis();
        println!(
            "  {at:>4} ms  {worker} waits, place {} in the queue",
            place + 1
        );
    }

    let at = started.elapsed().as_millis();
    println!("  {at:>4} ms  main releases the lock");
    holder.unlock().await?;
    for worker in workers {
        worker.await??;
    }

    let served = served.lock().unwrap().clone();
    println!("arrival order: {}", WORKERS.join(", "));
    println!("served order:  {}", served.join(", "));
    assert_eq!(served, WORKERS, "the fair lock served out of order");
    let left: usize = client.redis().llen(&queue).await?;
    println!("queue on Redis afterwards: {left} waiting");

    client.shutdown().await?;
    Ok(())
}
