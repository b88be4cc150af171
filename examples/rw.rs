//! A read-write lock: many readers at once, or one writer, as Redisson's `RReadWriteLock`.
//!
//! Three readers hold the lock together. A writer that arrives meanwhile waits for them, and its
//! claim on the lock's next turn keeps a late reader out, so a stream of readers cannot starve
//! it. The writer then *downgrades*: it takes a read hold and releases its write hold, and the
//! lock stays read-locked, so readers come in again while it still reads. An owner that reads and
//! asks for the write lock gets `Error::UpgradeWouldDeadlock` at once: the write lock waits for
//! every reader to leave, itself included.
//!
//! The lock lives on Redis as Redisson lays it out: the hash `<name>` with a `mode` field and one
//! field per reader (`<client-uuid>:<owner>`) or writer (`...:write`), and one key per read hold
//! with that hold's own lease.
//!
//! Run with `cargo run --example rw`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server. To copy this
//! into a crate of yours, enable relock's `testing` feature there, or connect to your own URL.

use std::time::{Duration, Instant};

use relock::fred::interfaces::{HashesInterface, KeysInterface};
use relock::Owner;

const READERS: [&str; 3] = ["ada", "brian", "carmen"];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let client = relock::Client::connect(&url).await?;
    let name = format!("example:rw:{}", std::process::id());
    let prices = client.rw_lock(&name);
    let started = Instant::now();
    let at = move || format!("{:>4} ms", started.elapsed().as_millis());

    // 1. Readers share the lock.
    let mut readers = Vec::new();
    for reader in READERS {
        // A spawned task is an owner of its own; `owned_by` says so explicitly.
        let lock = prices.read().owned_by(Owner::new());
        readers.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            println!("{}  {reader} reads", at());
            tokio::time::sleep(Duration::from_millis(300)).await; // reading
            guard.unlock().await
        }));
    }
    while client.redis().hlen::<usize, _>(&name).await? < READERS.len() + 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let fields: Vec<String> = client.redis().hkeys(&name).await?;
    println!(
        "{}  {} readers hold the lock at once; the hash has {fields:?}",
        at(),
        READERS.len()
    );

    // 2. A writer waits for them; its claim keeps a late reader out.
    let write_lock = prices.write().owned_by(Owner::new());
    let writer = tokio::spawn(async move {
        let asked = Instant::now();
        let guard = write_lock.lock().await?;
        Ok::<_, relock::Error>((guard, asked.elapsed()))
    });
    let claim = format!("relock_claim:{{{name}}}");
    while client.redis().exists::<u32, _>(&claim).await? == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let late = prices.read().owned_by(Owner::new());
    let late_got_in = late.try_lock().await?;
    println!(
        "{}  a late reader while the writer waits: {}",
        at(),
        if late_got_in.is_some() {
            "got in"
        } else {
            "kept out (the writer claimed the next turn)"
        }
    );
    drop(late_got_in);
    for reader in readers {
        reader.await??;
    }
    let (write, waited) = writer.await??;
    println!(
        "{}  the writer got the lock after {waited:?}, once the readers left",
        at()
    );
    let reader_meanwhile = prices.read().owned_by(Owner::new()).try_lock().await?;
    println!(
        "{}  a reader while the writer writes: {}",
        at(),
        if reader_meanwhile.is_some() {
            "got in"
        } else {
            "kept out"
        }
    );

    // 3. Downgrade: the writer reads too, then lets go of the write lock.
    let read = prices.read().owned_by(write.owner().clone()).lock().await?;
    write.unlock().await?;
    let mode: Option<String> = client.redis().hget(&name, "mode").await?;
    println!("{}  after the downgrade the lock is in mode {mode:?}", at());
    let other = prices.read().owned_by(Owner::new()).try_lock().await?;
    println!(
        "{}  another reader beside the downgraded writer: {}",
        at(),
        if other.is_some() {
            "got in"
        } else {
            "kept out"
        }
    );

    // 4. No upgrade: a reader asking for the write lock is told so at once.
    match prices.write().owned_by(read.owner().clone()).lock().await {
        Err(error) if error.is_upgrade_would_deadlock() => {
            println!("{}  the reader asks to write: {error}", at())
        }
        Err(error) => return Err(error.into()),
        Ok(_) => unreachable!("a reader never gets the write lock"),
    }

    read.unlock().await?;
    if let Some(other) = other {
        other.unlock().await?;
    }
    let left: usize = client.redis().hlen(&name).await?;
    println!("{}  everyone left; the hash has {left} fields", at());
    client.shutdown().await?;
    Ok(())
}
