"""The state tables at a moment, rendered from a replayer.

``snapshot_columns`` gives every state table (``pel``, ``ownership``,
``delivery_counts``, ``groups``, ``streams``) and the open versions of
``pel_history`` as they are after the commands a ``Replayer`` applied, with the
``as_of_ms``/``as_of_seq`` the caller names, column by column
(``calls.Columns``); ``snapshot_tables`` gives the same as rows (dicts). The
closed ``pel_history`` versions and the other history rows are drained from the
replayer as they happen (``Replayer.drain_tables``).

Spilling (``Replayer(spill_closed_records=True)``): ``delivery_counts`` is empty;
``delivery_segments`` holds the open records and ``group_incarnations`` the live
groups (merge them with what was drained:
``pelengine.model.delivery.merge_delivery_segments``).

An execution unit still open ends here (``Replayer.settle``): the state is the one
a server shows once the unit ran.
"""

from __future__ import annotations

from pelengine.model.calls import Columns, Row
from pelengine.model.commands import group_lag
from pelengine.model.delivery import (
    INCARNATION_COLUMNS,
    SEGMENT_COLUMNS,
    append_incarnation,
    append_segment,
)
from pelengine.model.ids import I64_MAX, I64_MIN, StreamID, format_id, id_parts
from pelengine.model.replay import PEL_ENTRY_COLUMNS, VERSION_COLUMNS, Replayer
from pelengine.model.state import INVALID_ENTRIES_READ, DeliveryRecord

AS_OF = ("as_of_ms", "as_of_seq")

STREAM_COLUMNS = (
    "db",
    "key",
    "length",
    "last_generated_id",
    "max_deleted_entry_id",
    "entries_added",
    "first_entry_id",
    "last_entry_id",
    "recorded_first_entry_id",
    "groups",
    *AS_OF,
)
GROUP_COLUMNS = (
    "db",
    "key",
    "group",
    "last_delivered_id",
    "entries_read",
    "lag",
    "pending",
    "consumers",
    *AS_OF,
)
PEL_COLUMNS = (
    *PEL_ENTRY_COLUMNS,
    "idle_ms",
    *AS_OF,
)
OWNERSHIP_COLUMNS = (
    "db",
    "key",
    "group",
    "consumer",
    "pending",
    "seen_time_ms",
    "active_time_ms",
    "oldest_pending_id",
    "earliest_delivery_time_ms",
    "max_delivery_count",
    *AS_OF,
)
# a delivery record as a row of delivery_counts (pelengine.schemas'
# ENGINE_TABLE_COLUMNS["delivery_counts"])
DELIVERY_COLUMNS = (
    "db",
    "key",
    "group",
    "id",
    "id_ms",
    "id_seq",
    "delivery_count",
    "deliveries",
    "owners",
    "first_delivery_ms",
    "last_delivery_ms",
    "status",
    "closed_ms",
    "owner_names",
    "group_created_seq",
    "changed_seq",
    "changed_ms",
    *AS_OF,
)


