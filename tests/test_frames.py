"""tests/frames.py, the table comparison the night tests use: it must fail where chispa's
row-order-free equality fails (a row more or less, a duplicate, a value, a column's name,
type or place) and pass where it passes (row order, nullability), on DataFrames and on the
same tables as Arrow."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from tests.frames import Rows, assert_same_rows, frozen, rows_of

pytestmark = pytest.mark.spark

#: each test compares the DataFrames, then the same tables as Arrow
AS: dict[str, Callable[[DataFrame], Rows]] = {
    "dataframes": lambda df: df,
    "arrow": lambda df: df.toArrow(),
}

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
@pytest.mark.parametrize("kind", AS)
def test_different_rows_fail(
    spark: SparkSession, other: list[Any], message: str, kind: str
) -> None:
    left, right = spark.createDataFrame(ROWS, SCHEMA), spark.createDataFrame(other, SCHEMA)
    with pytest.raises(AssertionError, match=message):
        assert_same_rows(AS[kind](left), AS[kind](right))


@pytest.mark.parametrize("kind", AS)
def test_row_order_and_nullability_do_not_matter(spark: SparkSession, kind: str) -> None:
    left = spark.createDataFrame(ROWS, SCHEMA)
    right = spark.createDataFrame(
        list(reversed(ROWS)), SCHEMA.replace("k string", "k string not null")
    )
    assert [f.nullable for f in right.schema] != [f.nullable for f in left.schema]
    rows = assert_same_rows(AS[kind](left), AS[kind](right))
    assert rows == rows_of(left) and sum(rows.values()) == 3


@pytest.mark.parametrize("kind", AS)
def test_columns_must_match(spark: SparkSession, kind: str) -> None:
    left = spark.createDataFrame(ROWS, SCHEMA)
    to = AS[kind]
    with pytest.raises(AssertionError, match="columns differ"):
        assert_same_rows(to(left), to(left.withColumnRenamed("n", "count")))
    with pytest.raises(AssertionError, match="columns differ"):
        assert_same_rows(to(left), to(left.withColumn("n", left["n"].cast("int"))))
    moved = left.select("n", "k", "b", "a", "m")
    with pytest.raises(AssertionError, match="columns differ"):
        assert_same_rows(to(left), to(moved))
    assert assert_same_rows(to(left), to(moved), ignore_column_order=True) == rows_of(left)


def test_arrow_strings_are_strings_whatever_their_layout(spark: SparkSession) -> None:
    """delta-rs reads strings as views: a view or a large string is the string it holds."""
    left = spark.createDataFrame(ROWS, SCHEMA).toArrow()
    for layout in (pa.string_view(), pa.large_string()):
        right = left.set_column(0, "k", left.column("k").cast(layout))
        assert right.schema.field("k").type == layout
        assert assert_same_rows(left, right) == rows_of(left)
        changed = right.set_column(0, "k", pa.array(["x", "y", "z"], layout))
        with pytest.raises(AssertionError, match="rows differ"):
            assert_same_rows(left, changed)
