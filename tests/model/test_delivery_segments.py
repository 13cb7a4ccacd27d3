"""Spilled delivery records: memory follows the PEL, and merging the segments gives
exactly the ``delivery_counts`` rows of a replay that keeps every record.

The reference is the default replayer (every ``DeliveryRecord`` kept, rows from
``snapshot``); the replayer under test spills (``spill_closed_records=True``) and
its segments and group incarnations are merged by ``merge_delivery_segments``.
Logs: generated ones with disruption mixed in (RENAME, DEL, FLUSHDB, GROUP
DESTROY, DELCONSUMER, '~' trims; the generator's own SETIDs back, FORCE claims,
destroys and re-creations), every table-driven scenario, and a hand-written life
of one entry through each way of being delivered again after it closed.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from pelengine.model import Replayer, snapshot_tables
from pelengine.model.delivery import merge_delivery_segments, prior_segment
from pelengine.model.persist import dump, load
from tests.model._support import S, check_outcomes
from tests.model.test_pel_history import _log
from tests.model.test_scenarios import SHARED, VERSIONED

Row = dict[str, Any]
Step = tuple[int, int, list[str], int, str | None]  # seq, ts, argv, db, client


def _steps_of_log(rows: list[Row]) -> list[Step]:
    return [(r["seq"], r["ts_ms"], r["argv"], r["db"] or 0, r["client"]) for r in rows]


def _steps_of_scenario(steps: list[S]) -> list[Step]:
    return [(n, s.ts, s.argv, s.db, s.client) for n, s in enumerate(steps, start=1)]


def _key(row: Row) -> tuple[Any, ...]:
    return tuple(sorted((k, repr(v)) for k, v in row.items()))


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=_key)


def _full(profile: str, steps: list[Step]) -> list[Row]:
    r = Replayer(profile)
    for seq, ts, argv, db, client in steps:
        r.apply(seq, ts, argv, db, client)
    last = steps[-1]
    return _sorted(snapshot_tables(r, last[1], last[0])["delivery_counts"])


def _spilled(
    profile: str, steps: list[Step], drain_every: int = 1
) -> tuple[list[Row], list[Row], Replayer]:
    """Replay with spilling; returns (segments, incarnations, replayer) with the open
    segments and live incarnations of the final snapshot included."""
    r = Replayer(profile, spill_closed_records=True)
    segments: list[Row] = []
    incarnations: list[Row] = []
    for n, (seq, ts, argv, db, client) in enumerate(steps, start=1):
        r.apply(seq, ts, argv, db, client)
        if n % drain_every == 0:
            segments += r.drain_delivery_segments()
            incarnations += r.drain_group_incarnations()
        assert r.record_count() == _pel_size(r), f"after seq {seq}: records beyond the PEL"
    segments += r.drain_delivery_segments()
    incarnations += r.drain_group_incarnations()
    last = steps[-1]
    snap = snapshot_tables(r, last[1], last[0])
    assert snap["delivery_counts"] == []
    return segments + snap["delivery_segments"], incarnations + snap["group_incarnations"], r


def _pel_size(r: Replayer) -> int:
    return sum(len(g.pel) for _, _, s in r.streams() for g in s.groups.values())


def _merged(profile: str, steps: list[Step], drain_every: int = 1) -> list[Row]:
    segments, incarnations, _ = _spilled(profile, steps, drain_every)
    last = steps[-1]
    return _sorted(
        merge_delivery_segments(segments, incarnations, {"as_of_ms": last[1], "as_of_seq": last[0]})
    )


def _reopened(segments: list[Row]) -> int:
    """Entries with more than one segment (delivered again after they closed)."""
    seen: dict[tuple[Any, ...], int] = {}
    for s in segments:
        k = (s["db"], s["group"], s["group_created_seq"], s["id"])
        seen[k] = seen.get(k, 0) + 1
    return sum(1 for n in seen.values() if n > 1)


# ---- (a) memory: O(PEL) records ----------------------------------------------------------


def _hot_stream(cycles: int, *, spill: bool) -> Replayer:
    """One stream trimmed to 50 entries; each cycle adds 4 entries, reads them and acks
    3 (one in ten stays pending a while, acked 40 cycles later)."""
    r = Replayer("7.0", spill_closed_records=spill)
    seq = 0

    def do(*argv: str) -> None:
        nonlocal seq
        seq += 1
        out = r.apply(seq, 1_000 + seq, list(argv))
        assert out.kind == "applied", (argv, out)

    do("XGROUP", "CREATE", "hot", "g", "$", "MKSTREAM")
    late: list[tuple[int, str]] = []
    for c in range(cycles):
        ids = [f"{c + 1}-{i}" for i in range(4)]
        for entry_id in ids:
            do("XADD", "hot", "MAXLEN", "50", entry_id, "f", "v")
        do("XREADGROUP", "GROUP", "g", f"w{c % 3}", "COUNT", "4", "STREAMS", "hot", ">")
        do("XACK", "hot", "g", *ids[:3])
        if c % 10:
            do("XACK", "hot", "g", ids[3])
        else:
            late.append((c + 40, ids[3]))
        while late and late[0][0] <= c:
            do("XACK", "hot", "g", late.pop(0)[1])
        r.drain_changes()
        r.drain_pel_history()
        if spill:
            r.drain_delivery_segments()
            r.drain_group_incarnations()
    return r


def _saved_size(r: Replayer) -> int:
    """Bytes of the model as the state table keeps it (its plain data, as JSON)."""
    return len(json.dumps(dump(r)))


def test_spilling_model_holds_only_pending_records() -> None:
    small, large = _hot_stream(100, spill=True), _hot_stream(1000, spill=True)
    for r in (small, large):
        assert r.record_count() == _pel_size(r) <= 5
    keeper = _hot_stream(1000, spill=False)
    assert keeper.record_count() == 4000  # every entry ever delivered: the history
    # the saved model (incremental runs) does not grow with the history either
    size_small, size_large = _saved_size(small), _saved_size(large)
    assert size_large < size_small * 1.2, (size_small, size_large)
    assert _saved_size(keeper) > 10 * size_large


# ---- (b) merged segments == the full replay's rows ---------------------------------------


@pytest.mark.parametrize("profile", ["7.0", "7.4"])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_merged_segments_equal_full_records_on_generated_logs(profile: str, seed: int) -> None:
    steps = _steps_of_log(_log(seed, 2500))
    want = _full(profile, steps)
    segments, incarnations, _ = _spilled(profile, steps, drain_every=97)
    last = steps[-1]
    got = _sorted(
        merge_delivery_segments(segments, incarnations, {"as_of_ms": last[1], "as_of_seq": last[0]})
    )
    assert len(want) > 100
    assert got == want
    statuses = {r["status"] for r in want}
    assert {"pending", "acked"} <= statuses and len(statuses) >= 4, statuses


def test_generated_logs_deliver_closed_entries_again() -> None:
    """The logs above are not too kind: entries come back after they closed, groups
    come back after a destroy, keys are renamed with their history."""
    reopened = incarnations = renamed = 0
    for seed in (1, 2, 3, 4):
        steps = _steps_of_log(_log(seed, 2500))
        segments, incs, _ = _spilled("7.0", steps)
        reopened += _reopened(segments)
        names = {(i["db"], i["group"]) for i in incs}
        incarnations += len(incs) - len(names)
        final = {(i["db"], i["group"], i["group_created_seq"]): i["key"] for i in incs}
        renamed += sum(
            1 for s in segments if final[(s["db"], s["group"], s["group_created_seq"])] != s["key"]
        )
    assert reopened > 0 and incarnations > 0 and renamed > 0, (reopened, incarnations, renamed)


@pytest.mark.parametrize(
    "scenario",
    [(s, p) for s in SHARED for p in ("7.0", "7.4")] + [(s, s.profile) for s in VERSIONED],
    ids=[f"{s.name}-{p}" for s in SHARED for p in ("7.0", "7.4")] + [s.name for s in VERSIONED],
)
def test_merged_segments_equal_full_records_on_scenarios(scenario: tuple[Any, str]) -> None:
    sc, profile = scenario
    steps = _steps_of_scenario(sc.steps)
    assert _merged(profile, steps) == _full(profile, steps)


# One entry, 1-0, delivered again after it closed in every way there is; seq = position.
LIFE = [
    S(1000, "XADD s 1-0 f v"),
    S(1000, "XADD s 2-0 f v"),
    S(1000, "XGROUP CREATE s g 0"),  # seq 3: incarnation 3
    S(1001, "XREADGROUP GROUP g a COUNT 1 STREAMS s >"),
    S(1002, "XACK s g 1-0"),  # closed: acked
    S(1003, "XGROUP SETID s g 0"),
    S(1004, "XREADGROUP GROUP g b COUNT 1 STREAMS s >"),  # again, to b
    S(1005, "XCLAIM s g c 0 1-0"),  # claimed by c (3 owners now)
    S(1006, "XACK s g 1-0"),
    S(1007, "XCLAIM s g a 0 1-0 FORCE"),  # FORCE: pending again, for a
    S(1008, "XGROUP DELCONSUMER s g a"),  # closed: consumer_deleted
    S(1009, "XCLAIM s g d 0 1-0 FORCE JUSTID"),
    S(1010, "RENAME s t"),  # the incarnation moves, closed records with it
    S(1011, "XACK t g 1-0"),
    S(1012, "XGROUP DESTROY t g"),  # incarnation 3 ends under t
    S(1013, "XGROUP CREATE t g 0"),  # seq 16: incarnation 16, rows apart
    S(1014, "XREADGROUP GROUP g e COUNT 1 STREAMS t >"),
    S(1015, "DEL t"),  # closed: key_deleted
    S(1016, "XADD t 1-0 f v"),
    S(1017, "XGROUP CREATE t g 0"),  # seq 20: incarnation 20
    S(1018, "XREADGROUP GROUP g f COUNT 1 STREAMS t >"),  # still pending at the end
]


def test_one_entry_delivered_again_in_every_way() -> None:
    r = Replayer("7.0")
    outcomes = []
    for n, s in enumerate(LIFE, start=1):
        out = r.apply(n, s.ts, s.argv)
        outcomes.append((out.kind, out.error))
    check_outcomes(LIFE, outcomes)
    steps = _steps_of_scenario(LIFE)
    got = _merged("7.0", steps)
    assert got == _full("7.0", steps)
    # by hand: (key, created, status, deliveries, owners, first, last, count, closed)
    facts = sorted(
        (
            r["key"],
            r["group_created_seq"],
            r["status"],
            r["deliveries"],
            r["owner_names"],
            r["first_delivery_ms"],
            r["last_delivery_ms"],
            r["delivery_count"],
            r["closed_ms"],
        )
        for r in got
        if r["id"] == "1-0"
    )
    assert facts == [
        # acked last (seq 14, under t) before its group was destroyed: stays acked; FORCE
        # JUSTID made a fresh count of 1
        ("t", 3, "acked", 5, ["a", "b", "c", "d"], 1001, 1009, 1, 1011),
        ("t", 16, "key_deleted", 1, ["e"], 1014, 1014, 1, 1015),
        ("t", 20, "pending", 1, ["f"], 1018, 1018, 1, None),
    ]


# ---- incremental: segments restarted between runs, merged with the earlier rows ----------


def _one_run(
    model: Replayer, steps: list[Any], rows: list[Row]
) -> tuple[Replayer, list[Row], dict[str, list[Row]]]:
    """One ``--incremental`` run over ``steps`` continuing the rows ``rows`` of the runs
    before: the merged ``delivery_counts`` rows, the run's snapshot, and the model as the
    next run loads it (open segments restarted, saved as plain data and loaded)."""
    segments: list[Row] = []
    incarnations: list[Row] = []
    for seq, ts, argv, db, client in steps:
        model.apply(seq, ts, argv, db, client)
        segments += model.drain_delivery_segments()
        incarnations += model.drain_group_incarnations()
    last = steps[-1]
    snap = snapshot_tables(model, last[1], last[0])
    rows = merge_delivery_segments(
        [prior_segment(row) for row in rows] + segments + snap["delivery_segments"],
        incarnations + snap["group_incarnations"],
        {"as_of_ms": last[1], "as_of_seq": last[0]},
    )
    model.restart_open_records()
    model.drain_changes()  # output, not state (not looked at here): drained before saving
    model.drain_pel_history()
    return load(json.loads(json.dumps(dump(model)))), rows, snap


@pytest.mark.parametrize("seed", [5, 6])
def test_runs_continuing_a_saved_model_merge_to_the_full_rows(seed: int) -> None:
    """Like ``--incremental`` nights: each run ends with a snapshot, the model restarts its
    open segments and is saved (plain data); the next run's segments are merged with the
    previous run's rows (as the first segment of each entry)."""
    steps = _steps_of_log(_log(seed, 2500))
    rnd = random.Random(seed)
    cuts = sorted(rnd.sample(range(1, len(steps)), 5)) + [len(steps)]
    model = Replayer("7.0", spill_closed_records=True)
    rows: list[Row] = []
    start = 0
    for cut in cuts:
        model, rows, _ = _one_run(model, steps[start:cut], rows)
        start = cut
    assert _sorted(rows) == _full("7.0", steps)


