"""The benchmark script (benchmarks/bench.py) starts and parses its arguments.

The benchmark itself is run by hand (`make bench`); here only its command line and
the pure helpers that decide what it measures, without Spark or Redis.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench.py"


def _load() -> ModuleType:
    return load_script("benchmarks/bench.py", "pelengine_bench_script")


def test_help_runs() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    for option in ("--events", "--series", "--engine-events", "--keys", "--conf"):
        assert option in done.stdout


def test_counts_and_series() -> None:
    bench = _load()
    assert bench.parse_count("200k") == 200_000
    assert bench.parse_count("1.5M") == 1_500_000
    assert bench.parse_count("10_000_000") == 10_000_000
    assert bench.parse_series("1M,3M,10M") == [1_000_000, 3_000_000, 10_000_000]
    assert [bench.label(n) for n in (10_000_000, 200_000, 12_345)] == ["10M", "200k", "12345"]
    for bad in ("", "ten", "1.5k5", "0", "0.5"):
        with pytest.raises(Exception, match="count"):
            bench.parse_count(bad)


def test_redis_feed_helpers() -> None:
    bench = _load()
    argv = ["XREADGROUP", "GROUP", "g", "c", "COUNT", "5", "block", "100", "STREAMS", "k", ">"]
    assert bench.strip_block(argv) == ["XREADGROUP", "GROUP", "g", "c", "COUNT", "5"] + [
        "STREAMS",
        "k",
        ">",
    ]
    # a stream named BLOCK after STREAMS is a key, not the option
    assert bench.strip_block(["XREADGROUP", "GROUP", "g", "c", "STREAMS", "BLOCK", ">"]) is None
    # the rows the engine and redis steps replay come from the job's own validation
    # (pipeline.conform), not from a copy of its rules in the bench
    assert not hasattr(bench, "resolve_dbs") and not hasattr(bench, "valid_rows")
    assert bench._resp(["SET", "k", "é"]) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n\xc3\xa9\r\n"


def test_jvm_cpu_by_thread_kind(tmp_path: Path) -> None:
    """Threads are counted by kind from their names; a thread that ends between two
    readings counts under ``ended``, one that starts counts whole, and the kinds add up to
    the process's total."""
    bench = _load()
    before = {
        "total": 10.0,
        "threads": {"1": ("jit", 4.0), "2": ("tasks", 3.0), "3": ("tasks", 2.0)},
    }
    after = {
        "total": 20.0,
        "threads": {"1": ("jit", 6.0), "2": ("tasks", 5.0), "4": ("tasks", 1.5)},
    }
    got = bench.JvmThreadCpu.diff(before, after)
    assert got == {"jit": 2.0, "gc": 0.0, "tasks": 3.5, "driver": 0.0, "ended": 4.5, "total": 10.0}
    assert bench.JvmThreadCpu.diff(None, after) == {"status": "unavailable"}
    kinds = dict(bench.JvmThreadCpu.KINDS)
    assert kinds["jit"].match("C2 CompilerThre") and kinds["gc"].match("G1 Conc#0")
    assert kinds["tasks"].match("Executor task l") and not kinds["jit"].match("Thread-3")
    # this process read as a "JVM": its threads are there and add up
    own = bench.JvmThreadCpu(os.getpid()).read()
    assert own is not None and own["threads"] and own["total"] >= 0
