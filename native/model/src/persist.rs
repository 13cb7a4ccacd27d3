//! A family's model between runs as plain data with a schema version: a port of
//! `pelengine/model/persist.py` (see docs/state.md).
//!
//! `dump(replayer)` gives a `StateData`: `state_version` and one list of rows per
//! section (`StateSections`), every row a struct of the fields `STATE_SCHEMA` declares
//! (the fields, names, order and nullability of Python's `persist.STATE_SCHEMA` and
//! `pelengine.schemas.STATE_TYPE`): exactly the dict Python's `dump` returns, row for
//! row and value for value. `load(data)` rebuilds the `Replayer`, which continues
//! exactly as the model that was dumped; a state dumped by either engine loads in the
//! other.
//!
//! Type names (as in Python): `int` (i32), `long` (i64), `bool`, `string`; `u64`: a
//! part of a stream ID stored in an i64 as its two's complement; `array<T>`; a
//! trailing `?`: the field may be null (an `Option`).
//!
//! Row order within a section is meaningful (the order of the model's containers);
//! `ready.call` and `model.last_call` are positions in `calls`, which holds each call
//! the model still refers to once, as Python's object identity does (`Trigger::id`).
//!
//! `Datum`, `Row` and `StateData::to_plain`/`from_plain` give the same data untyped
//! (for JSON or Arrow faces); `schema_problems` checks such plain data against the
//! declared schema, as Python's `schema_problems` checks its dicts.
//!
//! Where the port cannot hold what Python can (`load` then refuses with a
//! `StateError`, `dump` with an error): an open `pel_history` version with null
//! fields (`version` true and a `version_*` field other than `version_consumer`
//! null), a db outside i32 or a blocked reader's deadline outside i64 at dump time
//! (Python writes them, but they are no `int`/`long` of the schema either), and any
//! value of another type than the schema's (typed rows cannot hold one).

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;

use crate::IndexMap;

use crate::calls::{BlockedRead, Call, Profile, Trigger};
use crate::ids::{format_id, to_signed, StreamId};
use crate::replay::Replayer;
use crate::repr::py_repr;
use crate::state::{Consumer, Counters, DeliveryRecord, Group, Node, PelVersion, PendingEntry};
use crate::state::{Entries, Stream, Value};

/// The schema version `dump` writes and `load` reads (Python's `STATE_SCHEMA_VERSION`).
pub const STATE_SCHEMA_VERSION: i64 = 3;
/// What a key holding a stream says in the `keys` section.
pub const STREAM_TYPE: &str = "stream";

/// A model that cannot be saved, or saved data that is not a model (Python's
/// `StateError`); `Version`: saved data of a schema version this pelengine does not
/// read (Python's `StateVersionError`, a `StateError`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateError {
    Version(String),
    Invalid(String),
}

impl StateError {
    /// The Python exception class this error is.
    pub fn class_name(&self) -> &'static str {
        match self {
            StateError::Version(_) => "StateVersionError",
            StateError::Invalid(_) => "StateError",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            StateError::Version(m) | StateError::Invalid(m) => m,
        }
    }
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for StateError {}

/// Err unless `version` is the one this pelengine reads (None: missing).
pub fn check_version(version: Option<i64>) -> Result<(), StateError> {
    check_version_datum(&version.map_or(Datum::Null, Datum::Int))
}

/// `check_version` of an untyped value (only an int equal to the version passes).
pub fn check_version_datum(version: &Datum) -> Result<(), StateError> {
    if *version == Datum::Int(STATE_SCHEMA_VERSION) {
        return Ok(());
    }
    let found = match version {
        Datum::Null => "is missing".to_string(),
        other => format!("{} is not supported", other.py_repr()),
    };
    Err(StateError::Version(format!(
        "state schema version {found} (this pelengine reads version {STATE_SCHEMA_VERSION})"
    )))
}

// ---- plain values ---------------------------------------------------------------------------

/// One value of a row, untyped: what Python's dicts hold (an int, a string, a bool,
/// None or a list of those).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Datum {
    Null,
    Bool(bool),
    Int(i64),
    Str(String),
    List(Vec<Datum>),
}

impl Datum {
    /// Python's `repr()` of the value.
    pub fn py_repr(&self) -> String {
        match self {
            Datum::Null => "None".to_string(),
            Datum::Bool(true) => "True".to_string(),
            Datum::Bool(false) => "False".to_string(),
            Datum::Int(v) => v.to_string(),
            Datum::Str(s) => py_repr(s),
            Datum::List(items) => {
                let inner: Vec<String> = items.iter().map(Datum::py_repr).collect();
                format!("[{}]", inner.join(", "))
            }
        }
    }
}

/// A field type of the rows: to and from `Datum`.
pub trait Plain: Sized {
    fn to_datum(&self) -> Datum;
    fn from_datum(value: Datum) -> Result<Self, String>;
}

fn not_a(value: &Datum, what: &str) -> String {
    format!("{} is no {what}", value.py_repr())
}

impl Plain for i64 {
    fn to_datum(&self) -> Datum {
        Datum::Int(*self)
    }
    fn from_datum(value: Datum) -> Result<Self, String> {
        match value {
            Datum::Int(v) => Ok(v),
            other => Err(not_a(&other, "long")),
        }
    }
}

impl Plain for i32 {
    fn to_datum(&self) -> Datum {
        Datum::Int(i64::from(*self))
    }
    fn from_datum(value: Datum) -> Result<Self, String> {
        match value {
            Datum::Int(v) => i32::try_from(v).map_err(|_| not_a(&value, "int")),
            other => Err(not_a(&other, "int")),
        }
    }
}

impl Plain for bool {
    fn to_datum(&self) -> Datum {
        Datum::Bool(*self)
    }
    fn from_datum(value: Datum) -> Result<Self, String> {
        match value {
            Datum::Bool(v) => Ok(v),
            other => Err(not_a(&other, "bool")),
        }
    }
}

