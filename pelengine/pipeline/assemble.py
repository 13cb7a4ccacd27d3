"""Stage 5: assemble. Every output table is selected from the one replay output;
``delivery_counts`` merges the delivery segments the replay emitted; the outcome counts
of the report. (Incremental runs carry the rows of the families they did not replay:
:mod:`pelengine.pipeline.carry`.)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pelengine.engine.outcomes import count_outcomes, starting_state
from pelengine.model.commands import LOAD_COMMAND
from pelengine.pipeline.carry import PRIOR_CLOSED
from pelengine.pipeline.replay import replayed_table
from pelengine.schemas import (
    TABLE_COLUMNS,
)


def output_table(name: str, rows: DataFrame) -> DataFrame:
    """Output table ``name`` from the replay's rows of it: its columns, in order, with
    those no engine emits derived (``is_current`` of pel_history: the version is open)."""
    if name == "pel_history":
        rows = rows.withColumn("is_current", F.col("valid_to_seq").isNull())
    return rows.select(*TABLE_COLUMNS[name])


def merge_delivery_segments(segments: DataFrame, incarnations: DataFrame) -> DataFrame:
    """``delivery_counts`` from the delivery segments the replay emitted and the final
    place of each group incarnation: the rules of
    :func:`pelengine.model.delivery.merge_delivery_segments`, in SQL.

    Per (db, group, group_created_seq, id): deliveries summed, owner names united,
    the first/last delivery time of the first/last segment (``segment_n`` order) that
    has one, count, status and closed time of the last segment; the key is where the
    incarnation ended up (a RENAME moves its rows), else the last segment's;
    ``changed_seq``/``changed_ms`` the latest change among the segments' and the
    incarnation's last move (a RENAME changes every row of it)."""
    order = F.col("segment_n")

    def ordered_if_set(name: str) -> Any:
        return F.when(F.col(name).isNotNull(), order)

    identity = ["db", "group", "group_created_seq"]
    # a night's previous rows say whether the row they are is closed (carry.PRIOR_CLOSED):
    # kept, as a column of the night's rows, for its merge
    flag = [c for c in segments.columns if c == PRIOR_CLOSED]
    merged = segments.groupBy(*identity, "id", "id_ms", "id_seq").agg(
        *(F.max(F.coalesce(F.col(c), F.lit(False))).alias(c) for c in flag),
        F.sum("deliveries").alias("deliveries"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("owner_names")))).alias(
            "owner_names"
        ),
        F.min_by("first_delivery_ms", ordered_if_set("first_delivery_ms")).alias(
            "first_delivery_ms"
        ),
        F.max_by("last_delivery_ms", ordered_if_set("last_delivery_ms")).alias("last_delivery_ms"),
        F.max_by(F.struct("key", "delivery_count", "status", "closed_ms"), order).alias("_last"),
        F.max_by(
            F.struct("changed_seq", "changed_ms"),
            F.when(F.col("changed_seq").isNotNull(), F.col("changed_seq")),
        ).alias("_changed"),
    )
    # one row per group ever created: small next to the segments (no second shuffle)
    final = F.broadcast(
        incarnations.select(
            *identity, F.col("key").alias("_final_key"), F.col("moved_seq"), F.col("moved_ms")
        )
    )
    moved_later = F.col("moved_seq").isNotNull() & (
        F.col("_changed.changed_seq").isNull()
        | (F.col("moved_seq") > F.col("_changed.changed_seq"))
    )
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
        F.when(moved_later, F.col("moved_seq"))
        .otherwise(F.col("_changed.changed_seq"))
        .alias("changed_seq"),
        F.when(moved_later, F.col("moved_ms"))
        .otherwise(F.col("_changed.changed_ms"))
        .alias("changed_ms"),
        *flag,
    )
    return out.select(*TABLE_COLUMNS["delivery_counts"], *flag)


