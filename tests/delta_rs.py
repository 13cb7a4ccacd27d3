"""A Delta table's rows read by delta-rs itself, not by pelengine's reader: through its
own scan, which honours deletion vectors (delta-spark gives them to the tables nights
merge into; ``to_pyarrow_table`` refuses such tables)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa


def delta_rs_table(path: str | Path, version: int | None = None) -> pa.Table:
    """The Delta table at ``path`` (its newest version, or ``version``), as one Arrow
    table."""
    from deltalake import DeltaTable

    return pa.table(DeltaTable(str(path), version=version).scan())
