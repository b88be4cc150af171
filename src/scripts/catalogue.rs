//! Every Lua script relock sends, each composed from its parts: the one place that says which.
//!
//! The scripts live under `lua/`, a type's own in `lua/<type>/` (`lock`, `fair`, `rw`, `multi`,
//! `fence`) and the few that every lock type shares at the top (`inspect`, `unclaim`,
//! `abandon`). A rule that several scripts follow is written once, as Lua local functions in a
//! fragment: `lua/common/` for the rules of every type (the hand-off claim's format, the replay
//! key, the type check of a lock hash, the lease that never shortens), and a type's own
//! fragment in its folder (`lua/fair/queue.lua`, `lua/rw/readers.lua`, `lua/fence/check.lua`).
//! A script's source is its fragments, in the order listed, then its own file: that text is what
//! the client hashes, loads and runs by `EVALSHA`, and each script's header comment gives its
//! KEYS / ARGV / reply contract. A fragment reads only the keys and arguments its callers pass
//! it, so every key a script touches is still one of its `KEYS` (as a cluster requires).
//!
//! With the `testing` feature the catalogue is public, as `relock::testing::scripts`: tests that
//! run a script directly (`EVAL` on a real server), or compute the SHA1 it is sent under, take
//! its source from here rather than joining the files themselves.
//!
//! ```
//! use relock::testing::scripts;
//! // The composed acquire script: its fragments, then the lock's own acquire.
//! assert!(scripts::ACQUIRE.ends_with(include_str!("../lua/lock/acquire.lua")));
//! assert!(scripts::ALL.contains(&("ACQUIRE", scripts::ACQUIRE)));
//! ```
// Public so that `testing` can re-export it; without that feature nothing outside the crate
// sees it.
#![cfg_attr(not(feature = "testing"), allow(unreachable_pub))]

/// Defines one `&str` constant per script, each the concatenation of `lua/<part>.lua` for its
/// parts (one path style: from the crate root), and [`ALL`].
macro_rules! catalogue {
    ($($(#[$doc:meta])* $name:ident = [$($part:literal),+ $(,)?];)+) => {
        $(
            $(#[$doc])*
            pub const $name: &str = concat!($(
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/", $part, ".lua"))
            ),+);
        )+

        /// Every script above, as (its constant's name, its source), in the order listed.
        pub const ALL: &[(&str, &str)] = &[$((stringify!($name), $name)),+];
    };
}

catalogue! {
    /// Takes a hold of a reentrant lock (also a spin lock's and a fenced lock's), or claims
    /// its next hand-off: `lua/lock/acquire.lua`.
    ACQUIRE = ["lock/acquire"];
    /// Releases one hold of a reentrant lock: `lua/lock/release.lua`.
    RELEASE = ["lock/release"];
    /// Extends the lease of many reentrant locks' holds at once: `lua/lock/renew.lua`.
    RENEW = ["lock/renew"];
    /// Deletes a reentrant lock whoever holds it: `lua/lock/force_release.lua`.
    FORCE_RELEASE = ["lock/force_release"];

    /// Takes a hold of a fair lock, or queues for it: `lua/fair/acquire.lua` after the queue's
    /// rules (`lua/fair/queue.lua`).
    FAIR_ACQUIRE = ["fair/queue", "fair/acquire"];
    /// Releases one hold of a fair lock and wakes the head of its queue: `lua/fair/release.lua`.
    FAIR_RELEASE = ["fair/queue", "fair/release"];
    /// Deletes a fair lock whoever holds it: `lua/fair/force_release.lua`.
    FAIR_FORCE_RELEASE = ["fair/queue", "fair/force_release"];
    /// Takes a waiter out of a fair lock's queue: `lua/fair/leave.lua`.
    FAIR_LEAVE = ["fair/queue", "fair/leave"];

    /// Takes a read hold of a read-write lock: `lua/rw/read_acquire.lua` after the readers'
    /// rules (`lua/rw/readers.lua`).
    RW_READ_ACQUIRE = ["rw/readers", "rw/read_acquire"];
    /// Takes the write hold of a read-write lock: `lua/rw/write_acquire.lua`.
    RW_WRITE_ACQUIRE = ["rw/readers", "rw/write_acquire"];
    /// Releases one read hold of a read-write lock: `lua/rw/read_release.lua`.
    RW_READ_RELEASE = ["rw/readers", "rw/read_release"];
    /// Releases one write hold of a read-write lock: `lua/rw/write_release.lua`.
    RW_WRITE_RELEASE = ["rw/readers", "rw/write_release"];
    /// Deletes a read-write lock in a given mode whoever holds it: `lua/rw/force_release.lua`.
    RW_FORCE_RELEASE = ["rw/readers", "rw/force_release"];
    /// Extends the leases of many read holds at once: `lua/rw/renew_read.lua`.
    RW_RENEW_READ = ["rw/readers", "rw/renew_read"];

    /// Takes several reentrant locks of one owner at once, all or none:
    /// `lua/multi/acquire.lua`.
    MULTI_ACQUIRE = ["multi/acquire"];
    /// Releases one hold of each of several reentrant locks of one owner at once:
    /// `lua/multi/release.lua`.
    MULTI_RELEASE = ["multi/release"];

    /// The fence's check alone, which every fenced script starts with (a user's fenced script
    /// is this followed by the user's Lua): `lua/fence/check.lua`.
    FENCE_CHECK = ["fence/check"];
    /// A fenced SET: `lua/fence/set.lua` after the check.
    FENCED_SET = ["fence/check", "fence/set"];
    /// A fenced HSET of one field: `lua/fence/hset.lua` after the check.
    FENCED_HSET = ["fence/check", "fence/hset"];
    /// A fenced GET: `lua/fence/get.lua` after the check.
    FENCED_GET = ["fence/check", "fence/get"];

    /// Reads a lock's state, whatever its type: `lua/inspect.lua`.
    INSPECT = ["inspect"];
    /// Withdraws a waiter's claim on a lock's next hand-off: `lua/unclaim.lua`.
    UNCLAIM = ["unclaim"];
    /// Drops every hold of one holder at once, whatever the lock's type, as its client shuts
    /// down: `lua/abandon.lua` after the readers' rules.
    ABANDON = ["rw/readers", "abandon"];
}
