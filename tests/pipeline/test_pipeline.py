"""The Spark pipeline: plan shape, order guard, and equality with a single pure replay.

The model's correctness is proven against a real Redis elsewhere
(tests/redis_diff); here the question is whether routing, fan-out, the shuffle
and the grouped UDF give exactly what one model replaying every event in seq
order gives.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pelengine.engine.errors import SeqOrderError
from pelengine.engine.udf import make_replay_function, one_family
from pelengine.model import Replayer, snapshot_tables
from pelengine.pipeline import conform
from pelengine.pipeline.reconstruct import reconstruct
from pelengine.pipeline.replay import (
    ReplayPlanError,
    check_replay_plan,
    physical_plan,
    replay_stage,
    replayed_table,
)
from pelengine.pipeline.route import split_by_group
from pelengine.schemas import (
    EVENTS_SCHEMA,
    OUTPUT_TABLES,
    REPLAY_INPUT_SCHEMA,
    TABLE_COLUMNS,
    table_schema,
)
from pelengine.settings import Settings
from pelengine.synth import generate_events

pytestmark = pytest.mark.spark

EXTRA = [  # cross-key commands the generator does not produce
    (["XADD", "r:a", "1-1", "f", "v"], 0),
    (["XADD", "r:b", "1-1", "f", "v"], 0),
    (["XGROUP", "CREATE", "r:a", "g", "0"], 0),
    (["XGROUP", "CREATE", "r:b", "g", "0"], 0),
    (["XREADGROUP", "GROUP", "g", "c1", "COUNT", "1", "STREAMS", "r:a", "r:b", ">", ">"], 0),
    (["XREADGROUP", "GROUP", "g", "c1", "STREAMS", "r:a", "r:missing", ">", ">"], 0),
    (["RENAME", "r:a", "r:c"], 0),
    (["RENAMENX", "r:b", "r:c"], 0),
    (["XADD", "f:x", "1-1", "f", "v"], 5),
    (["XGROUP", "CREATE", "f:x", "g", "0"], 5),
    (["XREADGROUP", "GROUP", "g", "c", "STREAMS", "f:x", ">"], 5),
    (["FLUSHDB"], 5),
    (["FLUSHDB"], 6),
    (["DEL", "r:b", "nothing"], 0),
]


def _workload() -> list[dict[str, Any]]:
    rows = list(generate_events(3000, 12, seed=11))
    seq = max(r["seq"] or 0 for r in rows)
    ts = max(r["ts_ms"] or 0 for r in rows)
    for argv, db in EXTRA:
        seq += 1
        ts += 3
        rows.append(
            {"seq": seq, "ts_ms": ts, "argv": argv, "db": db, "client": None, "source": "t"}
        )
    return rows


def _valid(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows the contract keeps, by the contract's own words (not the pipeline's code)."""
    counts = Counter(r["seq"] for r in rows)
    keep = []
    for r in rows:
        argv = r["argv"]
        if r["seq"] is None or r["ts_ms"] is None or not argv or not argv[0]:
            continue
        if any(a is None for a in argv) or counts[r["seq"]] > 1:
            continue
        keep.append(r)
    return sorted(keep, key=lambda r: r["seq"])


def _expected(spark: SparkSession, rows: list[dict[str, Any]]) -> dict[str, Any]:
    replayer = Replayer("7.0")
    changes = []
    closed_versions = []
    for r in rows:
        replayer.apply(r["seq"], r["ts_ms"], r["argv"], r["db"] or 0, r["client"])
        changes.extend(replayer.drain_changes())
        closed_versions.extend(replayer.drain_pel_history())
    as_of_ms = max(r["ts_ms"] for r in rows)
    as_of_seq = max(r["seq"] for r in rows)
    tables = snapshot_tables(replayer, as_of_ms, as_of_seq)
    for row in changes + closed_versions:
        row.update(as_of_ms=as_of_ms, as_of_seq=as_of_seq)
    tables["ownership_changes"] = changes
    tables["pel_history"] = closed_versions + tables["pel_history"]  # closed, then open ones
    for row in tables["pel_history"]:
        row["is_current"] = row["valid_to_seq"] is None  # the contract's open version
    return {
        name: spark.createDataFrame(
            [{c: row.get(c) for c in TABLE_COLUMNS[name]} for row in tables[name]],
            table_schema(name),
        )
        for name in OUTPUT_TABLES
    } | {"_counters": replayer.counters}


