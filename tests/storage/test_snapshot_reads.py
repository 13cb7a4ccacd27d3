"""``storage.read_snapshot``: a table's rows at a version, its files listed from the local
log instead of by delta-spark's snapshot jobs, always the rows ``read_table`` gives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pelengine import storage
from pelengine.storage.choice import EMBEDDED, storage_mode
from pelengine.storage.deltalog import log_dir

pytestmark = pytest.mark.spark


def _rows(df: DataFrame) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in df.collect())


def _plan(df: DataFrame) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())  # type: ignore[attr-defined]


def _frame(spark: SparkSession, start: int, n: int) -> DataFrame:
    return spark.range(start, start + n, numPartitions=2).select(
        F.col("id"), (F.col("id") % 2 == 0).alias("even"), F.concat(F.lit("v"), "id").alias("v")
    )


def test_read_snapshot_gives_every_versions_rows(spark: SparkSession, tmp_path: Path) -> None:
    """Appends, an overwrite and a partitioned layout, in a path with a space, ``%`` and a
    non-ASCII character: at every version the rows ``read_table`` gives; on delta-spark read
    as plain Parquet files (no Delta file index in the plan)."""
    path = str(tmp_path / "a table 100% é")
    storage.write_table(_frame(spark, 0, 5), path, "overwrite", partition_by=("even",))
    storage.write_table(_frame(spark, 5, 4), path, "append")
    storage.write_table(_frame(spark, 20, 3), path, "overwrite", partition_by=("even",))
    storage.write_table(_frame(spark, 30, 2), path, "append")
    for version in range(4):
        got = storage.read_snapshot(spark, path, version)
        assert got.columns == ["id", "even", "v"]
        assert _rows(got) == _rows(storage.read_table(spark, path, version)), version
        if storage_mode(spark) != EMBEDDED:
            assert "DeltaFileIndex" not in _plan(got), _plan(got)


# delta-spark only (deselected on the embedded store, which writes no deletion vectors;
# its reads of them: tests/storage/test_storage.py)
@pytest.mark.delta_spark
def test_read_snapshot_reads_files_with_deletion_vectors_through_delta(
    spark: SparkSession, tmp_path: Path
) -> None:
    """After a DELETE with deletion vectors on: the rows the vectors hide stay hidden."""
    path = str(tmp_path / "dv")
    storage.write_table(_frame(spark, 0, 40), path, "overwrite", deletion_vectors=True)
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 0").collect()
    version = storage.table_version(spark, path)
    assert version == 1
    got = storage.read_snapshot(spark, path, version)
    assert _rows(got) == _rows(storage.read_table(spark, path, version))
    assert len(_rows(got)) == 32
    assert "DeltaFileIndex" in _plan(got)  # the files with a vector went through Delta


# delta-spark only (deselected on the embedded store, where read_snapshot is read_table)
@pytest.mark.delta_spark
def test_read_snapshot_falls_back_to_delta_when_the_log_lost_commits(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A commit file gone (log retention, after a checkpoint): read through Delta, same rows."""
    path = str(tmp_path / "t")
    storage.write_table(_frame(spark, 0, 3), path, "append")
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2')"
    ).collect()
    for i in (1, 2):
        storage.write_table(_frame(spark, i * 10, 3), path, "append")
    version = storage.table_version(spark, path)
    assert version == 3
    assert os.path.exists(os.path.join(log_dir(path), f"{2:020d}.checkpoint.parquet"))
    os.remove(os.path.join(log_dir(path), f"{0:020d}.json"))
    got = storage.read_snapshot(spark, path, version)
    want = [(n, n % 2 == 0, f"v{n}") for i in range(3) for n in range(i * 10, i * 10 + 3)]
    assert _rows(got) == sorted(want)
    assert "DeltaFileIndex" in _plan(got)
