"""A local night's carry-over, in Arrow: the rules of ``pipeline.carry`` and of a night's
part of ``pipeline.reconstruct`` for the local runner (``local.reconstruct``): saved
states renamed into the families they were merged into and fed first to their family's
replay, the previous ``delivery_counts`` rows of the entries the night touched as their
first segments, every other family's rows of the snapshot tables with the night's
``as_of``, and the family rows of the state the night keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pelengine.engine.udf import _arrow_schema
from pelengine.local.prepare import ROW_SCHEMA, string_rank
from pelengine.local.validate import nonzero
from pelengine.model.delivery import (
    INCARNATION_IDENTITY,
    PRIOR_SEGMENT_N,
    SEGMENT_COLUMNS,
    SEGMENT_IDENTITY,
)
from pelengine.schemas import (
    FAMILY_STATE_COLUMNS,
    REPLAY_TABLE_SCHEMAS,
    SAVED_STATE_TYPE,
    SNAPSHOT_TABLES,
)

#: the saved model as a replay's seed row carries it (``engine.udf.unwrap_state``'s struct)
SAVED_STATE = _arrow_schema(SAVED_STATE_TYPE)
SAVED_STATE_STRUCT = pa.struct(list(SAVED_STATE))
#: the rows of the replay's input on a night: ``prepare.ROW_SCHEMA`` and the saved model
NIGHT_ROW_SCHEMA = ROW_SCHEMA.append(pa.field("state", SAVED_STATE_STRUCT, True))
#: the family rows of the state a replay emits (``REPLAY_TABLE_SCHEMAS["state"]``)
STATE_ROWS = _arrow_schema(REPLAY_TABLE_SCHEMAS["state"])


def renamed_states(states: pa.Table, renamed: dict[tuple[int, str], str]) -> pa.Table:
    """Saved state rows under the names of the families they were merged into
    (``carry.rename_families``)."""
    pairs = zip(states.column("db").to_pylist(), states.column("family").to_pylist(), strict=True)
    family = pa.array([renamed.get((db, f), f) for db, f in pairs], pa.string())
    return states.set_column(states.schema.get_field_index("family"), "family", family)


def with_seeds(rows: pa.Table, states: pa.Table | None) -> pa.Table:
    """``rows`` (``ROW_SCHEMA``, sorted by db, family, seq) with a null ``state``, and the
    saved model of every family they reach as a row before that family's first
    (``pipeline.replay.seed_rows``: its ``seq`` the family's last applied one); sorted
    again by (db, family, seq)."""
    n = rows.num_rows
    out = rows.append_column(NIGHT_ROW_SCHEMA.field("state"), pa.nulls(n, SAVED_STATE_STRUCT))
    if states is None or states.num_rows == 0 or n == 0:
        return out
    reached = (
        rows.select(["db", "family"]).group_by(["db", "family"], use_threads=False).aggregate([])
    )
    seeds = states.take(matching(states, reached, ["db", "family"], anti=False))
    if seeds.num_rows == 0:
        return out
    m = seeds.num_rows
    state = pa.StructArray.from_arrays(
        [seeds.column(f.name).combine_chunks().cast(f.type) for f in SAVED_STATE],
        fields=list(SAVED_STATE),
    )
    seed_rows = pa.table(
        {
            "seq": seeds.column("applied_seq").cast(pa.int64()),
            "ts_ms": pa.repeat(0, m).cast(pa.int64()),
            "argv": pa.nulls(m, ROW_SCHEMA.field("argv").type),
            "db": seeds.column("db").cast(pa.int32()),
            "client": pa.nulls(m, pa.string()),
            "fanout": pa.repeat(False, m),
            "family": seeds.column("family").cast(pa.string()),
            "marker": pa.repeat(False, m),
            "exec_unit": pa.nulls(m, pa.int64()),
            "lead": pa.repeat(True, m),
            "silent": pa.repeat(False, m),
            "state": state,
        },
        schema=NIGHT_ROW_SCHEMA,
    )
    both = pa.concat_tables([seed_rows, out.cast(NIGHT_ROW_SCHEMA)])
    # the seed first within its family (stable: it comes first, and its seq is the last
    # one the family applied, below every new row's)
    rank = string_rank(both.column("family"))
    both = both.append_column("_rank", rank)
    order = pc.sort_indices(
        both, sort_keys=[("db", "ascending"), ("_rank", "ascending"), ("seq", "ascending")]
    )
    return both.take(order).drop_columns("_rank")


#: The previous ``delivery_counts`` rows a night did not read whole (its closed ones,
#: outside the ``pending`` partition): given which rows are wanted (a function from a
#: table of their ``SEGMENT_IDENTITY`` columns to the positions wanted, ascending), those
#: rows, every column (``runs.local_night`` reads the identity columns of each closed
#: file, then only the files holding a wanted row)
ClosedRows = Callable[[Callable[[pa.Table], pa.Array]], pa.Table]


def prior_segments(
    old: pa.Table,
    batches: dict[str, list[pa.RecordBatch]],
    high_seq: int,
    closed: ClosedRows | None = None,
) -> tuple[pa.Table, bool]:
    """The previous ``delivery_counts`` rows the night can change, as segments before
    any of its own (``carry.prior_segments``): the rows of the entries one of its segments
    names, and every row of a group incarnation a RENAME of the night moved; from ``old``
    (the previous rows, or, with ``closed``, the pending ones) and ``closed``. Also
    whether one of them is closed (the night's merge must then meet the whole table, not
    only its ``pending`` partition: ``carry.PRIOR_CLOSED``)."""
    segments = _replay_table(batches, "delivery_segments")
    incarnations = _replay_table(batches, "group_incarnations")
    identity = list(SEGMENT_IDENTITY)
    touched = segments.select(identity).group_by(identity, use_threads=False).aggregate([])
    touched = touched.append_column("_touched", pa.repeat(True, touched.num_rows))
    moved = incarnations.filter(
        pc.fill_null(pc.greater(incarnations.column("moved_seq"), high_seq), False)
    )
    inc = list(INCARNATION_IDENTITY)
    moved = moved.select(inc).group_by(inc, use_threads=False).aggregate([])
    moved = moved.append_column("_moved", pa.repeat(True, moved.num_rows))

    ids = pc.unique(touched.column("id").combine_chunks())
    created = pc.unique(moved.column("group_created_seq").combine_chunks())

    def wanted(keys: pa.Table) -> pa.Array:
        """The positions (ascending) of the rows of ``keys`` the night continues: first
        those whose ID the night touched or whose group incarnation it moved (hash
        lookups of one column), then the joins on their whole identity."""
        maybe = pc.is_in(keys.column("id"), value_set=ids.cast(keys.schema.field("id").type))
        if len(created):
            seqs = created.cast(keys.schema.field("group_created_seq").type)
            maybe = pc.or_(maybe, pc.is_in(keys.column("group_created_seq"), value_set=seqs))
        rows = nonzero(pc.fill_null(maybe, False))
        keyed = keys.select(identity).take(rows).append_column("_row", rows.cast(pa.int64()))
        hits = _flagged(_flagged(keyed, touched, identity), moved, inc)
        chosen = hits.filter(
            pc.or_(
                pc.fill_null(hits.column("_touched"), False),
                pc.fill_null(hits.column("_moved"), False),
            )
        )
        return pa.array(np.sort(chosen.column("_row").to_numpy()), pa.int64())

    rows = old.take(wanted(old))
    if closed is not None and (touched.num_rows or moved.num_rows):
        more = closed(wanted)
        if more.num_rows:
            rows = pa.concat_tables([rows, more.select(rows.column_names).cast(rows.schema)])
    n = rows.num_rows
    any_closed = bool(n) and bool(pc.any(pc.not_equal(rows.column("status"), "pending")).as_py())
    seg_schema = _arrow_schema(REPLAY_TABLE_SCHEMAS["delivery_segments"])
    columns = []
    for f in seg_schema:
        if f.name == "segment_n":
            columns.append(pa.repeat(PRIOR_SEGMENT_N, n).cast(f.type))
        else:
            columns.append(rows.column(f.name).cast(f.type))
    return pa.table(columns, schema=seg_schema).select(list(SEGMENT_COLUMNS)), any_closed


def _flagged(left: pa.Table, right: pa.Table, names: list[str]) -> pa.Table:
    """``left`` joined (left outer) on ``names`` to ``right``, whose one other column is a
    flag: null on the rows of ``left`` it has no row for."""
    schema = pa.schema([left.schema.field(c) for c in names]).append(right.schema.field(-1))
    return left.join(right.cast(schema), names, join_type="left outer", use_threads=False)


def matching(table: pa.Table, keys: pa.Table, names: list[str], *, anti: bool) -> pa.Array:
    """The positions (ascending) of the rows of ``table`` whose ``names`` equal those of a
    row of ``keys`` (``anti``: of none); a join of the key columns alone, since Arrow's
    joins carry no nested column."""
    left = table.select(names).append_column(
        "_row", pa.array(np.arange(table.num_rows, dtype=np.int64))
    )
    right = keys.select(names).cast(pa.schema([left.schema.field(n) for n in names]))
    right = right.group_by(names, use_threads=False).aggregate([])
    kind = "left anti" if anti else "inner"
    hit = left.join(right, names, join_type=kind, use_threads=False)
    return pa.array(np.sort(hit.column("_row").to_numpy()))


def _replay_table(batches: dict[str, list[pa.RecordBatch]], name: str) -> pa.Table:
    schema = _arrow_schema(REPLAY_TABLE_SCHEMAS[name])
    return pa.Table.from_batches(batches.get(name, []), schema=schema)


def state_rows(batches: dict[str, list[pa.RecordBatch]]) -> pa.Table:
    """The family rows of the state the replay emitted (``STATE_ROWS``), flagged
    ``replayed``."""
    rows = _replay_table(batches, "state")
    return rows.append_column("replayed", pa.repeat(True, rows.num_rows))


def with_untouched(states: pa.Table, saved: pa.Table, replayed: pa.Table) -> pa.Table:
    """The night's family rows: those it replayed, and the saved ones of every other
    family (``replayed`` false: already in the state table as they are)."""
    untouched = saved.take(matching(saved, replayed, ["db", "family"], anti=True))
    m = untouched.num_rows
    columns = []
    for f in STATE_ROWS:
        if f.name in FAMILY_STATE_COLUMNS:
            columns.append(untouched.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(m, f.type))
    kept = pa.table(columns, schema=STATE_ROWS).append_column("replayed", pa.repeat(False, m))
    return pa.concat_tables([states, kept])


def family_counts(
    replayed: pa.Table, saved: set[tuple[int, str]], renamed: dict[tuple[int, str], str]
) -> dict[str, int]:
    """The night's family counts for its report (``pipeline.reconstruct._family_counts``)."""
    again = set(
        zip(replayed.column("db").to_pylist(), replayed.column("family").to_pylist(), strict=True)
    )
    carried = {(db, renamed.get((db, f), f)) for db, f in saved} - again
    return {"replayed": len(again), "total": len(again) + len(carried)}


def carry_tables(
    new: dict[str, pa.Table],
    previous: dict[str, pa.Table],
    family_of: dict[tuple[int, str], str],
    replayed: pa.Table,
    as_of_ms: int | None,
    as_of_seq: int | None,
) -> dict[str, pa.Table]:
    """Each output table of a night (``carry.carry_tables``): the snapshot tables hold the
    replayed families' new rows and every other family's previous rows, with the night's
    ``as_of`` (and ``idle_ms``); the history tables the replayed families' rows only."""
    out: dict[str, pa.Table] = {}
    done = set(
        zip(replayed.column("db").to_pylist(), replayed.column("family").to_pylist(), strict=True)
    )
    for name, fresh in new.items():
        old = previous.get(name)
        if old is None or name not in SNAPSHOT_TABLES:
            out[name] = fresh
            continue
        pairs = zip(old.column("db").to_pylist(), old.column("key").to_pylist(), strict=True)
        keep = [(db, family_of.get((db, key), key)) not in done for db, key in pairs]
        kept = old.filter(pa.array(keep, pa.bool_()))
        m = kept.num_rows
        columns: dict[str, Any] = {}
        for f in fresh.schema:
            if f.name == "as_of_ms":
                columns[f.name] = pa.array([as_of_ms] * m, f.type)
            elif f.name == "as_of_seq":
                columns[f.name] = pa.array([as_of_seq] * m, f.type)
            elif f.name == "idle_ms":
                base = pa.scalar(as_of_ms, pa.int64())
                columns[f.name] = pc.subtract(
                    base, kept.column("delivery_time_ms").cast(pa.int64())
                ).cast(f.type)
            else:
                columns[f.name] = kept.column(f.name).cast(f.type)
        out[name] = pa.concat_tables([fresh, pa.table(columns, schema=fresh.schema)])
    return out
