"""The Spark job against the real server: many seeded workloads through ``reconstruct``.

Every seed runs on its own db of one server (``--databases 32``; each kind: Redis 7.0,
Valkey 8.1, Valkey 9.1), one
after the other, so the recorded rows of all seeds form ONE events table with
``seq`` in execution order (no ``FLUSHALL``; a seed's ``FLUSHDB`` only touches its
db). The job replays it once with ``Settings(profile=server.profile)``;
every table is collected and compared with the server's state read at the end.

Knobs: ``PELENGINE_JOB_SEEDS`` (a count, every server), ``PELENGINE_DIFF_COMMANDS``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from tests.redis_diff.capture import SeqCounter, dump_records
from tests.redis_diff.compare import compare_tables, format_mismatches
from tests.redis_diff.harness import (
    STREAM_WRITES,
    check_job_changes,
    history,
    pending_delivery_counts,
)
from tests.redis_diff.server import DATABASES, RedisServer, ServerKind, on_job_kinds
from tests.redis_diff.truth import TABLES, read_truth
from tests.redis_diff.workload import run_workload

# on both stores: make test runs it on delta-spark, then on the embedded store
pytestmark = [pytest.mark.redis, pytest.mark.spark, pytest.mark.stores]

# seeds per server (counts chosen for the suite's time budget, README)
SEEDS_PER_KIND = {"redis-7.0": 6, "valkey-8.1": 3, "valkey-9.1": 3}
COMMANDS_PER_SEED = int(os.environ.get("PELENGINE_DIFF_COMMANDS", "2000"))
FIRST_SEED = 101  # different workloads from the model test's seeds


def events_schema() -> Any:
    """The input contract (docs/input.md), spelled out here (not imported from the job)."""
    from pyspark.sql.types import (
        ArrayType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    return StructType(
        [
            StructField("seq", LongType(), False),
            StructField("ts_ms", LongType(), False),
            StructField("argv", ArrayType(StringType(), False), False),
            StructField("db", IntegerType(), True),
            StructField("client", StringType(), True),
            StructField("source", StringType(), True),
        ]
    )


def events_arrow() -> Any:
    """The input contract (:func:`events_schema`) as an Arrow schema, for the local
    runner's table."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(events_schema())


def collect_tables(result: Any) -> dict[str, list[dict[str, Any]]]:
    tables = result.tables if hasattr(result, "tables") else result
    return {name: [row.asDict() for row in df.collect()] for name, df in tables.items()}


def job_seeds(kind: ServerKind) -> int:
    return int(os.environ.get("PELENGINE_JOB_SEEDS", SEEDS_PER_KIND[kind.name]))


