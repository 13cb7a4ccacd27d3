"""Stage 1: conform and validate the events, once.

The events DataFrame is cast to the input contract (docs/input.md), rows that are not
commands leave with a ``reason`` (``rejected_events``), rows without ``db`` take the db
of the latest ``SELECT`` before them, and ``--as-of-*`` cuts the log at a point in time.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from pelengine.schemas import (
    EVENTS_SCHEMA,
    OPTIONAL_EVENT_COLUMNS,
    REQUIRED_EVENT_COLUMNS,
)


class InputContractError(ValueError):
    """The events table does not follow the input contract (docs/input.md)."""


def conform_events(events: DataFrame) -> DataFrame:
    """Check the required columns and cast to the contract's types; add missing optional ones."""
    names = set(events.columns)
    missing = [c for c in REQUIRED_EVENT_COLUMNS if c not in names]
    if missing:
        raise InputContractError(
            f"events table lacks required column(s) {', '.join(missing)}; "
            f"it has {', '.join(sorted(names)) or 'no columns'} (see docs/input.md)"
        )
    out = events
    for f in EVENTS_SCHEMA.fields:
        if f.name in names:
            out = out.withColumn(f.name, F.col(f.name).cast(f.dataType))
        elif f.name in OPTIONAL_EVENT_COLUMNS:
            out = out.withColumn(f.name, F.lit(None).cast(f.dataType))
    return out


def tag_rejected(events: DataFrame, shared: bool) -> DataFrame:
    """``events`` with ``reason``: null for a command to replay, else why the row is
    rejected. ``shared`` (see :func:`retag_shared`): some seq is shared, so the rows
    go through the window by seq that compares whole rows; without it no row can be a
    duplicate and the window (a shuffle of every row) is left out.

    A ``seq`` shared by identical rows keeps one of them (the others are
    ``duplicate row``); a ``seq`` shared by different rows rejects them all,
    since which one the server ran cannot be known.
    """
    if not shared:
        ranked = events.withColumn("_n", F.lit(1)).withColumn("_variants", F.lit(1))
        ranked = ranked.withColumn("_rank", F.lit(1))
    else:
        signature = F.sha2(
            F.to_json(F.struct(F.col("ts_ms"), F.col("argv"), F.col("db"), F.col("client"))),
            256,
        )
        by_seq = Window.partitionBy("seq")
        ranked = (
            events.withColumn("_sig", signature)
            .withColumn("_n", F.count(F.lit(1)).over(by_seq))
            .withColumn("_variants", F.size(F.collect_set("_sig").over(by_seq)))
            .withColumn("_rank", F.row_number().over(by_seq.orderBy("_sig")))
        )
    reason = (
        F.when(F.col("seq").isNull(), F.lit("null seq"))
        .when(F.col("ts_ms").isNull(), F.lit("null ts_ms"))
        .when(F.col("argv").isNull(), F.lit("null argv"))
        .when(F.size("argv") == 0, F.lit("empty argv"))
        .when(F.col("argv")[0].isNull() | (F.col("argv")[0] == ""), F.lit("no command name"))
        .when(F.size(F.array_compact("argv")) < F.size("argv"), F.lit("null argument in argv"))
        .when(
            (F.col("_n") > 1) & (F.col("_variants") > 1),
            F.concat(F.lit("conflicting rows share seq ("), F.col("_n").cast("string"), F.lit(")")),
        )
        .when((F.col("_n") > 1) & (F.col("_rank") > 1), F.lit("duplicate row (same seq)"))
    )
    return ranked.withColumn("reason", reason).drop("_sig", "_n", "_variants", "_rank")


def shared_seqs(events: DataFrame) -> DataFrame:
    """The seqs two rows or more share (one column ``seq``; one aggregation of ``seq``)."""
    return (
        events.filter(F.col("seq").isNotNull())
        .groupBy("seq")
        .count()
        .filter("count > 1")
        .select("seq")
    )


# at most this many shared seqs are named in a filter; more go through joins
SHARED_SEQS_LISTED = 10_000


