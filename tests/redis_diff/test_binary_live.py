"""Binary data as Redis holds it, through ``ingest-aof``/``ingest-monitor`` and the job.

One server of each kind (``appendonly yes``) gets a workload whose keys, groups,
consumers, fields and values are bytes that are not UTF-8 (msgpack-like values of 1
to 900 random bytes), names that are the very text a byte's escape would be (the
key ``k\\xfe`` beside the key ``k`` 0xFE), and ``MAXLEN ~`` trims, which remove only
whole internal nodes: a node ends at 4096 bytes, so the trims depend on every
value's size in bytes. MONITOR captures it all. Both logs go through the CLI and
the job; every table, turned back into bytes with the SQL expression docs/input.md
gives, must equal the server's (read as bytes), and the server's ``ENTRIESREAD``
extreme (the ``++`` and the lag wrap) must come out as the server reports it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.redis_diff.aof_support import aof_dir, aof_server, loaded_truth
from tests.redis_diff.compare import compare_tables, format_mismatches
from tests.redis_diff.monitor_capture import MONITOR_TOLERANCE_MS, MonitorCapture
from tests.redis_diff.server import RedisServer, ServerKind, on_job_kinds, stop_server
from tests.redis_diff.truth import TABLES, read_truth
from tests.runners import assert_local_runner_agrees

pytestmark = [pytest.mark.redis, pytest.mark.spark]

DB = 3
KEYS = [b"k\xfe", b"k\\xfe", b"\x81\xa4name", b"caf\xc3\xa9"]
GROUPS = [b"g\xff", b"g\\x5c", b"g"]
CONSUMERS = [b"c\x80\x00", b"c\\", b"\xc3\xa9t\xc3\xa9", b"c\xfe\\xfe"]
TOP = b"\xfftop"
FIELDS = [b"f", b"\x81\xa1a", b"payload"]
STEPS = 700

# docs/input.md, "The text form of bytes": the bytes a name stands for, in Spark SQL
NAME_BYTES = (
    "unhex(concat_ws('', transform(regexp_extract_all({c}, '(?s)\\\\\\\\x[0-9a-f]{{2}}|.', 0),"
    " t -> IF(length(t) = 4, substr(t, 3), hex(t)))))"
)
NAMES = ("key", "group", "consumer")


def _workload(client: redis.Redis, seed: int) -> int:
    """Send the workload on ``client`` (bytes in, bytes out); the commands sent."""
    rng = random.Random(seed)
    sent = 0

    def send(*argv: Any) -> Any:
        nonlocal sent
        sent += 1
        try:
            return client.execute_command(*argv)
        except redis.ResponseError:
            return None

    next_ms = {k: 1_000 for k in [*KEYS, TOP]}
    for key in KEYS:
        for group in GROUPS[: rng.randint(1, 3)]:
            send("XGROUP", "CREATE", key, group, "0", "MKSTREAM")
    # an ENTRIESREAD at the top of a 64-bit counter: a '>' read wraps it (and the lag);
    # on a key no XDEL or trim touches, where the server keeps counting
    send("XGROUP", "CREATE", TOP, b"top\xff", "0", "MKSTREAM", "ENTRIESREAD", str(2**63 - 3))
    for _ in range(STEPS):
        key = rng.choice(KEYS)
        group, consumer = rng.choice(GROUPS), rng.choice(CONSUMERS)
        roll = rng.random()
        if roll < 0.45:
            next_ms[key] += rng.randint(1, 3)
            trim = ["MAXLEN", "~", str(rng.randint(5, 40))] if rng.random() < 0.15 else []
            fields: list[bytes] = []
            for f in rng.sample(FIELDS, rng.randint(1, 2)):
                fields += [f, rng.randbytes(rng.choice([1, 8, 60, 300, 900]))]
            send("XADD", key, *trim, f"{next_ms[key]}-0", *fields)
        elif roll < 0.65:
            count = str(rng.randint(1, 4))
            send("XREADGROUP", "GROUP", group, consumer, "COUNT", count, "STREAMS", key, ">")
        elif roll < 0.72:
            next_ms[TOP] += 1
            send("XADD", TOP, f"{next_ms[TOP]}-0", rng.choice(FIELDS), rng.randbytes(9))
            top = (b"top\xff", consumer, "COUNT", "1", "STREAMS", TOP, ">")
            send("XREADGROUP", "GROUP", *top)
        elif roll < 0.8:
            pending = send("XPENDING", key, group, "-", "+", "3") or []
            if pending:
                send("XACK", key, group, *[p[0] for p in pending[: rng.randint(1, 3)]])
        elif roll < 0.87:
            pending = send("XPENDING", key, group, "-", "+", "2") or []
            if pending:
                send("XCLAIM", key, group, consumer, "0", *[p[0] for p in pending])
        elif roll < 0.92:
            send("XAUTOCLAIM", key, group, consumer, "0", "0-0", "COUNT", "2")
        elif roll < 0.96:
            send("XTRIM", key, "MAXLEN", "~", str(rng.randint(0, 30)))
        else:
            entries = send("XRANGE", key, "-", "+", "COUNT", "5") or []
            if entries:
                send("XDEL", key, rng.choice(entries)[0])
    return sent


def _as_bytes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The server's rows with their names as bytes (read as lone surrogates)."""
    out = []
    for r in rows:
        row = dict(r)
        for c in NAMES:
            if isinstance(row.get(c), str):
                row[c] = row[c].encode("utf-8", "surrogateescape")
        out.append(row)
    return out


