//! The chaos run's worker processes: a leader that increments the counter through the fence,
//! and the parent's handle on one.

use super::*;

/// How one step of a leader's work ended.
enum Step {
    Written,
    Refused,
    Failed,
}

/// How a leader's work ended, had it not been stopped by the end of its term.
enum Led {
    Refused,
    Failed,
}

/// A client of the worker's own on `url`, with the chaos lease.
async fn connect(url: &str) -> relock::Result<Client> {
    let config = common::config(url)
        .with_watchdog_timeout(LEASE)
        .with_command_timeout(Duration::from_secs(2));
    Client::new(config).await
}

/// One step of the leader of `epoch`: a fenced read of `counter`, a stall if `stall` says so, and
/// the fenced write of the value read plus one (see [`WRITE`]). It says how it went.
async fn step(
    fence: Fence,
    epoch: u64,
    keys: Arc<(String, String)>,
    stall: Option<Duration>,
) -> Step {
    let (counter, log) = (&keys.0, &keys.1);
    let read: relock::Result<Option<i64>> = fence.get(epoch, counter).await;
    let value = match read {
        Ok(value) => value.unwrap_or(0) + 1,
        Err(e) if e.is_stale_token() => {
            common::child::say(format!("{STALE_READ}{epoch}"));
            return Step::Refused;
        }
        Err(e) => {
            common::child::say(format!("{TROUBLE}read in term {epoch}: {e}"));
            return Step::Failed;
        }
    };
    if let Some(stall) = stall {
        common::child::say(format!("{STALL}{epoch} {}", stall.as_millis()));
        // Blocking, as a GC pause: nothing of this process runs, the watchdog neither.
        std::thread::sleep(stall);
    }
    let args = [value.to_string().into(), epoch.to_string().into()];
    let written: relock::Result<i64> = fence.eval(epoch, WRITE, &[counter, log], &args).await;
    match written {
        Ok(_) => {
            common::child::say(format!("{ACCEPTED}{epoch} {value}"));
            Step::Written
        }
        Err(e) if e.is_stale_token() => {
            common::child::say(format!("{REFUSED}{epoch} {value}"));
            Step::Refused
        }
        Err(e) => {
            common::child::say(format!("{UNSURE}{epoch} {value} {e}"));
            Step::Failed
        }
    }
}

/// The leader's work in term `epoch`: steps one after another until one is refused or fails.
/// Each step runs in a task of its own, holding `busy` while it runs: when `run` drops this work
/// at the term's end, a step on its way goes on to its end (a write already sent, which `run`
/// cannot stop), and the worker waits for it on `busy`.
async fn lead(
    epoch: u64,
    fence: Fence,
    keys: Arc<(String, String)>,
    busy: Arc<tokio::sync::Mutex<()>>,
    seed: u64,
) -> Led {
    let mut rng = StdRng::seed_from_u64(seed);
    loop {
        let stall = rng
            .gen_bool(STALL_CHANCE)
            .then(|| LEASE + Duration::from_millis(rng.gen_range(300..=1200)));
        let permit = busy.clone().lock_owned().await;
        let (fence, keys) = (fence.clone(), keys.clone());
        let step = tokio::spawn(async move {
            let _permit = permit;
            step(fence, epoch, keys, stall).await
        });
        match step.await.expect("a step panicked") {
            Step::Written => {}
            Step::Refused => return Led::Refused,
            Step::Failed => return Led::Failed,
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=PACE_MS))).await;
    }
}

