"""The replay UDF reads its batches column by column and writes the model's columns as
Arrow batches: the rows are the model's own (no Spark session needed here)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import StructField, StructType

from pelengine.engine import udf
from pelengine.engine.python import arrow
from pelengine.model import Replayer, snapshot_tables
from pelengine.model.delivery import INCARNATION_COLUMNS, SEGMENT_COLUMNS
from pelengine.model.snapshot import DELIVERY_COLUMNS
from pelengine.schemas import REPLAY_INPUT_SCHEMA, REPLAY_PACKED_SCHEMA, REPLAY_TABLE_SCHEMAS
from pelengine.settings import Settings
from pelengine.synth import generate_events

AS_OF_MS, AS_OF_SEQ = 1_800_000_000_000, 10**9
INPUT = udf._arrow_schema(REPLAY_INPUT_SCHEMA)


def _events() -> list[dict[str, Any]]:
    rows, seen = [], set()
    for row in generate_events(2500, 3, seed=5):
        if row["argv"] and row["seq"] not in seen:
            seen.add(row["seq"])
            rows.append(row | {"db": 0})
    rows.append(
        {"seq": 10**6, "ts_ms": rows[-1]["ts_ms"] + 1, "argv": ["FLUSHDB"], "db": 0, "client": None}
    )
    return rows


def _batches(rows: list[dict[str, Any]], size: int, unit: str | None = None) -> list[Any]:
    cols = {
        "seq": [r["seq"] for r in rows],
        "ts_ms": [r["ts_ms"] for r in rows],
        "argv": [r["argv"] for r in rows],
        "db": [r["db"] for r in rows],
        "client": [r["client"] for r in rows],
        "fanout": [r["argv"][0] == "FLUSHDB" for r in rows],
        "family": ["f"] * len(rows),
        "marker": [False] * len(rows),
        "exec_unit": [None] * len(rows),
        "unit": [unit] * len(rows),
        "lead": [unit in (None, "0")] * len(rows),
        "silent": [False] * len(rows),
    }
    return pa.Table.from_pydict(cols, schema=INPUT).to_batches(max_chunksize=size)


def _expected(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """What one model gives for the rows, as the UDF's tables (without ``table``)."""
    r = Replayer("7.0", spill_closed_records=True)
    as_of = {"as_of_ms": AS_OF_MS, "as_of_seq": AS_OF_SEQ}
    out: dict[str, list[dict[str, Any]]] = {}
    outcomes = []
    for row in rows:
        outcome = r.apply(row["seq"], row["ts_ms"], row["argv"], row["db"], row["client"], None)
        if row["argv"][0] == "FLUSHDB":
            r.counters.commands["FLUSHDB"] -= 1
            outcomes.append(
                {
                    "seq": row["seq"],
                    "stat_command": "FLUSHDB",
                    "stat_kind": outcome.kind,
                    "stat_error": outcome.error,
                    "stat_count": 1,
                }
            )
    r.settle()
    out["ownership_changes"] = [c | as_of for c in r.drain_changes()]
    out["pel_history"] = [v | as_of for v in r.drain_pel_history()]
    out["delivery_segments"] = r.drain_delivery_segments()
    out["group_incarnations"] = r.drain_group_incarnations()
    out["outcome"] = outcomes
    for table, table_rows in snapshot_tables(r, AS_OF_MS, AS_OF_SEQ).items():
        out.setdefault(table, []).extend(table_rows)
    return {t: v for t, v in out.items() if v}


def _got(batches: list[pa.RecordBatch]) -> dict[str, list[dict[str, Any]]]:
    """The packed output, unpacked: each table's rows in its own columns."""
    packed = udf._arrow_schema(REPLAY_PACKED_SCHEMA)
    got: dict[str, list[dict[str, Any]]] = {}
    for batch in batches:
        assert batch.schema == packed
        for table, rows, payload in zip(*(c.to_pylist() for c in batch.columns), strict=True):
            schema = udf._arrow_schema(REPLAY_TABLE_SCHEMAS[table])
            inner = list(udf.unpack_payloads(pa.array([payload], pa.binary()), schema))
            assert all(b.schema == schema for b in inner)
            assert all(0 < b.num_rows <= arrow.OUTPUT_BATCH_ROWS for b in inner)
            assert sum(b.num_rows for b in inner) == rows
            for b in inner:
                got.setdefault(table, []).extend(b.to_pylist())
    return got


