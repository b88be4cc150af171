//! The combiner against a real server: a batch answers each call as the call would be answered
//! alone (errors included), a caller that gave up while queued is never sent, a call queued past
//! its command timeout fails as not sent, and a flushed script cache costs a reload.

use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::{ClientLike, KeysInterface, ListInterface, LuaInterface};
use fred::types::config::{Config, ReconnectPolicy};
use fred::types::{Builder, Key, Value};

use once_cell::sync::Lazy;

use super::{send, Combiner, Queued, Sending, DISPATCHER, IN_FLIGHT};
use crate::connection::Connection;
use crate::meter::Meter;
use crate::redis_error::{classify, What};
use crate::scripts::{catalogue, Script};
use crate::testing::RedisServer;

/// A connection set up as the client's, with a command timeout of `timeout`.
async fn connection(server: &RedisServer, timeout: Duration, combining: bool) -> Connection {
    let mut builder = Builder::from_config(Config::from_url(&server.url()).unwrap());
    builder
        .with_performance_config(|p| p.default_command_timeout = timeout)
        .with_connection_config(|c| c.max_command_attempts = 1)
        .set_policy(ReconnectPolicy::new_constant(0, 50));
    let redis = builder.build().unwrap();
    redis.init().await.unwrap();
    let meter = Arc::new(Meter::detached());
    Connection::new(redis, &server.url(), meter, combining)
}

/// The place of catalogue script `name`.
fn slot(name: &str) -> usize {
    catalogue::ALL.iter().position(|(n, _)| *n == name).unwrap()
}

/// A call of the counter-reading script on `key`, and the receiver of its reply.
fn read_counter(id: u64, key: &str) -> (Queued, super::oneshot::Receiver<super::Reply>) {
    let (reply, answer) = super::oneshot::channel();
    let call = Queued {
        id,
        slot: slot("COUNTER"),
        keys: vec![Key::from(key)],
        args: Vec::new(),
        reply,
    };
    (call, answer)
}

#[tokio::test]
async fn a_batch_answers_each_call_as_it_would_be_answered_alone() {
    let server = RedisServer::start().unwrap();
    let redis = connection(&server, Duration::from_secs(2), true).await;
    let _: () = redis.set("five", "5", None, None, false).await.unwrap();
    let _: i64 = redis.rpush("list", "x").await.unwrap();
    let keys = ["five", "missing", "list", "five"];

    let counter = Script::new(catalogue::COUNTER);
    let mut alone = Vec::new();
    for key in keys {
        alone.push(counter.run_once(&redis, None, &[Key::from(key)], &[]).await);
    }
    let (calls, answers): (Vec<_>, Vec<_>) = keys
        .iter()
        .enumerate()
        .map(|(i, key)| read_counter(i as u64, key))
        .unzip();
    load_dispatcher(&redis).await;
    let evalsha_before = evalsha_calls(&redis).await;
    send(&redis, calls).await;
    assert_eq!(
        evalsha_calls(&redis).await - evalsha_before,
        1,
        "four calls, one EVALSHA"
    );
    for ((key, alone), answer) in keys.iter().zip(alone).zip(answers) {
        let batched = answer.await.unwrap();
        match (&alone, &batched) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{key}"),
            (Err(a), Err(b)) => {
                // Alone, Redis 7 adds where the script raised it (" script: <sha>, on …").
                assert!(a.details().starts_with(b.details()), "{a:?} {b:?}");
                assert_eq!(a.kind(), b.kind(), "{key}");
                assert_eq!(classify(a), classify(b), "{key}");
            }
            _ => panic!("{key}: alone {alone:?}, batched {batched:?}"),
        }
    }
    assert!(matches!(
        classify(&counter_error(&redis, "list").await),
        What::WrongType(_)
    ));
}

/// Takes every one of `combiner`'s places for a send, as calls on their way do: calls queue
/// until the returned sends end (are dropped).
fn on_their_way<'a>(combiner: &'a Arc<Combiner>, redis: &'a Connection) -> Vec<Sending<'a>> {
    combiner.state.lock().unwrap().in_flight += IN_FLIGHT;
    (0..IN_FLIGHT)
        .map(|_| Sending::new(combiner, redis))
        .collect()
}

