"""Incremental nights on delta-spark read only the new data (#31).

The events table is changed with Delta's own SQL (OPTIMIZE, DELETE, UPDATE, VACUUM, table
properties) in the cases users have; each night's tables must equal one full run over the
same table, and its report must say how it found the rows (``incremental.read``): from
the Delta log read as files (``via: commit files``), from the change data feed, or every
row checked against the state's digest, with the reason. Each case prints one line
``case: mode, read``.

Suite time: a night on delta-spark writes ten tables (a commit or a merge each) and is
most of a case's time; what is around it is shared.

* One first night for every case that starts from one: every base table (plain, deletion
  vectors on, change data feed on, partitioned) is the same two appends of the same rows,
  so it is at the same version with the same rows, and that is all a first night's state
  keeps of its events table (the version, the count and digest of its rows: no table id;
  the run's record names the path, which the copies below change anyway). The first night
  runs once, on the plain table; each other base table is checked to hold the same rows at
  the same version, and each case starts from a copy of its events table and of that
  night (Delta's log names its files relative to the table).
* One full run per distinct events content: the full run a night must equal is the
  pipeline's tables over the events table (collected, not written: writing is every other
  run test's business), kept for the module under the table's rows read back. A case
  whose table reads back the same rows as an earlier case's compares with that run (the
  cases delete the same old row where the row does not matter, so six contents serve
  ten nights).

The night's tables are read through delta-rs (no Spark job per table), and VACUUM lists
files in two tasks, not Spark's default 10,000 (most of the vacuum case's time before).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
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
FIRST = ROWS[:250]
#: two rows of FIRST the first night has not seen (a later overwrite adds them late)
HOLES = {r["seq"] for r in (FIRST[80], FIRST[160])}
#: the first night's rows: every base table is these two appends (four files)
OLD = (
    [r for r in FIRST if r["seq"] not in HOLES][:150],
    [r for r in FIRST if r["seq"] not in HOLES][150:],
)
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
    with _conf(spark, keys):
        writer.save(str(events))


@contextlib.contextmanager
def _conf(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """The session with ``settings``, restored after."""
    before = {k: spark.conf.get(k, None) for k in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
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
    full_runs: FullRuns,
    *,
    read_night: Callable[[Path], list[str]] | None = None,
) -> dict[str, Any]:
    """One incremental night, its ``case: mode, read`` line printed; its tables (and
    ``rejected_events``) must hold the rows of a full run over the same events table
    (``read_night``: how a night's table is read, by default through delta-rs)."""
    report = run_reconstruct(spark, str(events), str(inc), Settings(incremental=True))
    night = report["incremental"]
    found = report.get("timings_s", {}).get("find_new")
    print(f"{case}: {night['mode']}, {night.get('read')} (found in {found} s)")
    want = full_runs.tables(spark, events, case)
    for name in (*OUTPUT_TABLES, "rejected_events"):
        assert (read_night or _delta_rs_rows)(inc / name) == want[name], f"{case}: {name}"
    return night


class FullRuns:
    """The tables of one full run over an events table, per distinct content: the full
    pipeline (:func:`reconstruct`) over the table read through Delta, its tables collected;
    kept under the table's rows as read back, so a later case whose table reads back the
    same rows compares with the same run (and prints which case's it is)."""

    def __init__(self) -> None:
        self._runs: dict[tuple[str, ...], tuple[str, dict[str, list[str]]]] = {}

    def tables(self, spark: SparkSession, events: Path, case: str) -> dict[str, list[str]]:
        key = tuple(_event_rows(storage.read_table(spark, str(events)).toArrow()))
        if key in self._runs:
            first, tables = self._runs[key]
            print(f"{case}: the same events rows as {first}: its full run")
            return tables
        result = reconstruct(spark, storage.read_table(spark, str(events)), Settings())
        frames = {**result.tables, "rejected_events": result.rejected}
        tables = {
            name: _rows(frames[name].toArrow()) for name in (*OUTPUT_TABLES, "rejected_events")
        }
        result.unpersist()
        self._runs[key] = (case, tables)
        return tables


@pytest.fixture(scope="module")
def full_runs() -> FullRuns:
    return FullRuns()


def _event_rows(table: Any) -> list[str]:
    """An events table's rows (its columns in the events schema's order: a partition
    column may come last) as :func:`_rows` gives them."""
    return _rows(table.select([f.name for f in EVENTS_SCHEMA.fields]))


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


def _events(spark: SparkSession, events: Path, **how: Any) -> None:
    """A base events table: the two appends of OLD (``how``: see :func:`_append`)."""
    for rows in OLD:
        _append(spark, rows, events, **how)


@pytest.fixture(scope="module")
def first_night(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession) -> Path:
    """The plain base table (no table property) and its first night, run once: the
    directory holding both (``events``, ``inc``)."""
    root = tmp_path_factory.mktemp("first")
    _events(spark, root / "events")
    night = run_reconstruct(
        spark, str(root / "events"), str(root / "inc"), Settings(incremental=True)
    )
    assert night["incremental"]["mode"] == "full"
    assert night["input"]["delta_version"] == 1
    return root


def _based(
    tmp_path_factory: pytest.TempPathFactory,
    spark: SparkSession,
    first_night: Path,
    **how: Any,
) -> Base:
    """A base events table (``how``: its properties or partitioning) with the first night:
    the same two appends as the plain table, so the same rows at the same version (checked:
    all the night's state records of its events table), and so the plain table's first
    night is its. Each call copies both under a case's directory: (events, inc)."""
    if how:
        root = tmp_path_factory.mktemp("base")
        _events(spark, root / "events", **how)
        for path in (root / "events", first_night / "events"):
            assert storage.table_version(spark, str(path)) == 1, path
        assert _event_rows(delta_rs_table(root / "events")) == _event_rows(
            delta_rs_table(first_night / "events")
        )
    else:
        root = first_night

    def copy(where: Path) -> tuple[Path, Path]:
        where.mkdir(parents=True, exist_ok=True)
        shutil.copytree(root / "events", where / "events")
        shutil.copytree(first_night / "inc", where / "inc")
        return where / "events", where / "inc"

    return copy


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory, spark: SparkSession, first_night: Path) -> Base:
    """Two appends (four files), no table property."""
    return _based(tmp_path_factory, spark, first_night)


