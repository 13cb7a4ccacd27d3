"""How long an incremental night takes against a full recomputation.

Generates ``--events`` events (default 5,000,000; ``pelengine generate``'s mix over
``--keys`` streams), writes the first ``1 - --night`` share as the events table,
runs ``reconstruct --incremental`` once (the first run: full replay, state
saved), appends the rest (the night: 1% by default), times the incremental
night, then times a full recomputation (no state) over the same table and
checks that both wrote the same tables. Prints the figures and writes them to
``--json``. Not a test: run it by hand (``make bench-incremental``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--night", type=float, default=0.01, help="share of new events")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--json", default="benchmarks/results/incremental_night.json")
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--conf", default="conf/bench.yaml", help="conf overlay (driver memory)")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pelengine.config import load_config
    from pelengine.runs.full import run_reconstruct
    from pelengine.runs.generate import generated_arrow_table
    from pelengine.schemas import EVENTS_SCHEMA, OUTPUT_TABLES
    from pelengine.session import build_session
    from pelengine.settings import Settings
    from pelengine.storage import read_table, write_table

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    work = args.dir or tempfile.mkdtemp(prefix="pelengine-bench-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    events, inc, full = (os.path.join(work, d) for d in ("events", "inc", "full"))
    t = time.monotonic()
    spark = build_session(load_config([args.conf] if args.conf else []), say)
    figures: dict[str, object] = {"session_start_s": round(time.monotonic() - t, 1)}

    say(f"generating {args.events:,} events over {args.keys} keys")
    t = time.monotonic()
    table = generated_arrow_table(args.events, args.keys, args.seed)
    cut = int(table.num_rows * (1 - args.night))
    figures["generate_s"] = round(time.monotonic() - t, 1)
    t = time.monotonic()
    step = 1_000_000
    for start in range(0, cut, step):
        part = table.slice(start, min(step, cut - start))
        df = spark.createDataFrame(part, schema=EVENTS_SCHEMA)
        write_table(df, events, "append" if start else "overwrite")
        say(f"  wrote {start + part.num_rows:,}/{cut:,} history events")
    figures["write_history_s"] = round(time.monotonic() - t, 1)
    night = table.slice(cut)
    del table

    def timed(label: str, out: str, incremental: bool) -> dict[str, object]:
        say(f"{label}: reconstruct{' --incremental' if incremental else ''}")
        t0 = time.monotonic()
        report = run_reconstruct(
            spark, events, out, Settings(incremental=incremental), lambda m: say("  " + m)
        )
        took = round(time.monotonic() - t0, 1)
        say(f"{label}: {took} s {report.get('incremental', {})}")
        return {
            "seconds": took,
            "incremental": report.get("incremental"),
            "timings": report.get("timings_s"),
        }

    figures["first_run"] = timed("first run (full, saves state)", inc, True)
    write_table(spark.createDataFrame(night, schema=EVENTS_SCHEMA), events, "append")
    figures["night_rows"] = night.num_rows
    figures["incremental_night"] = timed("incremental night", inc, True)
    figures["full_recompute"] = timed("full recomputation", full, False)
    inc_s = figures["incremental_night"]["seconds"]  # type: ignore[index]
    full_s = figures["full_recompute"]["seconds"]  # type: ignore[index]
    figures["speedup_full_over_night"] = round(float(full_s) / float(inc_s), 2)
    if not args.skip_compare:
        same = {}
        for name in (*OUTPUT_TABLES, "rejected_events"):
            a = read_table(spark, os.path.join(inc, name))
            b = read_table(spark, os.path.join(full, name))
            same[name] = a.exceptAll(b).count() == 0 and b.exceptAll(a).count() == 0
        figures["tables_equal"] = same
    figures.update(events=args.events, keys=args.keys, night_share=args.night, cores=os.cpu_count())
    print(json.dumps(figures, indent=2, default=str))
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as fh:
        json.dump(figures, fh, indent=2, default=str)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
