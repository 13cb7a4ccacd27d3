"""What a night writes (output contract version 2): exactly the history rows that differ.

Each case runs a full recomputation before the night (``before``), the night itself
(``inc``, continuing from a first incremental run over the same rows) and a full
recomputation after it (``after``). The night's tables must equal ``after`` (snapshot
tables with their ``as_of_*``, history tables as row sets), and the rows the night wrote
to each history table (its commit metrics, the report's ``output.rows``) must be exactly
the rows of ``after`` that ``before`` does not have: nothing rewritten that did not
change, nothing missed. The logs are written by hand so that each night is one of the
cases users have: a night that touches one family of a thousand, a ``RENAME`` night
(rows of closed entries move to the new key), a ``FLUSHALL`` night (every entry of every
group closes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, HISTORY_TABLES, OUTPUT_TABLES
from pelengine.settings import Settings

pytestmark = [pytest.mark.spark, pytest.mark.stores]

HISTORY = (*HISTORY_TABLES, "rejected_events")


class Log:
    """Rows of an events table, numbered as they are added."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def __call__(self, *argv: str, client: str = "c") -> None:
        n = len(self.rows) + 1
        self.rows.append(
            {
                "seq": n,
                "ts_ms": 1_700_000_000_000 + 10 * n,
                "argv": list(argv),
                "db": 0,
                "client": client,
                "source": "t",
            }
        )

    def since(self, mark: int) -> list[dict[str, Any]]:
        return self.rows[mark:]


def _busy_key(log: Log, key: str, entries: int = 3) -> None:
    """A stream with a group, entries delivered to two consumers, one of them acked."""
    log("XGROUP", "CREATE", key, "g", "$", "MKSTREAM")
    for i in range(entries):
        log("XADD", key, f"{i + 1}-0", "f", "v")
    log("XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", key, ">")
    log("XREADGROUP", "GROUP", "g", "bob", "STREAMS", key, ">")
    log("XACK", key, "g", "1-0")


def _rows(spark: SparkSession, root: Path, name: str) -> Any:
    return storage.read_table(spark, str(root / name))


def _night(spark: SparkSession, tmp_path: Path, first: list[Any], night: list[Any]) -> dict:
    """Run the three sides of a night (see the module docstring); return the night's
    report after checking its tables."""
    events = str(tmp_path / "events")
    inc, before, after = tmp_path / "inc", tmp_path / "before", tmp_path / "after"
    storage.write_table(spark.createDataFrame(first, EVENTS_SCHEMA), events, "overwrite")
    assert (
        run_reconstruct(spark, events, str(inc), Settings(incremental=True))["incremental"]["mode"]
        == "full"
    )
    run_reconstruct(spark, events, str(before), Settings())
    storage.write_table(spark.createDataFrame(night, EVENTS_SCHEMA), events, "append")
    report = run_reconstruct(spark, events, str(inc), Settings(incremental=True))
    assert report["incremental"]["mode"] == "incremental", report["incremental"]
    run_reconstruct(spark, events, str(after), Settings())
    for name in (*OUTPUT_TABLES, "rejected_events"):
        assert_df_equality(
            _rows(spark, inc, name),
            _rows(spark, after, name),
            ignore_row_order=True,
            ignore_nullable=True,
            ignore_column_order=True,
        )
    written = report["output"]["rows"]
    for name in HISTORY:
        differ = _rows(spark, after, name).exceptAll(_rows(spark, before, name)).count()
        assert written.get(name, 0) == differ, (name, written, differ)
    return report


@pytest.fixture
def log() -> Iterator[Log]:
    yield Log()


def test_a_night_touching_one_family_of_a_thousand_writes_its_rows_only(
    spark: SparkSession, tmp_path: Path, log: Log
) -> None:
    for k in range(1000):
        log("XGROUP", "CREATE", f"k{k:04d}", "g", "$", "MKSTREAM")
        log("XADD", f"k{k:04d}", "1-0", "f", "v")
        log("XREADGROUP", "GROUP", "g", "alice", "STREAMS", f"k{k:04d}", ">")
    mark = len(log.rows)
    log("XADD", "k0500", "2-0", "f", "v")
    log("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "k0500", ">")
    log("XCLAIM", "k0500", "g", "bob", "0", "1-0")
    report = _night(spark, tmp_path, log.rows[:mark], log.since(mark))
    inc = report["incremental"]
    assert (inc["families_replayed"], inc["families_total"]) == (1, 1000)
    rows = report["output"]["rows"]
    # 2-0 delivered to bob, 1-0 claimed by him: two changes, two delivery rows
    assert (rows["ownership_changes"], rows["delivery_counts"]) == (2, 2), rows


def test_a_rename_night_moves_the_rows_of_closed_entries(
    spark: SparkSession, tmp_path: Path, log: Log
) -> None:
    _busy_key(log, "orders")
    _busy_key(log, "audit")
    mark = len(log.rows)
    log("RENAME", "orders", "orders:old")
    log("XREADGROUP", "GROUP", "g", "carol", "STREAMS", "audit", ">")
    log("XADD", "orders:old", "9-0", "f", "v")
    log("XREADGROUP", "GROUP", "g", "carol", "STREAMS", "orders:old", ">")
    report = _night(spark, tmp_path, log.rows[:mark], log.since(mark))
    # the acked 1-0 of orders (closed on the first night) moved too
    moved = (
        _rows(spark, tmp_path / "inc", "delivery_counts")
        .filter("key = 'orders:old' AND id = '1-0'")
        .collect()
    )
    assert [(r["status"], r["changed_seq"]) for r in moved] == [("acked", mark + 1)]
    inc = report["incremental"]
    assert (inc["families_replayed"], inc["families_total"]) == (2, 2)


def test_a_flushall_night_closes_every_entry(spark: SparkSession, tmp_path: Path, log: Log) -> None:
    _busy_key(log, "a")
    _busy_key(log, "b")
    log("XADD", "c", "1-0", "f", "v")
    mark = len(log.rows)
    log("FLUSHALL")
    _busy_key(log, "a", entries=1)
    report = _night(spark, tmp_path, log.rows[:mark], log.since(mark))
    statuses = {
        (r["key"], r["id"], r["group_created_seq"]): r["status"]
        for r in _rows(spark, tmp_path / "inc", "delivery_counts").collect()
    }
    assert statuses[("b", "2-0", 8)] == "key_deleted", statuses
    assert report["incremental"]["families_replayed"] == report["incremental"]["families_total"]
