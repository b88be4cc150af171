//! Leader election across processes: three members of one service elect a leader, which
//! increments a counter through a [`relock::Fence`] with its term's epoch; the leader is killed
//! (`SIGKILL`: no resign, no more renewals) and a follower takes over when the dead leader's
//! lease ends, with a higher epoch that the fence now requires.
//!
//! ```text
//! cargo run --example election                                  # starts a throwaway redis-server
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example election # uses that server
//! cargo run --example election -- --members 5                   # five members instead of three
//! ```
//!
//! The parent spawns its own executable as the members (`election --member ID`, with the
//! server's URL in `REDIS_URL` and the election's name in `ELECTION_NAME`). Each member runs the
//! leader loop ([`relock::Election::lead`]) with a 2 s lease and says on its stdout what
//! happens to it (`leading EPOCH`, `following EPOCH PID`, `lost EPOCH REASON`, `wrote N EPOCH`);
//! the parent reads those lines, kills the leader, waits for the takeover, checks through Redis
//! that the counter only went forward and that a write with the dead leader's epoch is refused,
//! and stops the members by closing their stdin (each stops its loop, which gives its term
//! back). A member also exits on its own after [`MEMBER_LIFETIME`].

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::StreamExt;
use relock::{Client, Config, Role, TermContext};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::time::timeout;

const USAGE: &str = "\
usage: election [--members N]

Members of one service (separate processes) elect a leader that writes a counter through a
fence with its epoch; the leader is killed, a follower takes over with a higher epoch, and a
late write with the killed leader's epoch is refused.
  --members N  how many member processes to start (2 to 9; 3 by default)
REDIS_URL picks a server of your own; else a throwaway redis-server is started.";

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Res<T> = std::result::Result<T, BoxError>;

/// The members' lease (their watchdog timeout): a killed leader's term ends this long after its
/// last renewal.
const LEASE: Duration = Duration::from_secs(2);
/// How often a leader increments the counter.
const STEP: Duration = Duration::from_millis(5);
/// How many writes the parent lets a leader make before it goes on.
const WRITES: u64 = 20;
/// The longest the parent waits for any one thing the members do.
const PATIENCE: Duration = Duration::from_secs(20);
/// The longest a member lives, whatever happens to its parent.
const MEMBER_LIFETIME: Duration = Duration::from_secs(60);
/// The counter's increment, run by the fence after its check of the epoch.
const INCREMENT: &str = "return redis.call('INCR', KEYS[1])";

#[tokio::main]
async fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [] => parent(3).await,
        ["--members", n] if matches!(n.parse(), Ok(2..=9)) => parent(n.parse()?).await,
        ["--member", id] if id.parse::<usize>().is_ok() => member(id.parse()?).await,
        ["--help" | "-h"] => {
            println!("{USAGE}");
            Ok(())
        }
        _ => {
            eprintln!("election: cannot read {args:?}\n\n{USAGE}");
            std::process::exit(2);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A member

/// A member: leads when elected, writing the counter through the fence every [`STEP`], and
/// reports its role changes and writes on stdout until its stdin closes.
async fn member(id: usize) -> Res<()> {
    let url = std::env::var("REDIS_URL")?;
    let name = std::env::var("ELECTION_NAME")?;
    let config = Config::from_url(&url)?.with_watchdog_timeout(LEASE);
    let client = Client::new(config).await?;
    let key = counter_key(&name);
    let fence = client.fence(&key);
    let election = client.election(&name).with_metadata(format!("member {id}"));
    let mut leadership = election.lead(move |term: TermContext| {
        let (fence, key) = (fence.clone(), key.clone());
        async move {
            let epoch = term.epoch();
            loop {
                match fence.eval::<i64>(epoch, INCREMENT, &[&key], &[]).await {
                    Ok(n) => println!("wrote {n} {epoch}"),
                    Err(e) if e.is_stale_token() => {
                        // A newer leader has written: this term is over, whatever it believes.
                        println!("refused {epoch}");
                        term.lost().await;
                        return;
                    }
                    Err(e) => eprintln!("member {id}: a write failed: {e}"),
                }
                tokio::time::sleep(STEP).await;
            }
        }
    })?;

    // The parent closes our stdin to stop us (and it closes when the parent dies). A plain
    // thread: a blocking stdin read must not keep the runtime from shutting down.
    let (closed, mut stop) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            if line.is_err() {
                break;
            }
        }
        let _ = closed.send(());
    });
    let lifetime = tokio::time::sleep(MEMBER_LIFETIME);
    tokio::pin!(lifetime);
    loop {
        tokio::select! {
            role = leadership.next() => match role {
                Some(role) => say(&role),
                None => break,
            },
            _ = &mut stop => break,
            () = &mut lifetime => break,
        }
    }
    // Stops the work and gives the term back; the stream then yields what is left, and ends.
    leadership.stop().await;
    while let Some(role) = leadership.next().await {
        say(&role);
    }
    client.shutdown().await?;
    Ok(())
}

