"""A family's model between runs as plain data with a schema version (see docs/state.md).

``dump(replayer)`` gives ``{"state_version": STATE_SCHEMA_VERSION, "state": {section:
[row, ...]}}``: every section a list of rows, every row a dict of the fields
``STATE_SCHEMA`` declares, every value an int, a string, a bool, None or a list of
those. ``load(data)`` rebuilds the ``Replayer``: the same keys, streams, nodes, groups,
consumers, pending entries (each one object shared by its group's and its consumer's
PEL), delivery records, blocked readers, open execution units and counters; it
continues exactly as the model that was dumped. Nothing in the data is ever executed.

The declared schema is the one place the layout lives: the Spark column types are
derived from it (``pelengine.schemas``). Type names:

* ``int`` (32-bit), ``long`` (64-bit), ``bool``, ``string``;
* ``u64``: an unsigned 64-bit value (a part of a stream ID) stored in a signed 64-bit
  field as its two's complement (2^64-1 is stored as -1);
* ``array<T>``: a list of T (elements never null);
* a trailing ``?``: the field may be null.

Row order within a section is meaningful: it is the order of the model's own
containers (keys, groups, consumers, delivery records, blocked readers, ...). Rows refer
to their stream by ``db``/``key`` and to their group by ``group``; ``ready.call`` and
``model.last_call`` are positions in ``calls``.

A model is dumped with its output drained: rows of ``ownership_changes``,
``pel_history``, ``delivery_segments`` and ``group_incarnations`` recorded but not yet
drained are output, not state, and ``dump`` refuses a model that still holds any.

Version rule: ``load`` reads exactly ``STATE_SCHEMA_VERSION``; any other version (or
none) raises ``StateVersionError``. A change of the layout or of what a field means
raises the version.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sortedcontainers import SortedDict, SortedList

from pelengine.model.ids import U64_MAX, StreamID, to_signed
from pelengine.model.replay import BlockedRead, Call, Replayer
from pelengine.model.state import (
    Consumer,
    Counters,
    DeliveryRecord,
    Group,
    Node,
    OtherValue,
    PelVersion,
    PendingEntry,
    Stream,
)

STATE_SCHEMA_VERSION = 3

Fields = tuple[tuple[str, str], ...]

# A delivery record's fields (a group's own records and those of groups that ended).
_RECORD_FIELDS: Fields = (
    ("delivery_count", "long"),
    ("deliveries", "long"),
    ("owners", "array<string>"),
    ("first_delivery_ms", "long?"),
    ("last_delivery_ms", "long?"),
    ("status", "string"),
    ("closed_ms", "long?"),
    ("changed_seq", "long?"),
    ("changed_ms", "long?"),
)
# A command as the model remembers it (the last one applied; the write that signalled
# a key blocked readers wait on).
_CALL_FIELDS: Fields = (
    ("seq", "long"),
    ("now", "long"),
    ("db", "int"),
    ("client", "string?"),
    ("argv", "array<string>"),
    ("command", "string"),
    ("touched_stream", "bool"),
    ("request_seq", "long?"),
)

# (section, ((field, type name), ...)), in the order the sections are written.
STATE_SCHEMA: tuple[tuple[str, Fields], ...] = (
    # exactly one row: the replayer's settings, clock, counters and execution unit
    (
        "model",
        (
            ("profile", "string"),
            ("node_max_entries", "long"),
            ("node_max_bytes", "long"),
            ("record_changes", "bool"),
            ("spill_closed_records", "bool"),
            ("last_seq", "long?"),
            ("last_ts_ms", "long?"),
            ("segment_n", "long"),
            ("unit", "long?"),
            ("script_now", "long?"),
            ("script_unit", "long?"),
            ("last_call", "long?"),
            ("applied", "long"),
            ("ignored", "long"),
            ("failed", "long"),
        ),
    ),
    # the counters by name: kind "error" (per error kind), "command" (per command
    # name), "note" (what the run report mentions)
    ("counts", (("kind", "string"), ("name", "string"), ("count", "long"))),
    # every key of the keyspace, in its order; type "stream" or another type's name
    ("keys", (("db", "int"), ("key", "string"), ("type", "string"))),
    # one row per stream key: its counters and its live entry IDs in ID order
    (
        "streams",
        (
            ("db", "int"),
            ("key", "string"),
            ("last_id_ms", "u64"),
            ("last_id_seq", "u64"),
            ("entries_added", "long"),
            ("max_deleted_id_ms", "u64"),
            ("max_deleted_id_seq", "u64"),
            ("first_id_ms", "u64"),
            ("first_id_seq", "u64"),
            ("entry_ms", "array<u64>"),
            ("entry_seq", "array<u64>"),
        ),
    ),
    # the internal nodes (listpacks) of each stream, head to tail
    (
        "nodes",
        (
            ("db", "int"),
            ("key", "string"),
            ("master_id_ms", "u64"),
            ("master_id_seq", "u64"),
            ("last_id_ms", "u64"),
            ("last_id_seq", "u64"),
            ("total", "long"),
            ("live", "long"),
            ("nbytes", "long"),
            ("fields", "array<string>"),
            # the node's ascending runs of appended IDs (``Node.runs``): empty while
            # listpack order is ID order (version 3)
            ("run_first_ms", "array<u64>"),
            ("run_first_seq", "array<u64>"),
            ("run_last_ms", "array<u64>"),
            ("run_last_seq", "array<u64>"),
        ),
    ),
    (
        "groups",
        (
            ("db", "int"),
            ("key", "string"),
            ("group", "string"),
            ("last_id_ms", "u64"),
            ("last_id_seq", "u64"),
            ("entries_read", "long"),
            ("created_seq", "long"),
            ("moved_seq", "long?"),
            ("moved_ms", "long?"),
        ),
    ),
    (
        "consumers",
        (
            ("db", "int"),
            ("key", "string"),
            ("group", "string"),
            ("consumer", "string"),
            ("seen_time", "long"),
            ("active_time", "long"),
        ),
    ),
    # the group PELs in ID order; ``version``: the entry has an open pel_history
    # version (the ``version_*`` fields, null otherwise)
    (
        "pending",
        (
            ("db", "int"),
            ("key", "string"),
            ("group", "string"),
            ("id_ms", "u64"),
            ("id_seq", "u64"),
            ("consumer", "string?"),
            ("delivery_time", "long"),
            ("delivery_count", "long"),
            ("version", "bool"),
            ("version_consumer", "string?"),
            ("version_delivery_time", "long?"),
            ("version_delivery_count", "long?"),
            ("version_entry_exists", "bool?"),
            ("version_from_seq", "long?"),
            ("version_from_ms", "long?"),
        ),
    ),
    # the delivery records (or open segments) of each group
    (
        "records",
        (
            ("db", "int"),
            ("key", "string"),
            ("group", "string"),
            ("id_ms", "u64"),
            ("id_seq", "u64"),
            *_RECORD_FIELDS,
        ),
    ),
    # the delivery records of groups that ended (a model that does not spill them)
    (
        "closed_records",
        (
            ("db", "int"),
            ("key", "string"),
            ("group", "string"),
            ("group_created_seq", "long"),
            ("id_ms", "u64"),
            ("id_seq", "u64"),
            *_RECORD_FIELDS,
        ),
    ),
    # MULTI blocks still open, per client: the MULTI's seq and the unit's time (null
    # until its first command, and always on 7.0)
    ("units", (("client", "string?"), ("multi_seq", "long"), ("now", "long?"))),
    # readers waiting in XREADGROUP ... BLOCK, in the order they blocked
    (
        "blocked",
        (
            ("seq", "long"),
            ("client", "string?"),
            ("db", "int"),
            ("argv", "array<string>"),
            ("keys", "array<string>"),
            ("group", "string"),
            ("consumer", "string"),
            ("count", "long"),
            ("noack", "bool"),
            ("deadline", "long?"),
        ),
    ),
    ("calls", _CALL_FIELDS),
    # keys signalled for blocked readers, not served yet (only inside an open unit),
    # in signal order, each with the write that signalled it (a position in calls)
    ("ready", (("db", "int"), ("key", "string"), ("call", "long?"))),
)

SECTIONS = tuple(name for name, _ in STATE_SCHEMA)
STREAM_TYPE = "stream"


class StateError(ValueError):
    """A model that cannot be saved, or saved data that is not a model."""


class StateVersionError(StateError):
    """Saved data of a schema version this pelengine does not read."""


def check_version(version: Any) -> None:
    """Raise ``StateVersionError`` unless ``version`` is the one this pelengine reads."""
    if type(version) is int and version == STATE_SCHEMA_VERSION:
        return
    found = "is missing" if version is None else f"{version!r} is not supported"
    raise StateVersionError(
        f"state schema version {found} (this pelengine reads version {STATE_SCHEMA_VERSION})"
    )


# ---- dump --------------------------------------------------------------------------------


def _u(value: int) -> int:
    return to_signed(value)


def _record(rec: DeliveryRecord) -> dict[str, Any]:
    return {
        "delivery_count": rec.delivery_count,
        "deliveries": rec.deliveries,
        "owners": sorted(rec.owners),
        "first_delivery_ms": rec.first_delivery_ms,
        "last_delivery_ms": rec.last_delivery_ms,
        "status": rec.status,
        "closed_ms": rec.closed_ms,
        "changed_seq": rec.changed_seq,
        "changed_ms": rec.changed_ms,
    }


def _call(call: Call) -> dict[str, Any]:
    return {
        "seq": call.seq,
        "now": call.now,
        "db": call.db,
        "client": call.client,
        "argv": list(call.argv),
        "command": call.command,
        "touched_stream": call.touched_stream,
        "request_seq": call.request_seq,
    }


def _undrained(r: Replayer) -> dict[str, int]:
    held = {
        "ownership_changes": len(r._changes),
        "pel_history": len(r._pel_history),
        "delivery_segments": len(r._segments),
        "group_incarnations": len(r._incarnations),
    }
    return {name: n for name, n in held.items() if n}


def _dump_group(out: dict[str, list[dict[str, Any]]], db: int, key: str, group: Group) -> None:
    where = {"db": db, "key": key, "group": group.name}
    out["groups"].append(
        {
            "db": db,
            "key": key,
            "group": group.name,
            "last_id_ms": _u(group.last_id.ms),
            "last_id_seq": _u(group.last_id.seq),
            "entries_read": group.entries_read,
            "created_seq": group.created_seq,
            "moved_seq": group.moved_seq,
            "moved_ms": group.moved_ms,
        }
    )
    held: dict[str, int] = {}
    for consumer in group.consumers.values():
        out["consumers"].append(
            where
            | {
                "consumer": consumer.name,
                "seen_time": consumer.seen_time,
                "active_time": consumer.active_time,
            }
        )
        held[consumer.name] = 0
    for entry_id, nack in group.pel.items():
        owner: Consumer | None = nack.consumer
        name = None if owner is None else owner.name
        if owner is not None and name is not None:
            if group.consumers.get(name) is not owner or owner.pel.get(entry_id) is not nack:
                raise StateError(
                    f"db {db} key {key!r} group {group.name!r}: pending entry {entry_id} is "
                    f"held by consumer {name!r}, which is not the group's or does not "
                    "hold it: the model is inconsistent"
                )
            held[name] += 1
        v = nack.version
        out["pending"].append(
            where
            | {
                "id_ms": _u(entry_id.ms),
                "id_seq": _u(entry_id.seq),
                "consumer": name,
                "delivery_time": nack.delivery_time,
                "delivery_count": nack.delivery_count,
                "version": v is not None,
                "version_consumer": None if v is None else v.consumer,
                "version_delivery_time": None if v is None else v.delivery_time,
                "version_delivery_count": None if v is None else v.delivery_count,
                "version_entry_exists": None if v is None else v.entry_exists,
                "version_from_seq": None if v is None else v.from_seq,
                "version_from_ms": None if v is None else v.from_ms,
            }
        )
    for consumer in group.consumers.values():
        if len(consumer.pel) != held[consumer.name]:
            raise StateError(
                f"db {db} key {key!r} group {group.name!r}: consumer {consumer.name!r} holds "
                "entries its group's PEL does not give it: the model is inconsistent"
            )
    for entry_id, rec in group.records.items():
        out["records"].append(
            where | {"id_ms": _u(entry_id.ms), "id_seq": _u(entry_id.seq)} | _record(rec)
        )


def dump(replayer: Replayer) -> dict[str, Any]:
    """The model as plain data: ``{"state_version": ..., "state": {section: rows}}``.

    Raises ``StateError`` when the replayer still holds output rows not drained."""
    r = replayer
    left = _undrained(r)
    if left:
        listed = ", ".join(f"{n} {name}" for name, n in left.items())
        raise StateError(
            f"the replayer holds output rows not drained yet ({listed}): drain them "
            "(drain_changes, drain_pel_history, drain_delivery_segments, "
            "drain_group_incarnations) before saving its state"
        )
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in SECTIONS}
    calls: dict[int, int] = {}

    def call_ref(call: Call | None) -> int | None:
        if call is None:
            return None
        n = calls.get(id(call))
        if n is None:
            n = calls[id(call)] = len(out["calls"])
            out["calls"].append(_call(call))
        return n

    counters = r.counters
    out["model"].append(
        {
            "profile": r.profile.name,
            "node_max_entries": r.node_max_entries,
            "node_max_bytes": r.node_max_bytes,
            "record_changes": r.record_changes,
            "spill_closed_records": r.spill_closed_records,
            "last_seq": r.last_seq,
            "last_ts_ms": r.last_ts_ms,
            "segment_n": r._segment_n,
            "unit": r._unit,
            "script_now": r._script_now,
            "script_unit": r._script_unit,
            "last_call": call_ref(r._call),
            "applied": counters.applied,
            "ignored": counters.ignored,
            "failed": counters.failed,
        }
    )
    for kind, counts in (
        ("error", counters.errors),
        ("command", counters.commands),
        ("note", r.notes),
    ):
        out["counts"].extend({"kind": kind, "name": n, "count": c} for n, c in counts.items())
    for (db, key), value in r.keys.items():
        if isinstance(value, OtherValue):
            out["keys"].append({"db": db, "key": key, "type": value.type_name})
            continue
        out["keys"].append({"db": db, "key": key, "type": STREAM_TYPE})
        entries = value.entries
        out["streams"].append(
            {
                "db": db,
                "key": key,
                "last_id_ms": _u(value.last_id.ms),
                "last_id_seq": _u(value.last_id.seq),
                "entries_added": value.entries_added,
                "max_deleted_id_ms": _u(value.max_deleted_entry_id.ms),
                "max_deleted_id_seq": _u(value.max_deleted_entry_id.seq),
                "first_id_ms": _u(value.first_id.ms),
                "first_id_seq": _u(value.first_id.seq),
                "entry_ms": [_u(e.ms) for e in entries],
                "entry_seq": [_u(e.seq) for e in entries],
            }
        )
        for node in value.nodes:
            out["nodes"].append(
                {
                    "db": db,
                    "key": key,
                    "master_id_ms": _u(node.master_id.ms),
                    "master_id_seq": _u(node.master_id.seq),
                    "last_id_ms": _u(node.last_id.ms),
                    "last_id_seq": _u(node.last_id.seq),
                    "total": node.total,
                    "live": node.live,
                    "nbytes": node.nbytes,
                    "fields": list(node.fields),
                    "run_first_ms": [_u(first.ms) for first, _ in node.runs],
                    "run_first_seq": [_u(first.seq) for first, _ in node.runs],
                    "run_last_ms": [_u(last.ms) for _, last in node.runs],
                    "run_last_seq": [_u(last.seq) for _, last in node.runs],
                }
            )
        for group in value.groups.values():
            _dump_group(out, db, key, group)
    for db, key, group_name, created, entry_id, rec in r._closed:
        out["closed_records"].append(
            {
                "db": db,
                "key": key,
                "group": group_name,
                "group_created_seq": created,
                "id_ms": _u(entry_id.ms),
                "id_seq": _u(entry_id.seq),
            }
            | _record(rec)
        )
    for client, (multi_seq, now) in r._units.items():
        out["units"].append({"client": client, "multi_seq": multi_seq, "now": now})
    for b in r._blocked:
        out["blocked"].append(
            {
                "seq": b.seq,
                "client": b.client,
                "db": b.db,
                "argv": list(b.argv),
                "keys": list(b.keys),
                "group": b.group,
                "consumer": b.consumer,
                "count": b.count,
                "noack": b.noack,
                "deadline": b.deadline,
            }
        )
    for (db, key), call in r._ready.items():
        out["ready"].append({"db": db, "key": key, "call": call_ref(call)})
    return {"state_version": STATE_SCHEMA_VERSION, "state": out}


# ---- load --------------------------------------------------------------------------------


@contextmanager
def bulk() -> Iterator[None]:
    """No garbage collection while many objects are built at once and all stay alive (a
    model being loaded): each collection would walk them all, for nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _id(ms: int, seq: int) -> StreamID:
    return StreamID(ms & U64_MAX, seq & U64_MAX)


