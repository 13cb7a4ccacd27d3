"""Splitting a family's replay by consumer group (``command_group``).

The job may replay a stream with many groups as one task per group: each group's
unit replays the commands that name that group and stay inside it, every other
command of the stream, and notes the activity of clients whose commands went to
other units (their blocked reads end). These tests check the property the split
rests on, on the pure model: such a unit ends with exactly the stream and the
group that one replay of everything gives, and every command it applies has the
same outcome and history rows.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from pelengine.model import Replayer, snapshot_tables
from pelengine.model.routing import command_group
from pelengine.synth import generate_events

Row = dict[str, Any]


def argv(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize(
    ("command", "group", "group_only"),
    [
        ("XREADGROUP GROUP g c STREAMS s >", "g", True),
        ("xreadgroup COUNT 5 BLOCK 0 group g c NOACK STREAMS s t > >", "g", True),
        # the server keeps the last GROUP it parses
        ("XREADGROUP GROUP g c GROUP h d STREAMS s >", "h", True),
        # a stream named "GROUP" after STREAMS is a key, not an option
        ("XREADGROUP GROUP g c STREAMS GROUP >", "g", True),
        ("XREADGROUP COUNT 1 STREAMS s >", None, False),
        ("XACK s g 1-0", "g", True),
        ("XACK s g", None, False),
        ("XCLAIM s g c 0 1-0", "g", True),
        ("XCLAIM s g c 0", None, False),
        ("XAUTOCLAIM s g c 0 0-0", "g", True),
        ("XGROUP SETID s g $", "g", True),
        ("xgroup createconsumer s g c", "g", True),
        ("XGROUP DELCONSUMER s g c", "g", True),
        # these change what every group's replay must know
        ("XGROUP CREATE s g $ MKSTREAM", "g", False),
        ("XGROUP DESTROY s g", "g", False),
        ("XGROUP HELP", None, False),
        ("XADD s * f v", None, False),
        ("XTRIM s MAXLEN 0", None, False),
        ("XDEL s 1-0", None, False),
        ("XSETID s 5-0", None, False),
        ("DEL s", None, False),
        ("RENAME s t", None, False),
        ("FLUSHALL", None, False),
    ],
)
def test_command_group(command: str, group: str | None, group_only: bool) -> None:
    assert command_group(argv(command)) == (group, group_only)


def test_no_argv_names_no_group() -> None:
    assert command_group(None) == (None, False)
    assert command_group([]) == (None, False)


def _log(seed: int, n: int) -> list[Row]:
    rows = [r for r in generate_events(n, 3, seed) if r["argv"]]
    rows.sort(key=lambda r: r["seq"])
    return rows


def _replay(rows: list[Row], group: str | None) -> tuple[Replayer, list[Any], list[Row]]:
    """Replay ``rows`` whole (``group`` None) or as the unit of ``group``: its group-only
    commands and every command that is not group-only; a skipped command's client is
    noted as active. Returns the model, the outcome of every applied row (None where
    skipped) and the history rows."""
    r = Replayer("7.0", spill_closed_records=True)
    outcomes: list[Any] = []
    changes: list[Row] = []
    for row in rows:
        named, only = command_group(row["argv"])
        if group is not None and only and named != group:
            r.client_activity(row["ts_ms"], row["client"])
            outcomes.append(None)
            continue
        out = r.apply(row["seq"], row["ts_ms"], row["argv"], row["db"] or 0, row["client"])
        outcomes.append((out.kind, out.error))
        changes += r.drain_changes()
        changes += r.drain_pel_history()
        changes += r.drain_delivery_segments()
        changes += r.drain_group_incarnations()
    return r, outcomes, changes


def _canon(rows: list[Row]) -> list[str]:
    """Rows as sorted text; a delivery segment's ``segment_n`` (a counter of the whole
    replay) as its rank among the segments of the same entry of the same group."""
    ranked: dict[tuple[Any, ...], list[Row]] = {}
    out = []
    for row in rows:
        if "segment_n" in row:
            ident = (row["db"], row["group"], row["group_created_seq"], row["id"])
            ranked.setdefault(ident, []).append(row)
        else:
            out.append(repr(sorted(row.items())))
    for segments in ranked.values():
        segments.sort(key=lambda r: r["segment_n"])
        out += [repr(sorted({**r, "segment_n": i}.items())) for i, r in enumerate(segments)]
    return sorted(out)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_group_unit_replays_its_group_exactly(seed: int) -> None:
    rows = _log(seed, 4000)
    full, full_outcomes, full_changes = _replay(rows, None)
    last = rows[-1]
    full_tables = snapshot_tables(full, last["ts_ms"], last["seq"])
    groups = sorted({g for row in rows for g in [command_group(row["argv"])[0]] if g})
    assert len(groups) >= 3, groups
    kinds = Counter(o[0] for o in full_outcomes)
    assert kinds["applied"] > 1000 and kinds["error"] > 0, kinds  # a workload worth checking
    assert any("BLOCK" in (a.upper() for a in row["argv"]) for row in rows)
    live = 0
    for group in groups:
        unit, outcomes, changes = _replay(rows, group)
        skipped = 0
        for i, out in enumerate(outcomes):
            if out is None:
                skipped += 1
            else:
                assert out == full_outcomes[i], (group, rows[i])
        assert skipped > 100, (group, skipped)  # the unit really leaves work out
        # every history row of this group, and only those, as in the full replay
        assert _canon([c for c in changes if c["group"] == group]) == _canon(
            [c for c in full_changes if c["group"] == group]
        )
        tables = snapshot_tables(unit, last["ts_ms"], last["seq"])
        for name, expected in full_tables.items():
            if name == "streams":
                assert _canon(tables[name]) == _canon(expected)
                continue
            mine = [row for row in tables[name] if row["group"] == group]
            assert _canon(mine) == _canon([row for row in expected if row["group"] == group]), (
                group,
                name,
            )
            if name == "groups" and mine:
                live += 1
    assert live >= 3, live  # groups that exist at the end were compared, not only errors


def test_a_blocked_reader_moving_to_another_group_is_seen_by_its_first_groups_unit() -> None:
    """c1 blocks on group g, then (its wait over) reads group h; a later XADD must not
    serve the old wait. The unit of g sees only the activity of c1, not its command."""
    steps = [
        ("XGROUP CREATE s g $ MKSTREAM", None),
        ("XGROUP CREATE s h $", None),
        ("XREADGROUP GROUP g a BLOCK 0 STREAMS s >", "c1"),
        ("XREADGROUP GROUP h b STREAMS s >", "c1"),
        ("XADD s 5-0 f v", "c2"),
    ]
    rows = [
        {"seq": i + 1, "ts_ms": 1000 + i, "argv": argv(cmd), "db": 0, "client": client}
        for i, (cmd, client) in enumerate(steps)
    ]
    full, _, _ = _replay(rows, None)
    unit, outcomes, _ = _replay(rows, "g")
    assert outcomes[3] is None  # the h read is not the g unit's
    for model in (full, unit):
        pel = snapshot_tables(model, 2000, 9)["pel"]
        assert [r for r in pel if r["group"] == "g"] == []
    # without the activity note the old wait would be served
    blind = Replayer("7.0")
    for row in rows[:3] + rows[4:]:
        blind.apply(row["seq"], row["ts_ms"], row["argv"], 0, row["client"])
    assert [r["id"] for r in snapshot_tables(blind, 2000, 9)["pel"] if r["group"] == "g"] == ["5-0"]
