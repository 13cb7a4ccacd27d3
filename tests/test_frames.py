"""tests/frames.py, the table comparison the night tests use: it must fail where chispa's
row-order-free equality fails (a row more or less, a duplicate, a value, a column's name,
type or place) and pass where it passes (row order, nullability)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.frames import assert_same_rows, frozen, rows_of

pytestmark = pytest.mark.spark

SCHEMA = "k string, n bigint, b binary, a array<string>, m map<string,bigint>"
ROWS: list[tuple[Any, ...]] = [
    ("x", 1, b"\x00\xff", ["p", "q"], {"u": 1, "v": 2}),
    ("y", None, None, [], {}),
    ("y", None, None, [], {}),
]


def test_frozen_values_are_hashable_and_equal_where_equal() -> None:
    assert frozen([1, [2, bytearray(b"z")], {"b": 1, "a": [3]}]) == (
        1,
        (2, b"z"),
        (("a", (3,)), ("b", 1)),
    )
    hash(frozen({"k": [bytearray(b"v")]}))


@pytest.mark.parametrize(
    ("other", "message"),
    [
        (ROWS[:2], "rows differ: 3 against 2"),  # a duplicate missing
        ([*ROWS, ROWS[0]], "rows differ: 3 against 4"),
        ([ROWS[0], ROWS[1], ("y", 2, None, [], {})], "1 only on the left, 1 only on the right"),
        ([("x", 1, b"\x00\xfe", ["p", "q"], {"u": 1, "v": 2}), *ROWS[1:]], "rows differ"),
        ([("x", 1, b"\x00\xff", ["q", "p"], {"u": 1, "v": 2}), *ROWS[1:]], "rows differ"),
        ([("x", 1, b"\x00\xff", ["p", "q"], {"u": 1, "v": 3}), *ROWS[1:]], "rows differ"),
    ],
)
def test_different_rows_fail(spark: SparkSession, other: list[Any], message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        assert_same_rows(spark.createDataFrame(ROWS, SCHEMA), spark.createDataFrame(other, SCHEMA))


def test_row_order_and_nullability_do_not_matter(spark: SparkSession) -> None:
    left = spark.createDataFrame(ROWS, SCHEMA)
    right = spark.createDataFrame(
        list(reversed(ROWS)), SCHEMA.replace("k string", "k string not null")
    )
    assert [f.nullable for f in right.schema] != [f.nullable for f in left.schema]
    rows = assert_same_rows(left, right)
    assert rows == rows_of(left) and sum(rows.values()) == 3


def test_columns_must_match(spark: SparkSession) -> None:
    left = spark.createDataFrame(ROWS, SCHEMA)
    with pytest.raises(AssertionError, match="columns differ"):
        assert_same_rows(left, left.withColumnRenamed("n", "count"))
    with pytest.raises(AssertionError, match="columns differ"):
        assert_same_rows(left, left.withColumn("n", left["n"].cast("int")))
    moved = left.select("n", "k", "b", "a", "m")
    with pytest.raises(AssertionError, match="columns differ"):
        assert_same_rows(left, moved)
    assert assert_same_rows(left, moved, ignore_column_order=True) == rows_of(left)
