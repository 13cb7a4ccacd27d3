"""The pipeline as one function: events DataFrame in, output DataFrames out, no storage.

conform -> units -> route -> replay -> assemble (each a module of this package, each
reported through ``progress``). The runs (pelengine.runs) read the events and write
what this returns.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    LongType,
)

from pelengine.engine.native import resolve_engine
from pelengine.engine.outcomes import replay_report
from pelengine.local.validate import facts_after_retag
from pelengine.model.delivery import INCARNATION_COLUMNS, SEGMENT_COLUMNS
from pelengine.pipeline import assemble
from pelengine.pipeline.assemble import (
    merge_delivery_segments,
    merged_in_partitions,
    output_table,
    report_facts,
)
from pelengine.pipeline.carry import Carry, carry_tables, prior_segments, rename_families
from pelengine.pipeline.conform import (
    conform_events,
    cut_as_of,
    first_facts,
    resolve_db,
    retag_shared_rows,
    shared_rows_change,
    split_tagged,
    tag_rejected,
    tagged_facts,
)
from pelengine.pipeline.replay import (
    check_replay_plan,
    replay_stage,
    replayed_table,
    seed_rows,
    without_state,
)
from pelengine.pipeline.route import (
    LINK_ROWS_COLLECTED,
    counted_links,
    family_map,
    fan_out,
    link_candidates,
    links_less,
    route_events,
    routed_facts,
    split_by_group,
)
from pelengine.pipeline.units import (
    EXEC_UNIT,
    mark_units,
    open_units_after,
    planned_units,
)
from pelengine.progress import Laps, Progress, quiet
from pelengine.schemas import (
    EVENTS_SCHEMA,
    FAMILY_STATE_COLUMNS,
    OUTPUT_TABLES,
)
from pelengine.settings import Settings


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


def reconstruct(
    spark: SparkSession,
    events: DataFrame,
    settings: Settings | None = None,
    progress: Progress = quiet,
    carry: Carry | None = None,
    mark_seq: int | None = None,
) -> ReconstructResult:
    """Reconstruct every output table from an events DataFrame (no storage involved).

    ``carry`` (incremental runs): ``events`` are only the rows after ``carry.high_seq``;
    the families they reach continue from their saved models, every other family's
    rows are carried over from ``carry.previous``. ``mark_seq`` (incremental): the state
    rows also digest the rows up to it (``mark_n``/``mark_x``).
    """
    settings = settings or Settings()
    chosen = settings.model_profile
    profile = chosen.name
    # once, on the driver: the executors run what was chosen here (a plain value)
    engine, engine_reason = resolve_engine(settings.engine, keep_state=settings.incremental)
    lap = Laps(progress)
    timings = lap.timings

    progress("validating events")
    persisted: list[DataFrame] = []
    # The events are read and checked once: every row with its ``reason`` (null: to be
    # replayed) is cached; the valid rows, the rejected ones and every check come from it.
    conformed = conform_events(events)
    partitions = settings.partitions or int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    # as many partitions as the run's parallelism, not one per file of the events table:
    # every stage before the replay's shuffle (the router UDF among them) runs per partition
    tagged = _persist(tag_rejected(conformed.coalesce(partitions), shared=False), persisted)
    initial_db = carry.select_db if carry is not None else 0
    uncut = settings.as_of_ms is None and settings.as_of_seq is None
    # The first action builds the cache and asks it, at once, for the seqs rows share, the
    # facts the stages below need and the family links of the valid rows (with the db they
    # have unless a SELECT without db moves it: then, or when a seq is shared or the log is
    # cut, the links are collected again from the rows as they end up)
    links = None
    if uncut:
        first_valid = split_tagged(tagged)[0]
        links = link_candidates(
            first_valid.withColumn("db", F.coalesce(F.col("db"), F.lit(initial_db)))
        ).limit(LINK_ROWS_COLLECTED + 1)
    probed = first_facts(tagged, links)
    # rows sharing a seq: compared whole, only they are shuffled; few, they join the
    # cached rows from the driver, else the re-tagged events are cached in their place
    retagged, recache, retagged_rows = retag_shared_rows(spark, tagged, probed.shared)
    if retagged is not None and not recache:
        tagged = retagged
    elif retagged is not None:
        first = tagged
        tagged = _persist(retagged, persisted)
        tagged.count()  # built from the first cache, which can then go
        with contextlib.suppress(Exception):
            first.unpersist()
            persisted.remove(first)
    valid, rejected = split_tagged(tagged)
    facts, rejected_by_reason = probed.facts, probed.rejected_by_reason
    if retagged is not None:  # the facts of the rows tagged again
        moved = None
        if retagged_rows is not None:
            moved = facts_after_retag(facts, rejected_by_reason, retagged_rows)
        # one action for the probes of the stages below and the rejected rows' counts
        facts, rejected_by_reason = moved if moved is not None else tagged_facts(tagged)
    carried: dict[str, Any] = {}
    if settings.incremental:
        carried["select_db"] = _or(facts["select_db"], initial_db)
    windowed = facts["selects_without_db"]
    # the links the first action counted, less those of rows a shared seq rejected (from
    # the rows tagged again, on the driver): the links of the rows replayed
    found_links = None
    if links is not None and not windowed and len(probed.extra) <= LINK_ROWS_COLLECTED:
        counted = counted_links(probed.extra)
        if retagged is None:
            found_links = [(db, keys) for db, keys, _ in counted]
        elif retagged_rows is not None:
            gone, added = shared_rows_change(retagged_rows, initial_db)
            found_links = links_less(counted, gone, added)
    valid = resolve_db(spark, valid, initial_db, windowed)
    valid = valid.select(*(f.name for f in EVENTS_SCHEMA.fields))
    valid, stop_seq = cut_as_of(valid, settings.as_of_ms, settings.as_of_seq)
    open_units = carry.open_units if carry is not None else None
    # the rows the probes counted are these rows (and the routed rows), less their db,
    # unless the log was cut
    present = (facts["multi"], facts["lua"]) if uncut else None
    if chosen.unit_time_snapshot:
        valid = mark_units(valid, open_units, times=True, present=present)
    else:  # 7.0: units matter only to blocking reads (marked after routing, if any)
        valid = valid.withColumn(EXEC_UNIT, F.lit(None).cast(LongType()))
    if windowed or chosen.unit_time_snapshot or settings.as_of_ms is not None:
        # windows over the whole log: computed once (otherwise valid is a cheap
        # projection of the cached rows)
        valid = _persist(valid, persisted)
    if settings.incremental:
        carried["open_units"] = (
            open_units_after(valid, open_units) if chosen.unit_time_snapshot else {}
        )
    units_timed = chosen.unit_time_snapshot and (bool(open_units) or facts["multi"] or facts["lua"])
    if uncut and not units_timed:  # the probes' rows, with their times
        n_valid, max_seq, max_ts = facts["rows"], facts["max_seq"], facts["max_ts"]
    else:  # cut, or times moved to their unit's first (7.2+)
        bounds = valid.agg(F.count(F.lit(1)), F.max("seq"), F.max("ts_ms")).first()
        assert bounds is not None
        n_valid, max_seq, max_ts = bounds[0], bounds[1], bounds[2]
    if carry is not None:
        max_ts = _max(carry.as_of_ms, max_ts)
        max_seq = _max(carry.as_of_seq, max_seq)
    as_of_ms, as_of_seq = settings.moment(max_seq, max_ts)
    lap("validate", f"{n_valid:,} events to replay")
    progress(f"routing {n_valid:,} events to stream families")
    saved: set[tuple[int, str]] | None = None
    renamed: dict[tuple[int, str], str] = {}
    states_in = carry.states if carry is not None else None
    if carry is not None:
        saved = carry.family_keys
        if saved is None:
            saved = {(r["db"], r["family"]) for r in carry.states.select("db", "family").collect()}
    families = family_map(
        spark, valid, carry.family_of if carry else None, saved, renamed, links=found_links
    )
    if renamed and states_in is not None:
        progress(f"{len(renamed)} saved famil(ies) tied to others by new events: merging")
        states_in = rename_families(states_in, renamed)
    routed = _persist(route_events(spark, valid, settings, families, engine=engine), persisted)
    routed_seen = routed_facts(routed)  # one action: blocking reads, flushes
    if not chosen.unit_time_snapshot and (
        carry is not None and carry.waits or routed_seen.blocking
    ):
        # 7.0 with blocking reads: their units, for the family replays
        marked, wide = planned_units(routed.drop(EXEC_UNIT), times=False, present=present)
        # a cheap projection of the routed rows when few rows are inside a transaction
        routed = _persist(marked, persisted) if wide else marked
    old_waits = [(c, db, renamed.get((db, f), f)) for c, db, f in (carry.waits if carry else [])]
    rows = fan_out(
        routed,
        routed_seen,
        old_waits,
        states_in.select("db", "family") if states_in is not None else None,
    )
    # incremental runs keep one saved model per family: they do not split
    rows, split_stats, unit_groups = split_by_group(
        routed, rows, 0 if settings.incremental else settings.split_groups, partitions
    )
    if settings.incremental:
        carried["waits"] = sorted(set(routed_seen.waits) | set(old_waits))
        carried["family_of"] = families
        if carry is not None:
            assert states_in is not None
            rows = seed_rows(rows, states_in)
        else:
            rows = without_state(rows)
    lap(
        "route",
        f"{split_stats['families_split']} stream famil(ies) split into "
        f"{split_stats['units']} per-group replays"
        if split_stats["families_split"]
        else "",
    )
    progress(f"replaying through the {profile} model ({engine} engine) in {partitions} partitions")
    # DISK_ONLY: the replay output (every history row) is the largest thing cached; a
    # MEMORY_AND_DISK block spilled to disk is read back into the heap whole, and a block
    # of a few GB (10M events in 4 partitions) then ends the JVM with OutOfMemoryError.
    # From disk it is streamed.
    replayed = _persist(
        replay_stage(
            rows,
            settings,
            as_of_ms if as_of_ms is not None else 0,
            as_of_seq or 0,
            partitions,
            mark_seq=mark_seq,
            unit_groups=unit_groups,
            engine=engine,
            check=False,
        ),
        persisted,
        StorageLevel.DISK_ONLY,
    )
    # checked on the plan the cache keeps: planning the replay again (on a night, with the
    # saved states' Delta scan in it) costs Spark jobs of its own
    check_replay_plan(replayed)
    report = replay_report(
        settings,
        (engine, engine_reason),
        (as_of_ms, as_of_seq, stop_seq),
        split_stats,
        {"valid": n_valid, "rejected_by_reason": rejected_by_reason},
        timings,
    )
    # one action: the report's counts, and on a night the families the replay kept a state
    # for (the replayed families every carried table and the state leave out)
    replay_facts = report_facts(routed, replayed, report, families=carry is not None)
    replayed_keys = replay_facts.families
    tables = {name: output_table(name, replayed_table(replayed, name)) for name in OUTPUT_TABLES}
    segments = replayed_table(replayed, "delivery_segments").select(*SEGMENT_COLUMNS)
    incarnations = replayed_table(replayed, "group_incarnations").select(*INCARNATION_COLUMNS)
    states: DataFrame | None = None
    if settings.incremental:
        state_cols = FAMILY_STATE_COLUMNS
        states = replayed_table(replayed, "state").select(*state_cols, "mark_n", "mark_x")
        if carry is not None:
            assert states_in is not None
            # the replayed families as the rows they are: no decoding of the replay's state
            # rows again for each table that leaves them out (from Arrow, so no Python
            # worker reads them back either)
            replayed_families = _family_frame(spark, sorted(replayed_keys))
            carried["families"] = _family_counts(replayed_keys, saved or set(), renamed)
            old_counts = carry.previous.get("delivery_counts")
            if old_counts is not None:
                # the replayed families' rows so far: the first segment of their entries
                segments = segments.unionByName(
                    prior_segments(old_counts, segments, incarnations, carry.high_seq),
                    allowMissingColumns=True,
                )
            tables["delivery_counts"] = merge_delivery_segments(segments, incarnations)
            tables = carry_tables(tables, carry, families, replayed_families, as_of_ms, as_of_seq)
            untouched = (
                states_in.join(replayed_families, ["db", "family"], "left_anti")
                .select(*state_cols)
                .withColumn("mark_n", F.lit(None).cast("long"))
                .withColumn("mark_x", F.lit(None).cast("long"))
                .withColumn("replayed", F.lit(False))
            )
            states = states.withColumn("replayed", F.lit(True)).unionByName(untouched)
            # saved families merged into others by new events: their rows go
            carried["renamed"] = dict(renamed)
    in_partitions = replay_facts.segment_bytes <= assemble.MERGE_IN_PARTITION_BYTES
    if carry is None and not unit_groups and in_partitions:
        # each partition of the replay output holds whole families: merged where they are
        # (when no partition holds more segments than a Python worker should)
        tables["delivery_counts"] = merged_in_partitions(replayed)
    elif carry is None:
        tables["delivery_counts"] = merge_delivery_segments(segments, incarnations)
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
    ev = report["events"]
    lap(
        "replay",
        f"{ev['applied']:,} applied, {ev['ignored']:,} ignored, {ev['failed']:,} failed "
        "(Redis errors)",
    )
    return result


def _family_frame(spark: SparkSession, keys: list[tuple[int, str]]) -> DataFrame:
    """A DataFrame (``db`` INT, ``family`` STRING) of ``keys``."""
    import pyarrow as pa

    table = pa.table(
        {
            "db": pa.array([db for db, _ in keys], pa.int32()),
            "family": pa.array([family for _, family in keys], pa.string()),
        }
    )
    return spark.createDataFrame(table)


def _family_counts(
    replayed: list[tuple[int, str]],
    saved: set[tuple[int, str]],
    renamed: dict[tuple[int, str], str],
) -> dict[str, int]:
    """A night's family counts for its report: the families it replayed, and every family
    it keeps a state for (those and the saved families it carries unchanged: a saved
    family merged into another by new events is one of the replayed ones)."""
    again = set(replayed)
    carried = {(db, renamed.get((db, f), f)) for db, f in saved} - again
    return {"replayed": len(again), "total": len(again) + len(carried)}


def _or(value: int | None, default: int) -> int:
    return default if value is None else int(value)


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)
