"""The job on a real Spark standalone cluster, submitted the way the README says.

A master and a worker (2 cores) start on 127.0.0.1 from the pip-installed Spark; the package
is built with the `make dist` commands (a wheel, copied to a .zip for --py-files) and
`jobs/reconstruct.py` is spark-submitted with the README's flags (section "Running on a
Spark cluster"). Its Python is a virtualenv that has the dependencies but NOT pelengine (as
on a cluster node), so the driver and the executors — which run the embedded `delta` data
source's readers and writers and the replay UDFs — can only import pelengine from the
shipped file. Every output table must equal a local-mode run of the same events. It runs
on both stores: with delta-spark's jars given by `--jars` (delta-spark on the driver and
the executors), and without them (the embedded store's writers on the executors).

Marked `cluster` (about a minute): `pytest -m "not cluster"` leaves it out.
"""

from __future__ import annotations

import json
import os
import shutil
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
from pelengine.pipeline.reconstruct import reconstruct
from pelengine.runs.generate import write_generated_events
from pelengine.schemas import OUTPUT_TABLES
from pelengine.settings import Settings
from pelengine.storage.jars import DELTA_CATALOG, DELTA_EXTENSION
from tests.conftest import STORE
from tests.delta_rs import delta_rs_table
from tests.processes import free_port, group_alive, start_wheel_build, stop_group, tail

# on delta-spark (--jars) in make test's first pass, on the embedded store in its second
# the cluster recipe ships delta-spark's jars (--jars): its embedded repeat only with
# PELENGINE_TEST_HEAVY=1
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.spark,
    pytest.mark.stores,
    pytest.mark.heavy("embedded"),
]

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
EVENTS, KEYS, SEED = 2000, 6, 11
CORES = 2
REGISTER_TIMEOUT_S = 90
SUBMIT_TIMEOUT_S = 300


# Short-lived JVMs on a small machine: the C1 compiler only and the serial collector cost
# far less CPU than tiered compilation and G1's threads. The cluster's own defaults (like a
# real cluster's spark-defaults.conf), not flags of the documented spark-submit line.
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SPARK_DEFAULTS = f"""\
spark.driver.extraJavaOptions {JVM_OPTS}
spark.executor.extraJavaOptions {JVM_OPTS}
spark.ui.enabled false
"""


