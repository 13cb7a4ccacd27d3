"""Two runs on one output never interleave: the second fails at once, naming the first
(the run lease, docs/nightly.md "One writer per output"), on either store. Catalog tables
without a root have no lease: there Delta Lake's own conflict stops the later commit
(tests/storage/test_catalog_tables.py, two writers of a table by name)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA
from pelengine.storage import RunInProgressError
from pelengine.storage.lease import LEASE, run_lease
from pelengine.synth import generate_events
from tests.runs.test_whole_runs import _seen

pytestmark = [pytest.mark.spark, pytest.mark.stores]  # both stores (make test)


def test_two_runs_on_one_output_never_interleave(spark: SparkSession, tmp_path: Path) -> None:
    """A second run started while the first writes fails at once, naming the first; the
    first completes as if alone (its tables equal a run alone on another output, made
    in-process while the first finishes), and gives the lease back when it ends (a run
    after it takes it)."""
    rows = list(generate_events(400, 3, seed=23))
    events, out, solo = tmp_path / "events", tmp_path / "out", tmp_path / "solo"
    storage.write_table(spark.createDataFrame(rows, EVENTS_SCHEMA), str(events))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    cli = str(Path(sys.executable).with_name("pelengine"))
    first = subprocess.Popen(
        [cli, "reconstruct", "--events", str(events), "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert first.stderr is not None
    seen = []
    for line in first.stderr:  # the first run holds the lease once it reads the events
        seen.append(line)
        if "reading events from" in line:
            break
    with pytest.raises(RunInProgressError) as caught:
        run_reconstruct(spark, str(events), str(out))
    message = str(caught.value)
    print(f"the second run: {message}")
    assert f"pid {first.pid}" in message and str(out) in message
    with ThreadPoolExecutor(1) as pool:  # the first's stderr read on while the solo run runs
        rest = pool.submit(first.stderr.read)
        run_reconstruct(spark, str(events), str(solo))
        seen += rest.result().splitlines()
    assert first.wait(timeout=300) == 0, seen[-5:]
    assert _seen(spark, out) == _seen(spark, solo)
    assert not (out / LEASE).exists()  # given back, not left for a stale takeover
    with run_lease(str(out), "reconstruct") as mine:  # what a run after it does first
        assert mine is not None and mine["pid"] == os.getpid()
