"""A table's facts: its versions, its current version, its row count, whether it exists;
from the Delta log where it can be read (no Spark job), else from Delta or delta-rs."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from pelengine.storage.choice import EMBEDDED, storage_mode
from pelengine.storage.names import Table, TableRef, require_delta_spark
from pelengine.storage.paths import local_path
from pelengine.storage.reads import read_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def table_versions(spark: SparkSession, path: TableRef, limit: int | None = None) -> list[int]:
    """Versions of the table at ``path`` its Delta history lists, newest first (at most
    ``limit``); empty when there is no table. Versions whose files were vacuumed may be
    listed yet no longer readable."""
    if isinstance(path, str) and storage_mode(spark) == EMBEDDED:
        from pelengine.storage.embedded import normalize_table_uri, open_table

        table = open_table(normalize_table_uri(path))
        if table is None:
            return []
        versions = sorted(
            {int(h["version"]) for h in table.history(limit) if h.get("version") is not None},
            reverse=True,
        )
        return versions[:limit] if limit is not None else versions
    from pyspark.errors import AnalysisException

    quoted = path.name if isinstance(path, Table) else "delta.`" + path.replace("`", "``") + "`"
    query = f"DESCRIBE HISTORY {quoted}" + (f" LIMIT {int(limit)}" if limit else "")
    try:
        rows = spark.sql(query).select("version").collect()
    except AnalysisException:
        return []
    return sorted((int(r["version"]) for r in rows), reverse=True)


def _local_log_version(path: str) -> int | None | bool:
    """The newest commit of the Delta table at a local ``path``, from its ``_delta_log``
    listing (every commit is one ``<version>.json`` file; checkpoints never replace the
    newest): None when there is no table, False when ``path`` is not local (ask Delta)."""
    local = local_path(path)
    if local is None:
        return False
    try:
        names = os.listdir(os.path.join(local, "_delta_log"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    versions = [
        int(n[:20]) for n in names if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()
    ]
    return max(versions) if versions else None


def table_version(spark: SparkSession, path: TableRef) -> int | None:
    """Current Delta version of the table at ``path``; None if there is no table. A local
    path is answered from its log's listing (either store: no Spark job), a table by name
    and a remote path by Delta (``DESCRIBE HISTORY``, delta-spark; delta-rs, embedded)."""
    if isinstance(path, Table):
        require_delta_spark(spark, str(path))
        if not spark.catalog.tableExists(path.name):
            return None
        rows = spark.sql(f"DESCRIBE HISTORY {path.name} LIMIT 1").collect()
        return int(rows[0]["version"]) if rows else None
    listed = _local_log_version(path)
    if listed is not False:
        return listed
    if storage_mode(spark) == EMBEDDED:
        from pelengine.storage.embedded import normalize_table_uri, open_table

        table = open_table(normalize_table_uri(path))
        return table.version() if table is not None else None
    from pyspark.errors import AnalysisException

    quoted = path.replace("`", "``")
    try:
        rows = spark.sql(f"DESCRIBE HISTORY delta.`{quoted}` LIMIT 1").collect()
    except AnalysisException:
        return None
    return int(rows[0]["version"]) if rows else None


def table_row_count(spark: SparkSession, path: TableRef) -> int:
    """Rows of the current version of the table at ``path``: from the Delta log's file
    statistics where they are all there and no file has deletion vectors (a path, read by
    delta-rs whichever store wrote it), otherwise by reading the table."""
    if isinstance(path, str) and (storage_mode(spark) == EMBEDDED or local_path(path) is not None):
        counted = _rows_from_log(path)
        if counted is not None:
            return counted
    return read_table(spark, path).count()


def _rows_from_log(path: str) -> int | None:
    import pyarrow as pa

    from pelengine.storage.embedded import normalize_table_uri, open_table

    try:
        table = open_table(normalize_table_uri(path))
        if table is None:
            return None
        actions = pa.table(table.get_add_actions(flatten=True))
    except Exception:  # a protocol delta-rs does not read: let Delta count
        return None
    if "num_records" not in actions.column_names:
        return None
    counts = actions.column("num_records")
    dv = [c for c in actions.column_names if c.startswith("deletionVector")]
    if counts.null_count or any(actions.column(c).null_count < len(actions) for c in dv):
        return None
    return int(sum(counts.to_pylist()))


def table_exists(spark: SparkSession, path: TableRef) -> bool:
    """Whether a Delta table exists at ``path``."""
    return table_version(spark, path) is not None


def commit_rows(spark: SparkSession, path: TableRef, version: int | None = None) -> int | None:
    """The rows commit ``version`` (default: the newest) wrote to the table at ``path``,
    from the commit itself (its files' statistics, else its ``operationMetrics``): a
    count without reading the table again. None when the commit does not say."""
    if isinstance(path, str):
        local = local_path(path)
        if local is not None:
            from pelengine.storage.deltalog import LogUnreadableError, read_commit

            if version is None:
                listed = _local_log_version(path)
                if not isinstance(listed, int) or listed is False:
                    return None
                version = listed
            try:
                actions = read_commit(local, version)
            except LogUnreadableError:
                return None
            return _rows_of_commit(actions)
    if isinstance(path, Table):
        require_delta_spark(spark, str(path))
        target = path.name
    elif storage_mode(spark) == EMBEDDED:
        return None
    else:
        target = "delta.`" + path.replace("`", "``") + "`"
    rows = spark.sql(f"DESCRIBE HISTORY {target}").select("version", "operationMetrics")
    rows = rows.limit(1) if version is None else rows.filter(f"version = {int(version)}")
    found = rows.collect()
    if not found:
        return None
    metrics = found[0]["operationMetrics"] or {}
    for name in ("numOutputRows", "numTargetRowsInserted"):
        if metrics.get(name) is not None:
            return int(metrics[name])
    return None


def _rows_of_commit(actions: list[dict[str, Any]]) -> int | None:
    """Rows a commit's actions wrote: its ``operationMetrics`` (``numOutputRows``; for a
    merge, the rows inserted, updated and copied into rewritten files), else its added
    files' ``numRecords`` (but a file added back with a deletion vector, which marks
    rows of a file already there and writes none)."""
    import json

    removed = {a["remove"].get("path") for a in actions if isinstance(a.get("remove"), dict)}
    for action in actions:
        info = action.get("commitInfo")
        if isinstance(info, dict):
            metrics = info.get("operationMetrics") or {}
            for name in ("numOutputRows", "num_output_rows"):  # delta-spark, delta-rs
                if metrics.get(name) is not None:
                    return int(metrics[name])
    total = 0
    for action in actions:
        add = action.get("add")
        if not isinstance(add, dict) or (add.get("deletionVector") and add.get("path") in removed):
            continue
        try:
            n = json.loads(add.get("stats") or "{}").get("numRecords")
        except ValueError:
            return None
        if not isinstance(n, int):
            return None
        total += n
    return total
