"""The storage seam: the one module that knows paths and Delta Lake.

Job code reads with ``spark.read.format("delta").load(path)`` and writes with
``df.write.format("delta").mode(m).option(...).save(path)`` (or the helpers below). With
native Delta Lake on the classpath (Databricks, ``--packages io.delta:...``) those calls go
to it unchanged; otherwise :func:`install_storage` registers an embedded Python data source
named ``delta`` backed by delta-rs (:mod:`pelengine.spark.delta_source`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

NATIVE = "native"
EMBEDDED = "embedded"
MODE_CONF = "pelengine.storage.mode"
DELTA_SOURCE_CLASS = "org.apache.spark.sql.delta.sources.DeltaDataSource"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
_SAVE_MODES = {
    "overwrite": "overwrite",
    "append": "append",
    "ignore": "ignore",
    "error": "errorifexists",
    "errorifexists": "errorifexists",
    "default": "errorifexists",
}


# --------------------------------------------------------------------------- the guard


def probe_jvm_delta(spark: SparkSession) -> bool | None:
    """True/False if the JVM can/cannot load Delta's data source class; None if unknowable
    (Spark Connect / serverless: no py4j gateway)."""
    try:
        jvm = spark._jvm
    except Exception:
        return None
    if jvm is None:
        return None
    try:
        jvm.org.apache.spark.util.Utils.classForName(DELTA_SOURCE_CLASS, False, False)
        return True
    except Exception as exc:  # py4j wraps ClassNotFoundException
        return False if "ClassNotFoundException" in str(exc) else None


def _configured_extensions(spark: SparkSession) -> str:
    try:
        return str(spark.conf.get("spark.sql.extensions", "") or "")
    except Exception:
        return ""


def choose_storage_mode(
    has_delta_class: bool | None,
    extensions: str,
    register: Callable[[], None],
) -> str:
    """Decide native vs embedded; ``register`` installs the embedded source (may raise).

    Native Delta always wins: a loadable JVM class, or (when the class cannot be probed) the
    Delta session extension, means native. Otherwise the embedded source is registered; if
    Spark refuses because a ``delta`` source already exists, that source is native Delta.
    """
    if has_delta_class:
        return NATIVE
    if has_delta_class is None and DELTA_EXTENSION in extensions:
        return NATIVE
    try:
        register()
    except Exception as exc:
        if _is_already_exists(exc):
            return NATIVE
        raise RuntimeError(
            f"No native Delta Lake found and the embedded delta data source could not be "
            f"registered: {exc}"
        ) from exc
    return EMBEDDED


def _is_already_exists(exc: BaseException) -> bool:
    text = str(exc)
    return "DATA_SOURCE_ALREADY_EXISTS" in text or "already exists" in text.lower()


def install_storage(spark: SparkSession) -> str:
    """Make ``format("delta")`` work in this session; returns "native" or "embedded"."""
    current = _installed_mode(spark)
    if current is not None:
        return current

    def register() -> None:
        from pelengine.spark.delta_source import DeltaDataSource

        spark.dataSource.register(DeltaDataSource)

    mode = choose_storage_mode(probe_jvm_delta(spark), _configured_extensions(spark), register)
    spark.conf.set(MODE_CONF, mode)
    return mode


def _installed_mode(spark: SparkSession) -> str | None:
    try:
        value = spark.conf.get(MODE_CONF, None)
    except Exception:
        return None
    return value if value in (NATIVE, EMBEDDED) else None


def storage_mode(spark: SparkSession) -> str:
    """What :func:`install_storage` chose for this session."""
    mode = _installed_mode(spark)
    if mode is None:
        raise RuntimeError("pelengine storage is not installed: call install_storage(spark) first")
    return mode


# --------------------------------------------------------------------------- read / write


def read_table(spark: SparkSession, path: str, version: int | None = None) -> DataFrame:
    """The Delta table at ``path`` (its snapshot at ``version`` when given: reading it
    again later gives the same rows, whatever was written since)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", str(version))
    return reader.load(path)