# ---- changed_seq/changed_ms: the command that last changed each row ----------------------

# seq = position; the model time of each command is its ts.
CHANGES = [
    S(1000, "XADD s 1-0 f v"),
    S(1000, "XADD s 2-0 f v"),
    S(1000, "XGROUP CREATE s g 0"),
    S(1001, "XREADGROUP GROUP g a COUNT 2 STREAMS s >"),  # seq 4: 1-0 and 2-0 delivered
    S(1002, "XCLAIM s g b 0 1-0"),  # seq 5: 1-0 claimed
    S(1003, "XACK s g 2-0"),  # seq 6: 2-0 acked (spilling: its segment leaves under s)
    S(1004, "XADD s 3-0 f v"),  # seq 7: no record changes
    S(1005, "RENAME s t"),  # seq 8: every record (the acked 2-0 too) moves to t
    S(1006, "XREADGROUP GROUP g c COUNT 1 STREAMS t >"),  # seq 9: 3-0 delivered
    S(1007, "XADD t 4-0 f v"),  # seq 10: no record changes
]


def _changed(rows: list[Row]) -> dict[str, tuple[Any, ...]]:
    return {r["id"]: (r["key"], r["status"], r["changed_seq"], r["changed_ms"]) for r in rows}


def _changes_at(cut: int) -> list[Step]:
    return _steps_of_scenario(CHANGES)[:cut]


