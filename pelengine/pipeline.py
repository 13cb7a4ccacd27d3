"""The reconstruction pipeline: events DataFrame in, output DataFrames out.

Steps (each reported through ``progress``):

1. validate  — rows that are not commands go to ``rejected_events`` with a reason;
2. resolve   — rows without ``db`` take it from the latest ``SELECT`` before them;
3. cut       — ``as_of_seq`` / ``as_of_ms`` stop the replay at a point in time; under
               the 7.2+ profile the commands of one MULTI/EXEC share one "now";
4. route     — every command gets the families of stream keys it touches (keys
               tied by RENAME or a multi-stream XREADGROUP share one family;
               FLUSHDB/FLUSHALL reach every family of their db / of all dbs);
5. replay    — one shuffle by family, a sort by ``seq`` within partitions, and
               the iterator-form grouped Arrow UDF streaming each family's
               events through the pure model;
6. tables    — every output table is selected from that one pass;
               ``delivery_counts`` merges the delivery segments the replay
               emitted (the model keeps no closed records, see
               :func:`merge_delivery_segments`).

``run_reconstruct`` adds the storage side: read the events table, write every
table and the run report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    LongType,
    StringType,
    StructField,
    StructType,
)
from pyspark.sql.window import Window

from pelengine import storage
from pelengine.model.commands import LOAD_COMMAND
from pelengine.model.delivery import INCARNATION_COLUMNS, PRIOR_SEGMENT_N, SEGMENT_COLUMNS
from pelengine.model.replay import resolve_profile
from pelengine.model.units import LUA_CLIENT, SCRIPT_CALLS
from pelengine.spark.schemas import (
    EVENTS_SCHEMA,
    OPTIONAL_EVENT_COLUMNS,
    OUTPUT_TABLES,
    REPLAY_OUTPUT_SCHEMA,
    REQUIRED_EVENT_COLUMNS,
    SAVED_STATE_TYPE,
    TABLE_COLUMNS,
)
from pelengine.spark.udf import links_batches, make_replay_function, make_router

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class ReconstructOptions:
    """What to reconstruct and how (see the CLI's ``reconstruct`` for each option)."""

    profile: str = "7.0"
    as_of_ms: int | None = None
    as_of_seq: int | None = None
    txn_app_id: str | None = None
    txn_version: int | None = None
    partitions: int | None = None
    # the server's stream-node-max-entries / stream-node-max-bytes ('~' trimming)
    node_max_entries: int = 100
    node_max_bytes: int = 4096
    # replay a family with at least this many consumer groups as one task per group
    # (0: never; see split_by_group)
    split_groups: int = 4
    # incremental runs: keep each family's model as state (see pelengine.incremental)
    incremental: bool = False


@dataclass
class Carry:
    """What an incremental run continues from: the state after the events up to
    ``high_seq`` (see :mod:`pelengine.incremental`). ``reconstruct`` then replays only
    the events it is given (those after ``high_seq``) and carries the rest over."""

    high_seq: int
    as_of_ms: int | None
    as_of_seq: int | None
    family_of: dict[tuple[int, str], str]  # keys tied into one family so far
    states: DataFrame  # db, family, applied_seq, state_version, state, agg_n, agg_x
    previous: dict[str, DataFrame]  # every output table as it is now (+ rejected_events)
    waits: list[tuple[str, int, str]]  # (client, db, family) of every blocking read so far
    select_db: int = 0  # the db of the last SELECT (for rows that carry none)
    open_units: dict[str, int | None] = field(default_factory=dict)  # 7.2+ MULTI left open


@dataclass
class ReconstructResult:
    """The output tables as DataFrames, and what the run counted."""

    tables: dict[str, DataFrame]
    rejected: DataFrame
    as_of_ms: int | None
    as_of_seq: int | None
    report: dict[str, Any] = field(default_factory=dict)
    _persisted: list[DataFrame] = field(default_factory=list)
    # incremental runs: the family rows of the new state and what the run row keeps
    states: DataFrame | None = None
    carried: dict[str, Any] = field(default_factory=dict)

    def unpersist(self) -> None:
        """Release the cached replay output."""
        for df in self._persisted:
            df.unpersist()


class InputContractError(ValueError):
    """The events table does not follow the input contract (events.md)."""


def _persist(
    df: DataFrame, kept: list[DataFrame], level: StorageLevel = StorageLevel.MEMORY_AND_DISK
) -> DataFrame:
    """``df`` persisted (MEMORY_AND_DISK unless ``level``) and added to ``kept``; where the
    platform refuses caching (Databricks serverless) ``df`` as it is: recomputed when used
    again."""
    try:
        persisted = df.persist(level)
    except Exception as exc:
        if "NOT_SUPPORTED_WITH_SERVERLESS" not in str(exc):
            raise
        return df
    kept.append(persisted)
    return persisted


# --------------------------------------------------------------------------
# 1–3: validation, db resolution, as-of cut
# --------------------------------------------------------------------------


def conform_events(events: DataFrame) -> DataFrame:
    """Check the required columns and cast to the contract's types; add missing optional ones."""
    names = set(events.columns)
    missing = [c for c in REQUIRED_EVENT_COLUMNS if c not in names]
    if missing:
        raise InputContractError(
            f"events table lacks required column(s) {', '.join(missing)}; "
            f"it has {', '.join(sorted(names)) or 'no columns'} (see spec/events.md)"
        )
    out = events
    for f in EVENTS_SCHEMA.fields:
        if f.name in names:
            out = out.withColumn(f.name, F.col(f.name).cast(f.dataType))
        elif f.name in OPTIONAL_EVENT_COLUMNS:
            out = out.withColumn(f.name, F.lit(None).cast(f.dataType))
    return out


def split_rejected(events: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(valid, rejected): rows that are not commands get a ``reason`` and leave the replay.

    A ``seq`` shared by identical rows keeps one of them (the others are
    ``duplicate row``); a ``seq`` shared by different rows rejects them all,
    since which one the server ran cannot be known.
    """
    signature = F.sha2(
        F.to_json(F.struct(F.col("ts_ms"), F.col("argv"), F.col("db"), F.col("client"))), 256
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
        .when(F.exists("argv", lambda a: a.isNull()), F.lit("null argument in argv"))
        .when(
            (F.col("_n") > 1) & (F.col("_variants") > 1),
            F.concat(F.lit("conflicting rows share seq ("), F.col("_n").cast("string"), F.lit(")")),
        )
        .when((F.col("_n") > 1) & (F.col("_rank") > 1), F.lit("duplicate row (same seq)"))
    )
    tagged = ranked.withColumn("reason", reason).drop("_sig", "_n", "_variants", "_rank")
    return tagged.filter(F.col("reason").isNull()).drop("reason"), tagged.filter(
        F.col("reason").isNotNull()
    )


def resolve_db(spark: SparkSession, valid: DataFrame, initial_db: int = 0) -> DataFrame:
    """Give rows without ``db`` the db of the latest SELECT before them (an AOF's way), else
    ``initial_db`` (0, or where the previous incremental run's last SELECT left it)."""
    is_select = F.upper(F.col("argv")[0]) == "SELECT"
    needs = valid.filter(is_select & F.col("db").isNull()).limit(1).count() > 0
    if not needs:
        return valid.withColumn("db", F.coalesce(F.col("db"), F.lit(initial_db)))
    selected = F.when(is_select & F.col("db").isNull(), F.col("argv")[1].cast("int"))
    window = Window.orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return (
        valid.withColumn("_sel", F.last(selected, ignorenulls=True).over(window))
        .withColumn("db", F.coalesce(F.col("db"), F.col("_sel"), F.lit(initial_db)))
        .drop("_sel")
    )


def last_select_db(valid: DataFrame, initial_db: int = 0) -> int:
    """The db a row without ``db`` after these rows would get (for the next run)."""
    is_select = (F.upper(F.col("argv")[0]) == "SELECT") & F.col("db").isNull()
    row = (
        valid.filter(is_select & (F.size("argv") > 1))
        .orderBy(F.desc("seq"))
        .select(F.col("argv")[1].cast("int").alias("db"))
        .first()
    )
    return initial_db if row is None or row["db"] is None else int(row["db"])


_SYNTHETIC_SEQ = -(2**63)  # seqs of the rows standing for a unit a previous run left open


EXEC_UNIT = "exec_unit"


def mark_units(
    events: DataFrame, open_units: dict[str, int | None] | None = None, *, times: bool
) -> DataFrame:
    """``events`` with ``exec_unit``: the execution unit each command ran in (null: none).

    The same units as the model's (``Replayer._place``): what one client (``client``;
    null for an AOF's single stream) sends between MULTI and EXEC/DISCARD, named by the
    MULTI's seq; and a script: its ``EVAL``/``EVALSHA``/``FCALL`` row (named by its seq,
    or by the transaction's when it ran inside one) and the rows of the commands it
    ran, client ``lua``, which follow it (a ``lua`` row belongs to the script whose call
    is the nearest row before it that is not a ``lua`` row). A family's replay sees
    only its own rows: it learns the units from this column (a read inside one never
    blocks; the readers a unit's writes unblock are served once it ended).

    ``times`` (7.2+): every command of a unit takes the time of the unit's first row (a
    transaction's first command, a script's call row): the server reads its clock once
    per unit. ``open_units``: units a previous incremental run left open (client -> the
    unit's time, None if it had no command yet); they continue into these rows.

    Costs: a window per client when the log has MULTI rows; one over the global order
    of (seq, two flags), joined back by seq, only when it has ``lua`` rows.
    """
    name = F.upper(F.col("argv")[0])
    is_lua = F.coalesce(F.col("client") == F.lit(LUA_CLIENT), F.lit(False))
    has_multi = bool(open_units) or events.filter(name == "MULTI").limit(1).count() > 0
    has_lua = events.filter(is_lua).limit(1).count() > 0
    if not (has_multi or has_lua):
        return events.withColumn(EXEC_UNIT, F.lit(None).cast(LongType()))
    columns = events.columns
    df = events.unionByName(_open_unit_rows(events, open_units)) if open_units else events
    multi: Any = F.lit(None).cast(LongType())
    if has_multi:
        by_client = Window.partitionBy(F.coalesce(F.col("client"), F.lit(""))).orderBy("seq")
        upto = by_client.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        opened = F.last(F.when(name == "MULTI", F.col("seq")), ignorenulls=True).over(upto)
        closed = F.last(F.when(name.isin("EXEC", "DISCARD"), F.col("seq")), ignorenulls=True)
        inside = (
            (name != "MULTI")
            & opened.isNotNull()
            & (opened > F.coalesce(closed.over(upto), F.lit(-1)))
        )
        df = df.withColumn("_multi", F.when(inside, opened))
        multi = F.col("_multi")
    script = F.when(name.isin(*sorted(SCRIPT_CALLS)) & ~is_lua, F.coalesce(multi, F.col("seq")))
    unit: Any = F.coalesce(script, multi)
    if has_lua:
        narrow = df.select("seq", is_lua.alias("_lua"), script.alias("_script"))
        upto_all = Window.orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)
        anchor = F.last(
            F.when(~F.col("_lua"), F.struct(F.col("_script").alias("unit"))), ignorenulls=True
        ).over(upto_all)
        lua_units = (
            narrow.withColumn("_anchor", anchor)
            .filter(F.col("_lua") & F.col("_anchor.unit").isNotNull())
            .select(F.col("seq").alias("_lua_seq"), F.col("_anchor.unit").alias("_lua_unit"))
        )
        df = df.join(lua_units, df["seq"] == lua_units["_lua_seq"], "left")
        unit = F.coalesce(F.col("_lua_unit"), unit)
    df = df.withColumn(EXEC_UNIT, unit)
    if times:
        same = Window.partitionBy(
            F.col(EXEC_UNIT).isNull(), F.coalesce(F.col(EXEC_UNIT), F.col("seq"))
        ).orderBy("seq")
        first_ts = F.first("ts_ms").over(same.rowsBetween(Window.unboundedPreceding, 0))
        df = df.withColumn(
            "ts_ms", F.when(F.col(EXEC_UNIT).isNotNull(), first_ts).otherwise(F.col("ts_ms"))
        )
    if open_units:
        df = df.filter(F.col("seq") > _SYNTHETIC_SEQ + 1)
    return df.select(*columns, EXEC_UNIT)


def _open_unit_rows(valid: DataFrame, open_units: dict[str, int | None]) -> DataFrame:
    """A MULTI (and, when the unit had a command, one carrying its time) per open unit."""
    rows: list[tuple[Any, ...]] = []
    for client, ts in open_units.items():
        rows.append((_SYNTHETIC_SEQ, 0, ["MULTI"], 0, client or None, None))
        if ts is not None:
            rows.append((_SYNTHETIC_SEQ + 1, ts, ["PING"], 0, client or None, None))
    return valid.sparkSession.createDataFrame(rows, valid.schema)


def open_units_after(
    valid: DataFrame, open_units: dict[str, int | None] | None
) -> dict[str, int | None]:
    """7.2+: the units still open after these rows (client -> unit time or None), for the
    next incremental run; ``valid`` is what ``mark_units`` returned."""
    name = F.upper(F.col("argv")[0])
    rows = valid = valid.drop(EXEC_UNIT)
    if open_units:
        rows = rows.unionByName(_open_unit_rows(valid, open_units))
    client = F.coalesce(F.col("client"), F.lit(""))
    brackets = (
        rows.filter(name.isin("MULTI", "EXEC", "DISCARD"))
        .groupBy(client.alias("c"))
        .agg(
            F.max(F.when(name == "MULTI", F.col("seq"))).alias("opened"),
            F.max(F.when(name != "MULTI", F.col("seq"))).alias("closed"),
        )
        .filter(
            F.col("opened").isNotNull()
            & (F.col("closed").isNull() | (F.col("opened") > F.col("closed")))
        )
    )
    still = brackets.collect()
    out: dict[str, int | None] = {}
    for row in still:
        first = (
            rows.filter((client == row["c"]) & (F.col("seq") > row["opened"]))
            .orderBy("seq")
            .select("ts_ms")
            .first()
        )
        out[row["c"]] = None if first is None else int(first["ts_ms"])
    return out


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


# --------------------------------------------------------------------------
# 4: routing
# --------------------------------------------------------------------------


def family_map(
    spark: SparkSession,
    valid: DataFrame,
    prior: dict[tuple[int, str], str] | None = None,
    saved: set[tuple[int, str]] | None = None,
    renamed: dict[tuple[int, str], str] | None = None,
) -> dict[tuple[int, str], str]:
    """Keys tied together by RENAME or multi-stream XREADGROUP, mapped to one family name.

    ``prior``: the families of a previous run (incremental), ``saved``: the (db, family)
    that have saved state. Saved families keep their names; when these rows tie several
    of them together, the merged family takes the smallest name and ``renamed`` gets
    ``(db, old name) -> new name`` for the others (their saved models are merged).
    """
    name = F.upper(F.col("argv")[0])
    candidates = valid.filter(name.isin("RENAME", "RENAMENX", "XREADGROUP")).select("db", "argv")
    rows = (
        candidates.mapInArrow(links_batches, "db int, links array<string>")
        .select("db", F.array_sort("links").alias("links"))
        .distinct()
        .collect()
    )
    parent: dict[tuple[int, str], tuple[int, str]] = {}

    def find(node: tuple[int, str]) -> tuple[int, str]:
        root = node
        while parent.get(root, root) != root:
            root = parent[root]
        while node != root:
            parent[node], node = root, parent.get(node, node)
        return root

    links = [[(row["db"], k) for k in row["links"]] for row in rows]
    if prior:
        by_family: dict[tuple[int, str], list[tuple[int, str]]] = {}
        for (db, key), fam in prior.items():
            by_family.setdefault((db, fam), []).append((db, key))
        links += [[(db, fam), *keys] for (db, fam), keys in by_family.items()]
    for keys in links:
        for other in keys[1:]:
            a, b = find(keys[0]), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    names = {root: root[1] for root in {find(n) for n in parent}}
    if prior or saved:
        # a component keeps the name of the one saved family it contains
        holders: dict[tuple[int, str], set[str]] = {}
        for node in set(parent) | {find(n) for n in list(parent)}:  # roots are not in parent
            holder: str | None = (prior or {}).get(node)
            if holder is None and node in (saved or set()):
                holder = node[1]
            if holder is not None:
                holders.setdefault(find(node), set()).add(holder)
        for root, fams in holders.items():
            chosen = min(fams)
            names[root] = chosen
            if renamed is not None:
                renamed.update({(root[0], f): chosen for f in fams if f != chosen})
    return {node: names[find(node)] for node in parent} | {
        root: names[root] for root in {find(n) for n in parent}
    }


def route_events(
    spark: SparkSession,
    valid: DataFrame,
    profile: str,
    families: dict[tuple[int, str], str] | None = None,
) -> DataFrame:
    """Each event with its command name, scope, families and (when it reaches no
    stream) the outcome it has on its own."""
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
    return valid.mapInArrow(make_router(profile, families), out_schema)


def _blocks(routed: DataFrame) -> bool:
    """Whether ``routed`` holds a blocking XREADGROUP."""
    return bool(_blocking_reads(routed).limit(1).count())


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
    routed: DataFrame, waits: list[tuple[str, int, str]] | None = None
) -> DataFrame | None:
    """Markers telling a family that a client blocked there sent a command elsewhere.

    A blocked connection sends nothing: a client's next command ends its wait,
    even when that command touches keys of another family. Every command of a
    client that ever blocked in a family, and that does not reach that family
    itself, sends it a ``marker`` row (same seq and time, no effect but that).
    ``waits``: the (client, db, family) of blocking reads of earlier runs (incremental).
    """
    found = [(r["client"], r["m_db"], r["m_family"]) for r in blocking_waits(routed).collect()]
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
    waits: list[tuple[str, int, str]] | None = None,
    known: DataFrame | None = None,
) -> DataFrame:
    """One row per (event, family) it must reach, flagged ``fanout`` when it reaches several,
    plus the activity markers of clients that block. ``waits``/``known``: blocking reads
    and families (db, family) of earlier runs (incremental)."""
    rows = _fan_out_commands(routed, known).withColumn("marker", F.lit(False))
    markers = activity_markers(routed, waits)
    return rows if markers is None else rows.unionByName(markers)


def _fan_out_commands(routed: DataFrame, extra_known: DataFrame | None = None) -> DataFrame:
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
    flush = routed.filter(F.col("scope").isin("db", "all"))
    if flush.limit(1).count() == 0:
        return per_family
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


# --------------------------------------------------------------------------
# 5: replay
# --------------------------------------------------------------------------


def _whole_family_unit() -> list[Any]:
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
    whole = rows.select(*ROW_COLUMNS, *_whole_family_unit())
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


def replay_stage(
    routed_rows: DataFrame,
    profile: str,
    as_of_ms: int,
    as_of_seq: int,
    partitions: int,
    node_max_entries: int = 100,
    node_max_bytes: int = 4096,
    *,
    keep_state: bool = False,
    mark_seq: int | None = None,
    unit_groups: dict[tuple[int, str, str], list[str]] | None = None,
) -> DataFrame:
    """The one shuffle and sort: (family, unit)s hashed to partitions, events sorted by
    seq, then the grouped iterator UDF (same grouping columns, so Spark adds no exchange).
    ``unit_groups``: the groups of each unit of the families split by group.

    With ``keep_state`` the rows may include one ``state`` row per family (its saved
    model, at the family's last applied seq, so it sorts first) and the replay emits
    each family's model at the end.

    ``unit`` is a grouping key only when some family is split: otherwise it is the
    literal null, the optimizer drops a constant from the sort, and the grouped UDF
    then asks for a second sort by (db, family, unit) alone. That sort keeps the seq
    order only while it fits in memory; once it spills, its merge interleaves the
    spill runs of the one key in any order (seen: one stream of 20M events, "seq 1
    after 11184910"). ``check_replay_plan`` refuses such a plan before it runs."""
    keys = ("db", "family", "unit") if unit_groups else ("db", "family")
    replayed = (
        routed_rows.repartition(partitions, *keys)
        .sortWithinPartitions(*keys, "seq")
        .groupBy(*keys)
        .applyInArrow(
            make_replay_function(
                profile,
                as_of_ms,
                as_of_seq,
                node_max_entries,
                node_max_bytes,
                keep_state=keep_state,
                mark_seq=mark_seq,
                unit_groups=unit_groups,
            ),
            REPLAY_OUTPUT_SCHEMA,
        )
    )
    check_replay_plan(replayed)
    return replayed


class ReplayPlanError(RuntimeError):
    """The physical plan of the replay would not deliver each family's events in seq order."""


def check_replay_plan(replayed: DataFrame) -> None:
    """Refuse a replay plan whose grouped UDF does not read straight from the one sort by
    (keys..., seq) over the one exchange: any other sort between them (one by the keys
    alone) is not stable once it spills, and the replay would fail hours later with
    ``SeqOrderError`` (or, without that check, write wrong tables). Classic Spark only:
    a Spark Connect DataFrame has no JVM plan here and is left to the UDF's own check."""
    jdf = getattr(replayed, "_jdf", None)
    if jdf is None:
        return
    plan = jdf.queryExecution().executedPlan().toString()
    lines = plan.splitlines()
    start = next((i for i, line in enumerate(lines) if "FlatMapGroupsInArrow" in line), None)
    if start is None:
        raise ReplayPlanError(f"no grouped replay UDF in the plan:\n{plan}")
    end = next((i for i in range(start, len(lines)) if "Exchange" in lines[i]), len(lines))
    sorts = [line.strip() for line in lines[start:end] if "Sort [" in line]
    if len(sorts) != 1 or "seq" not in sorts[0]:
        raise ReplayPlanError(
            "the replay plan would not keep seq order (expected exactly one sort, by the "
            f"grouping keys and seq, under the grouped UDF; found {sorts}):\n{plan}"
        )


def _seed_rows(rows: DataFrame, states: DataFrame) -> DataFrame:
    """``rows`` with a null ``state`` column, plus the saved state of every family they reach."""
    rows = rows.withColumn("state", F.lit(None).cast(SAVED_STATE_TYPE))
    reached = rows.select("db", "family").distinct()
    seeds = states.join(reached, ["db", "family"], "inner").select(
        F.col("applied_seq").alias("seq"),
        F.lit(0).cast("long").alias("ts_ms"),
        F.lit(None).cast(ArrayType(StringType())).alias("argv"),
        "db",
        F.lit(None).cast("string").alias("client"),
        F.lit(False).alias("fanout"),
        "family",
        F.lit(False).alias("marker"),
        F.lit(None).cast(LongType()).alias(EXEC_UNIT),
        *_whole_family_unit(),
        F.struct("state_version", "state", "agg_n", "agg_x").alias("state"),
    )
    return rows.unionByName(seeds)


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


def reconstruct(
    spark: SparkSession,
    events: DataFrame,
    options: ReconstructOptions | None = None,
    progress: Progress = _quiet,
    carry: Carry | None = None,
    mark_seq: int | None = None,
) -> ReconstructResult:
    """Reconstruct every output table from an events DataFrame (no storage involved).

    ``carry`` (incremental runs): ``events`` are only the rows after ``carry.high_seq``;
    the families they reach continue from their saved models, every other family's
    rows are carried over from ``carry.previous``. ``mark_seq`` (incremental): the state
    rows also digest the rows up to it (``mark_n``/``mark_x``).
    """
    options = options or ReconstructOptions()
    if carry is not None and (options.as_of_ms is not None or options.as_of_seq is not None):
        raise ValueError("an incremental run cannot stop at --as-of-ms/--as-of-seq")
    chosen, profile_reason = resolve_profile(options.profile)
    profile = chosen.name
    timings: dict[str, float] = {}
    clock = time.monotonic()

    def lap(stage: str, detail: str = "") -> None:
        nonlocal clock
        now = time.monotonic()
        timings[stage] = round(now - clock, 3)
        clock = now
        progress(f"{stage} done in {timings[stage]:.1f} s" + (f": {detail}" if detail else ""))

    progress("validating events")
    conformed = conform_events(events)
    valid, rejected = split_rejected(conformed)
    initial_db = carry.select_db if carry is not None else 0
    carried: dict[str, Any] = {}
    if options.incremental:
        carried["select_db"] = last_select_db(valid, initial_db)
    valid = resolve_db(spark, valid, initial_db).select(*(f.name for f in EVENTS_SCHEMA.fields))
    valid, stop_seq = cut_as_of(valid, options.as_of_ms, options.as_of_seq)
    open_units = carry.open_units if carry is not None else None
    if chosen.unit_time_snapshot:
        valid = mark_units(valid, open_units, times=True)
    else:  # 7.0: units matter only to blocking reads (marked after routing, if any)
        valid = valid.withColumn(EXEC_UNIT, F.lit(None).cast(LongType()))
    persisted: list[DataFrame] = []
    valid = _persist(valid, persisted)
    if options.incremental:
        carried["open_units"] = (
            open_units_after(valid, open_units) if chosen.unit_time_snapshot else {}
        )
    bounds = valid.agg(F.count(F.lit(1)), F.max("seq"), F.max("ts_ms")).first()
    assert bounds is not None
    n_valid, max_seq, max_ts = bounds[0], bounds[1], bounds[2]
    if carry is not None:
        max_ts = _max(carry.as_of_ms, max_ts)
        max_seq = _max(carry.as_of_seq, max_seq)
    as_of_ms = options.as_of_ms if options.as_of_ms is not None else max_ts
    as_of_seq = options.as_of_seq if options.as_of_seq is not None else max_seq
    if options.as_of_seq is not None and max_seq is not None:
        as_of_seq = min(options.as_of_seq, max_seq)
    lap("validate", f"{n_valid:,} events to replay")
    progress(f"routing {n_valid:,} events to stream families")
    saved: set[tuple[int, str]] | None = None
    renamed: dict[tuple[int, str], str] = {}
    states_in = carry.states if carry is not None else None
    if carry is not None:
        saved = {(r["db"], r["family"]) for r in carry.states.select("db", "family").collect()}
    families = family_map(spark, valid, carry.family_of if carry else None, saved, renamed)
    if renamed and states_in is not None:
        progress(f"{len(renamed)} saved famil(ies) tied to others by new events: merging")
        states_in = _rename_families(states_in, renamed)
    routed = _persist(route_events(spark, valid, profile, families), persisted)
    if not chosen.unit_time_snapshot and (carry is not None and carry.waits or _blocks(routed)):
        # 7.0 with blocking reads: their units, for the family replays
        routed = _persist(mark_units(routed.drop(EXEC_UNIT), times=False), persisted)
    old_waits = [(c, db, renamed.get((db, f), f)) for c, db, f in (carry.waits if carry else [])]
    rows = fan_out(
        routed, old_waits, states_in.select("db", "family") if states_in is not None else None
    )
    partitions = options.partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    # incremental runs keep one saved model per family: they do not split
    rows, split_stats, unit_groups = split_by_group(
        routed, rows, 0 if options.incremental else options.split_groups, partitions
    )
    if options.incremental:
        found = [(r["client"], r["m_db"], r["m_family"]) for r in blocking_waits(routed).collect()]
        carried["waits"] = sorted(set(found) | set(old_waits))
        carried["family_of"] = families
        if carry is not None:
            assert states_in is not None
            rows = _seed_rows(rows, states_in)
        else:
            rows = rows.withColumn("state", F.lit(None).cast(SAVED_STATE_TYPE))
    lap(
        "route",
        f"{split_stats['families_split']} stream famil(ies) split into "
        f"{split_stats['units']} per-group replays"
        if split_stats["families_split"]
        else "",
    )
    snap_ms, snap_seq = as_of_ms if as_of_ms is not None else 0, as_of_seq or 0
    progress(f"replaying through the {profile} model in {partitions} partitions")
    # DISK_ONLY: the replay output (every history row) is the largest thing cached; a
    # MEMORY_AND_DISK block spilled to disk is read back into the heap whole, and a block
    # of a few GB (10M events in 4 partitions) then ends the JVM with OutOfMemoryError.
    # From disk it is streamed.
    replayed = _persist(
        replay_stage(
            rows,
            profile,
            as_of_ms if as_of_ms is not None else 0,
            as_of_seq or 0,
            partitions,
            options.node_max_entries,
            options.node_max_bytes,
            keep_state=options.incremental,
            mark_seq=mark_seq,
            unit_groups=unit_groups,
        ),
        persisted,
        StorageLevel.DISK_ONLY,
    )
    tables = {
        name: replayed.filter(F.col("table") == name).select(*TABLE_COLUMNS[name])
        for name in OUTPUT_TABLES
    }
    segments = replayed.filter(F.col("table") == "delivery_segments").select(*SEGMENT_COLUMNS)
    incarnations = replayed.filter(F.col("table") == "group_incarnations").select(
        *INCARNATION_COLUMNS
    )
    states: DataFrame | None = None
    if options.incremental:
        state_cols = ("db", "family", "applied_seq", "state_version", "state", "agg_n", "agg_x")
        states = replayed.filter(F.col("table") == "state").select(*state_cols, "mark_n", "mark_x")
        if carry is not None:
            assert states_in is not None
            replayed_families = states.select("db", "family")
            old_counts = carry.previous.get("delivery_counts")
            if old_counts is not None:
                # the replayed families' rows so far: the first segment of their entries
                segments = segments.unionByName(
                    _prior_segments(old_counts, families, replayed_families)
                )
            tables["delivery_counts"] = merge_delivery_segments(
                segments, incarnations, snap_ms, snap_seq
            )
            tables = _carry_tables(tables, carry, families, replayed_families, as_of_ms, as_of_seq)
            untouched = (
                states_in.join(replayed_families, ["db", "family"], "left_anti")
                .select(*state_cols)
                .withColumn("mark_n", F.lit(None).cast("long"))
                .withColumn("mark_x", F.lit(None).cast("long"))
            )
            states = states.unionByName(untouched)
    if carry is None:
        tables["delivery_counts"] = merge_delivery_segments(
            segments, incarnations, snap_ms, snap_seq
        )
    report: dict[str, Any] = {
        "profile": profile,
        "profile_reason": profile_reason,
        "stream_node_max": {
            "entries": options.node_max_entries,
            "bytes": options.node_max_bytes,
        },
        "as_of_ms": as_of_ms,
        "as_of_seq": as_of_seq,
        "stopped_before_seq": stop_seq,
        "split_by_group": split_stats,
        "events": {"valid": n_valid},
        "timings_s": timings,
    }
    result = ReconstructResult(
        tables,
        rejected,
        as_of_ms,
        as_of_seq,
        report,
        persisted,
        states=states,
        carried=carried,
    )
    _count_outcomes(routed, replayed, report)
    report["starting_state"] = starting_state(routed)
    ev = report["events"]
    lap(
        "replay",
        f"{ev['applied']:,} applied, {ev['ignored']:,} ignored, {ev['failed']:,} failed "
        "(Redis errors)",
    )
    return result


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


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
        replayed.filter(F.col("table") == "stats")
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
        replayed.filter(F.col("table") == "outcome")
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


# --------------------------------------------------------------------------
# With storage: read, write, report
# --------------------------------------------------------------------------


def run_reconstruct(
    spark: SparkSession,
    events_path: str,
    out_path: str | storage.Output,
    options: ReconstructOptions | None = None,
    progress: Progress = _quiet,
) -> dict[str, Any]:
    """Read the events table, reconstruct, write every table under ``out_path``; return
    the run report (also written to ``out_path/_run_report.json``).

    ``events_path``: a path, or ``catalog.schema.table`` (see :func:`storage.table_ref`);
    ``out_path``: a root path, or a :class:`storage.Output` (catalog tables).
    ``options.incremental``: continue from the state under ``out_path`` (see
    :mod:`pelengine.incremental`)."""
    options = options or ReconstructOptions()
    output = storage.check_output(spark, out_path)
    events_ref = storage.table_ref(events_path)
    storage.check_input(spark, events_ref)
    if options.incremental:
        from pelengine.incremental import run_incremental

        return run_incremental(spark, events_path, output, options, progress)
    started = time.time()
    if not storage.table_exists(spark, events_ref):
        raise InputContractError(f"--events {events_path}: no Delta table there")
    input_version = storage.table_version(spark, events_ref)
    progress(f"reading events from {events_path} (Delta version {input_version})")
    events = storage.read_table(spark, events_ref)
    result = reconstruct(spark, events, options, progress)
    report = result.report
    write_started = time.monotonic()
    output_rows = write_outputs(
        spark,
        [*result.tables.items(), ("rejected_events", result.rejected)],
        output,
        txn_app_id=options.txn_app_id,
        txn_version=options.txn_version,
        progress=progress,
    )
    report["timings_s"]["write"] = round(time.monotonic() - write_started, 3)
    rejected_by_reason = {
        r["reason"]: r["count"] for r in result.rejected.groupBy("reason").count().collect()
    }
    report["events"]["read"] = report["events"]["valid"] + sum(rejected_by_reason.values())
    report["events"]["rejected"] = sum(rejected_by_reason.values())
    report["events"]["rejected_by_reason"] = rejected_by_reason
    report.update(
        {
            "input": {"path": events_path, "delta_version": input_version},
            "output": {**output.describe(), "rows": output_rows},
            "keys": output_rows.get("streams", 0),
            "options": asdict(options),
            "storage": storage.storage_mode(spark),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "duration_s": round(time.time() - started, 3),
        }
    )
    result.unpersist()
    storage.write_run_report(output, report)
    return report


def write_outputs(
    spark: SparkSession,
    tables: list[tuple[str, DataFrame]],
    out_path: str | storage.Output,
    *,
    txn_app_id: str | None,
    txn_version: int | None,
    progress: Progress = _quiet,
) -> dict[str, int]:
    """Write each (name, DataFrame) as ``out_path/name`` (overwrite, one commit each, with
    the txn options), or by name for an :class:`storage.Output` of catalog tables; returns
    each table's rows as written.

    One after the other: the embedded ``delta`` source is registered with the session,
    and a write from another Python thread does not find it."""
    output = storage.as_output(out_path)
    rows: dict[str, int] = {}
    for i, (name, df) in enumerate(tables, start=1):
        path = output.table(name)
        progress(f"writing {name} ({i}/{len(tables)})")
        started = time.monotonic()
        storage.write_table(df, path, "overwrite", txn_app_id=txn_app_id, txn_version=txn_version)
        rows[name] = storage.table_row_count(spark, path)
        progress(f"wrote {name}: {rows[name]:,} rows in {time.monotonic() - started:.1f} s")
    return rows


def format_report(report: dict[str, Any]) -> str:
    """The run report as a few readable lines."""
    ev = report.get("events", {})
    inp = report.get("input", {})
    lines = [
        f"profile {report.get('profile', '-')}"
        + (f" ({report['profile_reason']})" if report.get("profile_reason") else "")
        + f"  as of seq {report.get('as_of_seq')}"
        f" / {report.get('as_of_ms')} ms  (events {inp.get('path', '?')}, Delta version "
        f"{inp.get('delta_version', '?')})",
    ]
    for snap in report.get("starting_state") or []:
        lines.append(
            f"starting state: a snapshot ({snap['rows']:,} PELENGINE.LOAD rows from source "
            f"{snap['source']}, seq {snap['first_seq']}..{snap['last_seq']}, taken at "
            f"{snap['snapshot_ms']} ms)"
        )
    inc = report.get("incremental")
    if inc:
        line = f"incremental: {inc.get('mode')}"
        if inc.get("families_total") is not None:
            line += (
                f", {inc.get('families_replayed')} of {inc.get('families_total')} families replayed"
            )
        if inc.get("families_with_changed_history"):
            line += f", {len(inc['families_with_changed_history'])} with changed history"
        lines.append(line)
    split = report.get("split_by_group") or {}
    if split.get("families_split"):
        lines.append(
            f"split by group: {split['families_split']} stream famil(ies) with "
            f">= {split['min_groups']} groups replayed as {split['units']} tasks"
        )
    if report.get("written") is False:
        lines.append("nothing written: the tables are already at this events version")
    if ev:
        lines.append(
            f"events: read {ev.get('read', ev.get('valid'))}, applied {ev.get('applied')}, "
            f"ignored {ev.get('ignored')}, failed {ev.get('failed')}, "
            f"rejected {ev.get('rejected', 0)}"
        )
    if ev.get("failed_by_kind"):
        lines.append(
            "failed by error kind: "
            + ", ".join(f"{k} {v}" for k, v in ev["failed_by_kind"].items())
        )
    if ev.get("rejected_by_reason"):
        lines.append(
            "rejected: "
            + ", ".join(f"{k} {v}" for k, v in ev["rejected_by_reason"].items())
            + " (rows in rejected_events)"
        )
    rows = report.get("output", {}).get("rows", {})
    if rows:
        lines.append("rows: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
    if report.get("notes"):
        lines.append("notes: " + ", ".join(f"{k} {v}" for k, v in report["notes"].items()))
    timings = report.get("timings_s", {})
    lines.append(
        f"took {report.get('duration_s', '?')} s"
        + (" (" + ", ".join(f"{k} {v}" for k, v in timings.items()) + ")" if timings else "")
    )
    return "\n".join(lines)


def summarize(spark: SparkSession, out_path: str, limit: int = 10) -> str:
    """A short readable summary of the PEL and ownership tables under ``out_path``."""
    pel = storage.read_output_table(spark, out_path, "pel")
    own = storage.read_output_table(spark, out_path, "ownership")
    groups = storage.read_output_table(spark, out_path, "groups")
    streams = storage.read_output_table(spark, out_path, "streams")
    n_pel = pel.count()
    dangling = pel.filter(~F.col("entry_exists")).count()
    lines = [
        f"{streams.count()} streams, {groups.count()} groups, {own.count()} consumers, "
        f"{n_pel} pending entries ({dangling} dangling: deleted from the stream while pending)",
        "",
        "Consumers holding the most pending entries:",
    ]
    top = (
        own.orderBy(F.desc("pending"), "db", "key", "group", "consumer")
        .select(
            "db", "key", "group", "consumer", "pending", "max_delivery_count", "oldest_pending_id"
        )
        .limit(limit)
        .collect()
    )
    lines.append(
        f"  {'db':>3} {'key':<16} {'group':<12} {'consumer':<14} {'pending':>7} "
        f"{'max_dc':>6} oldest"
    )
    for r in top:
        lines.append(
            f"  {r['db']:>3} {r['key']:<16.16} {r['group']:<12.12} {r['consumer']:<14.14} "
            f"{r['pending']:>7} {r['max_delivery_count'] or '-':>6} {r['oldest_pending_id'] or '-'}"
        )
    lines += ["", "Most delivered pending entries (poison candidates):"]
    worst = (
        pel.orderBy(F.desc("delivery_count"), F.desc("idle_ms"))
        .select("db", "key", "group", "id", "consumer", "delivery_count", "idle_ms")
        .limit(limit)
        .collect()
    )
    for r in worst:
        lines.append(
            f"  db {r['db']} {r['key']} {r['group']} {r['id']} held by {r['consumer']}: "
            f"delivered {r['delivery_count']}x, idle {r['idle_ms'] / 1000:.1f} s"
        )
    return "\n".join(lines)
