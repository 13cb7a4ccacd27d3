"""A dump.rdb, then a MONITOR capture recorded after it, through the CLI and the job.

On every kind of server (``appendonly yes``, so ``--ids-from-aof`` has the server's
own IDs): a seeded random workload in two dbs; ``SAVE`` (the ``dump.rdb``); a MONITOR
capture started AFTER the save; more workload on the saved streams (``flush=False``),
in a fresh db, and readers blocked at once on the saved state (``run_blocking_phase``);
the capture stopped. Then, with the test session's Spark:

    pelengine ingest-rdb dump.rdb --events E
    pelengine ingest-monitor monitor.log --events E --ids-from-aof <aof dir> \\
        --redis-version <the server's profile>

and ``reconstruct`` with the server's profile. Every table must equal the live
server's final state (consumers' times included: the snapshot carries the saved
ones, the capture the later ones); the run report's ``starting_state`` must name the
snapshot's rows (source ``rdb``). The events the CLI wrote are also replayed through
the model with the test's records of the replies (``check_model``): every command's
outcome and ``ownership_changes`` row judged against what the server answered, and
the job's ``ownership_changes`` against the same replies (as test_monitor_job.py).

Knob: ``PELENGINE_RDB_MONITOR_COMMANDS`` (commands per workload phase, default 600).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from pelengine.model.commands import LOAD_COMMAND
from tests.redis_diff.aof_support import aof_dir, aof_server
from tests.redis_diff.capture import Record, SeqCounter
from tests.redis_diff.compare import compare_tables, format_mismatches
from tests.redis_diff.harness import (
    UNJUDGED,
    check_job_changes,
    check_model,
    pending_delivery_counts,
)
from tests.redis_diff.monitor_capture import (
    MonitorCapture,
    align,
    run_blocking_phase,
)
from tests.redis_diff.server import ServerKind, stop_server
from tests.redis_diff.truth import TABLES, read_truth
from tests.redis_diff.workload import AmbiguousTimingError, run_workload
from tests.runners import assert_local_runner_agrees

pytestmark = [pytest.mark.redis, pytest.mark.spark]

SEED = 701
COMMANDS = int(os.environ.get("PELENGINE_RDB_MONITOR_COMMANDS", "600"))
DBS = [1, 2, 3]
ATTEMPTS = 3


def record_server(kind: ServerKind, tmp_path: Path) -> tuple[Any, ...]:
    """Run the server side; return (server, dump, aof copy, capture, sent records, truth).
    A phase continuing on the saved state that hits an idle boundary starts over."""
    for attempt in range(ATTEMPTS):
        work = tmp_path / f"attempt{attempt}"
        work.mkdir()
        server = aof_server(kind)
        try:
            run_workload(server, SEED, COMMANDS, db=1, allow_flushdb=False)
            run_workload(server, SEED + 1, COMMANDS, db=2, allow_flushdb=False)
            with server.client() as c:
                c.execute_command("SAVE")
            dump = work / "dump.rdb"
            shutil.copyfile(os.path.join(server.workdir, "dump.rdb"), dump)
            capture = MonitorCapture(server, work / "monitor.log")  # after the save
            sent: list[Record] = []
            counter = SeqCounter(1)  # one order over every connection (align pairs by it)
            try:
                sent += run_workload(
                    server, SEED + 2, COMMANDS, 1, counter, star_mode="keep", flush=False
                ).records
                sent += run_workload(
                    server, SEED + 3, COMMANDS, 3, counter, star_mode="keep"
                ).records
                sent += run_blocking_phase(server, SEED, db=2, rounds=2, counter=counter)
            except AmbiguousTimingError:
                capture.stop()
                continue
            path = capture.stop()
            truth = read_truth(server, DBS)
            aof = work / "appendonlydir"
            shutil.copytree(aof_dir(server), aof)
            return server, dump, aof, path, sent, truth
        finally:
            stop_server(server)
    pytest.fail(f"{ATTEMPTS} attempts hit an idle boundary")


def test_rdb_then_monitor_through_cli_and_job(
    server_kind: ServerKind, spark: Any, tmp_path: Path
) -> None:
    from pelengine.cli import run
    from pelengine.pipeline.reconstruct import reconstruct
    from pelengine.settings import Settings
    from pelengine.storage import read_table
    from tests.redis_diff.test_differential_job import collect_tables

    server, dump, aof, capture, sent, truth = record_server(server_kind, tmp_path)
    profile = server.profile
    events = str(tmp_path / "events")
    assert run(["ingest-rdb", str(dump), "--events", events], spark=spark) == 0
    argv = ["ingest-monitor", str(capture), "--events", events, "--ids-from-aof", str(aof)]
    assert run([*argv, "--redis-version", profile], spark=spark) == 0

    df = read_table(spark, events)
    rows = [r.asDict() for r in df.orderBy("seq").collect()]
    loads = [r for r in rows if r["argv"][0] == LOAD_COMMAND]
    n_load = len(loads)
    assert rows[:n_load] == loads and {r["source"] for r in loads} == {"rdb"}
    assert any(r["argv"][1] == "PENDING" for r in loads), "the snapshot holds no PEL"
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    # the replies judge outcomes; the rows are the CLI's (seq after the load rows)
    aligned = align(capture, sent, profile=profile)
    assert len(rows) == n_load + len(aligned.records)
    # a command MONITOR does not show is one the server refused before running it
    assert all(r.error is not None for r in aligned.unmatched_test_records)
    records = []
    for rec, row in zip(aligned.records, rows[n_load:], strict=True):
        assert row["client"] == rec.client and row["ts_ms"] == rec.ts_ms
        records.append(dataclasses.replace(rec, seq=row["seq"], argv=list(row["argv"])))
    judged = [r for r in records if r.note != UNJUDGED]

    verdict = check_model(
        f"{server.describe()} dump.rdb + MONITOR (model)",
        records,
        truth,
        profile=profile,
        start=loads,
        tolerance_ms=aligned.tolerance_ms,
    )
    print(verdict.summary())
    assert verdict.ok, verdict.report()

    settings = Settings(profile=profile)
    result = reconstruct(spark, df, settings)
    assert_local_runner_agrees(result, df, settings)
    [start] = result.report["starting_state"]
    assert start["source"] == "rdb" and start["rows"] == n_load
    assert (start["first_seq"], start["last_seq"]) == (1, n_load)
    got = collect_tables(result)
    got = {name: [r for r in table if r.get("db") in DBS] for name, table in got.items()}
    problems = compare_tables(truth, got, TABLES, aligned.tolerance_ms) + pending_delivery_counts(
        truth, got
    )
    change_problems = check_job_changes(judged, got.get("ownership_changes", []))
    loaded = [c for c in got["ownership_changes"] if c["change"] == "loaded"]
    print(
        f"{server.describe()} dump.rdb -> ingest-rdb ({n_load} load rows) + MONITOR -> "
        f"ingest-monitor ({len(aligned.records)} events, {len(judged)} judged) -> job: "
        f"{sum(len(truth[t]) for t in TABLES)} truth rows, mismatches {len(problems)}, "
        f"ownership_changes vs replies {len(change_problems)}, {len(loaded)} loaded entries"
    )
    assert not change_problems, change_problems[:10]
    assert not problems, format_mismatches(problems, 20)
    assert loaded and all(c["seq"] <= n_load for c in loaded)