def snapshot_columns(model: Replayer, as_of_ms: int, as_of_seq: int) -> dict[str, Columns]:
    """All state tables (pel, ownership, delivery_counts, groups, streams) and the open
    versions of ``pel_history``, column by column (see the module docstring); with
    spilling also ``delivery_segments`` (the open records) and ``group_incarnations``
    (the live groups). Ends an execution unit still open."""
    model.settle()
    streams = Columns(STREAM_COLUMNS)
    groups = Columns(GROUP_COLUMNS)
    pel = Columns(PEL_COLUMNS)
    ownership = Columns(OWNERSHIP_COLUMNS)
    history = Columns((*VERSION_COLUMNS, *AS_OF))
    counts = Columns(DELIVERY_COLUMNS)
    tables = {
        "pel": pel,
        "ownership": ownership,
        "delivery_counts": counts,
        "groups": groups,
        "streams": streams,
        "pel_history": history,
    }
    spill = model.spill_closed_records
    segments = Columns(SEGMENT_COLUMNS)
    incarnations = Columns(INCARNATION_COLUMNS)
    if spill:
        tables["delivery_segments"] = segments
        tables["group_incarnations"] = incarnations
    active = model.profile.active_time
    strict_lag = model.profile.strict_lag
    for db, key, stream in model.streams():
        entries = stream.entries
        streams.append(
            db,
            key,
            stream.length,
            format_id(stream.last_id),
            format_id(stream.max_deleted_entry_id),
            stream.entries_added,
            format_id(entries[0]) if entries else None,
            format_id(entries[-1]) if entries else None,
            format_id(stream.first_id),
            len(stream.groups),
            as_of_ms,
            as_of_seq,
        )
        for group in sorted(stream.groups.values(), key=lambda g: g.name):
            er = group.entries_read
            groups.append(
                db,
                key,
                group.name,
                format_id(group.last_id),
                None if er == INVALID_ENTRIES_READ else er,
                group_lag(stream, group, strict_lag),
                len(group.pel),
                len(group.consumers),
                as_of_ms,
                as_of_seq,
            )
            for entry_id, nack in group.pel.items():
                ids = id_parts(entry_id)
                pel.append(
                    db,
                    key,
                    group.name,
                    *ids,
                    nack.consumer.name if nack.consumer else None,
                    nack.delivery_time,
                    nack.delivery_count,
                    entry_id in entries,
                    _idle(as_of_ms, nack.delivery_time),
                    as_of_ms,
                    as_of_seq,
                )
                if nack.version is not None:
                    history.append(
                        db, key, group.name, *ids, *nack.version, None, None, as_of_ms, as_of_seq
                    )
            for consumer in sorted(group.consumers.values(), key=lambda c: c.name):
                owned = consumer.pel
                ownership.append(
                    db,
                    key,
                    group.name,
                    consumer.name,
                    len(owned),
                    consumer.seen_time,
                    consumer.active_time if active and consumer.active_time != -1 else None,
                    format_id(owned.peekitem(0)[0]) if owned else None,
                    min(n.delivery_time for n in owned.values()) if owned else None,
                    max(n.delivery_count for n in owned.values()) if owned else None,
                    as_of_ms,
                    as_of_seq,
                )
            if spill:
                # open records: after every closed segment
                open_n = model._segment_n + 1
                for entry_id, rec in group.records.items():
                    append_segment(segments, db, key, group, entry_id, rec, open_n)
                append_incarnation(incarnations, db, key, group)
                continue
            for entry_id, rec in group.records.items():
                _append_record(
                    counts,
                    db,
                    key,
                    group.name,
                    group.created_seq,
                    entry_id,
                    rec,
                    as_of_ms,
                    as_of_seq,
                )
    for db, key, group_name, created, entry_id, rec in model._closed:
        _append_record(counts, db, key, group_name, created, entry_id, rec, as_of_ms, as_of_seq)
    return tables


def _idle(as_of_ms: int, delivery_time: int) -> int | None:
    """``idle_ms``: null when it does not fit a BIGINT (only a snapshot's extreme delivery
    times give one)."""
    idle = as_of_ms - delivery_time
    return idle if I64_MIN <= idle <= I64_MAX else None


def snapshot_tables(model: Replayer, as_of_ms: int, as_of_seq: int) -> dict[str, list[Row]]:
    """``snapshot_columns`` as rows (dicts), per table."""
    return {
        name: cols.rows() for name, cols in snapshot_columns(model, as_of_ms, as_of_seq).items()
    }


def _append_record(
    sink: Columns,
    db: int,
    key: str,
    group: str,
    created_seq: int,
    entry_id: StreamID,
    rec: DeliveryRecord,
    as_of_ms: int,
    as_of_seq: int,
) -> None:
    """A delivery record as a row of ``delivery_counts`` (``DELIVERY_COLUMNS``)."""
    sink.append(
        db,
        key,
        group,
        *id_parts(entry_id),
        rec.delivery_count,
        rec.deliveries,
        len(rec.owners),
        rec.first_delivery_ms,
        rec.last_delivery_ms,
        rec.status,
        rec.closed_ms,
        sorted(rec.owners),
        created_seq,
        rec.changed_seq,
        rec.changed_ms,
        as_of_ms,
        as_of_seq,
    )
