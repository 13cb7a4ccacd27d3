"""The Python engine's replay of one family of stream keys (``FamilyReplay``).

The native engine's ``pelengine_native.FamilyReplay`` is the same replay in Rust (the
two give the same rows: tests/native); :mod:`pelengine.engine.udf` runs either.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

import pyarrow as pa

from pelengine.engine.errors import replay_row_error, seq_order_error
from pelengine.engine.python.arrow import column, table_batches
from pelengine.engine.python.state import dump_state, load_state, row_digest, saved_states
from pelengine.engine.python.worker_gc import collect_finished, finishing, tune_in_spark_worker
from pelengine.model.calls import Columns, Profile
from pelengine.model.replay import Replayer, command_name
from pelengine.model.snapshot import snapshot_columns
from pelengine.model.state import Counters
from pelengine.schemas import OUTCOME_COLUMNS, REPLAY_COLUMN_TYPES, STAT_COLUMNS

# the history tables whose rows carry as_of_* (the snapshot's have it already)
WITH_AS_OF = ("ownership_changes", "pel_history")

Output = Iterator[tuple[str, pa.RecordBatch]]
# (table, rows, constants of every row): output not yet made Arrow batches
_Part = tuple[str, Columns, dict[str, Any] | None]


class FamilyReplay:
    """The replay of one family of stream keys: ``feed`` it the family's input batches
    (``REPLAY_INPUT_SCHEMA`` columns) in ``seq`` order, then ``finish``; each returns
    the output rows it made as ``(table, pyarrow.RecordBatch)`` pairs, every batch of
    its table's schema (``schemas``) and at most ``OUTPUT_BATCH_ROWS`` rows.

    ``feed`` applies the batch's rows and returns the history they made (the
    ``ownership_changes``, closed ``pel_history`` versions, closed delivery segments and
    ended group incarnations) and the outcomes of the fan-out events; ``finish`` ends
    the last execution unit and returns its history, the state tables at ``as_of_ms``/
    ``as_of_seq`` (with the open ``pel_history`` versions, open delivery segments and
    live incarnations) and the outcome counters (``stats``). The model spills closed
    delivery records: what it holds follows the PEL and the stream, not the history.

    ``profile``: the resolved ``Profile`` (or a name ``get_profile`` resolves);
    ``family``: how errors name the family; ``own_groups``: in a unit of a family split
    by group, its groups (their rows only, and the rows of no group only in the
    family's lead unit); None: not split.

    A row whose ``state`` is set carries a saved model (``SAVED_STATE_TYPE``; it sorts
    first, at the last ``seq`` it applied): the first seeds the replay, later ones
    (families that new commands tie together) are merged in. ``keep_state`` (an
    incremental run): every other row is counted and digested (``agg_n``/``agg_x``,
    ``mark_n``/``mark_x`` over the rows with ``seq <= mark_seq``), and ``finish`` ends
    with the model as one ``state`` row naming ``state_key`` = (db, family)."""

    def __init__(
        self,
        profile: Profile | str,
        node_max_entries: int,
        node_max_bytes: int,
        as_of_ms: int,
        as_of_seq: int,
        family: str,
        own_groups: Collection[str] | None,
        schemas: dict[str, pa.Schema],
        *,
        keep_state: bool = False,
        mark_seq: int | None = None,
        state_key: tuple[int | None, str | None] | None = None,
    ) -> None:
        tune_in_spark_worker()
        collect_finished()  # what the replays before this one left
        self._replayer = Replayer(
            profile,
            node_max_entries=node_max_entries,
            node_max_bytes=node_max_bytes,
            spill_closed_records=True,
        )
        self._as_of_ms, self._as_of_seq = as_of_ms, as_of_seq
        self._family = family
        self._own = None if own_groups is None else frozenset(own_groups)
        self._schemas = schemas
        self._known = set(REPLAY_COLUMN_TYPES.names)
        self._keep_state = keep_state
        self._mark_seq = mark_seq
        self._state_key = state_key or (None, None)
        self._lead = True
        self._last_seq: int | None = None
        # outcomes of fan-out events: rows drained per batch, counts kept for the stats
        self._fanout_outcomes = Columns(OUTCOME_COLUMNS)
        self._fanout_counts: dict[tuple[str, str | None], int] = {}
        self._agg_n, self._agg_x, self._mark_n, self._mark_x = 0, 0, 0, 0
        self._seeded = False

    def feed(self, batch: pa.RecordBatch) -> Output:
        """Apply the rows of ``batch``; the history they made and the fan-out outcomes."""
        self._apply(batch)
        return self._batches(self._drained())

    def finish(self) -> Output:
        """End the replay: the history of its last execution unit, the state tables, the
        ``stats`` rows and (keeping state) the ``state`` row."""
        r = self._replayer
        # the family's last execution unit ends with its rows: readers it unblocked
        r.settle()
        parts = self._drained()
        tables = snapshot_columns(r, self._as_of_ms, self._as_of_seq)
        # once this replay ends, its model is garbage (see worker_gc)
        finishing(len(tables["pel"]) + len(tables["ownership"]) + 1)
        parts += [(table, self._owned(cols), None) for table, cols in tables.items()]
        parts.append(("stats", stat_columns(r, self._fanout_counts), None))
        if self._keep_state:
            # the open records were emitted as segments: the saved model counts anew
            r.restart_open_records()
            db, family = self._state_key
            row = {
                "db": db,
                "family": family,
                "applied_seq": self._last_seq,
                **dump_state(r),
                "agg_n": self._agg_n,
                "agg_x": self._agg_x,
                "mark_n": self._mark_n,
                "mark_x": self._mark_x,
            }
            parts.append(("state", Columns.from_rows(list(row), [row]), None))
        return self._batches(parts)

    def _apply(self, batch: pa.RecordBatch) -> None:
        # column by column: no dict per row, numbers through numpy
        if "lead" in batch.schema.names and batch.num_rows:
            self._lead = bool(batch.column("lead")[0].as_py())
        for seq, ts_ms, argv, db, client, fanout, marker, exec_unit, saved, silent in zip(
            column(batch, "seq"),
            column(batch, "ts_ms"),
            column(batch, "argv"),
            column(batch, "db"),
            column(batch, "client"),
            column(batch, "fanout"),
            column(batch, "marker", False),
            column(batch, "exec_unit"),
            saved_states(batch),
            column(batch, "silent", False),
            strict=True,
        ):
            if saved is not None:
                self._seed(saved, seq)
                continue
            self._row(seq, ts_ms, argv, db, client, fanout, marker, exec_unit, silent)

    def _seed(self, saved: dict[str, Any], seq: int) -> None:
        """A saved model: saved models sort first (at their last applied seq); several of
        them: families that new commands tie together, merged here."""
        loaded, n, x = load_state(saved)
        if not self._seeded:
            self._replayer, self._agg_n, self._agg_x = loaded, n, x
        else:
            self._replayer.absorb(loaded)
            self._agg_n, self._agg_x = self._agg_n + n, self._agg_x ^ x
        self._seeded = True
        self._last_seq = seq if self._last_seq is None else max(seq, self._last_seq)

    def _row(
        self,
        seq: int,
        ts_ms: int,
        argv: list[str],
        db: int,
        client: str | None,
        fanout: bool,
        marker: bool,
        exec_unit: int | None,
        silent: bool,
    ) -> None:
        """One input row."""
        r = self._replayer
        if self._last_seq is not None and seq <= self._last_seq:
            raise seq_order_error(self._family, seq, self._last_seq)
        self._last_seq = seq
        if self._keep_state:
            digest = row_digest(seq, ts_ms, argv, db, client, marker)
            self._agg_n += 1
            self._agg_x ^= digest
            if self._mark_seq is not None and seq <= self._mark_seq:
                self._mark_n += 1
                self._mark_x ^= digest
        if marker:
            r.client_activity(ts_ms, client, exec_unit)
            return
        if silent:
            # a stream-level command in a group's unit: the lead unit counts it
            counted = r.counters, r.notes
            r.counters, r.notes = Counters(), {}
        try:
            outcome = r.apply(seq, ts_ms, argv, db, client, exec_unit)
        except Exception as exc:
            event = (seq, ts_ms, argv, db)
            raise replay_row_error(self._family, event, type(exc).__name__, str(exc)) from exc
        finally:
            if silent:
                r.counters, r.notes = counted
        if silent or not fanout:
            return
        name = command_name(argv)
        r.counters.commands[name] -= 1
        kind_error = (outcome.kind, outcome.error)
        self._fanout_counts[kind_error] = self._fanout_counts.get(kind_error, 0) + 1
        self._fanout_outcomes.append(seq, name, outcome.kind, outcome.error, 1)

    def _owned(self, cols: Columns) -> Columns:
        """In a unit of a family split by group: its groups' rows, and the rows of no
        group (``streams``) only in the family's lead unit."""
        own = self._own
        if own is None:
            return cols
        if "group" in cols.names:
            groups = cols.column("group")
            keep = [i for i, group in enumerate(groups) if group in own]
            return cols if len(keep) == len(groups) else cols.subset(keep)
        return cols if self._lead else Columns(cols.names)

    def _drained(self) -> list[_Part]:
        """What the replay recorded since the last call, and the fan-out outcomes."""
        as_of = {"as_of_ms": self._as_of_ms, "as_of_seq": self._as_of_seq}
        parts: list[_Part] = [
            (table, self._owned(cols), as_of if table in WITH_AS_OF else None)
            for table, cols in self._replayer.drain_tables().items()
        ]
        parts.append(("outcome", self._fanout_outcomes.take(), None))
        return parts

    def _batches(self, parts: list[_Part]) -> Output:
        """``parts`` as Arrow batches, made as they are taken."""
        for table, cols, constants in parts:
            for batch in table_batches(table, cols, self._schemas[table], self._known, constants):
                yield table, batch


def stat_columns(replayer: Replayer, fanout: dict[tuple[str, str | None], int]) -> Columns:
    """Counters of the non-fan-out commands this replay applied, per command and outcome."""
    # Fan-out commands are counted once per event by the pipeline, from "outcome" rows.
    # The replayer's per-kind counters include them, so they are subtracted here.
    counts: dict[tuple[str, str, str | None], int] = {}
    for name, count in replayer.counters.commands.items():
        if count:
            counts[(name, "seen", None)] = count
    c = replayer.counters
    totals = {"applied": c.applied, "ignored": c.ignored}
    errors = dict(c.errors)
    for (kind, error), n in fanout.items():
        if kind in totals:
            totals[kind] -= n
        elif kind == "error" and error is not None:
            errors[error] -= n
    for kind, count in totals.items():
        if count:
            counts[("*", kind, None)] = count
    for error, count in errors.items():
        if count:
            counts[("*", "error", error)] = count
    for note, count in replayer.notes.items():
        counts[("*", "note", note)] = count
    rows = Columns(STAT_COLUMNS)
    for (cmd, kind, err), n in counts.items():
        rows.append(cmd, kind, err, n)
    return rows
