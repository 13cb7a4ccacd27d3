//! One handler per Redis command, applying its effects to the model.
//!
//! Every handler receives the model (`Model`: the keyspace, the history recorder and
//! the wait queue, borrowed apart from the `Replayer` so that a handler can change a
//! group and record its history in one scope) and the call (argv, db, the command's
//! "now"). A handler that finds an argument Redis would refuse returns
//! `Fail::Command` before changing anything, so that a rejected command has no
//! effect, as in Redis. Parsing order follows the server, so the same malformed
//! command fails for the same reason.
//!
//! The behaviour of each command is described in its doc comment: syntax, effects on
//! the stream and its groups, and side effects (consumer creation, seen and active
//! times). Differences between version profiles are named where they apply.
//!
//! `Fail::Internal` is what raises another exception in the Python model (an
//! `IndexError`, a `KeyError`, an `assert`), or a value Python's unbounded integers
//! would hold that does not fit the i64 columns.

use std::collections::{BTreeMap, HashMap};

use indexmap::Equivalent;

use crate::IndexMap;

use crate::calls::{BlockedRead, Call, Profile};
use crate::history::{push_incarnation, push_segment, HistoryTables};
use crate::ids::{
    incr_id, parse_id, parse_ll, parse_strict_id, to_signed, ParseError, StreamId, MAX_ID, U64_MAX,
    ZERO_ID,
};
use crate::listpack as lp;
use crate::state::{
    Consumer, DeliveryRecord, Entries, Group, Node, PelVersion, PendingEntry, Stream, Value,
    INVALID_ENTRIES_READ,
};
use crate::units::LUA_CLIENT;

pub const LISTPACK_MAX_SIZE: i64 = 1 << 30;
/// 7.0 serves a blocked reader without COUNT this many entries
pub const BLOCKED_DEFAULT_COUNT: i64 = 1000;
/// Not a command of any server: see `load`.
pub const LOAD_COMMAND: &str = "PELENGINE.LOAD";

/// The keyspace: (db, key) -> value, in insertion order (Python's dict).
pub type Keys = IndexMap<(i64, String), Value>;
/// A delivery record of a group that ended: (db, key, group, created_seq, id, record).
pub type ClosedRecord = (i64, String, String, i64, StreamId, DeliveryRecord);
/// A group's delivery records, in insertion order.
pub type Records = IndexMap<StreamId, DeliveryRecord>;

/// Why a command did not apply: a Redis error reply (`Command`, its kind), or what
/// raises another exception in the Python model (`Internal`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fail {
    Command(&'static str),
    Internal(String),
}

impl From<ParseError> for Fail {
    fn from(err: ParseError) -> Self {
        Fail::Command(err.kind)
    }
}

fn internal(what: &str) -> Fail {
    Fail::Internal(what.to_string())
}

fn overflow(what: &str) -> Fail {
    Fail::Internal(format!("{what}: the value does not fit a 64-bit integer"))
}

/// The command and moment a served key was signalled by (Python's `Call` in `_ready`).
///
/// `id` names the call as Python's object identity does: two triggers of one command
/// share it, two commands never do (even of one seq). The replayer keeps the whole
/// call of every id it still refers to (see `Replayer`), for `persist`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trigger {
    pub seq: i64,
    pub now: i64,
    pub id: u64,
}

static NEXT_CALL_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Trigger {
    /// A trigger of a new call: an id no other call of this process has.
    pub fn fresh(seq: i64, now: i64) -> Self {
        let id = NEXT_CALL_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Trigger { seq, now, id }
    }
}

/// A borrowed keyspace key: looks up `(i64, String)` keys without allocating.
#[derive(Hash)]
pub(crate) struct KeyRef<'a>(pub i64, pub &'a str);

impl Equivalent<(i64, String)> for KeyRef<'_> {
    fn equivalent(&self, key: &(i64, String)) -> bool {
        self.0 == key.0 && self.1 == key.1
    }
}

// --------------------------------------------------------------------------
// The model a handler works on
// --------------------------------------------------------------------------

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

/// The history recorder: `ownership_changes`, `pel_history`, delivery records and
/// segments (the recording half of Python's `Replayer`).
pub struct Recorder<'a> {
    pub(crate) record_changes: bool,
    pub(crate) spill: bool,
    pub(crate) tables: &'a mut HistoryTables,
    pub(crate) segment_n: &'a mut i64,
    pub(crate) closed: &'a mut Vec<ClosedRecord>,
}

/// Blocked readers and the keys signalled for them.
pub struct Waits<'a> {
    pub(crate) blocked: &'a mut Vec<BlockedRead>,
    pub(crate) ready: &'a mut IndexMap<(i64, String), Option<Trigger>>,
    /// the last applied command (Python's `_call`)
    pub(crate) current: Option<Trigger>,
    pub(crate) unit: Option<i64>,
    pub(crate) units: &'a IndexMap<Option<String>, (i64, Option<i64>)>,
}

/// A group's identity and records, borrowed apart from its PEL and consumers.
pub(crate) struct GroupRec<'g> {
    pub name: &'g str,
    pub created_seq: i64,
    pub records: &'g mut Records,
}

/// A group split into disjoint borrows.
pub(crate) struct GroupParts<'g> {
    pub last_id: &'g mut StreamId,
    pub entries_read: &'g mut i64,
    pub pel: &'g mut BTreeMap<StreamId, PendingEntry>,
    pub consumers: &'g mut IndexMap<String, Consumer>,
    pub rec: GroupRec<'g>,
}

pub(crate) fn parts(group: &mut Group) -> GroupParts<'_> {
    let Group {
        name,
        last_id,
        entries_read,
        created_seq,
        pel,
        consumers,
        records,
    } = group;
    GroupParts {
        last_id,
        entries_read,
        pel,
        consumers,
        rec: GroupRec {
            name: name.as_str(),
            created_seq: *created_seq,
            records,
        },
    }
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
    /// versions under `src` and start new ones under `dst`.
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
            if self.hist.record_changes {
                let Stream {
                    entries, groups, ..
                } = stream;
                for group in groups.values_mut() {
                    for (entry_id, nack) in group.pel.iter_mut() {
                        self.hist
                            .end_version(call, db, src, &group.name, entry_id, nack);
                        let exists = entries.contains(entry_id);
                        self.hist
                            .track_version(call, db, dst, &group.name, entry_id, nack, exists);
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

impl Recorder<'_> {
    /// Close every pending entry of a group that is going away, keep its history.
    pub(crate) fn close_group(
        &mut self,
        call: &Call,
        db: i64,
        key: &str,
        group: &mut Group,
        status: &'static str,
    ) -> Result<(), Fail> {
        let pel = std::mem::take(&mut group.pel);
        let mut rec = GroupRec {
            name: &group.name,
            created_seq: group.created_seq,
            records: &mut group.records,
        };
        for (entry_id, mut nack) in pel {
            let from = nack.consumer.clone();
            self.record(
                call,
                db,
                key,
                &mut rec,
                entry_id,
                status,
                from.as_deref(),
                None,
                &mut nack,
                Some(status),
                false,
            )?;
        }
        let records = std::mem::take(&mut group.records);
        if self.spill {
            // every record was open (spilled as it closed just now)
            push_incarnation(
                &mut self.tables.group_incarnations,
                db,
                key,
                &group.name,
                group.created_seq,
            );
        } else {
            for (entry_id, rec) in records {
                self.closed.push((
                    db,
                    key.to_string(),
                    group.name.clone(),
                    group.created_seq,
                    entry_id,
                    rec,
                ));
            }
        }
        Ok(())
    }

    /// Note one change of a pending entry in the history tables (`status`: it left
    /// the PEL with that status). `exists`: whether the entry is in the stream (the
    /// version's `entry_exists` when it stays pending).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &mut self,
        call: &Call,
        db: i64,
        key: &str,
        group: &mut GroupRec,
        entry_id: StreamId,
        change: &str,
        from_consumer: Option<&str>,
        to_consumer: Option<&str>,
        nack: &mut PendingEntry,
        status: Option<&str>,
        exists: bool,
    ) -> Result<(), Fail> {
        match status {
            None => {
                let to = to_consumer.ok_or_else(|| internal("AssertionError: no consumer"))?;
                let rec = group.records.entry(entry_id).or_insert_with(|| {
                    DeliveryRecord::new(
                        nack.delivery_count,
                        0,
                        Default::default(),
                        Some(nack.delivery_time),
                        Some(nack.delivery_time),
                    )
                });
                if rec.status != "pending" {
                    rec.status = "pending".to_string();
                    rec.closed_ms = None;
                }
                if rec.first_delivery_ms.is_none() {
                    // a segment restarted between runs
                    rec.first_delivery_ms = Some(nack.delivery_time);
                }
                rec.deliveries += 1;
                if !rec.owners.contains(to) {
                    rec.owners.insert(to.to_string());
                }
                rec.last_delivery_ms = Some(nack.delivery_time);
                rec.delivery_count = nack.delivery_count;
            }
            Some(status) => {
                if let Some(rec) = group.records.get_mut(&entry_id) {
                    rec.status = status.to_string();
                    rec.closed_ms = Some(call.now);
                    rec.delivery_count = nack.delivery_count;
                    if self.spill {
                        if let Some(rec) = group.records.shift_remove(&entry_id) {
                            crate::replay::bump(self.segment_n);
                            push_segment(
                                &mut self.tables.delivery_segments,
                                db,
                                key,
                                group.name,
                                group.created_seq,
                                &entry_id,
                                &rec,
                                *self.segment_n,
                            );
                        }
                    }
                }
            }
        }
        if self.record_changes {
            if status.is_none() {
                self.track_version(call, db, key, group.name, &entry_id, nack, exists);
            } else {
                self.end_version(call, db, key, group.name, &entry_id, nack);
            }
            self.tables.ownership_changes.push(
                db,
                key,
                group.name,
                &entry_id,
                call.seq,
                call.request_seq.unwrap_or(call.seq),
                call.now,
                &call.command,
                change,
                from_consumer,
                to_consumer,
                nack.delivery_count,
                nack.delivery_time,
            );
        }
        Ok(())
    }

    /// A pending entry a snapshot holds (`PELENGINE.LOAD PENDING`): its history
    /// starts here, with the counter the snapshot has and no delivery seen.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn loaded(
        &mut self,
        call: &Call,
        key: &str,
        group: &mut GroupRec,
        entry_id: StreamId,
        nack: &mut PendingEntry,
        exists: bool,
    ) -> Result<(), Fail> {
        let consumer = nack
            .consumer
            .clone()
            .ok_or_else(|| internal("AssertionError: no consumer"))?;
        let owners = std::iter::once(consumer.clone()).collect();
        group.records.insert(
            entry_id,
            DeliveryRecord::new(nack.delivery_count, 0, owners, None, None),
        );
        if !self.record_changes {
            return Ok(());
        }
        self.track_version(call, call.db, key, group.name, &entry_id, nack, exists);
        self.tables.ownership_changes.push(
            call.db,
            key,
            group.name,
            &entry_id,
            call.seq,
            call.seq,
            call.now,
            &call.command,
            "loaded",
            None,
            Some(&consumer),
            nack.delivery_count,
            nack.delivery_time,
        );
        Ok(())
    }

    // -- pel_history -------------------------------------------------------
    //
    // A version of a pending entry (db, key, group, id) starts when the entry
    // enters the PEL or one of the fields the PEL shows changes (consumer,
    // delivery time, delivery count, entry_exists), and ends when the next one
    // starts or the entry leaves the PEL. The open version is kept on the
    // PendingEntry (`version`); closed ones wait in the `pel_history` sink until
    // drained. A version that starts and ends within one command (same seq) was
    // never visible between commands and is dropped.

    /// Entries `ids` left the stream (XDEL, trimming) or came back (XADD): the
    /// pending entries of those IDs change `entry_exists`.
    pub(crate) fn entries_changed(
        &mut self,
        call: &Call,
        key: &str,
        stream: &mut Stream,
        ids: &[StreamId],
    ) {
        if !self.record_changes {
            return;
        }
        let Stream {
            entries, groups, ..
        } = stream;
        for group in groups.values_mut() {
            if group.pel.is_empty() {
                continue;
            }
            for entry_id in ids {
                if let Some(nack) = group.pel.get_mut(entry_id) {
                    let exists = entries.contains(entry_id);
                    self.track_version(call, call.db, key, &group.name, entry_id, nack, exists);
                }
            }
        }
    }

    /// After `call` left the pending entry as it is now: a new version when what the
    /// PEL shows differs from the open version (which then ends).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn track_version(
        &mut self,
        call: &Call,
        db: i64,
        key: &str,
        group: &str,
        entry_id: &StreamId,
        nack: &mut PendingEntry,
        exists: bool,
    ) {
        if let Some(old) = &nack.version {
            if old.consumer == nack.consumer
                && old.delivery_time == nack.delivery_time
                && old.delivery_count == nack.delivery_count
                && old.entry_exists == exists
            {
                return;
            }
            self.close_version(call, db, key, group, entry_id, old);
        }
        nack.version = Some(PelVersion {
            consumer: nack.consumer.clone(),
            delivery_time: nack.delivery_time,
            delivery_count: nack.delivery_count,
            entry_exists: exists,
            from_seq: call.seq,
            from_ms: call.now,
        });
    }

    /// The pending entry leaves the PEL (or its key) with `call`.
    pub(crate) fn end_version(
        &mut self,
        call: &Call,
        db: i64,
        key: &str,
        group: &str,
        entry_id: &StreamId,
        nack: &mut PendingEntry,
    ) {
        if let Some(old) = nack.version.take() {
            self.close_version(call, db, key, group, entry_id, &old);
        }
    }

    fn close_version(
        &mut self,
        call: &Call,
        db: i64,
        key: &str,
        group: &str,
        entry_id: &StreamId,
        version: &PelVersion,
    ) {
        if version.from_seq == call.seq {
            return; // started and ended within one command: never visible
        }
        self.tables.pel_history.push(
            db,
            key,
            group,
            entry_id,
            version,
            Some((call.seq, call.now)),
        );
    }
}

