"""What a night writes (output contract version 2): exactly the history rows that differ.

One output continues through four nights, each one of the cases users have: a night
that touches one family of a thousand, a ``RENAME`` night (rows of entries closed on an
earlier night move to the new key), a ``FLUSHALL`` night (every entry of every group
closes). After each night its tables must equal a full recomputation over the same
events (snapshot tables with their ``as_of_*``, history tables as row sets), and the rows
the night wrote to each history table (its commit metrics, the report's ``output.rows``)
must be exactly the rows that differ between the full tables before it (the previous
run's, read at the versions its ``_runs`` row names) and after it: nothing rewritten that
did not change, nothing missed. The logs are written by hand. Both runners: the local
runner's nights read of ``delivery_counts`` only its ``pending`` partition and the closed
rows they continue, and merge into the pending partition alone where they can, as the
Spark runner's do.

Suite time: the full recomputation is the pipeline's tables collected as Arrow, not written
(ten commits less a night), and the night's tables are read through delta-rs (no Spark job
per table): 282 worker-s before, in make test's delta-spark pass.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.pipeline.reconstruct import reconstruct
from pelengine.runs.full import run_reconstruct
from pelengine.schemas import EVENTS_SCHEMA, HISTORY_TABLES, OUTPUT_TABLES
from pelengine.settings import Settings
from tests.delta_rs import delta_rs_table
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


def _table(root: Path, name: str, version: int | None = None) -> Any:
    """A table as delta-rs reads it (not our reader; no Spark job)."""
    return delta_rs_table(root / name, version)


def _night(
    spark: SparkSession, tmp_path: Path, n: int, rows: list[dict[str, Any]], runner: str
) -> dict[str, Any]:
    """Append ``rows`` as night ``n``, run it and a full recomputation, check the night
    (see the module docstring); return its report."""
    events, inc = str(tmp_path / "events"), tmp_path / "inc"
    before = (storage.newest_run(spark, str(inc)) or {})["tables"]
    storage.write_table(spark.createDataFrame(rows, EVENTS_SCHEMA), events, "append")
    report = run_reconstruct(spark, events, str(inc), Settings(incremental=True, runner=runner))
    assert report["incremental"]["mode"] == "incremental", report["incremental"]
    assert report.get("runner", "spark") == runner
    # the full recomputation: the pipeline's tables over the whole events table, collected
    # (a full run's writes are every other run test's business)
    result = reconstruct(spark, storage.read_table(spark, events), Settings())
    after = {
        name: df.toArrow()
        for name, df in {**result.tables, "rejected_events": result.rejected}.items()
    }
    result.unpersist()
    full = {
        name: assert_same_rows(after[name], _table(inc, name), ignore_column_order=True, what=name)
        for name in (*OUTPUT_TABLES, "rejected_events")
    }
    written = report["output"]["rows"]
    for name in HISTORY:
        # the full run's rows (as the night's, equal) against the previous run's
        previous = _table(inc, name, before[name]).select(after[name].column_names)
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


def _delivery_counts(tmp_path: Path) -> list[dict[str, Any]]:
    return _table(tmp_path / "inc", "delivery_counts").to_pylist()  # type: ignore[no-any-return]


@pytest.mark.parametrize("runner", ["spark", "local"])
def test_nights_write_exactly_the_history_rows_that_differ(
    spark: SparkSession, tmp_path: Path, runner: str
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
        spark,
        str(tmp_path / "events"),
        str(tmp_path / "inc"),
        Settings(incremental=True, runner=runner),
    )
    assert report["incremental"]["mode"] == "full"

    # one family of a thousand and two: 2-0 delivered to bob, 1-0 claimed by him
    mark = len(log.rows)
    log("XADD", "k0500", "2-0", "f", "v")
    log("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "k0500", ">")
    log("XCLAIM", "k0500", "g", "bob", "0", "1-0")
    report = _night(spark, tmp_path, 1, log.since(mark), runner)
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
    report = _night(spark, tmp_path, 2, log.since(mark), runner)
    assert report["incremental"]["families_replayed"] == 2
    moved = [
        (r["status"], r["changed_seq"])
        for r in _delivery_counts(tmp_path)
        if (r["key"], r["id"], r["group_created_seq"]) == ("orders:old", "1-0", orders)
    ]
    assert moved == [("acked", mark + 1)]
    # the acked rows of orders moved: the merge met the whole table (the local runner
    # rewrote the closed file holding them)
    assert _met_closed(report, runner)

    # FLUSHALL: every entry of every group closes; a key made again is a new incarnation
    mark = len(log.rows)
    log("FLUSHALL")
    _busy_key(log, "audit", entries=1)
    report = _night(spark, tmp_path, 3, log.since(mark), runner)
    inc = report["incremental"]
    assert inc["families_replayed"] == inc["families_total"]
    statuses = {
        (r["key"], r["id"], r["group_created_seq"]): r["status"] for r in _delivery_counts(tmp_path)
    }
    assert statuses[("k0500", "2-0", 1501)] == "key_deleted"
    assert statuses[("audit", "1-0", mark + 2)] == "acked"
    audit = mark + 2

    # an acked entry claimed again (FORCE): its closed row is pending again, the merge
    # meets the whole table to replace it
    mark = len(log.rows)
    log("XCLAIM", "audit", "g", "dave", "0", "1-0", "FORCE")
    report = _night(spark, tmp_path, 4, log.since(mark), runner)
    assert _met_closed(report, runner)
    row = [
        (r["status"], r["deliveries"])
        for r in _delivery_counts(tmp_path)
        if (r["key"], r["id"], r["group_created_seq"]) == ("audit", "1-0", audit)
    ]
    assert row == [("pending", 2)]


def _met_closed(report: dict[str, Any], runner: str) -> bool:
    """Whether the night's write of delivery_counts met its closed rows: on the Spark
    runner a merge over the whole table, on the local runner the closed files holding a
    row it replaced, rewritten (never all of them: nothing else changed)."""
    met = report["output"]["merge_reads"]["delivery_counts"]
    if runner == "spark":
        return bool(met.startswith("whole table"))
    return bool(re.fullmatch(r"pending partition and 1 closed file\(s\) of \d+", met))