impl Plain for String {
    fn to_datum(&self) -> Datum {
        Datum::Str(self.clone())
    }
    fn from_datum(value: Datum) -> Result<Self, String> {
        match value {
            Datum::Str(v) => Ok(v),
            other => Err(not_a(&other, "string")),
        }
    }
}

impl<T: Plain> Plain for Option<T> {
    fn to_datum(&self) -> Datum {
        self.as_ref().map_or(Datum::Null, T::to_datum)
    }
    fn from_datum(value: Datum) -> Result<Self, String> {
        match value {
            Datum::Null => Ok(None),
            other => T::from_datum(other).map(Some),
        }
    }
}

impl<T: Plain> Plain for Vec<T> {
    fn to_datum(&self) -> Datum {
        Datum::List(self.iter().map(T::to_datum).collect())
    }
    fn from_datum(value: Datum) -> Result<Self, String> {
        match value {
            Datum::List(items) => items.into_iter().map(T::from_datum).collect(),
            other => Err(not_a(&other, "array")),
        }
    }
}

/// A row of one section: its declared fields (name, type name) and its values in
/// that order.
pub trait Row: Sized {
    const SECTION: &'static str;
    const FIELDS: &'static [(&'static str, &'static str)];
    fn to_data(&self) -> Vec<Datum>;
    fn from_data(values: Vec<Datum>) -> Result<Self, String>;
}

/// `r#type` -> `type`.
const fn field_name(raw: &'static str) -> &'static str {
    let bytes = raw.as_bytes();
    if bytes.len() > 2 && bytes[0] == b'r' && bytes[1] == b'#' {
        match std::str::from_utf8(bytes.split_at(2).1) {
            Ok(name) => name,
            Err(_) => raw,
        }
    } else {
        raw
    }
}

macro_rules! rows {
    ($($(#[$doc:meta])* $name:ident = $section:literal {
        $($field:ident : $ty:ty = $type_name:literal),* $(,)?
    })*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Debug, PartialEq, Eq)]
            pub struct $name {
                $(pub $field: $ty),*
            }

            impl Row for $name {
                const SECTION: &'static str = $section;
                const FIELDS: &'static [(&'static str, &'static str)] =
                    &[$((field_name(stringify!($field)), $type_name)),*];

                fn to_data(&self) -> Vec<Datum> {
                    vec![$(Plain::to_datum(&self.$field)),*]
                }

                fn from_data(values: Vec<Datum>) -> Result<Self, String> {
                    if values.len() != Self::FIELDS.len() {
                        return Err(format!(
                            "{} values for the {} fields of a {} row",
                            values.len(),
                            Self::FIELDS.len(),
                            $section
                        ));
                    }
                    let mut values = values.into_iter();
                    Ok($name {
                        $($field: <$ty as Plain>::from_datum(
                            values.next().unwrap_or(Datum::Null),
                        )
                        .map_err(|e| {
                            format!("{}.{}: {e}", $section, field_name(stringify!($field)))
                        })?),*
                    })
                }
            }
        )*
    };
}

