"""Delta tables by path without a Spark session: the embedded store's own reader and
writer (:mod:`pelengine.storage.embedded`, delta-rs) called directly, with Arrow tables in
and out.

The commands that only append rows they parsed (``ingest-aof``, ``ingest-monitor``,
``ingest-rdb``) run this way when the store is the embedded one: no JVM starts, and the
table they write is the one the embedded store writes through Spark (same writer, same
schema, same statistics, same idempotence and refusals).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pelengine.storage.names import Table, TableRef

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

#: the save modes of :func:`write_arrow` (Spark's names)
_MODES = {"overwrite", "append", "errorifexists", "ignore"}


def _uri(path: TableRef) -> str:
    if isinstance(path, Table):
        raise ValueError(f"{path}: a table by name needs a Spark session (delta-spark)")
    from pelengine.storage.embedded import normalize_table_uri

    return normalize_table_uri(path)


def table_exists(path: TableRef) -> bool:
    """Whether a Delta table exists at ``path``."""
    from pelengine.storage.embedded import open_table

    return open_table(_uri(path)) is not None


def read_arrow(path: TableRef, columns: Sequence[str] | None = None) -> pa.Table:
    """The current snapshot of the Delta table at ``path`` (only ``columns``, those of them
    it has, when given) as one Arrow table, read as the embedded store reads it."""
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from pelengine.storage.embedded import (
        DeltaReader,
        DeltaStorageError,
        open_table,
        spark_schema_from_delta,
    )

    uri = _uri(path)
    table = open_table(uri)
    if table is None:
        raise DeltaStorageError(f"no Delta table at {uri}")
    schema = spark_schema_from_delta(table.schema().to_json())
    if columns is not None:
        schema = StructType([f for f in schema.fields if f.name in set(columns)])
    reader = DeltaReader(uri, table.version(), schema, {})
    batches = [batch for part in reader.partitions() for batch in reader.read(part)]
    return pa.Table.from_batches(batches, schema=reader.target)


def write_arrow(
    rows: pa.Table,
    path: TableRef,
    schema: StructType,
    mode: str,
    options: dict[str, str] | None = None,
) -> None:
    """Write ``rows`` (``schema``: the table's Spark schema) as one commit of the Delta
    table at ``path``, with the embedded store's writer: ``mode`` overwrite, append,
    errorifexists (a table there is an error) or ignore (a table there: nothing written).
    ``options``: the writer's (``txnAppId``/``txnVersion``: a version the table recorded
    already for the app is not written again; ``partitionBy``: a JSON list;
    ``overwriteSchema``)."""
    from pelengine.storage.embedded import DeltaWriter

    if mode not in _MODES:
        raise ValueError(f"unknown save mode {mode!r}; expected one of {sorted(_MODES)}")
    uri = _uri(path)
    if mode in ("errorifexists", "ignore"):
        if table_exists(uri):
            if mode == "ignore":
                return
            raise FileExistsError(
                f"Delta table already exists at {uri} (mode 'errorifexists'); "
                "use mode 'overwrite' or 'append'."
            )
        mode = "append"
    writer = DeltaWriter(uri, schema, mode == "overwrite", dict(options or {}))
    if writer.skip:
        return
    message = writer.write(iter(rows.to_batches()))
    writer.commit([message])


def table_version(path: TableRef) -> int | None:
    """The Delta version of the table at ``path`` (None: no table there)."""
    from pelengine.storage.embedded import open_table

    table = open_table(_uri(path))
    return None if table is None else int(table.version())
