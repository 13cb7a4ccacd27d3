"""ownership_changes and delivery_counts for a short history traced by hand.

seq  ts    command                                   effect on the PEL of group g (h at 15-18)
  6  1010  XREADGROUP g alice COUNT 2 >              1-0, 2-0 delivered to alice
  7  1020  XREADGROUP g bob >                        3-0, 4-0 delivered to bob
  8  1030  XREADGROUP g alice 0 (history)            1-0, 2-0 redelivered (count 2)
  9  1040  XCLAIM g carol 0 1-0                      1-0 alice -> carol (count 3)
 10  1050  XACK g 2-0                                2-0 acked
 11  1060  XDEL 3-0                                  3-0 dangling
 12  1070  XAUTOCLAIM g carol 0 0                    1-0 carol -> carol (4), 3-0 dropped,
                                                     4-0 bob -> carol (2)
 13  1080  XGROUP SETID g 0
 14  1090  XREADGROUP g dave COUNT 1 >               1-0 reassigned carol -> dave (count 1)
 15  1100  XGROUP CREATE h 0
 16  1100  XREADGROUP h erin >                       1-0, 2-0, 4-0 delivered to erin (group h)
 17  1110  XGROUP DELCONSUMER g dave                 1-0 consumer_deleted
 18  1120  XGROUP DESTROY h                          h's three entries group_destroyed
 19  1130  XCLAIM g frank 0 2-0 FORCE JUSTID         2-0 (acked before) pending again, count 1
 20  1140  RENAME s t                                no PEL change; history moves to t
 21  1150  DEL t                                     2-0, 4-0 key_deleted
"""

from __future__ import annotations

import pytest

from pelengine.model import Replayer, snapshot_tables
from tests.model._support import S, check_outcomes, run

STEPS = [
    S(1000, "XADD s 1-0 f v"),
    S(1000, "XADD s 2-0 f v"),
    S(1000, "XADD s 3-0 f v"),
    S(1000, "XADD s 4-0 f v"),
    S(1000, "XGROUP CREATE s g 0"),
    S(1010, "XREADGROUP GROUP g alice COUNT 2 STREAMS s >"),
    S(1020, "XREADGROUP GROUP g bob STREAMS s >"),
    S(1030, "XREADGROUP GROUP g alice STREAMS s 0"),
    S(1040, "XCLAIM s g carol 0 1-0"),
    S(1050, "XACK s g 2-0"),
    S(1060, "XDEL s 3-0"),
    S(1070, "XAUTOCLAIM s g carol 0 0"),
    S(1080, "XGROUP SETID s g 0"),
    S(1090, "XREADGROUP GROUP g dave COUNT 1 STREAMS s >"),
    S(1100, "XGROUP CREATE s h 0"),
    S(1100, "XREADGROUP GROUP h erin STREAMS s >"),
    S(1110, "XGROUP DELCONSUMER s g dave"),
    S(1120, "XGROUP DESTROY s h"),
    S(1130, "XCLAIM s g frank 0 2-0 FORCE JUSTID"),
    S(1140, "RENAME s t"),
    S(1150, "DEL t"),
]

# (seq, ts, command, key, group, id, change, from, to, delivery_count, delivery_time)
CHANGES = [
    (6, 1010, "XREADGROUP", "s", "g", "1-0", "delivered", None, "alice", 1, 1010),
    (6, 1010, "XREADGROUP", "s", "g", "2-0", "delivered", None, "alice", 1, 1010),
    (7, 1020, "XREADGROUP", "s", "g", "3-0", "delivered", None, "bob", 1, 1020),
    (7, 1020, "XREADGROUP", "s", "g", "4-0", "delivered", None, "bob", 1, 1020),
    (8, 1030, "XREADGROUP", "s", "g", "1-0", "redelivered", "alice", "alice", 2, 1030),
    (8, 1030, "XREADGROUP", "s", "g", "2-0", "redelivered", "alice", "alice", 2, 1030),
    (9, 1040, "XCLAIM", "s", "g", "1-0", "claimed", "alice", "carol", 3, 1040),
    (10, 1050, "XACK", "s", "g", "2-0", "acked", "alice", None, 2, 1030),
    (12, 1070, "XAUTOCLAIM", "s", "g", "1-0", "claimed", "carol", "carol", 4, 1070),
    (12, 1070, "XAUTOCLAIM", "s", "g", "3-0", "dropped", "bob", None, 1, 1020),
    (12, 1070, "XAUTOCLAIM", "s", "g", "4-0", "claimed", "bob", "carol", 2, 1070),
    (14, 1090, "XREADGROUP", "s", "g", "1-0", "reassigned", "carol", "dave", 1, 1090),
    (16, 1100, "XREADGROUP", "s", "h", "1-0", "delivered", None, "erin", 1, 1100),
    (16, 1100, "XREADGROUP", "s", "h", "2-0", "delivered", None, "erin", 1, 1100),
    (16, 1100, "XREADGROUP", "s", "h", "4-0", "delivered", None, "erin", 1, 1100),
    (17, 1110, "XGROUP", "s", "g", "1-0", "consumer_deleted", "dave", None, 1, 1090),
    (18, 1120, "XGROUP", "s", "h", "1-0", "group_destroyed", "erin", None, 1, 1100),
    (18, 1120, "XGROUP", "s", "h", "2-0", "group_destroyed", "erin", None, 1, 1100),
    (18, 1120, "XGROUP", "s", "h", "4-0", "group_destroyed", "erin", None, 1, 1100),
    (19, 1130, "XCLAIM", "s", "g", "2-0", "claimed", None, "frank", 1, 1130),
    (21, 1150, "DEL", "t", "g", "2-0", "key_deleted", "frank", None, 1, 1130),
    (21, 1150, "DEL", "t", "g", "4-0", "key_deleted", "carol", None, 2, 1070),
]

