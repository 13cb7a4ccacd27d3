"""notebooks/explore_run.ipynb runs against a generated run, and its answers are right.

The notebook is executed the way `make notebook` does it (notebooks/execute.py: parameters
injected after the `parameters` cell, a fresh `python3` kernel on this interpreter). A probe
cell added before the last one prints what the notebook computed; every answer is checked
against the same tables read here with the DataFrame API.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat
import psutil
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "explore_run.ipynb"
EVENTS, KEYS, SEED = 3000, 4, 7  # this workload has dangling entries, claims, redeliveries
POISON_MIN = 2
TOP_N = 5
FIGURES = 3
# Layered over conf/local.yaml for the kernel's short-lived JVM: without the C2 JIT compiler
# and with the serial GC it spends about half the CPU (measured: 63 s -> 35 s for this run).
FAST_START_CONF = """
spark:
  conf:
    spark.driver.extraJavaOptions: "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""
PROBE_MARK = "NOTEBOOK-PROBE "
PROBE = f"""
import json, os
print({PROBE_MARK!r} + json.dumps({{
    "python": sys.executable,
    "kernel_pid": os.getpid(),
    "jvm_pid": spark.sparkContext._gateway.proc.pid,
    "storage": storage.storage_mode(spark),
    "answers": {{k: json.loads(v.to_json(orient="records")) for k, v in answers.items()}},
}}))
"""


def _runner() -> ModuleType:
    return load_script("notebooks/execute.py", "notebook_execute")


def _tags(cell: Any) -> list[str]:
    return list(cell.metadata.get("tags", []))


