//! The state tables at a moment, rendered from a replayer: a port of
//! `pelengine/model/snapshot.py` (`snapshot_columns`), same tables, same columns, same
//! row order.
//!
//! A copy because it is output building on the hot path: every family's replay ends
//! with it, one row per pending entry, consumer, group and open delivery record (a hot
//! stream holds millions), built straight into Arrow columns. tests/native (test_face's
//! `Replayer.snapshot` against `snapshot_columns`, row for row and in order, and the
//! engines-equal property test) holds it equal.

use pelmodel::history::{append_incarnation, append_segment, IncarnationRows, SegmentRows};
use pelmodel::ids::{format_id, id_parts};
use pelmodel::lag::group_lag;
use pelmodel::replay::Replayer;
use pelmodel::state::{DeliveryRecord, INVALID_ENTRIES_READ};

use crate::cols::{Cols, Kind, Val};
use crate::history::{incarnation_cols, segment_cols};

use Kind::{Bool, Int, Str, StrList};

const STREAM_COLUMNS: &[(&str, Kind)] = &[
    ("db", Int),
    ("key", Str),
    ("length", Int),
    ("last_generated_id", Str),
    ("max_deleted_entry_id", Str),
    ("entries_added", Int),
    ("first_entry_id", Str),
    ("last_entry_id", Str),
    ("recorded_first_entry_id", Str),
    ("groups", Int),
    ("as_of_ms", Int),
    ("as_of_seq", Int),
];
const GROUP_COLUMNS: &[(&str, Kind)] = &[
    ("db", Int),
    ("key", Str),
    ("group", Str),
    ("last_delivered_id", Str),
    ("entries_read", Int),
    ("lag", Int),
    ("pending", Int),
    ("consumers", Int),
    ("as_of_ms", Int),
    ("as_of_seq", Int),
];
const PEL_COLUMNS: &[(&str, Kind)] = &[
    ("db", Int),
    ("key", Str),
    ("group", Str),
    ("id", Str),
    ("id_ms", Int),
    ("id_seq", Int),
    ("consumer", Str),
    ("delivery_time_ms", Int),
    ("delivery_count", Int),
    ("entry_exists", Bool),
    ("idle_ms", Int),
    ("as_of_ms", Int),
    ("as_of_seq", Int),
];
const OWNERSHIP_COLUMNS: &[(&str, Kind)] = &[
    ("db", Int),
    ("key", Str),
    ("group", Str),
    ("consumer", Str),
    ("pending", Int),
    ("seen_time_ms", Int),
    ("active_time_ms", Int),
    ("oldest_pending_id", Str),
    ("earliest_delivery_time_ms", Int),
    ("max_delivery_count", Int),
    ("as_of_ms", Int),
    ("as_of_seq", Int),
];
/// the open `pel_history` versions (`VERSION_COLUMNS` and `as_of_*`)
const HISTORY_COLUMNS: &[(&str, Kind)] = &[
    ("db", Int),
    ("key", Str),
    ("group", Str),
    ("id", Str),
    ("id_ms", Int),
    ("id_seq", Int),
    ("consumer", Str),
    ("delivery_time_ms", Int),
    ("delivery_count", Int),
    ("entry_exists", Bool),
    ("valid_from_seq", Int),
    ("valid_from_ms", Int),
    ("valid_to_seq", Int),
    ("valid_to_ms", Int),
    ("as_of_ms", Int),
    ("as_of_seq", Int),
];
/// a delivery record as a row of delivery_counts (`pelengine.schemas`'
/// `ENGINE_TABLE_COLUMNS["delivery_counts"]`)
const DELIVERY_COLUMNS: &[(&str, Kind)] = &[
    ("db", Int),
    ("key", Str),
    ("group", Str),
    ("id", Str),
    ("id_ms", Int),
    ("id_seq", Int),
    ("delivery_count", Int),
    ("deliveries", Int),
    ("owners", Int),
    ("first_delivery_ms", Int),
    ("last_delivery_ms", Int),
    ("status", Str),
    ("closed_ms", Int),
    ("owner_names", StrList),
    ("group_created_seq", Int),
    ("changed_seq", Int),
    ("changed_ms", Int),
    ("as_of_ms", Int),
    ("as_of_seq", Int),
];

