"""The local runner's row digest is Spark's ``xxhash64`` of the same rows: the native
core's and the Python twin's, against Spark itself (``runs.incremental.digest``), so a
night of either runner continues the other's state."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from pelengine.engine.native import load, why_not
from pelengine.local.digest import spark_digest, xxh64
from pelengine.runs.incremental import digest
from pelengine.schemas import EVENTS_SCHEMA


def test_xxh64_gives_the_reference_values() -> None:
    # xxhsum -H64 of these inputs (seed 0), and one of 32 bytes or more with a seed
    assert xxh64(b"", 0) == 0xEF46DB3751D8E999
    assert xxh64(b"a", 0) == 0xD24EC4F1A98C6E5B
    assert xxh64(b"abc", 0) == 0x44BC2CF5AD770999
    assert xxh64(b"Nobody inspects the spammish repetition", 0) == 0xFBCEA83C8A378BF1


def _rows(n: int, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    words = ["", "x", "XADD", "mystream", "é", "日本語", "a" * 31, "b" * 32, "c" * 77, "\x00\x01"]
    rows: list[dict[str, object]] = []
    for _ in range(n):
        argv = None
        if rng.random() >= 0.05:
            argv = [rng.choice(words) for _ in range(rng.randint(0, 7))]
        if argv and rng.random() < 0.1:
            argv[rng.randrange(len(argv))] = None
        rows.append(
            {
                "seq": None if rng.random() < 0.05 else rng.randint(-(2**62), 2**62),
                "ts_ms": None if rng.random() < 0.05 else rng.randint(0, 2**45),
                "argv": argv,
                "db": None if rng.random() < 0.3 else rng.randint(-5, 15),
                "client": None if rng.random() < 0.3 else rng.choice(words),
                "source": None if rng.random() < 0.5 else rng.choice(words),
            }
        )
    return rows


@pytest.mark.spark
def test_the_digest_is_sparks(spark: SparkSession) -> None:
    rows = _rows(400, 5)
    want = digest(spark.createDataFrame(rows, EVENTS_SCHEMA), None)
    table = pa.Table.from_pylist(rows)
    assert spark_digest(table, native=False) == want
    _native_core()
    assert spark_digest(table, native=True) == want
    assert want[0] > 300 and want[2] > 0, "the rows must mix seqs and null seqs"


def _native_core() -> None:
    """The native core must be importable: the suite runs where `make install` built it
    (as tests/native/twin.py's tests do, a test that needs it fails, never skips)."""
    assert load() is not None, f"the native core is needed here: {why_not()} (make install)"


def test_native_and_python_digests_agree_without_spark() -> None:
    _native_core()
    for seed in range(5):
        table = pa.Table.from_pylist(_rows(300, seed))
        assert spark_digest(table, native=True) == spark_digest(table, native=False)
