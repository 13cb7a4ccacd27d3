"""Writing a table: one Delta commit, by path or by name, idempotent with a transaction
id; a commit another writer made impossible becomes a :class:`ConcurrentWriteError`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pelengine.storage.choice import (
    EMBEDDED,
    is_remote_session,
    persist_where_allowed,
    storage_mode,
)
from pelengine.storage.errors import StoreCannotWriteError, concurrent_write_error
from pelengine.storage.names import Table, TableRef, require_delta_spark
from pelengine.storage.versions import table_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

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
    deletion_vectors: bool = False,
    partition_by: tuple[str, ...] = (),
) -> None:
    """Write ``df`` as the Delta table at ``path`` (one commit).

    ``txn_app_id``/``txn_version`` make the write idempotent (skipped when ``txn_version`` is
    not greater than the one recorded for ``txn_app_id``); ``overwrite_schema`` lets an
    overwrite replace the table schema. Modes: overwrite, append, errorifexists/error, ignore.
    A :class:`Table` is written by name with ``saveAsTable`` (delta-spark only; external at
    its ``location`` when it has one, managed otherwise). A commit Delta Lake refuses because
    another writer committed to the table meanwhile raises :class:`ConcurrentWriteError`.

    ``deletion_vectors`` (delta-spark): the table has deletion vectors on
    (``delta.enableDeletionVectors``), so that a later merge or delete marks the rows it
    removes instead of rewriting their files: set when the write creates the table, else by
    one ``ALTER TABLE`` before it. The embedded store cannot write such tables and ignores it.

    ``partition_by``: the table's partition columns (an overwrite: the table gets them, its
    schema replaced by ``df``'s as with ``overwrite_schema``, whatever it was partitioned by
    before; an append: they must be the table's).
    """
    save_mode = _SAVE_MODES.get(mode.lower())
    if save_mode is None:
        raise ValueError(f"unknown save mode {mode!r}; expected one of {sorted(_SAVE_MODES)}")
    if (txn_app_id is None) != (txn_version is None):
        raise ValueError("txn_app_id and txn_version must be given together")
    options: dict[str, str] = {}
    if txn_app_id is not None and txn_version is not None:
        options.update(txnAppId=txn_app_id, txnVersion=str(txn_version))
    if overwrite_schema or (partition_by and save_mode == "overwrite"):
        options["overwriteSchema"] = "true"
    spark = df.sparkSession
    if deletion_vectors and storage_mode(spark) != EMBEDDED:
        if table_exists(spark, path):
            # before the write, so that the write stays the table's newest commit
            _ensure_deletion_vectors(spark, path)
        else:
            options.update(DELETION_VECTORS)
    _write_table(df, path, save_mode, options, partition_by)


#: The table property that turns deletion vectors on (delta-spark; delta-rs cannot write it).
DELETION_VECTORS = {"delta.enableDeletionVectors": "true"}


def _ensure_deletion_vectors(spark: SparkSession, path: TableRef) -> None:
    """``ALTER TABLE`` the table at ``path`` to deletion vectors unless it has them."""
    detail = spark.sql(f"DESCRIBE DETAIL {_target_sql(path)}").select("properties").first()
    properties = (detail["properties"] if detail is not None else None) or {}
    if all(properties.get(k) == v for k, v in DELETION_VECTORS.items()):
        return
    assignments = ", ".join(f"'{k}' = '{v}'" for k, v in DELETION_VECTORS.items())
    spark.sql(f"ALTER TABLE {_target_sql(path)} SET TBLPROPERTIES ({assignments})").collect()


def _write_table(
    df: DataFrame,
    path: TableRef,
    save_mode: str,
    options: dict[str, str],
    partition_by: tuple[str, ...] = (),
) -> None:
    spark = df.sparkSession
    if isinstance(path, Table):
        require_delta_spark(spark, str(path))
        writer = df.write.format(TABLE_FORMAT).mode(save_mode)
        if partition_by:
            writer = writer.partitionBy(*partition_by)
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
        if partition_by:
            # a Python data source is not told the writer's partitionBy: an option says it
            options["partitionBy"] = json.dumps(list(partition_by))
        if _embedded_preflight_skips(df, path, save_mode == "overwrite", options):
            return
    writer = df.write.format("delta").mode(save_mode)
    if partition_by and storage_mode(spark) != EMBEDDED:
        writer = writer.partitionBy(*partition_by)
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


def check_embedded_writes(spark: SparkSession, paths: list[TableRef]) -> None:
    """On the embedded store, refuse before any work the tables among ``paths`` it cannot
    write (deletion vectors: :func:`~pelengine.storage.embedded.deletion_vectors_refusal`)."""
    if storage_mode(spark) != EMBEDDED:
        return
    from pelengine.storage.embedded import (
        deletion_vectors_refusal,
        normalize_table_uri,
        open_table,
        written_with_deletion_vectors,
    )

    for path in paths:
        if not isinstance(path, str):
            continue
        uri = normalize_table_uri(path)
        table = open_table(uri)
        if table is not None and written_with_deletion_vectors(table):
            raise StoreCannotWriteError(deletion_vectors_refusal(uri))


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _target_sql(path: TableRef) -> str:
    if isinstance(path, Table):
        return path.name
    return "delta." + _quoted(path)


def replace_rows(
    df: DataFrame,
    path: TableRef,
    keys: tuple[str, ...],
    *,
    where: str | None = None,
    delete_keys: DataFrame | None = None,
    null_safe: bool = False,
    narrow: tuple[str, str] | None = None,
) -> dict[str, int]:
    """One commit on the Delta table at ``path``: delete its rows whose ``keys`` equal
    those of a row of ``df`` or of ``delete_keys`` (a DataFrame of ``keys`` only; with
    ``null_safe`` a null key equals a null key) and, given ``where`` (SQL over the
    target's columns, prefixed ``t.``), satisfy it; insert every row of ``df``. Nothing
    to delete or insert: no commit. Returns the rows ``inserted`` and ``deleted`` (from
    the commit's own metrics; nothing re-read).

    ``narrow`` = (``condition``, ``flag``): ``flag`` is a boolean column of ``df`` (not
    written), true on a row whose replaced target row may not satisfy ``condition`` (SQL
    over the target's columns, like ``where``). When no row has it true, ``condition``
    joins the match, so that the merge reads and rewrites only the files where it can
    hold (a partition); else the merge meets the whole table, as without it. The result
    then also says ``narrowed`` (1 when the condition joined the match, else 0).

    delta-spark: a ``MERGE INTO`` whose source is ``df``'s rows tagged for insertion and
    the distinct keys tagged for deletion (an insertion never matches, a deletion never
    inserts). Embedded: the same merge through delta-rs, from the rows collected as Arrow
    (a night's changed rows, not the history)."""
    from pyspark.sql import functions as F

    # ``df`` feeds both sides of the source (its rows and its keys) and may read the
    # history (a night's delivery_counts reads the table's previous rows): computed once,
    # into a plan of its own (see _materialized)
    rows, kept = _materialized(df)
    try:
        if narrow is not None:
            condition, flag = narrow
            # one pass gives the row count (the merge's file sizes, its emptiness) and
            # whether the condition may join the match
            found = rows.agg(
                F.count(F.lit(1)).alias("n"), F.max(F.col(flag).cast("int")).alias("flagged")
            ).first()
            n = int(found["n"]) if found is not None else 0
            narrowed = not (found is not None and found["flagged"])
            if narrowed:
                where = f"({where}) AND ({condition})" if where else condition
            done = _replace_rows(
                rows.drop(flag), path, keys, where, delete_keys, null_safe, kept is not None, n
            )
            return {**done, "narrowed": int(narrowed)}
        return _replace_rows(rows, path, keys, where, delete_keys, null_safe, kept is not None)
    finally:
        if kept == "cached":
            rows.unpersist()


def _materialized(df: DataFrame) -> tuple[DataFrame, str | None]:
    """``df`` computed once, for the few actions of one merge. On a classic session a
    local checkpoint, whose plan is one leaf, so the emptiness check, the key set and the
    MERGE do not analyze and plan the run's whole lineage again (a 1% night's
    delivery_counts merge after 1M events: 15 to 17 s and 29 to 32 CPU-s instead of 27 to
    31 s and 50 to 57). Like the MERGE's own materialized source it lives on the
    executors: an executor lost before the commit fails the run, and the re-run finishes
    it. Over Spark Connect (whose client cannot send a checkpoint of a plan that deep) and
    where checkpoints are refused: ``df`` persisted ("cached": to unpersist), or as it is
    (None: not computed, every action computes it again)."""
    if not is_remote_session(df.sparkSession):
        try:
            return df.localCheckpoint(eager=True), "checkpoint"
        except Exception as exc:  # a platform without checkpoints
            if "checkpoint" not in str(exc).lower() and "NOT_SUPPORTED" not in str(exc):
                raise
    kept = persist_where_allowed(df)
    return (kept, "cached") if kept is not None else (df, None)


#: The rows a merge writes per file on delta-spark (see :func:`_merge_partitions`).
MERGE_ROWS_PER_FILE = 1_000_000


def _merge_partitions(rows: int) -> int:
    """How many partitions a merge's source gets on delta-spark: one per
    ``MERGE_ROWS_PER_FILE`` of its ``rows`` (already computed, so counted cheaply).
    Left as it was, the source kept the partitions of the plan it came from (the replay's,
    the union's, the key set's shuffle), and the MERGE wrote a file per partition even for
    a handful of rows: a night's 39 state rows went out as five files, from ten tasks
    each opening a Parquet writer for the state's 150 leaf columns."""
    return max(1, -(-rows // MERGE_ROWS_PER_FILE))


def _replace_rows(
    df: DataFrame,
    path: TableRef,
    keys: tuple[str, ...],
    where: str | None,
    delete_keys: DataFrame | None,
    null_safe: bool,
    computed: bool = False,
    n: int | None = None,
) -> dict[str, int]:
    from pyspark.sql import functions as F

    spark = df.sparkSession
    columns = list(df.columns)
    doomed = df.select(*keys)
    if delete_keys is not None:
        doomed = doomed.unionByName(delete_keys.select(*keys))
    doomed = doomed.distinct()
    others = [c for c in columns if c not in keys]
    typed = {f.name: f.dataType for f in df.schema.fields}
    source = df.withColumn("_op", F.lit("insert")).unionByName(
        doomed.select(
            *keys,
            *(F.lit(None).cast(typed[c]).alias(c) for c in others),
            F.lit("delete").alias("_op"),
        ).select(*columns, "_op")
    )
    equal = "IS NOT DISTINCT FROM" if null_safe else "="
    # each comparison in parentheses: DataFusion (delta-rs) binds AND tighter than
    # IS NOT DISTINCT FROM
    match = " AND ".join(f"(t.{_quoted(k)} {equal} s.{_quoted(k)})" for k in keys)
    if where:
        match += f" AND ({where})"
    if isinstance(path, str) and storage_mode(spark) == EMBEDDED:
        return _replace_rows_embedded(source, path, columns, match)
    if isinstance(path, Table):
        require_delta_spark(spark, str(path))
    if computed:
        # the rows are computed: their count sizes the merge's files, and says whether
        # there is anything to merge (rows, or keys given to delete) without another pass
        n = df.count() if n is None else n
        if n == 0 and delete_keys is None:
            return {"inserted": 0, "deleted": 0}
        source = source.coalesce(_merge_partitions(n))
        if n:
            return _merge_delta_spark(source, path, columns, match, empty=False)
    # computed once for the emptiness check and the merge
    cached = persist_where_allowed(source)
    try:
        return _merge_delta_spark(cached if cached is not None else source, path, columns, match)
    finally:
        if cached is not None:
            cached.unpersist()


def _merge_delta_spark(
    source: DataFrame, path: TableRef, columns: list[str], match: str, empty: bool | None = None
) -> dict[str, int]:
    """The MERGE of ``source`` (see :func:`replace_rows`); ``empty``: whether ``source``
    has no rows, when the caller knows (else it is checked, one more pass)."""
    spark = source.sparkSession
    if empty if empty is not None else source.isEmpty():
        return {"inserted": 0, "deleted": 0}
    view = f"_pelengine_merge_{id(source):x}"
    source.createOrReplaceTempView(view)
    names = ", ".join(_quoted(c) for c in columns)
    values = ", ".join(f"s.{_quoted(c)}" for c in columns)
    try:
        row = spark.sql(
            f"MERGE INTO {_target_sql(path)} t USING {view} s ON s._op = 'delete' AND {match} "
            "WHEN MATCHED THEN DELETE "
            f"WHEN NOT MATCHED AND s._op = 'insert' THEN INSERT ({names}) VALUES ({values})"
        ).first()
    except Exception as exc:
        _raise_conflict(exc, str(path))
        raise
    finally:
        spark.catalog.dropTempView(view)
    metrics = row.asDict() if row is not None else {}
    return {
        "inserted": int(metrics.get("num_inserted_rows") or 0),
        "deleted": int(metrics.get("num_deleted_rows") or 0),
    }


def _replace_rows_embedded(
    source: DataFrame, path: str, columns: list[str], match: str
) -> dict[str, int]:
    from deltalake import DeltaTable

    from pelengine.storage.embedded import normalize_table_uri

    rows = source.toArrow()
    if rows.num_rows == 0:
        return {"inserted": 0, "deleted": 0}
    uri = normalize_table_uri(path)
    table = DeltaTable(uri)
    updates = {_quoted(c): f"s.{_quoted(c)}" for c in columns}
    metrics = (
        table.merge(
            rows,
            predicate=f"s._op = 'delete' AND {match}",
            source_alias="s",
            target_alias="t",
        )
        .when_matched_delete()
        .when_not_matched_insert(updates=updates, predicate="s._op = 'insert'")
        .execute()
    )
    return {
        "inserted": int(metrics.get("num_target_rows_inserted") or 0),
        "deleted": int(metrics.get("num_target_rows_deleted") or 0),
    }


def append_rows(df: DataFrame, path: TableRef) -> int:
    """Append ``df`` to the Delta table at ``path`` in one commit, none when ``df`` has no
    rows; returns the rows appended."""
    if isinstance(path, str) and storage_mode(df.sparkSession) == EMBEDDED:
        from deltalake import write_deltalake

        from pelengine.storage.embedded import normalize_table_uri

        rows = df.toArrow()
        if rows.num_rows:
            write_deltalake(normalize_table_uri(path), rows, mode="append")
        return rows.num_rows
    n = df.count()
    if n:
        write_table(df, path, "append")
    return n


def restore_table(spark: SparkSession, path: TableRef, version: int) -> None:
    """Put the Delta table at ``path`` back to ``version`` (one commit): what a run killed
    after writing it left past the version the last finished run names."""
    if isinstance(path, str) and storage_mode(spark) == EMBEDDED:
        from deltalake import DeltaTable

        from pelengine.storage.embedded import normalize_table_uri

        DeltaTable(normalize_table_uri(path)).restore(version)
        return
    if isinstance(path, Table):
        require_delta_spark(spark, str(path))
    spark.sql(f"RESTORE TABLE {_target_sql(path)} TO VERSION AS OF {int(version)}").collect()
