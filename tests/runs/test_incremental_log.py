"""What an incremental night reads: only the Delta files added since its state (#17).

Rewrites of old files (a backfill with late rows, a DELETE, a compaction) are found in
the Delta log; every night's tables must equal one full run over the same table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA
from pelengine.settings import Settings
from pelengine.storage import table_version, write_table
from pelengine.synth import generate_events
from tests.runs.test_incremental import assert_tables_equal

# on both stores: make test runs it on the embedded store; on delta-spark only with
# PELENGINE_TEST_HEAVY=1, where test_incremental_native_delta's appends, DELETE and
# late-rows cases, made with Delta's own SQL, cover it
pytestmark = [pytest.mark.spark, pytest.mark.stores, pytest.mark.heavy("delta-spark")]


def _workload(n: int, seed: int) -> list[dict[str, Any]]:
    return list(generate_events(n, 6, seed=seed))


def _night(
    spark: SparkSession, events: Path, inc: Path, full: Path | None = None
) -> dict[str, Any]:
    """One incremental run; with ``full``, also a full run that its tables must equal."""
    report = run_reconstruct(spark, str(events), str(inc), Settings(incremental=True))
    print(report["incremental"])
    if full is not None:
        run_reconstruct(spark, str(events), str(full), Settings())
        assert_tables_equal(spark, inc, full)
    return report


def test_a_night_reads_only_the_files_it_added(spark: SparkSession, tmp_path: Path) -> None:
    """The night's rows are the file it appended; one of them has no seq: it is rejected
    with its reason and the night stays incremental."""
    rows = _workload(600, 31)
    events, inc, full = tmp_path / "events", tmp_path / "inc", tmp_path / "full"
    for part in (rows[:200], rows[200:400]):
        mode = "append" if table_version(spark, str(events)) is not None else "overwrite"
        write_table(spark.createDataFrame(part, EVENTS_SCHEMA), str(events), mode)
    _night(spark, events, inc)
    night = [*rows[400:], {**rows[-1], "seq": None, "argv": ["XACK", "k", "g", "1-1"]}]
    write_table(spark.createDataFrame(night, EVENTS_SCHEMA), str(events), "append")
    report = _night(spark, events, inc, full)
    inc_report = report["incremental"]
    assert inc_report["mode"] == "incremental"
    read = inc_report["read"]
    assert read["from"] == "delta log" and read["versions"] == "2..2"
    assert read["files_added"] >= 1 and read["files_removed"] == 0
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (len(night), 0, 0)
    assert report["events"]["read"] == len(night)
    assert report["events"]["rejected_by_reason"]["null seq"] == 1  # (and the generator's faults)


def test_late_rows_in_a_rewritten_old_file_replay_the_full_history(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The table is overwritten with the old rows and two that were missing (a late
    backfill into old files): the log shows the old file removed and a new one added; two
    rows are new, and late."""
    rows = _workload(700, 32)
    seqs = [r["seq"] for r in rows if r["seq"] is not None]
    holes = {seqs[len(seqs) // 3], seqs[len(seqs) // 2]}
    events, inc, full = tmp_path / "events", tmp_path / "inc", tmp_path / "full"
    first = [r for r in rows if r["seq"] not in holes]
    write_table(spark.createDataFrame(first, EVENTS_SCHEMA), str(events), "overwrite")
    _night(spark, events, inc)
    write_table(spark.createDataFrame(rows, EVENTS_SCHEMA), str(events), "overwrite")
    report = _night(spark, events, inc, full)
    inc_report = report["incremental"]
    assert inc_report["mode"] == "full (history changed)"
    read = inc_report["read"]
    assert read["from"] == "delta log" and read["files_removed"] >= 1
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (2, 0, 2)
    assert inc_report["families_with_changed_history"]


def test_rows_deleted_from_an_old_file_replay_the_full_history(
    spark: SparkSession, tmp_path: Path
) -> None:
    """delta-rs DELETEs old rows (rewriting their file) and a night is appended."""
    from deltalake import DeltaTable

    rows = _workload(700, 33)
    events, inc, full = tmp_path / "events", tmp_path / "inc", tmp_path / "full"
    write_table(spark.createDataFrame(rows[:300], EVENTS_SCHEMA), str(events), "overwrite")
    write_table(spark.createDataFrame(rows[300:600], EVENTS_SCHEMA), str(events), "append")
    _night(spark, events, inc)
    gone_seq = [r["seq"] for r in rows[:300] if r["seq"] is not None][100]
    DeltaTable(str(events)).delete(f"seq = {gone_seq}")
    write_table(spark.createDataFrame(rows[600:], EVENTS_SCHEMA), str(events), "append")
    report = _night(spark, events, inc, full)
    inc_report = report["incremental"]
    assert inc_report["mode"] == "full (history changed)"
    read = inc_report["read"]
    assert read["files_added"] >= 2 and read["files_removed"] >= 1
    assert read["rows_gone"] == 1 and read["rows_late"] == 0
