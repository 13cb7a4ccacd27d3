"""AOF ingestion: the pure reader (layouts, times, damaged tails) and the CLI's
``ingest-aof`` (RDB refused, cut-off tail skipped, re-ingest appends only what is new)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pelengine import cli
from pelengine.ingest.aof import (
    AofFormatError,
    AofRewrittenError,
    AofState,
    read_aof,
)


def resp(*argv: str) -> bytes:
    out = [f"*{len(argv)}\r\n".encode()]
    for a in argv:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def make_dir(root: Path, base: bytes, *incrs: bytes) -> Path:
    d = root / "appendonlydir"
    d.mkdir(parents=True)
    (d / "appendonly.aof.1.base.aof").write_bytes(base)
    lines = ["file appendonly.aof.1.base.aof seq 1 type b"]
    lines.append("file appendonly.aof.0.incr.aof seq 1 type h")  # history: left out
    for i, data in enumerate(incrs, 1):
        (d / f"appendonly.aof.{i}.incr.aof").write_bytes(data)
        lines.append(f"file appendonly.aof.{i}.incr.aof seq {i} type i")
    (d / "appendonly.aof.manifest").write_text("\n".join(lines) + "\n")
    return d


CLAIM = ("XCLAIM", "s", "g", "c", "0", "5-0", "TIME", "9000", "RETRYCOUNT", "1", "FORCE")


def test_manifest_order_db_and_times(tmp_path: Path) -> None:
    base = resp("SELECT", "0") + resp("XADD", "s", "1000-0", "f", "v")
    incr1 = (
        b"#TS:2\r\n"
        + resp("SELECT", "3")
        + resp("XADD", "s", "MAXLEN", "=", "5", "LIMIT", "9", "1500-0", "f", "v")
        + resp("MULTI")
        + resp(*CLAIM)
        + resp("EXEC")
    )
    incr2 = resp("XACK", "s", "g", "5-0") + resp("XADD", "s", "99999999999999-0", "f", "v")
    d = make_dir(tmp_path, base, incr1, incr2)
    read = read_aof(str(d), ceiling_ms=10**12)
    got = [(r["seq"], r["ts_ms"], r["db"], r["argv"][0]) for r in read.rows]
    assert got == [
        (1, 0, 0, "SELECT"),
        (2, 1000, 0, "XADD"),
        (3, 2000, 3, "SELECT"),
        (4, 2000, 3, "XADD"),
        (5, 9000, 3, "MULTI"),  # a unit's rows share its latest time
        (6, 9000, 3, "XCLAIM"),  # never earlier than the row's own TIME
        (7, 9000, 3, "EXEC"),
        (8, 9000, 0, "XACK"),  # every file starts in db 0, as Redis loads it
        (9, 9000, 0, "XADD"),  # an ID from after the ceiling is not a time
    ]
    assert read.rows[3]["argv"] == ["XADD", "s", "MAXLEN", "=", "5", "1500-0", "f", "v"]
    assert {r["source"] for r in read.rows} == {"aof"}
    assert not read.notes
    again = read_aof(str(d), read.state)
    assert again.rows == [] and again.state.to_json() == read.state.to_json()
    # the parent data dir and the manifest itself name the same AOF
    assert len(read_aof(str(tmp_path)).rows) == len(
        read_aof(str(d / "appendonly.aof.manifest")).rows
    )


@pytest.mark.parametrize("profile", ["7.0", "7.4", "valkey-9.1.2"])
def test_a_propagated_claim_keeps_its_time_inside_a_unit(tmp_path: Path, profile: str) -> None:
    """7.2+ gives a unit one "now"; a loading server's is later than every recorded time,
    so it never clamps a propagated TIME: the delivery time is 1050, not the MULTI's 1000."""
    from pelengine.model import Replayer, snapshot_tables

    claim = ["XCLAIM", "s", "g", "c", "0", "1-0", "TIME", "1050"]
    incr = (
        resp("XADD", "s", "1-0", "f", "v")
        + resp("XGROUP", "CREATE", "s", "g", "0")
        + b"#TS:1\r\n"
        + resp("MULTI")
        + resp("SELECT", "0")
        + resp(*claim, "RETRYCOUNT", "1", "FORCE", "JUSTID", "LASTID", "1-0")
        + resp("EXEC")
    )
    read = read_aof(str(make_dir(tmp_path, b"", incr)))
    assert [r["ts_ms"] for r in read.rows[2:]] == [1050] * 4
    replayer = Replayer(profile)
    for r in read.rows:
        replayer.apply(r["seq"], r["ts_ms"], r["argv"], r["db"], r["client"])
    pel = snapshot_tables(replayer, 1050, read.rows[-1]["seq"])["pel"]
    assert [(p["id"], p["consumer"], p["delivery_time_ms"], p["delivery_count"]) for p in pel] == [
        ("1-0", "c", 1050, 1)
    ]