#: the replay's tables :func:`merged_in_partitions` reads
MERGED_FROM = ("delivery_segments", "group_incarnations")
#: the most rows of one batch :func:`merge_partition` returns
MERGED_BATCH_ROWS = 65_536


def merged_in_partitions(replayed: DataFrame) -> DataFrame:
    """``delivery_counts`` of a full run straight from the replay's packed output
    (``replay_stage``), partition by partition, with no shuffle: every segment of an entry
    and the row of its group's incarnation come out of the replay of one family, so out of
    one partition of the replay's output; each partition merges its own by the model's
    rules (:func:`merge_partition`). Not for a night (its previous rows join the segments
    from elsewhere) nor for families split by group (their units replay apart):
    :func:`merge_delivery_segments` merges those."""
    from pelengine.schemas import table_schema

    packed = replayed.filter(F.col("table").isin(*MERGED_FROM))
    return packed.mapInArrow(merge_partition, table_schema("delivery_counts"))


def merge_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``delivery_counts`` rows of one partition of the replay's packed output: its
    delivery segments and group incarnations unpacked, then merged as the local runner
    merges them (``local.replay.delivery_counts``, proven equal to
    :func:`merge_delivery_segments`)."""
    from pelengine.engine.udf import _arrow_schema, unpack_payloads
    from pelengine.local.replay import delivery_counts
    from pelengine.schemas import REPLAY_TABLE_SCHEMAS, table_schema

    schemas = {name: _arrow_schema(REPLAY_TABLE_SCHEMAS[name]) for name in MERGED_FROM}
    tables: dict[str, list[pa.RecordBatch]] = {name: [] for name in MERGED_FROM}
    for batch in batches:
        names = batch.column("table").to_pylist()
        payloads = batch.column("payload")
        for name in MERGED_FROM:
            at = [i for i, n in enumerate(names) if n == name]
            if at:
                taken = payloads.take(pa.array(at, pa.int64()))
                tables[name].extend(unpack_payloads(taken, schemas[name]))
    if not tables["delivery_segments"]:
        return
    merged = delivery_counts(tables, _arrow_schema(table_schema("delivery_counts")))
    yield from merged.to_batches(max_chunksize=MERGED_BATCH_ROWS)


@dataclass(frozen=True)
class ReplayFacts:
    """What :func:`report_facts` gives back besides the report's counts: the families the
    replay kept a state for (a night's), and the most bytes of packed delivery segments
    one partition of the replay's output holds (what :func:`merged_in_partitions` would
    hold in one Python worker)."""

    families: list[tuple[int, str]]
    segment_bytes: int


#: the most bytes of packed delivery segments one partition may hold for
#: :func:`merged_in_partitions` (its Python worker holds them, about three times over, while
#: it merges); with more, the segments are merged in SQL (the JVM streams and spills)
MERGE_IN_PARTITION_BYTES = 128 * 1024 * 1024


def report_facts(
    routed: DataFrame, replayed: DataFrame, report: dict[str, Any], *, families: bool = False
) -> ReplayFacts:
    """The report's outcome counts (:func:`engine.outcomes.count_outcomes`) and its
    ``starting_state`` (:func:`engine.outcomes.starting_state`), from one Spark action: the
    four small aggregates they read, unioned under a ``part`` column and collected together.
    With ``families`` (a night) the same action also gives the ``(db, family)`` of every
    family the replay kept a state for (the families it replayed), returned; else none.
    It also measures the packed delivery segments of each partition (their bytes, the
    largest returned)."""
    pid = F.spark_partition_id()
    segment_bytes = (
        replayed.filter(F.col("table") == "delivery_segments")
        .groupBy(pid.alias("pid"))
        .agg(F.sum(F.length("payload")).alias("bytes"))
        .agg(F.max("bytes").alias("n"))
    )
    parts = [
        _aggregate_part("pre", _pre_outcomes(routed)),
        _aggregate_part("stats", _replay_stats(replayed)),
        _aggregate_part("outcome", _fan_out_outcomes(routed, replayed)),
        _aggregate_part("load", _loads(routed)),
        _aggregate_part("segment_bytes", segment_bytes),
    ]
    if families:
        parts.append(_aggregate_part("family", replayed_table(replayed, "state")))
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    rows: dict[str, list[Any]] = {
        "pre": [],
        "stats": [],
        "outcome": [],
        "load": [],
        "family": [],
        "segment_bytes": [],
    }
    for row in union.collect():
        rows[row["part"]].append(row)
    count_outcomes(rows["pre"], rows["stats"], rows["outcome"], report)
    report["starting_state"] = starting_state(rows["load"])
    return ReplayFacts(
        families=[(int(r["db"]), str(r["family"])) for r in rows["family"]],
        segment_bytes=max((int(r["n"] or 0) for r in rows["segment_bytes"]), default=0),
    )


#: the columns every part of :func:`report_facts`'s union has (null where a part has none)
_FACT_COLUMNS = {
    "command": "string",
    "kind": "string",
    "error": "string",
    "n": "long",
    "source": "string",
    "first_seq": "long",
    "last_seq": "long",
    "snapshot_ms": "long",
    "db": "int",
    "family": "string",
}


def _aggregate_part(name: str, df: DataFrame) -> DataFrame:
    return df.select(
        F.lit(name).alias("part"),
        *(
            (F.col(c) if c in df.columns else F.lit(None)).cast(t).alias(c)
            for c, t in _FACT_COLUMNS.items()
        ),
    )


def _pre_outcomes(routed: DataFrame) -> DataFrame:
    """Events that reach no stream, by the outcome they have on their own."""
    return (
        routed.filter(F.col("scope") == "none")
        .groupBy(
            F.col("command"), F.col("pre_kind").alias("kind"), F.col("pre_error").alias("error")
        )
        .agg(F.count(F.lit(1)).alias("n"))
    )


def _replay_stats(replayed: DataFrame) -> DataFrame:
    """The replay's counters (commands seen, outcomes, notes), summed."""
    return (
        replayed_table(replayed, "stats")
        .groupBy(
            F.col("stat_command").alias("command"),
            F.col("stat_kind").alias("kind"),
            F.col("stat_error").alias("error"),
        )
        .agg(F.sum("stat_count").alias("n"))
    )


