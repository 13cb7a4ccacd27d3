"""The past, read from the output tables without replaying: what was pending when.

``pel_history`` holds one row per *version* of a pending entry (db, key, group,
id): the consumer, delivery time and count and ``entry_exists`` it showed from
``valid_from_seq``/``valid_from_ms`` (the command that set them) until
``valid_to_seq``/``valid_to_ms`` (the command that changed them or removed the
entry; null while the version is current). So the PEL after the command at
seq N is the versions with ``valid_from_seq <= N`` and (``valid_to_seq`` null
or ``> N``): exactly the ``pel`` table of ``reconstruct --as-of-seq N``, idle
times aside (:func:`pel_as_of`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pelengine import storage
from pelengine.schemas import TABLE_COLUMNS, table_schema


def pel_as_of(
    pel_history: DataFrame,
    *,
    as_of_seq: int | None = None,
    as_of_ms: int | None = None,
    run_as_of: tuple[int | None, int | None],
) -> DataFrame:
    """The PEL at a past moment, as rows of the ``pel`` table, from ``pel_history``.

    ``as_of_seq=N``: the PEL after the command at seq N (the ``pel`` table of a
    replay of the events with ``seq <= N``).

    ``as_of_ms=M``: the versions valid at time M by their ``valid_from_ms`` /
    ``valid_to_ms`` (started at or before M, not ended at or before M). When the
    log's ``ts_ms`` never goes backwards this is the ``pel`` table of
    ``reconstruct --as-of-ms M`` (which stops before the first event whose
    ``ts_ms`` is after M). Where ``ts_ms`` does go backwards the two differ
    around the jump; so do commands of one MULTI/EXEC under the 7.2+ profile,
    whose versions carry the transaction's time.

    Both: the earlier of the two moments, as ``reconstruct`` with both options.

    ``idle_ms`` is ``as_of_ms - delivery_time_ms``. Given only ``as_of_seq``,
    ``as_of_ms`` is the latest time the history knows at that seq (the run's
    ``as_of_ms`` from its last seq on): pass ``as_of_ms`` too to measure idle
    times against a time of your choice. Given only ``as_of_ms``, ``as_of_seq``
    is the last seq the history knows at that time (the run's from its
    ``as_of_ms`` on). A moment after the run's end gives the PEL at its end.
    ``run_as_of``: the run's own ``(as_of_seq, as_of_ms)`` (its ``_runs`` row; the
    history tables carry no ``as_of_*`` since output contract version 2), needed when
    only one coordinate is given (a run without events has none: its PEL is empty).
    """
    if as_of_seq is None and as_of_ms is None:
        raise ValueError("pel_as_of needs as_of_seq, as_of_ms or both")
    started: list[Column] = []
    ended: list[Column] = []
    if as_of_seq is not None:
        started.append(F.col("valid_from_seq") <= F.lit(as_of_seq))
        ended.append(F.col("valid_to_seq") <= F.lit(as_of_seq))
    if as_of_ms is not None:
        started.append(F.col("valid_from_ms") <= F.lit(as_of_ms))
        ended.append(F.col("valid_to_ms") <= F.lit(as_of_ms))
    # started by both moments; not ended by both (ended by the earlier one)
    valid = _all(started) & (F.col("valid_to_seq").isNull() | ~_all(ended))
    versions = pel_history.filter(valid)
    moment = _moment(pel_history, as_of_seq, as_of_ms, run_as_of)
    if moment is not None:
        versions = versions.crossJoin(moment)
    ms = F.lit(as_of_ms).cast("long") if as_of_ms is not None else F.col("_as_of_ms")
    seq = F.lit(as_of_seq).cast("long") if as_of_seq is not None else F.col("_as_of_seq")
    if as_of_seq is not None and moment is not None:
        seq = F.least(seq, F.col("_run_seq"))  # as reconstruct: not past the run's last seq
    columns = {
        "idle_ms": ms - F.col("delivery_time_ms"),
        "as_of_ms": ms,
        "as_of_seq": seq,
    }
    schema = table_schema("pel")
    return versions.select(
        *(
            (columns[c] if c in columns else F.col(c)).cast(schema[c].dataType).alias(c)
            for c in TABLE_COLUMNS["pel"]
        )
    )


def _all(conditions: list[Column]) -> Column:
    out = conditions[0]
    for c in conditions[1:]:
        out = out & c
    return out


def _moment(
    history: DataFrame,
    as_of_seq: int | None,
    as_of_ms: int | None,
    run_as_of: tuple[int | None, int | None],
) -> DataFrame | None:
    """One row with what the history knows of the coordinate not given (``_as_of_ms`` or
    ``_as_of_seq``) and the run's last seq (``_run_seq``); None when both are given."""
    if as_of_seq is not None and as_of_ms is not None:
        return None
    run = {"seq": F.lit(run_as_of[0]).cast("long"), "ms": F.lit(run_as_of[1]).cast("long")}
    # the coordinate given, its value, and the one to find
    given, at, wanted = (
        ("seq", as_of_seq, "ms") if as_of_seq is not None else ("ms", as_of_ms, "seq")
    )
    cut = F.lit(at)
    known = F.greatest(
        F.max(F.when(F.col(f"valid_from_{given}") <= cut, F.col(f"valid_from_{wanted}"))),
        F.max(F.when(F.col(f"valid_to_{given}") <= cut, F.col(f"valid_to_{wanted}"))),
    )
    return history.agg(
        F.when(cut >= run[given], run[wanted]).otherwise(known).alias(f"_as_of_{wanted}"),
        run["seq"].alias("_run_seq"),
    )


