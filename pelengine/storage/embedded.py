"""Embedded ``delta`` Python data source backed by delta-rs (the ``deltalake`` package).

Used only when the JVM has no delta-spark (see :mod:`pelengine.storage`). It serves
``spark.read.format("delta").load(path)`` and ``df.write.format("delta").mode(m).save(path)``:

* reads: one input partition per data file, Arrow record batches; tables that need the
  ``deletionVectors`` or ``columnMapping`` reader features are read through delta-rs' own
  scan (one input partition) so deleted rows and physical column names are handled by it;
* writes: each task writes its own parquet file into the table directory (one per
  partition value of a partitioned table, ``partitionBy``) and reports an Add action; the
  driver makes ONE Delta commit (``append`` / ``overwrite``), honouring
  ``txnAppId``/``txnVersion`` (Delta's idempotent-write rule) and ``overwriteSchema``.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from pelengine.storage.paths import FILES_OPTION, local_path

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

SOURCE_NAME = "delta"
#: Reader features the per-file fast path cannot honour; such tables go through delta-rs' scan.
SCAN_ONLY_FEATURES = frozenset({"deletionVectors", "columnMapping"})
#: Reader features delta-rs' scan is trusted with (besides the ones pyarrow datasets support).
SCAN_FEATURES = SCAN_ONLY_FEATURES | {"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}
#: Integer/float widenings accepted on append (the data is cast to the table's type).
_WIDENINGS = {
    ("byte", "short"),
    ("byte", "integer"),
    ("byte", "long"),
    ("short", "integer"),
    ("short", "long"),
    ("integer", "long"),
    ("float", "double"),
}
_TRUE = {"true", "1", "yes"}


class DeltaStorageError(RuntimeError):
    """A Delta read or write the embedded data source refuses or cannot perform."""


# --------------------------------------------------------------------------- helpers


def normalize_table_uri(path: str) -> str:
    """Absolute local path for local/``file:`` paths, other URIs unchanged."""
    local = local_path(path)
    if local is None:
        return path.rstrip("/")
    return os.path.abspath(local)


def open_table(
    path: str, version: int | None = None, storage_options: dict[str, str] | None = None
) -> DeltaTable | None:
    """The delta-rs table at ``path`` (at ``version`` if given), or None when there is none."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path, version=version, storage_options=storage_options)
    except TableNotFoundError:
        return None


def _strip_delta_metadata(node: Any) -> Any:
    """Copy of a Delta/Spark schema JSON node without ``delta.*`` field metadata."""
    if isinstance(node, dict):
        out = {k: _strip_delta_metadata(v) for k, v in node.items()}
        if isinstance(out.get("metadata"), dict):
            out["metadata"] = {
                k: v for k, v in out["metadata"].items() if not k.startswith("delta.")
            }
        return out
    if isinstance(node, list):
        return [_strip_delta_metadata(v) for v in node]
    return node


def spark_schema_from_delta(schema_json: str) -> StructType:
    """Spark schema of a Delta schema (Delta's schemaString is Spark's JSON format)."""
    return StructType.fromJson(_strip_delta_metadata(json.loads(schema_json)))


def _as_nullable(node: Any) -> Any:
    """Schema JSON node with every field/element/value nullable (what Delta does on create)."""
    if isinstance(node, dict):
        out = {k: _as_nullable(v) for k, v in node.items()}
        for key in ("nullable", "containsNull", "valueContainsNull"):
            if key in out:
                out[key] = True
        return out
    if isinstance(node, list):
        return [_as_nullable(v) for v in node]
    return node


def delta_schema_json_from_spark(schema: StructType) -> str:
    """Delta schemaString for a Spark schema: same JSON, all nullable, no metadata."""
    node = _as_nullable(_strip_delta_metadata(schema.jsonValue()))
    return json.dumps(node)


