"""What changed in a table between two versions (for incremental runs): the data files
the commits added and removed, from the Delta log read as files, or from Delta or
delta-rs where it cannot be; and the rows to compare."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pelengine.storage.choice import EMBEDDED, storage_mode
from pelengine.storage.deltalog import DataFile, TableState
from pelengine.storage.errors import ChangesUnknownError
from pelengine.storage.names import Table, TableRef
from pelengine.storage.paths import local_path
from pelengine.storage.reads import read_table, read_table_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class TableChanges:
    """What the commits after version ``since`` up to ``until`` did to a table, and which
    rows to read to know it.

    ``added``/``removed``: the data files the newer snapshot holds that the older did not and
    the reverse, each known by its path and deletion vector. An append only adds; a DELETE,
    UPDATE, MERGE, OPTIMIZE or overwrite removes the files it rewrote and adds their new
    versions; with deletion vectors a row-level change removes a file with one vector and
    adds it back with another.

    The rows to compare: those of ``read_new`` at ``until`` with those of ``read_old`` at
    ``since`` (None: no row can be gone: appends, and rewrites that change no data such as
    OPTIMIZE, which are not read at all), or with ``change_feed`` delta-spark's change
    data feed. ``how``: ``commit files`` (the Delta log read as files: local paths),
    ``spark snapshots`` (Delta through Spark: tables by name, paths this process cannot
    read) or ``delta-rs snapshots`` (the embedded store, such paths). ``note``: what else
    the report should say. ``state_new``/``state_old``: the table's metadata and protocol
    at both ends (from the log)."""

    since: int
    until: int
    added: tuple[DataFile, ...] = ()
    removed: tuple[DataFile, ...] = ()
    change_feed: bool = False
    read_new: tuple[DataFile, ...] = ()
    read_old: tuple[DataFile, ...] | None = None
    how: str = "commit files"
    note: str = ""
    state_new: TableState | None = None
    state_old: TableState | None = None

    @property
    def files_read(self) -> int:
        return len(self.read_new) + len(self.read_old or ())


def expected_rows(files: tuple[DataFile, ...] | None) -> int | None:
    """The rows ``files`` hold by the log's statistics (None: some file has none)."""
    counts = [f.rows for f in files or ()]
    return None if any(c is None for c in counts) else sum(c or 0 for c in counts)


def table_changes(spark: SparkSession, ref: TableRef, since: int, until: int) -> TableChanges:
    """What versions ``since+1 .. until`` of the table did (:class:`TableChanges`), from its
    Delta log read as files for a local path (either store), else from Delta through Spark
    (delta-spark) or delta-rs' snapshots (embedded). ChangesUnknownError, saying why, when the log
    cannot tell: a commit of the range is no longer in the log (log retention), a file
    the range removed is gone (vacuumed), or (Spark's route) deletion vectors are on."""
    if since >= until:
        raise ChangesUnknownError(f"events version {until} does not follow {since}")
    local = local_path(ref) if isinstance(ref, str) else None
    if local is not None:
        from pelengine.storage.deltalog import has_log

        table_dir = os.path.abspath(local)
        if has_log(table_dir):
            return _log_changes(spark, table_dir, since, until)
    if isinstance(ref, str) and storage_mode(spark) == EMBEDDED:
        return _embedded_changes(ref, since, until)
    return _delta_spark_changes(spark, ref, since, until)


def table_changes_sessionless(ref: str, since: int, until: int) -> TableChanges:
    """:func:`table_changes` without a Spark session, as the embedded store finds them
    (the local runner's nights): the commit files of a local table, else delta-rs'
    snapshots."""
    if since >= until:
        raise ChangesUnknownError(f"events version {until} does not follow {since}")
    local = local_path(ref)
    if local is not None:
        from pelengine.storage.deltalog import has_log

        table_dir = os.path.abspath(local)
        if has_log(table_dir):
            return _log_changes(None, table_dir, since, until)
    return _embedded_changes(ref, since, until)


def _log_changes(
    spark: SparkSession | None, table_dir: str, since: int, until: int
) -> TableChanges:
    """:func:`table_changes` from the commit files of a local table (no Spark job).

    Appends and data-preserving rewrites (OPTIMIZE: ``dataChange`` false) only: the rows are
    those of the files the commits added rows with, nothing else is read. When a commit
    removed rows (DELETE, UPDATE, MERGE, overwrite), or a file added with rows was rewritten
    again within the range: on delta-spark with the change data feed on for every commit
    of the range, the feed (only the changed rows: files written for it, or the difference
    of two deletion vectors); otherwise every file added against every file removed."""
    from pelengine.storage.deltalog import LogUnreadableError, gone_files, read_changes, spans

    try:
        log = read_changes(table_dir, since, until)
    except LogUnreadableError as exc:
        raise ChangesUnknownError(str(exc)) from None
    versions = f"{since + 1}..{until}"
    gone = gone_files(table_dir, log.removed)
    if gone:
        raise ChangesUnknownError(
            f"{len(gone)} file(s) that events versions {versions} removed are gone from "
            f"storage (vacuumed), {gone[0]} among them: the rows they held cannot be compared"
        )
    embedded = spark is None or storage_mode(spark) == EMBEDDED
    if embedded:
        from pelengine.storage.embedded import SCAN_ONLY_FEATURES

        uses: set[str] = set()
        for state in (log.state_since, log.state_until):
            if state is not None:
                uses |= state.reader_features & SCAN_ONLY_FEATURES
                if state.column_mapping:
                    uses.add("columnMapping")
        if uses and (log.added or log.removed):
            raise ChangesUnknownError(
                f"the table uses {', '.join(sorted(uses))}, and the embedded store reads "
                "such tables whole, not file by file"
            )
    base = TableChanges(
        since,
        until,
        log.added,
        log.removed,
        state_new=log.state_until,
        state_old=log.state_since,
    )
    if not log.rows_removed and log.appends_kept:
        return replace(base, read_new=tuple(f for f in log.added if f.data_change))
    if not embedded and log.rows_removed and not log.feed_off:
        return replace(base, change_feed=True)
    note = ""
    if not embedded and log.rows_removed and len(log.feed_off) < until - since:
        note = f"the change data feed was off for events versions {spans(log.feed_off)}"
    return replace(base, read_new=log.added, read_old=log.removed or None, note=note)


