"""A nightly run killed with SIGKILL leaves readable tables and completes on re-run.

Night 1 runs in-process. Night 2 then runs as the real CLI in a child process
(``pelengine reconstruct --incremental``) and is killed with SIGKILL as soon as its
progress line shows the step of the list: by default the state write, the commit point
(every other table of the night already committed, which the test checks: each one's
latest version is past the one the run record names, so the re-run must skip the
snapshot tables' writes and put the history tables back). PELENGINE_KILL_AT names the
steps instead, killing one child per step on the same output (e.g. "writing
groups,writing the state": a kill between two table writes, then one at the commit point
over what it left; "replaying through": before any write). The default list has one
step to keep the suite's time (each step is a JVM and a replay of night 2): the readers
at a boundary between two table writes are tested in-process, on the same stores, by
test_whole_runs.py, which stops a run at every write boundary of a run's tables (a full
run's), and at the commit point every table of the night but the state has moved, the
most a reader could mix.
After every kill each table under the output root must open and read at its latest
Delta version (delta-rs, not our reader), and the readers (``read_output_table`` at the
versions of the last complete run) must see one run: night 1. Finally an in-process
re-run completes the night, and every table must equal an uninterrupted night 2 (run
in-process on its own copy of night 1 while the first child starts and replays).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, STATE_TABLE
from pelengine.settings import Settings
from pelengine.storage import write_table
from pelengine.synth import generate_events
from tests.delta_rs import delta_rs_table
from tests.processes import killed_at
from tests.runs.test_incremental import TABLES, _with_blocking, assert_tables_equal

# on both stores: make test runs it on delta-spark, then on the embedded store
pytestmark = [pytest.mark.spark, pytest.mark.stores]

KILL_AT = os.environ.get("PELENGINE_KILL_AT", "writing the state").split(",")
CLI = str(Path(sys.executable).with_name("pelengine"))


@pytest.fixture(scope="module")
def nights(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The events of two nights and the output after night 1."""
    root = tmp_path_factory.mktemp("crash")
    rows = _with_blocking(list(generate_events(1200, 5, seed=31)), 31)
    cut = len(rows) * 2 // 3
    events, night1 = root / "events", root / "night1"
    write_table(spark.createDataFrame(rows[:cut], EVENTS_SCHEMA), str(events), "overwrite")
    run_reconstruct(spark, str(events), str(night1), Settings(incremental=True))
    write_table(spark.createDataFrame(rows[cut:], EVENTS_SCHEMA), str(events), "append")
    return {"events": events, "night1": night1, "root": root}


def _readable(out: Path) -> dict[str, int]:
    """Every table opens and reads at its latest version (delta-rs, not our reader)."""
    rows = {}
    for name in TABLES:
        rows[name] = delta_rs_table(out / name).num_rows
    return rows


def _as_of_seen(spark: SparkSession, out: Path) -> set[int]:
    """The snapshot moments (``as_of_seq``) the readers see across the snapshot tables
    and the run record: one run gives one."""
    newest = storage.newest_run(spark, out)
    assert newest is not None
    run = newest["tables"]
    seen: set[int] = {newest["as_of_seq"]}
    for name in ("pel", "ownership", "groups", "streams"):
        df = storage.read_output_table(spark, str(out), name, run)
        seen |= {r[0] for r in df.select("as_of_seq").distinct().collect()}
    return seen


def _moved(spark: SparkSession, out: Path) -> dict[str, bool]:
    """For each table with rows: whether its latest version is past the run record's."""
    recorded = storage.run_versions(str(out), spark)
    return {
        name: (storage.table_version(spark, str(out / name)) or 0) > version
        for name, version in recorded.items()
        if storage.table_row_count(spark, str(out / name))
    }


def test_killed_nights_complete_on_rerun(spark: SparkSession, nights: dict[str, Path]) -> None:
    out, reference = nights["root"] / "killed", nights["root"] / "reference"
    shutil.copytree(nights["night1"], out)
    shutil.copytree(nights["night1"], reference)
    argv = [CLI, "reconstruct", "--events", str(nights["events"]), "--out", str(out)]
    argv += ["--incremental"]
    night1_seq = _as_of_seen(spark, out).pop()
    for n, marker in enumerate(KILL_AT):
        with ThreadPoolExecutor(1) as pool:
            child = pool.submit(killed_at, argv, marker)
            if n == 0:  # the uninterrupted night 2, while the first child starts and replays
                done = run_reconstruct(
                    spark, str(nights["events"]), str(reference), Settings(incremental=True)
                )
                assert done["incremental"]["mode"] == "incremental"
            code, seen = child.result()
        assert code == -signal.SIGKILL, f"the run ended before '{marker}' ({code}): {seen[-5:]}"
        rows = _readable(out)
        as_of = _as_of_seen(spark, out)
        moved = _moved(spark, out)
        print(
            f"killed at '{marker}': every table readable, rows {rows}; readers see {as_of}; "
            f"tables past the run record: {moved}"
        )
        assert as_of == {night1_seq}, f"readers mix runs after a kill at '{marker}': {as_of}"
        if marker == "writing the state":
            # killed at the commit point: every other table has night 2 committed
            assert {t for t, m in moved.items() if not m} <= {STATE_TABLE}, moved

    report: dict[str, Any] = run_reconstruct(
        spark, str(nights["events"]), str(out), Settings(incremental=True)
    )
    print(f"re-run: mode {report['incremental']['mode']}")
    assert report["incremental"]["mode"] in ("incremental", "up-to-date")
    assert_tables_equal(spark, out, reference)
