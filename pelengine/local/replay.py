"""The local runner's replay and assemble stages: each family's rows through the
engine's ``FamilyReplay`` (the one the Spark runner's replay function starts, with the
same arguments), then the output tables, ``delivery_counts`` merged from the delivery
segments, and the report's outcome counts, by the rules of ``pipeline.assemble``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pelengine.engine.outcomes import count_outcomes as engine_count_outcomes
from pelengine.engine.outcomes import starting_state
from pelengine.engine.udf import _arrow_schema, family_starter
from pelengine.local.prepare import string_rank
from pelengine.model.commands import LOAD_COMMAND
from pelengine.model.delivery import (
    INCARNATION_COLUMNS,
    INCARNATION_IDENTITY,
    SEGMENT_COLUMNS,
    SEGMENT_IDENTITY,
    merge_delivery_segments,
)
from pelengine.model.routing import SCOPE_ALL, SCOPE_DB, SCOPE_NONE
from pelengine.schemas import OUTPUT_TABLES, REPLAY_TABLE_SCHEMAS, TABLE_COLUMNS, table_schema
from pelengine.settings import Settings

#: the most rows of one family the replay is fed at a time
REPLAY_BATCH_ROWS = 65_536
#: how many threads replay families at once (the native engine)
REPLAY_WORKERS = 2
#: a progress line at most this often (seconds) while families replay
PROGRESS_EVERY_S = 10.0


def replay_families(
    rows: pa.Table,
    settings: Settings,
    as_of_ms: int,
    as_of_seq: int,
    engine: str,
    progress: Callable[[str], None],
    workers: int = REPLAY_WORKERS,
    mark_seq: int | None = None,
) -> dict[str, list[pa.RecordBatch]]:
    """Replay each family of ``rows`` (sorted by db, family, seq) and return every table
    the replay emits, as its batches (``REPLAY_TABLE_SCHEMAS``). The families are dealt
    to ``workers`` threads by their size, the largest first to the least loaded (the
    native engine replays without the interpreter's lock; the Python engine holds it, so
    it replays in one)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    start = family_starter(settings, as_of_ms, as_of_seq, mark_seq, None, engine)
    spans = family_spans(rows)
    lanes = deal(spans, workers if engine == "native" else 1)
    lock = threading.Lock()
    seen = {"rows": 0, "families": 0, "line": time.monotonic()}

    def replay(lane: list[tuple[tuple[Any, ...], int, int]]) -> dict[str, list[pa.RecordBatch]]:
        out: dict[str, list[pa.RecordBatch]] = {}

        def keep(parts: Iterable[tuple[str, pa.RecordBatch]]) -> None:
            for table, batch in parts:
                if batch.num_rows:
                    out.setdefault(table, []).append(batch)

        for key, begin, length in lane:
            family = start(key)
            for batch in rows.slice(begin, length).to_batches(max_chunksize=REPLAY_BATCH_ROWS):
                keep(family.feed(batch))
                with lock:
                    seen["rows"] += batch.num_rows
                    if time.monotonic() - seen["line"] >= PROGRESS_EVERY_S:
                        seen["line"] = time.monotonic()
                        progress(
                            f"replayed {seen['rows']:,} of {rows.num_rows:,} rows "
                            f"({seen['families']:,} of {len(spans):,} families)"
                        )
            keep(family.finish())
            with lock:
                seen["families"] += 1
        return out

    merged: dict[str, list[pa.RecordBatch]] = {}
    with ThreadPoolExecutor(max_workers=len(lanes) or 1, thread_name_prefix="replay") as pool:
        for part in pool.map(replay, lanes):
            for table, batches in part.items():
                merged.setdefault(table, []).extend(batches)
    return merged


def family_spans(rows: pa.Table) -> list[tuple[tuple[Any, ...], int, int]]:
    """Each family of ``rows`` (sorted by db, family) as (its key, first row, rows)."""
    n = rows.num_rows
    if n == 0:
        return []
    import numpy as np

    key_names = ("db", "family")
    same = _same_as_next(rows, key_names, -1).to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(~same)
    ends = [*starts[1:].tolist(), n]
    keys = rows.select(list(key_names)).take(pa.array(starts)).to_pylist()
    return [
        ((k["db"], k["family"]), int(b), int(e) - int(b))
        for k, b, e in zip(keys, starts.tolist(), ends, strict=True)
    ]