def void_columns(node: Any, prefix: str = "") -> list[str]:
    """Names of (nested) fields whose type is or contains ``void`` (Spark's NullType)."""
    if node == "void":
        return [prefix or "<value>"]
    if not isinstance(node, dict):
        return []
    kind = node.get("type")
    if kind == "struct":
        found: list[str] = []
        for f in node["fields"]:
            found += void_columns(f["type"], f"{prefix}.{f['name']}" if prefix else f["name"])
        return found
    if kind == "array":
        return void_columns(node["elementType"], f"{prefix}[]")
    if kind == "map":
        key = void_columns(node["keyType"], f"{prefix}{{key}}")
        return key + void_columns(node["valueType"], f"{prefix}{{value}}")
    return []


def _type_shape(node: Any) -> Any:
    """Schema JSON node reduced to names and types (nullability and metadata ignored)."""
    if isinstance(node, str):
        return node
    kind = node.get("type")
    if kind == "struct":
        return ("struct", tuple((f["name"], _type_shape(f["type"])) for f in node["fields"]))
    if kind == "array":
        return ("array", _type_shape(node["elementType"]))
    if kind == "map":
        return ("map", _type_shape(node["keyType"]), _type_shape(node["valueType"]))
    return json.dumps(node, sort_keys=True)


def schema_differences(table_json: str, data_json: str, *, allow_widening: bool) -> list[str]:
    """Human-readable differences between a table schema and the data schema (empty: same)."""
    table = {f["name"]: f["type"] for f in json.loads(table_json)["fields"]}
    data = {f["name"]: f["type"] for f in json.loads(data_json)["fields"]}
    diffs = [f"missing column {name!r}" for name in table if name not in data]
    diffs += [f"new column {name!r}" for name in data if name not in table]
    for name, table_type in table.items():
        if name not in data:
            continue
        have, want = _type_shape(data[name]), _type_shape(table_type)
        if have == want:
            continue
        if allow_widening and (have, want) in _WIDENINGS:
            continue
        diffs.append(
            f"column {name!r} is {_render(data[name])} but the table has {_render(table_type)}"
        )
    return diffs


def _render(type_node: Any) -> str:
    return type_node if isinstance(type_node, str) else json.dumps(type_node)


def conform_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Batch with exactly ``target``'s columns, in order and types (cast where needed)."""
    import pyarrow as pa

    columns = [batch.column(name) for name in target.names]
    picked = pa.RecordBatch.from_arrays(columns, names=target.names)
    if picked.schema.equals(target):
        return picked
    return picked.cast(target)


def _storage_options(options: Any) -> dict[str, str] | None:
    """``storage.<key>`` options passed to delta-rs' object store (credentials, endpoints)."""
    found = {k[len("storage.") :]: str(v) for k, v in options.items() if k.startswith("storage.")}
    return found or None


def _filesystem(table_uri: str, storage_options: dict[str, str] | None) -> Any:
    """A pyarrow filesystem rooted at the table directory (delta-rs' object store)."""
    import pyarrow.fs as pa_fs
    from deltalake.fs import DeltaStorageHandler

    if "://" not in table_uri:
        os.makedirs(table_uri, exist_ok=True)  # delta-rs' local store needs the directory
    return pa_fs.PyFileSystem(DeltaStorageHandler(table_uri, storage_options))


def written_with_deletion_vectors(table: DeltaTable) -> bool:
    """Whether the table's protocol has deletion vectors (which delta-rs cannot write)."""
    protocol = table.protocol()
    return "deletionVectors" in set(protocol.writer_features or []) | set(
        protocol.reader_features or []
    )


def deletion_vectors_refusal(table_uri: str) -> str:
    """Why the embedded store does not write the table at ``table_uri``: one sentence."""
    return (
        f"Delta table at {table_uri} has deletion vectors (delta-spark created it with "
        "reconstruct.deletion_vectors on, or Databricks did), which the embedded store "
        "(delta-rs) cannot write: continue this output with delta-spark, or write a new one"
    )


def table_reader_features(table: DeltaTable) -> set[str]:
    """Reader features the table's protocol declares (columnMapping also via its config)."""
    protocol = table.protocol()
    features = set(protocol.reader_features or [])
    mapping_mode = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if mapping_mode not in ("none", None):
        features.add("columnMapping")
    return features


# --------------------------------------------------------------------------- reading


class DeltaFilePartition(InputPartition):
    """One data file of the snapshot (path relative to the table, pyarrow partition expr)."""

    def __init__(self, file: str, expression: Any) -> None:
        super().__init__(file)
        self.file = file
        self.expression = expression


