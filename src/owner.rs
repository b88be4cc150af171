//! Who holds a lock.
//!
//! A hold belongs to an *owner*. By default the owner is the current tokio task, so nested async
//! calls in one task re-enter the lock and a spawned task is someone else, the same rule as
//! Redisson's threads. Outside any task the owner is the current thread. An explicit [`Owner`]
//! overrides the default: pass it to work that moves between tasks, or give each `join!` branch
//! its own so they exclude each other.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

static NEXT_EXPLICIT: AtomicU64 = AtomicU64::new(1);
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_ID: Cell<u64> = const { Cell::new(0) };
    /// The owner of the task this thread ran last, so a task that locks in a loop does not
    /// format its id every time.
    static LAST_TASK: RefCell<Option<(tokio::task::Id, Owner)>> = const { RefCell::new(None) };
}

/// The identity a hold is counted against, unique within this process.
///
/// In Redis the holder field is `<client-uuid>:<owner-id>`, where the owner id reads `task-<n>`
/// for a tokio task, `thread-<n>` for a thread outside any task and `owner-<n>` for an owner made
/// with [`Owner::new`].
///
/// # Examples
///
/// Share one hold between a task and the task it spawns:
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// let owner = relock::Owner::new();
/// let lock = client.lock("report").owned_by(owner.clone());
/// let guard = lock.lock().await?;
/// let worker = tokio::spawn({
///     let lock = lock.clone();
///     async move { lock.hold_count().await }      // the same owner: sees the hold
/// });
/// assert_eq!(worker.await.unwrap()?, 1);
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
///
/// Two `join!` branches of one task are one owner, so they re-enter each other's hold instead of
/// waiting for it (as Redisson's two calls on one thread do); an owner per branch makes them
/// exclude each other, as two tasks would:
///
/// ```no_run
/// # async fn run(client: relock::Client) -> relock::Result<()> {
/// use relock::Owner;
/// let lock = client.lock("report");
/// // One task, one owner: both branches hold the lock at once (hold count 2).
/// let (a, b) = tokio::join!(lock.lock(), lock.lock());
/// assert_eq!(a?.hold_count().await?, 2);
/// drop(b?);
/// // An owner per branch: they exclude each other, as two tasks would.
/// let (first, second) = (lock.clone().owned_by(Owner::new()), lock.owned_by(Owner::new()));
/// let (a, b) = tokio::join!(
///     async { first.with(|_| async { /* one at a time */ }).await },
///     async { second.with(|_| async { /* ... */ }).await },
/// );
/// a?;
/// b?;
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner(Arc<str>);

impl Owner {
    /// A new explicit owner, distinct from every task, thread and other owner of this process.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Owner {
        let n = NEXT_EXPLICIT.fetch_add(1, Ordering::Relaxed);
        Owner(format!("owner-{n}").into())
    }

    /// The default owner here: the current tokio task, or the current thread outside a task.
    pub fn current() -> Owner {
        match tokio::task::try_id() {
            Some(id) => LAST_TASK.with(|last| {
                let mut last = last.borrow_mut();
                match &*last {
                    Some((last_id, owner)) if *last_id == id => owner.clone(),
                    _ => {
                        let owner = Owner(format!("task-{id}").into());
                        *last = Some((id, owner.clone()));
                        owner
                    }
                }
            }),
            None => {
                let n = THREAD_ID.with(|cell| {
                    if cell.get() == 0 {
                        cell.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed));
                    }
                    cell.get()
                });
                Owner(format!("thread-{n}").into())
            }
        }
    }

    /// The owner's id as written after the client id in the holder field.
    pub fn id(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({})", self.0)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
