"""The job on a real Spark standalone cluster, submitted the way the README says.

A master and a worker (2 cores) start on 127.0.0.1 from the pip-installed Spark; the package
is built with the `make dist` commands (a wheel, copied to a .zip for --py-files) and
`jobs/reconstruct.py` is spark-submitted with the README's flags (section "Running on a
Spark cluster"). Its Python is a virtualenv that has the dependencies but NOT pelengine (as
on a cluster node), so the driver and the executors — which run the embedded `delta` data
source's readers and writers and the replay UDFs — can only import pelengine from the
shipped file. Every output table must equal a local-mode run of the same events.

Marked `cluster` (about a minute): `pytest -m "not cluster"` leaves it out.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark
import pytest
from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.pipeline import ReconstructOptions, reconstruct
from pelengine.spark.generate_io import write_generated_events
from pelengine.spark.schemas import OUTPUT_TABLES

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
EVENTS, KEYS, SEED = 3000, 6, 11
CORES = 2
REGISTER_TIMEOUT_S = 90
SUBMIT_TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_env() -> dict[str, str]:
    """The environment of every Spark process: loopback only, and nothing that would let
    Python find pelengine outside the shipped file (no PYTHONPATH, no PYSPARK_PYTHON)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")
    }
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def _group_alive(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid` (Linux /proc)."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            alive.append(int(entry))
    return alive


def _stop_group(proc: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    """SIGTERM the process group `proc` leads (started in a new session: its pid is the
    group id), then SIGKILL what is left; returns when no process of the group is alive."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader
            if not _group_alive(proc.pid):
                break
            time.sleep(0.2)
        if not _group_alive(proc.pid):
            break
    proc.wait(timeout=10)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} unreadable)"


@dataclass
class Standalone:
    """A running master and worker."""

    url: str
    ui_port: int
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return dict(json.load(r))

    def wait_for_worker(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    pytest.fail(
                        f"a Spark daemon exited with {p.returncode}:\n"
                        + _tail(self.logs / "master.log")
                        + "\n"
                        + _tail(self.logs / "worker.log")
                    )
            try:
                if self.state().get("aliveworkers", 0) >= 1:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        pytest.fail(
            f"no worker registered with {self.url} within {timeout_s} s:\n"
            + _tail(self.logs / "worker.log")
        )


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    """Start a master and a worker (not waiting for them); stop both process groups after
    the test, also when it fails, and check nothing of them is left."""
    logs = tmp_path / "spark-logs"
    logs.mkdir()
    port, ui_port = _free_port(), _free_port()
    cluster = Standalone(f"spark://127.0.0.1:{port}", ui_port, logs)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    env = _spark_env()
    env["SPARK_LOG_DIR"] = str(logs)
    commands = {
        "master": [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui_port),
        ],
        "worker": [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            cluster.url,
            "--cores",
            str(CORES),
            "--memory",
            "2g",
            "--host",
            "127.0.0.1",
            "--webui-port",
            str(_free_port()),
            "--work-dir",
            str(tmp_path / "spark-work"),
        ],
    }
    try:
        for name, command in commands.items():
            with open(logs / f"{name}.log", "wb") as log:
                cluster.procs.append(
                    subprocess.Popen(
                        command,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=env,
                        cwd=tmp_path,
                        start_new_session=True,  # own process group: stopped as one
                    )
                )
        yield cluster
    finally:
        for proc in reversed(cluster.procs):
            _stop_group(proc)
        left = {p.pid: _group_alive(p.pid) for p in cluster.procs if _group_alive(p.pid)}
        assert not left, f"Spark processes still running (process group: pids): {left}"


def build_py_files(tmp_path: Path) -> Path:
    """`make dist` on a copy of the sources: pip builds the wheel, the .zip is the same file
    (Spark puts only .zip/.egg/.jar --py-files on the executors' Python path)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "pelengine", src / "pelengine", ignore=shutil.ignore_patterns("__pycache__")
    )
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--wheel-dir",
            str(dist),
            str(src),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = dist.glob("pelengine-*-py3-none-any.whl")
    pyzip = wheel.with_name(wheel.name.split("-py3-")[0] + ".zip")
    shutil.copy2(wheel, pyzip)
    return pyzip


def node_python(tmp_path: Path) -> Path:
    """A Python like a cluster node's: this venv's packages (pyspark, deltalake, pandas, ...)
    without pelengine. A virtualenv whose one .pth names this venv's site-packages: that
    directory's own .pth files (the editable pelengine install) are not processed.
    Every start is logged, to show the driver and the executors ran it."""
    venv = tmp_path / "node-venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    rel = Path(sysconfig.get_path("purelib")).relative_to(sysconfig.get_path("data"))
    (venv / rel / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    wrapper = venv / "bin" / "node-python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{tmp_path / "node-python.log"}"\n'
        f'exec "{venv / "bin" / "python"}" "$@"\n'
    )
    wrapper.chmod(0o755)
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import pyspark, deltalake, pelengine"],
        capture_output=True,
        text=True,
        env=_spark_env(),
        cwd=venv,  # not the repo: `python -c` puts the working directory on sys.path
        timeout=60,
    )
    assert "No module named 'pelengine'" in probe.stderr, (
        "the node Python must not find pelengine by itself (only pyspark and deltalake): "
        + probe.stderr[-500:]
    )
    return wrapper


def submit_command(master: str, py_files: Path, python: Path, events: str, out: str) -> list[str]:
    """The README's spark-submit line ("Running on a Spark cluster"), this machine's values."""
    return [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master",
        master,
        "--py-files",
        str(py_files),
        "--conf",
        f"spark.pyspark.python={python}",
        "--conf",
        f"spark.sql.shuffle.partitions={2 * CORES}",
        str(REPO / "jobs" / "reconstruct.py"),
        "--events",
        events,
        "--out",
        out,
        "--conf",
        str(REPO / "conf" / "cluster.yaml"),
    ]


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def test_spark_submit_on_a_standalone_cluster_equals_local_mode(
    spark: SparkSession, standalone: Standalone, tmp_path: Path
) -> None:
    laps: dict[str, float] = {}
    clock = time.monotonic()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.monotonic()
        laps[name] = round(now - clock, 1)
        clock = now

    py_files = build_py_files(tmp_path)
    python = node_python(tmp_path)
    lap("build")
    events = str(tmp_path / "events")
    assert write_generated_events(spark, events, EVENTS, KEYS, SEED) == EVENTS
    local = reconstruct(spark, storage.read_table(spark, events), ReconstructOptions())
    expected = {name: _rows(df) for name, df in local.tables.items()}
    expected["rejected_events"] = _rows(local.rejected)
    local.unpersist()
    lap("local run")
    standalone.wait_for_worker(REGISTER_TIMEOUT_S)
    lap("worker wait")
    out = str(tmp_path / "out")
    stdout, stderr = tmp_path / "submit.out", tmp_path / "submit.err"
    with open(stdout, "wb") as so, open(stderr, "wb") as se:
        proc = subprocess.Popen(
            submit_command(standalone.url, py_files, python, events, out),
            stdout=so,
            stderr=se,
            stdin=subprocess.DEVNULL,
            env=_spark_env(),
            cwd=tmp_path,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=SUBMIT_TIMEOUT_S)
        finally:
            _stop_group(proc, grace_s=5.0)
    assert code == 0, f"spark-submit exited with {code}:\n{_tail(stderr, 60)}"
    lap("spark-submit")

    report = json.loads((Path(out) / "_run_report.json").read_text())
    assert report["storage"] == "embedded"
    assert report["output"]["rows"]["pel"] == len(expected["pel"]) > 0
    starts = (tmp_path / "node-python.log").read_text().splitlines()
    assert any("reconstruct.py" in s for s in starts), "the driver did not run the node Python"
    assert any("pyspark.daemon" in s for s in starts), "executors did not run the node Python"
    app_dirs = list((tmp_path / "spark-work").glob("app-*/0"))
    assert app_dirs, "no executor ran on the standalone worker"
    assert any((d / py_files.name).exists() for d in app_dirs), "the .zip was not shipped"
    for name in (*OUTPUT_TABLES, "rejected_events"):
        got = _rows(storage.read_table(spark, os.path.join(out, name)))
        assert got == expected[name], f"{name}: cluster run differs from local mode"
    lap("compare")
    print(f"cluster test timings (s): {laps}")
