"""One output root, both stores: written by one, continued by the other, state included.

A user may run nights with delta-spark (Databricks, a cluster with delta-spark's
jars) and, on another day, with the embedded delta-rs store (a laptop, a machine
without the jars), or the other way round. The tables and the state under one
root are Delta tables either store reads and continues: nights alternate stores here, and the
root must equal one full run over the same events. The delta-spark nights run in this
process's delta-spark session; the embedded ones through the CLI (``cli.run``) in a process
of their own on the embedded store (PELENGINE_STORE=embedded).

Suite time (issue #31): the module's embedded CLI runs (both tests') share one process,
started once for the module: its session is built once, each run reads what the run
before it wrote from disk (the delta-spark night between them runs in this process). One
JVM and one session start instead of three: a new process per run proves nothing more
about a root's continuation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pelengine import cli, storage
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA
from pelengine.settings import Settings
from pelengine.synth import generate_events
from tests.processes import tail
from tests.runs.test_incremental import assert_tables_equal

pytestmark = [pytest.mark.spark, pytest.mark.delta_spark]

#: the line prefix of an answer of the embedded process (Spark may print to stdout too)
ANSWER = "pelengine-cli-answer: "
#: the embedded process: one session on the store PELENGINE_STORE names (the CLI's own
#: build), then each stdin line a CLI argv (JSON) run in it, answered on stdout with
#: [exit code, stdout, stderr]
EMBEDDED_PROCESS = f"""
import contextlib, io, json, sys
from pelengine import cli, storage
from pelengine.settings import load_config
from pelengine.session import build_session, stop_session

spark = build_session(load_config())
print({ANSWER!r} + json.dumps(storage.storage_mode(spark)), flush=True)
for line in sys.stdin:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.run(json.loads(line), spark=spark)
    print({ANSWER!r} + json.dumps([code, out.getvalue(), err.getvalue()]), flush=True)
stop_session(spark)
cli.exit_process(0)  # as the console script leaves: no finalization, where delta-rs may abort
"""


class EmbeddedCLI:
    """The CLI on the embedded store, in a process of its own (see the module docstring)."""

    def __init__(self, log: Path) -> None:
        env = {**os.environ, "PELENGINE_STORE": "embedded", "PYSPARK_PYTHON": sys.executable}
        self.log = log
        with open(log, "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", EMBEDDED_PROCESS],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
            )
        self.mode: str | None = None

    def _answer(self) -> Any:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(ANSWER):
                return json.loads(line.removeprefix(ANSWER))
        pytest.fail(f"the embedded process exited ({self.proc.wait()}):\n{tail(self.log)}")

    def run(self, *argv: str) -> tuple[int, str, str]:
        """``pelengine ARGV`` on the embedded store: (exit code, stdout, stderr)."""
        if self.mode is None:
            self.mode = self._answer()
        assert self.mode == "embedded", self.mode
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        code, out, err = self._answer()
        return code, out, err

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCLI]:
    """The module's embedded CLI process, started at once (its JVM starts while the test
    prepares its events), stopped at the end."""
    process = EmbeddedCLI(tmp_path_factory.mktemp("embedded") / "embedded.log")
    try:
        yield process
    finally:
        process.stop()


def _night(embedded: EmbeddedCLI, events: Path, out: Path) -> dict[str, Any]:
    """`pelengine reconstruct --incremental` on the embedded store."""
    argv = ["reconstruct", "--incremental", "--events", str(events), "--out", str(out)]
    code, _, err = embedded.run(*argv, "--json")
    assert code == cli.EXIT_OK, err[-3000:]
    report = json.loads((out / storage.RUN_REPORT).read_text())
    assert report["storage"] == "embedded", report["storage_reason"]
    return report


def test_a_root_written_by_one_store_is_continued_by_the_other(
    spark: SparkSession, tmp_path: Path, embedded: EmbeddedCLI
) -> None:
    """Embedded, delta-spark, embedded: each night continues the state the other store
    saved. The full run to compare with has ``deletion_vectors`` off: none of the tables
    nights merge into gets them (with them on, the next test)."""
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
            report = _night(embedded, events, out)
        modes.append((store, report["incremental"]["mode"]))
    print(f"nights: {modes}")
    assert modes == [
        ("embedded", "full"),
        ("delta-spark", "incremental"),
        ("embedded", "incremental"),
    ]
    # delta-spark, in this process
    run_reconstruct(spark, str(events), str(full), Settings(deletion_vectors=False))
    assert_tables_equal(spark, out, full)
    for name in ("delivery_counts", "pel_history"):
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{full / name}`").first()
        assert "deletionVectors" not in detail["tableFeatures"], name


def test_deletion_vectors_keep_a_root_to_delta_spark(
    spark: SparkSession, tmp_path: Path, embedded: EmbeddedCLI
) -> None:
    """delta-spark gives the tables nights merge into deletion vectors (the default), which
    delta-rs cannot write: an embedded night on that root is refused in one sentence before
    any work, and leaves it as it was. With ``deletion_vectors`` off no table gets them
    (a root without them, both stores continue: the test above, whose full run has them
    off)."""
    rows = list(generate_events(600, 4, seed=43))
    events = tmp_path / "events"
    storage.write_table(spark.createDataFrame(rows[:400], EVENTS_SCHEMA), str(events), "overwrite")
    kept = tmp_path / "kept"
    run_reconstruct(spark, str(events), str(kept), Settings(incremental=True))
    for name in ("delivery_counts", "pel_history", "_state"):
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{kept / name}`").first()
        assert detail["properties"].get("delta.enableDeletionVectors") == "true", name
        assert "deletionVectors" in detail["tableFeatures"], name
    storage.write_table(spark.createDataFrame(rows[400:], EVENTS_SCHEMA), str(events), "append")

    before = storage.newest_run(spark, str(kept))
    argv = ["reconstruct", "--incremental", "--events", str(events), "--out", str(kept)]
    code, _, err = embedded.run(*argv)
    assert code == cli.EXIT_FAILED, err[-3000:]
    assert "has deletion vectors" in err and "continue this output with delta-spark" in err, err[
        -3000:
    ]
    assert "Traceback" not in err
    assert storage.newest_run(spark, str(kept)) == before