def _ids(ms: list[int], seq: list[int]) -> list[StreamID]:
    if len(ms) != len(seq):
        raise StateError(f"entry ID lists of {len(ms)} and {len(seq)} parts")
    if any(v < 0 for v in ms) or any(v < 0 for v in seq):
        return list(map(_id, ms, seq))
    return list(map(StreamID, ms, seq))


def _load_record(row: dict[str, Any]) -> DeliveryRecord:
    return DeliveryRecord(
        row["delivery_count"],
        row["deliveries"],
        set(row["owners"]),
        row["first_delivery_ms"],
        row["last_delivery_ms"],
        row["status"],
        row["closed_ms"],
        row["changed_seq"],
        row["changed_ms"],
    )


def _load_call(row: dict[str, Any]) -> Call:
    return Call(
        row["seq"],
        row["now"],
        row["db"],
        row["client"],
        list(row["argv"]),
        row["command"],
        touched_stream=row["touched_stream"],
        request_seq=row["request_seq"],
    )


def _build(state: dict[str, list[dict[str, Any]]]) -> Replayer:
    (m,) = state["model"]
    r = Replayer(
        m["profile"],
        record_changes=m["record_changes"],
        node_max_entries=m["node_max_entries"],
        node_max_bytes=m["node_max_bytes"],
        spill_closed_records=m["spill_closed_records"],
    )
    calls = [_load_call(row) for row in state["calls"]]

    def call_at(n: int | None) -> Call | None:
        if n is not None and not 0 <= n < len(calls):
            raise IndexError(f"no call at position {n} (of {len(calls)})")
        return None if n is None else calls[n]

    r.last_seq = m["last_seq"]
    r.last_ts_ms = m["last_ts_ms"]
    r._segment_n = m["segment_n"]
    r._unit = m["unit"]
    r._script_now = m["script_now"]
    r._script_unit = m["script_unit"]
    r._call = call_at(m["last_call"])
    counters = Counters(m["applied"], m["ignored"], m["failed"])
    by_kind = {"error": counters.errors, "command": counters.commands, "note": r.notes}
    for row in state["counts"]:
        by_kind[row["kind"]][row["name"]] = row["count"]
    r.counters = counters

    stream_rows = {(row["db"], row["key"]): row for row in state["streams"]}
    streams: dict[tuple[int, str], Stream] = {}
    for row in state["keys"]:
        where = (row["db"], row["key"])
        if row["type"] != STREAM_TYPE:
            r.keys[where] = OtherValue(row["type"])
            continue
        s = stream_rows.pop(where)
        stream = Stream()
        stream.last_id = _id(s["last_id_ms"], s["last_id_seq"])
        stream.entries_added = s["entries_added"]
        stream.max_deleted_entry_id = _id(s["max_deleted_id_ms"], s["max_deleted_id_seq"])
        stream.first_id = _id(s["first_id_ms"], s["first_id_seq"])
        stream.entries = SortedList(_ids(s["entry_ms"], s["entry_seq"]))
        r.keys[where] = streams[where] = stream
    if stream_rows:
        raise StateError(f"streams without a key row: {sorted(stream_rows)[:5]}")
    for row in state["nodes"]:
        node = Node(_id(row["master_id_ms"], row["master_id_seq"]), tuple(row["fields"]), 0)
        node.last_id = _id(row["last_id_ms"], row["last_id_seq"])
        node.total = row["total"]
        node.live = row["live"]
        node.nbytes = row["nbytes"]
        firsts = _ids(row["run_first_ms"], row["run_first_seq"])
        lasts = _ids(row["run_last_ms"], row["run_last_seq"])
        if len(firsts) != len(lasts):
            raise StateError(f"node runs with {len(firsts)} first and {len(lasts)} last IDs")
        node.runs = list(zip(firsts, lasts, strict=True))
        streams[(row["db"], row["key"])].nodes.append(node)
    groups: dict[tuple[int, str, str], Group] = {}
    for row in state["groups"]:
        group = Group(
            row["group"],
            _id(row["last_id_ms"], row["last_id_seq"]),
            row["entries_read"],
            row["created_seq"],
        )
        group.moved_seq = row["moved_seq"]
        group.moved_ms = row["moved_ms"]
        streams[(row["db"], row["key"])].groups[group.name] = group
        groups[(row["db"], row["key"], group.name)] = group
    for row in state["consumers"]:
        group = groups[(row["db"], row["key"], row["group"])]
        consumer = Consumer(row["consumer"], row["seen_time"])
        consumer.active_time = row["active_time"]
        group.consumers[consumer.name] = consumer
    # PELs are filled in bulk (one sort each, not one insertion per entry)
    pels: dict[int, tuple[SortedDict, list[tuple[StreamID, PendingEntry]]]] = {}

    def pel_of(pel: SortedDict) -> list[tuple[StreamID, PendingEntry]]:
        if id(pel) not in pels:
            pels[id(pel)] = (pel, [])
        return pels[id(pel)][1]

    for row in state["pending"]:
        group = groups[(row["db"], row["key"], row["group"])]
        entry_id = _id(row["id_ms"], row["id_seq"])
        name = row["consumer"]
        owner = None if name is None else group.consumers[name]
        nack = PendingEntry(owner, row["delivery_time"], row["delivery_count"])
        if row["version"]:
            nack.version = PelVersion(
                row["version_consumer"],
                row["version_delivery_time"],
                row["version_delivery_count"],
                row["version_entry_exists"],
                row["version_from_seq"],
                row["version_from_ms"],
            )
        pel_of(group.pel).append((entry_id, nack))
        if owner is not None:
            pel_of(owner.pel).append((entry_id, nack))
    for pel, items in pels.values():
        pel.update(items)
    for row in state["records"]:
        group = groups[(row["db"], row["key"], row["group"])]
        group.records[_id(row["id_ms"], row["id_seq"])] = _load_record(row)
    for row in state["closed_records"]:
        r._closed.append(
            (
                row["db"],
                row["key"],
                row["group"],
                row["group_created_seq"],
                _id(row["id_ms"], row["id_seq"]),
                _load_record(row),
            )
        )
    for row in state["units"]:
        r._units[row["client"]] = (row["multi_seq"], row["now"])
    for row in state["blocked"]:
        r._blocked.append(
            BlockedRead(
                row["seq"],
                row["client"],
                row["db"],
                list(row["argv"]),
                list(row["keys"]),
                row["group"],
                row["consumer"],
                row["count"],
                row["noack"],
                row["deadline"],
            )
        )
    for row in state["ready"]:
        r._ready[(row["db"], row["key"])] = call_at(row["call"])
    return r


