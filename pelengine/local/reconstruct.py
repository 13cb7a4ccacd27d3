"""The local runner's pipeline as one function: an Arrow table of events in, the output
tables, the rejected rows and the report's counts out, no storage (the local twin of
``pipeline.reconstruct.reconstruct``: a full run, or a night continuing saved state).

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
from pelengine.local import night, prepare
from pelengine.local.digest import spark_digest
from pelengine.local.replay import count_outcomes, output_tables, replay_families
from pelengine.local.validate import command_names, conform_table
from pelengine.progress import Laps, Progress, quiet
from pelengine.settings import Settings

EXEC_UNIT = prepare.EXEC_UNIT
#: the columns the router reads, in the order the Spark runner gives them
ROUTER_INPUT = ("seq", "ts_ms", "argv", "db", "client", "source", EXEC_UNIT)
#: the routed rows' columns the report's outcome counts read (``count_outcomes``)
OUTCOME_INPUT = ("seq", "ts_ms", "source", "scope", "command", "pre_kind", "pre_error")


@dataclass
class LocalCarry:
    """What a local night continues from (``pipeline.carry.Carry``, as Arrow tables): the
    state after the events up to ``high_seq``. :func:`reconstruct_local` then replays only
    the events it is given (those after ``high_seq``) and carries the rest over."""

    high_seq: int
    as_of_ms: int | None
    as_of_seq: int | None
    family_of: dict[tuple[int, str], str]  # keys tied into one family so far
    states: pa.Table  # db, family, applied_seq, state_version, state, agg_n, agg_x
    previous: dict[str, pa.Table]  # the snapshot tables and delivery_counts as they are
    waits: list[tuple[str, int, str]]  # (client, db, family) of every blocking read so far
    select_db: int = 0  # the db of the last SELECT (for rows that carry none)
    open_units: dict[str, int | None] = field(default_factory=dict)  # 7.2+ MULTI left open
    #: the previous delivery_counts rows ``previous`` lacks (its closed ones), where it
    #: holds only the pending ones (``local.night.ClosedRows``)
    closed_history: night.ClosedRows | None = None


@dataclass
class LocalResult:
    """The output tables as Arrow tables, the rejected rows, and the run's counts; with
    ``settings.incremental`` also the family rows of the state (``states``, flagged
    ``replayed``) and what the run row keeps (``carried``)."""

    tables: dict[str, pa.Table]
    rejected: pa.Table
    as_of_ms: int | None
    as_of_seq: int | None
    report: dict[str, Any] = field(default_factory=dict)
    states: pa.Table | None = None
    carried: dict[str, Any] = field(default_factory=dict)
    #: (rows with a seq, their XOR digest, rows without one, largest seq) of every row
    #: given, as Spark's ``xxhash64`` digests them (``local.digest``): incremental only
    digest: tuple[int, int, int, int | None] | None = None


def reconstruct_local(
    events: pa.Table,
    settings: Settings | None = None,
    progress: Progress = quiet,
    carry: LocalCarry | None = None,
    mark_seq: int | None = None,
) -> LocalResult:
    """Every output table from ``events`` (the events table's rows, as read), in this
    process. ``settings.incremental``: the replay keeps each family's model (``states``)
    and ``carried`` what the state's run row keeps; with ``carry`` (a night), ``events``
    are only the rows after ``carry.high_seq``: the families they reach continue from
    their saved models, every other family's rows of the snapshot tables are carried over
    (``pipeline.reconstruct.reconstruct``'s rules). ``mark_seq``: the state rows also
    digest the rows up to it (``mark_n``/``mark_x``)."""
    settings = settings or Settings()
    chosen = settings.model_profile
    engine, engine_reason = resolve_engine(settings.engine, keep_state=settings.incremental)
    if carry is not None and not settings.incremental:
        raise ValueError("a night (carry) keeps state: settings.incremental must be set")
    lap = Laps(progress)
    timings = lap.timings
    carried: dict[str, Any] = {}

    progress("validating events")
    conformed = conform_table(events)
    facts = conformed.facts
    rejected, rejected_by_reason = conformed.rejected, dict(conformed.rejected_by_reason)
    digest = None
    if settings.incremental and conformed.rows is not None:
        digest = spark_digest(conformed.rows)
    valid = prepare.sorted_by_seq(conformed.valid)
    # each table below goes as soon as the next step has what it needs from it: at 10M
    # events every copy of the log is gigabytes
    del conformed
    names = command_names(valid.column("argv"))
    initial_db = carry.select_db if carry is not None else 0
    if settings.incremental:
        carried["select_db"] = facts["select_db"] if facts["select_db"] is not None else initial_db
    db = prepare.resolve_db(valid, names, initial_db, bool(facts["selects_without_db"]))
    valid = valid.set_column(valid.schema.get_field_index("db"), "db", db)
    valid, stop_seq = prepare.cut_as_of(valid, settings.as_of_ms, settings.as_of_seq)
    names = names.slice(0, valid.num_rows)
    units = pa.nulls(valid.num_rows, pa.int64())
    open_units = carry.open_units if carry is not None else {}
    if chosen.unit_time_snapshot:
        units, ts_ms = prepare.unit_columns(valid, names, times=True, open_units=open_units)
        valid = valid.set_column(valid.schema.get_field_index("ts_ms"), "ts_ms", ts_ms)
    if settings.incremental:
        carried["open_units"] = (
            prepare.open_units_after(valid, names, open_units) if chosen.unit_time_snapshot else {}
        )
    valid = valid.append_column(EXEC_UNIT, units)
    n_valid = valid.num_rows
    max_seq = pc.max(valid.column("seq")).as_py()
    max_ts = pc.max(valid.column("ts_ms")).as_py()
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
        saved = set(
            zip(
                carry.states.column("db").to_pylist(),
                carry.states.column("family").to_pylist(),
                strict=True,
            )
        )
    families = prepare.family_links(
        valid, names, carry.family_of if carry is not None else None, saved, renamed
    )
    if renamed and states_in is not None:
        progress(f"{len(renamed)} saved famil(ies) tied to others by new events: merging")
        states_in = night.renamed_states(states_in, renamed)
    router = _engine(engine)().Router
    routed = prepare.route(
        valid.select(list(ROUTER_INPUT)),
        lambda: router(chosen, families),
        prepare.ROUTE_WORKERS if engine == "native" else 1,
    )
    found = prepare.routed_facts(routed)
    old_waits = [
        (c, d, renamed.get((d, f), f)) for c, d, f in (carry.waits if carry is not None else [])
    ]
    if not chosen.unit_time_snapshot and (old_waits or found.blocking):
        # 7.0 with blocking reads: their units, for the family replays
        units, _ = prepare.unit_columns(routed, names, times=False)
        routed = routed.set_column(routed.schema.get_field_index(EXEC_UNIT), EXEC_UNIT, units)
    known = states_in.select(["db", "family"]) if states_in is not None else None
    rows = prepare.fan_out(routed, found, old_waits, known)
    if settings.incremental:
        carried["waits"] = sorted(set(found.waits) | set(old_waits))
        carried["family_of"] = families
        rows = night.with_seeds(rows, states_in)
    # what the report's counts read of the routed rows (not argv: the fan-out has a copy)
    outcome_columns = routed.select(list(OUTCOME_INPUT))
    del valid, routed
    lap("route")

    progress(f"replaying through the {chosen.name} model ({engine} engine) in this process")
    batches = replay_families(
        rows,
        settings,
        as_of_ms if as_of_ms is not None else 0,
        as_of_seq or 0,
        engine,
        progress,
        mark_seq=mark_seq,
    )
    del rows
    prior = None
    if carry is not None and "delivery_counts" in carry.previous:
        prior, carried["prior_closed"] = night.prior_segments(
            carry.previous["delivery_counts"], batches, carry.high_seq, carry.closed_history
        )
    tables = output_tables(batches, prior)
    states: pa.Table | None = None
    if settings.incremental:
        states = night.state_rows(batches)
        if carry is not None and states_in is not None:
            replayed = states.select(["db", "family"])
            carried["families"] = night.family_counts(replayed, saved or set(), renamed)
            tables = night.carry_tables(
                tables, carry.previous, families, replayed, as_of_ms, as_of_seq
            )
            states = night.with_untouched(states, states_in, replayed)
            carried["renamed"] = dict(renamed)
    split = {"min_groups": settings.split_groups, "max_units": 1, "families_split": 0, "units": 0}
    report = replay_report(
        settings,
        (engine, engine_reason),
        (as_of_ms, as_of_seq, stop_seq),
        split,
        {"valid": n_valid, "rejected_by_reason": rejected_by_reason},
        timings,
    )
    count_outcomes(outcome_columns, batches, report)
    ev = report["events"]
    lap(
        "replay",
        f"{ev['applied']:,} applied, {ev['ignored']:,} ignored, {ev['failed']:,} failed "
        "(Redis errors)",
    )
    return LocalResult(
        tables,
        rejected,
        as_of_ms,
        as_of_seq,
        report,
        states=states,
        carried=carried,
        digest=digest,
    )


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)
