//! Reading a Redis URL: the schemes relock takes, and the URL and server as messages quote them
//! (passwords redacted).

use std::fmt;

use fred::types::config::ServerConfig;

use crate::error::{Error, Result, Shown};

/// What a password reads as in `Debug` and in error messages.
pub(super) struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

const REDACTED: &str = "<redacted>";

/// `url` as an error message may quote it: the password of its user info (everything after
/// the first `:` of what comes before the last `@`, or all of it without a `:`) and the value
/// of a `sentinelPassword` parameter read `<redacted>`. It errs on hiding too much: a URL fred
/// cannot parse may not split where a good one would.
pub(crate) fn redacted_url(url: &str) -> String {
    let start = url.find("://").map_or(0, |at| at + 3);
    let mut out = String::with_capacity(url.len());
    let rest = match url[start..].rfind('@') {
        Some(at) => {
            let userinfo = &url[start..start + at];
            out.push_str(&url[..start]);
            if let Some((user, _)) = userinfo.split_once(':') {
                out.push_str(user);
                out.push(':');
            }
            if !userinfo.is_empty() {
                out.push_str(REDACTED);
            }
            &url[start + at..]
        }
        None => url,
    };
    // `sentinelPassword=<value>`, up to the next `&` or `#`, in any case.
    let lower = rest.to_ascii_lowercase();
    let key = "sentinelpassword=";
    let mut from = 0;
    while let Some(at) = lower[from..].find(key).map(|at| from + at + key.len()) {
        out.push_str(&rest[from..at]);
        out.push_str(REDACTED);
        from = rest[at..]
            .find(['&', '#'])
            .map_or(rest.len(), |end| at + end);
    }
    out.push_str(&rest[from..]);
    out
}

/// The schemes relock connects with: plain TCP and TLS, to one server, a cluster or Sentinel,
/// in fred's `redis` and `valkey` spellings.
const SCHEMES: [&str; 12] = [
    "redis",
    "rediss",
    "redis-cluster",
    "rediss-cluster",
    "redis-sentinel",
    "rediss-sentinel",
    "valkey",
    "valkeys",
    "valkey-cluster",
    "valkeys-cluster",
    "valkey-sentinel",
    "valkeys-sentinel",
];

/// Refuses a URL whose scheme relock does not connect with, and a TLS URL without TLS
/// compiled in: fred would connect to either in plaintext, as if it were `redis://`.
pub(super) fn check_scheme(url: &str) -> Result<()> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(Error::invalid(format!(
            "bad Redis URL `{}`: it has no scheme; start it with `redis://` \
             (`redis://127.0.0.1:6379`), or `rediss://` for TLS",
            Shown(&redacted_url(url))
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    if !SCHEMES.contains(&scheme.as_str()) {
        let unix = if scheme.ends_with("+unix") {
            " (relock does not connect over Unix sockets)"
        } else {
            ""
        };
        return Err(Error::invalid(format!(
            "the URL scheme `{}` is not one relock connects with{unix}: use redis://, rediss://, \
             redis-cluster://, rediss-cluster://, redis-sentinel:// or rediss-sentinel://",
            Shown(&scheme)
        )));
    }
    let tls = scheme.starts_with("rediss") || scheme.starts_with("valkeys");
    if tls && !cfg!(feature = "tls") {
        return Err(Error::invalid(format!(
            "`{scheme}://` needs TLS, which this build of relock leaves out: turn on its `tls` \
             feature (on by default)"
        )));
    }
    Ok(())
}

/// The server a config connects to, as error messages name it: `host:port`; the nodes given
/// for a cluster; the service and its sentinels for Sentinel.
pub(crate) fn server_name(server: &ServerConfig) -> String {
    let list = |hosts: &[fred::types::config::Server]| {
        hosts
            .iter()
            .map(|h| h.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match server {
        ServerConfig::Centralized { server } => server.to_string(),
        ServerConfig::Clustered { hosts, .. } => format!("{} (cluster)", list(hosts)),
        ServerConfig::Sentinel {
            hosts,
            service_name,
            ..
        } => format!("`{service_name}` via sentinel {}", list(hosts)),
        // A Unix socket, when another crate turns on fred's support for them.
        #[allow(unreachable_patterns)]
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    #[test]
    fn only_redis_schemes_are_accepted() {
        for url in [
            "redis://127.0.0.1:6379",
            "REDIS://127.0.0.1",
            "valkey://h:1/2",
        ] {
            assert!(Config::from_url(url).is_ok(), "{url}");
        }
        for url in [
            "http://127.0.0.1:6379",
            "redis+unix:///tmp/redis.sock",
            "tcp://h:1",
        ] {
            let e = Config::from_url(url).unwrap_err();
            assert!(e.is_invalid_argument(), "{url}: {e:?}");
        }
    }

    #[test]
    fn urls_are_quoted_without_their_passwords() {
        for (url, shown) in [
            ("redis://u:pw@h:1/0", "redis://u:<redacted>@h:1/0"),
            ("redis://:pw@h:1", "redis://:<redacted>@h:1"),
            ("redis://pw@h:1", "redis://<redacted>@h:1"),
            ("redis://h:1", "redis://h:1"),
            ("u:p@w@h:x", "u:<redacted>@h:x"),
            (
                "redis-sentinel://h:1/0?sentinelServiceName=m&sentinelPassword=pw&node=h:2",
                "redis-sentinel://h:1/0?sentinelServiceName=m&sentinelPassword=<redacted>&node=h:2",
            ),
            (
                "redis-sentinel://:pw@h:1?SENTINELPASSWORD=pw",
                "redis-sentinel://:<redacted>@h:1?SENTINELPASSWORD=<redacted>",
            ),
        ] {
            assert_eq!(redacted_url(url), shown, "{url}");
        }
    }
}
