"""AOF directories as servers write them by default: an RDB base, then the increments.

``aof-use-rdb-preamble yes`` (every server's default) makes the base file of every
rewrite an RDB snapshot (``appendonly.aof.N.base.rdb``). On every kind of server a
seeded random workload runs in several dbs, ``BGREWRITEAOF`` folds it into a new
base (twice in the default case), more workload continues on the folded streams
(``flush=False``) and in fresh dbs; then the appendonlydir is read by
``pelengine.ingest.aof.read_aof`` (the base becomes ``PELENGINE.LOAD`` rows, source
``aof``) and replayed through ``Replayer(server.profile)`` -- and, in the job case,
written by ``ingest_aof`` and replayed by ``reconstruct`` -- and every table is
compared with a FRESH server of the same kind that loaded a copy of the directory.

Consumers' seen and active times: a loading server sets them to its own clock for
every consumer a command of the increments touches (an AOF does not carry them),
but a consumer the base holds and nothing after the rewrite touched keeps the times
the snapshot stored. Those are compared exactly (``base_times``); the others are
left out as for any AOF (``aof_support.NOT_IN_AN_AOF``).

Knobs: ``PELENGINE_PREAMBLE_SEEDS`` (the model test's seeds: a comma list, or a count
N: seeds 501..), ``PELENGINE_PREAMBLE_COMMANDS`` (commands per workload phase, default
500), ``PELENGINE_PREAMBLE_JOB_KINDS`` (the kinds the job case runs on: a comma list or
``all``; default the last selected kind).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import pytest

from pelengine.ingest.aof import list_files, read_aof
from pelengine.model.commands import LOAD_COMMAND
from tests.redis_diff.aof_support import AOF_ARGS, aof_dir, copy_aof, effects_only
from tests.redis_diff.compare import compare_tables, format_mismatches
from tests.redis_diff.harness import pending_delivery_counts
from tests.redis_diff.server import (
    RedisServer,
    ServerKind,
    env_seeds,
    kind_cases,
    selected_kinds,
    start_or_fail,
    stop_server,
)
from tests.redis_diff.truth import TABLES, read_truth
from tests.redis_diff.workload import AmbiguousTimingError, run_workload
from tests.runners import assert_local_runner_agrees

pytestmark = pytest.mark.redis

PREAMBLE_ARGS = (*AOF_ARGS, "--aof-use-rdb-preamble", "yes")  # the later option wins
SEEDS = env_seeds("PELENGINE_PREAMBLE_SEEDS", [501], count_from=501)
JOB_SEED = 601
JOB_KINDS_ENV = "PELENGINE_PREAMBLE_JOB_KINDS"
COMMANDS = int(os.environ.get("PELENGINE_PREAMBLE_COMMANDS", "500"))
KEPT_DB = 4
DBS = [1, 2, 3, KEPT_DB]
ATTEMPTS = 3  # a flush=False phase that hits an idle boundary: the case starts over


# --------------------------------------------------------------------------- the server side


def _info(server: RedisServer) -> dict[str, str]:
    with server.client() as c:
        text = c.execute_command("INFO", "persistence")
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def base_file(server: RedisServer) -> str:
    [base] = [f.name for f in list_files(aof_dir(server)) if f.kind == "base"]
    return base


def rewrite(server: RedisServer, timeout_s: float = 30.0) -> str:
    """``BGREWRITEAOF`` and wait until it is done: no rewrite in progress or scheduled and
    the manifest names a NEW base file (a server starts with an empty ``.base.rdb``
    already). Returns the new base's name."""
    before = base_file(server)
    with server.client() as c:
        c.execute_command("BGREWRITEAOF")
    deadline = time.monotonic() + timeout_s
    while True:
        info = _info(server)
        idle = info["aof_rewrite_in_progress"] == "0" and info["aof_rewrite_scheduled"] == "0"
        if idle and base_file(server) != before:
            break
        assert time.monotonic() < deadline, f"BGREWRITEAOF did not finish: {info}"
        time.sleep(0.01)
    assert info["aof_last_bgrewrite_status"] == "ok", info
    base = base_file(server)
    assert base.endswith(".base.rdb"), base
    return base


def server_time_ms(server: RedisServer) -> int:
    with server.client() as c:
        seconds, micros = c.execute_command("TIME")
    return int(seconds) * 1000 + int(micros) // 1000


@dataclass
class Case:
    """An appendonlydir with an RDB base and what a server that loads it reports."""

    server: RedisServer  # stopped; its workdir is kept until ``drop``
    bases: list[str]
    truth: dict[str, list[dict[str, Any]]]  # the loading server's, times included
    boundary_ms: int  # after every time the base can hold, before the load began

    @property
    def directory(self) -> str:
        return aof_dir(self.server)

    def drop(self) -> None:
        stop_server(self.server)


