"""Nightly incremental runs: continue from saved state, equal to a full recomputation.

The state table ``<out>/_state`` holds, after every incremental run:

* one ``family`` row per family of stream keys replayed so far: the whole model
  (the pure ``Replayer`` as plain data with a schema version, docs/state.md: streams,
  groups, PELs, the delivery records of pending entries, blocked clients, open MULTI
  units), the last ``seq`` it applied, and the count and an order-free digest of every
  row it received; it grows with the PELs and streams, not with the history;
* one ``run`` row: the events table's Delta version the state corresponds to, the
  largest ``seq`` read (``high_seq``), the snapshot time, the count and digest of
  every input row with ``seq <= high_seq`` (and of rows with a null ``seq``), the
  options that shape the tables, what crosses families (which keys are tied
  into families, which clients block where, the db of the last ``SELECT``, 7.2+
  MULTI units left open), and the Delta version of ``delivery_counts`` written
  with this state.

A run (``pelengine reconstruct --incremental``):

1. reads the events table's current version ``V``; if the state is already
   at ``V`` the run is a no-op (nothing is written, no Delta version moves);
2. finds what is new from the Delta log (:func:`_new_rows`; its commit files read as
   files): only the data files versions after the state's added rows with are read;
   where they removed rows (a rewrite), the files removed too, or the change data
   feed, and the rows compared. A row gone, or a new row
   at or below ``high_seq`` (late), means history changed: every family is replayed
   from the full history, and the report names the families whose rows changed
   (their digests differ). When the log cannot tell (versions past log retention,
   removed files vacuumed), the count and digest of every row up to
   ``high_seq`` are checked instead, as they were before the log was read, and the
   report says why;
3. otherwise replays only the new rows: the families they reach
   start from their saved model (a ``state`` row that sorts before their new
   events in the same replay), every other family's rows are carried over
   from the current tables with this run's ``as_of`` and ``idle_ms``; the
   replayed families' ``delivery_counts`` rows are their previous rows (from the
   version the state names) merged with the delivery segments of the new events
   (an entry acked last night and delivered again tonight is one row);
4. writes every table (whole-table overwrite, one commit each, with
   ``txnAppId=pelengine-incremental`` and ``txnVersion=V``) and then the state
   (the commit point).

Crash safety: a run killed anywhere leaves each table at its old or its new
version (each write is one Delta commit). Re-running with the same input
skips the tables already written for ``V`` (Delta's transaction rule) and
writes the rest from the same saved state, so they agree; if the events table
grew meanwhile, the re-run simply covers more: snapshot tables are recomputed
per family, and history rows past ``high_seq`` (only an interrupted run can
have written them) are replaced, never duplicated.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pelengine import storage
from pelengine.model.persist import STATE_SCHEMA_VERSION
from pelengine.pipeline.carry import (
    HISTORY_KEYS,
    PEL_HISTORY_REPLACES,
    PEL_HISTORY_REPLACES_UNPARTITIONED,
    PENDING_ONLY,
    PRIOR_CLOSED,
    Carry,
    changed_rows,
)
from pelengine.pipeline.conform import InputContractError, conform_events
from pelengine.pipeline.reconstruct import ReconstructResult, reconstruct
from pelengine.progress import Progress, SparkCounters, quiet, spark_counters
from pelengine.runs.output import at_once, count_rejected, finish_report, write_outputs
from pelengine.schemas import (
    FAMILY_STATE_COLUMNS,
    HISTORY_TABLES,
    SNAPSHOT_TABLES,
    STATE_TABLE,
    STATE_TABLE_SCHEMA,
)
from pelengine.settings import Settings

TXN_APP_ID = "pelengine-incremental"


class StateMismatchError(InputContractError):
    """The saved state was built with options that shape the tables differently."""


@dataclass
class SavedRun:
    """The ``run`` row of the state table."""

    events_version: int
    high_seq: int | None
    as_of_ms: int | None
    as_of_seq: int | None
    rows_upto_high: int
    digest_upto_high: int
    rows_null_seq: int
    options: dict[str, Any]
    globals: dict[str, Any] = field(default_factory=dict)
    #: the (db, family) of every family row (read with the run row)
    family_keys: set[tuple[int, str]] = field(default_factory=set)


def content_options(settings: Settings) -> dict[str, Any]:
    """The options the tables depend on (a state built with others cannot continue)."""
    return {
        "profile": settings.profile_name,
        "node_max_entries": settings.node_max_entries,
        "node_max_bytes": settings.node_max_bytes,
    }


def read_state(
    spark: SparkSession, out_path: str | storage.Output, version: int | None
) -> tuple[SavedRun | None, DataFrame | None]:
    """The saved run and the family rows at ``version`` of the state table, the one the
    last finished run names (None, None when it names none: no night finished there)."""
    path = storage.as_output(out_path).table(STATE_TABLE)
    if version is None:
        return None, None
    table = storage.read_table(spark, path, version)
    found: Any = None
    keys: set[tuple[int, str]] = set()
    if "state_version" in table.columns:
        # one read of the state's small columns: the run row, every family's key (the
        # routing step needs them) and state schema; not the families' saved models
        is_run = F.col("kind") == "run"
        keyed = ("kind", "db", "family", "state_version")
        others = [f.name for f in table.schema.fields if f.name not in (*keyed, *_FAMILY_ONLY)]
        rows = table.select(
            *keyed, F.when(is_run, F.struct(*keyed, *others)).alias("run")
        ).collect()
        runs = [r["run"] for r in rows if r["kind"] == "run"]
        if not runs:
            return None, None
        run = runs[0]
        found = run["state_version"]
        for r in rows:
            if r["kind"] == "family":
                keys.add((r["db"], r["family"]))
                if found == STATE_SCHEMA_VERSION and r["state_version"] not in (
                    None,
                    STATE_SCHEMA_VERSION,
                ):
                    found = r["state_version"]
    else:
        first = table.filter(F.col("kind") == "run").first()
        if first is None:
            return None, None
        run = first
    if found != STATE_SCHEMA_VERSION:
        written = "by an older pelengine (no version)" if found is None else f"version {found}"
        raise StateMismatchError(
            f"{path}: the saved state has state schema {written}, this version of pelengine "
            f"reads state schema version {STATE_SCHEMA_VERSION} and cannot continue it. "
            f"Rebuild from the full history: run again with a new --out, or remove {out_path} "
            "first (its tables' columns changed too)"
        )
    globals_ = {
        "select_db": run["select_db"],
        "open_units": {u["client"]: u["ts_ms"] for u in run["open_units"] or []},
        "waits": [(w["client"], w["db"], w["family"]) for w in run["waits"] or []],
        "family_of": {(f["db"], f["key"]): f["family"] for f in run["family_of"] or []},
        "delivery_counts_version": run["delivery_counts_version"],
    }
    saved = SavedRun(
        events_version=int(run["events_version"]),
        high_seq=run["high_seq"],
        as_of_ms=run["as_of_ms"],
        as_of_seq=run["as_of_seq"],
        rows_upto_high=int(run["rows_upto_high"]),
        digest_upto_high=int(run["digest_upto_high"]),
        rows_null_seq=int(run["rows_null_seq"]),
        options=json.loads(run["options"]),
        globals=globals_,
    )
    saved.family_keys = keys
    families = table.filter(F.col("kind") == "family").select(
        "db", "family", "applied_seq", "state_version", "state", "agg_n", "agg_x"
    )
    return saved, families


#: The state table's columns only family rows fill (the saved models and their digests).
_FAMILY_ONLY = ("applied_seq", "state", "agg_n", "agg_x", "mark_n", "mark_x")


def _row_digest() -> Any:
    return F.xxhash64("seq", "ts_ms", "argv", "db", "client", "source")


def digest(events: DataFrame, upto_seq: int | None) -> tuple[int, int, int, int | None]:
    """(rows with seq <= upto_seq, their XOR digest, rows with a null seq, largest seq);
    ``upto_seq`` None: every row with a seq."""
    upto = F.col("seq").isNotNull() if upto_seq is None else F.col("seq") <= upto_seq
    row = events.agg(
        F.count(F.when(upto, 1)).alias("n"),
        F.bit_xor(F.when(upto, _row_digest())).alias("x"),
        F.count(F.when(F.col("seq").isNull(), 1)).alias("null"),
        F.max("seq").alias("top"),
    ).first()
    assert row is not None
    return int(row["n"]), int(row["x"] or 0), int(row["null"]), row["top"]


@dataclass
class NewRows:
    """What the events table gained since the state: ``rows`` (None when history before
    the state changed, so every family is replayed from the full history, for ``why``),
    their ``check`` (rows with a seq, their XOR digest, rows without one, largest seq)
    and, for the report, how they were found (``read``)."""

    rows: DataFrame | None
    check: tuple[int, int, int, int | None] | None
    why: str
    read: dict[str, Any]


def _new_rows(
    spark: SparkSession,
    ref: storage.TableRef,
    saved: SavedRun,
    version: int,
    progress: Progress,
) -> NewRows:
    """The rows the events table gained from the state's version to ``version``.

    From the Delta log when it can tell (:func:`storage.table_changes`): only the data
    files versions after the state's added rows with are read; where a commit removed
    rows (a DELETE, UPDATE, MERGE or overwrite rewrote files) the files removed are read
    too, or the change data feed, and a row removed but not added back is gone, a row added
    but not removed is new. History changed when a row is gone or a new row is late
    (``seq <= high_seq``). Otherwise (a commit past log retention, removed files vacuumed,
    files that do not hold the rows the log says) every row up to ``high_seq`` is checked
    against the state's count and digest, and the report says why (``read.why``)."""
    try:
        changes = storage.table_changes(spark, ref, saved.events_version, version)
    except storage.ChangesUnknownError as exc:
        why = str(exc)
    else:
        try:
            return _new_rows_from_log(spark, ref, saved, changes, progress)
        except Exception as exc:  # a file the log names is gone or holds other rows
            why = f"the files the Delta log names could not be read: {_first_line(exc)}"
    high = saved.high_seq
    progress(
        f"checking the {saved.rows_upto_high:,} rows up to seq {high} against the state "
        f"(the Delta log from version {saved.events_version} cannot tell what changed: {why})"
    )
    events = conform_events(storage.read_table(spark, ref, version))
    n, x, null, _ = digest(events, high)
    read: dict[str, Any] = {"from": "every row (digest)", "why": why, "rows_checked": n}
    if (n, x, null) != (saved.rows_upto_high, saved.digest_upto_high, saved.rows_null_seq):
        return NewRows(
            None,
            None,
            f"rows up to seq {high} changed ({saved.rows_upto_high:,} -> {n:,} rows, "
            f"null seq {saved.rows_null_seq} -> {null})",
            read,
        )
    rows = events.filter(F.col("seq") > high) if high is not None else events
    n_new, x_new, _, top = digest(rows, None)
    return NewRows(rows, (n_new, x_new, 0, top), "", read)