/// A semaphore's permits set to 3 through `combiner`, on `name`.
async fn try_set(combiner: &Arc<Combiner>, redis: &Connection, name: &str) -> super::Reply {
    static TRY_SET: Lazy<Script> = Lazy::new(|| Script::new(catalogue::SEMAPHORE_TRY_SET));
    let keys = [
        Key::from(name),
        Key::from(format!("redisson_sc:{{{name}}}")),
    ];
    let args = [Value::Integer(3), Value::from("PUBLISH")];
    combiner.run(&TRY_SET, redis, &keys, &args).await
}

#[tokio::test]
async fn a_caller_gone_before_its_batch_went_out_is_never_sent() {
    let server = RedisServer::start().unwrap();
    let redis = connection(&server, Duration::from_secs(5), true).await;
    let combiner = redis.combiner.clone().unwrap();
    // The script loaded, so that the count of EVALSHAs below has no NOSCRIPT in it.
    assert_eq!(
        try_set(&combiner, &redis, "warm").await.unwrap(),
        Value::Integer(1)
    );
    let busy = on_their_way(&combiner, &redis);
    let kept = tokio::spawn({
        let (combiner, redis) = (combiner.clone(), redis.clone());
        async move { try_set(&combiner, &redis, "kept").await }
    });
    // Its caller gives up while it is queued.
    let gone = tokio::time::timeout(
        Duration::from_millis(100),
        try_set(&combiner, &redis, "gone"),
    )
    .await;
    assert!(gone.is_err(), "the queued call was cancelled");
    assert_eq!(combiner.state.lock().unwrap().queued.len(), 2);
    let evalsha_before = evalsha_calls(&redis).await;
    drop(busy);
    assert_eq!(kept.await.unwrap().unwrap(), Value::Integer(1));
    let exists: i64 = redis.exists("gone").await.unwrap();
    assert_eq!(exists, 0, "a call cancelled while queued was sent");
    let exists: i64 = redis.exists("kept").await.unwrap();
    assert_eq!(exists, 1);
    assert_eq!(
        evalsha_calls(&redis).await - evalsha_before,
        1,
        "the call left alone went out as itself"
    );
    assert_eq!(combiner.state.lock().unwrap().in_flight, 0);
}

#[tokio::test]
async fn a_batch_is_written_as_it_is_taken_before_anything_sent_after_it() {
    let server = RedisServer::start().unwrap();
    let redis = connection(&server, Duration::from_secs(5), true).await;
    let combiner = redis.combiner.clone().unwrap();
    assert_eq!(
        try_set(&combiner, &redis, "warm").await.unwrap(),
        Value::Integer(1)
    );
    // Loaded, so that the batch runs when it is first sent (a `NOSCRIPT` is sent again).
    load_dispatcher(&redis).await;
    let busy = on_their_way(&combiner, &redis);
    let queued: Vec<_> = ["first", "second"]
        .map(|name| {
            let (combiner, redis) = (combiner.clone(), redis.clone());
            tokio::spawn(async move { try_set(&combiner, &redis, name).await })
        })
        .into();
    while combiner.state.lock().unwrap().queued.len() < 2 {
        tokio::task::yield_now().await;
    }
    // The send on its way ends and the queue goes out as a batch. A command sent on the
    // connection right after (no await in between: the batch's task has not run) still follows
    // it, as a cleanup that a dropped caller sends after its call must.
    drop(busy);
    let after: Vec<Option<i64>> = redis.mget(vec!["first", "second"]).await.unwrap();
    assert_eq!(
        after,
        [Some(3), Some(3)],
        "a command sent after the batch overtook it"
    );
    for call in queued {
        assert_eq!(call.await.unwrap().unwrap(), Value::Integer(1));
    }
}

#[tokio::test]
async fn a_call_queued_past_its_command_timeout_fails_as_not_sent_and_never_runs() {
    let server = RedisServer::start().unwrap();
    let timeout = Duration::from_millis(300);
    let redis = connection(&server, timeout, true).await;
    let combiner = redis.combiner.clone().unwrap();
    let busy = on_their_way(&combiner, &redis);
    let started = tokio::time::Instant::now();
    let error = try_set(&combiner, &redis, "late").await.unwrap_err();
    assert!(started.elapsed() >= timeout);
    assert!(error.details().contains("nothing was sent"), "{error:?}");
    assert!(combiner.state.lock().unwrap().queued.is_empty());
    drop(busy);
    let exists: i64 = redis.exists("late").await.unwrap();
    assert_eq!(exists, 0, "a call that failed as not sent ran");
    // The connection serves calls again.
    assert_eq!(
        try_set(&combiner, &redis, "later").await.unwrap(),
        Value::Integer(1)
    );
    assert_eq!(combiner.state.lock().unwrap().in_flight, 0);
}

