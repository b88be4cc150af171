//! Every primitive relock has, declared once, in [`with_primitives`]'s table: the name a lock
//! type's handles are told apart by, the `kind` label of its metrics, and what the blocking API
//! and a [`MultiLock`](crate::MultiLock) make of it; and every kind of thing `inspect` finds in
//! Redis, with its label, the words a sentence names it by, how an operator frees it, and the
//! key prefixes it brings. A new primitive is one row there, besides its own module, its
//! constructor on [`Client`](crate::Client) and its re-export; one that brings a new shape of
//! keys is a row in each part, and the rule that tells its shape apart in `inspect`.

/// Hands the table of every primitive and every kind to the macro `$then`, which makes of it
/// what its module needs ([`Primitive`] here, the blocking handles in `blocking`, the parts of a
/// `MultiLock`, `inspect::Kind`, the key prefixes in `names`, `Client::force_unlock`).
///
/// The table has two parts. `primitives` has a row per type a user makes, `Variant = "tag",
/// shape`: the type's name at the crate's root, its lower-case name (the metrics' `kind` label),
/// and its shape:
///
/// - `handle(constructor, "words", Guard, delay | plain)`: a lock type made by
///   `Client::constructor(name)` and taken as a `Guard`, with a lock-delay (`delay`) or not: the
///   blocking API and a `MultiLock` take it as they are;
/// - `side(Guard)`: a lock type made from another (a read-write lock's sides): a `MultiLock`
///   part, and blocking as it is;
/// - `other`: a primitive of another shape, whose blocking API is written by hand.
///
/// `kinds` has a row per shape of keys a name can hold, `Kind = "label", "words", class, keys
/// { … }`: the `inspect::Kind` variant, its label (`relock ls --type`, `--json`), how a sentence
/// names it, and its class:
///
/// - `lock(|client, seen| expression)`: a lock, which `Client::force_unlock` frees by the
///   expression (`client` a [`Client`](crate::Client), `seen` the
///   [`Inspection`](crate::inspect::Inspection));
/// - `sync`: a synchronizer, which nobody force-unlocks.
///
/// Its `keys` are the prefixes it brings, each `NAME = "prefix", role;` (the `names::prefix`
/// constant), `role` being `key` for a key kept beside a name, `channel` for a channel, or
/// `name` for the start of a name. A primitive that keeps a shape Redis already holds (a
/// `SpinLock` and a `NonReentrantLock` keep a `Lock`'s hash) adds no kind: it is found as that
/// one. How `inspect` tells the kinds apart is its own (`inspect/describe.rs`).
macro_rules! with_primitives {
    ($then:ident) => {
        $then! {
            primitives {
                /// [`Lock`](crate::Lock).
                Lock = "lock", handle(lock, "reentrant lock", LockGuard, delay),
                /// [`FairLock`](crate::FairLock).
                FairLock = "fair_lock", handle(fair_lock, "fair lock", LockGuard, delay),
                /// [`SpinLock`](crate::SpinLock).
                SpinLock = "spin_lock", handle(spin_lock, "spin lock", LockGuard, plain),
                /// [`ReadLock`](crate::ReadLock), a read-write lock's read side.
                ReadLock = "read_lock", side(LockGuard),
                /// [`WriteLock`](crate::WriteLock), a read-write lock's write side.
                WriteLock = "write_lock", side(LockGuard),
                /// [`NonReentrantLock`](crate::NonReentrantLock).
                NonReentrantLock = "non_reentrant_lock",
                    handle(non_reentrant_lock, "non-reentrant lock", LockGuard, plain),
                /// [`NonReentrantFairLock`](crate::NonReentrantFairLock).
                NonReentrantFairLock = "non_reentrant_fair_lock",
                    handle(non_reentrant_fair_lock, "non-reentrant fair lock", LockGuard, plain),
                /// [`FencedLock`](crate::FencedLock).
                FencedLock = "fenced_lock", handle(fenced_lock, "fenced lock", FencedGuard, plain),
                /// [`MultiLock`](crate::MultiLock).
                MultiLock = "multi_lock", other,
                /// [`RedLock`](crate::RedLock).
                RedLock = "red_lock", other,
                /// [`Semaphore`](crate::Semaphore).
                Semaphore = "semaphore", other,
                /// [`PermitSemaphore`](crate::PermitSemaphore).
                PermitSemaphore = "permit_semaphore", other,
                /// [`CountDownLatch`](crate::CountDownLatch).
                Latch = "latch", other,
                /// [`Election`](crate::Election): a term is a hold of its lock.
                Election = "election", other,
            }
            kinds {
                /// A reentrant lock: a [`Lock`](crate::Lock), [`SpinLock`](crate::SpinLock),
                /// [`NonReentrantLock`](crate::NonReentrantLock), Redisson's `RLock`, or a
                /// [`FairLock`](crate::FairLock) that nobody waits for (they look alike).
                Lock = "lock", "lock",
                    lock(|client, seen| client.lock(&seen.name).force_unlock().await),
                    keys {
                        /// The channel a plain, fair or fenced lock's release publishes on (a
                        /// fair waiter's own channel adds `:<holder field>`).
                        LOCK_CHANNEL = "redisson_lock__channel", channel;
                        /// An unlock's replay key (Redisson's word: "latch").
                        REPLAY = "redisson_unlock_latch", key;
                        /// A lock's hand-off claim.
                        CLAIM = "relock_claim", key;
                        /// A lock-delay's shadow lease.
                        LEASE = "relock_lease", key;
                    }
                /// A fair lock with waiters queued.
                FairLock = "fair", "fair lock",
                    lock(|client, seen| client.fair_lock(&seen.name).force_unlock().await),
                    keys {
                        /// A fair lock's queue of waiters.
                        QUEUE = "redisson_lock_queue", key;
                        /// A fair lock's waiters' deadlines.
                        TIMEOUT = "redisson_lock_timeout", key;
                        /// A fair lock's live waiters.
                        FAIR_ALIVE = "relock_fair_alive", key;
                    }
                /// A read-write lock, held in [`Inspection::mode`](crate::inspect::Inspection::mode).
                RwLock = "rw", "read-write lock",
                    lock(|client, seen| {
                        let rw = client.rw_lock(&seen.name);
                        match seen.mode.as_deref() {
                            Some("read") => rw.read().force_unlock().await,
                            _ => rw.write().force_unlock().await,
                        }
                    }),
                    keys {
                        /// A read-write lock's channel, which readers and writers share.
                        RW_CHANNEL = "redisson_rwlock", channel;
                    }
                /// A fenced lock (its token counter exists), held or not.
                FencedLock = "fenced", "fenced lock",
                    lock(|client, seen| client.fenced_lock(&seen.name).force_unlock().await),
                    keys {
                        /// A fenced lock's token counter.
                        TOKEN = "redisson_lock_token", key;
                        /// A fence's high-water mark.
                        FENCE = "relock_fence", key;
                    }
                /// A leader election ([`Election`](crate::Election)), led or not: the fenced
                /// lock named `relock_election:<election>`, whose holder is the leader and
                /// whose token the epoch.
                Election = "election", "election",
                    lock(|client, seen| {
                        match seen.election() {
                            Some(election) => client.election(election).force_vacate().await,
                            None => client.fenced_lock(&seen.name).force_unlock().await,
                        }
                    }),
                    keys {
                        /// What an election's lock name starts with: `relock_election:<election>`
                        /// (a name, not `<prefix>:{<name>}`: its own keys put the whole of it in
                        /// braces, as any lock's do).
                        ELECTION = "relock_election:", name;
                        /// An election's history, a stream beside its lock
                        /// (`lua/election/history.lua`).
                        HISTORY = "relock_election_log", key;
                        /// The channel an election's changes are published on, for its watchers.
                        CHANGES = "relock_election_changes", channel;
                    }
                /// A semaphore (someone waits on a semaphore's channel).
                Semaphore = "semaphore", "semaphore", sync,
                    keys {
                        /// Both semaphores' channel.
                        SEMAPHORE_CHANNEL = "redisson_sc", channel;
                        /// A synchronizer's request key.
                        REQUEST = "relock_request", key;
                    }
                /// A permit semaphore: permits with ids and leases.
                PermitSemaphore = "permits", "permit semaphore", sync, keys {}
                /// A count-down latch (someone waits on a latch's channel).
                CountDownLatch = "latch", "count-down latch", sync,
                    keys {
                        /// A count-down latch's channel: `<prefix>{<name>}`, braces and all, with
                        /// no `:`.
                        LATCH_CHANNEL = "redisson_countdownlatch__channel__", channel;
                    }
                /// A count that is a [`Semaphore`](crate::Semaphore)'s or a
                /// [`CountDownLatch`](crate::CountDownLatch)'s: Redis keeps both as a number,
                /// and only a waiter's channel tells them apart.
                Counter = "counter", "semaphore or latch (a count; nobody waits on it to tell which)",
                    sync, keys {}
            }
        }
    };
}
pub(crate) use with_primitives;