@pytest.fixture(scope="module")
def with_vectors(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession, first_night: Path
) -> Base:
    """Deletion vectors on from the table's creation."""
    return _based(
        tmp_path_factory, spark, first_night, properties={"enableDeletionVectors": "true"}
    )


@pytest.fixture(scope="module")
def with_feed(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession, first_night: Path
) -> Base:
    """The change data feed on from the table's creation."""
    return _based(tmp_path_factory, spark, first_night, properties={"enableChangeDataFeed": "true"})


@pytest.fixture(scope="module")
def partitioned(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession, first_night: Path
) -> Base:
    """Partitioned by ``source``."""
    return _based(tmp_path_factory, spark, first_night, partition_by="source")


def _from_log(read: dict[str, Any], versions: str) -> None:
    assert read["from"] == "delta log" and read["via"] == "commit files", read
    assert read["versions"] == versions and not read["change_feed"], read


# --------------------------------------------------------------------------- the cases


def test_plain_appends(
    spark: SparkSession, tmp_path: Path, plain: Base, full_runs: FullRuns
) -> None:
    """Only the appended files are read, as Parquet."""
    events, inc = plain(tmp_path)
    _append(spark, TONIGHT, events)
    night = _night(spark, "plain appends", events, inc, full_runs)
    read = night["read"]
    assert night["mode"] == "incremental"
    _from_log(read, "2..2")
    assert read["files_removed"] == 0 and read["files_read"] == read["files_added"] >= 1
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (150, 0, 0)


def test_optimize(spark: SparkSession, tmp_path: Path, plain: Base, full_runs: FullRuns) -> None:
    """OPTIMIZE rewrites files without changing data (``dataChange`` false): neither new
    nor gone rows, and its files are not read; only the night's append is."""
    events, inc = plain(tmp_path)
    spark.sql(f"OPTIMIZE {_q(events)}")
    _append(spark, TONIGHT, events)
    night = _night(spark, "OPTIMIZE", events, inc, full_runs)
    read = night["read"]
    assert night["mode"] == "incremental"
    _from_log(read, "2..3")
    assert read["files_removed"] == 4
    assert read["files_read"] == read["files_added"] - 1  # not the compacted file
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (150, 0, 0)