@pytest.fixture(scope="module")
def workload() -> list[dict[str, Any]]:
    return _workload()


@pytest.fixture(scope="module", params=["native", "python"])
def job(spark: SparkSession, workload: list[dict[str, Any]], request: Any) -> Any:
    """The job on each engine (both against one Python replay in seq order)."""
    events = spark.createDataFrame(workload, EVENTS_SCHEMA)
    result = reconstruct(spark, events, Settings(profile="7.0", engine=request.param))
    assert result.report["engine"] == request.param
    yield result
    result.unpersist()


@pytest.mark.parametrize("table", OUTPUT_TABLES)
def test_job_equals_one_replay_in_seq_order(
    spark: SparkSession, workload: list[dict[str, Any]], job: Any, table: str
) -> None:
    expected = _expected(spark, _valid(workload))
    assert expected[table].count() > 0, f"the workload leaves {table} empty: test is too weak"
    assert_df_equality(
        job.tables[table], expected[table], ignore_row_order=True, ignore_nullable=True
    )


def test_replay_output_is_cached_on_disk_only(job: Any) -> None:
    """MEMORY_AND_DISK reads a spilled block back into the heap whole: at 10M events in
    4 partitions (blocks of ~2 GB) that ended the JVM with OutOfMemoryError."""
    from pyspark import StorageLevel

    levels = [df.storageLevel for df in job._persisted]
    assert levels.count(StorageLevel.DISK_ONLY) == 1, levels
    assert levels[-1] == StorageLevel.DISK_ONLY, levels  # the last cached: the replay output


def test_pel_history_open_versions_are_the_pel(job: Any) -> None:
    history = job.tables["pel_history"]  # no as_of_* since output contract version 2
    fields = [c for c in TABLE_COLUMNS["pel"] if c not in ("idle_ms", "as_of_ms", "as_of_seq")]
    assert_df_equality(
        history.filter("valid_to_seq IS NULL").select(*fields),
        job.tables["pel"].select(*fields),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    closed = history.filter("valid_to_seq IS NOT NULL")
    assert closed.count() > 0
    assert closed.filter("valid_to_seq <= valid_from_seq").count() == 0


def test_report_counts_every_valid_event_once(workload: list[dict[str, Any]], job: Any) -> None:
    valid = _valid(workload)
    events = job.report["events"]
    assert events["valid"] == len(valid)
    assert events["applied"] + events["ignored"] + events["failed"] == len(valid)
    assert sum(events["by_command"].values()) == len(valid)


def test_rejected_rows_keep_their_reason(workload: list[dict[str, Any]], job: Any) -> None:
    rejected = job.rejected.collect()
    assert len(rejected) == len(workload) - len(_valid(workload))
    assert rejected, "the generated workload should contain bad rows"
    assert all(r["reason"] for r in rejected)


@pytest.mark.parametrize(
    ("listed", "collected"),
    [(10_000, 100_000), (10_000, 1), (0, 100_000)],
    ids=["rows-from-the-driver", "seqs-in-a-filter-cached", "seqs-joined"],
)
def test_identical_duplicate_rows_keep_one(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, listed: int, collected: int
) -> None:
    monkeypatch.setattr(conform, "SHARED_SEQS_LISTED", listed)
    monkeypatch.setattr(conform, "SHARED_ROWS_COLLECTED", collected)
    row = {"seq": 1, "ts_ms": 5, "argv": ["XADD", "k", "1-1", "f", "v"], "db": 0}
    other = {"seq": 2, "ts_ms": 6, "argv": ["XADD", "k", "2-1", "f", "v"], "db": 0}
    clash = {"seq": 2, "ts_ms": 6, "argv": ["XADD", "k", "3-1", "f", "v"], "db": 0}
    no_seq = {"seq": None, "ts_ms": 7, "argv": ["XADD", "k", "4-1", "f", "v"], "db": 0}
    empty = {"seq": 4, "ts_ms": 8, "argv": [], "db": 0}
    rows = [row, row, other, clash, no_seq, empty, empty]
    result = reconstruct(spark, spark.createDataFrame(rows, EVENTS_SCHEMA))
    reasons = sorted(r["reason"] for r in result.rejected.collect())
    assert reasons == [
        "conflicting rows share seq (2)",
        "conflicting rows share seq (2)",
        "duplicate row (same seq)",
        "empty argv",
        "empty argv",
        "null seq",
    ]
    streams = result.tables["streams"].collect()
    assert [(s["key"], s["length"], s["last_generated_id"]) for s in streams] == [("k", 1, "1-1")]
    result.unpersist()


def test_select_sets_db_of_rows_without_one(spark: SparkSession) -> None:
    rows = [
        {"seq": 1, "ts_ms": 1, "argv": ["SELECT", "3"], "db": None},
        {"seq": 2, "ts_ms": 2, "argv": ["XADD", "k", "1-1", "f", "v"], "db": None},
        {"seq": 3, "ts_ms": 3, "argv": ["SELECT", "0"], "db": None},
        {"seq": 4, "ts_ms": 4, "argv": ["XADD", "k", "1-1", "f", "v"], "db": None},
        {"seq": 5, "ts_ms": 5, "argv": ["XADD", "k", "2-1", "f", "v"], "db": 7},
    ]
    result = reconstruct(spark, spark.createDataFrame(rows, EVENTS_SCHEMA))
    got = sorted((r["db"], r["length"]) for r in result.tables["streams"].collect())
    assert got == [(0, 1), (3, 1), (7, 1)]
    result.unpersist()


def test_as_of_stops_the_replay(spark: SparkSession) -> None:
    rows = [
        {"seq": 1, "ts_ms": 100, "argv": ["XADD", "k", "1-1", "f", "v"], "db": 0},
        {"seq": 2, "ts_ms": 110, "argv": ["XGROUP", "CREATE", "k", "g", "0"], "db": 0},
        {"seq": 3, "ts_ms": 120, "argv": ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "k", ">"]},
        {"seq": 4, "ts_ms": 130, "argv": ["XACK", "k", "g", "1-1"], "db": 0},
        {"seq": 5, "ts_ms": 125, "argv": ["XADD", "k", "2-1", "f", "v"], "db": 0},
    ]
    events = spark.createDataFrame(rows, EVENTS_SCHEMA)
    by_ms = reconstruct(spark, events, Settings(as_of_ms=125))
    pel = by_ms.tables["pel"].collect()
    assert [(p["id"], p["idle_ms"], p["as_of_ms"], p["as_of_seq"]) for p in pel] == [
        ("1-1", 5, 125, 3)
    ]
    # seq 5 (ts 125) comes after seq 4 (ts 130 > as-of): the replay stopped at seq 4.
    assert by_ms.tables["streams"].collect()[0]["length"] == 1
    by_seq = reconstruct(spark, events, Settings(as_of_seq=4))
    assert by_seq.tables["pel"].count() == 0
    assert by_seq.tables["streams"].collect()[0]["as_of_seq"] == 4
    by_ms.unpersist()
    by_seq.unpersist()


