"""What an incremental night costs: against a full recomputation, and against the same
night after a smaller history.

Generates ``--events`` events (default 5,000,000; ``pelengine generate``'s mix over
``--keys`` streams). The last ``--night`` share (1%: 50,000) is the night. For each
history (the other ``1 - --night`` share, and the first ``--small-history`` events,
1,000,000 by default), it writes the history as an events table, runs
``reconstruct --incremental`` once (the first run: full replay, state saved), appends
the same night rows, and times the incremental night (wall and CPU seconds of the whole
process tree, and the run report's stages). After the big history it also times a full
recomputation over the same table and checks that both wrote the same tables.

Prints the figures and the targets (night <= 5% of the full run, in wall time and in
CPU-seconds; the night after 5M within 1.5x of the night after 1M; the rows the night
wrote to the history tables, from its commit metrics, <= 2x the rows that differ between
the full tables before the night (the first run's, read at the versions its ``_runs`` row
names) and after it (the full recomputation)) and writes them to ``--json``, with the
store that ran (``PELENGINE_STORE=embedded`` for the embedded one). ``--runner local``
times the local runner's runs instead (in this process, no JVM: the session only
generates the events and compares the tables). Not a test: ``make bench-incremental``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

TARGETS = {
    "night_over_full": ("<=", 0.05),
    "night_cpu_over_full_cpu": ("<=", 0.05),
    "night_big_over_small_history": ("<=", 1.5),
    "night_cpu_big_over_small_history": ("<=", 1.5),
    "history_rows_written_over_differing": ("<=", 2.0),
}


def role_cpu() -> Any:
    """bench.py's kernel-counted CPU seconds (cpuacct cgroups: the JVM, Spark's Python
    workers from birth, this process); made before the session starts."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench import RoleCpu

    return RoleCpu()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--night", type=float, default=0.01, help="share of new events")
    parser.add_argument(
        "--small-history",
        type=int,
        default=1_000_000,
        help="the same night after this many events of history too (0: skip)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--json", default="benchmarks/results/incremental_night.json")
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--conf", default="conf/bench.yaml", help="conf overlay (driver memory)")
    parser.add_argument(
        "--runner",
        choices=("spark", "local"),
        default="spark",
        help="the runner of the timed runs (local: in this process, no JVM; the events are "
        "then written by delta-rs, and Spark only generates and compares)",
    )
    args = parser.parse_args()

    cpu = role_cpu()  # sets PYSPARK_PYTHON to its wrapper when it can count
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pelengine.runs.full import run_reconstruct
    from pelengine.runs.generate import generated_arrow_table
    from pelengine.schemas import EVENTS_SCHEMA, HISTORY_TABLES, OUTPUT_TABLES
    from pelengine.session import build_session
    from pelengine.settings import Settings, load_config
    from pelengine.storage import newest_run, read_table, sessionless, storage_mode, write_table

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    work = args.dir or tempfile.mkdtemp(prefix="pelengine-bench-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    t = time.monotonic()
    spark = build_session(load_config([args.conf] if args.conf else []), say)
    figures: dict[str, object] = {"session_start_s": round(time.monotonic() - t, 1)}

    night_rows = int(args.events * args.night)
    say(f"generating {args.events:,} events over {args.keys} keys")
    t = time.monotonic()
    table = generated_arrow_table(args.events, args.keys, args.seed)
    figures["generate_s"] = round(time.monotonic() - t, 1)
    night = table.slice(table.num_rows - night_rows)
    big = table.num_rows - night_rows
    histories = [("big", big)]
    if 0 < args.small_history < big:
        histories.append(("small", args.small_history))

    def write_history(path: str, rows: int) -> None:
        t = time.monotonic()
        step = 1_000_000
        for start in range(0, rows, step):
            part = table.slice(start, min(step, rows - start))
            append(path, part, "append" if start else "overwrite")
            say(f"  wrote {start + part.num_rows:,}/{rows:,} history events")
        say(f"  history written in {time.monotonic() - t:.1f} s")

    def append(path: str, part: Any, mode: str) -> None:
        if args.runner == "local":  # the local runner's users write events with delta-rs
            sessionless.write_arrow(part, path, EVENTS_SCHEMA, mode)
        else:
            write_table(spark.createDataFrame(part, schema=EVENTS_SCHEMA), path, mode)

    def timed(label: str, events: str, out: str, incremental: bool) -> dict[str, Any]:
        say(f"{label}: reconstruct{' --incremental' if incremental else ''}")
        t0, c0 = time.monotonic(), cpu.read()
        local = args.runner == "local"
        report = run_reconstruct(
            None if local else spark,
            events,
            out,
            Settings(incremental=incremental, runner=args.runner),
            lambda m: say("  " + m),
        )
        took, used = round(time.monotonic() - t0, 1), cpu.diff(c0, cpu.read())
        say(f"{label}: {took} s, CPU-s {used} {report.get('incremental', {})}")
        return {
            "seconds": took,
            "cpu_seconds": used.get("total"),
            "cpu_seconds_by_role": used,
            "incremental": report.get("incremental"),
            "timings": report.get("timings_s"),
            "write_seconds_by_table": report.get("write_seconds_by_table"),
            "rows_written": (report.get("output") or {}).get("rows"),
            "rows_rewritten": (report.get("output") or {}).get("rows_rewritten"),
            "events": report.get("events"),
        }

    figures["night_rows"] = night.num_rows
    for name, rows in histories:
        events, inc = (os.path.join(work, f"{d}_{name}") for d in ("events", "inc"))
        say(f"history {name}: {rows:,} events")
        write_history(events, rows)
        entry: dict[str, Any] = {"history_rows": rows}
        entry["first_run"] = timed(f"{name}: first run (full, saves state)", events, inc, True)
        before = dict((newest_run(spark, inc) or {}).get("tables") or {})
        append(events, night, "append")
        entry["night"] = timed(f"{name}: incremental night", events, inc, True)
        if name == "big":
            full = os.path.join(work, "full_big")
            entry["full_recompute"] = timed(f"{name}: full recomputation", events, full, False)
            if not args.skip_compare:
                same = {}
                for table_name in (*OUTPUT_TABLES, "rejected_events"):
                    a = read_table(spark, os.path.join(inc, table_name))
                    b = read_table(spark, os.path.join(full, table_name))
                    same[table_name] = a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0
                entry["tables_equal"] = same
            # the rows that differ between the full tables before and after the night
            differ = {}
            for table_name in (*HISTORY_TABLES, "rejected_events"):
                old = read_table(spark, os.path.join(inc, table_name), before.get(table_name))
                new = read_table(spark, os.path.join(full, table_name))
                differ[table_name] = new.exceptAll(old).count() + old.exceptAll(new).count()
            # rows the night's commits wrote (a merge that rewrites files: all their rows)
            logical = entry["night"]["rows_written"] or {}
            physical = entry["night"]["rows_rewritten"] or {}
            entry["history_rows_differing"] = differ
            entry["history_rows_added_or_changed"] = {t: logical.get(t, 0) for t in differ}
            entry["history_rows_written"] = {t: physical.get(t, logical.get(t, 0)) for t in differ}
        figures[name] = entry

    bigf: Any = figures["big"]

    def ratio(a: Any, b: Any, digits: int) -> float | None:
        return round(a / b, digits) if a is not None and b else None

    ratios = {
        "night_over_full": ratio(bigf["night"]["seconds"], bigf["full_recompute"]["seconds"], 3),
        "night_cpu_over_full_cpu": ratio(
            bigf["night"]["cpu_seconds"], bigf["full_recompute"]["cpu_seconds"], 3
        ),
    }
    if "small" in figures:
        smallf: Any = figures["small"]
        ratios["night_big_over_small_history"] = ratio(
            bigf["night"]["seconds"], smallf["night"]["seconds"], 2
        )
        ratios["night_cpu_big_over_small_history"] = ratio(
            bigf["night"]["cpu_seconds"], smallf["night"]["cpu_seconds"], 2
        )
    if "history_rows_differing" in bigf:
        ratios["history_rows_written_over_differing"] = ratio(
            sum(bigf["history_rows_written"].values()),
            max(1, sum(bigf["history_rows_differing"].values())),
            2,
        )
    figures["ratios"] = ratios
    verdicts = {}
    for key, (op, limit) in TARGETS.items():
        if ratios.get(key) is not None:
            value = float(ratios[key] or 0)
            ok = value <= limit if op == "<=" else value >= limit
            verdicts[key] = f"{ratios[key]} {op} {limit}: {'met' if ok else 'MISSED'}"
    figures["targets"] = verdicts
    figures.update(
        events=args.events,
        keys=args.keys,
        night_share=args.night,
        cores=os.cpu_count(),
        store=storage_mode(spark) if args.runner == "spark" else "embedded (local runner)",
        runner=args.runner,
    )
    print(json.dumps(figures, indent=2, default=str))
    for key, verdict in verdicts.items():
        say(f"target {key}: {verdict}")
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump(figures, fh, indent=2, default=str)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