def test_delete_and_update_of_old_rows(
    spark: SparkSession, tmp_path: Path, plain: Base, full_runs: FullRuns
) -> None:
    """A DELETE of an old row and an UPDATE of another: the files they rewrote are
    compared with the ones they replaced; two rows are gone, one new (and late)."""
    events, inc = plain(tmp_path)
    spark.sql(f"DELETE FROM {_q(events)} WHERE seq = {_seq(20)}")
    spark.sql(f"UPDATE {_q(events)} SET client = 'updated' WHERE seq = {_seq(200)}")
    _append(spark, TONIGHT, events)
    night = _night(spark, "DELETE and UPDATE of old rows", events, inc, full_runs)
    read = night["read"]
    assert night["mode"] == "full (history changed)" and night["families_with_changed_history"]
    _from_log(read, "2..4")
    assert read["files_removed"] == 2 and read["files_read"] == read["files_added"] + 2
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (151, 2, 1)


def test_late_rows_in_an_overwritten_table(
    spark: SparkSession, tmp_path: Path, plain: Base, full_runs: FullRuns
) -> None:
    """The table is overwritten with its rows and the two that were missing (a backfill
    into old files): two rows are new, and late; the rest only moved."""
    events, inc = plain(tmp_path)
    frame = spark.createDataFrame(FIRST, EVENTS_SCHEMA)
    frame.write.format("delta").mode("overwrite").save(str(events))
    night = _night(spark, "late rows (overwrite)", events, inc, full_runs)
    read = night["read"]
    assert night["mode"] == "full (history changed)"
    _from_log(read, "2..2")
    assert read["files_removed"] == 4
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (2, 0, 2)


def test_deletion_vectors_with_a_delete(
    spark: SparkSession, tmp_path: Path, with_vectors: Base, full_runs: FullRuns
) -> None:
    """Deletion vectors on (the Databricks default for new tables): a DELETE of an old row
    and of a row appended tonight leaves both files in place with a vector. The log names
    each file with its vector: the old file's rows before and after are compared (one
    gone), the new one counts without its deleted row."""
    events, inc = with_vectors(tmp_path)
    _append(spark, TONIGHT, events)
    tonight = TONIGHT[10]["seq"]
    spark.sql(f"DELETE FROM {_q(events)} WHERE seq IN ({_seq(100)}, {tonight})")
    night = _night(spark, "deletion vectors, DELETE", events, inc, full_runs)
    read = night["read"]
    assert night["mode"] == "full (history changed)"
    _from_log(read, "2..3")
    assert read["files_removed"] == 1  # the old file without a vector (back with one)
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (149, 1, 0)


def test_change_data_feed_on_from_the_start(
    spark: SparkSession, tmp_path: Path, with_feed: Base, full_runs: FullRuns
) -> None:
    """The change data feed on for every version of the night: the DELETE's row, the
    UPDATE's pre- and post-image and the appended rows come from the feed, no file is read
    whole (the rows of the DELETE and UPDATE case, found another way)."""
    events, inc = with_feed(tmp_path)
    _append(spark, TONIGHT, events)
    spark.sql(f"DELETE FROM {_q(events)} WHERE seq = {_seq(20)}")
    spark.sql(f"UPDATE {_q(events)} SET client = 'updated' WHERE seq = {_seq(200)}")
    night = _night(spark, "change data feed on from the start", events, inc, full_runs)
    read = night["read"]
    assert night["mode"] == "full (history changed)" and night["families_with_changed_history"]
    assert read["from"] == "change data feed" and read["change_feed"], read
    assert read["versions"] == "2..4" and read["files_read"] == 0
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (151, 2, 1)


