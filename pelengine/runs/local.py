"""A full run on the local runner (``reconstruct --runner local``): the events table read
by delta-rs, the pipeline in this process (:mod:`pelengine.local`), the tables, the run
report and the ``_runs`` row written by the embedded store's writer. No JVM starts.

The same tables, written the same way (one overwrite commit each, partitioned as the
Spark runner partitions them, with ``txnAppId``/``txnVersion`` when given), the same
report and the same ``_runs`` row as a full run of the Spark runner on the embedded
store; readers and later runs (on either runner) continue from them.
"""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pelengine import storage
from pelengine.local.reconstruct import reconstruct_local
from pelengine.pipeline.conform import InputContractError
from pelengine.progress import Progress, quiet
from pelengine.runs.output import count_rejected
from pelengine.schemas import OUTPUT_TABLES, TABLE_PARTITIONS, table_schema
from pelengine.settings import Settings
from pelengine.storage import sessionless
from pelengine.storage.run_record import newest_run_sessionless, record_run_sessionless

#: what the report says of the store the local runner writes with
LOCAL_STORE_REASON = (
    "the local runner (--runner local) reads and writes with the embedded store's "
    "delta-rs, in one process: no Spark session"
)


#: how many tables are written at once
WRITERS = 2


class LocalRunnerError(ValueError):
    """A run the local runner does not make (catalog tables, tables by name): one
    sentence."""


def run_local(
    events_path: str,
    out: str | storage.Output,
    settings: Settings | None = None,
    progress: Progress = quiet,
) -> dict[str, Any]:
    """Reconstruct every table of the events table at ``events_path`` into the output
    root ``out`` in this process; return the run report (also ``out/_run_report.json``
    and the newest row of ``out/_runs``)."""
    settings = settings or Settings()
    output = storage.as_output(out)
    if output.by_name or not output.root:
        raise LocalRunnerError(
            "the local runner writes tables by path (--out PATH); catalog tables "
            "(--catalog/--schema) need the Spark runner (--runner spark) with delta-spark"
        )
    if isinstance(storage.table_ref(events_path), storage.Table):
        raise LocalRunnerError(
            f"--events {events_path}: the local runner reads an events table by path; "
            "a table by name needs the Spark runner (--runner spark)"
        )
    if settings.incremental:
        raise LocalRunnerError(
            "a night on the local runner is runs.local_night.run_local_night, not run_local"
        )
    root = output.root
    with storage.run_lease(root, "reconstruct --runner local"):
        return _run(events_path, root, output, settings, progress)


def _run(
    events_path: str,
    root: str,
    output: storage.Output,
    settings: Settings,
    progress: Progress,
) -> dict[str, Any]:
    started = time.time()
    input_version = sessionless.table_version(events_path)
    if input_version is None:
        raise InputContractError(f"--events {events_path}: no Delta table there")
    try:
        newest_run_sessionless(root)
        upgrade = False
    except storage.OutputVersionError:
        upgrade = True
        progress(f"{root}: tables of output contract version 1: rewriting them in version 2")
    progress(
        f"local runner, no Spark session: reading events from {events_path} "
        f"(Delta version {input_version})"
    )
    read_started = time.monotonic()
    events = sessionless.read_arrow(events_path)
    read_s = round(time.monotonic() - read_started, 3)
    result = reconstruct_local(events, settings, progress)
    del events
    report = result.report
    report["timings_s"] = {"read": read_s, **report["timings_s"]}
    write_started = time.monotonic()
    written = [*result.tables.items(), ("rejected_events", result.rejected)]
    rows: dict[str, int] = {}
    options: dict[str, str] = {}
    if settings.txn_app_id is not None and settings.txn_version is not None:
        options = {"txnAppId": settings.txn_app_id, "txnVersion": str(settings.txn_version)}
    if upgrade:
        options["overwriteSchema"] = "true"

    def write(name: str, table: pa.Table) -> None:
        started_table = time.monotonic()
        table_options = dict(options)
        if name in TABLE_PARTITIONS:
            table_options["partitionBy"] = json.dumps(list(TABLE_PARTITIONS[name]))
        schema = _spark_schema(name, table)
        sessionless.write_arrow(table, output.table(name), schema, "overwrite", table_options)
        rows[name] = table.num_rows
        took = time.monotonic() - started_table
        progress(f"wrote {name}: {rows[name]:,} rows in {took:.1f} s")

    # the largest first, two at a time (writing Parquet leaves the interpreter's lock):
    # each is its own commit, as on the Spark runner; the _runs row comes after them all
    progress(f"writing {len(written)} tables, two at a time")
    order = sorted(written, key=lambda item: -item[1].num_rows)
    with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="pelengine-write") as pool:
        for done in [pool.submit(write, name, table) for name, table in order]:
            done.result()
    rows = {name: rows[name] for name, _ in written}
    report["timings_s"]["write"] = round(time.monotonic() - write_started, 3)
    count_rejected(report)
    report["input"] = {"path": events_path, "delta_version": input_version}
    report["output"] = {**output.describe(), "rows": rows}
    report["keys"] = rows.get("streams", 0)
    return _finish(report, output, settings, started, replace=upgrade)


