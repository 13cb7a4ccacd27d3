"""The `pelengine` command line: parse, check, build the session, run the command, exit.

Exit codes: 0 success, 1 the job could not produce correct tables (any failure
while working, another run's commit to the same table among them), 2 usage errors (bad
option, missing input path, catalog or schema, bad --conf).
Results go to stdout, progress lines to stderr.

Where things are: the grammar in :mod:`pelengine.commands.parser` (one function per
subcommand); the checks and the values a command derives from its options over the
configuration in :mod:`pelengine.commands.args`; the commands' bodies in
:mod:`pelengine.commands.reconstruct`, :mod:`~pelengine.commands.read` and
:mod:`~pelengine.commands.ingest`; the configuration in :mod:`pelengine.settings`.

The console script leaves through :func:`exit_process` (`os._exit`): delta-rs can
abort the interpreter during its normal shutdown (delta-rs issue #2184), which
would otherwise replace a true exit code with a crash.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from pelengine.commands import ingest, read, reconstruct
from pelengine.commands.args import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    check,
    local_runner,
)
from pelengine.commands.parser import build_parser
from pelengine.progress import Progress, ProgressReporter, spark_status
from pelengine.settings import Config, ConfigError, load_config
from pelengine.storage import (
    CatalogNameError,
    ConcurrentWriteError,
    DeltaSparkRequiredError,
    RunInProgressError,
    concurrent_write_error,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Command = Callable[["SparkSession", argparse.Namespace, Config, Progress], int]

#: what each subcommand runs
COMMANDS: dict[str, Command] = {
    "reconstruct": reconstruct.cmd_reconstruct,
    "generate": reconstruct.cmd_generate,
    "demo": reconstruct.cmd_demo,
    "summary": read.cmd_summary,
    "pel-as-of": read.cmd_pel_as_of,
    "sql": read.cmd_sql,
    "pending": read.cmd_pending,
    "report": read.cmd_report,
    "ingest-monitor": ingest.cmd_ingest_monitor,
    "ingest-aof": ingest.cmd_ingest_aof,
    "ingest-rdb": ingest.cmd_ingest_rdb,
}
#: the commands that run without a session where :func:`sessionless_reason` allows it
SESSIONLESS: dict[str, Callable[[SparkSession | None, argparse.Namespace, Config, Progress], int]]
SESSIONLESS = {
    "ingest-monitor": ingest.cmd_ingest_monitor,
    "ingest-aof": ingest.cmd_ingest_aof,
    "ingest-rdb": ingest.cmd_ingest_rdb,
}


def progress_to_stderr(message: str) -> None:
    """Print one progress line to stderr."""
    print(f"pelengine: {message}", file=sys.stderr, flush=True)


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
        conf = load_config(args.conf)
        check(args, conf)  # everything that needs no Spark, before any Spark work
        from pelengine.session import connect_url, sessionless_reason

        connect_url(conf)  # a bad or ambiguous Spark Connect URL is a usage error
    except (UsageError, ConfigError) as exc:
        print(args.usage(), end="", file=sys.stderr)
        print(f"pelengine {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    reporter = ProgressReporter(progress, heartbeat_s=conf.progress.heartbeat_s)
    own_session = spark is None
    try:
        with reporter:
            if spark is None and args.command in SESSIONLESS:
                why = sessionless_reason(conf, _written_paths(args))
                if why is not None:
                    reporter(why)
                    return SESSIONLESS[args.command](None, args, conf, reporter)
            if spark is None and local_runner(args, conf):
                reporter("the local runner: no Spark session (delta-rs in and out)")
                return reconstruct.cmd_reconstruct(None, args, conf, reporter)
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
    except (DeltaSparkRequiredError, CatalogNameError) as exc:
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


def _written_paths(args: argparse.Namespace) -> list[str | None]:
    """The tables a command writes, as given (events, and an ingest state table)."""
    return [getattr(args, "events", None), getattr(args, "state", None)]


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