rows! {
    /// Exactly one row: the replayer's settings, clock, counters and execution unit.
    ModelRow = "model" {
        profile: String = "string",
        node_max_entries: i64 = "long",
        node_max_bytes: i64 = "long",
        record_changes: bool = "bool",
        spill_closed_records: bool = "bool",
        last_seq: Option<i64> = "long?",
        last_ts_ms: Option<i64> = "long?",
        segment_n: i64 = "long",
        unit: Option<i64> = "long?",
        script_now: Option<i64> = "long?",
        script_unit: Option<i64> = "long?",
        last_call: Option<i64> = "long?",
        applied: i64 = "long",
        ignored: i64 = "long",
        failed: i64 = "long",
    }
    /// The counters by name: kind "error", "command" or "note".
    CountRow = "counts" {
        kind: String = "string",
        name: String = "string",
        count: i64 = "long",
    }
    /// Every key of the keyspace, in its order; type "stream" or another type's name.
    KeyRow = "keys" {
        db: i32 = "int",
        key: String = "string",
        r#type: String = "string",
    }
    /// One row per stream key: its counters and its live entry IDs in ID order.
    StreamRow = "streams" {
        db: i32 = "int",
        key: String = "string",
        last_id_ms: i64 = "u64",
        last_id_seq: i64 = "u64",
        entries_added: i64 = "long",
        max_deleted_id_ms: i64 = "u64",
        max_deleted_id_seq: i64 = "u64",
        first_id_ms: i64 = "u64",
        first_id_seq: i64 = "u64",
        entry_ms: Vec<i64> = "array<u64>",
        entry_seq: Vec<i64> = "array<u64>",
    }
    /// The internal nodes (listpacks) of each stream, head to tail.
    NodeRow = "nodes" {
        db: i32 = "int",
        key: String = "string",
        master_id_ms: i64 = "u64",
        master_id_seq: i64 = "u64",
        last_id_ms: i64 = "u64",
        last_id_seq: i64 = "u64",
        total: i64 = "long",
        live: i64 = "long",
        nbytes: i64 = "long",
        fields: Vec<String> = "array<string>",
        // the node's ascending runs of appended IDs (`Node::runs`): empty while
        // listpack order is ID order (version 3)
        run_first_ms: Vec<i64> = "array<u64>",
        run_first_seq: Vec<i64> = "array<u64>",
        run_last_ms: Vec<i64> = "array<u64>",
        run_last_seq: Vec<i64> = "array<u64>",
    }
    GroupRow = "groups" {
        db: i32 = "int",
        key: String = "string",
        group: String = "string",
        last_id_ms: i64 = "u64",
        last_id_seq: i64 = "u64",
        entries_read: i64 = "long",
        created_seq: i64 = "long",
        moved_seq: Option<i64> = "long?",
        moved_ms: Option<i64> = "long?",
    }
    ConsumerRow = "consumers" {
        db: i32 = "int",
        key: String = "string",
        group: String = "string",
        consumer: String = "string",
        seen_time: i64 = "long",
        active_time: i64 = "long",
    }
    /// The group PELs in ID order; `version`: the entry has an open pel_history version
    /// (the `version_*` fields, null otherwise).
    PendingRow = "pending" {
        db: i32 = "int",
        key: String = "string",
        group: String = "string",
        id_ms: i64 = "u64",
        id_seq: i64 = "u64",
        consumer: Option<String> = "string?",
        delivery_time: i64 = "long",
        delivery_count: i64 = "long",
        version: bool = "bool",
        version_consumer: Option<String> = "string?",
        version_delivery_time: Option<i64> = "long?",
        version_delivery_count: Option<i64> = "long?",
        version_entry_exists: Option<bool> = "bool?",
        version_from_seq: Option<i64> = "long?",
        version_from_ms: Option<i64> = "long?",
    }
    /// The delivery records (or open segments) of each group.
    RecordRow = "records" {
        db: i32 = "int",
        key: String = "string",
        group: String = "string",
        id_ms: i64 = "u64",
        id_seq: i64 = "u64",
        delivery_count: i64 = "long",
        deliveries: i64 = "long",
        owners: Vec<String> = "array<string>",
        first_delivery_ms: Option<i64> = "long?",
        last_delivery_ms: Option<i64> = "long?",
        status: String = "string",
        closed_ms: Option<i64> = "long?",
        changed_seq: Option<i64> = "long?",
        changed_ms: Option<i64> = "long?",
    }
    /// The delivery records of groups that ended (a model that does not spill them).
    ClosedRecordRow = "closed_records" {
        db: i32 = "int",
        key: String = "string",
        group: String = "string",
        group_created_seq: i64 = "long",
        id_ms: i64 = "u64",
        id_seq: i64 = "u64",
        delivery_count: i64 = "long",
        deliveries: i64 = "long",
        owners: Vec<String> = "array<string>",
        first_delivery_ms: Option<i64> = "long?",
        last_delivery_ms: Option<i64> = "long?",
        status: String = "string",
        closed_ms: Option<i64> = "long?",
        changed_seq: Option<i64> = "long?",
        changed_ms: Option<i64> = "long?",
    }
    /// MULTI blocks still open, per client: the MULTI's seq and the unit's time.
    UnitRow = "units" {
        client: Option<String> = "string?",
        multi_seq: i64 = "long",
        now: Option<i64> = "long?",
    }
    /// Readers waiting in XREADGROUP ... BLOCK, in the order they blocked.
    BlockedRow = "blocked" {
        seq: i64 = "long",
        client: Option<String> = "string?",
        db: i32 = "int",
        argv: Vec<String> = "array<string>",
        keys: Vec<String> = "array<string>",
        group: String = "string",
        consumer: String = "string",
        count: i64 = "long",
        noack: bool = "bool",
        deadline: Option<i64> = "long?",
    }
    /// A command as the model remembers it (the last one applied; the writes that
    /// signalled keys blocked readers wait on).
    CallRow = "calls" {
        seq: i64 = "long",
        now: i64 = "long",
        db: i32 = "int",
        client: Option<String> = "string?",
        argv: Vec<String> = "array<string>",
        command: String = "string",
        touched_stream: bool = "bool",
        request_seq: Option<i64> = "long?",
    }
    /// Keys signalled for blocked readers, not served yet, in signal order, each with
    /// the write that signalled it (a position in `calls`).
    ReadyRow = "ready" {
        db: i32 = "int",
        key: String = "string",
        call: Option<i64> = "long?",
    }
}

/// Every section of a saved model, in the order they are written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateSections {
    pub model: Vec<ModelRow>,
    pub counts: Vec<CountRow>,
    pub keys: Vec<KeyRow>,
    pub streams: Vec<StreamRow>,
    pub nodes: Vec<NodeRow>,
    pub groups: Vec<GroupRow>,
    pub consumers: Vec<ConsumerRow>,
    pub pending: Vec<PendingRow>,
    pub records: Vec<RecordRow>,
    pub closed_records: Vec<ClosedRecordRow>,
    pub units: Vec<UnitRow>,
    pub blocked: Vec<BlockedRow>,
    pub calls: Vec<CallRow>,
    pub ready: Vec<ReadyRow>,
}

/// A saved model: `{"state_version": ..., "state": {section: rows}}`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateData {
    pub state_version: i64,
    pub state: StateSections,
}

/// A field list: (name, type name).
pub type Fields = &'static [(&'static str, &'static str)];

/// (section, fields), in the order the sections are written (Python's `STATE_SCHEMA`).
pub const STATE_SCHEMA: [(&str, Fields); 14] = [
    (ModelRow::SECTION, ModelRow::FIELDS),
    (CountRow::SECTION, CountRow::FIELDS),
    (KeyRow::SECTION, KeyRow::FIELDS),
    (StreamRow::SECTION, StreamRow::FIELDS),
    (NodeRow::SECTION, NodeRow::FIELDS),
    (GroupRow::SECTION, GroupRow::FIELDS),
    (ConsumerRow::SECTION, ConsumerRow::FIELDS),
    (PendingRow::SECTION, PendingRow::FIELDS),
    (RecordRow::SECTION, RecordRow::FIELDS),
    (ClosedRecordRow::SECTION, ClosedRecordRow::FIELDS),
    (UnitRow::SECTION, UnitRow::FIELDS),
    (BlockedRow::SECTION, BlockedRow::FIELDS),
    (CallRow::SECTION, CallRow::FIELDS),
    (ReadyRow::SECTION, ReadyRow::FIELDS),
];

