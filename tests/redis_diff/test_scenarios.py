"""Edge cases of the Redis semantics (docs/redis-semantics.md), one scenario each,
judged by the real server.

Every scenario runs on an empty server of each kind (Redis 7.0, Valkey 8.1, Valkey
9.1) with the same capture as the random workloads; the recorded rows are replayed
through ``Replayer(server.profile)`` and the model's tables are compared with the
server's after every step. No expected
value is written here: ``Expect`` steps only guard that a scenario still
exercises its edge (e.g. that something was claimed).
"""

from __future__ import annotations

import pytest

from tests.redis_diff.harness import check_model, save_failure
from tests.redis_diff.scenario import (
    AwaitBlocked,
    Blocked,
    Expect,
    On,
    Scenario,
    Sleep,
    run_scenario,
)
from tests.redis_diff.server import RedisServer, on_job_kinds
from tests.runners import assert_local_runner_agrees

pytestmark = pytest.mark.redis

MAX = "18446744073709551615"


def claimed(reply: object) -> bool:
    return isinstance(reply, list) and len(reply) > 0


def nothing(reply: object) -> bool:
    return reply == [] or reply is None


def autoclaimed(reply: object) -> bool:
    return isinstance(reply, list) and len(reply[1]) > 0


def autoclaimed_none(reply: object) -> bool:
    return isinstance(reply, list) and reply[1] == []


def three_pending(consumer: str = "c1") -> list[str]:
    return [
        "XADD s 1-1 f v",
        "XADD s 2-1 f v",
        "XADD s 3-1 f v",
        "XGROUP CREATE s g 0",
        f"XREADGROUP GROUP g {consumer} STREAMS s >",
    ]


def _mixed_shapes_workload() -> list[list[str]]:
    """Entries whose listpack sizes cross every encoding threshold, then '~' trims.

    Values: integers that listpack stores as integers (small, 13/16/24/32/64-bit),
    strings around the 63/64 and 4095/4096 length boundaries, other field sets;
    XDELs leave tombstones that still occupy their node.
    """
    shapes = [
        ["f", "7"],
        ["f", "-4000"],
        ["f", "30000"],
        ["f", "8000000"],
        ["f", "2000000000"],
        ["f", "90000000000"],
        ["f", "x" * 63],
        ["f", "x" * 64],
        ["g", "y" * 200, "h", "012"],
        ["f", "z" * 700],
        ["f", "-0"],
        ["field-" * 12, "v"],
    ]
    steps: list[list[str]] = []
    for i in range(1, 121):
        steps.append(["XADD", "s", f"{i}-{i % 3}", *shapes[(i * 7) % len(shapes)]])
        if i % 9 == 0:
            steps.append(["XDEL", "s", f"{i - 4}-{(i - 4) % 3}"])
    steps += [
        ["XTRIM", "s", "MAXLEN", "~", "90"],
        ["XTRIM", "s", "MINID", "~", "60-0"],
        ["XADD", "s", "MAXLEN", "~", "40", "121-0", "f", "v" * 300],
        ["XTRIM", "s", "MAXLEN", "~", "5", "LIMIT", "30"],
    ]
    return steps


