//! The hand-off claim (`relock_claim:{<name>}`, see `lua/common/claim.lua`): a waiter that lost
//! races for a busy lock claims its next free moment, so that the one that lost most goes next;
//! a waiter that gives up withdraws its claim (`lua/unclaim.lua`). The claim's keys are
//! [`LockKeys::claim`]; a waiter's turns keep its claim (`lock::turns`).

use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use once_cell::sync::Lazy;

use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::names::LockKeys;
use crate::scripts::{catalogue, integer, text, Script};

static UNCLAIM: Lazy<Script> = Lazy::new(|| Script::new(catalogue::UNCLAIM));

/// Who to wake when a claim is withdrawn: the publish command and the message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wake {
    pub(crate) publish: &'static str,
    pub(crate) message: &'static str,
}

/// Withdraws `field`'s claim on the lock's next hand-off; `true` when it had one. With `wake`
/// (the publish command and message), a withdrawn claim wakes the waiters on the lock's channel: a
/// read-write lock's writer's claim keeps new readers out, and they may come in now.
pub(crate) async fn unclaim(
    redis: &Connection,
    keys: &LockKeys,
    field: &Str,
    wake: Option<Wake>,
) -> Result<bool> {
    let (keys_sent, args) = match wake {
        None => (
            vec![Key::from(&keys.claim)],
            vec![Value::String(field.clone())],
        ),
        Some(Wake { publish, message }) => (
            vec![Key::from(&keys.claim), Key::from(&keys.channel)],
            vec![Value::String(field.clone()), text(publish), text(message)],
        ),
    };
    let reply = UNCLAIM
        .run(redis, &keys_sent, &args)
        .await
        .map_err(|e| Error::from_script(e, &[&keys.claim, &keys.channel], &redis.server))?;
    Ok(integer(reply, &keys.name, &redis.server)? == 1)
}
