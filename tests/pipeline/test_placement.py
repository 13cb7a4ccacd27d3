"""Families placed on partitions by their size: the dealing (largest first, to the least
loaded), the partitioning column that lands each family where it was placed, and a
skewed log whose hot family gets a partition of its own while its tables stay those of
one replay of the log."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pelengine.model import Replayer, snapshot_tables
from pelengine.pipeline.reconstruct import reconstruct
from pelengine.pipeline.route import Placement, place_families, spark_int_hash
from pelengine.schemas import EVENTS_SCHEMA
from pelengine.settings import Settings


def test_the_largest_go_first_each_to_the_least_loaded_partition() -> None:
    large = {(0, "hot"): 500, (0, "warm"): 200, (1, "warm"): 150}
    buckets = {b: 40 for b in range(8)}
    families, by_bucket, loads = place_families(large, buckets, 4)
    # the hot family alone: every other item goes to a less loaded partition first
    hot = families[(0, "hot")]
    assert [p for p in families.values()].count(hot) == 1
    assert hot not in by_bucket.values()
    assert loads[hot] == 500
    assert sum(loads) == 500 + 200 + 150 + 8 * 40
    others = [n for i, n in enumerate(loads) if i != hot]
    assert max(others) - min(others) <= 40  # the rest within one bucket of each other


def test_dealing_is_a_function_of_the_sizes() -> None:
    large = {(0, f"k{i}"): 100 for i in range(6)}
    buckets = {b: 10 * b for b in range(16)}
    assert place_families(large, buckets, 4) == place_families(
        dict(reversed(large.items())), buckets, 4
    )


@pytest.mark.spark
@pytest.mark.parametrize("partitions", [2, 3, 4, 7])
def test_each_family_lands_on_the_partition_it_was_placed_on(
    spark: SparkSession, partitions: int
) -> None:
    rng = random.Random(partitions)
    names = [(rng.randrange(3), f"stream:{i}") for i in range(60)]
    large = {key: 0 for key in rng.sample(names, 5)}
    families = {key: rng.randrange(partitions) for key in large}
    buckets = partitions * 8
    by_bucket = {b: rng.randrange(partitions) for b in range(buckets) if b % 3}
    placement = Placement(families, by_bucket, buckets, [0] * partitions)
    rows = spark.createDataFrame(
        [(db, family, seq) for seq, (db, family) in enumerate(names * 3)],
        "db int, family string, seq long",
    )
    at = placement.partition_of(partitions)
    landed = (
        rows.withColumn("_p", at)
        .repartition(partitions, "_p")
        .select(
            "db",
            "family",
            F.spark_partition_id().alias("pid"),
            F.pmod(F.hash("db", "family"), F.lit(buckets)).alias("bucket"),
        )
        .distinct()
        .collect()
    )
    seen: dict[tuple[int, str], set[int]] = {}
    for row in landed:
        seen.setdefault((row["db"], row["family"]), set()).add(row["pid"])
        key = (row["db"], row["family"])
        if key in families:
            want = families[key]
        else:
            want = by_bucket.get(row["bucket"], row["bucket"] % partitions)
        assert row["pid"] == want, (key, row["pid"], want)
    assert all(len(p) == 1 for p in seen.values())
    assert len(seen) == len(set(names))


@pytest.mark.spark
def test_the_int_hash_is_sparks(spark: SparkSession) -> None:
    values = [
        0,
        1,
        -1,
        7,
        42,
        2**31 - 1,
        -(2**31),
        *random.Random(3).sample(range(-(2**31), 2**31), 200),
    ]
    rows = spark.createDataFrame([(v,) for v in values], "v int").select(
        "v", F.hash("v").alias("h")
    )
    assert {r["v"]: r["h"] for r in rows.collect()} == {v: spark_int_hash(v) for v in values}


def _skewed_log() -> list[dict[str, Any]]:
    """One hot stream with most of the traffic, and many small ones, each with a group
    and reads and acks."""
    rng = random.Random(11)
    rows: list[dict[str, Any]] = []
    seq = 0

    def add(*argv: str) -> None:
        nonlocal seq
        seq += 1
        rows.append({"seq": seq, "ts_ms": 1_000 + seq, "argv": list(argv), "db": 0})

    keys = ["hot"] + [f"s{i}" for i in range(40)]
    for key in keys:
        add("XADD", key, "*", "f", "v")
        add("XGROUP", "CREATE", key, "g", "0")
    for _ in range(3_000):
        key = "hot" if rng.random() < 0.7 else rng.choice(keys[1:])
        roll = rng.random()
        if roll < 0.5:
            add("XADD", key, "*", "f", "v")
        elif roll < 0.8:
            add("XREADGROUP", "GROUP", "g", rng.choice("ab"), "COUNT", "2", "STREAMS", key, ">")
        else:
            add("XACK", key, "g", f"{1_000 + rng.randrange(seq)}-0")
    return rows


@pytest.mark.spark
def test_a_hot_family_gets_a_partition_of_its_own(spark: SparkSession) -> None:
    rows = _skewed_log()
    events = spark.createDataFrame(rows, EVENTS_SCHEMA)
    result = reconstruct(spark, events, Settings(partitions=4))
    try:
        placed = result.report["placement"]
        assert placed["large_families"] >= 1
        loads = placed["rows_per_partition"]
        hot_rows = sum(1 for r in rows if len(r["argv"]) > 1 and "hot" in r["argv"])
        assert hot_rows in loads, (hot_rows, loads)
        # and the tables are those of one replay of the whole log, in seq order
        model = Replayer("7.0")
        for r in rows:
            model.apply(r["seq"], r["ts_ms"], r["argv"], r["db"], None)
        want = snapshot_tables(model, rows[-1]["ts_ms"], rows[-1]["seq"])
        got = {r["key"]: r["length"] for r in result.tables["streams"].collect()}
        assert got == {r["key"]: r["length"] for r in want["streams"]}
        pel = sorted(
            (r["key"], r["group"], r["id"], r["consumer"]) for r in result.tables["pel"].collect()
        )
        assert pel == sorted((r["key"], r["group"], r["id"], r["consumer"]) for r in want["pel"])
    finally:
        result.unpersist()