def _first_line(exc: BaseException, limit: int = 300) -> str:
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


class LogMismatchError(RuntimeError):
    """The data files read do not hold the rows the Delta log's statistics say."""


def _new_rows_from_log(
    spark: SparkSession,
    ref: storage.TableRef,
    saved: SavedRun,
    changes: storage.TableChanges,
    progress: Progress,
) -> NewRows:
    versions = f"{changes.since + 1}..{changes.until}"
    if changes.change_feed:
        progress(f"events versions {versions}: reading the change data feed")
    else:
        progress(
            f"events versions {versions}: {len(changes.added)} data file(s) added, "
            f"{len(changes.removed)} removed ({changes.how}); reading {changes.files_read}"
        )
    inserted, deleted = storage.read_changes(spark, ref, changes)
    inserted = conform_events(inserted)
    gone = 0
    if deleted is not None:  # a row in a removed file and in an added one was moved
        deleted = conform_events(deleted)
        new = inserted.exceptAll(deleted)
        gone = deleted.exceptAll(inserted).count()
    else:
        new = inserted
    high = saved.high_seq
    late = F.col("seq") <= high if high is not None else F.lit(False)
    row = new.agg(
        F.count("seq").alias("n"),
        F.bit_xor(F.when(F.col("seq").isNotNull(), _row_digest())).alias("x"),
        F.count(F.when(F.col("seq").isNull(), 1)).alias("null"),
        F.max("seq").alias("top"),
        F.count(F.when(late, 1)).alias("late"),
    ).first()
    assert row is not None
    n, late_rows = int(row["n"]), int(row["late"])
    rows_new = n + int(row["null"])
    _check_rows(changes, inserted if deleted is not None else None, rows_new, gone)
    read: dict[str, Any] = {
        "from": "change data feed" if changes.change_feed else "delta log",
        "via": changes.how,
        "versions": versions,
        "files_added": len(changes.added),
        "files_removed": len(changes.removed),
        "files_read": changes.files_read,
        "change_feed": changes.change_feed,
        "rows_new": rows_new,
        "rows_gone": gone,
        "rows_late": late_rows,
    }
    if changes.note:
        read["note"] = changes.note
    if gone or late_rows:
        return NewRows(
            None,
            None,
            f"events versions {versions} removed {gone:,} row(s) and added {late_rows:,} "
            f"late row(s) (seq <= {high})",
            read,
        )
    check = (n, int(row["x"] or 0), int(row["null"]), row["top"])
    return NewRows(new, check, "", read)


