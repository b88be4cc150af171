//! Every primitive relock has, declared once: the name a lock type's handles are told apart by
//! and the `kind` label of its metrics. A new primitive is one line here.

/// Declares [`Primitive`] from its rows: `Variant = "tag"`.
macro_rules! primitives {
    ($($(#[$doc:meta])* $Variant:ident = $tag:literal,)*) => {
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

primitives! {
    /// [`Lock`](crate::Lock).
    Lock = "lock",
    /// [`FairLock`](crate::FairLock).
    FairLock = "fair_lock",
    /// [`SpinLock`](crate::SpinLock).
    SpinLock = "spin_lock",
    /// [`ReadLock`](crate::ReadLock), a read-write lock's read side.
    ReadLock = "read_lock",
    /// [`WriteLock`](crate::WriteLock), a read-write lock's write side.
    WriteLock = "write_lock",
    /// [`FencedLock`](crate::FencedLock).
    FencedLock = "fenced_lock",
    /// [`MultiLock`](crate::MultiLock).
    MultiLock = "multi_lock",
    /// [`RedLock`](crate::RedLock).
    RedLock = "red_lock",
    /// [`Semaphore`](crate::Semaphore).
    Semaphore = "semaphore",
    /// [`PermitSemaphore`](crate::PermitSemaphore).
    PermitSemaphore = "permit_semaphore",
    /// [`CountDownLatch`](crate::CountDownLatch).
    Latch = "latch",
    /// [`Election`](crate::Election): a term is a hold of its lock.
    Election = "election",
}

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