def retag_shared(tagged: DataFrame) -> DataFrame | None:
    """``tagged`` (by :func:`tag_rejected` with ``shared=False``) with the rows that share a
    seq tagged again through the window that compares whole rows, or None when no seq is
    shared. Only those rows are shuffled by seq: the others keep their tags (their window
    partition would hold one row, so the whole-log window gives them the same reason)."""
    found = shared_seqs(tagged).limit(SHARED_SEQS_LISTED + 1).collect()
    if not found:
        return None
    columns = tagged.columns
    if len(found) <= SHARED_SEQS_LISTED:  # the usual case: a few, named in a filter
        is_shared = F.coalesce(F.col("seq").isin([row["seq"] for row in found]), F.lit(False))
        others = tagged.filter(~is_shared)
        sharing = tagged.filter(is_shared).drop("reason")
    else:
        shared = shared_seqs(tagged)
        others = tagged.join(shared, "seq", "left_anti").select(*columns)
        sharing = tagged.join(shared, "seq", "left_semi").drop("reason")
    return others.unionByName(tag_rejected(sharing, shared=True).select(*columns))


def split_tagged(tagged: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(valid, rejected) of rows :func:`tag_rejected` tagged."""
    valid = tagged.filter(F.col("reason").isNull()).drop("reason")
    return valid, tagged.filter(F.col("reason").isNotNull())


def split_rejected(events: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(valid, rejected): rows that are not commands get a ``reason`` and leave the replay
    (:func:`tag_rejected`)."""
    tagged = tag_rejected(events, shared=False)
    return split_tagged(retag_shared(tagged) or tagged)


def selects_without_db(valid: DataFrame) -> bool:
    """Whether some SELECT row has no ``db``: only then do rows take their db from the
    SELECTs before them (a window over the whole log in seq order)."""
    is_select = F.upper(F.get(F.col("argv"), 0)) == "SELECT"
    return valid.filter(is_select & F.col("db").isNull()).limit(1).count() > 0


def resolve_db(
    spark: SparkSession, valid: DataFrame, initial_db: int = 0, needs: bool | None = None
) -> DataFrame:
    """Give rows without ``db`` the db of the latest SELECT before them (an AOF's way), else
    ``initial_db`` (0, or where the previous incremental run's last SELECT left it).
    ``needs``: :func:`selects_without_db` of ``valid`` when the caller knows it."""
    is_select = F.upper(F.get(F.col("argv"), 0)) == "SELECT"
    if needs is None:
        needs = selects_without_db(valid)
    if not needs:
        return valid.withColumn("db", F.coalesce(F.col("db"), F.lit(initial_db)))
    selected = F.when(is_select & F.col("db").isNull(), F.get(F.col("argv"), 1).cast("int"))
    window = Window.orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return (
        valid.withColumn("_sel", F.last(selected, ignorenulls=True).over(window))
        .withColumn("db", F.coalesce(F.col("db"), F.col("_sel"), F.lit(initial_db)))
        .drop("_sel")
    )


def last_select_db(valid: DataFrame, initial_db: int = 0) -> int:
    """The db a row without ``db`` after these rows would get (for the next run)."""
    is_select = (F.upper(F.get(F.col("argv"), 0)) == "SELECT") & F.col("db").isNull()
    row = (
        valid.filter(is_select & (F.size("argv") > 1))
        .orderBy(F.desc("seq"))
        .select(F.get(F.col("argv"), 1).cast("int").alias("db"))
        .first()
    )
    return initial_db if row is None or row["db"] is None else int(row["db"])


def cut_as_of(
    valid: DataFrame, as_of_ms: int | None, as_of_seq: int | None
) -> tuple[DataFrame, int | None]:
    """Keep the events up to the point asked; returns them and the first seq left out."""
    out = valid
    if as_of_seq is not None:
        out = out.filter(F.col("seq") <= as_of_seq)
    stop_seq: int | None = None
    if as_of_ms is not None:
        first_late = out.filter(F.col("ts_ms") > as_of_ms).agg(F.min("seq")).first()
        stop_seq = first_late[0] if first_late is not None else None
        if stop_seq is not None:
            out = out.filter(F.col("seq") < stop_seq)
    return out, stop_seq
