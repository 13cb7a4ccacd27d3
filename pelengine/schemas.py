"""Spark schemas of the input contract and of every output table (docs/outputs.md).

The replay UDF returns each table's rows in that table's own columns
(``REPLAY_TABLE_SCHEMAS``), packed as Arrow IPC (``REPLAY_PACKED_SCHEMA``).
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pelengine.model.delivery import INCARNATION_COLUMNS, SEGMENT_COLUMNS
from pelengine.model.persist import STATE_SCHEMA
from pelengine.model.replay import CHANGE_COLUMNS, VERSION_COLUMNS
from pelengine.model.snapshot import (
    DELIVERY_COLUMNS,
    GROUP_COLUMNS,
    OWNERSHIP_COLUMNS,
    PEL_COLUMNS,
    STREAM_COLUMNS,
)

EVENTS_SCHEMA = StructType(
    [
        StructField("seq", LongType(), True),
        StructField("ts_ms", LongType(), True),
        StructField("argv", ArrayType(StringType(), True), True),
        StructField("db", IntegerType(), True),
        StructField("client", StringType(), True),
        StructField("source", StringType(), True),
    ]
)
REQUIRED_EVENT_COLUMNS = ("seq", "ts_ms", "argv")
OPTIONAL_EVENT_COLUMNS = ("db", "client", "source")

_I = IntegerType()
_L = LongType()


def _struct(*fields: tuple[str, DataType]) -> StructType:
    """A struct with these (name, type) fields, all nullable."""
    return StructType([StructField(n, t, True) for n, t in fields])


def _records(*fields: tuple[str, DataType]) -> ArrayType:
    """An array of records with these (name, type) fields, all nullable."""
    return ArrayType(_struct(*fields), True)


_S = StringType()
_B = BooleanType()

# Every column any table uses, with its type.
_COLUMN_TYPES: dict[str, DataType] = {
    "db": _I,
    "key": _S,
    "group": _S,
    "id": _S,
    "id_ms": _L,
    "id_seq": _L,
    "consumer": _S,
    "delivery_time_ms": _L,
    "delivery_count": _L,
    "entry_exists": _B,
    "idle_ms": _L,
    "pending": _L,
    "seen_time_ms": _L,
    "active_time_ms": _L,
    "oldest_pending_id": _S,
    "earliest_delivery_time_ms": _L,
    "max_delivery_count": _L,
    "deliveries": _L,
    "owners": _L,
    "first_delivery_ms": _L,
    "last_delivery_ms": _L,
    "status": _S,
    "closed_ms": _L,
    "owner_names": ArrayType(_S, True),
    "group_created_seq": _L,
    "segment_n": _L,
    "changed_seq": _L,
    "changed_ms": _L,
    "moved_seq": _L,
    "moved_ms": _L,
    "last_delivered_id": _S,
    "entries_read": _L,
    "lag": _L,
    "consumers": _L,
    "length": _L,
    "last_generated_id": _S,
    "max_deleted_entry_id": _S,
    "entries_added": _L,
    "first_entry_id": _S,
    "last_entry_id": _S,
    "recorded_first_entry_id": _S,
    "groups": _L,
    "seq": _L,
    "request_seq": _L,
    "ts_ms": _L,
    "command": _S,
    "change": _S,
    "from_consumer": _S,
    "to_consumer": _S,
    "valid_from_seq": _L,
    "valid_from_ms": _L,
    "valid_to_seq": _L,
    "valid_to_ms": _L,
    "as_of_ms": _L,
    "as_of_seq": _L,
}

# What one pending entry is, in `pel` and in each version of it in `pel_history`.

_AS_OF = ("as_of_ms", "as_of_seq")
# The delivery_counts row of one entry in one group incarnation, as the engines render it
# (pelengine.model.snapshot) and as the output table has it, but for the snapshot moment.
_DELIVERY_COUNTS = tuple(c for c in DELIVERY_COLUMNS if c not in _AS_OF)

# What the engines emit per table, in the order the model renders it
# (pelengine.model.snapshot): every table with the snapshot's moment.
ENGINE_TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "pel": PEL_COLUMNS,
    "ownership": OWNERSHIP_COLUMNS,
    "delivery_counts": DELIVERY_COLUMNS,
    "groups": GROUP_COLUMNS,
    "streams": STREAM_COLUMNS,
    "ownership_changes": (*CHANGE_COLUMNS, *_AS_OF),
    "pel_history": (*VERSION_COLUMNS, *_AS_OF),
}

#: The output contract's version (docs/outputs.md): 2 since history tables carry no
#: ``as_of_*`` (their rows change only when a command changes them).
OUTPUT_CONTRACT_VERSION = 2

# The output tables' columns (contract version 2): the snapshot tables end with the
# moment they describe, the history tables carry none (each row is stamped by the
# command that made or last changed it).
SNAPSHOT_TABLES = ("pel", "ownership", "groups", "streams")
HISTORY_TABLES = ("delivery_counts", "ownership_changes", "pel_history")
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "pel": PEL_COLUMNS,
    "ownership": OWNERSHIP_COLUMNS,
    "delivery_counts": _DELIVERY_COUNTS,
    "groups": GROUP_COLUMNS,
    "streams": STREAM_COLUMNS,
    "ownership_changes": CHANGE_COLUMNS,
    # is_current: the version is the entry's pending one now (valid_to_seq is null)
    "pel_history": (*VERSION_COLUMNS, "is_current"),
}
#: Output columns no engine emits: derived from the others as the tables are assembled
#: (pelengine.pipeline.assemble.output_table).
DERIVED_COLUMN_TYPES: dict[str, DataType] = {"is_current": _B}
STATE_TABLES = ("pel", "ownership", "delivery_counts", "groups", "streams")
OUTPUT_TABLES = (*STATE_TABLES, "ownership_changes", "pel_history")
#: Where incremental runs keep each family's replay state (a table of the output root).
STATE_TABLE = "_state"
#: The tables a night merges rows into (replacing the rows new commands changed): on
#: delta-spark they get deletion vectors (Settings.deletion_vectors), so that a merge marks
#: the rows it replaces instead of rewriting every file holding one.
MERGED_TABLES = ("delivery_counts", "pel_history", STATE_TABLE)
#: The output tables written partitioned, by these columns: delivery_counts by ``status``,
#: pel_history by ``is_current``, so that the rows a night can replace (those of entries
#: still pending, but for an entry delivered again after it closed; the open versions) are
#: files of their own, which its merges alone read and rewrite
#: (pelengine.pipeline.carry.PENDING_ONLY, PEL_HISTORY_REPLACES).
TABLE_PARTITIONS: dict[str, tuple[str, ...]] = {
    "delivery_counts": ("status",),
    "pel_history": ("is_current",),
}

# Outcome rows: how many commands of a kind a replay applied, ignored or failed.
STAT_FIELDS = (
    StructField("stat_command", _S, True),
    StructField("stat_kind", _S, True),
    StructField("stat_error", _S, True),
    StructField("stat_count", _L, True),
)

# The types of the state schema's type names (pelengine.model.persist): a ``u64`` is
# stored as the signed long of its bits; a trailing "?" (may be null) leaves every
# field nullable here, as in every table of this job.
_STATE_TYPES: dict[str, DataType] = {"int": _I, "long": _L, "u64": _L, "bool": _B, "string": _S}


def _state_type(type_name: str) -> DataType:
    base = type_name.rstrip("?")
    if base.startswith("array<") and base.endswith(">"):
        return ArrayType(_state_type(base[len("array<") : -1]), True)
    return _STATE_TYPES[base]


# A family's saved model: one field per section, each an array of rows (docs/state.md).
STATE_TYPE = StructType(
    [
        StructField(
            section,
            ArrayType(StructType([StructField(f, _state_type(t), True) for f, t in fields]), True),
            True,
        )
        for section, fields in STATE_SCHEMA
    ]
)

# A family's saved model (incremental runs), as the replay emits it.
REPLAY_STATE_FIELDS = (
    StructField("family", _S, True),
    StructField("applied_seq", _L, True),
    StructField("state_version", _I, True),
    StructField("state", STATE_TYPE, True),
    StructField("agg_n", _L, True),
    StructField("agg_x", _L, True),
)
# The ``state`` column of the replay's input: a family's saved model, on its seed row.
SAVED_STATE_TYPE = StructType(
    [
        StructField("state_version", _I, True),
        StructField("state", STATE_TYPE, True),
        StructField("agg_n", _L, True),
        StructField("agg_x", _L, True),
    ]
)
# What the run row carries across runs (see pelengine.runs.incremental).
RUN_GLOBALS_FIELDS = (
    StructField("select_db", _I, True),
    StructField(
        "open_units",
        ArrayType(
            StructType([StructField("client", _S, True), StructField("ts_ms", _L, True)]), True
        ),
        True,
    ),
    StructField(
        "waits",
        _records(("client", _S), ("db", _I), ("family", _S)),
        True,
    ),
    StructField(
        "family_of",
        _records(("db", _I), ("key", _S), ("family", _S)),
        True,
    ),
    StructField("delivery_counts_version", _L, True),
)

# What the replay UDF receives per row (pipeline.route: ``ROW_COLUMNS`` and the unit
# columns of ``split_by_group``; incremental runs add ``state``, ``SAVED_STATE_TYPE``).
REPLAY_INPUT_SCHEMA = _struct(
    ("seq", _L),
    ("ts_ms", _L),
    ("argv", ArrayType(_S, True)),
    ("db", _I),
    ("client", _S),
    ("fanout", _B),
    ("family", _S),
    ("marker", _B),
    ("exec_unit", _L),
    ("unit", _S),
    ("lead", _B),
    ("silent", _B),
)

# Every column the replay emits, with its type: each table's rows use some of them
# (``REPLAY_TABLE_SCHEMAS``).
REPLAY_COLUMN_TYPES = StructType(
    [StructField(name, dtype, True) for name, dtype in _COLUMN_TYPES.items()]
    + list(STAT_FIELDS)
    + list(REPLAY_STATE_FIELDS)
    + [StructField("mark_n", _L, True), StructField("mark_x", _L, True)]
)

# the rows of the fan-out events' outcomes, and the outcome counters of a replay
OUTCOME_COLUMNS = ("seq", "stat_command", "stat_kind", "stat_error", "stat_count")
STAT_COLUMNS = ("stat_command", "stat_kind", "stat_error", "stat_count")
# a family's saved model, emitted at the end of its replay (incremental runs)
# a family's row of the state table (pelengine.runs.incremental), without its kind
FAMILY_STATE_COLUMNS = ("db", "family", "applied_seq", "state_version", "state", "agg_n", "agg_x")
STATE_ROW_COLUMNS = (*FAMILY_STATE_COLUMNS, "mark_n", "mark_x")


def _columns_schema(names: tuple[str, ...]) -> StructType:
    return StructType([REPLAY_COLUMN_TYPES[name] for name in names])


# What the replay emits, per table: its columns in this order, typed as above.
REPLAY_TABLE_SCHEMAS: dict[str, StructType] = {
    **{name: _columns_schema(ENGINE_TABLE_COLUMNS[name]) for name in OUTPUT_TABLES},
    "delivery_segments": _columns_schema(SEGMENT_COLUMNS),
    "group_incarnations": _columns_schema(INCARNATION_COLUMNS),
    "outcome": _columns_schema(OUTCOME_COLUMNS),
    "stats": _columns_schema(STAT_COLUMNS),
    "state": _columns_schema(STATE_ROW_COLUMNS),
}

# The replay UDF's output: one row per batch of one table, ``payload`` an Arrow IPC
# stream of that table's ``REPLAY_TABLE_SCHEMAS`` columns (``rows`` rows). Packed, the
# cached replay output costs a copy of bytes, and reading one table back decodes that
# table's batches alone, in its own narrow row type (see pelengine.engine.udf).
REPLAY_PACKED_SCHEMA = StructType(
    [
        StructField("table", _S, False),
        StructField("rows", _L, False),
        StructField("payload", BinaryType(), False),
    ]
)


# The state table (``<out>/_state``, docs/state.md): one ``family`` row per family
# replayed so far (db, family, applied_seq, state_version, state, agg_n, agg_x) and one
# ``run`` row describing the input the state corresponds to (see pelengine.runs.incremental).
STATE_TABLE_SCHEMA = StructType(
    [
        StructField("kind", _S, False),
        StructField("db", _I, True),
        *REPLAY_STATE_FIELDS,
        StructField("events_version", _L, True),
        StructField("high_seq", _L, True),
        StructField("as_of_ms", _L, True),
        StructField("as_of_seq", _L, True),
        StructField("rows_upto_high", _L, True),
        StructField("digest_upto_high", _L, True),
        StructField("rows_null_seq", _L, True),
        StructField("options", _S, True),
        *RUN_GLOBALS_FIELDS,
    ]
)


def table_schema(name: str) -> StructType:
    """The schema of one output table."""
    return StructType(
        [
            StructField(c, _COLUMN_TYPES.get(c) or DERIVED_COLUMN_TYPES[c], True)
            for c in TABLE_COLUMNS[name]
        ]
    )