/// A row as plain data: (field, value) in the declared order.
pub type PlainRow = Vec<(String, Datum)>;
/// The sections as plain data: (section, rows), in order.
pub type PlainSections = Vec<(String, Vec<PlainRow>)>;

fn plain_rows<R: Row>(rows: &[R]) -> (String, Vec<PlainRow>) {
    let rows = rows
        .iter()
        .map(|row| {
            R::FIELDS
                .iter()
                .map(|(name, _)| name.to_string())
                .zip(row.to_data())
                .collect()
        })
        .collect();
    (R::SECTION.to_string(), rows)
}

fn typed_rows<R: Row>(sections: &PlainSections) -> Result<Vec<R>, String> {
    let Some((_, rows)) = sections.iter().find(|(name, _)| name == R::SECTION) else {
        return Ok(Vec::new());
    };
    rows.iter()
        .map(|row| R::from_data(row.iter().map(|(_, v)| v.clone()).collect()))
        .collect()
}

impl StateData {
    /// The sections as plain data, every row with its field names.
    pub fn to_plain(&self) -> PlainSections {
        let s = &self.state;
        vec![
            plain_rows(&s.model),
            plain_rows(&s.counts),
            plain_rows(&s.keys),
            plain_rows(&s.streams),
            plain_rows(&s.nodes),
            plain_rows(&s.groups),
            plain_rows(&s.consumers),
            plain_rows(&s.pending),
            plain_rows(&s.records),
            plain_rows(&s.closed_records),
            plain_rows(&s.units),
            plain_rows(&s.blocked),
            plain_rows(&s.calls),
            plain_rows(&s.ready),
        ]
    }

    /// Typed data from plain data: the version must be the one this pelengine reads
    /// (else `StateError::Version`), every section present (Python `load`'s check and
    /// message), and the data exactly of the declared schema (`schema_problems`).
    pub fn from_plain(version: &Datum, sections: &PlainSections) -> Result<Self, StateError> {
        check_version_datum(version)?;
        let names: Vec<&str> = sections.iter().map(|(n, _)| n.as_str()).collect();
        let missing: Vec<Datum> = STATE_SCHEMA
            .iter()
            .filter(|(name, _)| !names.contains(name))
            .map(|(name, _)| Datum::Str(name.to_string()))
            .collect();
        let mut unknown: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| !STATE_SCHEMA.iter().any(|(name, _)| name == n))
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        if !missing.is_empty() || !unknown.is_empty() {
            let unknown = unknown.iter().map(|n| Datum::Str(n.to_string())).collect();
            return Err(StateError::Invalid(format!(
                "the saved model's sections: missing {}, unknown {}",
                Datum::List(missing).py_repr(),
                Datum::List(unknown).py_repr()
            )));
        }
        let problems = schema_problems(sections, 10);
        if !problems.is_empty() {
            return Err(StateError::Invalid(format!(
                "the saved model departs from the declared schema: {}",
                problems.join("; ")
            )));
        }
        let typed = || -> Result<StateSections, String> {
            Ok(StateSections {
                model: typed_rows(sections)?,
                counts: typed_rows(sections)?,
                keys: typed_rows(sections)?,
                streams: typed_rows(sections)?,
                nodes: typed_rows(sections)?,
                groups: typed_rows(sections)?,
                consumers: typed_rows(sections)?,
                pending: typed_rows(sections)?,
                records: typed_rows(sections)?,
                closed_records: typed_rows(sections)?,
                units: typed_rows(sections)?,
                blocked: typed_rows(sections)?,
                calls: typed_rows(sections)?,
                ready: typed_rows(sections)?,
            })
        };
        let state = typed().map_err(StateError::Invalid)?;
        Ok(StateData {
            state_version: STATE_SCHEMA_VERSION,
            state,
        })
    }
}

fn check_value(type_name: &str, value: &Datum) -> bool {
    let nullable = type_name.ends_with('?');
    let base = type_name.trim_end_matches('?');
    if *value == Datum::Null {
        return nullable;
    }
    if let Some(element) = base
        .strip_prefix("array<")
        .and_then(|rest| rest.strip_suffix('>'))
    {
        return matches!(value, Datum::List(items) if items.iter().all(|v| check_value(element, v)));
    }
    match (base, value) {
        ("bool", Datum::Bool(_)) | ("string", Datum::Str(_)) => true,
        ("int", Datum::Int(v)) => i32::try_from(*v).is_ok(),
        ("long" | "u64", Datum::Int(_)) => true,
        _ => false,
    }
}

/// Where plain `sections` depart from the declared schema (at most `limit` problems,
/// Python's messages): empty for data made only of the declared sections, fields and
/// types, in the declared order.
pub fn schema_problems(sections: &PlainSections, limit: usize) -> Vec<String> {
    let mut problems = Vec::new();
    let names: Vec<Datum> = sections
        .iter()
        .map(|(n, _)| Datum::Str(n.clone()))
        .collect();
    let declared: Vec<Datum> = STATE_SCHEMA
        .iter()
        .map(|(n, _)| Datum::Str(n.to_string()))
        .collect();
    if names != declared {
        problems.push(format!(
            "sections {}, declared {}",
            Datum::List(names).py_repr(),
            Datum::List(declared).py_repr()
        ));
    }
    for (section, fields) in STATE_SCHEMA {
        let Some((_, rows)) = sections.iter().find(|(n, _)| n == section) else {
            problems.push(format!("{section}: not a list"));
            continue;
        };
        let field_names: Vec<Datum> = fields
            .iter()
            .map(|(n, _)| Datum::Str(n.to_string()))
            .collect();
        for (i, row) in rows.iter().enumerate() {
            let row_names: Vec<Datum> = row.iter().map(|(n, _)| Datum::Str(n.clone())).collect();
            if row_names != field_names {
                problems.push(format!(
                    "{section}[{i}]: fields {}, declared {}",
                    Datum::List(row_names).py_repr(),
                    Datum::List(field_names.clone()).py_repr()
                ));
                continue;
            }
            for ((name, type_name), (_, value)) in fields.iter().zip(row) {
                if !check_value(type_name, value) {
                    problems.push(format!(
                        "{section}[{i}].{name}: {} is no {type_name}",
                        value.py_repr()
                    ));
                }
            }
            if problems.len() >= limit {
                return problems;
            }
        }
    }
    problems
}

