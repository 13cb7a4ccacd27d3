"""pel_history: one row per version of a pending entry, enough to rebuild the PEL at any seq.

The property: for a cut point N, the versions with ``valid_from_seq <= N`` and
(``valid_to_seq`` null or ``> N``) are exactly the ``pel`` table of a replay of
the events with ``seq <= N``. The replay is online (one replayer, its snapshot
taken after the last event with ``seq <= N``), which is the state a replayer
fed only those events holds. Then hand-written histories for each way a
version starts or ends.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from typing import Any

import pytest

from pelengine.model import Replayer, snapshot_tables
from pelengine.model.persist import dump, load
from pelengine.synth import generate_events
from tests.model._support import S, check_outcomes, run

Row = dict[str, Any]
ID = re.compile(r"\d+-\d+")

PEL_FIELDS = (
    "db",
    "key",
    "group",
    "id",
    "id_ms",
    "id_seq",
    "consumer",
    "delivery_time_ms",
    "delivery_count",
    "entry_exists",
)
HISTORY_COLUMNS = (
    *PEL_FIELDS,
    "valid_from_seq",
    "valid_from_ms",
    "valid_to_seq",
    "valid_to_ms",
)


# ---- random logs ----------------------------------------------------------------------


def _commands(rows: list[Row]) -> list[Row]:
    """The rows that are commands (the contract's rule), one per seq, in seq order."""
    seen: set[int] = set()
    out = []
    for r in sorted((r for r in rows if r["seq"] is not None), key=lambda r: r["seq"]):
        argv = r["argv"]
        if r["ts_ms"] is None or not argv or not argv[0] or any(a is None for a in argv):
            continue
        if r["seq"] in seen:
            continue
        seen.add(r["seq"])
        out.append(r)
    return out


def _disrupt(rows: list[Row], seed: int) -> list[Row]:
    """The log with more disruption mixed in (about 1 row in 80): XDEL of recent
    entries, '~' trims, and keyspace commands the generator does not send (RENAME,
    RENAMENX, DEL, FLUSHDB, GROUP DESTROY, DELCONSUMER)."""
    rnd = random.Random(seed)
    keys = sorted({r["argv"][1] for r in rows if r["argv"][0] == "XADD"})
    groups = sorted({r["argv"][3] for r in rows if r["argv"][0] == "XGROUP"})
    added: dict[str, list[str]] = defaultdict(list)  # recent XADD IDs per key
    out: list[Row] = []
    seq = 0
    for r in rows:
        argv = r["argv"]
        if argv[0] == "XADD":
            added[argv[1]].append(next((a for a in argv[2:] if ID.fullmatch(a)), "0-1"))
            del added[argv[1]][:-30]
        if rnd.random() < 1 / 80:
            a, b = rnd.sample(keys, 2)
            argv = rnd.choice(
                [
                    ["XDEL", a, *rnd.sample(added[a], min(3, len(added[a])))],
                    ["RENAME", a, b],
                    ["RENAME", a, b],
                    ["RENAMENX", a, b],
                    ["DEL", a],
                    ["XGROUP", "DESTROY", a, rnd.choice(groups)],
                    ["XGROUP", "DELCONSUMER", a, rnd.choice(groups), "w1"],
                    ["XTRIM", a, "MAXLEN", "~", str(rnd.randint(0, 20))],
                    ["FLUSHDB"] if rnd.random() < 0.2 else ["RENAME", b, a],
                ]
            )
            seq += 1
            out.append({**r, "seq": seq, "argv": argv, "db": 0, "client": "admin"})
        seq += 1
        out.append({**r, "seq": seq})
    return out


def _log(seed: int, n: int = 2000, *, monotone: bool = False) -> list[Row]:
    rows = _disrupt(_commands(list(generate_events(n, 6, seed=seed))), seed)
    if monotone:
        top = 0
        for r in rows:
            top = max(top, r["ts_ms"])
            r["ts_ms"] = top
    return rows


def _pel(rows: list[Row]) -> list[tuple]:
    return sorted(tuple(r[c] for c in PEL_FIELDS) for r in rows)


def _replay_with_cuts(
    profile: str, rows: list[Row], cuts: set[int]
) -> tuple[list[Row], dict[int, list[tuple]], Replayer]:
    """Replay once; returns the whole pel_history, the pel at each cut (after the
    event with that seq) and the replayer. Closed versions are drained as they come."""
    r = Replayer(profile)
    closed: list[Row] = []
    pels: dict[int, list[tuple]] = {}
    for row in rows:
        r.apply(row["seq"], row["ts_ms"], row["argv"], row["db"], row["client"])
        drained = r.drain_pel_history()
        for version in drained:  # drained as soon as they close
            assert version["valid_to_seq"] == row["seq"], version
        closed += drained
        if row["seq"] in cuts:
            pels[row["seq"]] = _pel(snapshot_tables(r, row["ts_ms"], row["seq"])["pel"])
    last = rows[-1]
    open_rows = snapshot_tables(r, last["ts_ms"], last["seq"])["pel_history"]
    for version in open_rows:
        assert version["valid_to_seq"] is None and version["valid_to_ms"] is None
        assert (version["as_of_ms"], version["as_of_seq"]) == (last["ts_ms"], last["seq"])
    return closed + open_rows, pels, r


def _versions_at_seq(history: list[Row], n: int) -> list[tuple]:
    return _pel(
        [
            v
            for v in history
            if v["valid_from_seq"] <= n and (v["valid_to_seq"] is None or v["valid_to_seq"] > n)
        ]
    )


def _versions_at_ms(history: list[Row], m: int) -> list[tuple]:
    return _pel(
        [
            v
            for v in history
            if v["valid_from_ms"] <= m and (v["valid_to_ms"] is None or v["valid_to_ms"] > m)
        ]
    )


def _check_timelines(history: list[Row]) -> None:
    """Per pending entry: versions do not overlap, each lasts at least one seq, only the
    last may be open, and two versions meeting at one seq differ in what the PEL shows."""
    by_entry: dict[tuple, list[Row]] = defaultdict(list)
    for v in history:
        assert list(v)[: len(HISTORY_COLUMNS)] == list(HISTORY_COLUMNS), list(v)
        by_entry[(v["db"], v["key"], v["group"], v["id"])].append(v)
    for entry, versions in by_entry.items():
        versions.sort(key=lambda v: v["valid_from_seq"])
        for v in versions[:-1]:
            assert v["valid_to_seq"] is not None, (entry, versions)
        for v in versions:
            assert v["valid_to_seq"] is None or v["valid_to_seq"] > v["valid_from_seq"], v
        for a, b in zip(versions, versions[1:], strict=False):
            assert a["valid_to_seq"] <= b["valid_from_seq"], (entry, a, b)
            if a["valid_to_seq"] == b["valid_from_seq"]:
                assert tuple(a[c] for c in PEL_FIELDS) != tuple(b[c] for c in PEL_FIELDS), (a, b)


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_pel_rebuilt_from_versions_equals_the_replay_at_every_cut(profile: str, seed: int) -> None:
    rows = _log(seed)
    seqs = [r["seq"] for r in rows]
    cuts = set(seqs[::10]) | set(random.Random(seed).sample(seqs, 50)) | {seqs[-1]}
    history, pels, _ = _replay_with_cuts(profile, rows, cuts)
    _check_timelines(history)
    assert len(pels) == len(cuts)
    problems = [n for n in sorted(pels) if _versions_at_seq(history, n) != pels[n]]
    assert not problems, f"{len(problems)} cuts differ, first at seq {problems[0]}"
    # the log exercised what it should: dangling versions, renames, nonempty PELs
    assert any(not v["entry_exists"] for v in history)
    renamed = {r["argv"][2] for r in rows if r["argv"][0] == "RENAME"}
    assert any(v["key"] in renamed for v in history)
    assert sum(1 for p in pels.values() if p) > len(pels) // 2


@pytest.mark.parametrize("seed", [5, 6])
def test_pel_rebuilt_by_time_equals_the_replay_up_to_that_time(seed: int) -> None:
    """With ``ts_ms`` never going backwards, versions valid at M (by valid_from_ms /
    valid_to_ms) are the PEL of the replay of the events with ``ts_ms <= M``."""
    rows = _log(seed, monotone=True)
    # the cut at time M: after the last event with ts_ms <= M
    last_at: dict[int, int] = {}
    for r in rows:
        last_at[r["ts_ms"]] = r["seq"]
    times = sorted(last_at)
    picked = times[::15] + [times[-1]]
    history, pels, _ = _replay_with_cuts("7.0", rows, {last_at[m] for m in picked})
    problems = [m for m in picked if _versions_at_ms(history, m) != pels[last_at[m]]]
    assert not problems, f"{len(problems)} times differ, first at {problems[0]}"


def test_the_replayer_is_saved_with_its_open_versions() -> None:
    """Saved state between runs: a replayer saved mid-log continues to the same history."""
    rows = _log(7)
    half = len(rows) // 2
    whole, _, _ = _replay_with_cuts("7.0", rows, set())
    first = Replayer("7.0")
    closed: list[Row] = []
    for row in rows[:half]:
        first.apply(row["seq"], row["ts_ms"], row["argv"], row["db"], row["client"])
    closed += first.drain_pel_history()
    first.drain_changes()  # output, not state: drained before saving
    resumed = load(json.loads(json.dumps(dump(first))))
    for row in rows[half:]:
        resumed.apply(row["seq"], row["ts_ms"], row["argv"], row["db"], row["client"])
    closed += resumed.drain_pel_history()
    last = rows[-1]
    rest = snapshot_tables(resumed, last["ts_ms"], last["seq"])["pel_history"]
    assert closed + rest == whole


# ---- hand-written histories ---------------------------------------------------------

BASE = [
    S(1000, "XADD s 1-0 f v"),
    S(1000, "XADD s 2-0 f v"),
    S(1000, "XGROUP CREATE s g 0"),
    S(1010, "XREADGROUP GROUP g alice COUNT 1 STREAMS s >"),  # seq 4: 1-0 to alice
]


def _history(profile: str, steps: list[S]) -> list[tuple]:
    """Every version as (key, id, consumer, time, count, exists, from_seq, from_ms,
    to_seq, to_ms), closed ones first in the order they closed, then the open ones."""
    r, outcomes = run(profile, steps)
    check_outcomes(steps, outcomes)
    rows = r.drain_pel_history() + snapshot_tables(r, steps[-1].ts, len(steps))["pel_history"]
    assert r.drain_pel_history() == []
    names = (
        "key",
        "id",
        "consumer",
        "delivery_time_ms",
        "delivery_count",
        "entry_exists",
        "valid_from_seq",
        "valid_from_ms",
        "valid_to_seq",
        "valid_to_ms",
    )
    for row in rows:
        assert (row["db"], row["group"]) == (0, "g")
    return [tuple(row[n] for n in names) for row in rows]


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_a_claim_changes_the_owner(profile: str) -> None:
    steps = [*BASE, S(1020, "XCLAIM s g bob 0 1-0")]
    assert _history(profile, steps) == [
        ("s", "1-0", "alice", 1010, 1, True, 4, 1010, 5, 1020),
        ("s", "1-0", "bob", 1020, 2, True, 5, 1020, None, None),
    ]


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_an_ack_closes_the_version(profile: str) -> None:
    steps = [*BASE, S(1020, "XACK s g 1-0")]
    assert _history(profile, steps) == [("s", "1-0", "alice", 1010, 1, True, 4, 1010, 5, 1020)]


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_xdel_of_a_pending_entry_flips_entry_exists(profile: str) -> None:
    steps = [
        *BASE,
        S(1020, "XDEL s 1-0 2-0"),  # 2-0 is not pending: no version
        S(1030, "XAUTOCLAIM s g bob 0 0"),  # finds 1-0 gone: dropped
    ]
    assert _history(profile, steps) == [
        ("s", "1-0", "alice", 1010, 1, True, 4, 1010, 5, 1020),
        ("s", "1-0", "alice", 1010, 1, False, 5, 1020, 6, 1030),
    ]


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_trimming_a_pending_entry_flips_entry_exists(profile: str) -> None:
    steps = [*BASE, S(1020, "XADD s MAXLEN 1 3-0 f v"), S(1030, "XTRIM s MAXLEN 0")]
    assert _history(profile, steps) == [
        ("s", "1-0", "alice", 1010, 1, True, 4, 1010, 5, 1020),
        ("s", "1-0", "alice", 1010, 1, False, 5, 1020, None, None),
    ]


def test_an_id_added_again_exists_again() -> None:
    """7.0: XSETID may go below a deleted ID, and XADD then brings that ID back."""
    steps = [
        S(1000, "XADD s 1-0 f v"),
        S(1000, "XGROUP CREATE s g 0"),
        S(1010, "XREADGROUP GROUP g alice STREAMS s >"),
        S(1020, "XDEL s 1-0"),
        S(1030, "XSETID s 0-1"),
        S(1040, "XADD s 1-0 f v"),
    ]
    assert _history("7.0", steps) == [
        ("s", "1-0", "alice", 1010, 1, True, 3, 1010, 4, 1020),
        ("s", "1-0", "alice", 1010, 1, False, 4, 1020, 6, 1040),
        ("s", "1-0", "alice", 1010, 1, True, 6, 1040, None, None),
    ]


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_rename_ends_versions_under_the_old_key_and_starts_them_under_the_new(
    profile: str,
) -> None:
    steps = [
        *BASE,
        S(1020, "SET t x", "ignored"),
        S(1030, "RENAME s t"),
        S(1040, "XCLAIM t g bob 0 1-0"),
        S(1050, "RENAME t t", "ignored"),  # onto itself: nothing changes
        S(1060, "DEL t"),
    ]
    assert _history(profile, steps) == [
        ("s", "1-0", "alice", 1010, 1, True, 4, 1010, 6, 1030),
        ("t", "1-0", "alice", 1010, 1, True, 6, 1030, 7, 1040),
        ("t", "1-0", "bob", 1040, 2, True, 7, 1040, 9, 1060),
    ]


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_consumer_and_group_removal_and_flush_close_versions(profile: str) -> None:
    steps = [
        *BASE,
        S(1020, "XREADGROUP GROUP g bob STREAMS s >"),  # 2-0 to bob
        S(1030, "XGROUP DELCONSUMER s g alice"),
        S(1040, "XREADGROUP GROUP g carol STREAMS s 0"),  # carol holds nothing: no change
        S(1050, "XGROUP DESTROY s g"),
        S(1060, "XGROUP CREATE s g 0"),
        S(1070, "XREADGROUP GROUP g dave STREAMS s >"),
        S(1080, "FLUSHALL"),
    ]
    assert _history(profile, steps) == [
        ("s", "1-0", "alice", 1010, 1, True, 4, 1010, 6, 1030),
        ("s", "2-0", "bob", 1020, 1, True, 5, 1020, 8, 1050),
        ("s", "1-0", "dave", 1070, 1, True, 10, 1070, 11, 1080),
        ("s", "2-0", "dave", 1070, 1, True, 10, 1070, 11, 1080),
    ]


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
def test_changes_within_one_command_make_one_version(profile: str) -> None:
    steps = [
        *BASE,
        S(1020, "XCLAIM s g bob 0 1-0 1-0"),  # claimed twice: count 3, one version
        S(1020, "XCLAIM s g bob 0 1-0 JUSTID"),  # same owner, time and count: no version
        S(1030, "XACK s g 1-0"),
    ]
    assert _history(profile, steps) == [
        ("s", "1-0", "alice", 1010, 1, True, 4, 1010, 5, 1020),
        ("s", "1-0", "bob", 1020, 3, True, 5, 1020, 7, 1030),
    ]


def test_a_blocked_read_served_later_starts_versions_at_the_serving_write() -> None:
    steps = [
        S(1000, "XGROUP CREATE s g $ MKSTREAM"),
        S(1010, "XREADGROUP GROUP g alice BLOCK 0 STREAMS s >", client="a"),
        S(1020, "XADD s 1-0 f v", client="p"),
    ]
    assert _history("7.0", steps) == [("s", "1-0", "alice", 1020, 1, True, 3, 1020, None, None)]


def test_without_recording_there_is_no_history() -> None:
    r = Replayer("7.0", record_changes=False)
    for seq, step in enumerate([*BASE, S(1020, "XCLAIM s g bob 0 1-0")], start=1):
        r.apply(seq, step.ts, step.argv)
    assert r.drain_pel_history() == []
    snap = snapshot_tables(r, 1020, 5)
    assert snap["pel_history"] == [] and len(snap["pel"]) == 1