class DeltaScanPartition(InputPartition):
    """The whole snapshot, read through delta-rs' own scan."""

    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


class DeltaReader(DataSourceReader):
    """Reads one pinned snapshot of a Delta table."""

    def __init__(
        self, table_uri: str, version: int | None, schema: StructType, options: Any
    ) -> None:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        self.table_uri = table_uri
        self.storage_options = _storage_options(options)
        table = _require_table(table_uri, version, self.storage_options)
        self.version = table.version()
        self.target = to_arrow_schema(schema, timezone="UTC")
        self.file_schema = pa.schema(table.schema().to_arrow())
        features = table_reader_features(table)
        unsupported = features - SCAN_FEATURES - {"variantType", "variantType-preview"}
        if unsupported:
            raise DeltaStorageError(
                f"Delta table at {table_uri} requires reader feature(s) {sorted(unsupported)}, "
                "which the embedded delta-rs reader does not support; run with delta-spark."
            )
        self.use_scan = bool(features & SCAN_ONLY_FEATURES)
        self.files: list[tuple[str, Any]] = []
        only = _only_files(options)
        if only is not None and self.use_scan:
            raise DeltaStorageError(
                f"Delta table at {table_uri} uses {sorted(features & SCAN_ONLY_FEATURES)}: "
                "the embedded reader cannot read single files of it"
            )
        if not self.use_scan:
            self.files = list(table._table.dataset_partitions(self.file_schema, None))
        if only is not None:
            held = {file for file, _ in self.files}
            missing = sorted(only - held)
            if missing:
                raise DeltaStorageError(
                    f"Delta table at {table_uri} version {self.version} has no data file "
                    f"{missing[0]} ({len(missing)} asked for are not in it)"
                )
            self.files = [(file, expr) for file, expr in self.files if file in only]

    def partitions(self) -> Sequence[InputPartition]:
        if self.use_scan:
            return [DeltaScanPartition(self.version)]
        if not self.files:
            return [DeltaScanPartition(self.version)]  # empty snapshot: one empty partition
        return [DeltaFilePartition(file, expr) for file, expr in self.files]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, DeltaFilePartition):
            yield from self._read_file(partition)
        elif isinstance(partition, DeltaScanPartition):
            yield from self._read_scan(partition.version)

    def _read_file(self, partition: DeltaFilePartition) -> Iterator[pa.RecordBatch]:
        import pyarrow.dataset as ds

        filesystem = _filesystem(self.table_uri, self.storage_options)
        fmt = ds.ParquetFileFormat(
            read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us"),
            default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=True),
        )
        fragment = fmt.make_fragment(
            partition.file, filesystem=filesystem, partition_expression=partition.expression
        )
        dataset = ds.FileSystemDataset([fragment], self.file_schema, fmt, filesystem)
        for batch in dataset.to_batches(columns=self.target.names, use_threads=False):
            if batch.num_rows:
                yield conform_batch(batch, self.target)

    def _read_scan(self, version: int) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        if not self.use_scan:
            return
        table = _require_table(self.table_uri, version, self.storage_options)
        for batch in table.scan(columns=self.target.names):
            arrow_batch = pa.record_batch(batch)
            if arrow_batch.num_rows:
                yield conform_batch(arrow_batch, self.target)


def _only_files(options: Any) -> set[str] | None:
    """The data files the ``pelengine.files`` option restricts a read to (None: all)."""
    text = options.get(FILES_OPTION) if options is not None else None
    if text is None:
        return None
    files = json.loads(str(text))
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise DeltaStorageError(f"option {FILES_OPTION} must be a JSON list of file paths")
    return set(files)


def snapshot_files(
    table_uri: str, version: int, storage_options: dict[str, str] | None = None
) -> set[str] | None:
    """The data files (paths as the log names them) of the snapshot at ``version``, with
    the deletion vectors of any: None when the table uses them (a row-level delete then
    leaves the file in place) or when there is no table."""
    import pyarrow as pa

    table = open_table(table_uri, version, storage_options)
    if table is None or table.version() != version:
        return None
    if "deletionVectors" in table_reader_features(table):
        return None
    actions = pa.table(table.get_add_actions(flatten=True))
    return {str(p) for p in actions.column("path").to_pylist()}


