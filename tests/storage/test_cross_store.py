"""One output root, both stores: written by one, continued by the other, state included.

A user may run nights with delta-spark (Databricks, a cluster with delta-spark's
jars) and, on another day, with the embedded delta-rs store (a laptop, a machine
without the jars), or the other way round. The tables and the state under one
root are Delta tables either store reads and continues: nights alternate stores here, and the
root must equal one full run over the same events. The embedded nights run through the real
CLI (a process each, the store chosen by PELENGINE_STORE), the delta-spark night in this
process's delta-spark session.
"""

from __future__ import annotations

import json
import os
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
from pelengine.synth import generate_events
from tests.runs.test_incremental import assert_tables_equal

pytestmark = [pytest.mark.spark, pytest.mark.delta_spark]


def _night(store: str, events: Path, out: Path) -> dict[str, Any]:
    """`pelengine reconstruct --incremental` in its own process, on ``store``."""
    cli = str(Path(sys.executable).with_name("pelengine"))
    env = {**os.environ, "PELENGINE_STORE": store, "PYSPARK_PYTHON": sys.executable}
    argv = [cli, "reconstruct", "--incremental", "--events", str(events), "--out", str(out)]
    done = subprocess.run(
        [*argv, "--json"], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / storage.RUN_REPORT).read_text())
    assert report["storage"] == store, report["storage_reason"]
    return report


def test_a_root_written_by_one_store_is_continued_by_the_other(
    spark: SparkSession, tmp_path: Path
) -> None:
    rows = list(generate_events(900, 5, seed=41))
    cuts = [0, 400, 650, len(rows)]
    events, out, full = tmp_path / "events", tmp_path / "out", tmp_path / "full"
    modes = []
    for night, store in enumerate(("embedded", "delta-spark", "embedded")):
        part = spark.createDataFrame(rows[cuts[night] : cuts[night + 1]], EVENTS_SCHEMA)
        storage.write_table(part, str(events), "append" if night else "overwrite")
        if store == "delta-spark":
            report = run_reconstruct(spark, str(events), str(out), Settings(incremental=True))
            assert report["storage"] == store
        else:
            report = _night(store, events, out)
        modes.append((store, report["incremental"]["mode"]))
    print(f"nights: {modes}")
    assert modes == [
        ("embedded", "full"),
        ("delta-spark", "incremental"),
        ("embedded", "incremental"),
    ]
    run_reconstruct(spark, str(events), str(full))  # delta-spark, in this process
    assert_tables_equal(spark, out, full)


def test_deletion_vectors_keep_a_root_to_delta_spark(spark: SparkSession, tmp_path: Path) -> None:
    """delta-spark gives the tables nights merge into deletion vectors (the default), which
    delta-rs cannot write: an embedded night on that root is refused in one sentence before
    any work, and leaves it as it was. With ``deletion_vectors`` off no table gets them
    (a root without them, both stores continue: the test above)."""
    rows = list(generate_events(600, 4, seed=43))
    events = tmp_path / "events"
    storage.write_table(spark.createDataFrame(rows[:400], EVENTS_SCHEMA), str(events), "overwrite")
    kept, plain = tmp_path / "kept", tmp_path / "plain"
    run_reconstruct(spark, str(events), str(kept), Settings(incremental=True))
    run_reconstruct(spark, str(events), str(plain), Settings(deletion_vectors=False))
    for name in ("delivery_counts", "pel_history", "_state"):
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{kept / name}`").first()
        assert detail["properties"].get("delta.enableDeletionVectors") == "true", name
        assert "deletionVectors" in detail["tableFeatures"], name
    for name in ("delivery_counts", "pel_history"):
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{plain / name}`").first()
        assert "deletionVectors" not in detail["tableFeatures"], name
    storage.write_table(spark.createDataFrame(rows[400:], EVENTS_SCHEMA), str(events), "append")

    before = storage.newest_run(spark, str(kept))
    cli = str(Path(sys.executable).with_name("pelengine"))
    env = {**os.environ, "PELENGINE_STORE": "embedded", "PYSPARK_PYTHON": sys.executable}
    argv = [cli, "reconstruct", "--incremental", "--events", str(events), "--out", str(kept)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "has deletion vectors" in done.stderr and "continue this output with delta-spark" in (
        done.stderr
    ), done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert storage.newest_run(spark, str(kept)) == before
