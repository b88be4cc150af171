//! A count-down latch, as Redisson's `RCountDownLatch`: a coordinator sets a count, workers in
//! any process count it down, and whoever waits is woken (by pub/sub) when it reaches zero.
//!
//! Here three workers, each with a client of its own as if it were another service, prepare a
//! part and count down; the coordinator first waits a bounded time (too short), then until all
//! three are done. At zero the count is deleted, so the latch can be set again.
//!
//! | Redisson                 | relock                  |
//! |--------------------------|-------------------------|
//! | `trySetCount(n)`         | `try_set_count(n)`      |
//! | `countDown()`            | `count_down()`          |
//! | `getCount()`             | `count()`               |
//! | `await()`                | `wait()`                |
//! | `await(timeout, unit)`   | `wait_for(timeout)`     |
//!
//! Run with `cargo run --example latch`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server. To copy this
//! into a crate of yours, enable relock's `testing` feature there, or connect to your own URL.

use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let client = relock::Client::connect(&url).await?;
    let name = format!("example:parts-ready:{}", std::process::id());
    let start = Instant::now();
    let at = move || start.elapsed().as_millis();

    // The coordinator sets the count before anyone waits: a latch without one is open.
    let ready = client.count_down_latch(&name);
    let set = ready.try_set_count(3).await?;
    let again = ready.try_set_count(5).await?;
    println!("try_set_count(3): {set}, then try_set_count(5): {again} (set once)");

    let workers: Vec<_> = [("index", 300), ("thumbnails", 600), ("search", 900)]
        .into_iter()
        .map(|(part, work_ms)| {
            let (url, name) = (url.clone(), name.clone());
            tokio::spawn(async move {
                let client = relock::Client::connect(&url).await?;
                let ready = client.count_down_latch(&name);
                tokio::time::sleep(Duration::from_millis(work_ms)).await;
                ready.count_down().await?;
                let left = ready.count().await?;
                println!("{:>5} ms worker {part:<10} done, count now {left}", at());
                client.shutdown().await
            })
        })
        .collect();

    let t = Instant::now();
    let open = ready.wait_for(Duration::from_millis(400)).await?;
    println!(
        "{:>5} ms coordinator: wait_for(400 ms) = {open} after {} ms, {} still to go",
        at(),
        t.elapsed().as_millis(),
        ready.count().await?
    );
    ready.wait().await?;
    println!(
        "{:>5} ms coordinator: wait() returned, every part is ready",
        at()
    );
    for worker in workers {
        worker.await??;
    }

    // At zero the count is gone: waits return at once, and the latch can be set again.
    let t = Instant::now();
    ready.wait().await?;
    println!(
        "count() = {}, wait() again returns in {} µs; try_set_count(1) again: {}",
        ready.count().await?,
        t.elapsed().as_micros(),
        ready.try_set_count(1).await?
    );
    ready.delete().await?;
    client.shutdown().await?;
    Ok(())
}