def _require_table(
    table_uri: str, version: int | None, storage_options: dict[str, str] | None
) -> DeltaTable:
    table = open_table(table_uri, version, storage_options)
    if table is None:
        raise DeltaStorageError(f"No Delta table at {table_uri} (no _delta_log found).")
    return table


# --------------------------------------------------------------------------- writing


@dataclass
class AddedFile:
    """A parquet file a task wrote into the table directory (path relative to the table),
    with its Delta statistics (``stats``: ``numRecords``, and per column the smallest and
    largest value and the null count, so that readers and merges skip files) and, in a
    partitioned table, its partition values (as Delta writes them: strings, or None)."""

    path: str
    size: int
    num_records: int
    modification_time: int
    stats: str = ""
    partition_values: dict[str, str | None] = field(default_factory=dict)

    def stats_json(self) -> str:
        return self.stats or json.dumps({"numRecords": self.num_records})


#: Strings longer than this keep no min/max (Delta truncates them; here they are left out,
#: which only means a reader cannot skip a file by that column).
_STATS_STRING_LIMIT = 64


class ColumnStats:
    """Delta statistics of one file, gathered batch by batch as a task writes it: the
    smallest and largest value of every top-level integer and string column, and the
    null count of every top-level column that is not nested."""

    def __init__(self, schema: pa.Schema) -> None:
        import pyarrow as pa

        self.rows = 0
        self.columns = [
            f.name
            for f in schema
            if pa.types.is_integer(f.type)
            or pa.types.is_string(f.type)
            or pa.types.is_large_string(f.type)
        ]
        self.nulls: dict[str, int] = {f.name: 0 for f in schema if not pa.types.is_nested(f.type)}
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}
        self.dropped: set[str] = set()

    def add(self, batch: pa.RecordBatch) -> None:
        import pyarrow.compute as pc

        self.rows += batch.num_rows
        for name in self.nulls:
            self.nulls[name] += batch.column(name).null_count
        for name in self.columns:
            if name in self.dropped:
                continue
            found = pc.min_max(batch.column(name)).as_py()
            lo, hi = found["min"], found["max"]
            if lo is None:
                continue
            if isinstance(lo, str) and max(len(lo), len(hi)) > _STATS_STRING_LIMIT:
                self.dropped.add(name)
                continue
            self.low[name] = lo if name not in self.low else min(self.low[name], lo)
            self.high[name] = hi if name not in self.high else max(self.high[name], hi)

    def to_json(self) -> str:
        low = {k: v for k, v in self.low.items() if k not in self.dropped}
        high = {k: v for k, v in self.high.items() if k not in self.dropped}
        return json.dumps(
            {"numRecords": self.rows, "minValues": low, "maxValues": high, "nullCount": self.nulls}
        )


@dataclass
class DeltaCommitMessage(WriterCommitMessage):
    """What one write task produced."""

    files: list[AddedFile] = field(default_factory=list)


