//! The two paths a relock client calls its scripts by (functions, `EVALSHA`), the types measured
//! and a handle of each, the task names, and the two relock clients (with the redis-rs reference's
//! connection): connected, checked to go the way asked, and their semaphores given a permit.

use relock::{Evalsha, ScriptCalls};

use crate::TASKS;

/// How a relock client calls its scripts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    Functions,
    Evalsha,
}

impl Path {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Path::Functions => "functions",
            Path::Evalsha => "EVALSHA",
        }
    }

    /// The order of the two paths in trial `i`: functions first, then EVALSHA first, in turn.
    pub(crate) fn order(i: usize) -> [Path; 2] {
        if i % 2 == 0 {
            [Path::Functions, Path::Evalsha]
        } else {
            [Path::Evalsha, Path::Functions]
        }
    }
}

/// The types measured, as the figures name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Lock,
    Fair,
    Read,
    Write,
    Fenced,
    Semaphore,
    Permit,
    Election,
}

impl Kind {
    /// The types of figure 4, after `Lock`.
    pub(crate) const OTHERS: [Kind; 7] = [
        Kind::Fair,
        Kind::Read,
        Kind::Write,
        Kind::Fenced,
        Kind::Semaphore,
        Kind::Permit,
        Kind::Election,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Lock => "Lock",
            Kind::Fair => "FairLock",
            Kind::Read => "RwLock read",
            Kind::Write => "RwLock write",
            Kind::Fenced => "FencedLock",
            Kind::Semaphore => "Semaphore",
            Kind::Permit => "PermitSemaphore",
            Kind::Election => "Election",
        }
    }

    /// The key-safe part of a name.
    fn tag(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Fair => "fair",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Fenced => "fenced",
            Kind::Semaphore => "semaphore",
            Kind::Permit => "permit",
            Kind::Election => "election",
        }
    }
}

/// Task `t`'s name for `kind` on `path`: every task, type and path on a name of its own.
pub(crate) fn name(path: Path, kind: Kind, t: usize) -> String {
    let path = match path {
        Path::Functions => "fcall",
        Path::Evalsha => "evalsha",
    };
    format!("bench:functions:{path}:{}:{t}", kind.tag())
}

/// A handle of one of the types.
pub(crate) enum Handle {
    Lock(relock::Lock),
    Fair(relock::FairLock),
    Read(relock::ReadLock),
    Write(relock::WriteLock),
    Fenced(relock::FencedLock),
    Semaphore(relock::Semaphore),
    Permit(relock::PermitSemaphore),
    Election(relock::Election),
}

impl Handle {
    pub(crate) fn new(client: &relock::Client, kind: Kind, name: String) -> Handle {
        match kind {
            Kind::Lock => Handle::Lock(client.lock(name)),
            Kind::Fair => Handle::Fair(client.fair_lock(name)),
            Kind::Read => Handle::Read(client.rw_lock(name).read()),
            Kind::Write => Handle::Write(client.rw_lock(name).write()),
            Kind::Fenced => Handle::Fenced(client.fenced_lock(name)),
            Kind::Semaphore => Handle::Semaphore(client.semaphore(name)),
            Kind::Permit => Handle::Permit(client.permit_semaphore(name)),
            Kind::Election => Handle::Election(client.election(name)),
        }
    }

    /// One pair: take and give back.
    pub(crate) async fn pair(&self) {
        match self {
            Handle::Lock(l) => l.lock().await.unwrap().unlock().await.unwrap(),
            Handle::Fair(l) => l.lock().await.unwrap().unlock().await.unwrap(),
            Handle::Read(l) => l.lock().await.unwrap().unlock().await.unwrap(),
            Handle::Write(l) => l.lock().await.unwrap().unlock().await.unwrap(),
            Handle::Fenced(l) => l.lock().await.unwrap().unlock().await.unwrap(),
            Handle::Semaphore(s) => {
                s.acquire(1).await.unwrap();
                s.release(1).await.unwrap();
            }
            Handle::Permit(s) => s.acquire().await.unwrap().release().await.unwrap(),
            Handle::Election(e) => e.campaign().await.unwrap().resign().await.unwrap(),
        }
    }
}

/// The two relock clients, and the redis-rs reference's connection.
pub(crate) struct Clients {
    pub(crate) functions: relock::Client,
    pub(crate) evalsha: relock::Client,
    pub(crate) redis_rs: redis::aio::MultiplexedConnection,
}

impl Clients {
    pub(crate) fn on(&self, path: Path) -> &relock::Client {
        match path {
            Path::Functions => &self.functions,
            Path::Evalsha => &self.evalsha,
        }
    }
}

/// A relock client on `path`; panics unless its scripts go the way asked.
pub(crate) async fn connect(url: &str, path: Path) -> relock::Client {
    let config = relock::Config::from_url(url)
        .unwrap()
        .with_functions(path == Path::Functions);
    let client = relock::Client::new(config).await.unwrap();
    let scripts = client.stats().scripts;
    let as_asked = match path {
        Path::Functions => scripts == ScriptCalls::Functions,
        Path::Evalsha => scripts == ScriptCalls::Evalsha(Evalsha::Configured),
    };
    assert!(
        as_asked,
        "asked for a client calling its scripts by {} (Config::with_functions({})), got \
         stats().scripts = {scripts:?}; the functions path needs Redis 7.0 or later",
        path.name(),
        path == Path::Functions
    );
    client
}

/// Sets one permit on every task's semaphore of both types, for both paths.
pub(crate) async fn prepare(clients: &Clients) {
    for path in [Path::Functions, Path::Evalsha] {
        let client = clients.on(path);
        for t in 0..TASKS {
            let semaphore = client.semaphore(name(path, Kind::Semaphore, t));
            assert!(semaphore.try_set_permits(1).await.unwrap());
            let permits = client.permit_semaphore(name(path, Kind::Permit, t));
            assert!(permits.try_set_permits(1).await.unwrap());
        }
    }
}
