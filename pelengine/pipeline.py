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
6. tables    — every output table is selected from that one pass.

``run_reconstruct`` adds the storage side: read the events table, write every
table and the run report.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType
from pyspark.sql.window import Window

from pelengine import storage
from pelengine.model.replay import get_profile
from pelengine.spark.schemas import (
    EVENTS_SCHEMA,
    OPTIONAL_EVENT_COLUMNS,
    OUTPUT_TABLES,
    REPLAY_OUTPUT_SCHEMA,
    REQUIRED_EVENT_COLUMNS,
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


@dataclass
class ReconstructResult:
    """The output tables as DataFrames, and what the run counted."""

    tables: dict[str, DataFrame]
    rejected: DataFrame
    as_of_ms: int | None
    as_of_seq: int | None
    report: dict[str, Any] = field(default_factory=dict)
    _persisted: list[DataFrame] = field(default_factory=list)

    def unpersist(self) -> None:
        """Release the cached replay output."""
        for df in self._persisted:
            df.unpersist()


class InputContractError(ValueError):
    """The events table does not follow the input contract (events.md)."""


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


def resolve_db(spark: SparkSession, valid: DataFrame) -> DataFrame:
    """Give rows without ``db`` the db of the latest SELECT before them (an AOF's way), else 0."""
    is_select = F.upper(F.col("argv")[0]) == "SELECT"
    needs = valid.filter(is_select & F.col("db").isNull()).limit(1).count() > 0
    if not needs:
        return valid.withColumn("db", F.coalesce(F.col("db"), F.lit(0)))
    selected = F.when(is_select & F.col("db").isNull(), F.col("argv")[1].cast("int"))
    window = Window.orderBy("seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    return (
        valid.withColumn("_sel", F.last(selected, ignorenulls=True).over(window))
        .withColumn("db", F.coalesce(F.col("db"), F.col("_sel"), F.lit(0)))
        .drop("_sel")
    )


def unit_time(valid: DataFrame) -> DataFrame:
    """7.2+: commands of one MULTI/EXEC share one "now", the time of the unit's first command.

    A unit is what one client (``client``; null for an AOF's single stream)
    sends between MULTI and EXEC/DISCARD, in ``seq`` order.
    """
    name = F.upper(F.col("argv")[0])
    if valid.filter(name == "MULTI").limit(1).count() == 0:
        return valid
    by_client = Window.partitionBy(F.coalesce(F.col("client"), F.lit(""))).orderBy("seq")
    upto = by_client.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    opened = F.last(F.when(name == "MULTI", F.col("seq")), ignorenulls=True).over(upto)
    closed = F.last(F.when(name.isin("EXEC", "DISCARD"), F.col("seq")), ignorenulls=True).over(upto)
    marked = valid.withColumn(
        "_unit",
        F.when(
            (name != "MULTI") & opened.isNotNull() & (opened > F.coalesce(closed, F.lit(-1))),
            opened,
        ),
    )
    unit = Window.partitionBy(F.coalesce(F.col("client"), F.lit("")), "_unit").orderBy("seq")
    first_ts = F.first("ts_ms").over(unit.rowsBetween(Window.unboundedPreceding, 0))
    return marked.withColumn(
        "ts_ms", F.when(F.col("_unit").isNotNull(), first_ts).otherwise(F.col("ts_ms"))
    ).drop("_unit")


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


def family_map(spark: SparkSession, valid: DataFrame) -> dict[tuple[int, str], str]:
    """Keys tied together by RENAME or multi-stream XREADGROUP, mapped to one family name."""
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

    for row in rows:
        keys = [(row["db"], k) for k in row["links"]]
        for other in keys[1:]:
            a, b = find(keys[0]), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return {node: find(node)[1] for node in parent} | {
        root: root[1] for root in {find(n) for n in parent}
    }


def route_events(spark: SparkSession, valid: DataFrame, profile: str) -> DataFrame:
    """Each event with its command name, scope, families and (when it reaches no
    stream) the outcome it has on its own."""
    families = family_map(spark, valid)
    out_schema = StructType(
        [
            *valid.schema.fields,
            StructField("command", StringType()),
            StructField("scope", StringType()),
            StructField("families", ArrayType(StringType())),
            StructField("pre_kind", StringType()),
            StructField("pre_error", StringType()),
        ]
    )
    return valid.mapInArrow(make_router(profile, families), out_schema)


def activity_markers(routed: DataFrame) -> DataFrame | None:
    """Markers telling a family that a client blocked there sent a command elsewhere.

    A blocked connection sends nothing: a client's next command ends its wait,
    even when that command touches keys of another family. Every command of a
    client that ever blocked in a family, and that does not reach that family
    itself, sends it a ``marker`` row (same seq and time, no effect but that).
    """
    blocks = F.exists("argv", lambda a: F.upper(a) == "BLOCK")
    waits = (
        routed.filter((F.col("command") == "XREADGROUP") & F.col("client").isNotNull() & blocks)
        .select("client", F.col("db").alias("m_db"), F.explode("families").alias("m_family"))
        .distinct()
    )
    if waits.limit(1).count() == 0:
        return None
    same_db = F.col("db") == F.col("m_db")
    reaches = (
        ((F.col("scope") == "keys") & same_db & F.array_contains("families", F.col("m_family")))
        | (F.col("scope") == "all")
        | ((F.col("scope") == "db") & same_db)
    )
    return (
        routed.join(F.broadcast(waits), "client")
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
        )
    )


