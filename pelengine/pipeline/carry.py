"""What an incremental run continues from (see pelengine.runs.incremental), and how it
carries over what it does not replay: saved states renamed into the families they were
merged into, the previous ``delivery_counts`` rows of the replayed families as their
first segments, every other family's rows of the snapshot tables; and which rows of the
history tables a night writes."""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pelengine.model.delivery import (
    INCARNATION_IDENTITY,
    PRIOR_SEGMENT_N,
    SEGMENT_COLUMNS,
    SEGMENT_IDENTITY,
)
from pelengine.schemas import SNAPSHOT_TABLES


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
    # the (db, family) of every row of ``states``, when read with them (else collected)
    family_keys: set[tuple[int, str]] | None = None


def rename_families(states: DataFrame, renamed: dict[tuple[int, str], str]) -> DataFrame:
    """Saved state rows under the names of the families they were merged into."""
    return _mapped(states, "family", renamed, "family")


def prior_segments(
    old: DataFrame, segments: DataFrame, incarnations: DataFrame, high_seq: int
) -> DataFrame:
    """The previous ``delivery_counts`` rows this run can change, as segments that come
    before any of this run's: the rows of the entries that have one of this run's
    ``segments``, and every row of a group incarnation a RENAME of this run moved.

    Both come only from the families this run replays (a group incarnation, named by the
    seq of the command that created it, lives in one family). Any other previous row
    would merge alone into itself, its ``changed_seq`` at most ``high_seq``:
    :func:`changed_rows` would drop it. So the history is scanned once and only the
    entries this run touched are aggregated again."""
    touched = segments.select(*SEGMENT_IDENTITY).distinct().withColumn("_touched", F.lit(True))
    moved = (
        incarnations.filter(F.col("moved_seq") > F.lit(high_seq))
        .select(*INCARNATION_IDENTITY)
        .distinct()
        .withColumn("_moved", F.lit(True))
    )
    rows = (
        old.join(touched, list(SEGMENT_IDENTITY), "left")
        .join(F.broadcast(moved), list(INCARNATION_IDENTITY), "left")
        .filter(F.col("_touched") | F.col("_moved"))
    )
    return rows.select(
        *(c for c in SEGMENT_COLUMNS if c != "segment_n"),
        F.lit(PRIOR_SEGMENT_N).cast("long").alias("segment_n"),
        # the row this run replaces is not pending (see PENDING_ONLY)
        (F.col("status") != F.lit("pending")).alias(PRIOR_CLOSED),
    )


def carry_tables(
    new: dict[str, DataFrame],
    carry: Carry,
    family_of: dict[tuple[int, str], str],
    replayed: DataFrame,
    as_of_ms: int | None,
    as_of_seq: int | None,
) -> dict[str, DataFrame]:
    """Each output table of an incremental run. Snapshot tables (``pel``, ``ownership``,
    ``groups``, ``streams``): the replayed families' new rows and the previous rows of
    every other family, with this run's ``as_of`` (and ``idle_ms``), as a full run would
    give them. History tables: the rows of the replayed families only (what the run
    writes of them is what changed, :func:`changed_rows`); the rows no new command
    touched stay where they are."""
    out: dict[str, DataFrame] = {}
    for name, fresh in new.items():
        old = carry.previous.get(name)
        if old is None or name not in SNAPSHOT_TABLES:
            out[name] = fresh
            continue
        cols = list(fresh.columns)
        kept = _family_column(old, family_of).join(replayed, ["db", "family"], "left_anti")
        kept = kept.withColumn("as_of_ms", F.lit(as_of_ms).cast("long")).withColumn(
            "as_of_seq", F.lit(as_of_seq).cast("long")
        )
        if "idle_ms" in cols:
            kept = kept.withColumn(
                "idle_ms", F.lit(as_of_ms).cast("long") - F.col("delivery_time_ms")
            )
        out[name] = fresh.unionByName(kept.select(*cols))
    return out


#: What identifies a row of each history table, for the rows a night replaces
#: (:func:`changed_rows`): a delivery_counts row is one entry in one group incarnation
#: (its key moves with a RENAME); a pel_history row replaced is the open version of its
#: entry; ownership_changes and rejected_events rows are only ever added.
HISTORY_KEYS: dict[str, tuple[str, ...]] = {
    "delivery_counts": ("db", "group", "group_created_seq", "id"),
    "pel_history": ("db", "key", "group", "id"),
}
#: The target rows a night's pel_history row replaces: its entry's open version (the
#: table's ``is_current`` partition; an output written before it had that column: the
#: same rows, found by their null ``valid_to_seq``).
PEL_HISTORY_REPLACES = "t.is_current = true"
PEL_HISTORY_REPLACES_UNPARTITIONED = "t.valid_to_seq IS NULL"
#: A night's delivery_counts rows carry this flag (not written): the previous row this run
#: replaces is closed (an entry delivered again after it left the PEL, or every row of a
#: group a RENAME moved). When no row has it, every row the night replaces is pending, and
#: the merge meets only the ``pending`` partition of the table (``PENDING_ONLY``), the size
#: of the live PELs, instead of the whole history.
PRIOR_CLOSED = "_prior_closed"
PENDING_ONLY = "t.status = 'pending'"


def changed_rows(name: str, rows: DataFrame, high_seq: int) -> DataFrame:
    """The rows of history table ``name`` an incremental run writes: those made or changed
    by a command after ``high_seq`` (the replayed families' rows no new command touched
    are already in the table as they are)."""
    if name == "delivery_counts":
        return rows.filter(F.col("changed_seq") > high_seq)
    if name == "pel_history":
        # a version still open that began before: unchanged
        return rows.filter((F.col("valid_from_seq") > high_seq) | F.col("valid_to_seq").isNotNull())
    if name in ("ownership_changes", "rejected_events"):
        return rows.filter(F.col("seq").isNull() | (F.col("seq") > high_seq))
    raise ValueError(f"{name} is not a history table")


def _family_column(df: DataFrame, family_of: dict[tuple[int, str], str]) -> DataFrame:
    """``df`` (with db, key) plus ``family``: its family (the key itself unless tied)."""
    if not family_of:
        return df.withColumn("family", F.col("key"))
    return _mapped(df, "key", family_of, "family")


def _mapped(
    df: DataFrame, column: str, mapping: dict[tuple[int, str], str], into: str
) -> DataFrame:
    """``df`` (with db and ``column``) with ``into`` set to what ``mapping`` maps
    ``(db, column)`` to, or to ``column`` itself where it maps nothing."""
    table = df.sparkSession.createDataFrame(
        [(db, name, to) for (db, name), to in mapping.items()],
        f"db int, {column} string, _to string",
    )
    return (
        df.join(F.broadcast(table), ["db", column], "left")
        .withColumn(into, F.coalesce(F.col("_to"), F.col(column)))
        .drop("_to")
    )
