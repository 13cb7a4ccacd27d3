"""The native (Rust) replay core of pelengine: its Python face, the native engine.

``Router`` and ``FamilyReplay`` have the Python engine's interface
(``pelengine.engine.python``). ``profile``: the resolved ``pelengine.model.Profile``, or
a name ``pelengine.model.get_profile`` resolves. The exceptions are pelengine's own.
"""

from typing import Any

import pyarrow as pa

from pelengine.engine.errors import ReplayRowError as ReplayRowError
from pelengine.engine.errors import SeqOrderError as SeqOrderError
from pelengine.model.calls import Profile
from pelengine.model.persist import StateError as StateError
from pelengine.model.persist import StateVersionError as StateVersionError

__version__: str
ENGINE: str
ABI: int

def row_digest(
    seq: int,
    ts_ms: int,
    argv: list[str] | None,
    db: int | None,
    client: str | None,
    marker: bool | None,
) -> int:
    """The Python engine's ``row_digest``: the 63-bit digest of one replayed row."""

def spark_digest(batch: pa.RecordBatch) -> tuple[int, int, int, int | None]:
    """Spark's ``xxhash64`` of an events batch's rows (``pelengine.local.digest``): rows
    with a seq, the XOR of their hashes, rows without one, the largest seq."""

class Router:
    """``pelengine.engine.python.Router`` in Rust: the same columns appended."""

    def __init__(self, profile: Profile | str, family_of: dict[tuple[int, str], str]) -> None: ...
    def route(self, batch: pa.RecordBatch) -> pa.RecordBatch: ...

def _overflow_for_test(n: int) -> int:
    """``i64::MAX + n`` inside the core's panic guard (a test hook): ``n > 0`` raises
    ``RuntimeError`` (an overflow panic caught), never wraps, never aborts."""

class FamilyReplay:
    """``pelengine.engine.python.FamilyReplay`` in Rust: the same rows."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """The arguments of ``pelengine.engine.python.FamilyReplay``."""
    def feed(self, batch: pa.RecordBatch) -> list[tuple[str, pa.RecordBatch]]: ...
    def finish(self) -> list[tuple[str, pa.RecordBatch]]: ...

class Replayer:
    """The model one event at a time (the Python ``Replayer``'s face)."""

    def __init__(
        self,
        profile: Profile | str,
        *,
        record_changes: bool = True,
        node_max_entries: int = 100,
        node_max_bytes: int = 4096,
        spill_closed_records: bool = False,
    ) -> None: ...
    def apply(
        self,
        seq: int,
        ts_ms: int,
        argv: list[str],
        db: int | None = 0,
        client: str | None = None,
        unit: int | None = None,
        unit_known: bool = False,
    ) -> tuple[str, str | None]: ...
    def client_activity(
        self, ts_ms: int, client: str | None, unit: int | None = None, unit_known: bool = False
    ) -> None: ...
    def settle(self) -> None: ...
    def drain_tables(self) -> dict[str, pa.RecordBatch]: ...
    def snapshot(self, as_of_ms: int, as_of_seq: int) -> dict[str, pa.RecordBatch]: ...
    def counters(self) -> dict[str, Any]: ...
    def notes(self) -> dict[str, int]: ...
    def restart_open_records(self) -> None: ...