/// Declares [`Primitive`] from the table's rows.
macro_rules! declare {
    (
        primitives {
            $($(#[$doc:meta])* $Variant:ident = $tag:literal, $shape:ident $(($($how:tt)*))?,)*
        }
        kinds { $($kinds:tt)* }
    ) => {
        /// A primitive relock has: what a metric's `kind` label says, and what a lock type's
        /// handle is of (two handles on one name are one lock only when theirs match).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub(crate) enum Primitive {
            $($(#[$doc])* $Variant,)*
        }

        impl Primitive {
            /// Every primitive, in declaration order (`ALL[p as usize] == p`).
            #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
            pub(crate) const ALL: &'static [Primitive] = &[$(Primitive::$Variant,)*];

            /// Its lower-case name, as metrics label it.
            pub(crate) fn tag(self) -> &'static str {
                match self {
                    $(Primitive::$Variant => $tag,)*
                }
            }
        }
    };
}

with_primitives!(declare);

#[cfg(test)]
mod tests {
    use super::Primitive;

    #[test]
    fn each_primitive_sits_at_its_own_place_with_its_own_tag() {
        for (i, p) in Primitive::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i, "{p:?}");
        }
        let mut tags: Vec<_> = Primitive::ALL.iter().map(|p| p.tag()).collect();
        tags.sort_unstable();
        tags.dedup();
        assert_eq!(
            tags.len(),
            Primitive::ALL.len(),
            "two primitives share a tag"
        );
    }
}