/// Reports a role change to the parent.
fn say(role: &Role) {
    match role {
        Role::Leading { epoch } => println!("leading {epoch}"),
        Role::Following { epoch, leader } => println!("following {epoch} {}", leader.pid),
        Role::Lost { epoch, reason } => println!("lost {epoch} {reason:?}"),
        other => println!("other {other:?}"),
    }
}

fn counter_key(name: &str) -> String {
    format!("{name}:counter")
}

// ---------------------------------------------------------------------------------------------
// The parent

/// What a member said, as the parent reads it.
#[derive(Debug)]
enum Said {
    Leading { epoch: u64 },
    Gone,
    Other,
}

/// The member processes and what they say.
struct Members {
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    pids: HashMap<u32, usize>,
    lines: mpsc::UnboundedReceiver<(usize, String)>,
    /// Each member's writes: the first and last counter value, per epoch.
    writes: HashMap<(usize, u64), (i64, i64, u64)>,
}

impl Members {
    fn start(count: usize, url: &str, name: &str) -> Res<Members> {
        let (sender, lines) = mpsc::unbounded_channel();
        let (mut children, mut stdins, mut pids) = (Vec::new(), Vec::new(), HashMap::new());
        for id in 1..=count {
            let mut child = Command::new(std::env::current_exe()?)
                .args(["--member", &id.to_string()])
                .env("REDIS_URL", url)
                .env("ELECTION_NAME", name)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            pids.insert(child.id().ok_or("a member exited at once")?, id);
            let stdout = child.stdout.take().ok_or("no stdout")?;
            stdins.push(child.stdin.take());
            let sender = sender.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let _ = sender.send((id, line));
                }
                let _ = sender.send((id, String::new()));
            });
            children.push(child);
        }
        Ok(Members {
            children,
            stdins,
            pids,
            lines,
            writes: HashMap::new(),
        })
    }

    /// The next thing a member says, shown (role changes) or counted (writes); at most
    /// [`PATIENCE`] away.
    async fn next(&mut self) -> Res<(usize, Said)> {
        let (id, line) = timeout(PATIENCE, self.lines.recv())
            .await
            .map_err(|_| format!("the members said nothing for {PATIENCE:?}"))?
            .ok_or("every member is gone")?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let said = match words.as_slice() {
            ["wrote", n, epoch] => {
                let (n, epoch) = (n.parse()?, epoch.parse()?);
                let (_, last, count) = self.writes.entry((id, epoch)).or_insert((n, n, 0));
                if *count > 0 && n <= *last {
                    return Err(format!("member {id} wrote {n} after {last}").into());
                }
                *last = n;
                *count += 1;
                Said::Other
            }
            ["leading", epoch] => {
                println!("  member {id}: leads, epoch {epoch}");
                Said::Leading {
                    epoch: epoch.parse()?,
                }
            }
            ["following", epoch, pid] => {
                let leader = pid.parse().ok().and_then(|pid| self.pids.get(&pid));
                match leader {
                    Some(leader) => {
                        println!("  member {id}: follows member {leader} (epoch {epoch})")
                    }
                    None => println!("  member {id}: follows pid {pid} (epoch {epoch})"),
                }
                Said::Other
            }
            ["lost", epoch, reason] => {
                println!("  member {id}: its term of epoch {epoch} ended: {reason}");
                Said::Other
            }
            [] => {
                println!("  member {id}: exited");
                Said::Gone
            }
            _ => {
                println!("  member {id}: {line}");
                Said::Other
            }
        };
        Ok((id, said))
    }

    /// Waits until a member other than `not` leads: its id and epoch.
    async fn leader(&mut self, not: Option<usize>) -> Res<(usize, u64)> {
        loop {
            if let (id, Said::Leading { epoch }) = self.next().await? {
                if Some(id) != not {
                    return Ok((id, epoch));
                }
            }
        }
    }

    /// Waits until member `id` has written [`WRITES`] times in `epoch`: its first and last value.
    async fn writes(&mut self, id: usize, epoch: u64) -> Res<(i64, i64)> {
        loop {
            if let Some(&(first, last, count)) = self.writes.get(&(id, epoch)) {
                if count >= WRITES {
                    return Ok((first, last));
                }
            }
            if let (who, Said::Gone) = self.next().await? {
                if who == id {
                    return Err(format!("member {id} exited while it led").into());
                }
            }
        }
    }

    /// Kills member `id` (`SIGKILL`, then reaps it): no resign, no more renewals. What it was
    /// seen to write last in `epoch`.
    async fn kill(&mut self, id: usize, epoch: u64) -> Res<i64> {
        self.children[id - 1].kill().await?;
        // Its last lines are still in the pipe: read up to its end.
        loop {
            if let (who, Said::Gone) = self.next().await? {
                if who == id {
                    break;
                }
            }
        }
        Ok(self.writes.get(&(id, epoch)).map_or(0, |w| w.1))
    }

    /// Closes every member's stdin, which stops it (its loop gives its term back), and waits
    /// for each to exit; `killed` is gone already.
    async fn stop(mut self, killed: usize) -> Res<()> {
        self.stdins.clear();
        let mut left = self.children.len() - 1;
        while left > 0 {
            if let (_, Said::Gone) = self.next().await? {
                left -= 1;
            }
        }
        for (index, child) in self.children.iter_mut().enumerate() {
            let status = timeout(PATIENCE, child.wait())
                .await
                .map_err(|_| format!("member {} did not stop", index + 1))??;
            if index + 1 != killed && !status.success() {
                return Err(format!("member {} exited with {status}", index + 1).into());
            }
        }
        Ok(())
    }
}