def _xadds_to_three_streams(spark: SparkSession) -> Any:
    """29 routed XADD rows, seq 1..29, to k0, k1, k2 in turn (db 0, no client)."""
    return spark.createDataFrame(
        [
            {
                "seq": i,
                "ts_ms": i,
                "argv": ["XADD", f"k{i % 3}", f"{i}-1", "f", "v"],
                "db": 0,
                "client": None,
                "fanout": False,
                "family": f"k{i % 3}",
                "exec_unit": None,
            }
            for i in range(1, 30)
        ],
        "seq long, ts_ms long, argv array<string>, db int, client string, "
        "fanout boolean, family string, exec_unit long",
    )


def test_replay_plan_has_one_shuffle_and_one_sort_by_seq(spark: SparkSession) -> None:
    # k0 (seq a multiple of 3) split in units "0"/"1" by seq parity; k1, k2 whole
    seq = F.col("seq")
    routed = _xadds_to_three_streams(spark).withColumn(
        "unit", F.when(seq % 3 == 0, (seq % 2).cast("string"))
    )
    units = {(0, "k0", "0"): ["g0"], (0, "k0", "1"): ["g1"]}
    out = replay_stage(routed, Settings(profile="7.0"), 100, 29, 2, unit_groups=units)
    plan = out._jdf.queryExecution().executedPlan().toString()
    lines = plan.splitlines()
    exchanges = [line for line in lines if "Exchange" in line]
    sorts = [line for line in lines if "Sort [" in line]
    assert len(exchanges) == 1, plan
    assert "hashpartitioning(db" in exchanges[0], plan
    assert "family" in exchanges[0] and "unit" in exchanges[0], plan
    assert len(sorts) == 1, plan
    assert "seq" in sorts[0], plan
    # k1, k2 whole; k0 split in two units (g0, g1): each has its own streams row
    assert replayed_table(out, "streams").count() == 4
    check_replay_plan(out)