def fan_out(routed: DataFrame) -> DataFrame:
    """One row per (event, family) it must reach, flagged ``fanout`` when it reaches several,
    plus the activity markers of clients that block."""
    rows = _fan_out_commands(routed).withColumn("marker", F.lit(False))
    markers = activity_markers(routed)
    return rows if markers is None else rows.unionByName(markers)


def _fan_out_commands(routed: DataFrame) -> DataFrame:
    keyed = routed.filter(F.col("scope") == "keys").withColumn("fanout", F.size("families") > 1)
    per_family = keyed.select(
        "seq", "ts_ms", "argv", "db", "client", "fanout", F.explode("families").alias("family")
    )
    flush = routed.filter(F.col("scope").isin("db", "all"))
    if flush.limit(1).count() == 0:
        return per_family
    known = per_family.select("db", "family").distinct()
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
        )
    )
    return per_family.unionByName(flush_rows)


# --------------------------------------------------------------------------
# 5: replay
# --------------------------------------------------------------------------


def replay_stage(
    routed_rows: DataFrame,
    profile: str,
    as_of_ms: int,
    as_of_seq: int,
    partitions: int,
    node_max_entries: int = 100,
    node_max_bytes: int = 4096,
) -> DataFrame:
    """The one shuffle and sort: families hashed to partitions, events sorted by seq,
    then the grouped iterator UDF (same grouping columns, so Spark adds no exchange)."""
    keys = ("db", "family")
    return (
        routed_rows.repartition(partitions, *keys)
        .sortWithinPartitions(*keys, "seq")
        .groupBy(*keys)
        .applyInArrow(
            make_replay_function(profile, as_of_ms, as_of_seq, node_max_entries, node_max_bytes),
            REPLAY_OUTPUT_SCHEMA,
        )
    )