def deal(
    spans: list[tuple[tuple[Any, ...], int, int]], workers: int
) -> list[list[tuple[tuple[Any, ...], int, int]]]:
    """``spans`` dealt to at most ``workers`` lanes: the largest first, each to the lane
    holding the fewest rows so far (one lane per family at most)."""
    lanes: list[list[tuple[tuple[Any, ...], int, int]]] = [[] for _ in range(max(1, workers))]
    loads = [0] * len(lanes)
    for span in sorted(spans, key=lambda s: -s[2]):
        i = loads.index(min(loads))
        lanes[i].append(span)
        loads[i] += span[2]
    return [lane for lane in lanes if lane]


def _table(batches: dict[str, list[pa.RecordBatch]], name: str) -> pa.Table:
    schema = _arrow_schema(REPLAY_TABLE_SCHEMAS[name])
    return pa.Table.from_batches(batches.get(name, []), schema=schema)


def output_tables(
    batches: dict[str, list[pa.RecordBatch]], prior: pa.Table | None = None
) -> dict[str, pa.Table]:
    """Every output table from the replay's rows (``pipeline.assemble.output_table``, and
    ``delivery_counts`` merged from the delivery segments, after ``prior`` ones: a
    night's previous rows, ``local.night.prior_segments``), in its schema."""
    tables: dict[str, pa.Table] = {}
    for name in OUTPUT_TABLES:
        schema = _arrow_schema(table_schema(name))
        if name == "delivery_counts":
            tables[name] = delivery_counts(batches, schema, prior)
            continue
        rows = _table(batches, name)
        if name == "pel_history":
            is_current = pc.is_null(rows.column("valid_to_seq"))
            rows = rows.append_column(pa.field("is_current", pa.bool_()), is_current)
        tables[name] = rows.select(list(TABLE_COLUMNS[name])).cast(schema)
    return tables


def delivery_counts(
    batches: dict[str, list[pa.RecordBatch]], schema: pa.Schema, prior: pa.Table | None = None
) -> pa.Table:
    """``delivery_counts`` from the delivery segments and the group incarnations the
    replay emitted: the rules of ``model.delivery.merge_delivery_segments`` (which
    ``pipeline.assemble.merge_delivery_segments`` follows in SQL), in Arrow
    (:func:`_merged_runs`); where an incarnation is named twice, the model's merge."""
    segments = _table(batches, "delivery_segments").select(list(SEGMENT_COLUMNS))
    if prior is not None and prior.num_rows:
        segments = pa.concat_tables([prior.cast(segments.schema), segments])
    incarnations = _table(batches, "group_incarnations").select(list(INCARNATION_COLUMNS))
    identity = list(INCARNATION_IDENTITY)
    if segments.num_rows == 0:
        return pa.Table.from_pylist([], schema=schema)
    repeated = incarnations.group_by(identity).aggregate([([], "count_all")])
    if repeated.num_rows != incarnations.num_rows:  # an incarnation named twice: the model's
        return _merged(segments.to_pylist(), incarnations.to_pylist(), schema)
    # each entry's segments together, in order: sorted by integers where the identity has
    # them (the group as its rank, the ID as its two numbers; the ID's text, which they
    # spell, only decides their ties). In one chunk first: the replay gives them in
    # hundreds of batches, and sorting and taking across chunks cost more than the copy
    segments = segments.combine_chunks()
    segments = segments.append_column("_group_rank", string_rank(segments.column("group")))
    order = ["db", "_group_rank", "group_created_seq", "id_ms", "id_seq", "id", "segment_n"]
    segments = segments.sort_by([(c, "ascending") for c in order]).drop_columns("_group_rank")
    return _merged_runs(segments, incarnations, schema)


def _merged(
    segments: list[dict[str, Any]], incarnations: list[dict[str, Any]], schema: pa.Schema
) -> pa.Table:
    """The model's merge of ``segments`` (all of an entry's), as a table of ``schema``."""
    rows = merge_delivery_segments(segments, incarnations)
    return pa.Table.from_pylist(rows, schema=schema)


