//! In-process fairness: waiters of one client are served in arrival order, and a task that
//! releases and asks again queues behind them instead of re-taking the lock at once.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order() {
    let (_server, client, name) = common::setup("fair-order", Duration::from_secs(20)).await;
    let holder = client.lock(&name).lock().await.unwrap();

    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for n in 0..8 {
        let lock = client.lock(&name);
        let served = served.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            served.lock().unwrap().push(n);
            guard.unlock().await.unwrap();
        }));
        // Each waiter is registered before the next one starts: that is the arrival order.
        common::until_waiters(&client, n + 1).await;
    }
    holder.unlock().await.unwrap();
    common::all_within(tasks, Duration::from_secs(10), "a waiter was never served").await;
    assert_eq!(*served.lock().unwrap(), (0..8).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_releasing_task_does_not_barge_past_waiters() {
    let (_server, client, name) = common::setup("fair-barging", Duration::from_secs(20)).await;
    let rounds = 20;
    let order = Arc::new(Mutex::new(Vec::new()));

    // Four tasks loop lock → record → unlock → lock again. Without queueing, the task that just
    // released would usually win its next lock() before a woken waiter's attempt arrives.
    let mut tasks = Vec::new();
    for n in 0..4 {
        let lock = client.lock(&name);
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = lock.lock().await.unwrap();
                order.lock().unwrap().push(n);
                tokio::time::sleep(Duration::from_millis(1)).await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    common::all_within(tasks, Duration::from_secs(30), "a task starved").await;
    let order = order.lock().unwrap();
    let retakes = order.windows(2).filter(|w| w[0] == w[1]).count();
    // Once all four queue, each hand-off goes to the longest waiter: a task follows itself only
    // while the others have not queued yet (the first rounds) or have finished (the last ones).
    assert!(
        retakes <= 3 * 4,
        "{retakes} of {} hand-offs went back to the releasing task: {order:?}",
        order.len() - 1
    );
    assert_eq!(client.stats().waiters, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_releasing_client_lets_another_process_waiter_go_first() {
    // Two clients stand for two processes: each has its own connections.
    let (server, looping, waiting, name) =
        common::setup_two("fair-handoff", Duration::from_secs(20)).await;

    let first = looping.lock(&name).lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = waiting.lock(&name);
        async move { lock.lock().await.unwrap().unlock().await.unwrap() }
    });
    assert!(common::until_subscribed(&server, &name, 1).await);

    // The looping client releases and locks again at once, holding 1 ms each time. Its release
    // wakes the other client's waiter; the hand-off grace keeps it from taking the lock back
    // before that waiter's attempt lands.
    let lock = looping.lock(&name);
    first.unlock().await.unwrap();
    let mut rounds_before_waiter = 0;
    while !waiter.is_finished() && rounds_before_waiter < 200 {
        let guard = lock.lock().await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        guard.unlock().await.unwrap();
        rounds_before_waiter += 1;
    }
    common::within(
        Duration::from_secs(10),
        waiter,
        "the other client's waiter never got the lock",
    )
    .await;
    assert!(
        rounds_before_waiter <= 2,
        "the releasing client took the lock back {rounds_before_waiter} times first"
    );
}

/// Two clients (two processes, as far as Redis can tell) loop lock → 1 ms → unlock, client `n`
/// in `tasks[n]` tasks. Each release wakes the other client's waiter; the hand-off grace lets it
/// take the lock before the releasing client's next lock() or its other waiting task. The
/// clients should mostly alternate. Returns how many hand-offs went back to the releasing
/// client, and of how many, while both clients still had rounds to go.
async fn alternation(grace: Duration, tasks: [usize; 2]) -> (usize, usize) {
    let server = common::RedisServer::start();
    let name = common::prefix("fair-alternate");
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    for _ in 0..2 {
        let config = common::config(&server.url()).with_handoff_grace(grace);
        clients.push(relock::Client::new(config).await.unwrap());
    }
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .flat_map(|(n, client)| std::iter::repeat((n, client)).take(tasks[n]))
        .map(|(n, client)| {
            let lock = client.lock(&name);
            let order = order.clone();
            tokio::spawn(async move {
                for _ in 0..60 {
                    let guard = lock.lock().await.unwrap();
                    order.lock().unwrap().push(n);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    common::all_within(tasks, Duration::from_secs(60), "a client starved").await;
    let order = order.lock().unwrap();
    // Once one client has done all its rounds, only the other one is left to take the lock.
    let both_left = (0..2)
        .map(|n| order.iter().rposition(|&o| o == n).unwrap())
        .min()
        .unwrap();
    let order = &order[..=both_left];
    let retakes = order.windows(2).filter(|w| w[0] == w[1]).count();
    (retakes, order.len() - 1)
}

/// Runs [`alternation`] with the default grace and checks that the clients took turns. Once
/// both loop, every release has a waiter elsewhere: only the start and the end (when one client
/// has finished its rounds) may repeat an owner, plus the odd slow wake-up.
async fn assert_clients_take_turns(tasks: [usize; 2]) {
    let (retakes, handoffs) = alternation(Duration::from_millis(2), tasks).await;
    println!("with the grace: {retakes} of {handoffs} hand-offs went back to the releasing client");
    assert!(
        retakes <= handoffs / 5,
        "{retakes} of {handoffs} hand-offs went back to the releasing client"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_alternate_when_both_loop() {
    assert_clients_take_turns([1, 1]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_releasing_client_with_its_own_waiter_lets_the_other_client_go_first() {
    // The first client's release also wakes its own second task, which is awake and close to
    // the lock: the grace holds it back too, until the other client has had its turn.
    assert_clients_take_turns([2, 1]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_queued_behind_a_waiter_that_gives_up_is_not_stranded() {
    // A 30 s watchdog: a waiter with no TTL to go by would sleep that long.
    let (_server, client, other, name) =
        common::setup_two("fair-stranded", Duration::from_secs(30)).await;

    // Another client holds for 4 s and then simply lets the lease run out: no message.
    let lease = Duration::from_secs(4);
    let holder = other.lock(&name).lock_with_lease(lease).await.unwrap();
    std::mem::forget(holder);
    let expires = std::time::Instant::now() + lease;

    // A waiter that gives up after 2 s, well before the lease ends (and long enough for the
    // test to see it wait), and a newcomer that queues behind it.
    let quitter = tokio::spawn({
        let lock = client.lock(&name);
        async move { lock.try_lock_for(Duration::from_secs(2), None).await }
    });
    common::until_waiters(&client, 1).await;
    let newcomer = tokio::spawn({
        let lock = client.lock(&name);
        async move {
            let guard = lock.lock().await.unwrap();
            let at = std::time::Instant::now();
            guard.unlock().await.unwrap();
            at
        }
    });
    assert!(quitter.await.unwrap().unwrap().is_none());
    let acquired = common::within(
        Duration::from_secs(20),
        newcomer,
        "the newcomer was stranded behind the waiter that gave up",
    )
    .await;
    assert!(
        acquired < expires + Duration::from_secs(3),
        "the newcomer got the lock {:?} after the lease ran out",
        acquired.saturating_duration_since(expires)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_lost_a_race_to_another_process_gets_the_next_hand_off() {
    let server = common::RedisServer::start();
    let name = common::prefix("fair-claim");
    let claim_key = common::claim_key(&name);
    // Three clients stand for three processes: a holder and two waiters that will race. The
    // release cuts the loser's claim to the claim window, within which the woken loser must
    // use it: 5 s here instead of the default 10 ms, which a loaded machine can miss. A newcomer
    // that ignored claims would take the free lock at once.
    let with_window = || async {
        let config = common::config(&server.url())
            .with_watchdog_timeout(Duration::from_secs(20))
            .with_claim_window(Duration::from_secs(5));
        relock::Client::new(config).await.unwrap()
    };
    let holder = with_window().await;
    let racers = [with_window().await, with_window().await];
    let first = holder.lock(&name).lock().await.unwrap();

    // Each racer waits with an owner of its own, whose holder field the test can name, and
    // holds the lock until the test lets it go: racer n releases once bit n is set.
    let (won_tx, mut won_rx) = tokio::sync::mpsc::unbounded_channel();
    let (release_tx, release_rx) = tokio::sync::watch::channel(0u8);
    let mut fields = Vec::new();
    for (n, client) in racers.iter().enumerate() {
        let owner = relock::Owner::new();
        fields.push(format!("{}:{}", client.id(), owner.id()));
        let lock = client.lock(&name).owned_by(owner);
        let won_tx = won_tx.clone();
        let mut release_rx = release_rx.clone();
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            won_tx.send(n).unwrap();
            release_rx.wait_for(|go| go & (1 << n) != 0).await.unwrap();
            guard.unlock().await.unwrap();
        });
    }
    assert!(
        common::until_subscribed(&server, &name, 2).await,
        "both racers wait"
    );

    // The release wakes both; one wins, and the loser claims the next hand-off.
    first.unlock().await.unwrap();
    let winner = tokio::time::timeout(Duration::from_secs(5), won_rx.recv())
        .await
        .expect("a racer got the lock")
        .unwrap();
    let loser = 1 - winner;
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            common::resp(&server.cmd(&["GET", &claim_key]))
                == common::Resp::Bulk(Some(format!("1:{}", fields[loser])))
        })
        .await,
        "the loser claimed: {:?}",
        server.cmd(&["GET", &claim_key])
    );

    // A newcomer elsewhere that never waited does not take the lock from it, even on the free
    // lock: the claim sends it away until the loser has had its turn. (The loser keeps the
    // lock until told, so the newcomer cannot get it after the loser's turn either.)
    let newcomer = holder.lock(&name);
    release_tx.send_modify(|go| *go |= 1 << winner);
    let mut newcomer_got_it_first = false;
    let loser_got_it = loop {
        if let Some(guard) = newcomer.try_lock().await.unwrap() {
            newcomer_got_it_first = true;
            guard.unlock().await.unwrap();
        }
        match tokio::time::timeout(Duration::from_millis(1), won_rx.recv()).await {
            Ok(got) => break got.unwrap(),
            Err(_) => continue,
        }
    };
    assert_eq!(loser_got_it, loser);
    assert!(
        !newcomer_got_it_first,
        "a newcomer took a lock claimed by a waiter"
    );
    release_tx.send_modify(|go| *go |= 1 << loser);
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            !common::raw_exists(&server, &claim_key) && !common::raw_exists(&server, &name)
        })
        .await,
        "the claim was spent and the lock released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimant_that_gives_up_withdraws_its_claim() {
    let server = common::RedisServer::start();
    let name = common::prefix("fair-claim-quit");
    let claim_key = common::claim_key(&name);
    let holder = common::client(&server, Duration::from_secs(20)).await;
    let waiter = common::client(&server, Duration::from_secs(20)).await;
    let held = holder
        .lock(&name)
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();

    // A waiter that waits 3 s for a lock held 30 s: long enough for the test to see it wait
    // and claim, far shorter than its claim would last.
    let lock = waiter.lock(&name);
    let quitter =
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(3), None).await });
    assert!(common::until_subscribed(&server, &name, 1).await);
    // A stray wake-up makes it try again and lose: now it claims the next hand-off, for the
    // holder's remaining lease (about 30 s) plus the window.
    assert!(
        common::eventually(Duration::from_secs(2), || async {
            server.cmd(&["PUBLISH", &common::lock_channel(&name), "0"]);
            common::raw_exists(&server, &claim_key)
        })
        .await,
        "the waiter claimed the next hand-off"
    );
    assert!(common::raw_pttl(&server, &claim_key) > 20_000);

    // It gives up, and takes its claim back long before the claim would lapse.
    assert!(
        quitter.await.unwrap().unwrap().is_none(),
        "the lock stayed held"
    );
    assert!(
        common::until_gone(&server, &claim_key, Duration::from_secs(2)).await,
        "the claim was withdrawn when the waiter gave up"
    );
    held.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_claimant_died_delays_the_next_owner_by_the_window_only() {
    let server = common::RedisServer::start();
    let name = common::prefix("fair-claim-dead");
    let claim_key = common::claim_key(&name);
    let holder = common::client(&server, Duration::from_secs(20)).await;
    let waiter = common::client(&server, Duration::from_secs(20)).await;
    let held = holder.lock(&name).lock().await.unwrap();
    // A claimant that died while the lock was held: its claim would last 30 s more.
    server.cmd(&["SET", &claim_key, "3:dead-client:task-1", "PX", "30000"]);

    let lock = waiter.lock(&name);
    let wait = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let guard = lock.lock().await.unwrap();
        (started.elapsed(), guard)
    });
    assert!(common::until_subscribed(&server, &name, 1).await);

    // The release cuts the claim to the window (10 ms by default): the waiter is refused until
    // then, and gets the lock right after instead of 30 s later.
    let released = std::time::Instant::now();
    held.unlock().await.unwrap();
    let (_, guard) = common::within(
        Duration::from_secs(5),
        wait,
        "the waiter got the lock once the dead claimant's window ran out",
    )
    .await;
    assert!(
        released.elapsed() >= Duration::from_millis(5),
        "the claim was honoured for its window"
    );
    assert!(!common::raw_exists(&server, &claim_key));
    guard.unlock().await.unwrap();
}

/// A release frees the lock and wakes waiters elsewhere at once, but whether it woke any (and so
/// whether the hand-off grace holds this client's tasks back) is known only from its reply. A task
/// of the releasing client's that calls `lock()` before that reply comes, on a client with no
/// waiter of its own, must not take the lock back from the woken waiter elsewhere meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_waits_for_its_clients_release_reply_before_taking_the_lock_back() {
    use common::proxy::{Mode, Proxy};

    // Client A (the releasing process) and client B (the other process), each behind a proxy
    // that can hold back what the server sends it; the test reads the server directly.
    let server = common::RedisServer::start();
    let name = common::prefix("fair-handoff-reply");
    let (proxy_a, proxy_b) = (
        Proxy::start(server.port()).await,
        Proxy::start(server.port()).await,
    );
    // A command timeout well past the delays below: a reply held back is late, not lost.
    let client_at = |url: String| async move {
        let config = common::config(&url)
            .with_watchdog_timeout(Duration::from_secs(5))
            .with_command_timeout(Duration::from_secs(5));
        relock::Client::new(config).await.unwrap()
    };
    let (a, b) = (
        client_at(proxy_a.url()).await,
        client_at(proxy_b.url()).await,
    );

    // The server knows the release script from here on: A's release below then takes one
    // round trip, not three (`NOSCRIPT`, the load, the release).
    let warm = a.lock(format!("{name}-warm")).lock().await.unwrap();
    warm.unlock().await.unwrap();

    // A's first task (this one) holds the lock; A has no waiter. B's task waits for it. Each
    // task records that it got the lock while it holds it, so the records come in the order the
    // lock was taken; once the order is settled, the test lifts the delays and lets it release.
    let (got_tx, mut got_rx) = tokio::sync::mpsc::unbounded_channel();
    let (settled_tx, settled_rx) = tokio::sync::watch::channel(false);
    let held = a.lock(&name).lock().await.unwrap();
    let waiter = tokio::spawn({
        let (lock, got_tx) = (b.lock(&name), got_tx.clone());
        let mut settled = settled_rx.clone();
        async move {
            let guard = lock.lock().await.unwrap();
            got_tx.send("the other client's waiter").unwrap();
            settled.wait_for(|settled| *settled).await.unwrap();
            guard.unlock().await.unwrap();
        }
    });
    assert!(
        common::until_subscribed(&server, &name, 1).await,
        "B's waiter waits"
    );
    common::until_waiters(&b, 1).await;

    // From now on A hears from the server after 1.5 s, B after 150 ms: A's release frees the
    // lock and wakes B's waiter at once, but its reply reaches A long after the wake-up reached
    // B, and B's attempt the server.
    proxy_a.set_mode(Mode::Delay(Duration::from_millis(1500)));
    proxy_b.set_mode(Mode::Delay(Duration::from_millis(150)));
    let release = tokio::spawn(held.unlock());
    // Freed: A's hold is gone from the hash. The lock may be free, or B's waiter may have taken
    // it already (the window between is B's 150 ms, which a poll on a busy machine can miss).
    let a_field = format!("{}:", a.id());
    let a_holds = || {
        common::raw_hgetall(&server, &name)
            .iter()
            .any(|(field, _)| field.starts_with(&a_field))
    };
    assert!(
        common::eventually(Duration::from_secs(5), || async { !a_holds() }).await,
        "A's release freed the lock"
    );
    assert!(
        !release.is_finished(),
        "the release's reply is still on its way"
    );

    // A's second task (another tokio task: another owner) asks for the lock now, while its
    // client's release awaits its reply: it must not take the lock back before B's woken waiter
    // can. Without the wait for the reply it takes the free lock at once, 150 ms before B tries.
    let newcomer = tokio::spawn({
        let (lock, got_tx) = (a.lock(&name), got_tx.clone());
        let mut settled = settled_rx.clone();
        async move {
            let guard = lock.lock().await.unwrap();
            got_tx.send("the releasing client's newcomer").unwrap();
            settled.wait_for(|settled| *settled).await.unwrap();
            guard.unlock().await.unwrap();
        }
    });
    let within = Duration::from_secs(10);
    let first = tokio::time::timeout(within, got_rx.recv()).await;
    let first = first.expect("one of them got the lock").unwrap();
    // The order is settled: no need to wait out the delays any more.
    proxy_a.set_mode(Mode::Pass);
    proxy_b.set_mode(Mode::Pass);
    settled_tx.send_replace(true);
    let second = tokio::time::timeout(within, got_rx.recv()).await;
    let second = second.expect("the other one got the lock too").unwrap();
    let tasks = [waiter, newcomer];
    common::all_within(tasks, within, "a task hung").await;
    common::within(within, release, "the release hung")
        .await
        .unwrap();
    assert_eq!(
        [first, second],
        [
            "the other client's waiter",
            "the releasing client's newcomer"
        ],
        "the releasing client took the lock back before the woken waiter elsewhere"
    );
}