def test_committed_notebook_is_clean() -> None:
    """No outputs or execution counts in git (readable diffs); the cells the runner needs."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert all("execution" not in c.metadata for c in nb.cells)  # nbclient's timings
    assert [_tags(c) for c in code].count(["parameters"]) == 1
    assert "stop_session(spark)" in code[-1].source and _tags(code[-1]) == ["teardown"]
    assert sum("figure" in _tags(c) for c in code) == FIGURES
    assert nb.metadata.kernelspec.name == "python3"


def test_inject_parameters_goes_after_the_parameters_cell() -> None:
    runner = _runner()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if "parameters" in _tags(c))
    runner.inject_parameters(nb, {"OUT_ROOT": "/x/out", "TOP_N": 3})
    runner.inject_parameters(nb, {"OUT_ROOT": "/y/out", "EVENTS_PATH": None})  # replaces
    injected = [c for c in nb.cells if "injected-parameters" in _tags(c)]
    assert len(injected) == 1 and nb.cells[at + 1] is injected[0]
    assert injected[0].source.splitlines()[1:] == ["OUT_ROOT = '/y/out'", "EVENTS_PATH = None"]
    assert runner.parse_value("demo/out") == "demo/out"
    assert runner.parse_value("['conf/local.yaml']") == ["conf/local.yaml"]
    assert runner.parse_value("None") is None and runner.parse_value("20") == 20


def test_kernel_runs_on_this_interpreter_whatever_kernelspecs_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `python3` kernelspec of another Python (here on JUPYTER_PATH) would win in plain
    jupyter_client; the runner's kernel manager ignores it."""
    from jupyter_client.manager import AsyncKernelManager

    decoy = tmp_path / "kernels" / "python3"
    decoy.mkdir(parents=True)
    argv = ["/opt/other/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (decoy / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "other", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    assert AsyncKernelManager(kernel_name="python3").kernel_spec.argv[0] == argv[0]
    km = _runner().ThisInterpreterKernelManager(kernel_name="python3")
    assert km.kernel_spec.argv[:3] == [sys.executable, "-m", "ipykernel_launcher"]


def test_clear_outputs_leaves_what_git_should_see() -> None:
    runner = _runner()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    clean = nbformat.writes(nb)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x")]
    cell.execution_count = 3
    cell.metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00Z"}
    runner.clear_outputs(nb)
    assert nbformat.writes(nb) == clean


# ---- the executed notebook ---------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dirs(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A generated events table and the output root of its reconstruct run."""
    from pelengine.runs.full import run_reconstruct
    from pelengine.runs.generate import write_generated_events
    from pelengine.settings import Settings

    base = tmp_path_factory.mktemp("notebook")
    events, out = base / "events", base / "out"
    write_generated_events(spark, str(events), EVENTS, KEYS, SEED)
    run_reconstruct(spark, str(events), str(out), Settings())
    return events, out


@pytest.fixture(scope="module")
def executed(
    run_dirs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Any, dict[str, Any], float]:
    """The notebook executed against the run: (notebook, probe, seconds)."""
    events, out = run_dirs
    fast_start = tmp_path_factory.mktemp("conf") / "fast_start.yaml"
    fast_start.write_text(FAST_START_CONF, encoding="utf-8")
    runner = _runner()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    runner.inject_parameters(
        nb,
        {
            "OUT_ROOT": str(out),
            "EVENTS_PATH": str(events),
            "CONF_FILES": [str(ROOT / "conf" / "local.yaml"), str(fast_start)],
            "POISON_MIN_DELIVERIES": POISON_MIN,
            "TOP_N": TOP_N,
        },
    )
    probe = nbformat.v4.new_code_cell(PROBE.strip())
    nb.cells.insert(len(nb.cells) - 1, probe)  # before the teardown cell
    started = time.monotonic()
    runner.execute_notebook(nb, cwd=NOTEBOOK.parent, timeout=300)
    took = time.monotonic() - started
    lines = [
        o.text for o in probe.outputs if o.output_type == "stream" and o.text.startswith(PROBE_MARK)
    ]
    assert len(lines) == 1, probe.outputs
    return nb, json.loads(lines[0][len(PROBE_MARK) :]), took


@pytest.fixture(scope="module")
def table(spark: SparkSession, run_dirs: tuple[Path, Path]) -> Callable[[str], DataFrame]:
    """An output table of the run, by name."""
    from pelengine import storage

    _, out = run_dirs
    return lambda name: storage.read_table(spark, str(out / name))


@pytest.fixture(scope="module")
def answers(executed: tuple[Any, dict[str, Any], float]) -> dict[str, Any]:
    """What the notebook computed, by answer (the probe's)."""
    return dict(executed[1]["answers"])


def _counts(df: DataFrame, *cols: str) -> dict[tuple[Any, ...], int]:
    return {tuple(r[c] for c in cols): r["count"] for r in df.groupBy(*cols).count().collect()}


def _answer_counts(
    rows: list[dict[str, Any]], value: str, *cols: str
) -> dict[tuple[Any, ...], int]:
    keys = [tuple(r[c] for c in cols) for r in rows]
    assert len(set(keys)) == len(keys), "one row per key"
    return {k: r[value] for k, r in zip(keys, rows, strict=True)}


GROUP = ("db", "key", "group")
CONSUMER = (*GROUP, "consumer")
ENTRY = (*GROUP, "id")


@pytest.mark.spark
def test_every_cell_ran_and_the_kernel_is_gone(executed: tuple[Any, dict[str, Any], float]) -> None:
    nb, probe, took = executed
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert errors == []
    assert probe["python"] == sys.executable  # the venv interpreter: pelengine and pyspark import
    assert probe["storage"] in ("delta-spark", "embedded")
    assert "Spark session stopped" in "".join(o.get("text", "") for o in code[-1].outputs)
    # the kernel was shut down, and its Spark JVM went with it
    procs = [
        psutil.Process(p) for p in (probe["kernel_pid"], probe["jvm_pid"]) if psutil.pid_exists(p)
    ]
    _, alive = psutil.wait_procs(procs, timeout=20)
    assert alive == []
    print(f"notebook executed in {took:.1f} s")


@pytest.mark.spark
def test_figures_were_drawn(executed: tuple[Any, dict[str, Any], float]) -> None:
    nb, _, _ = executed
    figures = [c for c in nb.cells if "figure" in _tags(c)]
    assert len(figures) == FIGURES
    for cell in figures:
        assert any("image/png" in o.get("data", {}) for o in cell.outputs), cell.source[:60]


@pytest.mark.spark
def test_pending_answers(table: Callable[[str], DataFrame], answers: dict[str, Any]) -> None:
    pel = table("pel")
    groups = table("groups")
    n_pel = pel.count()
    assert n_pel > 0

    per_group = answers["pending_per_group"]
    assert len(per_group) == groups.count()
    pending = {k: v for k, v in _answer_counts(per_group, "pending", *GROUP).items() if v}
    assert pending == _counts(pel, *GROUP)
    dangling = {k: v for k, v in _answer_counts(per_group, "dangling", *GROUP).items() if v}
    assert dangling == _counts(pel.filter(~F.col("entry_exists")), *GROUP)

    per_consumer = answers["pending_per_consumer"]
    assert _answer_counts(per_consumer, "pending", *CONSUMER) == _counts(pel, *CONSUMER)

    # ownership's pending agrees with the PEL, consumer by consumer
    top = answers["top_consumers"]
    assert _answer_counts(top, "pending", *CONSUMER) == _counts(pel, *CONSUMER)
    assert [r["pending"] for r in top] == sorted((r["pending"] for r in top), reverse=True)

    oldest = answers["oldest_pending"]
    expected = pel.orderBy("id_ms", "id_seq", *GROUP).limit(TOP_N).collect()
    assert [tuple(r[c] for c in ENTRY) for r in oldest] == [
        tuple(r[c] for c in ENTRY) for r in expected
    ]
    assert len(oldest) == TOP_N

    poison = answers["poison_candidates"]
    want = {
        tuple(r[c] for c in ENTRY)
        for r in pel.filter(F.col("delivery_count") >= POISON_MIN).collect()
    }
    assert want and {tuple(r[c] for c in ENTRY) for r in poison} == want
    assert all(r["deliveries"] >= 1 and r["owners"] >= 1 for r in poison)

    dangling_rows = answers["dangling"]
    n_dangling = pel.filter(~F.col("entry_exists")).count()
    assert n_dangling > 0 and sum(r["dangling"] for r in dangling_rows) == n_dangling

    lag = answers["group_lag"]
    assert _answer_counts(lag, "lag", *GROUP) == {
        tuple(r[c] for c in GROUP): r["lag"] for r in groups.collect()
    }


@pytest.mark.spark
def test_transfer_and_plot_answers(
    table: Callable[[str], DataFrame], answers: dict[str, Any]
) -> None:
    changes = table("ownership_changes")
    moved = changes.filter(
        F.col("from_consumer").isNotNull()
        & F.col("to_consumer").isNotNull()
        & (F.col("from_consumer") != F.col("to_consumer"))
    )
    n_moved = moved.count()
    assert n_moved > 0

    pairs = answers["transfers_per_pair"]
    pair = (*GROUP, "from_consumer", "to_consumer")
    assert _answer_counts(pairs, "transfers", *pair) == _counts(moved, *pair)
    # every transfer was asked for by a command of the events table
    assert sum(r["transfers"] for r in answers["transfers_by_client"]) == n_moved
    assert sum(r["transfers"] for r in answers["transfers_over_time"]) == n_moved

    delivered = table("delivery_counts")
    dist = answers["delivery_count_distribution"]
    assert sum(r["entries"] for r in dist) == delivered.count()
    assert sum(r["entries"] for r in dist if r["pending"]) == table("pel").count()

    pel = table("pel")
    by_consumer = sorted(_counts(pel, *CONSUMER).items(), key=lambda kv: (-kv[1], kv[0]))
    assert len(answers["idle_per_consumer"]) == sum(n for _, n in by_consumer[:TOP_N])