def _same(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> None:
    """Every expected row, once; the columns a table does not have are null."""
    names = set(expected[0])
    for row in got:
        assert {k for k, v in row.items() if v is not None} <= names

    def key(row: dict[str, Any]) -> str:
        return repr(sorted(row.items()))

    assert sorted(map(key, expected)) == sorted(
        key({k: v for k, v in row.items() if k in names}) for row in got
    )


@pytest.mark.parametrize(("input_rows", "output_rows"), [(10_000, 8192), (97, 13)])
def test_replay_writes_the_models_rows(
    monkeypatch: pytest.MonkeyPatch, input_rows: int, output_rows: int
) -> None:
    monkeypatch.setattr(arrow, "OUTPUT_BATCH_ROWS", output_rows)
    rows = _events()
    replay = udf.one_family(udf.make_replay_function(Settings(profile="7.0"), AS_OF_MS, AS_OF_SEQ))
    got = _got(list(replay((pa.scalar(0), pa.scalar("f")), iter(_batches(rows, input_rows)))))
    expected = _expected(rows)
    stats = got.pop("stats")
    assert {s["stat_kind"] for s in stats} >= {"seen", "applied"}
    assert set(got) == set(expected)
    assert len(got["ownership_changes"]) > 1000
    for table, table_rows in expected.items():
        _same(table_rows, got[table])


def test_a_unit_of_a_split_family_writes_its_groups_rows_only() -> None:
    rows = _events()
    expected = _expected(rows)
    groups = sorted({r["group"] for r in expected["group_incarnations"]})
    assert len(groups) > 1
    mine = groups[:1]
    replay = udf.one_family(
        udf.make_replay_function(
            Settings(profile="7.0"), AS_OF_MS, AS_OF_SEQ, unit_groups={(0, "f", "1"): mine}
        )
    )
    key = (pa.scalar(0), pa.scalar("f"), pa.scalar("1"))
    got = _got(list(replay(key, iter(_batches(rows, 500, unit="1")))))
    assert "streams" not in got  # not the lead unit
    for table, table_rows in expected.items():
        if table in ("streams", "outcome"):
            continue
        own = [r for r in table_rows if r["group"] in mine]
        if own:
            _same(own, got[table])
        else:
            assert table not in got


def test_the_models_columns_are_the_replay_tables() -> None:
    """What the model appends is each replay table's columns, in order: delivery_counts
    (with ``changed_*``), the delivery segments and the group incarnations."""
    names = {t: tuple(f.name for f in s.fields) for t, s in REPLAY_TABLE_SCHEMAS.items()}
    assert names["delivery_counts"] == DELIVERY_COLUMNS
    assert names["delivery_segments"] == SEGMENT_COLUMNS
    assert names["group_incarnations"] == INCARNATION_COLUMNS
    assert SEGMENT_COLUMNS[-3:] == ("segment_n", "changed_seq", "changed_ms")
    assert INCARNATION_COLUMNS[-2:] == ("moved_seq", "moved_ms")


def test_input_columns_are_read_without_rows() -> None:
    argv = pa.array([["a", "b"], [], ["c", None], ["d"]], pa.list_(pa.string()))
    for part in (argv, argv.slice(1, 2), argv.slice(3, 1), argv.slice(0, 0)):
        assert arrow.values(part) == part.to_pylist()
    with_null = pa.array([["a"], None], pa.list_(pa.string()))
    assert arrow.values(with_null) == [["a"], None]
    assert arrow.values(pa.array([1, None, 3], pa.int64())) == [1, None, 3]
    ints = arrow.values(pa.array([2**62, -1], pa.int64()).slice(1))
    assert ints == [-1] and type(ints[0]) is int
    assert arrow.values(pa.array([True, False])) == [True, False]
    assert arrow.values(pa.array([None, None], pa.binary())) == [None, None]
    batch = pa.RecordBatch.from_pydict({"seq": [1, 2]})
    assert arrow.column(batch, "marker", False) == [False, False]


def test_a_worker_freezes_its_heap_once() -> None:
    code = (
        "import gc; from pelengine.engine.python import worker_gc as w; w.tune_worker_gc(); "
        "n = gc.get_freeze_count(); w.tune_worker_gc(); "
        "assert n > 0 and gc.get_freeze_count() == n, n; "
        "assert gc.get_threshold() == w.WORKER_GC_THRESHOLDS"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_key_runs_splits_a_sorted_batch_where_any_key_changes() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "db": pa.array([0, 0, 0, 1, 1, 1], pa.int32()),
            "family": ["a", "a", "b", "b", "b", "b"],
            "unit": [None, None, None, None, "x", "x"],
            "seq": [1, 2, 3, 4, 5, 6],
        }
    )
    runs = [(k, b.column("seq").to_pylist()) for k, b in udf.key_runs(batch, ("db", "family"))]
    assert runs == [((0, "a"), [1, 2]), ((0, "b"), [3]), ((1, "b"), [4, 5, 6])]
    keys = ("db", "family", "unit")
    runs = [(k, b.column("seq").to_pylist()) for k, b in udf.key_runs(batch, keys)]
    assert runs == [
        ((0, "a", None), [1, 2]),
        ((0, "b", None), [3]),
        ((1, "b", None), [4]),
        ((1, "b", "x"), [5, 6]),
    ]
    assert list(udf.key_runs(batch.slice(0, 0), keys)) == []
    assert [k for k, _ in udf.key_runs(batch.slice(5, 1), keys)] == [(1, "b", "x")]


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("size", [7, 1000, 100_000])
def test_a_partition_replays_its_families_one_after_another(engine: str, size: int) -> None:
    """The partition function (what ``mapInArrow`` runs) over the rows of several families
    and units, sorted by key and seq and cut into batches that end inside families and
    hold several: the rows of each table are those of each family replayed alone, its
    saved model included (keep state)."""
    rows = [r for r in _events() if r["argv"][0] != "FLUSHDB"][:600]
    groups = sorted({r["group"] for r in _expected(rows)["group_incarnations"]})
    units = {(1, "u", "0"): groups[:1], (1, "u", "1"): groups[1:]}
    keys = [(0, "a", None), (0, "b", None), (1, "a", None), (1, "u", "0"), (1, "u", "1")]
    settings = Settings(profile="7.0", incremental=True)

    def family_batches(key: tuple[Any, ...], count: int) -> list[pa.RecordBatch]:
        db, family, unit = key
        part = [r | {"db": db} for r in rows[:count]]
        return [
            b.set_column(b.schema.get_field_index("family"), "family", pa.array([family] * len(b)))
            for b in _batches(part, 10**6, unit=unit)
        ]

    counts = [600, 1, 250, 600, 600]
    expected: dict[str, list[str]] = {}
    for key, count in zip(keys, counts, strict=True):
        one = udf.one_family(
            udf.make_replay_function(
                settings, AS_OF_MS, AS_OF_SEQ, unit_groups=units, engine=engine
            )
        )
        scalars = (pa.scalar(key[0], pa.int32()), pa.scalar(key[1]), pa.scalar(key[2]))
        for table, table_rows in _got(list(one(scalars, iter(family_batches(key, count))))).items():
            expected.setdefault(table, []).extend(repr(sorted(r.items())) for r in table_rows)

    whole = pa.Table.from_batches(
        [b for key, count in zip(keys, counts, strict=True) for b in family_batches(key, count)]
    )
    partition = udf.make_replay_function(
        settings, AS_OF_MS, AS_OF_SEQ, unit_groups=units, engine=engine
    )
    out = list(partition(iter(whole.to_batches(max_chunksize=size))))
    got = {t: sorted(repr(sorted(r.items())) for r in v) for t, v in _got(out).items()}
    assert got == {t: sorted(v) for t, v in expected.items()}
    assert len(got["state"]) == len(keys)
    assert len(out) == 1  # small outputs: one packed batch for the whole partition


def test_unwrap_state_gives_a_nullable_column_whatever_the_transport_said() -> None:
    """Spark hands ``mapInArrow`` the transport list as a non-nullable field (an empty list on
    every event row): the struct it becomes is null on those rows, so its field is nullable
    (the native core checks the declared nullability)."""
    from pelengine.pipeline.replay import STATE_TRANSPORT_TYPE

    transport = udf._arrow_schema(StructType([StructField("state", STATE_TRANSPORT_TYPE, False)]))
    batch = pa.RecordBatch.from_pydict({"state": [[], []]}, schema=transport)
    assert not batch.schema.field("state").nullable
    out = udf.unwrap_state(batch)
    assert out.schema.field("state").nullable
    assert out.column("state").null_count == 2
    out.validate(full=True)
