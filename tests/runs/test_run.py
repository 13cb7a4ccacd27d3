"""run_reconstruct end to end on the storage seam: Delta in, Delta out, idempotent reruns."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.pipeline.conform import InputContractError
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, OUTPUT_TABLES
from pelengine.settings import Settings

pytestmark = pytest.mark.spark

ROWS = [
    {"seq": 1, "ts_ms": 1000, "argv": ["XADD", "orders", "1-0", "f", "v"], "db": 0},
    {"seq": 2, "ts_ms": 1001, "argv": ["XADD", "orders", "2-0", "f", "v"], "db": 0},
    {"seq": 3, "ts_ms": 1002, "argv": ["XGROUP", "CREATE", "orders", "g", "0"], "db": 0},
    {"seq": 4, "ts_ms": 1003, "argv": ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "orders", ">"]},
    {"seq": 5, "ts_ms": 1010, "argv": ["XACK", "orders", "g", "1-0"], "db": 0},
    {"seq": 6, "ts_ms": 1011, "argv": None, "db": 0},
]


@pytest.fixture(scope="module")
def events_path(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("run") / "events")
    storage.write_table(spark.createDataFrame(ROWS, EVENTS_SCHEMA), path)
    return path


def _versions(out: Path) -> dict[str, int]:
    return {name: DeltaTable(str(out / name)).version() for name in (*OUTPUT_TABLES,)}


def test_tables_are_delta_tables_delta_rs_reads(spark: SparkSession, events_path: str, tmp_path):
    out = tmp_path / "out"
    report = run_reconstruct(spark, events_path, str(out), Settings())
    pel = DeltaTable(str(out / "pel")).to_pyarrow_table().to_pylist()
    assert [(r["key"], r["group"], r["id"], r["consumer"], r["delivery_count"]) for r in pel] == [
        ("orders", "g", "2-0", "c", 1)
    ]
    rejected = DeltaTable(str(out / "rejected_events")).to_pyarrow_table().to_pylist()
    assert [(r["seq"], r["reason"]) for r in rejected] == [(6, "null argv")]
    saved = json.loads((out / "_run_report.json").read_text())
    assert saved == report
    assert report["events"]["read"] == 6
    assert report["events"]["rejected"] == 1
    assert report["events"]["applied"] == 5
    assert report["output"]["rows"]["pel"] == 1
    assert report["input"]["delta_version"] == storage.table_version(spark, events_path)


def test_spark_actions_are_the_top_level_queries(spark: SparkSession, events_path: str, tmp_path):
    from pelengine.progress import spark_actions_since, spark_queries_so_far
    from pelengine.runs.output import format_report

    since = spark_queries_so_far(spark)
    assert since is not None
    df = spark.range(1000)
    df.count()
    # a shuffle: more than one job under adaptive execution, still one action
    assert len(df.groupBy((df.id % 7).alias("k")).count().collect()) == 7
    assert spark_actions_since(spark, since) == 2
    report = run_reconstruct(spark, events_path, str(tmp_path / "out"), Settings())
    assert report["spark_actions"] > 0 and report["spark_jobs"] > 0
    assert f"{report['spark_actions']} Spark actions, {report['spark_jobs']} Spark jobs" in (
        format_report(report)
    )


def test_rerun_with_same_txn_version_changes_nothing(
    spark: SparkSession, events_path: str, tmp_path
) -> None:
    out = tmp_path / "out"
    settings = Settings(txn_app_id="nightly", txn_version=7)
    run_reconstruct(spark, events_path, str(out), settings)
    first = _versions(out)
    run_reconstruct(spark, events_path, str(out), settings)
    assert _versions(out) == first
    run_reconstruct(spark, events_path, str(out), Settings(txn_app_id="nightly", txn_version=8))
    assert all(v == first[name] + 1 for name, v in _versions(out).items())


def test_missing_events_table_is_a_clear_error(spark: SparkSession, tmp_path) -> None:
    with pytest.raises(InputContractError, match="--events .*no Delta table"):
        run_reconstruct(spark, os.fspath(tmp_path / "nothing"), os.fspath(tmp_path / "out"))


def test_cli_reconstruct_and_summary(
    spark: SparkSession, events_path: str, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pelengine import cli

    out = str(tmp_path / "out")
    code = cli.run(
        ["reconstruct", "--events", events_path, "--out", out, "--redis-version", "valkey-8.1.8"],
        spark=spark,
        progress=lambda _: None,
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "applied 5" in printed and "rejected 1" in printed
    report = json.loads((tmp_path / "out" / "_run_report.json").read_text())
    assert report["profile"] == "valkey-8.1"
    assert report["profile_reason"] == "valkey-8.1.8: measured live against Valkey 8.1.8"
    assert "profile valkey-8.1 (valkey-8.1.8: measured live against Valkey 8.1.8)" in printed
    assert cli.run(["summary", "--out", out], spark=spark, progress=lambda _: None) == 0
    summary = capsys.readouterr().out
    assert "1 streams, 1 groups, 1 consumers, 1 pending entries" in summary


def test_cli_reconstruct_of_a_missing_table_exits_nonzero(
    spark: SparkSession, tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pelengine import cli

    code = cli.run(
        ["reconstruct", "--events", str(tmp_path / "none"), "--out", str(tmp_path / "o")],
        spark=spark,
        progress=lambda _: None,
    )
    assert code != 0
    assert "none" in capsys.readouterr().err
