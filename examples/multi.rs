//! A multi-lock: several locks taken as one, all or nothing, as Redisson's `RMultiLock`.
//!
//! A bank moves money between accounts. Each transfer locks both accounts it touches; the
//! transfers list them in whatever order they come (from → to), and two transfers between the
//! same accounts go opposite ways. Taken one lock after the other in the listed order, two such
//! transfers could each hold one account and wait for the other forever. A `MultiLock` takes its
//! locks in one global order (server, then name), so they cannot: the run below ends, and no
//! account's balance is ever touched by two transfers at once.
//!
//! The second part mixes types: an audit holds a read lock on the ledger's schema (shared with
//! other readers) and a fair lock on the report queue, in one multi-lock.
//!
//! Run with `cargo run --example multi`, which starts a throwaway `redis-server` (it must be
//! installed) through `relock::testing`, or set `REDIS_URL` to use your own server. To copy this
//! into a crate of yours, enable relock's `testing` feature there, or connect to your own URL.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use relock::{MultiLock, Owner, Part};

const ACCOUNTS: usize = 4;
const TRANSFERS: usize = 200;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URL if set, else a throwaway redis-server that is killed when `_server` drops.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let client = relock::Client::connect(&url).await?;
    let prefix = format!("example:multi:{}", std::process::id());
    // The balances live in this process; the locks decide who may touch them.
    let balances: Arc<Vec<AtomicI64>> = Arc::new((0..ACCOUNTS).map(|_| 100.into()).collect());
    let inside: Arc<Vec<AtomicI64>> = Arc::new((0..ACCOUNTS).map(|_| 0.into()).collect());
    let started = Instant::now();

    // 1. Transfers over overlapping pairs of accounts, listed in both orders.
    let mut tellers = Vec::new();
    for teller in 0..8 {
        let (client, prefix) = (client.clone(), prefix.clone());
        let (balances, inside) = (balances.clone(), inside.clone());
        tellers.push(tokio::spawn(async move {
            for n in 0..TRANSFERS / 8 {
                let from = (teller + n) % ACCOUNTS;
                let to = (from + 1 + n % (ACCOUNTS - 1)) % ACCOUNTS;
                let pair = client
                    .multi_lock([
                        format!("{prefix}:account:{from}"),
                        format!("{prefix}:account:{to}"),
                    ])
                    .owned_by(Owner::new());
                let guard = pair.lock().await?;
                for account in [from, to] {
                    assert_eq!(
                        inside[account].fetch_add(1, Ordering::SeqCst),
                        0,
                        "two transfers on one account"
                    );
                }
                balances[from].fetch_sub(10, Ordering::SeqCst);
                tokio::task::yield_now().await;
                balances[to].fetch_add(10, Ordering::SeqCst);
                for account in [from, to] {
                    inside[account].fetch_sub(1, Ordering::SeqCst);
                }
                guard.unlock().await?;
            }
            Ok::<_, relock::Error>(())
        }));
    }
    for teller in tellers {
        teller.await??;
    }
    let total: i64 = balances.iter().map(|b| b.load(Ordering::SeqCst)).sum();
    println!(
        "{TRANSFERS} transfers by 8 tellers over {ACCOUNTS} accounts in {} ms: no deadlock, total {total} (was {})",
        started.elapsed().as_millis(),
        100 * ACCOUNTS
    );

    // 2. One multi-lock over several types: a read lock (shared) and a fair lock.
    let schema = client.rw_lock(format!("{prefix}:schema"));
    let audit = MultiLock::new([
        Part::from(schema.read()),
        client.fair_lock(format!("{prefix}:report-queue")).into(),
    ]);
    let guard = audit.lock().await?;
    // Another reader of the schema comes in: the read side is shared...
    let reader = schema.read().owned_by(Owner::new());
    let other = reader
        .try_lock()
        .await?
        .expect("readers share the schema lock");
    // ...but a writer waits, and so does another audit (the fair lock).
    let writer = schema.write().owned_by(Owner::new());
    assert!(writer.try_lock().await?.is_none());
    assert!(audit
        .clone()
        .owned_by(Owner::new())
        .try_lock()
        .await?
        .is_none());
    println!(
        "audit holds {:?}; another reader is in, a writer and a second audit are not",
        guard
            .parts()
            .iter()
            .map(|part| part.name())
            .collect::<Vec<_>>()
    );
    other.unlock().await?;
    guard.unlock().await?;
    let write = writer.try_lock().await?.expect("nobody reads any more");
    write.unlock().await?;
    println!("released: the writer gets in");
    client.shutdown().await?;
    Ok(())
}
