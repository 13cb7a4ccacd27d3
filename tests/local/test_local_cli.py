"""``pelengine reconstruct --runner local`` as a user runs it: a CLI child whose environment
has no ``java`` at all (a Spark session could not start) writes every table, the report
and the ``_runs`` row, and the readers of the Spark runner read them; what the local
runner does not make is refused before any work, in one sentence."""

from __future__ import annotations

import json
import shutil
import signal
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
from tests.processes import killed_at


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


def test_cli_nights_without_java_continue_the_state(tmp_path: Path) -> None:
    """Two nights as a user runs them (``--runner local --incremental``, a child with no
    ``java``): the first replays everything and saves the state, the second only the new
    rows; the readers' ``_runs`` row names the state's version."""
    log = _log(41, 500).to_pylist()
    events, out = tmp_path / "events", tmp_path / "out"
    argv = ("reconstruct", "--events", str(events), "--out", str(out), "--runner", "local")
    reports = []
    for first, rows in ((True, log[:350]), (False, log[350:])):
        sessionless.write_arrow(
            pa.Table.from_pylist(rows, schema=EVENTS_ARROW),
            str(events),
            EVENTS_SCHEMA,
            "overwrite" if first else "append",
        )
        done = _local_cli(*argv, "--incremental", "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        reports.append(json.loads(done.stdout))
    modes = [r["incremental"]["mode"] for r in reports]
    assert modes == ["full", "incremental"], modes
    assert all((r["runner"], r["spark_jobs"]) == ("local", 0) for r in reports)
    assert reports[1]["incremental"]["read"]["rows_new"] == len(log) - 350
    assert reports[1]["tables"]["_state"] == sessionless.table_version(str(out / "_state"))


@pytest.mark.parametrize(
    ("extra", "said"),
    [
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


@pytest.mark.spark
def test_a_killed_local_run_leaves_the_last_run_readable_and_a_rerun_completes_it(
    spark: Any, tmp_path: Path
) -> None:
    """A local run killed (SIGKILL) once its first table is committed and before its
    ``_runs`` row: every table still opens at its latest version, the readers (pinned to
    the run record) see the previous run alone, and the next run takes over the dead
    run's lease and leaves tables equal to an uninterrupted run's."""
    from pelengine import storage
    from pelengine.runs.local import run_local
    from tests.frames import assert_same_rows

    rows = _log(47, 20_000).to_pylist()
    cut = len(rows) * 2 // 3
    events, out, reference = tmp_path / "events", tmp_path / "out", tmp_path / "reference"

    def write_events(part: list[dict[str, Any]], mode: str) -> None:
        table = pa.Table.from_pylist(part, schema=EVENTS_ARROW)
        sessionless.write_arrow(table, str(events), EVENTS_SCHEMA, mode)

    write_events(rows[:cut], "overwrite")
    first = run_local(str(events), str(out))
    write_events(rows[cut:], "append")
    shutil.copytree(out, reference)
    uninterrupted = run_local(str(events), str(reference))
    assert uninterrupted["as_of_seq"] > first["as_of_seq"]

    env = _no_jvm_env()
    env.pop("PELENGINE_STORE")
    argv = [str(Path(sys.executable).with_name("pelengine")), "reconstruct", "--runner"]
    argv += ["local", "--events", str(events), "--out", str(out)]
    code, seen = killed_at(argv, "wrote ", env)
    assert code == -signal.SIGKILL, f"the run ended before its first table ({code}): {seen[-5:]}"

    tables = (*OUTPUT_TABLES, "rejected_events")
    for name in tables:  # delta-rs, not our reader: each table opens at its latest version
        delta_rs_table(out / name)
    recorded = storage.run_versions(str(out), spark)
    assert recorded == first["tables"], "the killed run wrote no _runs row"
    moved = [t for t in tables if (storage.table_version(spark, str(out / t)) or 0) > recorded[t]]
    assert moved, "the kill came before any table was committed: it tested nothing"
    newest = storage.newest_run(spark, out)
    assert newest is not None and newest["as_of_seq"] == first["as_of_seq"]
    for name in ("pel", "ownership", "groups", "streams"):
        df = storage.read_output_table(spark, str(out), name, newest["tables"])
        seen_as_of = {r[0] for r in df.select("as_of_seq").distinct().collect()}
        assert seen_as_of <= {first["as_of_seq"]}, f"{name}: readers mix runs: {seen_as_of}"
    print(f"killed after {moved} were committed; readers see run 1 alone")

    rerun = run_local(str(events), str(out))
    assert rerun["as_of_seq"] == uninterrupted["as_of_seq"]
    for name in tables:
        assert_same_rows(delta_rs_table(out / name), delta_rs_table(reference / name), what=name)
    assert storage.run_versions(str(out), spark) == rerun["tables"]