def test_cut_off_tail_and_unfinished_multi_wait_for_the_rest(tmp_path: Path) -> None:
    whole = resp("XADD", "s", "1-0", "f", "v") + resp("MULTI") + resp(*CLAIM) + resp("EXEC")
    path = tmp_path / "appendonly.aof"
    for cut in (len(whole) - 3, len(whole) - len(resp("EXEC"))):
        path.write_bytes(whole[:cut])
        first = read_aof(str(path))
        assert [r["argv"][0] for r in first.rows] == ["XADD"]
        assert first.files[0].skipped_tail == cut - len(resp("XADD", "s", "1-0", "f", "v"))
        assert "not ingested" in first.notes[0]
        path.write_bytes(whole)  # the writer finishes
        rest = read_aof(str(path), AofState.from_json(first.state.to_json()))
        assert [(r["seq"], r["argv"][0]) for r in rest.rows] == [
            (2, "MULTI"),
            (3, "XCLAIM"),
            (4, "EXEC"),
        ]


def test_arguments_are_bytes_exact_utf8(tmp_path: Path) -> None:
    path = tmp_path / "appendonly.aof"
    key = "clé\r\n$3\r\n*"  # CRLF and RESP markers inside an argument
    path.write_bytes(
        resp("XADD", key, "1-0", "f", "ü")
        + b"*2\r\n$3\r\nDEL\r\n$2\r\n\xff\xfe\r\n"
        + b"*2\r\n$3\r\nDEL\r\n$4\r\n\xe2\x82\xac\xff\r\n"
    )
    rows = read_aof(str(path)).rows
    assert rows[0]["argv"] == ["XADD", key, "1-0", "f", "ü"]
    assert rows[1]["argv"] == ["DEL", "\\xff\\xfe"]  # not UTF-8: backslash escapes
    assert rows[2]["argv"] == ["DEL", "\\xe2\\x82\\xac\\xff"]  # every high byte, as everywhere


def test_an_rdb_preamble_is_the_starting_state_then_commands_follow(tmp_path: Path) -> None:
    """aof-use-rdb-preamble yes (the servers' default): a legacy AOF that starts with an
    RDB snapshot, commands after it; the snapshot becomes PELENGINE.LOAD rows."""
    from tests.ingest.test_rdb import one_stream_file

    path = tmp_path / "appendonly.aof"
    path.write_bytes(one_stream_file() + resp("XACK", "s", "grp", "1-1"))
    read = read_aof(str(path))
    names = [r["argv"][0] if r["argv"][0] != "PELENGINE.LOAD" else r["argv"][1] for r in read.rows]
    assert names[0] == "BEGIN" and "STREAM" in names and names[-1] == "XACK", names
    assert {r["source"] for r in read.rows} == {"aof"}
    assert [r["seq"] for r in read.rows] == list(range(1, len(read.rows) + 1))
    assert read.files[0].snapshot_keys == 1 and not read.notes
    again = read_aof(str(path), read.state)  # the snapshot is ingested once
    assert again.rows == []


def test_a_truncated_rdb_base_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "appendonly.aof"
    path.write_bytes(b"REDIS0010\xfa\x09redis-ver")
    with pytest.raises(AofFormatError, match=r"appendonly.aof: offset \d+"):
        read_aof(str(path))


