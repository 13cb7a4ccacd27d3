"""Table-driven scenarios: one behaviour of Redis consumer groups per row.

Each scenario is a list of steps (time, command, expected outcome) and a few
facts about the final snapshot. Every expected value was traced by hand from
the rules in docs/redis-semantics.md and from the Redis sources (t_stream.c of 7.0.15
and 7.4.1); none was produced by running the model. Where the two disagree the
source wins and the scenario says so.

``SHARED`` scenarios run on both profiles; ``VERSIONED`` ones carry their
profile because 7.0 and 7.2+ differ (consumer creation, seen/active times,
XSETID below max_deleted_entry_id, one "now" per MULTI/EXEC).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pelengine.model import snapshot_tables
from tests.model._support import S, changes, check_facts, check_outcomes, run

MAX = "18446744073709551615"
MAX_ID = f"{MAX}-{MAX}"


@dataclass
class Scenario:
    name: str
    steps: list[S]
    facts: dict = field(default_factory=dict)
    # Exact ownership_changes as (seq, id, change, from, to, count, time), when given.
    changes: list[tuple] | None = None
    profile: str | None = None


def add(*ids: str, key: str = "s", ts: int = 1000) -> list[S]:
    return [S(ts, f"XADD {key} {i} f v") for i in ids]


# s holds 1-0, 2-0, 3-0 and group g at 0 (seq 1..4).
BASE = [*add("1-0", "2-0", "3-0"), S(1000, "XGROUP CREATE s g 0")]
# ... and consumer a holds all three, delivered at 1000 (seq 5).
READ_ALL = [*BASE, S(1000, "XREADGROUP GROUP g a STREAMS s >")]
# ... or only 1-0 (seq 5).
READ_ONE = [*BASE, S(1000, "XREADGROUP GROUP g a COUNT 1 STREAMS s >")]
SG = ("s", "g")


def pel(*rows: tuple) -> dict:
    """{("s","g",id): (consumer, time, count)} for rows (id, consumer, time, count)."""
    return {("s", "g", r[0]): tuple(r[1:]) for r in rows}


SHARED: list[Scenario] = []
VERSIONED: list[Scenario] = []


def shared(name: str, steps: list[S], facts: dict, chg: list[tuple] | None = None) -> None:
    SHARED.append(Scenario(name, steps, facts, chg))


def versioned(
    name: str, steps: list[S], by_profile: dict[str, dict], chg: list[tuple] | None = None
) -> None:
    for profile, facts in by_profile.items():
        VERSIONED.append(Scenario(f"{name}[{profile}]", steps, facts, chg, profile))


# ---------------------------------------------------------------------------
# Rule 1: idle >= min-idle-time claims; min-idle 0 or negative claims regardless.
# ---------------------------------------------------------------------------

shared(
    "xclaim_claims_when_idle_equals_min_idle",
    [*READ_ONE, S(1100, "XCLAIM s g b 100 1-0")],
    {"pel": pel(("1-0", "b", 1100, 2))},
)
shared(
    "xclaim_does_not_claim_one_ms_below_min_idle",
    [*READ_ONE, S(1099, "XCLAIM s g b 100 1-0")],
    {"pel": pel(("1-0", "a", 1000, 1))},
)
shared(
    "xautoclaim_idle_boundary",
    [
        *BASE,
        S(1000, "XREADGROUP GROUP g a COUNT 2 STREAMS s >"),
        S(1001, "XCLAIM s g a 0 2-0 TIME 1001 JUSTID"),
        S(1100, "XAUTOCLAIM s g b 100 0"),
    ],
    {"pel": pel(("1-0", "b", 1100, 2), ("2-0", "a", 1001, 1))},
)
shared(
    "min_idle_zero_claims_regardless",
    [*READ_ONE, S(1000, "XCLAIM s g b 0 1-0")],
    {"pel": pel(("1-0", "b", 1000, 2))},
)
shared(
    "negative_min_idle_claims_regardless",
    [*READ_ONE, S(1000, "XCLAIM s g b -100 1-0"), S(1000, "XAUTOCLAIM s g c -1 0")],
    {"pel": pel(("1-0", "c", 1000, 3))},
)

# ---------------------------------------------------------------------------
# Rule 2: XCLAIM.
# ---------------------------------------------------------------------------

shared(
    "xclaim_of_deleted_entry_removes_it_and_does_not_claim",
    [
        *BASE,
        S(1000, "XREADGROUP GROUP g a COUNT 2 STREAMS s >"),
        S(1001, "XDEL s 1-0"),
        S(1002, "XCLAIM s g b 0 1-0 2-0"),
    ],
    {
        "pel_ids": {SG: ["2-0"]},
        "pel": pel(("2-0", "b", 1002, 2)),
        "delivery_counts": {
            ("s", "g", "1-0"): {
                "status": "deleted",
                "delivery_count": 1,
                "deliveries": 1,
                "owners": 1,
                "closed_ms": 1002,
            },
            ("s", "g", "2-0"): ("pending", 2, 2, 2),
        },
        "ownership": {("s", "g", "a"): {"pending": 0}, ("s", "g", "b"): {"pending": 1}},
    },
    [
        (5, "1-0", "delivered", None, "a", 1, 1000),
        (5, "2-0", "delivered", None, "a", 1, 1000),
        (7, "1-0", "dropped", "a", None, 1, 1000),
        (7, "2-0", "claimed", "a", "b", 2, 1002),
    ],
)
shared(
    "xclaim_force_on_missing_stream_entry_does_nothing",
    [*BASE, S(1001, "XDEL s 2-0"), S(1005, "XCLAIM s g b 0 9-0 2-0 FORCE")],
    {"pel_ids": {SG: []}, "delivery_counts": {("s", "g", "9-0"): None, ("s", "g", "2-0"): None}},
    [],
)
shared(
    "xclaim_force_creates_pending_entry",
    [*BASE, S(1005, "XCLAIM s g b 0 2-0 FORCE")],
    {
        # streamCreateNACK starts the counter at 1, the claim then increments it.
        "pel": pel(("2-0", "b", 1005, 2)),
        "pel_ids": {SG: ["2-0"]},
        "groups": {SG: {"last_delivered_id": "0-0"}},
        "delivery_counts": {("s", "g", "2-0"): ("pending", 2, 1, 1)},
    },
    [(5, "2-0", "claimed", None, "b", 2, 1005)],
)
shared(
    # an early reading said count 0; the source (streamCreateNACK sets delivery_count 1,
    # JUSTID skips the increment) gives 1. The source wins.
    "xclaim_force_justid_creates_entry_with_count_one",
    [*BASE, S(1005, "XCLAIM s g b 0 2-0 FORCE JUSTID")],
    {"pel": pel(("2-0", "b", 1005, 1))},
)
shared(
    "xclaim_force_ignores_min_idle_for_a_new_entry",
    [*BASE, S(1005, "XCLAIM s g b 999999 2-0 FORCE")],
    {"pel": pel(("2-0", "b", 1005, 2))},
)
shared(
    "xclaim_force_on_pending_entry_still_checks_min_idle",
    [*READ_ONE, S(1100, "XCLAIM s g b 500 1-0 FORCE")],
    {"pel": pel(("1-0", "a", 1000, 1))},
)
shared(
    "xclaim_as_propagated_by_xreadgroup",
    [*BASE, S(2000, "XCLAIM s g b 0 3-0 TIME 1500 RETRYCOUNT 4 FORCE JUSTID LASTID 3-0")],
    {
        "pel": pel(("3-0", "b", 1500, 4)),
        # entries_read stays invalid; lag estimated from last_id == stream last_id.
        "groups": {SG: ("3-0", None, 0)},
    },
)
for _label, _opt, _time in [
    ("idle_sets_delivery_time", "IDLE 300", 1700),
    ("idle_in_future_becomes_now", "IDLE -50", 2000),
    ("idle_before_epoch_becomes_now", "IDLE 5000", 2000),
    ("time_sets_delivery_time", "TIME 1500", 1500),
    ("time_in_future_becomes_now", "TIME 5000", 2000),
    ("negative_time_becomes_now", "TIME -7", 2000),
]:
    shared(
        f"xclaim_{_label}",
        [*READ_ONE, S(2000, f"XCLAIM s g b 0 1-0 {_opt}")],
        {"pel": pel(("1-0", "b", _time, 2))},
    )
for _label, _opt, _count in [
    ("retrycount_sets_counter", "RETRYCOUNT 7", 7),
    ("retrycount_with_justid_sets_counter", "JUSTID RETRYCOUNT 7", 7),
    ("retrycount_zero", "RETRYCOUNT 0", 0),
    ("justid_does_not_increment", "JUSTID", 1),
    ("duplicate_id_claims_twice", "1-0", 3),
]:
    shared(
        f"xclaim_{_label}",
        [*READ_ONE, S(2000, f"XCLAIM s g b 0 1-0 {_opt}")],
        {"pel": pel(("1-0", "b", 2000, _count))},
    )
shared(
    "xclaim_by_current_owner_bumps_count_and_time",
    [*READ_ONE, S(1010, "XCLAIM s g a 0 1-0")],
    {"pel": pel(("1-0", "a", 1010, 2)), "consumer_names": {SG: ["a"]}},
)
shared(
    "xclaim_lastid_moves_last_id_forward_only",
    [
        *READ_ONE,
        S(1001, "XCLAIM s g b 0 1-0 LASTID 3-0"),
        S(1002, "XCLAIM s g b 0 1-0 LASTID 2-0"),
    ],
    {
        "pel": pel(("1-0", "b", 1002, 3)),
        # entries_read is untouched (1) and still valid, so lag = 3 - 1.
        "groups": {SG: ("3-0", 1, 2)},
    },
)
shared(
    "xclaim_lastid_applies_even_when_nothing_is_claimed",
    [*BASE, S(1001, "XCLAIM s g b 0 9-0 LASTID 2-0")],
    {"groups": {SG: {"last_delivered_id": "2-0", "entries_read": None}}, "pel_ids": {SG: []}},
)
shared(
    "xclaim_parsing_is_all_or_nothing",
    [
        *READ_ALL,
        S(2000, "XCLAIM s g b 0 1-0 FORCE 2-0", "error:syntax_error"),
        S(2000, "XCLAIM s g b 0 1-0 2-x", "error:syntax_error"),
        S(2000, "XCLAIM s g b 0 1-0 BOGUS", "error:syntax_error"),
        S(2000, "XCLAIM s g b 0 1-0 IDLE abc", "error:not_an_integer"),
        S(2000, "XCLAIM s g b 0 1-0 TIME 1.5", "error:not_an_integer"),
        S(2000, "XCLAIM s g b 0 1-0 RETRYCOUNT x", "error:not_an_integer"),
        S(2000, "XCLAIM s g b 0 1-0 LASTID 9-x", "error:invalid_id"),
        S(2000, "XCLAIM s g b 0 1-0 LASTID 9-9 IDLE", "error:syntax_error"),
        S(2000, "XCLAIM s g b abc 1-0", "error:not_an_integer"),
        S(2000, "XCLAIM s nogroup b 0 1-0", "error:nogroup"),
        S(2000, "XCLAIM missing g b 0 1-0", "error:nogroup"),
    ],
    {
        "pel": pel(("1-0", "a", 1000, 1), ("2-0", "a", 1000, 1), ("3-0", "a", 1000, 1)),
        "groups": {SG: {"last_delivered_id": "3-0"}},
        "consumer_names": {SG: ["a"]},
    },
)

# ---------------------------------------------------------------------------
# Rule 3: XAUTOCLAIM.
# ---------------------------------------------------------------------------

_ELEVEN = [f"{i}-0" for i in range(1, 12)]
_SCAN = [
    *add(*_ELEVEN),
    S(1000, "XGROUP CREATE s g 0"),
    S(1000, "XREADGROUP GROUP g a STREAMS s >"),
    # 1-0..10-0 were delivered again at 2000 (same owner, JUSTID: count stays 1).
    S(2000, "XCLAIM s g a 0 " + " ".join(_ELEVEN[:10]) + " TIME 2000 JUSTID"),
]
shared(
    "xautoclaim_count_1_scans_only_ten_pel_entries",
    [*_SCAN, S(2050, "XAUTOCLAIM s g b 100 0 COUNT 1")],
    {"pel": pel(("10-0", "a", 2000, 1), ("11-0", "a", 1000, 1))},
)
shared(
    "xautoclaim_count_2_scans_twenty_pel_entries",
    [*_SCAN, S(2050, "XAUTOCLAIM s g b 100 0 COUNT 2")],
    {"pel": pel(("10-0", "a", 2000, 1), ("11-0", "b", 2050, 2))},
)
shared(
    "xautoclaim_deleted_entries_are_removed_and_count_against_count",
    [*READ_ALL, S(1001, "XDEL s 1-0 2-0"), S(1002, "XAUTOCLAIM s g b 0 0 COUNT 2")],
    {
        "pel_ids": {SG: ["3-0"]},
        "pel": pel(("3-0", "a", 1000, 1)),
        "delivery_counts": {
            ("s", "g", "1-0"): {"status": "deleted", "closed_ms": 1002},
            ("s", "g", "2-0"): {"status": "deleted", "closed_ms": 1002},
        },
    },
    [
        (5, "1-0", "delivered", None, "a", 1, 1000),
        (5, "2-0", "delivered", None, "a", 1, 1000),
        (5, "3-0", "delivered", None, "a", 1, 1000),
        (7, "1-0", "dropped", "a", None, 1, 1000),
        (7, "2-0", "dropped", "a", None, 1, 1000),
    ],
)
shared(
    "xautoclaim_cursor_continues_where_the_previous_call_stopped",
    [
        *add("1-0", "2-0", "3-0", "4-0", "5-0"),
        S(1000, "XGROUP CREATE s g 0"),
        S(1000, "XREADGROUP GROUP g a STREAMS s >"),
        S(1001, "XAUTOCLAIM s g b 0 0-0 COUNT 2"),  # claims 1-0, 2-0; cursor 3-0
        S(1002, "XAUTOCLAIM s g c 0 3-0 COUNT 2"),  # claims 3-0, 4-0; cursor 5-0
        S(1003, "XAUTOCLAIM s g d 0 (4-0 COUNT 5"),  # exclusive start: 5-0 only
    ],
    {
        "pel": pel(
            ("1-0", "b", 1001, 2),
            ("2-0", "b", 1001, 2),
            ("3-0", "c", 1002, 2),
            ("4-0", "c", 1002, 2),
            ("5-0", "d", 1003, 2),
        )
    },
)
shared(
    "xautoclaim_justid_does_not_increment",
    [*READ_ALL, S(1005, "XAUTOCLAIM s g b 0 - JUSTID")],
    {"pel": pel(("1-0", "b", 1005, 1), ("2-0", "b", 1005, 1), ("3-0", "b", 1005, 1))},
)
shared(
    "xautoclaim_start_without_sequence",
    [*READ_ALL, S(1005, "XAUTOCLAIM s g b 0 2")],
    {"pel": pel(("1-0", "a", 1000, 1), ("2-0", "b", 1005, 2), ("3-0", "b", 1005, 2))},
)
shared(
    "xautoclaim_argument_errors_change_nothing",
    [
        *READ_ALL,
        S(1005, "XAUTOCLAIM s g b 0 0 COUNT 0", "error"),
        S(1005, "XAUTOCLAIM s g b 0 0 COUNT -1", "error"),
        S(1005, "XAUTOCLAIM s g b 0 0 COUNT x", "error"),
        S(1005, "XAUTOCLAIM s g b 0 0 FOO", "error:syntax_error"),
        S(1005, "XAUTOCLAIM s g b 0 1-x", "error:invalid_id"),
        S(1005, "XAUTOCLAIM s g b 0 (+", "error:invalid_id"),
        S(1005, f"XAUTOCLAIM s g b 0 ({MAX_ID}", "error"),
        S(1005, "XAUTOCLAIM s g b x 0", "error:not_an_integer"),
        S(1005, "XAUTOCLAIM s nog b 0 0", "error:nogroup"),
        S(1005, "XAUTOCLAIM nokey g b 0 0", "error:nogroup"),
    ],
    {
        "pel": pel(("1-0", "a", 1000, 1), ("2-0", "a", 1000, 1), ("3-0", "a", 1000, 1)),
        "consumer_names": {SG: ["a"]},
    },
)

# ---------------------------------------------------------------------------
# Rule 4: XREADGROUP.
# ---------------------------------------------------------------------------

for _label, _count, _ids, _group in [
    ("count_limits_delivery", "COUNT 2", ["1-0", "2-0"], ("2-0", 2, 1)),
    ("count_zero_means_all", "COUNT 0", ["1-0", "2-0", "3-0"], ("3-0", 3, 0)),
    ("negative_count_means_all", "COUNT -5", ["1-0", "2-0", "3-0"], ("3-0", 3, 0)),
    ("no_count_means_all", "", ["1-0", "2-0", "3-0"], ("3-0", 3, 0)),
]:
    shared(
        f"read_new_{_label}",
        [*BASE, S(1000, f"XREADGROUP GROUP g a {_count} STREAMS s >")],
        {
            "pel": pel(*[(i, "a", 1000, 1) for i in _ids]),
            "pel_ids": {SG: _ids},
            "groups": {SG: _group},
        },
    )
shared(
    "read_new_continues_after_last_id",
    [*READ_ONE, S(1001, "XREADGROUP GROUP g b COUNT 1 STREAMS s >")],
    {"pel": pel(("1-0", "a", 1000, 1), ("2-0", "b", 1001, 1)), "groups": {SG: ("2-0", 2, 1)}},
)
shared(
    "read_after_setid_back_reassigns_with_count_reset_to_one",
    [
        *READ_ALL,
        S(1001, "XCLAIM s g a 0 1-0"),
        S(1002, "XGROUP SETID s g 0"),
        S(1003, "XREADGROUP GROUP g b COUNT 1 STREAMS s >"),
    ],
    {
        "pel": pel(("1-0", "b", 1003, 1), ("2-0", "a", 1000, 1)),
        # entries_read was reset by SETID; 1-0 is the first entry, no tombstones: 3-3+1.
        "groups": {SG: ("1-0", 1, 2)},
        "delivery_counts": {("s", "g", "1-0"): ("pending", 1, 3, 2)},
        "ownership": {("s", "g", "a"): {"pending": 2}, ("s", "g", "b"): {"pending": 1}},
    },
    [
        (5, "1-0", "delivered", None, "a", 1, 1000),
        (5, "2-0", "delivered", None, "a", 1, 1000),
        (5, "3-0", "delivered", None, "a", 1, 1000),
        (6, "1-0", "claimed", "a", "a", 2, 1001),
        (8, "1-0", "reassigned", "a", "b", 1, 1003),
    ],
)
shared(
    "read_after_setid_back_by_same_consumer_resets_count",
    [
        *READ_ONE,
        S(1001, "XCLAIM s g a 0 1-0 RETRYCOUNT 5"),
        S(1002, "XGROUP SETID s g -"),
        S(1003, "XREADGROUP GROUP g a COUNT 1 STREAMS s >"),
    ],
    {"pel": pel(("1-0", "a", 1003, 1)), "ownership": {("s", "g", "a"): {"pending": 1}}},
)
shared(
    "read_after_setid_back_delivers_acked_entry_as_new",
    [
        *READ_ALL,
        S(1001, "XACK s g 1-0"),
        S(1002, "XGROUP SETID s g 0"),
        S(1003, "XREADGROUP GROUP g b COUNT 1 STREAMS s >"),
    ],
    {
        "pel": pel(("1-0", "b", 1003, 1)),
        "delivery_counts": {
            ("s", "g", "1-0"): {
                "status": "pending",
                "delivery_count": 1,
                "deliveries": 2,
                "owners": 2,
                "closed_ms": None,
            }
        },
    },
)
shared(
    "noack_delivers_without_pel_entries",
    [*BASE, S(1000, "XREADGROUP GROUP g a NOACK STREAMS s >")],
    {
        "pel_ids": {SG: []},
        "groups": {SG: ("3-0", 3, 0)},
        "consumer_names": {SG: ["a"]},
        "ownership": {("s", "g", "a"): {"pending": 0, "seen_time_ms": 1000}},
        "delivery_counts": {("s", "g", "1-0"): None},
    },
    [],
)
shared(
    "history_read_bumps_count_and_time",
    [*READ_ALL, S(1005, "XREADGROUP GROUP g a STREAMS s 0")],
    {
        "pel": pel(("1-0", "a", 1005, 2), ("2-0", "a", 1005, 2), ("3-0", "a", 1005, 2)),
        "groups": {SG: ("3-0", 3, 0)},
        "delivery_counts": {("s", "g", "1-0"): ("pending", 2, 2, 1)},
    },
)
shared(
    "history_read_from_id_with_count",
    [*READ_ALL, S(1005, "XREADGROUP GROUP g a COUNT 1 STREAMS s 1-0")],
    {"pel": pel(("1-0", "a", 1000, 1), ("2-0", "a", 1005, 2), ("3-0", "a", 1000, 1))},
)
shared(
    "history_read_leaves_deleted_entries_pending_untouched",
    [*READ_ALL, S(1001, "XDEL s 2-0"), S(1005, "XREADGROUP GROUP g a STREAMS s 0")],
    {
        "pel": {
            ("s", "g", "1-0"): ("a", 1005, 2),
            ("s", "g", "2-0"): {
                "consumer": "a",
                "delivery_time_ms": 1000,
                "delivery_count": 1,
                "entry_exists": False,
            },
            ("s", "g", "3-0"): ("a", 1005, 2),
        }
    },
)
shared(
    "history_read_counts_deleted_entries_against_count",
    [*READ_ALL, S(1001, "XDEL s 1-0"), S(1005, "XREADGROUP GROUP g a COUNT 2 STREAMS s 0")],
    {"pel": pel(("1-0", "a", 1000, 1), ("2-0", "a", 1005, 2), ("3-0", "a", 1000, 1))},
)
shared(
    "history_read_does_not_touch_other_consumers_entries",
    [
        *READ_ONE,
        S(1000, "XREADGROUP GROUP g b COUNT 1 STREAMS s >"),
        S(1005, "XREADGROUP GROUP g a STREAMS s 0"),
        S(1006, "XREADGROUP GROUP g c STREAMS s 0"),
    ],
    {
        "pel": pel(("1-0", "a", 1005, 2), ("2-0", "b", 1000, 1)),
        "pel_ids": {SG: ["1-0", "2-0"]},
        # A history read is served: it creates the consumer on both profiles.
        "consumer_names": {SG: ["a", "b", "c"]},
        "ownership": {("s", "g", "c"): {"pending": 0, "seen_time_ms": 1006}},
    },
)
shared(
    "read_over_two_streams_fails_whole_when_one_lacks_the_group",
    [
        *BASE,
        *add("1-0", key="t"),
        S(1000, "XREADGROUP GROUP g a STREAMS s t > >", "error:nogroup"),
        S(1000, "XREADGROUP GROUP g a STREAMS t s > >", "error:nogroup"),
        S(1000, "XREADGROUP GROUP g a STREAMS s nokey > >", "error:nogroup"),
        S(1000, "XREADGROUP GROUP g a STREAMS s s > 1-x", "error:invalid_id"),
    ],
    {
        "pel_ids": {SG: []},
        "groups": {SG: ("0-0", None, 3)},
        "consumer_names": {SG: []},
    },
)
shared(
    "read_over_two_streams_serves_both",
    [
        *BASE,
        *add("7-0", "8-0", key="t"),
        S(1000, "XGROUP CREATE t g 0"),
        S(1001, "XREADGROUP GROUP g a COUNT 1 STREAMS s t > >"),
    ],
    {
        "pel": {("s", "g", "1-0"): ("a", 1001, 1), ("t", "g", "7-0"): ("a", 1001, 1)},
        "pel_ids": {SG: ["1-0"], ("t", "g"): ["7-0"]},
        "groups": {SG: ("1-0", 1, 2), ("t", "g"): ("7-0", 1, 1)},
    },
)
shared(
    "read_options_in_any_order_and_consumer_named_streams",
    [
        *BASE,
        S(1000, "XREADGROUP COUNT 1 GROUP g STREAMS STREAMS s >"),
        S(1001, "xreadgroup count 1 noack group g b streams s >"),
        S(1002, "XREADGROUP GROUP g c BLOCK 10 COUNT 1 STREAMS s >"),
    ],
    {
        "pel": pel(("1-0", "STREAMS", 1000, 1), ("3-0", "c", 1002, 1)),
        "pel_ids": {SG: ["1-0", "3-0"]},
        "consumer_names": {SG: ["STREAMS", "b", "c"]},
    },
)
shared(
    "read_with_the_largest_id_acts_as_new_read",
    # Redis uses the largest ID internally to mean '>', so a literal one reads new entries.
    [*BASE, S(1000, f"XREADGROUP GROUP g a STREAMS s {MAX_ID}")],
    {"pel_ids": {SG: ["1-0", "2-0", "3-0"]}, "groups": {SG: ("3-0", 3, 0)}},
)
shared(
    "read_argument_errors_change_nothing",
    [
        *BASE,
        S(1000, "XREADGROUP GROUP g a STREAMS s $", "error"),
        S(1000, "XREADGROUP GROUP g a STREAMS s +", "error"),
        S(1000, "XREADGROUP COUNT 1 STREAMS s >", "error"),
        S(1000, "XREADGROUP GROUP g a STREAMS s t >", "error:syntax_error"),
        S(1000, "XREADGROUP GROUP g a COUNT x STREAMS s >", "error:not_an_integer"),
        S(1000, "XREADGROUP GROUP g a BLOCK -1 STREAMS s >", "error"),
        S(1000, "XREADGROUP GROUP g a FOO STREAMS s >", "error:syntax_error"),
        S(1000, "XREADGROUP GROUP g a COUNT 1 NOACK s >", "error:syntax_error"),
        S(1000, "XREADGROUP GROUP g a STREAMS s", "error:wrong_arity"),
    ],
    {"pel_ids": {SG: []}, "groups": {SG: ("0-0", None, 3)}, "consumer_names": {SG: []}},
)

# ---------------------------------------------------------------------------
# Rule 5: XACK.
# ---------------------------------------------------------------------------

shared(
    "xack_removes_pending_ids_and_ignores_unknown_ones",
    [*READ_ALL, S(1001, "XACK s g 1-0 9-0 1-0")],
    {
        "pel_ids": {SG: ["2-0", "3-0"]},
        "delivery_counts": {
            ("s", "g", "1-0"): {"status": "acked", "delivery_count": 1, "closed_ms": 1001}
        },
        "ownership": {("s", "g", "a"): {"pending": 2, "oldest_pending_id": "2-0"}},
    },
    [
        (5, "1-0", "delivered", None, "a", 1, 1000),
        (5, "2-0", "delivered", None, "a", 1, 1000),
        (5, "3-0", "delivered", None, "a", 1, 1000),
        (6, "1-0", "acked", "a", None, 1, 1000),
    ],
)
shared(
    "xack_with_a_bad_id_fails_whole",
    [
        *READ_ALL,
        S(1001, "XACK s g 1-0 bad", "error:invalid_id"),
        S(1001, "XACK s g 1-0 +", "error:invalid_id"),
    ],
    {"pel_ids": {SG: ["1-0", "2-0", "3-0"]}},
)
shared(
    "xack_on_missing_key_or_group_is_not_an_error",
    [
        *READ_ALL,
        S(1001, "XACK nokey g 1-0"),
        S(1001, "XACK s nogroup 1-0"),
        # The key/group check comes first: IDs are not even parsed.
        S(1001, "XACK nokey g bad"),
    ],
    {"pel_ids": {SG: ["1-0", "2-0", "3-0"]}, "stream_keys": [(0, "s")]},
)

# ---------------------------------------------------------------------------
# Rule 6: deletion, trimming, DELCONSUMER, DESTROY and key-level commands.
# ---------------------------------------------------------------------------

shared(
    "xdel_sets_max_deleted_id_and_leaves_dangling_pel_entries",
    [*READ_ALL, S(1001, "XDEL s 2-0 9-0")],
    {
        "streams": {
            ("s",): {
                "length": 2,
                "last_generated_id": "3-0",
                "max_deleted_entry_id": "2-0",
                "entries_added": 3,
                "first_entry_id": "1-0",
                "last_entry_id": "3-0",
                "groups": 1,
            }
        },
        "pel": {
            ("s", "g", "1-0"): {"entry_exists": True},
            ("s", "g", "2-0"): {"entry_exists": False, "consumer": "a", "delivery_count": 1},
        },
        "delivery_counts": {("s", "g", "2-0"): {"status": "pending"}},
    },
)
shared(
    "xdel_of_first_entry_moves_first_entry",
    [*BASE, S(1001, "XDEL s 1-0")],
    {"streams": {("s",): {"first_entry_id": "2-0", "max_deleted_entry_id": "1-0"}}},
)
shared(
    "xdel_with_a_bad_id_fails_whole",
    [*BASE, S(1001, "XDEL s 1-0 bad", "error:invalid_id"), S(1001, "XDEL s -", "error")],
    {"streams": {("s",): (3, "3-0", "0-0", 3)}},
)
shared(
    "xdel_on_missing_key_is_not_an_error",
    [*BASE, S(1001, "XDEL nokey 1-0"), S(1001, "XDEL nokey bad")],
    {"stream_keys": [(0, "s")]},
)
for _label, _cmd, _len, _first in [
    ("maxlen", "XTRIM s MAXLEN 1", 1, "3-0"),
    ("maxlen_exact", "XTRIM s MAXLEN = 2", 2, "2-0"),
    ("minid", "XTRIM s MINID 3-0", 1, "3-0"),
    ("minid_exact", "XTRIM s MINID = 2-0", 2, "2-0"),
    ("xadd_maxlen", "XADD s MAXLEN 2 4-0 f v", 2, "3-0"),
]:
    shared(
        f"trim_{_label}_keeps_max_deleted_and_leaves_dangling_entries",
        [*READ_ALL, S(1001, _cmd)],
        {
            "streams": {
                ("s",): {"length": _len, "first_entry_id": _first, "max_deleted_entry_id": "0-0"}
            },
            "pel": {("s", "g", "1-0"): {"entry_exists": False, "consumer": "a"}},
            "pel_ids": {SG: ["1-0", "2-0", "3-0"]},
        },
    )
# XSETID may go below a deleted entry (never below a live one): the next entries follow
# its tombstone in the same listpack, and an exact MINID trim walks the listpack in
# order, stopping at the first entry at or above the threshold, deleted or not
# (streamTrim of 7.0.15: "stop = streamCompareID(&currid, id) >= 0" comes before the
# deleted flag is looked at). Seen on a live Redis 7.0.15: 1 trimmed, then 0, then 0.
# 7.2+ refuse an XSETID below max_deleted_entry_id (which XDEL sets): 7.0 only.
_BELOW_TOMBSTONE = [
    *add("1-0", "5-0"),
    S(1000, "XDEL s 5-0"),
    S(1000, "XSETID s 1-0"),
    *add("2-0", "3-0"),
]
versioned(
    "exact_minid_trim_stops_at_a_tombstone_above_it",
    [*_BELOW_TOMBSTONE, S(1001, "XTRIM s MINID 3-0")],
    {"7.0": {"streams": {("s",): {"length": 2, "first_entry_id": "2-0"}}}},
)
versioned(
    "exact_minid_trim_stops_in_the_first_run_that_reaches_it",
    [
        *_BELOW_TOMBSTONE,
        S(1001, "XTRIM s MINID 3-0"),
        S(1001, "XDEL s 3-0"),
        S(1001, "XSETID s 2-0"),
        *add("2-1", "4-0", ts=1001),
        S(1002, "XTRIM s MINID 2-2"),
    ],
    {"7.0": {"streams": {("s",): {"length": 3, "first_entry_id": "2-0"}}}},
)
shared(
    "xtrim_argument_errors",
    [
        *BASE,
        S(1001, "XTRIM s FOO 1", "error:syntax_error"),
        S(1001, "XTRIM s MAXLEN x", "error:not_an_integer"),
        S(1001, "XTRIM s MAXLEN -1", "error"),
        S(1001, "XTRIM s MAXLEN 1 MINID 1", "error:syntax_error"),
        S(1001, "XTRIM s MAXLEN 1 LIMIT 1", "error:syntax_error"),
        S(1001, "XTRIM nokey MAXLEN 0"),
    ],
    {"streams": {("s",): (3, "3-0", "0-0", 3)}, "stream_keys": [(0, "s")]},
)
shared(
    "delconsumer_drops_the_consumer_with_its_pending_entries",
    [
        *BASE,
        S(1000, "XREADGROUP GROUP g a COUNT 2 STREAMS s >"),
        S(1000, "XREADGROUP GROUP g b COUNT 1 STREAMS s >"),
        S(1001, "XGROUP DELCONSUMER s g a"),
        S(1001, "XGROUP DELCONSUMER s g nobody"),
        S(1001, "XGROUP DELCONSUMER s nogroup b", "error:nogroup"),
    ],
    {
        "pel_ids": {SG: ["3-0"]},
        "consumer_names": {SG: ["b"]},
        "groups": {SG: {"pending": 1, "consumers": 1, "last_delivered_id": "3-0"}},
        "delivery_counts": {
            ("s", "g", "1-0"): {"status": "consumer_deleted", "closed_ms": 1001},
            ("s", "g", "3-0"): {"status": "pending", "closed_ms": None},
        },
    },
)
shared(
    "destroy_drops_the_group_and_its_pel",
    [
        *READ_ONE,
        S(1001, "XGROUP DESTROY s g"),
        S(1002, "XGROUP DESTROY s g"),
        S(1002, "XGROUP DESTROY nokey g", "error:no_such_key"),
    ],
    {
        "groups": {SG: None},
        "pel_ids": {SG: []},
        "streams": {("s",): {"groups": 0, "length": 3}},
        "delivery_counts": {("s", "g", "1-0"): {"status": "group_destroyed", "closed_ms": 1001}},
    },
)
for _label, _cmd in [("del", "DEL s"), ("unlink", "UNLINK s"), ("flushdb", "FLUSHDB")]:
    shared(
        f"{_label}_drops_the_stream_and_closes_its_pel",
        [*READ_ONE, S(1001, _cmd)],
        {
            "stream_keys": [],
            "delivery_counts": {
                ("s", "g", "1-0"): {"status": "key_deleted", "closed_ms": 1001, "delivery_count": 1}
            },
        },
    )
shared(
    "del_several_keys",
    [*BASE, *add("1-0", key="t"), S(1000, "SET x y", "ignored"), S(1001, "UNLINK s t x nokey")],
    {"stream_keys": []},
)
shared(
    "del_of_missing_or_other_keys_only",
    [*BASE, S(1000, "SET x y", "ignored"), S(1001, "DEL x nokey", "ignored")],
    {"stream_keys": [(0, "s")]},
)
shared(
    "flushdb_only_reaches_its_own_db",
    [*BASE, S(1000, "XADD s 5-0 f v", db=1), S(1001, "FLUSHDB", db=1)],
    {"stream_keys": [(0, "s")]},
)
shared(
    "flushall_reaches_every_db",
    [*BASE, S(1000, "XADD s 5-0 f v", db=1), S(1001, "FLUSHALL ASYNC", db=3)],
    {"stream_keys": []},
)
shared(
    "flush_with_a_bad_argument_fails",
    [*BASE, S(1001, "FLUSHALL NOW", "error")],
    {"stream_keys": [(0, "s")]},
)
shared(
    "rename_moves_the_stream_with_its_history",
    [*READ_ONE, S(1001, "RENAME s t")],
    {
        "stream_keys": [(0, "t")],
        "pel": {("t", "g", "1-0"): ("a", 1000, 1)},
        "delivery_counts": {("t", "g", "1-0"): ("pending", 1, 1, 1), ("s", "g", "1-0"): None},
        "groups": {("t", "g"): ("1-0", 1, 2)},
    },
)
shared(
    "rename_onto_an_existing_stream_replaces_it",
    [
        *READ_ONE,
        *add("7-0", key="t"),
        S(1000, "XGROUP CREATE t h 0"),
        S(1000, "XREADGROUP GROUP h z STREAMS t >"),
        S(1001, "RENAME s t"),
    ],
    {
        "stream_keys": [(0, "t")],
        "groups": {("t", "g"): {"last_delivered_id": "1-0"}, ("t", "h"): None},
        "pel": {("t", "g", "1-0"): ("a", 1000, 1)},
        "delivery_counts": {("t", "h", "7-0"): {"status": "key_deleted", "closed_ms": 1001}},
    },
)
shared(
    "renamenx_onto_an_existing_key_does_nothing",
    [*READ_ONE, *add("7-0", key="t"), S(1001, "RENAMENX s t", "ok")],
    {"stream_keys": [(0, "s"), (0, "t")], "streams": {("t",): {"length": 1, "groups": 0}}},
)
shared(
    "renamenx_to_a_free_name_moves",
    [*READ_ONE, S(1001, "RENAMENX s t")],
    {"stream_keys": [(0, "t")], "pel": {("t", "g", "1-0"): ("a", 1000, 1)}},
)
shared(
    "rename_of_a_missing_key_changes_nothing",
    [*BASE, S(1001, "RENAME nokey s", "ok"), S(1001, "RENAME s s", "ok")],
    {"stream_keys": [(0, "s")], "streams": {("s",): {"length": 3}}},
)
shared(
    "set_over_a_stream_deletes_it_and_later_stream_commands_get_wrongtype",
    [
        *READ_ONE,
        S(1001, "SET s v", "ignored"),
        S(1002, "XADD s 5-0 f v", "error:wrongtype"),
        S(1003, "DEL s", "ignored"),
        S(1004, "XADD s 5-0 f v"),
    ],
    {
        "stream_keys": [(0, "s")],
        "streams": {("s",): (1, "5-0", "0-0", 1)},
        "groups": {SG: None},
        "delivery_counts": {("s", "g", "1-0"): {"status": "key_deleted", "closed_ms": 1001}},
    },
)

# ---------------------------------------------------------------------------
# Rule 7: XADD.
# ---------------------------------------------------------------------------

shared(
    "xadd_explicit_star_and_ms_star_ids",
    [
        S(1000, "XADD s 5-3 f v"),
        S(1000, "XADD s * f v"),  # now 1000 > 5: 1000-0
        S(3, "XADD s * f v"),  # clock behind the last ID: 1000-1
        S(1000, "XADD s 1000-* f v"),  # same ms: next sequence 1000-2
        S(1000, "XADD s 2000-* f v"),  # new ms: 2000-0
        S(1000, "XADD s 2000-5 a b c d"),
        S(1000, "XGROUP CREATE s g 0"),
        S(1000, "XREADGROUP GROUP g a STREAMS s >"),
    ],
    {
        "pel_ids": {SG: ["5-3", "1000-0", "1000-1", "1000-2", "2000-0", "2000-5"]},
        "streams": {("s",): {"length": 6, "last_generated_id": "2000-5", "first_entry_id": "5-3"}},
    },
)
shared(
    "xadd_zero_id_is_refused_without_creating_the_key",
    [
        S(1000, "XADD s 0-0 f v", "error:id_zero"),
        S(1000, "XADD s 0 f v", "error:id_zero"),
        S(1000, "XADD t 0-* f v"),  # 0-1
    ],
    {"stream_keys": [(0, "t")], "streams": {("t",): {"last_generated_id": "0-1"}}},
)
shared(
    "xadd_id_not_greater_than_last_is_refused",
    [
        S(1000, "XADD s 5-5 f v"),
        S(1000, "XADD s 5-5 f v", "error:id_too_small"),
        S(1000, "XADD s 4-9 f v", "error:id_too_small"),
        S(1000, "XADD s 5 f v", "error:id_too_small"),
        S(1000, "XADD s 4-* f v", "error:id_too_small"),
        S(1000, "XADD s 5-* f v"),
    ],
    {"streams": {("s",): (2, "5-6", "0-0", 2)}},
)
shared(
    "xadd_nomkstream",
    [
        S(1000, "XADD s NOMKSTREAM * f v"),
        S(1000, "XADD t 1-0 f v"),
        S(1000, "XADD t NOMKSTREAM 2-0 f v"),
    ],
    {"stream_keys": [(0, "t")], "streams": {("t",): (2, "2-0", "0-0", 2)}},
)
shared(
    "xadd_argument_errors_create_nothing",
    [
        S(1000, "XADD s 1-0 f", "error:wrong_arity"),
        S(1000, "XADD s 1-0", "error:wrong_arity"),
        S(1000, "XADD s bad f v", "error:invalid_id"),
        S(1000, "XADD s - f v", "error:invalid_id"),
        S(1000, "XADD s + f v", "error:invalid_id"),
        S(1000, "XADD s MAXLEN -1 * f v", "error"),
        S(1000, "XADD s MAXLEN 1 MINID 1 * f v", "error:syntax_error"),
        S(1000, "XADD s LIMIT 10 * f v", "error:syntax_error"),
        S(1000, "XADD s MAXLEN 1 LIMIT 10 * f v", "error:syntax_error"),
    ],
    {"stream_keys": []},
)
shared(
    "xadd_exact_trimming",
    [
        *add("1-0", "2-0", "3-0", "4-0", "5-0"),
        S(1000, "XADD s MAXLEN = 3 6-0 f v"),
        S(1000, "XADD s MINID 5-0 7-0 f v"),
    ],
    {
        "streams": {
            ("s",): {
                "length": 3,
                "first_entry_id": "5-0",
                "entries_added": 7,
                "max_deleted_entry_id": "0-0",
            }
        }
    },
)
shared(
    # Approximate trimming removes whole listpack nodes only (100 entries by
    # default): a 3- or 4-entry stream lives in one node, so nothing goes.
    "approximate_trimming_removes_only_whole_nodes",
    [
        *add("1-0", "2-0", "3-0"),
        S(1000, "XTRIM s MAXLEN ~ 1"),
        S(1000, "XADD s MAXLEN ~ 2 4-0 f v"),
        S(1000, "XTRIM s MINID ~ 4-0"),
    ],
    {"streams": {("s",): {"length": 4, "first_entry_id": "1-0"}}},
)
shared(
    "xadd_on_an_exhausted_stream_fails",
    [
        S(1000, "XADD s 1-0 f v"),
        S(1000, f"XSETID s {MAX_ID}"),
        S(1000, "XADD s * f v", "error"),
        S(1000, f"XADD s {MAX}-* f v", "error"),
    ],
    {"streams": {("s",): (1, MAX_ID, "0-0", 1)}},
)
shared(
    "xadd_sequence_overflow",
    [
        S(1000, f"XADD s 5-{MAX} f v"),
        S(1000, "XADD s 5-* f v", "error"),
        S(3, "XADD s * f v"),  # clock behind: the next ID after 5-max is 6-0
    ],
    {"streams": {("s",): (2, "6-0", "0-0", 2)}},
)

# ---------------------------------------------------------------------------
# Rule 9: entries_read and lag.
# ---------------------------------------------------------------------------

shared(
    "lag_of_a_new_empty_stream_is_zero",
    [S(1000, "XGROUP CREATE s g $ MKSTREAM")],
    {"groups": {SG: ("0-0", None, 0)}, "streams": {("s",): (0, "0-0", "0-0", 0)}},
)
shared(
    "lag_of_an_emptied_stream_is_zero",
    [S(1000, "XGROUP CREATE s g 0 MKSTREAM"), *add("1-0"), S(1000, "XDEL s 1-0")],
    {"groups": {SG: ("0-0", None, 0)}, "streams": {("s",): (0, "1-0", "1-0", 1)}},
)
_FIVE = [*add("1-0", "2-0", "3-0", "4-0", "5-0"), S(1000, "XGROUP CREATE s g 0")]
_SANITY = [
    (_FIVE, ("0-0", None, 5)),
    ([*_FIVE, S(1000, "XREADGROUP GROUP g c11 COUNT 1 STREAMS s >")], ("1-0", 1, 4)),
    (
        [
            *_FIVE,
            S(1000, "XREADGROUP GROUP g c11 COUNT 1 STREAMS s >"),
            S(1000, "XREADGROUP GROUP g c12 COUNT 10 STREAMS s >"),
        ],
        ("5-0", 5, 0),
    ),
    (
        [
            *_FIVE,
            S(1000, "XREADGROUP GROUP g c11 COUNT 1 STREAMS s >"),
            S(1000, "XREADGROUP GROUP g c12 COUNT 10 STREAMS s >"),
            *add("6-0"),
        ],
        ("5-0", 5, 1),
    ),
]
for _n, (_steps, _group) in enumerate(_SANITY):
    shared(f"lag_sanity_step_{_n}", _steps, {"groups": {SG: _group}})

# Redis' own "Consumer group lag with XDELs" test, step by step.
_XDELS = [
    *add("1-0", "2-0", "3-0", "4-0", "5-0"),
    S(1000, "XDEL s 3-0"),
    S(1000, "XGROUP CREATE s g1 0"),
    S(1000, "XGROUP CREATE s g2 0"),
]
_R1 = S(1000, "XREADGROUP GROUP g1 c11 COUNT 1 STREAMS s >")
for _n, (_steps, _facts) in enumerate(
    [
        (_XDELS, {("s", "g1"): ("0-0", None, None)}),
        ([*_XDELS, _R1], {("s", "g1"): ("1-0", None, None)}),
        ([*_XDELS, _R1, _R1], {("s", "g1"): ("2-0", None, None)}),
        ([*_XDELS, _R1, _R1, _R1], {("s", "g1"): ("4-0", None, None)}),
        ([*_XDELS, _R1, _R1, _R1, _R1], {("s", "g1"): ("5-0", 5, 0)}),
        ([*_XDELS, _R1, _R1, _R1, _R1, *add("6-0")], {("s", "g1"): ("5-0", 5, 1)}),
        (
            [*_XDELS, _R1, _R1, _R1, _R1, *add("6-0"), S(1000, "XTRIM s MINID = 3-0")],
            {("s", "g1"): ("5-0", 5, 1), ("s", "g2"): ("0-0", None, 3)},
        ),
        (
            [
                *_XDELS,
                *[_R1] * 4,
                *add("6-0"),
                S(1000, "XTRIM s MINID = 3-0"),
                S(1000, "XTRIM s MINID = 5-0"),
            ],
            {("s", "g1"): ("5-0", 5, 1), ("s", "g2"): ("0-0", None, 2)},
        ),
    ]
):
    shared(f"lag_with_xdels_step_{_n}", _steps, {"groups": _facts})

shared(
    "create_with_entriesread",
    [*_FIVE[:-1], S(1000, "XGROUP CREATE s g 0 ENTRIESREAD 2")],
    {"groups": {SG: ("0-0", 2, 3)}},
)
shared(
    "entriesread_above_entries_added_gives_negative_lag",
    [*_FIVE[:-1], S(1000, "XGROUP CREATE s g 0 ENTRIESREAD 10")],
    {"groups": {SG: ("0-0", 10, -5)}},
)
shared(
    "entriesread_argument_errors",
    [
        *_FIVE[:-1],
        S(1000, "XGROUP CREATE s g 0 ENTRIESREAD -2", "error"),
        S(1000, "XGROUP CREATE s g 0 ENTRIESREAD x", "error"),
        S(1000, "XGROUP CREATE s g 0 ENTRIESREAD -1"),
    ],
    {"groups": {SG: ("0-0", None, 5)}},
)
_READ5 = [*_FIVE, S(1000, "XREADGROUP GROUP g a STREAMS s >")]
for _label, _cmd, _group in [
    ("to_the_middle_makes_lag_unknown", "XGROUP SETID s g 2-0", ("2-0", None, None)),
    ("to_the_end_estimates_lag_zero", "XGROUP SETID s g $", ("5-0", None, 0)),
    ("to_before_the_first_entry", "XGROUP SETID s g 0", ("0-0", None, 5)),
    ("to_the_first_entry", "XGROUP SETID s g 1", ("1-0", None, 4)),
    ("with_entriesread", "XGROUP SETID s g 2-0 ENTRIESREAD 2", ("2-0", 2, 3)),
]:
    shared(f"setid_{_label}", [*_READ5, S(1001, _cmd)], {"groups": {SG: _group}})
shared(
    "setid_errors",
    [
        *_READ5,
        S(1001, "XGROUP SETID s nog 0", "error:nogroup"),
        S(1001, "XGROUP SETID s g bad", "error:invalid_id"),
        S(1001, "XGROUP SETID s g 0 FOO", "error"),
        S(1001, "XGROUP SETID s g 0 ENTRIESREAD 1 FOO", "error"),
        S(1001, "XGROUP SETID nokey g 0", "error:no_such_key"),
    ],
    {"groups": {SG: ("5-0", 5, 0)}},
)
_PARTIAL = [*_FIVE, S(1000, "XREADGROUP GROUP g a COUNT 2 STREAMS s >")]
_RA = S(1001, "XREADGROUP GROUP g a COUNT 1 STREAMS s >")
for _n, (_steps, _group) in enumerate(
    [
        (_PARTIAL, ("2-0", 2, 3)),
        ([*_PARTIAL, S(1001, "XDEL s 4-0")], ("2-0", 2, None)),
        ([*_PARTIAL, S(1001, "XDEL s 4-0"), _RA], ("3-0", None, None)),
        ([*_PARTIAL, S(1001, "XDEL s 4-0"), _RA, _RA], ("5-0", 5, 0)),
    ]
):
    shared(
        f"tombstone_ahead_makes_lag_nil_until_passed_step_{_n}", _steps, {"groups": {SG: _group}}
    )
shared(
    "tombstone_behind_the_group_keeps_lag",
    [*_FIVE, S(1000, "XREADGROUP GROUP g a COUNT 3 STREAMS s >"), S(1001, "XDEL s 1-0 2-0")],
    {"groups": {SG: ("3-0", 3, 2)}, "streams": {("s",): {"first_entry_id": "3-0"}}},
)
shared(
    "trimming_does_not_make_lag_unknown",
    [*_PARTIAL, S(1001, "XTRIM s MAXLEN 1")],
    {"groups": {SG: ("2-0", 2, 3)}},
)

shared(
    "group_created_beyond_the_last_id_has_unknown_lag",
    [*BASE[:-1], S(1000, "XGROUP CREATE s g 99-0")],
    {"groups": {SG: ("99-0", None, None)}},
)
shared(
    "group_created_at_dollar_after_xsetid_uses_the_last_generated_id",
    [*add("1-0"), S(1000, "XSETID s 5-0"), S(1000, "XGROUP CREATE s g $")],
    {"groups": {SG: ("5-0", None, 0)}},
)
shared(
    "noack_read_after_setid_back_leaves_pending_entries_alone",
    [
        *READ_ALL,
        S(1001, "XGROUP SETID s g 0"),
        S(1002, "XREADGROUP GROUP g b NOACK STREAMS s >"),
    ],
    {
        "pel": pel(("1-0", "a", 1000, 1), ("2-0", "a", 1000, 1), ("3-0", "a", 1000, 1)),
        "groups": {SG: ("3-0", 3, 0)},
    },
)
shared(
    "key_commands_are_scoped_to_their_db",
    [
        *BASE,
        S(1000, "XADD s 9-0 f v", db=1),
        S(1001, "DEL s", db=1),
        S(1001, "XADD t 1-0 f v", db=2),
        S(1002, "RENAME t s", db=2),
    ],
    {"stream_keys": [(0, "s"), (2, "s")], "streams": {("s",): {"length": 3}}},
)
shared(
    "string_writers_that_do_not_replace_a_stream",
    [
        *READ_ONE,
        S(1001, "SET s v NX", "ignored"),
        S(1001, "SET s v GET", "ignored"),
        S(1001, "SETNX s v", "ignored"),
        S(1001, "HSET s f v", "ignored"),
    ],
    {"stream_keys": [(0, "s")], "pel": pel(("1-0", "a", 1000, 1))},
)
for _label, _cmd in [
    ("set_xx", "SET s v XX"),
    ("set_ex", "SET s v EX 10"),
    ("mset", "MSET x 1 s 2"),
]:
    shared(
        f"{_label}_replaces_a_stream",
        [*READ_ONE, S(1001, _cmd, "ignored"), S(1002, "XADD s 5-0 f v", "error:wrongtype")],
        {
            "stream_keys": [],
            "delivery_counts": {("s", "g", "1-0"): {"status": "key_deleted", "closed_ms": 1001}},
        },
    )

# ---------------------------------------------------------------------------
# XGROUP CREATE / CREATECONSUMER, XSETID, arity, ignored and unknown commands.
# ---------------------------------------------------------------------------

shared(
    "xgroup_create_rules",
    [
        S(1000, "XGROUP CREATE s g $", "error:no_such_key"),
        S(1000, "XGROUP CREATE s g $ MKSTREAM"),
        S(1000, "XGROUP CREATE s g 0", "error:busygroup"),
        S(1000, "XGROUP CREATE s h bad", "error:invalid_id"),
        S(1000, "XGROUP CREATE s h -", "error:invalid_id"),
        S(1000, "XGROUP CREATE s h 0 FOO", "error"),
        S(1000, "XGROUP FOO s h", "error"),
        *add("1-0", "2-0"),
        S(1000, "XGROUP CREATE s h $"),
        S(1000, "XGROUP CREATE s k 1"),
        S(1000, "XGROUP CREATECONSUMER s k c1"),
        S(1005, "XGROUP CREATECONSUMER s k c1"),
        S(1000, "XGROUP CREATECONSUMER s nog c1", "error:nogroup"),
    ],
    {
        "groups": {
            SG: ("0-0", None, 2),
            ("s", "h"): ("2-0", None, 0),
            ("s", "k"): ("1-0", None, 1),
        },
        "ownership": {("s", "k", "c1"): (0, 1000, None)},
    },
)
shared(
    "xsetid_rules",
    [
        *add("1-0", "2-0", "3-0"),
        S(1000, "XSETID s 2-0", "error:id_too_small"),
        S(1000, "XSETID s 3-0"),
        S(1000, "XSETID s 9-0 ENTRIESADDED 2", "error:out_of_range"),
        S(1000, "XSETID s 9-0 ENTRIESADDED -1", "error"),
        S(1000, "XSETID s 9-0 MAXDELETEDID 10-0", "error:id_too_small"),
        S(1000, "XSETID s 9-0 FOO", "error:syntax_error"),
        S(1000, "XSETID s bad", "error:invalid_id"),
        S(1000, "XSETID nokey 1-0", "error:no_such_key"),
        S(1000, "XSETID s 9-0 ENTRIESADDED 7 MAXDELETEDID 2-0"),
        S(3, "XADD s * f v"),
    ],
    {"streams": {("s",): (4, "9-1", "2-0", 8)}},
)
shared(
    "xsetid_on_an_empty_stream_may_go_below_the_last_id",
    [*add("1-0", "5-0"), S(1000, "XTRIM s MAXLEN 0"), S(1000, "XSETID s 2-0")],
    {"streams": {("s",): (0, "2-0", "0-0", 2)}},
)
shared(
    "wrong_arity_is_an_error",
    [
        *READ_ALL,
        S(1001, "XACK s g", "error:wrong_arity"),
        S(1001, "XCLAIM s g b 0", "error:wrong_arity"),
        S(1001, "XAUTOCLAIM s g b 0", "error:wrong_arity"),
        S(1001, "XDEL s", "error:wrong_arity"),
        S(1001, "XTRIM s MAXLEN", "error:wrong_arity"),
        S(1001, "XGROUP", "error:wrong_arity"),
        S(1001, "XGROUP CREATE s", "error"),
        S(1001, "XGROUP DESTROY s g extra", "error"),
        S(1001, "XSETID s", "error:wrong_arity"),
        S(1001, "XADD s", "error:wrong_arity"),
        S(1001, "RENAME s", "error:wrong_arity"),
        S(1001, "DEL", "error:wrong_arity"),
    ],
    {"pel_ids": {SG: ["1-0", "2-0", "3-0"]}, "stream_keys": [(0, "s")]},
)
shared(
    "read_only_and_unrelated_commands_are_ignored",
    [
        *READ_ALL,
        S(1001, "XINFO STREAM s FULL", "ignored"),
        S(1001, "XINFO CONSUMERS s g", "ignored"),
        S(1001, "XPENDING s g - + 10", "ignored"),
        S(1001, "XRANGE s - +", "ignored"),
        S(1001, "XLEN s", "ignored"),
        S(1001, "XREAD STREAMS s 0", "ignored"),
        S(1001, "GET s", "ignored"),
        S(1001, "PING", "ignored"),
        S(1001, "MULTI", "ignored"),
        S(1001, "EXEC", "ignored"),
        S(1001, "SELECT 1", "ignored"),
        S(1001, "LPUSH s x", "ignored"),
    ],
    {"pel": pel(("1-0", "a", 1000, 1)), "streams": {("s",): (3, "3-0", "0-0", 3)}},
)
shared(
    "newer_stream_commands_are_unknown",
    [
        *READ_ALL,
        S(1001, "XACKDEL s g IDS 1 1-0", "error:unknown_command"),
        S(1001, "xackdel s g IDS 1 1-0", "error:unknown_command"),
        S(1001, "XDELEX s IDS 1 1-0", "error:unknown_command"),
        S(1001, "XNACK s g a 1-0", "error:unknown_command"),
    ],
    {"pel_ids": {SG: ["1-0", "2-0", "3-0"]}, "streams": {("s",): (3, "3-0", "0-0", 3)}},
)
shared(
    "stream_commands_on_a_string_key_get_wrongtype",
    [
        S(1000, "SET k v", "ignored"),
        S(1000, "XADD k * f v", "error:wrongtype"),
        S(1000, "XGROUP CREATE k g $", "error:wrongtype"),
        S(1000, "XGROUP CREATE k g $ MKSTREAM", "error:wrongtype"),
        S(1000, "XREADGROUP GROUP g a STREAMS k >", "error:wrongtype"),
        S(1000, "XCLAIM k g a 0 1-0", "error:wrongtype"),
        S(1000, "XAUTOCLAIM k g a 0 0", "error:wrongtype"),
        S(1000, "XACK k g 1-0", "error:wrongtype"),
        S(1000, "XDEL k 1-0", "error:wrongtype"),
        S(1000, "XTRIM k MAXLEN 0", "error:wrongtype"),
        S(1000, "XSETID k 1-0", "error:wrongtype"),
    ],
    {"stream_keys": []},
)

# ---------------------------------------------------------------------------
# Version table (rule 8 and friends): 7.0 versus 7.2+.
# ---------------------------------------------------------------------------

versioned(
    "read_new_with_nothing_to_serve_creates_consumer_only_on_7_2",
    [*BASE, S(1000, "XGROUP CREATE s h $"), S(1005, "XREADGROUP GROUP h a STREAMS s >")],
    {
        "7.0": {"consumer_names": {("s", "h"): []}},
        "7.4": {"ownership": {("s", "h", "a"): (0, 1005, None)}},
    },
)
versioned(
    "read_new_on_an_empty_stream",
    [S(1000, "XGROUP CREATE e g $ MKSTREAM"), S(1005, "XREADGROUP GROUP g a STREAMS e >")],
    {
        "7.0": {"consumer_names": {("e", "g"): []}},
        "7.4": {"ownership": {("e", "g", "a"): (0, 1005, None)}},
    },
)
versioned(
    "read_new_with_nothing_to_serve_refreshes_seen_only_on_7_2",
    [*READ_ALL, S(1005, "XREADGROUP GROUP g a STREAMS s >")],
    {
        "7.0": {"ownership": {("s", "g", "a"): (3, 1000, None)}},
        "7.4": {"ownership": {("s", "g", "a"): (3, 1005, 1000)}},
    },
)
versioned(
    "read_new_over_dangling_tail_serves_nothing",
    # Only live entries count: the last entry is 2-0 once 3-0 is deleted.
    [
        *BASE,
        S(1000, "XREADGROUP GROUP g a COUNT 2 STREAMS s >"),
        S(1001, "XDEL s 3-0"),
        S(1005, "XREADGROUP GROUP g b STREAMS s >"),
    ],
    {
        "7.0": {"consumer_names": {SG: ["a"]}, "groups": {SG: {"last_delivered_id": "2-0"}}},
        "7.4": {"consumer_names": {SG: ["a", "b"]}, "groups": {SG: {"last_delivered_id": "2-0"}}},
    },
)
versioned(
    "xclaim_claiming_nothing",
    [*READ_ONE, S(1050, "XCLAIM s g b 100 1-0")],
    {
        "7.0": {"consumer_names": {SG: ["a"]}},
        "7.4": {
            "consumer_names": {SG: ["a", "b"]},
            "ownership": {("s", "g", "b"): (0, 1050, None)},
        },
    },
)
versioned(
    "xclaim_claiming_nothing_refreshes_an_existing_consumer_only_on_7_2",
    [*READ_ONE, S(1010, "XGROUP CREATECONSUMER s g b"), S(1050, "XCLAIM s g b 100 1-0")],
    {
        "7.0": {"ownership": {("s", "g", "b"): (0, 1010, None)}},
        "7.4": {"ownership": {("s", "g", "b"): (0, 1050, None)}},
    },
)
versioned(
    "xclaim_of_only_deleted_ids_claims_nothing",
    [*READ_ONE, S(1001, "XDEL s 1-0"), S(1050, "XCLAIM s g b 0 1-0")],
    {
        "7.0": {"consumer_names": {SG: ["a"]}, "pel_ids": {SG: []}},
        "7.4": {
            "consumer_names": {SG: ["a", "b"]},
            "ownership": {("s", "g", "b"): (0, 1050, None)},
            "pel_ids": {SG: []},
        },
    },
)
versioned(
    "xclaim_success_sets_seen_and_active",
    [*READ_ONE, S(1050, "XCLAIM s g b 0 1-0")],
    {
        "7.0": {"ownership": {("s", "g", "a"): (0, 1000, None), ("s", "g", "b"): (1, 1050, None)}},
        "7.4": {"ownership": {("s", "g", "a"): (0, 1000, 1000), ("s", "g", "b"): (1, 1050, 1050)}},
    },
)
versioned(
    "xautoclaim_claiming_nothing",
    [*READ_ONE, S(1050, "XAUTOCLAIM s g b 100 0")],
    {
        "7.0": {"consumer_names": {SG: ["a"]}},
        "7.4": {"ownership": {("s", "g", "b"): (0, 1050, None)}},
    },
)
versioned(
    "xautoclaim_success_sets_seen_and_active",
    [*READ_ONE, S(1050, "XAUTOCLAIM s g b 0 0")],
    {
        "7.0": {"ownership": {("s", "g", "b"): (1, 1050, None)}},
        "7.4": {"ownership": {("s", "g", "b"): (1, 1050, 1050)}},
    },
)
versioned(
    "active_time_is_set_by_pel_creating_reads_and_claims_only",
    [
        *READ_ONE,  # a: seen 1000, active 1000 (7.2+)
        S(1005, "XREADGROUP GROUP g a STREAMS s 0"),  # history read: seen only
        S(1010, "XREADGROUP GROUP g a NOACK STREAMS s >"),  # NOACK: seen only
        S(1020, "XGROUP CREATECONSUMER s g c"),
    ],
    {
        "7.0": {"ownership": {("s", "g", "a"): (1, 1010, None), ("s", "g", "c"): (0, 1020, None)}},
        "7.4": {"ownership": {("s", "g", "a"): (1, 1010, 1000), ("s", "g", "c"): (0, 1020, None)}},
    },
)
versioned(
    "reassignment_by_a_read_sets_active_time",
    [*READ_ONE, S(1002, "XGROUP SETID s g 0"), S(1003, "XREADGROUP GROUP g b COUNT 1 STREAMS s >")],
    {
        "7.0": {"ownership": {("s", "g", "a"): (0, 1000, None), ("s", "g", "b"): (1, 1003, None)}},
        "7.4": {"ownership": {("s", "g", "a"): (0, 1000, 1000), ("s", "g", "b"): (1, 1003, 1003)}},
    },
)
_BLOCKED = [
    *add("1-0"),
    S(1000, "XGROUP CREATE s g $"),
    S(1000, "XREADGROUP GROUP g a BLOCK 0 STREAMS s >", client="c1"),
    S(1005, "XADD s 2-0 f v", client="c2"),
]
versioned(
    # The blocked client is served when the XADD arrives (both versions); 7.0
    # creates the consumer only then, 7.2+ already at the blocking call.
    "blocked_read_is_served_by_a_later_xadd",
    _BLOCKED,
    {
        "7.0": {
            "pel": pel(("2-0", "a", 1005, 1)),
            "ownership": {("s", "g", "a"): (1, 1005, None)},
            "groups": {SG: ("2-0", 2, 0)},
        },
        "7.4": {
            "pel": pel(("2-0", "a", 1005, 1)),
            "ownership": {("s", "g", "a"): (1, 1005, 1005)},
            "groups": {SG: ("2-0", 2, 0)},
        },
    },
)
versioned(
    "blocking_read_not_yet_served",
    _BLOCKED[:-1],
    {
        "7.0": {"consumer_names": {SG: []}, "pel_ids": {SG: []}},
        "7.4": {"ownership": {("s", "g", "a"): (0, 1000, None)}, "pel_ids": {SG: []}},
    },
)
_XSETID = [*add("1-0", "2-0", "3-0"), S(1000, "XDEL s 3-0")]
VERSIONED.append(
    Scenario(
        "xsetid_below_max_deleted_id_allowed_on_7_0",
        [*_XSETID, S(1001, "XSETID s 2-5")],
        {"streams": {("s",): (2, "2-5", "3-0", 3)}},
        profile="7.0",
    )
)
VERSIONED.append(
    Scenario(
        "xsetid_below_max_deleted_id_refused_on_7_4",
        [*_XSETID, S(1001, "XSETID s 2-5", "error:id_too_small")],
        {"streams": {("s",): (2, "3-0", "3-0", 3)}},
        profile="7.4",
    )
)
# Rule 10: one "now" per MULTI/EXEC on 7.2+ (the unit's first time, 1000 here),
# a live clock per command on 7.0.
_MULTI = [
    *BASE,
    S(1000, "MULTI", "ignored", client="c1"),
    S(1000, "XREADGROUP GROUP g a COUNT 1 STREAMS s >", client="c1"),
    S(1004, "XCLAIM s g b 3 1-0", client="c1"),
    S(1004, "EXEC", "ignored", client="c1"),
]
versioned(
    "multi_exec_shares_one_now_on_7_2",
    _MULTI,
    {
        "7.0": {"pel": pel(("1-0", "b", 1004, 2)), "ownership": {("s", "g", "b"): (1, 1004, None)}},
        "7.4": {"pel": pel(("1-0", "a", 1000, 1)), "ownership": {("s", "g", "b"): (0, 1000, None)}},
    },
)

# ... and a script: its call row, then the commands it ran as client "lua" (as MONITOR
# shows them); on 7.2+ they see the call row's time (1000), on 7.0 each its own.
_SCRIPT = [
    *BASE,
    S(1000, "EVAL script 1 s", "ignored", client="c1"),
    S(1002, "XREADGROUP GROUP g a COUNT 1 STREAMS s >", client="lua"),
    S(1004, "XCLAIM s g b 1 1-0", client="lua"),
    S(1005, "XADD s * f v", client="lua"),
]
versioned(
    "script_commands_share_the_call_rows_now_on_7_2",
    _SCRIPT,
    {
        "7.0": {"pel": pel(("1-0", "b", 1004, 2)), "streams": {("s",): (4, "1005-0", "0-0", 4)}},
        "7.4": {"pel": pel(("1-0", "a", 1000, 1)), "streams": {("s",): (4, "1000-0", "0-0", 4)}},
    },
)
# A command log's XCLAIM ... TIME later than the command's now becomes now; on 7.2+ the
# now of a command inside MULTI is the unit's (1010), so TIME 1011 is clamped there.
versioned(
    "xclaim_time_after_the_units_now_becomes_it_on_7_2",
    [
        *READ_ONE,
        S(1010, "MULTI", "ignored", client="c1"),
        S(1010, "XACK s g 9-9", client="c1"),
        S(1012, "XCLAIM s g b 0 1-0 TIME 1011", client="c1"),
        S(1012, "EXEC", "ignored", client="c1"),
    ],
    {"7.0": {"pel": pel(("1-0", "b", 1011, 2))}, "7.4": {"pel": pel(("1-0", "b", 1010, 2))}},
)


# A script cannot block: on 7.4 and Valkey its XREADGROUP ... BLOCK that finds nothing
# returns at once, and a later write serves nobody; 7.0 and 7.2 refuse BLOCK in a script.
def _script_block(outcome: str) -> list[S]:
    return [
        *READ_ALL,
        S(1001, "EVAL script 1 s", "ignored", client="c1"),
        S(1001, "XREADGROUP GROUP g b BLOCK 0 STREAMS s >", outcome, client="lua"),
        S(1002, "XADD s 4-0 f v", client="c2"),
    ]


for _profile, _outcome in [
    ("7.0", "error:block_in_script"),
    ("7.2", "error:block_in_script"),
    ("7.4", "applied"),
    ("valkey-8.1", "applied"),
]:
    VERSIONED.append(
        Scenario(
            f"a_scripts_blocking_read_does_not_wait[{_profile}]",
            _script_block(_outcome),
            {"pel_ids": {SG: ["1-0", "2-0", "3-0"]}},
            profile=_profile,
        )
    )
# Rule 11: the entries_read / lag estimates of Valkey 8.1.1+ (profile valkey-8.1), as
# Valkey 8.1.8 and 9.1.2 report them; "7.4" is Redis up to 7.4.1.
_READ1 = "XREADGROUP GROUP g c COUNT 1 STREAMS s >"
_READ2 = "XREADGROUP GROUP g c COUNT 2 STREAMS s >"
# a group left behind the first entry by trimming is estimated, not counted on
versioned(
    "lag_of_a_group_behind_a_trim",
    [*add("1-0", "2-0", "3-0", "4-0", "5-0"), S(1, "XGROUP CREATE s g 0"), S(2, _READ1)]
    + [S(3, "XTRIM s MAXLEN 1"), S(4, _READ1)],
    {
        "7.4": {"groups": {("s", "g"): ("5-0", 2, 3)}},
        "valkey-8.1": {"groups": {("s", "g"): ("5-0", 5, 0)}},
    },
)
# a tombstone between the group's last ID and the delivered entry
versioned(
    "lag_after_reading_past_a_tombstone",
    [*add("1-0", "2-0", "3-0", "4-0"), S(1, "XGROUP CREATE s g 0"), S(2, _READ2)]
    + [S(3, "XDEL s 3-0"), S(4, _READ2)],
    {
        "7.4": {"groups": {("s", "g"): ("4-0", 3, 1)}},
        "valkey-8.1": {"groups": {("s", "g"): ("4-0", 4, 0)}},
    },
)
# a tombstone before the first entry still makes the read counter untrusted
versioned(
    "lag_with_a_tombstone_before_the_first_entry",
    [*add("3-0"), S(1, "XDEL s 3-0"), *add("4-0"), S(2, "XGROUP CREATE s g 0 ENTRIESREAD 7")],
    {
        "7.4": {"groups": {("s", "g"): ("0-0", 7, -5)}},
        "valkey-8.1": {"groups": {("s", "g"): ("0-0", 7, 1)}},
    },
)
# an ID below the largest deleted ID has no estimate
versioned(
    "lag_of_a_group_below_the_largest_deleted_id",
    [*add("3-0"), S(1, "XDEL s 3-0"), S(2, "XGROUP CREATE s g 1-1"), *add("5-0")],
    {
        "7.4": {"groups": {("s", "g"): ("1-1", None, 1)}},
        "valkey-8.1": {"groups": {("s", "g"): ("1-1", None, None)}},
    },
)

# ---------------------------------------------------------------------------


def _check(scenario: Scenario, profile: str) -> None:
    r, outcomes = run(profile, scenario.steps)
    check_outcomes(scenario.steps, outcomes)
    last = scenario.steps[-1].ts
    snapshot = snapshot_tables(r, last, len(scenario.steps))
    check_facts(snapshot, scenario.facts)
    if scenario.changes is not None:
        assert changes(r) == scenario.changes


@pytest.mark.parametrize("profile", ["7.0", "7.4", "valkey-8.1"])
@pytest.mark.parametrize("scenario", SHARED, ids=[s.name for s in SHARED])
def test_shared(scenario: Scenario, profile: str) -> None:
    _check(scenario, profile)


@pytest.mark.parametrize("scenario", VERSIONED, ids=[s.name for s in VERSIONED])
def test_versioned(scenario: Scenario) -> None:
    assert scenario.profile is not None
    _check(scenario, scenario.profile)


def test_scenario_names_are_unique() -> None:
    names = [s.name for s in SHARED] + [s.name for s in VERSIONED]
    assert len(names) == len(set(names))
