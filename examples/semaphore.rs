//! Semaphores, as Redisson's `RSemaphore` and `RPermitExpirableSemaphore`.
//!
//! A `Semaphore` is a count of permits in Redis: `acquire(n)` takes n (waiting until that many
//! are free), `release(n)` gives them back, from any task of any process. A permit is only a
//! number: a process that dies keeps the permits it took. A `PermitSemaphore` hands out
//! `Permit`s with ids and leases instead: the client's watchdog renews a permit's lease for as
//! long as its `Permit` lives, so it survives work longer than the lease, and comes back by
//! itself one lease after its holder dies. `permit.lost()` completes if the permit is gone
//! anyway (here an operator releases it by id).
//!
//! | Redisson                                   | relock                                  |
//! |--------------------------------------------|-----------------------------------------|
//! | `trySetPermits(n)`                         | `try_set_permits(n)`                    |
//! | `acquire(n)` / `release(n)`                | `acquire(n)` / `release(n)`             |
//! | `tryAcquire(n, wait, unit)`                | `try_acquire_for(n, wait)`              |
//! | `RPermitExpirableSemaphore.acquire()`      | `acquire()` → `Permit` (watchdog lease) |
//! | `acquire(lease, unit)`                     | `acquire_with_lease(lease)`             |
//! | `release(id)`                              | `permit.release()` or `release_id(id)`  |
//!
//! Run with `cargo run --example semaphore`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server. To copy this
//! into a crate of yours, enable relock's `testing` feature there, or connect to your own URL.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    // A 1 s watchdog timeout (30 s by default): a permit's lease is 1 s, renewed every ~333 ms.
    let config = relock::Config::from_url(&url)?.with_watchdog_timeout(Duration::from_secs(1));
    let client = relock::Client::new(config).await?;
    let start = Instant::now();
    let at = move || start.elapsed().as_millis();

    // 1. A plain semaphore: 8 jobs, at most 3 at a time, across every task (and process) that
    //    uses the name.
    let downloads = client.semaphore(format!("example:downloads:{}", std::process::id()));
    let set = downloads.try_set_permits(3).await?;
    let again = downloads.try_set_permits(10).await?;
    println!("try_set_permits(3): {set}, then try_set_permits(10): {again} (set once)");
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let jobs: Vec<_> = (1..=8)
        .map(|job| {
            let (downloads, running, most) = (downloads.clone(), running.clone(), most.clone());
            tokio::spawn(async move {
                downloads.acquire(1).await?;
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                println!("{:>5} ms job {job} starts ({now} running)", at());
                tokio::time::sleep(Duration::from_millis(150)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                downloads.release(1).await
            })
        })
        .collect();
    for job in jobs {
        job.await??;
    }
    println!(
        "{:>5} ms 8 jobs done, at most {} at once; available permits: {}",
        at(),
        most.load(Ordering::SeqCst),
        downloads.available_permits().await?
    );

    // Waiting a bounded time: with every permit out, try_acquire_for gives up.
    downloads.acquire(3).await?;
    let t = Instant::now();
    let got = downloads
        .try_acquire_for(1, Duration::from_millis(200))
        .await?;
    println!(
        "all 3 out: try_acquire_for(1, 200 ms) = {got} after {} ms",
        t.elapsed().as_millis()
    );
    downloads.release(3).await?;
    downloads.delete().await?;

    // 2. A permit semaphore: one slot, held by a task that runs for 2.5 s, well past the 1 s
    //    lease, while a rival keeps asking for it.
    let name = format!("example:gpu-slots:{}", std::process::id());
    let slots = client.permit_semaphore(&name);
    slots.try_set_permits(1).await?;
    let permit = slots.acquire().await?;
    println!(
        "{:>5} ms permit {} taken, lease {:?} (None: renewed by the watchdog)",
        at(),
        permit.id(),
        permit.lease()
    );
    let rival = {
        let slots = slots.clone();
        tokio::spawn(async move {
            // Asks for up to 2 s; the permit's 1 s lease would have ended twice over by then.
            let got = slots.try_acquire_for(Duration::from_secs(2), None).await?;
            Ok::<_, relock::Error>(got.is_some())
        })
    };
    let long_task = async {
        for step in 1..=5 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            println!("{:>5} ms long task step {step}/5", at());
        }
    };
    tokio::select! {
        _ = permit.lost() => println!("{:>5} ms permit lost: stop", at()),
        _ = long_task => println!(
            "{:>5} ms long task done, permit lost: {}; rival got it within 2 s: {}",
            at(),
            permit.is_lost(),
            rival.await??
        ),
    }
    permit.release().await?;
    println!(
        "{:>5} ms released: available {}, out {}",
        at(),
        slots.available_permits().await?,
        slots.acquired_permits().await?
    );

    // 3. lost(): an operator gives the permit back by id behind the holder's back (Redisson's
    //    `release(id)`); the holder's next renewal finds it gone, and `lost()` completes.
    let permit = slots.acquire().await?;
    let operator = relock::Client::connect(&url).await?;
    let (id, by_id) = (permit.id().to_owned(), operator.permit_semaphore(&name));
    let released_by_id = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let was_out = by_id.release_id(&id).await?;
        println!("{:>5} ms an operator called release_id(): {was_out}", at());
        Ok::<_, relock::Error>(())
    });
    let work = async {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            println!("{:>5} ms work with the slot", at());
        }
    };
    tokio::select! {
        _ = permit.lost() => {}
        _ = work => unreachable!("the work never ends on its own"),
    }
    println!("{:>5} ms lost() completed: work stopped", at());
    released_by_id.await??;
    // Releasing a lost permit reports it (Redisson's `release(id)` throws for an unknown id).
    match permit.release().await {
        Err(e) if e.is_lease_lost() => println!("release() of the lost permit: lease lost"),
        other => println!("release() of the lost permit: unexpected {other:?}"),
    }
    slots.delete().await?;
    operator.shutdown().await?;
    client.shutdown().await?;
    Ok(())
}
