//! The model's history sinks (`pelmodel::history`) as output columns.

use pelmodel::history::{ChangeRows, HistoryTables, IncarnationRows, SegmentRows, VersionRows};

use crate::cols::Cols;
use crate::{cols_of, sink_of};

/// What `Replayer::drain_tables` hands on, per output table (replay.py's `HISTORY_TABLES`).
pub const HISTORY_TABLES: [&str; 4] = [
    "ownership_changes",
    "pel_history",
    "delivery_segments",
    "group_incarnations",
];

/// `ownership_changes` rows (`CHANGE_COLUMNS`).
pub fn change_cols(rows: ChangeRows) -> Cols {
    cols_of!(rows; db, key, group, id, id_ms, id_seq, seq, request_seq, ts_ms, command, change,
        from_consumer, to_consumer, delivery_count, delivery_time_ms)
}

/// Closed `pel_history` versions (`VERSION_COLUMNS`, without `as_of_*`).
pub fn version_cols(rows: VersionRows) -> Cols {
    cols_of!(rows; db, key, group, id, id_ms, id_seq, consumer, delivery_time_ms, delivery_count,
        entry_exists, valid_from_seq, valid_from_ms, valid_to_seq, valid_to_ms)
}

/// `delivery_segments` rows (`SEGMENT_COLUMNS`).
pub fn segment_cols(rows: SegmentRows) -> Cols {
    cols_of!(rows; db, key, group, group_created_seq, id, id_ms, id_seq, delivery_count,
        deliveries, owner_names, first_delivery_ms, last_delivery_ms, status, closed_ms, segment_n,
        changed_seq, changed_ms)
}

/// `group_incarnations` rows (`INCARNATION_COLUMNS`).
pub fn incarnation_cols(rows: IncarnationRows) -> Cols {
    cols_of!(rows; db, key, group, group_created_seq, moved_seq, moved_ms)
}

/// The drained history, per table in `HISTORY_TABLES` order.
pub fn history_cols(tables: HistoryTables) -> [(&'static str, Cols); 4] {
    [
        (HISTORY_TABLES[0], change_cols(tables.ownership_changes)),
        (HISTORY_TABLES[1], version_cols(tables.pel_history)),
        (HISTORY_TABLES[2], segment_cols(tables.delivery_segments)),
        (
            HISTORY_TABLES[3],
            incarnation_cols(tables.group_incarnations),
        ),
    ]
}

/// The drained history's columns back as the model's sinks (`history_cols` the other
/// way), for `Replayer::recycle_tables`: their buffers hold the next rows.
pub fn history_back(tables: [Cols; 4]) -> HistoryTables {
    let [changes, versions, segments, incarnations] = tables;
    HistoryTables {
        ownership_changes: sink_of!(changes; ChangeRows; db, key, group, id, id_ms, id_seq,
            seq, request_seq, ts_ms, command, change, from_consumer, to_consumer, delivery_count,
            delivery_time_ms),
        pel_history: sink_of!(versions; VersionRows; db, key, group, id, id_ms, id_seq,
            consumer, delivery_time_ms, delivery_count, entry_exists, valid_from_seq,
            valid_from_ms, valid_to_seq, valid_to_ms),
        delivery_segments: sink_of!(segments; SegmentRows; db, key, group, group_created_seq,
            id, id_ms, id_seq, delivery_count, deliveries, owner_names, first_delivery_ms,
            last_delivery_ms, status, closed_ms, segment_n, changed_seq, changed_ms),
        group_incarnations: sink_of!(incarnations; IncarnationRows; db, key, group,
            group_created_seq, moved_seq, moved_ms),
    }
}
