"""Write an RDB snapshot's state (:mod:`pelengine.ingest.rdb`) to the events Delta table
as ``PELENGINE.LOAD`` rows (``pelengine ingest-rdb``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pelengine.progress import quiet
from pelengine.runs.events import EVENTS_ARROW_SCHEMA, next_seq, rows_to_batches

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pelengine.ingest.rdb.results import RdbFile


def _report(
    rdb: RdbFile, rows: list[dict[str, Any]], *, source: str, events: str, appended: bool
) -> dict[str, Any]:
    """What ``pelengine ingest-rdb`` reports: the snapshot (its header, its time, what it
    holds) and the load rows it became."""
    from pelengine.ingest.rdb.starting_state import snapshot_time_ms

    streams = list(rdb.streams.values())
    return {
        "source": source,
        "events": events,
        "header": f"{rdb.magic}{rdb.version}",
        "snapshot_time_ms": snapshot_time_ms(rdb),
        "keys": len(rdb.keys),
        "streams": len(streams),
        "groups": sum(len(s.groups) for s in streams),
        "pending": sum(len(g.pel) for s in streams for g in s.groups),
        "rows": len(rows),
        "first_seq": rows[0]["seq"],
        "last_seq": rows[-1]["seq"],
        "appended": appended,
    }


def ingest_rdb(
    spark: SparkSession | None,
    rdb_path: str,
    events_path: str,
    *,
    overwrite: bool = False,
    progress: Callable[[str], None] = quiet,
) -> dict[str, Any]:
    """Write the state an RDB snapshot holds to the events table as ``PELENGINE.LOAD``
    rows (:mod:`pelengine.ingest.rdb.starting_state`): the starting state of a replay, followed
    by whatever is appended after it (a MONITOR capture or an application log recorded
    after the snapshot). Read and checked whole before anything is written: a corrupt
    or truncated file raises :class:`pelengine.ingest.rdb.RdbFormatError`. ``spark`` None:
    without a Spark session, on the embedded store (:mod:`pelengine.storage.sessionless`)."""
    from pelengine.ingest.rdb import read_rdb
    from pelengine.ingest.rdb.starting_state import load_rows
    from pelengine.runs.events import write_arrow_with
    from pelengine.schemas import EVENTS_SCHEMA

    progress(f"reading {rdb_path}")
    rdb = read_rdb(rdb_path, keep_values=False)
    start = None if overwrite else next_seq(spark, events_path)
    rows = load_rows(rdb, first_seq=start or 1)
    report = _report(rdb, rows, source=rdb_path, events=events_path, appended=start is not None)
    progress(f"writing {len(rows):,} load rows to {events_path}")
    table = pa.Table.from_batches(list(rows_to_batches(iter(rows))), schema=EVENTS_ARROW_SCHEMA)
    mode = "append" if start is not None else "overwrite"
    write_arrow_with(spark, table, events_path, EVENTS_SCHEMA, mode)
    return report
