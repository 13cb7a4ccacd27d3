"""``Replayer.absorb``: two families replayed apart, then tied together by new commands,
continue exactly as one replay of everything would (incremental runs merge saved models)."""

from __future__ import annotations

import json

from pelengine.model import Replayer, snapshot_tables
from pelengine.model.persist import dump, load

BEFORE = [  # (seq, ts, argv, client): s1 and s2 are untied so far
    (1, 100, ["XADD", "s1", "1-1", "f", "v"], "w"),
    (2, 101, ["XGROUP", "CREATE", "s1", "g", "$"], "w"),
    (3, 102, ["XADD", "s2", "1-1", "f", "v"], "w"),
    (4, 103, ["XGROUP", "CREATE", "s2", "g", "0"], "w"),
    (5, 104, ["XREADGROUP", "GROUP", "g", "a", "STREAMS", "s2", ">"], "ra"),
    (6, 105, ["XREADGROUP", "GROUP", "g", "b", "BLOCK", "0", "STREAMS", "s1", ">"], "rb"),
    (7, 106, ["XACK", "s2", "g", "1-1"], "ra"),
    (8, 107, ["XADD", "s2", "2-1", "f", "v"], "w"),
    (9, 108, ["XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s1", ">"], "rc"),
]
AFTER = [  # a RENAME and a two-stream read tie them; writes serve the waiting readers
    (10, 110, ["XREADGROUP", "GROUP", "g", "a", "STREAMS", "s1", "s2", ">", ">"], "ra"),
    (11, 111, ["XADD", "s1", "5-1", "f", "v"], "w"),
    (12, 112, ["RENAME", "s2", "s3"], "w"),
    (13, 113, ["XADD", "s1", "6-1", "f", "v"], "w"),
    (14, 114, ["XCLAIM", "s3", "g", "b", "0", "2-1"], "rb"),
]


def _apply(r: Replayer, rows: list[tuple[int, int, list[str], str]]) -> None:
    for seq, ts, argv, client in rows:
        r.apply(seq, ts, argv, 0, client)


def _saved(r: Replayer) -> Replayer:
    """The model as the state table keeps it between runs (plain data, here through JSON)."""
    return load(json.loads(json.dumps(dump(r))))


def _tables(r: Replayer) -> dict[str, list[dict[str, object]]]:
    out = snapshot_tables(r, 200, 14)
    out["ownership_changes"] = r.drain_changes()
    out["pel_history_closed"] = r.drain_pel_history()
    return {k: sorted(v, key=repr) for k, v in out.items()}


def test_absorbed_families_continue_as_one_replay() -> None:
    one = Replayer("7.0")
    _apply(one, BEFORE + AFTER)

    s1, s2 = Replayer("7.0"), Replayer("7.0")
    for row in BEFORE:
        (s1 if row[2][1] == "s1" or "s1" in row[2] else s2).apply(row[0], row[1], row[2], 0, row[3])
    assert [b.client for b in s1.blocked_clients()] == ["rb", "rc"]
    changes = s1.drain_changes() + s2.drain_changes()
    history = s1.drain_pel_history() + s2.drain_pel_history()
    # saved between runs, merged, continued
    merged = _saved(s2)
    merged.absorb(_saved(s1))
    _apply(merged, AFTER)

    want = _tables(one)
    got = _tables(merged)
    got["ownership_changes"] = sorted(changes + got["ownership_changes"], key=repr)
    got["pel_history_closed"] = sorted(history + got["pel_history_closed"], key=repr)
    assert got == want
    assert any(
        r["change"] == "delivered" and r["to_consumer"] == "b" for r in want["ownership_changes"]
    )