SCENARIOS: list[Scenario] = [
    # ---- rule 1: idle checks ------------------------------------------------------
    Scenario(
        "idle_equal_to_min_idle_is_claimed",
        [
            *three_pending(),
            lambda c: f"XCLAIM s g c1 0 1-1 TIME {c.now - 100000} JUSTID",
            "XCLAIM s g c2 100000 1-1",  # idle is 100000 (+ the ms since): >= claims
            Expect(claimed, "an idle equal to min-idle must be claimable"),
            lambda c: f"XCLAIM s g c1 0 2-1 TIME {c.now - 100000} JUSTID",
            "XAUTOCLAIM s g c3 100000 2-1 COUNT 1",
            Expect(autoclaimed, "XAUTOCLAIM at idle == min-idle claims"),
        ],
    ),
    Scenario(
        "idle_below_min_idle_is_not_claimed_until_it_is",
        [
            *three_pending(),
            Sleep(60),
            "XCLAIM s g c2 1000 1-1 2-1",
            Expect(nothing, "idle ~60 < 1000"),
            "XCLAIM s g c2 20 1-1 2-1",
            Expect(claimed, "idle ~60 >= 20"),
            "XAUTOCLAIM s g c3 1000 0-0",
            Expect(autoclaimed_none, "idle < 1000"),
            "XAUTOCLAIM s g c3 20 0-0",
            Expect(autoclaimed, "3-1 idle ~60 >= 20"),
        ],
    ),
    Scenario(
        "idle_spread_claims_only_the_old_entries",
        [
            "XADD s 1-1 f v",
            "XADD s 2-1 f v",
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 COUNT 1 STREAMS s >",
            Sleep(120),
            "XREADGROUP GROUP g c1 COUNT 1 STREAMS s >",
            "XAUTOCLAIM s g c2 60 0-0",
            "XCLAIM s g c3 60 1-1 2-1",
        ],
    ),
    Scenario(
        "min_idle_zero_and_negative_claim_regardless",
        [
            *three_pending(),
            "XCLAIM s g c2 0 1-1",
            Expect(claimed, "min-idle 0 claims a fresh entry"),
            "XCLAIM s g c3 -500 2-1",
            Expect(claimed, "negative min-idle claims"),
            "XAUTOCLAIM s g c3 -1 0-0",
            Expect(autoclaimed, "negative min-idle autoclaims"),
        ],
    ),
    # ---- rule 2: XCLAIM --------------------------------------------------------------
    Scenario(
        "xclaim_of_deleted_entry_drops_it_from_the_pel",
        [*three_pending(), "XDEL s 1-1", "XCLAIM s g c2 0 1-1 2-1", "XCLAIM s g c2 0 1-1"],
    ),
    Scenario(
        "xclaim_of_trimmed_entry_drops_it_from_the_pel",
        [*three_pending(), "XTRIM s MAXLEN 1", "XCLAIM s g c2 0 1-1 2-1 3-1 JUSTID"],
    ),
    Scenario(
        "xclaim_force_on_missing_entry_does_nothing",
        [*three_pending(), "XCLAIM s g c2 0 9-9 FORCE", "XCLAIM s g c2 0 0-5 FORCE JUSTID"],
    ),
    Scenario(
        "xclaim_force_creates_pending_entry_for_unread_entry",
        ["XADD s 1-1 f v", "XADD s 2-1 f v", "XGROUP CREATE s g $", "XCLAIM s g c1 0 1-1 FORCE"],
    ),
    Scenario(
        # an early reading said count 0; Redis 7.0.15 (the judge) reports 1: a new PEL
        # entry starts at 1 and JUSTID does not increment it.
        "xclaim_force_justid_on_unheld_entry_has_count_one",
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g $",
            "XCLAIM s g c1 0 1-1 FORCE JUSTID",
            Expect(claimed, "FORCE JUSTID creates the entry"),
        ],
    ),
    Scenario(
        "xclaim_force_on_entry_held_by_another_consumer_just_claims",
        [*three_pending(), "XCLAIM s g c2 0 1-1 FORCE", "XCLAIM s g c2 0 2-1 FORCE JUSTID"],
    ),
    Scenario(
        "xclaim_idle_and_time_out_of_range_become_now",
        [
            "XADD s 1-1 f v",
            "XADD s 2-1 f v",
            "XADD s 3-1 f v",
            "XADD s 4-1 f v",
            "XADD s 5-1 f v",
            "XADD s 6-1 f v",
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 STREAMS s >",
            "XCLAIM s g c2 0 1-1 IDLE -1000",
            "XCLAIM s g c2 0 2-1 IDLE 100000000000000",
            lambda c: f"XCLAIM s g c2 0 3-1 TIME {c.now + 100000}",
            "XCLAIM s g c2 0 4-1 TIME -5",
            "XCLAIM s g c2 0 5-1 TIME 0",  # 0 is in range: delivery time 0
            "XCLAIM s g c2 0 6-1 IDLE 5000 TIME 1000",  # the last of IDLE/TIME wins
        ],
    ),
    Scenario(
        "xclaim_idle_sets_delivery_time_in_the_past",
        [*three_pending(), "XCLAIM s g c2 0 1-1 IDLE 50000", "XAUTOCLAIM s g c3 40000 0-0"],
    ),
    Scenario(
        "xclaim_retrycount_sets_the_counter",
        [
            *three_pending(),
            "XCLAIM s g c2 0 1-1 RETRYCOUNT 7",
            "XCLAIM s g c2 0 2-1 RETRYCOUNT 0",
            "XCLAIM s g c2 0 3-1 RETRYCOUNT 4 JUSTID",
            "XCLAIM s g c3 0 1-1",
        ],
    ),
    Scenario(
        "xclaim_justid_keeps_the_counter",
        [*three_pending(), "XCLAIM s g c2 0 1-1 2-1 JUSTID", "XCLAIM s g c1 0 1-1 JUSTID"],
    ),
    Scenario(
        "xclaim_by_the_owner_counts_and_refreshes",
        [*three_pending(), Sleep(20), "XCLAIM s g c1 0 1-1"],
    ),
    Scenario(
        "xclaim_lastid_moves_last_delivered_forward_only",
        [
            "XADD s 1-1 f v",
            "XADD s 2-1 f v",
            "XADD s 9-1 f v",
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 COUNT 1 STREAMS s >",
            "XCLAIM s g c2 0 1-1 LASTID 5-0",
            "XCLAIM s g c2 0 1-1 LASTID 3-0",
            "XCLAIM s g c2 0 8-8 LASTID 7-0",  # nothing claimed, last_id still moves
            "XCLAIM s g c2 100000000 1-1 LASTID 99-0",
            "XREADGROUP GROUP g c3 STREAMS s >",
        ],
    ),
    Scenario(
        "xclaim_parse_is_all_or_nothing",
        [
            *three_pending(),
            "XCLAIM s g c2 0 1-1 2-1 FOO",
            "XCLAIM s g c2 0 1-1 IDLE x",
            "XCLAIM s g c2 0 1-1 TIME 1.5",
            "XCLAIM s g c2 0 1-1 RETRYCOUNT x",
            "XCLAIM s g c2 0 1-1 LASTID 5-0 LASTID bad",
            "XCLAIM s g c2 0 1-1 bad 2-1",
            "XCLAIM s g c2 0 1-1 FORCE 2-1",
            "XCLAIM s g c2 x 1-1",
            "XCLAIM s g c2 0 1-1 RETRYCOUNT",
            "XCLAIM s nogroup c2 0 1-1",
            "XCLAIM nokey g c2 0 1-1",
        ],
    ),
    Scenario(
        "xclaim_creates_the_consumer_only_when_it_claims",
        [
            *three_pending(),
            "XCLAIM s g newc 0 9-9",
            "XCLAIM s g newc 100000000 1-1",
            "XCLAIM s g newc 0 1-1 LASTID 3-1",
            "XCLAIM s g other 0 2-1 FORCE",
        ],
    ),
    # ---- rule 3: XAUTOCLAIM ----------------------------------------------------------
    Scenario(
        "xautoclaim_scans_at_most_count_times_ten",
        [
            *[f"XADD s {i}-1 f v" for i in range(1, 31)],
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 STREAMS s >",
            lambda c: f"XCLAIM s g c1 0 26-1 27-1 28-1 29-1 30-1 TIME {c.now - 100000} JUSTID",
            "XAUTOCLAIM s g c2 50000 0-0 COUNT 1",
            Expect(autoclaimed_none, "10 fresh entries scanned, none old enough"),
            "XAUTOCLAIM s g c2 50000 0-0 COUNT 3",
            Expect(autoclaimed, "30 scanned reaches the old ones"),
            "XAUTOCLAIM s g c2 50000 0-0",
        ],
    ),
    Scenario(
        "xautoclaim_deleted_entries_count_against_count_and_move_the_cursor",
        [
            *[f"XADD s {i}-1 f v" for i in range(1, 7)],
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 STREAMS s >",
            "XDEL s 1-1 2-1 3-1",
            "XAUTOCLAIM s g c2 0 0-0 COUNT 2",
            lambda c: f"XAUTOCLAIM s g c2 0 {c.last[0]} COUNT 2",
            lambda c: f"XAUTOCLAIM s g c2 0 {c.last[0]} COUNT 2 JUSTID",
            lambda c: f"XAUTOCLAIM s g c2 0 {c.last[0]} COUNT 2",
        ],
    ),
    Scenario(
        "xautoclaim_justid_keeps_counters_and_cursor_ends_at_zero",
        [
            *three_pending(),
            "XAUTOCLAIM s g c2 0 0-0 JUSTID",
            "XAUTOCLAIM s g c3 0 0-0 COUNT 1",
            "XAUTOCLAIM s g c3 0 (1-1 COUNT 1",
            "XAUTOCLAIM s g c3 0 - COUNT 100",
            "XAUTOCLAIM s g c3 0 9-0",
        ],
    ),
    Scenario(
        "xautoclaim_errors_and_consumer_creation",
        [
            *three_pending(),
            "XAUTOCLAIM s g c2 0 0-0 COUNT 0",
            "XAUTOCLAIM s g c2 0 0-0 COUNT x",
            "XAUTOCLAIM s g c2 0 bad",
            f"XAUTOCLAIM s g c2 0 ({MAX}-{MAX}",
            "XAUTOCLAIM s g c2 x 0-0",
            "XAUTOCLAIM s g c2 0 0-0 FOO",
            "XAUTOCLAIM s nogroup c2 0 0-0",
            "XAUTOCLAIM s g newc 100000000 0-0",  # nothing claimed: no consumer in 7.0
            "XAUTOCLAIM s g newc2 0 9-0",
        ],
    ),
    # ---- rule 4: XREADGROUP -----------------------------------------------------------
    Scenario(
        "readgroup_count_zero_and_negative_mean_no_limit",
        [
            *[f"XADD s {i}-1 f v" for i in range(1, 6)],
            "XGROUP CREATE s g 0",
            "XGROUP CREATE s h 0",
            "XREADGROUP GROUP g c1 COUNT 0 STREAMS s >",
            "XREADGROUP GROUP h c1 COUNT -3 STREAMS s >",
            "XADD s 6-1 f v",
            "XREADGROUP GROUP g c1 COUNT 1 COUNT 0 STREAMS s >",
        ],
    ),
    Scenario(
        "readgroup_after_setid_back_reassigns_with_count_reset",
        [
            *three_pending(),
            "XCLAIM s g c1 0 1-1 RETRYCOUNT 5",
            "XGROUP SETID s g 0",
            "XREADGROUP GROUP g c2 COUNT 2 STREAMS s >",
            "XGROUP SETID s g 1-1",
            "XREADGROUP GROUP g c1 STREAMS s >",
        ],
    ),
    Scenario(
        "readgroup_noack_delivers_without_pending_entries",
        [
            "XADD s 1-1 f v",
            "XADD s 2-1 f v",
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 NOACK COUNT 1 STREAMS s >",
            "XREADGROUP GROUP g c2 NOACK STREAMS s >",
            "XREADGROUP GROUP g c3 NOACK STREAMS s >",  # nothing new: no consumer
            "XGROUP SETID s g 0",
            "XREADGROUP GROUP g c1 STREAMS s >",
            "XGROUP SETID s g 0",
            "XREADGROUP GROUP g c2 NOACK STREAMS s >",  # already pending: NOACK read of them
        ],
    ),
    Scenario(
        "history_read_counts_up_and_keeps_deleted_entries_pending",
        [
            *three_pending(),
            "XDEL s 2-1",
            Sleep(15),
            "XREADGROUP GROUP g c1 STREAMS s 0",
            "XREADGROUP GROUP g c1 COUNT 1 STREAMS s 1-1",
            "XREADGROUP GROUP g c1 STREAMS s 3-1",
            "XREADGROUP GROUP g c1 NOACK STREAMS s 0-0",
            "XREADGROUP GROUP g c2 STREAMS s 0",  # a consumer with nothing pending
        ],
    ),
    Scenario(
        "readgroup_gt_with_nothing_new_neither_creates_nor_refreshes_consumers",
        [
            *three_pending(),
            Sleep(40),
            "XREADGROUP GROUP g c1 STREAMS s >",
            "XREADGROUP GROUP g c9 STREAMS s >",
            "XREADGROUP GROUP g c1 COUNT 5 STREAMS s >",
            "XADD s 4-1 f v",
            "XREADGROUP GROUP g c9 STREAMS s >",
        ],
    ),
    Scenario(
        "readgroup_on_several_streams_fails_as_a_whole",
        [
            "XADD s 1-1 f v",
            "XADD t 1-1 f v",
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 STREAMS s t > >",  # t has no group g
            "XGROUP CREATE t g 0",
            "XREADGROUP GROUP g c1 STREAMS s t > bad",
            "XREADGROUP GROUP g c1 STREAMS s t > $",
            "XREADGROUP GROUP g c1 STREAMS s t > >",
            "XADD t 2-1 f v",
            "XREADGROUP GROUP g c2 STREAMS s t > >",  # s has nothing new, t has
            "XREADGROUP GROUP g c1 STREAMS s t 0 >",
        ],
    ),
    Scenario(
        "readgroup_syntax_errors_have_no_effect",
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 STREAMS s",
            "XREADGROUP GROUP g c1 FOO STREAMS s >",
            "XREADGROUP GROUP g c1 COUNT x STREAMS s >",
            "XREADGROUP GROUP g c1 BLOCK -1 STREAMS s >",
            "XREADGROUP STREAMS s >",
            "XREADGROUP GROUP g c1 STREAMS s +",
            "XREADGROUP GROUP g c1 STREAMS s -",
        ],
    ),
    Scenario(
        "readgroup_with_block_served_at_once",
        [
            *three_pending(),
            "XADD s 4-1 f v",
            "XREADGROUP GROUP g c2 BLOCK 0 STREAMS s >",
            "XREADGROUP GROUP g c1 BLOCK 100 STREAMS s 0",
        ],
    ),
    Scenario(
        "blocked_read_served_by_a_later_xadd",
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g $",
            Blocked("XREADGROUP GROUP g c1 BLOCK 5000 STREAMS s >"),
            Sleep(20),
            "XADD s 2-1 f v",
            AwaitBlocked(),
            Expect(claimed, "the blocked read was served"),
        ],
    ),
    Scenario(
        "two_blocked_readers_are_served_in_blocking_order",
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g $",
            Blocked("XREADGROUP GROUP g c1 COUNT 1 BLOCK 5000 STREAMS s >"),
            Blocked("XREADGROUP GROUP g c2 BLOCK 5000 STREAMS s >"),
            Sleep(15),
            "XADD s 2-1 f v",
            AwaitBlocked(),
            Expect(claimed, "the first reader got the entry"),
            Sleep(15),
            "XADD s 3-1 f v",
            AwaitBlocked(),
            Expect(claimed, "the second reader got the next entry"),
        ],
    ),
    Scenario(
        "blocked_read_ends_when_its_group_is_destroyed",
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g $",
            Blocked("XREADGROUP GROUP g c1 BLOCK 5000 STREAMS s >"),
            "XGROUP DESTROY s g",
            AwaitBlocked(),
            "XGROUP CREATE s g 0",
            "XADD s 2-1 f v",
        ],
    ),
    Scenario(
        "blocked_read_ends_when_its_key_is_deleted",
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g $",
            Blocked("XREADGROUP GROUP g c1 BLOCK 0 STREAMS s >"),
            "DEL s",
            AwaitBlocked(),
            "XGROUP CREATE s g $ MKSTREAM",
            "XADD s 2-1 f v",
        ],
    ),
    Scenario(
        "blocked_read_on_two_streams_is_served_by_either",
        [
            "XADD a 1-1 f v",
            "XADD b 1-1 f v",
            "XGROUP CREATE a g $",
            "XGROUP CREATE b g $",
            Blocked("XREADGROUP GROUP g c1 BLOCK 5000 STREAMS a b > >"),
            Sleep(15),
            "XADD b 2-1 f v",
            AwaitBlocked(),
            Expect(claimed, "served from the second stream"),
            "XADD a 2-1 f v",
        ],
    ),
    Scenario(
        "blocked_noack_read_advances_the_group_only",
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g $",
            Blocked("XREADGROUP GROUP g c1 NOACK BLOCK 5000 STREAMS s >"),
            Sleep(15),
            "XADD s 2-1 f v",
            AwaitBlocked(),
        ],
    ),
    Scenario(
        "setid_back_does_not_wake_a_blocked_reader_the_next_write_does",
        [
            "XADD s 1-1 f v",
            "XADD s 2-1 f v",
            "XGROUP CREATE s g $",
            Blocked("XREADGROUP GROUP g c1 BLOCK 5000 STREAMS s >"),
            "XGROUP SETID s g 0",
            Sleep(15),
            "XADD s 3-1 f v",
            AwaitBlocked(),
            Expect(claimed, "served from the moved-back last id"),
        ],
    ),
    Scenario(
        "blocked_read_that_times_out_changes_nothing",
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g $",
            Blocked("XREADGROUP GROUP g c1 BLOCK 30 STREAMS s >"),
            Sleep(80),
            AwaitBlocked(),
            Expect(lambda r: r is None, "timed out"),
            "XADD s 2-1 f v",
        ],
    ),
    # ---- rule 5: XACK -----------------------------------------------------------------
    Scenario(
        "xack_ignores_unknown_ids_and_fails_on_bad_ones",
        [
            *three_pending(),
            "XACK s g 1-1 9-9",
            "XACK s g 2-1 bad",
            "XACK s g 2-1 2-1",
            "XACK s nogroup 3-1",
            "XACK nokey g 3-1",
            "XACK s g 3",  # ms only: 3-0, not pending
        ],
    ),
    # ---- rule 6: deletion, trimming, dangling entries, key commands -------------------
    Scenario(
        "xdel_sets_max_deleted_entry_id_and_trimming_does_not",
        [
            *[f"XADD s {i}-1 f v" for i in range(1, 7)],
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 STREAMS s >",
            "XDEL s 3-1",
            "XDEL s 2-1 9-9",
            "XDEL s 8-8",  # nothing deleted
            "XTRIM s MAXLEN 2",
            "XADD s MAXLEN 1 7-1 f v",
            "XTRIM s MINID 7-1",
            "XDEL s 7-1",
            "XDEL s bad",
        ],
    ),
    Scenario(
        # XSETID may go below a deleted entry (not below a live one): the next entries
        # follow its tombstone in the same listpack, and an exact MINID trim walks the
        # listpack in order, stopping at the first entry at or above the threshold,
        # deleted or not (found by the live job test on Redis 7.0)
        "exact_minid_trim_stops_at_a_tombstone_above_it_after_xsetid_went_below",
        [
            "XADD s 1-0 f v",
            "XADD s 5-0 f v",
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 STREAMS s >",
            "XDEL s 5-0",
            "XSETID s 1-0",
            "XADD s 2-0 f v",
            "XADD s 3-0 f v",
            "XTRIM s MINID 3-0",
            "XTRIM s MINID 2-5",
            "XDEL s 3-0",
            "XSETID s 2-0",
            "XADD s 2-1 f v",
            "XADD s 4-0 f v",
            "XTRIM s MINID 2-2",
            "XREADGROUP GROUP g c2 STREAMS s 0",
            "XTRIM s MINID 9-0",
        ],
    ),
    Scenario(
        "dangling_entries_stay_until_a_claim_touches_them",
        [
            *three_pending(),
            "XTRIM s MAXLEN 0",
            "XACK s g 1-1",
            "XREADGROUP GROUP g c1 STREAMS s 0",
            "XAUTOCLAIM s g c2 0 0-0 COUNT 1",
        ],
    ),
    Scenario(
        "delconsumer_drops_its_pending_entries",
        [
            *three_pending(),
            "XCLAIM s g c2 0 3-1",
            "XGROUP DELCONSUMER s g c1",
            "XGROUP DELCONSUMER s g c1",
            "XGROUP DELCONSUMER s g nobody",
            "XGROUP DELCONSUMER s nogroup c2",
        ],
    ),
    Scenario(
        "destroy_drops_the_group",
        [
            *three_pending(),
            "XGROUP CREATE s h $",
            "XGROUP DESTROY s g",
            "XGROUP DESTROY s g",
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 COUNT 1 STREAMS s >",
        ],
    ),
    Scenario(
        "createconsumer_and_its_errors",
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g 0",
            "XGROUP CREATECONSUMER s g c1",
            Sleep(20),
            "XGROUP CREATECONSUMER s g c1",
            "XGROUP CREATECONSUMER s nogroup c1",
            "XGROUP CREATECONSUMER nokey g c1",
            "XGROUP CREATECONSUMER s g",
            "xgroup createconsumer s g c2",
        ],
    ),
    Scenario(
        "del_and_unlink_remove_streams",
        [*three_pending(), "XADD t 1-1 f v", "DEL s nokey", "UNLINK t", "XADD s 1-1 f v"],
    ),
    Scenario(
        "flushdb_clears_only_its_db",
        [
            *three_pending(),
            On(3, "XADD s 5-1 f v"),
            On(3, "XGROUP CREATE s g 0"),
            On(3, "XREADGROUP GROUP g c1 STREAMS s >"),
            "FLUSHDB",
            On(3, "XADD s 6-1 f v"),
            On(3, "FLUSHDB ASYNC"),
        ],
    ),
    Scenario(
        "flushall_clears_every_db",
        [
            *three_pending(),
            On(5, "XADD s 5-1 f v"),
            On(5, "XGROUP CREATE s g 0"),
            On(7, "XADD q 5-1 f v"),
            "FLUSHALL",
            On(5, "XADD s 1-1 f v"),
            "XADD s 1-1 f v",
            On(7, "FLUSHALL SYNC"),
        ],
    ),
    Scenario(
        "same_key_in_two_dbs_is_two_streams",
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g 0",
            On(1, "XADD s 1-1 f v"),
            On(1, "XADD s 2-1 f v"),
            On(1, "XGROUP CREATE s g $"),
            "XREADGROUP GROUP g c1 STREAMS s >",
            On(1, "XREADGROUP GROUP g c1 STREAMS s >"),
            On(1, "DEL s"),
        ],
    ),
    Scenario(
        "rename_moves_a_stream_with_its_groups",
        [
            *three_pending(),
            "RENAME s t",
            "XREADGROUP GROUP g c1 STREAMS t 0",
            "XADD u 1-1 f v",
            "RENAMENX t u",  # u exists: nothing
            "RENAME t u",  # replaces u
            "RENAME u u",
            "RENAMENX u u",
            "RENAME nokey u",
            "RENAMENX u v",
        ],
    ),
    Scenario(
        "other_types_replace_streams_and_make_stream_commands_fail",
        [
            *three_pending(),
            "SET str x",
            "XADD str * f v",
            "XGROUP CREATE str g $ MKSTREAM",
            "XREADGROUP GROUP g c1 STREAMS s str > >",
            "RENAME str s",  # a string replaces the stream
            "XADD s 9-1 f v",
            "DEL s",
            "XADD s 9-1 f v",
            "SET s overwritten",  # SET replaces a stream too
            "XLEN s",
            "LPUSH s x",
            "DEL s",
            "XADD s 1-1 f v",
        ],
    ),
    # ---- rule 7: XADD -------------------------------------------------------------------
    Scenario(
        "xadd_id_rules",
        [
            "XADD s 0-0 f v",
            "XADD s 0-* f v",
            "XADD s 5-1 f v",
            "XADD s 5-1 f v",
            "XADD s 4-9 f v",
            "XADD s 5-* f v",
            "XADD s 6-* f v",
            "XADD s 7 f v",
            "XADD s 7 f v",
            "XADD s 3-* f v",
            "XADD s bad f v",
            "XADD s * f v",
            "XADD s * f v f2 v2",
            "XADD s * f",
            "XADD s",
        ],
    ),
    Scenario(
        "xadd_star_after_a_future_last_id_continues_its_sequence",
        [
            "XADD s 1-1 f v",
            lambda c: f"XSETID s {c.now + 100000}-5",
            "XADD s * f v",
            "XADD s * f v",
            lambda c: f"XADD s {c.now + 100000}-* f v",
        ],
    ),
    Scenario(
        "xadd_when_the_last_id_is_exhausted",
        [
            "XADD s 1-1 f v",
            f"XSETID s {MAX}-{MAX}",
            "XADD s * f v",
            f"XADD s {MAX}-* f v",
            f"XADD t {MAX}-{MAX} f v",
            "XADD t * f v",
            f"XADD u {MAX}-* f v",
            f"XADD u {MAX}-* f v",
        ],
    ),
    Scenario(
        "xadd_nomkstream",
        [
            "XADD s NOMKSTREAM * f v",
            "XADD s NOMKSTREAM 1-1 f v",
            "XADD s 1-1 f v",
            "XADD s NOMKSTREAM 2-1 f v",
            "XADD s nomkstream MAXLEN 1 3-1 f v",
        ],
    ),
    Scenario(
        "xadd_trimming_can_remove_the_new_entry",
        [
            "XADD s 1-1 f v",
            "XGROUP CREATE s g 0",
            "XADD s MAXLEN 0 2-1 f v",
            "XADD s MINID 9-0 3-1 f v",
            "XADD s MAXLEN = 1 4-1 f v",
            "XADD s MINID = 4-1 5-1 f v",
            "XREADGROUP GROUP g c1 STREAMS s >",
        ],
    ),
    Scenario(
        "xadd_and_xtrim_option_errors_fail_as_a_whole",
        [
            "XADD s 1-1 f v",
            "XADD s MAXLEN 1 LIMIT 5 2-1 f v",
            "XADD s MAXLEN -1 2-1 f v",
            "XADD s MAXLEN x 2-1 f v",
            "XADD s MAXLEN 1 MINID 1-1 2-1 f v",
            "XADD s MINID bad 2-1 f v",
            "XTRIM s MAXLEN 1 LIMIT 5",
            "XTRIM s FOO 1",
            "XTRIM s",
            "XTRIM s MAXLEN",
            "XTRIM nokey MAXLEN 0",
            "XTRIM s maxlen 0",
        ],
    ),
    Scenario(
        "approximate_trimming_removes_whole_nodes",
        [
            *[f"XADD s {i}-1 f v" for i in range(1, 251)],
            "XTRIM s MAXLEN ~ 10",
            "XADD s MAXLEN ~ 5 251-1 f v",
            "XTRIM s MINID ~ 240-1",
            "XTRIM s MAXLEN ~ 0 LIMIT 100",
        ],
    ),
    Scenario(
        "approximate_trimming_counts_deleted_entries_in_a_node",
        [
            *[f"XADD s {i}-1 f v" for i in range(1, 101)],
            *[f"XDEL s {i}-1" for i in range(2, 60)],
            *[f"XADD s {i}-1 f v" for i in range(101, 131)],
            "XTRIM s MAXLEN ~ 20",
            "XTRIM s MINID ~ 120-1",
            "XTRIM s MAXLEN 5",
        ],
    ),
    Scenario(
        "approximate_trimming_with_nodes_cut_by_bytes",
        [
            *[["XADD", "s", f"{i}-1", "f", "x" * 600] for i in range(1, 41)],
            "XTRIM s MAXLEN ~ 30",
            "XADD s MAXLEN ~ 10 41-1 f v",
            "XTRIM s MINID ~ 38-1",
        ],
    ),
    Scenario(
        "approximate_trimming_with_mixed_entry_shapes_and_tombstones",
        [*_mixed_shapes_workload()],
    ),
    # ---- rule 8: consumers and seen-time (7.0) ---------------------------------------
    Scenario(
        "seen_time_refreshes_only_on_served_reads_and_successful_claims",
        [
            *three_pending(),
            "XGROUP CREATECONSUMER s g c2",
            Sleep(40),
            "XCLAIM s g c2 100000000 1-1",  # nothing claimed: not refreshed
            "XAUTOCLAIM s g c2 100000000 0-0",  # nothing claimed: not refreshed
            "XREADGROUP GROUP g c2 STREAMS s >",  # nothing new: not refreshed
            "XPENDING s g - + 10 c2",
            "XINFO CONSUMERS s g",
            Sleep(40),
            "XREADGROUP GROUP g c2 STREAMS s 0",  # history read: refreshed
            Sleep(40),
            "XCLAIM s g c2 0 1-1",  # claim: refreshed
            Sleep(40),
            "XAUTOCLAIM s g c1 0 0-0 COUNT 1",
        ],
    ),
    # ---- rule 9: entries_read and lag -------------------------------------------------
    Scenario(
        "entries_read_and_lag_follow_reads",
        [
            "XGROUP CREATE s g $ MKSTREAM",
            *[f"XADD s {i}-1 f v" for i in range(1, 5)],
            "XGROUP CREATE s h 0",
            "XGROUP CREATE s k 2-1",
            "XGROUP CREATE s m 9-0",
            "XREADGROUP GROUP g c1 COUNT 1 STREAMS s >",
            "XREADGROUP GROUP h c1 COUNT 2 STREAMS s >",
            "XREADGROUP GROUP k c1 STREAMS s >",
        ],
    ),
    Scenario(
        "lag_is_unknown_behind_a_tombstone_until_the_group_passes_it",
        [
            *[f"XADD s {i}-1 f v" for i in range(1, 7)],
            "XGROUP CREATE s g 0",
            "XGROUP CREATE s h 0",
            "XREADGROUP GROUP g c1 COUNT 2 STREAMS s >",
            "XDEL s 4-1",
            "XREADGROUP GROUP g c1 COUNT 1 STREAMS s >",
            "XREADGROUP GROUP g c1 COUNT 1 STREAMS s >",
            "XDEL s 1-1",
            "XREADGROUP GROUP h c1 STREAMS s >",
            "XADD s 7-1 f v",
            "XDEL s 7-1",
        ],
    ),
    Scenario(
        "setid_entriesread_and_negative_lag",
        [
            *[f"XADD s {i}-1 f v" for i in range(1, 5)],
            "XGROUP CREATE s g 0 ENTRIESREAD 2",
            "XGROUP CREATE s h $ ENTRIESREAD 100",
            "XGROUP CREATE s k 0 ENTRIESREAD -1",
            "XGROUP CREATE s m 0 ENTRIESREAD -2",
            "XGROUP SETID s g 3-1 ENTRIESREAD 10",
            "XGROUP SETID s k $",
            "XGROUP SETID s k 1-1",
            "XGROUP SETID s h 2-1 ENTRIESREAD 0",
            "XREADGROUP GROUP h c1 COUNT 1 STREAMS s >",
            "XGROUP SETID s g + ",
            "XGROUP SETID s g -",
            "XGROUP SETID s g bad",
            "XGROUP SETID s nogroup 0",
            "XGROUP SETID s g 0 ENTRIESREAD x",
            "XGROUP SETID s g 0 FOO 1",
        ],
    ),
    Scenario(
        "xsetid_entries_added_and_max_deleted_id",
        [
            *[f"XADD s {i}-1 f v" for i in range(1, 5)],
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 COUNT 2 STREAMS s >",
            "XSETID s 10-0 ENTRIESADDED 10 MAXDELETEDID 5-0",
            "XSETID s 10-0 ENTRIESADDED 2",
            "XSETID s 3-0",
            "XSETID s 10-0 MAXDELETEDID 11-0",
            "XSETID s 10-0 ENTRIESADDED -1",
            "XSETID s 4-1",  # back down to the top entry
            "XADD s * f v",
            "XDEL s 1-1 2-1 3-1 4-1",
            "XSETID s 1-0",  # an empty stream can go below what it had
            "XSETID nokey 1-1",
            "XSETID s bad",
            "XSETID s 20-0 FOO 1",
            "XREADGROUP GROUP g c1 STREAMS s >",
        ],
    ),
    Scenario(
        "group_create_variants_and_errors",
        [
            "XGROUP CREATE s g $",
            "XGROUP CREATE s g $ MKSTREAM",
            "XGROUP CREATE s g $ MKSTREAM",
            "XGROUP CREATE s h 0 MKSTREAM ENTRIESREAD 5",
            "XGROUP CREATE s k bad",
            "XGROUP CREATE s k 0 FOO",
            "XGROUP CREATE s k 0 ENTRIESREAD",
            "XGROUP CREATE s k",
            "XGROUP FOO s k",
            "xgroup create s k 1-1",
            "XADD s 1-1 f v",
            "XREADGROUP GROUP k c1 STREAMS s >",
            "XREADGROUP GROUP h c1 STREAMS s >",
        ],
    ),
    Scenario(
        "the_same_id_or_key_twice_in_one_command",
        [
            *three_pending(),
            "XCLAIM s g c2 0 1-1 1-1",
            "XCLAIM s g c3 0 2-1 2-1 JUSTID",
            "XACK s g 3-1 3-1",
            "XDEL s 3-1 3-1",
            "XADD s 4-1 f v",
            "XADD s 5-1 f v",
            "XREADGROUP GROUP g c1 COUNT 1 STREAMS s s > >",
            "XREADGROUP GROUP g c2 STREAMS s s 0 >",
            "XGROUP CREATE t g 0 MKSTREAM",
            "XREADGROUP GROUP g c1 STREAMS s t s > > 0",
        ],
    ),
    Scenario(
        "unusual_key_group_and_consumer_names",
        [
            ["XADD", "", "1-1", "f", "v"],
            ["XGROUP", "CREATE", "", "", "0"],
            ["XREADGROUP", "GROUP", "", "", "STREAMS", "", ">"],
            ["XADD", "a key", "1-1", "", ""],
            ["XGROUP", "CREATE", "a key", "grp ü", "0"],
            ["XREADGROUP", "GROUP", "grp ü", "c 1", "STREAMS", "a key", ">"],
            ["XCLAIM", "a key", "grp ü", "ü", "0", "1-1"],
            ["XGROUP", "CREATECONSUMER", "", "", "x"],
            ["RENAME", "a key", ""],
        ],
    ),
    Scenario(
        "huge_ids_pending",
        [
            f"XADD s {MAX}-5 f v",
            f"XADD s {MAX}-* f v",
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 STREAMS s >",
            "XADD t 9223372036854775808-0 f v",
            "XGROUP CREATE t g 0",
            "XREADGROUP GROUP g c1 STREAMS t >",
        ],
    ),
    Scenario(
        "number_and_id_parsing_quirks",
        [
            "XADD s 01-1 f v",
            "XADD s +2-1 f v",
            "XADD s 3-01 f v",
            ["XADD", "s", " 4-1", "f", "v"],
            "XADD s 5-+1 f v",
            "XADD s -0-1 f v",
            "XADD s 6-1- f v",
            "XADD s 7-1 f v",
            "XGROUP CREATE s g 0",
            "XREADGROUP GROUP g c1 COUNT 01 STREAMS s >",
            "XREADGROUP GROUP g c1 COUNT +1 STREAMS s >",
            "XREADGROUP GROUP g c1 COUNT 1 STREAMS s >",
            "XCLAIM s g c2 00 1-1",
            "XCLAIM s g c2 0 01-1 IDLE 010",
            "XCLAIM s g c2 0 7-1 RETRYCOUNT +3",
            "XACK s g +7-1",
            "XTRIM s MAXLEN 05",
            "XTRIM s MAXLEN 9223372036854775808",
            "XSETID s 18446744073709551616-0",
            "XGROUP SETID s g 0 ENTRIESREAD 01",
        ],
    ),
    Scenario(
        "mixed_case_commands_and_options",
        [
            "xadd s 1-1 f v",
            "XaDd s maxlen = 5 2-1 f v",
            "xgroup Create s g 0",
            "xreadgroup group g c1 count 1 streams s >",
            "xclaim s g c2 0 1-1 justid force retrycount 3",
            "xautoclaim s g c3 0 0-0 count 1 justid",
            "xack s g 2-1",
            "xtrim s minid 2-1",
            "xsetid s 5-0 entriesadded 9 maxdeletedid 1-1",
            "xgroup setid s g 1-1 entriesread 1",
            "xgroup delconsumer s g c3",
            "unlink s",
        ],
    ),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_matches_server(clean_redis: RedisServer, scenario: Scenario, tmp_path) -> None:
    run = run_scenario(clean_redis, scenario)
    verdict = check_model(
        f"{scenario.name} [{clean_redis.kind.name}]",
        run.records,
        run.truth,
        run.checkpoints,
        profile=clean_redis.profile,
    )
    print(verdict.summary())
    if not verdict.ok:
        dumped = save_failure(
            tmp_path / f"{scenario.name}.jsonl",
            run.records,
            verdict,
            {"scenario": scenario.name, **clean_redis.meta()},
        )
        commands = "\n".join("  " + r.describe() for r in run.records)
        pytest.fail(f"{verdict.report()}\nall commands:\n{commands}\nlog: {dumped}", pytrace=False)


