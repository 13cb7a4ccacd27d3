"""``storage.replace_rows``, the merge a night writes its history tables and its state
with, on each store (the nights themselves are tested in tests/runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from pelengine import storage

pytestmark = [pytest.mark.spark, pytest.mark.stores]


# with deletion vectors on delta-spark only: the embedded writer writes none
@pytest.mark.parametrize(
    "deletion_vectors", [False, pytest.param(True, marks=pytest.mark.delta_spark)]
)
def test_a_merge_writes_its_rows_in_one_file(
    spark: SparkSession, tmp_path: Path, deletion_vectors: bool
) -> None:
    """``replace_rows`` replaces the rows whose keys its rows have and adds its rows, in one
    commit; on delta-spark a source of a few rows becomes one new file, however many
    partitions its plan had (a night's 39 state rows went out as five files, from ten
    tasks each opening a Parquet writer for the state's 150 columns)."""
    path = str(tmp_path / "t")
    old = [(i, f"old{i}") for i in range(10)]
    storage.write_table(
        spark.createDataFrame(old, "id long, v string").coalesce(1),
        path,
        "overwrite",
        deletion_vectors=deletion_vectors,
    )
    before = set(DeltaTable(path).file_uris())
    new = [(i, f"new{i}") for i in range(5, 45)]
    fresh = spark.createDataFrame(new, "id long, v string").repartition(8)

    assert storage.replace_rows(fresh, path, ("id",)) == {"inserted": 40, "deleted": 5}
    assert sorted(int(p.stem) for p in (Path(path) / "_delta_log").glob("*.json")) == [0, 1]
    got = sorted(tuple(r) for r in storage.read_table(spark, path).collect())
    assert got == sorted(old[:5] + new)
    if storage.storage_mode(spark) != storage.EMBEDDED:
        added = set(DeltaTable(path).file_uris()) - before
        # the inserted rows, and without deletion vectors the kept rows of the file the
        # merge rewrote (the two in one file or two, as Delta's merge joins them)
        assert len(added) <= (1 if deletion_vectors else 2), added
