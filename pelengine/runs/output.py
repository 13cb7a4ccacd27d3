"""The output writer both runs share, and the run report as text."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from pelengine import storage
from pelengine.progress import (
    Progress,
    SparkCounters,
    quiet,
    spark_actions_since,
    spark_jobs_so_far,
)
from pelengine.schemas import MERGED_TABLES, OUTPUT_TABLES, TABLE_PARTITIONS
from pelengine.settings import Settings


def write_outputs(
    spark: SparkSession,
    tables: list[tuple[str, DataFrame]],
    out_path: str | storage.Output,
    *,
    txn_app_id: str | None,
    txn_version: int | None,
    progress: Progress = quiet,
    seconds: dict[str, float] | None = None,
    overwrite_schema: bool = False,
    deletion_vectors: bool = False,
) -> dict[str, int]:
    """Write each (name, DataFrame) as ``out_path/name`` (overwrite, one commit each, with
    the txn options; ``overwrite_schema``: replacing the tables' schemas, when rewriting
    an output of an earlier contract version; ``deletion_vectors``: the tables nights
    merge into get them, on delta-spark; the tables of ``TABLE_PARTITIONS`` are
    partitioned, whatever they were before), or by name for an :class:`storage.Output`
    of catalog tables; returns each table's rows as written, from each commit's own
    metrics (nothing is read again), and puts each table's seconds in ``seconds``.

    Several at once on delta-spark, one after the other on the embedded store
    (:func:`at_once`)."""
    output = storage.as_output(out_path)
    rows: dict[str, int] = {}

    def write(i: int, name: str, df: DataFrame) -> None:
        path = output.table(name)
        progress(f"writing {name} ({i}/{len(tables)})")
        started = time.monotonic()
        storage.write_table(
            df,
            path,
            "overwrite",
            txn_app_id=txn_app_id,
            txn_version=txn_version,
            overwrite_schema=overwrite_schema,
            deletion_vectors=deletion_vectors and name in MERGED_TABLES,
            partition_by=TABLE_PARTITIONS.get(name, ()),
        )
        counted = storage.commit_rows(spark, path)
        rows[name] = counted if counted is not None else storage.table_row_count(spark, path)
        took = time.monotonic() - started
        if seconds is not None:
            seconds[name] = round(took, 3)
        progress(f"wrote {name}: {rows[name]:,} rows in {took:.1f} s")

    at_once(
        spark,
        [functools.partial(write, i, name, df) for i, (name, df) in enumerate(tables, start=1)],
    )
    return {name: rows[name] for name, _ in tables}


def at_once(spark: SparkSession, steps: list[Callable[[], None]]) -> None:
    """Run ``steps`` (a run's table writes, each independent of the others), as many at
    once as the session's store allows (:func:`storage.concurrent_writes`), in order when
    one. On a failure the steps not yet started are dropped, the running ones finish, and
    the first failure (in ``steps``' order) is raised: every table is then at its old or
    its new version, as after a run killed there, and no ``_runs`` row names them."""
    workers = min(storage.concurrent_writes(spark), len(steps))
    if workers <= 1:
        for step in steps:
            step()
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="pelengine-write") as pool:
        futures = [pool.submit(step) for step in steps]
        wait(futures, return_when=FIRST_EXCEPTION)
        if any(f.done() and f.exception() is not None for f in futures):
            for future in futures:
                future.cancel()
        wait(futures)
    for future in futures:
        if not future.cancelled() and future.exception() is not None:
            raise future.exception()  # type: ignore[misc]


def format_report(report: dict[str, Any]) -> str:
    """The run report as a few readable lines."""
    ev = report.get("events", {})
    inp = report.get("input", {})
    lines = [
        f"profile {report.get('profile', '-')}"
        + (f" ({report['profile_reason']})" if report.get("profile_reason") else "")
        + f"  as of seq {report.get('as_of_seq')}"
        f" / {report.get('as_of_ms')} ms  (events {inp.get('path', '?')}, Delta version "
        f"{inp.get('delta_version', '?')})",
    ]
    if report.get("engine"):
        lines.append(f"engine {report['engine']} ({report.get('engine_reason', '')})")
    for snap in report.get("starting_state") or []:
        lines.append(
            f"starting state: a snapshot ({snap['rows']:,} PELENGINE.LOAD rows from source "
            f"{snap['source']}, seq {snap['first_seq']}..{snap['last_seq']}, taken at "
            f"{snap['snapshot_ms']} ms)"
        )
    inc = report.get("incremental")
    if inc:
        line = f"incremental: {inc.get('mode')}"
        if inc.get("families_total") is not None:
            line += (
                f", {inc.get('families_replayed')} of {inc.get('families_total')} families replayed"
            )
        if inc.get("families_with_changed_history"):
            line += f", {len(inc['families_with_changed_history'])} with changed history"
        lines.append(line)
    split = report.get("split_by_group") or {}
    if split.get("families_split"):
        lines.append(
            f"split by group: {split['families_split']} stream famil(ies) with "
            f">= {split['min_groups']} groups replayed as {split['units']} tasks"
        )
    if report.get("written") is False:
        lines.append("nothing written: the tables are already at this events version")
    if ev:
        lines.append(
            f"events: read {ev.get('read', ev.get('valid'))}, applied {ev.get('applied')}, "
            f"ignored {ev.get('ignored')}, failed {ev.get('failed')}, "
            f"rejected {ev.get('rejected', 0)}"
        )
    if ev.get("failed_by_kind"):
        lines.append(
            "failed by error kind: "
            + ", ".join(f"{k} {v}" for k, v in ev["failed_by_kind"].items())
        )
    if ev.get("rejected_by_reason"):
        lines.append(
            "rejected: "
            + ", ".join(f"{k} {v}" for k, v in ev["rejected_by_reason"].items())
            + " (rows in rejected_events)"
        )
    rows = report.get("output", {}).get("rows", {})
    if rows:
        lines.append("rows: " + ", ".join(f"{k} {v}" for k, v in rows.items()))
    if report.get("notes"):
        lines.append("notes: " + ", ".join(f"{k} {v}" for k, v in report["notes"].items()))
    timings = report.get("timings_s", {})
    lines.append(
        f"took {report.get('duration_s', '?')} s"
        + (" (" + ", ".join(f"{k} {v}" for k, v in timings.items()) + ")" if timings else "")
        + (
            f", {report['spark_actions']} Spark actions"
            if report.get("spark_actions") is not None
            else ""
        )
        + (f", {report['spark_jobs']} Spark jobs" if report.get("spark_jobs") is not None else "")
    )
    return "\n".join(lines)


def count_rejected(report: dict[str, Any]) -> None:
    """The report's read / rejected counts, from the rejected rows' counts by reason
    (``events.rejected_by_reason``, which the reconstruct's first aggregate gave)."""
    events = report.setdefault("events", {})
    by_reason = events.setdefault("rejected_by_reason", {})
    events["read"] = events.get("valid", 0) + sum(by_reason.values())
    events["rejected"] = sum(by_reason.values())


def finish_report(
    report: dict[str, Any],
    spark: SparkSession,
    output: storage.Output,
    settings: Settings,
    started: float,
    *,
    counters_at_start: SparkCounters | None = None,
    written: bool | None = None,
    record: bool = True,
    extra_tables: tuple[str, ...] = (),
    replace: bool = False,
) -> dict[str, Any]:
    """Complete the run report (options, storage, start, duration), write it as
    ``<root>/_run_report.json`` for people and, as the run's last write, append its row to
    the output's ``_runs`` (``record``; ``replace``: replacing the ``_runs`` of an output of
    an earlier contract version); the same for every run. ``extra_tables``: tables besides
    the output tables whose versions the row names (a night's state);
    ``counters_at_start``: :func:`~pelengine.progress.spark_counters` when the run began
    (the report's ``spark_actions`` and ``spark_jobs``: those up to this record)."""
    # the run's last word: each table's version, which readers read (storage.run_versions)
    tables = {}
    for name in (*OUTPUT_TABLES, "rejected_events", *extra_tables):
        version = storage.table_version(spark, output.table(name))
        if version is not None:
            tables[name] = version
    report["tables"] = tables
    report["options"] = asdict(settings)
    report["storage"] = storage.storage_mode(spark)
    report["storage_reason"] = storage.storage_reason(spark)
    report["output_version"] = storage.OUTPUT_VERSION
    report.setdefault("run_id", str(uuid.uuid4()))
    report["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    report["duration_s"] = round(time.time() - started, 3)
    if counters_at_start is not None:
        jobs_now = spark_jobs_so_far(spark)
        if counters_at_start.jobs is not None and jobs_now is not None:
            report["spark_jobs"] = jobs_now - counters_at_start.jobs
        if counters_at_start.query is not None:
            actions = spark_actions_since(spark, counters_at_start.query)
            if actions is not None:
                report["spark_actions"] = actions
    if written is not None:
        report["written"] = written
    storage.write_run_report(output, report)
    if record:
        storage.record_run(spark, output, report, replace=replace)
    return report
