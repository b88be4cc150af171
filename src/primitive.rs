//! Every primitive relock has, declared once, in [`with_primitives`]'s table: the name a lock
//! type's handles are told apart by, the `kind` label of its metrics, and what the blocking API
//! and a [`MultiLock`](crate::MultiLock) make of it. A new primitive is one row there, besides
//! its own module, its constructor on [`Client`](crate::Client) and its re-export.

/// Hands the table of every primitive to the macro `$then`, which makes of it what its module
/// needs ([`Primitive`] here, the blocking handles in `blocking`, the parts of a `MultiLock`).
///
/// A row is `Variant = "tag", shape`: the type's name at the crate's root, its lower-case name
/// (the metrics' `kind` label), and its shape:
///
/// - `handle(constructor, "words", Guard, delay | plain)`: a lock type made by
///   `Client::constructor(name)` and taken as a `Guard`, with a lock-delay (`delay`) or not: the
///   blocking API and a `MultiLock` take it as they are;
/// - `side(Guard)`: a lock type made from another (a read-write lock's sides): a `MultiLock`
///   part, and blocking as it is;
/// - `other`: a primitive of another shape, whose blocking API is written by hand.
macro_rules! with_primitives {
    ($then:ident) => {
        $then! {
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
    };
}
pub(crate) use with_primitives;

/// Declares [`Primitive`] from the table's rows.
macro_rules! declare {
    ($($(#[$doc:meta])* $Variant:ident = $tag:literal, $shape:ident $(($($how:tt)*))?,)*) => {
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
