"""What a night writes (output contract version 2): exactly the history rows that differ.

One output continues through four nights, each one of the cases users have: a night
that touches one family of a thousand, a ``RENAME`` night (rows of entries closed on an
earlier night move to the new key), a ``FLUSHALL`` night (every entry of every group
closes). After each night its tables must equal a full recomputation over the same
events (snapshot tables with their ``as_of_*``, history tables as row sets), and the rows
the night wrote to each history table (its commit metrics, the report's ``output.rows``)
must be exactly the rows that differ between the full tables before it (the previous
run's, read at the versions its ``_runs`` row names) and after it: nothing rewritten that
did not change, nothing missed. The logs are written by hand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, HISTORY_TABLES, OUTPUT_TABLES
from pelengine.settings import Settings
from tests.frames import assert_same_rows, rows_of

# both stores; the embedded repeat (whose nights the property tests of test_incremental also
# run there) only with PELENGINE_TEST_HEAVY=1
pytestmark = [pytest.mark.spark, pytest.mark.stores, pytest.mark.heavy("embedded")]

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


def _rows(spark: SparkSession, root: Path, name: str, version: int | None = None) -> Any:
    return storage.read_table(spark, str(root / name), version)


def _night(
    spark: SparkSession, tmp_path: Path, n: int, rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """Append ``rows`` as night ``n``, run it and a full recomputation, check the night
    (see the module docstring); return its report."""
    events, inc, after = str(tmp_path / "events"), tmp_path / "inc", tmp_path / f"full{n}"
    before = (storage.newest_run(spark, str(inc)) or {})["tables"]
    storage.write_table(spark.createDataFrame(rows, EVENTS_SCHEMA), events, "append")
    report = run_reconstruct(spark, events, str(inc), Settings(incremental=True))
    assert report["incremental"]["mode"] == "incremental", report["incremental"]
    run_reconstruct(spark, events, str(after), Settings())
    full = {
        name: assert_same_rows(
            _rows(spark, after, name), _rows(spark, inc, name), ignore_column_order=True, what=name
        )
        for name in (*OUTPUT_TABLES, "rejected_events")
    }
    written = report["output"]["rows"]
    for name in HISTORY:
        # the full run's rows (as the night's, equal) against the previous run's
        previous = _rows(spark, inc, name, before[name]).select(*_rows(spark, after, name).columns)
        old, new = rows_of(previous), full[name]
        differ = (new - old).total()
        assert (old - new).total() <= differ  # rows change or come, never just go
        assert written.get(name, 0) == differ, (n, name, written, differ)
    if report["storage"] == "delta-spark":
        # deletion vectors: a merge marks the rows it replaces, it rewrites no file
        physical = report["output"].get("rows_rewritten", {})
        for name in ("delivery_counts", "pel_history"):
            assert physical.get(name, 0) == written.get(name, 0), (n, name, physical, written)
    return report


def test_nights_write_exactly_the_history_rows_that_differ(
    spark: SparkSession, tmp_path: Path
) -> None:
    log = Log()
    for k in range(1000):
        log("XGROUP", "CREATE", f"k{k:04d}", "g", "$", "MKSTREAM")
        log("XADD", f"k{k:04d}", "1-0", "f", "v")
        log("XREADGROUP", "GROUP", "g", "alice", "STREAMS", f"k{k:04d}", ">")
    orders = len(log.rows) + 1
    _busy_key(log, "orders")
    _busy_key(log, "audit")

    storage.write_table(
        spark.createDataFrame(log.rows, EVENTS_SCHEMA), str(tmp_path / "events"), "overwrite"
    )
    report = run_reconstruct(
        spark, str(tmp_path / "events"), str(tmp_path / "inc"), Settings(incremental=True)
    )
    assert report["incremental"]["mode"] == "full"

    # one family of a thousand and two: 2-0 delivered to bob, 1-0 claimed by him
    mark = len(log.rows)
    log("XADD", "k0500", "2-0", "f", "v")
    log("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "k0500", ">")
    log("XCLAIM", "k0500", "g", "bob", "0", "1-0")
    report = _night(spark, tmp_path, 1, log.since(mark))
    inc = report["incremental"]
    assert (inc["families_replayed"], inc["families_total"]) == (1, 1002)
    rows = report["output"]["rows"]
    assert (rows["ownership_changes"], rows["delivery_counts"], rows["pel_history"]) == (2, 2, 3)
    # every row it replaced was pending: its merge read the pending partition alone
    assert report["output"]["merge_reads"] == {"delivery_counts": "pending partition"}

    # a RENAME: the acked 1-0 of orders (closed on the first night) moves too
    mark = len(log.rows)
    log("RENAME", "orders", "orders:old")
    log("XREADGROUP", "GROUP", "g", "carol", "STREAMS", "audit", ">")
    log("XADD", "orders:old", "9-0", "f", "v")
    log("XREADGROUP", "GROUP", "g", "carol", "STREAMS", "orders:old", ">")
    report = _night(spark, tmp_path, 2, log.since(mark))
    assert report["incremental"]["families_replayed"] == 2
    moved = _rows(spark, tmp_path / "inc", "delivery_counts").filter(
        f"key = 'orders:old' AND id = '1-0' AND group_created_seq = {orders}"
    )
    assert [(r["status"], r["changed_seq"]) for r in moved.collect()] == [("acked", mark + 1)]
    # the acked rows of orders moved: the merge met the whole table
    assert report["output"]["merge_reads"]["delivery_counts"].startswith("whole table")

    # FLUSHALL: every entry of every group closes; a key made again is a new incarnation
    mark = len(log.rows)
    log("FLUSHALL")
    _busy_key(log, "audit", entries=1)
    report = _night(spark, tmp_path, 3, log.since(mark))
    inc = report["incremental"]
    assert inc["families_replayed"] == inc["families_total"]
    statuses = {
        (r["key"], r["id"], r["group_created_seq"]): r["status"]
        for r in _rows(spark, tmp_path / "inc", "delivery_counts").collect()
    }
    assert statuses[("k0500", "2-0", 1501)] == "key_deleted"
    assert statuses[("audit", "1-0", mark + 2)] == "acked"
    audit = mark + 2

    # an acked entry claimed again (FORCE): its closed row is pending again, the merge
    # meets the whole table to replace it
    mark = len(log.rows)
    log("XCLAIM", "audit", "g", "dave", "0", "1-0", "FORCE")
    report = _night(spark, tmp_path, 4, log.since(mark))
    assert report["output"]["merge_reads"]["delivery_counts"].startswith("whole table")
    row = _rows(spark, tmp_path / "inc", "delivery_counts").filter(
        f"key = 'audit' AND id = '1-0' AND group_created_seq = {audit}"
    )
    assert [(r["status"], r["deliveries"]) for r in row.collect()] == [("pending", 2)]