def write_table(
    df: DataFrame,
    path: str,
    mode: str = "overwrite",
    *,
    txn_app_id: str | None = None,
    txn_version: int | None = None,
    overwrite_schema: bool = False,
) -> None:
    """Write ``df`` as the Delta table at ``path`` (one commit).

    ``txn_app_id``/``txn_version`` make the write idempotent (skipped when ``txn_version`` is
    not greater than the one recorded for ``txn_app_id``); ``overwrite_schema`` lets an
    overwrite replace the table schema. Modes: overwrite, append, errorifexists/error, ignore.
    """
    save_mode = _SAVE_MODES.get(mode.lower())
    if save_mode is None:
        raise ValueError(f"unknown save mode {mode!r}; expected one of {sorted(_SAVE_MODES)}")
    if (txn_app_id is None) != (txn_version is None):
        raise ValueError("txn_app_id and txn_version must be given together")
    options: dict[str, str] = {}
    if txn_app_id is not None and txn_version is not None:
        options.update(txnAppId=txn_app_id, txnVersion=str(txn_version))
    if overwrite_schema:
        options["overwriteSchema"] = "true"
    spark = df.sparkSession
    if storage_mode(spark) == EMBEDDED:
        if save_mode in ("errorifexists", "ignore"):
            # Python data sources only take append/overwrite: apply Spark's rule here.
            if table_exists(spark, path):
                if save_mode == "ignore":
                    return
                raise FileExistsError(
                    f"Delta table already exists at {path} (mode 'errorifexists'); "
                    "use mode 'overwrite' or 'append'."
                )
            save_mode = "append"
        if _embedded_preflight_skips(df, path, save_mode == "overwrite", options):
            return
    writer = df.write.format("delta").mode(save_mode)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(path)


def _embedded_preflight_skips(
    df: DataFrame, path: str, overwrite: bool, options: dict[str, str]
) -> bool:
    """Run the embedded writer's driver checks before any task: raises the plain error
    (schema mismatch, unsupported table) and says whether the txn rule skips the write."""
    from pelengine.spark.delta_source import DeltaWriter, normalize_table_uri

    return DeltaWriter(normalize_table_uri(path), df.schema, overwrite, options).skip


# --------------------------------------------------------------------------- table facts


def table_path(root: str, name: str) -> str:
    """Where the table ``name`` of the output root ``root`` lives."""
    return os.path.join(root, name)


def read_output_table(spark: SparkSession, root: str, name: str) -> DataFrame:
    """The table ``name`` of the output root ``root``; FileNotFoundError naming both when
    there is none."""
    path = table_path(root, name)
    if not table_exists(spark, path):
        raise FileNotFoundError(
            f"no {name} table under --out {root} (expected at {path}; written by "
            "pelengine reconstruct)"
        )
    return read_table(spark, path)


def table_versions(spark: SparkSession, path: str, limit: int | None = None) -> list[int]:
    """Versions of the table at ``path`` its Delta history lists, newest first (at most
    ``limit``); empty when there is no table. Versions whose files were vacuumed may be
    listed yet no longer readable."""
    if storage_mode(spark) == EMBEDDED:
        from pelengine.spark.delta_source import normalize_table_uri, open_table

        table = open_table(normalize_table_uri(path))
        if table is None:
            return []
        versions = sorted(
            {int(h["version"]) for h in table.history(limit) if h.get("version") is not None},
            reverse=True,
        )
        return versions[:limit] if limit is not None else versions
    from pyspark.errors import AnalysisException

    quoted = path.replace("`", "``")
    query = f"DESCRIBE HISTORY delta.`{quoted}`" + (f" LIMIT {int(limit)}" if limit else "")
    try:
        rows = spark.sql(query).select("version").collect()
    except AnalysisException:
        return []
    return sorted((int(r["version"]) for r in rows), reverse=True)


def table_version(spark: SparkSession, path: str) -> int | None:
    """Current Delta version of the table at ``path``; None if there is no table."""
    if storage_mode(spark) == EMBEDDED:
        from pelengine.spark.delta_source import normalize_table_uri, open_table

        table = open_table(normalize_table_uri(path))
        return table.version() if table is not None else None
    from pyspark.errors import AnalysisException

    quoted = path.replace("`", "``")
    try:
        rows = spark.sql(f"DESCRIBE HISTORY delta.`{quoted}` LIMIT 1").collect()
    except AnalysisException:
        return None
    return int(rows[0]["version"]) if rows else None


def table_row_count(spark: SparkSession, path: str) -> int:
    """Rows of the current version of the table at ``path`` (from the Delta log's file
    statistics where they are all there; otherwise by reading the table)."""
    if storage_mode(spark) == EMBEDDED:
        import pyarrow as pa

        from pelengine.spark.delta_source import normalize_table_uri, open_table

        table = open_table(normalize_table_uri(path))
        if table is not None:
            counts = pa.table(table.get_add_actions(flatten=True)).column("num_records")
            if counts.null_count == 0:
                return int(sum(counts.to_pylist()))
    return read_table(spark, path).count()


def table_exists(spark: SparkSession, path: str) -> bool:
    """Whether a Delta table exists at ``path``."""
    return table_version(spark, path) is not None
