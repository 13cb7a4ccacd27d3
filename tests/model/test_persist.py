"""The model between runs as plain data (``pelengine.model.persist``).

The property: a replay cut anywhere, its model dumped, sent through JSON, loaded and
continued, gives every output the uninterrupted replay gives (each command's outcome
and the rows it drained, the final snapshot, the counters), on generated logs with
blocking readers, MULTI/EXEC units left open at the cut, scripts and RENAMEs, and on
every hand-written scenario. Then the same through the nightly steps of the Spark job
(settle, snapshot, restart the open records: the spilling model), the version rule and
the plain types of the data.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from typing import Any

import pytest

from pelengine.model import Replayer, snapshot_tables
from pelengine.model.persist import (
    SECTIONS,
    STATE_SCHEMA,
    STATE_SCHEMA_VERSION,
    StateError,
    StateVersionError,
    dump,
    load,
    schema_problems,
)
from tests.model.test_load import SNAPSHOT
from tests.model.test_pel_history import _log
from tests.model.test_scenarios import SHARED, VERSIONED

Row = dict[str, Any]
Step = tuple[int, int, list[str], int, str | None]  # seq, ts, argv, db, client
PROFILES = ["7.0", "7.4", "valkey-8.1"]


def _units_and_waits(rows: list[Row], seed: int) -> list[Step]:
    """A generated log (with RENAMEs, DELs, FLUSHDBs, '~' trims: ``_log``) with more mixed
    in, about one row in 12: readers that block (on a stream of their own, served by
    later writes, and on the log's keys), MULTI/EXEC units (writes serving the blocked
    readers inside them; some spread over many rows or never closed), scripts (a call
    row and its ``lua`` rows), a SET over a stream, '~' trims and XCLAIM ... FORCE; seqs
    renumbered."""
    rnd = random.Random(seed)
    keys = sorted({r["argv"][1] for r in rows if r["argv"][0] == "XADD"})
    groups = sorted({r["argv"][3] for r in rows if r["argv"][0] == "XGROUP"}) or ["g"]
    out: list[tuple[int, list[str], int, str | None]] = [
        (rows[0]["ts_ms"], ["XGROUP", "CREATE", "bk", "bg", "$", "MKSTREAM"], 0, "admin")
    ]
    later: list[tuple[int, list[str], str]] = []  # (position, argv, client) still to come
    n_clients = 0
    for i, r in enumerate(rows):
        ts = r["ts_ms"]
        while later and later[0][0] <= i:
            _, argv, client = later.pop(0)
            out.append((ts, argv, 0, client))
        if rnd.random() < 1 / 12:
            n_clients += 1
            c = f"x{n_clients}"
            key = rnd.choice(keys)
            block = rnd.choice(["0", "0", "50", "100000"])
            kind = rnd.choice([0, 0, 0, 1, 2, 2, 3, 4, 5, 6, 7])
            if kind == 0:  # a reader waiting on bk (served by a later XADD bk)
                out.append(
                    (
                        ts,
                        ["XREADGROUP", "GROUP", "bg", c, "COUNT", "2", "BLOCK", block]
                        + ["STREAMS", "bk", ">"],
                        0,
                        c,
                    )
                )
            elif kind == 1:  # a reader waiting on the log's keys
                other = rnd.choice(keys)
                out.append(
                    (
                        ts,
                        ["XREADGROUP", "GROUP", rnd.choice(groups), c, "BLOCK", block]
                        + ["STREAMS", key, other, ">", ">"],
                        0,
                        c,
                    )
                )
            elif kind == 2:  # a unit whose writes serve the readers waiting on bk
                out += [(ts, ["MULTI"], 0, c), (ts, ["XADD", "bk", "*", "f", "v"], 0, c)]
                out += [(ts + 1, ["XADD", key, "*", "f", "v"], 0, c)]
                out += [(ts + 1, ["XADD", "bk", "*", "f", "w"], 0, c)]
                out += [(ts + 2, ["EXEC"], 0, c)]
            elif kind == 3:  # a unit spread over the log (other clients in between), or open
                out.append((ts, ["MULTI"], 0, c))
                at = i + rnd.randint(1, 60)
                later += [(at, ["XADD", "bk", "*", "f", "v"], c)]
                later += [
                    (
                        at + 1,
                        ["XREADGROUP", "GROUP", "bg", c, "BLOCK", "0", "STREAMS"] + ["bk", ">"],
                        c,
                    )
                ]
                if rnd.random() < 0.7:
                    later.append((at + rnd.randint(1, 30), ["EXEC"], c))
                later.sort(key=lambda x: x[0])
            elif kind == 4:  # a script and the commands it ran
                out += [(ts, ["EVAL", "return 1", "1", key], 0, c)]
                out += [(ts + 1, ["XADD", key, "*", "f", "v"], 0, "lua")]
                out += [(ts + 2, ["XADD", "bk", "*", "f", "v"], 0, "lua")]
                out += [
                    (
                        ts + 2,
                        ["XREADGROUP", "GROUP", rnd.choice(groups), c, "COUNT", "1"]
                        + ["STREAMS", key, ">"],
                        0,
                        "lua",
                    )
                ]
            elif kind == 5:
                out.append((ts, ["XADD", "bk", "*", "f", "v"], 0, "w"))
                out.append((ts, ["XGROUP", "CREATE", "bk", "bg", "$", "MKSTREAM"], 0, "w"))
            elif kind == 6:
                n = str(rnd.randint(0, 12))
                out.append((ts, rnd.choice([["SET", key, "x"], ["RENAME", key, "bk"]]), 0, "a"))
                out.append((ts, ["XTRIM", key, "MAXLEN", "~", n], 0, "a"))
                out.append((ts, ["XADD", "bk", "MAXLEN", "~", n, "*", "f", "v"], 0, "a"))
            else:
                out.append((ts, ["XCLAIM", key, rnd.choice(groups), c, "0", "1-1", "FORCE"], 0, c))
        out.append((ts, r["argv"], r["db"] or 0, r["client"]))
    return [(n, ts, argv, db, client) for n, (ts, argv, db, client) in enumerate(out, start=1)]


def _generated(seed: int, n: int = 1500) -> list[Step]:
    return _units_and_waits(_log(seed, n), seed)


def _scenario_steps(steps: list[Any]) -> list[Step]:
    return [(n, s.ts, s.argv, s.db, s.client) for n, s in enumerate(steps, start=1)]


def _drained(r: Replayer) -> list[Row]:
    return (
        r.drain_changes()
        + r.drain_pel_history()
        + (r.drain_delivery_segments() + r.drain_group_incarnations())
    )


def _saved_and_loaded(r: Replayer) -> Replayer:
    """The model through its saved form: dumped, sent through JSON, loaded."""
    data = dump(r)
    text = json.dumps(data)
    back = json.loads(text)
    assert back == data, "the dumped data is not plain (JSON changed it)"
    loaded = load(back)
    assert dump(loaded) == data, "the loaded model dumps differently"
    _check_shared_entries(loaded)
    return loaded


def _check_shared_entries(r: Replayer) -> None:
    """A loaded model's pending entries are one object in the group's and its consumer's PEL."""
    for value in r.keys.values():
        for group in getattr(value, "groups", {}).values():
            for consumer in group.consumers.values():
                for entry_id, nack in consumer.pel.items():
                    assert group.pel[entry_id] is nack and nack.consumer is consumer