#: The most rows a ``delivery_counts`` file the local runner writes holds. Its rows are
#: written in ``changed_seq`` order, so a file holds the rows of one stretch of the log:
#: the closed rows a night continues (entries delivered again after they closed) are
#: nearly always recent ones, and the night rewrites the few files of the last stretch,
#: not the history.
DELIVERY_COUNTS_FILE_ROWS = 131_072


def by_changed_seq(rows: pa.Table) -> pa.Table:
    """``delivery_counts`` rows in ``changed_seq`` order (the order of its files)."""
    return rows.take(pc.sort_indices(rows.column("changed_seq")))


def laid_out(name: str, table: pa.Table, options: dict[str, str]) -> pa.Table:
    """Table ``name`` as a local run that nights continue writes it whole:
    ``delivery_counts`` in ``changed_seq`` order, in files of ``DELIVERY_COUNTS_FILE_ROWS``
    at most (set in the writer's ``options``); any other as it is. (A run without
    ``--incremental`` leaves no state to continue: it writes in the replay's order.)"""
    if name != "delivery_counts":
        return table
    options["maxRecordsPerFile"] = str(DELIVERY_COUNTS_FILE_ROWS)
    return by_changed_seq(table)


def _spark_schema(name: str, table: Any) -> Any:
    """The Spark schema the embedded writer writes ``name`` with: the output table's, or
    for ``rejected_events`` the conformed events' columns and ``reason``."""
    if name in OUTPUT_TABLES:
        return table_schema(name)
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(table.schema)


def _finish(
    report: dict[str, Any],
    output: storage.Output,
    settings: Settings,
    started: float,
    *,
    replace: bool,
    written: bool | None = None,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The report completed as ``runs.output.finish_report`` completes a Spark run's, then
    ``_run_report.json`` and, unless ``written`` is False (a night with nothing to do),
    the ``_runs`` row (the run's last write). ``extra``: tables besides the output tables
    whose versions the row names (a night's state)."""
    assert output.root is not None
    tables = {}
    for name in (*OUTPUT_TABLES, "rejected_events", *extra):
        version = sessionless.table_version(output.table(name))
        if version is not None:
            tables[name] = version
    report["tables"] = tables
    report["options"] = asdict(settings)
    report["runner"] = "local"
    report["storage"] = storage.EMBEDDED
    report["storage_reason"] = LOCAL_STORE_REASON
    report["output_version"] = storage.OUTPUT_VERSION
    report.setdefault("run_id", str(uuid.uuid4()))
    report["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    report["duration_s"] = round(time.time() - started, 3)
    report["spark_actions"] = 0
    report["spark_jobs"] = 0
    if written is not None:
        report["written"] = written
    storage.write_run_report(output, report)
    if written is not False:
        record_run_sessionless(output.root, report, replace=replace)
    return report
