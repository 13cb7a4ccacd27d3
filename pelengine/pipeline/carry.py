"""What an incremental run continues from (see pelengine.runs.incremental)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame


@dataclass
class Carry:
    """What an incremental run continues from: the state after the events up to
    ``high_seq`` (see :mod:`pelengine.runs.incremental`). ``reconstruct`` then replays only
    the events it is given (those after ``high_seq``) and carries the rest over."""

    high_seq: int
    as_of_ms: int | None
    as_of_seq: int | None
    family_of: dict[tuple[int, str], str]  # keys tied into one family so far
    states: DataFrame  # db, family, applied_seq, state_version, state, agg_n, agg_x
    previous: dict[str, DataFrame]  # every output table as it is now (+ rejected_events)
    waits: list[tuple[str, int, str]]  # (client, db, family) of every blocking read so far
    select_db: int = 0  # the db of the last SELECT (for rows that carry none)
    open_units: dict[str, int | None] = field(default_factory=dict)  # 7.2+ MULTI left open
