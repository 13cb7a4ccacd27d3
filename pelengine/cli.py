"""The `pelengine` command line: parse, call the library, print.

Exit codes: 0 success, 1 the job could not produce correct tables (any failure
while working, another run's commit to the same table among them), 2 usage errors (bad
option, missing input path, catalog or schema, bad --conf).
Results go to stdout, progress lines to stderr.

The console script leaves through :func:`exit_process` (`os._exit`): delta-rs can
abort the interpreter during its normal shutdown (delta-rs issue #2184), which
would otherwise replace a true exit code with a crash.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from pelengine.config import Config, ConfigError, load_config
from pelengine.model import resolve_profile
from pelengine.progress import ProgressReporter, spark_status
from pelengine.settings import ENGINES
from pelengine.storage import (
    CatalogNameError,
    ConcurrentWriteError,
    NativeDeltaRequiredError,
    Output,
    RunInProgressError,
    check_output,
    concurrent_write_error,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from pelengine.read.report import Thresholds

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

Progress = Callable[[str], None]


class UsageError(Exception):
    """A bad command line: reported with exit code 2."""


def progress_to_stderr(message: str) -> None:
    """Print one progress line to stderr."""
    print(f"pelengine: {message}", file=sys.stderr, flush=True)


# ---- parsing -------------------------------------------------------------------


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be >= 1, got 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML file merged over the packaged defaults (repeatable, later wins)",
    )
    parser = argparse.ArgumentParser(
        prog="pelengine",
        description="Rebuild Redis Streams consumer-group state from a log of commands.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    rec = sub.add_parser(
        "reconstruct", parents=[common], help="replay an events table into the snapshot tables"
    )
    rec.add_argument(
        "--events",
        required=True,
        metavar="PATH",
        help="events Delta table: a path, or catalog.schema.table (native Delta)",
    )
    rec.add_argument(
        "--out",
        metavar="PATH",
        help="output root for the tables (required unless --schema: then external tables there)",
    )
    rec.add_argument(
        "--catalog",
        metavar="C",
        help="write catalog tables C.<schema>.<table> (needs --schema and native Delta; "
        "default: conf output.catalog; an empty value means unset)",
    )
    rec.add_argument(
        "--schema",
        metavar="S",
        help="write catalog tables [<catalog>.]S.<table> (native Delta; "
        "default: conf output.schema; an empty value means unset)",
    )
    _add_profile(rec)
    rec.add_argument("--as-of-ms", type=_non_negative_int, metavar="N", help="snapshot time")
    rec.add_argument("--as-of-seq", type=_non_negative_int, metavar="N", help="last seq applied")
    rec.add_argument("--txn-app-id", metavar="S", help="idempotent write: application id")
    rec.add_argument(
        "--txn-version", type=_non_negative_int, metavar="N", help="idempotent write: version"
    )
    rec.add_argument(
        "--incremental",
        action="store_true",
        help="continue from the state of the previous run under --out (replay only new "
        "events; the first run replays everything and saves the state)",
    )
    rec.add_argument(
        "--stream-node-max-entries",
        type=_non_negative_int,
        metavar="N",
        help="the server's stream-node-max-entries (default: conf, 100)",
    )
    rec.add_argument(
        "--stream-node-max-bytes",
        type=_non_negative_int,
        metavar="N",
        help="the server's stream-node-max-bytes (default: conf, 4096)",
    )
    rec.add_argument(
        "--split-groups",
        type=_non_negative_int,
        metavar="N",
        help="replay a stream with at least N consumer groups as one task per group "
        "(0: never; default: conf, 0; incremental runs do not split)",
    )
    rec.add_argument(
        "--engine",
        choices=ENGINES,
        help="the replay engine: auto (native when pelengine-native is installed, else "
        "python), native or python (default: conf, auto; docs/native.md)",
    )
    rec.add_argument("--json", action="store_true", help="print the run report as JSON")

    gen = sub.add_parser(
        "generate", parents=[common], help="write a synthetic events table (for demos and tests)"
    )
    gen.add_argument("--out", required=True, metavar="PATH", help="events Delta table to write")
    _add_sizes(gen)

    summ = sub.add_parser("summary", parents=[common], help="print a summary of an output root")
    summ.add_argument("--out", required=True, metavar="PATH", help="output root of reconstruct")

    pas = sub.add_parser(
        "pel-as-of",
        parents=[common],
        help="print the PEL at a past moment, from the output root's pel_history",
    )
    pas.add_argument("--out", required=True, metavar="PATH", help="output root of reconstruct")
    when = pas.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--as-of-seq", type=_non_negative_int, metavar="N", help="after the command at seq N"
    )
    when.add_argument("--as-of-ms", type=_non_negative_int, metavar="N", help="at time N (ms)")
    pas.add_argument("--key", metavar="K", help="only this stream key")
    pas.add_argument("--group", metavar="G", help="only this consumer group")
    pas.add_argument(
        "--limit", type=_positive_int, default=20, metavar="N", help="rows to print (default 20)"
    )

    sql = sub.add_parser(
        "sql",
        parents=[common],
        help="run a SQL query over the tables of an output root (each a view of its name)",
    )
    sql.add_argument("query", metavar="QUERY", help='SQL, e.g. "SELECT * FROM pel LIMIT 5"')
    sql.add_argument(
        "--out", metavar="PATH", help="output root of reconstruct (required unless --schema)"
    )
    sql.add_argument(
        "--catalog", metavar="C", help="catalog tables C.<schema>.<table> (with --schema)"
    )
    sql.add_argument(
        "--schema",
        metavar="S",
        help="catalog tables [<catalog>.]S.<table> as reconstruct wrote them, each read at the "
        "version its last complete run recorded in S._runs (native Delta; default: conf "
        "output.schema)",
    )
    fmt = sql.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print a JSON array of row objects")
    fmt.add_argument("--csv", action="store_true", help="print CSV with a header row")
    sql.add_argument(
        "--limit",
        type=_non_negative_int,
        default=100,
        metavar="N",
        help="rows to print (default 100; 0: all)",
    )

    pend = sub.add_parser(
        "pending",
        parents=[common],
        help="print what XPENDING KEY GROUP [...] would print, from the output tables",
    )
    pend.add_argument("key", metavar="KEY", help="stream key")
    pend.add_argument("group", metavar="GROUP", help="consumer group")
    pend.add_argument("--out", required=True, metavar="PATH", help="output root of reconstruct")
    pend.add_argument("--db", type=_non_negative_int, default=0, metavar="N", help="db (0)")
    pend.add_argument("--start", metavar="ID", help="range start: ID, '-' or '(ID' (exclusive)")
    pend.add_argument("--end", metavar="ID", help="range end: ID, '+' or '(ID' (exclusive)")
    pend.add_argument("--count", type=_non_negative_int, metavar="N", help="at most N entries")
    pend.add_argument("--consumer", metavar="C", help="only entries of consumer C (needs a range)")
    pend.add_argument(
        "--idle", type=_non_negative_int, metavar="MS", help="IDLE MS: entries idle >= MS only"
    )
    pend.add_argument(
        "--now-ms",
        type=_non_negative_int,
        metavar="MS",
        help="measure idle times at this Unix time in ms (default: the snapshot's as_of_ms)",
    )
    pend.add_argument(
        "--no-header", action="store_true", help="print only what redis-cli would print"
    )

    rep = sub.add_parser(
        "report",
        parents=[common],
        help="write and print the operational report (poison, stuck, dead consumers, "
        "dangling, growing lag)",
    )
    rep.add_argument("--out", required=True, metavar="PATH", help="output root of reconstruct")
    rep.add_argument(
        "--poison-count",
        type=_positive_int,
        metavar="N",
        help="poison candidates: delivered >= N times (default: conf report.poison_count)",
    )
    rep.add_argument(
        "--stuck-idle-ms",
        type=_non_negative_int,
        metavar="T",
        help="stuck entries: idle > T ms (default: conf report.stuck_idle_ms)",
    )
    rep.add_argument(
        "--dead-inactive-ms",
        type=_non_negative_int,
        metavar="T",
        help="dead consumers: pending > 0 and inactive > T ms (default: conf "
        "report.dead_inactive_ms)",
    )
    rep.add_argument(
        "--lag-runs",
        type=_positive_int,
        metavar="N",
        help="growing lag: lag rose in each of the last N runs (default: conf report.lag_runs)",
    )
    rep.add_argument(
        "--now-ms",
        type=_non_negative_int,
        metavar="MS",
        help="measure idle/inactive times at this Unix time in ms (default: as_of_ms)",
    )
    rep.add_argument(
        "--limit", type=_positive_int, default=20, metavar="N", help="rows per section (20)"
    )
    rep.add_argument("--json", action="store_true", help="print counts and thresholds as JSON")

    ing = sub.add_parser(
        "ingest-monitor",
        parents=[common],
        help="append a MONITOR capture (redis-cli MONITOR > FILE) to an events table",
    )
    ing.add_argument("file", metavar="FILE", help="MONITOR output, one command per line")
    ing.add_argument("--events", required=True, metavar="PATH", help="events Delta table")
    ing.add_argument(
        "--overwrite", action="store_true", help="replace the table instead of appending to it"
    )
    ing.add_argument(
        "--ids-from-aof",
        metavar="AOF",
        help="the same server's appendonlydir (or AOF file): write the ID each XADD '*' "
        "generated instead of '*' (MONITOR's timestamps cannot always tell it)",
    )
    _add_profile(ing)

    aof = sub.add_parser(
        "ingest-aof",
        parents=[common],
        help="append a Redis AOF (appendonlydir or appendonly.aof) to an events table",
    )
    aof.add_argument(
        "source", metavar="SOURCE", help="appendonlydir, its manifest, or a legacy AOF file"
    )
    aof.add_argument("--events", required=True, metavar="PATH", help="events Delta table")
    aof.add_argument(
        "--state", metavar="PATH", help="ingest state table (default: <events>/_aof_ingest)"
    )
    aof.add_argument("--json", action="store_true", help="print the ingest report as JSON")

    rdb = sub.add_parser(
        "ingest-rdb",
        parents=[common],
        help="write the state of an RDB snapshot (dump.rdb) to an events table: the "
        "starting state of a replay; append a MONITOR capture or app log after it",
    )
    rdb.add_argument("file", metavar="FILE", help="an RDB file: dump.rdb or an AOF's base .rdb")
    rdb.add_argument("--events", required=True, metavar="PATH", help="events Delta table")
    rdb.add_argument(
        "--overwrite", action="store_true", help="replace the table instead of appending to it"
    )
    rdb.add_argument("--json", action="store_true", help="print the ingest report as JSON")

    demo = sub.add_parser(
        "demo", parents=[common], help="generate, reconstruct and summarize in one Spark session"
    )
    demo.add_argument("--dir", metavar="DIR", help="demo directory (default: conf demo.dir)")
    _add_sizes(demo)
    _add_profile(demo)
    for name, subparser in sub.choices.items():
        subparser.set_defaults(usage=subparser.format_usage, command=name)
    return parser


def _first(given: int | None, default: int) -> int:
    return default if given is None else given


def _redis_version(text: str) -> str:
    """``--redis-version``: a version some profile describes (argparse names the option)."""
    try:
        resolve_profile(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _add_profile(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis-version",
        type=_redis_version,
        metavar="VERSION",
        help=(
            "the server's version as it reports it (7.0.15, 7.4.1, valkey-9.1.2) or a "
            "profile name (7.0, 7.4, valkey-8.1); default: conf reconstruct.profile"
        ),
    )


def _add_sizes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=_non_negative_int, metavar="N", help="number of events")
    p.add_argument("--keys", type=_positive_int, metavar="K", help="number of stream keys")
    p.add_argument("--seed", type=_non_negative_int, metavar="S", help="random seed")
    p.add_argument(
        "--no-faults", action="store_true", help="leave out invalid commands and bad rows"
    )


def _is_local(path: str) -> bool:
    from pelengine.storage import local_path

    return local_path(path) is not None


def _local_path(path: str) -> Path:
    from pelengine.storage import local_path

    return Path(local_path(path) or path)


def _check_out_root(out: str) -> None:
    """--out must be an output root: a local path must exist and hold table directories."""
    if not _is_local(out):
        return
    root = _local_path(out)
    if not root.exists():
        raise UsageError(f"--out {out}: no such path")
    if not root.is_dir():
        raise UsageError(f"--out {out}: not a directory (an output root of reconstruct)")
    if not any((entry / "_delta_log").is_dir() for entry in root.iterdir()):
        raise UsageError(
            f"--out {out}: no tables there (an output root of reconstruct holds pel, "
            "ownership, groups, ...)"
        )


def validate(args: argparse.Namespace) -> None:
    """Checks argparse cannot express; raise UsageError naming the option."""
    if args.command == "reconstruct":
        if (args.txn_app_id is None) != (args.txn_version is None):
            raise UsageError("--txn-app-id and --txn-version must be given together")
        if args.incremental and (args.as_of_ms is not None or args.as_of_seq is not None):
            raise UsageError("--incremental cannot be combined with --as-of-ms/--as-of-seq")
        if args.incremental and args.txn_app_id is not None:
            raise UsageError(
                "--incremental derives its own txnAppId/txnVersion (the events table's version)"
            )
        if args.txn_app_id is not None and not args.txn_app_id.strip():
            raise UsageError("--txn-app-id must not be empty")
        from pelengine.storage import table_ref

        events_is_path = isinstance(table_ref(args.events), str)
        if events_is_path and _is_local(args.events) and not _local_path(args.events).exists():
            raise UsageError(f"--events {args.events}: no such path")
        if args.out and _is_local(args.out) and _local_path(args.out).is_file():
            raise UsageError(f"--out {args.out}: a file, not a directory for the tables")
    if args.command in ("ingest-monitor", "ingest-rdb") and not Path(args.file).is_file():
        raise UsageError(f"{args.file}: no such file")
    if (
        args.command == "ingest-monitor"
        and args.ids_from_aof
        and not os.path.exists(args.ids_from_aof)
    ):
        raise UsageError(f"--ids-from-aof {args.ids_from_aof}: no such AOF file or directory")
    if args.command == "ingest-aof" and not os.path.exists(args.source):
        raise UsageError(f"{args.source}: no such AOF file or directory")
    if args.command == "summary" and _is_local(args.out) and not _local_path(args.out).exists():
        raise UsageError(f"--out {args.out}: no such path")
    if args.command in ("pending", "report") or (args.command == "sql" and args.out):
        _check_out_root(args.out)
    if args.command == "pending":
        ranged = [args.start, args.end, args.count]
        if any(v is not None for v in ranged) and any(v is None for v in ranged):
            raise UsageError("--start, --end and --count go together (XPENDING's range)")
        if args.start is None and (args.consumer is not None or args.idle is not None):
            raise UsageError("--consumer and --idle need --start, --end and --count (as XPENDING)")
        if args.start is None and args.now_ms is not None:
            raise UsageError("--now-ms applies to the range form (--start/--end/--count) only")
    if args.command == "sql" and not args.query.strip():
        raise UsageError("the query is empty")
    if args.command == "pel-as-of" and _is_local(args.out):
        if not _local_path(args.out).exists():
            raise UsageError(f"--out {args.out}: no such path")
        if not (_local_path(args.out) / "pel_history").exists():
            raise UsageError(
                f"--out {args.out}: no pel_history table there (reconstruct writes it from "
                "this version on: run reconstruct again)"
            )


# ---- commands --------------------------------------------------------------------


def cmd_reconstruct(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Run the reconstruction and print its report."""
    from pelengine.runs.full import run_reconstruct
    from pelengine.runs.output import format_report
    from pelengine.settings import Settings

    options = Settings(
        profile=args.redis_version or conf.profile,
        node_max_entries=_first(args.stream_node_max_entries, conf.node_max_entries),
        node_max_bytes=_first(args.stream_node_max_bytes, conf.node_max_bytes),
        split_groups=_first(args.split_groups, conf.split_groups),
        engine=args.engine or conf.engine,
        as_of_ms=args.as_of_ms,
        as_of_seq=args.as_of_seq,
        txn_app_id=args.txn_app_id,
        txn_version=args.txn_version,
        incremental=args.incremental,
    )
    output = reconstruct_output(args, conf)
    report = run_reconstruct(spark, args.events, output, options, progress)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True, default=str))
    else:
        print(format_report(report))
        where = os.path.join(output.root, "_run_report.json") if output.root else None
        print(
            f"tables {'written as' if output.by_name else 'under'} {output}; "
            + (f"this report as JSON: {where}" if where else "this report is not saved")
        )
    return EXIT_OK


