"""Readers see whole runs: a run stopped at any write boundary leaves every reader
(``read_output_table``, ``sql``, ``pending``, ``summary``) on the last complete run.

Delta commits one table at a time, so between two table writes the tables' latest
versions mix two runs. The run report, written last, names each table's version and
the readers read those. Run 2 runs on run 1's output, and at every boundary of its
writes it looks at the readers: a kill there leaves the tables as
they are at that moment (the SIGKILL version is in test_crash.py, a real process killed
at a night's commit point; here the callback looks at each boundary of one run, so that
the boundaries cost neither a replay nor a write each). The tables are written several
at once on delta-spark, so the boundaries are after each table's write, in whatever
order they come, and just before the run record. At every boundary the run record still
names run 1's versions, and the table that has just moved, read by the readers, gives
run 1 exactly; before the run record, when every table has moved, every table and every
reader gives run 1 exactly (a Delta version's rows never change, so
the tables that moved earlier read there as they read at their own boundary). The run
then completes, and the readers give run 2: the newest version of every table.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.read.pending import read_snapshot
from pelengine.read.query import run_query
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, OUTPUT_TABLES
from pelengine.synth import generate_events

# on both stores: make test runs it on delta-spark, then on the embedded store
pytestmark = [pytest.mark.spark, pytest.mark.stores]

TABLES = (*OUTPUT_TABLES, "rejected_events")


def _seen(
    spark: SparkSession,
    out: Path,
    names: tuple[str, ...] = TABLES,
    run: dict[str, int] | None = None,
) -> dict[str, list[tuple]]:
    """Every table of ``names`` as the readers give it (at the versions of ``run``, by
    default the run record's), rows sorted."""
    run = storage.run_versions(str(out), spark) if run is None else run
    return {
        name: sorted(
            (tuple(r) for r in storage.read_output_table(spark, str(out), name, run).collect()),
            key=repr,
        )
        for name in names
    }


def test_a_run_stopped_at_any_write_boundary_is_never_seen(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = list(generate_events(400, 3, seed=19))
    cut = len(rows) // 2
    events, out = tmp_path / "events", tmp_path / "out"
    storage.write_table(spark.createDataFrame(rows[:cut], EVENTS_SCHEMA), str(events))
    first_seq = run_reconstruct(spark, str(events), str(out))["as_of_seq"]
    first = _seen(spark, out)
    recorded = storage.run_versions(str(out), spark)
    assert set(recorded) >= set(TABLES), recorded
    storage.write_table(spark.createDataFrame(rows[cut:], EVENTS_SCHEMA), str(events), "append")

    # run 2's boundaries: after each table's write (the tables are written several at
    # once on delta-spark, so in any order), and after the last one, when every table
    # has moved, just before the run record is written
    last = "before the run record"
    boundaries = {f"wrote {name}:": name for name in TABLES}
    reached: list[str] = []
    inconsistent: list[str] = []
    moved: dict[str, bool] = {}

    def check(boundary: str, names: tuple[str, ...]) -> None:
        reached.append(boundary)
        run = storage.run_versions(str(out), spark)  # what the readers read
        if run != recorded or _seen(spark, out, names, run) != {n: first[n] for n in names}:
            inconsistent.append(boundary)

    def look(line: str) -> None:
        for boundary, just_written in boundaries.items():
            if line.startswith(boundary):
                check(boundary, (just_written,))

    def before_the_record(*args: object, **kwargs: object) -> None:
        check(last, TABLES)
        # the helpers read the same run, sql's views and pending's tables
        seqs = run_query(
            spark,
            str(out),
            "SELECT DISTINCT as_of_seq FROM pel UNION SELECT DISTINCT as_of_seq "
            "FROM groups UNION SELECT DISTINCT as_of_seq FROM streams",
        ).rows
        if seqs != [(first_seq,)] or read_snapshot(spark, str(out)).groups.count() != len(
            first["groups"]
        ):
            inconsistent.append(f"{last} (sql, pending)")
        # the tables themselves did move: a reader of the latest versions would mix runs
        # (delta-spark commits nothing for an empty table overwritten with no rows)
        moved.update(
            {
                n: (storage.table_version(spark, str(out / n)) or 0) > recorded[n]
                for n in TABLES
                if storage.table_row_count(spark, str(out / n))
            }
        )
        record_run(*args, **kwargs)

    record_run = storage.record_run
    monkeypatch.setattr(storage, "record_run", before_the_record)
    second_seq = run_reconstruct(spark, str(events), str(out), progress=look)["as_of_seq"]
    print(f"looked at {len(reached)} boundaries: {reached}; inconsistent: {inconsistent}")
    assert sorted(reached) == sorted([*boundaries, last])
    assert inconsistent == []
    assert moved and all(moved.values()), (moved, recorded)
    # complete: the readers give run 2, the newest version of every table
    assert second_seq == max(r["seq"] for r in rows) != first_seq
    latest = {n: storage.table_version(spark, str(out / n)) for n in TABLES}
    assert {n: v for n, v in storage.run_versions(str(out), spark).items() if n in TABLES} == latest
    second = _seen(spark, out)
    assert first["groups"] != second["groups"]  # the runs differ where a reader can tell
