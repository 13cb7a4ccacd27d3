"""Pieces of sql/pending/report/progress that need no Spark session: XPENDING's bounds and
redis-cli's printing, text tables, the progress reporter, failure lines, thresholds."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from pelengine import cli
from pelengine.commands.args import report_thresholds
from pelengine.progress import ProgressReporter, format_duration, spark_status
from pelengine.read.pending import (
    INVALID_ID,
    UINT64_MAX,
    PendingArgumentError,
    ReplyError,
    format_reply,
    range_bounds,
)
from pelengine.read.report import Thresholds
from pelengine.settings import ConfigError, Settings, load_config
from pelengine.tabular import format_csv, format_json, format_table

M = UINT64_MAX

# ---- XPENDING bounds (t_stream.c streamParseIntervalIDOrReply + streamIncrID/DecrID) --------


@pytest.mark.parametrize(
    ("start", "end", "bounds"),
    [
        ("-", "+", ((0, 0), (M, M))),
        ("5", "7", ((5, 0), (7, M))),
        ("5-3", "7-1", ((5, 3), (7, 1))),
        ("(5-3", "(7-0", ((5, 4), (6, M))),
        (f"(5-{M}", "(7", ((6, 0), (7, M - 1))),
        ("(5", "+", ((5, 1), (M, M))),
    ],
)
def test_range_bounds(start: str, end: str, bounds: tuple[Any, Any]) -> None:
    assert range_bounds(start, end) == bounds


# the bounds XPENDING refuses, by its error
REFUSED_BOUNDS = {
    INVALID_ID: [
        ("(-", "+"),
        ("-", "(+"),
        ("abc", "+"),
        ("1-x", "+"),
        ("-", "18446744073709551616"),
    ],
    "ERR invalid start ID for the interval": [(f"({M}-{M}", "+")],
    "ERR invalid end ID for the interval": [("-", "(0-0")],
}


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [(start, end, message) for message, bounds in REFUSED_BOUNDS.items() for start, end in bounds],
)
def test_range_bound_errors(start: str, end: str, message: str) -> None:
    with pytest.raises(PendingArgumentError) as err:
        range_bounds(start, end)
    assert str(err.value) == message


# ---- redis-cli's printing (cliFormatReplyTTY) -----------------------------------------------


def test_format_reply_summary_and_empty_forms() -> None:
    reply = [3, "1-0", "9-1", [["alice", "2"], ["bob", "1"]]]
    assert format_reply(reply) == "\n".join(
        [
            "1) (integer) 3",
            '2) "1-0"',
            '3) "9-1"',
            '4) 1) 1) "alice"',
            '      2) "2"',
            '   2) 1) "bob"',
            '      2) "1"',
        ]
    )
    assert format_reply([0, None, None, None]) == "1) (integer) 0\n2) (nil)\n3) (nil)\n4) (nil)"
    assert format_reply([]) == "(empty array)"
    assert format_reply(ReplyError("NOGROUP x")) == "(error) NOGROUP x"


def test_format_reply_two_digit_indexes_and_escapes() -> None:
    entries = [[f"{i}-0", "c", 5, 1] for i in range(1, 11)]
    lines = format_reply(entries).splitlines()
    assert lines[:5] == [
        ' 1) 1) "1-0"',
        '    2) "c"',
        "    3) (integer) 5",
        "    4) (integer) 1",
        ' 2) 1) "2-0"',
    ]
    assert lines[-4] == '10) 1) "10-0"'
    assert format_reply('c"\u00e9 \\\n\t') == '"c\\"\\xc3\\xa9 \\\\\\n\\t"'


# ---- text tables ----------------------------------------------------------------------------


def test_text_json_csv() -> None:
    cols = ["key", "n", "argv", "ok"]
    rows = [("a", 1, ["X", "y"], True), ("bb", None, None, False)]
    assert format_table(cols, rows).splitlines() == [
        "key     n  argv       ok",
        "---  ----  ---------  -----",
        'a       1  ["X","y"]  true',
        "bb   null  null       false",
    ]
    assert json.loads(format_json(cols, rows)) == [
        {"key": "a", "n": 1, "argv": ["X", "y"], "ok": True},
        {"key": "bb", "n": None, "argv": None, "ok": False},
    ]
    assert format_csv(cols, rows).splitlines() == [
        "key,n,argv,ok",
        'a,1,"[""X"",""y""]",true',
        "bb,,,false",
    ]


# ---- progress -------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_lines_carry_elapsed_time_and_the_heartbeat_is_throttled() -> None:
    lines: list[str] = []
    clock = FakeClock()
    rep = ProgressReporter(
        lines.append, heartbeat_s=30, status=lambda: "spark stage 3", clock=clock
    )
    rep("replaying")
    clock.now += 29
    assert not rep.beat()  # quiet for less than heartbeat_s
    clock.now += 2
    assert rep.beat()
    assert not rep.beat()  # throttled: at most one per heartbeat_s
    clock.now += 30
    assert rep.beat()
    clock.now += 10
    rep("writing pel (1/8)")  # a progress line resets the wait
    clock.now += 25
    assert not rep.beat()
    assert lines == [
        "[  0.0s] replaying",
        "[ 31.0s] ... still at 'replaying' (31.0s); spark stage 3",
        "[ 1m01s] ... still at 'replaying' (1m01s); spark stage 3",
        "[ 1m11s] writing pel (1/8)",
    ]
    off = ProgressReporter(lines.append, heartbeat_s=0, clock=clock)
    clock.now += 1000
    assert not off.beat()
    assert format_duration(3725) == "1h02m"


def test_heartbeat_thread_prints_while_quiet_and_stops() -> None:
    lines: list[str] = []
    with ProgressReporter(lines.append, heartbeat_s=0.05, poll_s=0.01) as rep:
        rep("a long step")
        time.sleep(0.3)
    stopped = len(lines)
    time.sleep(0.1)
    beats = [line for line in lines if "still at 'a long step'" in line]
    assert 2 <= len(beats) <= 8
    assert len(lines) == stopped  # no line after the block
    assert not any(t.name == "pelengine-heartbeat" for t in threading.enumerate())


def test_no_stage_details_without_a_spark_context() -> None:
    class ConnectSession:  # Spark Connect: no SparkContext, no JVM
        @property
        def sparkContext(self) -> Any:  # noqa: N802
            raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext")

    session: Any = ConnectSession()
    assert spark_status(session) is None


def test_run_summary_lines() -> None:
    from pelengine.runs.output import format_report

    full = {
        "profile": "7.0",
        "as_of_seq": 9,
        "as_of_ms": 1000,
        "input": {"path": "ev", "delta_version": 3},
        "events": {"read": 10, "applied": 7, "ignored": 1, "failed": 1, "rejected": 1}
        | {"failed_by_kind": {"nogroup": 1}, "rejected_by_reason": {"null argv": 1}},
        "output": {"rows": {"pel": 2}},
        "incremental": {"mode": "incremental", "families_replayed": 2, "families_total": 5},
        "timings_s": {"validate": 1.0, "write": 2.0},
        "duration_s": 3.5,
    }
    text = format_report(full)
    assert "(events ev, Delta version 3)" in text
    assert "incremental: incremental, 2 of 5 families replayed" in text
    assert "events: read 10, applied 7, ignored 1, failed 1, rejected 1" in text
    assert "rejected: null argv 1 (rows in rejected_events)" in text
    assert "took 3.5 s (validate 1.0, write 2.0)" in text
    idle = format_report({"incremental": {"mode": "up-to-date"}, "written": False})
    assert "nothing written" in idle and "events:" not in idle


# ---- failures name what failed --------------------------------------------------------------


def test_describe_failure_finds_the_worker_error_line() -> None:
    assert cli.describe_failure(ValueError("bad")) == "ValueError: bad"

    class PythonException(Exception):  # noqa: N818  (stands in for pyspark's wrapper)
        pass

    wrapped = PythonException(
        "\n  An exception was thrown from the Python worker. Please see the stack trace below."
        '\nTraceback (most recent call last):\n  File "udf.py", line 9, in replay\n'
        "    raise ReplayRowError(...)\npelengine.engine.errors.ReplayRowError: replay of db=0 "
        "family='s' failed at the event seq 7 (ts_ms 5, db 0, argv ['XADD']): KeyError: 'x'\n"
    )
    assert cli.describe_failure(wrapped) == (
        "PythonException: ReplayRowError: replay of db=0 family='s' failed at the event seq 7 "
        "(ts_ms 5, db 0, argv ['XADD']): KeyError: 'x'"
    )


def test_replay_error_names_the_event(monkeypatch: pytest.MonkeyPatch) -> None:
    from pelengine.engine import errors, udf
    from pelengine.engine.python import family

    def broken(self: Any, seq: int, *_: Any) -> Any:
        if seq == 2:
            raise KeyError("boom")
        return real(self, seq, *_)

    real = family.Replayer.apply
    monkeypatch.setattr(family.Replayer, "apply", broken)
    replay = udf.one_family(udf.make_replay_function(Settings(profile="7.0"), 10, 3))
    batch = pa.RecordBatch.from_pydict(
        {
            "seq": [1, 2],
            "ts_ms": [5, 6],
            "argv": [["XADD", "s", "1-0", "f", "v"], ["XGROUP", "CREATE", "s", "g", "0"]],
            "db": [0, 0],
            "client": [None, None],
            "fanout": [False, False],
        }
    )
    with pytest.raises(errors.ReplayRowError, match=r"seq 2 \(ts_ms 6, db 0, argv \['XGROUP'"):
        list(replay((pa.scalar(0), pa.scalar("s")), iter([batch])))


def test_routing_error_names_the_event(monkeypatch: pytest.MonkeyPatch) -> None:
    from pelengine.engine import errors, udf
    from pelengine.engine.python import router

    def broken(argv: list[str]) -> Any:
        raise ValueError(f"cannot route {argv[0]}")

    monkeypatch.setattr(router, "touched_keys", broken)
    route = udf.make_router(Settings(profile="7.0"), {})
    batch = pa.RecordBatch.from_pydict(
        {"seq": [41], "ts_ms": [9], "argv": [["XACK", "s", "g", "1-0"]], "db": [3]}
    )
    with pytest.raises(errors.ReplayRowError, match=r"routing failed at the event seq 41 .*XACK"):
        list(route(iter([batch])))


# ---- thresholds: conf, flags, validation ----------------------------------------------------


def test_report_thresholds_from_conf_and_flags(tmp_path: Path) -> None:
    over = tmp_path / "ops.yaml"
    over.write_text("report: {poison_count: 9, stuck_idle_ms: 10}\nprogress: {heartbeat_s: 0}\n")
    conf = load_config([over])
    assert conf.progress.heartbeat_s == 0
    args = cli.build_parser().parse_args(["report", "--out", "o", "--stuck-idle-ms", "77"])
    assert report_thresholds(args, conf) == Thresholds(9, 77, 3_600_000, 1)
    assert report_thresholds(args, load_config()) == Thresholds(5, 77, 3_600_000, 1)
    over.write_text("report: {poison_count: 0}\n")
    with pytest.raises(ConfigError, match=r"report\.poison_count"):
        load_config([over])
    with pytest.raises(ValueError, match="lag_runs"):
        Thresholds(lag_runs=0)


# ---- usage errors name the option or path ----------------------------------------------------


@pytest.fixture
def fake_root(tmp_path: Path) -> str:
    (tmp_path / "root" / "pel" / "_delta_log").mkdir(parents=True)
    return str(tmp_path / "root")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sql", "SELECT 1", "--out", "/no/such/out"], "--out /no/such/out: no such path"),
        (["pending", "k", "g", "--out", "."], "--out .: no tables there"),
        (["report", "--out", "pyproject.toml"], "--out pyproject.toml: not a directory"),
        (["reconstruct", "--events", ".", "--out", "pyproject.toml"], "pyproject.toml: a file"),
        (["sql", "  ", "--out", "ROOT"], "the query is empty"),
        (["sql", "SELECT 1", "--out", "ROOT", "--json", "--csv"], "not allowed with"),
        (["sql", "SELECT 1", "--out", "ROOT", "--limit", "-3"], "--limit"),
        (["pending", "k", "g", "--out", "ROOT", "--start", "-"], "--start, --end and --count"),
        (["pending", "k", "g", "--out", "ROOT", "--idle", "5"], "--consumer and --idle need"),
        (["pending", "k", "g", "--out", "ROOT", "--now-ms", "5"], "--now-ms applies"),
        (["pending", "k", "g", "--out", "ROOT", "--count", "x"], "--count: not an integer"),
        (
            ["pending", "k", "g", "--out", "ROOT", "--start", "1-x", "--end", "+", "--count", "1"],
            "--start 1-x / --end +: ERR Invalid stream ID",
        ),
        (["report", "--out", "ROOT", "--poison-count", "0"], "--poison-count"),
        (["report", "--out", "ROOT", "--stuck-idle-ms", "-1"], "--stuck-idle-ms"),
        (["report", "--out", "ROOT", "--lag-runs", "many"], "--lag-runs"),
    ],
)
def test_usage_errors_name_the_option(
    argv: list[str], message: str, fake_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [fake_root if a == "ROOT" else a for a in argv]
    sentinel: Any = object()  # these fail before any Spark call
    assert cli.run(argv, spark=sentinel, progress=lambda _: None) == cli.EXIT_USAGE
    assert message in capsys.readouterr().err
