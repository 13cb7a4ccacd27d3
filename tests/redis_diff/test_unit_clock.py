"""The execution-unit clock, live on every server: two minimal logs that were wrong.

1. An effects log (AOF) whose unit carries a later time than the unit's first row:
   ``MULTI``, ``SELECT 0``, ``XCLAIM ... TIME 1050 ... FORCE JUSTID LASTID``, ``EXEC``
   after a ``#TS`` of 1000 ms. A server loading it sets delivery time 1050 (its clock
   is later than every recorded time, so nothing is clamped); the ingested rows
   replayed with the server's profile must say the same.
2. ``XADD *`` inside a unit in a MONITOR capture, pinned from the same server's AOF
   (``ingest-monitor --ids-from-aof``): a 7.2+ server reads its clock once, before
   the unit, so the ID's millisecond can lie before the line before the ``XADD``.
   Each unit makes sure of that: a busy script of ~10 ms and a ``PING`` line between
   the unit's start and its ``XADD``s. Every ``*`` must be pinned to the ID the server
   made, and the replayed capture must equal the live server.
"""

from __future__ import annotations

import pytest

from pelengine.ingest.aof import read_aof
from pelengine.ingest.monitor import parse_file
from pelengine.ingest.pin import pin_star_ids
from tests.native.twin import TwinReplayer as Replayer
from tests.native.twin import twin_snapshot_tables as snapshot_tables
from tests.redis_diff.aof_support import AOF_ARGS, aof_dir, aof_server, effects_only
from tests.redis_diff.compare import compare_tables, format_mismatches
from tests.redis_diff.monitor_capture import MonitorCapture
from tests.redis_diff.server import ServerKind, start_or_fail, stop_server
from tests.redis_diff.truth import TABLES, read_truth

pytestmark = pytest.mark.redis


def _resp(*argv: str) -> bytes:
    out = [f"*{len(argv)}\r\n".encode()]
    for a in argv:
        out.append(b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()))
    return b"".join(out)


def _replay(rows: list[dict], profile: str) -> dict[str, list[dict]]:
    replayer = Replayer(profile)
    for r in rows:
        replayer.apply(r["seq"], r["ts_ms"], r["argv"], r.get("db") or 0, r.get("client"))
    last = rows[-1]
    return snapshot_tables(replayer, last["ts_ms"], last["seq"])


def test_a_propagated_claim_in_a_unit_keeps_its_time(server_kind: ServerKind, tmp_path) -> None:
    workdir = tmp_path / "server"
    aof = workdir / "appendonlydir"
    aof.mkdir(parents=True)
    (aof / "appendonly.aof.1.incr.aof").write_bytes(
        _resp("SELECT", "0")
        + _resp("XADD", "s", "1-0", "f", "v")
        + _resp("XGROUP", "CREATE", "s", "g", "0")
        + b"#TS:1\r\n"
        + _resp("MULTI")
        + _resp("SELECT", "0")
        + _resp(
            *[
                "XCLAIM",
                "s",
                "g",
                "c",
                "0",
                "1-0",
                "TIME",
                "1050",
                "RETRYCOUNT",
                "1",
                "FORCE",
                "JUSTID",
                "LASTID",
                "1-0",
            ]
        )
        + _resp("EXEC")
    )
    (aof / "appendonly.aof.manifest").write_text("file appendonly.aof.1.incr.aof seq 1 type i\n")
    rows = read_aof(str(aof)).rows  # read before the server owns the directory
    loaded = start_or_fail(server_kind, extra_args=AOF_ARGS, workdir=str(workdir))
    try:
        truth = effects_only(read_truth(loaded, [0]))
        profile = loaded.profile
    finally:
        stop_server(loaded)
    assert [(p["id"], p["delivery_time_ms"], p["delivery_count"]) for p in truth["pel"]] == [
        ("1-0", 1050, 1)
    ], "the loading server clamped the propagated TIME"
    got = _replay(rows, profile)
    problems = compare_tables(truth, got, TABLES)
    assert not problems, format_mismatches(problems)


# A busy loop of several milliseconds, then a PING (a line of its own in the capture).
BUSY = "local i = 0 while i < 3000000 do i = i + 1 end redis.call('PING') "
SCRIPT = (
    BUSY + "redis.call('XADD', KEYS[1], '*', 'f', 'a') redis.call('XADD', KEYS[1], '*', 'f', 'b')"
)


def test_xadd_ids_in_units_are_pinned_from_the_aof(server_kind: ServerKind, tmp_path) -> None:
    server = aof_server(server_kind)
    try:
        capture = MonitorCapture(server, tmp_path / "monitor.log")
        try:
            with server.client() as c:
                c.execute_command("XADD", "s", "*", "f", "first")
                c.execute_command("XGROUP", "CREATE", "s", "g", "0")
                c.execute_command("EVAL", SCRIPT, "1", "s")
                pipe = c.pipeline(transaction=True)  # MULTI ... EXEC
                pipe.execute_command("XADD", "t", "*", "f", "a")
                pipe.execute_command("EVAL", BUSY, "0")
                pipe.execute_command("XADD", "t", "*", "f", "b")
                pipe.execute_command("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
                pipe.execute()
        finally:
            path = capture.stop()
        truth = read_truth(server, [0])
        with server.client() as c:
            made = {k: [e[0] for e in c.execute_command("XRANGE", k, "-", "+")] for k in "st"}
        aof_rows = read_aof(aof_dir(server)).rows
        profile = server.profile
    finally:
        stop_server(server)
    rows, _ = parse_file(str(path))
    # worth something only if each unit's last XADD line came a millisecond or more after
    # the unit's first line (7.2+ made the ID from the unit's start; 7.0 from the XADD)
    script = next(i for i, r in enumerate(rows) if r["argv"][0] == "EVAL")
    multi = next(i for i, r in enumerate(rows) if r["argv"][0] == "MULTI")
    for start in (script, multi + 1):
        unit_xadds = [r["ts_ms"] for r in rows[start:] if r["argv"][0] == "XADD"][:2]
        assert unit_xadds[-1] > rows[start]["ts_ms"], rows[start:]
    stats = pin_star_ids(rows, aof_rows, profile=profile)
    assert stats.star_rows == 5 and stats.unpinned == 0, stats.describe()
    pinned = {
        k: [r["argv"][2] for r in rows if r["argv"][0] == "XADD" and r["argv"][1] == k]
        for k in "st"
    }
    assert pinned == made
    got = _replay(rows, profile)
    problems = compare_tables(truth, got, TABLES)
    assert not problems, format_mismatches(problems)
