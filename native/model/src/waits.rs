//! Blocked readers and the keys signalled for them: the wait queue a command handler
//! sees (`Waits`).
//!
//! A write signals its key (Redis' signalKeyAsReady); the readers blocked on it are
//! served after the command, or after its execution unit (`handlers::serve_ready`).
//! A read inside an execution unit never blocks.

use crate::IndexMap;

use crate::calls::{BlockedRead, Call, Trigger};
use crate::state::KeyRef;
use crate::units::LUA_CLIENT;

/// Blocked readers and the keys signalled for them.
pub struct Waits<'a> {
    pub(crate) blocked: &'a mut Vec<BlockedRead>,
    pub(crate) ready: &'a mut IndexMap<(i64, String), Option<Trigger>>,
    /// the last applied command (Python's `_call`)
    pub(crate) current: Option<Trigger>,
    pub(crate) unit: Option<i64>,
    pub(crate) units: &'a IndexMap<Option<String>, (i64, Option<i64>)>,
}

impl Waits<'_> {
    /// A write that may serve readers blocked on `key` (Redis' signalKeyAsReady):
    /// they are served after the command, or after its execution unit, by the last
    /// write that signalled the key (its seq and time).
    pub(crate) fn signal(&mut self, db: i64, key: &str) {
        if !self.blocked.is_empty() {
            match self.ready.get_mut(&KeyRef(db, key)) {
                Some(slot) => *slot = self.current,
                None => {
                    self.ready.insert((db, key.to_string()), self.current);
                }
            }
        }
    }

    /// Whether a command of `client` runs inside an execution unit (MULTI or a
    /// script), where a read may not block.
    pub(crate) fn in_transaction(&self, client: Option<&str>) -> bool {
        self.unit.is_some()
            || self.units.contains_key(&client.map(str::to_string))
            || client == Some(LUA_CLIENT)
    }

    /// Put the calling client in the wait queue of its keys (after those already there).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn block(
        &mut self,
        call: &Call,
        keys: &[String],
        group: &str,
        consumer: &str,
        count: i64,
        noack: bool,
        timeout_ms: i64,
    ) {
        let deadline = if timeout_ms != 0 {
            Some(i128::from(call.now) + i128::from(timeout_ms))
        } else {
            None
        };
        self.blocked.push(BlockedRead {
            seq: call.request_seq.unwrap_or(call.seq),
            client: call.client.clone(),
            db: call.db,
            argv: call.argv.clone(),
            keys: keys.to_vec(),
            group: group.to_string(),
            consumer: consumer.to_string(),
            count,
            noack,
            deadline,
        });
    }
}
