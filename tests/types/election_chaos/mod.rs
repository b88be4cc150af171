//! A chaos run of `Election` with a `Fence`: three leader processes increment one counter through
//! the fence while the parent stops them past their lease (`SIGSTOP`), kills them (`SIGKILL`)
//! and crashes the server, which comes back from its AOF. What Redis keeps of the writes is
//! checked at the end: no update lost, no write accepted out of epoch order.
//!
//! The run lasts `RELOCK_CHAOS_SECS` seconds of faults (20 by default, for CI; some minutes by
//! hand). `RELOCK_CHAOS_SEED` (printed by every run) repeats its random choices: the faults,
//! their order and lengths, the waits between them, the workers' stalls; which worker leads when
//! a fault comes still depends on timing.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use relock::{Client, Fence};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

use common::{RedisServer, HANG};

mod worker;

use worker::{Said, Worker};

/// What a worker says: it leads, with the term's epoch.
const LEADS: &str = "CHAOS_LEADS ";
/// A write the fence accepted: the epoch and the value written.
const ACCEPTED: &str = "CHAOS_ACCEPTED ";
/// A write the fence refused (`StaleToken`): the epoch and the value it would have written.
const REFUSED: &str = "CHAOS_REFUSED ";
/// A fenced read the fence refused: the epoch.
const STALE_READ: &str = "CHAOS_STALE_READ ";
/// A write whose outcome the worker cannot know (the connection broke with it in flight): the
/// epoch and the value.
const UNSURE: &str = "CHAOS_UNSURE ";
/// The worker stalls between its read and its write (a blocking sleep, as a GC pause): the epoch
/// and the milliseconds.
const STALL: &str = "CHAOS_STALL ";
/// A term ended: the epoch and how (`lost`, `refused`, `failed`).
const ENDED: &str = "CHAOS_ENDED ";
/// An error met on the way (the server restarting): what was being done, and the error.
const TROUBLE: &str = "CHAOS_TROUBLE ";

/// The leader's write, after the fence's check: the counter set to `ARGV[1]`, and `<epoch>
/// <value>` appended to the log, in the one script, so the log is Redis's own record of the
/// writes it accepted, in the order it accepted them.
const WRITE: &str = "redis.call('set', KEYS[1], ARGV[1]) \
                     redis.call('rpush', KEYS[2], ARGV[2] .. ' ' .. ARGV[1]) \
                     return 1";

/// The workers' watchdog timeout: the lease of a term.
const LEASE: Duration = Duration::from_millis(700);

/// The chance that a step stalls between its read and its write, past the lease.
const STALL_CHANCE: f64 = 1.0 / 400.0;

/// The most a leader waits between two steps, in milliseconds (a random wait of 0 to this).
const PACE_MS: u64 = 6;
/// The faults of the chaos run.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `SIGSTOP` a worker past the lease, then `SIGCONT`.
    Stop,
    /// `SIGKILL` a worker and start another in its place.
    Kill,
    /// Crash the server (`SIGKILL`) and start it again on its AOF.
    Restart,
}

/// The worker of the newest `LEADS` line the parent has read (the leader, unless its term
/// ended since), if it runs.
fn leader(workers: &[Worker], said: &Said) -> Option<usize> {
    let said = said.lock().unwrap();
    let (instance, _) = said.iter().rev().find(|(_, line)| line.contains(LEADS))?;
    workers.iter().position(|w| w.instance == *instance)
}

/// The numbers after `marker` in each line that holds it, with the worker that said it.
fn numbers(said: &[(usize, String)], marker: &str) -> Vec<(usize, Vec<u64>)> {
    said.iter()
        .filter_map(|(instance, line)| {
            let at = line.find(marker)?;
            let numbers = line[at + marker.len()..]
                .split_whitespace()
                .map_while(|word| word.parse().ok())
                .collect();
            Some((*instance, numbers))
        })
        .collect()
}

/// How many entries the log holds.
fn log_len(server: &RedisServer, log: &str) -> i64 {
    common::resp_int(&server.cmd(&["LLEN", log]))
}