// --------------------------------------------------------------------------
// Argument helpers
// --------------------------------------------------------------------------

/// `argv[i]`; a missing argument is Python's IndexError.
fn arg(argv: &[String], i: usize) -> Result<&str, Fail> {
    argv.get(i)
        .map(String::as_str)
        .ok_or_else(|| Fail::Internal(format!("IndexError: list index out of range ({i})")))
}

fn ll(text: &str) -> Result<i64, Fail> {
    parse_ll(text).ok_or(Fail::Command("not_an_integer"))
}

fn strict_id(text: &str) -> Result<StreamId, Fail> {
    Ok(parse_strict_id(text)?)
}

fn any_id(text: &str) -> Result<StreamId, Fail> {
    Ok(parse_id(text, 0, false, false)?.0)
}

/// Python's `str.lower()` (Unicode-aware).
fn lower(text: &str) -> String {
    text.to_lowercase()
}

fn get_or_create_consumer<'c>(
    consumers: &'c mut IndexMap<String, Consumer>,
    name: &str,
    now: i64,
) -> &'c mut Consumer {
    // look up by &str first: no owned key for a consumer that exists
    let at = match consumers.get_index_of(name) {
        Some(at) => at,
        None => {
            consumers
                .insert_full(name.to_string(), Consumer::new(name, now))
                .0
        }
    };
    &mut consumers[at]
}

/// The consumer `name` (created if missing) seen now: what every read and claim does
/// to the consumer it names.
fn touch_consumer(consumers: &mut IndexMap<String, Consumer>, name: &str, now: i64) {
    get_or_create_consumer(consumers, name, now).seen_time = now;
}

/// XCLAIM/XAUTOCLAIM: the claiming consumer, touched once per command (when the profile
/// creates it eagerly, before the first entry; else at the first entry claimed).
fn claimer<'a>(
    touched: &mut Option<&'a str>,
    consumers: &mut IndexMap<String, Consumer>,
    name: &'a str,
    now: i64,
) -> &'a str {
    if touched.is_none() {
        touch_consumer(consumers, name, now);
        *touched = Some(name);
    }
    name
}

fn consumer_mut<'c>(
    consumers: &'c mut IndexMap<String, Consumer>,
    name: &str,
) -> Result<&'c mut Consumer, Fail> {
    consumers
        .get_mut(name)
        .ok_or_else(|| internal("KeyError: the consumer vanished"))
}

// --------------------------------------------------------------------------
// Stream helpers: the counters Redis derives for entries_read and lag.
// --------------------------------------------------------------------------
//
// `entries_read` and `lag` are estimates, and their rules changed after Redis 7.4.1.
// `strict` selects the rules of Valkey 8.1.1+ (its fix of XINFO GROUPS lag; Redis 8.0
// has most of them too), measured live against Valkey 8.1.8 and 9.1.2:
//   * a tombstone before the first entry still counts as one that may lie ahead
//     (`range_has_tombstones`);
//   * an ID below the largest deleted ID has no estimate (`estimate_entries_read`);
//   * a `>` delivery counts one more read only while the group is not behind the first
//     entry and no tombstone lies after the group's previous last ID (`serve_new`).
// Without `strict`: Redis 7.0 up to 7.4.1 (and Valkey 8.0).

/// The stream counters the estimates read (unchanged while a read serves a group).
#[derive(Clone, Copy, Debug)]
struct StreamStats {
    length: usize,
    entries_added: i64,
    last_id: StreamId,
    max_deleted: StreamId,
    first_id: StreamId,
}

impl StreamStats {
    fn of(stream: &Stream) -> Self {
        StreamStats {
            length: stream.length(),
            entries_added: stream.entries_added,
            last_id: stream.last_id,
            max_deleted: stream.max_deleted_entry_id,
            first_id: stream.first_id,
        }
    }

    /// `entries_added - length + extra` in the server's 64-bit arithmetic (it wraps).
    fn added_minus_length(&self, extra: i64) -> Result<i64, Fail> {
        let value = i128::from(self.entries_added) - self.length as i128 + i128::from(extra);
        Ok(value as i64) // truncation is the server's wrap: the low 64 bits
    }
}

fn tombstones(s: &StreamStats, start: Option<StreamId>, strict: bool) -> bool {
    let mdel = s.max_deleted;
    if s.length == 0 || mdel == ZERO_ID {
        return false;
    }
    if !strict && s.first_id > mdel {
        return false;
    }
    start.unwrap_or(ZERO_ID) <= mdel
}

fn estimate(s: &StreamStats, entry_id: StreamId, strict: bool) -> Result<i64, Fail> {
    if s.entries_added == 0 {
        return Ok(0);
    }
    if s.length == 0 && entry_id <= s.last_id {
        return Ok(s.entries_added);
    }
    if strict && entry_id != ZERO_ID && entry_id < s.max_deleted {
        return Ok(INVALID_ENTRIES_READ);
    }
    if entry_id == s.last_id {
        return Ok(s.entries_added);
    }
    if entry_id > s.last_id {
        return Ok(INVALID_ENTRIES_READ);
    }
    let mdel = s.max_deleted;
    if mdel == ZERO_ID || mdel < s.first_id {
        if entry_id < s.first_id {
            return s.added_minus_length(0);
        }
        if entry_id == s.first_id {
            return s.added_minus_length(1);
        }
    }
    Ok(INVALID_ENTRIES_READ)
}

/// True when an XDEL tombstone may lie at or after `start` (the server's estimate:
/// anything at or before the largest deleted ID). Before the strict rules, a largest
/// deleted ID before the first entry meant none could.
pub fn range_has_tombstones(stream: &Stream, start: Option<StreamId>, strict: bool) -> bool {
    tombstones(&StreamStats::of(stream), start, strict)
}

/// The logical read counter of `entry_id`, or -1 when it cannot be known. The strict
/// rules know nothing of an ID (other than 0-0) below the largest deleted ID.
/// Counters loaded or set to extremes wrap as the server's arithmetic does.
pub fn estimate_entries_read(
    stream: &Stream,
    entry_id: StreamId,
    strict: bool,
) -> Result<i64, String> {
    estimate(&StreamStats::of(stream), entry_id, strict).map_err(fail_message)
}

fn fail_message(fail: Fail) -> String {
    match fail {
        Fail::Command(kind) => kind.to_string(),
        Fail::Internal(message) => message,
    }
}

/// The lag XINFO GROUPS reports, or None where the server replies nil; counters loaded
/// or set to extremes wrap as the server's 64-bit subtraction does.
pub fn try_group_lag(stream: &Stream, group: &Group, strict: bool) -> Result<Option<i64>, String> {
    let s = StreamStats::of(stream);
    if s.entries_added == 0 {
        return Ok(Some(0));
    }
    // the server's subtraction wraps where counters were set to extremes
    let lag = |read: i64| Ok(Some(s.entries_added.wrapping_sub(read)));
    if group.entries_read != INVALID_ENTRIES_READ && !tombstones(&s, Some(group.last_id), strict) {
        return lag(group.entries_read);
    }
    let read = estimate(&s, group.last_id, strict).map_err(fail_message)?;
    if read == INVALID_ENTRIES_READ {
        return Ok(None);
    }
    lag(read)
}

/// The lag XINFO GROUPS reports, or None where the server replies nil, as the Python
/// model's `group_lag`.
pub fn group_lag(stream: &Stream, group: &Group, strict: bool) -> Option<i64> {
    try_group_lag(stream, group, strict).unwrap_or(None)
}