def _fanned_out_xadds(spark: SparkSession) -> DataFrame:
    """``_xadds_to_three_streams`` as ``fan_out`` leaves them (no markers, no groups)."""
    return (
        _xadds_to_three_streams(spark)
        .withColumn("marker", F.lit(False))
        .withColumn("group", F.lit(None).cast("string"))
        .withColumn("group_only", F.lit(False))
    )


def test_replay_plan_without_split_sorts_once_by_seq(spark: SparkSession) -> None:
    """No family split: ``unit`` is the literal null split_by_group gives, a constant the
    optimizer drops from the sort. Grouping by it too (in the grouped UDF the replay was
    until stop 43) made Spark add a second sort by (db, family, unit) under the UDF,
    which loses the seq order once it spills."""
    rows = _fanned_out_xadds(spark)
    whole, stats, units = split_by_group(rows, rows, 4, 2)
    assert (stats["families_split"], units) == (0, {})
    out = replay_stage(whole, Settings(profile="7.0"), 100, 29, 2, unit_groups=units)
    check_replay_plan(out)  # raises ReplayPlanError on a second sort
    plan = out._jdf.queryExecution().executedPlan().toString()
    assert len([line for line in plan.splitlines() if "Sort [" in line]) == 1, plan
    assert replayed_table(out, "streams").count() == 3


def test_the_replay_receives_the_input_schema_the_benches_feed(spark: SparkSession) -> None:
    """The rows ``split_by_group`` hands the replay have ``REPLAY_INPUT_SCHEMA``'s columns and
    types: the UDF tests and ``make bench-udf`` build their batches from it."""
    rows = _fanned_out_xadds(spark)
    whole, _, _ = split_by_group(rows, rows, 0, 2)
    got = [(f.name, f.dataType) for f in whole.schema.fields]
    assert got == [(f.name, f.dataType) for f in REPLAY_INPUT_SCHEMA.fields]