# (key, group, id, delivery_count, deliveries, owners, first, last, status, closed_ms)
# after RENAME (seq 20): g's history moved to t, h's stayed under s when destroyed.
COUNTS_BEFORE_DEL = [
    ("s", "h", "1-0", 1, 1, 1, 1100, 1100, "group_destroyed", 1120),
    ("s", "h", "2-0", 1, 1, 1, 1100, 1100, "group_destroyed", 1120),
    ("s", "h", "4-0", 1, 1, 1, 1100, 1100, "group_destroyed", 1120),
    ("t", "g", "1-0", 1, 5, 3, 1010, 1090, "consumer_deleted", 1110),
    ("t", "g", "2-0", 1, 3, 2, 1010, 1130, "pending", None),
    ("t", "g", "3-0", 1, 1, 1, 1020, 1020, "deleted", 1070),
    ("t", "g", "4-0", 2, 2, 2, 1020, 1070, "pending", None),
]
COUNTS_AT_END = [
    *COUNTS_BEFORE_DEL[:4],
    ("t", "g", "2-0", 1, 3, 2, 1010, 1130, "key_deleted", 1150),
    ("t", "g", "3-0", 1, 1, 1, 1020, 1020, "deleted", 1070),
    ("t", "g", "4-0", 2, 2, 2, 1020, 1070, "key_deleted", 1150),
]


def _change_tuples(r: Replayer) -> list[tuple]:
    rows = r.drain_changes()
    for row in rows:
        assert row["db"] == 0
        ms, seq = row["id"].split("-")
        assert (row["id_ms"], row["id_seq"]) == (int(ms), int(seq))
    names = [
        "seq",
        "ts_ms",
        "command",
        "key",
        "group",
        "id",
        "change",
        "from_consumer",
        "to_consumer",
        "delivery_count",
        "delivery_time_ms",
    ]
    return [tuple(row[n] for n in names) for row in rows]


def _count_tuples(rows: list[dict], as_of: tuple[int, int]) -> list[tuple]:
    names = [
        "key",
        "group",
        "id",
        "delivery_count",
        "deliveries",
        "owners",
        "first_delivery_ms",
        "last_delivery_ms",
        "status",
        "closed_ms",
    ]
    for row in rows:
        assert row["db"] == 0
        assert (row["as_of_ms"], row["as_of_seq"]) == as_of
    return sorted(tuple(row[n] for n in names) for row in rows)


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_ownership_changes(profile: str) -> None:
    r, outcomes = run(profile, STEPS)
    check_outcomes(STEPS, outcomes)
    assert _change_tuples(r) == CHANGES
    assert r.drain_changes() == []


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_delivery_counts_while_the_key_lives(profile: str) -> None:
    r, _ = run(profile, STEPS[:20])
    snap = snapshot_tables(r, 1140, 20)
    assert _count_tuples(snap["delivery_counts"], (1140, 20)) == COUNTS_BEFORE_DEL
    pel = [
        (row["key"], row["group"], row["id"], row["consumer"], row["delivery_time_ms"])
        for row in snap["pel"]
    ]
    assert pel == [("t", "g", "2-0", "frank", 1130), ("t", "g", "4-0", "carol", 1070)]
    owners = {row["consumer"]: row["pending"] for row in snap["ownership"]}
    assert owners == {"alice": 0, "bob": 0, "carol": 1, "frank": 1}


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_delivery_counts_after_the_key_is_deleted(profile: str) -> None:
    r, _ = run(profile, STEPS)
    snap = snapshot_tables(r, 1150, 21)
    assert snap["streams"] == [] and snap["pel"] == []
    assert _count_tuples(snap["delivery_counts"], (1150, 21)) == COUNTS_AT_END


def test_history_can_be_switched_off_without_losing_delivery_counts() -> None:
    r = Replayer("7.4", record_changes=False)
    for seq, step in enumerate(STEPS, start=1):
        r.apply(seq, step.ts, step.argv)
    assert r.drain_changes() == []
    rows = snapshot_tables(r, 1150, 21)["delivery_counts"]
    assert _count_tuples(rows, (1150, 21)) == COUNTS_AT_END


def test_id_parts_beyond_bigint_are_null() -> None:
    steps = [
        S(1000, "XADD s 18446744073709551615-9223372036854775808 f v"),
        S(1000, "XGROUP CREATE s g 0"),
        S(1001, "XREADGROUP GROUP g a STREAMS s >"),
    ]
    r, outcomes = run("7.4", steps)
    check_outcomes(steps, outcomes)
    (row,) = r.drain_changes()
    assert row["id"] == "18446744073709551615-9223372036854775808"
    assert (row["id_ms"], row["id_seq"]) == (None, None)
    (pel_row,) = snapshot_tables(r, 1001, 3)["pel"]
    assert (pel_row["id_ms"], pel_row["id_seq"]) == (None, None)
