"""Stage 5: assemble. Every output table is selected from the one replay output;
``delivery_counts`` merges the delivery segments the replay emitted; incremental runs
carry the rows of the families they did not replay; the outcome counts of the report.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pelengine.model.commands import LOAD_COMMAND
from pelengine.model.delivery import PRIOR_SEGMENT_N, SEGMENT_COLUMNS
from pelengine.pipeline.carry import Carry
from pelengine.pipeline.replay import replayed_table
from pelengine.schemas import (
    TABLE_COLUMNS,
)


def merge_delivery_segments(
    segments: DataFrame, incarnations: DataFrame, as_of_ms: int, as_of_seq: int
) -> DataFrame:
    """``delivery_counts`` from the delivery segments the replay emitted and the final
    place of each group incarnation: the rules of
    :func:`pelengine.model.delivery.merge_delivery_segments`, in SQL.

    Per (db, group, group_created_seq, id): deliveries summed, owner names united,
    the first/last delivery time of the first/last segment (``segment_n`` order) that
    has one, count, status and closed time of the last segment; the key is where the
    incarnation ended up (a RENAME moves its rows), else the last segment's."""
    order = F.col("segment_n")

    def ordered_if_set(name: str) -> Any:
        return F.when(F.col(name).isNotNull(), order)

    identity = ["db", "group", "group_created_seq"]
    merged = segments.groupBy(*identity, "id", "id_ms", "id_seq").agg(
        F.sum("deliveries").alias("deliveries"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("owner_names")))).alias(
            "owner_names"
        ),
        F.min_by("first_delivery_ms", ordered_if_set("first_delivery_ms")).alias(
            "first_delivery_ms"
        ),
        F.max_by("last_delivery_ms", ordered_if_set("last_delivery_ms")).alias("last_delivery_ms"),
        F.max_by(F.struct("key", "delivery_count", "status", "closed_ms"), order).alias("_last"),
    )
    # one row per group ever created: small next to the segments (no second shuffle)
    final = F.broadcast(incarnations.select(*identity, F.col("key").alias("_final_key")))
    out = merged.join(final, identity, "left").select(
        "db",
        F.coalesce(F.col("_final_key"), F.col("_last.key")).alias("key"),
        "group",
        "id",
        "id_ms",
        "id_seq",
        F.col("_last.delivery_count").alias("delivery_count"),
        F.col("deliveries").cast("long").alias("deliveries"),
        F.size("owner_names").cast("long").alias("owners"),
        "first_delivery_ms",
        "last_delivery_ms",
        F.col("_last.status").alias("status"),
        F.col("_last.closed_ms").alias("closed_ms"),
        "owner_names",
        "group_created_seq",
        F.lit(as_of_ms).cast("long").alias("as_of_ms"),
        F.lit(as_of_seq).cast("long").alias("as_of_seq"),
    )
    return out.select(*TABLE_COLUMNS["delivery_counts"])


def _prior_segments(
    old: DataFrame, family_of: dict[tuple[int, str], str], replayed: DataFrame
) -> DataFrame:
    """The previous ``delivery_counts`` rows of the families this run replays, as
    segments that come before any of this run's."""
    rows = _family_column(old, family_of).join(replayed, ["db", "family"], "left_semi")
    return rows.select(
        *(c for c in SEGMENT_COLUMNS if c != "segment_n"),
        F.lit(PRIOR_SEGMENT_N).cast("long").alias("segment_n"),
    )


def _rename_families(states: DataFrame, renamed: dict[tuple[int, str], str]) -> DataFrame:
    """Saved state rows under the names of the families they were merged into."""
    spark = states.sparkSession
    moves = spark.createDataFrame(
        [(db, old, new) for (db, old), new in renamed.items()],
        "db int, family string, _new string",
    )
    return (
        states.join(F.broadcast(moves), ["db", "family"], "left")
        .withColumn("family", F.coalesce(F.col("_new"), F.col("family")))
        .drop("_new")
    )


def _family_column(df: DataFrame, family_of: dict[tuple[int, str], str]) -> DataFrame:
    """``df`` (with db, key) plus ``family``: its family (the key itself unless tied)."""
    spark = df.sparkSession
    if not family_of:
        return df.withColumn("family", F.col("key"))
    linked = spark.createDataFrame(
        [(db, key, fam) for (db, key), fam in family_of.items()],
        "db int, key string, _fam string",
    )
    return (
        df.join(F.broadcast(linked), ["db", "key"], "left")
        .withColumn("family", F.coalesce(F.col("_fam"), F.col("key")))
        .drop("_fam")
    )


