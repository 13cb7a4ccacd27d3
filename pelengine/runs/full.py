"""A full run: read the events table, reconstruct every table, write them and the run
report.
"""

from __future__ import annotations

import time
from typing import Any

from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.pipeline.conform import InputContractError
from pelengine.pipeline.reconstruct import reconstruct
from pelengine.progress import Progress, quiet, spark_counters
from pelengine.runs.output import count_rejected, finish_report, write_outputs
from pelengine.schemas import OUTPUT_TABLES, STATE_TABLE
from pelengine.settings import Settings


def run_reconstruct(
    spark: SparkSession | None,
    events_path: str,
    out_path: str | storage.Output,
    settings: Settings | None = None,
    progress: Progress = quiet,
) -> dict[str, Any]:
    """Read the events table, reconstruct, write every table under ``out_path``; return
    the run report (also written to ``out_path/_run_report.json``).

    ``events_path``: a path, or ``catalog.schema.table`` (see :func:`storage.table_ref`);
    ``out_path``: a root path, or a :class:`storage.Output` (catalog tables).
    ``settings.incremental``: continue from the state under ``out_path`` (see
    :mod:`pelengine.runs.incremental`). ``settings.runner`` "local": the run is made in
    this process, with no session (:mod:`pelengine.runs.local`; ``spark`` may be None)."""
    settings = settings or Settings()
    if settings.runner == "local":  # this process, no session (pelengine.runs.local)
        if settings.incremental:
            from pelengine.runs.local_night import run_local_night

            return run_local_night(events_path, out_path, settings, progress)
        from pelengine.runs.local import run_local

        return run_local(events_path, out_path, settings, progress)
    if spark is None:
        raise ValueError("the Spark runner needs a session (--runner local needs none)")
    output = storage.check_output(spark, out_path)
    events_ref = storage.table_ref(events_path)
    storage.check_input(spark, events_ref)
    # the embedded store cannot continue tables delta-spark gave deletion vectors
    storage.check_embedded_writes(
        spark, [output.table(name) for name in (*OUTPUT_TABLES, "rejected_events", STATE_TABLE)]
    )
    # one writer per output: a second run fails here, naming the first (storage.lease)
    with storage.run_lease(output.root, "reconstruct" + (" --incremental" * settings.incremental)):
        if settings.incremental:
            from pelengine.runs.incremental import run_incremental

            return run_incremental(spark, events_path, output, settings, progress)
        return _run_full(spark, events_path, output, events_ref, settings, progress)


def _run_full(
    spark: SparkSession,
    events_path: str,
    output: storage.Output,
    events_ref: storage.TableRef,
    settings: Settings,
    progress: Progress,
) -> dict[str, Any]:
    started = time.time()
    counters = spark_counters(spark)
    if not storage.table_exists(spark, events_ref):
        raise InputContractError(f"--events {events_path}: no Delta table there")
    input_version = storage.table_version(spark, events_ref)
    # tables of output contract version 1 are rewritten in this version (their schemas
    # and _runs replaced): a full run is the upgrade
    upgrade = storage.check_output_version(spark, output)
    if upgrade:
        progress(f"{output}: tables of output contract version 1: rewriting them in version 2")
    progress(f"reading events from {events_path} (Delta version {input_version})")
    events = storage.read_table(spark, events_ref)
    result = reconstruct(spark, events, settings, progress)
    report = result.report
    write_started = time.monotonic()
    output_rows = write_outputs(
        spark,
        [*result.tables.items(), ("rejected_events", result.rejected)],
        output,
        txn_app_id=settings.txn_app_id,
        txn_version=settings.txn_version,
        progress=progress,
        overwrite_schema=upgrade,
        deletion_vectors=settings.deletion_vectors,
    )
    report["timings_s"]["write"] = round(time.monotonic() - write_started, 3)
    count_rejected(report)
    report["input"] = {"path": events_path, "delta_version": input_version}
    report["output"] = {**output.describe(), "rows": output_rows}
    report["keys"] = output_rows.get("streams", 0)
    result.unpersist()
    return finish_report(
        report, spark, output, settings, started, counters_at_start=counters, replace=upgrade
    )