def _final(r: Replayer, last: Step) -> Row:
    tables = snapshot_tables(r, last[1], last[0])
    return {
        "tables": tables,
        "drained": _drained(r),
        "counters": asdict(r.counters),
        "notes": dict(r.notes),
        "blocked": r.blocked_clients(),
        "state": dump(r),
    }


def _replay(
    profile: str, steps: list[Step], cuts: set[int], **settings: Any
) -> tuple[list[Any], Row]:
    """Each command's outcome and drained rows, and the end; the model is saved and loaded
    after the commands at ``cuts`` (positions, 1-based). ``settings``: the Replayer's."""
    r = Replayer(profile, **settings)
    per_step: list[Any] = []
    for n, (seq, ts, argv, db, client) in enumerate(steps, start=1):
        outcome = r.apply(seq, ts, argv, db, client)
        per_step.append((seq, outcome, _drained(r)))
        if n in cuts:
            r = _saved_and_loaded(r)
    return per_step, _final(r, steps[-1])


def _assert_same(profile: str, steps: list[Step], cuts: set[int], **settings: Any) -> None:
    want_steps, want_end = _replay(profile, steps, set(), **settings)
    got_steps, got_end = _replay(profile, steps, cuts, **settings)
    assert len(got_steps) == len(want_steps)
    pairs = enumerate(zip(want_steps, got_steps, strict=True))
    diverged = next((i for i, (a, b) in pairs if a != b), None)
    assert diverged is None, (
        f"step {diverged + 1} {steps[diverged]}: {got_steps[diverged]} != {want_steps[diverged]}"
    )
    for part in want_end:
        assert got_end[part] == want_end[part], part