def _embedded_changes(ref: str, since: int, until: int) -> TableChanges:
    """The embedded store, a table this process cannot read as files (an object store):
    delta-rs' snapshots' file lists."""
    from pelengine.storage.embedded import normalize_table_uri, snapshot_files

    uri = normalize_table_uri(ref)
    try:
        old, new = snapshot_files(uri, since), snapshot_files(uri, until)
    except Exception as exc:
        raise ChangesUnknownError(
            f"delta-rs could not list the files of version {since} or {until}: {_first_line(exc)}"
        ) from None
    if old is None or new is None:
        raise ChangesUnknownError(
            f"delta-rs cannot list versions {since} and {until} file by file (a version "
            "is no longer in the log, or the table uses deletion vectors)"
        )
    return _snapshot_changes(since, until, old, new, "delta-rs snapshots")


def _snapshot_changes(
    since: int, until: int, old: set[str], new: set[str], how: str
) -> TableChanges:
    """The changes between two snapshots' file lists (``old`` at ``since``, ``new`` at
    ``until``): the files only ``new`` has were added, those only ``old`` has removed."""
    added = tuple(DataFile(p) for p in sorted(new - old))
    removed = tuple(DataFile(p) for p in sorted(old - new))
    return TableChanges(
        since, until, added, removed, read_new=added, read_old=removed or None, how=how
    )


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _delta_spark_changes(
    spark: SparkSession, ref: TableRef, since: int, until: int
) -> TableChanges:
    """delta-spark through Spark (a table by name, a path this process cannot read): the
    change data feed where the table has it on now, else the snapshots' file lists
    (``inputFiles``), which cannot see row-level changes when deletion vectors are on."""
    from pelengine.storage.deltalog import hadoop_uri

    name = ref.name if isinstance(ref, Table) else "delta.`" + ref.replace("`", "``") + "`"
    try:
        detail = spark.sql(f"DESCRIBE DETAIL {name}").first()
        properties = dict(detail["properties"] or {}) if detail is not None else {}
        if str(properties.get("delta.enableChangeDataFeed", "")).lower() == "true":
            return TableChanges(since, until, change_feed=True, how="spark snapshots")
        features = set(detail["tableFeatures"] or []) if detail is not None else set()
        if (
            "deletionVectors" in features
            or str(properties.get("delta.enableDeletionVectors", "")).lower() == "true"
        ):
            raise ChangesUnknownError(
                "deletion vectors are on and the table's Delta log cannot be read as files "
                "here (a table by name, or a path elsewhere): Spark's file lists do not "
                "show a row-level delete"
            )
        old = {hadoop_uri(p) for p in read_table(spark, ref, since).inputFiles()}
        new = {hadoop_uri(p) for p in read_table(spark, ref, until).inputFiles()}
    except ChangesUnknownError:
        raise
    except Exception as exc:
        raise ChangesUnknownError(
            f"Delta could not list the files of versions {since} and {until}: {_first_line(exc)}"
        ) from None
    return _snapshot_changes(since, until, old, new, "spark snapshots")


def read_changes(
    spark: SparkSession, ref: TableRef, changes: TableChanges
) -> tuple[DataFrame, DataFrame | None]:
    """(the rows to count as added, the rows to count as removed or None when no row can be
    gone) for ``changes``: the change data feed's, or the files'."""
    if changes.change_feed:
        return read_change_feed(spark, ref, changes)
    new = read_table_files(spark, ref, changes.until, changes.read_new, changes.state_new)
    if changes.read_old is None:
        return new, None
    old = read_table_files(spark, ref, changes.since, changes.read_old, changes.state_old)
    return new, old


def read_change_feed(
    spark: SparkSession, ref: TableRef, changes: TableChanges
) -> tuple[DataFrame, DataFrame]:
    """(rows inserted, rows deleted) by the commits of ``changes`` from delta-spark's change
    data feed (an update is its post-image inserted and its pre-image deleted)."""
    from pyspark.sql import functions as F

    reader = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", str(changes.since + 1))
        .option("endingVersion", str(changes.until))
    )
    feed = reader.table(ref.name) if isinstance(ref, Table) else reader.load(ref)
    kind = F.col("_change_type")
    drop = ("_change_type", "_commit_version", "_commit_timestamp")
    inserted = feed.where(kind.isin("insert", "update_postimage")).drop(*drop)
    deleted = feed.where(kind.isin("delete", "update_preimage")).drop(*drop)
    return inserted, deleted
