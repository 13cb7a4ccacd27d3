//! The history rows the replayer records, one column-wise sink per output table
//! (Python's `Columns` with the column tuples of `replay` and `delivery`).
//!
//! The model appends every history row to one (no struct per row); a consumer takes
//! the vectors as they are (`take`: what was appended so far, leaving the sink empty).
//!
//! `append_segment`/`append_incarnation` are `pelengine.model.delivery`'s: a
//! delivery segment (one piece of a `delivery_counts` row, see the Python module
//! docstring) and where a group incarnation ended.

use crate::ids::{to_bigint, StreamId};
use crate::state::{DeliveryRecord, Group, PelVersion};
use crate::texts::Texts;

/// `replay.CHANGE_COLUMNS`
pub const CHANGE_COLUMNS: [&str; 15] = [
    "db",
    "key",
    "group",
    "id",
    "id_ms",
    "id_seq",
    "seq",
    "request_seq",
    "ts_ms",
    "command",
    "change",
    "from_consumer",
    "to_consumer",
    "delivery_count",
    "delivery_time_ms",
];

/// `replay.PEL_ENTRY_COLUMNS`: what one pending entry is, in `pel` and in each version.
pub const PEL_ENTRY_COLUMNS: [&str; 10] = [
    "db",
    "key",
    "group",
    "id",
    "id_ms",
    "id_seq",
    "consumer",
    "delivery_time_ms",
    "delivery_count",
    "entry_exists",
];

/// `replay.VERSION_COLUMNS`: a pel_history version (without `as_of_*`).
pub const VERSION_COLUMNS: [&str; 14] = [
    "db",
    "key",
    "group",
    "id",
    "id_ms",
    "id_seq",
    "consumer",
    "delivery_time_ms",
    "delivery_count",
    "entry_exists",
    "valid_from_seq",
    "valid_from_ms",
    "valid_to_seq",
    "valid_to_ms",
];

/// `delivery.SEGMENT_COLUMNS`
pub const SEGMENT_COLUMNS: [&str; 17] = [
    "db",
    "key",
    "group",
    "group_created_seq",
    "id",
    "id_ms",
    "id_seq",
    "delivery_count",
    "deliveries",
    "owner_names",
    "first_delivery_ms",
    "last_delivery_ms",
    "status",
    "closed_ms",
    "segment_n",
    "changed_seq",
    "changed_ms",
];

/// `delivery.INCARNATION_COLUMNS`
pub const INCARNATION_COLUMNS: [&str; 6] = [
    "db",
    "key",
    "group",
    "group_created_seq",
    "moved_seq",
    "moved_ms",
];

/// What `Replayer::drain_tables` hands on, per output table (`replay.HISTORY_TABLES`).
pub const HISTORY_TABLES: [&str; 4] = [
    "ownership_changes",
    "pel_history",
    "delivery_segments",
    "group_incarnations",
];

/// the segment_n of a row of an earlier run's delivery_counts continued by this run
pub const PRIOR_SEGMENT_N: i64 = -1;

/// `ownership_changes` rows (`CHANGE_COLUMNS`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeRows {
    pub db: Vec<i64>,
    pub key: Texts,
    pub group: Texts,
    pub id: Texts,
    pub id_ms: Vec<Option<i64>>,
    pub id_seq: Vec<Option<i64>>,
    pub seq: Vec<i64>,
    pub request_seq: Vec<i64>,
    pub ts_ms: Vec<i64>,
    pub command: Texts,
    pub change: Texts,
    pub from_consumer: Texts,
    pub to_consumer: Texts,
    pub delivery_count: Vec<i64>,
    pub delivery_time_ms: Vec<i64>,
}

impl ChangeRows {
    /// One row, in the order of `CHANGE_COLUMNS`.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        db: i64,
        key: &str,
        group: &str,
        entry_id: &StreamId,
        seq: i64,
        request_seq: i64,
        ts_ms: i64,
        command: &str,
        change: &str,
        from_consumer: Option<&str>,
        to_consumer: Option<&str>,
        delivery_count: i64,
        delivery_time_ms: i64,
    ) {
        self.db.push(db);
        self.key.push(key);
        self.group.push(group);
        self.id.push_id(entry_id);
        self.id_ms.push(to_bigint(entry_id.ms));
        self.id_seq.push(to_bigint(entry_id.seq));
        self.seq.push(seq);
        self.request_seq.push(request_seq);
        self.ts_ms.push(ts_ms);
        self.command.push(command);
        self.change.push(change);
        self.from_consumer.push_opt(from_consumer);
        self.to_consumer.push_opt(to_consumer);
        self.delivery_count.push(delivery_count);
        self.delivery_time_ms.push(delivery_time_ms);
    }
}

