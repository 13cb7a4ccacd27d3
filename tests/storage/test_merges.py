"""``storage.replace_rows``, the merge a night writes its history tables and its state
with, on each store (the nights themselves are tested in tests/runs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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


def _partition_files(path: str, value: str) -> set[str]:
    return {u for u in DeltaTable(path).file_uris() if f"/status={value}/" in u}


@contextmanager
def _hidden(files: set[str]) -> Iterator[None]:
    """The data ``files`` (URIs) moved aside while the block runs: a merge that reads one
    fails (the log still names them)."""
    paths = [Path(u.removeprefix("file://")) for u in files]
    for p in paths:
        p.rename(p.with_name(p.name + ".hidden"))
    try:
        yield
    finally:
        for p in paths:
            p.with_name(p.name + ".hidden").rename(p)


@pytest.mark.parametrize(
    "deletion_vectors", [False, pytest.param(True, marks=pytest.mark.delta_spark)]
)
def test_a_merge_narrowed_to_a_partition_leaves_the_others_alone(
    spark: SparkSession, tmp_path: Path, deletion_vectors: bool
) -> None:
    """A table written partitioned by ``status`` (as delivery_counts is), on either store;
    ``replace_rows(narrow=(condition, flag))`` with no row flagged joins the condition to
    the match: the merge rewrites only the ``pending`` partition (the files of the closed
    rows stay, and the rows written are the pending partition's, not the table's). One
    flagged row (its replaced row is closed) and the merge meets the whole table: that
    closed row is replaced too."""
    path = str(tmp_path / "dc")
    old = [(i, "acked", f"a{i}") for i in range(1000)] + [
        (i, "pending", f"p{i}") for i in range(1000, 1010)
    ]
    schema = "id long, status string, v string"
    storage.write_table(
        spark.createDataFrame(old, schema).repartition(2),
        path,
        "overwrite",
        deletion_vectors=deletion_vectors,
        partition_by=("status",),
    )
    assert DeltaTable(path).metadata().partition_columns == ["status"]
    assert sorted(tuple(r) for r in storage.read_table(spark, path).collect()) == sorted(old)
    acked_files = _partition_files(path, "acked")
    pending_files = _partition_files(path, "pending")
    assert acked_files and pending_files

    # two pending entries acked, one still pending changed, one new delivery
    night = [
        (1000, "acked", "n1000", False),
        (1001, "acked", "n1001", False),
        (1002, "pending", "n1002", False),
        (2000, "pending", "n2000", False),
    ]

    def merge(rows: list[tuple[int, str, str, bool]]) -> dict[str, int]:
        flagged = spark.createDataFrame(rows, "id long, status string, v string, _closed boolean")
        return storage.replace_rows(
            flagged, path, ("id",), narrow=("t.status = 'pending'", "_closed")
        )

    with _hidden(acked_files):  # the merge must not read them
        done = merge(night)
    assert done == {"inserted": 4, "deleted": 3, "narrowed": 1}
    expected = {r[0]: r for r in old} | {r[0]: r[:3] for r in night}
    got = sorted(tuple(r) for r in storage.read_table(spark, path).collect())
    assert got == sorted(expected.values())
    assert _partition_files(path, "acked") >= acked_files  # none removed, the night's added
    written = storage.commit_rows(spark, path)
    if written is not None:  # the embedded store's and a local path's commits say it
        assert written <= 10 + 4, written  # the pending partition at most, and the new rows

    # an acked entry delivered again: its closed row is replaced, the merge meets it (and
    # would fail without the acked partition's files)
    missing = r"(?i)(not found|no such file|does not exist|FileNotFound)"
    with pytest.raises(Exception, match=missing), _hidden(_partition_files(path, "acked")):
        merge([(6, "pending", "n6", True)])
    again = [(5, "pending", "n5", True), (1003, "acked", "n1003", False)]
    assert merge(again) == {"inserted": 2, "deleted": 2, "narrowed": 0}
    expected |= {r[0]: r[:3] for r in again}
    got = sorted(tuple(r) for r in storage.read_table(spark, path).collect())
    assert got == sorted(expected.values())
    assert [r[0] for r in got].count(5) == 1


def test_a_merge_where_a_boolean_partition_reads_that_partition(
    spark: SparkSession, tmp_path: Path
) -> None:
    """pel_history's night merge: ``where`` names a boolean partition (``is_current``),
    and the merge never reads the other one (its files moved aside, it still succeeds)."""
    path = str(tmp_path / "ph")
    old = [(i, i % 10 == 0) for i in range(200)]
    storage.write_table(
        spark.createDataFrame(old, "id long, is_current boolean").repartition(2),
        path,
        "overwrite",
        partition_by=("is_current",),
    )
    closed = {u for u in DeltaTable(path).file_uris() if "/is_current=false/" in u}
    assert closed
    night = [(10, False), (20, False), (500, True)]  # two versions end, one begins
    with _hidden(closed):
        done = storage.replace_rows(
            spark.createDataFrame(night, "id long, is_current boolean"),
            path,
            ("id",),
            where="t.is_current = true",
        )
    assert done == {"inserted": 3, "deleted": 2}
    expected = {i: c for i, c in old} | dict(night)
    assert dict(tuple(r) for r in storage.read_table(spark, path).collect()) == expected


@pytest.mark.delta_spark
def test_a_merge_another_writer_committed_under_is_one_sentence(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A night's merge (delta-spark's MERGE INTO) that another writer commits to the same
    table under, after the merge's transaction began: Delta Lake refuses the merge's
    commit, and ``replace_rows``' merge raises that as one ConcurrentWriteError naming
    the table and Delta's own conflict. Made deterministic as for writes by name
    (tests/storage/test_catalog_tables.py): the merge's source waits in its one task (a
    UDF) while the other writer appends."""
    from pyspark.sql import functions as F

    from pelengine.storage import writes
    from tests.storage.racing import held_udf, other_writer

    path = str(tmp_path / "t")
    storage.write_table(
        spark.createDataFrame([(i, f"old{i}") for i in range(10)], "id long, v string"), path
    )
    started, go = str(tmp_path / "started"), str(tmp_path / "go")
    held = held_udf(started, go)
    source = (
        spark.createDataFrame(
            [(i, f"new{i}", "insert") for i in range(5, 15)], "id long, v string, _op string"
        )
        .coalesce(1)
        .where(held(F.lit(1)))
    )
    extra = spark.createDataFrame([(100, "other")], "id long, v string")
    racing = other_writer(started, go, lambda: storage.write_table(extra, path, "append"))
    with racing as other, pytest.raises(storage.ConcurrentWriteError) as caught:
        # the MERGE itself: replace_rows computes its source (a local checkpoint)
        # before the transaction begins, where a held task would hold nothing
        writes._merge_delta_spark(source, path, ["id", "v"], "(t.`id` = s.`id`)", empty=False)
    assert not other, other
    message = str(caught.value)
    assert message.startswith("another run ") and f"committed to {path} while this run" in message
    assert "Concurrent" in message and "run again once the other run has finished" in message
    assert len(message.splitlines()) == 1
    # the other writer's commit stands; the merge left nothing
    assert storage.table_version(spark, path) == 1
    rows = sorted(tuple(r) for r in storage.read_table(spark, path).collect())
    assert rows == sorted([(i, f"old{i}") for i in range(10)] + [(100, "other")])
