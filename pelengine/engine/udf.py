"""The Arrow functions Spark runs on executors: routing and the grouped replay.

Both factories capture only plain values (profile name, times, a dict), so
what Spark ships to the executors is small and does not depend on the driver's session.
"""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from pelengine.engine.native import EngineError
from pelengine.engine.native import require as require_native
from pelengine.model import persist
from pelengine.model.calls import Columns
from pelengine.model.replay import Replayer, command_name
from pelengine.model.routing import SCOPE_KEYS, command_group, linked_keys, touched_keys
from pelengine.model.snapshot import snapshot_columns
from pelengine.model.state import Counters
from pelengine.schemas import (
    OUTCOME_COLUMNS,
    REPLAY_COLUMN_TYPES,
    REPLAY_PACKED_SCHEMA,
    REPLAY_TABLE_SCHEMAS,
    STAT_COLUMNS,
)
from pelengine.settings import Settings

OUTPUT_BATCH_ROWS = 8192
# a packed output batch ends once its payloads reach this size (the JVM holds one whole)
PACKED_BATCH_BYTES = 16 << 20

# The automatic collections of a Python worker once ``tune_worker_gc`` ran (Python's
# default: 700, 10, 10): the youngest generation is collected after this many net
# allocations of objects that can hold others, a full collection follows 10 x 10 of them.
WORKER_GC_THRESHOLDS = (50_000, 10, 10)
# A full collection before the next replay once the replays finished since the last
# one left this many consumers and pending entries (see ``tune_worker_gc``).
GC_AFTER_FINISHED = 200_000
_worker_gc_tuned = False
_finished_cycles = 0


def tune_worker_gc() -> None:
    """Once per Python worker process: collect, freeze what survives (the interpreter,
    Spark's worker, the libraries: never garbage) so that no later collection scans it
    again (the daemon's ``gc.collect()`` after every task included), and make the
    automatic collections rarer (``WORKER_GC_THRESHOLDS``): the replay allocates few
    objects that hold others (its history rows are columns of plain values, read and
    written column by column).

    What a finished replay leaves is freed by a collection only (each consumer and its
    pending entries reference each other); rarer automatic collections would let it
    pile up over the families of a task, so the replays count it and a full collection
    runs before the next one once it reaches ``GC_AFTER_FINISHED``
    (``_finishing``, ``_collect_finished``)."""
    global _worker_gc_tuned
    if _worker_gc_tuned:
        return
    _worker_gc_tuned = True
    gc.collect()
    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLDS)


def _collect_finished() -> None:
    """Before a replay: a full collection once the replays finished since the last one
    left ``GC_AFTER_FINISHED`` consumers and pending entries (tuned workers only)."""
    global _finished_cycles
    if _worker_gc_tuned and _finished_cycles >= GC_AFTER_FINISHED:
        _finished_cycles = 0
        gc.collect()


def _finishing(left: int) -> None:
    """A replay ends and its model, with ``left`` consumers and pending entries, with it."""
    global _finished_cycles
    _finished_cycles += left


