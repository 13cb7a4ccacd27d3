"""Write a MONITOR capture (:mod:`pelengine.ingest.monitor`) as rows of the events Delta table.

The rows are packed into Arrow batches the same way as every run that writes events
(:func:`pelengine.runs.events.rows_to_batches`) and handed to Spark as one
Arrow table. Appending to an existing table continues ``seq`` after its largest
``seq``, so several captures taken one after the other form one command order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pelengine.ingest.monitor import ParseStats, iter_rows, open_capture
from pelengine.ingest.pin import PinStats
from pelengine.progress import quiet
from pelengine.runs.events import CHUNK_ROWS, EVENTS_ARROW_SCHEMA, next_seq, rows_to_batches

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class IngestResult:
    """What one ingest wrote: rows, their seq range, and the parse statistics."""

    rows: int
    first_seq: int | None
    last_seq: int | None
    appended: bool
    stats: ParseStats
    pins: PinStats | None = None  # with ids_from_aof


def capture_arrow_table(
    capture_path: str,
    start_seq: int,
    stats: ParseStats,
    chunk_rows: int = CHUNK_ROWS,
    *,
    ids_from_aof: str | None = None,
    profile: str = "7.0",
    before: Iterable[dict[str, Any]] = (),
) -> tuple[pa.Table, PinStats | None]:
    """The capture's commands as one Arrow table with the events schema.

    With ``ids_from_aof`` (the same server's appendonlydir or AOF file) the ``*`` of
    every ``XADD`` is replaced by the ID the server generated
    (:func:`pelengine.ingest.pin.pin_star_ids`, which replays the capture with
    ``profile``: the server's version or a profile name, from the rows ``before``
    the capture: what the events table already holds).
    """
    pins = None
    with open_capture(capture_path) as fh:
        if ids_from_aof is None:
            batches = list(rows_to_batches(iter_rows(fh, start_seq, stats), chunk_rows))
        else:
            from pelengine.ingest.aof import read_aof
            from pelengine.ingest.pin import pin_star_ids

            rows = list(iter_rows(fh, start_seq, stats))
            pins = pin_star_ids(rows, read_aof(ids_from_aof).rows, profile=profile, start=before)
            batches = list(rows_to_batches(iter(rows), chunk_rows))
    return pa.Table.from_batches(batches, schema=EVENTS_ARROW_SCHEMA), pins


def _rows_in_order(spark: SparkSession | None, events_path: str) -> Iterator[dict[str, Any]]:
    """The events table's rows in ``seq`` order (the columns a replay reads)."""
    if spark is None:
        import pyarrow.compute as pc

        from pelengine.storage import sessionless

        table = sessionless.read_arrow(events_path, ["seq", "ts_ms", "argv", "db", "client"])
        kept = pc.and_(
            pc.and_(pc.is_valid(table.column("seq")), pc.is_valid(table.column("ts_ms"))),
            pc.is_valid(table.column("argv")),
        )
        table = table.filter(kept).sort_by("seq")
        yield from table.select(["seq", "ts_ms", "argv", "db", "client"]).to_pylist()
        return
    from pelengine.storage import read_table

    df = read_table(spark, events_path).select("seq", "ts_ms", "argv", "db", "client")
    for row in (
        df.filter("seq IS NOT NULL AND ts_ms IS NOT NULL AND argv IS NOT NULL")
        .orderBy("seq")
        .toLocalIterator()
    ):
        yield row.asDict()


def ingest_monitor(
    spark: SparkSession | None,
    capture_path: str,
    events_path: str,
    *,
    overwrite: bool = False,
    ids_from_aof: str | None = None,
    profile: str = "7.0",
    progress: Callable[[str], None] = quiet,
) -> IngestResult:
    """Parse ``capture_path`` and write its commands to the events table at ``events_path``.

    Without ``overwrite`` an existing table is appended to (``seq`` continues after
    its maximum); a missing table is created. ``ids_from_aof``: see
    :func:`capture_arrow_table`. ``spark`` None: without a Spark session, on the embedded
    store (:mod:`pelengine.storage.sessionless`).
    """
    from pelengine.runs.events import write_arrow_with
    from pelengine.schemas import EVENTS_SCHEMA

    start = None if overwrite else next_seq(spark, events_path)
    appended = start is not None
    stats = ParseStats()
    progress(f"parsing {capture_path}")
    before: Iterable[dict[str, Any]] = ()
    if ids_from_aof is not None and start is not None:
        # the pin replays from the state the table already holds (e.g. a snapshot's)
        progress(f"reading {events_path} (the state the capture continues)")
        before = _rows_in_order(spark, events_path)
    table, pins = capture_arrow_table(
        capture_path, start or 1, stats, ids_from_aof=ids_from_aof, profile=profile, before=before
    )
    n = table.num_rows
    first = start or 1
    if pins is not None:
        progress(pins.describe())
    progress(f"{stats.describe()}; writing {n:,} events to {events_path}")
    write_arrow_with(
        spark, table, events_path, EVENTS_SCHEMA, "append" if appended else "overwrite"
    )
    return IngestResult(
        rows=n,
        first_seq=first if n else None,
        last_seq=first + n - 1 if n else None,
        appended=appended,
        stats=stats,
        pins=pins,
    )