def test_scenario_names_are_unique() -> None:
    names = [s.name for s in SCENARIOS]
    assert len(names) == len(set(names))


def _max_span_ms(records: list) -> int:  # noqa: ANN001
    """The widest gap between the TIME probes around a non-blocking command."""
    return max((r.ts_after_ms - r.ts_ms for r in records if r.note != "blocked"), default=0)


@pytest.mark.spark
@on_job_kinds
def test_scenarios_through_the_job(redis_server: RedisServer, spark, tmp_path) -> None:  # noqa: ANN001
    """Every scenario (but the known gaps) in ONE events table through ``reconstruct``.

    Scenario ``i`` keeps its own dbs as ``100 * i + db`` and its seqs after the
    previous scenario's, so they cannot interfere; the scenario with FLUSHALL runs
    first (it can only flush itself). Compared with the server's final state of each.
    """
    from pelengine.pipeline.reconstruct import reconstruct
    from pelengine.settings import Settings
    from tests.redis_diff.compare import compare_tables, format_mismatches
    from tests.redis_diff.harness import check_job_changes, pending_delivery_counts
    from tests.redis_diff.test_differential_job import collect_tables, events_schema
    from tests.redis_diff.truth import TABLES

    chosen = list(SCENARIOS)
    chosen.sort(key=lambda s: not any("FLUSHALL" in str(step) for step in s.steps))
    rows: list[dict] = []
    records = []
    truth: dict[str, list[dict]] = {t: [] for t in TABLES}
    offset = 0
    for i, scenario in enumerate(chosen):
        for _attempt in range(5):
            redis_server.flushall()
            run = run_scenario(redis_server, scenario)
            # the server stalled between a command and its TIME probes (a loaded machine):
            # that command's own time is unknown, capture the scenario again
            if _max_span_ms(run.records) <= 1:
                break
        for r in run.records:
            r.seq += offset
            r.db = 100 * i + r.db
            rows.append(r.row())
            records.append(r)
        offset = rows[-1]["seq"]
        for table, trows in run.truth.items():
            truth[table] += [{**t, "db": 100 * i + t["db"]} for t in trows]
    events = spark.createDataFrame(rows, events_schema())
    settings = Settings(profile=redis_server.profile)
    result = reconstruct(spark, events, settings)
    got = collect_tables(result)
    assert_local_runner_agrees(result, events, settings)
    problems = compare_tables(truth, got, TABLES) + pending_delivery_counts(truth, got)
    change_problems = check_job_changes(records, got.get("ownership_changes", []))
    print(
        f"{redis_server.describe()}: {len(chosen)} scenarios, {len(rows)} events through "
        f"the job, {len(problems)} mismatches, {len(change_problems)} ownership_changes "
        "disagreeing with replies"
    )
    assert not change_problems, "\n".join(change_problems[:20])
    if problems:
        names = {100 * i: s.name for i, s in enumerate(chosen)}
        first = problems[0].key[0] if problems[0].key else 0
        pytest.fail(
            f"scenario {names.get(100 * (int(first) // 100))!r}:\n"
            + format_mismatches(problems, 20),
            pytrace=False,
        )
