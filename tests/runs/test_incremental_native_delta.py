"""Incremental nights on delta-spark read only the new data (#31).

The events table is changed with Delta's own SQL (OPTIMIZE, DELETE, UPDATE, VACUUM, table
properties) in the cases users have; each night's tables must equal one full run over the
same table, and its report must say how it found the rows (``incremental.read``): from
the Delta log read as files (``via: commit files``), from the change data feed, or every
row checked against the state's digest, with the reason. Each case prints one line
``case: mode, read``.

Suite time: a run on delta-spark writes ten tables (a commit each), so the first nights
are shared: a few base tables with their first night are built once and each case
starts from a copy (Delta's log names its files relative to the table). The full run a
night must equal is the pipeline's tables over the same events table, collected without
writing them (ten commits less per case; writing is every other run test's business),
and the night's tables are read through delta-rs (no Spark job per table).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from pelengine import storage
from pelengine.pipeline.reconstruct import reconstruct
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, OUTPUT_TABLES
from pelengine.settings import Settings
from pelengine.storage import deltalog
from tests.delta_rs import delta_rs_table
from tests.runs.test_incremental_log import _workload

pytestmark = [pytest.mark.spark, pytest.mark.delta_spark]

ROWS = _workload(400, 41)
#: the first night's rows (two appends, two rows left out: a later overwrite adds them late)
FIRST = ROWS[:250]
HOLES = {r["seq"] for r in (FIRST[80], FIRST[160])}
TONIGHT = ROWS[250:]


def _seq(i: int) -> int:
    """The seq of the first night's row ``i`` (not a hole)."""
    seq = FIRST[i]["seq"]
    assert seq is not None and seq not in HOLES
    return int(seq)


def _q(path: Path) -> str:
    return "delta.`" + str(path).replace("`", "``") + "`"


def _append(
    spark: SparkSession,
    rows: list[dict[str, Any]],
    events: Path,
    *,
    properties: dict[str, str] | None = None,
    partition_by: str | None = None,
) -> None:
    """Append ``rows`` (the first write creates the table, with ``properties``: set as the
    session's Delta defaults for the write, then restored)."""
    writer = spark.createDataFrame(rows, EVENTS_SCHEMA).write.format("delta").mode("append")
    if partition_by:
        writer = writer.partitionBy(partition_by)
    keys = {
        f"spark.databricks.delta.properties.defaults.{k}": v for k, v in (properties or {}).items()
    }
    before = {k: spark.conf.get(k, None) for k in keys}
    for key, value in keys.items():
        spark.conf.set(key, value)
    try:
        writer.save(str(events))
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _night(
    spark: SparkSession,
    case: str,
    events: Path,
    inc: Path,
    *,
    full: bool = True,
    read_night: Callable[[Path], list[str]] | None = None,
) -> dict[str, Any]:
    """One incremental night, its ``case: mode, read`` line printed; with ``full``, its
    tables (and ``rejected_events``) must hold the rows of a full run over the same events
    table (``read_night``: how a night's table is read, by default through delta-rs)."""
    report = run_reconstruct(spark, str(events), str(inc), Settings(incremental=True))
    night = report["incremental"]
    found = report.get("timings_s", {}).get("find_new")
    print(f"{case}: {night['mode']}, {night.get('read')} (found in {found} s)")
    if full:
        result = reconstruct(spark, storage.read_table(spark, str(events)), Settings())
        tables = {**result.tables, "rejected_events": result.rejected}
        for name in (*OUTPUT_TABLES, "rejected_events"):
            want = _rows(tables[name].toArrow())
            assert (read_night or _delta_rs_rows)(inc / name) == want, name
        result.unpersist()
    return night


def _canonical(value: Any) -> Any:
    """A value as JSON can sort it; a map (pyarrow: a list of pairs) in key order."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) for v in value):
            pairs = [[_canonical(k), _canonical(v)] for k, v in value]
            return sorted(pairs, key=lambda p: json.dumps(p, sort_keys=True, default=str))
        return [_canonical(v) for v in value]
    return value


def _rows(table: Any) -> list[str]:
    """A pyarrow table's columns, then its rows as sorted canonical JSON."""
    rows = [json.dumps(_canonical(r), sort_keys=True, default=str) for r in table.to_pylist()]
    return [json.dumps(table.column_names), *sorted(rows)]


