"""Write a synthetic workload (:mod:`pelengine.synth`) as an events Delta table.

Rows are packed into Arrow record batches by columns
(:func:`pelengine.runs.events.rows_to_batches`), then handed to Spark as one Arrow
table: no per-row Python objects cross into the JVM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from pelengine.progress import quiet
from pelengine.runs.events import CHUNK_ROWS, EVENTS_ARROW_SCHEMA, rows_to_batches
from pelengine.synth import generate_events

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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
