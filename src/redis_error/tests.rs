//! fred's words, pinned. The live tests provoke each error from a real `redis-server` and check
//! fred's kind and literal text as well as what relock makes of it, so a fred release that words
//! an error otherwise fails here. Texts that are Redis's own (`NOSCRIPT`, `WRONGTYPE`, `NOAUTH`)
//! are pinned by their first word, which is Redis's protocol.

use super::*;

fn error(kind: ErrorKind, text: &str) -> RedisError {
    RedisError::new(kind, text.to_owned())
}

#[test]
fn relock_own_errors_read_as_they_are_meant() {
    let not_sent = not_sent("not connected (nothing was sent)".into());
    assert_eq!(classify(&not_sent), What::Other);
    assert!(!classify(&not_sent).may_have_run(), "it never left");
    assert_eq!(headline(&not_sent), Headline::Unreachable);
    for made in [
        unexpected("unexpected script reply".into()),
        unreadable("not a token".into()),
        missing("the counter is gone".into()),
    ] {
        assert_eq!(classify(&made), What::Other, "{made:?}");
        assert_eq!(headline(&made), Headline::Failed, "{made:?}");
    }
}

#[test]
fn a_server_without_scripting_is_told_apart() {
    // Valkey 9 with its Lua engine unloaded, and script commands renamed away (6.0 and 7.0
    // word "unknown command" differently).
    for text in [
        "ERR Could not find scripting engine 'lua'",
        "ERR unknown command `EVALSHA`, with args beginning with: `abc`, `0`, ",
        "ERR unknown command 'evalsha'",
        "ERR unknown command `SCRIPT`, with args beginning with: `LOAD`, ",
    ] {
        assert_eq!(
            classify(&error(ErrorKind::Unknown, text)),
            What::NoScripting,
            "{text}"
        );
    }
    let other = error(
        ErrorKind::Unknown,
        "ERR unknown command `FOO`, with args beginning with: ",
    );
    assert_eq!(classify(&other), What::Other);
    let mapped = crate::Error::redis(
        error(
            ErrorKind::Unknown,
            "ERR Could not find scripting engine 'lua'",
        ),
        "127.0.0.1:6379",
    );
    assert!(mapped.is_unsupported(), "{mapped:?}");
    let message = mapped.to_string();
    assert!(
        message.starts_with("relock cannot run on 127.0.0.1:6379"),
        "{message}"
    );
    assert!(
        message.contains("Could not find scripting engine"),
        "{message}"
    );
}

#[test]
fn script_replies_are_taken_apart() {
    let stale = error(ErrorKind::Unknown, "RELOCK_STALE 7");
    assert_eq!(
        classify(&stale),
        What::Relock {
            code: "RELOCK_STALE",
            payload: "7"
        }
    );
    let bare = error(ErrorKind::Unknown, "RELOCK_UPGRADE");
    assert_eq!(
        classify(&bare),
        What::Relock {
            code: "RELOCK_UPGRADE",
            payload: ""
        }
    );
    let fence = error(
        ErrorKind::InvalidArgument,
        "WRONGTYPE relock fence key holds a value of another type",
    );
    assert_eq!(classify(&fence), What::WrongType(Blamed::Fence));
    let part = error(
        ErrorKind::InvalidArgument,
        "WRONGTYPE Operation against a key holding the wrong kind of value [part 3]",
    );
    assert_eq!(classify(&part), What::WrongType(Blamed::Part(3)));
    let other = error(ErrorKind::Unknown, "ERR something else [part 3]");
    assert_eq!(classify(&other), What::Other);
}

#[test]
fn io_errors_read_as_words() {
    let cases = [
        (
            r#"Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }"#,
            "connection refused",
        ),
        ("Kind(TimedOut)", "timed out"),
        (
            "Custom { kind: InvalidData, error: InvalidCertificate(UnknownIssuer) }",
            "invalid certificate: unknown issuer",
        ),
        (
            r#"Custom { kind: Other, error: "tls handshake eof" }"#,
            "tls handshake eof",
        ),
        ("Connection closed.", "connection closed"),
        ("IO failed", "IO failed"),
    ];
    for (details, expected) in cases {
        assert_eq!(plain(details), expected, "{details}");
    }
}

/// A refused certificate reaches fred as the I/O error rustls gives, and fred keeps its `Debug`
/// text (`tests/tls.rs` meets it from a real TLS server).
#[cfg(feature = "tls")]
#[test]
fn a_refused_certificate_is_named() {
    use fred::rustls::{CertificateError, Error as TlsError};
    let io = std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        TlsError::InvalidCertificate(CertificateError::UnknownIssuer),
    );
    let error = RedisError::from(io);
    assert_eq!(*error.kind(), ErrorKind::IO);
    assert_eq!(
        error.details(),
        "Custom { kind: InvalidData, error: InvalidCertificate(UnknownIssuer) }"
    );
    assert_eq!(classify(&error), What::Certificate);
    assert!(classify(&error).may_have_run());
    assert_eq!(headline(&error), Headline::Certificate);
    assert_eq!(reason(&error), "invalid certificate: unknown issuer");
}