def _merged_runs(segments: pa.Table, incarnations: pa.Table, schema: pa.Schema) -> pa.Table:
    """The model's merge (``model.delivery.merge_delivery_segments``) of ``segments``,
    sorted so that each entry's segments are one run in ``segment_n`` order, with every
    group incarnation named once in ``incarnations``; in Arrow and numpy, one row per run
    in run order, as the model emits them: the last segment's key, ID, count, status and
    close; the deliveries summed; the first and the last delivery time given; the owners
    sorted, each once; the latest change (the first segment holding the highest
    ``changed_seq``, or the incarnation's move where it is later); the key where the
    incarnation ended, where it is named."""
    n = segments.num_rows
    starts = np.flatnonzero(~_same_as_next(segments, SEGMENT_IDENTITY, -1).to_numpy(False))
    runs = len(starts)
    is_start = np.zeros(n, dtype=bool)
    is_start[starts] = True
    run_of = np.cumsum(is_start) - 1
    last = np.append(starts[1:], n) - 1
    positions = np.arange(n)

    def given(name: str, first: bool) -> pa.Array:
        """Per run, the first (else the last) non-null value of column ``name``."""
        column = segments.column(name).combine_chunks()
        valid = column.is_valid().to_numpy(False)
        if first:
            at = np.minimum.reduceat(np.where(valid, positions, n), starts)
        else:
            at = np.maximum.reduceat(np.where(valid, positions, -1), starts)
        none = (at >= n) | (at < 0)
        return column.take(pa.array(np.clip(at, 0, n - 1), mask=none))

    deliveries = np.add.reduceat(segments.column("deliveries").to_numpy(), starts)
    # owners: the runs' names, sorted (by rank: byte order, the code points' order) and
    # each once
    lists = segments.column("owner_names").combine_chunks()
    names = pc.list_flatten(lists)
    name_run = run_of[pc.list_parent_indices(lists).to_numpy()]
    rank = string_rank(names).to_numpy()
    order = np.lexsort((rank, name_run))
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = (name_run[order][1:] != name_run[order][:-1]) | (rank[order][1:] != rank[order][:-1])
    kept = order[keep]
    counts = np.bincount(name_run[kept], minlength=runs)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    owner_names = pa.ListArray.from_arrays(pa.array(offsets), names.take(pa.array(kept)))
    # the latest change of the segments: the first holding the run's highest changed_seq
    changed = segments.column("changed_seq").combine_chunks()
    has_change = changed.is_valid().to_numpy(False)
    changed_seq = np.where(has_change, changed.fill_null(0).to_numpy(), np.iinfo(np.int64).min)
    highest = np.maximum.reduceat(changed_seq, starts)
    at = np.minimum.reduceat(
        np.where(has_change & (changed_seq == highest[run_of]), positions, n), starts
    )
    none = at >= n
    pick = pa.array(np.clip(at, 0, n - 1), mask=none)
    change_seq = changed.take(pick)
    change_ms = segments.column("changed_ms").combine_chunks().take(pick)
    # the incarnation: where it ended, and its move (joined on a row number: a join carries
    # no list column)
    ends = segments.take(pa.array(last))
    final = incarnations.rename_columns(
        ["db", "_final_key", "group", "group_created_seq", "_moved_seq", "_moved_ms"]
    )
    identity = list(INCARNATION_IDENTITY)
    keys = ends.select(identity).append_column("_row", pa.array(np.arange(runs, dtype=np.int64)))
    found = keys.join(final, identity, join_type="left outer", use_threads=False).sort_by("_row")
    found = found.combine_chunks()
    moved_seq = found.column("_moved_seq").combine_chunks()
    moved_later = pc.and_(
        pc.is_valid(moved_seq),
        pc.or_(pc.is_null(change_seq), pc.fill_null(pc.greater(moved_seq, change_seq), False)),
    )
    columns = {
        "db": ends.column("db"),
        "key": pc.coalesce(found.column("_final_key"), ends.column("key")),
        "group": ends.column("group"),
        "id": ends.column("id"),
        "id_ms": ends.column("id_ms"),
        "id_seq": ends.column("id_seq"),
        "delivery_count": ends.column("delivery_count"),
        "deliveries": pa.array(deliveries),
        "owners": pa.array(counts),
        "first_delivery_ms": given("first_delivery_ms", True),
        "last_delivery_ms": given("last_delivery_ms", False),
        "status": ends.column("status"),
        "closed_ms": ends.column("closed_ms"),
        "owner_names": owner_names,
        "group_created_seq": ends.column("group_created_seq"),
        "changed_seq": pc.if_else(moved_later, moved_seq, change_seq),
        "changed_ms": pc.if_else(
            moved_later, found.column("_moved_ms").combine_chunks(), change_ms
        ),
    }
    return pa.table([columns[f.name].cast(f.type) for f in schema], schema=schema)


