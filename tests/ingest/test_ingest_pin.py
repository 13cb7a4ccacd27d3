"""Pinning the `XADD *` IDs of a MONITOR capture from the same server's AOF (ingest.pin).

The real-server proof is tests/redis_diff/test_commands_monitor.py; these pin the
rules on small hand-made logs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from pelengine.ingest.pin import aof_xadd_ids, pin_star_ids
from pelengine.model.ids import StreamID


def row(seq: int, ts_ms: int, *argv: str, db: int = 0, client: str = "c") -> dict[str, Any]:
    return {"seq": seq, "ts_ms": ts_ms, "argv": list(argv), "db": db, "client": client}


def aof(*argv: str, db: int = 0) -> dict[str, Any]:
    return {"seq": 0, "ts_ms": 0, "argv": list(argv), "db": db}


def test_aof_ids_are_read_after_the_trim_options() -> None:
    ids = aof_xadd_ids(
        [
            aof("XADD", "s", "MAXLEN", "=", "5", "10-1", "f", "v"),
            aof("XADD", "s", "NOMKSTREAM", "MINID", "3", "10-2", "f", "v", db=2),
            aof("XCLAIM", "s", "g", "c", "0", "10-1"),
        ]
    )
    assert ids == {(0, "s"): Counter([StreamID(10, 1)]), (2, "s"): Counter([StreamID(10, 2)])}


@pytest.mark.parametrize(
    ("second_line_ms", "aof_ids"),
    [
        # the line before was stamped at 100; this one at 101, but the server's clock
        # read was still 100, so the entry is 100-1 (after 100-0), not 101-0
        (101, ["100-0", "100-1"]),
        # Valkey 9.1's command clock runs a microsecond or two ahead of its MONITOR
        # stamps: the second XADD read 101 while its line, stamped right after it ran,
        # shows 100. The first one's ID is the smallest candidate the AOF shows (100-0)
        (100, ["100-0", "101-0"]),
    ],
    ids=["clock-before-its-line", "clock-ahead-of-its-line"],
)
def test_a_clock_read_outside_the_lines_millisecond_is_pinned(
    second_line_ms: int, aof_ids: list[str]
) -> None:
    rows = [
        row(1, 100, "XADD", "s", "*", "f", "v"),
        row(2, second_line_ms, "XADD", "s", "*", "f", "v"),
    ]
    stats = pin_star_ids(rows, [aof("XADD", "s", i, "f", "v") for i in aof_ids])
    assert [r["argv"][2] for r in rows] == aof_ids
    assert (stats.star_rows, stats.pinned, stats.moved, stats.unpinned) == (2, 2, 1, 0)
    assert stats.moved_seqs == [2]


def test_the_clock_leads_its_line_by_one_millisecond_at_most() -> None:
    rows = [row(1, 99, "PING"), row(2, 100, "XADD", "s", "*", "f", "v")]
    stats = pin_star_ids(rows, [aof("XADD", "s", "102-0", "f", "v")])
    assert rows[1]["argv"][2] == "*"
    assert (stats.pinned, stats.unpinned) == (0, 1)


def test_the_window_is_bounded_by_the_line_before() -> None:
    # the line before is at 105: an AOF ID at 103 cannot be this command's
    rows = [row(1, 105, "XACK", "s", "g", "1-1"), row(2, 106, "XADD", "s", "*", "f", "v")]
    stats = pin_star_ids(rows, [aof("XADD", "s", "103-0", "f", "v")])
    assert rows[1]["argv"][2] == "*"
    assert (stats.pinned, stats.unpinned) == (0, 1)
    assert "XADD s * f v" in stats.unpinned_examples[0]


def test_other_keys_and_dbs_do_not_pin() -> None:
    rows = [row(1, 100, "PING"), row(2, 101, "XADD", "s", "*", "f", "v")]
    stats = pin_star_ids(
        rows, [aof("XADD", "t", "100-0", "f", "v"), aof("XADD", "s", "100-0", "f", "v", db=1)]
    )
    assert rows[1]["argv"][2] == "*" and stats.unpinned == 1


def test_commands_that_add_nothing_are_not_counted() -> None:
    rows = [
        row(1, 100, "XADD", "s", "NOMKSTREAM", "*", "f", "v"),  # no stream: nil, adds nothing
        row(2, 101, "XADD", "s", "*", "f"),  # wrong arity
        row(3, 102, "XADD", "s", "MAXLEN", "~", "2", "*", "f", "v"),
    ]
    stats = pin_star_ids(rows, [aof("XADD", "s", "MAXLEN", "=", "0", "102-0", "f", "v")])
    assert [r["argv"] for r in rows][:2] == [
        ["XADD", "s", "NOMKSTREAM", "*", "f", "v"],
        ["XADD", "s", "*", "f"],
    ]
    assert rows[2]["argv"] == ["XADD", "s", "MAXLEN", "~", "2", "102-0", "f", "v"]
    assert (stats.star_rows, stats.pinned, stats.unpinned) == (1, 1, 0)


def test_explicit_and_ms_star_ids_are_left_alone() -> None:
    rows = [row(1, 100, "XADD", "s", "5-1", "f", "v"), row(2, 101, "XADD", "s", "7-*", "f", "v")]
    stats = pin_star_ids(
        rows, [aof("XADD", "s", "5-1", "f", "v"), aof("XADD", "s", "7-0", "f", "v")]
    )
    assert [r["argv"][2] for r in rows] == ["5-1", "7-*"]
    assert stats.star_rows == 0


def test_a_stream_whose_top_is_ahead_of_the_clock() -> None:
    # the last ID (500-3) is ahead of the clock: '*' gives its successor whatever the time
    rows = [row(1, 100, "XADD", "s", "500-3", "f", "v"), row(2, 101, "XADD", "s", "*", "f", "v")]
    stats = pin_star_ids(
        rows, [aof("XADD", "s", "500-3", "f", "v"), aof("XADD", "s", "500-4", "f", "v")]
    )
    assert rows[1]["argv"][2] == "500-4"
    assert (stats.pinned, stats.moved) == (1, 0)


# 7.2+ reads the clock once per execution unit, before its first command: the window of
# an XADD '*' inside a unit opens at the line before the unit, not the line before it.
TRANSACTION = [
    row(1, 100, "PING", client="b"),
    row(2, 101, "MULTI"),
    row(3, 105, "XACK", "s", "g", "9-9"),  # the first queued command's line
    row(4, 107, "XADD", "s", "*", "f", "v"),
    row(5, 107, "EXEC"),
]
SCRIPT = [
    row(1, 100, "PING", client="b"),
    row(2, 103, "EVAL", "busy loop; two XADDs", "1", "s"),  # fed after the clock read
    row(3, 106, "XADD", "s", "*", "f", "v", client="lua"),
    row(4, 107, "XADD", "s", "*", "f", "v", client="lua"),
]


def _pinned(rows: list[dict[str, Any]], aof_ids: list[str], profile: str) -> list[str]:
    rows = [dict(r, argv=list(r["argv"])) for r in rows]
    pin_star_ids(rows, [aof("XADD", "s", i, "f", "v") for i in aof_ids], profile=profile)
    return [r["argv"][2] for r in rows if r["argv"][0] == "XADD"]


@pytest.mark.parametrize("profile", ["7.0", "7.4", "valkey-8.1"])
def test_an_xadd_in_a_transaction_is_pinned_from_the_units_window(profile: str) -> None:
    # a 7.2+ unit's clock read 104, after the line before the unit's first command (101);
    # the window covers both servers' rules, so the pin does not depend on the profile
    assert _pinned(TRANSACTION, ["104-0"], profile) == ["104-0"]
    # 7.0 read the clock at the XADD itself: its ID lies after the line before it
    assert _pinned(TRANSACTION, ["106-0"], profile) == ["106-0"]
    # nothing the AOF holds lies in either window
    assert _pinned(TRANSACTION, ["100-0"], profile) == ["*"]


@pytest.mark.parametrize("profile", ["7.0", "7.4", "valkey-8.1"])
def test_a_scripts_xadds_are_pinned_from_the_scripts_window(profile: str) -> None:
    assert _pinned(SCRIPT, ["102-0", "102-1"], profile) == ["102-0", "102-1"]
    assert _pinned(SCRIPT, ["106-0", "107-0"], profile) == ["106-0", "107-0"]


def test_the_pin_continues_the_state_before_the_capture() -> None:
    """A capture appended after a snapshot: ``s`` already held 100-0. Replayed from an
    empty keyspace the NOMKSTREAM write did nothing and the next XADD was pinned to the
    entry before it; from the rows before the capture both get the server's IDs."""
    capture = [
        row(2, 1000, "XADD", "s", "NOMKSTREAM", "*", "f", "a"),
        row(3, 1000, "XADD", "s", "*", "f", "b"),
    ]
    server = [aof("XADD", "s", i, "f", "v") for i in ("100-0", "1000-0", "1000-1")]
    before = [{"seq": 1, "ts_ms": 0, "argv": ["XADD", "s", "100-0", "f", "v"], "client": None}]
    stats = pin_star_ids(capture, server, start=before)
    assert [capture[0]["argv"][3], capture[1]["argv"][2]] == ["1000-0", "1000-1"]
    assert (stats.pinned, stats.unpinned) == (2, 0)