def _mid_unit_points(profile: str, steps: list[Step]) -> dict[str, list[int]]:
    """Positions after which the model is inside a unit, waits for a reader, has keys
    signalled but not served yet, or follows a script's rows."""
    r = Replayer(profile)
    points: dict[str, list[int]] = {"unit": [], "blocked": [], "ready": [], "script": []}
    for n, (seq, ts, argv, db, client) in enumerate(steps, start=1):
        r.apply(seq, ts, argv, db, client)
        if r._units:
            points["unit"].append(n)
        if r._blocked:
            points["blocked"].append(n)
        if r._ready:
            points["ready"].append(n)
        if r._script_unit is not None:
            points["script"].append(n)
    return points


# ---- the property -------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("seed", [1, 2])
def test_a_model_saved_and_loaded_anywhere_continues_as_the_whole_replay(
    profile: str, seed: int
) -> None:
    steps = _generated(seed)
    points = _mid_unit_points(profile, steps)
    for kind, where in points.items():
        assert where, f"the log never cuts the model {kind}"
    rnd = random.Random(seed)
    cuts = set(rnd.sample(range(1, len(steps)), 40))
    for where in points.values():
        cuts |= set(rnd.sample(where, min(15, len(where))))
    # seed 2: a spilling model with small nodes (their sizes decide what '~' trims drop)
    small = {"node_max_entries": 6, "node_max_bytes": 160} if seed == 2 else {}
    _assert_same(profile, steps, cuts, spill_closed_records=seed == 2, **small)


@pytest.mark.parametrize("profile", ["7.0", "valkey-8.1"])
def test_saved_after_every_command(profile: str) -> None:
    steps = _generated(3, 600)
    _assert_same(profile, steps, set(range(1, len(steps))))
    _assert_same(
        profile,
        steps,
        set(range(1, len(steps), 3)),
        spill_closed_records=True,
        node_max_entries=0,
        node_max_bytes=120,
    )


SCENARIOS = [(s, p) for s in SHARED for p in ("7.0", "valkey-8.1")] + [
    (s, s.profile) for s in VERSIONED
]


@pytest.mark.parametrize(
    "scenario, profile", SCENARIOS, ids=[f"{s.name}-{p}" for s, p in SCENARIOS]
)
def test_scenarios_saved_after_every_step(scenario: Any, profile: str) -> None:
    steps = _scenario_steps(scenario.steps)
    if len(steps) > 1:
        _assert_same(profile, steps, set(range(1, len(steps))))


