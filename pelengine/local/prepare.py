"""The local runner's prepare stage: the valid events (``local.conform``) made the rows
each family's replay reads, in one process over Arrow tables.

The same steps, in the same order and by the same rules, as the Spark runner's stages
(``pipeline.conform`` ``resolve_db`` / ``cut_as_of``, ``pipeline.units.mark_units``,
``pipeline.route``): rows without ``db`` take the db of the latest SELECT before them,
``--as-of-*`` cuts the log, commands get their execution unit (and on 7.2+ its time),
keys tied by RENAME or a multi-stream XREADGROUP share a family, the ``Router`` of the
engine names each command's families, and every command becomes one row per family it
reaches (FLUSHDB/FLUSHALL: every family of their db / of all dbs), with the activity
markers of clients that block. Where a Spark stage needs a window over the whole log,
the rows are already in ``seq`` order here: a forward fill, or one loop over the few
columns it reads. Per-row work is Arrow compute; Python sees only the rows that need it
(SELECTs, transactions and scripts, links, flushes, blocked clients).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pelengine.engine.udf import _arrow_schema
from pelengine.local.validate import command_names, nonzero
from pelengine.model.routing import (
    SCOPE_ALL,
    SCOPE_DB,
    SCOPE_KEYS,
    db_index,
    linked_keys,
    tie_families,
)
from pelengine.model.units import LUA_CLIENT, SCRIPT_CALLS
from pelengine.schemas import REPLAY_INPUT_SCHEMA

EXEC_UNIT = "exec_unit"

#: the columns of the rows each family's replay reads (``schemas.REPLAY_INPUT_SCHEMA``
#: without the split-by-group unit: the local runner replays a family as one unit)
ROW_SCHEMA = pa.schema([f for f in _arrow_schema(REPLAY_INPUT_SCHEMA) if f.name != "unit"])
#: the columns of a command its family rows repeat
_CARRIED = ("seq", "ts_ms", "argv", "db", "client", EXEC_UNIT)

#: the most rows one Arrow batch of the router's input holds
ROUTE_BATCH_ROWS = 65_536
#: threads that route at once with the native router (:func:`route`), and the fewest rows
#: worth splitting
ROUTE_WORKERS = 2
ROUTE_SPLIT_ROWS = 200_000


def sorted_by_seq(valid: pa.Table) -> pa.Table:
    """``valid`` in ``seq`` order (its seqs are unique: rows sharing one were rejected or
    kept once); as it is when it is in that order already (a log written in it)."""
    seq = valid.column("seq")
    n = valid.num_rows
    if n < 2 or pc.all(pc.greater(seq.slice(1), seq.slice(0, n - 1))).as_py():
        return valid
    return valid.take(pc.sort_indices(valid, sort_keys=[("seq", "ascending")]))


def resolve_db(valid: pa.Table, names: pa.Array, initial_db: int, needs: bool) -> pa.Array:
    """The ``db`` of each row (in ``seq`` order): its own, else that of the latest SELECT
    without db at or before it, else ``initial_db`` (``pipeline.conform.resolve_db``;
    ``needs``: some SELECT lacks its db, else no fill is made)."""
    db = valid.column("db")
    if not needs:
        return pc.fill_null(db, pa.scalar(initial_db, pa.int32())).combine_chunks()
    selects = pc.and_(pc.equal(names, "SELECT"), pc.is_null(db))
    at = nonzero(pc.fill_null(selects, False)).to_pylist()
    argvs = valid.column("argv").take(pa.array(at, pa.int64())).to_pylist()
    selected: list[int | None] = [None] * valid.num_rows
    for i, argv in zip(at, argvs, strict=True):
        selected[i] = db_index(argv[1]) if len(argv) > 1 else None
    filled = pc.fill_null_forward(pa.array(selected, pa.int32()))
    return pc.coalesce(db, filled, pa.scalar(initial_db, pa.int32())).combine_chunks()


def cut_as_of(
    valid: pa.Table, as_of_ms: int | None, as_of_seq: int | None
) -> tuple[pa.Table, int | None]:
    """The rows (in ``seq`` order) up to the point asked, and the first seq left out by
    ``as_of_ms`` (``pipeline.conform.cut_as_of``: rows up to ``as_of_seq``, then those
    before the first row later than ``as_of_ms``)."""
    if as_of_seq is not None:
        valid = valid.filter(pc.less_equal(valid.column("seq"), as_of_seq))
    stop: int | None = None
    if as_of_ms is not None and valid.num_rows:
        first = pc.index(pc.greater(valid.column("ts_ms"), as_of_ms), True).as_py()
        if first >= 0:
            stop = valid.column("seq")[first].as_py()
            valid = valid.slice(0, first)
    return valid, stop


def unit_columns(
    valid: pa.Table,
    names: pa.Array,
    *,
    times: bool,
    open_units: dict[str, int | None] | None = None,
) -> tuple[pa.Array, pa.ChunkedArray | pa.Array]:
    """``exec_unit`` and ``ts_ms`` of ``valid`` (rows in ``seq`` order), by the rules of
    ``pipeline.units.mark_units`` (the model's ``Replayer._place``), in numpy: each
    client's last MULTI and last EXEC/DISCARD up to each of its rows (a running maximum
    over the rows sorted by client, then seq), the script call rows, the ``lua`` rows'
    script (that of the last row before them that is not ``lua``) and, with ``times``,
    each unit's first time. A log without MULTI or ``lua`` rows has no unit.
    ``open_units`` (a night): units an earlier run left open (client -> the unit's time),
    which continue into these rows: as in ``mark_units``, rows standing for them go first
    and are left out of the result."""
    if open_units:
        extra = _open_unit_rows(open_units, valid.schema)
        n_extra = extra.num_rows
        units, ts = unit_columns(
            pa.concat_tables([extra, valid.select(extra.column_names)]),
            pa.concat_arrays([_as_array(command_names(extra.column("argv"))), _as_array(names)]),
            times=times,
        )
        return units.slice(n_extra), ts.slice(n_extra)
    import numpy as np

    n = valid.num_rows
    client = valid.column("client")
    multis = pc.fill_null(pc.equal(names, "MULTI"), False).to_numpy(zero_copy_only=False)
    lua = pc.fill_null(pc.equal(client, LUA_CLIENT), False).to_numpy(zero_copy_only=False)
    if not (multis.any() or lua.any()):
        return pa.nulls(n, pa.int64()), valid.column("ts_ms")
    seq = valid.column("seq").to_numpy()
    positions = np.arange(n)
    multi = np.full(n, -1, dtype=np.int64)  # the row of the MULTI a row runs inside, or -1
    if multis.any():
        closes = pc.fill_null(pc.is_in(names, pa.array(["EXEC", "DISCARD"])), False)
        closes = closes.to_numpy(zero_copy_only=False)
        # the clients as their ranks (equal ranks: the same client), rows in row order
        # within each client
        ranked = string_rank(pc.fill_null(client, "")).to_numpy()
        order = np.argsort(ranked, kind="stable")
        sorted_client = ranked[order]
        new_client = np.ones(n, dtype=bool)
        new_client[1:] = sorted_client[1:] != sorted_client[:-1]
        first_of_client = np.maximum.accumulate(np.where(new_client, positions, 0))
        opened = np.maximum.accumulate(np.where(multis[order], positions, -1))
        closed = np.maximum.accumulate(np.where(closes[order], positions, -1))
        opened = np.where(opened >= first_of_client, opened, -1)
        closed = np.where(closed >= first_of_client, closed, -1)
        inside = (~multis[order]) & (opened >= 0) & (opened > closed)
        multi[order[inside]] = order[opened[inside]]
    script_call = pc.fill_null(pc.is_in(names, pa.array(sorted(SCRIPT_CALLS))), False)
    script_call = script_call.to_numpy(zero_copy_only=False) & ~lua
    has_multi = multi >= 0
    multi_seq = np.where(has_multi, seq[np.maximum(multi, 0)], 0)
    script = np.where(has_multi, multi_seq, seq)  # a script's unit, where script_call
    unit = np.where(script_call, script, multi_seq)
    has_unit = script_call | has_multi
    if lua.any():
        last_other = np.maximum.accumulate(np.where(~lua, positions, -1))
        anchored = lua & (last_other >= 0)
        anchor = np.maximum(last_other, 0)
        anchored &= script_call[anchor]
        unit = np.where(anchored, script[anchor], unit)
        has_unit = has_unit | anchored
    exec_unit = pa.array(unit, mask=~has_unit)
    if not times or not has_unit.any():
        return exec_unit, valid.column("ts_ms")
    ts = valid.column("ts_ms").to_numpy().copy()
    rows = np.flatnonzero(has_unit)
    _, first, inverse = np.unique(unit[rows], return_index=True, return_inverse=True)
    ts[rows] = ts[rows[first]][inverse]
    return exec_unit, pa.array(ts)


#: the seqs of the rows standing for a unit a previous run left open (``pipeline.units``)
_SYNTHETIC_SEQ = -(2**63)


def _open_unit_rows(open_units: dict[str, int | None], schema: pa.Schema) -> pa.Table:
    """A MULTI (and, when the unit had a command, a PING carrying its time) per open
    unit, in ``schema``'s seq, ts_ms, argv, db and client (``pipeline.units``)."""
    rows: list[dict[str, Any]] = []
    for client, ts in open_units.items():
        rows.append({"seq": _SYNTHETIC_SEQ, "ts_ms": 0, "argv": ["MULTI"], "client": client})
        if ts is not None:
            rows.append(
                {"seq": _SYNTHETIC_SEQ + 1, "ts_ms": ts, "argv": ["PING"], "client": client}
            )
    wanted = pa.schema([schema.field(n) for n in ("seq", "ts_ms", "argv", "db", "client")])
    for row in rows:
        row["client"] = row["client"] or None
        row["db"] = 0
    return pa.Table.from_pylist(rows, schema=wanted)


def _as_array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def open_units_after(
    valid: pa.Table, names: pa.Array, open_units: dict[str, int | None] | None
) -> dict[str, int | None]:
    """7.2+: the units still open after ``valid``'s rows (client -> the time of the unit's
    first command, None before it has one), for the next night
    (``pipeline.units.open_units_after``)."""
    rows = valid.select(["seq", "ts_ms", "argv", "db", "client"])
    all_names = _as_array(names)
    if open_units:
        extra = _open_unit_rows(open_units, valid.schema)
        rows = pa.concat_tables([extra, rows.cast(extra.schema)])
        all_names = pa.concat_arrays([_as_array(command_names(extra.column("argv"))), all_names])
    brackets = pc.fill_null(pc.is_in(all_names, pa.array(["MULTI", "EXEC", "DISCARD"])), False)
    if not pc.any(brackets).as_py():
        return {}
    opened: dict[str, int] = {}
    closed: dict[str, int] = {}
    chosen = rows.filter(brackets).select(["seq", "client"]).to_pylist()
    kinds = all_names.filter(brackets).to_pylist()
    for row, kind in zip(chosen, kinds, strict=True):
        client = row["client"] or ""
        into = opened if kind == "MULTI" else closed
        into[client] = max(into.get(client, row["seq"]), row["seq"])
    out: dict[str, int | None] = {}
    clients = pc.fill_null(rows.column("client"), "")
    for client, seq in sorted(opened.items()):
        if client in closed and closed[client] >= seq:
            continue
        after = rows.filter(
            pc.and_(pc.equal(clients, client), pc.greater(rows.column("seq"), seq))
        ).sort_by("seq")
        out[client] = after.column("ts_ms")[0].as_py() if after.num_rows else None
    return out


def family_links(
    valid: pa.Table,
    names: pa.Array,
    prior: dict[tuple[int, str], str] | None = None,
    saved: set[tuple[int, str]] | None = None,
    renamed: dict[tuple[int, str], str] | None = None,
) -> dict[tuple[int, str], str]:
    """The families of the keys RENAME or a multi-stream XREADGROUP ties together
    (``pipeline.route.family_map``; ``prior``, ``saved``, ``renamed``: a night's, as
    there)."""
    renames = pc.fill_null(pc.is_in(names, pa.array(["RENAME", "RENAMENX"])), False)
    reads = pc.fill_null(pc.equal(names, "XREADGROUP"), False)
    # a read ties keys only when it names two streams or more: four arguments or more
    # after its first STREAMS (or none there); only those go to the exact parser
    tying = pc.or_(renames, _several_streams(valid.column("argv"), reads))
    rows = _first_of_each(valid.filter(tying).select(["db", "argv"])).to_pylist()
    links: list[list[tuple[int, str]]] = []
    seen: set[tuple[int, tuple[str, ...]]] = set()
    for row in rows:
        keys = linked_keys(row["argv"])
        if keys:
            link = (row["db"], tuple(sorted(keys)))
            if link not in seen:
                seen.add(link)
                links.append([(link[0], k) for k in link[1]])
    return tie_families(links, prior, saved, renamed)


def _first_of_each(rows: pa.Table) -> pa.Table:
    """The first row of each distinct (``db``, ``argv``) of ``rows``, in row order (a log
    repeats the same few tying commands: only the first of each is parsed). The argv is
    compared as its length and one string its arguments make, each with \\x01 escaped as
    \\x01\\x02 and joined by \\x01\\x03: a different argv makes a different pair."""
    import numpy as np

    argv = rows.column("argv").combine_chunks()
    flat = pc.list_flatten(argv)
    if rows.num_rows == 0 or flat.null_count or argv.null_count:
        return rows
    escaped = pc.replace_substring(flat, "\x01", "\x01\x02")
    offsets = argv.offsets.to_numpy()
    lists = pa.ListArray.from_arrays(pa.array(offsets - offsets[0]), escaped)
    keys = pa.table(
        {
            "db": rows.column("db"),
            "n": pc.list_value_length(argv),
            "argv": pc.binary_join(lists, "\x01\x03"),
            "row": pa.array(np.arange(rows.num_rows, dtype=np.int64)),
        }
    )
    first = keys.group_by(["db", "n", "argv"], use_threads=False).aggregate([("row", "min")])
    return rows.take(pa.array(np.sort(first.column("row_min").to_numpy())))


def _several_streams(argv: pa.ChunkedArray, reads: pa.Array) -> pa.Array:
    """Of the rows ``reads`` marks, those with at least four arguments after their first
    ``STREAMS`` (any case), or without one (``pipeline.route.family_map``'s filter)."""
    import numpy as np

    lists = argv.combine_chunks()
    at = nonzero(reads)
    chosen = lists.take(at)
    upper = pc.utf8_upper(pc.list_flatten(chosen))
    hits = pa.table(
        {
            "row": pc.list_parent_indices(chosen),
            "flat": pa.array(np.arange(len(upper), dtype=np.int64)),
        }
    ).filter(pc.equal(upper, "STREAMS"))
    first = hits.group_by("row", use_threads=False).aggregate([("flat", "min")])
    rows = first.column("row").to_numpy()
    offsets = chosen.offsets.to_numpy()[:-1]
    streams_at = np.zeros(len(chosen), dtype=np.int64)  # 1-based, 0: none (array_position)
    streams_at[rows] = first.column("flat_min").to_numpy() - offsets[rows] + 1
    lengths = pc.list_value_length(chosen).to_numpy(zero_copy_only=False)
    out = np.zeros(len(lists), dtype=bool)
    out[at.to_numpy()[lengths - streams_at >= 4]] = True
    return pa.array(out)


def route(
    valid: pa.Table,
    new_router: Callable[[], Any],
    workers: int = 1,
    batch_rows: int = ROUTE_BATCH_ROWS,
) -> pa.Table:
    """``valid`` through the engine's ``Router`` (``command``, ``scope``, ``families``,
    ``pre_kind``, ``pre_error``, ``group``, ``group_only`` appended), in its row order.
    ``workers`` > 1 (the native router, which routes without the interpreter's lock): when
    the rows are many, cut into that many runs, each routed by its own router
    (``new_router()``) in its own thread, as each partition of the Spark runner has its
    own, and put back in order."""
    n = valid.num_rows
    if workers < 2 or n < ROUTE_SPLIT_ROWS:
        parts = [valid]
    else:
        step = -(-n // workers)
        parts = [valid.slice(at, step) for at in range(0, n, step)]

    def routed(part: pa.Table) -> list[pa.RecordBatch]:
        router = new_router()
        return [router.route(b) for b in part.to_batches(max_chunksize=batch_rows)]

    if len(parts) == 1:
        batches = routed(parts[0])
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="route") as pool:
            batches = [b for done in pool.map(routed, parts) for b in done]
    if not batches:
        return pa.Table.from_batches([], schema=_routed_schema(valid.schema))
    return pa.Table.from_batches(batches)


def _routed_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema(
        [
            *schema,
            ("command", pa.string()),
            ("scope", pa.string()),
            ("families", pa.list_(pa.string())),
            ("pre_kind", pa.string()),
            ("pre_error", pa.string()),
            ("group", pa.string()),
            ("group_only", pa.bool_()),
        ]
    )


@dataclass(frozen=True)
class RoutedFacts:
    """The (client, db, family) of every blocking XREADGROUP (``waits``), whether one is
    there (``blocking``), and whether a command reaches a whole db or every db (``flush``):
    ``pipeline.route.RoutedFacts``."""

    waits: list[tuple[str, int, str]]
    blocking: bool
    flush: bool


def routed_facts(routed: pa.Table) -> RoutedFacts:
    """The :class:`RoutedFacts` of ``routed`` (``pipeline.route.routed_facts``)."""
    reads = routed.filter(
        pc.and_(
            pc.equal(routed.column("command"), "XREADGROUP"),
            pc.is_valid(routed.column("client")),
        )
    )
    waits: set[tuple[str, int, str]] = set()
    blocking = False
    if reads.num_rows:
        argv = reads.column("argv").combine_chunks()
        upper = pc.utf8_upper(pc.list_flatten(argv))
        hits = pc.filter(pc.list_parent_indices(argv), pc.equal(upper, "BLOCK"))
        at = pc.unique(hits)
        if len(at):
            blocking = True
            blocked = reads.take(at).select(["client", "db", "families"]).to_pylist()
            for r in blocked:
                waits.update((r["client"], r["db"], f) for f in r["families"])
    scope = routed.column("scope")
    flush = bool(pc.any(pc.is_in(scope, pa.array([SCOPE_DB, SCOPE_ALL]))).as_py())
    return RoutedFacts(sorted(waits), blocking, flush)


def fan_out(
    routed: pa.Table,
    facts: RoutedFacts,
    waits: list[tuple[str, int, str]] | None = None,
    known: pa.Table | None = None,
) -> pa.Table:
    """One row (``ROW_SCHEMA``) per (command, family) it reaches, flagged ``fanout`` when it
    reaches several, plus the activity markers of clients that block
    (``pipeline.route.fan_out``; ``waits``/``known``: the blocking reads and the families
    (db, family) of earlier runs, a night's); sorted by (db, family, seq): each family's rows
    together, in the order its replay applies them. Each part is first a table of
    pointers (the command's row, its db and family there, the two flags), sorted; the
    commands' own columns are then taken once, in that order."""
    scope = routed.column("scope")
    keyed = nonzero(pc.fill_null(pc.equal(scope, SCOPE_KEYS), False))
    families = routed.column("families").take(keyed).combine_chunks()
    parents = pc.list_parent_indices(families)
    flat = pc.list_flatten(families)
    rows = keyed.take(parents)
    db = routed.column("db").take(rows)
    several = pc.greater(pc.list_value_length(families), 1).take(parents)
    parts = [_pointers(rows, db, flat, several, marker=False)]
    if facts.flush:
        seen = pa.table({"db": db, "family": flat})
        if known is not None:
            seen = pa.concat_tables([seen, known.select(["db", "family"]).cast(seen.schema)])
        known_rows = (
            seen.group_by(["db", "family"], use_threads=False)
            .aggregate([])
            .sort_by([("db", "ascending"), ("family", "ascending")])
            .to_pylist()
        )
        flushes = nonzero(pc.is_in(scope, pa.array([SCOPE_DB, SCOPE_ALL])))
        which = routed.take(flushes).select(["db", "scope"]).to_pylist()
        at, dbs, fams = [], [], []
        for i, row in zip(flushes.to_pylist(), which, strict=True):
            for k in known_rows:
                if row["scope"] == SCOPE_ALL or k["db"] == row["db"]:
                    at.append(i)
                    dbs.append(k["db"])
                    fams.append(k["family"])
        parts.append(
            _pointers(
                pa.array(at, pa.int64()),
                pa.array(dbs, pa.int32()),
                pa.array(fams, pa.string()),
                pa.repeat(True, len(at)),
                marker=False,
            )
        )
    every_wait = sorted(set(facts.waits) | set(waits or ()))
    if every_wait:
        parts.append(_markers(routed, every_wait))
    pointers = pa.concat_tables(parts)
    pointers = pointers.append_column("seq", routed.column("seq").take(pointers.column("row")))
    pointers = pointers.append_column("rank", string_rank(pointers.column("family")))
    pointers = pointers.sort_by([("db", "ascending"), ("rank", "ascending"), ("seq", "ascending")])
    commands = take_rows(routed.select(list(_CARRIED)), pointers.column("row"))
    n = pointers.num_rows
    return pa.table(
        [
            commands.column("seq"),
            commands.column("ts_ms"),
            commands.column("argv"),
            pointers.column("db"),
            commands.column("client"),
            pointers.column("fanout"),
            pointers.column("family"),
            pointers.column("marker"),
            commands.column(EXEC_UNIT),
            pa.repeat(True, n),
            pa.repeat(False, n),
        ],
        schema=ROW_SCHEMA,
    )


#: threads that take the rows of :func:`fan_out` at once (Arrow's take runs without the
#: interpreter's lock), and the fewest rows worth splitting
TAKE_WORKERS = 2
TAKE_SPLIT_ROWS = 100_000


def take_rows(
    table: pa.Table, rows: pa.ChunkedArray | pa.Array, workers: int = TAKE_WORKERS
) -> pa.Table:
    """``table.take(rows)``: the same rows in the same order, its parts taken by
    ``workers`` threads at once (one chunk each) when ``rows`` are many."""
    n = len(rows)
    if workers < 2 or n < TAKE_SPLIT_ROWS:
        return table.take(rows)
    from concurrent.futures import ThreadPoolExecutor

    step = -(-n // workers)
    parts = [rows.slice(at, step) for at in range(0, n, step)]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="take") as pool:
        return pa.concat_tables(list(pool.map(table.take, parts)))


def string_rank(strings: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Each string's rank among the distinct ones, in the order a sort of the strings gives
    (byte order; nulls last): sorting by it sorts by the strings, comparing integers. The
    distinct strings (a log's families: thousands, among millions of rows) are sorted
    once."""
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    encoded = pc.dictionary_encode(strings)
    dictionary = encoded.dictionary
    ranks = pc.rank(dictionary, sort_keys="ascending", tiebreaker="first")  # 1-based
    ranked = pc.take(ranks, encoded.indices)
    return pc.fill_null(ranked, len(dictionary) + 1)


_POINTERS = pa.schema(
    [
        ("row", pa.int64()),
        ("db", pa.int32()),
        ("family", pa.string()),
        ("fanout", pa.bool_()),
        ("marker", pa.bool_()),
    ]
)


def _pointers(row: Any, db: Any, family: Any, fanout: Any, *, marker: bool) -> pa.Table:
    """Rows of the replay's input as pointers: the routed row of the command, the db and
    family of the replay it goes to, and its two flags."""
    n = len(row)
    return pa.table(
        [
            pc.cast(row, pa.int64()),
            pc.cast(db, pa.int32()),
            family,
            fanout,
            pa.repeat(marker, n),
        ],
        schema=_POINTERS,
    )


def _markers(routed: pa.Table, waits: list[tuple[str, int, str]]) -> pa.Table:
    """Markers (as :func:`_pointers`) telling a family that a client blocked there sent a
    command that does not reach it (``pipeline.route.activity_markers``): every command
    of such a client, for each (db, family) it blocked in that the command does not
    reach itself."""
    blocked = pa.table(
        {
            "client": pa.array([c for c, _, _ in waits], pa.string()),
            "m_db": pa.array([d for _, d, _ in waits], pa.int32()),
            "m_family": pa.array([f for _, _, f in waits], pa.string()),
        }
    )
    import numpy as np

    keys = routed.select(["client", "db", "scope"]).append_column(
        "_row", pa.array(np.arange(routed.num_rows, dtype=np.int64))
    )
    pairs = keys.join(blocked, "client", join_type="inner", use_threads=False).sort_by(
        [("_row", "ascending"), ("m_db", "ascending"), ("m_family", "ascending")]
    )
    rows = pairs.column("_row").combine_chunks()
    m_db, m_family = pairs.column("m_db"), pairs.column("m_family").combine_chunks()
    # whether the command's own families hold the one it blocked in
    families = routed.column("families").take(rows)
    parents = pc.list_parent_indices(families)
    hit = pc.equal(pc.list_flatten(families), m_family.take(parents))
    holds = np.zeros(pairs.num_rows, dtype=bool)
    holds[pc.filter(parents, pc.fill_null(hit, False)).to_numpy()] = True
    scope, same_db = pairs.column("scope"), pc.equal(pairs.column("db"), m_db)
    reaches = pc.or_(
        pc.or_(
            pc.and_(pc.and_(pc.equal(scope, SCOPE_KEYS), same_db), pa.array(holds)),
            pc.equal(scope, SCOPE_ALL),
        ),
        pc.and_(pc.equal(scope, SCOPE_DB), same_db),
    )
    pairs = pairs.filter(pc.invert(pc.fill_null(reaches, False)))
    return _pointers(
        pairs.column("_row"),
        pairs.column("m_db"),
        pairs.column("m_family"),
        pa.repeat(False, pairs.num_rows),
        marker=True,
    )
