"""A compacted events table is not changed history (#17): OPTIMIZE rewrites files with
the same rows, and a night stays incremental; after VACUUM every row is checked instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pelengine.schemas import EVENTS_SCHEMA
from pelengine.storage import write_table
from tests.runs.test_incremental_log import _night, _workload

# on both stores: make test runs it on the embedded store; on delta-spark only with
# PELENGINE_TEST_HEAVY=1, where test_incremental_native_delta's OPTIMIZE and VACUUM cases,
# made with Delta's own SQL, cover it
pytestmark = [pytest.mark.spark, pytest.mark.stores, pytest.mark.heavy("delta-spark")]


def test_a_compacted_table_is_not_changed_history(spark: SparkSession, tmp_path: Path) -> None:
    """OPTIMIZE rewrites every file with the same rows: the night stays incremental, and
    when the files it removed are gone too (VACUUM) every row is checked instead."""
    from deltalake import DeltaTable

    rows = _workload(800, 34)
    events, inc, full = tmp_path / "events", tmp_path / "inc", tmp_path / "full"
    for i, part in enumerate((rows[:200], rows[200:400], rows[400:600])):
        write_table(
            spark.createDataFrame(part, EVENTS_SCHEMA), str(events), "append" if i else "overwrite"
        )
    _night(spark, events, inc)
    DeltaTable(str(events)).optimize.compact()
    write_table(spark.createDataFrame(rows[600:700], EVENTS_SCHEMA), str(events), "append")
    # (compared with a full run once, after the last night: suite time)
    report = _night(spark, events, inc)
    read = report["incremental"]["read"]
    assert report["incremental"]["mode"] == "incremental"
    assert read["files_added"] >= 2 and read["files_removed"] >= 3
    assert (read["rows_new"], read["rows_gone"], read["rows_late"]) == (100, 0, 0)

    DeltaTable(str(events)).optimize.compact()
    write_table(spark.createDataFrame(rows[700:], EVENTS_SCHEMA), str(events), "append")
    table = DeltaTable(str(events))
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    report = _night(spark, events, inc, full)
    assert report["incremental"]["mode"] == "incremental"
    assert report["incremental"]["read"]["from"] == "every row (digest)"