@pytest.mark.parametrize("profile", PROFILES)
def test_a_loaded_snapshot_saved_and_continued(profile: str) -> None:
    """PELENGINE.LOAD rows (nodes with tombstones, a key of another type, loaded PEL),
    then commands; and IDs at the top of the range (2^64-1). Nodes of 3 entries: a
    tombstone in the tail node decides where the next node starts, and so what the
    '~' trim drops (2 entries left; 4 had the node forgotten its tombstone)."""
    top = "18446744073709551615"
    tail = [
        ["XADD", "s", "6-0", "a", "b", "c", "d"],
        ["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">"],
        ["XADD", "m", f"{top}-{top}", "f", "v"],
        ["XGROUP", "CREATE", "m", "g", "0"],
        ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "m", ">"],
        *(["XADD", "s", f"{n}-0", "f", "v"] for n in (7, 8)),
        ["XDEL", "s", "7-0"],
        *(["XADD", "s", f"{n}-0", "f", "v"] for n in (9, 10, 11)),
        ["XTRIM", "s", "MAXLEN", "~", "2"],
        ["XAUTOCLAIM", "s", "g", "carol", "0", "0"],
        ["XCLAIM", "m", "g", "d", "0", f"{top}-{top}", "TIME", "5"],
    ]
    steps: list[Step] = [
        (n, 1000 + n, argv, 0, None) for n, argv in enumerate([*SNAPSHOT, *tail], start=1)
    ]
    _assert_same(profile, steps, set(range(1, len(steps))), node_max_entries=3)
    _, end = _replay(profile, steps, set(), node_max_entries=3)
    assert [(s["key"], s["length"]) for s in end["tables"]["streams"]] == [("m", 1), ("s", 2)]


# ---- the nightly steps of the Spark job ------------------------------------------------------


def _nights(profile: str, steps: list[Step], cuts: list[int], *, saved: bool) -> list[Any]:
    """The replay as incremental runs do it: a spilling model; at the end of each night
    the unit ends, the output is drained, the snapshot taken, the open records restart;
    the model is saved and loaded in between (``saved``) or kept as it is."""
    r = Replayer(profile, spill_closed_records=True)
    outputs: list[Any] = []
    start = 0
    for cut in cuts:
        for seq, ts, argv, db, client in steps[start:cut]:
            outputs.append((seq, r.apply(seq, ts, argv, db, client), _drained(r)))
        start = cut
        last = steps[cut - 1]
        r.settle()
        outputs.append(_drained(r))
        outputs.append(snapshot_tables(r, last[1], last[0]))
        outputs.append((asdict(r.counters), dict(r.notes)))
        r.restart_open_records()
        if saved:
            r = _saved_and_loaded(r)
            r.reset_counters()  # as the Spark job's load_state does
        else:
            r.reset_counters()
    return outputs


@pytest.mark.parametrize("profile", PROFILES)
def test_nights_of_the_spark_job_continue_through_the_saved_model(profile: str) -> None:
    steps = _generated(4, 1200)
    rnd = random.Random(4)
    cuts = sorted(rnd.sample(range(1, len(steps)), 12)) + [len(steps)]
    assert _nights(profile, steps, cuts, saved=True) == _nights(profile, steps, cuts, saved=False)


# ---- the data ---------------------------------------------------------------------------------


def _plain(value: Any, path: str = "") -> list[str]:
    """Where ``value`` holds anything but dicts of strings, lists, ints, strings, bools, None."""
    if value is None or type(value) in (int, str, bool):
        return []
    if type(value) is list:
        return [p for i, v in enumerate(value) for p in _plain(v, f"{path}[{i}]")]
    if type(value) is dict:
        bad = [f"{path}: key {k!r}" for k in value if type(k) is not str]
        return bad + [p for k, v in value.items() for p in _plain(v, f"{path}.{k}")]
    return [f"{path}: {type(value).__name__}"]


