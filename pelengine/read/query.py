"""``pelengine sql``: SQL over the tables of an output root, each a temp view of its name.

:func:`register_views` makes ``pel``, ``ownership``, ``delivery_counts``, ``groups``,
``streams``, ``ownership_changes``, ``pel_history``, ``rejected_events`` and the
``report_*`` tables of ``pelengine report`` — those that exist under the root —
temp views of the session (and drops views of those names that do not exist there,
so a query never reads another root's table). :func:`run_query` runs one query.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from pelengine import storage
from pelengine.read.report import REPORT_TABLES
from pelengine.schemas import OUTPUT_TABLES

KNOWN_TABLES: tuple[str, ...] = (
    *OUTPUT_TABLES,
    "rejected_events",
    storage.RUNS_TABLE,
    *REPORT_TABLES,
)
_VIEW_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class QueryError(ValueError):
    """The query cannot run on these tables (unknown table, bad SQL): names both."""


@dataclass(frozen=True)
class QueryResult:
    """The first rows of a query (``truncated``: there were more than ``limit``)."""

    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool
    views: dict[str, str]


def find_tables(spark: SparkSession, out_path: str | storage.Output) -> dict[str, storage.TableRef]:
    """Name -> path of every Delta table under ``out_path``: the known names, and (local
    roots) any other table directory not starting with ``_`` (e.g. ``_state``)."""
    found: dict[str, storage.TableRef] = {}
    for name in KNOWN_TABLES:
        path = storage.table_path(out_path, name)
        if storage.table_exists(spark, path):
            found[name] = path
    output = storage.as_output(out_path)
    local = None if output.by_name or not output.root else storage.local_path(output.root)
    if local is not None and os.path.isdir(local):
        for entry in sorted(os.listdir(local)):
            if entry in found or entry.startswith("_") or not _VIEW_NAME.match(entry):
                continue
            if os.path.isdir(os.path.join(local, entry, "_delta_log")):
                found[entry] = storage.table_path(out_path, entry)
    return found


def register_views(
    spark: SparkSession, out_path: str | storage.Output
) -> dict[str, storage.TableRef]:
    """Make every table under ``out_path`` a temp view of its name; returns name -> path."""
    tables = find_tables(spark, out_path)
    if not tables:
        output = storage.as_output(out_path)
        where = f"in schema {output}" if output.by_name else f"under --out {out_path}"
        raise QueryError(
            f"no tables {where} (expected {', '.join(OUTPUT_TABLES)}: "
            "written by pelengine reconstruct)"
        )
    for name in KNOWN_TABLES:
        if name not in tables:
            spark.catalog.dropTempView(name)
    run = storage.run_versions(out_path, spark)  # every table as the last complete run left it
    for name, path in tables.items():
        storage.read_table(spark, path, run.get(name)).createOrReplaceTempView(name)
    return tables


def _first_line(exc: BaseException) -> str:
    """The error's first line (Spark's messages go on with search paths and plans)."""
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), repr(exc))


@contextlib.contextmanager
def _quiet_query_errors() -> Iterator[None]:
    """Silence PySpark's logging of a failing query's context (a JSON line with the JVM
    stack on stderr): the error is reported once, by :class:`QueryError`."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # PySpark < 4
        yield
        return
    logger = PySparkLogger.getLogger("SQLQueryContextLogger")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_query(
    spark: SparkSession, out_path: str | storage.Output, query: str, limit: int | None = 100
) -> QueryResult:
    """Run ``query`` over the views of ``out_path``; at most ``limit`` rows (None: all)."""
    from pyspark.errors import AnalysisException

    views = register_views(spark, out_path)
    try:
        with _quiet_query_errors():
            df: DataFrame = spark.sql(query)
            rows = df.limit(limit + 1).collect() if limit is not None else df.collect()
    except AnalysisException as exc:
        available = ", ".join(views)
        raise QueryError(
            f"query failed: {_first_line(exc)}\n"
            f"  query: {query}\n"
            f"  views of --out {out_path}: {available}"
        ) from None
    truncated = limit is not None and len(rows) > limit
    if truncated:
        rows = rows[:limit]
    return QueryResult(
        list(df.columns), [tuple(r) for r in rows], truncated, {k: str(v) for k, v in views.items()}
    )


def render(result: QueryResult, fmt: str = "table") -> str:
    """The rows as ``table``, ``json`` or ``csv`` text."""
    from pelengine.tabular import format_csv, format_json, format_table

    formats = {"table": format_table, "json": format_json, "csv": format_csv}
    text = formats[fmt](result.columns, result.rows)
    if fmt == "table":
        n = len(result.rows)
        text += (
            f"\n({n} row{'s' if n != 1 else ''}{', more not shown' if result.truncated else ''})"
        )
    return text
