"""Helpers for the model tests: run a table of steps, compare hand-written facts.

A step is ``S(ts_ms, "XADD s 1-0 f v", expect)``: the command (a string split on
blanks, or an argv list when an argument holds a blank), its time, and the
outcome it must have: ``applied``, ``ignored``, ``ok`` (either of those),
``error`` (any kind) or ``error:<kind>``. Every step's outcome is checked.

Facts about the final snapshot are written as ``{table: {identity: expected}}``
where the identity is ``(key, ...)`` or ``(db, key, ...)`` and ``expected`` is
a dict of fields, a compact tuple (see ``COMPACT``) or None (no such row).
Extra fact kinds list whole sets: ``pel_ids``, ``consumer_names``, ``stream_keys``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from pelengine.model import Replayer

Row = dict[str, Any]


class S(NamedTuple):
    ts: int
    cmd: str | Sequence[str]
    expect: str = "applied"
    db: int = 0
    client: str | None = None

    @property
    def argv(self) -> list[str]:
        return self.cmd.split() if isinstance(self.cmd, str) else list(self.cmd)


IDENTITY = {
    "pel": ("key", "group", "id"),
    "ownership": ("key", "group", "consumer"),
    "delivery_counts": ("key", "group", "id"),
    "groups": ("key", "group"),
    "streams": ("key",),
}

# Compact tuples: field names in order.
COMPACT = {
    "pel": ("consumer", "delivery_time_ms", "delivery_count"),
    "ownership": ("pending", "seen_time_ms", "active_time_ms"),
    "groups": ("last_delivered_id", "entries_read", "lag"),
    "delivery_counts": ("status", "delivery_count", "deliveries", "owners"),
    "streams": ("length", "last_generated_id", "max_deleted_entry_id", "entries_added"),
}


def run(profile: str, steps: Sequence[S]) -> tuple[Replayer, list[tuple[str, str | None]]]:
    """Apply the steps in order (seq = position + 1); return the replayer and outcomes."""
    r = Replayer(profile)
    outcomes = []
    for seq, step in enumerate(steps, start=1):
        out = r.apply(seq, step.ts, step.argv, db=step.db, client=step.client)
        outcomes.append((out.kind, out.error))
    return r, outcomes


def check_outcomes(steps: Sequence[S], outcomes: list[tuple[str, str | None]]) -> None:
    problems = []
    for i, (step, (kind, error)) in enumerate(zip(steps, outcomes, strict=True), start=1):
        want = step.expect
        got = kind if kind != "error" else f"error:{error}"
        ok = (
            got == want
            or (want == "error" and kind == "error")
            or (want == "ok" and kind != "error")
        )
        if not ok:
            problems.append(f"step {i} {step.argv}: expected {want}, got {got}")
    assert not problems, "\n".join(problems)


def _split(identity: tuple) -> tuple[int, tuple]:
    if identity and isinstance(identity[0], int):
        return identity[0], identity[1:]
    return 0, identity


def _find(rows: list[Row], table: str, identity: tuple) -> list[Row]:
    db, ident = _split(identity)
    names = IDENTITY[table]
    return [
        row
        for row in rows
        if row["db"] == db and tuple(row[n] for n in names[: len(ident)]) == ident
    ]


def check_facts(snapshot: dict[str, list[Row]], facts: dict[str, dict]) -> None:
    problems: list[str] = []
    for table, expected in facts.items():
        if table == "pel_ids":
            for identity, ids in expected.items():
                got = [row["id"] for row in _find(snapshot["pel"], "pel", identity)]
                if got != list(ids):
                    problems.append(f"pel ids of {identity}: expected {list(ids)}, got {got}")
            continue
        if table == "consumer_names":
            for identity, names in expected.items():
                rows = _find(snapshot["ownership"], "ownership", identity)
                got = [row["consumer"] for row in rows]
                if got != list(names):
                    problems.append(f"consumers of {identity}: expected {list(names)}, got {got}")
            continue
        if table == "stream_keys":
            got = sorted((row["db"], row["key"]) for row in snapshot["streams"])
            if got != sorted(expected):
                problems.append(f"streams: expected {sorted(expected)}, got {got}")
            continue
        for identity, want in expected.items():
            rows = _find(snapshot[table], table, identity)
            if want is None:
                if rows:
                    problems.append(f"{table} {identity}: expected no row, got {rows}")
                continue
            if len(rows) != 1:
                problems.append(f"{table} {identity}: expected one row, got {len(rows)}: {rows}")
                continue
            if isinstance(want, tuple):
                want = dict(zip(COMPACT[table], want, strict=True))
            got = {name: rows[0].get(name, "<missing>") for name in want}
            if got != want:
                problems.append(f"{table} {identity}: expected {want}, got {got}")
    assert not problems, "\n".join(problems)


def changes(r: Replayer) -> list[tuple]:
    """The drained ownership_changes as (seq, id, change, from, to, count, time) tuples."""
    return [
        (
            row["seq"],
            row["id"],
            row["change"],
            row["from_consumer"],
            row["to_consumer"],
            row["delivery_count"],
            row["delivery_time_ms"],
        )
        for row in r.drain_changes()
    ]
