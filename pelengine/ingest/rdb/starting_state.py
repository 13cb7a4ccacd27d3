"""An RDB snapshot as rows of the events table: the starting state of a replay.

No server command sets what a snapshot holds (consumers' seen and active times,
delivery times and counts of pending entries, a group's read counter, a stream's
counters and internal nodes), so the rows use ``PELENGINE.LOAD``, a documented
row kind the model applies exactly (``pelengine.model.commands.load``):

* ``PELENGINE.LOAD BEGIN``: the snapshot replaces the whole keyspace;
* per other key: ``KEY key type``;
* per stream: ``STREAM key last_id entries_added max_deleted_id first_id``, one
  ``NODE key master_id nbytes nfields field... (id live)...`` per internal node,
  ``GROUP key group last_id entries_read`` per group, ``CONSUMER key group
  consumer seen_ms active_ms`` per consumer, ``PENDING key group (id consumer
  delivery_ms count)...`` per chunk of the group's pending entries.

Every row's ``db`` is the key's, ``client`` null, ``source`` ``"rdb"`` and ``ts_ms``
the snapshot's time (its ``ctime`` aux field, seconds) unless given. Names that
are not valid UTF-8 are written as the AOF reader writes them (invalid bytes as
``\\xHH``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pelengine.ingest.rdb.results import RdbFile, RdbPendingEntry, RdbStream
from pelengine.model.commands import LOAD_COMMAND
from pelengine.model.ids import ZERO_ID, StreamID
from pelengine.model.text import readable

SOURCE = "rdb"
PENDING_CHUNK = 500


def _text(name: str | bytes) -> str:
    raw = name if isinstance(name, bytes) else name.encode("utf-8", "surrogateescape")
    return readable(raw)


def _id(entry_id: StreamID) -> str:
    return f"{entry_id.ms}-{entry_id.seq}"


def snapshot_time_ms(rdb: RdbFile) -> int:
    """When the snapshot was taken (ms), from its ``ctime`` aux field; 0 if it has none."""
    ctime = rdb.aux_text("ctime")
    try:
        return int(ctime) * 1000 if ctime is not None else 0
    except ValueError:
        return 0


def _stream_args(stream: RdbStream) -> list[str]:
    """STREAM's counters; those the format lacks (type 15) as the server derives them."""
    live = [e.id for node in stream.nodes for e in node.entries if not e.deleted]
    first: StreamID = (
        stream.first_id if stream.first_id is not None else (live[0] if live else ZERO_ID)
    )
    max_deleted = stream.max_deleted_entry_id or ZERO_ID
    added = stream.entries_added if stream.entries_added is not None else stream.length
    return [_id(stream.last_id), str(added), _id(max_deleted), _id(first)]


def _pending_args(p: RdbPendingEntry) -> tuple[str, str, str, str]:
    return _id(p.id), _text(p.consumer), str(p.delivery_time_ms), str(p.delivery_count)


def _load(kind: str, key: str, *args: str) -> list[str]:
    """The argv of a ``PELENGINE.LOAD`` row of ``key``."""
    return [LOAD_COMMAND, kind, key, *args]


def _stream_rows(stream: RdbStream) -> Iterator[list[str]]:
    key = _text(stream.key)
    yield _load("STREAM", key, *_stream_args(stream))
    for node in stream.nodes:
        fields = [_text(f) for f in node.master_fields]
        entries = [x for e in node.entries for x in (_id(e.id), "0" if e.deleted else "1")]
        sizes = (str(node.lp_bytes), str(len(fields)))
        yield _load("NODE", key, _id(node.master_id), *sizes, *fields, *entries)
    for group in stream.groups:
        name = _text(group.name)
        entries_read = -1 if group.entries_read is None else group.entries_read
        yield _load("GROUP", key, name, _id(group.last_delivered_id), str(entries_read))
        for consumer in group.consumers:
            active = -1 if consumer.active_time_ms is None else consumer.active_time_ms
            seen = str(consumer.seen_time_ms)
            yield _load("CONSUMER", key, name, _text(consumer.name), seen, str(active))
        for start in range(0, len(group.pel), PENDING_CHUNK):
            chunk = group.pel[start : start + PENDING_CHUNK]
            yield _load("PENDING", key, name, *(x for p in chunk for x in _pending_args(p)))


def load_rows(rdb: RdbFile, first_seq: int = 1, ts_ms: int | None = None) -> list[dict[str, Any]]:
    """The events rows that load ``rdb``'s state, ``seq`` from ``first_seq`` on."""
    when = snapshot_time_ms(rdb) if ts_ms is None else ts_ms
    out: list[dict[str, Any]] = []

    def add(argv: list[str], db: int) -> None:
        seq = first_seq + len(out)
        out.append(
            {"seq": seq, "ts_ms": when, "argv": argv, "db": db, "client": None, "source": SOURCE}
        )

    add([LOAD_COMMAND, "BEGIN"], 0)
    for (db, key), info in sorted(rdb.keys.items()):
        if info.type != "stream":
            add([LOAD_COMMAND, "KEY", _text(key), info.type], db)
    for (db, _key), stream in sorted(rdb.streams.items()):
        for argv in _stream_rows(stream):
            add(argv, db)
    return out