def reconstruct(
    spark: SparkSession,
    events: DataFrame,
    options: ReconstructOptions | None = None,
    progress: Progress = _quiet,
) -> ReconstructResult:
    """Reconstruct every output table from an events DataFrame (no storage involved)."""
    options = options or ReconstructOptions()
    profile = get_profile(options.profile).name
    timings: dict[str, float] = {}
    clock = time.monotonic()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.monotonic()
        timings[stage] = round(now - clock, 3)
        clock = now

    progress("validating events")
    conformed = conform_events(events)
    valid, rejected = split_rejected(conformed)
    valid = resolve_db(spark, valid).select(*(f.name for f in EVENTS_SCHEMA.fields))
    valid, stop_seq = cut_as_of(valid, options.as_of_ms, options.as_of_seq)
    if get_profile(profile).unit_time_snapshot:
        valid = unit_time(valid)
    valid = valid.persist(StorageLevel.MEMORY_AND_DISK)
    bounds = valid.agg(F.count(F.lit(1)), F.max("seq"), F.max("ts_ms")).first()
    assert bounds is not None
    n_valid, max_seq, max_ts = bounds[0], bounds[1], bounds[2]
    as_of_ms = options.as_of_ms if options.as_of_ms is not None else max_ts
    as_of_seq = options.as_of_seq if options.as_of_seq is not None else max_seq
    if options.as_of_seq is not None and max_seq is not None:
        as_of_seq = min(options.as_of_seq, max_seq)
    lap("validate")
    progress(f"routing {n_valid:,} events to stream families")
    routed = route_events(spark, valid, profile).persist(StorageLevel.MEMORY_AND_DISK)
    rows = fan_out(routed)
    lap("route")
    partitions = options.partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    progress(f"replaying through the {profile} model in {partitions} partitions")
    replayed = replay_stage(
        rows,
        profile,
        as_of_ms if as_of_ms is not None else 0,
        as_of_seq or 0,
        partitions,
        options.node_max_entries,
        options.node_max_bytes,
    ).persist(StorageLevel.MEMORY_AND_DISK)
    tables = {
        name: replayed.filter(F.col("table") == name).select(*TABLE_COLUMNS[name])
        for name in OUTPUT_TABLES
    }
    report: dict[str, Any] = {
        "profile": profile,
        "stream_node_max": {
            "entries": options.node_max_entries,
            "bytes": options.node_max_bytes,
        },
        "as_of_ms": as_of_ms,
        "as_of_seq": as_of_seq,
        "stopped_before_seq": stop_seq,
        "events": {"valid": n_valid},
        "timings_s": timings,
    }
    result = ReconstructResult(
        tables, rejected, as_of_ms, as_of_seq, report, [valid, routed, replayed]
    )
    _count_outcomes(routed, replayed, report)
    lap("replay")
    return result


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
    out_path: str,
    options: ReconstructOptions | None = None,
    progress: Progress = _quiet,
) -> dict[str, Any]:
    """Read the events table, reconstruct, write every table under ``out_path``; return
    the run report (also written to ``out_path/_run_report.json``)."""
    options = options or ReconstructOptions()
    started = time.time()
    if not storage.table_exists(spark, events_path):
        raise InputContractError(f"--events {events_path}: no Delta table there")
    input_version = storage.table_version(spark, events_path)
    progress(f"reading events from {events_path} (Delta version {input_version})")
    events = storage.read_table(spark, events_path)
    result = reconstruct(spark, events, options, progress)
    report = result.report
    output_rows: dict[str, int] = {}
    write_started = time.monotonic()
    for name, df in [*result.tables.items(), ("rejected_events", result.rejected)]:
        progress(f"writing {name}")
        storage.write_table(
            df,
            os.path.join(out_path, name),
            "overwrite",
            txn_app_id=options.txn_app_id,
            txn_version=options.txn_version,
        )
        output_rows[name] = df.count()
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
            "output": {"path": out_path, "rows": output_rows},
            "keys": output_rows.get("streams", 0),
            "options": asdict(options),
            "storage": storage.storage_mode(spark),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "duration_s": round(time.time() - started, 3),
        }
    )
    result.unpersist()
    os.makedirs(out_path, exist_ok=True)
    with open(os.path.join(out_path, "_run_report.json"), "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=2, sort_keys=True)
    return report


def format_report(report: dict[str, Any]) -> str:
    """The run report as a few readable lines."""
    ev = report.get("events", {})
    lines = [
        f"profile {report.get('profile')}  as of seq {report.get('as_of_seq')}"
        f" / {report.get('as_of_ms')} ms",
        f"events: read {ev.get('read', ev.get('valid'))}, applied {ev.get('applied')}, "
        f"ignored {ev.get('ignored')}, failed {ev.get('failed')}, rejected {ev.get('rejected', 0)}",
    ]
    if ev.get("failed_by_kind"):
        lines.append(
            "failed by error kind: "
            + ", ".join(f"{k} {v}" for k, v in ev["failed_by_kind"].items())
        )
    if ev.get("rejected_by_reason"):
        lines.append(
            "rejected: " + ", ".join(f"{k} {v}" for k, v in ev["rejected_by_reason"].items())
        )
    rows = report.get("output", {}).get("rows", {})
    if rows:
        lines.append("rows: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
    if report.get("notes"):
        lines.append("notes: " + ", ".join(f"{k} {v}" for k, v in report["notes"].items()))
    timings = report.get("timings_s", {})
    lines.append(
        f"took {report.get('duration_s', '?')} s ("
        + ", ".join(f"{k} {v}" for k, v in timings.items())
        + ")"
    )
    return "\n".join(lines)


def summarize(spark: SparkSession, out_path: str, limit: int = 10) -> str:
    """A short readable summary of the PEL and ownership tables under ``out_path``."""
    pel = storage.read_table(spark, os.path.join(out_path, "pel"))
    own = storage.read_table(spark, os.path.join(out_path, "ownership"))
    groups = storage.read_table(spark, os.path.join(out_path, "groups"))
    streams = storage.read_table(spark, os.path.join(out_path, "streams"))
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