/// The counter, the log and the fence's highest token seen, read in one script.
fn snapshot(server: &RedisServer, keys: [&str; 3]) -> (u64, Vec<(u64, u64)>, u64) {
    let script = "return {redis.call('get', KEYS[1]) or false, \
                  redis.call('lrange', KEYS[2], 0, -1), redis.call('get', KEYS[3]) or false}";
    let reply = server.cmd(&["EVAL", script, "3", keys[0], keys[1], keys[2]]);
    let number = |value: &common::Resp| match value {
        common::Resp::Bulk(None) => 0,
        common::Resp::Bulk(Some(n)) => n.parse().expect("a number"),
        other => panic!("not a number: {other:?}"),
    };
    let common::Resp::Array(Some(parts)) = common::resp(&reply) else {
        panic!("bad snapshot reply {reply:?}");
    };
    let common::Resp::Array(Some(entries)) = &parts[1] else {
        panic!("bad log in {reply:?}");
    };
    let log = entries
        .iter()
        .map(|entry| match entry {
            common::Resp::Bulk(Some(entry)) => {
                let (epoch, value) = entry.split_once(' ').expect("<epoch> <value>");
                (epoch.parse().unwrap(), value.parse().unwrap())
            }
            other => panic!("bad log entry {other:?}"),
        })
        .collect();
    (number(&parts[0]), log, number(&parts[2]))
}

