"""Stage 3: route. Every command gets the families of stream keys it touches (keys tied
by RENAME or a multi-stream XREADGROUP share one family; FLUSHDB/FLUSHALL reach every
family of their db / of all dbs), blocked readers get activity markers, and a family
with many consumer groups may be dealt to several replay units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    StringType,
    StructField,
    StructType,
)

from pelengine.engine.udf import links_batches, make_router
from pelengine.model.routing import linked_keys, tie_families
from pelengine.pipeline.units import EXEC_UNIT
from pelengine.settings import Settings


def family_map(
    spark: SparkSession,
    valid: DataFrame,
    prior: dict[tuple[int, str], str] | None = None,
    saved: set[tuple[int, str]] | None = None,
    renamed: dict[tuple[int, str], str] | None = None,
    links: list[tuple[int, list[str]]] | None = None,
) -> dict[tuple[int, str], str]:
    """Keys tied together by RENAME or multi-stream XREADGROUP, mapped to one family name.

    ``prior``: the families of a previous run (incremental), ``saved``: the (db, family)
    that have saved state. Saved families keep their names; when these rows tie several
    of them together, the merged family takes the smallest name and ``renamed`` gets
    ``(db, old name) -> new name`` for the others (their saved models are merged).
    ``links``: the ties of ``valid`` as (db, keys) when the caller found them already (in
    an action of its own: :func:`link_candidates`); else :func:`family_links` collects them.
    """
    if links is None:
        links = [(row["db"], row["links"]) for row in family_links(valid).collect()]
    return tie_families([[(db, k) for k in keys] for db, keys in links], prior, saved, renamed)


def family_links(valid: DataFrame) -> DataFrame:
    """The keys each RENAME or multi-stream XREADGROUP of ``valid`` ties together: one row
    (``db`` INT, ``links`` ARRAY<STRING>, sorted) per distinct tie."""
    return (
        _tie_candidates(valid)
        .mapInArrow(links_batches, "db int, links array<string>")
        .select("db", F.array_sort("links").alias("links"))
        .distinct()
    )


#: at most this many distinct candidate rows of :func:`link_candidates` are brought to the
#: driver (with more, :func:`family_map` asks :func:`family_links` of the rows)
LINK_ROWS_COLLECTED = 100_000


def link_candidates(valid: DataFrame) -> DataFrame:
    """The rows of ``valid`` that may tie keys (RENAME, multi-stream XREADGROUP), distinct,
    each with the rows it stands for: (``db``, ``argv``, ``n``), small enough for the driver
    to find their ties (:func:`counted_links`) without a Python worker."""
    return _tie_candidates(valid).groupBy("db", "argv").agg(F.count(F.lit(1)).alias("n"))


def counted_links(rows: list[dict[str, Any]]) -> list[tuple[int, list[str], int]]:
    """The ties of :func:`link_candidates`'s rows: (db, keys, rows that make it)."""
    out = []
    for row in rows:
        keys = linked_keys(row["argv"])
        if keys:
            out.append((row["db"], keys, row["n"]))
    return out


def _tie_candidates(valid: DataFrame) -> DataFrame:
    """(``db``, ``argv``) of the rows that may tie keys: every RENAME, every XREADGROUP
    naming two streams or more (and a few more)."""
    name = F.upper(F.get(F.col("argv"), 0))
    # A read ties keys only when it names two streams or more: two keys and two IDs
    # after STREAMS. Counted from the first STREAMS argument, a read with fewer than 4
    # arguments after it names one stream (or none); only the others (and any read
    # whose group or consumer is called "streams") go to the exact parser.
    streams_at = F.array_position(F.transform("argv", lambda a: F.upper(a)), "STREAMS")
    ties = name.isin("RENAME", "RENAMENX") | (
        (name == "XREADGROUP") & (F.size("argv") - streams_at >= 4)
    )
    return valid.filter(ties).select("db", "argv")


