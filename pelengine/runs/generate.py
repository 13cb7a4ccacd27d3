"""Write a synthetic workload (:mod:`pelengine.synth`) as an events Delta table.

Rows are packed into Arrow record batches by columns, then handed to Spark as one
Arrow table: no per-row Python objects cross into the JVM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pelengine.synth import generate_events

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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


def quiet(_: str) -> None:
    return None


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


def generated_arrow_table(
    n_events: int,
    n_keys: int,
    seed: int,
    *,
    faults: bool = True,
    chunk_rows: int = CHUNK_ROWS,
    progress: Callable[[str], None] = quiet,
) -> pa.Table:
    """The generated workload as one Arrow table with the events schema."""
    batches = []
    done = 0
    for batch in rows_to_batches(
        generate_events(n_events, n_keys, seed, faults=faults), chunk_rows
    ):
        batches.append(batch)
        done += batch.num_rows
        progress(f"generated {done:,}/{n_events:,} events")
    return pa.Table.from_batches(batches, schema=EVENTS_ARROW_SCHEMA)


def generated_events_df(
    spark: SparkSession,
    n_events: int,
    n_keys: int,
    seed: int,
    *,
    faults: bool = True,
    progress: Callable[[str], None] = quiet,
) -> DataFrame:
    """The generated workload as a DataFrame with the events schema (via Arrow)."""
    from pelengine.schemas import EVENTS_SCHEMA

    table = generated_arrow_table(n_events, n_keys, seed, faults=faults, progress=progress)
    return spark.createDataFrame(table, schema=EVENTS_SCHEMA)


def write_generated_events(
    spark: SparkSession,
    out_path: str,
    n_events: int,
    n_keys: int,
    seed: int,
    progress: Callable[[str], None] = quiet,
    *,
    faults: bool = True,
) -> int:
    """Generate a workload and write it as the events Delta table at `out_path` (overwrite).

    Returns the number of rows written.
    """
    from pelengine.storage import write_table

    df = generated_events_df(spark, n_events, n_keys, seed, faults=faults, progress=progress)
    progress(f"writing {n_events:,} events to {out_path}")
    write_table(df, out_path, mode="overwrite")
    return n_events