#[tokio::test]
async fn calls_that_overlap_go_out_together_in_batches_of_at_most_128() {
    let server = RedisServer::start().unwrap();
    const CALLS: usize = 300;
    let redis = connection(&server, Duration::from_secs(5), true).await;
    let combiner = redis.combiner.clone().unwrap();
    let busy = on_their_way(&combiner, &redis);
    let calls: Vec<_> = (0..CALLS)
        .map(|i| {
            let (combiner, redis) = (combiner.clone(), redis.clone());
            tokio::spawn(async move { try_set(&combiner, &redis, &format!("sem-{i}")).await })
        })
        .collect();
    while combiner.state.lock().unwrap().queued.len() < CALLS {
        tokio::task::yield_now().await;
    }
    load_dispatcher(&redis).await;
    let evalsha_before = evalsha_calls(&redis).await;
    drop(busy);
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), Value::Integer(1));
    }
    // 128, 128 and 44 calls.
    assert_eq!(evalsha_calls(&redis).await - evalsha_before, 3);
    for i in 0..CALLS {
        let permits: i64 = redis.get(format!("sem-{i}")).await.unwrap();
        assert_eq!(permits, 3);
    }
}

#[tokio::test]
async fn a_flushed_script_cache_costs_the_batch_a_reload() {
    let server = RedisServer::start().unwrap();
    let redis = connection(&server, Duration::from_secs(2), true).await;
    let _: () = redis.set("five", "5", None, None, false).await.unwrap();
    for round in 0..2 {
        // `SCRIPT FLUSH` bare: Redis 6.0 knows no `SYNC` / `ASYNC`.
        let flush = fred::types::CustomCommand::new_static(
            "SCRIPT",
            fred::types::ClusterHash::FirstKey,
            false,
        );
        let _: Value = redis.custom(flush, vec!["FLUSH"]).await.unwrap();
        let (calls, answers): (Vec<_>, Vec<_>) = (0..3).map(|i| read_counter(i, "five")).unzip();
        send(&redis, calls).await;
        for answer in answers {
            assert_eq!(
                answer.await.unwrap().unwrap(),
                Value::Integer(5),
                "round {round}"
            );
        }
        let cached: Vec<bool> = redis
            .script_exists(vec![DISPATCHER.sha.to_string()])
            .await
            .unwrap();
        assert_eq!(cached, [true]);
    }
}

#[test]
fn the_dispatcher_holds_every_script_once() {
    let source = super::dispatcher_source();
    for (name, script) in catalogue::ALL {
        assert_eq!(source.matches(script).count(), 1, "{name}");
    }
    assert!(source.ends_with(catalogue::DISPATCH));
}

/// The counter script's error on `key`, sent alone.
async fn counter_error(redis: &Connection, key: &str) -> fred::error::Error {
    let counter = Script::new(catalogue::COUNTER);
    let keys = [Key::from(key)];
    counter.run_once(redis, None, &keys, &[]).await.unwrap_err()
}

/// The dispatcher loaded, so that a count of `EVALSHA`s has no `NOSCRIPT` in it.
async fn load_dispatcher(redis: &Connection) {
    let sha: String = redis.script_load(DISPATCHER.lua.to_string()).await.unwrap();
    assert_eq!(sha, DISPATCHER.sha.to_string());
}

/// How many `EVALSHA`s the server has run.
async fn evalsha_calls(redis: &Connection) -> u64 {
    let info: String = redis
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

#[test]
fn a_cluster_connection_sends_every_call_alone() {
    let config = Config::from_url("redis-cluster://127.0.0.1:7000").unwrap();
    let redis = Builder::from_config(config).build().unwrap();
    let meter = Arc::new(Meter::detached());
    let connection = Connection::new(redis, "127.0.0.1:7000", meter, true);
    assert!(connection.combiner.is_none());
}