/// A worker of the chaos run: campaigns on `ELECTION` on `REDIS_URL` and, leading, increments
/// the counter `COUNTER` through its fence with the term's epoch (see [`lead`]), saying each
/// write; campaigns again when the term ends. On errors (the server restarting) it waits a
/// little and tries again, with a client of its own again after three failures in a row. It runs
/// until it is killed. `SEED` seeds its stalls and waits.
#[tokio::test]
#[ignore = "a child process of election_chaos::stops_kills_and_restarts_lose_no_fenced_write"]
async fn election_chaos_worker() {
    let Some(env) = common::child::env() else {
        return;
    };
    let (url, name) = (env.text("REDIS_URL"), env.text("ELECTION"));
    let keys = Arc::new((env.text("COUNTER"), env.text("LOG")));
    let mut rng = StdRng::seed_from_u64(env.number("SEED"));
    let mut client: Option<Client> = None;
    let mut failures = 0;
    loop {
        let current = match &client {
            Some(client) => client.clone(),
            None => {
                match tokio::time::timeout(Duration::from_secs(5), connect(&url)).await {
                    Ok(Ok(connected)) => client = Some(connected),
                    Ok(Err(e)) => common::child::say(format!("{TROUBLE}connect: {e}")),
                    Err(_) => common::child::say(format!("{TROUBLE}connect: no answer in 5 s")),
                }
                tokio::time::sleep(Duration::from_millis(rng.gen_range(50..=300))).await;
                continue;
            }
        };
        let failed = match current.election(&name).campaign().await {
            Ok(term) => {
                failures = 0;
                let epoch = term.epoch();
                common::child::say(format!("{LEADS}{epoch}"));
                let busy = Arc::new(tokio::sync::Mutex::new(()));
                let fence = current.fence(keys.0.clone());
                let seed = rng.gen();
                let ended = term
                    .run(|info| lead(info.epoch(), fence, keys.clone(), busy.clone(), seed))
                    .await;
                // A step still on its way ends first: one write at a time per worker.
                drop(busy.lock().await);
                let how = match ended {
                    Ok(Led::Refused) => "refused",
                    Ok(Led::Failed) => "failed",
                    Err(e) if e.is_lease_lost() => "lost",
                    Err(e) => panic!("run failed with {e}"),
                };
                common::child::say(format!("{ENDED}{epoch} {how}"));
                how == "failed"
            }
            Err(e) => {
                common::child::say(format!("{TROUBLE}campaign: {e}"));
                failures += 1;
                true
            }
        };
        if failed {
            if failures >= 3 {
                failures = 0;
                if let Some(old) = client.take() {
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(Duration::from_secs(5), old.shutdown()).await;
                    });
                }
            }
            tokio::time::sleep(Duration::from_millis(rng.gen_range(50..=300))).await;
        }
    }
}

/// Every line the workers said, in the order the parent read them, with the worker that said it.
pub(super) type Said = Arc<Mutex<Vec<(usize, String)>>>;

/// A worker process, its stdout read into the shared [`Said`].
pub(super) struct Worker {
    /// Which worker it is: each process spawned gets the next number.
    pub(super) instance: usize,
    process: tokio::process::Child,
    reader: tokio::task::JoinHandle<()>,
}

impl Worker {
    pub(super) fn spawn(instance: usize, env: &[(&str, String)], seed: u64, said: &Said) -> Worker {
        let mut env = env.to_vec();
        env.push(("SEED", seed.wrapping_add(instance as u64).to_string()));
        let path = concat!(module_path!(), "::election_chaos_worker");
        let mut process = common::child::spawn_child_test(path, &env);
        let stdout = process.stdout.take().expect("the worker's stdout");
        let reader = tokio::spawn({
            let said = said.clone();
            async move {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    said.lock().unwrap().push((instance, line));
                }
            }
        });
        Worker {
            instance,
            process,
            reader,
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.process.id().expect("the worker runs")
    }

    /// Panics if it exited: a worker runs until it is killed.
    pub(super) fn check_running(&mut self, said: &Said) {
        if let Some(status) = self.process.try_wait().unwrap() {
            let lines: Vec<String> = said
                .lock()
                .unwrap()
                .iter()
                .filter(|(instance, _)| *instance == self.instance)
                .map(|(_, line)| line.clone())
                .collect();
            panic!("worker {} exited ({status}): {lines:?}", self.instance);
        }
    }

    /// SIGKILLs it; returns its reader, which ends once it has read all the worker said.
    pub(super) async fn kill(mut self) -> tokio::task::JoinHandle<()> {
        self.process.kill().await.expect("kill a worker");
        self.reader
    }
}