async fn parent(count: usize) -> Res<()> {
    let started = Instant::now();
    // Keep the server (if we start one) alive until the end: dropping it kills it.
    let (_server, url) = relock::testing::from_env_or_start()?;
    let name = format!("example:election:{}", std::process::id());
    let key = counter_key(&name);
    let client = Client::connect(&url).await?;
    let fence = client.fence(&key);

    println!("{count} members campaign for `{name}` (lease {LEASE:?})");
    let mut members = Members::start(count, &url, &name)?;
    let (first, old_epoch) = members.leader(None).await?;
    let (_, before_kill) = members.writes(first, old_epoch).await?;
    println!("  member {first} wrote the counter up to {before_kill} with epoch {old_epoch}");

    println!("killing member {first}, the leader (SIGKILL: no resign)");
    let last_old = members.kill(first, old_epoch).await?;
    let killed = Instant::now();
    let (second, new_epoch) = members.leader(Some(first)).await?;
    let took = killed.elapsed();
    println!(
        "member {second} took over with epoch {new_epoch} (the killed leader's was {old_epoch}), \
         {} ms after the kill",
        took.as_millis()
    );
    let (first_new, last_new) = members.writes(second, new_epoch).await?;

    // What Redis holds: the fence has seen the new epoch, the counter went on from where the
    // killed leader left it, and a late write with the old epoch is refused.
    if new_epoch <= old_epoch {
        return Err(format!("epoch {new_epoch} is not above {old_epoch}").into());
    }
    if first_new <= last_old {
        return Err(format!("the new leader wrote {first_new} after {last_old}").into());
    }
    let seen = fence.seen().await?;
    if seen != new_epoch {
        return Err(format!("the fence has seen epoch {seen}, not {new_epoch}").into());
    }
    let leader = client
        .election(&name)
        .leader()
        .await?
        .ok_or("nobody leads")?;
    let metadata = leader.metadata.unwrap_or_default();
    if leader.epoch != new_epoch || metadata != format!("member {second}") {
        return Err(format!("Redis says {metadata:?} leads at epoch {}", leader.epoch).into());
    }
    println!("  Redis: `{metadata}` leads at epoch {new_epoch}; the fence has seen epoch {seen}");
    match fence.set(old_epoch, &key, 0_i64).await {
        Err(e) if e.is_stale_token() => {
            println!("  a late write with the killed leader's epoch {old_epoch} is refused: {e}")
        }
        other => {
            return Err(format!("a write of epoch {old_epoch} was not refused: {other:?}").into())
        }
    }
    let counter: Option<i64> = fence.get(new_epoch, &key).await?;
    let counter = counter.ok_or("the counter is gone")?;
    if counter < last_new {
        return Err(format!("the counter is {counter}, below {last_new}").into());
    }
    println!(
        "  the counter only went forward: up to {last_old} in epoch {old_epoch}, then \
         {first_new}..={last_new} in epoch {new_epoch}; it holds {counter}"
    );

    println!("stopping the members");
    members.stop(first).await?;
    client.shutdown().await?;
    println!(
        "done in {:.1} s: member {second} took over {:.1} s after member {first} was killed",
        started.elapsed().as_secs_f64(),
        took.as_secs_f64()
    );
    Ok(())
}
