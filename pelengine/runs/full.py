"""A full run: read the events table, reconstruct every table, write them and the run
report.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from pyspark.sql import SparkSession

from pelengine import storage
from pelengine.pipeline.conform import InputContractError
from pelengine.pipeline.reconstruct import reconstruct
from pelengine.progress import Progress, quiet
from pelengine.runs.output import write_outputs
from pelengine.settings import Settings


def run_reconstruct(
    spark: SparkSession,
    events_path: str,
    out_path: str | storage.Output,
    options: Settings | None = None,
    progress: Progress = quiet,
) -> dict[str, Any]:
    """Read the events table, reconstruct, write every table under ``out_path``; return
    the run report (also written to ``out_path/_run_report.json``).

    ``events_path``: a path, or ``catalog.schema.table`` (see :func:`storage.table_ref`);
    ``out_path``: a root path, or a :class:`storage.Output` (catalog tables).
    ``options.incremental``: continue from the state under ``out_path`` (see
    :mod:`pelengine.runs.incremental`)."""
    options = options or Settings()
    output = storage.check_output(spark, out_path)
    events_ref = storage.table_ref(events_path)
    storage.check_input(spark, events_ref)
    if options.incremental:
        from pelengine.runs.incremental import run_incremental

        return run_incremental(spark, events_path, output, options, progress)
    started = time.time()
    if not storage.table_exists(spark, events_ref):
        raise InputContractError(f"--events {events_path}: no Delta table there")
    input_version = storage.table_version(spark, events_ref)
    progress(f"reading events from {events_path} (Delta version {input_version})")
    events = storage.read_table(spark, events_ref)
    result = reconstruct(spark, events, options, progress)
    report = result.report
    write_started = time.monotonic()
    output_rows = write_outputs(
        spark,
        [*result.tables.items(), ("rejected_events", result.rejected)],
        output,
        txn_app_id=options.txn_app_id,
        txn_version=options.txn_version,
        progress=progress,
    )
    report["timings_s"]["write"] = round(time.monotonic() - write_started, 3)
    rejected_by_reason = {
        r["reason"]: r["count"] for r in result.rejected.groupBy("reason").count().collect()
    }
    report["events"]["read"] = report["events"]["valid"] + sum(rejected_by_reason.values())
    report["events"]["rejected"] = sum(rejected_by_reason.values())
    report["events"]["rejected_by_reason"] = rejected_by_reason
    report.update(
        {
            "input": {"path": events_path, "delta_version": input_version},
            "output": {**output.describe(), "rows": output_rows},
            "keys": output_rows.get("streams", 0),
            "options": asdict(options),
            "storage": storage.storage_mode(spark),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "duration_s": round(time.time() - started, 3),
        }
    )
    result.unpersist()
    storage.write_run_report(output, report)
    return report