@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        (4, {"1-0": ("s", "pending", 4, 1001), "2-0": ("s", "pending", 4, 1001)}),
        (5, {"1-0": ("s", "pending", 5, 1002), "2-0": ("s", "pending", 4, 1001)}),
        (7, {"1-0": ("s", "pending", 5, 1002), "2-0": ("s", "acked", 6, 1003)}),
        (
            10,
            {
                "1-0": ("t", "pending", 8, 1005),
                "2-0": ("t", "acked", 8, 1005),
                "3-0": ("t", "pending", 9, 1006),
            },
        ),
    ],
)
def test_rows_carry_the_command_that_last_changed_them(
    cut: int, expected: dict[str, tuple[Any, ...]]
) -> None:
    """A delivery, a claim, an ack, a RENAME (of an open and a closed record): each
    stamps the row with its seq and time; other commands leave it."""
    r = Replayer("7.0")
    outcomes = [r.apply(n, s.ts, s.argv) for n, s in enumerate(CHANGES[:cut], start=1)]
    check_outcomes(CHANGES[:cut], [(o.kind, o.error) for o in outcomes])
    steps = _changes_at(cut)
    assert _changed(_full("7.0", steps)) == expected
    assert _changed(_merged("7.0", steps)) == expected


def test_a_rename_moves_the_spilled_segments_through_the_incarnation() -> None:
    """Spilling: the acked 2-0 left the model under ``s`` before the RENAME; its segment
    keeps the ack's stamp and the incarnation row names the RENAME, which the merge
    takes (the larger seq)."""
    segments, incarnations, _ = _spilled("7.0", _changes_at(10))
    acked = [(s["key"], s["status"], s["changed_seq"], s["changed_ms"]) for s in segments]
    assert ("s", "acked", 6, 1003) in acked
    assert [(i["key"], i["moved_seq"], i["moved_ms"]) for i in incarnations] == [("t", 8, 1005)]
    # no RENAME yet: the incarnation was never moved
    _, before, _ = _spilled("7.0", _changes_at(7))
    assert [(i["key"], i["moved_seq"], i["moved_ms"]) for i in before] == [("s", None, None)]


