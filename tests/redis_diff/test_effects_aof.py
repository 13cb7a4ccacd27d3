"""Effects logs: a real server's AOF, ingested and replayed, must equal the state
of a fresh server of the same kind that loaded the same AOF (consumers' seen and
active times excepted), on every kind of server (Redis 7.0, Valkey 8.1, Valkey 9.1).

Each seed runs the random workload (tests/redis_diff/workload.py) against a
server with ``appendonly yes``, ``aof-use-rdb-preamble no``, ``appendfsync
always`` (no rewrite: the base stays empty and the incr file holds every
write). The appendonlydir is read by ``pelengine.ingest.aof.read_aof`` (pure),
replayed through ``Replayer(server.profile)`` and compared, table by table, with a
FRESH server (the same binary) started on a copy of that appendonlydir.

Knobs: ``PELENGINE_AOF_SEEDS=301,302`` (every server), ``PELENGINE_AOF_LONG_SEEDS``,
``PELENGINE_DIFF_COMMANDS``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from pelengine.ingest.aof import read_aof
from tests.redis_diff.aof_support import aof_dir, aof_server, loaded_truth
from tests.redis_diff.compare import compare_tables, format_mismatches
from tests.redis_diff.harness import pending_delivery_counts
from tests.redis_diff.server import (
    RedisServer,
    ServerKind,
    env_seeds,
    kind_cases,
    on_job_kinds,
    stop_server,
)
from tests.redis_diff.truth import TABLES
from tests.redis_diff.workload import run_workload
from tests.runners import assert_local_runner_agrees

pytestmark = pytest.mark.redis

# mixed seeds from 301 per server (counts chosen for the suite's time budget, README)
SEEDS_PER_KIND = {"redis-7.0": 5, "valkey-8.1": 5, "valkey-9.1": 5}
COMMANDS_PER_SEED = int(os.environ.get("PELENGINE_DIFF_COMMANDS", "3000"))
# the job test: 3 seeds in 3 dbs of one AOF server, each the job test's size
JOB_SEEDS = 3
JOB_COMMANDS_PER_SEED = int(os.environ.get("PELENGINE_DIFF_COMMANDS", "2000"))
# "long_streams" seeds: '~' trimming over many nodes (the AOF holds the exact result)
# (on Redis 7.0 only: the AOF carries every '~' trim as the exact '=' it made, the same
# on every server)
LONG_SEEDS_PER_KIND: dict[str, list[int]] = {
    "redis-7.0": [1301],
    "valkey-8.1": [],
    "valkey-9.1": [],
}


def cases(kind: ServerKind) -> list[tuple[int, str]]:
    seeds = env_seeds("PELENGINE_AOF_SEEDS", list(range(301, 301 + SEEDS_PER_KIND[kind.name])))
    long_seeds = env_seeds("PELENGINE_AOF_LONG_SEEDS", LONG_SEEDS_PER_KIND[kind.name])
    return [(s, "mixed") for s in seeds] + [(s, "long_streams") for s in long_seeds]


def replay_rows(rows: list[dict[str, Any]], profile: str) -> dict[str, list[dict[str, Any]]]:
    from tests.native.twin import TwinReplayer as Replayer
    from tests.native.twin import twin_snapshot_tables as snapshot_tables

    replayer = Replayer(profile)
    for r in rows:
        replayer.apply(r["seq"], r["ts_ms"], r["argv"], r["db"], r["client"])
    last = rows[-1] if rows else {"ts_ms": 0, "seq": 0}
    return snapshot_tables(replayer, as_of_ms=last["ts_ms"], as_of_seq=last["seq"])


def history(rows: list[dict[str, Any]], db: int, key: str, n: int = 25) -> list[str]:
    out = [
        f"seq={r['seq']} ts={r['ts_ms']} {r['argv']}"
        for r in rows
        if r["db"] == db and (key in r["argv"][1:] or r["argv"][0].upper() in ("FLUSHDB",))
    ]
    return out[-n:]


@pytest.mark.parametrize(
    ("server_kind", "seed", "shape"),
    kind_cases(cases, lambda s, shape: f"seed_{s}" if shape == "mixed" else f"long_seed_{s}"),
    indirect=["server_kind"],
)
def test_aof_replay_matches_loading_server(server_kind: ServerKind, seed: int, shape: str) -> None:
    db = seed % 16
    server = aof_server(server_kind, timestamps=seed % 2 == 0)  # even seeds: #TS annotations
    try:
        t0 = time.perf_counter()
        run_workload(server, seed, COMMANDS_PER_SEED, db=db, shape=shape)
        t_workload = time.perf_counter() - t0
        read = read_aof(aof_dir(server), ceiling_ms=int(time.time() * 1000))
        truth = loaded_truth(server, [db])
    finally:
        stop_server(server)
    assert not read.notes, read.notes  # a clean AOF: nothing cut off
    rows = read.rows
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    assert all(b["ts_ms"] >= a["ts_ms"] for a, b in zip(rows, rows[1:], strict=False))
    t1 = time.perf_counter()
    got = replay_rows(rows, server.profile)
    t_replay = time.perf_counter() - t1
    problems = compare_tables(truth, got, TABLES) + pending_delivery_counts(truth, got)
    n_truth = sum(len(truth[t]) for t in TABLES)
    print(
        f"{server.describe()} seed {seed} {shape} (db {db}): {COMMANDS_PER_SEED} commands "
        f"sent, {len(rows)} AOF rows, "
        f"{n_truth} truth rows, workload {t_workload:.2f}s, replay {t_replay:.2f}s, "
        f"mismatches {len(problems)}"
    )
    if problems:
        lines = [format_mismatches(problems, 30)]
        first = problems[0]
        if len(first.key) >= 2:
            lines.append(f"AOF rows on db {first.key[0]} key {first.key[1]!r}:")
            lines += ["  " + h for h in history(rows, first.key[0], first.key[1])]
        pytest.fail("\n".join(lines), pytrace=False)


@pytest.mark.spark
@on_job_kinds
def test_aof_through_ingest_and_job_matches_loading_server(
    server_kind: ServerKind, spark: Any, tmp_path
) -> None:
    """Several seeds in several dbs of one AOF server: ``ingest_aof`` writes the events
    table, ``reconstruct`` replays it, every table equals the loading server's."""
    from pelengine.pipeline.reconstruct import reconstruct
    from pelengine.runs.ingest_aof import ingest_aof
    from pelengine.settings import Settings
    from pelengine.storage import read_table
    from tests.redis_diff.capture import SeqCounter
    from tests.redis_diff.test_differential_job import collect_tables

    seeds = [401 + i for i in range(JOB_SEEDS)]
    server: RedisServer = aof_server(server_kind, timestamps=True)
    try:
        counter = SeqCounter(1)
        for i, seed in enumerate(seeds):
            run_workload(server, seed, JOB_COMMANDS_PER_SEED, db=i + 1, counter=counter)
        events = str(tmp_path / "events")
        report = ingest_aof(spark, aof_dir(server), events)
        truth = loaded_truth(server)
    finally:
        stop_server(server)
    assert report["appended"] > 0 and not report["notes"]
    settings = Settings(profile=server.profile)
    df = read_table(spark, events)
    result = reconstruct(spark, df, settings)
    assert_local_runner_agrees(result, df, settings)
    got = collect_tables(result)
    problems = compare_tables(truth, got, TABLES) + pending_delivery_counts(truth, got)
    print(
        f"job on {server.describe()}: seeds {seeds}, {report['appended']} AOF rows, "
        f"{sum(len(truth[t]) for t in TABLES)} truth rows, mismatches {len(problems)}"
    )
    assert not problems, format_mismatches(problems, 30)