def _same_as_next(table: pa.Table, names: Iterable[str], step: int) -> pa.Array:
    """Whether each row's ``names`` equal (nulls equal) those of the row ``step`` after it
    (1) or before it (-1); false where there is none."""
    n = table.num_rows
    same = pa.array(np.ones(max(n - 1, 0), dtype=bool))
    for name in names:
        column = table.column(name).combine_chunks()
        after, before = column.slice(1), column.slice(0, n - 1)
        equal = pc.fill_null(pc.equal(after, before), False)
        both_null = pc.and_(pc.is_null(after), pc.is_null(before))
        same = pc.and_(same, pc.or_(equal, both_null))
    edge = pa.array([False], pa.bool_())
    if step > 0:
        return pa.concat_arrays([same, edge])
    return pa.concat_arrays([edge, same])


def count_outcomes(
    routed: pa.Table, batches: dict[str, list[pa.RecordBatch]], report: dict[str, Any]
) -> None:
    """The report's applied / ignored / failed counts, by command and error kind, its
    notes and its ``starting_state`` (``pipeline.assemble.report_facts``), from
    ``routed``'s columns ``local.reconstruct.OUTCOME_INPUT`` and the replay's: events that
    reach no stream by their outcome alone, the replays' counters, and each event
    replayed by several families counted once (an error anywhere wins, then applied,
    then ignored)."""
    scope = routed.column("scope")
    pre = (
        routed.filter(pc.equal(scope, SCOPE_NONE))
        .group_by(["command", "pre_kind", "pre_error"], use_threads=False)
        .aggregate([([], "count_all")])
        .to_pylist()
    )
    stats = (
        _table(batches, "stats")
        .group_by(["stat_command", "stat_kind", "stat_error"], use_threads=False)
        .aggregate([("stat_count", "sum")])
        .to_pylist()
    )
    rank = {"error": 3, "applied": 2}
    best: dict[int, tuple[int, tuple[str, str, str | None]]] = {}

    def offer(seq: int, outcome: tuple[str, str, str | None]) -> None:
        r = rank.get(outcome[1], 1)
        held = best.get(seq)
        if held is None or r > held[0]:
            best[seq] = (r, outcome)

    for row in _table(batches, "outcome").to_pylist():
        offer(row["seq"], (row["stat_command"], row["stat_kind"], row["stat_error"]))
    alone = routed.filter(pc.is_in(scope, pa.array([SCOPE_DB, SCOPE_ALL])))
    for row in alone.select(["seq", "command", "pre_kind", "pre_error"]).to_pylist():
        offer(row["seq"], (row["command"], row["pre_kind"], row["pre_error"]))
    outcomes: dict[tuple[str, str, str | None], int] = {}
    for _, outcome in best.values():
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    loads = (
        routed.filter(pc.equal(routed.column("command"), LOAD_COMMAND))
        .group_by(["source"], use_threads=False)
        .aggregate([([], "count_all"), ("seq", "min"), ("seq", "max"), ("ts_ms", "min")])
        .to_pylist()
    )
    engine_count_outcomes(
        [
            {
                "command": r["command"],
                "kind": r["pre_kind"],
                "error": r["pre_error"],
                "n": r["count_all"],
            }
            for r in pre
        ],
        [
            {
                "command": r["stat_command"],
                "kind": r["stat_kind"],
                "error": r["stat_error"],
                "n": r["stat_count_sum"],
            }
            for r in stats
        ],
        [{"command": c, "kind": k, "error": e, "n": n} for (c, k, e), n in outcomes.items()],
        report,
    )
    report["starting_state"] = starting_state(
        [
            {
                "source": r["source"],
                "n": r["count_all"],
                "first_seq": r["seq_min"],
                "last_seq": r["seq_max"],
                "snapshot_ms": r["ts_ms_min"],
            }
            for r in loads
        ]
    )