// ---- dump -------------------------------------------------------------------------------------

fn u(value: u64) -> i64 {
    to_signed(value)
}

fn db32(db: i64) -> Result<i32, String> {
    i32::try_from(db).map_err(|_| format!("db {db} does not fit the state's 32-bit db field"))
}

fn record_parts(rec: &DeliveryRecord) -> (Vec<String>, i64, i64) {
    // BTreeSet<String> iterates in code point order: Python's sorted()
    (
        rec.owners.iter().cloned().collect(),
        rec.delivery_count,
        rec.deliveries,
    )
}

fn undrained(r: &Replayer) -> Vec<(&'static str, usize)> {
    let t = &r.tables;
    [
        ("ownership_changes", t.ownership_changes.len()),
        ("pel_history", t.pel_history.len()),
        ("delivery_segments", t.delivery_segments.len()),
        ("group_incarnations", t.group_incarnations.len()),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .collect()
}

struct CallRefs<'r> {
    replayer: &'r Replayer,
    positions: HashMap<u64, i64>,
}

impl CallRefs<'_> {
    fn at(
        &mut self,
        out: &mut Vec<CallRow>,
        trigger: Option<Trigger>,
    ) -> Result<Option<i64>, String> {
        let Some(trigger) = trigger else {
            return Ok(None);
        };
        if let Some(n) = self.positions.get(&trigger.id) {
            return Ok(Some(*n));
        }
        let call = self
            .replayer
            .call_log
            .iter()
            .find(|(id, _)| *id == trigger.id)
            .map(|(_, call)| call)
            .ok_or_else(|| {
                format!(
                    "the call of seq {} the model refers to is not kept: the model is inconsistent",
                    trigger.seq
                )
            })?;
        let n = out.len() as i64;
        out.push(CallRow {
            seq: call.seq,
            now: call.now,
            db: db32(call.db)?,
            client: call.client.clone(),
            argv: call.argv.clone(),
            command: call.command.clone(),
            touched_stream: call.touched_stream.get(),
            request_seq: call.request_seq,
        });
        self.positions.insert(trigger.id, n);
        Ok(Some(n))
    }
}

fn dump_group(out: &mut StateSections, db: i64, key: &str, group: &Group) -> Result<(), String> {
    let db32 = db32(db)?;
    out.groups.push(GroupRow {
        db: db32,
        key: key.to_string(),
        group: group.name.clone(),
        last_id_ms: u(group.last_id.ms),
        last_id_seq: u(group.last_id.seq),
        entries_read: group.entries_read,
        created_seq: group.created_seq,
        moved_seq: group.moved_seq,
        moved_ms: group.moved_ms,
    });
    let mut held: HashMap<&str, usize> = HashMap::new();
    for consumer in group.consumers.values() {
        out.consumers.push(ConsumerRow {
            db: db32,
            key: key.to_string(),
            group: group.name.clone(),
            consumer: consumer.name.clone(),
            seen_time: consumer.seen_time,
            active_time: consumer.active_time,
        });
        held.insert(consumer.name.as_str(), 0);
    }
    for (entry_id, nack) in &group.pel {
        if let Some(name) = &nack.consumer {
            let holds = group
                .consumers
                .get(name)
                .is_some_and(|c| c.pel.contains(entry_id));
            if !holds {
                return Err(format!(
                    "db {db} key {} group {}: pending entry {} is held by consumer {}, which \
                     is not the group's or does not hold it: the model is inconsistent",
                    py_repr(key),
                    py_repr(&group.name),
                    format_id(entry_id),
                    py_repr(name)
                ));
            }
            *held.entry(name.as_str()).or_insert(0) += 1;
        }
        let v = nack.version.as_ref();
        out.pending.push(PendingRow {
            db: db32,
            key: key.to_string(),
            group: group.name.clone(),
            id_ms: u(entry_id.ms),
            id_seq: u(entry_id.seq),
            consumer: nack.consumer.clone(),
            delivery_time: nack.delivery_time,
            delivery_count: nack.delivery_count,
            version: v.is_some(),
            version_consumer: v.and_then(|v| v.consumer.clone()),
            version_delivery_time: v.map(|v| v.delivery_time),
            version_delivery_count: v.map(|v| v.delivery_count),
            version_entry_exists: v.map(|v| v.entry_exists),
            version_from_seq: v.map(|v| v.from_seq),
            version_from_ms: v.map(|v| v.from_ms),
        });
    }
    for consumer in group.consumers.values() {
        if consumer.pel.len() != held.get(consumer.name.as_str()).copied().unwrap_or(0) {
            return Err(format!(
                "db {db} key {} group {}: consumer {} holds entries its group's PEL does not \
                 give it: the model is inconsistent",
                py_repr(key),
                py_repr(&group.name),
                py_repr(&consumer.name)
            ));
        }
    }
    for (entry_id, rec) in &group.records {
        let (owners, delivery_count, deliveries) = record_parts(rec);
        out.records.push(RecordRow {
            db: db32,
            key: key.to_string(),
            group: group.name.clone(),
            id_ms: u(entry_id.ms),
            id_seq: u(entry_id.seq),
            delivery_count,
            deliveries,
            owners,
            first_delivery_ms: rec.first_delivery_ms,
            last_delivery_ms: rec.last_delivery_ms,
            status: rec.status.clone(),
            closed_ms: rec.closed_ms,
            changed_seq: rec.changed_seq,
            changed_ms: rec.changed_ms,
        });
    }
    Ok(())
}

