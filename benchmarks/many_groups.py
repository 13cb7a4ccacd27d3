"""One stream, many consumer groups: does the replay split by group, and what does it gain?

Builds ONE stream of ``--events`` events (default 1,000,000) read by ``--groups``
groups (default 16) with ``hot_stream.hot_stream_events`` (per cycle: ``--count``
XADDs with ``MAXLEN ~``, one XREADGROUP and one XACK per group, a claim slot),
writes it as the events table, warms up (both forms over the first 20,000
events), then runs the reconstruct job twice in one Spark session on the same input:

* ``whole``: ``split_groups=0``, the stream replayed by one task (one core);
* ``split``: ``split_groups=--split-groups`` (default 4), one task per group, each
  replaying its group's commands and every stream-level command.

Prints and saves (``--json``, default benchmarks/results/many-groups-<N>-<G>g-<ts>.json)
the end-to-end and per-stage times of both, the speed-ups whole/split, the rows the
replay received (stream-level commands go to every group's task) and whether every
output table is equal between the two runs (they must be). Not a test:
``make bench-groups`` (BENCH_ARGS="--events 300k").
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hot_stream import (  # noqa: E402
    add_workload_args,
    hot_stream_events,
    label,
    parse_size,
    save_json,
)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def tables_differ(spark: Any, a: str, b: str) -> dict[str, int]:
    """Rows of each output table found in one run and not the other (both ways)."""
    from pelengine.schemas import OUTPUT_TABLES
    from pelengine.storage import read_table

    out = {}
    for name in OUTPUT_TABLES:
        left = read_table(spark, os.path.join(a, name))
        right = read_table(spark, os.path.join(b, name))
        out[name] = left.exceptAll(right).count() + right.exceptAll(left).count()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="1M", help="events (1M, 300k, ...)")
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--split-groups", type=int, default=4, help="threshold of the split run")
    add_workload_args(parser)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.groups < 2 or args.split_groups > args.groups:
        parser.error("needs --groups >= 2 and --split-groups <= --groups")
    n_events = parse_size(args.events)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pelengine.runs.full import run_reconstruct
    from pelengine.session import build_session
    from pelengine.settings import Settings, load_config
    from pelengine.storage import table_row_count, write_table

    work = args.dir or tempfile.mkdtemp(prefix="pelengine-groups-")
    os.makedirs(work, exist_ok=True)
    t = time.monotonic()
    config = load_config([args.conf] if args.conf else [])
    spark = build_session(config, print)
    session_s = round(time.monotonic() - t, 1)
    cores = os.cpu_count()
    events = os.path.join(work, f"events-{label(n_events)}-{args.groups}g")
    t = time.monotonic()
    if not os.path.exists(events):
        say(f"generating one stream of {n_events:,} events, {args.groups} groups (Spark SQL)")
        write_table(hot_stream_events(spark, n_events, args), events, "overwrite")
    n_rows = table_row_count(spark, events)
    generate_s = round(time.monotonic() - t, 1)
    # warm-up (JIT, caches): both forms over the first events, not timed
    for split in (0, args.split_groups):
        say(f"warm-up: split_groups={split}, first 20,000 events")
        run_reconstruct(
            spark,
            events,
            os.path.join(work, "warm-up"),
            Settings(profile=args.profile, split_groups=split, as_of_seq=20_000),
        )
        shutil.rmtree(os.path.join(work, "warm-up"), ignore_errors=True)
    runs: dict[str, Any] = {}
    for name, split in (("whole", 0), ("split", args.split_groups)):
        out = os.path.join(work, f"out-{name}")
        shutil.rmtree(out, ignore_errors=True)
        say(f"{name}: reconstruct with split_groups={split}")
        t = time.monotonic()
        report = run_reconstruct(
            spark,
            events,
            out,
            Settings(profile=args.profile, split_groups=split),
            lambda m: say("  " + m),
        )
        runs[name] = {
            "split_groups": split,
            "seconds": round(time.monotonic() - t, 1),
            "timings_s": report.get("timings_s"),
            "split_by_group": report.get("split_by_group"),
            "events": {k: report["events"].get(k) for k in ("valid", "applied", "failed")},
            "output_rows": report["output"]["rows"],
        }
        say(f"{name}: {runs[name]['seconds']} s, stages {runs[name]['timings_s']}")
    differ = tables_differ(spark, os.path.join(work, "out-whole"), os.path.join(work, "out-split"))
    whole, split = runs["whole"], runs["split"]

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 2) if a and b else None

    result = {
        "benchmark": "pelengine many groups",
        "events": n_rows,
        "groups": args.groups,
        "cores": cores,
        "session_start_s": session_s,
        "generate_s": generate_s,
        "load_avg_at_end": list(os.getloadavg()),
        "options": {k: v for k, v in vars(args).items() if k != "json"},
        "runs": runs,
        "speedup_end_to_end": ratio(whole["seconds"], split["seconds"]),
        "speedup_replay_stage": ratio(
            (whole["timings_s"] or {}).get("replay"), (split["timings_s"] or {}).get("replay")
        ),
        "rows_differing_by_table": differ,
        "tables_equal": not any(differ.values()),
    }
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "events",
                    "groups",
                    "cores",
                    "speedup_end_to_end",
                    "speedup_replay_stage",
                    "tables_equal",
                )
            }
            | {n: {"seconds": r["seconds"], "timings_s": r["timings_s"]} for n, r in runs.items()},
            indent=2,
        )
    )
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = args.json or os.path.join(
        "benchmarks", "results", f"many-groups-{label(n_rows)}-{args.groups}g-{stamp}.json"
    )
    save_json(result, path)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    return 0 if result["tables_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