def links_less(
    counted: list[tuple[int, list[str], int]],
    gone: list[tuple[int, list[str]]],
    added: list[tuple[int, list[str]]],
) -> list[tuple[int, list[str]]]:
    """The ties of :func:`family_links` (``counted``: each with the rows that made it) once
    the rows ``gone`` (db, argv) are taken out and the rows ``added`` put in: the ties of
    the rows as they end up, when a few rows change after the links were counted."""
    count: dict[tuple[int, frozenset[str]], int] = {}
    for db, keys, n in counted:
        tie = (db, frozenset(keys))
        count[tie] = count.get(tie, 0) + n
    for rows, step in ((gone, -1), (added, 1)):
        for db, argv in rows:
            keys = linked_keys(argv)
            if keys:
                tie = (db, frozenset(keys))
                count[tie] = count.get(tie, 0) + step
    return [(db, sorted(keys)) for (db, keys), n in count.items() if n > 0]


def route_events(
    spark: SparkSession,
    valid: DataFrame,
    settings: Settings,
    families: dict[tuple[int, str], str] | None = None,
    engine: str = "python",
) -> DataFrame:
    """Each event with its command name, scope, families and (when it reaches no
    stream) the outcome it has on its own; ``engine``: the router's (as the replay's)."""
    if families is None:
        families = family_map(spark, valid)
    out_schema = StructType(
        [
            *valid.schema.fields,
            StructField("command", StringType()),
            StructField("scope", StringType()),
            StructField("families", ArrayType(StringType())),
            StructField("pre_kind", StringType()),
            StructField("pre_error", StringType()),
            StructField("group", StringType()),
            StructField("group_only", BooleanType()),
        ]
    )
    return valid.mapInArrow(make_router(settings, families, engine=engine), out_schema)


@dataclass(frozen=True)
class RoutedFacts:
    """What the stages after routing ask of the routed rows: the (client, db, family) of
    every blocking XREADGROUP (``waits``), whether one is there at all (``blocking``), and
    whether a command reaches a whole db or every db (``flush``)."""

    waits: list[tuple[str, int, str]]
    blocking: bool
    flush: bool


def routed_facts(routed: DataFrame) -> RoutedFacts:
    """The :class:`RoutedFacts` of ``routed``, from one Spark action."""

    def whether(part: str, rows: DataFrame) -> DataFrame:  # one row if ``rows`` has any
        nothing = F.lit(None).cast(StringType())
        return rows.limit(1).select(
            F.lit(part).alias("part"),
            nothing.alias("client"),
            F.lit(None).cast("int").alias("m_db"),
            nothing.alias("m_family"),
        )

    waits = blocking_waits(routed).select(F.lit("wait").alias("part"), "client", "m_db", "m_family")
    rows = (
        waits.unionByName(whether("block", _blocking_reads(routed)))
        .unionByName(whether("flush", _flushes(routed)))
        .collect()
    )
    return RoutedFacts(
        waits=[(r["client"], r["m_db"], r["m_family"]) for r in rows if r["part"] == "wait"],
        blocking=any(r["part"] == "block" for r in rows),
        flush=any(r["part"] == "flush" for r in rows),
    )


def _flushes(routed: DataFrame) -> DataFrame:
    return routed.filter(F.col("scope").isin("db", "all"))


def _blocking_reads(routed: DataFrame) -> DataFrame:
    blocks = F.exists("argv", lambda a: F.upper(a) == "BLOCK")
    return routed.filter((F.col("command") == "XREADGROUP") & F.col("client").isNotNull() & blocks)


def blocking_waits(routed: DataFrame) -> DataFrame:
    """(client, m_db, m_family) of every blocking XREADGROUP in ``routed``."""
    return (
        _blocking_reads(routed)
        .select("client", F.col("db").alias("m_db"), F.explode("families").alias("m_family"))
        .distinct()
    )


