"""The Arrow functions Spark runs on executors: routing and the replay of each partition.

Each picks an engine and runs one loop over it: the Python engine
(:mod:`pelengine.engine.python`) and the native one (``pelengine_native``, Rust; see
:mod:`pelengine.engine.native`) have the same interface, a ``Router`` with
``route(batch)`` and a ``FamilyReplay`` with ``feed(batch)`` and ``finish()``. What is
left here is the same for both: the Spark side of the replay (the group key, the saved
model as the pipeline ships it, the packed output rows).

Both factories capture only plain values (the resolved profile, times, a dict), so what
Spark ships to the executors is small and does not depend on the driver's session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

import pyarrow as pa

from pelengine.engine import python as python_engine
from pelengine.engine.errors import family_label
from pelengine.engine.native import EngineError
from pelengine.engine.native import require as require_native
from pelengine.engine.python.arrow import column
from pelengine.model.routing import linked_keys
from pelengine.schemas import REPLAY_PACKED_SCHEMA, REPLAY_TABLE_SCHEMAS
from pelengine.settings import Settings

# a packed output batch ends once its payloads reach this size (the JVM holds one whole)
PACKED_BATCH_BYTES = 16 << 20
# one table's output batches wait, over the families of a task, until they hold this many
# bytes, and then go as one payload
PACKED_TABLE_BYTES = 1 << 20


def _arrow_schema(spark_schema: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema)


def _engine(engine: str) -> Callable[[], ModuleType]:
    """The engine named ``engine``, as the function giving, where a task runs, the module
    with its ``Router`` and ``FamilyReplay`` (the native core is imported there: an
    executor without it fails naming the fix)."""
    if engine == "python":
        return lambda: python_engine
    if engine == "native":
        return require_native
    raise EngineError(f"unknown engine {engine!r}")


LINKS_ARROW_SCHEMA = pa.schema([("db", pa.int32()), ("links", pa.list_(pa.string()))])


def links_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """For RENAME/XREADGROUP rows: the keys that must share one replay (mapInArrow)."""
    for batch in batches:
        dbs = column(batch, "db")
        argvs = column(batch, "argv")
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


def make_router(
    settings: Settings, family_of: dict[tuple[int, str], str], *, engine: str = "python"
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A mapInArrow function adding ``scope``, ``families``, the consumer group the
    command names (``group``, ``group_only``: see ``command_group``) and, for rows that
    reach no stream, the outcome a fresh model gives them (``pre_kind``/``pre_error``):
    the ``Router`` of ``engine`` ("python" or "native", the same columns:
    tests/native/test_router_equal.py)."""
    implementation = _engine(engine)
    profile = settings.model_profile
    family_of = dict(family_of)

    def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        router = implementation().Router(profile, family_of)
        for batch in batches:
            yield router.route(batch)

    return route


Starter = Callable[[tuple[Any, ...]], Any]


def family_starter(
    settings: Settings,
    as_of_ms: int,
    as_of_seq: int,
    mark_seq: int | None,
    unit_groups: dict[tuple[int, str, str], list[str]] | None,
    engine: str,
) -> Starter:
    """The function starting, where a task runs, the ``FamilyReplay`` of the family (or
    unit) a key (db, family[, unit]) names. It captures plain values only."""
    implementation = _engine(engine)
    profile = settings.model_profile
    node_max_entries, node_max_bytes = settings.node_max_entries, settings.node_max_bytes
    keep_state = settings.incremental
    schemas = {name: _arrow_schema(schema) for name, schema in REPLAY_TABLE_SCHEMAS.items()}
    groups_of = {k: sorted(v) for k, v in (unit_groups or {}).items()}

    def start(key: tuple[Any, ...]) -> Any:
        db, family = key[0], key[1]
        unit = key[2] if len(key) > 2 else None
        own = None if unit is None else groups_of[(db, family, unit)]
        return implementation().FamilyReplay(
            profile,
            node_max_entries,
            node_max_bytes,
            as_of_ms,
            as_of_seq,
            family_label(db, family, own),
            own,
            schemas,
            keep_state=keep_state,
            mark_seq=mark_seq,
            state_key=(db, family),
        )

    return start


