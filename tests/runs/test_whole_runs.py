"""Readers see whole runs: a run stopped at any write boundary leaves every reader
(``read_output_table``, ``sql``, ``pending``, ``summary``) on the last complete run.

Delta commits one table at a time, so between two table writes the tables' latest
versions mix two runs. The run report, written last, names each table's version and
the readers read those. Run 2's tables are written again by the runs' own writer, and at
every boundary (before each table after the first, and after the last table but before
the report) its progress callback reads every reader: a kill there leaves the tables as
they are at that moment (the SIGKILL version is in test_crash.py, which replays up to each
kill; here the callback looks at each boundary of one write, so that the boundaries cost
neither a replay nor a write each); at each one every reader must give run 1 exactly.
A complete run then gives run 2 exactly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.read.pending import read_snapshot
from pelengine.read.query import run_query
from pelengine.runs.full import run_reconstruct
from pelengine.runs.output import write_outputs
from pelengine.schemas import EVENTS_SCHEMA, OUTPUT_TABLES
from pelengine.synth import generate_events

# on both stores: make test runs it on delta-spark, then on the embedded store
pytestmark = [pytest.mark.spark, pytest.mark.stores]

TABLES = (*OUTPUT_TABLES, "rejected_events")


def _seen(spark: SparkSession, out: Path) -> dict[str, list[tuple]]:
    """Every table as the readers give it, rows sorted."""
    run = storage.run_versions(str(out))
    return {
        name: sorted(
            (tuple(r) for r in storage.read_output_table(spark, str(out), name, run).collect()),
            key=repr,
        )
        for name in TABLES
    }


def test_a_run_stopped_at_any_write_boundary_is_never_seen(
    spark: SparkSession, tmp_path: Path
) -> None:
    rows = list(generate_events(400, 3, seed=19))
    cut = len(rows) // 2
    events, out, complete = tmp_path / "events", tmp_path / "out", tmp_path / "complete"
    storage.write_table(spark.createDataFrame(rows[:cut], EVENTS_SCHEMA), str(events))
    first_seq = run_reconstruct(spark, str(events), str(out))["as_of_seq"]
    first = _seen(spark, out)
    storage.write_table(spark.createDataFrame(rows[cut:], EVENTS_SCHEMA), str(events), "append")
    shutil.copytree(out, complete)
    run_reconstruct(spark, str(events), str(complete))
    second = _seen(spark, complete)
    assert first["groups"] != second["groups"]  # the runs differ where a reader can tell

    # run 2's tables, written again by the runs' own writer, read at each boundary: before
    # each table but the first, and after the last one (before the report)
    tables = [(name, storage.read_table(spark, str(complete / name))) for name in TABLES]
    boundaries = [f"writing {name} (" for name, _ in tables[1:]] + [f"wrote {TABLES[-1]}:"]
    reached: list[str] = []
    inconsistent: list[str] = []

    def look(line: str) -> None:
        for boundary in boundaries:
            if line.startswith(boundary):
                reached.append(boundary)
                if _seen(spark, out) != first:
                    inconsistent.append(boundary)

    write_outputs(spark, tables, str(out), txn_app_id=None, txn_version=None, progress=look)
    assert reached == boundaries
    # after the last table, before the report: the helpers read the same run, sql's views
    # and pending's tables
    seqs = run_query(
        spark,
        str(out),
        "SELECT DISTINCT as_of_seq FROM pel UNION SELECT DISTINCT as_of_seq FROM groups "
        "UNION SELECT DISTINCT as_of_seq FROM streams",
    ).rows
    assert seqs == [(first_seq,)]
    snapshot = read_snapshot(spark, str(out))
    assert snapshot.groups.count() == len(first["groups"])
    print(f"looked at {len(boundaries)} boundaries: {boundaries}; inconsistent: {inconsistent}")
    assert inconsistent == []
    # the tables themselves did move: a reader of the latest versions would mix runs
    # (delta-spark commits nothing for an empty table overwritten with no rows)
    latest = {name: storage.table_version(spark, str(out / name)) for name in TABLES}
    recorded = storage.run_versions(str(out))
    moved = {
        n: latest[n] > v
        for n, v in recorded.items()
        if storage.table_row_count(spark, str(out / n))
    }
    assert moved and all(moved.values()), (latest, recorded)
    run_reconstruct(spark, str(events), str(out))
    assert _seen(spark, out) == second
