"""``pelengine pending`` against the real server: XPENDING in both forms, as redis-cli prints it.

A seeded random workload (db 0, then a group there that keeps entries pending, as the
workload's time-dependent claims may not) and a directed one (db 1: consumers with quotes and
non-ASCII names, claims, a history read, a deleted entry, an empty group, a consumer
with nothing pending) run on a fresh server of each kind (Redis 7.0, Valkey 8.1, Valkey
9.1) while every command is recorded. The recorded events go through ``pelengine
reconstruct --redis-version <the server's profile>``; then, for every group:

* the summary form (``XPENDING key group``) must print exactly what ``redis-cli
  --no-raw`` prints;
* the range form (``- + N``, with a consumer, exclusive and seq-less bounds, a count,
  ``IDLE``) must give the same IDs, consumers and delivery counts as the server's
  reply, and idle times equal to the server's within what the capture cannot know:
  each idle is measured with ``--now-ms`` = the server's ``TIME`` just before the
  server's ``XPENDING``; a replay knows a delivery's time only as the ``TIME`` before
  the delivering command, so ours may exceed the server's by up to that command's
  span, and fall short by up to the ``XPENDING`` round trip;
* redis-cli's text of the range form equals ours once the idle lines are masked;
* ``NOGROUP`` and an unknown consumer answer as the server does.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.redis_diff.capture import Recorder, SeqCounter, time_ms
from tests.redis_diff.server import RedisServer, on_job_kinds
from tests.redis_diff.workload import run_workload

pytestmark = pytest.mark.redis

SEED = 4242
COMMANDS = 300
MAX_GROUPS_DB0 = 3  # groups of the random workload compared (Spark time)


def _redis_cli(server: RedisServer, db: int, *argv: str) -> str:
    binary = shutil.which("redis-cli")
    if binary is None:
        pytest.fail("redis-cli is not installed (Debian package redis-tools)", pytrace=False)
    proc = subprocess.run(
        [binary, "--no-raw", "-h", server.host, "-p", str(server.port), "-n", str(db), *argv],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.rstrip("\n")


def _directed(server: RedisServer, counter: SeqCounter) -> list[Any]:
    """db 1: every shape of PEL the printing must get right (11 pending entries in ``g``)."""
    client = server.client(1)
    rec = Recorder(client=client, db=1, counter=counter)
    odd = 'c"\u00e9 x'  # a quote, a non-ASCII letter and a space
    for i in range(1, 12):
        rec.run(["XADD", "s", f"{i}-0", "f", str(i)])
    rec.run(["XADD", "s", "12-1", "f", "12"])  # 11 stay pending: two-digit indexes
    rec.run(["XGROUP", "CREATE", "s", "g", "0"])
    rec.run(["XGROUP", "CREATE", "s", "empty", "$"])
    rec.run(["XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "s", ">"])
    rec.run(["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0"])  # history: count 2
    time.sleep(0.25)  # a gap in delivery times: IDLE can split them unambiguously
    rec.run(["XREADGROUP", "GROUP", "g", "bob", "COUNT", "3", "STREAMS", "s", ">"])
    rec.run(["XREADGROUP", "GROUP", "g", odd, "STREAMS", "s", ">"])
    rec.run(["XCLAIM", "s", "g", "bob", "0", "2-0"])
    rec.run(["XDEL", "s", "3-0"])  # dangling: still pending
    rec.run(["XACK", "s", "g", "5-0"])
    rec.run(["XGROUP", "CREATECONSUMER", "s", "g", "idle-consumer"])
    client.close()
    return rec.records


def _db0_pending(server: RedisServer, counter: SeqCounter) -> list[Any]:
    """db 0: a stream whose group keeps entries pending, after the random workload. That
    workload's claims depend on idle times, so on a loaded machine it can end with
    nothing pending in db 0; this group keeps db 0's comparison from being empty."""
    client = server.client(0)
    rec = Recorder(client=client, db=0, counter=counter)
    for i in range(1, 6):
        rec.run(["XADD", "pending-cli:fixed", f"{i}-0", "f", str(i)])
    rec.run(["XGROUP", "CREATE", "pending-cli:fixed", "g", "0"])
    rec.run(
        ["XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "pending-cli:fixed", ">"]
    )
    rec.run(["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "pending-cli:fixed", ">"])
    rec.run(["XACK", "pending-cli:fixed", "g", "2-0"])
    client.close()
    return rec.records


def _groups(server: RedisServer, db: int) -> list[tuple[str, str, int]]:
    """(key, group, pending) of every group in ``db``, most pending first."""
    out = []
    with server.client(db) as c:
        for key in sorted(c.execute_command("SCAN", "0", "COUNT", "1000", "TYPE", "stream")[1]):
            for g in c.execute_command("XINFO", "GROUPS", key):
                info = dict(zip(g[::2], g[1::2], strict=True))
                out.append((key, info["name"], int(info["pending"])))
    return sorted(out, key=lambda t: (-t[2], t[0], t[1]))


def _server_range(server: RedisServer, db: int, argv: list[str]) -> tuple[int, int, Any]:
    """(TIME before, TIME after, reply) of one XPENDING on the server."""
    with server.client(db) as c:
        pipe = c.pipeline(transaction=False)
        pipe.execute_command("TIME")
        pipe.execute_command("XPENDING", *argv)
        pipe.execute_command("TIME")
        before, reply, after = pipe.execute()
    return time_ms(before), time_ms(after), reply


def _check_range(
    spark: Any,
    out: Any,
    server: RedisServer,
    db: int,
    key: str,
    group: str,
    start: str,
    end: str,
    count: int,
    consumer: str | None,
    min_idle: int,
    span_ms: int,
    problems: list[str],
) -> list[int]:
    """Compare one range form; returns the server's idle times."""
    from pelengine.read.pending import xpending_range

    argv = [key, group]
    argv += ["IDLE", str(min_idle)] if min_idle else []
    argv += [start, end, str(count)] + ([consumer] if consumer is not None else [])
    t0, t1, theirs = _server_range(server, db, argv)
    ours = xpending_range(
        spark,
        out,
        key,
        group,
        start,
        end,
        count,
        consumer=consumer,
        min_idle_ms=min_idle,
        db=db,
        now_ms=t0,
    ).reply
    what = f"db {db} XPENDING {' '.join(argv)}"
    assert isinstance(ours, list), f"{what}: {ours!r}"
    if [(e[0], e[1], e[3]) for e in ours] != [(e[0], e[1], e[3]) for e in theirs]:
        problems.append(f"{what}:\n  ours   {ours}\n  server {theirs}")
        return [e[2] for e in theirs]
    for mine, real in zip(ours, theirs, strict=True):
        diff = mine[2] - real[2]
        if not -(t1 - t0) - 1 <= diff <= span_ms + 1:
            problems.append(f"{what}: {mine[0]} idle {mine[2]} vs server {real[2]}")
    return [e[2] for e in theirs]


def _idle_split(idles: list[int], tolerance: int) -> int | None:
    """A min-idle in the middle of the widest gap of ``idles`` (None if too narrow)."""
    values = sorted(set(idles))
    gaps = [(b - a, a, b) for a, b in zip(values, values[1:], strict=False)]
    if not gaps:
        return None
    width, low, high = max(gaps)
    return (low + high) // 2 if width > 2 * tolerance + 10 else None


@pytest.mark.spark
@on_job_kinds
def test_pending_matches_redis_xpending(
    fresh_redis_server: RedisServer, spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from pelengine import cli, storage
    from pelengine.read.pending import SnapshotTables, format_reply, read_snapshot, xpending_summary
    from pelengine.schemas import EVENTS_SCHEMA

    server = fresh_redis_server
    t_start = time.perf_counter()
    counter = SeqCounter(1)
    result = run_workload(server, SEED, COMMANDS, db=0, counter=counter, allow_flushdb=False)
    records = [*result.records, *_db0_pending(server, counter), *_directed(server, counter)]
    span_ms = max(r.ts_after_ms - r.ts_ms for r in records)

    events, out = str(tmp_path / "events"), str(tmp_path / "out")
    storage.write_table(spark.createDataFrame([r.row() for r in records], EVENTS_SCHEMA), events)
    quiet: Any = lambda _: None  # noqa: E731
    argv = ["reconstruct", "--events", events, "--out", out, "--redis-version", server.profile]
    assert cli.run(argv, spark=spark, progress=quiet) == 0
    capsys.readouterr()
    t_reconstructed = time.perf_counter()
    # many questions of one snapshot: its two tables read once, cached
    read = read_snapshot(spark, out)
    snap = SnapshotTables(read.pel.cache(), read.groups.cache())

    problems: list[str] = []
    groups = [(0, k, g) for k, g, _ in _groups(server, 0)[:MAX_GROUPS_DB0]]
    groups += [(1, k, g) for k, g, _ in _groups(server, 1)]
    assert any(p for _, _, p in _groups(server, 0)), "db 0 was left with nothing pending"
    tolerance = span_ms + 2
    for db, key, group in groups:
        # summary form: exactly redis-cli's text
        theirs = _redis_cli(server, db, "XPENDING", key, group)
        ours = format_reply(xpending_summary(spark, snap, key, group, db=db).reply)
        if ours != theirs:
            problems.append(f"db {db} XPENDING {key} {group}:\n{ours}\n--- server:\n{theirs}")
        # range form over everything, then with a consumer and an IDLE split
        idles = _check_range(
            spark, snap, server, db, key, group, "-", "+", 1000, None, 0, span_ms, problems
        )
        _, _, full = _server_range(server, db, [key, group, "-", "+", "1000"])
        if full:
            owner = full[len(full) // 2][1]
            _check_range(
                spark, snap, server, db, key, group, "-", "+", 1000, owner, 0, span_ms, problems
            )
            split = _idle_split(idles, tolerance)
            if split is not None:
                _check_range(
                    spark, snap, server, db, key, group, "-", "+", 1000, None, split, span_ms,
                    problems,
                )  # fmt: skip

    # bounds: exclusive, seq-less, count; an unknown consumer; count 0
    for start, end, count, consumer in [
        ("(2-0", "+", 10, None),
        ("2", "(12-1", 10, None),
        ("-", "8", 2, None),
        ("(1-0", "9", 10, "bob"),
        ("-", "+", 10, "nobody"),
        ("-", "+", 0, None),
    ]:
        _check_range(spark, snap, server, 1, "s", "g", start, end, count, consumer, 0, 0, problems)
    snap.pel.unpersist()
    snap.groups.unpersist()
    t_compared = time.perf_counter()

    # the CLI prints redis-cli's text: the range form with idle lines masked, and NOGROUP
    mask = re.compile(r"^(\s*3\) )\(integer\) \d+$", re.MULTILINE)
    cli_cases = [
        ["s", "g", "--db", "1", "--start", "-", "--end", "+", "--count", "20"],
        ["s", "empty", "--db", "1"],
        ["s", "nosuchgroup", "--db", "1"],
        ["nokey", "g", "--db", "1", "--start", "-", "--end", "+", "--count", "5"],
    ]
    for case in cli_cases:
        code = cli.run(["pending", *case, "--out", out, "--no-header"], spark=spark, progress=quiet)
        ours = capsys.readouterr().out.rstrip("\n")
        args = case[:2] + (["-", "+", case[-1]] if "--start" in case else [])
        theirs = _redis_cli(server, 1, "XPENDING", *args)
        if mask.sub(r"\1(integer) N", ours) != mask.sub(r"\1(integer) N", theirs):
            problems.append(f"pending {' '.join(case)}:\n{ours}\n--- redis-cli:\n{theirs}")
        assert code == (1 if theirs.startswith("(error)") else 0), (case, code)

    t_end = time.perf_counter()
    print(
        f"pending vs XPENDING: {len(records)} events, {len(groups)} groups; reconstruct "
        f"{t_reconstructed - t_start:.1f}s, library forms {t_compared - t_reconstructed:.1f}s, "
        f"CLI {t_end - t_compared:.1f}s"
    )
    assert not problems, "\n".join(problems[:10])


@pytest.mark.parametrize(
    ("start", "end"),
    [("(-", "+"), ("-", "(+"), ("abc", "+"), ("1-x", "+"), ("-", "18446744073709551616")]
    + [("(18446744073709551615-18446744073709551615", "+"), ("-", "(0-0")],
)
def test_bad_bounds_answer_as_redis(redis_server: RedisServer, start: str, end: str) -> None:
    from pelengine.read.pending import PendingArgumentError, ReplyError, format_reply, range_bounds

    theirs = _redis_cli(redis_server, 0, "XPENDING", "nokey", "g", start, end, "10")
    with pytest.raises(PendingArgumentError) as err:
        range_bounds(start, end)
    assert format_reply(ReplyError(str(err.value))) == theirs