def make_replay_function(
    settings: Settings,
    as_of_ms: int,
    as_of_seq: int,
    *,
    mark_seq: int | None = None,
    unit_groups: dict[tuple[int, str, str], list[str]] | None = None,
    engine: str = "python",
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The Arrow function (``mapInArrow``) replaying the families of one partition, whose
    rows come sorted by (db, family[, unit], seq): each run of rows with one key is one
    family (or unit of a family split by group), fed in ``seq`` order to a
    ``FamilyReplay`` of ``engine`` ("python" or "native"; the same rows: tests/native),
    finished when the next key starts. ``unit`` is a key only with ``unit_groups``.

    It captures the run's frozen ``settings`` (the resolved profile, the server's
    ``stream-node-max-*``, whether state is kept) and the plain values of this replay:
    the snapshot moment, ``mark_seq`` and the groups of each unit of a family split by
    group (the key's third value names the unit).

    ``settings.incremental`` (keep state): a row whose ``state`` column is set carries the
    family's saved model (it sorts first: its ``seq`` is the last one applied) and the
    replay continues from it; at the end the model is emitted as a ``state`` row
    (``state_version`` and ``state``: the plain data of ``pelengine.model.persist``,
    docs/state.md), with the count and an order-free digest of every row the
    family has received (``agg_n``/``agg_x``, so that changed history can be named);
    ``mark_n``/``mark_x`` are the same over the rows with ``seq <= mark_seq`` only.

    Output: the rows the replay gives as it goes (history, fan-out outcomes) and at its
    end (state tables, outcome counters, the saved model), each table in its own columns
    (``REPLAY_TABLE_SCHEMAS``), packed as Arrow IPC rows of ``REPLAY_PACKED_SCHEMA``
    (``make_unpacker`` reads them back), the small outputs of many families together
    (``_Packer``). The pipeline merges the delivery segments into ``delivery_counts``.
    """
    start = family_starter(settings, as_of_ms, as_of_seq, mark_seq, unit_groups, engine)
    packed_schema = _arrow_schema(REPLAY_PACKED_SCHEMA)
    key_names = ("db", "family", "unit") if unit_groups else ("db", "family")

    def replay(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out = _Packer(packed_schema)
        key: tuple[Any, ...] | None = None
        family_replay: Any = None
        for batch in batches:
            for run_key, rows in key_runs(batch, key_names):
                if run_key != key:
                    if family_replay is not None:
                        out.add(family_replay.finish())
                    key, family_replay = run_key, start(run_key)
                out.add(family_replay.feed(unwrap_state(rows)))
                yield from out.full()
        if family_replay is not None:
            out.add(family_replay.finish())
        yield from out.rest()

    return replay


def one_family(
    partition: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
) -> Callable[[tuple[pa.Scalar, ...], Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``partition`` (a ``make_replay_function``) as the replay of one family whose key
    (Arrow scalars: db, family[, unit]) is given apart from its batches, the form of a
    grouped Arrow UDF that the tests and ``make bench-udf`` call: the key's values are
    set in every batch (its key columns added, or replaced in their own types)."""
    names = ("db", "family", "unit")

    def keyed(key: tuple[pa.Scalar, ...], batch: pa.RecordBatch) -> pa.RecordBatch:
        for name, value in zip(names, key, strict=False):
            at = batch.schema.get_field_index(name)
            kind = batch.schema.field(at).type if at >= 0 else None
            kind = kind or (pa.int32() if name == "db" else pa.string())
            constant = pa.repeat(pa.scalar(value.as_py(), kind), batch.num_rows)
            if at >= 0:
                batch = batch.set_column(at, batch.schema.field(at), constant)
            else:
                batch = batch.append_column(pa.field(name, kind), constant)
        return batch

    def replay(
        key: tuple[pa.Scalar, ...], batches: Iterator[pa.RecordBatch]
    ) -> Iterator[pa.RecordBatch]:
        return partition(keyed(key, batch) for batch in batches)

    return replay


def key_runs(
    batch: pa.RecordBatch, key_names: tuple[str, ...]
) -> Iterator[tuple[tuple[Any, ...], pa.RecordBatch]]:
    """The runs of rows of ``batch`` (sorted by ``key_names``) that share one key, as
    (key values, zero-copy slice), in order."""
    import numpy as np
    import pyarrow.compute as pc

    n = batch.num_rows
    if n == 0:
        return
    changed = np.zeros(max(n - 1, 0), dtype=bool)
    if n > 1:
        for name in key_names:
            values = batch.column(name)
            after, before = values.slice(1), values.slice(0, n - 1)
            differs = pc.fill_null(pc.not_equal(after, before), False)
            nulls = pc.not_equal(pc.is_null(after), pc.is_null(before))
            changed |= pc.or_(differs, nulls).to_numpy(zero_copy_only=False)
    bounds = [0, *(np.flatnonzero(changed) + 1).tolist(), n]
    columns = [batch.column(name) for name in key_names]
    for begin, end in zip(bounds, bounds[1:], strict=False):
        yield tuple(c[begin].as_py() for c in columns), batch.slice(begin, end - begin)


class _Packer:
    """The replay's output tables as rows of ``REPLAY_PACKED_SCHEMA``, gathered over the
    families of a task: each table's batches wait until they hold ``PACKED_TABLE_BYTES``
    (or the task ends) and go as one payload (an Arrow IPC stream of those batches); a
    packed output batch is ready once its payloads reach ``PACKED_BATCH_BYTES``. Many
    small families thus make a few large payloads, not eight small ones each."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.waiting: dict[str, list[pa.RecordBatch]] = {}
        self.waiting_bytes: dict[str, int] = {}
        self.tables: list[str] = []
        self.counts: list[int] = []
        self.payloads: list[bytes] = []
        self.size = 0

    def add(self, parts: Iterable[tuple[str, pa.RecordBatch]]) -> None:
        for table, batch in parts:
            if batch.num_rows == 0:
                continue
            self.waiting.setdefault(table, []).append(batch)
            size = self.waiting_bytes.get(table, 0) + batch.nbytes
            self.waiting_bytes[table] = size
            if size >= PACKED_TABLE_BYTES:
                self._pack(table)

    def _pack(self, table: str) -> None:
        batches = self.waiting.pop(table)
        self.waiting_bytes.pop(table)
        payload = pack_batches(batches)
        self.tables.append(table)
        self.counts.append(sum(b.num_rows for b in batches))
        self.payloads.append(payload)
        self.size += len(payload)

    def _batch(self) -> pa.RecordBatch:
        out = pa.RecordBatch.from_arrays(
            [
                pa.array(self.tables, pa.string()),
                pa.array(self.counts, pa.int64()),
                pa.array(self.payloads),
            ],
            schema=self.schema,
        )
        self.tables, self.counts, self.payloads, self.size = [], [], [], 0
        return out

    def full(self) -> Iterator[pa.RecordBatch]:
        """A packed output batch when the payloads reached ``PACKED_BATCH_BYTES``."""
        if self.size >= PACKED_BATCH_BYTES:
            yield self._batch()

    def rest(self) -> Iterator[pa.RecordBatch]:
        """Everything still waiting (at the end of the task); nothing when nothing is."""
        for table in list(self.waiting):
            self._pack(table)
        if self.tables:
            yield self._batch()


def pack_batches(batches: list[pa.RecordBatch]) -> bytes:
    """Batches of one schema as one Arrow IPC stream (a ``payload``)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for batch in batches:
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
    field = batch.schema.field(index).with_type(struct.type).with_nullable(True)
    return batch.set_column(index, field, struct)