def _kept(server: RedisServer) -> None:
    """A stream in a db no workload touches: its consumers (one holding pending entries,
    one created empty) keep the base's times on every seed."""
    with server.client(KEPT_DB) as c:
        for i in range(5):
            c.execute_command("XADD", "kept", "*", "f", str(i))
        c.execute_command("XGROUP", "CREATE", "kept", "g", "0")
        c.execute_command(
            "XREADGROUP", "GROUP", "g", "holder", "COUNT", "3", "STREAMS", "kept", ">"
        )
        c.execute_command("XGROUP", "CREATECONSUMER", "kept", "g", "idle")


def _phases(server: RedisServer, seed: int, rewrites: int) -> list[str]:
    bases = []
    n = COMMANDS
    run_workload(server, seed, n, db=1, allow_flushdb=False)
    run_workload(server, seed + 1, n, db=2, allow_flushdb=False)
    _kept(server)
    bases.append(rewrite(server))
    # on the streams the base holds: loaded nodes, counters and PELs change
    run_workload(server, seed + 2, n, db=1, flush=False)
    run_workload(server, seed + 3, n, db=3)
    if rewrites > 1:
        bases.append(rewrite(server))
        run_workload(server, seed + 4, n, db=2, flush=False)
    return bases


def build_case(kind: ServerKind, seed: int, rewrites: int = 2, timestamps: bool = False) -> Case:
    args = PREAMBLE_ARGS + (("--aof-timestamp-enabled", "yes") if timestamps else ())
    for _attempt in range(ATTEMPTS):
        server = start_or_fail(kind, extra_args=args)
        try:
            bases = _phases(server, seed, rewrites)
        except AmbiguousTimingError:
            stop_server(server)
            continue
        except BaseException:
            stop_server(server)
            raise
        boundary = server_time_ms(server)
        server.process.kill()  # its files stay: the directory is read after
        server.process.wait(5)
        try:
            truth = loaded_truth_with_times(server)
        except BaseException:
            stop_server(server)
            raise
        return Case(server, bases, truth, boundary)
    pytest.fail(f"{ATTEMPTS} attempts hit an idle boundary")


def loaded_truth_with_times(server: RedisServer) -> dict[str, list[dict[str, Any]]]:
    """What a fresh server of the same kind reports after loading a copy of the
    directory, consumers' times included (``aof_support.loaded_truth`` without
    ``effects_only``)."""
    loaded = start_or_fail(server.kind, extra_args=PREAMBLE_ARGS, workdir=copy_aof(server))
    try:
        return read_truth(loaded, DBS)
    finally:
        stop_server(loaded)


# --------------------------------------------------------------------------- judging


def base_times(
    truth: dict[str, list[dict[str, Any]]],
    got: dict[str, list[dict[str, Any]]],
    boundary_ms: int,
) -> tuple[int, list[str]]:
    """The consumers whose times the loading server took from the base (seen before
    ``boundary_ms``: nothing after the rewrite touched them) must have exactly those
    times in ``got``. Returns how many were compared and the differences."""
    mine = {(r["db"], r["key"], r["group"], r["consumer"]): r for r in got["ownership"]}
    compared, problems = 0, []
    for row in truth["ownership"]:
        if row["seen_time_ms"] >= boundary_ms:
            continue  # set by the load: the AOF does not carry it
        compared += 1
        key = (row["db"], row["key"], row["group"], row["consumer"])
        other = mine.get(key)
        for column in ("seen_time_ms", "active_time_ms"):
            if other is None or other[column] != row[column]:
                have = None if other is None else other[column]
                problems.append(f"{key} {column}: server {row[column]!r}, pelengine {have!r}")
    return compared, problems


def judge(case: Case, got: dict[str, list[dict[str, Any]]], label: str) -> None:
    truth = effects_only(case.truth)
    got = {name: [r for r in rows if r.get("db") in DBS] for name, rows in got.items()}
    problems = compare_tables(truth, got, TABLES) + pending_delivery_counts(truth, got)
    n_times, time_problems = base_times(case.truth, got, case.boundary_ms)
    consumers = len(case.truth["ownership"])
    print(
        f"{label}: bases {case.bases}, {sum(len(truth[t]) for t in TABLES)} truth rows "
        f"compared, {n_times} of {consumers} consumers with the base's times compared "
        f"exactly, mismatches {len(problems)} + {len(time_problems)}"
    )
    assert not problems, format_mismatches(problems, 30)
    assert not time_problems, time_problems[:20]
    kept = [r for r in case.truth["ownership"] if r["db"] == KEPT_DB]
    assert len(kept) == 2 and all(r["seen_time_ms"] < case.boundary_ms for r in kept), kept