class DeltaWriter(DataSourceArrowWriter):
    """Per-task parquet files, one Delta commit on the driver."""

    def __init__(self, table_uri: str, schema: StructType, overwrite: bool, options: Any) -> None:
        import pyarrow as pa
        from deltalake import Schema

        self.table_uri = table_uri
        self.overwrite = overwrite
        self.storage_options = _storage_options(options)
        self.overwrite_schema = str(options.get("overwriteSchema", "false")).lower() in _TRUE
        # Spark's option: a data file holds at most this many rows (0: no limit)
        self.max_records_per_file = int(options.get("maxRecordsPerFile", 0) or 0)
        if str(options.get("mergeSchema", "false")).lower() in _TRUE:
            raise DeltaStorageError(
                "mergeSchema is not supported by the embedded delta-rs writer; "
                "use overwriteSchema with mode('overwrite') or run with delta-spark."
            )
        app_id, txn_version = options.get("txnAppId"), options.get("txnVersion")
        if (app_id is None) != (txn_version is None):
            raise DeltaStorageError("txnAppId and txnVersion must be set together.")
        self.txn_app_id: str | None = app_id
        self.txn_version: int | None = int(txn_version) if txn_version is not None else None
        void = void_columns(schema.jsonValue())
        if void:
            raise DeltaStorageError(
                f"Cannot write column(s) {void} of type void (NullType, e.g. F.lit(None)) to "
                f"Delta table at {table_uri}: cast them to a concrete type first."
            )
        self.data_schema_json = delta_schema_json_from_spark(schema)
        # the partition columns asked for (a JSON list); a table that exists keeps its own
        # unless an overwrite replaces its schema
        asked = options.get("partitionBy")
        self.partition_by: list[str] = list(json.loads(asked)) if asked else []
        missing = [c for c in self.partition_by if c not in schema.fieldNames()]
        if missing:
            raise DeltaStorageError(
                f"Cannot partition Delta table at {table_uri} by {missing}: not columns of "
                "the data."
            )

        #: data files of the table the commit removes beside adding its own (append mode
        #: only): each one's path as the log names it, size and partition values
        self.remove_files: list[tuple[str, int, dict[str, str | None]]] = []
        table = open_table(table_uri, storage_options=self.storage_options)
        self.skip = table is not None and self._already_done(table)
        self.table_schema_json = self._check_target(table) if table is not None else None
        commit_schema_json = self.table_schema_json or self.data_schema_json
        self.commit_schema = pa.schema(Schema.from_json(commit_schema_json).to_arrow())
        # a data file holds every column but the partition columns (Delta keeps their
        # values in the log)
        self.file_schema = pa.schema(
            [f for f in self.commit_schema if f.name not in self.partition_by]
        )

    # driver-side checks ---------------------------------------------------------------
    def _already_done(self, table: DeltaTable) -> bool:
        """Delta's idempotent-write rule: skip when txnVersion <= the recorded one."""
        if self.txn_app_id is None or self.txn_version is None:
            return False
        recorded = table.transaction_version(self.txn_app_id)
        return recorded is not None and self.txn_version <= recorded

    def _check_target(self, table: DeltaTable) -> str | None:
        """Refuse targets this writer cannot write; return the schema files must follow."""
        metadata = table.metadata()
        existing = list(metadata.partition_columns)
        if not (self.overwrite and self.overwrite_schema):
            if self.partition_by and self.partition_by != existing:
                raise DeltaStorageError(
                    f"Delta table at {self.table_uri} is partitioned by {existing or 'nothing'}, "
                    f"not {self.partition_by}: set option overwriteSchema=true with "
                    "mode('overwrite') to change its partitioning."
                )
            self.partition_by = existing
        if "columnMapping" in table_reader_features(table):
            raise DeltaStorageError(
                f"Delta table at {self.table_uri} uses column mapping; the embedded delta-rs "
                "writer cannot write it. Run with delta-spark."
            )
        if self.overwrite and written_with_deletion_vectors(table):
            # its remove actions would not name the files' deletion vectors (an append
            # adds files beside them and stays as it was)
            raise DeltaStorageError(deletion_vectors_refusal(self.table_uri))
        table_json = table.schema().to_json()
        if self.overwrite and self.overwrite_schema:
            return None  # the data's schema replaces the table's
        diffs = schema_differences(table_json, self.data_schema_json, allow_widening=True)
        if diffs:
            what = "overwrite" if self.overwrite else "append"
            hint = (
                "Set option overwriteSchema=true to replace the table schema"
                if self.overwrite
                else "Write with mode('overwrite') and overwriteSchema=true to replace it"
            )
            raise DeltaStorageError(
                f"Schema mismatch on {what} to Delta table at {self.table_uri}: "
                f"{'; '.join(diffs)}. {hint}."
            )
        return json.dumps(_strip_delta_metadata(json.loads(table_json)))

    # tasks -------------------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> DeltaCommitMessage:
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        if self.skip:
            return DeltaCommitMessage()
        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        filesystem = _filesystem(self.table_uri, self.storage_options)
        # one open file per partition value (one file in an unpartitioned table)
        open_files: dict[tuple[str | None, ...], _OpenFile] = {}
        done: list[_OpenFile] = []
        limit = self.max_records_per_file

        def start(values: tuple[str | None, ...]) -> _OpenFile:
            directory = _partition_directory(self.partition_by, values)
            name = directory + f"part-{task:05d}-{uuid.uuid4()}-c000.snappy.parquet"
            if directory:
                filesystem.create_dir(directory.rstrip("/"), recursive=True)
            found = open_files[values] = _OpenFile(
                name,
                pq.ParquetWriter(
                    name, self.file_schema, filesystem=filesystem, compression="snappy"
                ),
                ColumnStats(self.file_schema),
                values=values,
            )
            return found

        def finish(found: _OpenFile) -> None:
            found.flush()
            found.writer.close()
            found.closed = True
            done.append(found)

        try:
            for batch in iterator:
                if not batch.num_rows:
                    continue
                conformed = conform_batch(batch, self.commit_schema)
                for values, part in _split_by_partition(conformed, self.partition_by):
                    data = part.select(self.file_schema.names)
                    while data.num_rows:
                        found = open_files.get(values) or start(values)
                        piece = data
                        if limit:
                            piece = data.slice(0, limit - found.stats.rows)
                        data = data.slice(piece.num_rows)
                        found.stats.add(piece)
                        found.hold(piece)
                        if limit and found.stats.rows >= limit:
                            finish(open_files.pop(values))
                        elif found.held_rows >= ROW_GROUP_ROWS:
                            found.flush()
                    # what the task holds, all its files together, stays under the bound
                    while sum(f.held_bytes for f in open_files.values()) >= ROW_GROUP_BYTES:
                        max(open_files.values(), key=lambda f: f.held_bytes).flush()
            for found in list(open_files.values()):
                finish(found)
            open_files.clear()
            added = []
            now = int(time.time() * 1000)
            for found in done:
                size = filesystem.get_file_info(found.name).size
                added.append(
                    AddedFile(
                        found.name,
                        int(size),
                        found.stats.rows,
                        now,
                        found.stats.to_json(),
                        dict(zip(self.partition_by, found.values, strict=True)),
                    )
                )
        except BaseException:
            everything = [*done, *open_files.values()]
            for found in everything:
                if not found.closed:
                    found.writer.close()
            names = [f.name for f in everything]
            _delete_files(self.table_uri, self.storage_options, names, missing_ok=True)
            raise
        return DeltaCommitMessage(added)

    # driver commit -----------------------------------------------------------------------
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = _files_of(messages)
        if self.skip:
            return
        before = open_table(self.table_uri, storage_options=self.storage_options)
        before_version = before.version() if before is not None else None
        try:
            self._commit(before, files)
        except BaseException:
            after = open_table(self.table_uri, storage_options=self.storage_options)
            if (after.version() if after is not None else None) == before_version:
                _delete_files(self.table_uri, self.storage_options, [f.path for f in files])
            raise

    def _commit(self, table: DeltaTable | None, files: list[AddedFile]) -> None:
        from deltalake import Schema
        from deltalake.transaction import (
            AddAction,
            CommitProperties,
            RemoveAction,
            Transaction,
            create_table_with_add_actions,
        )

        if table is not None and self._already_done(table):  # a concurrent run got there first
            _delete_files(self.table_uri, self.storage_options, [f.path for f in files])
            return
        if table is not None and self.table_schema_json is None and not self.overwrite_schema:
            self._check_target(table)  # the table appeared after planning: same checks
        adds = [
            AddAction(
                f.path,
                f.size,
                f.partition_values,
                f.modification_time,
                True,
                f.stats_json(),
            )
            for f in files
        ]
        properties = CommitProperties(
            app_transactions=(
                [Transaction(self.txn_app_id, self.txn_version)]
                if self.txn_app_id is not None and self.txn_version is not None
                else None
            )
        )
        if self.remove_files and (table is None or self.overwrite):
            raise DeltaStorageError("files are removed only by an append to a table that exists")
        now = int(time.time() * 1000)
        removes = [
            RemoveAction(path, True, now, size, partition_values)
            for path, size, partition_values in self.remove_files
        ]
        if (
            table is None
            and "://" not in self.table_uri
            and needs_only_base_protocol(self.data_schema_json)
        ):
            first_commit_local(
                self.table_uri,
                self.data_schema_json,
                files,
                (self.txn_app_id, self.txn_version)
                if self.txn_app_id is not None and self.txn_version is not None
                else None,
                self.partition_by,
            )
            return
        if table is None:
            create_table_with_add_actions(
                self.table_uri,
                Schema.from_json(self.data_schema_json),
                adds,
                mode="error",
                partition_by=self.partition_by or None,
                storage_options=self.storage_options,
                commit_properties=properties,
            )
            return
        schema_json = self.table_schema_json or self.data_schema_json
        table.create_write_transaction(
            [*adds, *removes],
            "overwrite" if self.overwrite else "append",
            Schema.from_json(schema_json),
            partition_by=self.partition_by or None,
            commit_properties=properties,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _delete_files(self.table_uri, self.storage_options, [f.path for f in _files_of(messages)])


def needs_only_base_protocol(schema_json: str) -> bool:
    """Whether a table of this schema needs no table feature (reader 1 / writer 2).

    timestamp_ntz needs the ``timestampNtz`` feature; such tables are created
    the way delta-rs does it (which declares the feature).
    """
    return '"timestamp_ntz"' not in schema_json


def first_commit_local(
    table_path: str,
    schema_json: str,
    files: Sequence[AddedFile],
    txn: tuple[str, int] | None,
    partition_by: Sequence[str] = (),
) -> None:
    """Create a local table with its data in ONE commit (version 0).

    delta-rs creates a table in one commit and adds the files in a second, so a
    reader or a crash in between sees an empty table. Here the first log entry
    (protocol, metadata, the files, the txn) is written aside and put in place
    with ``os.link``, which fails if version 0 already exists: a concurrent
    creator wins and this commit raises FileExistsError.
    """
    log_dir = os.path.join(table_path, "_delta_log")
    os.makedirs(log_dir, exist_ok=True)
    now = int(time.time() * 1000)
    actions: list[dict[str, Any]] = [
        {
            "commitInfo": {
                "timestamp": now,
                "operation": "WRITE",
                "operationParameters": {"mode": "ErrorIfExists"},
                "engineInfo": "pelengine-embedded-delta",
            }
        },
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": schema_json,
                "partitionColumns": list(partition_by),
                "configuration": {},
                "createdTime": now,
            }
        },
    ]
    actions += [
        {
            "add": {
                "path": f.path,
                "partitionValues": f.partition_values,
                "size": f.size,
                "modificationTime": f.modification_time,
                "dataChange": True,
                "stats": f.stats_json(),
            }
        }
        for f in files
    ]
    if txn is not None:
        actions.append({"txn": {"appId": txn[0], "version": txn[1], "lastUpdated": now}})
    staged = os.path.join(table_path, f".pelengine-commit-{uuid.uuid4().hex}.json")
    with open(staged, "w", encoding="utf-8") as fh:
        fh.write("\n".join(json.dumps(a, separators=(",", ":")) for a in actions) + "\n")
    try:
        os.link(staged, os.path.join(log_dir, "00000000000000000000.json"))
    finally:
        os.unlink(staged)


