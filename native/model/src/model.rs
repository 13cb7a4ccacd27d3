//! The model a command handler works on (`Model`, Python's `calls.Model`): the
//! keyspace, the history recorder and the wait queue, borrowed apart from the
//! `Replayer` so that a handler can change a group and record its history in one
//! scope; and what a handler does to whole keys (create, replace, delete, rename,
//! flush).

use crate::calls::{Call, Profile};
use crate::fail::{internal, Fail};
use crate::recorder::{EntryAt, Recorder};
use crate::state::{KeyRef, Keys, Stream, Value};
use crate::waits::Waits;

/// What a command handler may use of the replayer (Python's `calls.Model`): the
/// keyspace, the history recorder and the wait queue, as separate borrows.
pub struct Model<'a> {
    pub(crate) profile: &'a Profile,
    pub(crate) node_max_entries: i64,
    pub(crate) node_max_bytes: i64,
    pub(crate) keys: &'a mut Keys,
    pub(crate) hist: Recorder<'a>,
    pub(crate) waits: Waits<'a>,
}

impl Model<'_> {
    pub(crate) fn lookup_any(&self, db: i64, key: &str) -> Option<&Value> {
        self.keys.get(&KeyRef(db, key))
    }

    /// The stream at `key`; WRONGTYPE when the key holds another type.
    pub(crate) fn lookup_stream(
        &mut self,
        db: i64,
        key: &str,
    ) -> Result<Option<&mut Stream>, Fail> {
        match self.keys.get_mut(&KeyRef(db, key)) {
            None => Ok(None),
            Some(Value::Other(_)) => Err(Fail::Command("wrongtype")),
            Some(Value::Stream(stream)) => Ok(Some(stream)),
        }
    }

    /// The stream at `key`, which a handler found there before.
    pub(crate) fn stream_mut(&mut self, db: i64, key: &str) -> Result<&mut Stream, Fail> {
        match self.keys.get_mut(&KeyRef(db, key)) {
            Some(Value::Stream(stream)) => Ok(stream),
            _ => Err(internal("KeyError: the stream vanished")),
        }
    }

    /// A new empty stream at `key` (read it back with `stream_mut`).
    pub(crate) fn create_stream(&mut self, db: i64, key: &str) {
        let value = Value::Stream(Stream::new());
        match self.keys.get_mut(&KeyRef(db, key)) {
            Some(slot) => *slot = value,
            None => {
                self.keys.insert((db, key.to_string()), value);
            }
        }
        self.waits.signal(db, key);
    }

    pub(crate) fn set_other(&mut self, db: i64, key: &str, type_name: &str) {
        let value = Value::Other(type_name.to_string());
        match self.keys.get_mut(&KeyRef(db, key)) {
            Some(slot) => *slot = value,
            None => {
                self.keys.insert((db, key.to_string()), value);
            }
        }
        self.waits.signal(db, key);
    }

    /// Remove a key; a stream's pending entries close as `key_deleted`.
    pub(crate) fn delete_key(&mut self, call: &Call, db: i64, key: &str) -> Result<(), Fail> {
        if let Some(Value::Stream(mut stream)) = self.keys.shift_remove(&KeyRef(db, key)) {
            call.touched_stream.set(true);
            self.waits.signal(db, key);
            for group in stream.groups.values_mut() {
                self.hist.close_group(call, db, key, group, "key_deleted")?;
            }
        }
        Ok(())
    }

    /// RENAME: the value moves; a stream's pending entries end their `pel_history`
    /// versions under `src` and start new ones under `dst`. Every delivery record a
    /// group holds changes its key (stamped with `call`), and so does each group
    /// (`moved_seq`/`moved_ms`: for the records it already spilled).
    pub(crate) fn move_key(
        &mut self,
        call: &Call,
        db: i64,
        src: &str,
        dst: &str,
    ) -> Result<(), Fail> {
        let mut value = self
            .keys
            .shift_remove(&KeyRef(db, src))
            .ok_or_else(|| internal("KeyError: the renamed key vanished"))?;
        if let Value::Stream(stream) = &mut value {
            call.touched_stream.set(true);
            self.waits.signal(db, src);
            for group in stream.groups.values_mut() {
                group.moved_seq = Some(call.seq);
                group.moved_ms = Some(call.now);
                for rec in group.records.values_mut() {
                    rec.changed(call.seq, call.now);
                }
            }
            if self.hist.record_changes {
                let Stream {
                    entries, groups, ..
                } = stream;
                for group in groups.values_mut() {
                    for (entry_id, nack) in group.pel.iter_mut() {
                        let at = |key| EntryAt {
                            db,
                            key,
                            group: &group.name,
                            id: entry_id,
                        };
                        self.hist.end_version(call, at(src), nack);
                        let exists = entries.contains(entry_id);
                        self.hist.track_version(call, at(dst), nack, exists);
                    }
                }
            }
        }
        match self.keys.get_mut(&KeyRef(db, dst)) {
            Some(slot) => *slot = value,
            None => {
                self.keys.insert((db, dst.to_string()), value);
            }
        }
        self.waits.signal(db, dst);
        Ok(())
    }

    /// Remove every key of `db` (None: of every db).
    pub(crate) fn flush(&mut self, call: &Call, db: Option<i64>) -> Result<(), Fail> {
        let doomed: Vec<(i64, String)> = self
            .keys
            .keys()
            .filter(|(key_db, _)| db.is_none() || Some(*key_db) == db)
            .cloned()
            .collect();
        for (key_db, key) in doomed {
            self.delete_key(call, key_db, &key)?;
        }
        Ok(())
    }
}
