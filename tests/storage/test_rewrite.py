"""The embedded writer's ``maxRecordsPerFile`` and ``sessionless.rewrite_arrow`` (a commit
that removes some data files and adds others), read back through delta-rs itself, not
through our reader. No Spark session."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pelengine.storage import sessionless
from pelengine.storage.embedded import DeltaStorageError

SCHEMA = StructType([StructField("n", LongType()), StructField("part", StringType())])


def _rows(ns: range, part: str) -> pa.Table:
    return pa.table(
        {"n": pa.array(list(ns), pa.int64()), "part": pa.array([part] * len(ns), pa.string())}
    )


def _files(path: Path) -> dict[str, list[int]]:
    """Each data file of the current snapshot as delta-rs lists it: its rows' ``n``."""
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
    return {
        file: sorted(pq.read_table(path / file).column("n").to_pylist())
        for file in actions.column("path").to_pylist()
    }


def test_max_records_per_file_splits_each_partition_into_files(tmp_path: Path) -> None:
    rows = pa.concat_tables([_rows(range(10), "a"), _rows(range(100, 103), "b")])
    options = {"partitionBy": json.dumps(["part"]), "maxRecordsPerFile": "4"}
    # as batches that straddle the limit
    sessionless.write_arrow(
        pa.Table.from_batches(rows.to_batches(max_chunksize=3)),
        str(tmp_path / "t"),
        SCHEMA,
        "overwrite",
        options,
    )
    files = _files(tmp_path / "t")
    assert sorted(files.values()) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9], [100, 101, 102]]
    assert all(("part=b" in f) == (v[0] >= 100) for f, v in files.items())
    stats = DeltaTable(str(tmp_path / "t")).get_add_actions(flatten=True)
    assert sorted(pa.table(stats).column("num_records").to_pylist()) == [2, 3, 4, 4]


def test_rewrite_removes_the_files_it_names_and_adds_rows_in_one_commit(tmp_path: Path) -> None:
    path = tmp_path / "t"
    options = {"partitionBy": json.dumps(["part"]), "maxRecordsPerFile": "4"}
    rows = pa.concat_tables([_rows(range(10), "a"), _rows(range(100, 103), "b")])
    sessionless.write_arrow(rows, str(path), SCHEMA, "overwrite", options)
    files = _files(path)
    second = next(f for f, v in files.items() if v == [4, 5, 6, 7])
    # the file holding 4..7 goes; its rows but 5 come back, with 50 and 51 new
    kept = _rows(range(4, 8), "a").filter(pa.array([True, False, True, True]))
    sessionless.rewrite_arrow(
        pa.concat_tables([kept, _rows(range(50, 52), "b")]), str(path), SCHEMA, [second], options
    )
    table = DeltaTable(str(path))
    assert table.version() == 1
    after = _files(path)
    assert second not in after
    others = {f: v for f, v in files.items() if f != second}
    assert {f: after[f] for f in others} == others  # no other file was rewritten
    everything = sorted(n for v in after.values() for n in v)
    assert everything == [0, 1, 2, 3, 4, 6, 7, 8, 9, 50, 51, 100, 101, 102]
    history = table.history(1)[0]
    assert history["operation"] == "WRITE"

    # a file the table no longer has: refused, nothing committed
    with pytest.raises(DeltaStorageError, match="not in the table"):
        sessionless.rewrite_arrow(_rows(range(1), "a"), str(path), SCHEMA, [second], options)
    assert DeltaTable(str(path)).version() == 1
    # nothing to remove or add: no commit
    sessionless.rewrite_arrow(_rows(range(0), "a"), str(path), SCHEMA, [], options)
    assert DeltaTable(str(path)).version() == 1