def test_the_dumped_data_is_plain_and_follows_the_declared_schema() -> None:
    steps = _generated(5, 800)
    points = _mid_unit_points("7.4", steps)
    r = Replayer("7.4")
    seen: set[str] = set()
    for n, (seq, ts, argv, db, client) in enumerate(steps, start=1):
        r.apply(seq, ts, argv, db, client)
        _drained(r)
        if n % 50 == 0 or n in points["ready"]:
            data = dump(r)
            assert _plain(data) == []
            assert schema_problems(data) == []
            assert data["state_version"] == STATE_SCHEMA_VERSION
            seen |= {name for name, rows in data["state"].items() if rows}
    # every section was exercised by this log
    assert seen >= set(SECTIONS) - {"closed_records"}, set(SECTIONS) - seen
    keeper = Replayer("7.0")  # a model that keeps the records of groups that ended
    for seq, ts, argv, db, client in steps[:300]:
        keeper.apply(seq, ts, argv, db, client)
    keeper.apply(10_000, 0, ["FLUSHALL"])
    _drained(keeper)
    data = dump(keeper)
    assert data["state"]["closed_records"] and schema_problems(data) == []


def test_the_declared_schema_is_well_formed() -> None:
    assert len(SECTIONS) == len(set(SECTIONS))
    bases = {"int", "long", "u64", "bool", "string"}
    for section, fields in STATE_SCHEMA:
        names = [name for name, _ in fields]
        assert len(names) == len(set(names)), section
        for name, type_name in fields:
            base = type_name.rstrip("?")
            if base.startswith("array<"):
                base = base[len("array<") : -1]
            assert base in bases, (section, name, type_name)


def test_schema_problems_names_what_departs() -> None:
    data = dump(Replayer("7.0"))
    data["state"]["model"][0]["last_seq"] = 1.5
    data["state"]["keys"].append({"db": 0, "key": ("a",), "type": "string"})
    problems = schema_problems(data)
    assert any("model[0].last_seq" in p for p in problems)
    assert any("keys[0].key" in p for p in problems)


# ---- the version rule and refusals -------------------------------------------------------------


def test_another_schema_version_is_refused_naming_both() -> None:
    data = dump(Replayer("7.0"))
    data["state_version"] = 7
    with pytest.raises(
        StateVersionError,
        match=r"^state schema version 7 is not supported \(this pelengine reads version 3\)$",
    ):
        load(data)
    # the layouts before nodes carried their runs (2) and before delivery records and
    # groups carried changed_*/moved_* (1)
    for old in (2, 1):
        data["state_version"] = old
        refused = rf"version {old} is not supported .*reads version 3"
        with pytest.raises(StateVersionError, match=refused):
            load(data)
    del data["state_version"]
    with pytest.raises(StateVersionError, match=r"version is missing .*reads version 3"):
        load(data)
    data["state_version"] = "3"
    with pytest.raises(StateVersionError, match=r"version '3' is not supported"):
        load(data)


def test_data_that_is_no_model_is_refused() -> None:
    data = dump(Replayer("7.0"))
    del data["state"]["blocked"]
    with pytest.raises(StateError, match=r"missing \['blocked'\]"):
        load(data)
    data = dump(Replayer("7.0"))
    data["state"]["groups"].append({"db": 0, "key": "nowhere"})
    with pytest.raises(StateError, match="malformed"):
        load(data)


def test_a_model_with_output_not_drained_is_not_saved() -> None:
    r = Replayer("7.0")
    r.apply(1, 1, ["XADD", "s", "1-1", "f", "v"])
    r.apply(2, 2, ["XGROUP", "CREATE", "s", "g", "0"])
    r.apply(3, 3, ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"])
    with pytest.raises(StateError, match=r"not drained yet \(1 ownership_changes\)"):
        dump(r)
    r.drain_changes()
    assert snapshot_tables(load(dump(r)), 3, 3) == snapshot_tables(r, 3, 3)