def reconstruct_output(args: argparse.Namespace, conf: Config) -> Output:
    """Where reconstruct writes: --out, --catalog/--schema over conf output.* (empty = unset)."""
    catalog = args.catalog or conf.output.catalog
    schema = args.schema or conf.output.schema
    try:
        return Output(root=args.out or None, catalog=catalog or None, schema=schema or None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _sizes(args: argparse.Namespace, conf: Config) -> tuple[int, int, int]:
    g = conf.generate
    events = g.events if args.events is None else args.events
    keys = g.keys if args.keys is None else args.keys
    seed = g.seed if args.seed is None else args.seed
    return events, keys, seed


def cmd_generate(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Write a synthetic events table."""
    from pelengine.runs.generate import write_generated_events

    events, keys, seed = _sizes(args, conf)
    n = write_generated_events(
        spark, args.out, events, keys, seed, progress, faults=not args.no_faults
    )
    print(f"wrote {n} events ({keys} keys, seed {seed}) to {args.out}")
    return EXIT_OK


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


def report_thresholds(args: argparse.Namespace, conf: Config) -> Thresholds:
    """The report's thresholds: each CLI flag given, else conf ``report:``."""
    from pelengine.read.report import Thresholds

    c = conf.report
    return Thresholds(
        poison_count=_first(args.poison_count, c.poison_count),
        stuck_idle_ms=_first(args.stuck_idle_ms, c.stuck_idle_ms),
        dead_inactive_ms=_first(args.dead_inactive_ms, c.dead_inactive_ms),
        lag_runs=_first(args.lag_runs, c.lag_runs),
    )


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


def cmd_ingest_monitor(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
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
            profile=args.redis_version or conf.profile,
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
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
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
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
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


def cmd_demo(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Generate, reconstruct and summarize under one directory, in one session."""
    from pelengine.read.summary import summarize
    from pelengine.runs.full import run_reconstruct
    from pelengine.runs.generate import write_generated_events
    from pelengine.runs.output import format_report
    from pelengine.settings import Settings

    root = args.dir or conf.demo_dir
    events_path = os.path.join(root, "events")
    out_path = os.path.join(root, "out")
    events, keys, seed = _sizes(args, conf)
    write_generated_events(
        spark, events_path, events, keys, seed, progress, faults=not args.no_faults
    )
    print(f"== generated {events} events ({keys} keys, seed {seed}) into {events_path}")
    options = Settings(profile=args.redis_version or conf.profile, engine=conf.engine)
    report = run_reconstruct(spark, events_path, out_path, options, progress)
    print(f"== reconstructed into {out_path}")
    print(format_report(report))
    print("== summary")
    print(summarize(spark, out_path))
    return EXIT_OK


COMMANDS: dict[str, Callable[[SparkSession, argparse.Namespace, Config, Progress], int]] = {
    "reconstruct": cmd_reconstruct,
    "generate": cmd_generate,
    "summary": cmd_summary,
    "pel-as-of": cmd_pel_as_of,
    "sql": cmd_sql,
    "pending": cmd_pending,
    "report": cmd_report,
    "demo": cmd_demo,
    "ingest-aof": cmd_ingest_aof,
    "ingest-monitor": cmd_ingest_monitor,
    "ingest-rdb": cmd_ingest_rdb,
}


# ---- running and exiting -----------------------------------------------------------


def run(
    argv: Sequence[str],
    *,
    spark: SparkSession | None = None,
    progress: Progress = progress_to_stderr,
) -> int:
    """Parse `argv`, run the command, return the exit code (never raises).

    A session passed in is used and left running; otherwise one is built from the
    configuration and stopped before returning.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:  # argparse already printed usage and the error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        validate(args)
        conf = load_config(args.conf)
        if args.command == "reconstruct":
            reconstruct_output(args, conf)
        from pelengine.session import connect_url

        connect_url(conf)  # a bad or ambiguous Spark Connect URL is a usage error
    except (UsageError, ConfigError) as exc:
        print(args.usage(), end="", file=sys.stderr)
        print(f"pelengine {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    reporter = ProgressReporter(progress, heartbeat_s=conf.progress.heartbeat_s)
    own_session = spark is None
    try:
        with reporter:
            if spark is None:
                from pelengine.session import build_session

                spark = build_session(conf, reporter)
            reporter.set_status(spark_status(spark))
            return COMMANDS[args.command](spark, args, conf, reporter)
    except UsageError as exc:
        print(f"pelengine {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("pelengine: interrupted", file=sys.stderr)
        return 130
    except (NativeDeltaRequiredError, CatalogNameError) as exc:
        print(f"pelengine {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        # Delta Lake's conflict exceptions (another writer committed meanwhile): one sentence
        exc = concurrent_write_error(exc) or exc
        if not _expected(exc):
            traceback.print_exc(file=sys.stderr)
        print(f"pelengine: {args.command} failed: {describe_failure(exc)}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if own_session and spark is not None:
            from pelengine.session import stop_session

            stop_session(spark)


def _expected(exc: BaseException) -> bool:
    """Errors whose message says it all (missing table or path, input contract, a session
    whose Delta Lake cannot serve): no traceback."""
    from pelengine.storage import StorageSetupError

    if isinstance(
        exc, FileNotFoundError | FileExistsError | RunInProgressError | ConcurrentWriteError
    ):
        return True
    if isinstance(exc, StorageSetupError):
        return True
    return isinstance(exc, ValueError) and type(exc).__module__.startswith("pelengine.")


_ERROR_LINE = re.compile(r"^\s*((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)): (.+)$")


def describe_failure(exc: BaseException) -> str:
    """``Type: message`` of a failure, in one line where Spark wraps it in pages.

    An error raised in a Python worker (e.g. the replay naming the event at fault)
    reaches the driver inside a PySpark/JVM exception whose text holds the worker's
    traceback: its last ``SomeError: message`` line is the one that says what failed."""
    text = str(exc)
    name = type(exc).__name__
    if "\n" not in text.strip():
        return f"{name}: {text}"
    found = None
    for line in text.splitlines():
        match = _ERROR_LINE.match(line)
        if match and "Traceback" not in line:
            found = match
    if found is not None and found.group(1).rsplit(".", 1)[-1] != name:
        return f"{name}: {found.group(1).rsplit('.', 1)[-1]}: {found.group(2).strip()}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{name}: {first}"


def exit_process(code: int) -> NoReturn:
    """Flush stdout/stderr and logging, then leave at once with `code` (`os._exit`).

    Skips interpreter finalization, where native libraries (delta-rs) may abort.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe must not change the code
            stream.flush()
    with contextlib.suppress(Exception):
        logging.shutdown()
    os._exit(code)


def console_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of scripts: run, then leave through :func:`exit_process`.

    On Databricks a `python_wheel_task` calls the entry point inside the platform's own
    Python process, which must survive: there it returns on success and raises SystemExit
    with the code on failure."""
    code = run(sys.argv[1:] if argv is None else argv)
    from pelengine.session import on_databricks

    if on_databricks():
        if code != EXIT_OK:
            raise SystemExit(code)
        return
    exit_process(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI. With `argv` (tests, callers) returns the exit code; without it
    (the `pelengine` console script) it leaves the process via :func:`exit_process`
    (on Databricks: see :func:`console_main`)."""
    if argv is None:
        console_main()
        return EXIT_OK
    return run(argv)


if __name__ == "__main__":
    console_main()
