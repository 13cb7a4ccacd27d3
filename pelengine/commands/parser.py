"""The command line's grammar: one small function per subcommand, shared options once.

An option that sets a configured value (``--stream-node-max-entries``, ``--keys``,
``--poison-count``, ...) is only parsed here: its rules live in its dataclass
(:mod:`pelengine.settings`), checked when the command derives its values
(:mod:`pelengine.commands.args`), so a bad value is named by its option either way.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from pelengine.model import resolve_profile
from pelengine.settings import ENGINES, RUNNERS

Parser = argparse.ArgumentParser


# ---- value types -------------------------------------------------------------------------


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


def _redis_version(text: str) -> str:
    """``--redis-version``: a version some profile describes (argparse names the option)."""
    try:
        resolve_profile(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


# ---- options several subcommands share ----------------------------------------------------


def _conf_option() -> Parser:
    """``--conf``, which every subcommand takes (an argparse parent)."""
    common = Parser(add_help=False)
    common.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML file merged over the packaged defaults (repeatable, later wins)",
    )
    return common


def _add_profile(p: Parser) -> None:
    p.add_argument(
        "--redis-version",
        type=_redis_version,
        metavar="VERSION",
        help=(
            "the server's version as it reports it (7.0.15, 7.4.1, valkey-9.1.2) or a "
            "profile name (7.0, 7.4, valkey-8.1); default: conf reconstruct.profile"
        ),
    )


def _add_sizes(p: Parser) -> None:
    p.add_argument("--events", type=int, metavar="N", help="number of events")
    p.add_argument("--keys", type=int, metavar="K", help="number of stream keys")
    p.add_argument("--seed", type=int, metavar="S", help="random seed")
    p.add_argument(
        "--no-faults", action="store_true", help="leave out invalid commands and bad rows"
    )


def _add_out_root(p: Parser) -> None:
    p.add_argument("--out", required=True, metavar="PATH", help="output root of reconstruct")


def _add_events_table(p: Parser) -> None:
    p.add_argument("--events", required=True, metavar="PATH", help="events Delta table")


def _add_overwrite(p: Parser) -> None:
    p.add_argument(
        "--overwrite", action="store_true", help="replace the table instead of appending to it"
    )


def _add_json(p: Parser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON")


# ---- the subcommands ----------------------------------------------------------------------


def _reconstruct(sub: Callable[..., Parser]) -> None:
    p = sub("reconstruct", help="replay an events table into the snapshot tables")
    p.add_argument(
        "--events",
        required=True,
        metavar="PATH",
        help="events Delta table: a path, or catalog.schema.table (delta-spark)",
    )
    p.add_argument(
        "--out",
        metavar="PATH",
        help="output root for the tables (required unless --schema: then external tables there)",
    )
    p.add_argument(
        "--catalog",
        metavar="C",
        help="write catalog tables C.<schema>.<table> (needs --schema and delta-spark; "
        "default: conf output.catalog; an empty value means unset)",
    )
    p.add_argument(
        "--schema",
        metavar="S",
        help="write catalog tables [<catalog>.]S.<table> (delta-spark; "
        "default: conf output.schema; an empty value means unset)",
    )
    _add_profile(p)
    p.add_argument("--as-of-ms", type=int, metavar="N", help="snapshot time")
    p.add_argument("--as-of-seq", type=int, metavar="N", help="last seq applied")
    p.add_argument("--txn-app-id", metavar="S", help="idempotent write: application id")
    p.add_argument("--txn-version", type=int, metavar="N", help="idempotent write: version")
    p.add_argument(
        "--incremental",
        action="store_true",
        help="continue from the state of the previous run under --out (replay only new "
        "events; the first run replays everything and saves the state)",
    )
    p.add_argument(
        "--stream-node-max-entries",
        type=int,
        metavar="N",
        help="the server's stream-node-max-entries (default: conf, 100)",
    )
    p.add_argument(
        "--stream-node-max-bytes",
        type=int,
        metavar="N",
        help="the server's stream-node-max-bytes (default: conf, 4096)",
    )
    p.add_argument(
        "--split-groups",
        type=int,
        metavar="N",
        help="replay a stream with at least N consumer groups as one task per group "
        "(0: never; default: conf, 0; incremental runs do not split)",
    )
    p.add_argument(
        "--engine",
        metavar="{" + ",".join(ENGINES) + "}",
        help="the replay engine: auto (native when pelengine-native is installed, else "
        "python), native or python (default: conf, auto; docs/native.md)",
    )
    p.add_argument(
        "--runner",
        metavar="{" + ",".join(RUNNERS) + "}",
        help="where the run runs: spark (a Spark session, the default) or local (this "
        "process, no JVM: delta-rs in and out; full runs of tables by path; "
        "default: conf, spark)",
    )
    _add_json(p, "the run report")


def _generate(sub: Callable[..., Parser]) -> None:
    p = sub("generate", help="write a synthetic events table (for demos and tests)")
    p.add_argument("--out", required=True, metavar="PATH", help="events Delta table to write")
    _add_sizes(p)


def _summary(sub: Callable[..., Parser]) -> None:
    p = sub("summary", help="print a summary of an output root")
    _add_out_root(p)


def _pel_as_of(sub: Callable[..., Parser]) -> None:
    p = sub("pel-as-of", help="print the PEL at a past moment, from the output root's pel_history")
    _add_out_root(p)
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument(
        "--as-of-seq", type=_non_negative_int, metavar="N", help="after the command at seq N"
    )
    when.add_argument("--as-of-ms", type=_non_negative_int, metavar="N", help="at time N (ms)")
    p.add_argument("--key", metavar="K", help="only this stream key")
    p.add_argument("--group", metavar="G", help="only this consumer group")
    p.add_argument(
        "--limit", type=_positive_int, default=20, metavar="N", help="rows to print (default 20)"
    )


def _sql(sub: Callable[..., Parser]) -> None:
    p = sub(
        "sql", help="run a SQL query over the tables of an output root (each a view of its name)"
    )
    p.add_argument("query", metavar="QUERY", help='SQL, e.g. "SELECT * FROM pel LIMIT 5"')
    p.add_argument(
        "--out", metavar="PATH", help="output root of reconstruct (required unless --schema)"
    )
    p.add_argument(
        "--catalog", metavar="C", help="catalog tables C.<schema>.<table> (with --schema)"
    )
    p.add_argument(
        "--schema",
        metavar="S",
        help="catalog tables [<catalog>.]S.<table> as reconstruct wrote them, each read at the "
        "version its last complete run recorded in S._runs (delta-spark; default: conf "
        "output.schema)",
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print a JSON array of row objects")
    fmt.add_argument("--csv", action="store_true", help="print CSV with a header row")
    p.add_argument(
        "--limit",
        type=_non_negative_int,
        default=100,
        metavar="N",
        help="rows to print (default 100; 0: all)",
    )


def _pending(sub: Callable[..., Parser]) -> None:
    p = sub(
        "pending", help="print what XPENDING KEY GROUP [...] would print, from the output tables"
    )
    p.add_argument("key", metavar="KEY", help="stream key")
    p.add_argument("group", metavar="GROUP", help="consumer group")
    _add_out_root(p)
    p.add_argument("--db", type=_non_negative_int, default=0, metavar="N", help="db (0)")
    p.add_argument("--start", metavar="ID", help="range start: ID, '-' or '(ID' (exclusive)")
    p.add_argument("--end", metavar="ID", help="range end: ID, '+' or '(ID' (exclusive)")
    p.add_argument("--count", type=_non_negative_int, metavar="N", help="at most N entries")
    p.add_argument("--consumer", metavar="C", help="only entries of consumer C (needs a range)")
    p.add_argument(
        "--idle", type=_non_negative_int, metavar="MS", help="IDLE MS: entries idle >= MS only"
    )
    p.add_argument(
        "--now-ms",
        type=_non_negative_int,
        metavar="MS",
        help="measure idle times at this Unix time in ms (default: the snapshot's as_of_ms)",
    )
    p.add_argument("--no-header", action="store_true", help="print only what redis-cli would print")


def _report(sub: Callable[..., Parser]) -> None:
    p = sub(
        "report",
        help="write and print the operational report (poison, stuck, dead consumers, "
        "dangling, growing lag)",
    )
    _add_out_root(p)
    p.add_argument(
        "--poison-count",
        type=int,
        metavar="N",
        help="poison candidates: delivered >= N times (default: conf report.poison_count)",
    )
    p.add_argument(
        "--stuck-idle-ms",
        type=int,
        metavar="T",
        help="stuck entries: idle > T ms (default: conf report.stuck_idle_ms)",
    )
    p.add_argument(
        "--dead-inactive-ms",
        type=int,
        metavar="T",
        help="dead consumers: pending > 0 and inactive > T ms (default: conf "
        "report.dead_inactive_ms)",
    )
    p.add_argument(
        "--lag-runs",
        type=int,
        metavar="N",
        help="growing lag: lag rose in each of the last N runs (default: conf report.lag_runs)",
    )
    p.add_argument(
        "--now-ms",
        type=_non_negative_int,
        metavar="MS",
        help="measure idle/inactive times at this Unix time in ms (default: as_of_ms)",
    )
    p.add_argument(
        "--limit", type=_positive_int, default=20, metavar="N", help="rows per section (20)"
    )
    _add_json(p, "counts and thresholds")


def _ingest_monitor(sub: Callable[..., Parser]) -> None:
    p = sub(
        "ingest-monitor",
        help="append a MONITOR capture (redis-cli MONITOR > FILE) to an events table",
    )
    p.add_argument("file", metavar="FILE", help="MONITOR output, one command per line")
    _add_events_table(p)
    _add_overwrite(p)
    p.add_argument(
        "--ids-from-aof",
        metavar="AOF",
        help="the same server's appendonlydir (or AOF file): write the ID each XADD '*' "
        "generated instead of '*' (MONITOR's timestamps cannot always tell it)",
    )
    _add_profile(p)


def _ingest_aof(sub: Callable[..., Parser]) -> None:
    p = sub(
        "ingest-aof", help="append a Redis AOF (appendonlydir or appendonly.aof) to an events table"
    )
    p.add_argument(
        "source", metavar="SOURCE", help="appendonlydir, its manifest, or a legacy AOF file"
    )
    _add_events_table(p)
    p.add_argument(
        "--state", metavar="PATH", help="ingest state table (default: <events>/_aof_ingest)"
    )
    _add_json(p, "the ingest report")


def _ingest_rdb(sub: Callable[..., Parser]) -> None:
    p = sub(
        "ingest-rdb",
        help="write the state of an RDB snapshot (dump.rdb) to an events table: the "
        "starting state of a replay; append a MONITOR capture or app log after it",
    )
    p.add_argument("file", metavar="FILE", help="an RDB file: dump.rdb or an AOF's base .rdb")
    _add_events_table(p)
    _add_overwrite(p)
    _add_json(p, "the ingest report")


def _demo(sub: Callable[..., Parser]) -> None:
    p = sub("demo", help="generate, reconstruct and summarize in one Spark session")
    p.add_argument("--dir", metavar="DIR", help="demo directory (default: conf demo.dir)")
    _add_sizes(p)
    _add_profile(p)


#: the subcommands, in the order `pelengine --help` lists them
SUBCOMMANDS = (
    _reconstruct,
    _generate,
    _summary,
    _pel_as_of,
    _sql,
    _pending,
    _report,
    _ingest_monitor,
    _ingest_aof,
    _ingest_rdb,
    _demo,
)


def build_parser() -> Parser:
    """The argument parser of every subcommand. Each parsed namespace holds ``command``
    (the subcommand's name) and ``usage`` (its usage line, for errors found later)."""
    parser = Parser(
        prog="pelengine",
        description="Rebuild Redis Streams consumer-group state from a log of commands.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _conf_option()

    def sub(name: str, *, help: str) -> Parser:  # noqa: A002 (argparse's own name)
        return subparsers.add_parser(name, parents=[common], help=help)

    for add in SUBCOMMANDS:
        add(sub)
    for name, subparser in subparsers.choices.items():
        subparser.set_defaults(usage=subparser.format_usage, command=name)
    return parser
