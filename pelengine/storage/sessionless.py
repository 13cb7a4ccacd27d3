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
from typing import TYPE_CHECKING, Any

from pelengine.storage.names import Table, TableRef

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from pelengine.storage.embedded import DeltaReader

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


def read_arrow(
    path: TableRef,
    columns: Sequence[str] | None = None,
    version: int | None = None,
    files: Sequence[str] | None = None,
) -> pa.Table:
    """The current snapshot (or that of ``version``) of the Delta table at ``path`` (only
    ``columns``, those of them it has, when given; only the rows of the data ``files``,
    as its log names them, when given) as one Arrow table, read as the embedded store
    reads it."""
    import pyarrow as pa

    reader = _reader(path, columns, version, files)
    if files is not None and not files:  # no file asked for: no rows (not the whole table)
        return reader.target.empty_table()
    batches = [batch for part in reader.partitions() for batch in reader.read(part)]
    return pa.Table.from_batches(batches, schema=reader.target)


def read_arrow_by_file(
    path: TableRef,
    files: Sequence[str],
    columns: Sequence[str] | None = None,
    version: int | None = None,
) -> dict[str, pa.Table]:
    """:func:`read_arrow` of each of the data ``files`` apart, in one pass over the log:
    each file's rows (only ``columns``, when given) as an Arrow table, by its path as
    ``files`` names it."""
    from urllib.parse import unquote

    import pyarrow as pa

    from pelengine.storage.embedded import DeltaFilePartition, DeltaStorageError

    if not files:
        return {}
    reader = _reader(path, columns, version, files)
    names = {unquote(f): f for f in files}
    found = {}
    for part in reader.partitions():
        if not isinstance(part, DeltaFilePartition):
            raise DeltaStorageError(f"{_uri(path)}: the embedded reader cannot read files apart")
        batches = list(reader.read(part))
        found[names[part.file]] = pa.Table.from_batches(batches, schema=reader.target)
    return found


def _reader(
    path: TableRef,
    columns: Sequence[str] | None,
    version: int | None,
    files: Sequence[str] | None,
) -> DeltaReader:
    """The embedded store's reader of the snapshot (``columns``, ``files``: as
    :func:`read_arrow`)."""
    import json
    from urllib.parse import unquote

    from pyspark.sql.types import StructType

    from pelengine.storage.embedded import (
        DeltaReader,
        DeltaStorageError,
        open_table,
        spark_schema_from_delta,
    )
    from pelengine.storage.paths import FILES_OPTION

    uri = _uri(path)
    table = open_table(uri, version)
    if table is None:
        raise DeltaStorageError(f"no Delta table at {uri}")
    schema = spark_schema_from_delta(table.schema().to_json())
    if columns is not None:
        schema = StructType([f for f in schema.fields if f.name in set(columns)])
    options = {} if files is None else {FILES_OPTION: json.dumps([unquote(f) for f in files])}
    return DeltaReader(uri, table.version(), schema, options)


