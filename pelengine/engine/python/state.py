"""A family's saved model in and out of the replay's columns (incremental runs), and the
digest of every row a family received.

The native engine reads and writes the same plain data (``pelengine.model.persist``,
docs/state.md), so a model either engine saved loads in the other; its ``row_digest``
is this one's, held equal by tests/native/test_state_native.py.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa

from pelengine.model import persist
from pelengine.model.replay import Replayer


def dump_state(replayer: Replayer) -> dict[str, Any]:
    """A family's model between runs: its ``state_version`` and ``state`` columns."""
    return persist.dump(replayer)


def saved_states(batch: pa.RecordBatch) -> list[dict[str, Any] | None]:
    """The ``state`` column of the replay's input as Python (None where null): each
    section converted column by column (Arrow converts nested structs row by row,
    several times slower)."""
    if "state" not in batch.schema.names:
        return [None] * batch.num_rows
    column = batch.column("state")
    out: list[dict[str, Any] | None] = [None] * batch.num_rows
    if column.null_count == len(column):
        return out
    with persist.bulk():
        for i in range(len(column)):
            if column[i].is_valid:
                out[i] = _saved_state(column.slice(i, 1))
    return out


def _saved_state(saved: pa.StructArray) -> dict[str, Any]:
    """One saved state (a ``SAVED_STATE_TYPE`` array of length 1) as Python."""
    state = saved.field("state")
    sections: dict[str, Any] | None = None
    if state[0].is_valid:
        sections = {}
        for field, rows in zip(state.type, state.flatten(), strict=True):
            if not rows[0].is_valid:
                sections[field.name] = None
                continue
            values = rows.flatten()
            names = [f.name for f in values.type]
            fields = [child.to_pylist() for child in values.flatten()]
            rows_of = zip(*fields, strict=True)
            sections[field.name] = [dict(zip(names, v, strict=True)) for v in rows_of]
    return {
        "state_version": saved.field("state_version")[0].as_py(),
        "state": sections,
        "agg_n": saved.field("agg_n")[0].as_py(),
        "agg_x": saved.field("agg_x")[0].as_py(),
    }


def load_state(saved: dict[str, Any]) -> tuple[Replayer, int, int]:
    """The Replayer of a seed row's ``state`` (``SAVED_STATE_TYPE``), with this run's
    counters zeroed, and the family's ``agg_n``/``agg_x``."""
    replayer = persist.load({"state_version": saved["state_version"], "state": saved["state"]})
    replayer.reset_counters()
    return replayer, saved["agg_n"], saved["agg_x"]


def row_digest(
    seq: int, ts_ms: int, argv: list[str] | None, db: int, client: str | None, marker: bool
) -> int:
    """A stable 63-bit digest of one replayed row (XOR-ed into a family's ``agg_x``)."""
    text = repr((seq, ts_ms, argv, db, client, bool(marker))).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") >> 1
