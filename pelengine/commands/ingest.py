"""The commands that fill an events table from a Redis server's files: ``ingest-monitor``
(a MONITOR capture), ``ingest-aof`` (an AOF) and ``ingest-rdb`` (an RDB snapshot)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from pelengine.commands.args import EXIT_FAILED, EXIT_OK, run_settings
from pelengine.progress import Progress
from pelengine.settings import Config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def cmd_ingest_monitor(
    spark: SparkSession | None, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Parse a MONITOR capture and write its commands to the events table."""
    from pelengine.ingest.aof import AofFormatError
    from pelengine.runs.ingest_monitor import ingest_monitor

    try:
        result = ingest_monitor(
            spark,
            args.file,
            args.events,
            overwrite=args.overwrite,
            ids_from_aof=args.ids_from_aof,
            profile=run_settings(args, conf).profile,
            progress=progress,
        )
    except AofFormatError as exc:
        print(f"pelengine ingest-monitor: error: --ids-from-aof: {exc}", file=sys.stderr)
        return EXIT_FAILED
    stats = result.stats
    how = "appended" if result.appended else "wrote"
    seqs = f" (seq {result.first_seq}..{result.last_seq})" if result.rows else ""
    print(f"{how} {result.rows} events{seqs} to {args.events}: {stats.describe()}")
    for lineno, text, why in stats.examples:
        print(f"  not a command, line {lineno} ({why}): {text}")
    if result.pins is not None:
        print(f"  {result.pins.describe()}")
        for line in result.pins.examples:
            print(f"  ID from the AOF, not from ts_ms: {line}")
        for line in result.pins.unpinned_examples:
            print(f"  kept '*' (no AOF ID fits): {line}")
    elif stats.star_uncertain:
        print(
            "  note: pass --ids-from-aof with the server's AOF to pin those IDs "
            "(see docs/ingest.md, MONITOR captures)"
        )
    return EXIT_OK


def cmd_ingest_aof(
    spark: SparkSession | None, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Append what is new in an AOF to the events table (at most once)."""
    from pelengine.ingest.aof import AofFormatError
    from pelengine.runs.ingest_aof import format_ingest_report, ingest_aof

    try:
        report = ingest_aof(spark, args.source, args.events, progress, state_path=args.state)
    except AofFormatError as exc:
        print(f"pelengine ingest-aof: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True, default=str))
    else:
        print(format_ingest_report(report))
    return EXIT_OK


def cmd_ingest_rdb(
    spark: SparkSession | None, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Write the state of an RDB snapshot to the events table (PELENGINE.LOAD rows)."""
    from pelengine.ingest.rdb import RdbFormatError
    from pelengine.runs.ingest_rdb import ingest_rdb

    try:
        report = ingest_rdb(
            spark, args.file, args.events, overwrite=args.overwrite, progress=progress
        )
    except RdbFormatError as exc:
        print(f"pelengine ingest-rdb: error: {exc} (nothing written)", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        how = "appended" if report["appended"] else "wrote"
        print(
            f"{how} {report['rows']:,} load rows (seq {report['first_seq']}..{report['last_seq']}) "
            f"to {args.events}: the state of {args.file} ({report['header']}, taken at "
            f"{report['snapshot_time_ms']} ms): {report['keys']} keys, {report['streams']} "
            f"streams, {report['groups']} groups, {report['pending']} pending entries"
        )
    return EXIT_OK
