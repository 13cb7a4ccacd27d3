"""A MONITOR capture through ``pelengine ingest-monitor`` and the Spark job equals the server.

Three seeds (random workload + blocked readers) on three dbs of one server of each
kind (Redis 7.0, Valkey 8.1, Valkey 9.1; with ``appendonly yes``) run while MONITOR
captures; the CLI writes the events Delta table from the capture file, with
``--ids-from-aof`` pointing at the server's appendonlydir, ``reconstruct`` replays
it with the server's profile, and every table is compared with the server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.redis_diff.aof_support import aof_dir, aof_server
from tests.redis_diff.compare import compare_tables, format_mismatches
from tests.redis_diff.harness import UNJUDGED, check_job_changes, pending_delivery_counts
from tests.redis_diff.monitor_capture import (
    MonitorCapture,
    align,
    run_blocking_phase,
)
from tests.redis_diff.server import RedisServer, ServerKind, on_job_kinds, stop_server
from tests.redis_diff.truth import TABLES, read_truth
from tests.redis_diff.workload import run_workload
from tests.runners import assert_local_runner_agrees

pytestmark = [pytest.mark.redis, pytest.mark.spark]

SEEDS = (401, 402, 403)
COMMANDS_PER_SEED = 300


@pytest.fixture
def aof_redis(server_kind: ServerKind) -> Any:
    server = aof_server(server_kind)
    try:
        yield server
    finally:
        stop_server(server)


@on_job_kinds
def test_capture_through_cli_and_job_matches_redis(
    aof_redis: RedisServer, spark: Any, tmp_path: Path
) -> None:
    from pelengine.cli import run
    from pelengine.pipeline.reconstruct import reconstruct
    from pelengine.settings import Settings
    from pelengine.storage import read_table

    server = aof_redis
    capture = MonitorCapture(server, tmp_path / "monitor.log")
    sent = []
    try:
        for db, seed in enumerate(SEEDS, start=1):
            sent += run_workload(server, seed, COMMANDS_PER_SEED, db=db, star_mode="keep").records
            sent += run_blocking_phase(server, seed, db, rounds=2)
    finally:
        path = capture.stop()
    dbs = list(range(1, len(SEEDS) + 1))
    truth = read_truth(server, dbs)
    # the replies judge outcomes; the rows are the CLI's
    aligned = align(path, sent, profile=server.profile)

    events = str(tmp_path / "events")
    argv = ["ingest-monitor", str(path), "--events", events, "--ids-from-aof", aof_dir(server)]
    argv += ["--redis-version", server.profile]
    assert run(argv, spark=spark) == 0
    df = read_table(spark, events)
    assert df.count() == len(aligned.records)
    settings = Settings(profile=server.profile)
    result = reconstruct(spark, df, settings)
    assert_local_runner_agrees(result, df, settings)
    got = {name: [r.asDict() for r in t.collect()] for name, t in result.tables.items()}
    got = {name: [r for r in rows if r.get("db") in dbs] for name, rows in got.items()}

    problems = compare_tables(truth, got, TABLES, aligned.tolerance_ms) + pending_delivery_counts(
        truth, got
    )
    judged = [r for r in aligned.records if r.note != UNJUDGED]
    change_problems = check_job_changes(judged, got.get("ownership_changes", []))
    blocked = [r for r in judged if r.note == "blocked"]
    print(
        f"{server.describe()} monitor -> ingest-monitor -> job: {len(SEEDS)} seeds, "
        f"{len(aligned.records)} events "
        f"({len(judged)} judged, {len(blocked)} blocked reads), "
        f"mismatches {len(problems)}, ownership_changes vs replies {len(change_problems)}"
    )
    assert not change_problems, change_problems[:10]
    assert not problems, format_mismatches(problems, 20)
