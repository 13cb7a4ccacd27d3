"""The Arrow functions Spark runs on executors: routing and the grouped replay.

Both factories capture only plain values (profile name, times, a dict), so
what Spark ships to the executors is small and does not depend on the driver's session.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from pelengine.model import persist
from pelengine.model.replay import Replayer, command_name
from pelengine.model.routing import SCOPE_KEYS, command_group, linked_keys, touched_keys
from pelengine.model.state import Counters
from pelengine.schemas import REPLAY_OUTPUT_SCHEMA

OUTPUT_BATCH_ROWS = 8192


def _arrow_schema(spark_schema: Any) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema)


LINKS_ARROW_SCHEMA = pa.schema([("db", pa.int32()), ("links", pa.list_(pa.string()))])


def links_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """For RENAME/XREADGROUP rows: the keys that must share one replay (mapInArrow)."""
    for batch in batches:
        dbs = batch.column("db").to_pylist()
        argvs = batch.column("argv").to_pylist()
        out_db: list[int] = []
        out_links: list[list[str]] = []
        for db, argv in zip(dbs, argvs, strict=True):
            links = linked_keys(argv)
            if links:
                out_db.append(db)
                out_links.append(links)
        if out_db:
            yield pa.RecordBatch.from_arrays(
                [pa.array(out_db, pa.int32()), pa.array(out_links, pa.list_(pa.string()))],
                schema=LINKS_ARROW_SCHEMA,
            )


class ReplayRowError(RuntimeError):
    """The model failed on one event (a bug, not a Redis error): names the row."""


def _describe_row(seq: int | None, ts_ms: int | None, argv: list[str] | None, db: int) -> str:
    shown = [a if len(a) <= 40 else a[:37] + "..." for a in (argv or [])[:8]]
    more = f" ... ({len(argv or [])} args)" if argv and len(argv) > 8 else ""
    return f"seq {seq} (ts_ms {ts_ms}, db {db}, argv {shown}{more})"


def make_router(
    profile: str, family_of: dict[tuple[int, str], str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A mapInArrow function adding ``scope``, ``families``, the consumer group the
    command names (``group``, ``group_only``: see ``command_group``) and, for rows that
    reach no stream, the outcome a fresh model gives them (``pre_kind``/``pre_error``)."""

    def route(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        blank = Replayer(profile, record_changes=False)
        for batch in batches:
            dbs = batch.column("db").to_pylist()
            argvs = batch.column("argv").to_pylist()
            scopes: list[str] = []
            families: list[list[str]] = []
            commands: list[str] = []
            kinds: list[str | None] = []
            errors: list[str | None] = []
            groups: list[str | None] = []
            group_only: list[bool] = []
            for i, (db, argv) in enumerate(zip(dbs, argvs, strict=True)):
                try:
                    scope, keys = touched_keys(argv)
                    scopes.append(scope)
                    commands.append(command_name(argv))
                    fams = list(dict.fromkeys(family_of.get((db, k), k) for k in keys))
                    families.append(fams)
                    group, only = command_group(argv)
                    groups.append(group)
                    group_only.append(only)
                    if scope != SCOPE_KEYS:
                        outcome = blank.apply(0, 0, argv, db)
                        kinds.append(outcome.kind)
                        errors.append(outcome.error)
                    else:
                        kinds.append(None)
                        errors.append(None)
                except Exception as exc:
                    seq, ts_ms = (
                        batch.column(c)[i].as_py() if c in batch.schema.names else None
                        for c in ("seq", "ts_ms")
                    )
                    raise ReplayRowError(
                        f"routing failed at the event {_describe_row(seq, ts_ms, argv, db)}: "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
            yield pa.RecordBatch.from_arrays(
                [
                    *batch.columns,
                    pa.array(commands, pa.string()),
                    pa.array(scopes, pa.string()),
                    pa.array(families, pa.list_(pa.string())),
                    pa.array(kinds, pa.string()),
                    pa.array(errors, pa.string()),
                    pa.array(groups, pa.string()),
                    pa.array(group_only, pa.bool_()),
                ],
                names=[
                    *batch.schema.names,
                    "command",
                    "scope",
                    "families",
                    "pre_kind",
                    "pre_error",
                    "group",
                    "group_only",
                ],
            )

    return route


class SeqOrderError(RuntimeError):
    """The replay saw ``seq`` go backwards: the physical plan lost the per-stream order."""


def make_replay_function(
    profile: str,
    as_of_ms: int,
    as_of_seq: int,
    node_max_entries: int = 100,
    node_max_bytes: int = 4096,
    *,
    keep_state: bool = False,
    mark_seq: int | None = None,
    unit_groups: dict[tuple[int, str, str], list[str]] | None = None,
) -> Callable[[tuple[Any, ...], Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The grouped (iterator-form) Arrow UDF replaying one family of stream keys.

    ``node_max_entries``/``node_max_bytes`` are the server's ``stream-node-max-*``
    settings (they decide what ``MAXLEN ~``/``MINID ~`` can drop).

    ``keep_state`` (incremental runs): a row whose ``state`` column is set carries the
    family's saved model (it sorts first: its ``seq`` is the last one applied) and the
    replay continues from it; at the end the model is emitted as a ``state`` row
    (``state_version`` and ``state``: the plain data of ``pelengine.model.persist``,
    docs/state.md), with the count and an order-free digest of every row the
    family has received (``agg_n``/``agg_x``, so that changed history can be named);
    ``mark_n``/``mark_x`` are the same over the rows with ``seq <= mark_seq`` only.

    Input batches hold the family's events in ``seq`` order; output rows are
    the ``ownership_changes``, closed ``pel_history`` versions, closed delivery
    segments, ended group incarnations and fan-out outcomes as they happen (drained
    after every input batch), then the final state tables (with the open
    ``pel_history`` versions, open delivery segments and live incarnations) and the
    outcome counters, all in the wide ``REPLAY_OUTPUT_SCHEMA``. The model spills
    closed delivery records (``spill_closed_records``): what it holds follows the
    PEL and the stream, not the history; the pipeline merges the segments into
    ``delivery_counts``.
    """
    schema = _arrow_schema(REPLAY_OUTPUT_SCHEMA)
    groups_of = {k: frozenset(v) for k, v in (unit_groups or {}).items()}
    as_of = {"as_of_ms": as_of_ms, "as_of_seq": as_of_seq}

    def emit(table: str, rows: list[dict[str, Any]]) -> Iterator[pa.RecordBatch]:
        for start in range(0, len(rows), OUTPUT_BATCH_ROWS):
            chunk = rows[start : start + OUTPUT_BATCH_ROWS]
            for row in chunk:
                row["table"] = table
            yield pa.RecordBatch.from_pylist(chunk, schema=schema)

    def replay(
        key: tuple[pa.Scalar, ...], batches: Iterator[pa.RecordBatch]
    ) -> Iterator[pa.RecordBatch]:
        def own_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            """In a unit of a family split by group: its groups' rows, and the rows of
            no group (``streams``) only in the family's lead unit."""
            if own is None:
                return rows
            if rows and "group" in rows[0]:
                return [r for r in rows if r["group"] in own]
            return rows if lead else []

        def drained() -> Iterator[pa.RecordBatch]:
            """What the replay recorded since the last call, as output rows."""
            changes = own_rows(replayer.drain_changes())
            for row in changes:
                row.update(as_of)
            yield from emit("ownership_changes", changes)
            versions = own_rows(replayer.drain_pel_history())
            for row in versions:
                row.update(as_of)
            yield from emit("pel_history", versions)
            yield from emit("delivery_segments", own_rows(replayer.drain_delivery_segments()))
            yield from emit("group_incarnations", own_rows(replayer.drain_group_incarnations()))

        replayer = Replayer(
            profile,
            node_max_entries=node_max_entries,
            node_max_bytes=node_max_bytes,
            spill_closed_records=True,
        )
        unit = key[2].as_py() if len(key) > 2 else None
        own = None if unit is None else groups_of[(key[0].as_py(), key[1].as_py(), unit)]
        family = f"db={key[0].as_py()} family={key[1].as_py()!r}" + (
            "" if own is None else f" groups={sorted(own)}"
        )
        lead = True
        last_seq: int | None = None
        # outcomes of fan-out events: rows drained per batch, counts kept for the stats
        fanout_outcomes: list[dict[str, Any]] = []
        fanout_counts: dict[tuple[str, str | None], int] = {}
        agg_n, agg_x, mark_n, mark_x = 0, 0, 0, 0
        seeded = False
        for batch in batches:
            states = saved_states(batch)
            cols = batch.select([n for n in batch.schema.names if n != "state"]).to_pydict()
            markers = cols.get("marker") or [False] * batch.num_rows
            exec_units = cols.get("exec_unit") or [None] * batch.num_rows
            silents = cols.get("silent") or [False] * batch.num_rows
            if "lead" in cols and batch.num_rows:
                lead = bool(cols["lead"][0])
            for seq, ts_ms, argv, db, client, fanout, marker, exec_unit, saved, silent in zip(
                cols["seq"],
                cols["ts_ms"],
                cols["argv"],
                cols["db"],
                cols["client"],
                cols["fanout"],
                markers,
                exec_units,
                states,
                silents,
                strict=True,
            ):
                if saved is not None:
                    # saved models sort first (at their last applied seq); several of
                    # them: families that new commands tie together, merged here
                    loaded, n, x = load_state(saved)
                    if not seeded:
                        replayer, agg_n, agg_x = loaded, n, x
                    else:
                        replayer.absorb(loaded)
                        agg_n, agg_x = agg_n + n, agg_x ^ x
                    seeded = True
                    last_seq = seq if last_seq is None else max(seq, last_seq)
                    continue
                if last_seq is not None and seq <= last_seq:
                    raise SeqOrderError(
                        f"replay of {family} saw seq {seq} after {last_seq}: events did not "
                        "arrive in seq order, the tables would be wrong"
                    )
                last_seq = seq
                if keep_state:
                    digest = row_digest(seq, ts_ms, argv, db, client, marker)
                    agg_n += 1
                    agg_x ^= digest
                    if mark_seq is not None and seq <= mark_seq:
                        mark_n += 1
                        mark_x ^= digest
                if marker:
                    replayer.client_activity(ts_ms, client, exec_unit)
                    continue
                if silent:
                    # a stream-level command in a group's unit: the lead unit counts it
                    counted = replayer.counters, replayer.notes
                    replayer.counters, replayer.notes = Counters(), {}
                try:
                    outcome = replayer.apply(seq, ts_ms, argv, db, client, exec_unit)
                except Exception as exc:
                    raise ReplayRowError(
                        f"replay of {family} failed at the event "
                        f"{_describe_row(seq, ts_ms, argv, db)}: {type(exc).__name__}: {exc}"
                    ) from exc
                finally:
                    if silent:
                        replayer.counters, replayer.notes = counted
                if silent:
                    continue
                if fanout:
                    replayer.counters.commands[command_name(argv)] -= 1
                    kind_error = (outcome.kind, outcome.error)
                    fanout_counts[kind_error] = fanout_counts.get(kind_error, 0) + 1
                    fanout_outcomes.append(
                        {
                            "seq": seq,
                            "stat_command": command_name(argv),
                            "stat_kind": outcome.kind,
                            "stat_error": outcome.error,
                            "stat_count": 1,
                        }
                    )
            yield from drained()
            yield from emit("outcome", fanout_outcomes)
            fanout_outcomes = []
        # the family's last execution unit ends with its rows: readers it unblocked
        replayer.settle()
        yield from drained()
        for table, rows in replayer.snapshot(as_of_ms, as_of_seq).items():
            yield from emit(table, own_rows(rows))
        yield from emit("stats", _stat_rows(replayer, fanout_counts))
        if keep_state:
            # the open records were emitted as segments: the saved model counts anew
            replayer.restart_open_records()
            yield from emit(
                "state",
                [
                    {
                        "db": key[0].as_py(),
                        "family": key[1].as_py(),
                        "applied_seq": last_seq,
                        **dump_state(replayer),
                        "agg_n": agg_n,
                        "agg_x": agg_x,
                        "mark_n": mark_n,
                        "mark_x": mark_x,
                    }
                ],
            )

    return replay


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


def _stat_rows(
    replayer: Replayer, fanout: dict[tuple[str, str | None], int]
) -> list[dict[str, Any]]:
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
    return [
        {"stat_command": cmd, "stat_kind": kind, "stat_error": err, "stat_count": n}
        for (cmd, kind, err), n in counts.items()
    ]