def test_a_key_recreated_within_a_millisecond_is_not_offered_its_old_ids() -> None:
    # seen live (Valkey 9.1): an XADD '*' right after a DEL of its key, one millisecond
    # later; the new stream's window reaches back to 100, where the AOF holds the ID of
    # the entry the DEL removed. That ID was used up by the first XADD: the second is 101-0
    rows = [
        row(1, 100, "XADD", "s", "*", "f", "v"),
        row(2, 100, "DEL", "s"),
        row(3, 101, "XADD", "s", "*", "f", "v"),
    ]
    stats = pin_star_ids(
        rows, [aof("XADD", "s", "100-0", "f", "v"), aof("XADD", "s", "101-0", "f", "v")]
    )
    assert [rows[0]["argv"][2], rows[2]["argv"][2]] == ["100-0", "101-0"]
    assert (stats.pinned, stats.unpinned) == (2, 0)


def test_an_id_written_twice_to_a_recreated_key_pins_twice() -> None:
    # both incarnations got 100-0 (the same millisecond): the AOF holds it twice; an
    # explicit ID uses one up too
    rows = [
        row(1, 100, "XADD", "s", "100-0", "f", "v"),
        row(2, 100, "DEL", "s"),
        row(3, 100, "XADD", "s", "*", "f", "v"),
        row(4, 100, "UNLINK", "s"),
        row(5, 101, "XADD", "s", "*", "f", "v"),
    ]
    ids = [aof("XADD", "s", i, "f", "v") for i in ("100-0", "100-0", "101-0")]
    stats = pin_star_ids(rows, ids)
    assert [rows[2]["argv"][2], rows[4]["argv"][2]] == ["100-0", "101-0"]
    assert (stats.pinned, stats.unpinned) == (2, 0)