/// Three leader processes (see [`election_chaos_worker`]) campaign on one election and, leading,
/// increment one counter through a `Fence` with their term's epoch: a fenced read, then a fenced
/// write of the value plus one that also appends `<epoch> <value>` to a log, in one script, so
/// Redis records every write it accepted, in order. Now and then a worker stalls between its read
/// and its write past its lease (a GC pause, which `Term::run` cannot stop). Meanwhile the
/// parent, at random (seeded) moments, stops a worker past the lease and resumes it, kills one
/// and starts another, and crashes the server and starts it again; the first three faults are
/// one of each, the leader their target. Then it waits for a write after the last fault, kills
/// the workers and checks, against what Redis kept:
///
/// - no lost update: the log's values are 1, 2, 3, ... in order, and the counter is their
///   number (two leaders that wrote from one read would write one value twice);
/// - epoch order: the log's epochs never go down;
/// - every write a worker saw accepted is in the log with its epoch, no write it saw refused is,
///   and each write in the log that no worker reported is accounted for: its reply was lost with
///   a broken connection (the worker said so), or it was the last write of a killed worker (at
///   most one per worker: a worker writes one step at a time);
/// - epochs are never handed out twice, and the run made progress (two terms that wrote).
///
/// **What the deployment keeps.** The server runs with `appendonly yes` and `appendfsync
/// always`: every write is on disk before it is answered, so a crash forgets nothing a client
/// saw, neither the election's epoch counter (a new term's epoch stays above every earlier one)
/// nor the fence's highest token seen (an old leader stays refused) nor the counter and its log.
/// Without it a restarted server would hand out epochs again from an earlier value, or forget
/// the fence's high-water mark and accept an old leader's late write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stops_kills_and_restarts_lose_no_fenced_write() {
    let secs: u64 = std::env::var("RELOCK_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let run_for = Duration::from_secs(secs);
    let seed: u64 = std::env::var("RELOCK_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!(
        "election chaos: {secs} s of faults, seed {seed} (RELOCK_CHAOS_SEED repeats its choices)"
    );
    let mut rng = StdRng::seed_from_u64(seed);

    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let name = common::prefix("election_chaos");
    let (counter, log) = (format!("{{{name}}}:counter"), format!("{{{name}}}:log"));
    // The fence guards the counter key as it is named: the key holds the resource's tag.
    let fence_key = format!("relock_fence:{counter}");
    let env = [
        ("REDIS_URL", server.url()),
        ("ELECTION", name.clone()),
        ("COUNTER", counter.clone()),
        ("LOG", log.clone()),
    ];
    let said: Said = Arc::default();
    let mut workers: Vec<Worker> = (0..3)
        .map(|instance| Worker::spawn(instance, &env, seed, &said))
        .collect();
    let mut readers = Vec::new();
    let started = Instant::now();
    let wrote = common::eventually(HANG, || async { log_len(&server, &log) > 0 }).await;
    assert!(
        wrote,
        "no write within {HANG:?}: {:?}",
        said.lock().unwrap()
    );

    let mut first = [Fault::Stop, Fault::Kill, Fault::Restart];
    first.shuffle(&mut rng);
    let (mut stops, mut kills, mut restarts) = (0, 0, 0);
    let chaos = Instant::now();
    for round in 0.. {
        if round >= first.len() && chaos.elapsed() >= run_for {
            break;
        }
        tokio::time::sleep(Duration::from_millis(rng.gen_range(300..=1200))).await;
        for worker in &mut workers {
            worker.check_running(&said);
        }
        let fault = first
            .get(round)
            .copied()
            .unwrap_or_else(|| match rng.gen_range(0..10) {
                0..=3 => Fault::Stop,
                4..=6 => Fault::Kill,
                _ => Fault::Restart,
            });
        // The first faults hit the leader; later ones mostly.
        let target = match leader(&workers, &said) {
            Some(slot) if round < first.len() || rng.gen_bool(0.7) => slot,
            _ => rng.gen_range(0..workers.len()),
        };
        let at = chaos.elapsed();
        match fault {
            Fault::Stop => {
                let stopped = LEASE + Duration::from_millis(rng.gen_range(100..=1500));
                println!(
                    "{at:.1?}: stop worker {} for {stopped:?}",
                    workers[target].instance
                );
                let frozen = common::faults::Frozen::stop(workers[target].pid());
                tokio::time::sleep(stopped).await;
                drop(frozen);
                stops += 1;
            }
            Fault::Kill => {
                let instance = 3 + kills;
                println!(
                    "{at:.1?}: kill worker {}, start worker {instance}",
                    workers[target].instance
                );
                let fresh = Worker::spawn(instance, &env, seed, &said);
                let killed = std::mem::replace(&mut workers[target], fresh);
                readers.push(killed.kill().await);
                kills += 1;
            }
            Fault::Restart => {
                let down = Duration::from_millis(rng.gen_range(0..=800));
                println!("{at:.1?}: crash the server, start it again after {down:?}");
                tokio::task::block_in_place(|| server.kill());
                tokio::time::sleep(down).await;
                tokio::task::block_in_place(|| server.restart());
                restarts += 1;
            }
        }
    }
    // Live after the faults: a write lands after the last one.
    let before = log_len(&server, &log);
    let wrote = common::eventually(HANG, || async { log_len(&server, &log) > before }).await;
    assert!(
        wrote,
        "no write within {HANG:?} after the last fault (log at {before})"
    );
    for worker in workers {
        readers.push(worker.kill().await);
    }
    let (final_counter, entries, fence_seen) = snapshot(&server, [&counter, &log, &fence_key]);
    for reader in readers {
        common::within(
            Duration::from_secs(10),
            reader,
            "a worker's output never ended",
        )
        .await;
    }
    let took = started.elapsed();
    let said = said.lock().unwrap().clone();

    // Epochs: each handed out once; every write's epoch was a term's.
    let leads = numbers(&said, LEADS);
    let mut epoch_of = std::collections::HashMap::new();
    for (instance, numbers) in &leads {
        let previous = epoch_of.insert(numbers[0], *instance);
        assert!(
            previous.is_none(),
            "epoch {} handed out to workers {previous:?} and {instance}",
            numbers[0]
        );
    }
    // No lost update, epochs in order, in what Redis kept.
    for (at, (epoch, value)) in entries.iter().enumerate() {
        assert_eq!(
            *value,
            at as u64 + 1,
            "log entry {at} wrote {value}: an update was lost (log around it {:?})",
            &entries[at.saturating_sub(5)..(at + 5).min(entries.len())]
        );
        assert!(epoch_of.contains_key(epoch), "epoch {epoch} led nowhere");
        if at > 0 {
            let earlier = entries[at - 1].0;
            assert!(
                *epoch >= earlier,
                "write {value} with epoch {epoch} was accepted after one with epoch {earlier}"
            );
        }
    }
    assert_eq!(
        final_counter,
        entries.len() as u64,
        "the counter and its log"
    );
    let newest = entries.last().map_or(0, |(epoch, _)| *epoch);
    let highest = epoch_of.keys().copied().max().unwrap_or(0);
    assert!(
        newest <= fence_seen && fence_seen <= highest,
        "the fence saw {fence_seen}: the last write had {newest}, the newest term {highest}"
    );
    // What the workers saw against what Redis kept.
    let pair = |numbers: &Vec<u64>| (numbers[0], numbers[1]);
    let accepted: Vec<(usize, (u64, u64))> = numbers(&said, ACCEPTED)
        .iter()
        .map(|(instance, numbers)| (*instance, pair(numbers)))
        .collect();
    let mut reported = std::collections::HashSet::new();
    for (instance, (epoch, value)) in &accepted {
        assert!(
            reported.insert(*value),
            "value {value} reported accepted twice"
        );
        let kept = entries.get(*value as usize - 1).copied();
        assert_eq!(
            kept,
            Some((*epoch, *value)),
            "worker {instance} saw write {value} of epoch {epoch} accepted, Redis kept {kept:?}"
        );
    }
    let refused = numbers(&said, REFUSED);
    for (instance, numbers) in &refused {
        let (epoch, value) = pair(numbers);
        assert_ne!(
            entries.get(value as usize - 1),
            Some(&(epoch, value)),
            "worker {instance} saw write {value} of epoch {epoch} refused, Redis kept it"
        );
    }
    let unsure: std::collections::HashSet<(u64, u64)> = numbers(&said, UNSURE)
        .iter()
        .map(|(_, numbers)| pair(numbers))
        .collect();
    let mut unreported_per_worker = std::collections::HashMap::new();
    let mut unreported = 0;
    let mut reply_lost = 0;
    for (epoch, value) in &entries {
        if reported.contains(value) {
            continue;
        }
        if unsure.contains(&(*epoch, *value)) {
            reply_lost += 1;
            continue;
        }
        unreported += 1;
        let instance = epoch_of[epoch];
        let n = unreported_per_worker.entry(instance).or_insert(0);
        *n += 1;
        assert_eq!(
            *n, 1,
            "worker {instance} has more than one write in the log that it never reported"
        );
    }
    let terms_that_wrote: std::collections::HashSet<u64> =
        entries.iter().map(|(epoch, _)| *epoch).collect();
    let ended = |how: &str| {
        said.iter()
            .filter(|(_, line)| line.contains(ENDED) && line.ends_with(how))
            .count()
    };
    let count = |marker: &str| said.iter().filter(|(_, l)| l.contains(marker)).count();
    println!(
        "election chaos, seed {seed}: {took:.1?} in all; {} terms ({} wrote; ended: {} lost, {} \
         refused, {} failed), {} writes ({} reported accepted, {reply_lost} with their reply \
         lost, {unreported} unreported by a killed worker), {} writes and {} reads refused, {} \
         stalls, {} troubles; faults: {stops} stops, {kills} kills, {restarts} restarts; {} \
         workers",
        leads.len(),
        terms_that_wrote.len(),
        ended("lost"),
        ended("refused"),
        ended("failed"),
        entries.len(),
        accepted.len(),
        refused.len(),
        count(STALE_READ),
        count(STALL),
        count(TROUBLE),
        3 + kills,
    );
    let troubles: Vec<&str> = said
        .iter()
        .filter_map(|(_, line)| Some(&line[line.find(TROUBLE)?..]))
        .collect();
    println!(
        "the workers' first troubles: {:#?}",
        &troubles[..troubles.len().min(5)]
    );
    assert!(
        terms_that_wrote.len() >= 2,
        "the run made no progress: {} terms wrote",
        terms_that_wrote.len()
    );
}
