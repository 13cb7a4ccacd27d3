"""Rows of the events table as the runs that write it hand them to Spark: packed into
Arrow record batches by columns (no per-row Python objects cross into the JVM), and
appended after the table's largest ``seq``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

EVENTS_ARROW_SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64()),
        pa.field("ts_ms", pa.int64()),
        pa.field("argv", pa.list_(pa.string())),
        pa.field("db", pa.int32()),
        pa.field("client", pa.string()),
        pa.field("source", pa.string()),
    ]
)
CHUNK_ROWS = 100_000


def rows_to_batches(
    rows: Iterable[dict[str, Any]], chunk_rows: int = CHUNK_ROWS
) -> Iterable[pa.RecordBatch]:
    """Pack event rows (dicts) into Arrow record batches of at most `chunk_rows` rows."""
    names = EVENTS_ARROW_SCHEMA.names
    cols: dict[str, list[Any]] = {n: [] for n in names}
    appenders = [(n, cols[n].append) for n in names]
    size = 0
    for row in rows:
        for name, append in appenders:
            append(row.get(name))
        size += 1
        if size >= chunk_rows:
            yield pa.RecordBatch.from_pydict(cols, schema=EVENTS_ARROW_SCHEMA)
            for n in names:
                cols[n].clear()
            size = 0
    if size:
        yield pa.RecordBatch.from_pydict(cols, schema=EVENTS_ARROW_SCHEMA)


def next_seq(spark: SparkSession | None, events_path: str) -> int | None:
    """One past the largest ``seq`` of the events table; None when there is no table.
    ``spark`` None: read without a session (:mod:`pelengine.storage.sessionless`)."""
    if spark is None:
        import pyarrow.compute as pc

        from pelengine.storage import sessionless

        if not sessionless.table_exists(events_path):
            return None
        top = pc.max(sessionless.read_arrow(events_path, ["seq"]).column("seq")).as_py()
        return 1 if top is None else int(top) + 1
    from pyspark.sql import functions as F

    from pelengine.storage import read_table, table_exists

    if not table_exists(spark, events_path):
        return None
    top = read_table(spark, events_path).agg(F.max("seq").alias("m")).collect()[0]["m"]
    return 1 if top is None else int(top) + 1


def table_exists_with(spark: SparkSession | None, path: str) -> bool:
    """Whether a Delta table exists at ``path``, through ``spark`` or, None, without a
    session."""
    from pelengine import storage

    if spark is None:
        return storage.sessionless.table_exists(path)
    return storage.table_exists(spark, path)


def write_arrow_with(
    spark: SparkSession | None,
    rows: pa.Table,
    path: str,
    schema: StructType,
    mode: str,
) -> None:
    """Write the Arrow ``rows`` (``schema``: the table's Spark schema) as the Delta table
    at ``path`` in one commit: through ``spark`` (its store), or, None, with the embedded
    store's writer and no session."""
    from pelengine import storage

    if spark is None:
        storage.sessionless.write_arrow(rows, path, schema, mode)
    else:
        storage.write_table(spark.createDataFrame(rows, schema=schema), path, mode=mode)