/// All state tables (pel, ownership, delivery_counts, groups, streams) and the open
/// versions of `pel_history`, in this order; spilling, also `delivery_segments` (the
/// open records) and `group_incarnations` (the live groups). Ends an execution unit
/// still open.
pub fn snapshot_cols(
    model: &mut Replayer,
    as_of_ms: i64,
    as_of_seq: i64,
) -> Result<Vec<(&'static str, Cols)>, String> {
    model.settle()?;
    let mut streams = Cols::new(STREAM_COLUMNS);
    let mut groups = Cols::new(GROUP_COLUMNS);
    let mut pel = Cols::new(PEL_COLUMNS);
    let mut ownership = Cols::new(OWNERSHIP_COLUMNS);
    let mut history = Cols::new(HISTORY_COLUMNS);
    let mut counts = Cols::new(DELIVERY_COLUMNS);
    let spill = model.spill_closed_records;
    let mut segments = SegmentRows::default();
    let mut incarnations = IncarnationRows::default();
    let active = model.profile.active_time;
    let strict_lag = model.profile.strict_lag;
    // open records: after every closed segment
    let open_n = model.segment_n + 1;
    let (ms, seq) = (Val::from(as_of_ms), Val::from(as_of_seq));
    for (db, key, stream) in model.streams() {
        let entries = &stream.entries;
        streams.push([
            db.into(),
            key.into(),
            stream.length().into(),
            format_id(&stream.last_id).into(),
            format_id(&stream.max_deleted_entry_id).into(),
            stream.entries_added.into(),
            entries.first().map(format_id).into(),
            entries.last().map(format_id).into(),
            format_id(&stream.first_id).into(),
            stream.groups.len().into(),
            ms.clone(),
            seq.clone(),
        ]);
        let mut by_name: Vec<_> = stream.groups.values().collect();
        by_name.sort_by(|a, b| a.name.cmp(&b.name));
        for group in by_name {
            let er = group.entries_read;
            groups.push([
                db.into(),
                key.into(),
                group.name.as_str().into(),
                format_id(&group.last_id).into(),
                (er != INVALID_ENTRIES_READ).then_some(er).into(),
                group_lag(stream, group, strict_lag).into(),
                group.pel.len().into(),
                group.consumers.len().into(),
                ms.clone(),
                seq.clone(),
            ]);
            for (entry_id, nack) in &group.pel {
                let (id, id_ms, id_seq) = id_parts(entry_id);
                pel.push([
                    db.into(),
                    key.into(),
                    group.name.as_str().into(),
                    id.as_str().into(),
                    id_ms.into(),
                    id_seq.into(),
                    nack.consumer.as_deref().into(),
                    nack.delivery_time.into(),
                    nack.delivery_count.into(),
                    entries.contains(entry_id).into(),
                    as_of_ms.checked_sub(nack.delivery_time).into(),
                    ms.clone(),
                    seq.clone(),
                ]);
                if let Some(v) = &nack.version {
                    history.push([
                        db.into(),
                        key.into(),
                        group.name.as_str().into(),
                        id.into(),
                        id_ms.into(),
                        id_seq.into(),
                        v.consumer.as_deref().into(),
                        v.delivery_time.into(),
                        v.delivery_count.into(),
                        v.entry_exists.into(),
                        v.from_seq.into(),
                        v.from_ms.into(),
                        Val::Int(None),
                        Val::Int(None),
                        ms.clone(),
                        seq.clone(),
                    ]);
                }
            }
            let mut consumers: Vec<_> = group.consumers.values().collect();
            consumers.sort_by(|a, b| a.name.cmp(&b.name));
            for consumer in consumers {
                let owned = &consumer.pel;
                let held = owned.iter().filter_map(|id| group.pel.get(id));
                let earliest = held.clone().map(|n| n.delivery_time).min();
                let most = held.map(|n| n.delivery_count).max();
                ownership.push([
                    db.into(),
                    key.into(),
                    group.name.as_str().into(),
                    consumer.name.as_str().into(),
                    owned.len().into(),
                    consumer.seen_time.into(),
                    (active && consumer.active_time != -1)
                        .then_some(consumer.active_time)
                        .into(),
                    owned.first().map(format_id).into(),
                    earliest.into(),
                    most.into(),
                    ms.clone(),
                    seq.clone(),
                ]);
            }
            if spill {
                for (entry_id, rec) in &group.records {
                    append_segment(&mut segments, db, key, group, entry_id, rec, open_n);
                }
                append_incarnation(&mut incarnations, db, key, group);
                continue;
            }
            for (entry_id, rec) in &group.records {
                let (id, id_ms, id_seq) = id_parts(entry_id);
                let entry = Entry {
                    db,
                    key,
                    group: &group.name,
                    created_seq: group.created_seq,
                    id,
                    id_ms,
                    id_seq,
                };
                append_record(&mut counts, &entry, rec, as_of_ms, as_of_seq);
            }
        }
    }
    for (db, key, group, created_seq, entry_id, rec) in &model.closed {
        let (id, id_ms, id_seq) = id_parts(entry_id);
        let entry = Entry {
            db: *db,
            key,
            group,
            created_seq: *created_seq,
            id,
            id_ms,
            id_seq,
        };
        append_record(&mut counts, &entry, rec, as_of_ms, as_of_seq);
    }
    let mut tables = vec![
        ("pel", pel),
        ("ownership", ownership),
        ("delivery_counts", counts),
        ("groups", groups),
        ("streams", streams),
        ("pel_history", history),
    ];
    if spill {
        tables.push(("delivery_segments", segment_cols(segments)));
        tables.push(("group_incarnations", incarnation_cols(incarnations)));
    }
    Ok(tables)
}

/// Which entry of which group incarnation a delivery record is of.
struct Entry<'a> {
    db: i64,
    key: &'a str,
    group: &'a str,
    created_seq: i64,
    id: String,
    id_ms: Option<i64>,
    id_seq: Option<i64>,
}

/// A delivery record as a row of `delivery_counts` (`DELIVERY_COLUMNS`).
fn append_record(
    sink: &mut Cols,
    e: &Entry<'_>,
    rec: &DeliveryRecord,
    as_of_ms: i64,
    as_of_seq: i64,
) {
    let mut owners: Vec<String> = rec.owners.iter().cloned().collect();
    owners.sort();
    sink.push([
        e.db.into(),
        e.key.into(),
        e.group.into(),
        e.id.as_str().into(),
        e.id_ms.into(),
        e.id_seq.into(),
        rec.delivery_count.into(),
        rec.deliveries.into(),
        owners.len().into(),
        rec.first_delivery_ms.into(),
        rec.last_delivery_ms.into(),
        rec.status.as_str().into(),
        rec.closed_ms.into(),
        owners.into(),
        e.created_seq.into(),
        rec.changed_seq.into(),
        rec.changed_ms.into(),
        as_of_ms.into(),
        as_of_seq.into(),
    ]);
}