@dataclass
class _OpenFile:
    """A data file a task is writing (see :meth:`DeltaWriter.write`). Its batches are held
    until they make a row group (:data:`ROW_GROUP_ROWS` rows, or the task's files hold
    :data:`ROW_GROUP_BYTES` together: then the largest is written):
    Parquet writes each call as a row group of its own, and a file of many tiny ones (a
    state table of one family per batch, a replay's output in thousands of small batches)
    costs every reader a column chunk per column per group."""

    name: str
    writer: Any
    stats: ColumnStats
    closed: bool = False
    #: its partition values
    values: tuple[str | None, ...] = ()
    held: list[Any] = field(default_factory=list)
    held_rows: int = 0
    held_bytes: int = 0

    def hold(self, batch: Any) -> None:
        self.held.append(batch)
        self.held_rows += batch.num_rows
        self.held_bytes += batch.nbytes

    def flush(self) -> None:
        """Write the held batches as one row group."""
        import pyarrow as pa

        if self.held:
            table = pa.Table.from_batches(self.held, schema=self.held[0].schema)
            self.writer.write_table(table, row_group_size=max(self.held_rows, 1))
        self.held, self.held_rows, self.held_bytes = [], 0, 0


#: A data file's row groups: this many rows each, fewer where the batches a writing task
#: holds for all its files (one per partition value) reach this many bytes in memory
#: together (the bound on what it holds: a Spark task's worker memory); the last one of a
#: file what is left
ROW_GROUP_ROWS = 1_000_000
ROW_GROUP_BYTES = 64 * 1024 * 1024