/// A `>` delivery of `entry_id` moves the group's read counter: one more when the
/// counter can be trusted, else the estimate of `entry_id`. The strict rules trust
/// it only while the group is not behind the first entry, and look for tombstones
/// after the group's previous last ID (not after the delivered one).
fn count_read(
    s: &StreamStats,
    last_id: StreamId,
    entries_read: &mut i64,
    entry_id: StreamId,
    strict: bool,
) -> Result<(), Fail> {
    let mut trusted = *entries_read != INVALID_ENTRIES_READ;
    if strict {
        trusted = trusted && last_id >= s.first_id && !tombstones(s, Some(last_id), strict);
    } else {
        trusted = trusted && !tombstones(s, Some(entry_id), false);
    }
    if trusted {
        *entries_read = entries_read.wrapping_add(1); // the server's ++ wraps
    } else if s.entries_added != 0 {
        *entries_read = estimate(s, entry_id, strict)?;
    }
    Ok(())
}

fn refresh_first_id(stream: &mut Stream) {
    stream.first_id = stream.entries.first().copied().unwrap_or(ZERO_ID);
}

// --------------------------------------------------------------------------
// XADD / XTRIM
// --------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strategy {
    MaxLen,
    MinId,
}

#[derive(Clone, Debug)]
struct TrimArgs {
    strategy: Option<Strategy>,
    approx: bool,
    maxlen: i64,
    minid: StreamId,
    limit: i64,
    no_mkstream: bool,
    id_given: bool,
    seq_given: bool,
    given_id: StreamId,
}

impl Default for TrimArgs {
    fn default() -> Self {
        TrimArgs {
            strategy: None,
            approx: false,
            maxlen: 0,
            minid: ZERO_ID,
            limit: 0,
            no_mkstream: false,
            id_given: false,
            seq_given: true,
            given_id: ZERO_ID,
        }
    }
}

/// Options of XADD/XTRIM in server order; returns the ID position (XADD) and the options.
fn parse_add_or_trim(argv: &[String], xadd: bool) -> Result<(usize, TrimArgs), Fail> {
    let mut args = TrimArgs::default();
    let mut limit_given = false;
    let mut i = 2;
    let argc = argv.len();
    while i < argc {
        let moreargs = argc - 1 - i;
        let opt = arg(argv, i)?;
        let low = lower(opt);
        if xadd && opt == "*" {
            break;
        }
        if (low == "maxlen" || low == "minid") && moreargs > 0 {
            if args.strategy.is_some() {
                return Err(Fail::Command("syntax_error"));
            }
            args.approx = false;
            let nxt = arg(argv, i + 1)?;
            if moreargs >= 2 && nxt == "~" {
                args.approx = true;
                i += 1;
            } else if moreargs >= 2 && nxt == "=" {
                i += 1;
            }
            if low == "maxlen" {
                args.maxlen = ll(arg(argv, i + 1)?)?;
                if args.maxlen < 0 {
                    return Err(Fail::Command("out_of_range"));
                }
                args.strategy = Some(Strategy::MaxLen);
            } else {
                args.minid = strict_id(arg(argv, i + 1)?)?;
                args.strategy = Some(Strategy::MinId);
            }
            i += 2;
            continue;
        }
        if low == "limit" && moreargs > 0 {
            args.limit = ll(arg(argv, i + 1)?)?;
            if args.limit < 0 {
                return Err(Fail::Command("out_of_range"));
            }
            limit_given = true;
            i += 2;
            continue;
        }
        if xadd && low == "nomkstream" {
            args.no_mkstream = true;
            i += 1;
            continue;
        }
        if xadd {
            let (given, seq_given) = parse_id(opt, 0, true, true)?;
            args.given_id = given;
            args.seq_given = seq_given;
            args.id_given = true;
            break;
        }
        return Err(Fail::Command("syntax_error"));
    }
    if args.limit != 0 && args.strategy.is_none() {
        return Err(Fail::Command("syntax_error"));
    }
    if !xadd && args.strategy.is_none() {
        return Err(Fail::Command("syntax_error"));
    }
    if limit_given && !args.approx {
        return Err(Fail::Command("syntax_error"));
    }
    Ok((i, args))
}

/// Add an entry at the tail, opening a new node when the tail node is full
/// (`stream-node-max-entries` entries, or `stream-node-max-bytes` bytes).
fn append_entry(
    node_max_entries: i64,
    node_max_bytes: i64,
    stream: &mut Stream,
    entry_id: StreamId,
    fields: &[&str],
    values: &[&str],
) -> Result<(), Fail> {
    let open_tail = match stream.nodes.last() {
        None => false,
        Some(tail) => {
            let mut max_bytes = node_max_bytes;
            if max_bytes <= 0 || max_bytes > LISTPACK_MAX_SIZE {
                max_bytes = LISTPACK_MAX_SIZE;
            }
            let incoming: i128 = fields
                .iter()
                .chain(values.iter())
                .map(|x| i128::from(lp::byte_length(x)))
                .sum();
            !(i128::from(tail.nbytes) + incoming >= i128::from(max_bytes)
                || (node_max_entries != 0 && tail.total >= node_max_entries))
        }
    };
    let tail = match stream.nodes.last_mut() {
        Some(tail) if open_tail => tail,
        _ => {
            stream.entries.insert(entry_id);
            let names: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
            let size = lp::new_node_bytes(fields) + lp::entry_bytes(0, 0, fields, values, true);
            stream.nodes.push(Node::new(entry_id, names, size));
            return Ok(());
        }
    };
    let master = tail.master_id;
    let live = tail
        .live
        .checked_add(1)
        .ok_or_else(|| overflow("node live"))?;
    let total = tail
        .total
        .checked_add(1)
        .ok_or_else(|| overflow("node total"))?;
    let same =
        tail.fields.len() == fields.len() && tail.fields.iter().zip(fields).all(|(a, b)| a == b);
    let grown = i128::from(lp::counter_delta(tail.live, live))
        + i128::from(lp::entry_bytes(
            to_signed(entry_id.ms.wrapping_sub(master.ms)),
            to_signed(entry_id.seq.wrapping_sub(master.seq)),
            fields,
            values,
            same,
        ));
    let nbytes =
        i64::try_from(i128::from(tail.nbytes) + grown).map_err(|_| overflow("node bytes"))?;
    stream.entries.insert(entry_id);
    tail.nbytes = nbytes;
    tail.total = total;
    tail.live = live;
    tail.last_id = entry_id;
    Ok(())
}

/// `count` live entries of `node` become tombstones (its counters grow or shrink).
fn mark_deleted(node: &mut Node, count: i64) -> Result<(), Fail> {
    let deleted = node
        .total
        .checked_sub(node.live)
        .ok_or_else(|| overflow("node"))?;
    let live = node
        .live
        .checked_sub(count)
        .ok_or_else(|| overflow("node live"))?;
    let after = deleted.checked_add(count).ok_or_else(|| overflow("node"))?;
    let grown = i128::from(lp::counter_delta(node.live, live))
        + i128::from(lp::counter_delta(deleted, after));
    node.nbytes =
        i64::try_from(i128::from(node.nbytes) + grown).map_err(|_| overflow("node bytes"))?;
    node.live = live;
    Ok(())
}

