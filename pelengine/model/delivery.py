"""``delivery_counts`` from delivery segments: how a replay that spills closed records
still gives every row a full replay gives.

A replayer keeping every ``DeliveryRecord`` holds one per entry ever delivered:
memory that grows with the history. With ``Replayer(spill_closed_records=True)``
a record leaves the model when its entry leaves the PEL (acked, dropped, its
consumer deleted, its group destroyed, its key deleted) as one *segment* row;
at the end (``pelengine.model.snapshot``) the records still open are segments too. An entry
delivered again after it closed (``XGROUP SETID`` back then a ``>`` read,
``XCLAIM ... FORCE``) starts a new segment, which a full replay would have
added to the same record. :func:`merge_delivery_segments` puts them back
together, per group incarnation and entry ID:

* ``deliveries``: the sum; ``owner_names``: the union (``owners`` its size);
* ``first_delivery_ms``/``last_delivery_ms``: of the first/last segment (in
  ``segment_n`` order) that has any delivery;
* ``delivery_count``, ``status``, ``closed_ms``: of the last segment;
* ``changed_seq``/``changed_ms``: the pair with the largest ``changed_seq`` among the
  segments' and the incarnation's ``moved_seq``/``moved_ms`` (the last ``RENAME`` that
  moved it: it changed the key of every record, those already spilled included).

A group *incarnation* is one life of a group name on a key: ``group_created_seq``
(the seq of its ``XGROUP CREATE``) with its db and name. Destroying and
re-creating a group, or deleting and re-creating its key, starts another
incarnation whose rows are apart; a ``RENAME`` moves an incarnation (and every
record it has, closed ones included) to the new key name. So the row's ``key``
is where the incarnation ended up: the ``group_incarnations`` rows (one per
incarnation, emitted when it ends or, for live ones, at the end) carry it.

The Spark job merges with the same rules in SQL (``pelengine.pipeline``
``merge_delivery_segments``); tests hold both to the records of a full replay.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pelengine.model.calls import Columns, Row
from pelengine.model.ids import StreamID, id_parts
from pelengine.model.state import DeliveryRecord, Group

# What identifies one row of delivery_counts across segments (the key may change).
SEGMENT_IDENTITY = ("db", "group", "group_created_seq", "id")
# The incarnation of a group.
INCARNATION_IDENTITY = ("db", "group", "group_created_seq")

SEGMENT_COLUMNS = (
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
)
INCARNATION_COLUMNS = ("db", "key", "group", "group_created_seq", "moved_seq", "moved_ms")

# the segment_n of a row of an earlier run's delivery_counts continued by this run
PRIOR_SEGMENT_N = -1


def append_segment(
    sink: Columns,
    db: int,
    key: str,
    group: Group,
    entry_id: StreamID,
    rec: DeliveryRecord,
    segment_n: int,
) -> None:
    """One segment (``SEGMENT_COLUMNS``): ``rec`` as it closed (or as it is, still open,
    at the end)."""
    sink.append(
        db,
        key,
        group.name,
        group.created_seq,
        *id_parts(entry_id),
        rec.delivery_count,
        rec.deliveries,
        sorted(rec.owners),
        rec.first_delivery_ms,
        rec.last_delivery_ms,
        rec.status,
        rec.closed_ms,
        segment_n,
        rec.changed_seq,
        rec.changed_ms,
    )


def append_incarnation(sink: Columns, db: int, key: str, group: Group) -> None:
    """Where a group incarnation ended (or is at the end): its final db, key and name,
    and the last ``RENAME`` that moved it (``INCARNATION_COLUMNS``)."""
    sink.append(db, key, group.name, group.created_seq, group.moved_seq, group.moved_ms)


def prior_segment(row: Row) -> Row:
    """A ``delivery_counts`` row of an earlier run, as the first segment of its entry."""
    return {c: row[c] for c in SEGMENT_COLUMNS if c != "segment_n"} | {"segment_n": PRIOR_SEGMENT_N}


def merge_delivery_segments(
    segments: Iterable[Row], incarnations: Iterable[Row], as_of: Row | None = None
) -> list[Row]:
    """The ``delivery_counts`` rows the segments make (see the module docstring);
    ``as_of``: the ``as_of_ms``/``as_of_seq`` every row gets."""
    final_key: dict[tuple[Any, ...], str] = {}
    moved: dict[tuple[Any, ...], tuple[int, int]] = {}
    for r in incarnations:
        identity = tuple(r[c] for c in INCARNATION_IDENTITY)
        final_key[identity] = r["key"]
        if r["moved_seq"] is not None:
            moved[identity] = (r["moved_seq"], r["moved_ms"])
    by_entry: dict[tuple[Any, ...], list[Row]] = {}
    for seg in segments:
        by_entry.setdefault(tuple(seg[c] for c in SEGMENT_IDENTITY), []).append(seg)
    rows: list[Row] = []
    for (db, group, created, _), segs in by_entry.items():
        segs.sort(key=lambda s: s["segment_n"])
        last = segs[-1]
        firsts = [s["first_delivery_ms"] for s in segs if s["first_delivery_ms"] is not None]
        lasts = [s["last_delivery_ms"] for s in segs if s["last_delivery_ms"] is not None]
        owners = sorted({name for s in segs for name in s["owner_names"]})
        changes = [
            (s["changed_seq"], s["changed_ms"]) for s in segs if s["changed_seq"] is not None
        ]
        if (db, group, created) in moved:
            changes.append(moved[(db, group, created)])
        changed_seq, changed_ms = max(changes, key=lambda c: c[0]) if changes else (None, None)
        rows.append(
            {
                "db": db,
                "key": final_key.get((db, group, created), last["key"]),
                "group": group,
                "id": last["id"],
                "id_ms": last["id_ms"],
                "id_seq": last["id_seq"],
                "delivery_count": last["delivery_count"],
                "deliveries": sum(s["deliveries"] for s in segs),
                "owners": len(owners),
                "first_delivery_ms": firsts[0] if firsts else None,
                "last_delivery_ms": lasts[-1] if lasts else None,
                "status": last["status"],
                "closed_ms": last["closed_ms"],
                "owner_names": owners,
                "group_created_seq": created,
                "changed_seq": changed_seq,
                "changed_ms": changed_ms,
                **(as_of or {}),
            }
        )
    return rows