def _check_rows(
    changes: storage.TableChanges, inserted: DataFrame | None, rows_new: int, gone: int
) -> None:
    """The files read hold the rows the Delta log's statistics say they hold (a file read
    by a path that names another, or not found, is not silently a night without rows):
    LogMismatchError otherwise. ``inserted``: the rows read at the newer version, when rows
    were compared with removed ones (counted here; else they are ``rows_new``)."""
    if changes.change_feed:
        return
    want_new = storage.expected_rows(changes.read_new)
    want_old = storage.expected_rows(changes.read_old)
    if want_new is None and want_old is None:
        return
    have_new = rows_new if inserted is None else inserted.count()
    # removed rows = gone + the ones added back (inserted - new)
    have_old = gone + have_new - rows_new if inserted is not None else 0
    for what, want, have in (("added", want_new, have_new), ("removed", want_old, have_old)):
        if want is not None and want != have:
            raise LogMismatchError(
                f"the {what} data files read hold {have:,} row(s), the Delta log's "
                f"statistics say {want:,}"
            )


def run_incremental(
    spark: SparkSession,
    events_path: str,
    out_path: str | storage.Output,
    settings: Settings,
    progress: Progress = quiet,
) -> dict[str, Any]:
    """One nightly run (see the module docstring); returns the run report."""
    started = time.time()
    jobs = spark_counters(spark)
    output = storage.check_output(spark, out_path)
    events_ref = storage.table_ref(events_path)
    storage.check_input(spark, events_ref)
    version = storage.table_version(spark, events_ref)
    if version is None:
        raise InputContractError(f"--events {events_path}: no Delta table there")
    # every table as the last finished run left it (its _runs row): a night killed after
    # some writes is invisible, and this run continues from what that run left
    upgrade = False
    try:
        last_run = storage.newest_run(spark, output)
    except storage.OutputVersionError as exc:
        # tables of output contract version 1: this run is the full recomputation that
        # rewrites them (their schemas and _runs replaced), whatever state they have
        progress(f"{_first_line(exc)}: rewriting every table from the full history")
        last_run, upgrade = None, True
    pinned: dict[str, int] = {
        str(k): int(v) for k, v in ((last_run or {}).get("tables") or {}).items() if v is not None
    }
    saved, families = read_state(spark, output, pinned.get(STATE_TABLE))
    wanted = content_options(settings)
    if saved is not None and saved.options != wanted:
        raise StateMismatchError(
            f"{output}: its state was built with {saved.options}, this run asks {wanted}; "
            "write to another --out, or remove its _state table to rebuild from the full history"
        )
    report: dict[str, Any] = {
        "input": {"path": events_path, "delta_version": version},
        "incremental": {
            "state_events_version": saved.events_version if saved else None,
            "state_high_seq": saved.high_seq if saved else None,
        },
    }
    if saved is not None and saved.events_version == version:
        progress(f"state is already at events version {version}: nothing to do")
        report["incremental"]["mode"] = "up-to-date"
        return _finish(report, output, settings, spark, (started, jobs), written=False)

    events: DataFrame | None = None  # the whole table, read only when it is needed
    new_rows: DataFrame | None = None  # the rows added since the state (incremental mode)
    new_check: tuple[int, int, int, int | None] | None = None
    carry: Carry | None = None
    mode = "full"
    find_seconds: float | None = None
    if saved is not None:
        find_started = time.monotonic()
        found = _new_rows(spark, events_ref, saved, version, progress)
        find_seconds = round(time.monotonic() - find_started, 3)
        report["incremental"]["read"] = found.read
        if found.rows is not None:
            mode, new_rows, new_check = "incremental", found.rows, found.check
        else:
            mode = "full (history changed)"
            progress(f"{found.why}: replaying every family from the full history")
    if new_rows is None:
        events = conform_events(storage.read_table(spark, events_ref, version))
    previous = {}
    if mode == "incremental":
        assert saved is not None and families is not None
        g = saved.globals
        # what the night carries over (the snapshot tables' other families) and continues
        # (delivery_counts of the replayed families), as the last finished run left them
        for name in (*SNAPSHOT_TABLES, "delivery_counts"):
            if name in pinned:
                # the snapshot tables' files listed from their logs where they can be (no
                # Spark job replays a log to find them); delivery_counts' (deletion vectors
                # after its first merge) through Delta
                read = storage.read_snapshot if name in SNAPSHOT_TABLES else storage.read_table
                previous[name] = read(spark, output.table(name), pinned[name])
        carry = Carry(
            high_seq=saved.high_seq if saved.high_seq is not None else -(2**63),
            as_of_ms=saved.as_of_ms,
            as_of_seq=saved.as_of_seq,
            family_of=g.get("family_of", {}),
            states=families,
            previous=previous,
            waits=g.get("waits", []),
            select_db=g.get("select_db", 0),
            open_units=g.get("open_units", {}),
            family_keys=saved.family_keys,
        )
    night_settings = replace(settings, incremental=True)
    result: ReconstructResult | None = None
    if carry is not None:
        assert new_rows is not None
        result = reconstruct(spark, new_rows, night_settings, progress, carry)
    if result is None:
        assert events is not None
        # a full replay; after changed history it also digests, per family, the rows up
        # to the old high_seq, so the report can name the families whose rows changed
        mark = saved.high_seq if saved is not None and mode != "full" else None
        result = reconstruct(spark, events, night_settings, progress, None, mark_seq=mark)
    report["incremental"]["mode"] = mode
    progress(f"mode: {mode}")

    # what the next run checks: count and digest of every row up to the new high_seq
    if carry is not None and saved is not None:
        assert new_check is not None
        n_new, x_new, null_new, top = new_check
        high_seq = _max(saved.high_seq, top)
        n_upto, x_upto = saved.rows_upto_high + n_new, saved.digest_upto_high ^ x_new
        null_rows = saved.rows_null_seq + null_new
    else:
        assert events is not None
        n_upto, x_upto, null_rows, high_seq = digest(events, None)

    tables = dict(result.tables)
    rejected = result.rejected
    late_families: list[dict[str, Any]] = []
    if saved is not None and families is not None and mode.startswith("full (history"):
        late_families = _changed_families(result, families)
        report["incremental"]["families_with_changed_history"] = late_families
    states = result.states
    assert states is not None
    # a night's from the replay's own facts; a full replay's counted (every family replayed)
    counts = result.carried.get("families")
    if counts is None:
        replayed = states.count()
        counts = {"replayed": replayed, "total": replayed}
    report["incremental"]["families_replayed"] = int(counts["replayed"])
    report["incremental"]["families_total"] = int(counts["total"])

    write_started = time.monotonic()
    table_seconds: dict[str, float] = {}
    rows_rewritten: dict[str, int] = {}
    merge_reads: dict[str, str] = {}
    carried = dict(result.carried)
    run_row = {
        "kind": "run",
        "events_version": version,
        "high_seq": high_seq,
        "as_of_ms": result.as_of_ms,
        "as_of_seq": result.as_of_seq,
        "rows_upto_high": n_upto,
        "digest_upto_high": x_upto,
        "rows_null_seq": null_rows,
        "options": json.dumps(wanted, sort_keys=True),
        "state_version": STATE_SCHEMA_VERSION,
        "select_db": carried["select_db"],
        "open_units": [{"client": c, "ts_ms": t} for c, t in carried["open_units"].items()],
        "waits": [{"client": c, "db": db, "family": f} for c, db, f in carried["waits"]],
        "family_of": [
            {"db": db, "key": k, "family": f} for (db, k), f in carried["family_of"].items()
        ],
        "delivery_counts_version": None,  # set once delivery_counts is written
    }
    if carry is not None:
        # a night: snapshot tables whole; history tables and the state only what changed
        output_rows = _write_night(
            spark,
            output,
            tables,
            rejected,
            states,
            run_row,
            carry.high_seq,
            pinned,
            version,
            carried.get("renamed") or {},
            progress,
            table_seconds,
            rows_rewritten,
            merge_reads,
        )
    else:
        # the tables read the versions they replace pinned (versionAsOf), so writing them
        # in any order, or again after a crash, reads the same input
        output_rows = write_outputs(
            spark,
            [*tables.items(), ("rejected_events", rejected)],
            output,
            txn_app_id=TXN_APP_ID,
            txn_version=version,
            progress=progress,
            seconds=table_seconds,
            overwrite_schema=upgrade,
            deletion_vectors=settings.deletion_vectors,
        )
        state_started = time.monotonic()
        run_row["delivery_counts_version"] = storage.table_version(
            spark, output.table("delivery_counts")
        )
        run_df = spark.createDataFrame([run_row], STATE_TABLE_SCHEMA)
        state_df = states.select(F.lit("family").alias("kind"), *FAMILY_STATE_COLUMNS).unionByName(
            run_df.select("kind", *FAMILY_STATE_COLUMNS, *_RUN_COLUMNS), allowMissingColumns=True
        )
        progress("writing the state")
        storage.write_table(
            state_df.select(*(f.name for f in STATE_TABLE_SCHEMA.fields)),
            output.table(STATE_TABLE),
            "overwrite",
            txn_app_id=TXN_APP_ID,
            txn_version=version,
            overwrite_schema=True,
            deletion_vectors=settings.deletion_vectors,
        )
        table_seconds["_state"] = round(time.monotonic() - state_started, 3)
    report["timings_s"] = {
        **({"find_new": find_seconds} if find_seconds is not None else {}),
        **result.report.get("timings_s", {}),
    }
    report["timings_s"]["write"] = round(time.monotonic() - write_started, 3)
    report["write_seconds_by_table"] = table_seconds
    report.update({k: v for k, v in result.report.items() if k not in ("timings_s",)})
    report["input"] = {"path": events_path, "delta_version": version}
    report["output"] = {**output.describe(), "rows": output_rows}
    if rows_rewritten:
        report["output"]["rows_rewritten"] = rows_rewritten
    if merge_reads:
        report["output"]["merge_reads"] = merge_reads
    report["keys"] = output_rows.get("streams", 0)
    count_rejected(report)
    report["incremental"]["high_seq"] = high_seq
    result.unpersist()
    return _finish(report, output, settings, spark, (started, jobs), written=True, replace=upgrade)