def _fan_out_outcomes(routed: DataFrame, replayed: DataFrame) -> DataFrame:
    """Events replayed by several families, each counted once: an error anywhere wins,
    then applied, then ignored. FLUSHDB/FLUSHALL rows also carry the outcome they have
    alone (a db with no stream: ignored), so that a flush reaching no family is still
    counted once."""
    rank = F.when(F.col("stat_kind") == "error", 3).when(F.col("stat_kind") == "applied", 2)
    alone = routed.filter(F.col("scope").isin("db", "all")).select(
        "seq",
        F.col("command").alias("stat_command"),
        F.col("pre_kind").alias("stat_kind"),
        F.col("pre_error").alias("stat_error"),
    )
    return (
        replayed_table(replayed, "outcome")
        .select("seq", "stat_command", "stat_kind", "stat_error")
        .unionByName(alone)
        .withColumn("_rank", F.coalesce(rank, F.lit(1)))
        .groupBy("seq")
        .agg(F.max_by(F.struct("stat_command", "stat_kind", "stat_error"), "_rank").alias("o"))
        .groupBy(
            F.col("o.stat_command").alias("command"),
            F.col("o.stat_kind").alias("kind"),
            F.col("o.stat_error").alias("error"),
        )
        .agg(F.count(F.lit(1)).alias("n"))
    )


def _loads(routed: DataFrame) -> DataFrame:
    """The snapshot rows (``PELENGINE.LOAD``) per source."""
    return (
        routed.filter(F.col("command") == LOAD_COMMAND)
        .groupBy("source")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.min("seq").alias("first_seq"),
            F.max("seq").alias("last_seq"),
            F.min("ts_ms").alias("snapshot_ms"),
        )
    )