def load(data: dict[str, Any]) -> Replayer:
    """The ``Replayer`` ``dump`` saved (``data`` as ``dump`` gave it, or after a round trip
    through JSON or Arrow). Raises ``StateVersionError`` for another schema version and
    ``StateError`` for data that is not a saved model."""
    if not isinstance(data, dict):
        raise StateError(f"a saved model is a dict, not {type(data).__name__}")
    check_version(data.get("state_version"))
    state = data.get("state")
    if not isinstance(state, dict):
        raise StateError("the saved model has no state")
    missing = [name for name in SECTIONS if state.get(name) is None]
    unknown = sorted(set(state) - set(SECTIONS))
    if missing or unknown:
        raise StateError(f"the saved model's sections: missing {missing}, unknown {unknown}")
    if len(state["model"]) != 1:
        raise StateError(f"the model section has {len(state['model'])} rows, not one")
    try:
        with bulk():
            return _build(state)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise StateError(f"a malformed saved model: {type(exc).__name__}: {exc}") from exc


# ---- checking data against the declared schema ---------------------------------------------

_RANGES = {"int": 1 << 31, "long": 1 << 63, "u64": 1 << 63}


def _check_value(type_name: str, value: Any) -> bool:
    nullable = type_name.endswith("?")
    base = type_name.rstrip("?")
    if value is None:
        return nullable
    if base.startswith("array<"):
        element = base[len("array<") : -1]
        return isinstance(value, list) and all(_check_value(element, v) for v in value)
    if base == "bool":
        return type(value) is bool
    if base == "string":
        return type(value) is str
    limit = _RANGES[base]
    return type(value) is int and -limit <= value < limit


def schema_problems(data: dict[str, Any], limit: int = 10) -> list[str]:
    """Where ``data`` departs from the declared schema (at most ``limit`` problems): an
    empty list for data made only of the declared sections, fields and plain types."""
    problems: list[str] = []
    if set(data) != {"state_version", "state"}:
        problems.append(f"top-level keys {sorted(data)}")
    state = data.get("state")
    if not isinstance(state, dict):
        return [*problems, "no state"]
    if list(state) != list(SECTIONS):
        problems.append(f"sections {list(state)}, declared {list(SECTIONS)}")
    for section, fields in STATE_SCHEMA:
        names = [name for name, _ in fields]
        rows = state.get(section)
        if not isinstance(rows, list):
            problems.append(f"{section}: not a list")
            continue
        for i, row in enumerate(rows):
            if not isinstance(row, dict) or list(row) != names:
                problems.append(f"{section}[{i}]: fields {list(row)}, declared {names}")
                continue
            for name, type_name in fields:
                if not _check_value(type_name, row[name]):
                    problems.append(f"{section}[{i}].{name}: {row[name]!r} is no {type_name}")
            if len(problems) >= limit:
                return problems
    return problems