def test_the_rows_of_an_ended_incarnation_do_not_move() -> None:
    """A group destroyed before a RENAME: its rows stay where and as they ended."""
    steps = [
        *CHANGES[:7],
        S(1004, "XGROUP DESTROY s g"),  # seq 8: 1-0 closes group_destroyed
        S(1005, "RENAME s t"),  # seq 9: moves the stream, not the ended incarnation
    ]
    want = {"1-0": ("s", "group_destroyed", 8, 1004), "2-0": ("s", "acked", 6, 1003)}
    assert _changed(_full("7.0", _steps_of_scenario(steps))) == want
    assert _changed(_merged("7.0", _steps_of_scenario(steps))) == want


def test_a_reloaded_model_continues_the_stamps() -> None:
    """Runs cut at seqs 5, 7, 8 and 10, each continuing the saved model (dumped, loaded):
    an open record untouched in a run has no stamp in its next segment (the earlier
    row's carries through the merge), a RENAME in a later run still reaches the records
    spilled in an earlier one, and the rows equal a straight replay."""
    steps = _steps_of_scenario(CHANGES)
    model = Replayer("7.0", spill_closed_records=True)
    rows: list[Row] = []
    start = 0
    open_stamps: dict[int, dict[str, Any]] = {}
    for cut in (5, 7, 8, 10):
        model, rows, snap = _one_run(model, steps[start:cut], rows)
        start = cut
        open_stamps[cut] = {s["id"]: s["changed_seq"] for s in snap["delivery_segments"]}
        assert _sorted(rows) == _full("7.0", steps[:cut]), f"cut at {cut}"
    assert open_stamps == {
        5: {"1-0": 5, "2-0": 4},
        7: {"1-0": None},  # 2-0 acked in this run (a closed segment); 1-0 untouched
        8: {"1-0": 8},  # the RENAME
        10: {"1-0": None, "3-0": 9},
    }
    assert _changed(rows) == {
        "1-0": ("t", "pending", 8, 1005),
        "2-0": ("t", "acked", 8, 1005),
        "3-0": ("t", "pending", 9, 1006),
    }
    saved = dump(model)
    (group,) = saved["state"]["groups"]
    assert (group["moved_seq"], group["moved_ms"]) == (8, 1005)
    assert {r["changed_seq"] for r in saved["state"]["records"]} == {None}