/// The model as plain data. Err (Python's `StateError`) when the replayer still holds
/// output rows not drained, or an internal error not reported yet, or is inconsistent,
/// or holds a value the schema has no room for (a db outside i32, a deadline outside
/// i64).
pub fn dump(r: &Replayer) -> Result<StateData, String> {
    if let Some(error) = &r.deferred_error {
        return Err(format!(
            "the replayer holds an internal error not reported yet ({error}): apply or \
             settle reports it"
        ));
    }
    let left = undrained(r);
    if !left.is_empty() {
        let listed: Vec<String> = left.iter().map(|(name, n)| format!("{n} {name}")).collect();
        return Err(format!(
            "the replayer holds output rows not drained yet ({}): drain them (drain_changes, \
             drain_pel_history, drain_delivery_segments, drain_group_incarnations) before \
             saving its state",
            listed.join(", ")
        ));
    }
    let mut out = StateSections::default();
    let mut calls = Vec::new();
    let mut refs = CallRefs {
        replayer: r,
        positions: HashMap::new(),
    };
    let counters = &r.counters;
    out.model.push(ModelRow {
        profile: r.profile.name.to_string(),
        node_max_entries: r.node_max_entries,
        node_max_bytes: r.node_max_bytes,
        record_changes: r.record_changes,
        spill_closed_records: r.spill_closed_records,
        last_seq: r.last_seq,
        last_ts_ms: r.last_ts_ms,
        segment_n: r.segment_n,
        unit: r.unit,
        script_now: r.script_now,
        script_unit: r.script_unit,
        last_call: refs.at(&mut calls, r.call)?,
        applied: counters.applied,
        ignored: counters.ignored,
        failed: counters.failed,
    });
    for (kind, counts) in [
        ("error", &counters.errors),
        ("command", &counters.commands),
        ("note", &r.notes),
    ] {
        out.counts
            .extend(counts.iter().map(|(name, count)| CountRow {
                kind: kind.to_string(),
                name: name.clone(),
                count: *count,
            }));
    }
    for ((db, key), value) in &r.keys {
        let stream = match value {
            Value::Other(type_name) => {
                out.keys.push(KeyRow {
                    db: db32(*db)?,
                    key: key.clone(),
                    r#type: type_name.clone(),
                });
                continue;
            }
            Value::Stream(stream) => stream,
        };
        out.keys.push(KeyRow {
            db: db32(*db)?,
            key: key.clone(),
            r#type: STREAM_TYPE.to_string(),
        });
        out.streams.push(StreamRow {
            db: db32(*db)?,
            key: key.clone(),
            last_id_ms: u(stream.last_id.ms),
            last_id_seq: u(stream.last_id.seq),
            entries_added: stream.entries_added,
            max_deleted_id_ms: u(stream.max_deleted_entry_id.ms),
            max_deleted_id_seq: u(stream.max_deleted_entry_id.seq),
            first_id_ms: u(stream.first_id.ms),
            first_id_seq: u(stream.first_id.seq),
            entry_ms: stream.entries.iter().map(|e| u(e.ms)).collect(),
            entry_seq: stream.entries.iter().map(|e| u(e.seq)).collect(),
        });
        for node in &stream.nodes {
            out.nodes.push(NodeRow {
                db: db32(*db)?,
                key: key.clone(),
                master_id_ms: u(node.master_id.ms),
                master_id_seq: u(node.master_id.seq),
                last_id_ms: u(node.last_id.ms),
                last_id_seq: u(node.last_id.seq),
                total: node.total,
                live: node.live,
                nbytes: node.nbytes,
                fields: node.fields.clone(),
                run_first_ms: node.runs.iter().map(|r| u(r.0.ms)).collect(),
                run_first_seq: node.runs.iter().map(|r| u(r.0.seq)).collect(),
                run_last_ms: node.runs.iter().map(|r| u(r.1.ms)).collect(),
                run_last_seq: node.runs.iter().map(|r| u(r.1.seq)).collect(),
            });
        }
        for group in stream.groups.values() {
            dump_group(&mut out, *db, key, group)?;
        }
    }
    for (db, key, group, created, entry_id, rec) in &r.closed {
        let (owners, delivery_count, deliveries) = record_parts(rec);
        out.closed_records.push(ClosedRecordRow {
            db: db32(*db)?,
            key: key.clone(),
            group: group.clone(),
            group_created_seq: *created,
            id_ms: u(entry_id.ms),
            id_seq: u(entry_id.seq),
            delivery_count,
            deliveries,
            owners,
            first_delivery_ms: rec.first_delivery_ms,
            last_delivery_ms: rec.last_delivery_ms,
            status: rec.status.clone(),
            closed_ms: rec.closed_ms,
            changed_seq: rec.changed_seq,
            changed_ms: rec.changed_ms,
        });
    }
    for (client, (multi_seq, now)) in &r.units {
        out.units.push(UnitRow {
            client: client.clone(),
            multi_seq: *multi_seq,
            now: *now,
        });
    }
    for b in &r.blocked {
        let deadline = b
            .deadline
            .map(|d| {
                i64::try_from(d).map_err(|_| {
                    format!(
                        "the deadline {d} of the reader blocked by seq {} does not fit the \
                         state's 64-bit field",
                        b.seq
                    )
                })
            })
            .transpose()?;
        out.blocked.push(BlockedRow {
            seq: b.seq,
            client: b.client.clone(),
            db: db32(b.db)?,
            argv: b.argv.clone(),
            keys: b.keys.clone(),
            group: b.group.clone(),
            consumer: b.consumer.clone(),
            count: b.count,
            noack: b.noack,
            deadline,
        });
    }
    for ((db, key), trigger) in &r.ready {
        let call = refs.at(&mut calls, *trigger)?;
        out.ready.push(ReadyRow {
            db: db32(*db)?,
            key: key.clone(),
            call,
        });
    }
    out.calls = calls;
    Ok(StateData {
        state_version: STATE_SCHEMA_VERSION,
        state: out,
    })
}