def test_change_data_feed_switched_on_part_way(
    spark: SparkSession, tmp_path: Path, plain: Base, full_runs: FullRuns
) -> None:
    """The feed switched on within the night's versions: the versions before cannot come
    from it, so the files are compared, and the report says why the feed was not read."""
    events, inc = plain(tmp_path)
    _append(spark, TONIGHT, events)
    spark.sql(f"ALTER TABLE {_q(events)} SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    spark.sql(f"DELETE FROM {_q(events)} WHERE seq = {_seq(40)}")
    night = _night(spark, "change data feed switched on part way", events, inc, full_runs)
    read = night["read"]
    assert night["mode"] == "full (history changed)"
    _from_log(read, "2..4")
    assert read["note"] == "the change data feed was off for events versions 2..3", read
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (150, 1, 0)


def test_vacuumed_files_are_a_stated_fallback(
    spark: SparkSession, tmp_path: Path, plain: Base, full_runs: FullRuns
) -> None:
    """A DELETE rewrote an old file and VACUUM removed it: its rows cannot be compared, so
    every row is checked against the state's digest, and the report says why."""
    events, inc = plain(tmp_path)
    spark.sql(f"DELETE FROM {_q(events)} WHERE seq = {_seq(40)}")
    _append(spark, TONIGHT, events)
    # VACUUM lists the table's files with Spark's partition-discovery parallelism (default
    # 10,000): on local[2] a VACUUM of a few small files took 53 JVM CPU-s, 4.5 with 2 (the
    # same jobs; which files it deletes does not depend on it)
    with _conf(
        spark,
        {
            "spark.databricks.delta.retentionDurationCheck.enabled": "false",
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        },
    ):
        spark.sql(f"VACUUM {_q(events)} RETAIN 0 HOURS")
    night = _night(spark, "vacuumed files", events, inc, full_runs)
    read = night["read"]
    assert read["from"] == "every row (digest)", read
    assert "removed are gone from storage (vacuumed)" in read["why"], read
    assert night["mode"] == "full (history changed)"  # (the digest finds the row gone)


def test_a_path_with_a_space_percent_and_non_ascii(
    spark: SparkSession, tmp_path: Path, with_vectors: Base, full_runs: FullRuns
) -> None:
    """The log's paths are URL-encoded URIs relative to the table, Spark's
    ``_metadata.file_path`` absolute ones: under a directory named with a space, ``%``, a
    literal ``%20`` and non-ASCII characters, the appended files (read as Parquet) and the
    old file a DELETE gave a deletion vector (read through Delta, found by its path) hold
    the rows the log says (else the night would fall back, saying so)."""
    events, inc = with_vectors(tmp_path / "a b%20c 100% é")
    _append(spark, TONIGHT, events)
    spark.sql(f"DELETE FROM {_q(events)} WHERE seq = {_seq(40)}")
    # (delta-rs decodes the literal %20 of such a path: compared through Spark)
    night = _night(
        spark,
        "path with a space, % and non-ASCII",
        events,
        inc,
        full_runs,
        read_night=lambda path: _rows(storage.read_table(spark, str(path)).toArrow()),
    )
    read = night["read"]
    assert night["mode"] == "full (history changed)"
    _from_log(read, "2..3")
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (150, 1, 0)


def test_a_partitioned_events_table(
    spark: SparkSession, tmp_path: Path, partitioned: Base, full_runs: FullRuns
) -> None:
    """Partition values live in the log's add actions, not in the files: the appended
    files read as Parquet get them back, a value with a space, ``%``, ``/`` and non-ASCII
    characters among them (escaped twice in the file's path), and null."""
    tonight = [
        {**r, "source": "night 2 %/é" if i % 3 else None} if i % 2 == 0 else r
        for i, r in enumerate(TONIGHT)
    ]
    events, inc = partitioned(tmp_path)
    _append(spark, tonight, events, partition_by="source")
    night = _night(spark, "partitioned events table", events, inc, full_runs)
    read = night["read"]
    assert night["mode"] == "incremental"
    _from_log(read, "2..2")
    assert read["files_removed"] == 0 and read["files_read"] == read["files_added"]
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (150, 0, 0)
    changes = storage.table_changes(spark, str(events), 1, 2)
    new, gone = storage.read_changes(spark, str(events), changes)
    assert gone is None
    delta = storage.read_table(spark, str(events), 2).exceptAll(
        storage.read_table(spark, str(events), 1)
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
