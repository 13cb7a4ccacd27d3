"""MONITOR parsing (``pelengine.ingest.monitor``) and the ``ingest-monitor`` command."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from pelengine.ingest.monitor import (
    MonitorParseError,
    ParseStats,
    iter_rows,
    parse_file,
    parse_line,
)
from pelengine.model.text import raw_bytes, sds_repr


def line(ts: str, db: int, client: str, *args: str | bytes) -> str:
    quoted = [sds_repr(a if isinstance(a, bytes) else a.encode()) for a in args]
    return f"{ts} [{db} {client}] " + " ".join(quoted)


def test_a_command_line() -> None:
    cmd = parse_line('1700000000.123456 [0 127.0.0.1:53012] "XADD" "s" "*" "f" "v"')
    assert (cmd.ts_us, cmd.ts_ms, cmd.db, cmd.client) == (
        1_700_000_000_123_456,
        1_700_000_000_123,
        0,
        "127.0.0.1:53012",
    )
    assert cmd.argv == ["XADD", "s", "*", "f", "v"]


def test_ts_ms_is_floored() -> None:
    assert parse_line('1700000000.999999 [0 a:1] "PING"').ts_ms == 1_700_000_000_999
    assert parse_line('1700000001.000000 [0 a:1] "PING"').ts_ms == 1_700_000_001_000


@pytest.mark.parametrize(
    ("client", "db"),
    [("lua", 0), ("unix:/var/run/redis.sock", 3), ("[::1]:6379", 15), ("10.0.0.1:1", 9)],
)
def test_client_forms(client: str, db: int) -> None:
    cmd = parse_line(f'1.000001 [{db} {client}] "XACK" "s" "g" "1-1"')
    assert (cmd.db, cmd.client, cmd.argv) == (db, client, ["XACK", "s", "g", "1-1"])


def test_every_escape() -> None:
    text = r'1.5 [0 lua] "a\"b" "c\\d" "\n\r\t\a\b" "\x00\x7f\xe2\x82\xac" "\xff\xfe" "" "sp ace"'
    assert parse_line(text).argv == [
        'a"b',
        "c\\d",
        "\n\r\t\a\b",
        "\x00\x7f\u20ac",
        "\\xff\\xfe",  # not UTF-8: kept as the capture's escape text
        "",
        "sp ace",
    ]
    # an argument that is not UTF-8 has every high byte escaped, as every path writes it;
    # so has one whose text holds a backslash and x, with its backslash as \x5c
    assert parse_line(r'1.5 [0 lua] "k\\xfe" "k\xfe"').argv == ["k\\x5cxfe", "k\\xfe"]
    assert parse_line(r'1.5 [0 1.1.1.1:1] "\xe2\x82\xac\xff" "\xe2\x82\xac"').argv == [
        "\\xe2\\x82\\xac\\xff",
        "\u20ac",
    ]


def test_round_trip_of_random_arguments() -> None:
    rng = random.Random(5)
    alphabet = list(range(0, 128)) + [ord('"'), ord("\\"), ord(" ")] * 5
    for _ in range(500):
        args = [
            "".join(chr(rng.choice(alphabet)) for _ in range(rng.randint(0, 12)))
            + rng.choice(["", "é", "€", "日本"])
            for _ in range(rng.randint(1, 6))
        ]
        got = parse_line(line("1.000002", 1, "h:1", *args)).argv
        # the exact bytes come back; text holding "\x" is written escaped (docs/input.md)
        assert [raw_bytes(a) for a in got] == [a.encode() for a in args]
        assert [a for a, b in zip(got, args, strict=True) if a != b] == [
            a for a, b in zip(got, args, strict=True) if "\\x" in b
        ]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("OKAY", "prefix"),
        ('1.5 [0 lua] "XADD" "s', "unterminated"),
        ('1.5 [0 lua] "XADD"  "s"', "expected"),
        ('1.5 [0 lua] "a\\q"', "unknown escape"),
        ('1.5 [0 lua] "a"x', "expected a space"),
        ("1.5 [0 lua] ", "no command"),
        ('1.5 [x lua] "PING"', "prefix"),
    ],
)
def test_not_a_command(text: str, why: str) -> None:
    with pytest.raises(MonitorParseError, match=why):
        parse_line(text)


def test_rows_of_a_raw_capture() -> None:
    lines = [
        "+OK\r\n",
        '+1700000000.000100 [0 127.0.0.1:1] "MULTI"\r\n',
        '+1700000000.000200 [0 127.0.0.1:1] "XADD" "s" "*" "f" "v"\r\n',
        '+1700000000.000300 [0 127.0.0.1:1] "EXEC"\r\n',
        "\r\n",
        "Error: Server closed the connection\n",
        '1700000000.001300 [2 lua] "XADD" "t" "*" "f" "v"\n',
    ]
    stats = ParseStats()
    rows = list(iter_rows(lines, start_seq=10, stats=stats))
    assert [(r["seq"], r["argv"][0], r["db"], r["client"]) for r in rows] == [
        (10, "MULTI", 0, "127.0.0.1:1"),
        (11, "XADD", 0, "127.0.0.1:1"),
        (12, "EXEC", 0, "127.0.0.1:1"),
        (13, "XADD", 2, "lua"),
    ]
    assert {r["source"] for r in rows} == {"monitor"}
    assert [r["ts_ms"] for r in rows] == [1_700_000_000_000] * 3 + [1_700_000_000_001]
    assert (stats.lines, stats.commands, stats.acks, stats.blank, stats.bad) == (7, 4, 1, 1, 1)
    assert stats.examples == [(6, "Error: Server closed the connection", stats.examples[0][2])]
    # the first XADD follows a line of the same ms; the second one a line of an earlier ms
    assert stats.star_uncertain == [13]
    assert "1 line(s) that are not commands" in stats.describe()


def test_an_xadd_in_a_unit_is_uncertain_when_the_unit_began_in_an_earlier_ms() -> None:
    """7.2+ reads the clock before a unit's first command: an ``XADD *`` whose own line
    follows a line of the same millisecond is still uncertain when its unit began in an
    earlier one (a transaction's first queued command, a script's call line)."""
    lines = [
        '1700000000.100900 [0 c:2] "PING"',
        '1700000000.101000 [0 c:1] "MULTI"',
        '1700000000.105000 [0 c:1] "XACK" "s" "g" "1-1"',
        '1700000000.105100 [0 c:1] "XADD" "s" "*" "f" "v"',
        '1700000000.105200 [0 c:1] "EXEC"',
        '1700000000.106000 [0 c:2] "EVAL" "..." "1" "t"',
        '1700000000.107000 [0 lua] "PING"',
        '1700000000.107100 [0 lua] "XADD" "t" "*" "f" "v"',
        '1700000000.107200 [0 c:2] "XADD" "t" "*" "f" "v"',
    ]
    stats = ParseStats()
    list(iter_rows(lines, stats=stats))
    assert stats.star_uncertain == [4, 8]


def _capture(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(x + "\n" for x in lines), encoding="ascii")
    return path


def _table(path: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    return sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["seq"])


@pytest.mark.spark
def test_cli_ingest_monitor(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pelengine.cli import run

    first = _capture(
        tmp_path / "one.log",
        [
            "OK",
            line("1700000000.000100", 0, "127.0.0.1:1", "XADD", "s", "*", "f", 'v"\\\n\xe9'),
            "this is not a command",
            line("1700000000.002100", 0, "127.0.0.1:1", "XGROUP", "CREATE", "s", "g", "0"),
            '1700000000.002200 [0 127.0.0.1:1] "broken',
            line("1700000000.003000", 1, "lua", "XADD", "s", "1-1", b"k\xff", "v"),
        ],
    )
    events = str(tmp_path / "events")
    assert run(["ingest-monitor", str(first), "--events", events], spark=spark) == 0
    out = capsys.readouterr().out
    assert "wrote 3 events (seq 1..3)" in out
    assert "2 line(s) that are not commands" in out
    assert "line 3 (no 'seconds.micros [db client]' prefix): this is not a command" in out
    assert "line 5 (unterminated quoted argument)" in out
    rows = _table(events)
    assert [r["argv"] for r in rows] == [
        ["XADD", "s", "*", "f", 'v"\\\n\xe9'],
        ["XGROUP", "CREATE", "s", "g", "0"],
        ["XADD", "s", "1-1", "k\\xff", "v"],
    ]
    assert [(r["seq"], r["ts_ms"], r["db"], r["client"], r["source"]) for r in rows] == [
        (1, 1_700_000_000_000, 0, "127.0.0.1:1", "monitor"),
        (2, 1_700_000_000_002, 0, "127.0.0.1:1", "monitor"),
        (3, 1_700_000_000_003, 1, "lua", "monitor"),
    ]

    # a second capture appends after the table's largest seq
    second = _capture(
        tmp_path / "two.log", [line("1700000001.000000", 0, "h:2", "XACK", "s", "g", "1-1")]
    )
    assert run(["ingest-monitor", str(second), "--events", events], spark=spark) == 0
    assert "appended 1 events (seq 4..4)" in capsys.readouterr().out
    assert [r["seq"] for r in _table(events)] == [1, 2, 3, 4]

    # --overwrite starts again at 1
    assert run(["ingest-monitor", str(second), "--events", events, "--overwrite"], spark=spark) == 0
    assert [(r["seq"], r["argv"][0]) for r in _table(events)] == [(1, "XACK")]


def test_cli_ingest_monitor_missing_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pelengine.cli import run

    code = run(["ingest-monitor", str(tmp_path / "nope.log"), "--events", str(tmp_path / "e")])
    assert code == 2
    assert "nope.log: no such file" in capsys.readouterr().err
    assert run(["ingest-monitor", str(tmp_path / "nope.log")]) == 2  # --events is required


def test_parse_file(tmp_path: Path) -> None:
    path = _capture(tmp_path / "c.log", ["OK", line("2.000001", 0, "a:1", "PING")])
    rows, stats = parse_file(str(path), start_seq=7)
    assert [(r["seq"], r["ts_ms"], r["argv"]) for r in rows] == [(7, 2000, ["PING"])]
    assert stats.describe() == "1 commands from 2 lines, 1 OK line(s)"