def check_load_rows(rows: list[dict[str, Any]]) -> int:
    """The log starts with the base's PELENGINE.LOAD rows (source aof); returns how many."""
    loads = [r for r in rows if r["argv"][0] == LOAD_COMMAND]
    assert loads and rows[0]["argv"] == [LOAD_COMMAND, "BEGIN"]
    assert rows[: len(loads)] == loads, "the load rows are the base: they come first"
    assert {r["source"] for r in loads} == {"aof"}
    assert any(r["argv"][1] == "PENDING" for r in loads), "the base holds no PEL"
    return len(loads)


# --------------------------------------------------------------------------- tests


def replay_rows(rows: list[dict[str, Any]], profile: str) -> dict[str, list[dict[str, Any]]]:
    from tests.native.twin import TwinReplayer as Replayer
    from tests.native.twin import twin_snapshot_tables as snapshot_tables

    replayer = Replayer(profile)
    for r in rows:
        replayer.apply(r["seq"], r["ts_ms"], r["argv"], r["db"], r["client"])
    # the server ran every command an AOF holds: none may fail in the model
    assert replayer.counters.failed == 0, replayer.counters.errors
    last = rows[-1]
    return snapshot_tables(replayer, as_of_ms=last["ts_ms"], as_of_seq=last["seq"])


@pytest.mark.parametrize("seed", SEEDS)
def test_preamble_aof_replays_to_the_loading_server(server_kind: ServerKind, seed: int) -> None:
    case = build_case(server_kind, seed, rewrites=2, timestamps=seed % 2 == 0)
    try:
        read = read_aof(case.directory, ceiling_ms=int(time.time() * 1000))
    finally:
        case.drop()
    assert not read.notes, read.notes
    assert read.files[0].name == case.bases[-1] and read.files[0].snapshot_keys
    rows = read.rows
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    assert all(b["ts_ms"] >= a["ts_ms"] for a, b in zip(rows, rows[1:], strict=False))
    n_load = check_load_rows(rows)
    got = replay_rows(rows, case.server.profile)
    judge(
        case,
        got,
        f"{case.server.describe()} seed {seed}: {len(rows)} AOF rows ({n_load} load rows)",
    )


def job_cases(kind: ServerKind) -> list[tuple[int]]:
    """The job case runs on ``$PELENGINE_PREAMBLE_JOB_KINDS`` (a comma list of kinds, or
    ``all``); by default on the last selected kind only (Valkey 9.1 when all run): a
    ``reconstruct`` costs ~10 s however small, and the model test above proves every
    kind's directory; this one proves ``ingest_aof`` and the job on such a directory."""
    chosen = [n.strip() for n in os.environ.get(JOB_KINDS_ENV, "").split(",") if n.strip()]
    chosen = chosen or [selected_kinds()[-1].name]
    return [(JOB_SEED,)] if "all" in chosen or kind.name in chosen else []


@pytest.mark.spark
@pytest.mark.parametrize(
    ("server_kind", "seed"),
    kind_cases(job_cases, lambda seed: f"seed_{seed}"),
    indirect=["server_kind"],
)
def test_preamble_aof_through_ingest_and_job(
    server_kind: ServerKind, seed: int, spark: Any, tmp_path
) -> None:
    from pelengine.pipeline.reconstruct import reconstruct
    from pelengine.runs.ingest_aof import ingest_aof
    from pelengine.settings import Settings
    from pelengine.storage import read_table
    from tests.redis_diff.test_differential_job import collect_tables

    case = build_case(server_kind, seed, rewrites=1, timestamps=True)
    events = str(tmp_path / "events")
    try:
        report = ingest_aof(spark, case.directory, events)
    finally:
        case.drop()
    assert report["appended"] > 0 and not report["notes"]
    assert report["files"][0]["name"] == case.bases[-1]
    assert report["files"][0]["snapshot_keys"]
    df = read_table(spark, events)
    rows = [r.asDict() for r in df.orderBy("seq").collect()]
    n_load = check_load_rows(rows)
    settings = Settings(profile=case.server.profile)
    result = reconstruct(spark, df, settings)
    assert_local_runner_agrees(result, df, settings)
    [start] = result.report["starting_state"]
    assert start["source"] == "aof" and start["rows"] == n_load
    assert (start["first_seq"], start["last_seq"]) == (1, n_load)
    judge(
        case,
        collect_tables(result),
        f"job on {case.server.describe()} seed {seed}: {report['appended']} events "
        f"({n_load} load rows)",
    )