/// `pel_history` versions (`VERSION_COLUMNS`); `valid_to_*` None: still open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionRows {
    pub db: Vec<i64>,
    pub key: Texts,
    pub group: Texts,
    pub id: Texts,
    pub id_ms: Vec<Option<i64>>,
    pub id_seq: Vec<Option<i64>>,
    pub consumer: Texts,
    pub delivery_time_ms: Vec<i64>,
    pub delivery_count: Vec<i64>,
    pub entry_exists: Vec<bool>,
    pub valid_from_seq: Vec<i64>,
    pub valid_from_ms: Vec<i64>,
    pub valid_to_seq: Vec<Option<i64>>,
    pub valid_to_ms: Vec<Option<i64>>,
}

impl VersionRows {
    /// One version of the pending entry `entry_id`, ended at `valid_to` (seq, ms) or
    /// open (None).
    pub fn push(
        &mut self,
        db: i64,
        key: &str,
        group: &str,
        entry_id: &StreamId,
        version: &PelVersion,
        valid_to: Option<(i64, i64)>,
    ) {
        self.db.push(db);
        self.key.push(key);
        self.group.push(group);
        self.id.push_id(entry_id);
        self.id_ms.push(to_bigint(entry_id.ms));
        self.id_seq.push(to_bigint(entry_id.seq));
        self.consumer.push_opt(version.consumer.as_deref());
        self.delivery_time_ms.push(version.delivery_time);
        self.delivery_count.push(version.delivery_count);
        self.entry_exists.push(version.entry_exists);
        self.valid_from_seq.push(version.from_seq);
        self.valid_from_ms.push(version.from_ms);
        self.valid_to_seq.push(valid_to.map(|(seq, _)| seq));
        self.valid_to_ms.push(valid_to.map(|(_, ms)| ms));
    }
}

/// Delivery segments (`SEGMENT_COLUMNS`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentRows {
    pub db: Vec<i64>,
    pub key: Texts,
    pub group: Texts,
    pub group_created_seq: Vec<i64>,
    pub id: Texts,
    pub id_ms: Vec<Option<i64>>,
    pub id_seq: Vec<Option<i64>>,
    pub delivery_count: Vec<i64>,
    pub deliveries: Vec<i64>,
    pub owner_names: Vec<Vec<String>>,
    pub first_delivery_ms: Vec<Option<i64>>,
    pub last_delivery_ms: Vec<Option<i64>>,
    pub status: Texts,
    pub closed_ms: Vec<Option<i64>>,
    pub segment_n: Vec<i64>,
    pub changed_seq: Vec<Option<i64>>,
    pub changed_ms: Vec<Option<i64>>,
}

/// Group incarnations (`INCARNATION_COLUMNS`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IncarnationRows {
    pub db: Vec<i64>,
    pub key: Texts,
    pub group: Texts,
    pub group_created_seq: Vec<i64>,
    pub moved_seq: Vec<Option<i64>>,
    pub moved_ms: Vec<Option<i64>>,
}

/// `len`, `is_empty`, `take`, `clear` and `extend` of a column-wise sink (every column of the
/// same length).
macro_rules! sink {
    ($name:ident, $first:ident $(, $col:ident)*) => {
        impl $name {
            /// How many rows were appended.
            pub fn len(&self) -> usize {
                self.$first.len()
            }

            pub fn is_empty(&self) -> bool {
                self.$first.is_empty()
            }

            /// What was appended so far (this sink starts empty again).
            pub fn take(&mut self) -> Self {
                std::mem::take(self)
            }

            /// No rows, the room of every column kept.
            pub fn clear(&mut self) {
                self.$first.clear();
                $(self.$col.clear();)*
            }

            /// Append every row of `other`.
            pub fn extend(&mut self, other: Self) {
                self.$first.extend(other.$first);
                $(self.$col.extend(other.$col);)*
            }
        }
    };
}

sink!(
    ChangeRows,
    db,
    key,
    group,
    id,
    id_ms,
    id_seq,
    seq,
    request_seq,
    ts_ms,
    command,
    change,
    from_consumer,
    to_consumer,
    delivery_count,
    delivery_time_ms
);
sink!(
    VersionRows,
    db,
    key,
    group,
    id,
    id_ms,
    id_seq,
    consumer,
    delivery_time_ms,
    delivery_count,
    entry_exists,
    valid_from_seq,
    valid_from_ms,
    valid_to_seq,
    valid_to_ms
);
sink!(
    SegmentRows,
    db,
    key,
    group,
    group_created_seq,
    id,
    id_ms,
    id_seq,
    delivery_count,
    deliveries,
    owner_names,
    first_delivery_ms,
    last_delivery_ms,
    status,
    closed_ms,
    segment_n,
    changed_seq,
    changed_ms
);
sink!(
    IncarnationRows,
    db,
    key,
    group,
    group_created_seq,
    moved_seq,
    moved_ms
);

