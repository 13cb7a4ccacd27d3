"""The local runner's validation (``local.validate``) against the Spark stage it follows
(``pipeline.conform``): the same tables of odd events give the same valid rows, the same
rejected rows with the same reasons, the same facts and the same refusals."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from pelengine.local.validate import conform_table
from pelengine.pipeline.conform import (
    InputContractError,
    check_event_types,
    conform_events,
    retag_shared,
    split_tagged,
    tag_rejected,
    tagged_facts,
)
from pelengine.schemas import EVENTS_SCHEMA
from tests.frames import frozen

pytestmark = pytest.mark.spark

TEXT = pa.list_(pa.string())


def _spark(spark: Any, table: pa.Table) -> tuple[list[Any], list[Any], dict, dict]:
    tagged = tag_rejected(conform_events(spark.createDataFrame(table)), shared=False)
    tagged = retag_shared(tagged) or tagged
    valid, rejected = split_tagged(tagged)
    facts, by_reason = tagged_facts(tagged)
    valid = valid.select(*(f.name for f in EVENTS_SCHEMA.fields))
    return _rows(valid.toArrow()), _rows(rejected.toArrow()), facts, by_reason


def _rows(table: pa.Table) -> list[Any]:
    return sorted((frozen(tuple(r.items())) for r in table.to_pylist()), key=repr)


def _same(spark: Any, table: pa.Table) -> dict[str, int]:
    want_valid, want_rejected, want_facts, want_reasons = _spark(spark, table)
    got = conform_table(table)
    assert _rows(got.valid) == want_valid
    assert got.rejected.column_names == [*_spark_columns(spark, table), "reason"]
    assert _rows(got.rejected) == want_rejected
    assert got.facts == want_facts
    assert got.rejected_by_reason == want_reasons
    return got.rejected_by_reason


def _spark_columns(spark: Any, table: pa.Table) -> list[str]:
    return [c for c in conform_events(spark.createDataFrame(table)).columns if c != "_cast_reason"]


def test_rows_that_are_not_commands_and_shared_seqs(spark: Any) -> None:
    rows = [
        (1, 10, ["XADD", "s", "*", "f", "v"], 0, "a", "t", "n1"),
        (2, 11, ["SELECT", "3"], None, "a", "t", None),
        (3, None, ["PING"], 0, "a", "t", None),
        (None, 12, ["PING"], 0, "a", "t", None),
        (4, 13, None, 0, "a", "t", None),
        (5, 14, [], 0, "a", "t", None),
        (6, 15, [None, "x"], 0, "a", "t", None),
        (7, 16, ["", "x"], 0, "a", "t", None),
        (8, 17, ["XACK", None, "g"], 0, "a", "t", None),
        (9, 18, ["MULTI"], 0, "b", "t", None),
        (10, 19, ["XADD", "lx", "*", "f", "v"], 0, "lua", "t", None),
        # equal rows sharing a seq: one kept (the source is not compared)
        (11, 20, ["XADD", "d", "*", "f", "v"], 0, "a", "t", None),
        (11, 20, ["XADD", "d", "*", "f", "v"], 0, "a", "u", None),
        (11, 20, ["XADD", "d", "*", "f", "v"], 0, "a", "t", None),
        # different rows sharing a seq: all rejected, an earlier reason first
        (12, 21, ["XADD", "e", "*", "f", "v"], 0, "a", "t", None),
        (12, 21, ["XADD", "e", "*", "f", "w"], 0, "a", "t", None),
        (13, 22, ["XADD", "e", "*", "f", "v"], 0, "a", "t", None),
        (13, 22, None, 0, "a", "t", None),
        (14, 23, ["SELECT", "5"], None, None, "t", None),
        (14, 23, ["SELECT", "5"], 1, None, "t", None),
    ]
    names = ["seq", "ts_ms", "argv", "db", "client", "source", "note"]
    table = pa.table(
        {n: [r[i] for r in rows] for i, n in enumerate(names)},
        schema=pa.schema(
            [
                ("seq", pa.int64()),
                ("ts_ms", pa.int64()),
                ("argv", TEXT),
                ("db", pa.int32()),
                ("client", pa.string()),
                ("source", pa.string()),
                ("note", pa.string()),
            ]
        ),
    )
    reasons = _same(spark, table)
    for reason in (
        "null seq",
        "null ts_ms",
        "null argv",
        "empty argv",
        "no command name",
        "null argument in argv",
        "duplicate row (same seq)",
        "conflicting rows share seq (2)",
    ):
        assert reason in reasons, reason


def test_numbers_given_as_text_fractions_and_wider_types(spark: Any) -> None:
    seqs = ["1", " 2 ", "+3", "-4", "5.0", "6.5", "1e3", "abc", "", "99999999999999999999", None]
    seqs += ["\t7\n", "0x10", "٣"]
    n = len(seqs)
    table = pa.table(
        {
            "seq": pa.array(seqs, pa.string()),
            "ts_ms": pa.array([Decimal(f"{100 + i}.{5 if i % 3 == 0 else 0}") for i in range(n)]),
            "argv": pa.array([["PING"]] * n, TEXT),
            "db": pa.array([0, 2**31, -(2**31), 3, None, 1, 1, 1, 1, 1, 1, 1, 1, 1], pa.int64()),
        }
    )
    reasons = _same(spark, table)
    assert any(r.startswith("seq is not a BIGINT") for r in reasons)
    assert "db is not an INT" in reasons and "ts_ms is not a BIGINT" in reasons


def test_doubles_and_floats(spark: Any) -> None:
    values = [1.0, 2.5, float("nan"), 1e20, -3.0, 1e-5, 123456789.5, float("inf"), 0.001, None]
    n = len(values)
    table = pa.table(
        {
            "seq": pa.array(range(1, n + 1), pa.int32()),
            "ts_ms": pa.array(values, pa.float64()),
            "argv": pa.array([["PING"]] * n, TEXT),
            "db": pa.array([1.0, 2.0, 2.5, None, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0], pa.float32()),
            "client": pa.array(range(n), pa.int64()),
        }
    )
    _same(spark, table)


def test_binary_and_numeric_arguments(spark: Any) -> None:
    argvs = [
        [b"XADD", b"k\xff", b"*", b"f", b"v"],
        [b"XADD", b"a\\xb", b"*", b"f", "é".encode()],
        [b"XADD", "é".encode(), b"*", b"f", b""],
        [b"PING", None],
        [b"X\\Y"],
        None,
    ]
    table = pa.table(
        {
            "seq": pa.array(range(1, len(argvs) + 1), pa.int64()),
            "ts_ms": pa.array([5] * len(argvs), pa.int64()),
            "argv": pa.array(argvs, pa.list_(pa.binary())),
        }
    )
    _same(spark, table)
    numbers = pa.table(
        {
            "seq": pa.array([1, 2], pa.int64()),
            "ts_ms": pa.array([5, 6], pa.int64()),
            "argv": pa.array([[1, 2], [3, None]], pa.list_(pa.int64())),
        }
    )
    _same(spark, numbers)


@pytest.mark.parametrize(
    "field",
    [
        pa.field("argv", pa.string()),
        pa.field("ts_ms", pa.timestamp("us", tz="UTC")),
        pa.field("client", pa.list_(pa.string())),
        pa.field("seq", pa.bool_()),
    ],
    ids=["argv-text", "ts-timestamp", "client-array", "seq-boolean"],
)
def test_wrong_columns_are_refused_in_the_same_sentence(spark: Any, field: pa.Field) -> None:
    columns = {
        "seq": pa.array([1], pa.int64()),
        "ts_ms": pa.array([1], pa.int64()),
        "argv": pa.array([["PING"]], TEXT),
    }
    columns[field.name] = pa.array([None], field.type)
    table = pa.table(columns)
    with pytest.raises(InputContractError) as spark_says:
        check_event_types(spark.createDataFrame(table).schema)
    with pytest.raises(InputContractError) as local_says:
        conform_table(table)
    assert str(local_says.value) == str(spark_says.value)


def test_a_missing_column_is_refused(spark: Any) -> None:
    table = pa.table({"seq": pa.array([1], pa.int64()), "argv": pa.array([["PING"]], TEXT)})
    with pytest.raises(InputContractError, match="lacks required column"):
        conform_table(table)


def test_nonzero_takes_a_column_of_no_chunks() -> None:
    """A table of no rows can have columns of no chunks, on which pyarrow's
    indices_nonzero crashes the interpreter; the local runner's takes them in one chunk."""
    import pyarrow as pa

    from pelengine.local.validate import nonzero

    assert nonzero(pa.chunked_array([], pa.bool_())).to_pylist() == []
    mask = pa.chunked_array([[True, False], [], [False, True]])
    assert nonzero(mask).to_pylist() == [0, 3]
