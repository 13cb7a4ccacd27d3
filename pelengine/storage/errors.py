"""The storage room's errors: a store half set up, tables by name where they cannot be,
a commit another writer's commit refused (Delta Lake's conflicts, recognised whatever
wraps them), changes a table's log cannot tell."""

from __future__ import annotations

import re


class StorageSetupError(RuntimeError):
    """The session has delta-spark's classes but not the rest it needs (or was given
    its jars too late): never answered by falling back to the embedded store."""


class DeltaSparkRequiredError(RuntimeError):
    """Tables by name were asked for in a session without delta-spark."""


class CatalogNameError(RuntimeError):
    """Tables by name in a catalog or schema the session does not have: refused before any
    work (a run never creates a schema; Spark's own ``saveAsTable`` would fail the same
    way, but only after the whole replay)."""


#: Delta Lake's exceptions for a commit that another writer's commit made impossible
#: (``io.delta.exceptions.*``), and their error classes (what Spark Connect, Databricks'
#: serverless among them, may carry alone)
_DELTA_CONFLICT = re.compile(
    r"\b(Concurrent(?:Append|DeleteRead|DeleteDelete|Transaction|Write)Exception"
    r"|MetadataChangedException|ProtocolChangedException)\b"
)
_DELTA_CONFLICT_CLASS = re.compile(
    r"\b(DELTA_CONCURRENT_(?:APPEND|DELETE_READ|DELETE_DELETE|TRANSACTION|WRITE)"
    r"|DELTA_METADATA_CHANGED|DELTA_PROTOCOL_CHANGED)\b"
)


class StoreCannotWriteError(ValueError):
    """The store this run uses cannot write a table of the output (the embedded store and a
    table with deletion vectors): refused before any work, in one sentence."""


class ConcurrentWriteError(RuntimeError):
    """Delta Lake refused a commit of this run: another writer committed to the same table
    since this run's write began (two runs on one output without a lease: catalog tables
    without a root). One sentence naming the table; the Delta exception is its cause."""

    def __init__(self, table: str, conflict: str) -> None:
        self.table = table
        self.conflict = conflict
        super().__init__(
            f"another run committed to {table} while this run was writing it, so Delta Lake "
            f"refused this run's commit ({conflict}); readers still see the last complete run: "
            "run again once the other run has finished, and keep to one run per output at a "
            "time (catalog tables without --out have no run lease: give --out as well, or "
            "schedule one run at a time)"
        )


def delta_conflict(exc: BaseException) -> str | None:
    """The name of the Delta Lake conflict exception (or error class) ``exc`` is or was
    caused by, whatever wraps it (py4j, PySpark, Spark Connect); None for any other error."""
    texts: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(texts) < 20:
        texts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    for pattern in (_DELTA_CONFLICT, _DELTA_CONFLICT_CLASS):
        for text in texts:
            match = pattern.search(text)
            if match:
                return match.group(1)
    return None


def concurrent_write_error(
    exc: BaseException, table: str | None = None
) -> ConcurrentWriteError | None:
    """``exc`` as a :class:`ConcurrentWriteError` on ``table`` when it is (or was caused
    by) a Delta Lake conflict; None otherwise."""
    if isinstance(exc, ConcurrentWriteError):
        return exc
    conflict = delta_conflict(exc)
    if conflict is None:
        return None
    return ConcurrentWriteError(table or "a Delta table of this run", conflict)


class OutputVersionError(ValueError):
    """An output root written by an earlier output contract (version 1: every row of every
    table stamped with its run's ``as_of``, no ``_runs`` table under a root path): never
    read as if it were this version's. One full recomputation (``reconstruct`` without
    ``--incremental``) rewrites it in this version."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(
            f"{where} was written by output contract version 1 ({why}), which this version "
            "of pelengine does not read or continue: run one full recomputation "
            f"(pelengine reconstruct without --incremental) into {where} to rewrite it in "
            "version 2, or write to a new --out"
        )


class ChangesUnknownError(Exception):
    """What a range of a table's versions did cannot be told from its log; the message says
    why (for the run report)."""