/// Python's `bisect_right` (the same probes, even on a list out of order).
fn bisect_right_masters(nodes: &[Node], x: StreamId) -> usize {
    let (mut lo, mut hi) = (0usize, nodes.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if x < nodes[mid].master_id {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// XDEL of one live entry: a node whose last live entry goes is freed.
fn delete_entry(stream: &mut Stream, entry_id: StreamId) -> Result<(), Fail> {
    stream.entries.remove_one(&entry_id);
    let nodes = &mut stream.nodes;
    // bisect_right(...) - 1, where -1 is Python's last node
    let index = match bisect_right_masters(nodes, entry_id).checked_sub(1) {
        Some(index) => index,
        None => nodes
            .len()
            .checked_sub(1)
            .ok_or_else(|| internal("IndexError: list index out of range"))?,
    };
    let node = &mut nodes[index];
    if node.live == 1 {
        nodes.remove(index);
    } else {
        mark_deleted(node, 1)?;
    }
    Ok(())
}

fn approx_limit(args: &TrimArgs, node_max_entries: i64) -> i64 {
    if !args.approx {
        return 0;
    }
    if args.limit != 0 {
        return args.limit;
    }
    let limit = 100 * i128::from(node_max_entries);
    if limit <= 0 {
        return 10000;
    }
    limit.min(1_000_000) as i64
}

/// How many items Python's `lst[:n]` holds, for a list of `len` items.
fn prefix_len(n: i128, len: usize) -> usize {
    let len_i = len as i128;
    let end = if n >= 0 {
        n.min(len_i)
    } else {
        (len_i + n).max(0)
    };
    end as usize
}

/// Remove entries from the head as MAXLEN/MINID asks.
///
/// Walks the internal nodes from the head: a node is dropped whole when the
/// threshold allows; approximate trimming (`~`) stops at the first node it
/// cannot drop whole (or when LIMIT entries would be exceeded), exact trimming
/// goes on inside that node. Node sizes follow `stream-node-max-entries`
/// and `stream-node-max-bytes` (see `listpack`). Pending entries of the
/// removed IDs now dangle (`Recorder::entries_changed`).
fn trim(
    hist: &mut Recorder,
    node_max_entries: i64,
    call: &Call,
    key: &str,
    stream: &mut Stream,
    args: &TrimArgs,
) -> Result<(), Fail> {
    let limit = i128::from(approx_limit(args, node_max_entries));
    let maxlen = i128::from(args.maxlen);
    let by_maxlen = args.strategy == Some(Strategy::MaxLen);
    let mut deleted: i128 = 0;
    // the removed IDs, when a pending entry's history may need them
    let mut removed: Option<Vec<StreamId>> =
        if hist.record_changes && stream.groups.values().any(|g| !g.pel.is_empty()) {
            Some(Vec::new())
        } else {
            None
        };
    while let Some(node) = stream.nodes.first_mut() {
        let len = stream.entries.len();
        if by_maxlen && len as i128 <= maxlen {
            break;
        }
        let live = i128::from(node.live);
        if limit != 0 && deleted + live > limit {
            break;
        }
        let remove_node = if by_maxlen {
            len as i128 - live >= maxlen
        } else {
            node.last_id < args.minid
        };
        if remove_node {
            let gone = stream.entries.pop_front(prefix_len(live, len));
            if let Some(removed) = removed.as_mut() {
                removed.extend(gone);
            }
            deleted += live;
            stream.nodes.remove(0);
            continue;
        }
        if args.approx {
            break;
        }
        let cut: i128 = if by_maxlen {
            len as i128 - maxlen
        } else if live <= 0 {
            live
        } else {
            stream.entries.count_below(&args.minid, live as usize) as i128
        };
        if cut > 0 {
            let gone = stream.entries.pop_front(prefix_len(cut, len));
            if let Some(removed) = removed.as_mut() {
                removed.extend(gone);
            }
            let count = i64::try_from(cut).map_err(|_| overflow("trim"))?;
            mark_deleted(node, count)?;
            deleted += cut;
        }
        break;
    }
    if deleted != 0 {
        refresh_first_id(stream);
        if let Some(removed) = removed.filter(|r| !r.is_empty()) {
            hist.entries_changed(call, key, stream, &removed);
        }
    }
    Ok(())
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT n]] <*|id|ms-*> field value ...
///
/// Appends an entry. `*` takes max(now, last_id.ms) with the next sequence;
/// `ms-*` picks the sequence; an explicit ID must exceed the stream's
/// last_id and may not be 0-0. Creates the key unless NOMKSTREAM. Counts
/// `entries_added`; records the first entry ID when the stream was empty.
/// Trimming then removes entries from the head; their PEL entries stay
/// dangling. Groups are untouched.
pub fn xadd(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let (idpos, args) = parse_add_or_trim(argv, true)?;
    let field_pos = idpos + 1;
    let nfields = argv.len() as i128 - field_pos as i128;
    if nfields < 2 || nfields % 2 == 1 {
        return Err(Fail::Command("wrong_arity"));
    }
    if args.id_given && args.seq_given && args.given_id == ZERO_ID {
        return Err(Fail::Command("id_zero"));
    }
    let key = arg(argv, 1)?;
    let (db, now) = (call.db, call.now);
    if m.lookup_stream(db, key)?.is_none() {
        if args.no_mkstream {
            return Ok(());
        }
        m.create_stream(db, key);
    }
    let (node_max_entries, node_max_bytes) = (m.node_max_entries, m.node_max_bytes);
    let stream = stream_in(m.keys, db, key)?;
    let last = stream.last_id;
    if last == MAX_ID {
        return Err(Fail::Command("stream_exhausted"));
    }
    let new_id = if args.id_given {
        if args.seq_given {
            args.given_id
        } else if last.ms == args.given_id.ms {
            if last.seq == U64_MAX {
                return Err(Fail::Command("id_too_small"));
            }
            StreamId::new(last.ms, last.seq + 1)
        } else {
            StreamId::new(args.given_id.ms, 0)
        }
    } else if i128::from(now) > i128::from(last.ms) {
        StreamId::new(now as u64, 0)
    } else {
        incr_id(last).unwrap_or(ZERO_ID)
    };
    if new_id <= last {
        return Err(Fail::Command("id_too_small"));
    }
    let entries_added = stream
        .entries_added
        .checked_add(1)
        .ok_or_else(|| overflow("entries_added"))?;
    let rest = argv.get(field_pos..).unwrap_or_default();
    let fields: Vec<&str> = rest.iter().step_by(2).map(String::as_str).collect();
    let values: Vec<&str> = rest.iter().skip(1).step_by(2).map(String::as_str).collect();
    append_entry(
        node_max_entries,
        node_max_bytes,
        stream,
        new_id,
        &fields,
        &values,
    )?;
    if !stream.groups.is_empty() {
        // an ID deleted while pending can come back (XSETID below it, then XADD)
        m.hist.entries_changed(call, key, stream, &[new_id]);
    }
    stream.last_id = new_id;
    stream.entries_added = entries_added;
    if stream.length() == 1 {
        stream.first_id = new_id;
    }
    call.result.set(Some(new_id));
    m.waits.signal(db, key);
    if args.strategy.is_some() {
        let stream = stream_in(m.keys, db, key)?;
        trim(&mut m.hist, node_max_entries, call, key, stream, &args)?;
    }
    Ok(())
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT n]
///
/// Removes entries from the head of the stream. A missing key is not an
/// error. Trimming does not move `max_deleted_entry_id`; PEL entries of
/// trimmed IDs stay pending (dangling) until a claim or ack touches them.
pub fn xtrim(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let (_, args) = parse_add_or_trim(&call.argv, false)?;
    let key = arg(&call.argv, 1)?;
    let node_max_entries = m.node_max_entries;
    let Some(stream) = lookup_stream_in(m.keys, call.db, key)? else {
        return Ok(());
    };
    trim(&mut m.hist, node_max_entries, call, key, stream, &args)
}

/// XDEL key id [id ...]
///
/// Deletes entries by ID (all IDs are parsed first: one bad ID fails the whole
/// command). Raises `max_deleted_entry_id` to the largest deleted ID and
/// updates the recorded first entry. PEL entries of deleted IDs stay dangling.
pub fn xdel(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let key = arg(argv, 1)?;
    let Some(stream) = lookup_stream_in(m.keys, call.db, key)? else {
        return Ok(());
    };
    let ids = argv
        .get(2..)
        .unwrap_or_default()
        .iter()
        .map(|a| strict_id(a))
        .collect::<Result<Vec<_>, _>>()?;
    let mut deleted = 0;
    let mut first_entry = false;
    let mut removed: Vec<StreamId> = Vec::new();
    for entry_id in ids {
        if stream.entries.contains(&entry_id) {
            delete_entry(stream, entry_id)?;
            removed.push(entry_id);
            if entry_id == stream.first_id {
                first_entry = true;
            }
            if entry_id > stream.max_deleted_entry_id {
                stream.max_deleted_entry_id = entry_id;
            }
            deleted += 1;
        }
    }
    if deleted != 0 && (stream.length() == 0 || first_entry) {
        refresh_first_id(stream);
    }
    if !removed.is_empty() && !stream.groups.is_empty() {
        m.hist.entries_changed(call, key, stream, &removed);
    }
    Ok(())
}

/// `Model::lookup_stream` on the keyspace alone.
fn lookup_stream_in<'k>(
    keys: &'k mut Keys,
    db: i64,
    key: &str,
) -> Result<Option<&'k mut Stream>, Fail> {
    match keys.get_mut(&KeyRef(db, key)) {
        None => Ok(None),
        Some(Value::Other(_)) => Err(Fail::Command("wrongtype")),
        Some(Value::Stream(stream)) => Ok(Some(stream)),
    }
}

/// The stream a handler found at `key` before, on the keyspace alone.
fn stream_in<'k>(keys: &'k mut Keys, db: i64, key: &str) -> Result<&'k mut Stream, Fail> {
    match keys.get_mut(&KeyRef(db, key)) {
        Some(Value::Stream(stream)) => Ok(stream),
        _ => Err(internal("KeyError: the stream vanished")),
    }
}

// --------------------------------------------------------------------------
// XREADGROUP
// --------------------------------------------------------------------------

/// Deliver entries after the group's last_id (a `>` read).
#[allow(clippy::too_many_arguments)]
fn serve_new(
    hist: &mut Recorder,
    profile: &Profile,
    call: &Call,
    key: &str,
    stats: &StreamStats,
    entries: &Entries,
    group: &mut Group,
    consumer: &str,
    count: i64,
    noack: bool,
) -> Result<(), Fail> {
    let now = call.now;
    let g = parts(group);
    let GroupParts {
        last_id,
        entries_read,
        pel,
        consumers,
        mut rec,
    } = g;
    let start = incr_id(*last_id).unwrap_or(ZERO_ID);
    let mut delivered: i64 = 0;
    for &entry_id in entries.iter_from(start) {
        delivered += 1;
        if entry_id > *last_id {
            count_read(stats, *last_id, entries_read, entry_id, profile.strict_lag)?;
            *last_id = entry_id;
        }
        if !noack {
            let exists = entries.contains(&entry_id);
            match pel.get_mut(&entry_id) {
                None => {
                    let nack = pel
                        .entry(entry_id)
                        .or_insert_with(|| PendingEntry::new(Some(consumer.to_string()), now, 1));
                    consumer_mut(consumers, consumer)?.pel.insert(entry_id);
                    hist.record(
                        call,
                        call.db,
                        key,
                        &mut rec,
                        entry_id,
                        "delivered",
                        None,
                        Some(consumer),
                        nack,
                        None,
                        exists,
                    )?;
                }
                Some(nack) => {
                    let previous = nack.consumer.take();
                    if let Some(previous) = &previous {
                        if let Some(owner) = consumers.get_mut(previous) {
                            owner.pel.remove(&entry_id);
                        }
                    }
                    nack.consumer = Some(consumer.to_string());
                    nack.delivery_time = now;
                    nack.delivery_count = 1;
                    consumer_mut(consumers, consumer)?.pel.insert(entry_id);
                    hist.record(
                        call,
                        call.db,
                        key,
                        &mut rec,
                        entry_id,
                        "reassigned",
                        previous.as_deref(),
                        Some(consumer),
                        nack,
                        None,
                        exists,
                    )?;
                }
            }
            if profile.active_time {
                consumer_mut(consumers, consumer)?.active_time = now;
            }
        }
        if count != 0 && delivered == count {
            break;
        }
    }
    Ok(())
}

/// Re-deliver the consumer's own pending entries from `start` (a history read).
#[allow(clippy::too_many_arguments)]
fn serve_history(
    hist: &mut Recorder,
    call: &Call,
    key: &str,
    entries: &Entries,
    group: &mut Group,
    consumer: &str,
    start: StreamId,
    count: i64,
) -> Result<(), Fail> {
    let GroupParts {
        pel,
        consumers,
        mut rec,
        ..
    } = parts(group);
    let owned = &consumer_mut(consumers, consumer)?.pel;
    let limit = if count > 0 {
        count as usize
    } else {
        usize::MAX
    };
    let ids: Vec<StreamId> = owned.range(start..).take(limit).copied().collect();
    for entry_id in ids {
        if entries.contains(&entry_id) {
            let nack = pel
                .get_mut(&entry_id)
                .ok_or_else(|| internal("KeyError: a consumer's entry is not pending"))?;
            let delivery_count = nack
                .delivery_count
                .checked_add(1)
                .ok_or_else(|| overflow("delivery_count"))?;
            nack.delivery_time = call.now;
            nack.delivery_count = delivery_count;
            hist.record(
                call,
                call.db,
                key,
                &mut rec,
                entry_id,
                "redelivered",
                Some(consumer),
                Some(consumer),
                nack,
                None,
                true,
            )?;
        }
    }
    Ok(())
}

