"""``XPENDING`` answered from the output tables, printed the way ``redis-cli`` prints it.

Redis 7.0's ``xpendingCommand`` (src/t_stream.c) has two forms, both mirrored here:

* ``XPENDING key group`` (:func:`xpending_summary`): the number of pending entries,
  the smallest and greatest pending ID, and per consumer *with pending entries* its
  count (a bulk string), consumers in name order (the rax's byte order); an empty
  PEL answers ``0, nil, nil, nil``.
* ``XPENDING key group [IDLE ms] start end count [consumer]`` (:func:`xpending_range`):
  up to ``count`` entries with ``start <= id <= end`` in ID order, each
  ``[id, consumer, idle, delivery count]``. ``-``/``+`` are the smallest/greatest ID,
  an ID without ``-seq`` means ``ms-0`` as a start and ``ms-<max>`` as an end, ``(``
  makes a bound exclusive. ``IDLE ms`` skips entries whose idle time
  (``now - delivery time``) is below ``ms`` (``IDLE 0`` filters nothing); the idle
  printed is never negative. A consumer with nothing pending (or unknown) gives
  an empty array.

A group the ``groups`` table does not hold answers ``NOGROUP``, as Redis does.
"now" is the snapshot's ``as_of_ms`` unless ``now_ms`` is given: the idle times
are those Redis would have printed at that moment. Keys that are not streams are
not in the tables, so where Redis answers ``WRONGTYPE`` this answers ``NOGROUP``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pelengine import storage
from pelengine.model.text import raw_bytes, sds_repr

UINT64_MAX = 2**64 - 1
LONG_MAX = 2**63 - 1
INVALID_ID = "ERR Invalid stream ID specified as stream command argument"


class ReplyError(str):
    """An error reply (``redis-cli`` prints it as ``(error) <text>``)."""


class PendingArgumentError(ValueError):
    """A bad range argument: the error XPENDING itself would answer."""


# A RESP2 reply: integer, bulk string, nil, array, error.
Reply = int | str | None | list[Any] | ReplyError


@dataclass(frozen=True)
class PendingAnswer:
    """What XPENDING answers from the snapshot, and about which moment."""

    reply: Reply
    command: list[str]
    db: int
    as_of_ms: int | None
    as_of_seq: int | None
    now_ms: int | None = None
    now_given: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def is_error(self) -> bool:
        return isinstance(self.reply, ReplyError)


# ---- IDs -------------------------------------------------------------------------------


def parse_stream_id(text: str, missing_seq: int) -> tuple[int, int]:
    """``ms-seq``, ``ms`` (seq = ``missing_seq``), ``-`` or ``+`` as Redis parses them."""
    if text == "-":
        return 0, 0
    if text == "+":
        return UINT64_MAX, UINT64_MAX
    ms_text, dash, seq_text = text.partition("-")
    ms = _uint64(ms_text)
    seq = _uint64(seq_text) if dash else missing_seq
    if ms is None or seq is None:
        raise PendingArgumentError(INVALID_ID)
    return ms, seq


def _uint64(text: str) -> int | None:
    if not text or not text.isdigit() or not text.isascii():
        return None
    value = int(text)
    return value if value <= UINT64_MAX else None


def range_bounds(start: str, end: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """Inclusive (low, high) IDs of ``start``/``end`` (``(`` = exclusive), as Redis reads them."""
    low = _interval_id(start, 0)
    if len(start) > 1 and start[0] == "(":
        if low == (UINT64_MAX, UINT64_MAX):
            raise PendingArgumentError("ERR invalid start ID for the interval")
        low = (low[0], low[1] + 1) if low[1] < UINT64_MAX else (low[0] + 1, 0)
    high = _interval_id(end, UINT64_MAX)
    if len(end) > 1 and end[0] == "(":
        if high == (0, 0):
            raise PendingArgumentError("ERR invalid end ID for the interval")
        high = (high[0], high[1] - 1) if high[1] > 0 else (high[0] - 1, UINT64_MAX)
    return low, high


def _interval_id(text: str, missing_seq: int) -> tuple[int, int]:
    if len(text) > 1 and text[0] == "(":
        inner = text[1:]
        if inner in ("-", "+"):  # the exclusive form takes a strict ID only
            raise PendingArgumentError(INVALID_ID)
        return parse_stream_id(inner, missing_seq)
    return parse_stream_id(text, missing_seq)


def _id_at_least(low: tuple[int, int]) -> Column:
    ms, seq = low
    if ms > LONG_MAX:
        return F.lit(False)
    same_ms = F.lit(False) if seq > LONG_MAX else F.col("id_seq") >= F.lit(seq)
    return (F.col("id_ms") > F.lit(ms)) | ((F.col("id_ms") == F.lit(ms)) & same_ms)


def _id_at_most(high: tuple[int, int]) -> Column:
    ms, seq = high
    if ms > LONG_MAX:
        return F.lit(True)
    same_ms = F.lit(True) if seq > LONG_MAX else F.col("id_seq") <= F.lit(seq)
    return (F.col("id_ms") < F.lit(ms)) | ((F.col("id_ms") == F.lit(ms)) & same_ms)


# ---- reading the snapshot -------------------------------------------------------------------


@dataclass(frozen=True)
class SnapshotTables:
    """The two tables XPENDING reads: ``pel`` and ``groups`` (of one output root)."""

    pel: DataFrame
    groups: DataFrame


def read_snapshot(spark: SparkSession, out_path: str | storage.Output) -> SnapshotTables:
    """``pel`` and ``groups`` of the output root (FileNotFoundError naming a missing one)."""
    run = storage.run_versions(out_path, spark)  # both tables as one run left them
    return SnapshotTables(
        storage.read_output_table(spark, out_path, "pel", run),
        storage.read_output_table(spark, out_path, "groups", run),
    )


def _tables(spark: SparkSession, source: str | SnapshotTables) -> SnapshotTables:
    return source if isinstance(source, SnapshotTables) else read_snapshot(spark, source)


def _group(
    tables: SnapshotTables, db: int, key: str, group: str
) -> tuple[bool, int | None, int | None]:
    """(exists, as_of_ms, as_of_seq) of the group in the ``groups`` table."""
    rows = (
        tables.groups.filter(
            (F.col("db") == db) & (F.col("key") == key) & (F.col("group") == group)
        )
        .select("as_of_ms", "as_of_seq")
        .limit(1)
        .collect()
    )
    if rows:
        return True, rows[0]["as_of_ms"], rows[0]["as_of_seq"]
    moment = tables.groups.agg(F.max("as_of_ms"), F.max("as_of_seq")).first()
    return False, moment[0] if moment else None, moment[1] if moment else None


def _group_pel(tables: SnapshotTables, db: int, key: str, group: str) -> DataFrame:
    pel = tables.pel
    return pel.filter((F.col("db") == db) & (F.col("key") == key) & (F.col("group") == group))


def _nogroup(key: str, group: str) -> ReplyError:
    return ReplyError(f"NOGROUP No such key '{key}' or consumer group '{group}'")


def xpending_summary(
    spark: SparkSession, source: str | SnapshotTables, key: str, group: str, *, db: int = 0
) -> PendingAnswer:
    """``XPENDING key group`` from the tables of an output root (its path, or the tables
    :func:`read_snapshot` read, to ask many questions of one snapshot)."""
    command = ["XPENDING", key, group]
    tables = _tables(spark, source)
    exists, as_of_ms, as_of_seq = _group(tables, db, key, group)
    if not exists:
        return PendingAnswer(_nogroup(key, group), command, db, as_of_ms, as_of_seq)
    first = F.struct("id_ms", "id_seq", "id")
    per_consumer = (
        _group_pel(tables, db, key, group)
        .groupBy("consumer")
        .agg(F.count(F.lit(1)).alias("n"), F.min(first).alias("lo"), F.max(first).alias("hi"))
        .collect()
    )
    if not per_consumer:
        return PendingAnswer([0, None, None, None], command, db, as_of_ms, as_of_seq)
    total = sum(int(r["n"]) for r in per_consumer)
    low = min((r["lo"] for r in per_consumer), key=lambda s: (s["id_ms"], s["id_seq"]))
    high = max((r["hi"] for r in per_consumer), key=lambda s: (s["id_ms"], s["id_seq"]))
    consumers = sorted(
        ((r["consumer"], int(r["n"])) for r in per_consumer),
        key=lambda c: raw_bytes(c[0]),
    )
    reply: list[Any] = [total, low["id"], high["id"], [[name, str(n)] for name, n in consumers]]
    return PendingAnswer(reply, command, db, as_of_ms, as_of_seq)


def xpending_range(
    spark: SparkSession,
    source: str | SnapshotTables,
    key: str,
    group: str,
    start: str,
    end: str,
    count: int,
    *,
    consumer: str | None = None,
    min_idle_ms: int = 0,
    db: int = 0,
    now_ms: int | None = None,
) -> PendingAnswer:
    """``XPENDING key group [IDLE min_idle_ms] start end count [consumer]`` from the tables
    (``source``: an output root or :func:`read_snapshot`'s tables).

    Idle times are ``now_ms - delivery_time_ms`` (``now_ms`` defaults to the snapshot's
    ``as_of_ms``). Raises :class:`PendingArgumentError` for a bad ID, as Redis would."""
    command = ["XPENDING", key, group]
    if min_idle_ms:
        command += ["IDLE", str(min_idle_ms)]
    command += [start, end, str(count)]
    if consumer is not None:
        command.append(consumer)
    low, high = range_bounds(start, end)
    tables = _tables(spark, source)
    exists, as_of_ms, as_of_seq = _group(tables, db, key, group)
    now = now_ms if now_ms is not None else as_of_ms
    answer = {
        "command": command,
        "db": db,
        "as_of_ms": as_of_ms,
        "as_of_seq": as_of_seq,
        "now_ms": now,
        "now_given": now_ms is not None,
    }
    if not exists:
        return PendingAnswer(_nogroup(key, group), **answer)  # type: ignore[arg-type]
    if count <= 0:
        return PendingAnswer([], **answer)  # type: ignore[arg-type]
    pel = _group_pel(tables, db, key, group).filter(_id_at_least(low) & _id_at_most(high))
    if consumer is not None:
        pel = pel.filter(F.col("consumer") == consumer)
    idle = F.lit(now).cast("long") - F.col("delivery_time_ms")
    if min_idle_ms:
        pel = pel.filter(idle >= F.lit(min_idle_ms))
    rows = (
        pel.select("id", "id_ms", "id_seq", "consumer", idle.alias("idle"), "delivery_count")
        .orderBy("id_ms", "id_seq")
        .limit(count)
        .collect()
    )
    reply: list[Any] = [
        [r["id"], r["consumer"], max(0, int(r["idle"])), int(r["delivery_count"])] for r in rows
    ]
    return PendingAnswer(reply, **answer)  # type: ignore[arg-type]


# ---- printing ---------------------------------------------------------------------------------


def format_reply(reply: Reply) -> str:
    """The reply as ``redis-cli`` prints it on a terminal (``cliFormatReplyTTY``)."""
    return _format(reply, "").rstrip("\n")


def _format(reply: Reply, prefix: str) -> str:
    if isinstance(reply, ReplyError):
        return f"(error) {reply}\n"
    if reply is None:
        return "(nil)\n"
    if isinstance(reply, bool):
        raise TypeError("not a RESP2 reply: bool")
    if isinstance(reply, int):
        return f"(integer) {reply}\n"
    if isinstance(reply, str):
        return sds_repr(raw_bytes(reply)) + "\n"
    if not reply:
        return "(empty array)\n"
    width = len(str(len(reply)))
    inner = prefix + " " * (width + 2)
    parts = []
    for i, element in enumerate(reply):
        parts.append(f"{'' if i == 0 else prefix}{i + 1:>{width}}) ")
        parts.append(_format(element, inner))
    return "".join(parts)


def describe(answer: PendingAnswer, out_path: str | storage.Output, *, header: bool = True) -> str:
    """The answer as ``redis-cli`` prints it, after a ``#`` header naming the snapshot."""
    body = format_reply(answer.reply)
    if not header:
        return body
    moment = f"seq {answer.as_of_seq} ({answer.as_of_ms} ms)"
    lines = [f"# {' '.join(answer.command)}  (db {answer.db} of {out_path}, as of {moment})"]
    if answer.now_ms is not None and not answer.is_error and answer.command[3:]:
        if answer.now_given:
            lines.append(f"# idle = --now-ms {answer.now_ms} - delivery time")
        else:
            lines.append(f"# idle = the snapshot's as_of_ms {answer.now_ms} - delivery time")
    return "\n".join([*lines, body])