def activity_markers(
    routed: DataFrame, waits: list[tuple[str, int, str]] | None, found: list[tuple[str, int, str]]
) -> DataFrame | None:
    """Markers telling a family that a client blocked there sent a command elsewhere.

    A blocked connection sends nothing: a client's next command ends its wait,
    even when that command touches keys of another family. Every command of a
    client that ever blocked in a family, and that does not reach that family
    itself, sends it a ``marker`` row (same seq and time, no effect but that).
    ``waits``: the (client, db, family) of blocking reads of earlier runs (incremental);
    ``found``: those of ``routed`` (:class:`RoutedFacts`).
    """
    every = sorted(set(found) | set(waits or []))
    if not every:
        return None
    spark = routed.sparkSession
    waits_df = spark.createDataFrame(every, "client string, m_db int, m_family string")
    same_db = F.col("db") == F.col("m_db")
    reaches = (
        ((F.col("scope") == "keys") & same_db & F.array_contains("families", F.col("m_family")))
        | (F.col("scope") == "all")
        | ((F.col("scope") == "db") & same_db)
    )
    return (
        routed.join(F.broadcast(waits_df), "client")
        .filter(~reaches)
        .select(
            "seq",
            "ts_ms",
            "argv",
            F.col("m_db").alias("db"),
            "client",
            F.lit(False).alias("fanout"),
            F.col("m_family").alias("family"),
            F.lit(True).alias("marker"),
            EXEC_UNIT,
            F.lit(None).cast(StringType()).alias("group"),
            F.lit(False).alias("group_only"),
        )
    )


def fan_out(
    routed: DataFrame,
    facts: RoutedFacts,
    waits: list[tuple[str, int, str]] | None = None,
    known: DataFrame | None = None,
) -> DataFrame:
    """One row per (event, family) it must reach, flagged ``fanout`` when it reaches several,
    plus the activity markers of clients that block. ``facts``: :func:`routed_facts` of
    ``routed``; ``waits``/``known``: blocking reads and families (db, family) of earlier
    runs (incremental)."""
    rows = _fan_out_commands(routed, facts.flush, known).withColumn("marker", F.lit(False))
    markers = activity_markers(routed, waits, facts.waits)
    return rows if markers is None else rows.unionByName(markers)


def _fan_out_commands(
    routed: DataFrame, flushes: bool, extra_known: DataFrame | None = None
) -> DataFrame:
    keyed = routed.filter(F.col("scope") == "keys").withColumn("fanout", F.size("families") > 1)
    per_family = keyed.select(
        "seq",
        "ts_ms",
        "argv",
        "db",
        "client",
        "fanout",
        F.explode("families").alias("family"),
        EXEC_UNIT,
        "group",
        "group_only",
    )
    if not flushes:
        return per_family
    flush = _flushes(routed)
    known = per_family.select("db", "family")
    if extra_known is not None:
        known = known.unionByName(extra_known.select("db", "family"))
    known = known.distinct()
    flush_rows = (
        flush.alias("f")
        .join(
            known.alias("k"),
            (F.col("f.scope") == "all") | (F.col("f.db") == F.col("k.db")),
            "inner",
        )
        .select(
            "f.seq",
            "f.ts_ms",
            "f.argv",
            F.col("k.db").alias("db"),
            "f.client",
            F.lit(True).alias("fanout"),
            "k.family",
            F.col(f"f.{EXEC_UNIT}").alias(EXEC_UNIT),
            F.lit(None).cast(StringType()).alias("group"),
            F.lit(False).alias("group_only"),
        )
    )
    return per_family.unionByName(flush_rows)


def whole_family_unit() -> list[Any]:
    """The unit columns of a row replayed with its whole family (no split by group)."""
    return [
        F.lit(None).cast(StringType()).alias("unit"),
        F.lit(True).alias("lead"),
        F.lit(False).alias("silent"),
    ]


ROW_COLUMNS = ("seq", "ts_ms", "argv", "db", "client", "fanout", "family", "marker", EXEC_UNIT)