#: How Hive-style partition directories name a null value (as Spark and delta-rs do).
_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _partition_value(value: Any) -> str | None:
    """A partition value as the Delta log keeps it (a string; None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _split_by_partition(
    batch: pa.RecordBatch, columns: Sequence[str]
) -> Iterator[tuple[tuple[str | None, ...], pa.RecordBatch]]:
    """``batch``'s rows by their values of the partition ``columns`` (all of it, once,
    when there are none)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not columns:
        yield (), batch
        return
    keys = (
        pa.Table.from_batches([batch]).select(list(columns)).group_by(list(columns)).aggregate([])
    )
    for row in keys.to_pylist():
        mask = None
        for c in columns:
            col = batch.column(c)
            test = pc.is_null(col) if row[c] is None else pc.equal(col, row[c])
            test = pc.fill_null(test, False)
            mask = test if mask is None else pc.and_(mask, test)
        yield tuple(_partition_value(row[c]) for c in columns), batch.filter(mask)


#: What a partition column's name or value may hold here: the directory is then named by
#: it as it is (Spark would escape anything else, in the file names and again in the log).
_PLAIN_PARTITION = re.compile(r"[A-Za-z0-9_.+-]*")


def _partition_directory(columns: Sequence[str], values: Sequence[str | None]) -> str:
    """The Hive-style directory of a partition (``status=pending/``; empty when the table
    is not partitioned)."""
    parts = []
    for c, v in zip(columns, values, strict=True):
        shown = _NULL_PARTITION if v is None else v
        if not (_PLAIN_PARTITION.fullmatch(c) and _PLAIN_PARTITION.fullmatch(shown)):
            raise DeltaStorageError(
                f"The embedded delta-rs writer names partition directories only by letters, "
                f"digits and _.+- : {c}={shown!r} would need escaping. Run with delta-spark."
            )
        parts.append(f"{c}={shown}/")
    return "".join(parts)


