"""The `pelengine` command line: parse, call the library, print.

Exit codes: 0 success, 1 the job could not produce correct tables (any failure
while working), 2 usage errors (bad option, missing input path, bad --conf).
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
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from pelengine.config import PROFILES, Config, ConfigError, load_config
from pelengine.storage import NativeDeltaRequiredError, Output

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


def _add_profile(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis-version",
        choices=PROFILES,
        help="Redis version profile (default: conf reconstruct.profile)",
    )


def _add_sizes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=_non_negative_int, metavar="N", help="number of events")
    p.add_argument("--keys", type=_positive_int, metavar="K", help="number of stream keys")
    p.add_argument("--seed", type=_non_negative_int, metavar="S", help="random seed")
    p.add_argument(
        "--no-faults", action="store_true", help="leave out invalid commands and bad rows"
    )


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local_path(path: str) -> Path:
    return Path(path.removeprefix("file://"))


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
    if args.command == "ingest-monitor" and not Path(args.file).is_file():
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
    from pelengine.pipeline import ReconstructOptions, format_report, run_reconstruct

    options = ReconstructOptions(
        profile=args.redis_version or conf.profile,
        node_max_entries=_first(args.stream_node_max_entries, conf.node_max_entries),
        node_max_bytes=_first(args.stream_node_max_bytes, conf.node_max_bytes),
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
        if output.by_name:
            print(f"tables written as {output}" + (" and _run_report.json" if output.root else ""))
        else:
            print(f"tables and _run_report.json written under {output}")
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
    from pelengine.spark.generate_io import write_generated_events

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
    from pelengine.pipeline import summarize

    print(summarize(spark, args.out))
    return EXIT_OK


def cmd_pel_as_of(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Print the PEL at a past moment, read from ``pel_history`` (no replay)."""
    from pelengine.history import describe_pel_as_of

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


def cmd_ingest_monitor(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Parse a MONITOR capture and write its commands to the events table."""
    from pelengine.ingest.aof import AofFormatError
    from pelengine.spark.ingest_monitor_io import ingest_monitor

    try:
        result = ingest_monitor(
            spark,
            args.file,
            args.events,
            overwrite=args.overwrite,
            ids_from_aof=args.ids_from_aof,
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
            "(see README, 'MONITOR captures')"
        )
    return EXIT_OK


def cmd_ingest_aof(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Append what is new in an AOF to the events table (at most once)."""
    from pelengine.ingest.aof import AofFormatError
    from pelengine.spark.ingest_io import format_ingest_report, ingest_aof

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


def cmd_demo(
    spark: SparkSession, args: argparse.Namespace, conf: Config, progress: Progress
) -> int:
    """Generate, reconstruct and summarize under one directory, in one session."""
    from pelengine.pipeline import ReconstructOptions, format_report, run_reconstruct, summarize
    from pelengine.spark.generate_io import write_generated_events

    root = args.dir or conf.demo_dir
    events_path = os.path.join(root, "events")
    out_path = os.path.join(root, "out")
    events, keys, seed = _sizes(args, conf)
    write_generated_events(
        spark, events_path, events, keys, seed, progress, faults=not args.no_faults
    )
    print(f"== generated {events} events ({keys} keys, seed {seed}) into {events_path}")
    options = ReconstructOptions(profile=args.redis_version or conf.profile)
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
    "demo": cmd_demo,
    "ingest-aof": cmd_ingest_aof,
    "ingest-monitor": cmd_ingest_monitor,
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
    except (UsageError, ConfigError) as exc:
        print(args.usage(), end="", file=sys.stderr)
        print(f"pelengine {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    own_session = spark is None
    try:
        if spark is None:
            from pelengine.session import build_session

            spark = build_session(conf, progress)
        return COMMANDS[args.command](spark, args, conf, progress)
    except KeyboardInterrupt:
        print("pelengine: interrupted", file=sys.stderr)
        return 130
    except NativeDeltaRequiredError as exc:
        print(f"pelengine {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        print(f"pelengine: {args.command} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if own_session and spark is not None:
            from pelengine.session import stop_session

            stop_session(spark)


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
