"""Arrow in and out of the Python model: input columns as Python values (no dict per
row), output rows (``Columns``) as Arrow batches of their table's schema."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import pyarrow as pa

from pelengine.model.calls import Columns

# the most rows one output batch holds
OUTPUT_BATCH_ROWS = 8192


def values(column: pa.Array) -> list[Any]:
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


def column(batch: pa.RecordBatch, name: str, default: Any = None) -> list[Any]:
    """The values of the column ``name`` (``default`` in every row when there is none)."""
    i = batch.schema.get_field_index(name)
    if i < 0:
        return [default] * batch.num_rows
    return values(batch.column(i))


def table_batches(
    table: str,
    cols: Columns,
    schema: pa.Schema,
    known: Collection[str],
    constants: dict[str, Any] | None = None,
) -> Iterator[pa.RecordBatch]:
    """``cols`` as batches of ``table``'s own columns (``schema``, at most
    ``OUTPUT_BATCH_ROWS`` rows each): ``constants`` in every row, null where a column is
    not given. ``known``: every column an output table has (a row with another is a bug)."""
    n = len(cols)
    if not n:
        return
    given = dict(zip(cols.names, cols.lists, strict=True))
    unknown = [name for name in given if name not in known]
    if unknown:
        raise ValueError(f"{table} rows have columns the replay output lacks: {unknown}")
    for start in range(0, n, OUTPUT_BATCH_ROWS):
        stop = min(start + OUTPUT_BATCH_ROWS, n)
        size = stop - start
        whole = size == n
        arrays = []
        for field in schema:
            name = field.name
            data = given.get(name)
            if data is not None:
                arrays.append(pa.array(data if whole else data[start:stop], field.type))
            elif constants is not None and name in constants:
                arrays.append(pa.repeat(pa.scalar(constants[name], field.type), size))
            else:
                arrays.append(pa.nulls(size, field.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