def _write_night(
    spark: SparkSession,
    output: storage.Output,
    tables: dict[str, DataFrame],
    rejected: DataFrame,
    states: DataFrame,
    run_row: dict[str, Any],
    high_seq: int,
    pinned: dict[str, int],
    version: int,
    renamed: dict[tuple[int, str], str],
    progress: Progress,
    seconds: dict[str, float],
    rewritten: dict[str, int],
    merge_reads: dict[str, str],
) -> dict[str, int]:
    """A night's writes (each one commit, none for a table with nothing to change): the
    snapshot tables whole (``txnAppId``/``txnVersion``: a re-run skips those written);
    the history tables by appending their new rows and replacing the rows new commands
    changed (:func:`carry.changed_rows`); the state rows of the replayed families and the
    run row. A table an interrupted run wrote past the version the last finished run
    names is first put back to that version (``RESTORE``), so every write applies to what
    the previous run left. Returns the rows each table got (added or changed);
    ``rewritten`` gets the rows each merge or append commit wrote, from its metrics (a
    merge without deletion vectors rewrites every file holding a row it replaces);
    ``merge_reads`` what delivery_counts' merge met: its ``pending`` partition, or the
    whole table where the night replaces a closed row (see ``carry.PRIOR_CLOSED``)."""
    rows: dict[str, int] = {}
    steps = [*SNAPSHOT_TABLES, *HISTORY_TABLES, "rejected_events", STATE_TABLE]

    def write(i: int, name: str) -> None:
        path = output.table(name)
        progress(
            "writing the state" if name == STATE_TABLE else f"writing {name} ({i}/{len(steps)})"
        )
        started = time.monotonic()
        if name in SNAPSHOT_TABLES:
            storage.write_table(
                tables[name], path, "overwrite", txn_app_id=TXN_APP_ID, txn_version=version
            )
            counted = storage.commit_rows(spark, path)
            rows[name] = counted if counted is not None else storage.table_row_count(spark, path)
            what = f"{rows[name]:,} rows"
        else:
            _restore_if_moved(spark, path, pinned.get(name), progress)
            if name == STATE_TABLE:
                # the delivery_counts version this state goes with (for people: readers
                # pin every table to the _runs row)
                run_row["delivery_counts_version"] = storage.table_version(
                    spark, output.table("delivery_counts")
                )
                run_df = spark.createDataFrame([run_row], STATE_TABLE_SCHEMA)
                fresh = (
                    states.filter(F.col("replayed"))
                    .select(F.lit("family").alias("kind"), *FAMILY_STATE_COLUMNS)
                    .unionByName(
                        run_df.select("kind", *FAMILY_STATE_COLUMNS, *_RUN_COLUMNS),
                        allowMissingColumns=True,
                    )
                    .select(*(f.name for f in STATE_TABLE_SCHEMA.fields))
                )
                gone = spark.createDataFrame(
                    [("family", db, family) for (db, family) in renamed],
                    "kind string, db int, family string",
                )
                done = storage.replace_rows(
                    fresh, path, ("kind", "db", "family"), delete_keys=gone, null_safe=True
                )
            else:
                source = rejected if name == "rejected_events" else tables[name]
                changed = changed_rows(name, source, high_seq)
                if name in HISTORY_KEYS:
                    where = None
                    if name == "pel_history":
                        where = PEL_HISTORY_REPLACES
                        if "is_current" not in storage.read_table(spark, path).columns:
                            # written before the column: as it is until a full run
                            changed = changed.drop("is_current")
                            where = PEL_HISTORY_REPLACES_UNPARTITIONED
                    done = storage.replace_rows(
                        changed,
                        path,
                        HISTORY_KEYS[name],
                        where=where,
                        narrow=(
                            (PENDING_ONLY, PRIOR_CLOSED)
                            if PRIOR_CLOSED in changed.columns
                            else None
                        ),
                    )
                else:
                    done = {"inserted": storage.append_rows(changed, path), "deleted": 0}
            if name != STATE_TABLE:
                rows[name] = done["inserted"]
            what = f"{done['inserted']:,} rows added or changed, {done['deleted']:,} replaced"
            if "narrowed" in done and (done["inserted"] or done["deleted"]):
                merge_reads[name] = (
                    "pending partition" if done["narrowed"] else "whole table: a closed row changed"
                )
                what += f" (the merge read the {merge_reads[name]})"
            if done["inserted"] or done["deleted"]:
                physical = storage.commit_rows(spark, path)
                if physical is not None:
                    rewritten[name] = physical
                    if physical > done["inserted"]:
                        what += f" ({physical:,} rows written: files rewritten)"
        took = time.monotonic() - started
        seconds[name] = round(took, 3)
        progress(f"wrote {name}: {what} in {took:.1f} s")

    # the tables at once where the store allows, the merges first (they take longest; the
    # other writes fill in beside them); the state after them all, since its run row names
    # the delivery_counts version written here
    tables_first = sorted(steps[:-1], key=lambda name: name not in HISTORY_KEYS)
    at_once(spark, [functools.partial(write, steps.index(name) + 1, name) for name in tables_first])
    write(len(steps), STATE_TABLE)
    return {name: rows[name] for name in steps if name in rows}


