"""The commands that read an output root: ``summary``, ``pel-as-of``, ``sql``, ``pending``
and ``report`` (which also writes its own tables). None replays."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from pelengine.commands.args import (
    EXIT_FAILED,
    EXIT_OK,
    UsageError,
    reconstruct_output,
    report_thresholds,
)
from pelengine.progress import Progress
from pelengine.settings import Config
from pelengine.storage import check_output

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def cmd_summary(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Print the summary of an output root."""
    from pelengine.read.summary import summarize

    print(summarize(spark, args.out))
    return EXIT_OK


def cmd_pel_as_of(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Print the PEL at a past moment, read from ``pel_history`` (no replay)."""
    from pelengine.read.pel_as_of import describe_pel_as_of

    print(
        describe_pel_as_of(
            spark,
            args.out,
            as_of_seq=args.as_of_seq,
            as_of_ms=args.as_of_ms,
            key=args.key,
            group=args.group,
            limit=args.limit,
        )
    )
    return EXIT_OK


def cmd_sql(spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress) -> int:
    """Run a query over the tables of an output root and print the rows."""
    from pelengine.read.query import QueryError, render, run_query

    try:
        output = check_output(spark, reconstruct_output(args, conf))
        where = output if output.by_name else args.out
        result = run_query(spark, where, args.query, args.limit or None)
    except QueryError as exc:
        raise UsageError(str(exc)) from None
    fmt = "json" if args.json else "csv" if args.csv else "table"
    print(render(result, fmt))
    if result.truncated and fmt != "table":
        progress(f"only the first {args.limit} rows printed (--limit N, or --limit 0 for all)")
    return EXIT_OK


def cmd_pending(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Print what XPENDING would print, from the snapshot tables."""
    from pelengine.read.pending import (
        PendingArgumentError,
        describe,
        xpending_range,
        xpending_summary,
    )

    if args.start is None:
        answer = xpending_summary(spark, args.out, args.key, args.group, db=args.db)
    else:
        try:
            answer = xpending_range(
                spark,
                args.out,
                args.key,
                args.group,
                args.start,
                args.end,
                args.count,
                consumer=args.consumer,
                min_idle_ms=args.idle or 0,
                db=args.db,
                now_ms=args.now_ms,
            )
        except PendingArgumentError as exc:
            raise UsageError(f"--start {args.start} / --end {args.end}: {exc}") from None
    print(describe(answer, args.out, header=not args.no_header))
    return EXIT_FAILED if answer.is_error else EXIT_OK


def cmd_report(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Build, write and print the operational report of an output root."""
    from pelengine.read.report import build_report, describe, write_report
    from pelengine.storage import persist_where_allowed

    thresholds = report_thresholds(args, conf)
    progress(f"building the report of {args.out} ({thresholds})")
    report = build_report(spark, args.out, thresholds, now_ms=args.now_ms)
    # computed once: written, then its first rows printed (computed again where the
    # platform refuses caching: serverless)
    kept = []
    for name, df in list(report.tables.items()):
        persisted = persist_where_allowed(df)
        if persisted is not None:
            report.tables[name] = persisted
            kept.append(persisted)
    try:
        progress("writing " + ", ".join(report.tables))
        counts = write_report(spark, args.out, report)
        if args.json:
            print(json.dumps({**report.facts(), "rows": counts}, indent=2, sort_keys=True))
        else:
            print(describe(report, counts, args.out, args.limit))
    finally:
        for persisted in kept:
            persisted.unpersist()
    return EXIT_OK