def _job_tables(spark: Any, events: str, profile: str) -> dict[str, list[dict[str, Any]]]:
    """The job's tables of ``DB``, names turned back into bytes by NAME_BYTES."""
    from pyspark.sql import functions as F

    from pelengine.pipeline.reconstruct import reconstruct
    from pelengine.settings import Settings
    from pelengine.storage import read_table

    settings = Settings(profile=profile)
    df = read_table(spark, events)
    result = reconstruct(spark, df, settings)
    assert_local_runner_agrees(result, df, settings)
    got = {}
    for name in TABLES:
        table = result.tables[name]
        for c in NAMES:
            if c in table.columns:
                table = table.withColumn(c, F.expr(NAME_BYTES.format(c=f"`{c}`")))
        rows = [r.asDict() for r in table.where(F.col("db") == DB).collect()]
        got[name] = [{k: bytes(v) if k in NAMES else v for k, v in r.items()} for r in rows]
    return got


@on_job_kinds
def test_binary_streams_through_both_logs_equal_the_server(
    server_kind: ServerKind, spark: Any, tmp_path: Path
) -> None:
    from pelengine.cli import run

    server: RedisServer = aof_server(server_kind)
    try:
        capture = MonitorCapture(server, tmp_path / "monitor.log")
        client = redis.Redis(host=server.host, port=server.port, db=DB, protocol=2)
        client.response_callbacks.clear()
        try:
            sent = _workload(client, seed=19)
        finally:
            client.close()
            capture_path = capture.stop()
        truth = {t: _as_bytes(rows) for t, rows in read_truth(server, [DB], binary=True).items()}
        # an effects log is judged by a server that loaded it (a 7.0 AOF loses entries_read)
        loaded = {t: _as_bytes(rows) for t, rows in loaded_truth(server, [DB], True).items()}
        monitor_events, aof_events = str(tmp_path / "from_monitor"), str(tmp_path / "from_aof")
        argv = ["ingest-monitor", str(capture_path), "--events", monitor_events]
        assert run([*argv, "--redis-version", server.profile], spark=spark) == 0
        assert run(["ingest-aof", aof_dir(server), "--events", aof_events], spark=spark) == 0
    finally:
        stop_server(server)

    # the workload is what it says: distinct byte names, trims that removed nodes
    keys = {r["key"] for r in truth["streams"]}
    assert {b"k\xfe", b"k\\xfe"} <= keys, keys
    assert any(r["consumer"] == b"c\x80\x00" for r in truth["ownership"])
    top = [r for r in truth["groups"] if r["group"] == b"top\xff"]
    # (7.2+ servers distrust a counter set beyond the stream's entries_added)
    assert top and (top[0]["entries_read"] < 0 or server.profile != "7.0"), top
    assert sum(r["entries_added"] - r["length"] for r in truth["streams"]) > 50, sent

    from_monitor = _job_tables(spark, monitor_events, server.profile)
    problems = compare_tables(truth, from_monitor, TABLES, MONITOR_TOLERANCE_MS)
    assert not problems, "ingest-monitor:\n" + format_mismatches(problems)
    from_aof = _job_tables(spark, aof_events, server.profile)
    problems = compare_tables(loaded, from_aof, TABLES, 0)
    assert not problems, "ingest-aof:\n" + format_mismatches(problems)
