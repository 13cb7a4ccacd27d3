"""Append an AOF to an events Delta table (``pelengine ingest-aof``), at most once.

The AOF is read by :mod:`pelengine.ingest.aof` (pure); this module adds the
storage side. What was ingested is recorded in a small sidecar Delta table
(default ``<events>/_aof_ingest``; Delta ignores ``_``-prefixed directories):
one row per run with the per-file byte offsets, the SELECTed db and the clock
at those offsets, and the next ``seq``. A run reads only the bytes after the
recorded offsets, so re-ingesting a grown AOF appends only what is new and
ingesting the same files again appends nothing.

Two commits per run: the events append, then the sidecar row. If a run dies
between them, the next run finds AOF rows in the events table at or after the
recorded ``next_seq``; those are the first commands after the recorded offsets
(the parse is deterministic), so it skips that many commands and appends the
rest: nothing is appended twice. (This assumes nobody else appends
``source = 'aof'`` rows to the same events table.)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pelengine.ingest.aof import AofState, read_aof
from pelengine.progress import quiet
from pelengine.runs.events import EVENTS_ARROW_SCHEMA, rows_to_batches

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STATE_DIR = "_aof_ingest"
STATE_ARROW_SCHEMA = pa.schema(
    [
        pa.field("run", pa.int64()),
        pa.field("source", pa.string()),
        pa.field("state", pa.string()),
        pa.field("first_seq", pa.int64()),
        pa.field("last_seq", pa.int64()),
        pa.field("commands", pa.int64()),
        pa.field("ingested_at_ms", pa.int64()),
        pa.field("notes", pa.string()),
    ]
)


def default_state_path(events_path: str) -> str:
    return events_path.rstrip("/") + "/" + STATE_DIR


def _latest_state(spark: SparkSession | None, state_path: str) -> tuple[int, AofState | None]:
    from pelengine.runs.events import table_exists_with

    if not table_exists_with(spark, state_path):
        return 0, None
    if spark is None:
        from pelengine.storage import sessionless

        runs = sessionless.read_arrow(state_path, ["run", "state"]).to_pylist()
        rows = sorted(runs, key=lambda r: r["run"], reverse=True)[:1]
    else:
        from pyspark.sql import functions as F

        from pelengine.storage import read_table

        rows = read_table(spark, state_path).orderBy(F.col("run").desc()).limit(1).collect()
    if not rows:
        return 0, None
    return int(rows[0]["run"]), AofState.from_json(rows[0]["state"])


def _seqs_so_far(
    spark: SparkSession | None, events_path: str, next_seq: int | None
) -> tuple[int | None, int]:
    """The events table's largest seq, and how many AOF rows a run that died before
    recording its offsets already appended (at or after the recorded ``next_seq``): one
    pass."""
    if spark is None:
        import pyarrow.compute as pc

        from pelengine.storage import sessionless

        events = sessionless.read_arrow(events_path, ["seq", "source"])
        top = pc.max(events.column("seq")).as_py()
        if next_seq is None or "source" not in events.column_names:
            return top, 0
        mine = pc.and_(
            pc.greater_equal(events.column("seq"), next_seq),
            pc.equal(events.column("source"), "aof"),
        )
        return top, int(pc.sum(pc.cast(pc.fill_null(mine, False), "int64")).as_py() or 0)
    from pyspark.sql import functions as F

    from pelengine.storage import read_table

    df = read_table(spark, events_path)
    has_source = "source" in df.columns
    df = df.select("seq", "source" if has_source else F.lit(None).alias("source"))
    mine = (F.col("seq") >= F.lit(next_seq)) & (F.col("source") == "aof")
    found = df.agg(
        F.max("seq").alias("max_seq"),
        F.sum(F.when(mine, 1).otherwise(0)).alias("already"),
    ).collect()[0]
    return found["max_seq"], int(found["already"] or 0) if next_seq is not None else 0


def ingest_aof(
    spark: SparkSession | None,
    source: str,
    events_path: str,
    progress: Callable[[str], None] = quiet,
    *,
    state_path: str | None = None,
    ceiling_ms: int | None = None,
) -> dict[str, Any]:
    """Append what is new in the AOF at ``source`` to the events table; return a report.
    ``spark`` None: without a Spark session, on the embedded store
    (:mod:`pelengine.storage.sessionless`)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from pelengine.runs.events import table_exists_with, write_arrow_with
    from pelengine.schemas import EVENTS_SCHEMA
    from pelengine.storage import EMBEDDED, storage_mode

    t0 = time.perf_counter()
    state_path = state_path or default_state_path(events_path)
    last_run, state = _latest_state(spark, state_path)
    events_exist = table_exists_with(spark, events_path)
    max_seq: int | None = None
    already = 0
    if events_exist:
        max_seq, already = _seqs_so_far(
            spark, events_path, state.next_seq if state is not None else None
        )
    progress(f"reading {source}" + (f" from run {last_run}'s offsets" if state else ""))
    now_ms = int(time.time() * 1000) if ceiling_ms is None else ceiling_ms
    read = read_aof(source, state, ceiling_ms=now_ms)
    t_read = time.perf_counter() - t0
    for note in read.notes:
        progress(note)
    rows = read.rows[already:]
    start = max(read.rows[0]["seq"] if read.rows else read.state.next_seq, (max_seq or 0) + 1)
    for i, row in enumerate(rows):
        row["seq"] = start + i
    read.state.next_seq = max(read.state.next_seq, start + len(rows))
    if rows:
        progress(f"appending {len(rows):,} events to {events_path}")
        table = pa.Table.from_batches(list(rows_to_batches(rows)), schema=EVENTS_ARROW_SCHEMA)
        mode = "append" if events_exist else "errorifexists"
        write_arrow_with(spark, table, events_path, EVENTS_SCHEMA, mode)
    changed = state is None or read.state.to_json() != state.to_json()
    run = last_run + 1 if changed else last_run
    if changed:
        record = {
            "run": run,
            "source": source,
            "state": read.state.to_json(),
            "first_seq": rows[0]["seq"] if rows else None,
            "last_seq": rows[-1]["seq"] if rows else None,
            "commands": len(rows),
            "ingested_at_ms": int(time.time() * 1000),
            "notes": "\n".join(read.notes) or None,
        }
        write_arrow_with(
            spark,
            pa.Table.from_pylist([record], schema=STATE_ARROW_SCHEMA),
            state_path,
            from_arrow_schema(STATE_ARROW_SCHEMA),
            "append" if last_run else "errorifexists",
        )
    elapsed = time.perf_counter() - t0
    return {
        "source": source,
        "events": events_path,
        "state": state_path,
        "run": run,
        "appended": len(rows),
        "recovered": already,
        "first_seq": rows[0]["seq"] if rows else None,
        "last_seq": rows[-1]["seq"] if rows else None,
        "files": [asdict(f) for f in read.files],
        "notes": read.notes,
        "storage": storage_mode(spark) if spark is not None else EMBEDDED,
        "spark_session": spark is not None,
        "read_s": round(t_read, 3),
        "duration_s": round(elapsed, 3),
    }


def format_ingest_report(report: dict[str, Any]) -> str:
    """The report as a few lines of text."""
    lines = [
        f"ingested {report['appended']:,} commands from {report['source']} into "
        f"{report['events']}"
        + (
            f" (seq {report['first_seq']}..{report['last_seq']})"
            if report["appended"]
            else " (nothing new)"
        )
        + f", run {report['run']}, {report['duration_s']}s"
    ]
    if report["recovered"]:
        lines.append(
            f"{report['recovered']:,} commands were already appended by an interrupted run"
        )
    for f in report["files"]:
        lines.append(
            f"  {f['name']}: bytes {f['start']}..{f['end']} of {f['size']}, "
            f"{f['commands']:,} commands"
        )
    lines += [f"  note: {n}" for n in report["notes"]]
    return "\n".join(lines)