def test_a_loaded_pending_entry_is_stamped_by_its_load_row() -> None:
    """``PELENGINE.LOAD PENDING`` creates the record (stamped with the row's seq and
    time); a later claim stamps it again."""
    load_rows = [
        S(1000, "PELENGINE.LOAD BEGIN"),
        S(1000, "PELENGINE.LOAD STREAM s 2-0 2 0-0 1-0"),
        S(1000, "PELENGINE.LOAD NODE s 1-0 120 1 f 1-0 1 2-0 1"),
        S(1000, "PELENGINE.LOAD GROUP s g 2-0 2"),
        S(1000, "PELENGINE.LOAD CONSUMER s g a 900 -1"),
        S(1001, "PELENGINE.LOAD PENDING s g 1-0 a 940 3 2-0 a 945 1"),  # seq 6
        S(1002, "XCLAIM s g b 0 2-0"),  # seq 7
    ]
    r = Replayer("7.0")
    outcomes = [r.apply(n, s.ts, s.argv) for n, s in enumerate(load_rows, start=1)]
    check_outcomes(load_rows, [(o.kind, o.error) for o in outcomes])
    steps = _steps_of_scenario(load_rows)
    want = {"1-0": ("s", "pending", 6, 1001), "2-0": ("s", "pending", 7, 1002)}
    assert _changed(_full("7.0", steps)) == want
    assert _changed(_merged("7.0", steps)) == want
    assert _changed(_full("7.0", steps[:6])) == {
        "1-0": ("s", "pending", 6, 1001),
        "2-0": ("s", "pending", 6, 1001),
    }


def test_the_delivery_counts_columns() -> None:
    """The model renders delivery_counts in the engines' columns (pelengine.schemas'
    ``ENGINE_TABLE_COLUMNS``, held to the model's in tests/engine/test_udf_columns.py)."""
    row = _full("7.0", _changes_at(10))[0]
    assert tuple(row) == (
        *("db", "key", "group", "id", "id_ms", "id_seq", "delivery_count", "deliveries"),
        *("owners", "first_delivery_ms", "last_delivery_ms", "status", "closed_ms"),
        *("owner_names", "group_created_seq", "changed_seq", "changed_ms"),
        *("as_of_ms", "as_of_seq"),
    )
