"""The Python engine's router (``Router``): the columns an event batch is grouped and
fanned out by. The native engine's ``pelengine_native.Router`` computes the same columns
in Rust (tests/native/test_router_equal.py)."""

from __future__ import annotations

import pyarrow as pa

from pelengine.engine.errors import routing_row_error
from pelengine.engine.python.arrow import column
from pelengine.engine.python.worker_gc import tune_in_spark_worker
from pelengine.model.calls import Profile
from pelengine.model.replay import Replayer, command_name
from pelengine.model.routing import SCOPE_KEYS, command_group, touched_keys


class Router:
    """The router of one partition: ``route(batch)`` returns the batch with ``command``
    (the upper-cased name), ``scope``, ``families`` (the families of the keys it
    touches, first seen first), ``pre_kind``/``pre_error`` (for a row that reaches no
    stream's replay, the outcome a model that saw only such rows gives it: one model per
    router), ``group`` and ``group_only`` (``routing.command_group``) appended.

    ``profile``: the resolved ``Profile`` (or a name ``get_profile`` resolves);
    ``family_of``: ``{(db, key): family}`` of the keys that commands tie together (a key
    not in it is its own family)."""

    def __init__(self, profile: Profile | str, family_of: dict[tuple[int, str], str]) -> None:
        tune_in_spark_worker()
        self._family_of = dict(family_of)
        self._blank = Replayer(profile, record_changes=False)

    def route(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        family_of, blank = self._family_of, self._blank
        dbs = column(batch, "db")
        argvs = column(batch, "argv")
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
                event = (seq, ts_ms, argv, db)
                raise routing_row_error(event, type(exc).__name__, str(exc)) from exc
        return pa.RecordBatch.from_arrays(
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