@on_job_kinds
def test_job_matches_server(fresh_redis_server: RedisServer, spark: Any, tmp_path) -> None:
    import pyarrow as pa

    from pelengine.local.reconstruct import reconstruct_local
    from pelengine.pipeline.reconstruct import reconstruct
    from pelengine.settings import Settings

    server = fresh_redis_server
    n_seeds = job_seeds(server.kind)
    assert n_seeds <= DATABASES
    counter = SeqCounter(1)
    t0 = time.perf_counter()
    results = [
        run_workload(server, FIRST_SEED + i, COMMANDS_PER_SEED, db=i, counter=counter)
        for i in range(n_seeds)
    ]
    records = [r for res in results for r in res.records]
    truth = read_truth(server)
    t_workload = time.perf_counter() - t0
    # each seed logs at least its count of rows (an execution unit can end past it)
    assert all(len(res.records) >= COMMANDS_PER_SEED for res in results)
    assert [r.seq for r in records] == sorted({r.seq for r in records})  # unique, in order

    events = spark.createDataFrame([r.row() for r in records], events_schema())
    t1 = time.perf_counter()
    # split by group (off by default) stays proven against the live server here
    result = reconstruct(spark, events, Settings(profile=server.profile, split_groups=2))
    got = collect_tables(result)
    t_job = time.perf_counter() - t1

    # a command's time is known to the span of its round trip (a script or MULTI unit
    # runs its commands somewhere in it): times may differ from the server's by that much.
    # A blocked read's span is its wait: what it is served happens at the writer's time.
    spans = [r.ts_after_ms - r.ts_ms for r in records if "BLOCK" not in map(str.upper, r.argv)]
    tolerance = max(2, max(spans, default=0))
    problems = compare_tables(truth, got, TABLES, tolerance) + pending_delivery_counts(truth, got)
    change_problems = check_job_changes(records, got.get("ownership_changes", []))
    report = getattr(result, "report", {}) or {}
    failed = (report.get("events") or {}).get("failed")
    # the local runner (one process, no JVM) on the same log, judged by the same server
    t2 = time.perf_counter()
    local = reconstruct_local(
        pa.Table.from_pylist([r.row() for r in records], schema=events_arrow()),
        Settings(profile=server.profile),
    )
    got_local = {name: table.to_pylist() for name, table in local.tables.items()}
    t_local = time.perf_counter() - t2
    problems += [
        f"local runner: {p}"
        for p in compare_tables(truth, got_local, TABLES, tolerance)
        + pending_delivery_counts(truth, got_local)
    ]
    change_problems += [
        f"local runner: {p}"
        for p in check_job_changes(records, got_local.get("ownership_changes", []))
    ]
    # the local runner's nights (three, cut anywhere: units, blocked readers and tied
    # families left open across them) on the same log, judged by the same server
    from pelengine.runs.local_night import run_local_night
    from pelengine.storage import sessionless
    from tests.delta_rs import delta_rs_table

    rows = [r.row() for r in records]
    night_events, night_out = tmp_path / "night-events", tmp_path / "night-out"
    start, night_modes = 0, []
    for cut in (len(rows) // 3, 2 * len(rows) // 3, len(rows)):
        part = pa.Table.from_pylist(rows[start:cut], schema=events_arrow())
        mode = "append" if start else "overwrite"
        sessionless.write_arrow(part, str(night_events), events_schema(), mode)
        start = cut
        night = run_local_night(
            str(night_events),
            str(night_out),
            Settings(profile=server.profile, incremental=True, runner="local"),
        )
        night_modes.append(night["incremental"]["mode"])
    assert night_modes == ["full", "incremental", "incremental"], night_modes
    got_nights = {name: delta_rs_table(night_out / name).to_pylist() for name in got_local}
    problems += [
        f"local nights: {p}"
        for p in compare_tables(truth, got_nights, TABLES, tolerance)
        + pending_delivery_counts(truth, got_nights)
    ]
    local_failed = local.report["events"]["failed"]
    expected_failed = sum(
        1
        for r in records
        if r.error is not None
        and r.argv[0].upper() in STREAM_WRITES
        and not (r.argv[0].upper() in ("RENAME", "RENAMENX") and r.error == "no such key")
    )
    rows = sum(len(truth[t]) for t in TABLES)
    summary = (
        f"job on {server.describe()}: {n_seeds} seeds x {COMMANDS_PER_SEED} commands = "
        f"{len(records)} events in {n_seeds} dbs "
        f"({sum(r.error is not None for r in records)} rejected by the server), "
        f"{rows} truth rows, times within {tolerance} ms, workload {t_workload:.1f}s, "
        f"job {t_job:.1f}s, local runner {t_local:.1f}s, "
        f"failed per job report {failed} (server-rejected stream writes {expected_failed}), "
        f"mismatches {len(problems)}, ownership_changes vs replies {len(change_problems)}"
    )
    print(summary)
    problems_text = ""
    if failed is not None and failed != expected_failed:
        problems_text += (
            f"\nreport failed={failed} != server-rejected stream writes {expected_failed}"
        )
    if local_failed != expected_failed:
        problems_text += (
            f"\nlocal runner's report failed={local_failed} != server-rejected stream writes "
            f"{expected_failed}"
        )
    if change_problems:
        problems_text += "\nownership_changes vs the server's replies:\n" + "\n".join(
            "  " + p for p in change_problems[:20]
        )
    if problems or problems_text:
        dumped = dump_records(
            records, tmp_path / "job-events.jsonl", {"summary": summary, **server.meta()}
        )
        lines = [summary + problems_text, format_mismatches(problems, 20)]
        if problems and len(problems[0].key) >= 2:
            db, key = problems[0].key[0], problems[0].key[1]
            seed = FIRST_SEED + int(db)
            lines.append(f"first mismatch is in seed {seed} (db {db}); its commands on {key!r}:")
            lines += ["  " + h for h in history(records, db, key, records[-1].seq)]
        lines.append(f"events: {dumped}")
        pytest.fail("\n".join(lines), pytrace=False)