// ---- load -------------------------------------------------------------------------------------

fn id(ms: i64, seq: i64) -> StreamId {
    StreamId::new(ms as u64, seq as u64)
}

fn key_error2(db: i64, key: &str) -> String {
    format!("KeyError: ({db}, {})", py_repr(key))
}

fn key_error3(db: i64, key: &str, group: &str) -> String {
    format!("KeyError: ({db}, {}, {})", py_repr(key), py_repr(group))
}

/// The delivery record a `RecordRow` or `ClosedRecordRow` holds (the same fields).
macro_rules! load_record {
    ($row:expr) => {{
        let row = $row;
        DeliveryRecord {
            delivery_count: row.delivery_count,
            deliveries: row.deliveries,
            owners: row.owners.iter().cloned().collect(),
            first_delivery_ms: row.first_delivery_ms,
            last_delivery_ms: row.last_delivery_ms,
            status: row.status.clone(),
            closed_ms: row.closed_ms,
            changed_seq: row.changed_seq,
            changed_ms: row.changed_ms,
        }
    }};
}

fn group_of<'s>(
    streams: &'s mut IndexMap<(i64, String), Stream>,
    db: i32,
    key: &str,
    group: &str,
) -> Result<&'s mut Group, String> {
    streams
        .get_mut(&(i64::from(db), key.to_string()))
        .and_then(|s| s.groups.get_mut(group))
        .ok_or_else(|| key_error3(i64::from(db), key, group))
}

