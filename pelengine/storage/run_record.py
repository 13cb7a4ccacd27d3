"""The record of every finished run (output contract version 2): the Delta table ``_runs``
in every output root or schema, one row appended per finished run as its last write. The row
names every table's Delta version as the run left it, which readers read, so that a run
killed between two writes is never seen half-written; it also holds the run's moment, the
events version read, the rows written per table and the run report (JSON). Under a root path
the report is also left as ``_run_report.json`` for people, never read back by the job."""

from __future__ import annotations

import json
import os
import uuid
from typing import TYPE_CHECKING, Any

from pelengine.storage.errors import OutputVersionError
from pelengine.storage.names import Output, as_output, table_path
from pelengine.storage.paths import local_path
from pelengine.storage.reads import read_snapshot, read_table
from pelengine.storage.versions import table_exists, table_version
from pelengine.storage.writes import write_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RUN_REPORT = "_run_report.json"

#: The run record, one row per finished run (the run's last write).
RUNS_TABLE = "_runs"
#: The output contract version a run writes (docs/outputs.md); ``_runs.output_version``.
OUTPUT_VERSION = 2
RUNS_SCHEMA = (
    "run_id string, finished_at timestamp, mode string, output_version int, "
    "as_of_ms bigint, as_of_seq bigint, events_version bigint, "
    "tables map<string,bigint>, rows map<string,bigint>, report string"
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


def record_run(
    spark: SparkSession, out: str | Output, report: dict[str, Any], *, replace: bool = False
) -> None:
    """Append the run's row to the output's ``_runs`` table, as the run's last write (its
    ``tables`` name each table's Delta version as the run left it: what readers read).
    ``replace``: the run rewrites an output of an earlier contract version, whose
    ``_runs`` (if any) it replaces."""
    output = as_output(out)
    row = _run_row(report)
    record = spark.createDataFrame([row], RUNS_SCHEMA)
    write_table(
        record,
        output.table(RUNS_TABLE),
        "overwrite" if replace else "append",
        overwrite_schema=replace,
    )


def newest_run(spark: SparkSession, out: str | Output) -> dict[str, Any] | None:
    """The newest row of the output's ``_runs`` table as a dict (None: no run finished
    there yet). :class:`OutputVersionError` for an output written by contract version 1."""
    output = as_output(out)
    runs = output.table(RUNS_TABLE)
    version = table_version(spark, runs)
    if version is None:
        why = _version_one(spark, output)
        if why:
            raise OutputVersionError(str(output), why)
        return None
    df = read_snapshot(spark, runs, version)  # (no Spark job to find its files)
    if "output_version" not in df.columns:
        raise OutputVersionError(str(output), "its _runs table has no output_version")
    from pyspark.sql import functions as F

    newest = df.orderBy(F.col("finished_at").desc()).first()
    return newest.asDict(recursive=True) if newest is not None else None


def _version_one(spark: SparkSession, output: Output) -> str | None:
    """Why ``output`` (without ``_runs``) is a version-1 output, or None: a run report
    under its root, or a history table with the ``as_of_ms`` version 1 stamped on it."""
    if output.root and read_run_report(output) is not None:
        return f"it has a {RUN_REPORT} and no {RUNS_TABLE} table"
    history = table_path(output, "ownership_changes")
    if table_exists(spark, history) and "as_of_ms" in read_table(spark, history).columns:
        return "its ownership_changes table has as_of_* columns"
    return None


def check_output_version(spark: SparkSession, out: str | Output) -> bool:
    """Whether ``out`` holds tables of output contract version 1 (which a full run
    rewrites, overwriting their schemas and ``_runs``)."""
    try:
        newest_run(spark, out)
    except OutputVersionError:
        return True
    return False


def run_versions(out: str | Output, spark: SparkSession | None = None) -> dict[str, int]:
    """Each table's Delta version as the last finished run left it (the newest row of
    ``_runs``): what readers read, so a run killed between two table writes is never
    seen half-written. Empty when no run finished there; :class:`OutputVersionError` for
    an output of contract version 1."""
    if spark is None:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is None:
            return {}
        spark = active
    newest = newest_run(spark, out)
    tables = (newest or {}).get("tables")
    if not isinstance(tables, dict):
        return {}
    return {str(k): int(v) for k, v in tables.items() if v is not None}


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


def _runs_struct() -> Any:
    """``RUNS_SCHEMA`` as a Spark ``StructType`` built without a session (a DDL string
    is parsed by the JVM)."""
    from pyspark.sql.types import (
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    longs = MapType(StringType(), LongType(), True)
    return StructType(
        [
            StructField("run_id", StringType(), True),
            StructField("finished_at", TimestampType(), True),
            StructField("mode", StringType(), True),
            StructField("output_version", IntegerType(), True),
            StructField("as_of_ms", LongType(), True),
            StructField("as_of_seq", LongType(), True),
            StructField("events_version", LongType(), True),
            StructField("tables", longs, True),
            StructField("rows", longs, True),
            StructField("report", StringType(), True),
        ]
    )


def _run_row(report: dict[str, Any]) -> tuple[Any, ...]:
    """The ``_runs`` row of a finished run's ``report`` (``RUNS_SCHEMA``'s columns)."""
    import datetime

    tables = report.get("tables") or {}
    rows = (report.get("output") or {}).get("rows") or {}
    inc = report.get("incremental") or {}
    mode = "incremental" if inc.get("mode") == "incremental" else "full"
    return (
        str(report.get("run_id") or uuid.uuid4()),
        datetime.datetime.now(datetime.UTC),
        mode,
        OUTPUT_VERSION,
        report.get("as_of_ms"),
        report.get("as_of_seq"),
        (report.get("input") or {}).get("delta_version"),
        {str(k): int(v) for k, v in tables.items()},
        {str(k): int(v) for k, v in rows.items() if isinstance(v, int)},
        json.dumps(report, sort_keys=True, default=str),
    )


def record_run_sessionless(root: str, report: dict[str, Any], *, replace: bool = False) -> None:
    """:func:`record_run` for a root path, without a Spark session (the local runner):
    the same row, appended by the embedded store's writer."""
    import pyarrow as pa

    from pelengine.storage import sessionless

    row = _run_row(report)
    names = [f.name for f in _runs_struct().fields]
    arrow = pa.table(
        {
            "run_id": pa.array([row[0]], pa.string()),
            "finished_at": pa.array([row[1]], pa.timestamp("us", tz="UTC")),
            "mode": pa.array([row[2]], pa.string()),
            "output_version": pa.array([row[3]], pa.int32()),
            "as_of_ms": pa.array([row[4]], pa.int64()),
            "as_of_seq": pa.array([row[5]], pa.int64()),
            "events_version": pa.array([row[6]], pa.int64()),
            "tables": pa.array([list(row[7].items())], pa.map_(pa.string(), pa.int64())),
            "rows": pa.array([list(row[8].items())], pa.map_(pa.string(), pa.int64())),
            "report": pa.array([row[9]], pa.string()),
        }
    ).select(names)
    sessionless.write_arrow(
        arrow,
        table_path(Output(root=root), RUNS_TABLE),
        _runs_struct(),
        "overwrite" if replace else "append",
        {"overwriteSchema": "true"} if replace else None,
    )


def newest_run_sessionless(root: str) -> dict[str, Any] | None:
    """:func:`newest_run` for a root path, without a Spark session (the local runner)."""
    from pelengine.storage import sessionless

    output = Output(root=root)
    runs = table_path(output, RUNS_TABLE)
    if not sessionless.table_exists(runs):
        if read_run_report(output) is not None:
            raise OutputVersionError(root, f"it has a {RUN_REPORT} and no {RUNS_TABLE} table")
        history = table_path(output, "ownership_changes")
        if (
            sessionless.table_exists(history)
            and "as_of_ms" in sessionless.read_arrow(history, ["as_of_ms"]).column_names
        ):
            raise OutputVersionError(root, "its ownership_changes table has as_of_* columns")
        return None
    rows = sessionless.read_arrow(runs).to_pylist()
    if rows and "output_version" not in rows[0]:
        raise OutputVersionError(root, "its _runs table has no output_version")
    if not rows:
        return None
    newest = max(rows, key=lambda r: r["finished_at"])
    # maps as Spark gives them (a dict), not Arrow's list of pairs
    return {k: dict(v) if isinstance(v, list) else v for k, v in newest.items()}