def _files_of(messages: list[WriterCommitMessage | None]) -> list[AddedFile]:
    return [f for m in messages if isinstance(m, DeltaCommitMessage) for f in m.files]


def _delete_files(
    table_uri: str,
    storage_options: dict[str, str] | None,
    paths: list[str],
    *,
    missing_ok: bool = True,
) -> None:
    """Best-effort removal of files written by this job (never referenced by the log)."""
    if not paths:
        return
    filesystem = _filesystem(table_uri, storage_options)
    for path in paths:
        try:
            filesystem.delete_file(path)
        except (FileNotFoundError, OSError):
            if not missing_ok:
                raise


# --------------------------------------------------------------------------- data source


class DeltaDataSource(DataSource):
    """``format("delta")`` served by delta-rs; options: path, versionAsOf, overwriteSchema,
    txnAppId, txnVersion, partitionBy (a JSON list of columns), storage.<object-store
    option>."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise DeltaStorageError("format('delta') needs a path: use .load(path) / .save(path).")
        return normalize_table_uri(str(path))

    def _version(self) -> int | None:
        version = self.options.get("versionAsOf")
        return int(version) if version is not None else None

    def schema(self) -> StructType:
        table = _require_table(self._path(), self._version(), _storage_options(self.options))
        return spark_schema_from_delta(table.schema().to_json())

    def reader(self, schema: StructType) -> DataSourceReader:
        return DeltaReader(self._path(), self._version(), schema, self.options)

    def writer(self, schema: StructType, overwrite: bool) -> DeltaWriter:
        return DeltaWriter(self._path(), schema, overwrite, self.options)
