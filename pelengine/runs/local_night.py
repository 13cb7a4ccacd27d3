"""A night on the local runner (``reconstruct --runner local --incremental``): the rules
of :mod:`pelengine.runs.incremental` in one process, with no JVM. The state table, the
tables and the ``_runs`` row are the ones a night of the Spark runner writes on the
embedded store, so either runner's night continues the other's.

1. The events table's version ``V``; the state the last finished run names; a state
   already at ``V``: nothing to do (nothing written, no version moves).
2. What is new, from the Delta log (``storage.table_changes_sessionless``): the data
   files added since the state's version, read by delta-rs. Where a commit removed
   files (a DELETE, UPDATE, MERGE or overwrite), the rows of the files removed are
   compared with those added: a row gone, or a new row at or below ``high_seq`` (late),
   means history changed, and every family is replayed from the full history. Where the
   log cannot tell (a commit past log retention, removed files vacuumed), the local
   runner replays every family from the full history too, and says why (the Spark
   runner checks the rows against the state's digest first).
3. Otherwise only the new rows are replayed (``local.reconstruct`` with a
   ``LocalCarry``): the families they reach continue from their saved models, every
   other family's snapshot rows are carried over with the night's ``as_of``.
4. The writes, each one commit: the snapshot tables whole (``txnAppId`` /
   ``txnVersion``), the history tables by appending and replacing only what new commands
   changed (a table an interrupted run moved is first put back to the version the last
   finished run names), the state rows of the replayed families and the run row; then
   the report and the ``_runs`` row.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pelengine import storage
from pelengine.engine.udf import _arrow_schema
from pelengine.local import night
from pelengine.local.reconstruct import LocalCarry, LocalResult, reconstruct_local
from pelengine.local.validate import conform_table, nonzero
from pelengine.model.delivery import SEGMENT_IDENTITY
from pelengine.model.persist import STATE_SCHEMA_VERSION
from pelengine.pipeline.carry import HISTORY_KEYS, PEL_HISTORY_REPLACES, PENDING_ONLY
from pelengine.pipeline.conform import InputContractError
from pelengine.progress import Progress, quiet
from pelengine.runs.incremental import (
    TXN_APP_ID,
    SavedRun,
    StateMismatchError,
    content_options,
)
from pelengine.runs.local import (
    _finish,
    _spark_schema,
    laid_out,
)
from pelengine.runs.output import count_rejected
from pelengine.schemas import (
    FAMILY_STATE_COLUMNS,
    HISTORY_TABLES,
    OUTPUT_TABLES,
    SNAPSHOT_TABLES,
    STATE_TABLE,
    STATE_TABLE_SCHEMA,
    TABLE_PARTITIONS,
)
from pelengine.settings import Settings
from pelengine.storage import sessionless
from pelengine.storage.run_record import newest_run_sessionless

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

#: the state table's rows as Arrow
STATE_ROWS = _arrow_schema(STATE_TABLE_SCHEMA)


def run_local_night(
    events_path: str,
    out: str | storage.Output,
    settings: Settings,
    progress: Progress = quiet,
) -> dict[str, Any]:
    """One night on the local runner (the module docstring); returns the run report."""
    output = storage.as_output(out)
    if output.by_name or not output.root:
        raise InputContractError(
            "the local runner writes tables by path (--out PATH); catalog tables "
            "(--catalog/--schema) need the Spark runner (--runner spark) with delta-spark"
        )
    root = output.root
    # delta-rs writes here: tables delta-spark gave deletion vectors are refused up front
    sessionless.check_writable(
        [output.table(name) for name in (*OUTPUT_TABLES, "rejected_events", STATE_TABLE)]
    )
    with storage.run_lease(root, "reconstruct --runner local --incremental"):
        return _night(events_path, output, settings, progress)


def _night(
    events_path: str, output: storage.Output, settings: Settings, progress: Progress
) -> dict[str, Any]:
    started = time.time()
    assert output.root is not None
    version = sessionless.table_version(events_path)
    if version is None:
        raise InputContractError(f"--events {events_path}: no Delta table there")
    upgrade = False
    try:
        last_run = newest_run_sessionless(output.root)
    except storage.OutputVersionError as exc:
        progress(f"{_first_line(exc)}: rewriting every table from the full history")
        last_run, upgrade = None, True
    pinned: dict[str, int] = {
        str(k): int(v) for k, v in ((last_run or {}).get("tables") or {}).items() if v is not None
    }
    saved, families = read_state(output, pinned.get(STATE_TABLE))
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
        return _finish(report, output, settings, started, replace=False, written=False)

    night_settings = replace(settings, incremental=True)
    mode = "full"
    carry: LocalCarry | None = None
    result: LocalResult | None = None
    timings: dict[str, float] = {}
    if saved is not None and families is not None:
        find_started = time.monotonic()
        rows, why, read = new_rows(events_path, saved, version, progress)
        timings["find_new"] = round(time.monotonic() - find_started, 3)
        report["incremental"]["read"] = read
        if rows is not None:
            mode = "incremental"
            previous = {
                name: sessionless.read_arrow(output.table(name), version=pinned[name])
                for name in SNAPSHOT_TABLES
                if name in pinned
            }
            closed_history = None
            if "delivery_counts" in pinned:
                previous["delivery_counts"], closed_history = _delivery_counts_read(
                    output.table("delivery_counts"), pinned["delivery_counts"]
                )
            g = saved.globals
            carry = LocalCarry(
                high_seq=saved.high_seq if saved.high_seq is not None else -(2**63),
                as_of_ms=saved.as_of_ms,
                as_of_seq=saved.as_of_seq,
                family_of=g.get("family_of", {}),
                states=families,
                previous=previous,
                waits=g.get("waits", []),
                select_db=g.get("select_db", 0),
                open_units=g.get("open_units", {}),
                closed_history=closed_history,
            )
            result = reconstruct_local(rows, night_settings, progress, carry)
        else:
            mode = "full (history changed)"
            progress(f"{why}: replaying every family from the full history")
    if result is None:
        progress(f"reading events from {events_path} (Delta version {version})")
        read_started = time.monotonic()
        events = sessionless.read_arrow(events_path, version=version)
        timings["read"] = round(time.monotonic() - read_started, 3)
        mark = saved.high_seq if saved is not None and mode != "full" else None
        result = reconstruct_local(events, night_settings, progress, None, mark_seq=mark)
        del events
    report["incremental"]["mode"] = mode
    progress(f"mode: {mode}")
    assert result.digest is not None and result.states is not None
    n_new, x_new, null_new, top = result.digest
    if carry is not None and saved is not None:
        high_seq = _max(saved.high_seq, top)
        n_upto, x_upto = saved.rows_upto_high + n_new, saved.digest_upto_high ^ x_new
        null_rows = saved.rows_null_seq + null_new
    else:
        n_upto, x_upto, null_rows, high_seq = n_new, x_new, null_new, top
    if saved is not None and families is not None and mode.startswith("full (history"):
        report["incremental"]["families_with_changed_history"] = _changed_families(
            result.states, families
        )
    counts = result.carried.get("families")
    if counts is None:
        counts = {"replayed": result.states.num_rows, "total": result.states.num_rows}
    report["incremental"]["families_replayed"] = int(counts["replayed"])
    report["incremental"]["families_total"] = int(counts["total"])

    carried = result.carried
    run_row: dict[str, Any] = {
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
        "delivery_counts_version": None,
    }
    write_started = time.monotonic()
    seconds: dict[str, float] = {}
    merge_reads: dict[str, str] = {}
    if carry is not None:
        rows_out = _write_night(
            output,
            result,
            run_row,
            carry.high_seq,
            pinned,
            version,
            progress,
            seconds,
            merge_reads,
            carry.closed_history if isinstance(carry.closed_history, PriorDeliveryCounts) else None,
        )
    else:
        rows_out = _write_full(output, result, run_row, version, upgrade, progress, seconds)
    report["timings_s"] = {**timings, **result.report.get("timings_s", {})}
    report["timings_s"]["write"] = round(time.monotonic() - write_started, 3)
    report["write_seconds_by_table"] = seconds
    report.update({k: v for k, v in result.report.items() if k != "timings_s"})
    report["input"] = {"path": events_path, "delta_version": version}
    report["output"] = {**output.describe(), "rows": rows_out}
    if merge_reads:
        report["output"]["merge_reads"] = merge_reads
    report["keys"] = rows_out.get("streams", 0)
    count_rejected(report)
    report["incremental"]["high_seq"] = high_seq
    return _finish(
        report, output, settings, started, replace=upgrade, written=True, extra=(STATE_TABLE,)
    )


def read_state(
    output: storage.Output, version: int | None
) -> tuple[SavedRun | None, pa.Table | None]:
    """The saved run and the family rows (``FAMILY_STATE_COLUMNS``) of the state table at
    ``version`` (None, None: no night finished there), read by delta-rs
    (``runs.incremental.read_state``)."""
    if version is None:
        return None, None
    table = sessionless.read_arrow(output.table(STATE_TABLE), version=version)
    kind = table.column("kind")
    runs = table.filter(pc.equal(kind, "run")).to_pylist()
    if not runs:
        return None, None
    run = runs[0]
    families = table.filter(pc.equal(kind, "family")).select(list(FAMILY_STATE_COLUMNS))
    found = run.get("state_version")
    if found == STATE_SCHEMA_VERSION:
        versions = pc.unique(families.column("state_version")).to_pylist()
        other = [v for v in versions if v not in (None, STATE_SCHEMA_VERSION)]
        if other:
            found = other[0]
    if found != STATE_SCHEMA_VERSION:
        written = "by an older pelengine (no version)" if found is None else f"version {found}"
        raise StateMismatchError(
            f"{output.table(STATE_TABLE)}: the saved state has state schema {written}, this "
            f"version of pelengine reads state schema version {STATE_SCHEMA_VERSION} and cannot "
            "continue it. Rebuild from the full history: run again with a new --out"
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
    saved.family_keys = set(
        zip(families.column("db").to_pylist(), families.column("family").to_pylist(), strict=True)
    )
    return saved, families


def new_rows(
    events_path: str, saved: SavedRun, version: int, progress: Progress
) -> tuple[pa.Table | None, str, dict[str, Any]]:
    """(the rows the events table gained since the state, or None when history before
    it changed or the log cannot tell; why; how they were found, for the report)."""
    try:
        changes = storage.table_changes_sessionless(events_path, saved.events_version, version)
    except storage.ChangesUnknownError as exc:
        why = f"the Delta log from version {saved.events_version} cannot tell what changed: {exc}"
        return None, why, {"from": "nothing (full replay)", "why": str(exc)}
    versions = f"{changes.since + 1}..{changes.until}"
    progress(
        f"events versions {versions}: {len(changes.added)} data file(s) added, "
        f"{len(changes.removed)} removed ({changes.how}); reading {changes.files_read}"
    )
    try:
        inserted = _read_files(events_path, version, [f.path for f in changes.read_new])
        gone = 0
        new = inserted
        if changes.read_old is not None:
            old_files = [f.path for f in changes.read_old]
            deleted = _read_files(events_path, saved.events_version, old_files)
            new, gone = _difference(inserted, deleted)
    except Exception as exc:  # a file the log names is gone, or cannot be read
        why = f"the files the Delta log names could not be read: {_first_line(exc)}"
        return None, why, {"from": "nothing (full replay)", "why": why}
    want = storage.expected_rows(changes.read_new)
    if want is not None and want != inserted.num_rows:
        why = (
            f"the added data files read hold {inserted.num_rows:,} row(s), the Delta log's "
            f"statistics say {want:,}"
        )
        return None, why, {"from": "nothing (full replay)", "why": why}
    high = saved.high_seq
    late = 0
    if high is not None and new.num_rows:
        conformed = conform_table(new).rows  # seqs as the contract reads them
        assert conformed is not None
        seq = conformed.column("seq")
        late = int(pc.sum(pc.fill_null(pc.less_equal(seq, high), False)).as_py() or 0)
    read: dict[str, Any] = {
        "from": "delta log",
        "via": changes.how,
        "versions": versions,
        "files_added": len(changes.added),
        "files_removed": len(changes.removed),
        "files_read": changes.files_read,
        "change_feed": False,
        "rows_new": new.num_rows,
        "rows_gone": gone,
        "rows_late": late,
    }
    if changes.note:
        read["note"] = changes.note
    if gone or late:
        why = (
            f"events versions {versions} removed {gone:,} row(s) and added {late:,} "
            f"late row(s) (seq <= {high})"
        )
        return None, why, read
    return new, "", read


def _read_files(path: str, version: int, files: list[str]) -> pa.Table:
    return sessionless.read_arrow(path, version=version, files=files)


def _difference(inserted: pa.Table, deleted: pa.Table) -> tuple[pa.Table, int]:
    """(the rows of ``inserted`` not in ``deleted``, the count of rows of ``deleted`` not in
    ``inserted``): multisets of whole rows (a row moved by a rewrite is neither)."""
    names = sorted(set(inserted.column_names) & set(deleted.column_names))

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(tuple(v) if isinstance(v, list) else v for v in (row[n] for n in names))

    old = Counter(key(r) for r in deleted.select(names).to_pylist())
    keep: list[bool] = []
    for r in inserted.select(names).to_pylist():
        k = key(r)
        if old[k] > 0:
            old[k] -= 1
            keep.append(False)
        else:
            keep.append(True)
    return inserted.filter(pa.array(keep, pa.bool_())), sum(old.values())


def _write_full(
    output: storage.Output,
    result: LocalResult,
    run_row: dict[str, Any],
    version: int,
    upgrade: bool,
    progress: Progress,
    seconds: dict[str, float],
) -> dict[str, int]:
    """A full replay's writes: every table overwritten (one commit each, with
    ``txnAppId``/``txnVersion``), then the whole state."""
    options = {"txnAppId": TXN_APP_ID, "txnVersion": str(version)}
    if upgrade:
        options["overwriteSchema"] = "true"
    rows: dict[str, int] = {}
    for name, table in [*result.tables.items(), ("rejected_events", result.rejected)]:
        started = time.monotonic()
        table_options = dict(options)
        if name in TABLE_PARTITIONS:
            table_options["partitionBy"] = json.dumps(list(TABLE_PARTITIONS[name]))
        table = laid_out(name, table, table_options)
        sessionless.write_arrow(
            table, output.table(name), _spark_schema(name, table), "overwrite", table_options
        )
        rows[name] = table.num_rows
        seconds[name] = round(time.monotonic() - started, 3)
        progress(f"wrote {name}: {rows[name]:,} rows in {seconds[name]:.1f} s")
    started = time.monotonic()
    run_row["delivery_counts_version"] = sessionless.table_version(output.table("delivery_counts"))
    assert result.states is not None
    state = _state_table(result.states, run_row)
    progress("writing the state")
    sessionless.write_arrow(
        state,
        output.table(STATE_TABLE),
        STATE_TABLE_SCHEMA,
        "overwrite",
        {**options, "overwriteSchema": "true"},
    )
    seconds[STATE_TABLE] = round(time.monotonic() - started, 3)
    progress(f"wrote the state: {state.num_rows:,} rows in {seconds[STATE_TABLE]:.1f} s")
    return rows


def _state_table(states: pa.Table, run_row: dict[str, Any]) -> pa.Table:
    """The state table's rows: a ``family`` row per row of ``states`` and the run row."""
    n = states.num_rows
    columns = []
    for f in STATE_ROWS:
        if f.name == "kind":
            columns.append(pa.repeat("family", n).cast(f.type))
        elif f.name in FAMILY_STATE_COLUMNS:
            columns.append(states.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    families = pa.table(columns, schema=STATE_ROWS)
    run = pa.Table.from_pylist([run_row], schema=STATE_ROWS)
    return pa.concat_tables([families, run])


def changed_rows(name: str, rows: pa.Table, high_seq: int) -> pa.Table:
    """``carry.changed_rows`` in Arrow: the rows of history table ``name`` a night
    writes."""
    if name == "delivery_counts":
        keep = pc.greater(rows.column("changed_seq"), high_seq)
    elif name == "pel_history":
        keep = pc.or_(
            pc.greater(rows.column("valid_from_seq"), high_seq),
            pc.is_valid(rows.column("valid_to_seq")),
        )
    elif name in ("ownership_changes", "rejected_events"):
        seq = rows.column("seq")
        keep = pc.or_(pc.is_null(seq), pc.greater(seq, high_seq))
    else:
        raise ValueError(f"{name} is not a history table")
    return rows.filter(pc.fill_null(keep, False))


def _write_night(
    output: storage.Output,
    result: LocalResult,
    run_row: dict[str, Any],
    high_seq: int,
    pinned: dict[str, int],
    version: int,
    progress: Progress,
    seconds: dict[str, float],
    merge_reads: dict[str, str],
    prior: PriorDeliveryCounts | None = None,
) -> dict[str, int]:
    """A night's writes (``runs.incremental._write_night``): the snapshot tables whole, the
    history tables by appending their new rows and replacing the rows new commands
    changed, then the state rows of the replayed families and the run row.
    ``merge_reads``: what delivery_counts' merge met, its ``pending`` partition where
    every row it replaces is pending (``carry.PENDING_ONLY``), else the whole table."""
    rows: dict[str, int] = {}
    steps = [*SNAPSHOT_TABLES, *HISTORY_TABLES, "rejected_events"]
    options = {"txnAppId": TXN_APP_ID, "txnVersion": str(version)}
    for i, name in enumerate(steps, start=1):
        progress(f"writing {name} ({i}/{len(steps) + 1})")
        started = time.monotonic()
        path = output.table(name)
        if name in SNAPSHOT_TABLES:
            table = result.tables[name]
            sessionless.write_arrow(table, path, _spark_schema(name, table), "overwrite", options)
            rows[name] = table.num_rows
            what = f"{rows[name]:,} rows"
        else:
            _restore_if_moved(path, pinned.get(name), progress)
            source = result.rejected if name == "rejected_events" else result.tables[name]
            changed = changed_rows(name, source, high_seq)
            narrowed = None
            rewrote = ""
            if name in HISTORY_KEYS:
                where = PEL_HISTORY_REPLACES if name == "pel_history" else None
                if name == "delivery_counts":
                    narrowed = not result.carried.get("prior_closed", True)
                    where = PENDING_ONLY if narrowed else None
                if name == "delivery_counts" and prior is not None:
                    inserted, deleted, rewritten = prior.rewrite(
                        changed, _spark_schema(name, changed)
                    )
                    done = {"inserted": inserted, "deleted": deleted}
                    if inserted or deleted:
                        rewrote = "pending partition" + (
                            f" and {rewritten} closed file(s) of {len(prior.closed)}"
                            if rewritten
                            else ""
                        )
                    narrowed = None
                else:
                    done = sessionless.replace_arrow(changed, path, HISTORY_KEYS[name], where=where)
            else:
                done = {"inserted": sessionless.append_arrow(changed, path), "deleted": 0}
            rows[name] = done["inserted"]
            what = f"{done['inserted']:,} rows added or changed, {done['deleted']:,} replaced"
            if rewrote:
                merge_reads[name] = rewrote
                what += f" (files rewritten: the {rewrote})"
            if narrowed is not None and (done["inserted"] or done["deleted"]):
                merge_reads[name] = (
                    "pending partition" if narrowed else "whole table: a closed row changed"
                )
                what += f" (the merge read the {merge_reads[name]})"
        seconds[name] = round(time.monotonic() - started, 3)
        progress(f"wrote {name}: {what} in {seconds[name]:.1f} s")
    progress("writing the state")
    started = time.monotonic()
    path = output.table(STATE_TABLE)
    _restore_if_moved(path, pinned.get(STATE_TABLE), progress)
    run_row["delivery_counts_version"] = sessionless.table_version(output.table("delivery_counts"))
    assert result.states is not None
    replayed = result.states.filter(result.states.column("replayed"))
    fresh = _state_table(replayed, run_row)
    renamed = result.carried.get("renamed") or {}
    gone = pa.Table.from_pylist(
        [{"kind": "family", "db": db, "family": family} for (db, family) in renamed],
        schema=pa.schema([STATE_ROWS.field(c) for c in ("kind", "db", "family")]),
    )
    done = sessionless.replace_arrow(
        fresh, path, ("kind", "db", "family"), delete_keys=gone, null_safe=True
    )
    seconds[STATE_TABLE] = round(time.monotonic() - started, 3)
    progress(
        f"wrote the state: {done['inserted']:,} rows added or changed, {done['deleted']:,} "
        f"replaced in {seconds[STATE_TABLE]:.1f} s"
    )
    return rows


def _delivery_counts_read(
    path: storage.TableRef, version: int
) -> tuple[pa.Table, PriorDeliveryCounts | None]:
    """What a night reads of ``delivery_counts`` at ``version``: its ``pending`` partition
    whole (as large as the live PELs), and a reader of its other (closed) rows
    (:class:`PriorDeliveryCounts`). An output written before the table was partitioned is
    all one part: read whole (and merged whole)."""
    files = sessionless.data_files(path, version)
    if not files or any("status" not in parts for _, parts in files):
        return sessionless.read_arrow(path, version=version), None
    pending = [f for f, parts in files if parts["status"] == "pending"]
    closed = [f for f, parts in files if parts["status"] != "pending"]
    rows = sessionless.read_arrow(path, version=version, files=pending)
    return rows, PriorDeliveryCounts(path, version, pending, closed, rows)


class PriorDeliveryCounts:
    """The previous ``delivery_counts`` a night continues, as it reads it: the ``pending``
    partition whole, and (called as ``night.ClosedRows``) of the closed files only their
    identity columns, then every column of the few files holding a row the night
    continues (an entry delivered again after it closed, a group a RENAME moved).

    It keeps what it read, so that the night's write (:meth:`rewrite`) removes exactly the
    files holding a row it replaces and adds back their other rows with the new ones, in
    one commit: the whole table is never met, and a closed file is read once."""

    def __init__(
        self,
        path: storage.TableRef,
        version: int,
        pending: list[str],
        closed: list[str],
        pending_rows: pa.Table,
    ) -> None:
        self.path, self.version = path, version
        self.pending, self.closed, self.pending_rows = pending, closed, pending_rows
        #: once the night asked for closed rows: the closed files read (their identity
        #: columns, one after another in ``identity``; file i's rows start at starts[i])
        self.files: list[str] | None = None
        self.identity = pa.table({})
        self.starts = np.zeros(1, np.int64)
        #: the closed files read whole (those holding a row the night continues)
        self.whole: dict[str, pa.Table] = {}

    def __call__(self, wanted: Callable[[pa.Table], pa.Array]) -> pa.Table:
        self._read_identities()
        parts = self._by_file(np.asarray(wanted(self.identity), np.int64)) if self.files else {}
        self._read_whole(list(parts))
        found = [self.whole[file].take(pa.array(at)) for file, at in parts.items()]
        return pa.concat_tables(found) if found else self.pending_rows.schema.empty_table()

    def _read_identities(self) -> None:
        if self.files is not None:
            return
        by_file = sessionless.read_arrow_by_file(
            self.path, self.closed, SEGMENT_IDENTITY, self.version
        )
        self.files = list(by_file)
        if self.files:
            self.identity = pa.concat_tables([by_file[file] for file in self.files])
            sizes = [by_file[file].num_rows for file in self.files]
            self.starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])

    def _by_file(self, at: np.ndarray) -> dict[str, np.ndarray]:
        """Positions (ascending) in ``identity`` by the file they are in, as positions in
        that file."""
        assert self.files is not None
        which = np.searchsorted(self.starts, at, side="right") - 1
        return {self.files[i]: at[which == i] - self.starts[i] for i in np.unique(which).tolist()}

    def _read_whole(self, files: Sequence[str]) -> None:
        missing = [file for file in files if file not in self.whole]
        self.whole.update(sessionless.read_arrow_by_file(self.path, missing, None, self.version))

    def rewrite(self, changed: pa.Table, schema: StructType) -> tuple[int, int, int]:
        """Write the night's ``changed`` rows: remove the files holding a row with the
        identity of one of them (the pending files; the closed ones, when the night read
        the closed identities), add their other rows and ``changed``, in one commit,
        ordered by ``changed_seq`` in files of ``DELIVERY_COUNTS_FILE_ROWS`` at most.
        Returns the rows inserted and replaced and the closed files rewritten."""
        keys = list(HISTORY_KEYS["delivery_counts"])
        remove: list[str] = []
        keep: list[pa.Table] = []
        replaced = 0
        if changed.num_rows and self.pending:
            hit = night.matching(self.pending_rows, changed, keys, anti=False)
            if len(hit):
                remove += self.pending
                kept = night.matching(self.pending_rows, changed, keys, anti=True)
                keep.append(self.pending_rows.take(kept))
                replaced += len(hit)
        parts: dict[str, np.ndarray] = {}
        if changed.num_rows and self.files:
            # the rows of an ID the night changed (one column's hash lookup), then those
            # of them with a changed row's whole identity
            ids = pc.unique(changed.column("id").combine_chunks())
            ids = ids.cast(self.identity.schema.field("id").type)
            maybe = pc.is_in(self.identity.column("id"), value_set=ids)
            candidates = nonzero(pc.fill_null(maybe, False))
            at = night.matching(self.identity.take(candidates), changed, keys, anti=False)
            parts = self._by_file(np.asarray(candidates.take(at), np.int64))
        self._read_whole(list(parts))
        for file, at in parts.items():
            whole = self.whole[file]
            kept_mask = np.ones(whole.num_rows, bool)
            kept_mask[at] = False
            keep.append(whole.filter(pa.array(kept_mask)))
            remove.append(file)
            replaced += len(at)
        rows = pa.concat_tables(
            [*(t.select(changed.column_names).cast(changed.schema) for t in keep), changed]
        )
        options: dict[str, str] = {}
        rows = laid_out("delivery_counts", rows, options)
        sessionless.rewrite_arrow(rows, self.path, schema, remove, options)
        return changed.num_rows, replaced, len(parts)