def data_files(path: TableRef, version: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The data files of the snapshot (or that of ``version``) of the Delta table at
    ``path``: each one's path as its log names it (for :func:`read_arrow`'s ``files``)
    and its partition values."""
    return [(file, parts) for file, _, parts in _added(path, version)]


def _added(path: TableRef, version: int | None) -> list[tuple[str, int, dict[str, Any]]]:
    """Each data file of the snapshot: its path as the log names it, size, partition
    values."""
    import pyarrow as pa

    from pelengine.storage.embedded import DeltaStorageError, open_table

    uri = _uri(path)
    table = open_table(uri, version)
    if table is None:
        raise DeltaStorageError(f"no Delta table at {uri}")
    actions = pa.table(table.get_add_actions(flatten=True))
    prefix = "partition."
    parts = [c for c in actions.column_names if c.startswith(prefix)]
    listed = actions.select(["path", "size_bytes", *parts]).to_pylist()
    return [
        (str(row["path"]), int(row["size_bytes"]), {c[len(prefix) :]: row[c] for c in parts})
        for row in listed
    ]


def rewrite_arrow(
    rows: pa.Table,
    path: TableRef,
    schema: StructType,
    remove: Sequence[str],
    options: dict[str, str] | None = None,
) -> None:
    """One commit of the Delta table at ``path`` that removes its data files ``remove``
    (paths as its log names them, from :func:`data_files`) and adds ``rows`` (``schema``:
    the table's Spark schema) as new files: a caller that read those files whole writes
    back the rows it keeps with those it adds, and no other file is read or rewritten
    (Delta's "add and remove actions in one commit"). Nothing to remove or add: no
    commit. ``options``: the writer's (:func:`write_arrow`)."""
    from pelengine.storage.embedded import DeltaStorageError, DeltaWriter

    if not remove and not rows.num_rows:
        return
    sizes = {file: (size, parts) for file, size, parts in _added(path, None)}
    gone = [file for file in remove if file not in sizes]
    if gone:
        raise DeltaStorageError(
            f"{_uri(path)}: {len(gone)} file(s) to remove are not in the table "
            f"(another writer changed it?), e.g. {gone[0]}"
        )
    writer = DeltaWriter(_uri(path), schema, False, dict(options or {}))
    writer.remove_files = [(file, *sizes[file]) for file in remove]
    message = writer.write(iter(rows.to_batches()))
    writer.commit([message])


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


def append_arrow(rows: pa.Table, path: TableRef) -> int:
    """Append ``rows`` to the Delta table at ``path`` in one commit (none for no rows), as
    the embedded store appends a night's history rows; returns the rows appended."""
    from deltalake import write_deltalake

    if rows.num_rows:
        write_deltalake(_uri(path), rows, mode="append")
    return rows.num_rows


def replace_arrow(
    rows: pa.Table,
    path: TableRef,
    keys: Sequence[str],
    *,
    where: str | None = None,
    delete_keys: pa.Table | None = None,
    null_safe: bool = False,
) -> dict[str, int]:
    """One commit on the Delta table at ``path`` (``storage.replace_rows`` of the embedded
    store, from Arrow): delete its rows whose ``keys`` equal those of a row of ``rows``
    or of ``delete_keys`` (with ``null_safe`` a null equals a null) and satisfy ``where``
    (SQL over the target's columns, prefixed ``t.``); insert every row of ``rows``.
    Nothing to delete or insert: no commit. Returns the rows inserted and deleted."""
    import pyarrow as pa
    from deltalake import DeltaTable

    keys = list(keys)
    doomed = rows.select(keys)
    if delete_keys is not None and delete_keys.num_rows:
        doomed = pa.concat_tables([doomed, delete_keys.select(keys).cast(doomed.schema)])
    if rows.num_rows == 0 and doomed.num_rows == 0:
        return {"inserted": 0, "deleted": 0}
    doomed = doomed.group_by(keys, use_threads=False).aggregate([])
    m = doomed.num_rows
    deletions = pa.table(
        [doomed.column(f.name) if f.name in keys else pa.nulls(m, f.type) for f in rows.schema],
        schema=rows.schema,
    )
    source = pa.concat_tables(
        [
            rows.append_column("_op", pa.repeat("insert", rows.num_rows).cast(pa.string())),
            deletions.append_column("_op", pa.repeat("delete", m).cast(pa.string())),
        ]
    )
    equal = "IS NOT DISTINCT FROM" if null_safe else "="
    # each comparison in parentheses: DataFusion binds AND tighter than IS NOT DISTINCT FROM
    match = " AND ".join(f"(t.`{k}` {equal} s.`{k}`)" for k in keys)
    if where:
        match += f" AND ({where})"
    updates = {f"`{c}`": f"s.`{c}`" for c in rows.column_names}
    metrics = (
        DeltaTable(_uri(path))
        .merge(
            source, predicate=f"s._op = 'delete' AND {match}", source_alias="s", target_alias="t"
        )
        .when_matched_delete()
        .when_not_matched_insert(updates=updates, predicate="s._op = 'insert'")
        .execute()
    )
    return {
        "inserted": int(metrics.get("num_target_rows_inserted") or 0),
        "deleted": int(metrics.get("num_target_rows_deleted") or 0),
    }


def restore(path: TableRef, version: int) -> None:
    """Put the Delta table at ``path`` back to ``version`` (one commit)."""
    from deltalake import DeltaTable

    DeltaTable(_uri(path)).restore(version)


def check_writable(paths: Sequence[TableRef]) -> None:
    """Refuse, before any work, the tables among ``paths`` delta-rs cannot write
    (deletion vectors: ``storage.check_embedded_writes``'s one sentence)."""
    from pelengine.storage.embedded import (
        deletion_vectors_refusal,
        open_table,
        written_with_deletion_vectors,
    )
    from pelengine.storage.errors import StoreCannotWriteError

    for path in paths:
        uri = _uri(path)
        table = open_table(uri)
        if table is not None and written_with_deletion_vectors(table):
            raise StoreCannotWriteError(deletion_vectors_refusal(uri))
