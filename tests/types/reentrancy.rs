//! Reentrancy: holds are counted per owner (the current task by default, or an explicit
//! [`relock::Owner`]), in the client and in the Redis hash field `<client-id>:<owner>`. (The
//! count up and down in one task, and against another owner, is a family invariant, in
//! `tests/invariants/family.rs`.)

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use relock::{Lock, Owner};

const WATCHDOG: Duration = Duration::from_secs(3);

/// The Redis holder field of the current task on `client`.
fn field(client: &relock::Client, owner: &Owner) -> String {
    format!("{}:{}", client.id(), owner.id())
}

/// Takes the lock once per level of recursion, checking the count on the way down and up.
fn descend(lock: Lock, depth: u64, max: u64) -> BoxFuture<'static, ()> {
    Box::pin(async move {
        let guard = tokio::time::timeout(Duration::from_secs(5), lock.lock())
            .await
            .expect("re-entry must not wait")
            .unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), depth);
        if depth < max {
            descend(lock.clone(), depth + 1, max).await;
        }
        assert_eq!(lock.hold_count().await.unwrap(), depth);
        guard.unlock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), depth - 1);
    })
}

#[tokio::test]
async fn nested_async_calls_in_one_task_re_enter() {
    let (server, _client, name, lock) = common::setup_lock("reenter-nested", WATCHDOG).await;
    tokio::spawn(descend(lock.clone(), 1, 5)).await.unwrap();
    assert!(!common::raw_exists(&server, &name));
    assert!(!lock.is_locked().await.unwrap());
}

#[tokio::test]
async fn another_task_of_the_same_client_is_excluded() {
    let (server, _client, name, lock) = common::setup_lock("reenter-other-task", WATCHDOG).await;
    let guard = lock.lock().await.unwrap();
    let again = lock.lock().await.unwrap();

    let other = tokio::spawn({
        let lock = lock.clone();
        async move {
            let busy = lock.try_lock().await.unwrap();
            let timed = lock
                .try_lock_for(Duration::from_millis(200), None)
                .await
                .unwrap();
            (
                busy.is_none(),
                timed.is_none(),
                lock.hold_count().await.unwrap(),
                lock.is_locked().await.unwrap(),
            )
        }
    });
    assert_eq!(other.await.unwrap(), (true, true, 0, true));
    // The refused attempts left our holds as they were.
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert_eq!(common::raw_hgetall(&server, &name).len(), 1);

    again.unlock().await.unwrap();
    guard.unlock().await.unwrap();
    let other = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = lock.try_lock().await.unwrap().expect("free now");
            guard.unlock().await.unwrap();
        }
    });
    other.await.unwrap();
}

#[tokio::test]
async fn an_explicit_owner_shares_its_hold_with_a_spawned_task() {
    let server = Arc::new(common::RedisServer::start());
    let client = common::client(&server, WATCHDOG).await;
    let name = common::prefix("reenter-explicit");
    let owner = Owner::new();
    assert!(owner.id().starts_with("owner-"), "{owner}");
    let field = field(&client, &owner);
    let lock = client.lock(name.clone()).owned_by(owner.clone());
    let guard = lock.lock().await.unwrap();
    assert_eq!(guard.owner(), &owner);
    assert_eq!(common::raw_holds(&server, &name, &field), 1);

    // The default owner of the spawned task is someone else.
    let plain = client.lock(name.clone());
    let outsider = tokio::spawn(async move { plain.try_lock().await.unwrap().is_none() });
    assert!(outsider.await.unwrap(), "a task's own owner is excluded");

    let worker = tokio::spawn({
        let (lock, server, name, field) =
            (lock.clone(), server.clone(), name.clone(), field.clone());
        async move {
            assert_eq!(lock.hold_count().await.unwrap(), 1);
            assert!(lock.is_held_by_current_owner().await.unwrap());
            let inner = common::taken(lock.try_lock().await, "the same owner re-enters");
            assert_eq!(lock.hold_count().await.unwrap(), 2);
            assert_eq!(common::raw_holds(&server, &name, &field), 2);
            inner.unlock().await.unwrap();
            // Releases the hold taken by the parent task.
            guard.unlock().await.unwrap();
            lock.hold_count().await.unwrap()
        }
    });
    assert_eq!(worker.await.unwrap(), 0);
    assert!(!common::raw_exists(&server, &name));
    assert_eq!(client.stats().holds, 0);
}