def test_rewrite_detected(tmp_path: Path) -> None:
    path = tmp_path / "appendonly.aof"
    path.write_bytes(resp("XADD", "s", "1-0", "f", "v"))
    state = read_aof(str(path)).state
    path.write_bytes(resp("XADD", "s", "2-0", "f", "v"))  # same size, other bytes
    with pytest.raises(AofRewrittenError):
        read_aof(str(path), state)


# ---- the CLI (Spark) -----------------------------------------------------------------


def _events(spark: Any, path: Path) -> list[tuple[int, list[str]]]:
    from pelengine.storage import read_table

    rows = read_table(spark, str(path)).select("seq", "argv", "source").collect()
    assert {r["source"] for r in rows} <= {"aof"}
    return sorted((r["seq"], list(r["argv"])) for r in rows)


@pytest.mark.spark
def test_cli_ingest_aof(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = tmp_path / "events"
    aof = tmp_path / "appendonly.aof"
    first = resp("SELECT", "2") + resp("XADD", "s", "1-0", "f", "v")
    tail = resp("XGROUP", "CREATE", "s", "g", "0") + resp("XADD", "s", "2-0", "f", "v")

    def ingest() -> int:
        return cli.run(["ingest-aof", str(aof), "--events", str(events)], spark=spark)

    aof.write_bytes(b"REDIS0010\xfa")  # a truncated RDB preamble: a clear error, nothing written
    assert ingest() == cli.EXIT_FAILED
    assert "appendonly.aof: offset 10: file ends inside" in capsys.readouterr().err
    assert not events.exists()
    assert not events.exists()

    aof.write_bytes(first + tail[:-5])  # crashed mid-write
    assert ingest() == cli.EXIT_OK
    out = capsys.readouterr()
    assert "ingested 3 commands" in out.out and "cut-off command" in out.out
    assert _events(spark, events)[:2] == [(1, ["SELECT", "2"]), (2, ["XADD", "s", "1-0", "f", "v"])]

    assert ingest() == cli.EXIT_OK  # the same file again: nothing new
    assert "nothing new" in capsys.readouterr().out
    assert len(_events(spark, events)) == 3

    aof.write_bytes(first + tail)  # the AOF grew (and the cut command is now whole)
    assert ingest() == cli.EXIT_OK
    assert "ingested 1 commands" in capsys.readouterr().out
    assert [s for s, _ in _events(spark, events)] == [1, 2, 3, 4]
    assert _events(spark, events)[3][1] == ["XADD", "s", "2-0", "f", "v"]

    assert cli.run(["ingest-aof", str(tmp_path / "nope"), "--events", str(events)]) == 2


def interrupted_run(session: Any, tmp_path: Path) -> dict[str, Any]:
    """The events append committed, the state row did not (a run on a copy of the state
    table stands for it): the next run must skip what is there. Returns its report;
    the events table must hold each command once."""
    import shutil

    from pelengine.runs.ingest_aof import ingest_aof
    from tests.delta_rs import delta_rs_table

    events, state, doomed = tmp_path / "events", tmp_path / "state", tmp_path / "doomed"
    aof = tmp_path / "appendonly.aof"
    aof.write_bytes(resp("XADD", "s", "1-0", "f", "v"))
    assert ingest_aof(session, str(aof), str(events), state_path=str(state))["appended"] == 1
    with open(aof, "ab") as fh:
        fh.write(resp("XADD", "s", "2-0", "f", "v") + resp("XADD", "s", "3-0", "f", "v"))
    shutil.copytree(state, doomed)
    assert ingest_aof(session, str(aof), str(events), state_path=str(doomed))["appended"] == 2
    with open(aof, "ab") as fh:
        fh.write(resp("XADD", "s", "4-0", "f", "v"))
    report = ingest_aof(session, str(aof), str(events), state_path=str(state))
    assert (report["recovered"], report["appended"]) == (2, 1)
    rows = sorted((r["seq"], r["argv"][2]) for r in delta_rs_table(events).to_pylist())
    assert rows == [(1, "1-0"), (2, "2-0"), (3, "3-0"), (4, "4-0")]
    return report


@pytest.mark.spark
def test_interrupted_run_is_not_appended_twice(spark: Any, tmp_path: Path) -> None:
    assert interrupted_run(spark, tmp_path)["spark_session"] is True