/// One segment (`SEGMENT_COLUMNS`): `rec` as it closed (or as it is, still open, at
/// the end).
pub fn append_segment(
    sink: &mut SegmentRows,
    db: i64,
    key: &str,
    group: &Group,
    entry_id: &StreamId,
    rec: &DeliveryRecord,
    segment_n: i64,
) {
    // a BTreeSet<String> iterates in code point order, as Python's sorted(set)
    let owners = rec.owners.iter().cloned().collect();
    push_segment(
        sink,
        db,
        key,
        &group.name,
        group.created_seq,
        entry_id,
        rec,
        owners,
        segment_n,
    );
}

/// `append_segment` with the group's name and incarnation given apart (for callers
/// that hold the group's records mutably), and the record's owners in code point
/// order (`owner_names`: a record leaving the model gives its own, uncopied).
#[allow(clippy::too_many_arguments)]
pub(crate) fn push_segment(
    sink: &mut SegmentRows,
    db: i64,
    key: &str,
    group: &str,
    created_seq: i64,
    entry_id: &StreamId,
    rec: &DeliveryRecord,
    owner_names: Vec<String>,
    segment_n: i64,
) {
    sink.db.push(db);
    sink.key.push(key);
    sink.group.push(group);
    sink.group_created_seq.push(created_seq);
    sink.id.push_id(entry_id);
    sink.id_ms.push(to_bigint(entry_id.ms));
    sink.id_seq.push(to_bigint(entry_id.seq));
    sink.delivery_count.push(rec.delivery_count);
    sink.deliveries.push(rec.deliveries);
    sink.owner_names.push(owner_names);
    sink.first_delivery_ms.push(rec.first_delivery_ms);
    sink.last_delivery_ms.push(rec.last_delivery_ms);
    sink.status.push(&rec.status);
    sink.closed_ms.push(rec.closed_ms);
    sink.segment_n.push(segment_n);
    sink.changed_seq.push(rec.changed_seq);
    sink.changed_ms.push(rec.changed_ms);
}

/// Where a group incarnation ended (or is at the end): its final db, key and name,
/// and the last `RENAME` that moved it (`INCARNATION_COLUMNS`).
pub fn append_incarnation(sink: &mut IncarnationRows, db: i64, key: &str, group: &Group) {
    sink.db.push(db);
    sink.key.push(key);
    sink.group.push(&group.name);
    sink.group_created_seq.push(group.created_seq);
    sink.moved_seq.push(group.moved_seq);
    sink.moved_ms.push(group.moved_ms);
}

/// The history rows of every output table (`HISTORY_TABLES`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryTables {
    pub ownership_changes: ChangeRows,
    pub pel_history: VersionRows,
    pub delivery_segments: SegmentRows,
    pub group_incarnations: IncarnationRows,
}

impl HistoryTables {
    /// What was appended so far, per table (every sink starts empty again).
    pub fn take(&mut self) -> Self {
        std::mem::take(self)
    }

    /// No rows in any table, the room of every column kept.
    pub fn clear(&mut self) {
        self.ownership_changes.clear();
        self.pel_history.clear();
        self.delivery_segments.clear();
        self.group_incarnations.clear();
    }

    /// How many rows every table holds.
    pub fn len(&self) -> usize {
        self.ownership_changes.len()
            + self.pel_history.len()
            + self.delivery_segments.len()
            + self.group_incarnations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Append every row of `other`, table by table.
    pub fn extend(&mut self, other: Self) {
        self.ownership_changes.extend(other.ownership_changes);
        self.pel_history.extend(other.pel_history);
        self.delivery_segments.extend(other.delivery_segments);
        self.group_incarnations.extend(other.group_incarnations);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn segment_rows() {
        let mut sink = SegmentRows::default();
        let group = Group::new("g", StreamId::new(0, 0), -1, 7);
        let owners: BTreeSet<String> = ["b", "a", "é", "Z"].iter().map(|s| s.to_string()).collect();
        let mut rec = DeliveryRecord::new(2, 3, owners, Some(1), Some(5));
        rec.changed(9, 1009);
        append_segment(&mut sink, 0, "k", &group, &StreamId::new(1, 2), &rec, 4);
        assert_eq!(sink.owner_names[0], ["Z", "a", "b", "é"]);
        assert_eq!(
            (sink.changed_seq[0], sink.changed_ms[0]),
            (Some(9), Some(1009))
        );
        assert_eq!(sink.id.get(0), Some("1-2"));
        let taken = sink.take();
        assert_eq!((taken.len(), sink.len()), (1, 0));
        let mut inc = IncarnationRows::default();
        append_incarnation(&mut inc, 1, "k", &group);
        assert_eq!(inc.group_created_seq, [7]);
        assert_eq!((inc.moved_seq[0], inc.moved_ms[0]), (None, None));
    }
}