def _restore_if_moved(
    spark: SparkSession, path: storage.TableRef, pinned: int | None, progress: Progress
) -> None:
    """Put ``path`` back to ``pinned`` when an interrupted run committed to it since."""
    if pinned is None:
        return
    current = storage.table_version(spark, path)
    if current is not None and current > pinned:
        progress(
            f"{path}: version {current} was written by an interrupted run; restoring "
            f"version {pinned}, the last finished run's"
        )
        storage.restore_table(spark, path, pinned)


_RUN_COLUMNS = (
    "events_version",
    "high_seq",
    "as_of_ms",
    "as_of_seq",
    "rows_upto_high",
    "digest_upto_high",
    "rows_null_seq",
    "options",
    "select_db",
    "open_units",
    "waits",
    "family_of",
    "delivery_counts_version",
)


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _changed_families(result: ReconstructResult, saved: DataFrame) -> list[dict[str, Any]]:
    """Families whose rows up to the old high_seq differ from what the state saw."""
    assert result.states is not None
    new = result.states.select("db", "family", "mark_n", "mark_x")
    rows = (
        new.join(saved.select("db", "family", "agg_n", "agg_x"), ["db", "family"], "full_outer")
        .filter(
            ~F.coalesce(F.col("mark_n"), F.lit(0)).eqNullSafe(F.coalesce(F.col("agg_n"), F.lit(0)))
            | ~F.coalesce(F.col("mark_x"), F.lit(0)).eqNullSafe(
                F.coalesce(F.col("agg_x"), F.lit(0))
            )
        )
        .orderBy("db", "family")
        .limit(1000)
        .collect()
    )
    return [
        {
            "db": r["db"],
            "family": r["family"],
            "rows_before": r["agg_n"],
            "rows_now": r["mark_n"],
        }
        for r in rows
    ]


def _finish(
    report: dict[str, Any],
    output: storage.Output,
    settings: Settings,
    spark: SparkSession,
    started: tuple[float, SparkCounters],
    *,
    written: bool,
    replace: bool = False,
) -> dict[str, Any]:
    return finish_report(
        report,
        spark,
        output,
        settings,
        started[0],
        counters_at_start=started[1],
        written=written,
        record=written,
        extra_tables=(STATE_TABLE,),
        replace=replace,
    )
