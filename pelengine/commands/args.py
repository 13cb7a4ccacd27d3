"""What a command line asks for: the checks argparse cannot express, and the values each
command derives from its arguments over the configuration.

Every command that replays takes its :class:`~pelengine.settings.Settings` from
:func:`run_settings` (``reconstruct``, ``demo``, ``jobs/reconstruct.py``, the Databricks
job, spark-submit: all run ``reconstruct`` or ``demo``); ``generate`` and ``demo`` their
sizes from :func:`generate_sizes`, ``report`` its thresholds from
:func:`report_thresholds`. Each is the configuration's section with the options given
over it (:func:`pelengine.settings.overridden`); a value breaking its rules is a
:class:`UsageError` naming the option.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pelengine.settings import (
    Config,
    GenerateConfig,
    Settings,
    SettingsError,
    Thresholds,
    overridden,
)
from pelengine.storage import Output

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """A bad command line: reported with exit code 2."""


# ---- the configuration's sections with the options given over them ---------------------------

#: an option's argparse name (``dest``) is its field's name, but for these
_OPTION_OF = {
    "profile": "redis_version",
    "node_max_entries": "stream_node_max_entries",
    "node_max_bytes": "stream_node_max_bytes",
}

Section = TypeVar("Section", bound="DataclassInstance")


def option_name(field: str) -> str:
    """The command line's option of a field (``split_groups``: ``--split-groups``)."""
    return "--" + _OPTION_OF.get(field, field).replace("_", "-")


def with_options(section: Section, args: argparse.Namespace) -> Section:
    """``section`` of the configuration with each option of ``args`` given over it."""
    given = {f.name: getattr(args, _OPTION_OF.get(f.name, f.name), None) for f in fields(section)}
    try:
        return overridden(section, **given)
    except SettingsError as exc:
        raise UsageError(exc.naming(option_name)) from None


def run_settings(args: argparse.Namespace, conf: Config) -> Settings:
    """A run's settings: conf ``reconstruct:`` with the command line's options over it."""
    return with_options(conf.reconstruct, args)


def generate_sizes(args: argparse.Namespace, conf: Config) -> GenerateConfig:
    """The synthetic workload's sizes: conf ``generate:`` with --events/--keys/--seed over it."""
    return with_options(conf.generate, args)


def report_thresholds(args: argparse.Namespace, conf: Config) -> Thresholds:
    """The report's thresholds: conf ``report:`` with each flag given over it."""
    return with_options(conf.report, args)


