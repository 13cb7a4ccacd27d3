"""The record of the last complete run, its last write: ``_run_report.json`` under the
output's root, and for catalog tables a row of the schema's ``_runs`` table. Each names
every table's Delta version as the run left it, which readers read, so that a run killed
between two writes is never seen half-written."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from pelengine.storage.names import Output, Table, as_output, require_delta_spark, table_path
from pelengine.storage.paths import local_path
from pelengine.storage.reads import read_table
from pelengine.storage.versions import table_exists
from pelengine.storage.writes import write_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RUN_REPORT = "_run_report.json"


#: Catalog tables: the run record, one row per complete run (the run's last write).
RUNS_TABLE = "_runs"
RUNS_SCHEMA = (
    "finished_at timestamp, as_of_seq bigint, as_of_ms bigint, "
    "tables map<string,bigint>, report string"
)


def write_run_report(out: str | Output, report: dict[str, Any]) -> str | None:
    """Write ``report`` as ``<root>/_run_report.json``; returns where, or None when the output
    has no root (catalog tables only: the report is only printed).

    The report is the run's last write and names each table's version (``tables``):
    readers read those (:func:`read_output_table`), so it is written whole or not at all
    (a local file is written aside and renamed; an object store's put is atomic)."""
    output = as_output(out)
    if not output.root:
        return None
    text = json.dumps(report, indent=2, sort_keys=True, default=str)
    root = output.root
    local = local_path(root)
    if local is not None:
        os.makedirs(local, exist_ok=True)
        target = os.path.join(local, RUN_REPORT)
        aside = f"{target}.{os.getpid()}.tmp"
        with open(aside, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(aside, target)
        return target
    import pyarrow.fs as pa_fs

    fs, base = pa_fs.FileSystem.from_uri(root)
    target = f"{base.rstrip('/')}/{RUN_REPORT}"
    with fs.open_output_stream(target) as stream:
        stream.write(text.encode("utf-8"))
    return f"{root.rstrip('/')}/{RUN_REPORT}"


def read_run_report(out: str | Output) -> dict[str, Any] | None:
    """The last complete run's report under the output's root (None: no root, no report,
    or one that cannot be read)."""
    output = as_output(out)
    if not output.root:
        return None
    try:
        local = local_path(output.root)
        if local is not None:
            with open(os.path.join(local, RUN_REPORT), encoding="utf-8") as fh:
                text = fh.read()
        else:
            import pyarrow.fs as pa_fs

            fs, base = pa_fs.FileSystem.from_uri(output.root)
            with fs.open_input_stream(f"{base.rstrip('/')}/{RUN_REPORT}") as stream:
                text = stream.read().decode("utf-8")
        report = json.loads(text)
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def record_run(spark: SparkSession, out: str | Output, report: dict[str, Any]) -> None:
    """Catalog tables (an output written by name): append the run's record to the table
    ``_runs`` of the output's schema, as the run's last write. Its ``tables`` column names
    each table's Delta version as the run left it, which readers by name read
    (:func:`run_versions`), so catalog users see whole runs as path users do through
    ``_run_report.json``. Outputs by path keep only the JSON report."""
    output = as_output(out)
    if not output.by_name:
        return
    import datetime

    tables = report.get("tables") or {}
    row = (
        datetime.datetime.now(datetime.UTC),
        report.get("as_of_seq"),
        report.get("as_of_ms"),
        {str(k): int(v) for k, v in tables.items()},
        json.dumps(report, sort_keys=True, default=str),
    )
    record = spark.createDataFrame([row], RUNS_SCHEMA)
    write_table(record, output.table(RUNS_TABLE), "append")


def _recorded_versions(spark: SparkSession, output: Output) -> dict[str, Any]:
    """The ``tables`` of the newest row of the output's ``_runs`` table ({} when none)."""
    from pyspark.sql import functions as F

    runs = output.table(RUNS_TABLE)
    assert isinstance(runs, Table)
    require_delta_spark(spark, str(runs))
    if not spark.catalog.tableExists(runs.name):
        return {}
    newest = read_table(spark, runs).orderBy(F.col("finished_at").desc()).first()
    return dict(newest["tables"] or {}) if newest is not None else {}


def run_versions(out: str | Output, spark: SparkSession | None = None) -> dict[str, int]:
    """Each table's Delta version as the last complete run left it: what readers read, so
    a run killed between two table writes is never seen half-written. From the run report
    under the output's root; for catalog tables without a root, from the newest row of
    ``_runs`` (:func:`record_run`; needs ``spark``). Empty when no record names them (a
    report from before they were recorded: the latest versions)."""
    output = as_output(out)
    if output.root:
        tables = (read_run_report(output) or {}).get("tables")
    elif spark is not None:
        tables = _recorded_versions(spark, output)
    else:
        tables = None
    if not isinstance(tables, dict):
        return {}
    return {str(k): int(v) for k, v in tables.items() if isinstance(v, int)}


def read_output_table(
    spark: SparkSession, root: str | Output, name: str, versions: dict[str, int] | None = None
) -> DataFrame:
    """The table ``name`` of the output root ``root`` at the version the last complete run
    left it (:func:`run_versions`; ``versions`` when the caller read them already, so that
    every table it reads comes from one run); FileNotFoundError naming both when there is
    no table."""
    path = table_path(root, name)
    if not table_exists(spark, path):
        raise FileNotFoundError(
            f"no {name} table under --out {root} (expected at {path}; written by "
            "pelengine reconstruct)"
        )
    version = (run_versions(root, spark) if versions is None else versions).get(name)
    return read_table(spark, path, version)
