//! Every Lua script relock sends, each composed from its parts: the one place that says which.
//!
//! The scripts live under `lua/`, a type's own in `lua/<type>/` (`lock`, `fair`, `rw`, `multi`,
//! `fence`) and the two that every lock type shares at the top (`inspect`, `unclaim`). A rule
//! that several scripts follow is written once, as Lua local functions in a fragment:
//! `lua/common/` for the rules of every type (the hand-off claim's format, the replay
//! key, the type check of a lock hash, the lease that never shortens), and a type's own
//! fragment in its folder (`lua/fair/queue.lua`, `lua/rw/readers.lua`, `lua/fence/check.lua`).
//! A script's source is the fragments its header's `-- Needs: a/b, c/d` line names, in that
//! order (of each, the top-level functions the script reaches: `build.rs` prunes the others),
//! then its own file, run as one function whose error tables are returned as replies (see
//! the `@script` arm below): that text is what the client hashes, loads and runs by `EVALSHA`,
//! and each script's header comment gives its KEYS / ARGV / reply contract. A fragment reads
//! only the keys and arguments its callers pass it, so every key a script touches is still one
//! of its `KEYS` (as a cluster requires).
//!
//! The constants are written by `build.rs`, one per file, named after its path
//! (`lua/fair/acquire.lua` is `FAIR_ACQUIRE`), documented by the file's first comment
//! paragraph: a new script, or a new type's folder of them, needs no Rust here.
//!
//! With the `testing` feature the catalogue is public, as `relock::testing::scripts`: tests that
//! run a script directly (`EVAL` on a real server), or compute the SHA1 it is sent under, take
//! its source from here rather than joining the files themselves.
//!
//! ```
//! use relock::testing::scripts;
//! // The composed acquire script: the key checks (`lua/common/counter.lua`), the claim's rules
//! // (`lua/common/claim.lua`), the lease's, then the lock's own acquire (`lua/lock/acquire.lua`,
//! // whose header says `-- Needs:` those three), run as one function whose errors are replies.
//! assert!(scripts::LOCK_ACQUIRE.starts_with("local CALL = {}\nlocal function relock_script()"));
//! assert!(scripts::LOCK_ACQUIRE.contains("local function on_key("));
//! assert!(scripts::LOCK_ACQUIRE.contains("local function claim_take("));
//! assert!(scripts::LOCK_ACQUIRE.contains("-- Acquire a reentrant lock"));
//! // Of each fragment, a script carries the functions it reaches: a release takes no claim.
//! assert!(scripts::COMMON_CLAIM.contains("local function claim_take("));
//! assert!(!scripts::LOCK_RELEASE.contains("local function claim_take("));
//! assert!(scripts::ALL.contains(&("LOCK_ACQUIRE", scripts::LOCK_ACQUIRE)));
//! // Fragments have constants too, but are no scripts of their own.
//! assert!(!scripts::ALL.iter().any(|(name, _)| *name == "COMMON_CLAIM"));
//! ```
// Public so that `testing` can re-export it; without that feature nothing outside the crate
// sees it.
#![cfg_attr(not(feature = "testing"), allow(unreachable_pub))]

/// Defines one `&str` constant per file of `lua/`, each the concatenation of `lua/<part>.lua`
/// for its parts (one path style: from the crate root). A script's parts run inside
/// `relock_script`, whose errors the lines after it turn into the script's reply: see
/// the `@script` arm.
macro_rules! catalogue {
    ($(#[doc = $doc:expr] $name:ident = $kind:ident [$($part:literal),+ $(,)?];)+) => {
        $(
            #[doc = $doc]
            // A fragment's own constant is read by the tests only.
            #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
            pub const $name: &str = catalogue!(@$kind $($part),+);
        )+
    };
    (@fragment $($part:literal),+) => {
        concat!($(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/", $part, ".lua"))),+)
    };
    // Every script fails with an error reply the same way on every server from Redis 6.0. A
    // fragment fails a script by raising an error table (`error({err = 'WRONGTYPE … [key 2]'})`,
    // lua/common/counter.lua), which Redis 7.0 and later (and Valkey) pass through as the reply
    // but Redis 6.x cannot: its error handler concatenates the error to a string, and the reply
    // becomes "ERR Error running script … attempt to concatenate local 'err' (a table value)".
    // So the script's parts run as one function. On 7.0 and later (`redis.REDIS_VERSION` is
    // there) it is simply called, and fails as it always has. Before 7.0 it runs under `pcall`,
    // and an error table it raised is *returned*, as a table with an `err` field is an error
    // reply on every version. So is a command's error, which 6.x hands over as a string that
    // starts with its code (`WRONGTYPE Operation against …`): returned as the command gave it,
    // as 7.0 does, rather than as "ERR Error running script … WRONGTYPE …". Any other error (a
    // Lua mistake, `user_script:3: attempt to …`) is raised again as it was. (Under `pcall` Redis 7 would hand over an error table as a
    // string, which is why 7.0 and later do without.) The parts' locals are the function's
    // locals as they were the chunk's, and a write made before an error stays made, as Redis
    // keeps it either way. `CALL` is the run's own table, where a fragment keeps what it learns
    // for the rest of the run (the server's time): fresh per run here, as the function library's
    // callbacks make it fresh per call.
    (@script $name:literal) => {
        concat!(
            "local CALL = {}\n",
            "local function relock_script()\n",
            include_str!(concat!(env!("OUT_DIR"), "/scripts/", $name, ".lua")),
            "end\n",
            "if redis.REDIS_VERSION then\n",
            "    return relock_script()\n",
            "end\n",
            "local ok, reply = pcall(relock_script)\n",
            "if ok or (type(reply) == 'table' and reply.err) then\n",
            "    return reply\n",
            "end\n",
            "if type(reply) == 'string' and string.match(reply, '^%u[%u_]* ') then\n",
            "    return {err = reply}\n",
            "end\n",
            "error(reply, 0)\n",
        )
    };
}

// Written by `build.rs` from the files under `lua/` and their `-- Needs:` lines.
include!(concat!(env!("OUT_DIR"), "/catalogue.rs"));

/// Every script above as one function library, without its `#!lua name=` line and with `@ID@`
/// for its id (see [`super::library`]); written by `build.rs`.
pub(crate) const LIBRARY_BODY: &str = include_str!(concat!(env!("OUT_DIR"), "/library.lua"));

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
    fn the_meter_keeps_every_script_apart() {
        assert!(
            ALL.len() < crate::meter::SCRIPT_SLOTS,
            "{} scripts, {} meter slots: raise meter::SCRIPT_SLOTS",
            ALL.len(),
            crate::meter::SCRIPT_SLOTS
        );
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
        let fragment = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/lua/common/claim.lua"));
        assert!(fragment.contains("'^(%d+):(.+)$'"));
        // A script carries the fragment's functions it reaches, each line as the fragment has it.
        let theirs = |line: &str| fragment.lines().any(|own| own == line);
        for (script, source) in ALL {
            for line in source.lines().filter(|line| !theirs(line)) {
                assert!(!line.contains("%d+"), "{script} parses the claim itself");
                assert!(
                    !line.contains(".. ':' .. ARGV"),
                    "{script} writes a claim itself"
                );
            }
        }
    }
}