def _spark_env(conf_dir: Path | None = None) -> dict[str, str]:
    """The environment of every Spark process: loopback only, and nothing that would let
    Python find pelengine outside the shipped file (no PYTHONPATH, no PYSPARK_PYTHON);
    with `conf_dir`, the cluster's spark-defaults.conf is written there."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")
    }
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    if conf_dir is not None:
        conf_dir.mkdir(exist_ok=True)
        (conf_dir / "spark-defaults.conf").write_text(SPARK_DEFAULTS)
        env["SPARK_CONF_DIR"] = str(conf_dir)
        env["SPARK_DAEMON_JAVA_OPTS"] = JVM_OPTS
    return env


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
                        + tail(self.logs / "master.log")
                        + "\n"
                        + tail(self.logs / "worker.log")
                    )
            try:
                if self.state().get("aliveworkers", 0) >= 1:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        pytest.fail(
            f"no worker registered with {self.url} within {timeout_s} s:\n"
            + tail(self.logs / "worker.log")
        )


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    """Start a master and a worker (not waiting for them); stop both process groups after
    the test, also when it fails, and check nothing of them is left."""
    logs = tmp_path / "spark-logs"
    logs.mkdir()
    port, ui_port = free_port(), free_port()
    cluster = Standalone(f"spark://127.0.0.1:{port}", ui_port, logs)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    env = _spark_env(tmp_path / "spark-conf")
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
            str(free_port()),
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
            stop_group(proc)
        left = {p.pid: group_alive(p.pid) for p in cluster.procs if group_alive(p.pid)}
        assert not left, f"Spark processes still running (process group: pids): {left}"


def finish_build(proc: subprocess.Popen[bytes], dist: Path) -> Path:
    """The .zip for --py-files: the wheel itself under another name (Spark puts only
    .zip/.egg/.jar --py-files on the executors' Python path)."""
    assert proc.wait(timeout=300) == 0, "pip wheel failed"
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


def submit_command(
    master: str, py_files: Path, python: Path, events: str, out: str, native: bool
) -> list[str]:
    """The spark-submit line of docs/deploy.md, this machine's values: with delta-spark
    (``--jars`` of the jars `make install` fetched and the two Delta confs) or without."""
    delta = []
    if native:
        jars = (REPO / "jars" / "lib" / "classpath").read_text().strip()
        delta = [
            "--jars",
            jars,
            "--conf",
            f"spark.sql.extensions={DELTA_EXTENSION}",
            "--conf",
            f"spark.sql.catalog.spark_catalog={DELTA_CATALOG}",
        ]
    return [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master",
        master,
        *delta,
        "--py-files",
        str(py_files),
        "--conf",
        f"spark.pyspark.python={python}",
        "--conf",
        f"spark.sql.shuffle.partitions={CORES}",
        str(REPO / "jobs" / "reconstruct.py"),
        "--events",
        events,
        "--out",
        out,
        "--conf",
        str(REPO / "conf" / "cluster.yaml"),
    ]


def _rows(table: Any) -> list[str]:
    """A pyarrow table's rows, order-free (sorted by their repr)."""
    return sorted(repr(row) for row in table.to_pylist())


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

    # the daemons boot, the wheel builds and the events are written at the same time
    build, dist = start_wheel_build(tmp_path)
    python = node_python(tmp_path)
    events = str(tmp_path / "events")
    assert write_generated_events(spark, events, EVENTS, KEYS, SEED) == EVENTS
    py_files = finish_build(build, dist)
    standalone.wait_for_worker(REGISTER_TIMEOUT_S)
    lap("setup")

    out = str(tmp_path / "out")
    stdout, stderr = tmp_path / "submit.out", tmp_path / "submit.err"
    with open(stdout, "wb") as so, open(stderr, "wb") as se:
        proc = subprocess.Popen(
            submit_command(standalone.url, py_files, python, events, out, STORE == "delta-spark"),
            stdout=so,
            stderr=se,
            stdin=subprocess.DEVNULL,
            env=_spark_env(tmp_path / "spark-conf"),
            cwd=tmp_path,
            start_new_session=True,
        )
        try:
            # the local-mode reference, while the cluster works
            local = reconstruct(spark, storage.read_table(spark, events), Settings())
            expected = {name: df.toArrow() for name, df in local.tables.items()}
            expected["rejected_events"] = local.rejected.toArrow()
            local.unpersist()
            lap("local run")
            code = proc.wait(timeout=SUBMIT_TIMEOUT_S)
        finally:
            stop_group(proc, grace_s=5.0)
    assert code == 0, f"spark-submit exited with {code}:\n{tail(stderr, 60)}"
    lap("spark-submit")

    report = json.loads((Path(out) / "_run_report.json").read_text())
    assert report["storage"] == STORE, report["storage_reason"]
    assert report["output"]["rows"]["pel"] == expected["pel"].num_rows > 0
    starts = (tmp_path / "node-python.log").read_text().splitlines()
    assert any("reconstruct.py" in s for s in starts), "the driver did not run the node Python"
    assert any("pyspark.daemon" in s for s in starts), "executors did not run the node Python"
    app_dirs = list((tmp_path / "spark-work").glob("app-*/0"))
    assert app_dirs, "no executor ran on the standalone worker"
    assert any((d / py_files.name).exists() for d in app_dirs), "the .zip was not shipped"
    for name in (*OUTPUT_TABLES, "rejected_events"):
        want = expected[name]
        got = delta_rs_table(os.path.join(out, name)).select(want.column_names)
        assert got.num_rows == want.num_rows, name
        assert _rows(got) == _rows(want), f"{name}: the cluster run differs from local mode"
    lap("compare")
    print(f"cluster test timings (s): {laps}")
