"""``pelengine reconstruct --runner local`` as a user runs it: a CLI child whose environment
has no ``java`` at all (a Spark session could not start) writes every table, the report
and the ``_runs`` row, and the readers of the Spark runner read them; what the local
runner does not make is refused before any work, in one sentence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pelengine.cli import run
from pelengine.schemas import EVENTS_SCHEMA, OUTPUT_TABLES
from pelengine.storage import sessionless
from tests.delta_rs import delta_rs_table
from tests.ingest.test_sessionless import _no_jvm_env
from tests.local.test_runners_equal import EVENTS_ARROW, _log


def _local_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = _no_jvm_env()
    env.pop("PELENGINE_STORE")  # the local runner needs no store choice: it has no session
    return subprocess.run(
        [str(Path(sys.executable).with_name("pelengine")), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.spark
def test_a_cli_run_without_java_writes_what_the_readers_read(spark: Any, tmp_path: Path) -> None:
    from pelengine.storage import run_versions

    events = tmp_path / "events"
    sessionless.write_arrow(
        pa.Table.from_pylist(_log(41, 500).to_pylist(), schema=EVENTS_ARROW),
        str(events),
        EVENTS_SCHEMA,
        "overwrite",
    )
    out = tmp_path / "out"
    done = _local_cli(
        "reconstruct", "--events", str(events), "--out", str(out), "--runner", "local", "--json"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the local runner: no Spark session" in done.stderr
    report = json.loads(done.stdout)
    assert (report["runner"], report["storage"], report["spark_jobs"]) == ("local", "embedded", 0)
    for name in (*OUTPUT_TABLES, "rejected_events"):
        assert delta_rs_table(out / name).num_rows == report["output"]["rows"][name], name
    # the Spark runner's readers pin to the run record the local run left
    assert run_versions(str(out), spark) == report["tables"]
    assert json.loads((out / "_run_report.json").read_text())["run_id"] == report["run_id"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--incremental"], "--runner local makes full runs"),
        (["--schema", "redis"], "--runner local writes tables by path"),
    ],
)
def test_what_the_local_runner_does_not_make_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    events = tmp_path / "events"
    events.mkdir()
    argv = ["reconstruct", "--events", str(events), "--out", str(tmp_path / "o"), *extra]
    assert run([*argv, "--runner", "local"]) == 2
    assert said in capsys.readouterr().err


def test_an_unknown_runner_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["reconstruct", "--events", str(tmp_path), "--out", str(tmp_path / "o")]
    assert run([*argv, "--runner", "dask"]) == 2
    err = capsys.readouterr().err
    assert "--runner" in err and "spark, local" in err
