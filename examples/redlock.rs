//! A `RedLock` over three independent masters: held on a majority, still available with one
//! master down, and what a round reports when too many are down.
//!
//! Run with `cargo run --example redlock`, which starts three throwaway `redis-server`s (it must
//! be installed) through `relock::testing`. To use servers of your own, give one URL per
//! independent master, comma-separated (three databases of one server are still one master, and
//! the same URL twice is rejected):
//!
//! ```sh
//! for port in 7001 7002 7003; do redis-server --port $port --save '' --daemonize yes; done
//! REDIS_URLS=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 \
//!     cargo run --example redlock
//! ```
//!
//! With your own servers the example stops short of the part that kills masters.

use std::time::{Duration, Instant};

use relock::{Client, RedLock};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // REDIS_URLS if set, else three throwaway servers, killed when `servers` drops.
    let (mut servers, urls) = match std::env::var("REDIS_URLS") {
        Ok(urls) => (Vec::new(), urls.split(',').map(str::to_owned).collect()),
        Err(_) => {
            let servers = (0..3)
                .map(|_| relock::testing::RedisServer::start())
                .collect::<Result<Vec<_>, _>>()?;
            let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
            (servers, urls)
        }
    };
    let mut clients = Vec::new();
    for url in &urls {
        clients.push(Client::connect(url).await?);
    }
    let name = format!("example:redlock:{}", std::process::id());
    let lock = RedLock::new(&clients, &name);
    println!("{} masters, quorum {}", lock.masters(), lock.quorum());

    let t = Instant::now();
    let guard = lock.lock().await?;
    println!(
        "lock():                  held on {} masters after {:?}",
        guard.held_on(),
        t.elapsed()
    );
    let rival = RedLock::new(&clients, &name).owned_by(relock::Owner::new());
    println!(
        "rival try_lock():        {:?}",
        rival.try_lock().await?.map(|g| g.held_on())
    );
    guard.unlock().await?;

    // A fixed lease: the guard is lost when the validity (lease − round time − drift) ends.
    let leased = lock.lock_with_lease(Duration::from_secs(5)).await?;
    println!("lock_with_lease(5 s):    validity {:?}", leased.validity());
    leased.unlock().await?;

    if servers.len() < 3 {
        return Ok(()); // your own servers: no masters are killed
    }
    drop(servers.pop()); // one master down: 2 of 3 is still a quorum
    let guard = lock.try_lock().await?.expect("2 of 3 masters are up");
    println!(
        "one master down:         held on {} masters",
        guard.held_on()
    );
    guard.unlock().await?;
    drop(servers.pop()); // two down: no quorum, and an error rather than a wait
    match lock.try_lock().await {
        Err(error) if error.is_no_quorum() => println!("two masters down:        {error}"),
        other => println!("two masters down:        {other:?}"),
    }
    Ok(())
}
