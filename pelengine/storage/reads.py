"""Reading tables: a table's snapshot (now or at a version), and the rows of some of its
data files (as Parquet where the table's metadata allows, else through Delta)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pelengine.storage.choice import EMBEDDED, storage_mode
from pelengine.storage.deltalog import DataFile, TableState
from pelengine.storage.names import Table, TableRef, quote_identifier, require_delta_spark
from pelengine.storage.paths import FILES_OPTION, local_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def read_table(spark: SparkSession, path: TableRef, version: int | None = None) -> DataFrame:
    """The Delta table at ``path`` (its snapshot at ``version`` when given: reading it
    again later gives the same rows, whatever was written since). A :class:`Table` is read
    by name (delta-spark only)."""
    if isinstance(path, Table):
        require_delta_spark(spark, str(path))
        if version is None:
            return spark.read.table(path.name)
        return spark.sql(f"SELECT * FROM {path.name} VERSION AS OF {int(version)}")
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", str(version))
    return reader.load(path)


def read_snapshot(spark: SparkSession, path: TableRef, version: int) -> DataFrame:
    """The rows of the Delta table at ``path`` at ``version``, as :func:`read_table` gives
    them. On delta-spark, for a local table whose log still holds every commit up to
    ``version``: its data files, listed from the log here, read as the Parquet files they
    are (:func:`read_table_files`; files with a deletion vector through Delta), so that
    no Spark job replays the log to find them (delta-spark computes a table's snapshot
    with three jobs, on each version it reads). Else :func:`read_table`."""
    local = local_path(path) if isinstance(path, str) else None
    if local is None or storage_mode(spark) == EMBEDDED:
        return read_table(spark, path, version)
    from pelengine.storage.deltalog import LogUnreadableError, read_changes

    try:
        snapshot = read_changes(os.path.abspath(local), -1, version)
    except (LogUnreadableError, OSError, ValueError):
        return read_table(spark, path, version)
    state = snapshot.state_until
    if not snapshot.added or state is None or not _parquet_readable(state):
        return read_table(spark, path, version)
    return read_table_files(spark, path, version, snapshot.added, state)


def read_table_files(
    spark: SparkSession,
    ref: TableRef,
    version: int,
    files: Sequence[DataFile | str],
    state: TableState | None = None,
) -> DataFrame:
    """The rows of ``files`` (as :func:`table_changes` names them: paths as the Delta log
    writes them, or absolute URIs) of the snapshot at ``version``; no rows for no files.

    Embedded store: its reader is given the files. delta-spark: where the table's metadata
    at ``version`` (``state``) allows, the files without a deletion vector are read as the
    Parquet files they are (with their partition values), the others through Delta,
    filtered on ``_metadata.file_path``: exact, but Delta then opens every file of the
    snapshot."""
    wanted = [f if isinstance(f, DataFile) else DataFile(f) for f in files]
    if isinstance(ref, str) and storage_mode(spark) == EMBEDDED:
        from urllib.parse import unquote

        return (
            spark.read.format("delta")
            .option("versionAsOf", str(version))
            .option(FILES_OPTION, json.dumps([unquote(f.path) for f in wanted]))
            .load(ref)
        )
    local = local_path(ref) if isinstance(ref, str) else None
    direct: list[DataFile] = []
    through = wanted
    if local is not None and state is not None and _parquet_readable(state):
        from pelengine.storage.deltalog import local_file

        table_dir = os.path.abspath(local)
        direct = [
            f
            for f in wanted
            if f.deletion_vector is None and local_file(table_dir, f.path) is not None
        ]
        through = [f for f in wanted if f not in direct]
        if len({f.partition_values for f in direct}) > _MAX_PARTITION_READS:
            direct, through = [], wanted
    parts: list[DataFrame] = []
    if direct:
        assert local is not None and state is not None
        parts.append(_read_parquet(spark, os.path.abspath(local), state, direct))
    if through or not direct:
        table = read_table(spark, ref, version)
        parts.append(table.where(_file_filter(through)) if through else table.limit(0))
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


#: partitions of a night read as Parquet one read each, past which Delta reads them
_MAX_PARTITION_READS = 64


#: reader features whose tables' data files hold exactly their rows (deletion vectors apart,
#: which are read through Delta): no column mapping, no type widening, no unknown feature
_PARQUET_FEATURES = frozenset(
    {"deletionVectors", "timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}
)


#: partition column types whose values (the log's strings) cast back exactly
_PARTITION_TYPES = ("string", "byte", "short", "integer", "long", "boolean", "date")


def _parquet_readable(state: TableState) -> bool:
    """Whether a data file without a deletion vector of a table with this metadata and
    protocol can be read as Parquet and give what Delta gives."""
    schema = state.schema_string
    if schema is None or state.column_mapping or "__CHAR_VARCHAR_TYPE_STRING" in schema:
        return False
    if not state.reader_features <= _PARQUET_FEATURES:
        return False
    if int(state.protocol.get("minReaderVersion") or 1) > 3:
        return False
    try:
        fields = {f["name"]: f["type"] for f in json.loads(schema)["fields"]}
    except (ValueError, KeyError, TypeError):
        return False
    return all(fields.get(c) in _PARTITION_TYPES for c in state.partition_columns)


def _read_parquet(
    spark: SparkSession, table_dir: str, state: TableState, files: list[DataFile]
) -> DataFrame:
    """``files`` (no deletion vectors) read as Parquet: the data columns from the files,
    the partition columns from the log's partition values, in the table's column order."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from pelengine.storage.deltalog import local_file
    from pelengine.storage.embedded import spark_schema_from_delta

    assert state.schema_string is not None
    schema = spark_schema_from_delta(state.schema_string)
    partitions = {c.lower() for c in state.partition_columns}
    data = StructType([f for f in schema.fields if f.name.lower() not in partitions])
    groups: dict[tuple[tuple[str, str | None], ...], list[str]] = {}
    for file in files:
        path = local_file(table_dir, file.path)
        assert path is not None
        groups.setdefault(file.partition_values, []).append(_glob_escaped(path))
    frames = []
    for values, paths in groups.items():
        given = {k.lower(): v for k, v in values}
        columns = []
        for field in schema.fields:
            if field.name.lower() in partitions:
                value = given.get(field.name.lower()) or None  # "" is null too
                columns.append(F.lit(value).cast(field.dataType).alias(field.name))
            else:
                columns.append(F.col(quote_identifier(field.name)))
        frames.append(spark.read.schema(data).parquet(*paths).select(*columns))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def _glob_escaped(path: str) -> str:
    """``path`` for Spark's file reader, which expands glob patterns in the paths it is
    given: its glob characters escaped."""
    return re.sub(r"([\\*?\[\]{}])", r"\\\1", path)


def _file_filter(files: Sequence[DataFile]) -> Any:
    """The rows of ``files`` of a Delta read: ``_metadata.file_path`` (the file's absolute
    URI, escaped as the log's relative path is) is one of the absolute URIs, or ends with
    one of the relative paths (compared on as many ``/``-separated parts as they have)."""
    from pyspark.sql import functions as F

    column = F.col("_metadata.file_path")
    absolute = [f.path for f in files if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", f.path)]
    by_parts: dict[int, list[str]] = {}
    for f in files:
        if f.path not in absolute:
            by_parts.setdefault(f.path.count("/") + 1, []).append(f.path)
    tests = [column.isin(absolute)] if absolute else []
    tests += [F.substring_index(column, "/", -n).isin(paths) for n, paths in by_parts.items()]
    out = tests[0]
    for test in tests[1:]:
        out = out | test
    return out
