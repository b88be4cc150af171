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
//! // The composed acquire script: the claim's rules (`lua/common/claim.lua`), the lease's, then
//! // the lock's own acquire (`lua/lock/acquire.lua`).
//! assert!(scripts::ACQUIRE.starts_with("-- The hand-off claim relock_claim:{<name>}"));
//! assert!(scripts::ACQUIRE.contains("-- Acquire a reentrant lock"));
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
        // Read by the tests only.
        #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
        pub const ALL: &[(&str, &str)] = &[$((stringify!($name), $name)),+];
    };
}

catalogue! {
    /// Takes a hold of a reentrant lock (also a spin lock's and a fenced lock's), or claims
    /// its next hand-off: `lua/lock/acquire.lua`.
    ACQUIRE = ["common/claim", "common/lease", "lock/acquire"];
    /// Releases one hold of a reentrant lock: `lua/lock/release.lua`.
    RELEASE = ["common/claim", "common/replay", "lock/release"];
    /// Extends the lease of many reentrant locks' holds at once: `lua/lock/renew.lua`.
    RENEW = ["common/lease", "lock/renew"];
    /// Deletes a reentrant lock whoever holds it: `lua/lock/force_release.lua`.
    FORCE_RELEASE = ["common/claim", "common/hash", "lock/force_release"];

    /// Takes a hold of a fair lock, or queues for it: `lua/fair/acquire.lua` after the queue's
    /// rules (`lua/fair/queue.lua`).
    FAIR_ACQUIRE = ["common/lease", "fair/queue", "fair/acquire"];
    /// Releases one hold of a fair lock and wakes the head of its queue: `lua/fair/release.lua`.
    FAIR_RELEASE = ["common/replay", "fair/queue", "fair/release"];
    /// Deletes a fair lock whoever holds it: `lua/fair/force_release.lua`.
    FAIR_FORCE_RELEASE = ["common/hash", "fair/queue", "fair/force_release"];
    /// Takes a waiter out of a fair lock's queue: `lua/fair/leave.lua`.
    FAIR_LEAVE = ["fair/queue", "fair/leave"];

    /// Takes a read hold of a read-write lock: `lua/rw/read_acquire.lua` after the readers'
    /// rules (`lua/rw/readers.lua`).
    RW_READ_ACQUIRE = ["common/claim", "common/lease", "rw/readers", "rw/read_acquire"];
    /// Takes the write hold of a read-write lock: `lua/rw/write_acquire.lua`.
    RW_WRITE_ACQUIRE = ["common/claim", "common/lease", "rw/readers", "rw/write_acquire"];
    /// Releases one read hold of a read-write lock: `lua/rw/read_release.lua`.
    RW_READ_RELEASE = ["common/claim", "common/replay", "rw/readers", "rw/read_release"];
    /// Releases one write hold of a read-write lock: `lua/rw/write_release.lua`.
    RW_WRITE_RELEASE = ["common/claim", "common/replay", "rw/readers", "rw/write_release"];
    /// Deletes a read-write lock in a given mode whoever holds it: `lua/rw/force_release.lua`.
    RW_FORCE_RELEASE = ["common/claim", "common/hash", "rw/readers", "rw/force_release"];
    /// Extends the leases of many read holds at once: `lua/rw/renew_read.lua`.
    RW_RENEW_READ = ["common/hash", "common/lease", "rw/readers", "rw/renew_read"];

    /// Takes several reentrant locks of one owner at once, all or none:
    /// `lua/multi/acquire.lua`.
    MULTI_ACQUIRE = ["common/claim", "common/lease", "multi/acquire"];
    /// Releases one hold of each of several reentrant locks of one owner at once:
    /// `lua/multi/release.lua`.
    MULTI_RELEASE = ["common/claim", "common/replay", "multi/release"];

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
    INSPECT = ["common/hash", "inspect"];
    /// Withdraws a waiter's claim on a lock's next hand-off: `lua/unclaim.lua`.
    UNCLAIM = ["common/claim", "unclaim"];
    /// Drops every hold of one holder at once, whatever the lock's type, as its client shuts
    /// down: `lua/abandon.lua` after the readers' rules.
    ABANDON = ["rw/readers", "abandon"];
}

#[cfg(test)]
mod tests {
    use super::ALL;

    /// The Lua local functions `source` defines, in order, without comments.
    fn defined(source: &str) -> Vec<&str> {
        code(source)
            .filter_map(|line| line.trim_start().strip_prefix("local function "))
            .filter_map(|rest| rest.split('(').next())
            .collect()
    }

    /// `source`'s lines with their comments cut off.
    fn code(source: &str) -> impl Iterator<Item = &str> {
        source
            .lines()
            .map(|line| line.split("--").next().unwrap_or(""))
    }

    /// Whether `line` calls `name` (not a longer name that ends with it).
    fn calls(line: &str, name: &str) -> bool {
        let call = format!("{name}(");
        line.match_indices(&call).any(|(at, _)| {
            !line[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    }

    #[test]
    fn every_fragment_a_script_calls_comes_before_it_once() {
        let mut all: Vec<&str> = ALL.iter().flat_map(|(_, source)| defined(source)).collect();
        all.sort_unstable();
        all.dedup();
        for (script, source) in ALL {
            let own = defined(source);
            for name in &own {
                let times = own.iter().filter(|n| *n == name).count();
                assert_eq!(times, 1, "{script} defines {name} {times} times");
            }
            for name in &all {
                let definition = format!("local function {name}(");
                let first_call =
                    code(source).position(|line| calls(line, name) && !line.contains(&definition));
                let defined_at = code(source).position(|line| line.contains(&definition));
                if let Some(call) = first_call {
                    assert!(
                        defined_at.is_some_and(|at| at < call),
                        "{script} calls {name} without its fragment before"
                    );
                }
            }
        }
    }

    #[test]
    fn the_claim_is_written_and_parsed_in_one_fragment_only() {
        let pattern = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/common/claim.lua"));
        assert!(pattern.contains("'^(%d+):(.+)$'"));
        for (script, source) in ALL {
            let rest = source.replacen(pattern, "", 1);
            assert!(!rest.contains("%d+"), "{script} parses the claim itself");
            assert!(
                !rest.contains(".. ':' .. ARGV"),
                "{script} writes a claim itself"
            );
        }
    }
}