fn build(s: &StateSections, resolve: ResolveProfile<'_>) -> Result<Replayer, String> {
    let m = s.model.first().ok_or("IndexError: no model row")?;
    let profile = resolve(&m.profile)?;
    let mut r = Replayer::new(
        profile,
        m.record_changes,
        m.node_max_entries,
        m.node_max_bytes,
        m.spill_closed_records,
    );
    let calls: Vec<(Trigger, Call)> = s
        .calls
        .iter()
        .map(|row| {
            let call = Call {
                seq: row.seq,
                now: row.now,
                db: i64::from(row.db),
                client: row.client.clone(),
                argv: row.argv.clone(),
                command: row.command.clone(),
                result: Cell::new(None),
                touched_stream: Cell::new(row.touched_stream),
                request_seq: row.request_seq,
            };
            (Trigger::fresh(row.seq, row.now), call)
        })
        .collect();
    let call_at = |n: Option<i64>| -> Result<Option<Trigger>, String> {
        match n {
            None => Ok(None),
            Some(n) => usize::try_from(n)
                .ok()
                .and_then(|i| calls.get(i))
                .map(|(trigger, _)| Some(*trigger))
                .ok_or_else(|| format!("IndexError: no call at position {n} (of {})", calls.len())),
        }
    };
    r.last_seq = m.last_seq;
    r.last_ts_ms = m.last_ts_ms;
    r.segment_n = m.segment_n;
    r.unit = m.unit;
    r.script_now = m.script_now;
    r.script_unit = m.script_unit;
    r.call = call_at(m.last_call)?;
    let mut counters = Counters {
        applied: m.applied,
        ignored: m.ignored,
        failed: m.failed,
        ..Counters::default()
    };
    for row in &s.counts {
        let counts = match row.kind.as_str() {
            "error" => &mut counters.errors,
            "command" => &mut counters.commands,
            "note" => &mut r.notes,
            other => return Err(format!("KeyError: {}", py_repr(other))),
        };
        counts.insert(row.name.clone(), row.count);
    }
    r.counters = counters;

    let mut stream_rows: IndexMap<(i64, String), &StreamRow> = IndexMap::default();
    for row in &s.streams {
        stream_rows.insert((i64::from(row.db), row.key.clone()), row);
    }
    // the streams by key (a stream whose key a later row gives another type stays
    // here, unreachable from the keyspace, as in Python)
    let mut streams: IndexMap<(i64, String), Stream> = IndexMap::default();
    for row in &s.keys {
        let place = (i64::from(row.db), row.key.clone());
        if row.r#type != STREAM_TYPE {
            r.keys.insert(place, Value::Other(row.r#type.clone()));
            continue;
        }
        let st = stream_rows
            .swap_remove(&place)
            .ok_or_else(|| key_error2(place.0, &place.1))?;
        let mut stream = Stream::new();
        stream.last_id = id(st.last_id_ms, st.last_id_seq);
        stream.entries_added = st.entries_added;
        stream.max_deleted_entry_id = id(st.max_deleted_id_ms, st.max_deleted_id_seq);
        stream.first_id = id(st.first_id_ms, st.first_id_seq);
        if st.entry_ms.len() != st.entry_seq.len() {
            return Err(format!(
                "StateError: entry ID lists of {} and {} parts",
                st.entry_ms.len(),
                st.entry_seq.len()
            ));
        }
        let mut entries = Entries::new();
        for (ms, seq) in st.entry_ms.iter().zip(&st.entry_seq) {
            entries.insert(id(*ms, *seq));
        }
        stream.entries = entries;
        // a placeholder: the stream itself joins the keyspace once complete
        r.keys.insert(place.clone(), Value::Stream(Stream::new()));
        streams.insert(place, stream);
    }
    if !stream_rows.is_empty() {
        let mut left: Vec<&(i64, String)> = stream_rows.keys().collect();
        left.sort();
        let listed: Vec<String> = left
            .iter()
            .take(5)
            .map(|(db, key)| format!("({db}, {})", py_repr(key)))
            .collect();
        return Err(format!(
            "StateError: streams without a key row: [{}]",
            listed.join(", ")
        ));
    }
    for row in &s.nodes {
        let stream = streams
            .get_mut(&(i64::from(row.db), row.key.clone()))
            .ok_or_else(|| key_error2(i64::from(row.db), &row.key))?;
        let mut node = Node::new(
            id(row.master_id_ms, row.master_id_seq),
            row.fields.clone(),
            0,
        );
        node.last_id = id(row.last_id_ms, row.last_id_seq);
        node.total = row.total;
        node.live = row.live;
        node.nbytes = row.nbytes;
        let parts = [
            row.run_first_ms.len(),
            row.run_first_seq.len(),
            row.run_last_ms.len(),
            row.run_last_seq.len(),
        ];
        if parts[0] != parts[1] {
            return Err(format!(
                "StateError: entry ID lists of {} and {} parts",
                parts[0], parts[1]
            ));
        }
        if parts[2] != parts[3] {
            return Err(format!(
                "StateError: entry ID lists of {} and {} parts",
                parts[2], parts[3]
            ));
        }
        if parts[0] != parts[2] {
            return Err(format!(
                "StateError: node runs with {} first and {} last IDs",
                parts[0], parts[2]
            ));
        }
        node.runs = (0..parts[0])
            .map(|i| {
                (
                    id(row.run_first_ms[i], row.run_first_seq[i]),
                    id(row.run_last_ms[i], row.run_last_seq[i]),
                )
            })
            .collect();
        stream.nodes.push_back(node);
    }
    for row in &s.groups {
        let stream = streams
            .get_mut(&(i64::from(row.db), row.key.clone()))
            .ok_or_else(|| key_error2(i64::from(row.db), &row.key))?;
        let mut group = Group::new(
            &row.group,
            id(row.last_id_ms, row.last_id_seq),
            row.entries_read,
            row.created_seq,
        );
        group.moved_seq = row.moved_seq;
        group.moved_ms = row.moved_ms;
        stream.groups.insert(row.group.clone(), group);
    }
    for row in &s.consumers {
        let group = group_of(&mut streams, row.db, &row.key, &row.group)?;
        let mut consumer = Consumer::new(&row.consumer, row.seen_time);
        consumer.active_time = row.active_time;
        group.consumers.insert(row.consumer.clone(), consumer);
    }
    for row in &s.pending {
        let group = group_of(&mut streams, row.db, &row.key, &row.group)?;
        let entry_id = id(row.id_ms, row.id_seq);
        if let Some(name) = &row.consumer {
            let owner = group
                .consumers
                .get_mut(name)
                .ok_or_else(|| format!("KeyError: {}", py_repr(name)))?;
            owner.pel.insert(entry_id);
        }
        let mut nack =
            PendingEntry::new(row.consumer.clone(), row.delivery_time, row.delivery_count);
        if row.version {
            let (
                Some(delivery_time),
                Some(delivery_count),
                Some(entry_exists),
                Some(from_seq),
                Some(from_ms),
            ) = (
                row.version_delivery_time,
                row.version_delivery_count,
                row.version_entry_exists,
                row.version_from_seq,
                row.version_from_ms,
            )
            else {
                return Err(format!(
                    "StateError: db {} key {} group {}: pending entry {} has an open version \
                     with null fields (this model cannot hold one)",
                    row.db,
                    py_repr(&row.key),
                    py_repr(&row.group),
                    format_id(&entry_id)
                ));
            };
            nack.version = Some(PelVersion {
                consumer: row.version_consumer.clone(),
                delivery_time,
                delivery_count,
                entry_exists,
                from_seq,
                from_ms,
            });
        }
        group.pel.insert(entry_id, nack);
    }
    for row in &s.records {
        let group = group_of(&mut streams, row.db, &row.key, &row.group)?;
        let rec = load_record!(row);
        group.records.insert(id(row.id_ms, row.id_seq), rec);
    }
    for row in &s.closed_records {
        let rec = load_record!(row);
        r.closed.push((
            i64::from(row.db),
            row.key.clone(),
            row.group.clone(),
            row.group_created_seq,
            id(row.id_ms, row.id_seq),
            rec,
        ));
    }
    for row in &s.units {
        r.units.insert(row.client.clone(), (row.multi_seq, row.now));
    }
    for row in &s.blocked {
        r.blocked.push(BlockedRead {
            seq: row.seq,
            client: row.client.clone(),
            db: i64::from(row.db),
            argv: row.argv.clone(),
            keys: row.keys.clone(),
            group: row.group.clone(),
            consumer: row.consumer.clone(),
            count: row.count,
            noack: row.noack,
            deadline: row.deadline.map(i128::from),
        });
    }
    for row in &s.ready {
        let trigger = call_at(row.call)?;
        r.ready
            .insert((i64::from(row.db), row.key.clone()), trigger);
    }
    for (place, value) in r.keys.iter_mut() {
        if let Value::Stream(placeholder) = value {
            if let Some(stream) = streams.swap_remove(place) {
                *placeholder = stream;
            }
        }
    }
    r.call_log = calls.into_iter().map(|(t, call)| (t.id, call)).collect();
    r.forget_calls();
    Ok(r)
}

/// The profile a saved model names (its `model.profile`), as the caller resolves it;
/// Err: the exception the resolver raised, as `"Type: message"` (Python's resolver
/// raises `ValueError` for a name it does not know).
pub type ResolveProfile<'a> = &'a dyn Fn(&str) -> Result<Profile, String>;

/// The `Replayer` `dump` saved, its profile resolved by `resolve`. `StateError::Version`
/// for another schema version, `StateError::Invalid` for data that is not a saved model
/// (Python's messages).
pub fn load(data: &StateData, resolve: ResolveProfile<'_>) -> Result<Replayer, StateError> {
    check_version(Some(data.state_version))?;
    let n = data.state.model.len();
    if n != 1 {
        return Err(StateError::Invalid(format!(
            "the model section has {n} rows, not one"
        )));
    }
    build(&data.state, resolve)
        .map_err(|e| StateError::Invalid(format!("a malformed saved model: {e}")))
}