def split_by_group(
    routed: DataFrame, rows: DataFrame, min_groups: int, max_units: int
) -> tuple[DataFrame, dict[str, int], dict[tuple[int, str, str], list[str]]]:
    """Give every (event, family) row its replay *unit*, so that a family with at least
    ``min_groups`` consumer groups is replayed as up to ``max_units`` tasks, each for
    some of its groups, instead of one task for all of them (``min_groups`` 0: never).

    A unit replays the commands that name one of its groups and stay inside that
    group (``command_group``'s ``group_only``) and every other command of the family
    (stream-level: XADD, XDEL, XTRIM, XSETID, XGROUP CREATE/DESTROY, DEL, RENAME,
    FLUSH*, markers), so its model holds the same stream and the same state of each
    of its groups as one replay of the whole family. The family's groups, by name,
    are dealt round-robin to ``min(groups, max_units)`` units named "0", "1", ...;
    unit "0" is the family's ``lead``: it reports the outcome of the stream-level
    commands and the ``streams`` rows, the other units apply them ``silent``ly
    (counted nowhere) and report only their own groups' rows.

    A blocked reader ends its wait when its client sends anything: a command of that
    client naming a group of another unit reaches the other units as a marker.

    Returns the rows (plus ``unit``, ``lead``, ``silent``; rows of families not split
    get ``unit`` null, ``lead`` true, ``silent`` false: one replay per family), what
    was split (for the report) and the groups of every unit (for the replay).
    """
    stats = {"min_groups": min_groups, "max_units": max_units, "families_split": 0, "units": 0}
    spark = rows.sparkSession
    whole = rows.select(*ROW_COLUMNS, *whole_family_unit())
    if min_groups <= 0 or max_units < 2:
        return whole, stats, {}
    named = (
        rows.filter(F.col("group").isNotNull() & ~F.col("marker"))
        .select("db", "family", "group")
        .distinct()
        .groupBy("db", "family")
        .agg(F.array_sort(F.collect_list("group")).alias("groups"))
        .filter(F.size("groups") >= max(min_groups, 2))
        .collect()
    )
    if not named:
        return whole, stats, {}
    unit_groups: dict[tuple[int, str, str], list[str]] = {}
    placement = []
    for r in named:
        groups = list(r["groups"])
        n_units = min(len(groups), max_units)
        for i, group in enumerate(groups):
            unit = str(i % n_units)
            unit_groups.setdefault((r["db"], r["family"], unit), []).append(group)
            placement.append((r["db"], r["family"], group, unit, [str(u) for u in range(n_units)]))
    stats["families_split"] = len(named)
    stats["units"] = len(unit_groups)
    place = spark.createDataFrame(
        placement, "db int, family string, group string, own_unit string, units array<string>"
    )
    families = place.select("db", "family", "units").distinct()
    joined = rows.join(F.broadcast(families), ["db", "family"], "left").join(
        F.broadcast(place.select("db", "family", "group", "own_unit")),
        ["db", "family", "group"],
        "left",
    )
    is_split = F.col("units").isNotNull()
    own = is_split & F.col("group_only") & ~F.col("marker") & F.col("own_unit").isNotNull()
    unit_list = (
        F.when(~is_split, F.array(F.lit(None).cast(StringType())))
        .when(own, F.array("own_unit"))
        .otherwise(F.col("units"))
    )
    placed = joined.withColumn("unit", F.explode(unit_list))
    lead = ~is_split | (F.col("unit") == F.lit("0"))
    placed = placed.select(
        *ROW_COLUMNS,
        "unit",
        lead.alias("lead"),
        (is_split & ~own & ~lead).alias("silent"),
    )
    # clients that blocked in a split family: their group-only commands there end the
    # wait in the other units too
    blocks = blocking_waits(routed).withColumnRenamed("client", "b_client")
    inner = (
        joined.filter(own & F.col("client").isNotNull())
        .join(
            F.broadcast(blocks),
            (F.col("client") == F.col("b_client"))
            & (F.col("db") == F.col("m_db"))
            & (F.col("family") == F.col("m_family")),
            "left_semi",
        )
        .withColumn("unit", F.explode(F.filter("units", lambda u: u != F.col("own_unit"))))
        .select(
            "seq",
            "ts_ms",
            "argv",
            "db",
            "client",
            F.lit(False).alias("fanout"),
            "family",
            F.lit(True).alias("marker"),
            EXEC_UNIT,
            "unit",
            (F.col("unit") == F.lit("0")).alias("lead"),
            F.lit(False).alias("silent"),
        )
    )
    return placed.unionByName(inner), stats, unit_groups