def describe_pel_as_of(
    spark: SparkSession,
    out_path: str | storage.Output,
    *,
    as_of_seq: int | None = None,
    as_of_ms: int | None = None,
    key: str | None = None,
    group: str | None = None,
    limit: int = 20,
) -> str:
    """The PEL at a past moment from ``out_path/pel_history``, as a short readable table."""
    path = storage.table_path(out_path, "pel_history")
    if not storage.table_exists(spark, path):
        raise FileNotFoundError(
            f"no pel_history table under {out_path} (written by reconstruct from this "
            "version on: run reconstruct again)"
        )
    run = storage.newest_run(spark, out_path) or {}  # the last finished run's
    version = (run.get("tables") or {}).get("pel_history")
    pel = pel_as_of(
        storage.read_table(spark, path, version),
        as_of_seq=as_of_seq,
        as_of_ms=as_of_ms,
        run_as_of=(run.get("as_of_seq"), run.get("as_of_ms")),
    )
    scope = []
    if key is not None:
        pel = pel.filter(F.col("key") == key)
        scope.append(f"key {key}")
    if group is not None:
        pel = pel.filter(F.col("group") == group)
        scope.append(f"group {group}")
    cached = storage.persist_where_allowed(pel)  # None: serverless refuses caching
    pel = cached if cached is not None else pel
    try:
        stats = pel.agg(
            F.count(F.lit(1)),
            F.count(F.when(~F.col("entry_exists"), 1)),
            F.max("as_of_seq"),
            F.max("as_of_ms"),
        ).first()
        assert stats is not None
        total, dangling, seen_seq, seen_ms = stats
        rows = (
            pel.orderBy("db", "key", "group", "id_ms", "id_seq", "id")
            .select(
                "db",
                "key",
                "group",
                "id",
                "consumer",
                "delivery_count",
                "delivery_time_ms",
                "idle_ms",
                "entry_exists",
            )
            .limit(limit)
            .collect()
        )
    finally:
        if cached is not None:
            cached.unpersist()
    if total:
        moment = f"seq {seen_seq} / {seen_ms} ms"
    else:
        asked = [f"seq {as_of_seq}"] if as_of_seq is not None else []
        asked += [f"{as_of_ms} ms"] if as_of_ms is not None else []
        moment = " / ".join(asked)
    where = f" ({', '.join(scope)})" if scope else ""
    lines = [
        f"PEL as of {moment}{where}: {total} pending entries"
        f" ({dangling} dangling: deleted from the stream while pending)"
    ]
    if rows:
        lines.append(
            f"  {'db':>3} {'key':<16} {'group':<12} {'id':<22} {'consumer':<14} "
            f"{'count':>5} {'delivered_ms':>14} {'idle_ms':>10} exists"
        )
        for r in rows:
            lines.append(
                f"  {r['db']:>3} {r['key']:<16.16} {r['group']:<12.12} {r['id']:<22.22} "
                f"{r['consumer'] or '-':<14.14} {r['delivery_count']:>5} "
                f"{r['delivery_time_ms']:>14} {r['idle_ms']:>10} "
                f"{'yes' if r['entry_exists'] else 'no'}"
            )
        if total > len(rows):
            lines.append(f"  ... {total - len(rows)} more (--limit)")
    return "\n".join(lines)
