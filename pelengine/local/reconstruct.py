"""The local runner's pipeline as one function: an Arrow table of events in, the output
tables, the rejected rows and the report's counts out, no storage (the local twin of
``pipeline.reconstruct.reconstruct``, for a full run).

conform -> db, cut -> units -> families, route -> fan out -> replay -> assemble, each
step the rule of its Spark stage (``local.prepare`` and ``local.replay`` name them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pelengine.engine.native import resolve_engine
from pelengine.engine.outcomes import replay_report
from pelengine.engine.udf import _engine
from pelengine.local import prepare
from pelengine.local.replay import count_outcomes, output_tables, replay_families
from pelengine.local.validate import command_names, conform_table
from pelengine.progress import Laps, Progress, quiet
from pelengine.settings import Settings

EXEC_UNIT = prepare.EXEC_UNIT
#: the columns the router reads, in the order the Spark runner gives them
ROUTER_INPUT = ("seq", "ts_ms", "argv", "db", "client", "source", EXEC_UNIT)


@dataclass
class LocalResult:
    """The output tables as Arrow tables, the rejected rows, and the run's counts."""

    tables: dict[str, pa.Table]
    rejected: pa.Table
    as_of_ms: int | None
    as_of_seq: int | None
    report: dict[str, Any] = field(default_factory=dict)


def reconstruct_local(
    events: pa.Table, settings: Settings | None = None, progress: Progress = quiet
) -> LocalResult:
    """Every output table from ``events`` (the events table's rows, as read), in this
    process: a full run (``settings.incremental`` is the Spark runner's)."""
    settings = settings or Settings()
    if settings.incremental:
        raise ValueError("the local runner reconstructs in full; nights run on Spark")
    chosen = settings.model_profile
    engine, engine_reason = resolve_engine(settings.engine, keep_state=False)
    lap = Laps(progress)
    timings = lap.timings

    progress("validating events")
    conformed = conform_table(events)
    facts = conformed.facts
    valid = prepare.sorted_by_seq(conformed.valid)
    names = command_names(valid.column("argv"))
    db = prepare.resolve_db(valid, names, 0, bool(facts["selects_without_db"]))
    valid = valid.set_column(valid.schema.get_field_index("db"), "db", db)
    valid, stop_seq = prepare.cut_as_of(valid, settings.as_of_ms, settings.as_of_seq)
    names = names.slice(0, valid.num_rows)
    units = pa.nulls(valid.num_rows, pa.int64())
    if chosen.unit_time_snapshot:
        units, ts_ms = prepare.unit_columns(valid, names, times=True)
        valid = valid.set_column(valid.schema.get_field_index("ts_ms"), "ts_ms", ts_ms)
    valid = valid.append_column(EXEC_UNIT, units)
    n_valid = valid.num_rows
    max_seq = pc.max(valid.column("seq")).as_py()
    max_ts = pc.max(valid.column("ts_ms")).as_py()
    as_of_ms, as_of_seq = settings.moment(max_seq, max_ts)
    lap("validate", f"{n_valid:,} events to replay")

    progress(f"routing {n_valid:,} events to stream families")
    families = prepare.family_links(valid, names)
    router = _engine(engine)().Router(chosen, families)
    routed = prepare.route(valid.select(list(ROUTER_INPUT)), router)
    found = prepare.routed_facts(routed)
    if not chosen.unit_time_snapshot and found.blocking:
        # 7.0 with blocking reads: their units, for the family replays
        units, _ = prepare.unit_columns(routed, names, times=False)
        routed = routed.set_column(routed.schema.get_field_index(EXEC_UNIT), EXEC_UNIT, units)
    rows = prepare.fan_out(routed, found)
    lap("route")

    progress(f"replaying through the {chosen.name} model ({engine} engine) in this process")
    batches = replay_families(
        rows,
        settings,
        as_of_ms if as_of_ms is not None else 0,
        as_of_seq or 0,
        engine,
        progress,
    )
    tables = output_tables(batches)
    split = {"min_groups": settings.split_groups, "max_units": 1, "families_split": 0, "units": 0}
    report = replay_report(
        settings,
        (engine, engine_reason),
        (as_of_ms, as_of_seq, stop_seq),
        split,
        {"valid": n_valid, "rejected_by_reason": dict(conformed.rejected_by_reason)},
        timings,
    )
    count_outcomes(routed, batches, report)
    ev = report["events"]
    lap(
        "replay",
        f"{ev['applied']:,} applied, {ev['ignored']:,} ignored, {ev['failed']:,} failed "
        "(Redis errors)",
    )
    return LocalResult(tables, conformed.rejected, as_of_ms, as_of_seq, report)
