"""The errors a replay or a router raises about an event, worded here once for both engines.

The Python engine (:mod:`pelengine.engine.python`) raises them itself; the native core
(``pelengine_native``, Rust) hands the data of a failure (the family, the row, the seq,
what went wrong) to the functions below and raises the exception they return, so its
``SeqOrderError`` and ``ReplayRowError`` are these classes, with these words.

Not here: the model's own messages (a command's error kind, a saved model that is no
model: :mod:`pelengine.model.persist`), which belong to the model the property tests hold
equal between the engines; and what only the native face says about its own input (an
Arrow column of the wrong type or invalid data, an output schema missing, a call after a
failed one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class SeqOrderError(RuntimeError):
    """The replay saw ``seq`` go backwards: the physical plan lost the per-stream order."""


class ReplayRowError(RuntimeError):
    """The model failed on one event (a bug, not a Redis error): names the row."""


def family_label(db: int | None, family: str | None, groups: Iterable[str] | None) -> str:
    """How the errors of a replay name its family (and its groups, in a unit of a family
    split by group)."""
    return f"db={db} family={family!r}" + ("" if groups is None else f" groups={sorted(groups)}")


# an event as the errors name it: (seq, ts_ms, argv, db), as the input had them
Event = tuple[int | None, int | None, Sequence[str] | None, int | None]


def describe_row(event: Event) -> str:
    """``seq 5 (ts_ms 1000, db 0, argv ['XADD', 's', '*'])``: at most 8 arguments, each
    cut to 40 characters."""
    seq, ts_ms, argv, db = event
    shown = [a if len(a) <= 40 else a[:37] + "..." for a in (argv or [])[:8]]
    more = f" ... ({len(argv or [])} args)" if argv and len(argv) > 8 else ""
    return f"seq {seq} (ts_ms {ts_ms}, db {db}, argv {shown}{more})"


def _failed_at(who: str, event: Event, kind: str, detail: str) -> ReplayRowError:
    return ReplayRowError(f"{who} failed at the event {describe_row(event)}: {kind}: {detail}")


def seq_order_error(family: str, seq: int, last: int) -> SeqOrderError:
    return SeqOrderError(
        f"replay of {family} saw seq {seq} after {last}: events did not arrive in seq order, "
        "the tables would be wrong"
    )


def replay_row_error(family: str, event: Event, kind: str, detail: str) -> ReplayRowError:
    """The model failed on an event of ``family``'s replay: ``kind`` is the exception's
    class (the native core: ``ModelError``, or ``panic`` for a fault of the core)."""
    return _failed_at(f"replay of {family}", event, kind, detail)


def routing_row_error(event: Event, kind: str, detail: str) -> ReplayRowError:
    """The router failed on an event (as ``replay_row_error``)."""
    return _failed_at("routing", event, kind, detail)


def routing_null_argv(event: Event, index: int) -> ReplayRowError:
    """The router got an event whose argument ``index`` is null (the validation stage
    rejects such rows before routing); its argv: what was read of it."""
    return routing_row_error(event, "ValueError", f"argv element {index} is null")


def model_row_error(event: Event, kind: str, detail: str) -> ReplayRowError:
    """The model, applied one event at a time (the native ``Replayer``), failed on one."""
    return _failed_at("the model", event, kind, detail)


def replay_end_error(family: str, detail: str) -> ReplayRowError:
    """The model failed ending ``family``'s last execution unit."""
    return ReplayRowError(f"replay of {family} failed at its end: {detail}")


def snapshot_error(family: str, detail: str) -> ReplayRowError:
    """The state tables of ``family``'s model could not be rendered."""
    return ReplayRowError(f"snapshot of {family} failed: {detail}")


def event_without(family: str, column: str, event: Event) -> ValueError:
    """An event of ``family``'s replay without its ``seq`` or ``ts_ms``."""
    return ValueError(f"replay of {family}: the event {describe_row(event)} has no {column}")


def replay_null_argv(family: str, seq: int | None, index: int) -> ValueError:
    """An event of ``family``'s replay with a null argument."""
    return ValueError(f"replay of {family}: argv element {index} of seq {seq} is null")
