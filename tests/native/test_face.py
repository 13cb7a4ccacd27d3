"""The native core's Python face (``pelengine_native``) against the Python model.

``FamilyReplay`` is held to the Python replay UDF (``one_family(make_replay_function(...))``, called
in-process as a Spark worker calls it) on the same Arrow batches, ``Replayer`` to the
Python ``Replayer`` and ``snapshot_columns``: tables compared as sorted rows. No Spark.

Skip-free on purpose: without a built ``pelengine_native`` these tests fail (build it
with ``maturin develop --release`` in native/py, or ``pip install ./native/py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import pelengine_native as native
import pyarrow as pa
import pytest

from pelengine.engine import errors, udf
from pelengine.engine.python.arrow import OUTPUT_BATCH_ROWS
from pelengine.model.replay import CHANGE_COLUMNS, VERSION_COLUMNS, Replayer
from pelengine.model.routing import command_group
from pelengine.model.snapshot import snapshot_columns
from pelengine.schemas import REPLAY_INPUT_SCHEMA, REPLAY_TABLE_SCHEMAS
from pelengine.settings import Settings
from pelengine.synth import generate_events

Row = dict[str, Any]

AS_OF_MS = 1_800_000_000_000
AS_OF_SEQ = 10**12
PROFILES = ("7.0", "7.2", "7.4", "valkey-8.1")
INPUT_SCHEMA = udf._arrow_schema(REPLAY_INPUT_SCHEMA)
SCHEMAS = {t: udf._arrow_schema(s) for t, s in REPLAY_TABLE_SCHEMAS.items()}

# A hand log: "client | command" per line (seq and ts_ms follow the line number).
HAND_LOG = """
a | XGROUP CREATE s g $ MKSTREAM
a | XGROUP CREATE s h 0
p | XADD s 1-0 f v
p | XADD s 2-0 f v
p | XADD s 3-0 f v
c1 | XREADGROUP GROUP g alice COUNT 2 STREAMS s >
c2 | XREADGROUP GROUP h bob STREAMS s >
c3 | XREADGROUP GROUP g carol BLOCK 0 STREAMS s >
c1 | XREADGROUP GROUP g alice STREAMS s >
p | XADD s 4-0 f v
c1 | XACK s g 1-0
c2 | XCLAIM s h dave 0 1-0 2-0
c2 | XAUTOCLAIM s h erin 0 0-0 COUNT 1
p | XDEL s 2-0
p | XTRIM s MAXLEN 2
c2 | XACK s h 3-0 9-9
a | XGROUP SETID s g 0
c1 | XREADGROUP GROUP g alice STREAMS s >
a | XGROUP DELCONSUMER s h bob
a | XINFO STREAM s
a | SET str x
a | XADD str * f v
a | XREADGROUP GROUP g alice STREAMS nope >
a | XACKDEL s g IDS 1 1-0
a | XADD s
m | MULTI
m | XADD s 10-0 f v
m | XREADGROUP GROUP h frank STREAMS s >
m | EXEC
a | RENAME s t
c1 | XREADGROUP GROUP g alice STREAMS t 0
a | XGROUP CREATE t k $
a | XGROUP DESTROY t h
p | XADD t 11-0 f v
c4 | XREADGROUP GROUP k gina BLOCK 100 STREAMS t >
p | XADD u 1-0 f v
a | XGROUP CREATE u g $
c5 | XREADGROUP GROUP g hal BLOCK 0 STREAMS u >
a | DEL u
p | XADD t 12-0 f v
a | FLUSHDB
a | XGROUP CREATE v g $ MKSTREAM
p | XADD v 1-0 f v
c1 | XREADGROUP GROUP g alice STREAMS v >
"""


def hand_rows() -> list[Row]:
    rows = []
    lines = [line for line in HAND_LOG.strip().splitlines() if line.strip()]
    for i, line in enumerate(lines):
        client, command = (part.strip() for part in line.split("|"))
        rows.append(
            {
                "seq": i + 1,
                "ts_ms": 1_700_000_000_000 + 10 * i,
                "argv": command.split(),
                "db": 0,
                "client": client,
            }
        )
    return rows


def generated_rows(n: int, keys: int, seed: int) -> list[Row]:
    rows = []
    seen: set[int] = set()
    for row in generate_events(n, keys, seed):
        if not row["argv"] or row["seq"] in seen:
            continue
        seen.add(row["seq"])
        rows.append({**row, "db": row["db"] or 0})
    rows.sort(key=lambda r: r["seq"])
    return rows


def with_units(rows: list[Row]) -> list[Row]:
    """``exec_unit`` as the job gives it: the MULTI's seq for the commands of a transaction."""
    open_units: dict[Any, int] = {}
    out = []
    for row in rows:
        name = (row["argv"][0] if row["argv"] else "").upper()
        unit = None
        if name == "MULTI":
            open_units[row["client"]] = row["seq"]
        elif name in ("EXEC", "DISCARD"):
            open_units.pop(row["client"], None)
        else:
            unit = open_units.get(row["client"])
        out.append({**row, "exec_unit": unit})
    return out


