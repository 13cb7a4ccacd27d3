"""Writing a table: one Delta commit, by path or by name, idempotent with a transaction
id; a commit another writer made impossible becomes a :class:`ConcurrentWriteError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pelengine.storage.choice import EMBEDDED, storage_mode
from pelengine.storage.errors import concurrent_write_error
from pelengine.storage.names import Table, TableRef, require_delta_spark
from pelengine.storage.versions import table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Format of tables written by name (catalog tables).
TABLE_FORMAT = "delta"


_SAVE_MODES = {
    "overwrite": "overwrite",
    "append": "append",
    "ignore": "ignore",
    "error": "errorifexists",
    "errorifexists": "errorifexists",
    "default": "errorifexists",
}


def write_table(
    df: DataFrame,
    path: TableRef,
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
    A :class:`Table` is written by name with ``saveAsTable`` (delta-spark only; external at
    its ``location`` when it has one, managed otherwise). A commit Delta Lake refuses because
    another writer committed to the table meanwhile raises :class:`ConcurrentWriteError`.
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
    if isinstance(path, Table):
        require_delta_spark(spark, str(path))
        writer = df.write.format(TABLE_FORMAT).mode(save_mode)
        for key, value in options.items():
            writer = writer.option(key, value)
        if path.location:
            writer = writer.option("path", path.location)
        try:
            writer.saveAsTable(path.name)
        except Exception as exc:
            _raise_conflict(exc, str(path))
            raise
        return
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
    try:
        writer.save(path)
    except Exception as exc:
        _raise_conflict(exc, path)
        raise


def _raise_conflict(exc: BaseException, table: str) -> None:
    """Raise :class:`ConcurrentWriteError` (from ``exc``) when ``exc`` is a Delta Lake
    conflict on ``table``; return otherwise (the caller re-raises ``exc``)."""
    conflict = concurrent_write_error(exc, table)
    if conflict is not None:
        raise conflict from exc


def _embedded_preflight_skips(
    df: DataFrame, path: str, overwrite: bool, options: dict[str, str]
) -> bool:
    """Run the embedded writer's driver checks before any task: raises the plain error
    (schema mismatch, unsupported table) and says whether the txn rule skips the write."""
    from pelengine.storage.embedded import DeltaWriter, normalize_table_uri

    return DeltaWriter(normalize_table_uri(path), df.schema, overwrite, options).skip