#[tokio::test]
async fn join_branches_with_distinct_owners_exclude_each_other() {
    let (server, client, name) = common::setup("reenter-join", WATCHDOG).await;
    let a = client.lock(name.clone()).owned_by(Owner::new());
    let b = client.lock(name.clone()).owned_by(Owner::new());
    let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
    let (refused_tx, refused_rx) = tokio::sync::oneshot::channel();
    let sections = Mutex::new(Vec::new());

    let first = async {
        let guard = a.lock().await.unwrap();
        let enter = Instant::now();
        taken_tx.send(()).unwrap();
        refused_rx.await.unwrap();
        let exit = Instant::now();
        sections.lock().unwrap().push(("a", enter, exit));
        guard.unlock().await.unwrap();
    };
    let second = async {
        taken_rx.await.unwrap();
        assert!(b.try_lock().await.unwrap().is_none(), "a's hold excludes b");
        assert_eq!(b.hold_count().await.unwrap(), 0);
        refused_tx.send(()).unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(10), b.lock())
            .await
            .expect("b gets the lock once a releases")
            .unwrap();
        let enter = Instant::now();
        assert_eq!(b.hold_count().await.unwrap(), 1);
        assert_eq!(a.hold_count().await.unwrap(), 0);
        sections.lock().unwrap().push(("b", enter, Instant::now()));
        guard.unlock().await.unwrap();
    };
    tokio::join!(first, second);

    let sections = sections.into_inner().unwrap();
    let [(first, _, a_exit), (second, b_enter, _)] = sections[..] else {
        panic!("two sections expected: {sections:?}");
    };
    assert_eq!((first, second), ("a", "b"));
    assert!(a_exit <= b_enter, "the sections overlap");
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn join_branches_with_the_default_owner_share_their_holds() {
    let (server, _client, name, lock) = common::setup_lock("reenter-join-shared", WATCHDOG).await;
    let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    // One task, one owner: the second branch re-enters the first branch's hold at once.
    let first = async {
        let guard = lock.lock().await.unwrap();
        taken_tx.send(()).unwrap();
        done_rx.await.unwrap();
        guard.unlock().await.unwrap();
    };
    let second = async {
        taken_rx.await.unwrap();
        let guard = common::taken(lock.try_lock().await, "the same owner re-enters");
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        guard.unlock().await.unwrap();
        done_tx.send(()).unwrap();
    };
    tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(first, second)
    })
    .await
    .expect("the branches finish");
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn join_branches_with_distinct_owners_keep_a_counter_exact() {
    let (server, client, name) = common::setup("reenter-join-counter", WATCHDOG).await;
    let counter = Mutex::new(0u32);
    let inside = Mutex::new(false);
    let branch = |lock: Lock| {
        let (counter, inside) = (&counter, &inside);
        async move {
            for _ in 0..5 {
                let guard = lock.lock().await.unwrap();
                assert!(!std::mem::replace(&mut *inside.lock().unwrap(), true));
                let value = *counter.lock().unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                *counter.lock().unwrap() = value + 1;
                *inside.lock().unwrap() = false;
                guard.unlock().await.unwrap();
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(
            branch(client.lock(name.clone()).owned_by(Owner::new())),
            branch(client.lock(name.clone()).owned_by(Owner::new())),
            branch(client.lock(name.clone()).owned_by(Owner::new())),
        )
    })
    .await
    .expect("the branches finish");
    assert_eq!(*counter.lock().unwrap(), 15);
    assert!(!common::raw_exists(&server, &name));
}

#[tokio::test]
async fn the_holder_field_is_the_client_id_and_the_task_id() {
    let server = Arc::new(common::RedisServer::start());
    let client = common::client(&server, WATCHDOG).await;
    let name = common::prefix("reenter-field");
    let task = tokio::spawn({
        let (client, server, name) = (client.clone(), server.clone(), name.clone());
        async move {
            let guard = client.lock(name.clone()).lock().await.unwrap();
            let hash = common::raw_hgetall(&server, &name);
            guard.unlock().await.unwrap();
            (hash, tokio::task::id().to_string())
        }
    });
    let (hash, task_id) = task.await.unwrap();
    let [(field, count)] = &hash[..] else {
        panic!("one holder field expected: {hash:?}");
    };
    assert_eq!(count, "1");
    let owner = field
        .strip_prefix(&format!("{}:", client.id()))
        .unwrap_or_else(|| panic!("field {field} does not start with the client id"));
    let n = owner
        .strip_prefix("task-")
        .unwrap_or_else(|| panic!("owner {owner} is not a task"));
    assert!(n.parse::<u64>().is_ok(), "task-<n>: {owner}");
    assert_eq!(n, task_id);
    // Two clients never share a field: their ids differ.
    let other = common::client(&server, WATCHDOG).await;
    assert_ne!(other.id(), client.id());
}

/// The README's example, as written: `join!(lock.lock(), lock.lock())` in one task takes the
/// lock twice (hold count 2), where tokio's `Mutex` would wait.
#[tokio::test]
async fn joined_lock_calls_of_one_task_both_hold_the_lock() {
    let (server, client, name, lock) = common::setup_lock("reenter-join-readme", WATCHDOG).await;
    let (a, b) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(lock.lock(), lock.lock())
    })
    .await
    .expect("the joined calls finish");
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.hold_count().await.unwrap(), 2);
    assert_eq!(
        common::raw_holds(
            &server,
            &name,
            &format!("{}:{}", client.id(), a.owner().id())
        ),
        2
    );
    a.unlock().await.unwrap();
    b.unlock().await.unwrap();
    assert!(!common::raw_exists(&server, &name));
}