def batches_of(rows: list[Row], size: int = 7, **extra: Any) -> list[pa.RecordBatch]:
    """The replay's input batches (``REPLAY_INPUT_SCHEMA``) of ``size`` rows."""
    full = [
        {
            "seq": r["seq"],
            "ts_ms": r["ts_ms"],
            "argv": r["argv"],
            "db": r.get("db", 0),
            "client": r.get("client"),
            "fanout": r.get("fanout", False),
            "family": "f",
            "marker": r.get("marker", False),
            "exec_unit": r.get("exec_unit"),
            "unit": None,
            "lead": r.get("lead", True),
            "silent": r.get("silent", False),
            **extra,
        }
        for r in rows
    ]
    table = pa.Table.from_pylist(full, schema=INPUT_SCHEMA)
    return table.to_batches(max_chunksize=size)


def canon(rows: Sequence[Row]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def python_replay(
    settings: Settings,
    batches: list[pa.RecordBatch],
    key: tuple[Any, ...],
    unit_groups: dict[tuple[int, str, str], list[str]] | None = None,
) -> dict[str, list[Row]]:
    """The Python replay UDF's output rows, per table."""
    fn = udf.one_family(
        udf.make_replay_function(settings, AS_OF_MS, AS_OF_SEQ, unit_groups=unit_groups)
    )
    scalars = tuple(pa.scalar(k) for k in key)
    scalars = (pa.scalar(key[0], pa.int32()), *scalars[1:])
    tables: dict[str, list[Row]] = {}
    for out in fn(scalars, iter(batches)):
        for i, table in enumerate(out.column("table").to_pylist()):
            payload = out.column("payload").slice(i, 1)
            for inner in udf.unpack_payloads(payload, SCHEMAS[table]):
                tables.setdefault(table, []).extend(inner.to_pylist())
    return tables


def native_outputs(
    settings: Settings,
    batches: list[pa.RecordBatch],
    family: str = "db=0 family='f'",
    own: list[str] | None = None,
) -> Iterator[tuple[str, pa.RecordBatch]]:
    replay = native.FamilyReplay(
        settings.profile_name,
        settings.node_max_entries,
        settings.node_max_bytes,
        AS_OF_MS,
        AS_OF_SEQ,
        family,
        own,
        SCHEMAS,
    )
    for batch in batches:
        yield from replay.feed(batch)
    yield from replay.finish()


def native_replay(
    settings: Settings, batches: list[pa.RecordBatch], own: list[str] | None = None
) -> dict[str, list[Row]]:
    tables: dict[str, list[Row]] = {}
    for table, batch in native_outputs(settings, batches, own=own):
        assert isinstance(table, str)
        assert batch.schema.equals(SCHEMAS[table]), (table, batch.schema)
        assert 0 < batch.num_rows <= OUTPUT_BATCH_ROWS
        tables.setdefault(table, []).extend(batch.to_pylist())
    return tables


def assert_same_tables(mine: dict[str, list[Row]], expected: dict[str, list[Row]]) -> None:
    assert sorted(mine) == sorted(expected)
    for table, rows in expected.items():
        assert len(mine[table]) == len(rows), table
        assert canon(mine[table]) == canon(rows), table


def test_module_attributes() -> None:
    assert native.ENGINE == "native"
    assert native.__version__ == "0.1.0"
    assert native.ABI == 4
    assert issubclass(native.SeqOrderError, RuntimeError)
    assert issubclass(native.ReplayRowError, RuntimeError)


def test_a_fault_in_the_core_is_an_exception_not_an_abort() -> None:
    """In a child interpreter with the module as installed (a release build): an
    overflow inside the core's guard raises RuntimeError and the interpreter goes on.
    A build with panic=abort would kill the child (as it would a Spark worker); one
    without overflow checks would return a wrapped, negative value."""
    code = (
        "import pelengine_native as n\n"
        "try:\n"
        "    print('returned', n._overflow_for_test(1))\n"
        "except RuntimeError as e:\n"
        "    print('raised', e)\n"
        "print('after', n._overflow_for_test(0))\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])
    lines = child.stdout.splitlines()
    assert lines[0].startswith("raised _overflow_for_test panicked:"), child.stdout
    assert "overflow" in lines[0], child.stdout
    assert lines[1] == f"after {2**63 - 1}", child.stdout


@pytest.mark.parametrize("profile", PROFILES)
def test_family_replay_of_a_hand_log(profile: str) -> None:
    settings = Settings(profile=profile)
    batches = batches_of(with_units(hand_rows()))
    expected = python_replay(settings, batches, (0, "f"))
    mine = native_replay(settings, batches)
    assert {"pel", "ownership_changes", "pel_history", "stats"} <= set(expected)
    assert_same_tables(mine, expected)


@pytest.mark.parametrize(("profile", "seed"), [("7.0", 1), ("7.4", 2), ("valkey-8.1", 3)])
def test_family_replay_of_a_generated_log(profile: str, seed: int) -> None:
    settings = Settings(profile=profile)
    batches = batches_of(with_units(generated_rows(4000, 3, seed)), size=1000)
    expected = python_replay(settings, batches, (0, "f"))
    mine = native_replay(settings, batches)
    assert len(expected["ownership_changes"]) > 1000
    assert_same_tables(mine, expected)


def test_family_replay_with_fanout_rows() -> None:
    """FLUSHDB/FLUSHALL reach every family as fan-out rows: outcome rows, and the stats
    leave them out."""
    rows = hand_rows()
    for row in rows:
        row["fanout"] = row["argv"][0] in ("FLUSHDB", "FLUSHALL", "XINFO")
    settings = Settings(profile="7.4")
    batches = batches_of(rows)
    expected = python_replay(settings, batches, (0, "f"))
    assert len(expected["outcome"]) == 2
    assert_same_tables(native_replay(settings, batches), expected)


def test_family_replay_split_by_group() -> None:
    """A unit of a family split by group: rows of the other groups as client activity
    (``marker``), stream-level rows silent outside the lead unit; ``owned`` output."""
    rows = generated_rows(3000, 1, 5)
    groups = sorted({g for r in rows for g in [command_group(r["argv"])[0]] if g})
    assert len(groups) >= 2, groups
    settings = Settings(profile="7.4")
    for lead, group in enumerate(groups):
        unit_rows = []
        for r in rows:
            named, only = command_group(r["argv"])
            marker = only and named != group
            silent = not only and lead != 0
            unit_rows.append({**r, "marker": marker, "silent": silent, "lead": lead == 0})
        batches = batches_of(unit_rows, size=500)
        unit_groups = {(0, "f", group): [group]}
        expected = python_replay(settings, batches, (0, "f", group), unit_groups)
        mine = native_replay(settings, batches, own=[group])
        assert_same_tables(mine, expected)
        if lead == 0:
            assert "streams" in mine
        else:
            assert "streams" not in mine


def test_missing_and_null_input_columns_read_as_udf_defaults() -> None:
    """Only seq, ts_ms, argv (as the events table has them): the rest as udf.py reads it."""
    settings = Settings(profile="7.4")
    rows = hand_rows()
    names = ("seq", "ts_ms", "argv", "client")
    table = pa.Table.from_pylist(
        [{c: r[c] for c in names} for r in rows],
        schema=pa.schema([INPUT_SCHEMA.field(c) for c in names]),
    )
    batches = table.to_batches(max_chunksize=10)
    expected = python_replay(settings, batches, (0, "f"))
    assert_same_tables(native_replay(settings, batches), expected)


READ_ALL = ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"]


def test_output_batches_hold_at_most_8192_rows() -> None:
    rows = [
        {"seq": 1, "ts_ms": 1, "argv": ["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]},
        *(
            {"seq": 2 + i, "ts_ms": 2 + i, "argv": ["XADD", "s", f"{i + 1}-0", "f", "v"]}
            for i in range(9000)
        ),
        {"seq": 10_000, "ts_ms": 10_000, "argv": READ_ALL},
    ]
    settings = Settings(profile="7.4")
    batches = batches_of(rows, size=20_000)
    out = list(native_outputs(settings, batches))
    pel = [b.num_rows for t, b in out if t == "pel"]
    assert pel == [8192, 9000 - 8192]
    expected = python_replay(settings, batches, (0, "f"))
    assert_same_tables(native_replay(settings, batches), expected)


def test_seq_order_error_as_udf() -> None:
    rows = hand_rows()[:4]
    rows[3] = {**rows[3], "seq": 2}
    settings = Settings(profile="7.4")
    batches = batches_of(rows)
    with pytest.raises(errors.SeqOrderError) as py_err:
        python_replay(settings, batches, (0, "f"))
    with pytest.raises(native.SeqOrderError) as err:
        list(native_outputs(settings, batches))
    assert str(err.value) == str(py_err.value)
    assert "saw seq 2 after 3" in str(err.value)


def test_state_column_is_read() -> None:
    """A set ``state`` is a saved model (tests/native/test_state_native.py): one without
    sections is refused as Python's ``persist.load`` refuses it."""
    state_type = pa.struct([("state_version", pa.int32())])
    rows = hand_rows()[:3]
    batches = batches_of(rows)
    batch = batches[0]
    states = pa.array([{"state_version": 3}, None, None], state_type)
    with_state = pa.RecordBatch.from_arrays(
        [*batch.columns, states], names=[*batch.schema.names, "state"]
    )
    with pytest.raises(native.StateError, match="^the saved model has no state$"):
        list(native_outputs(Settings(profile="7.4"), [with_state]))
    # a state column of nulls only is fine
    nulls = pa.RecordBatch.from_arrays(
        [*batch.columns, pa.nulls(3, state_type)], names=[*batch.schema.names, "state"]
    )
    assert list(native_outputs(Settings(profile="7.4"), [nulls]))


def test_wrong_column_type_names_the_column() -> None:
    batch = batches_of(hand_rows()[:3])[0]
    i = batch.schema.get_field_index("client")
    bad = batch.set_column(i, "client", pa.array([1, 2, 3], pa.int64()))
    with pytest.raises(TypeError, match="client"):
        list(native_outputs(Settings(profile="7.4"), [bad]))


def test_a_failed_replay_cannot_go_on() -> None:
    rows = hand_rows()[:4]
    rows[3] = {**rows[3], "seq": 1}
    replay = native.FamilyReplay("7.4", 100, 4096, 0, 0, "fam", None, SCHEMAS)
    with pytest.raises(native.SeqOrderError):
        replay.feed(batches_of(rows, size=10)[0])
    with pytest.raises(RuntimeError, match="cannot go on"):
        replay.finish()


def test_family_replay_needs_every_schema() -> None:
    schemas = dict(SCHEMAS)
    del schemas["pel"]
    with pytest.raises(ValueError, match="pel"):
        native.FamilyReplay("7.4", 100, 4096, 0, 0, "fam", None, schemas)
    with pytest.raises(ValueError):
        native.FamilyReplay("6.0", 100, 4096, 0, 0, "fam", None, SCHEMAS)


# -- Replayer -------------------------------------------------------------------------


def _rows_of(batch: pa.RecordBatch) -> list[Row]:
    return batch.to_pylist()


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("spill", [False, True])
def test_replayer_matches_the_python_model(profile: str, spill: bool) -> None:
    rows = hand_rows() + [
        {**r, "seq": r["seq"] + 1000, "ts_ms": r["ts_ms"] + 10**6}
        for r in generated_rows(1500, 2, 11)
    ]
    py = Replayer(profile, spill_closed_records=spill)
    rs = native.Replayer(profile, spill_closed_records=spill)
    py_history: dict[str, list[Row]] = {}
    rs_history: dict[str, list[Row]] = {}
    for i, r in enumerate(rows):
        expected = py.apply(r["seq"], r["ts_ms"], r["argv"], r["db"], r["client"])
        got = rs.apply(r["seq"], r["ts_ms"], r["argv"], r["db"], r["client"])
        assert got == (expected.kind, expected.error), r
        if i % 50 == 0:
            py.client_activity(r["ts_ms"], "c9")
            rs.client_activity(r["ts_ms"], "c9")
            for table, cols in py.drain_tables().items():
                py_history.setdefault(table, []).extend(cols.rows())
            for table, batch in rs.drain_tables().items():
                rs_history.setdefault(table, []).extend(_rows_of(batch))
    py.settle()
    rs.settle()
    for table, cols in py.drain_tables().items():
        py_history.setdefault(table, []).extend(cols.rows())
    for table, batch in rs.drain_tables().items():
        rs_history.setdefault(table, []).extend(_rows_of(batch))
    assert py_history.keys() == rs_history.keys()
    for table in py_history:
        assert canon(rs_history[table]) == canon(py_history[table]), table
    c = py.counters
    assert rs.counters() == {
        "applied": c.applied,
        "ignored": c.ignored,
        "failed": c.failed,
        "errors": c.errors,
        "commands": c.commands,
    }
    assert rs.notes() == py.notes
    expected_snap = snapshot_columns(py, AS_OF_MS, AS_OF_SEQ)
    snap = rs.snapshot(AS_OF_MS, AS_OF_SEQ)
    assert list(snap) == list(expected_snap)
    for table, cols in expected_snap.items():
        assert snap[table].schema.names == list(cols.names), table
        # same rows in the same order (the Python order is not arbitrary here)
        assert _rows_of(snap[table]) == cols.rows(), table
    assert len(expected_snap["pel"]) > 0
    py.restart_open_records()
    rs.restart_open_records()
    again = snapshot_columns(py, AS_OF_MS, AS_OF_SEQ)
    for table, batch in rs.snapshot(AS_OF_MS, AS_OF_SEQ).items():
        assert _rows_of(batch) == again[table].rows(), table


def test_replayer_follows_units_unless_told() -> None:
    """``unit_known=False`` (default) follows MULTI/EXEC as the Python ``unit=...``."""
    steps = [
        ("a", "XGROUP CREATE s g $ MKSTREAM"),
        ("b", "XREADGROUP GROUP g c BLOCK 0 STREAMS s >"),
        ("m", "MULTI"),
        ("m", "XADD s 1-0 f v"),
        ("m", "XADD s 2-0 f v"),
        ("m", "EXEC"),
    ]
    for known in (False, True):
        py = Replayer("7.4")
        rs = native.Replayer("7.4")
        for i, (client, cmd) in enumerate(steps):
            unit = 3 if known and 3 <= i <= 4 else None
            py.apply(i + 1, 100 + i, cmd.split(), 0, client, *((unit,) if known else ()))
            rs.apply(i + 1, 100 + i, cmd.split(), 0, client, unit=unit, unit_known=known)
        py.settle()
        rs.settle()
        assert rs.snapshot(500, 9)["pel"].to_pylist() == snapshot_columns(py, 500, 9)["pel"].rows()


def test_replayer_tables_are_typed_as_the_job() -> None:
    rs = native.Replayer("7.4")
    for i, cmd in enumerate(
        ["XGROUP CREATE s g $ MKSTREAM", "XADD s 1-0 f v", "XREADGROUP GROUP g c STREAMS s >"]
    ):
        rs.apply(i + 1, 100 + i, cmd.split())
    history = rs.drain_tables()
    assert history["ownership_changes"].schema.names == list(CHANGE_COLUMNS)
    assert history["pel_history"].schema.names == list(VERSION_COLUMNS)
    types = {f.name: f.type for s in SCHEMAS.values() for f in s}
    for batch in [*history.values(), *rs.snapshot(1000, 9).values()]:
        for field in batch.schema:
            assert field.type == types[field.name], field


def test_replayer_refuses_an_unknown_profile() -> None:
    with pytest.raises(ValueError):
        native.Replayer("6.2")


def test_large_and_narrow_input_types_read_the_same() -> None:
    """Input columns of other widths (large strings and lists, int32 seq) read as the
    usual ones."""
    settings = Settings(profile="7.4")
    batches = batches_of(with_units(hand_rows()))
    wide = pa.schema(
        [
            pa.field(f.name, pa.int32())
            if f.name == "seq"
            else pa.field(f.name, pa.large_list(pa.large_string()))
            if f.name == "argv"
            else pa.field(f.name, pa.large_string())
            if f.name == "client"
            else f
            for f in INPUT_SCHEMA
        ]
    )
    cast = pa.Table.from_batches(batches).cast(wide).to_batches(max_chunksize=7)
    assert_same_tables(native_replay(settings, cast), native_replay(settings, batches))


def test_a_row_without_seq_is_refused() -> None:
    rows = hand_rows()[:3]
    batch = batches_of(rows)[0]
    i = batch.schema.get_field_index("seq")
    bad = batch.set_column(i, "seq", pa.array([1, None, 3], pa.int64()))
    with pytest.raises(ValueError, match="has no seq"):
        list(native_outputs(Settings(profile="7.4"), [bad]))


def _with_argv_values(batch: pa.RecordBatch, offsets: list[int], data: bytes) -> pa.RecordBatch:
    """``batch`` with its argv strings replaced, unchecked, by ``data`` cut at
    ``offsets`` (one list per row, as before): pyarrow builds it without validating."""
    argv = batch.column("argv")
    strings = pa.Array.from_buffers(
        pa.string(),
        len(offsets) - 1,
        [None, pa.py_buffer(pa.array(offsets, pa.int32()).buffers()[1]), pa.py_buffer(data)],
    )
    lists = pa.ListArray.from_arrays(argv.offsets, strings)
    return batch.set_column(batch.schema.get_field_index("argv"), "argv", lists)


def _argv_bytes(batch: pa.RecordBatch) -> tuple[list[int], bytearray]:
    values = batch.column("argv").flatten().to_pylist()
    offsets, data = [0], bytearray()
    for v in values:
        data += v.encode()
        offsets.append(len(data))
    return offsets, data


def test_invalid_input_arrays_are_errors_not_reads() -> None:
    """The input is checked as Arrow's ``validate_full`` checks it before anything
    reads it: invalid UTF-8, a character cut by an offset or offsets that fall are a
    ValueError naming the column; the same bytes intact replay as the original batch.
    (Offsets beyond the data pyarrow itself refuses to build.)"""
    settings = Settings(profile="7.4")
    batch = batches_of(hand_rows()[:5])[0]
    offsets, data = _argv_bytes(batch)
    same = _with_argv_values(batch, offsets, bytes(data))
    assert_same_tables(native_replay(settings, [same]), native_replay(settings, [batch]))
    broken = bytearray(data)
    broken[offsets[1]] = 0xFF  # the first byte of the second string
    with pytest.raises(ValueError, match="argv"):
        list(native_outputs(settings, [_with_argv_values(batch, offsets, bytes(broken))]))
    # a two-byte character cut between two strings
    cut = bytearray(data)
    cut[offsets[1] - 1 : offsets[1] + 1] = "é".encode()
    with pytest.raises(ValueError, match="argv"):
        list(native_outputs(settings, [_with_argv_values(batch, offsets, bytes(cut))]))
    falling = list(offsets)
    falling[2], falling[3] = falling[3], falling[2]
    with pytest.raises(ValueError, match="argv"):
        list(native_outputs(settings, [_with_argv_values(batch, falling, bytes(data))]))


def test_the_router_and_the_digest_check_their_input_as_the_replay_does() -> None:
    """``Router.route`` and ``spark_digest`` take a batch as ``FamilyReplay.feed`` does:
    unchecked by the import, then checked (``check_batch``) over its own rows before
    anything reads it. Invalid UTF-8 in argv is a ValueError naming the column; the same
    bytes intact route as the original batch; a slice of a larger batch routes as the
    same rows copied apart (the check and the reads follow its offsets)."""
    settings = Settings(profile="7.4")
    batch = batches_of(hand_rows()[:5])[0]
    offsets, data = _argv_bytes(batch)
    router = native.Router(settings.model_profile, {})
    same = _with_argv_values(batch, offsets, bytes(data))
    assert router.route(same).to_pylist() == router.route(batch).to_pylist()
    broken = bytearray(data)
    broken[offsets[1]] = 0xFF
    bad = _with_argv_values(batch, offsets, bytes(broken))
    with pytest.raises(ValueError, match="argv"):
        router.route(bad)
    with pytest.raises(ValueError, match="argv"):
        native.spark_digest(bad.select(["seq", "ts_ms", "argv", "db"]))
    rows = hand_rows()
    whole = batches_of(rows, size=len(rows))[0]
    for part in (whole.slice(0, 7), whole.slice(7, 6), whole.slice(13)):
        apart = pa.RecordBatch.from_pylist(part.to_pylist(), schema=part.schema)
        assert router.route(part).to_pylist() == router.route(apart).to_pylist()


def test_invalid_bytes_under_a_null_are_refused_as_arrow_refuses_them() -> None:
    """arrow-rs's full check reads the bytes of null slots too (pyarrow's does not), and
    the core keeps its verdict: such a column was refused before the tight check, and
    still is."""
    settings = Settings(profile="7.4")
    batch = batches_of(hand_rows()[:3])[0]
    client = pa.Array.from_buffers(
        pa.string(),
        3,
        [
            pa.py_buffer(bytes([0b101])),  # rows 0 and 2 valid, row 1 null
            pa.py_buffer(pa.array([0, 1, 3, 4], pa.int32()).buffers()[1]),
            pa.py_buffer(b"a\xff\xfeb"),
        ],
    )
    odd = batch.set_column(batch.schema.get_field_index("client"), "client", client)
    with pytest.raises(ValueError, match="client"):
        list(native_outputs(settings, [odd]))


def test_a_sliced_batch_reads_its_own_rows() -> None:
    """Offsets of a slice start past zero: the check and the reads follow them."""
    settings = Settings(profile="7.4")
    rows = hand_rows()
    whole = batches_of(rows, size=len(rows))[0]
    parts = [whole.slice(0, 7), whole.slice(7, 6), whole.slice(13)]
    assert_same_tables(native_replay(settings, parts), native_replay(settings, [whole]))