_NO_ROWS = pa.table({})


def _restore_if_moved(path: storage.TableRef, pinned: int | None, progress: Progress) -> None:
    """Put ``path`` back to ``pinned`` when an interrupted run committed to it since."""
    if pinned is None:
        return
    current = sessionless.table_version(path)
    if current is not None and current > pinned:
        progress(
            f"{path}: version {current} was written by an interrupted run; restoring "
            f"version {pinned}, the last finished run's"
        )
        sessionless.restore(path, pinned)


def _changed_families(states: pa.Table, saved: pa.Table) -> list[dict[str, Any]]:
    """Families whose rows up to the old high_seq differ from what the state saw
    (``runs.incremental._changed_families``)."""
    new = {
        (r["db"], r["family"]): (r["mark_n"], r["mark_x"])
        for r in states.select(["db", "family", "mark_n", "mark_x"]).to_pylist()
    }
    old = {
        (r["db"], r["family"]): (r["agg_n"], r["agg_x"])
        for r in saved.select(["db", "family", "agg_n", "agg_x"]).to_pylist()
    }
    out = []
    for key in sorted(set(new) | set(old), key=lambda k: (k[0] is None, k[0], k[1] or "")):
        now = tuple(v or 0 for v in new.get(key, (0, 0)))
        before = tuple(v or 0 for v in old.get(key, (0, 0)))
        if now != before:
            out.append(
                {
                    "db": key[0],
                    "family": key[1],
                    "rows_before": old.get(key, (None, None))[0],
                    "rows_now": new.get(key, (None, None))[0],
                }
            )
    return out[:1000]


def _max(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _first_line(exc: BaseException, limit: int = 300) -> str:
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."
