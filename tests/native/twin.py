"""Both engines side by side, event by event: the Python model (the reference) and the
native core (``pelengine_native.Replayer``), held to the same outcomes, counters, notes,
history rows and state tables.

``TwinReplayer`` has the Python ``Replayer``'s face (what the live differential tests
use: ``apply``, ``drain_changes``, ``snapshot_tables`` through ``twin_snapshot_tables``)
and raises ``EnginesDifferError`` the moment the native core says anything else. So every
test that replays a server's log through a twin also proves the native core equal to
the model on that log.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from pelengine.engine.udf import _arrow_schema
from pelengine.model import Replayer
from pelengine.model.calls import Columns
from pelengine.model.replay import Outcome
from pelengine.model.snapshot import snapshot_columns
from pelengine.schemas import REPLAY_COLUMN_TYPES


class EnginesDifferError(AssertionError):
    """The native core and the Python model disagree."""


class BeyondInt64Error(Exception):
    """Both engines agree that the log cannot give tables: a counter (``entries_added``,
    ``entries_read``, a delivery count) left the signed 64-bit range that every output
    column has. The native core refuses the event that does it; the Python model goes on
    with an unbounded int that no output table can hold (the Spark replay then fails
    converting it). The case ends there."""


def native_module() -> Any:
    """``pelengine_native``; a test that needs it fails (never skips) without it."""
    import pelengine_native

    return pelengine_native


_TYPES = {f.name: f for f in _arrow_schema(REPLAY_COLUMN_TYPES)}


def python_rows(cols: Columns) -> list[dict[str, Any]]:
    """Python's rows as Arrow would carry them (the types the output tables have): a value
    Arrow cannot hold (an int beyond int64) raises, as it does in the Spark replay."""
    if not len(cols):
        return []
    schema = pa.schema([_TYPES[name] for name in cols.names])
    arrays = [pa.array(col, f.type) for col, f in zip(cols.lists, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema).to_pylist()


def native_rows(batch: pa.RecordBatch | None) -> list[dict[str, Any]]:
    return [] if batch is None else batch.to_pylist()


def _canon(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def same_tables(
    where: str,
    py: dict[str, list[dict[str, Any]]],
    nat: dict[str, list[dict[str, Any]]],
) -> None:
    """Every table's rows equal (as multisets), with only non-empty tables compared by name."""
    names = {t for t, rows in py.items() if rows} | {t for t, rows in nat.items() if rows}
    for table in sorted(names):
        a, b = _canon(py.get(table, [])), _canon(nat.get(table, []))
        if a != b:
            only_py = [r for r in a if r not in b][:5]
            only_nat = [r for r in b if r not in a][:5]
            raise EnginesDifferError(
                f"{where}: table {table} differs ({len(a)} python rows, {len(b)} native rows)"
                f"\n  python only: {only_py}\n  native only: {only_nat}"
            )


