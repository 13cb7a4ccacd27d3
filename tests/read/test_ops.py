"""``pelengine report`` and ``pelengine sql`` on small hand-built output tables.

The tables are written through the storage seam as a reconstruct run would: ``pel``,
``ownership`` and three versions of ``groups`` (the third a rerun of the second: same
``as_of_seq``). Each report category is built to hold rows on both sides of its
threshold, so a row present or absent says the threshold was honoured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pelengine import cli, storage
from pelengine.read.report import Thresholds, build_report
from pelengine.schemas import TABLE_COLUMNS, table_schema

pytestmark = pytest.mark.spark

AS_OF = 1_000_000
SEQ = 20


def _write(spark: SparkSession, out: Path, name: str, rows: list[dict[str, Any]]) -> None:
    full = [
        {c: row.get(c) for c in TABLE_COLUMNS[name]}
        | {"as_of_ms": row.get("as_of_ms", AS_OF), "as_of_seq": row.get("as_of_seq", SEQ)}
        for row in rows
    ]
    df = spark.createDataFrame(full, table_schema(name))
    storage.write_table(df, storage.table_path(str(out), name), "overwrite")


def _pel(key: str, group: str, id_: str, consumer: str, delivered: int, count: int, exists=True):
    ms, seq = (int(x) for x in id_.split("-"))
    return {
        "db": 0,
        "key": key,
        "group": group,
        "id": id_,
        "id_ms": ms,
        "id_seq": seq,
        "consumer": consumer,
        "delivery_time_ms": delivered,
        "delivery_count": count,
        "entry_exists": exists,
        "idle_ms": AS_OF - delivered,
    }


def _owner(
    consumer: str, pending: int, seen: int, active: int | None, key: str = "s1", group: str = "g1"
) -> dict[str, Any]:
    return {
        "db": 0,
        "key": key,
        "group": group,
        "consumer": consumer,
        "pending": pending,
        "seen_time_ms": seen,
        "active_time_ms": active,
    }


def _groups(lags: dict[str, int | None], seq: int) -> list[dict[str, Any]]:
    return [
        {"db": 0, "key": k, "group": "g", "lag": lag, "pending": 0, "consumers": 0}
        | {"as_of_ms": AS_OF - (SEQ - seq) * 1000, "as_of_seq": seq}
        for k, lag in lags.items()
    ]


@pytest.fixture(scope="module")
def root(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ops") / "out"
    pel = [
        _pel("s1", "g1", "1-0", "alice", AS_OF - 1_000, 1),  # nothing
        _pel("s1", "g1", "2-0", "alice", AS_OF - 10_000, 3),  # poison (3 >= 3), stuck
        _pel("s1", "g1", "3-0", "bob", AS_OF - 5_000, 2, exists=False),  # dangling; idle == T
        _pel("s2", "g2", "1-0", "carol", AS_OF - 1, 5),  # poison
    ]
    _write(spark, out, "pel", pel)
    _write(
        spark,
        out,
        "ownership",
        [
            _owner("alice", 2, AS_OF - 100_000, None),  # dead, by seen time
            _owner("bob", 1, AS_OF - 1_000, AS_OF - 70_000),  # dead, by active time
            _owner("carol", 1, AS_OF - 10_000, None, "s2", "g2"),  # active enough
            _owner("dave", 0, 0, None),  # owns nothing
        ],
    )
    before = {"grow": 5, "flat": 3, "nil": None, "shrink": 2}
    now = {"grow": 7, "flat": 3, "nil": 4, "shrink": 1, "new": 9}
    _write(spark, out, "groups", _groups(before, 10))
    _write(spark, out, "groups", _groups(now, SEQ))
    _write(spark, out, "groups", _groups(now, SEQ))  # a rerun: the same snapshot again
    return out


def _run(spark: SparkSession, argv: list[str]) -> int:
    return cli.run(argv, spark=spark, progress=lambda _: None)


def test_report_categories_and_thresholds(
    spark: SparkSession, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--poison-count", "3", "--stuck-idle-ms", "5000", "--dead-inactive-ms", "60000"]
    assert _run(spark, ["report", "--out", str(root), *flags]) == 0
    printed = capsys.readouterr().out

    def read(name: str, *cols: str) -> list[tuple[Any, ...]]:
        df = storage.read_table(spark, storage.table_path(str(root), name))
        return sorted(tuple(r) for r in df.select(*cols).collect())

    assert read("report_poison", "key", "id", "delivery_count") == [
        ("s1", "2-0", 3),
        ("s2", "1-0", 5),
    ]
    assert read("report_stuck", "key", "id", "idle_ms") == [("s1", "2-0", 10_000)]
    assert read("report_dead_consumers", "consumer", "inactive_ms", "inactive_basis") == [
        ("alice", 100_000, "seen_time"),
        ("bob", 70_000, "active_time"),
    ]
    assert read("report_dangling", "key", "id", "consumer") == [("s1", "3-0", "bob")]
    # versions 0, 1, 2 of groups: 2 repeats 1 (same as_of_seq), so 2 is compared with 0
    assert read("report_lag", "key", "trend", "lag", "previous_lag", "versions") == [
        ("grow", "growing", 7, 5, [0, 2]),
        ("nil", "unknown", 4, None, [0, 2]),
    ]
    assert "Poison candidates (delivered >= 3 times): 2" in printed
    assert "Stuck entries (idle > 5000 ms): 1" in printed
    assert "Dead consumers (pending > 0, inactive > 60000 ms): 2" in printed
    assert "Dangling entries (pending, but deleted from the stream): 1" in printed
    assert "lag compared across groups versions [0, 2]" in printed

    # the library: other thresholds, idle/inactive measured at a later moment
    later = build_report(
        spark, str(root), Thresholds(4, 100_000, 60_000, 2), now_ms=AS_OF + 100_000
    )
    counts = {name: df.count() for name, df in later.tables.items()}
    assert counts == {
        "report_poison": 1,  # only the count-5 entry
        "report_stuck": 4,  # idle 100_001 .. 110_000 ms at now_ms
        "report_dead_consumers": 3,  # carol too (inactive 110 s)
        "report_dangling": 1,
        "report_lag": 0,  # lag_runs 2 needs 3 distinct snapshots: there are 2
    }
    assert "needs 3" in later.notes[0]
    assert later.facts()["now_ms"] == AS_OF + 100_000


def test_sql_over_the_tables(
    spark: SparkSession, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    query = (
        "SELECT p.consumer, count(*) AS n, max(o.pending) AS owned FROM pel p "
        "JOIN ownership o USING (db, key, `group`, consumer) GROUP BY p.consumer ORDER BY n DESC"
    )
    assert _run(spark, ["sql", query, "--out", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["consumer", "n", "owned"]
    assert lines[2].split() == ["alice", "2", "2"]
    assert lines[-1] == "(3 rows)"
    assert _run(spark, ["sql", "SELECT key, lag FROM groups ORDER BY key", "--out", str(root)]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:-1]]
    assert rows[2:4] == [["new", "9"], ["nil", "4"]]  # the current version of groups
    args = ["--out", str(root), "--json", "--limit", "1"]
    assert _run(spark, ["sql", "SELECT id FROM pel ORDER BY id_ms DESC, key", *args]) == 0
    assert json.loads(capsys.readouterr().out) == [{"id": "3-0"}]
    assert _run(spark, ["sql", "SELECT key, lag FROM groups", "--out", str(root), "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "key,lag"


def test_sql_unknown_table_lists_the_views(
    spark: SparkSession, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(spark, ["sql", "SELECT * FROM pells", "--out", str(root)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "TABLE_OR_VIEW_NOT_FOUND" in err and "`pells`" in err
    assert "views of --out" in err and "pel, ownership, groups" in err
    assert "SQLQueryContextLogger" not in err  # reported once, not logged with the JVM stack


def test_missing_table_is_named(
    spark: SparkSession, root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    only_groups = tmp_path / "partial"
    _write(spark, only_groups, "groups", _groups({"a": 1}, 1))
    assert _run(spark, ["report", "--out", str(only_groups)]) == cli.EXIT_FAILED
    assert "no pel table under --out" in capsys.readouterr().err
    for argv in (["pending", "a", "g"], ["summary"]):
        assert _run(spark, [*argv, "--out", str(only_groups)]) == cli.EXIT_FAILED
        err = capsys.readouterr().err
        assert f"no pel table under --out {only_groups}" in err
        assert "Traceback" not in err  # the message says it all
