"""A nightly run killed with SIGKILL leaves readable tables and completes on re-run.

Night 1 runs in-process. Night 2 then runs as the real CLI in a child process
(``pelengine reconstruct --incremental``), again and again on the same output,
each time killed with SIGKILL as soon as its progress line shows the next step
of the list: between two table writes, during the state write (the commit
point); PELENGINE_KILL_AT adds more (e.g. "replaying through", a kill before any
write, left out of the default list to keep the suite's time). After every kill
each table under the output root must open and read at its latest Delta
version (delta-rs, not our reader).
After every kill the readers (``read_output_table`` at the versions of the last
complete run) must also see one run: night 1 (test_whole_runs.py stops a run at every
write boundary). Finally an in-process re-run completes the night, and every table must equal
an uninterrupted night 2.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA
from pelengine.settings import Settings
from pelengine.storage import write_table
from pelengine.synth import generate_events
from tests.delta_rs import delta_rs_table
from tests.runs.test_incremental import TABLES, _with_blocking, assert_tables_equal

# on both stores: make test runs it on delta-spark, then on the embedded store
pytestmark = [pytest.mark.spark, pytest.mark.stores]

KILL_AT = os.environ.get("PELENGINE_KILL_AT", "writing groups,writing the state").split(",")
CLI = str(Path(sys.executable).with_name("pelengine"))


@pytest.fixture(scope="module")
def nights(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Events of two nights, the output after night 1, and an uninterrupted night 2."""
    root = tmp_path_factory.mktemp("crash")
    rows = _with_blocking(list(generate_events(1200, 5, seed=31)), 31)
    cut = len(rows) * 2 // 3
    events, night1, reference = root / "events", root / "night1", root / "reference"
    write_table(spark.createDataFrame(rows[:cut], EVENTS_SCHEMA), str(events), "overwrite")
    run_reconstruct(spark, str(events), str(night1), Settings(incremental=True))
    write_table(spark.createDataFrame(rows[cut:], EVENTS_SCHEMA), str(events), "append")
    shutil.copytree(night1, reference)
    report = run_reconstruct(spark, str(events), str(reference), Settings(incremental=True))
    assert report["incremental"]["mode"] == "incremental"
    return {"events": events, "night1": night1, "reference": reference, "root": root}


def _kill_when(argv: list[str], marker: str) -> tuple[int, list[str]]:
    """Run ``argv``; SIGKILL it once a stderr line contains ``marker``."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    seen: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line.rstrip())
        if line.startswith("pelengine:") and marker in line:
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.stderr.close()
    return proc.wait(timeout=120), seen


def _readable(out: Path) -> dict[str, int]:
    """Every table opens and reads at its latest version (delta-rs, not our reader)."""
    rows = {}
    for name in TABLES:
        rows[name] = delta_rs_table(out / name).num_rows
    return rows


def _as_of_seen(spark: SparkSession, out: Path) -> set[int]:
    """The snapshot moments (``as_of_seq``) the readers see across the snapshot tables
    and the run record: one run gives one."""
    newest = storage.newest_run(spark, str(out))
    assert newest is not None
    run = newest["tables"]
    seen: set[int] = {newest["as_of_seq"]}
    for name in ("pel", "ownership", "groups", "streams"):
        df = storage.read_output_table(spark, str(out), name, run)
        seen |= {r[0] for r in df.select("as_of_seq").distinct().collect()}
    return seen


def test_killed_nights_complete_on_rerun(spark: SparkSession, nights: dict[str, Path]) -> None:
    out = nights["root"] / "killed"
    shutil.copytree(nights["night1"], out)
    argv = [CLI, "reconstruct", "--events", str(nights["events"]), "--out", str(out)]
    night1_seq = _as_of_seen(spark, out).pop()
    for marker in KILL_AT:
        code, seen = _kill_when([*argv, "--incremental"], marker)
        assert code == -signal.SIGKILL, f"the run ended before '{marker}' ({code}): {seen[-5:]}"
        rows = _readable(out)
        seen = _as_of_seen(spark, out)
        print(f"killed at '{marker}': every table readable, rows {rows}; readers see {seen}")
        assert seen == {night1_seq}, f"readers mix runs after a kill at '{marker}': {seen}"

    report: dict[str, Any] = run_reconstruct(
        spark, str(nights["events"]), str(out), Settings(incremental=True)
    )
    print(f"re-run: mode {report['incremental']['mode']}")
    assert report["incremental"]["mode"] in ("incremental", "up-to-date")
    assert_tables_equal(spark, out, nights["reference"])
