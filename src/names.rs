//! The Redis keys and channels of a lock, named as Redisson names them.
//!
//! The lock hash is the bare `<name>`; its auxiliary keys put the name in braces
//! (`redisson_lock__channel:{<name>}`), and Redis Cluster hashes `<name>` and `{<name>}` alike, so
//! all of a lock's keys share one slot. A name that already contains a `{…}` tag is the user's own
//! hash tag and is used as it is. On a cluster, a name whose braces would send its keys to
//! different slots is rejected ([`LockKeys::checked_for`]); one server has no slots, and takes
//! any name, as Redisson does.

use fred::bytes_utils::Str;
use fred::types::Key;

use crate::error::{Error, Result, Shown};

/// Makes [`prefix`] of the kinds' `keys` in the primitives' table.
macro_rules! prefixes {
    (
        primitives { $($primitives:tt)* }
        kinds {
            $(
                $(#[$doc:meta])* $Kind:ident = $label:literal, $words:literal,
                $class:ident $(($($unlock:tt)*))?,
                keys { $($(#[$key_doc:meta])* $Prefix:ident = $value:literal, $role:ident;)* }
            )*
        }
    ) => {
        /// Every prefix relock and Redisson put before a name (`<prefix>:{<name>}`, see
        /// [`prefixed`]), spelled once, in the primitives' table (each with the kind that brings
        /// it): the scripts' callers, `inspect` and the command line all take them from here.
        pub(crate) mod prefix {
            $($($(#[$key_doc])* pub(crate) const $Prefix: &str = $value;)*)*

            /// Every prefix, with its role.
            pub(crate) const ALL: &[(&str, super::Role)] =
                &[$($(($Prefix, super::Role::of(stringify!($role))),)*)*];

            /// The prefixes of the keys kept beside a name, none of which is a name itself.
            pub(crate) fn auxiliary() -> impl Iterator<Item = &'static str> {
                ALL.iter()
                    .filter(|(_, role)| *role == super::Role::Key)
                    .map(|(prefix, _)| *prefix)
            }
        }
    };
}

crate::primitive::with_primitives!(prefixes);

/// What a prefix starts: a key kept beside a name, a channel, or a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Key,
    Channel,
    Name,
}

impl Role {
    /// The role a table row spells `key`, `channel` or `name` (any other word fails the build).
    const fn of(word: &str) -> Role {
        match word.as_bytes() {
            b"key" => Role::Key,
            b"channel" => Role::Channel,
            b"name" => Role::Name,
            _ => panic!("a prefix's role is key, channel or name"),
        }
    }
}

/// The keys of one lock. Each is a shared string: making a command argument of it (`Key::from`)
/// copies nothing.
#[derive(Debug)]
pub(crate) struct LockKeys {
    /// The lock hash.
    pub(crate) name: Str,
    /// The channel a release publishes on.
    pub(crate) channel: Str,
    /// The hand-off claim: which waiter the lock's next free moment is promised to.
    pub(crate) claim: Str,
    /// The prefix of unlock replay keys: `<replay_prefix>:<request-id>`.
    pub(crate) replay_prefix: String,
}

impl LockKeys {
    /// The keys of lock `name`, which must not be empty. Whether they can work together
    /// depends on where they go: see [`checked_for`](Self::checked_for).
    pub(crate) fn new(name: &str) -> Result<LockKeys> {
        if name.is_empty() {
            return Err(Error::invalid("a lock name must not be empty"));
        }
        Ok(LockKeys {
            name: Str::from(name),
            channel: prefixed(prefix::LOCK_CHANNEL, name).into(),
            claim: prefixed(prefix::CLAIM, name).into(),
            replay_prefix: prefixed(prefix::REPLAY, name),
        })
    }

    /// The keys, if they can be used together on a cluster (`clustered`) or on one server
    /// (always): on a cluster a script's keys must share a slot, and a name whose braces
    /// (`user{42`) hash the lock and its channel or replay keys apart cannot be locked there.
    pub(crate) fn checked_for(self, clustered: bool) -> Result<LockKeys> {
        if !clustered {
            return Ok(self);
        }
        let slot = fred::util::redis_keyslot(self.name.as_bytes());
        let replay = format!("{}:0", self.replay_prefix);
        if fred::util::redis_keyslot(self.channel.as_bytes()) != slot
            || fred::util::redis_keyslot(replay.as_bytes()) != slot
            || fred::util::redis_keyslot(self.claim.as_bytes()) != slot
        {
            return Err(Error::invalid(format!(
                "lock name `{}` has braces that would put its keys in different cluster slots; \
                 use one non-empty `{{tag}}`, or no braces",
                Shown(&self.name)
            )));
        }
        Ok(self)
    }

    /// The keys of read-write lock `name`: the lock's, with Redisson's read-write channel
    /// `redisson_rwlock:{<name>}`, which readers and writers share.
    pub(crate) fn rw(name: &str) -> Result<LockKeys> {
        let mut keys = LockKeys::new(name)?;
        keys.channel = prefixed(prefix::RW_CHANNEL, name).into();
        Ok(keys)
    }

    /// A fresh replay key for one release request of client `client_id`: unique because the
    /// client id is, and cheap because it needs no randomness per request.
    pub(crate) fn replay_key(&self, client_id: &str) -> Key {
        use std::fmt::Write;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut replay = String::with_capacity(self.replay_prefix.len() + client_id.len() + 18);
        let _ = write!(replay, "{}:{client_id}:{n:x}", self.replay_prefix);
        Key::from(replay)
    }
}

/// The extra keys of a fair lock: its queue of waiters and their deadlines. Each waiter's wake-up
/// channel is the lock's channel followed by `:<holder field>`.
#[derive(Debug)]
pub(crate) struct FairKeys {
    /// The LIST of waiting holder fields, first come first.
    pub(crate) queue: Str,
    /// The ZSET of waiting holder fields → the moment (server clock, epoch ms) each loses its
    /// place unless it renews it.
    pub(crate) timeouts: Str,
    /// relock's own ZSET of its waiting holder fields → the moment (server clock, epoch ms)
    /// each counts as dead unless it runs again; Redisson neither reads nor writes it.
    pub(crate) alive: Str,
}

impl FairKeys {
    /// The keys of fair lock `name`, whose [`LockKeys`] were made (and checked) already: the
    /// same prefix rule puts them in the lock's slot.
    pub(crate) fn new(name: &str) -> FairKeys {
        FairKeys {
            queue: prefixed(prefix::QUEUE, name).into(),
            timeouts: prefixed(prefix::TIMEOUT, name).into(),
            alive: prefixed(prefix::FAIR_ALIVE, name).into(),
        }
    }
}

/// The keys of a semaphore ([`Semaphore`](crate::Semaphore) or
/// [`PermitSemaphore`](crate::PermitSemaphore)) or a [`CountDownLatch`](crate::CountDownLatch),
/// as Redisson names them, all in one cluster slot.
#[derive(Debug)]
pub(crate) struct CounterKeys {
    /// The counter: a semaphore's available permits, a latch's count.
    pub(crate) name: Str,
    /// The wake-up channel.
    pub(crate) channel: Str,
    /// A permit semaphore's leases, `{<name>}:timeout` (Redisson's `suffixName`).
    pub(crate) leases: Str,
    /// The prefix of request keys: `<request_prefix>:<client-id>:<n>`.
    request_prefix: String,
    /// What the keys are of, for an error message: "semaphore" or "latch".
    what: &'static str,
}

impl CounterKeys {
    /// The keys of semaphore `name`: its channel is `redisson_sc:{<name>}`.
    pub(crate) fn semaphore(name: &str) -> Result<CounterKeys> {
        CounterKeys::new(name, "semaphore", prefixed(prefix::SEMAPHORE_CHANNEL, name))
    }

    /// The keys of count-down latch `name`: its channel is
    /// `redisson_countdownlatch__channel__{<name>}`, braces and all whatever the name.
    pub(crate) fn latch(name: &str) -> Result<CounterKeys> {
        CounterKeys::new(name, "latch", latch_channel(name))
    }

    fn new(name: &str, what: &'static str, channel: String) -> Result<CounterKeys> {
        if name.is_empty() {
            return Err(Error::invalid(format!("a {what} name must not be empty")));
        }
        Ok(CounterKeys {
            name: Str::from(name),
            channel: channel.into(),
            leases: leases_key(name).into(),
            request_prefix: prefixed(prefix::REQUEST, name),
            what,
        })
    }

    /// The keys, if they can be used together on a cluster (`clustered`) or on one server
    /// (always): on a cluster they must share a slot, as for a lock
    /// ([`LockKeys::checked_for`]).
    pub(crate) fn checked_for(self, clustered: bool) -> Result<CounterKeys> {
        if !clustered {
            return Ok(self);
        }
        let slot = fred::util::redis_keyslot(self.name.as_bytes());
        let request = format!("{}:0", self.request_prefix);
        let others = [
            self.channel.as_bytes(),
            self.leases.as_bytes(),
            request.as_bytes(),
        ];
        if others
            .iter()
            .any(|key| fred::util::redis_keyslot(key) != slot)
        {
            return Err(Error::invalid(format!(
                "{} name `{}` has braces that would put its keys in different cluster slots; \
                 use one non-empty `{{tag}}` (not for a latch), or no braces",
                self.what,
                Shown(&self.name)
            )));
        }
        Ok(self)
    }

    /// A fresh request key of client `client_id`: what one acquire took or one release did,
    /// kept a little while so a retry or a read-back after a lost reply knows.
    pub(crate) fn request(&self, client_id: &str) -> Str {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Str::from(format!("{}:{client_id}:{n:x}", self.request_prefix))
    }
}

/// A count-down latch's channel: `redisson_countdownlatch__channel__{<name>}`, braces and all
/// whatever the name (Redisson's).
pub(crate) fn latch_channel(name: &str) -> String {
    format!("{}{{{name}}}", prefix::LATCH_CHANNEL)
}

/// A permit semaphore's leases: `{<name>}:timeout`, or `<name>:timeout` when the name has its
/// own tag (Redisson's `suffixName`).
pub(crate) fn leases_key(name: &str) -> String {
    if name.contains('{') {
        format!("{name}:timeout")
    } else {
        format!("{{{name}}}:timeout")
    }
}

/// The shadow lease of lock `name`'s lock-delay, `relock_lease:{<name>}` (in the lock's slot, as
/// its claim is).
pub(crate) fn lease_shadow(name: &str) -> String {
    prefixed(prefix::LEASE, name)
}

/// `PSUBSCRIBE` patterns for every channel a release of `name` publishes on: a lock's, each
/// fair waiter's, a read-write lock's, both semaphores' and a latch's (the name glob-escaped).
pub(crate) fn release_patterns(name: &str) -> Vec<String> {
    let escaped: String = name
        .chars()
        .flat_map(|c| {
            let special = matches!(c, '*' | '?' | '[' | ']' | '\\');
            special.then_some('\\').into_iter().chain([c])
        })
        .collect();
    vec![
        format!("{}*", prefixed(prefix::LOCK_CHANNEL, &escaped)),
        prefixed(prefix::RW_CHANNEL, &escaped),
        prefixed(prefix::SEMAPHORE_CHANNEL, &escaped),
        format!("{}{{{escaped}}}", prefix::LATCH_CHANNEL),
    ]
}

/// Redisson's `prefixName`: `prefix:{name}`, or `prefix:name` when the name has its own tag.
pub(crate) fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_prefix_is_spelled_once_and_only_keys_are_auxiliary() {
        let mut spellings: Vec<&str> = prefix::ALL.iter().map(|(p, _)| *p).collect();
        spellings.sort_unstable();
        spellings.dedup();
        assert_eq!(spellings.len(), prefix::ALL.len(), "two prefixes alike");
        let auxiliary: Vec<&str> = prefix::auxiliary().collect();
        for key in [
            prefix::QUEUE,
            prefix::TOKEN,
            prefix::REPLAY,
            prefix::HISTORY,
        ] {
            assert!(auxiliary.contains(&key), "{key}");
        }
        for not_key in [prefix::LOCK_CHANNEL, prefix::ELECTION, prefix::CHANGES] {
            assert!(!auxiliary.contains(&not_key), "{not_key}");
        }
        assert_eq!(auxiliary.len(), 10);
    }

    #[test]
    fn plain_names_get_braced_auxiliary_keys() {
        let keys = LockKeys::new("order:42").unwrap();
        assert_eq!(keys.channel, "redisson_lock__channel:{order:42}");
        assert_eq!(keys.replay_prefix, "redisson_unlock_latch:{order:42}");
    }

    #[test]
    fn fair_keys_are_redissons() {
        let keys = FairKeys::new("order:42");
        assert_eq!(keys.queue, "redisson_lock_queue:{order:42}");
        assert_eq!(keys.timeouts, "redisson_lock_timeout:{order:42}");
        assert_eq!(keys.alive, "relock_fair_alive:{order:42}");
        let tagged = FairKeys::new("{user:7}:profile");
        assert_eq!(tagged.queue, "redisson_lock_queue:{user:7}:profile");
    }

    #[test]
    fn a_user_tag_is_kept() {
        let keys = LockKeys::new("{user:7}:profile").unwrap();
        assert_eq!(keys.channel, "redisson_lock__channel:{user:7}:profile");
    }

    #[test]
    fn counter_keys_are_redissons() {
        let sem = CounterKeys::semaphore("jobs").unwrap();
        assert_eq!(sem.channel, "redisson_sc:{jobs}");
        assert_eq!(sem.leases, "{jobs}:timeout");
        let tagged = CounterKeys::semaphore("{tenant:7}:jobs").unwrap();
        assert_eq!(tagged.channel, "redisson_sc:{tenant:7}:jobs");
        assert_eq!(tagged.leases, "{tenant:7}:jobs:timeout");
        let latch = CounterKeys::latch("boot").unwrap();
        assert_eq!(latch.channel, "redisson_countdownlatch__channel__{boot}");
        // Redisson's latch channel of a tagged name hashes elsewhere than its key: fine on one
        // server, refused on a cluster.
        assert!(CounterKeys::latch("job{42}")
            .unwrap()
            .checked_for(false)
            .is_ok());
        assert!(CounterKeys::latch("job{42}")
            .unwrap()
            .checked_for(true)
            .unwrap_err()
            .is_invalid_argument());
        assert!(CounterKeys::semaphore("")
            .unwrap_err()
            .is_invalid_argument());
    }

    #[test]
    fn braces_that_split_slots_are_rejected_on_a_cluster_only() {
        for name in ["a{b", "x{}y", "}{", "user{42"] {
            let keys = || LockKeys::new(name).unwrap();
            let err = keys().checked_for(true).unwrap_err();
            assert!(err.is_invalid_argument(), "{name}: {err}");
            assert!(keys().checked_for(false).is_ok(), "{name}");
            let sem = CounterKeys::semaphore(name).unwrap();
            assert!(sem.checked_for(true).unwrap_err().is_invalid_argument());
            assert!(CounterKeys::semaphore(name)
                .unwrap()
                .checked_for(false)
                .is_ok());
        }
        for name in ["{user:7}:profile", "order:42"] {
            assert!(
                LockKeys::new(name).unwrap().checked_for(true).is_ok(),
                "{name}"
            );
        }
        assert!(LockKeys::new("").unwrap_err().is_invalid_argument());
    }
}
