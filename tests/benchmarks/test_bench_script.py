"""The benchmark script (benchmarks/bench.py) starts and parses its arguments.

The benchmark itself is run by hand (`make bench`); here only its command line and
the pure helpers that decide what it measures, without Spark or Redis.
"""

from __future__ import annotations

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