def _in_spark_worker() -> bool:
    """Whether this runs in a Spark task (not in the driver, nor in a test calling a
    function directly)."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is there wherever Spark runs this
        return False
    return TaskContext.get() is not None


def _values(column: pa.Array) -> list[Any]:
    """An input column's values as Python objects, with no dict per row: integers and
    booleans without nulls through numpy (a tenth of the cost of ``to_pylist``); lists
    without nulls (``argv``) as slices of their values."""
    n = len(column)
    nulls = column.null_count
    if nulls == n:
        return [None] * n
    kind = column.type
    if nulls == 0:
        if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
            return column.to_numpy(zero_copy_only=False).tolist()
        if pa.types.is_list(kind):
            flat = column.flatten().to_pylist()  # the values of this slice only
            offsets = column.offsets.to_numpy()
            bounds = (offsets - offsets[0]).tolist()
            return [flat[start:stop] for start, stop in zip(bounds, bounds[1:], strict=False)]
    return column.to_pylist()


def _column(batch: pa.RecordBatch, name: str, default: Any = None) -> list[Any]:
    """The values of the column ``name`` (``default`` in every row when there is none)."""
    i = batch.schema.get_field_index(name)
    if i < 0:
        return [default] * batch.num_rows
    return _values(batch.column(i))


def _arrow_schema(spark_schema: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema)


LINKS_ARROW_SCHEMA = pa.schema([("db", pa.int32()), ("links", pa.list_(pa.string()))])


def links_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """For RENAME/XREADGROUP rows: the keys that must share one replay (mapInArrow)."""
    for batch in batches:
        dbs = _column(batch, "db")
        argvs = _column(batch, "argv")
        out_db: list[int] = []
        out_links: list[list[str]] = []
        for db, argv in zip(dbs, argvs, strict=True):
            links = linked_keys(argv)
            if links:
                out_db.append(db)
                out_links.append(links)
        if out_db:
            yield pa.RecordBatch.from_arrays(
                [pa.array(out_db, pa.int32()), pa.array(out_links, pa.list_(pa.string()))],
                schema=LINKS_ARROW_SCHEMA,
            )


class ReplayRowError(RuntimeError):
    """The model failed on one event (a bug, not a Redis error): names the row."""


def _describe_row(seq: int | None, ts_ms: int | None, argv: list[str] | None, db: int) -> str:
    shown = [a if len(a) <= 40 else a[:37] + "..." for a in (argv or [])[:8]]
    more = f" ... ({len(argv or [])} args)" if argv and len(argv) > 8 else ""
    return f"seq {seq} (ts_ms {ts_ms}, db {db}, argv {shown}{more})"


def make_router(
    settings: Settings, family_of: dict[tuple[int, str], str], *, engine: str = "python"
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A mapInArrow function adding ``scope``, ``families``, the consumer group the
    command names (``group``, ``group_only``: see ``command_group``) and, for rows that
    reach no stream, the outcome a fresh model gives them (``pre_kind``/``pre_error``).

    ``engine``: "python" (below) or "native" (``pelengine_native.Router``: the same
    columns computed in Rust from the Arrow batch, tests/native/test_router_equal.py)."""

    profile = settings.profile_name
    family_of = dict(family_of)

    def route_native(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        core = require_native()
        router = core.Router(profile, family_of)
        try:
            for batch in batches:
                yield router.route(batch)
        except core.ReplayRowError as exc:
            raise ReplayRowError(str(exc)) from None

    if engine == "native":
        return route_native
    if engine != "python":
        raise EngineError(f"unknown engine {engine!r}")

    def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if _in_spark_worker():
            tune_worker_gc()
        blank = Replayer(profile, record_changes=False)
        for batch in batches:
            dbs = _column(batch, "db")
            argvs = _column(batch, "argv")
            scopes: list[str] = []
            families: list[list[str]] = []
            commands: list[str] = []
            kinds: list[str | None] = []
            errors: list[str | None] = []
            groups: list[str | None] = []
            group_only: list[bool] = []
            for i, (db, argv) in enumerate(zip(dbs, argvs, strict=True)):
                try:
                    scope, keys = touched_keys(argv)
                    scopes.append(scope)
                    commands.append(command_name(argv))
                    fams = list(dict.fromkeys(family_of.get((db, k), k) for k in keys))
                    families.append(fams)
                    group, only = command_group(argv)
                    groups.append(group)
                    group_only.append(only)
                    if scope != SCOPE_KEYS:
                        outcome = blank.apply(0, 0, argv, db)
                        kinds.append(outcome.kind)
                        errors.append(outcome.error)
                    else:
                        kinds.append(None)
                        errors.append(None)
                except Exception as exc:
                    seq, ts_ms = (
                        batch.column(c)[i].as_py() if c in batch.schema.names else None
                        for c in ("seq", "ts_ms")
                    )
                    raise ReplayRowError(
                        f"routing failed at the event {_describe_row(seq, ts_ms, argv, db)}: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
            yield pa.RecordBatch.from_arrays(
                [
                    *batch.columns,
                    pa.array(commands, pa.string()),
                    pa.array(scopes, pa.string()),
                    pa.array(families, pa.list_(pa.string())),
                    pa.array(kinds, pa.string()),
                    pa.array(errors, pa.string()),
                    pa.array(groups, pa.string()),
                    pa.array(group_only, pa.bool_()),
                ],
                names=[
                    *batch.schema.names,
                    "command",
                    "scope",
                    "families",
                    "pre_kind",
                    "pre_error",
                    "group",
                    "group_only",
                ],
            )

    return route


class SeqOrderError(RuntimeError):
    """The replay saw ``seq`` go backwards: the physical plan lost the per-stream order."""


def make_replay_function(
    settings: Settings,
    as_of_ms: int,
    as_of_seq: int,
    *,
    mark_seq: int | None = None,
    unit_groups: dict[tuple[int, str, str], list[str]] | None = None,
    engine: str = "python",
) -> Callable[[tuple[Any, ...], Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The grouped (iterator-form) Arrow UDF replaying one family of stream keys.

    ``engine``: "python" (the Python model, below) or "native" (``pelengine_native``'s
    ``FamilyReplay``: the same loop in Rust, Arrow batches in and out; see
    ``engine.native``). Both give the same rows (tests/native).

    It captures the run's frozen ``settings`` (the profile, the server's
    ``stream-node-max-*``, whether state is kept) and the plain values of this replay:
    the snapshot moment, ``mark_seq`` and the groups of each unit of a family split by
    group.

    ``settings.incremental`` (keep state): a row whose ``state`` column is set carries the
    family's saved model (it sorts first: its ``seq`` is the last one applied) and the
    replay continues from it; at the end the model is emitted as a ``state`` row
    (``state_version`` and ``state``: the plain data of ``pelengine.model.persist``,
    docs/state.md), with the count and an order-free digest of every row the
    family has received (``agg_n``/``agg_x``, so that changed history can be named);
    ``mark_n``/``mark_x`` are the same over the rows with ``seq <= mark_seq`` only.

    Input batches hold the family's events in ``seq`` order; output rows are
    the ``ownership_changes``, closed ``pel_history`` versions, closed delivery
    segments, ended group incarnations and fan-out outcomes as they happen (drained
    after every input batch), then the final state tables (with the open
    ``pel_history`` versions, open delivery segments and live incarnations) and the
    outcome counters, each table in its own columns (``REPLAY_TABLE_SCHEMAS``), packed
    as Arrow IPC rows of ``REPLAY_PACKED_SCHEMA`` (``make_unpacker`` reads them back).
    The model spills closed delivery records (``spill_closed_records``): what it holds follows the
    PEL and the stream, not the history; the pipeline merges the segments into
    ``delivery_counts``.
    """
    profile = settings.profile_name
    node_max_entries, node_max_bytes = settings.node_max_entries, settings.node_max_bytes
    keep_state = settings.incremental
    known = set(REPLAY_COLUMN_TYPES.names)
    schemas = {name: _arrow_schema(schema) for name, schema in REPLAY_TABLE_SCHEMAS.items()}
    packed_schema = _arrow_schema(REPLAY_PACKED_SCHEMA)
    groups_of = {k: frozenset(v) for k, v in (unit_groups or {}).items()}
    as_of = {"as_of_ms": as_of_ms, "as_of_seq": as_of_seq}
    # the history tables whose rows carry as_of_* (the snapshot's have it already)
    with_as_of = ("ownership_changes", "pel_history")

    def table_batches(
        table: str, cols: Columns, constants: dict[str, Any] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """``cols`` as batches of ``table``'s own columns (``REPLAY_TABLE_SCHEMAS``, at most
        ``OUTPUT_BATCH_ROWS`` rows each): ``constants`` in every row, null where a column
        is not given."""
        n = len(cols)
        if not n:
            return
        values = dict(zip(cols.names, cols.lists, strict=True))
        unknown = [name for name in values if name not in known]
        if unknown:
            raise ValueError(f"{table} rows have columns the replay output lacks: {unknown}")
        schema = schemas[table]
        for start in range(0, n, OUTPUT_BATCH_ROWS):
            stop = min(start + OUTPUT_BATCH_ROWS, n)
            size = stop - start
            whole = size == n
            arrays = []
            for field in schema:
                name = field.name
                column = values.get(name)
                if column is not None:
                    arrays.append(pa.array(column if whole else column[start:stop], field.type))
                elif constants is not None and name in constants:
                    arrays.append(pa.repeat(pa.scalar(constants[name], field.type), size))
                else:
                    arrays.append(pa.nulls(size, field.type))
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    def packed(parts: Iterator[tuple[str, Iterator[pa.RecordBatch]]]) -> Iterator[pa.RecordBatch]:
        """The batches of each (table, batches) as rows of ``REPLAY_PACKED_SCHEMA``: one
        output batch (nothing when there are no rows)."""
        tables: list[str] = []
        counts: list[int] = []
        payloads: list[bytes] = []
        size = 0

        def flush() -> pa.RecordBatch:
            out = pa.RecordBatch.from_arrays(
                [pa.array(tables, pa.string()), pa.array(counts, pa.int64()), pa.array(payloads)],
                schema=packed_schema,
            )
            tables.clear()
            counts.clear()
            payloads.clear()
            return out

        for table, batches in parts:
            for batch in batches:
                payload = pack_batch(batch)
                tables.append(table)
                counts.append(batch.num_rows)
                payloads.append(payload)
                size += len(payload)
                if size >= PACKED_BATCH_BYTES:
                    yield flush()
                    size = 0
        if tables:
            yield flush()

    def native_replay(
        key: tuple[pa.Scalar, ...], batches: Iterator[pa.RecordBatch]
    ) -> Iterator[pa.RecordBatch]:
        """The native core's replay of one family: it reads the input batches through the
        Arrow C data interface and returns each table's batches; only packing is left here."""
        core = require_native()
        unit = key[2].as_py() if len(key) > 2 else None
        own = None if unit is None else groups_of[(key[0].as_py(), key[1].as_py(), unit)]
        family = f"db={key[0].as_py()} family={key[1].as_py()!r}" + (
            "" if own is None else f" groups={sorted(own)}"
        )
        replay = core.FamilyReplay(
            profile,
            node_max_entries,
            node_max_bytes,
            as_of_ms,
            as_of_seq,
            family,
            None if own is None else sorted(own),
            schemas,
            keep_state=keep_state,
            mark_seq=mark_seq,
            state_key=(key[0].as_py(), key[1].as_py()),
        )
        try:
            for batch in batches:
                batch = unwrap_state(batch)
                yield from packed((table, iter((out,))) for table, out in replay.feed(batch))
            yield from packed((table, iter((out,))) for table, out in replay.finish())
        except core.SeqOrderError as exc:
            raise SeqOrderError(str(exc)) from None
        except core.ReplayRowError as exc:
            raise ReplayRowError(str(exc)) from None
        except core.StateVersionError as exc:
            raise persist.StateVersionError(str(exc)) from None
        except core.StateError as exc:
            raise persist.StateError(str(exc)) from None

    if engine == "native":
        return native_replay
    if engine != "python":
        raise EngineError(f"unknown engine {engine!r}")

    def emit(table: str, rows: list[dict[str, Any]]) -> Iterator[pa.RecordBatch]:
        """A few rows given as dicts (see ``table_batches``)."""
        names = list(dict.fromkeys(name for row in rows for name in row))
        yield from packed(iter([(table, table_batches(table, Columns.from_rows(names, rows)))]))

    def replay(
        key: tuple[pa.Scalar, ...], batches: Iterator[pa.RecordBatch]
    ) -> Iterator[pa.RecordBatch]:
        def owned(cols: Columns) -> Columns:
            """In a unit of a family split by group: its groups' rows, and the rows of
            no group (``streams``) only in the family's lead unit."""
            if own is None:
                return cols
            if "group" in cols.names:
                groups = cols.column("group")
                keep = [i for i, group in enumerate(groups) if group in own]
                return cols if len(keep) == len(groups) else cols.subset(keep)
            return cols if lead else Columns(cols.names)

        def drained() -> Iterator[pa.RecordBatch]:
            """What the replay recorded since the last call (and the fan-out outcomes), as
            output rows."""
            parts = [
                (table, table_batches(table, owned(cols), as_of if table in with_as_of else None))
                for table, cols in replayer.drain_tables().items()
            ]
            parts.append(("outcome", table_batches("outcome", fanout_outcomes.take())))
            yield from packed(iter(parts))

        if _in_spark_worker():
            tune_worker_gc()
        _collect_finished()  # what the replays before this one left
        replayer = Replayer(
            profile,
            node_max_entries=node_max_entries,
            node_max_bytes=node_max_bytes,
            spill_closed_records=True,
        )
        unit = key[2].as_py() if len(key) > 2 else None
        own = None if unit is None else groups_of[(key[0].as_py(), key[1].as_py(), unit)]
        family = f"db={key[0].as_py()} family={key[1].as_py()!r}" + (
            "" if own is None else f" groups={sorted(own)}"
        )
        lead = True
        last_seq: int | None = None
        # outcomes of fan-out events: rows drained per batch, counts kept for the stats
        fanout_outcomes = Columns(OUTCOME_COLUMNS)
        fanout_counts: dict[tuple[str, str | None], int] = {}
        agg_n, agg_x, mark_n, mark_x = 0, 0, 0, 0
        seeded = False
        for batch in batches:
            batch = unwrap_state(batch)
            # column by column: no dict per row, numbers through numpy
            if "lead" in batch.schema.names and batch.num_rows:
                lead = bool(batch.column("lead")[0].as_py())
            for seq, ts_ms, argv, db, client, fanout, marker, exec_unit, saved, silent in zip(
                _column(batch, "seq"),
                _column(batch, "ts_ms"),
                _column(batch, "argv"),
                _column(batch, "db"),
                _column(batch, "client"),
                _column(batch, "fanout"),
                _column(batch, "marker", False),
                _column(batch, "exec_unit"),
                saved_states(batch),
                _column(batch, "silent", False),
                strict=True,
            ):
                if saved is not None:
                    # saved models sort first (at their last applied seq); several of
                    # them: families that new commands tie together, merged here
                    loaded, n, x = load_state(saved)
                    if not seeded:
                        replayer, agg_n, agg_x = loaded, n, x
                    else:
                        replayer.absorb(loaded)
                        agg_n, agg_x = agg_n + n, agg_x ^ x
                    seeded = True
                    last_seq = seq if last_seq is None else max(seq, last_seq)
                    continue
                if last_seq is not None and seq <= last_seq:
                    raise SeqOrderError(
                        f"replay of {family} saw seq {seq} after {last_seq}: events did not "
                        "arrive in seq order, the tables would be wrong"
                    )
                last_seq = seq
                if keep_state:
                    digest = row_digest(seq, ts_ms, argv, db, client, marker)
                    agg_n += 1
                    agg_x ^= digest
                    if mark_seq is not None and seq <= mark_seq:
                        mark_n += 1
                        mark_x ^= digest
                if marker:
                    replayer.client_activity(ts_ms, client, exec_unit)
                    continue
                if silent:
                    # a stream-level command in a group's unit: the lead unit counts it
                    counted = replayer.counters, replayer.notes
                    replayer.counters, replayer.notes = Counters(), {}
                try:
                    outcome = replayer.apply(seq, ts_ms, argv, db, client, exec_unit)
                except Exception as exc:
                    raise ReplayRowError(
                        f"replay of {family} failed at the event "
                        f"{_describe_row(seq, ts_ms, argv, db)}: {type(exc).__name__}: {exc}"
                    ) from exc
                finally:
                    if silent:
                        replayer.counters, replayer.notes = counted
                if silent:
                    continue
                if fanout:
                    replayer.counters.commands[command_name(argv)] -= 1
                    kind_error = (outcome.kind, outcome.error)
                    fanout_counts[kind_error] = fanout_counts.get(kind_error, 0) + 1
                    fanout_outcomes.append(seq, command_name(argv), outcome.kind, outcome.error, 1)
            yield from drained()
        # the family's last execution unit ends with its rows: readers it unblocked
        replayer.settle()
        yield from drained()
        tables = snapshot_columns(replayer, as_of_ms, as_of_seq)
        # once this replay ends, its model is garbage (see tune_worker_gc)
        _finishing(len(tables["pel"]) + len(tables["ownership"]) + 1)
        yield from packed(
            iter(
                [
                    *((table, table_batches(table, owned(cols))) for table, cols in tables.items()),
                    ("stats", table_batches("stats", _stat_columns(replayer, fanout_counts))),
                ]
            )
        )
        if keep_state:
            # the open records were emitted as segments: the saved model counts anew
            replayer.restart_open_records()
            yield from emit(
                "state",
                [
                    {
                        "db": key[0].as_py(),
                        "family": key[1].as_py(),
                        "applied_seq": last_seq,
                        **dump_state(replayer),
                        "agg_n": agg_n,
                        "agg_x": agg_x,
                        "mark_n": mark_n,
                        "mark_x": mark_x,
                    }
                ],
            )

    return replay


def pack_batch(batch: pa.RecordBatch) -> bytes:
    """One batch as an Arrow IPC stream (a ``payload`` of ``REPLAY_PACKED_SCHEMA``)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def make_unpacker(table: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function (``mapInArrow``) turning the packed replay rows of ``table`` back into
    batches of ``REPLAY_TABLE_SCHEMAS[table]``."""
    schema = _arrow_schema(REPLAY_TABLE_SCHEMAS[table])

    def unpack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield from unpack_payloads(batch.column("payload"), schema)

    return unpack


def unpack_payloads(payloads: pa.Array, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The batches inside ``payloads`` (a binary column of ``REPLAY_PACKED_SCHEMA``)."""
    for payload in payloads:
        reader = pa.ipc.open_stream(payload.as_buffer())
        if not reader.schema.equals(schema):
            raise ValueError(f"packed replay rows of {reader.schema} where {schema} was expected")
        yield from reader


def dump_state(replayer: Replayer) -> dict[str, Any]:
    """A family's model between runs: its ``state_version`` and ``state`` columns."""
    return persist.dump(replayer)


def unwrap_state(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its ``state`` column as the pipeline ships it (a list of at most one
    saved model, ``pipeline.replay.STATE_TRANSPORT_TYPE``) turned back into the saved-model
    struct, null where the list is empty; a batch without one, or with the struct
    already, as it is."""
    index = batch.schema.get_field_index("state")
    if index < 0:
        return batch
    column = batch.column(index)
    if not pa.types.is_list(column.type):
        return batch
    flat = column.flatten()
    n = batch.num_rows
    if len(flat) == 0:
        struct = pa.nulls(n, column.type.value_type)
    else:
        import numpy as np
        import pyarrow.compute as pc

        at = np.full(n, -1, dtype=np.int64)
        parents = pc.list_parent_indices(column).to_numpy(zero_copy_only=False)
        if len(np.unique(parents)) != len(parents):
            raise ValueError("a replay input row carries more than one saved model")
        at[parents] = np.arange(len(flat), dtype=np.int64)
        struct = flat.take(pa.array(at, mask=at < 0))
    return batch.set_column(index, batch.schema.field(index).with_type(struct.type), struct)


def saved_states(batch: pa.RecordBatch) -> list[dict[str, Any] | None]:
    """The ``state`` column of the replay's input as Python (None where null): each
    section converted column by column (Arrow converts nested structs row by row,
    several times slower)."""
    if "state" not in batch.schema.names:
        return [None] * batch.num_rows
    column = batch.column("state")
    out: list[dict[str, Any] | None] = [None] * batch.num_rows
    if column.null_count == len(column):
        return out
    with persist.bulk():
        for i in range(len(column)):
            if column[i].is_valid:
                out[i] = _saved_state(column.slice(i, 1))
    return out


def _saved_state(saved: pa.StructArray) -> dict[str, Any]:
    """One saved state (a ``SAVED_STATE_TYPE`` array of length 1) as Python."""
    state = saved.field("state")
    sections: dict[str, Any] | None = None
    if state[0].is_valid:
        sections = {}
        for field, rows in zip(state.type, state.flatten(), strict=True):
            if not rows[0].is_valid:
                sections[field.name] = None
                continue
            values = rows.flatten()
            names = [f.name for f in values.type]
            fields = [child.to_pylist() for child in values.flatten()]
            rows_of = zip(*fields, strict=True)
            sections[field.name] = [dict(zip(names, v, strict=True)) for v in rows_of]
    return {
        "state_version": saved.field("state_version")[0].as_py(),
        "state": sections,
        "agg_n": saved.field("agg_n")[0].as_py(),
        "agg_x": saved.field("agg_x")[0].as_py(),
    }


def load_state(saved: dict[str, Any]) -> tuple[Replayer, int, int]:
    """The Replayer of a seed row's ``state`` (``SAVED_STATE_TYPE``), with this run's
    counters zeroed, and the family's ``agg_n``/``agg_x``."""
    replayer = persist.load({"state_version": saved["state_version"], "state": saved["state"]})
    replayer.reset_counters()
    return replayer, saved["agg_n"], saved["agg_x"]


def row_digest(
    seq: int, ts_ms: int, argv: list[str] | None, db: int, client: str | None, marker: bool
) -> int:
    """A stable 63-bit digest of one replayed row (XOR-ed into a family's ``agg_x``)."""
    text = repr((seq, ts_ms, argv, db, client, bool(marker))).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1


def _stat_columns(replayer: Replayer, fanout: dict[tuple[str, str | None], int]) -> Columns:
    """Counters of the non-fan-out commands this replay applied, per command and outcome."""
    # Fan-out commands are counted once per event by the pipeline, from "outcome" rows.
    # The replayer's per-kind counters include them, so they are subtracted here.
    counts: dict[tuple[str, str, str | None], int] = {}
    for name, count in replayer.counters.commands.items():
        if count:
            counts[(name, "seen", None)] = count
    c = replayer.counters
    totals = {"applied": c.applied, "ignored": c.ignored}
    errors = dict(c.errors)
    for (kind, error), n in fanout.items():
        if kind in totals:
            totals[kind] -= n
        elif kind == "error" and error is not None:
            errors[error] -= n
    for kind, count in totals.items():
        if count:
            counts[("*", kind, None)] = count
    for error, count in errors.items():
        if count:
            counts[("*", "error", error)] = count
    for note, count in replayer.notes.items():
        counts[("*", "note", note)] = count
    rows = Columns(STAT_COLUMNS)
    for (cmd, kind, err), n in counts.items():
        rows.append(cmd, kind, err, n)
    return rows