/// XREADGROUP GROUP g c [COUNT n] [BLOCK ms] [NOACK] STREAMS key [key ...] id [id ...]
///
/// For each stream: with `>`, delivers entries after the group's last_id
/// (COUNT limits; 0 or negative means all), advancing last_id and
/// entries_read and creating PEL entries (count 1, time now) owned by the
/// reader; an ID already pending is reassigned to the reader with its count
/// reset to 1. NOACK delivers without PEL entries. With any other ID, re-reads
/// the reader's own pending entries after that ID: each one still in the
/// stream gets count+1 and time now; deleted ones stay pending untouched.
/// Every key must exist with the group, or the command fails as a whole.
///
/// Side effects: 7.0 creates the consumer and refreshes its seen time only on
/// a stream that is served (a history read, or a `>` read with entries after
/// last_id); 7.2+ does so on every call, and sets active time on `>`
/// deliveries that create PEL entries.
///
/// With BLOCK, a call that serves nothing blocks its client until a later write
/// to one of its keys serves it (see `Replayer` and `Waits::block`), its timeout
/// passes (`BLOCK 0`: never) or the client sends something else; inside an
/// execution unit (MULTI, a script) it never blocks. A script may not name BLOCK at
/// all on 7.0 and 7.2 (an error); 7.4 and Valkey accept it.
pub fn xreadgroup(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let argc = argv.len();
    let mut group_name: Option<&str> = None;
    let mut consumer_name: &str = "";
    let mut count: i64 = 0;
    let mut noack = false;
    let mut block_ms: Option<i64> = None;
    let mut streams_arg = 0usize;
    let mut i = 1;
    while i < argc {
        let moreargs = argc - i - 1;
        let low = lower(arg(argv, i)?);
        if low == "block" && moreargs > 0 {
            if call.client.as_deref() == Some(LUA_CLIENT) && !m.profile.script_block {
                return Err(Fail::Command("block_in_script"));
            }
            i += 1;
            let timeout = parse_ll(arg(argv, i)?).ok_or(Fail::Command("not_an_integer"))?;
            if timeout < 0 {
                return Err(Fail::Command("out_of_range"));
            }
            block_ms = Some(timeout);
        } else if low == "count" && moreargs > 0 {
            i += 1;
            count = ll(arg(argv, i)?)?.max(0);
        } else if low == "streams" && moreargs > 0 {
            streams_arg = i + 1;
            if !(argc - streams_arg).is_multiple_of(2) {
                return Err(Fail::Command("syntax_error"));
            }
            break;
        } else if low == "group" && moreargs >= 2 {
            group_name = Some(arg(argv, i + 1)?);
            consumer_name = arg(argv, i + 2)?;
            i += 2;
        } else if low == "noack" {
            noack = true;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
        i += 1;
    }
    let Some(group_name) = group_name.filter(|_| streams_arg != 0) else {
        return Err(Fail::Command("syntax_error"));
    };
    let nstreams = (argc - streams_arg) / 2;
    let keys = &argv[streams_arg..streams_arg + nstreams];
    let ids = &argv[streams_arg + nstreams..];
    let mut targets: Vec<(&str, Option<StreamId>)> = Vec::with_capacity(nstreams);
    for (key, id_text) in keys.iter().zip(ids) {
        let found = match m.lookup_stream(call.db, key)? {
            Some(stream) => stream.groups.contains_key(group_name),
            None => false,
        };
        if !found {
            return Err(Fail::Command("nogroup"));
        }
        if id_text == "$" || (id_text == "+" && m.profile.name != "7.0") {
            return Err(Fail::Command("syntax_error"));
        }
        if id_text == ">" {
            targets.push((key, None));
        } else {
            let given = strict_id(id_text)?;
            targets.push((key, if given == MAX_ID { None } else { Some(given) }));
        }
    }
    let profile = m.profile;
    let now = call.now;
    let mut served = false;
    for (key, gt) in targets {
        let eager = profile.eager_consumers;
        let stream = stream_in(m.keys, call.db, key)?;
        let stats = StreamStats::of(stream);
        let Stream {
            entries, groups, ..
        } = stream;
        let group = groups
            .get_mut(group_name)
            .ok_or_else(|| internal("KeyError: the group vanished"))?;
        if let Some(gt) = gt {
            touch_consumer(&mut group.consumers, consumer_name, now);
            let start = incr_id(gt).unwrap_or(ZERO_ID);
            serve_history(
                &mut m.hist,
                call,
                key,
                entries,
                group,
                consumer_name,
                start,
                count,
            )?;
            served = true;
            continue;
        }
        let serve = matches!(entries.last(), Some(last) if *last > group.last_id);
        if eager || serve {
            touch_consumer(&mut group.consumers, consumer_name, now);
            if serve {
                serve_new(
                    &mut m.hist,
                    profile,
                    call,
                    key,
                    &stats,
                    entries,
                    group,
                    consumer_name,
                    count,
                    noack,
                )?;
                served = true;
            }
        }
    }
    if !served {
        if let Some(block_ms) = block_ms {
            if !m.waits.in_transaction(call.client.as_deref()) {
                m.waits.block(
                    call,
                    keys,
                    group_name,
                    consumer_name,
                    count,
                    noack,
                    block_ms,
                );
            }
        }
    }
    Ok(())
}

/// Redis 7.0 serving a reader blocked on `key` after the key was signalled.
///
/// Returns true when the reader is unblocked: served (entries after the group's
/// last_id; COUNT or 1000 of them; consumer created or its seen time refreshed
/// now), or ended because the key is gone, is no stream, or lost the group.
pub fn serve_blocked_7_0(
    m: &mut Model,
    call: &Call,
    key: &str,
    blocked: &BlockedRead,
) -> Result<bool, Fail> {
    let profile = m.profile;
    let Some(Value::Stream(stream)) = m.keys.get_mut(&KeyRef(call.db, key)) else {
        return Ok(true);
    };
    let stats = StreamStats::of(stream);
    let Stream {
        entries,
        groups,
        last_id,
        ..
    } = stream;
    let Some(group) = groups.get_mut(&blocked.group) else {
        return Ok(true);
    };
    if *last_id <= group.last_id {
        return Ok(false);
    }
    get_or_create_consumer(&mut group.consumers, &blocked.consumer, call.now).seen_time = call.now;
    let count = if blocked.count != 0 {
        blocked.count
    } else {
        BLOCKED_DEFAULT_COUNT
    };
    serve_new(
        &mut m.hist,
        profile,
        call,
        key,
        &stats,
        entries,
        group,
        &blocked.consumer,
        count,
        blocked.noack,
    )?;
    Ok(true)
}

/// After a command (or a unit): serve, in the order the keys were signalled and
/// then in blocking order, the readers of every signalled key.
pub fn serve_ready(m: &mut Model) -> Result<(), Fail> {
    while let Some(((db, key), signalled)) = m.waits.ready.shift_remove_index(0) {
        let trigger = signalled
            .or(m.waits.current)
            .ok_or_else(|| internal("AssertionError: no trigger"))?;
        let waiting: Vec<BlockedRead> = m
            .waits
            .blocked
            .iter()
            .filter(|b| b.db == db && b.keys.contains(&key))
            .cloned()
            .collect();
        for blocked in waiting {
            let Some(position) = m.waits.blocked.iter().position(|b| *b == blocked) else {
                continue;
            };
            let call = Call::new(
                trigger.seq,
                trigger.now,
                db,
                blocked.client.clone(),
                blocked.argv.clone(),
                "XREADGROUP",
                Some(blocked.seq),
            );
            if !m.profile.eager_consumers {
                if serve_blocked_7_0(m, &call, &key, &blocked)? {
                    if let Some(position) = m.waits.blocked.iter().position(|b| *b == blocked) {
                        m.waits.blocked.remove(position);
                    }
                }
                continue;
            }
            // 7.2+: the blocked command runs again; it blocks again (behind the
            // others) when it still finds nothing, keeping its deadline.
            m.waits.blocked.remove(position);
            let before = m.waits.blocked.len();
            match xreadgroup(m, &call) {
                Err(Fail::Command(_)) => continue,
                Err(fail) => return Err(fail),
                Ok(()) => {}
            }
            if m.waits.blocked.len() > before {
                if let Some(last) = m.waits.blocked.last_mut() {
                    last.deadline = blocked.deadline;
                }
            }
        }
    }
    Ok(())
}

// --------------------------------------------------------------------------
// XCLAIM / XAUTOCLAIM / XACK
// --------------------------------------------------------------------------

/// The group `argv[2]` of the stream `argv[1]` must exist (else NOGROUP).
fn lookup_group(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let key = arg(&call.argv, 1)?;
    let name = arg(&call.argv, 2)?;
    match m.lookup_stream(call.db, key)? {
        Some(stream) if stream.groups.contains_key(name) => Ok(()),
        _ => Err(Fail::Command("nogroup")),
    }
}

/// A claim found the entry gone from the stream: the PEL entry is removed.
fn drop_dangling(
    hist: &mut Recorder,
    call: &Call,
    key: &str,
    group: &mut Group,
    entry_id: StreamId,
) -> Result<(), Fail> {
    let GroupParts {
        pel,
        consumers,
        mut rec,
        ..
    } = parts(group);
    let mut nack = pel
        .remove(&entry_id)
        .ok_or_else(|| internal("KeyError: not pending"))?;
    if let Some(owner) = nack.consumer.as_ref().and_then(|c| consumers.get_mut(c)) {
        owner.pel.remove(&entry_id);
    }
    let from = nack.consumer.clone();
    hist.record(
        call,
        call.db,
        key,
        &mut rec,
        entry_id,
        "dropped",
        from.as_deref(),
        None,
        &mut nack,
        Some("deleted"),
        false,
    )
}

#[allow(clippy::too_many_arguments)]
fn claim(
    hist: &mut Recorder,
    profile: &Profile,
    call: &Call,
    key: &str,
    group: &mut Group,
    entry_id: StreamId,
    consumer: &str,
    delivery_time: i64,
    retrycount: i64,
    justid: bool,
    exists: bool,
) -> Result<(), Fail> {
    let GroupParts {
        pel,
        consumers,
        mut rec,
        ..
    } = parts(group);
    let nack = pel
        .get_mut(&entry_id)
        .ok_or_else(|| internal("KeyError: not pending"))?;
    let previous = nack.consumer.clone();
    let moved = previous.as_deref() != Some(consumer);
    let delivery_count = if retrycount >= 0 {
        retrycount
    } else if !justid {
        nack.delivery_count
            .checked_add(1)
            .ok_or_else(|| overflow("delivery_count"))?
    } else {
        nack.delivery_count
    };
    if moved {
        if let Some(owner) = previous.as_ref().and_then(|p| consumers.get_mut(p)) {
            owner.pel.remove(&entry_id);
        }
    }
    nack.delivery_time = delivery_time;
    nack.delivery_count = delivery_count;
    if moved {
        consumer_mut(consumers, consumer)?.pel.insert(entry_id);
        nack.consumer = Some(consumer.to_string());
    }
    if profile.active_time {
        consumer_mut(consumers, consumer)?.active_time = call.now;
    }
    hist.record(
        call,
        call.db,
        key,
        &mut rec,
        entry_id,
        "claimed",
        previous.as_deref(),
        Some(consumer),
        nack,
        None,
        exists,
    )
}

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME ms] [RETRYCOUNT n]
/// [FORCE] [JUSTID] [LASTID id]
///
/// Gives pending entries to `consumer` when idle >= min-idle-time (0 or
/// negative: always). IDs are parsed until the first non-ID, the rest are
/// options; any bad option fails the whole command. An ID whose entry is gone
/// from the stream is removed from the PEL instead of claimed. FORCE creates a
/// PEL entry for an existing stream entry nobody holds. IDLE/TIME set the
/// delivery time (future or negative values become now); RETRYCOUNT sets the
/// counter, otherwise it is incremented unless JUSTID. LASTID moves the
/// group's last_id forward only.
///
/// Side effects: 7.0 creates the consumer / refreshes its seen time at the
/// first successful claim only; 7.2+ on every call, and sets its active time
/// on each successful claim.
pub fn xclaim(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let key = arg(argv, 1)?;
    lookup_group(m, call)?;
    let minidle = i128::from(ll(arg(argv, 4)?)?.max(0));
    let mut ids: Vec<StreamId> = Vec::new();
    let mut j = 5;
    while j < argv.len() {
        match parse_strict_id(&argv[j]) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let now = call.now;
    let (mut force, mut justid) = (false, false);
    let mut retrycount: i64 = -1;
    let mut delivery_time: i128 = -1;
    let mut last_id = ZERO_ID;
    while j < argv.len() {
        let moreargs = argv.len() - 1 - j;
        let low = lower(&argv[j]);
        if low == "force" {
            force = true;
        } else if low == "justid" {
            justid = true;
        } else if low == "idle" && moreargs > 0 {
            j += 1;
            delivery_time = i128::from(now) - i128::from(ll(arg(argv, j)?)?);
        } else if low == "time" && moreargs > 0 {
            j += 1;
            delivery_time = i128::from(ll(arg(argv, j)?)?);
        } else if low == "retrycount" && moreargs > 0 {
            j += 1;
            retrycount = ll(arg(argv, j)?)?;
        } else if low == "lastid" && moreargs > 0 {
            j += 1;
            last_id = strict_id(arg(argv, j)?)?;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
        j += 1;
    }
    let profile = m.profile;
    let stream = stream_in(m.keys, call.db, key)?;
    let Stream {
        entries, groups, ..
    } = stream;
    let group = groups
        .get_mut(arg(argv, 2)?)
        .ok_or_else(|| internal("KeyError: the group vanished"))?;
    if last_id > group.last_id {
        group.last_id = last_id;
    }
    let delivery_time: i64 =
        if delivery_time == -1 || delivery_time < 0 || delivery_time > i128::from(now) {
            now
        } else {
            delivery_time as i64 // within 0..=now
        };
    let consumer_name = arg(argv, 3)?;
    let mut consumer: Option<&str> = None;
    if profile.eager_consumers {
        claimer(&mut consumer, &mut group.consumers, consumer_name, now);
    }
    for entry_id in ids {
        let pending = group.pel.contains_key(&entry_id);
        if !entries.contains(&entry_id) {
            if pending {
                drop_dangling(&mut m.hist, call, key, group, entry_id)?;
            }
            continue;
        }
        if force && !pending {
            group.pel.insert(entry_id, PendingEntry::new(None, now, 1));
        }
        let Some(nack) = group.pel.get(&entry_id) else {
            continue;
        };
        if nack.consumer.is_some()
            && minidle != 0
            && i128::from(now) - i128::from(nack.delivery_time) < minidle
        {
            continue;
        }
        let claimer = claimer(&mut consumer, &mut group.consumers, consumer_name, now);
        claim(
            &mut m.hist,
            profile,
            call,
            key,
            group,
            entry_id,
            claimer,
            delivery_time,
            retrycount,
            justid,
            true,
        )?;
    }
    Ok(())
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID]
///
/// Scans the group PEL in ID order from `start` (`(id` excludes it),
/// examining at most COUNT*10 entries (COUNT defaults to 100) and claiming up
/// to COUNT of those idle >= min-idle-time: delivery time becomes now and the
/// counter is incremented unless JUSTID. Entries gone from the stream are
/// removed from the PEL and count against COUNT. The reply's cursor is the
/// next PEL ID after the scan, 0-0 at the end.
///
/// Side effects: as XCLAIM (7.0: consumer at the first claim; 7.2+: always).
pub fn xautoclaim(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let key = arg(argv, 1)?;
    let minidle = i128::from(ll(arg(argv, 4)?)?.max(0));
    let start_text = arg(argv, 5)?;
    let start = match start_text.strip_prefix('(') {
        Some(rest) if !rest.is_empty() => {
            incr_id(strict_id(rest)?).ok_or(Fail::Command("invalid_id"))?
        }
        _ => any_id(start_text)?,
    };
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    let max_count = i64::MAX / 16;
    while j < argv.len() {
        let moreargs = argv.len() - 1 - j;
        let low = lower(&argv[j]);
        if low == "count" && moreargs > 0 {
            match parse_ll(arg(argv, j + 1)?) {
                Some(value) if (1..=max_count).contains(&value) => count = value,
                _ => return Err(Fail::Command("out_of_range")),
            }
            j += 1;
        } else if low == "justid" {
            justid = true;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
        j += 1;
    }
    lookup_group(m, call)?;
    let profile = m.profile;
    let now = call.now;
    let stream = stream_in(m.keys, call.db, key)?;
    let Stream {
        entries, groups, ..
    } = stream;
    let group = groups
        .get_mut(arg(argv, 2)?)
        .ok_or_else(|| internal("KeyError: the group vanished"))?;
    let consumer_name = arg(argv, 3)?;
    let mut consumer: Option<&str> = None;
    if profile.eager_consumers {
        claimer(&mut consumer, &mut group.consumers, consumer_name, now);
    }
    let mut attempts = count * 10;
    let mut position = start;
    let mut last_examined: Option<StreamId> = None;
    while attempts != 0 && count != 0 {
        attempts -= 1;
        let Some((&entry_id, nack)) = group.pel.range(position..).next() else {
            break;
        };
        let delivery_time = nack.delivery_time;
        last_examined = Some(entry_id);
        position = incr_id(entry_id).unwrap_or(MAX_ID);
        if !entries.contains(&entry_id) {
            drop_dangling(&mut m.hist, call, key, group, entry_id)?;
            count -= 1;
            continue;
        }
        if minidle != 0 && i128::from(now) - i128::from(delivery_time) < minidle {
            continue;
        }
        let claimer = claimer(&mut consumer, &mut group.consumers, consumer_name, now);
        claim(
            &mut m.hist,
            profile,
            call,
            key,
            group,
            entry_id,
            claimer,
            now,
            -1,
            justid,
            true,
        )?;
        count -= 1;
    }
    let mut cursor = ZERO_ID;
    if matches!(last_examined, Some(id) if id != MAX_ID) {
        cursor = group
            .pel
            .range(position..)
            .next()
            .map(|(id, _)| *id)
            .unwrap_or(ZERO_ID);
    }
    call.result.set(Some(cursor));
    Ok(())
}

/// XACK key group id [id ...]
///
/// Removes the given IDs from the group PEL (and their owners' PELs); unknown
/// IDs are ignored. A missing key or group acknowledges nothing without error;
/// otherwise one malformed ID fails the whole command.
pub fn xack(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let key = arg(argv, 1)?;
    let name = arg(argv, 2)?;
    let Some(stream) = lookup_stream_in(m.keys, call.db, key)? else {
        return Ok(());
    };
    let Some(group) = stream.groups.get_mut(name) else {
        return Ok(());
    };
    let ids = argv
        .get(3..)
        .unwrap_or_default()
        .iter()
        .map(|a| strict_id(a))
        .collect::<Result<Vec<_>, _>>()?;
    let GroupParts {
        pel,
        consumers,
        mut rec,
        ..
    } = parts(group);
    for entry_id in ids {
        let Some(mut nack) = pel.remove(&entry_id) else {
            continue;
        };
        if let Some(owner) = nack.consumer.as_ref().and_then(|c| consumers.get_mut(c)) {
            owner.pel.remove(&entry_id);
        }
        let from = nack.consumer.clone();
        m.hist.record(
            call,
            call.db,
            key,
            &mut rec,
            entry_id,
            "acked",
            from.as_deref(),
            None,
            &mut nack,
            Some("acked"),
            false,
        )?;
    }
    Ok(())
}

// --------------------------------------------------------------------------
// XGROUP / XSETID
// --------------------------------------------------------------------------

fn xgroup_arity(sub: &str) -> Option<i64> {
    match sub {
        "create" | "setid" => Some(-5),
        "destroy" => Some(4),
        "createconsumer" | "delconsumer" => Some(5),
        _ => None,
    }
}

/// XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n]
/// XGROUP SETID key group id|$ [ENTRIESREAD n]
/// XGROUP DESTROY key group
/// XGROUP CREATECONSUMER key group consumer
/// XGROUP DELCONSUMER key group consumer
///
/// CREATE adds a group whose last_id is the given ID (`$`: the stream's
/// last_id) and whose entries_read is ENTRIESREAD or unknown; MKSTREAM creates
/// an empty stream when the key is missing. SETID moves last_id anywhere
/// (backwards too) and resets entries_read to ENTRIESREAD or unknown; the PEL
/// is untouched. DESTROY drops the group and its PEL. CREATECONSUMER adds an
/// idle consumer (seen time now). DELCONSUMER removes a consumer with all the
/// entries it holds.
pub fn xgroup(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let argc = argv.len();
    let sub = lower(arg(argv, 1)?);
    if sub == "help" {
        return Ok(());
    }
    let arity = xgroup_arity(&sub).ok_or(Fail::Command("unknown_subcommand"))?;
    let argc_i = argc as i64;
    if (arity > 0 && argc_i != arity) || (arity < 0 && argc_i < -arity) {
        return Err(Fail::Command("wrong_arity"));
    }
    let key = arg(argv, 2)?;
    let group_name = arg(argv, 3)?;
    let mut mkstream = false;
    let mut entries_read = INVALID_ENTRIES_READ;
    let mut i = 5;
    while i < argc {
        let low = lower(&argv[i]);
        if sub == "create" && low == "mkstream" {
            mkstream = true;
            i += 1;
        } else if (sub == "create" || sub == "setid") && low == "entriesread" && i + 1 < argc {
            entries_read = ll(&argv[i + 1])?;
            if entries_read < 0 && entries_read != INVALID_ENTRIES_READ {
                return Err(Fail::Command("out_of_range"));
            }
            i += 2;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
    }
    let (db, now) = (call.db, call.now);
    let stream_last = m.lookup_stream(db, key)?.map(|s| s.last_id);
    let mut group_exists = false;
    if !mkstream {
        let Some(stream) = m.lookup_stream(db, key)? else {
            return Err(Fail::Command("no_such_key"));
        };
        group_exists = stream.groups.contains_key(group_name);
        if !group_exists && matches!(sub.as_str(), "setid" | "createconsumer" | "delconsumer") {
            return Err(Fail::Command("nogroup"));
        }
    }
    if sub == "create" {
        if argc > 8 {
            return Err(Fail::Command("syntax_error"));
        }
        let start = if arg(argv, 4)? == "$" {
            stream_last.unwrap_or(ZERO_ID)
        } else {
            strict_id(arg(argv, 4)?)?
        };
        if stream_last.is_none() {
            m.create_stream(db, key);
        }
        let stream = m.stream_mut(db, key)?;
        if stream.groups.contains_key(group_name) {
            return Err(Fail::Command("busygroup"));
        }
        stream.groups.insert(
            group_name.to_string(),
            Group::new(group_name, start, entries_read, call.seq),
        );
        return Ok(());
    }
    let stream = stream_in(m.keys, db, key)?;
    match sub.as_str() {
        "setid" => {
            if argc != 5 && argc != 7 {
                return Err(Fail::Command("syntax_error"));
            }
            let new_last = if arg(argv, 4)? == "$" {
                stream.last_id
            } else {
                any_id(arg(argv, 4)?)?
            };
            let group = stream
                .groups
                .get_mut(group_name)
                .ok_or_else(|| internal("AssertionError: no group"))?;
            group.last_id = new_last;
            group.entries_read = entries_read;
        }
        "destroy" => {
            if group_exists {
                if let Some(mut group) = stream.groups.shift_remove(group_name) {
                    m.hist
                        .close_group(call, db, key, &mut group, "group_destroyed")?;
                }
                m.waits.signal(db, key);
            }
        }
        "createconsumer" => {
            let group = stream
                .groups
                .get_mut(group_name)
                .ok_or_else(|| internal("AssertionError: no group"))?;
            let name = arg(argv, 4)?;
            if !group.consumers.contains_key(name) {
                group
                    .consumers
                    .insert(name.to_string(), Consumer::new(name, now));
            }
        }
        _ => {
            // delconsumer
            let group = stream
                .groups
                .get_mut(group_name)
                .ok_or_else(|| internal("AssertionError: no group"))?;
            let GroupParts {
                pel,
                consumers,
                mut rec,
                ..
            } = parts(group);
            if let Some(consumer) = consumers.shift_remove(arg(argv, 4)?) {
                for entry_id in consumer.pel.iter().copied() {
                    let mut nack = pel
                        .remove(&entry_id)
                        .ok_or_else(|| internal("KeyError: a consumer's entry is not pending"))?;
                    m.hist.record(
                        call,
                        db,
                        key,
                        &mut rec,
                        entry_id,
                        "consumer_deleted",
                        Some(&consumer.name),
                        None,
                        &mut nack,
                        Some("consumer_deleted"),
                        false,
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]
///
/// Sets the stream's last generated ID (not below its last entry), and
/// optionally `entries_added` (not below the length) and
/// `max_deleted_entry_id` (not above the new last ID). A missing key is an
/// error. 7.2+ also refuses a last ID below the current max deleted ID.
pub fn xsetid(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let new_last = strict_id(arg(argv, 2)?)?;
    let mut entries_added: i64 = -1;
    let mut max_deleted = ZERO_ID;
    let mut i = 3;
    while i < argv.len() {
        let moreargs = argv.len() - 1 - i;
        let low = lower(&argv[i]);
        if low == "entriesadded" && moreargs > 0 {
            entries_added = ll(arg(argv, i + 1)?)?;
            if entries_added < 0 {
                return Err(Fail::Command("out_of_range"));
            }
            i += 2;
        } else if low == "maxdeletedid" && moreargs > 0 {
            max_deleted = strict_id(arg(argv, i + 1)?)?;
            if new_last < max_deleted {
                return Err(Fail::Command("id_too_small"));
            }
            i += 2;
        } else {
            return Err(Fail::Command("syntax_error"));
        }
    }
    let checks_max_deleted = m.profile.xsetid_checks_max_deleted;
    let Some(stream) = m.lookup_stream(call.db, arg(argv, 1)?)? else {
        return Err(Fail::Command("no_such_key"));
    };
    if checks_max_deleted && new_last < stream.max_deleted_entry_id {
        return Err(Fail::Command("id_too_small"));
    }
    if let Some(last) = stream.entries.last() {
        if new_last < *last {
            return Err(Fail::Command("id_too_small"));
        }
        if entries_added != -1 && stream.length() as i128 > i128::from(entries_added) {
            return Err(Fail::Command("out_of_range"));
        }
    }
    stream.last_id = new_last;
    if entries_added != -1 {
        stream.entries_added = entries_added;
    }
    if max_deleted != ZERO_ID {
        stream.max_deleted_entry_id = max_deleted;
    }
    Ok(())
}

// --------------------------------------------------------------------------
// Keyspace commands
// --------------------------------------------------------------------------

/// DEL key [key ...] / UNLINK key [key ...]
///
/// Removes each key that exists; a stream goes with its groups and PELs (their
/// pending entries close as `key_deleted`).
pub fn del_keys(m: &mut Model, call: &Call) -> Result<(), Fail> {
    for key in call.argv.iter().skip(1) {
        m.delete_key(call, call.db, key)?;
    }
    Ok(())
}

/// RENAME src dst / RENAMENX src dst
///
/// Moves the value of `src` to `dst`, replacing what `dst` held (RENAMENX
/// does nothing when `dst` exists). A missing `src` is an error; renaming a
/// key onto itself changes nothing. A stream keeps its groups, PELs and history.
pub fn rename(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let src = arg(&call.argv, 1)?;
    let dst = arg(&call.argv, 2)?;
    let nx = call.command == "RENAMENX";
    if m.lookup_any(call.db, src).is_none() {
        return Err(Fail::Command("no_such_key"));
    }
    if src == dst {
        return Ok(());
    }
    if nx && m.lookup_any(call.db, dst).is_some() {
        return Ok(());
    }
    m.delete_key(call, call.db, dst)?;
    m.move_key(call, call.db, src, dst)
}

/// FLUSHDB [ASYNC|SYNC] / FLUSHALL [ASYNC|SYNC]
///
/// Removes every key of the current database (FLUSHALL: of all databases).
pub fn flush(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    if argv.len() > 2 || (argv.len() == 2 && !matches!(lower(&argv[1]).as_str(), "async" | "sync"))
    {
        return Err(Fail::Command("syntax_error"));
    }
    let db = if call.command == "FLUSHALL" {
        None
    } else {
        Some(call.db)
    };
    m.flush(call, db)
}

/// SET key value [NX|XX] [GET] [EX|PX|EXAT|PXAT n|KEEPTTL]
///
/// Not a stream command, but it replaces whatever the key held, a stream
/// included (its pending entries close as `key_deleted`). With GET on a
/// non-string key it fails with WRONGTYPE and changes nothing. Expiry is not
/// modelled.
pub fn set_string(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let opts: Vec<String> = argv.iter().skip(3).map(|a| lower(a)).collect();
    let has = |word: &str| opts.iter().any(|o| o == word);
    let key = arg(argv, 1)?;
    let current = m.lookup_any(call.db, key);
    let is_string = matches!(current, Some(Value::Other(t)) if t == "string");
    if has("get") && current.is_some() && !is_string {
        return Err(Fail::Command("wrongtype"));
    }
    if (has("nx") && current.is_some()) || (has("xx") && current.is_none()) {
        return Ok(());
    }
    m.delete_key(call, call.db, key)?;
    m.set_other(call.db, key, "string");
    Ok(())
}

/// MSET key value [key value ...]: replaces every key named, streams included.
pub fn mset(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    if argv.len() < 3 || argv.len().is_multiple_of(2) {
        return Err(Fail::Command("wrong_arity"));
    }
    for key in argv.iter().skip(1).step_by(2) {
        m.delete_key(call, call.db, key)?;
        m.set_other(call.db, key, "string");
    }
    Ok(())
}

/// Writes a `type_name` value: creates the key if missing, WRONGTYPE on a stream key
/// (or a key of another type).
pub fn type_writer(m: &mut Model, call: &Call, type_name: &str) -> Result<(), Fail> {
    let key = arg(&call.argv, 1)?;
    match m.lookup_any(call.db, key) {
        None => {
            m.set_other(call.db, key, type_name);
            Ok(())
        }
        Some(Value::Other(t)) if t == type_name => Ok(()),
        Some(_) => Err(Fail::Command("wrongtype")),
    }
}

// --------------------------------------------------------------------------
// PELENGINE.LOAD: a starting state from a snapshot (not a server command)
// --------------------------------------------------------------------------

const SYNTAX: Fail = Fail::Command("syntax_error");

/// PELENGINE.LOAD BEGIN | KEY key type | STREAM key last_id entries_added
/// max_deleted_id first_id | NODE key master_id nbytes nfields field... (id live)... |
/// GROUP key group last_id entries_read | CONSUMER key group consumer seen_ms active_ms |
/// PENDING key group (id consumer delivery_ms delivery_count)...
///
/// Not a command of any server: the rows `pelengine ingest-rdb` and `ingest-aof`
/// (an AOF whose base is an RDB snapshot) write for the state the snapshot holds, in
/// this order per key, so that the replay starts exactly where the server stood,
/// times and counters included, which no ordinary command can set.
///
/// BEGIN: the snapshot replaces the whole keyspace (every key of every db goes, as
/// on FLUSHALL). KEY: a key of another type (`string`, `list`, ...). STREAM: an
/// empty stream with its counters (`-1` for a counter the snapshot does not have:
/// the one the server derives on load). NODE: one internal node appended at the
/// stream's tail, with its exact listpack size and master fields, and its entries in
/// ID order, `1` live, `0` deleted. GROUP: a consumer group (`entries_read` -1:
/// unknown). CONSUMER: a consumer with its seen and active time (-1: none). PENDING:
/// pending entries of a group and who holds them, with their delivery time and
/// count; each is recorded in the history tables as `loaded` (no delivery was
/// seen: `deliveries` 0, no delivery times), and each starts a `pel_history`
/// version.
///
/// A malformed row fails the whole row (`syntax_error`) and changes nothing.
///
/// Two rows the Python model takes with object-identity effects the name-based
/// state cannot hold are refused with `Fail::Internal` (changing nothing): a
/// CONSUMER row replacing a consumer that holds pending entries, and a PENDING row
/// giving an entry pending with one consumer to another.
pub fn load(m: &mut Model, call: &Call) -> Result<(), Fail> {
    let argv = &call.argv;
    let sub = arg(argv, 1)?.to_uppercase();
    if sub == "BEGIN" && argv.len() == 2 {
        return m.flush(call, None);
    }
    if argv.len() < 3 {
        return Err(SYNTAX);
    }
    let key = arg(argv, 2)?;
    if sub == "KEY" && argv.len() == 4 {
        m.delete_key(call, call.db, key)?;
        m.set_other(call.db, key, arg(argv, 3)?);
        return Ok(());
    }
    if sub == "STREAM" && argv.len() == 7 {
        return load_stream(m, call, key, &argv[3..]);
    }
    let Some(stream) = lookup_stream_in(m.keys, call.db, key)? else {
        return Err(Fail::Command("no_such_key"));
    };
    if sub == "NODE" && argv.len() >= 6 {
        load_node(stream, &argv[3..])?;
    } else if sub == "GROUP" && argv.len() == 6 {
        load_group(call, stream, &argv[3..])?;
    } else if sub == "CONSUMER" && argv.len() == 7 {
        let group = loaded_group(stream, &argv[3])?;
        let name = &argv[4];
        let mut consumer = Consumer::new(name, load_int(&argv[5])?);
        consumer.active_time = load_int(&argv[6])?;
        if group.consumers.get(name).is_some_and(|c| !c.pel.is_empty()) {
            return Err(internal(
                "PELENGINE.LOAD CONSUMER replaces a consumer holding pending entries \
                 (not modelled by the name-based state)",
            ));
        }
        group.consumers.insert(name.clone(), consumer);
    } else if sub == "PENDING" && argv.len() >= 8 && (argv.len() - 4).is_multiple_of(4) {
        load_pending(&mut m.hist, call, key, stream, &argv[3..])?;
    } else {
        return Err(SYNTAX);
    }
    call.touched_stream.set(true);
    Ok(())
}

fn load_int(text: &str) -> Result<i64, Fail> {
    parse_ll(text).ok_or(SYNTAX)
}

fn load_id(text: &str) -> Result<StreamId, Fail> {
    parse_strict_id(text).map_err(|_| SYNTAX)
}

fn load_stream(m: &mut Model, call: &Call, key: &str, args: &[String]) -> Result<(), Fail> {
    let last_id = load_id(arg(args, 0)?)?;
    let entries_added = load_int(arg(args, 1)?)?;
    let max_deleted = load_id(arg(args, 2)?)?;
    let first_id = load_id(arg(args, 3)?)?;
    m.delete_key(call, call.db, key)?;
    m.create_stream(call.db, key);
    let stream = m.stream_mut(call.db, key)?;
    stream.last_id = last_id;
    stream.entries_added = entries_added;
    stream.max_deleted_entry_id = max_deleted;
    stream.first_id = first_id;
    Ok(())
}

fn load_node(stream: &mut Stream, args: &[String]) -> Result<(), Fail> {
    let master = load_id(arg(args, 0)?)?;
    let nbytes = load_int(arg(args, 1)?)?;
    let nfields = load_int(arg(args, 2)?)?;
    let n = args.len() as i128;
    let nf = i128::from(nfields);
    if nfields < 0 || n < 3 + nf + 2 || (n - 3 - nf) % 2 != 0 {
        return Err(SYNTAX);
    }
    let nfields = nfields as usize; // fits: below args.len()
    let fields: Vec<String> = args[3..3 + nfields].to_vec();
    let pairs = &args[3 + nfields..];
    let mut entries: Vec<(StreamId, bool)> = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        entries.push((
            load_id(&pair[0])?,
            pair.get(1).is_some_and(|live| live == "1"),
        ));
    }
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return Err(internal("IndexError: no entries"));
    };
    if first.0 < master
        || stream
            .nodes
            .last()
            .is_some_and(|tail| master <= tail.last_id)
    {
        return Err(SYNTAX);
    }
    let mut node = Node::new(master, fields, nbytes);
    node.total = entries.len() as i64;
    node.live = entries.iter().filter(|(_, live)| *live).count() as i64;
    node.last_id = last.0;
    stream.nodes.push(node);
    for (entry_id, live) in entries {
        if live {
            stream.entries.insert(entry_id);
        }
    }
    Ok(())
}

fn load_group(call: &Call, stream: &mut Stream, args: &[String]) -> Result<(), Fail> {
    let name = arg(args, 0)?;
    let entries_read = load_int(arg(args, 2)?)?;
    let group = Group::new(name, load_id(arg(args, 1)?)?, entries_read, call.seq);
    stream.groups.insert(name.to_string(), group);
    Ok(())
}

fn loaded_group<'s>(stream: &'s mut Stream, name: &str) -> Result<&'s mut Group, Fail> {
    stream.groups.get_mut(name).ok_or(Fail::Command("nogroup"))
}

fn load_pending(
    hist: &mut Recorder,
    call: &Call,
    key: &str,
    stream: &mut Stream,
    args: &[String],
) -> Result<(), Fail> {
    let Stream {
        entries, groups, ..
    } = stream;
    let group = groups
        .get_mut(arg(args, 0)?)
        .ok_or(Fail::Command("nogroup"))?;
    let rows = &args[1..];
    let mut parsed: Vec<(StreamId, &str, i64, i64)> = Vec::with_capacity(rows.len() / 4);
    for row in rows.chunks(4) {
        let consumer = arg(row, 1)?;
        if !group.consumers.contains_key(consumer) {
            return Err(SYNTAX);
        }
        parsed.push((
            load_id(arg(row, 0)?)?,
            consumer,
            load_int(arg(row, 2)?)?,
            load_int(arg(row, 3)?)?,
        ));
    }
    // An entry pending with another consumer would stay in that consumer's PEL in the
    // Python model (a stale object): refused, see `load`.
    let mut holders: HashMap<StreamId, &str> = HashMap::new();
    for (entry_id, consumer, _, _) in &parsed {
        let holder = match holders.get(entry_id) {
            Some(holder) => Some(*holder),
            None => group.pel.get(entry_id).and_then(|n| n.consumer.as_deref()),
        };
        if holder.is_some_and(|h| h != *consumer) {
            return Err(internal(
                "PELENGINE.LOAD PENDING gives a pending entry to another consumer \
                 (not modelled by the name-based state)",
            ));
        }
        holders.insert(*entry_id, consumer);
    }
    let GroupParts {
        pel,
        consumers,
        mut rec,
        ..
    } = parts(group);
    for (entry_id, consumer, delivery_ms, count) in parsed {
        pel.insert(
            entry_id,
            PendingEntry::new(Some(consumer.to_string()), delivery_ms, count),
        );
        consumer_mut(consumers, consumer)?.pel.insert(entry_id);
        let exists = entries.contains(&entry_id);
        let nack = pel
            .get_mut(&entry_id)
            .ok_or_else(|| internal("KeyError: not pending"))?;
        hist.loaded(call, key, &mut rec, entry_id, nack, exists)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{Replayer, Unit};

    /// One command through the replayer: its outcome kind and error, or the internal
    /// error (a test failure through `?`, never a panic).
    fn apply(
        r: &mut Replayer,
        seq: i64,
        args: &[&str],
    ) -> Result<(&'static str, Option<String>), String> {
        let argv: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let o = r.apply(seq, 1000 + seq, &argv, Some(0), Some("c"), Unit::Follow)?;
        Ok((o.kind, o.error))
    }

    #[test]
    fn python_slices_and_bisect() {
        assert_eq!(prefix_len(2, 5), 2);
        assert_eq!(prefix_len(9, 5), 5);
        assert_eq!(prefix_len(-1, 5), 4);
        assert_eq!(prefix_len(-9, 5), 0);
        let node = |ms| Node::new(StreamId::new(ms, 0), vec![], 0);
        let nodes = [node(1), node(5), node(3)];
        // Python's probes on a list out of order
        assert_eq!(bisect_right_masters(&nodes, StreamId::new(4, 0)), 1);
        assert_eq!(bisect_right_masters(&nodes, StreamId::new(0, 0)), 0);
    }

    #[test]
    fn read_claim_ack_history() -> Result<(), String> {
        let mut r = Replayer::with_defaults("7.2")?;
        assert_eq!(
            apply(&mut r, 1, &["XGROUP", "CREATE", "k", "g", "$", "MKSTREAM"])?.0,
            "applied"
        );
        assert_eq!(
            apply(&mut r, 2, &["XADD", "k", "1-1", "f", "v"])?.0,
            "applied"
        );
        assert_eq!(
            apply(
                &mut r,
                3,
                &["XREADGROUP", "GROUP", "g", "a", "STREAMS", "k", ">"]
            )?
            .0,
            "applied"
        );
        assert_eq!(
            apply(&mut r, 4, &["XCLAIM", "k", "g", "b", "0", "1-1"])?.0,
            "applied"
        );
        assert_eq!(
            apply(&mut r, 5, &["XACK", "k", "g", "1-1", "nope"])?,
            ("error", Some("invalid_id".to_string()))
        );
        assert_eq!(apply(&mut r, 6, &["xack", "k", "g", "1-1"])?.0, "applied");
        let t = r.drain_tables();
        assert_eq!(
            t.ownership_changes.change,
            ["delivered", "claimed", "acked"]
        );
        assert_eq!(
            t.ownership_changes.command,
            ["XREADGROUP", "XCLAIM", "XACK"]
        );
        assert_eq!(t.pel_history.len(), 2);
        assert_eq!(t.pel_history.valid_to_seq, [Some(4), Some(6)]);
        let (_, _, stream) = r.streams()[0];
        let group = &stream.groups["g"];
        assert_eq!(group_lag(stream, group, false), Some(0));
        assert_eq!(group.records[&StreamId::new(1, 1)].status, "acked");
        assert_eq!(r.counters.errors.get("invalid_id"), Some(&1));
        Ok(())
    }

    #[test]
    fn blocked_reader_is_served_by_a_later_write() -> Result<(), String> {
        let mut r = Replayer::with_defaults("7.0")?;
        apply(&mut r, 1, &["XGROUP", "CREATE", "k", "g", "$", "MKSTREAM"])?;
        let argv: Vec<String> = [
            "XREADGROUP",
            "GROUP",
            "g",
            "a",
            "BLOCK",
            "0",
            "STREAMS",
            "k",
            ">",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        r.apply(2, 1002, &argv, Some(0), Some("reader"), Unit::Follow)?;
        assert_eq!(r.blocked_clients().len(), 1);
        apply(&mut r, 3, &["XADD", "k", "*", "f", "v"])?;
        assert!(r.blocked_clients().is_empty());
        let t = r.drain_tables();
        assert_eq!(t.ownership_changes.seq, [3]);
        assert_eq!(t.ownership_changes.request_seq, [2]);
        Ok(())
    }

    #[test]
    fn overflow_is_an_internal_error() -> Result<(), String> {
        let mut r = Replayer::with_defaults("7.4")?;
        apply(&mut r, 1, &["XADD", "k", "1-1", "f", "v"])?;
        apply(
            &mut r,
            2,
            &["XSETID", "k", "2-0", "ENTRIESADDED", "9223372036854775807"],
        )?;
        let argv: Vec<String> = ["XADD", "k", "*", "f", "v"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(r.apply(3, 5, &argv, None, None, Unit::Follow).is_err());
        Ok(())
    }
}