def _carry_tables(
    new: dict[str, DataFrame],
    carry: Carry,
    family_of: dict[tuple[int, str], str],
    replayed: DataFrame,
    as_of_ms: int | None,
    as_of_seq: int | None,
) -> dict[str, DataFrame]:
    """Each output table of an incremental run: the replayed families' new rows, and the
    previous rows of every other family; history tables keep what earlier runs wrote
    (up to ``high_seq``: a row past it can only be from an interrupted run, which this
    run writes again). Every kept row gets this run's ``as_of`` (and ``idle_ms``), as a
    full run would give it."""
    out: dict[str, DataFrame] = {}
    for name, fresh in new.items():
        old = carry.previous.get(name)
        if old is None:
            out[name] = fresh
            continue
        cols = list(fresh.columns)
        if name == "ownership_changes":
            kept = old.filter(F.col("seq") <= carry.high_seq)
        elif name == "pel_history":
            tagged = _family_column(old, family_of)
            open_here = F.col("valid_to_seq").isNull() & F.col("_hit")
            kept = (
                tagged.join(replayed.withColumn("_hit", F.lit(True)), ["db", "family"], "left")
                .withColumn("_hit", F.coalesce(F.col("_hit"), F.lit(False)))
                .filter(
                    ~open_here
                    & (F.col("valid_to_seq").isNull() | (F.col("valid_to_seq") <= carry.high_seq))
                )
            )
        else:
            kept = _family_column(old, family_of).join(replayed, ["db", "family"], "left_anti")
        if "as_of_ms" in cols:
            kept = kept.withColumn("as_of_ms", F.lit(as_of_ms).cast("long")).withColumn(
                "as_of_seq", F.lit(as_of_seq).cast("long")
            )
        if "idle_ms" in cols:
            kept = kept.withColumn(
                "idle_ms", F.lit(as_of_ms).cast("long") - F.col("delivery_time_ms")
            )
        out[name] = fresh.unionByName(kept.select(*cols))
    return out


def starting_state(routed: DataFrame) -> list[dict[str, Any]]:
    """Where the replay's starting state came from: the snapshot rows (``PELENGINE.LOAD``,
    written by ``ingest-rdb`` or ``ingest-aof`` from an RDB) per source; empty: none, the
    log starts from an empty server."""
    loads = (
        routed.filter(F.col("command") == LOAD_COMMAND)
        .groupBy("source")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.min("seq").alias("first_seq"),
            F.max("seq").alias("last_seq"),
            F.min("ts_ms").alias("snapshot_ms"),
        )
        .orderBy("first_seq")
    )
    return [row.asDict() for row in loads.collect()]


def _count_outcomes(routed: DataFrame, replayed: DataFrame, report: dict[str, Any]) -> None:
    """Fill the report's applied / ignored / failed counts from the routed and replayed rows."""
    events = report["events"]
    by_kind: dict[str, int] = {"applied": 0, "ignored": 0, "error": 0}
    errors: dict[str, int] = {}
    by_command: dict[str, int] = {}
    notes: dict[str, int] = {}
    for row in (
        routed.filter(F.col("scope") == "none")
        .groupBy("command", "pre_kind", "pre_error")
        .count()
        .collect()
    ):
        by_kind[row["pre_kind"]] = by_kind.get(row["pre_kind"], 0) + row["count"]
        by_command[row["command"]] = by_command.get(row["command"], 0) + row["count"]
        if row["pre_error"]:
            errors[row["pre_error"]] = errors.get(row["pre_error"], 0) + row["count"]
    stats = (
        replayed_table(replayed, "stats")
        .groupBy("stat_command", "stat_kind", "stat_error")
        .agg(F.sum("stat_count").alias("n"))
    )
    for row in stats.collect():
        kind, n = row["stat_kind"], int(row["n"])
        if kind == "seen":
            by_command[row["stat_command"]] = by_command.get(row["stat_command"], 0) + n
        elif kind == "note":
            notes[row["stat_error"]] = notes.get(row["stat_error"], 0) + n
        else:
            by_kind[kind] = by_kind.get(kind, 0) + n
            if kind == "error":
                errors[row["stat_error"]] = errors.get(row["stat_error"], 0) + n
    # A fan-out event is counted once: an error anywhere wins, then applied, then ignored.
    rank = F.when(F.col("stat_kind") == "error", 3).when(F.col("stat_kind") == "applied", 2)
    # FLUSHDB/FLUSHALL rows also carry the outcome they have alone (a db with no
    # stream: ignored), so that a flush reaching no family is still counted once.
    alone = routed.filter(F.col("scope").isin("db", "all")).select(
        "seq",
        F.col("command").alias("stat_command"),
        F.col("pre_kind").alias("stat_kind"),
        F.col("pre_error").alias("stat_error"),
    )
    outcomes = (
        replayed_table(replayed, "outcome")
        .select("seq", "stat_command", "stat_kind", "stat_error")
        .unionByName(alone)
        .withColumn("_rank", F.coalesce(rank, F.lit(1)))
        .groupBy("seq")
        .agg(F.max_by(F.struct("stat_command", "stat_kind", "stat_error"), "_rank").alias("o"))
        .groupBy("o.stat_command", "o.stat_kind", "o.stat_error")
        .count()
    )
    for row in outcomes.collect():
        kind, n = row["stat_kind"], row["count"]
        by_kind[kind] = by_kind.get(kind, 0) + n
        by_command[row["stat_command"]] = by_command.get(row["stat_command"], 0) + n
        if kind == "error":
            errors[row["stat_error"]] = errors.get(row["stat_error"], 0) + n
    events["applied"] = by_kind.get("applied", 0)
    events["ignored"] = by_kind.get("ignored", 0)
    events["failed"] = by_kind.get("error", 0)
    events["failed_by_kind"] = dict(sorted(errors.items()))
    events["by_command"] = dict(sorted(by_command.items()))
    report["notes"] = notes