def reconstruct_output(args: argparse.Namespace, conf: Config) -> Output:
    """Where reconstruct writes: --out, --catalog/--schema over conf output.* (empty = unset)."""
    catalog = args.catalog or conf.output.catalog
    schema = args.schema or conf.output.schema
    try:
        return Output(root=args.out or None, catalog=catalog or None, schema=schema or None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


# ---- checks before any Spark work ----------------------------------------------------------


def check(args: argparse.Namespace, conf: Config) -> None:
    """Every check of a command line that needs no Spark: what argparse cannot express, and
    the values the command derives over ``conf``. Raises UsageError naming the option."""
    checks = _CHECKS.get(args.command)
    if checks is not None:
        checks(args, conf)


def _is_local(path: str) -> bool:
    from pelengine.storage import local_path

    return local_path(path) is not None


def _local_path(path: str) -> Path:
    from pelengine.storage import local_path

    return Path(local_path(path) or path)


def _missing(path: str) -> bool:
    """A local path that does not exist (a remote one is left to the command)."""
    return _is_local(path) and not _local_path(path).exists()


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


def _check_reconstruct(args: argparse.Namespace, conf: Config) -> None:
    from pelengine.storage import table_ref

    if (args.txn_app_id is None) != (args.txn_version is None):
        raise UsageError("--txn-app-id and --txn-version must be given together")
    if args.incremental and args.txn_app_id is not None:
        raise UsageError(
            "--incremental derives its own txnAppId/txnVersion (the events table's version)"
        )
    if args.txn_app_id is not None and not args.txn_app_id.strip():
        raise UsageError("--txn-app-id must not be empty")
    if isinstance(table_ref(args.events), str) and _missing(args.events):
        raise UsageError(f"--events {args.events}: no such path")
    if args.out and _is_local(args.out) and _local_path(args.out).is_file():
        raise UsageError(f"--out {args.out}: a file, not a directory for the tables")
    settings = run_settings(args, conf)
    output = reconstruct_output(args, conf)
    if settings.runner == "local":
        if output.by_name:
            raise UsageError(
                "--runner local writes tables by path (--out PATH); catalog tables "
                "(--catalog/--schema) need the Spark runner (--runner spark)"
            )
        if not isinstance(table_ref(args.events), str):
            raise UsageError(
                f"--events {args.events}: --runner local reads an events table by path; a "
                "table by name needs the Spark runner (--runner spark)"
            )


def local_runner(args: argparse.Namespace, conf: Config) -> bool:
    """Whether the command is a reconstruction on the local runner (no Spark session)."""
    return args.command == "reconstruct" and run_settings(args, conf).runner == "local"


def _check_demo(args: argparse.Namespace, conf: Config) -> None:
    run_settings(args, conf)
    generate_sizes(args, conf)


def _check_generate(args: argparse.Namespace, conf: Config) -> None:
    generate_sizes(args, conf)


def _check_file(args: argparse.Namespace, conf: Config) -> None:
    """ingest-monitor, ingest-rdb: the file to read."""
    if not Path(args.file).is_file():
        raise UsageError(f"{args.file}: no such file")
    aof = getattr(args, "ids_from_aof", None)
    if aof and not os.path.exists(aof):
        raise UsageError(f"--ids-from-aof {aof}: no such AOF file or directory")


def _check_ingest_aof(args: argparse.Namespace, conf: Config) -> None:
    if not os.path.exists(args.source):
        raise UsageError(f"{args.source}: no such AOF file or directory")


def _check_summary(args: argparse.Namespace, conf: Config) -> None:
    if _missing(args.out):
        raise UsageError(f"--out {args.out}: no such path")


def _check_pending(args: argparse.Namespace, conf: Config) -> None:
    _check_out_root(args.out)
    ranged = [args.start, args.end, args.count]
    if any(v is not None for v in ranged) and any(v is None for v in ranged):
        raise UsageError("--start, --end and --count go together (XPENDING's range)")
    if args.start is None and (args.consumer is not None or args.idle is not None):
        raise UsageError("--consumer and --idle need --start, --end and --count (as XPENDING)")
    if args.start is None and args.now_ms is not None:
        raise UsageError("--now-ms applies to the range form (--start/--end/--count) only")


def _check_report(args: argparse.Namespace, conf: Config) -> None:
    _check_out_root(args.out)
    report_thresholds(args, conf)


def _check_sql(args: argparse.Namespace, conf: Config) -> None:
    if args.out:
        _check_out_root(args.out)
    if not args.query.strip():
        raise UsageError("the query is empty")


def _check_pel_as_of(args: argparse.Namespace, conf: Config) -> None:
    if not _is_local(args.out):
        return
    if not _local_path(args.out).exists():
        raise UsageError(f"--out {args.out}: no such path")
    if not (_local_path(args.out) / "pel_history").exists():
        raise UsageError(
            f"--out {args.out}: no pel_history table there (reconstruct writes it from "
            "this version on: run reconstruct again)"
        )


_CHECKS: dict[str, Callable[[argparse.Namespace, Config], None]] = {
    "reconstruct": _check_reconstruct,
    "demo": _check_demo,
    "generate": _check_generate,
    "ingest-monitor": _check_file,
    "ingest-rdb": _check_file,
    "ingest-aof": _check_ingest_aof,
    "summary": _check_summary,
    "pending": _check_pending,
    "report": _check_report,
    "sql": _check_sql,
    "pel-as-of": _check_pel_as_of,
}