class TwinReplayer:
    """The Python model and the native core fed the same events (see the module doc)."""

    def __init__(self, profile: str = "7.0", **options: Any) -> None:
        self.py = Replayer(profile, **options)
        self.nat = native_module().Replayer(profile, **options)
        self.applied = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.py, name)

    def apply(
        self,
        seq: int,
        ts_ms: int,
        argv: list[str],
        db: int | None = 0,
        client: str | None = None,
        unit: Any = ...,
    ) -> Outcome:
        try:
            out = self.py.apply(seq, ts_ms, argv, db, client, unit)
        except Exception as exc:
            # a model bug: the native core must fail on the same event
            try:
                self._native_apply(seq, ts_ms, argv, db, client, unit)
            except Exception:
                raise exc from None
            raise EnginesDifferError(
                f"seq {seq} {argv!r}: python raised {exc!r}, native did not"
            ) from exc
        try:
            kind, error = self._native_apply(seq, ts_ms, argv, db, client, unit)
        except Exception as exc:
            if "does not fit a 64-bit integer" in str(exc) and self._python_overflowed():
                raise BeyondInt64Error(str(exc)) from None
            raise EnginesDifferError(
                f"seq {seq} {argv!r}: native raised {exc!r}, python gave {out}"
            ) from exc
        if (kind, error) != (out.kind, out.error):
            raise EnginesDifferError(
                f"seq {seq} {argv!r} (db {db}, client {client!r}): python {out.kind}/"
                f"{out.error}, native {kind}/{error}"
            )
        self.applied += 1
        return out

    def _python_overflowed(self) -> bool:
        """Whether the Python model's state now holds a value no output column can."""
        try:
            for cols in snapshot_columns(self.py, 0, 0).values():
                python_rows(cols)
        except OverflowError:
            return True
        return False

    def _native_apply(
        self, seq: int, ts_ms: int, argv: list[str], db: int | None, client: str | None, unit: Any
    ) -> tuple[str, str | None]:
        if unit is ...:
            return self.nat.apply(seq, ts_ms, list(argv), db, client)  # type: ignore[no-any-return]
        return self.nat.apply(seq, ts_ms, list(argv), db, client, unit, True)  # type: ignore[no-any-return]

    def client_activity(self, ts_ms: int, client: str | None, unit: Any = ...) -> None:
        self.py.client_activity(ts_ms, client, unit)
        if unit is ...:
            self.nat.client_activity(ts_ms, client)
        else:
            self.nat.client_activity(ts_ms, client, unit, True)

    def settle(self) -> None:
        self.py.settle()
        self.nat.settle()

    def drain(self, where: str = "drain") -> dict[str, list[dict[str, Any]]]:
        """Both engines' history rows since the last drain, held equal; Python's returned."""
        py = {t: python_rows(c) for t, c in self.py.drain_tables().items()}
        nat = {t: native_rows(b) for t, b in self.nat.drain_tables().items()}
        same_tables(where, py, nat)
        return py

    def drain_changes(self) -> list[dict[str, Any]]:
        """``ownership_changes`` rows since the last call (the other history tables are
        drained too, and compared)."""
        return self.drain("drain_changes")["ownership_changes"]

    def snapshot(self, as_of_ms: int, as_of_seq: int) -> dict[str, list[dict[str, Any]]]:
        """Both engines' state tables, held equal, with their counters and notes."""
        py = {t: python_rows(c) for t, c in snapshot_columns(self.py, as_of_ms, as_of_seq).items()}
        nat = {t: native_rows(b) for t, b in self.nat.snapshot(as_of_ms, as_of_seq).items()}
        same_tables(f"snapshot at seq {as_of_seq}", py, nat)
        self.same_counters()
        return py

    def same_counters(self) -> None:
        c = self.py.counters
        py = {
            "applied": c.applied,
            "ignored": c.ignored,
            "failed": c.failed,
            "errors": {k: v for k, v in c.errors.items() if v},
            "commands": {k: v for k, v in c.commands.items() if v},
        }
        got = dict(self.nat.counters())
        got["errors"] = {k: v for k, v in got["errors"].items() if v}
        got["commands"] = {k: v for k, v in got["commands"].items() if v}
        if py != got:
            raise EnginesDifferError(f"counters differ: python {py}, native {got}")
        if dict(self.py.notes) != dict(self.nat.notes()):
            raise EnginesDifferError(
                f"notes differ: python {self.py.notes}, native {self.nat.notes()}"
            )


def twin_snapshot_tables(
    replayer: Any, as_of_ms: int, as_of_seq: int
) -> dict[str, list[dict[str, Any]]]:
    """``snapshot_tables`` for a Python ``Replayer`` or a ``TwinReplayer`` (then held equal)."""
    if isinstance(replayer, TwinReplayer):
        return replayer.snapshot(as_of_ms, as_of_seq)
    from pelengine.model import snapshot_tables

    return snapshot_tables(replayer, as_of_ms, as_of_seq)
