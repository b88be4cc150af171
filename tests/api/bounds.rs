//! Every public future is `Send` (so it can be `tokio::spawn`ed) and every handle and guard is
//! `Send + Sync + 'static` (so it can be shared and moved across tasks), checked by the compiler
//! for each type in the family, as tokio's `fn bounds()` does; the futures are then spawned for
//! real and hold what they should.

use std::future::Future;
use std::time::Duration;

use crate::common;
use relock::{
    Client, FairLock, FencedGuard, FencedLock, Lock, LockGuard, Lost, MultiGuard, MultiLock,
    RedLock, RedLockGuard, RwLock, SpinLock,
};

/// Compiles only for a `Send` future, which is dropped unpolled.
fn send<F: Future + Send>(_future: F) {}

/// Compiles only for types that are `Send + Sync + 'static`, each named once.
macro_rules! shared {
    ($($T:ty),* $(,)?) => {{
        fn shared<T: Send + Sync + 'static>() {}
        $(shared::<$T>();)*
    }};
}

/// Checks at compile time that the acquires every lock type shares (`lock`, `lock_with_lease`,
/// `try_lock`, `try_lock_for`, `with`) give `Send` futures.
macro_rules! acquires_are_send {
    ($lock:expr, $wait:expr, $lease:expr) => {{
        send($lock.lock());
        send($lock.lock_with_lease($lease));
        send($lock.try_lock());
        send($lock.try_lock_for($wait, Some($lease)));
        send($lock.with(|_lost| async { 1 }));
    }};
}

/// Runs `call` on a clone of `handle` in a spawned task, and returns its unwrapped result.
async fn on_a_task<H, T, Fut>(handle: &H, call: impl FnOnce(H) -> Fut) -> T
where
    H: Clone,
    Fut: Future<Output = Result<T, relock::Error>> + Send + 'static,
    T: Send + 'static,
{
    spawned(call(handle.clone())).await
}

/// Spawns `future` on a task, and returns its unwrapped result.
async fn spawned<T: Send + 'static>(
    future: impl Future<Output = Result<T, relock::Error>> + Send + 'static,
) -> T {
    tokio::spawn(future).await.unwrap().unwrap()
}

/// Handles and guards: shared and moved across tasks.
#[test]
fn handles_and_guards_are_send_sync_static() {
    shared!(
        Client,
        Lock,
        FairLock,
        SpinLock,
        RwLock,
        relock::ReadLock,
        relock::WriteLock,
        FencedLock,
        MultiLock,
        RedLock,
        relock::Fence,
        relock::Part,
        LockGuard,
        FencedGuard,
        MultiGuard,
        RedLockGuard,
        relock::Semaphore,
        relock::PermitSemaphore,
        relock::CountDownLatch,
        relock::Error,
    );
    fn send_static<T: Send + 'static>() {}
    send_static::<relock::Permit>();
    send_static::<Lost>();
}

/// Every acquire, query and release future of every type is `Send`: the calls below would not
/// compile otherwise. Spawned, the acquires hold their locks and the releases free them.
#[tokio::test]
async fn every_future_is_send_and_spawnable() {
    let server = common::RedisServer::start();
    let client = common::client(&server, Duration::from_secs(5)).await;
    let name = |what: &str| common::prefix(&format!("bounds-{what}"));
    let wait = Duration::from_secs(5);
    let lease = Duration::from_secs(30);

    macro_rules! each_acquire {
        ($lock:expr, $Guard:ty) => {{
            let lock = $lock;
            acquires_are_send!(lock, wait, lease);
            let guard: $Guard = on_a_task(&lock, |lock| async move { lock.lock().await }).await;
            send(lock.force_unlock());
            send(lock.is_locked());
            send(lock.is_held_by_current_owner());
            send(lock.hold_count());
            send(lock.remaining_lease());
            assert!(lock.is_locked().await.unwrap(), "{}", lock.name());
            send(guard.hold_count());
            spawned(guard.unlock()).await;
            assert!(!lock.is_locked().await.unwrap(), "{}", lock.name());
        }};
    }

    each_acquire!(client.lock(name("lock")), LockGuard);
    each_acquire!(client.fair_lock(name("fair")), LockGuard);
    each_acquire!(client.spin_lock(name("spin")), LockGuard);
    let rw = client.rw_lock(name("rw"));
    each_acquire!(rw.read(), LockGuard);
    each_acquire!(rw.write(), LockGuard);
    each_acquire!(client.fenced_lock(name("fenced")), FencedGuard);
    send(client.fenced_lock(name("fenced")).token());

    let multi = client.multi_lock([name("m1"), name("m2")]);
    acquires_are_send!(multi, wait, lease);
    let guard = on_a_task(&multi, |multi| async move { multi.lock().await }).await;
    assert_eq!(guard.parts().len(), 2);
    spawned(guard.unlock()).await;

    let red = RedLock::new([client.clone()], name("red"));
    acquires_are_send!(red, wait, lease);
    let guard = on_a_task(&red, |red| async move { red.lock().await }).await;
    assert_eq!(guard.held_on(), 1);
    spawned(guard.unlock()).await;

    let fence = client.fence(name("fence"));
    send(fence.seen());
    send(fence.set(1, "k", "v"));
    send(fence.hset(1, "h", "f", "v"));
    send(fence.get::<Option<String>>(1, "k"));
    send(fence.eval::<i64>(1, "return 1", &[], &[]));

    let sem = client.semaphore(name("sem"));
    send(sem.try_set_permits(1));
    send(sem.add_permits(1));
    send(sem.available_permits());
    send(sem.drain_permits());
    send(sem.acquire(1));
    send(sem.try_acquire(1));
    send(sem.try_acquire_for(1, wait));
    send(sem.release(1));
    send(sem.delete());
    assert!(on_a_task(&sem, |sem| async move { sem.try_set_permits(1).await }).await);
    on_a_task(&sem, |sem| async move { sem.acquire(1).await }).await;
    assert_eq!(sem.available_permits().await.unwrap(), 0);

    let permits = client.permit_semaphore(name("permits"));
    send(permits.try_set_permits(1));
    send(permits.add_permits(1));
    send(permits.available_permits());
    send(permits.acquired_permits());
    send(permits.permits());
    send(permits.acquire());
    send(permits.acquire_with_lease(lease));
    send(permits.try_acquire());
    send(permits.try_acquire_for(wait, None));
    send(permits.release_id("00"));
    send(permits.delete());
    assert!(permits.try_set_permits(1).await.unwrap());
    let permit = on_a_task(&permits, |permits| async move { permits.acquire().await }).await;
    assert_eq!(permits.acquired_permits().await.unwrap(), 1);
    spawned(permit.release()).await;
    assert_eq!(permits.acquired_permits().await.unwrap(), 0);

    let latch = client.count_down_latch(name("latch"));
    send(latch.try_set_count(1));
    send(latch.count_down());
    send(latch.count());
    send(latch.wait());
    send(latch.wait_for(wait));
    send(latch.delete());
    assert!(latch.try_set_count(1).await.unwrap());
    let waiting = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait().await }
    });
    on_a_task(&latch, |latch| async move { latch.count_down().await }).await;
    waiting.await.unwrap().unwrap();

    send(Client::connect(&server.url()));
    send(client.shutdown_keeping_locks());
    send(client.shutdown());
    on_a_task(&client, |closing| async move { closing.shutdown().await }).await;
    assert!(client.lock(name("after")).try_lock().await.is_err());
}