#[cfg(feature = "testing")]
mod live {
    use std::time::Duration;

    use fred::prelude::{
        Builder, Client, ClientLike, HashesInterface, KeysInterface, ListInterface, LuaInterface,
        Value,
    };
    use fred::types::config::{Config, Options, ReconnectPolicy};

    use super::*;
    use crate::error::Error;
    use crate::testing::RedisServer;

    /// A fred client set up as relock's command connection: every command sent once,
    /// reconnecting at once.
    fn client(url: &str) -> Client {
        let mut builder = Builder::from_config(Config::from_url(url).unwrap());
        builder
            .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(2))
            .with_connection_config(|c| {
                c.connection_timeout = Duration::from_secs(1);
                c.internal_command_timeout = Duration::from_secs(1);
                c.max_command_attempts = 1;
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 20, 1000, 2));
        builder.build().unwrap()
    }

    async fn connected(server: &RedisServer) -> Client {
        let redis = client(&server.url());
        redis.init().await.unwrap();
        redis
    }

    const NO_KEYS: Vec<String> = Vec::new();

    async fn eval_error(redis: &Client, lua: &str, keys: Vec<&str>) -> RedisError {
        redis
            .eval::<Value, _, _, _>(lua, keys, NO_KEYS)
            .await
            .unwrap_err()
    }

    #[tokio::test]
    async fn an_unknown_script_is_noscript() {
        let server = RedisServer::start().unwrap();
        let redis = connected(&server).await;
        let error = redis
            .evalsha::<Value, _, _, _>("0".repeat(40), NO_KEYS, NO_KEYS)
            .await
            .unwrap_err();
        assert!(error.details().starts_with("NOSCRIPT "), "{error:?}");
        assert_eq!(classify(&error), What::NoScript);
        assert!(!classify(&error).may_have_run());
    }

    #[tokio::test]
    async fn a_key_of_another_type_is_wrongtype() {
        const TEXT: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
        let server = RedisServer::start().unwrap();
        let redis = connected(&server).await;
        let _: () = redis.set("k", "v", None, None, false).await.unwrap();

        let command = redis
            .hget::<Option<String>, _, _>("k", "f")
            .await
            .unwrap_err();
        assert_eq!(*command.kind(), ErrorKind::InvalidArgument);
        assert_eq!(command.details(), TEXT);
        assert_eq!(classify(&command), What::WrongType(Blamed::Command));
        let mapped = Error::from_redis(command, "k", "server");
        assert!(
            matches!(&mapped, Error::WrongType { key } if key == "k"),
            "{mapped:?}"
        );

        // Raised inside a script, Redis 7 appends where it happened; Redis 6 puts it first
        // ("ERR Error running script (call to f_…): @user_script:1: WRONGTYPE …").
        let raised = eval_error(&redis, "return redis.call('HGET', KEYS[1], 'f')", vec!["k"]).await;
        assert!(raised.details().contains(TEXT), "{raised:?}");
        assert_eq!(classify(&raised), What::WrongType(Blamed::Command));

        // As the multi-lock scripts answer it: the caught error, and the part it is about.
        let part = "local e = redis.pcall('HGET', KEYS[1], 'f') \
                    return redis.error_reply(e.err .. ' [part 2]')";
        let part = eval_error(&redis, part, vec!["k"]).await;
        assert_eq!(part.details(), format!("{TEXT} [part 2]"));
        assert_eq!(classify(&part), What::WrongType(Blamed::Part(2)));

        // As the semaphore and latch scripts fail (`lua/common/counter.lua`: an error table,
        // which the wrapper every script runs in returns as it is on Redis 6, see
        // `scripts::catalogue`): the same reply on every server from Redis 6.0.
        let key = "return redis.error_reply('WRONGTYPE the key holds a hash [key 2]')";
        let key = eval_error(&redis, key, vec!["k", "j"]).await;
        assert!(key.details().contains("[key 2]"), "{key:?}");
        assert_eq!(classify(&key), What::WrongType(Blamed::Key(2)));

        // As the fence check answers a fence key of another type.
        let fence = "return redis.error_reply('WRONGTYPE relock fence key holds a value of \
                     another type')";
        let fence = eval_error(&redis, fence, vec![]).await;
        assert_eq!(classify(&fence), What::WrongType(Blamed::Fence));
    }

    #[tokio::test]
    async fn a_script_refusal_reaches_relock_as_written() {
        let server = RedisServer::start().unwrap();
        let redis = connected(&server).await;
        let stale = eval_error(&redis, "return redis.error_reply('RELOCK_STALE 7')", vec![]).await;
        assert_eq!(*stale.kind(), ErrorKind::Unknown);
        assert_eq!(stale.details(), "RELOCK_STALE 7");
        assert_eq!(
            classify(&stale),
            What::Relock {
                code: "RELOCK_STALE",
                payload: "7"
            }
        );
        let upgrade = "return redis.error_reply('RELOCK_UPGRADE the owner holds the read lock')";
        let upgrade = eval_error(&redis, upgrade, vec![]).await;
        assert_eq!(
            classify(&upgrade),
            What::Relock {
                code: "RELOCK_UPGRADE",
                payload: "the owner holds the read lock"
            }
        );
    }

    #[tokio::test]
    async fn a_reply_that_does_not_come_in_time_times_out() {
        let server = RedisServer::start().unwrap();
        let redis = connected(&server).await;
        let options = Options {
            timeout: Some(Duration::from_millis(100)),
            ..Options::default()
        };
        let error = redis
            .with_options(&options)
            .blpop::<Value, _>("nothing", 2.0)
            .await
            .unwrap_err();
        assert_eq!(*error.kind(), ErrorKind::Timeout);
        assert_eq!(error.details(), "Request timed out.");
        assert_eq!(classify(&error), What::TimedOut);
        assert!(classify(&error).may_have_run());
        assert_eq!(headline(&error), Headline::TimedOut);
    }

    /// A `BLPOP` of 5 s sent on `redis`, given 100 ms to reach the server and block there.
    async fn blocked(redis: &Client) -> tokio::task::JoinHandle<Result<Value, RedisError>> {
        let waiting = tokio::spawn({
            let redis = redis.clone();
            async move { redis.blpop::<Value, _>("nothing", 5.0).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        waiting
    }

    #[tokio::test]
    async fn a_command_out_when_the_server_dies_meets_a_closed_connection() {
        let server = RedisServer::start().unwrap();
        let redis = connected(&server).await;
        let waiting = blocked(&redis).await;
        drop(server);
        let error = waiting.await.unwrap().unwrap_err();
        assert_eq!(*error.kind(), ErrorKind::IO);
        assert_eq!(error.details(), "Connection closed.");
        assert_eq!(classify(&error), What::Broken);
        assert!(classify(&error).may_have_run());
        let message = Error::redis(error, "127.0.0.1:1").to_string();
        assert_eq!(
            message,
            "could not reach Redis at 127.0.0.1:1: connection closed"
        );
    }

    #[tokio::test]
    async fn a_command_out_when_the_connection_is_remade_is_not_sent_again() {
        let server = RedisServer::start().unwrap();
        let redis = connected(&server).await;
        let waiting = blocked(&redis).await;
        redis.force_reconnection().await.unwrap();
        let error = waiting.await.unwrap().unwrap_err();
        assert_eq!(*error.kind(), ErrorKind::Unknown);
        assert_eq!(error.details(), "Too many failed write attempts.");
        assert_eq!(classify(&error), What::NotResent);
        assert!(classify(&error).may_have_run());
    }

    /// Commands queued while fred finds the connection gone fail unsent with "Failed to route
    /// command."; which ones do depends on timing, so rounds go on until one has.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commands_queued_when_the_connection_drops_are_not_routed() {
        let mut not_routed = None;
        for _round in 0..20 {
            let server = RedisServer::start().unwrap();
            let redis = connected(&server).await;
            let flood = tokio::spawn({
                let redis = redis.clone();
                async move {
                    let mut errors = Vec::new();
                    for _ in 0..20 {
                        let batch = (0..200).map(|_| redis.get::<Option<String>, _>("k"));
                        errors.extend(
                            futures::future::join_all(batch)
                                .await
                                .into_iter()
                                .filter_map(|reply| reply.err()),
                        );
                        if !errors.is_empty() {
                            break;
                        }
                    }
                    errors
                }
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(server);
            let errors = flood.await.unwrap();
            for error in &errors {
                let what = classify(error);
                assert!(
                    matches!(what, What::NotRouted | What::Broken | What::TimedOut),
                    "{error:?} read as {what:?}"
                );
            }
            not_routed = errors
                .into_iter()
                .find(|error| classify(error) == What::NotRouted);
            if not_routed.is_some() {
                break;
            }
        }
        let error = not_routed.expect("no command failed unrouted in 20 rounds");
        assert_eq!(error.details(), "Failed to route command.");
        assert!(!classify(&error).may_have_run(), "it never left");
    }

    #[tokio::test]
    async fn a_server_that_is_not_there_refuses_the_connection() {
        let port = RedisServer::start().unwrap().port();
        let redis = client(&format!("redis://127.0.0.1:{port}"));
        let error = redis.init().await.unwrap_err();
        assert_eq!(*error.kind(), ErrorKind::IO);
        assert!(
            error.details().starts_with("Os { code: ")
                && error.details().contains("kind: ConnectionRefused"),
            "{error:?}"
        );
        assert_eq!(classify(&error), What::Broken);
        assert_eq!(headline(&error), Headline::Unreachable);
        assert_eq!(reason(&error), "connection refused");
    }

    #[tokio::test]
    async fn missing_credentials_are_refused() {
        let server = RedisServer::start_with(&["--requirepass", "secret"]).unwrap();
        let error = client(&server.url()).init().await.unwrap_err();
        assert_eq!(*error.kind(), ErrorKind::Auth);
        assert!(error.details().starts_with("NOAUTH "), "{error:?}");
        assert_eq!(classify(&error), What::Other);
        assert_eq!(headline(&error), Headline::Refused);
    }
}