def test_check_replay_plan_refuses_a_plan_that_loses_seq_order(spark: SparkSession) -> None:
    """The guard itself: a replay function over a sort by the keys alone, over no sort at
    all, or a grouped UDF over a second, keys-only sort, is refused."""
    rows = spark.range(1, 30).select(
        F.col("id").alias("seq"), F.lit(0).alias("db"), F.lit("k").alias("family")
    )

    def nothing(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from ()

    def passthrough(key: Any, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from ()

    shuffled = rows.repartition(2, "db", "family")
    keys_only = shuffled.sortWithinPartitions("db", "family").mapInArrow(nothing, "seq long")
    with pytest.raises(ReplayPlanError, match="would not keep seq order"):
        check_replay_plan(keys_only)
    with pytest.raises(ReplayPlanError, match="would not keep seq order"):
        check_replay_plan(shuffled.mapInArrow(nothing, "seq long"))
    grouped = (
        shuffled.sortWithinPartitions("db", "family", "seq")
        .groupBy("db", "family")
        .applyInArrow(passthrough, "seq long")
    )
    with pytest.raises(ReplayPlanError, match="no replay function"):
        check_replay_plan(grouped)
    check_replay_plan(
        shuffled.sortWithinPartitions("db", "family", "seq").mapInArrow(nothing, "seq long")
    )
    # reconstruct checks the replay once persisted, on the plan its cache holds: the same
    # refusals there
    kept = []
    try:
        for plan in (keys_only, shuffled.mapInArrow(nothing, "seq long")):
            kept.append(plan.persist())
            with pytest.raises(ReplayPlanError, match="would not keep seq order"):
                check_replay_plan(kept[-1])
        good = shuffled.sortWithinPartitions("db", "family", "seq").mapInArrow(nothing, "seq long")
        kept.append(good.persist())
        check_replay_plan(kept[-1])
    finally:
        for df in kept:
            df.unpersist()


@pytest.mark.parametrize("engine", ["native", "python"])
def test_replay_refuses_seq_going_backwards(engine: str) -> None:
    replay = one_family(make_replay_function(Settings(profile="7.0"), 0, 0, engine=engine))
    batch = pa.RecordBatch.from_pydict(
        {
            "seq": [1, 3, 2],
            "ts_ms": [1, 2, 3],
            "argv": [["XADD", "k", "1-1", "f", "v"], ["XLEN", "k"], ["XLEN", "k"]],
            "db": [0, 0, 0],
            "client": [None, None, None],
            "fanout": [False, False, False],
        }
    )
    with pytest.raises(SeqOrderError, match="seq 2 after 3"):
        list(replay((pa.scalar(0), pa.scalar("k")), iter([batch])))


def test_7_4_commands_in_one_transaction_share_one_now(spark: SparkSession) -> None:
    rows = [
        {"seq": 1, "ts_ms": 100, "argv": ["XGROUP", "CREATE", "k", "g", "$", "MKSTREAM"]},
        {"seq": 2, "ts_ms": 105, "argv": ["MULTI"], "client": "a"},
        {"seq": 3, "ts_ms": 110, "argv": ["XADD", "k", "*", "f", "v"], "client": "a"},
        {"seq": 4, "ts_ms": 113, "argv": ["XADD", "k", "*", "f", "v"], "client": "b"},
        {
            "seq": 5,
            "ts_ms": 112,
            "argv": ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "k", ">"],
            "client": "a",
        },
        {"seq": 6, "ts_ms": 112, "argv": ["EXEC"], "client": "a"},
        {"seq": 7, "ts_ms": 120, "argv": ["XADD", "k", "*", "f", "v"], "client": "a"},
    ]
    events = spark.createDataFrame(rows, EVENTS_SCHEMA)
    for profile, delivered in (("7.4", 110), ("7.0", 112)):
        result = reconstruct(spark, events, Settings(profile=profile))
        pel = sorted((p["id"], p["delivery_time_ms"]) for p in result.tables["pel"].collect())
        # client b's XADD at 113 is outside a's transaction: its ID follows its own time
        assert pel == [("110-0", delivered), ("113-0", delivered)], profile
        ids = sorted(r["last_entry_id"] for r in result.tables["streams"].collect())
        assert ids == ["120-0"], profile
        result.unpersist()


def _replay_tables(rows: list[dict[str, Any]], profile: str) -> dict[str, list[tuple]]:
    """pel and ownership of one pure replay of ``rows`` in seq order, as sorted tuples."""
    replayer = Replayer(profile)
    for r in sorted(rows, key=lambda r: r["seq"]):
        replayer.apply(r["seq"], r["ts_ms"], r["argv"], r.get("db") or 0, r.get("client"))
    last = max(rows, key=lambda r: r["seq"])
    snap = snapshot_tables(replayer, last["ts_ms"], last["seq"])
    return {
        "pel": sorted(
            (p["key"], p["id"], p["consumer"], p["delivery_time_ms"]) for p in snap["pel"]
        ),
        "streams": sorted((s["key"], s["last_generated_id"]) for s in snap["streams"]),
    }


def test_a_scripts_commands_share_the_script_rows_time_on_7_4(spark: SparkSession) -> None:
    """MONITOR shows a script's call line, then its commands as client ``lua``: on 7.2+
    they all see the script's one clock reading; on 7.0 each its own. A script's read
    never blocks."""
    block = ["XREADGROUP", "GROUP", "g", "c9", "BLOCK", "0", "STREAMS", "e", ">"]
    rows = [
        {"seq": 1, "ts_ms": 100, "argv": ["XGROUP", "CREATE", "k", "g", "$", "MKSTREAM"]},
        {"seq": 2, "ts_ms": 100, "argv": ["XGROUP", "CREATE", "e", "g", "$", "MKSTREAM"]},
        {"seq": 3, "ts_ms": 105, "argv": ["EVAL", "...", "1", "k"], "client": "a"},
        {"seq": 4, "ts_ms": 107, "argv": ["XADD", "k", "*", "f", "v"], "client": "lua"},
        {"seq": 5, "ts_ms": 108, "argv": ["XADD", "k", "*", "f", "v"], "client": "lua"},
        {"seq": 6, "ts_ms": 109, "argv": block, "client": "lua"},
        {
            "seq": 7,
            "ts_ms": 109,
            "argv": ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "k", ">"],
            "client": "lua",
        },
        {"seq": 8, "ts_ms": 111, "argv": ["XADD", "e", "*", "f", "v"], "client": "b"},
        # lua rows after a row that runs no script keep their own time
        {"seq": 9, "ts_ms": 120, "argv": ["XADD", "k", "*", "f", "v"], "client": "lua"},
        {"seq": 10, "ts_ms": 130, "argv": ["FCALL", "f", "1", "k"], "client": "a"},
        {
            "seq": 11,
            "ts_ms": 133,
            "argv": ["XREADGROUP", "GROUP", "g", "d", "STREAMS", "k", ">"],
            "client": "lua",
        },
    ]
    events = spark.createDataFrame(rows, EVENTS_SCHEMA)
    expected = {
        "7.4": [("k", "105-0", "c", 105), ("k", "105-1", "c", 105), ("k", "120-0", "d", 130)],
        "7.0": [("k", "107-0", "c", 109), ("k", "108-0", "c", 109), ("k", "120-0", "d", 133)],
    }
    for profile, pel in expected.items():
        # hand-traced; nothing delivered on 'e': the script's BLOCK read did not wait
        assert _replay_tables(rows, profile)["pel"] == pel, profile
        result = reconstruct(spark, events, Settings(profile=profile))
        got = sorted(
            (p["key"], p["id"], p["consumer"], p["delivery_time_ms"])
            for p in result.tables["pel"].collect()
        )
        assert got == pel, profile
        result.unpersist()