def _delta_rs_rows(path: Path) -> list[str]:
    return _rows(delta_rs_table(path))


# --------------------------------------------------------------------------- first nights

Base = Callable[[Path], tuple[Path, Path]]


def _based(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession, make: Callable[[Path], None]
) -> Base:
    """A base events table (``make`` writes it) with its first night, built once; each
    call copies both under a case's directory: (events, inc)."""
    root = tmp_path_factory.mktemp("base")
    make(root / "events")
    night = run_reconstruct(
        spark, str(root / "events"), str(root / "inc"), Settings(incremental=True)
    )
    assert night["incremental"]["mode"] == "full"

    def copy(where: Path) -> tuple[Path, Path]:
        where.mkdir(parents=True, exist_ok=True)
        for name in ("events", "inc"):
            shutil.copytree(root / name, where / name)
        return where / "events", where / "inc"

    return copy


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Base:
    """Two appends (four files), no table property."""

    def make(events: Path) -> None:
        first = [r for r in FIRST if r["seq"] not in HOLES]
        _append(spark, first[:150], events)
        _append(spark, first[150:], events)

    return _based(tmp_path_factory, spark, make)


@pytest.fixture(scope="module")
def with_vectors(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Base:
    """Deletion vectors on from the table's creation."""

    def make(events: Path) -> None:
        rows = [r for r in FIRST if r["seq"] not in HOLES]
        _append(spark, rows, events, properties={"enableDeletionVectors": "true"})

    return _based(tmp_path_factory, spark, make)


def _from_log(read: dict[str, Any], versions: str) -> None:
    assert read["from"] == "delta log" and read["via"] == "commit files", read
    assert read["versions"] == versions and not read["change_feed"], read


# --------------------------------------------------------------------------- the cases


def test_plain_appends(spark: SparkSession, tmp_path: Path, plain: Base) -> None:
    """Only the appended files are read, as Parquet."""
    events, inc = plain(tmp_path)
    _append(spark, TONIGHT, events)
    night = _night(spark, "plain appends", events, inc)
    read = night["read"]
    assert night["mode"] == "incremental"
    _from_log(read, "2..2")
    assert read["files_removed"] == 0 and read["files_read"] == read["files_added"] >= 1
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (150, 0, 0)


def test_optimize(spark: SparkSession, tmp_path: Path, plain: Base) -> None:
    """OPTIMIZE rewrites files without changing data (``dataChange`` false): neither new
    nor gone rows, and its files are not read; only the night's append is."""
    events, inc = plain(tmp_path)
    spark.sql(f"OPTIMIZE {_q(events)}")
    _append(spark, TONIGHT, events)
    night = _night(spark, "OPTIMIZE", events, inc)
    read = night["read"]
    assert night["mode"] == "incremental"
    _from_log(read, "2..3")
    assert read["files_removed"] == 4
    assert read["files_read"] == read["files_added"] - 1  # not the compacted file
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (150, 0, 0)


def test_delete_and_update_of_old_rows(spark: SparkSession, tmp_path: Path, plain: Base) -> None:
    """A DELETE of an old row and an UPDATE of another: the files they rewrote are
    compared with the ones they replaced; two rows are gone, one new (and late)."""
    events, inc = plain(tmp_path)
    spark.sql(f"DELETE FROM {_q(events)} WHERE seq = {_seq(20)}")
    spark.sql(f"UPDATE {_q(events)} SET client = 'updated' WHERE seq = {_seq(200)}")
    _append(spark, TONIGHT, events)
    night = _night(spark, "DELETE and UPDATE of old rows", events, inc)
    read = night["read"]
    assert night["mode"] == "full (history changed)" and night["families_with_changed_history"]
    _from_log(read, "2..4")
    assert read["files_removed"] == 2 and read["files_read"] == read["files_added"] + 2
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (151, 2, 1)


def test_late_rows_in_an_overwritten_table(
    spark: SparkSession, tmp_path: Path, plain: Base
) -> None:
    """The table is overwritten with its rows and the two that were missing (a backfill
    into old files): two rows are new, and late; the rest only moved."""
    events, inc = plain(tmp_path)
    frame = spark.createDataFrame(FIRST, EVENTS_SCHEMA)
    frame.write.format("delta").mode("overwrite").save(str(events))
    night = _night(spark, "late rows (overwrite)", events, inc)
    read = night["read"]
    assert night["mode"] == "full (history changed)"
    _from_log(read, "2..2")
    assert read["files_removed"] == 4
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (2, 0, 2)


def test_deletion_vectors_with_a_delete(
    spark: SparkSession, tmp_path: Path, with_vectors: Base
) -> None:
    """Deletion vectors on (the Databricks default for new tables): a DELETE of an old row
    and of a row appended tonight leaves both files in place with a vector. The log names
    each file with its vector: the old file's rows before and after are compared (one
    gone), the new one counts without its deleted row."""
    events, inc = with_vectors(tmp_path)
    _append(spark, TONIGHT, events)
    tonight = TONIGHT[10]["seq"]
    spark.sql(f"DELETE FROM {_q(events)} WHERE seq IN ({_seq(100)}, {tonight})")
    night = _night(spark, "deletion vectors, DELETE", events, inc)
    read = night["read"]
    assert night["mode"] == "full (history changed)"
    _from_log(read, "1..2")
    assert read["files_removed"] == 1  # the old file without a vector (back with one)
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (149, 1, 0)


def test_change_data_feed_on_from_the_start(spark: SparkSession, tmp_path: Path) -> None:
    """The change data feed on for every version of the night: the UPDATE's pre- and
    post-image and the appended rows come from the feed, no file is read whole."""
    events, inc = tmp_path / "events", tmp_path / "inc"
    _append(spark, FIRST, events, properties={"enableChangeDataFeed": "true"})
    _night(spark, "change data feed (first night)", events, inc, full=False)
    _append(spark, TONIGHT, events)
    spark.sql(f"UPDATE {_q(events)} SET client = 'updated' WHERE seq = {_seq(20)}")
    night = _night(spark, "change data feed on from the start", events, inc)
    read = night["read"]
    assert night["mode"] == "full (history changed)"
    assert read["from"] == "change data feed" and read["change_feed"], read
    assert read["versions"] == "1..2" and read["files_read"] == 0
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (151, 1, 1)


def test_change_data_feed_switched_on_part_way(
    spark: SparkSession, tmp_path: Path, plain: Base
) -> None:
    """The feed switched on within the night's versions: the versions before cannot come
    from it, so the files are compared, and the report says why the feed was not read."""
    events, inc = plain(tmp_path)
    _append(spark, TONIGHT, events)
    spark.sql(f"ALTER TABLE {_q(events)} SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql(f"DELETE FROM {_q(events)} WHERE seq = {_seq(30)}")
    night = _night(spark, "change data feed switched on part way", events, inc)
    read = night["read"]
    assert night["mode"] == "full (history changed)"
    _from_log(read, "2..4")
    assert read["note"] == "the change data feed was off for events versions 2..3", read
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (150, 1, 0)


def test_vacuumed_files_are_a_stated_fallback(
    spark: SparkSession, tmp_path: Path, plain: Base
) -> None:
    """A DELETE rewrote an old file and VACUUM removed it: its rows cannot be compared, so
    every row is checked against the state's digest, and the report says why."""
    events, inc = plain(tmp_path)
    spark.sql(f"DELETE FROM {_q(events)} WHERE seq = {_seq(40)}")
    _append(spark, TONIGHT, events)
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    before = spark.conf.get(check, None)
    spark.conf.set(check, "false")
    try:
        spark.sql(f"VACUUM {_q(events)} RETAIN 0 HOURS")
    finally:
        if before is None:
            spark.conf.unset(check)
        else:
            spark.conf.set(check, before)
    night = _night(spark, "vacuumed files", events, inc)
    read = night["read"]
    assert read["from"] == "every row (digest)", read
    assert "removed are gone from storage (vacuumed)" in read["why"], read
    assert night["mode"] == "full (history changed)"  # (the digest finds the row gone)


def test_a_path_with_a_space_percent_and_non_ascii(
    spark: SparkSession, tmp_path: Path, with_vectors: Base
) -> None:
    """The log's paths are URL-encoded URIs relative to the table, Spark's
    ``_metadata.file_path`` absolute ones: under a directory named with a space, ``%``, a
    literal ``%20`` and non-ASCII characters, the appended files (read as Parquet) and the
    old file a DELETE gave a deletion vector (read through Delta, found by its path) hold
    the rows the log says (else the night would fall back, saying so)."""
    events, inc = with_vectors(tmp_path / "a b%20c 100% é")
    _append(spark, TONIGHT, events)
    spark.sql(f"DELETE FROM {_q(events)} WHERE seq = {_seq(5)}")
    # (delta-rs decodes the literal %20 of such a path: compared through Spark)
    night = _night(
        spark,
        "path with a space, % and non-ASCII",
        events,
        inc,
        read_night=lambda path: _rows(storage.read_table(spark, str(path)).toArrow()),
    )
    read = night["read"]
    assert night["mode"] == "full (history changed)"
    _from_log(read, "1..2")
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (150, 1, 0)


def test_a_partitioned_events_table(spark: SparkSession, tmp_path: Path) -> None:
    """Partition values live in the log's add actions, not in the files: the appended
    files read as Parquet get them back, a value with a space, ``%``, ``/`` and non-ASCII
    characters among them (escaped twice in the file's path), and null."""
    tonight = [
        {**r, "source": "night 2 %/é" if i % 3 else None} if i % 2 == 0 else r
        for i, r in enumerate(TONIGHT)
    ]
    events, inc = tmp_path / "events", tmp_path / "inc"
    _append(spark, FIRST, events, partition_by="source")
    _night(spark, "partitioned (first night)", events, inc, full=False)
    _append(spark, tonight, events, partition_by="source")
    night = _night(spark, "partitioned events table", events, inc)
    read = night["read"]
    assert night["mode"] == "incremental"
    _from_log(read, "1..1")
    assert read["files_removed"] == 0 and read["files_read"] == read["files_added"]
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (150, 0, 0)
    changes = storage.table_changes(spark, str(events), 0, 1)
    new, gone = storage.read_changes(spark, str(events), changes)
    assert gone is None
    delta = storage.read_table(spark, str(events), 1).exceptAll(
        storage.read_table(spark, str(events), 0)
    )
    _assert_same_rows(new, delta)


def _assert_same_rows(left: DataFrame, right: DataFrame) -> None:
    right = right.select(*left.columns)
    assert left.exceptAll(right).count() == 0 and right.exceptAll(left).count() == 0


def test_a_commit_gone_from_the_log_is_a_stated_fallback(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Log retention removed a commit of the range: the log cannot tell, and says why."""
    events = tmp_path / "events"
    for part in (ROWS[:20], ROWS[20:40], ROWS[40:60]):
        _append(spark, part, events)
    os.remove(events / "_delta_log" / deltalog.commit_file(1))
    with pytest.raises(storage.ChangesUnknownError, match="no commit file for version 1") as caught:
        storage.table_changes(spark, str(events), 0, 2)
    print(f"commit gone from the log: (table_changes only), why: {caught.value}")


def test_paths_are_escaped_as_spark_escapes_them(spark: SparkSession) -> None:
    """What ``hadoop_uri`` makes of a path is what Hadoop's Path (and so Spark's
    ``_metadata.file_path``) makes of it."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    for path in (
        "file:/tmp/a b%20c 100% é/events/part-0.parquet",
        "file:/tmp/x/source=night 2 %25%2F%C3%A9/part-1.parquet",
        "file:/tmp/#?[]{}^`|\"<>+&=;:@,$!~*'()/\u00a0\u2003\u200b\u00ad日本/x",
        "s3://bucket/a b/é%/x.parquet",
    ):
        assert deltalog.hadoop_uri(path) == jvm.org.apache.hadoop.fs.Path(path).toUri().toString()