def test_a_read_inside_multi_never_blocks_in_the_job(spark: SparkSession) -> None:
    block = ["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "e", ">"]
    rows = [
        {"seq": 1, "ts_ms": 100, "argv": ["XGROUP", "CREATE", "e", "g", "$", "MKSTREAM"]},
        {"seq": 2, "ts_ms": 101, "argv": ["MULTI"], "client": "a"},
        {"seq": 3, "ts_ms": 102, "argv": block, "client": "a"},
        {"seq": 4, "ts_ms": 102, "argv": ["XADD", "e", "*", "f", "v"], "client": "a"},
        {"seq": 5, "ts_ms": 102, "argv": ["EXEC"], "client": "a"},
        {"seq": 6, "ts_ms": 103, "argv": ["XADD", "e", "*", "f", "v"], "client": "b"},
    ]
    events = spark.createDataFrame(rows, EVENTS_SCHEMA)
    for profile in ("7.0",):  # the rule is the same on every profile
        assert _replay_tables(rows, profile)["pel"] == [], profile
        result = reconstruct(spark, events, Settings(profile=profile))
        assert result.tables["pel"].count() == 0, profile
        result.unpersist()


def test_readers_are_served_once_a_unit_ended(spark: SparkSession) -> None:
    """A server serves the readers a transaction's or a script's writes unblocked after
    the unit, not after the write inside it: a reader blocked without COUNT gets every
    entry the unit added (Redis 7.0.15 live: MULTI, XADD, XADD, EXEC serves both)."""
    read = ["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS"]
    rows = [
        {"seq": 1, "ts_ms": 100, "argv": ["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]},
        {"seq": 2, "ts_ms": 100, "argv": ["XGROUP", "CREATE", "t", "g", "$", "MKSTREAM"]},
        {"seq": 3, "ts_ms": 101, "argv": [*read, "s", ">"], "client": "r1"},
        {"seq": 4, "ts_ms": 101, "argv": [*read, "t", ">"], "client": "r2"},
        {"seq": 5, "ts_ms": 102, "argv": ["MULTI"], "client": "w"},
        {"seq": 6, "ts_ms": 103, "argv": ["XADD", "s", "5-1", "f", "v"], "client": "w"},
        {"seq": 7, "ts_ms": 103, "argv": ["XADD", "s", "5-2", "f", "v"], "client": "w"},
        {"seq": 8, "ts_ms": 103, "argv": ["EXEC"], "client": "w"},
        {"seq": 9, "ts_ms": 104, "argv": ["EVAL", "...", "1", "t"], "client": "w"},
        {"seq": 10, "ts_ms": 104, "argv": ["XADD", "t", "6-1", "f", "v"], "client": "lua"},
        {"seq": 11, "ts_ms": 104, "argv": ["XADD", "t", "6-2", "f", "v"], "client": "lua"},
    ]
    events = spark.createDataFrame(rows, EVENTS_SCHEMA)
    expected = [("s", "5-1", "c"), ("s", "5-2", "c"), ("t", "6-1", "c"), ("t", "6-2", "c")]
    for profile in ("7.0", "valkey-8.1"):
        assert [p[:3] for p in _replay_tables(rows, profile)["pel"]] == expected, profile
        result = reconstruct(spark, events, Settings(profile=profile))
        got = sorted((p["key"], p["id"], p["consumer"]) for p in result.tables["pel"].collect())
        assert got == expected, profile
        served = sorted(
            (c["seq"], c["request_seq"], c["id"])
            for c in result.tables["ownership_changes"].collect()
        )
        # the served reads are the writes' doing, the last write of each unit
        assert served == [(7, 3, "5-1"), (7, 3, "5-2"), (11, 4, "6-1"), (11, 4, "6-2")], profile
        result.unpersist()


def test_a_blocked_clients_command_elsewhere_ends_its_wait(spark: SparkSession) -> None:
    read = ["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "a", ">"]
    rows = [
        {"seq": 1, "ts_ms": 10, "argv": ["XGROUP", "CREATE", "a", "g", "$", "MKSTREAM"]},
        {"seq": 2, "ts_ms": 11, "argv": ["XGROUP", "CREATE", "w", "g", "$", "MKSTREAM"]},
        {"seq": 3, "ts_ms": 12, "argv": read, "client": "c1"},
        {"seq": 4, "ts_ms": 13, "argv": [*read[:-2], "w", ">"], "client": "c2"},
        {"seq": 5, "ts_ms": 14, "argv": ["XADD", "b", "1-1", "f", "v"], "client": "c1"},
        {"seq": 6, "ts_ms": 15, "argv": ["GET", "x"], "client": "c2"},
        {"seq": 7, "ts_ms": 16, "argv": ["XADD", "a", "2-1", "f", "v"], "client": "p"},
        {"seq": 8, "ts_ms": 17, "argv": ["XADD", "w", "2-1", "f", "v"], "client": "p"},
    ]
    events = spark.createDataFrame(rows, EVENTS_SCHEMA)
    result = reconstruct(spark, events)
    # c1 sent XADD b (another family) and c2 sent GET after blocking: neither is served
    assert result.tables["pel"].count() == 0
    expected = Replayer("7.0")
    for r in rows:
        expected.apply(r["seq"], r["ts_ms"], r["argv"], 0, r.get("client"))
    assert snapshot_tables(expected, 17, 8)["pel"] == []
    # and without those two commands both readers are served by the writes
    served = reconstruct(spark, events.filter("seq not in (5, 6)"))
    got = sorted((p["key"], p["consumer"]) for p in served.tables["pel"].collect())
    assert got == [("a", "c"), ("w", "c")]
    result.unpersist()
    served.unpersist()


def test_node_limits_reach_the_replay(spark: SparkSession) -> None:
    """``MAXLEN ~`` drops whole nodes: with 3 entries per node the job trims what a model
    with 3-entry nodes trims, and not what one with Redis' default 100 would."""
    rows = [
        {"seq": i, "ts_ms": 1000 + i, "argv": ["XADD", "s", f"{i}-1", "f", "v"], "db": 0}
        for i in range(1, 11)
    ]
    rows.append({"seq": 11, "ts_ms": 2000, "argv": ["XTRIM", "s", "MAXLEN", "~", "4"], "db": 0})
    for r in rows:
        r.update(client=None, source="t")

    def model_length(entries: int) -> int:
        replayer = Replayer("7.0", node_max_entries=entries)
        for r in rows:
            replayer.apply(r["seq"], r["ts_ms"], r["argv"], 0, None)
        (stream,) = [s for _, _, s in replayer.streams()]
        return len(stream.entries)

    events = spark.createDataFrame(rows, EVENTS_SCHEMA)
    settings = Settings(profile="7.0", node_max_entries=3)
    result = reconstruct(spark, events, settings)
    (got,) = [r["length"] for r in result.tables["streams"].collect()]
    result.unpersist()
    assert (model_length(3), model_length(100)) == (4, 10)  # the limit matters here
    assert got == model_length(3)


SPLIT_EXTRA = [  # (argv, client): a client blocked on one group that reads another
    (["XGROUP", "CREATE", "m", "g1", "$", "MKSTREAM"], None),
    (["XGROUP", "CREATE", "m", "g2", "$"], None),
    (["XGROUP", "CREATE", "m", "g3", "0"], None),
    (["XREADGROUP", "GROUP", "g1", "a", "BLOCK", "0", "STREAMS", "m", ">"], "c9"),
    (["XREADGROUP", "GROUP", "g2", "b", "STREAMS", "m", ">"], "c9"),
    (["XREADGROUP", "GROUP", "g3", "b", "BLOCK", "0", "STREAMS", "m", ">"], "c8"),
    (["XADD", "m", "5-0", "f", "v"], "p"),
    (["XREADGROUP", "GROUP", "g1", "a", "STREAMS", "m", ">"], "c7"),
    (["XGROUP", "DESTROY", "m", "g2"], None),
    (["XACK", "m", "g3", "5-0"], "c8"),
    (["XADD", "m", "6-0", "f", "v"], "p"),
    (["XREADGROUP", "GROUP", "g2", "x", "STREAMS", "m", ">"], "c6"),  # NOGROUP now
    (["XCLAIM", "m", "g1", "z", "0", "5-0", "6-0"], "c5"),
    (["XADD", "n", "1-0", "f", "v"], None),
    (["XGROUP", "CREATE", "n", "g1", "0"], None),
    (["XGROUP", "CREATE", "n", "g2", "0"], None),
    (["XREADGROUP", "GROUP", "g1", "a", "STREAMS", "n", ">"], None),
    (["XREADGROUP", "GROUP", "g2", "a", "STREAMS", "n", ">"], None),
    (["RENAME", "n", "n2"], None),
    (["XACK", "n2", "g2", "1-0"], None),
    (["XTRIM", "m", "MAXLEN", "0"], None),
    (["XAUTOCLAIM", "m", "g1", "y", "0", "0-0"], None),
    (["DEL", "n2", "m"], None),
]


def _split_workload() -> list[dict[str, Any]]:
    """Few keys, so every stream has several groups, plus SPLIT_EXTRA."""
    rows = list(generate_events(3000, 3, seed=5))
    seq = max(r["seq"] or 0 for r in rows)
    ts = max(r["ts_ms"] or 0 for r in rows)
    for argv, client in [*SPLIT_EXTRA, *((a, None) for a, db in EXTRA if db == 0)]:
        seq += 1
        ts += 3
        rows.append(
            {"seq": seq, "ts_ms": ts, "argv": argv, "db": 0, "client": client, "source": "t"}
        )
    return rows


@pytest.mark.parametrize("partitions", [2, 8])
def test_split_by_group_equals_one_replay(spark: SparkSession, partitions: int) -> None:
    """Every stream with 2+ groups replayed as up to ``partitions`` tasks (2: several
    groups per task; 8: one group per task): the tables and the counts are those of
    one replay of everything in seq order."""
    rows = _split_workload()
    events = spark.createDataFrame(rows, EVENTS_SCHEMA)
    settings = Settings(profile="7.0", split_groups=2, partitions=partitions)
    result = reconstruct(spark, events, settings)
    split = result.report["split_by_group"]
    assert split["families_split"] >= 3, split
    # partitions 2: two tasks per split family; 8: one per group (3+ groups somewhere)
    if partitions == 2:
        assert split["units"] == 2 * split["families_split"], split
    else:
        assert split["units"] > 2 * split["families_split"], split
    expected = _expected(spark, _valid(rows))
    for table in OUTPUT_TABLES:
        assert_df_equality(
            result.tables[table], expected[table], ignore_row_order=True, ignore_nullable=True
        )
    counters = expected["_counters"]
    events_report = result.report["events"]
    assert events_report["applied"] == counters.applied
    assert events_report["failed"] == counters.failed
    assert events_report["valid"] == len(_valid(rows))
    assert sum(events_report["by_command"].values()) == len(_valid(rows))
    result.unpersist()


@pytest.mark.parametrize("budget", [0, 1 << 40], ids=["merged-in-sql", "merged-in-partitions"])
def test_delivery_counts_merge_either_way(
    spark: SparkSession,
    monkeypatch: pytest.MonkeyPatch,
    workload: list[dict[str, Any]],
    budget: int,
) -> None:
    """A full run merges the delivery segments in each partition of the replay output
    while no partition holds more than ``MERGE_IN_PARTITION_BYTES`` of them, else in SQL;
    either way the rows are those of one replay of the log."""
    from pelengine.pipeline import assemble

    monkeypatch.setattr(assemble, "MERGE_IN_PARTITION_BYTES", budget)
    events = spark.createDataFrame(workload, EVENTS_SCHEMA)
    result = reconstruct(spark, events, Settings(engine="native"))
    try:
        plan = physical_plan(result.tables["delivery_counts"]) or ""
        assert ("merge_partition" in plan) == (budget > 0), plan
        expected = _expected(spark, _valid(workload))["delivery_counts"]
        assert_df_equality(
            result.tables["delivery_counts"].select(*expected.columns),
            expected,
            ignore_row_order=True,
            ignore_nullable=True,
        )
    finally:
        result.unpersist()
