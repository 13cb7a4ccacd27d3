"""``pelengine reconstruct --runner local`` as a user runs it (the console script in a child
process: no JVM), on the generator's workload at each size asked; with ``--spark`` the
same events through the Spark runner too (a child that starts its session). Prints wall
time and the CPU-seconds of the child and everything it started, per 1M events, against
the targets of the issue that asked for the runner, and saves JSON.

    python benchmarks/local_runner.py [--series 20k,1M] [--spark] [--engine auto]
        [--out benchmarks/results/local_runner.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: the targets (wall seconds) of the local runner at a size: 20k events in 2 s, 1M in 10 s
WALL_TARGETS = {20_000: 2.0, 1_000_000: 10.0}
#: CPU-seconds per 1M events the local runner should stay under (at 10M)
CPU_PER_1M_TARGET = 8.0


def size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if text[-1:] in "km" else text) * scale)


def write_events(path: Path, events: int, keys: int, seed: int) -> float:
    """The generator's workload as a Delta table (the embedded writer, no session);
    returns the seconds it took."""
    import pyarrow as pa

    from pelengine.runs.events import EVENTS_ARROW_SCHEMA
    from pelengine.schemas import EVENTS_SCHEMA
    from pelengine.storage import sessionless
    from pelengine.synth import generate_events

    started = time.monotonic()
    fields = [f.name for f in EVENTS_SCHEMA.fields]
    columns: dict[str, list[object]] = {name: [] for name in fields}
    for row in generate_events(events, keys, seed=seed):
        for name in fields:
            columns[name].append(row[name])
    table = pa.table(columns, schema=EVENTS_ARROW_SCHEMA)
    sessionless.write_arrow(table, str(path), EVENTS_SCHEMA, "overwrite")
    return time.monotonic() - started


def timed_child(argv: list[str], env: dict[str, str]) -> dict[str, float | int]:
    """Run ``argv``; its wall time and the CPU-seconds of it and every process it started
    (polled every 0.2 s, so a process living less than that may be missed)."""
    import psutil

    started = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    root = psutil.Process(proc.pid)
    seen: dict[tuple[int, float], float] = {}
    peak_rss = 0
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                t = p.cpu_times()
                seen[(p.pid, p.create_time())] = t.user + t.system
                peak_rss = max(peak_rss, p.memory_info().rss)
            except psutil.Error:
                pass
        time.sleep(0.2)
    out, err = proc.communicate()
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.stderr.write(err.decode(errors="replace")[-4000:])
        raise SystemExit(f"{argv[1]} failed with exit code {proc.returncode}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(sum(seen.values()), 2),
        "processes": len(seen),
        "peak_rss_mb": round(peak_rss / 2**20),
        "report": json.loads(out),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", default="20k,1M", help="event counts (20k, 1M, 10M)")
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--engine", default="auto", help="auto, native or python")
    parser.add_argument("--spark", action="store_true", help="also time the Spark runner")
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/local_runner.json"))
    args = parser.parse_args()
    pelengine = str(Path(sys.executable).with_name("pelengine"))
    env = dict(os.environ)
    results = []
    work = Path(tempfile.mkdtemp(prefix="pelengine-local-bench-"))
    try:
        for n in [size(s) for s in args.series.split(",")]:
            events = work / f"events-{n}"
            print(f"== {n:,} events: writing the events table", flush=True)
            write_s = write_events(events, n, args.keys, args.seed)
            row: dict[str, object] = {"events": n, "write_events_s": round(write_s, 1)}
            runners = ["local", *(["spark"] if args.spark else [])]
            for runner in runners:
                out = work / f"out-{runner}-{n}"
                argv = [pelengine, "reconstruct", "--events", str(events), "--out", str(out)]
                argv += ["--runner", runner, "--engine", args.engine, "--json"]
                got = timed_child(argv, env)
                report = got.pop("report")
                assert isinstance(report, dict)
                got["timings_s"] = report.get("timings_s")
                got["engine"] = report.get("engine")
                got["cpu_s_per_1m"] = round(float(got["cpu_s"]) * 1_000_000 / n, 2)
                row[runner] = got
                line = (
                    f"  {runner:5s} runner: {got['wall_s']:.2f} s wall, {got['cpu_s']:.2f} CPU-s "
                    f"({got['cpu_s_per_1m']:.2f} CPU-s per 1M events), peak RSS "
                    f"{got['peak_rss_mb']} MB, {got['processes']} process(es), engine "
                    f"{got['engine']}; stages {got['timings_s']}"
                )
                print(line, flush=True)
                shutil.rmtree(out, ignore_errors=True)
            local = row["local"]
            assert isinstance(local, dict)
            target = WALL_TARGETS.get(n)
            if target is not None:
                verdict = "met" if local["wall_s"] <= target else "MISSED"
                print(f"  target: local runner <= {target} s wall at {n:,}: {verdict}")
            if n >= 10_000_000:
                verdict = "met" if local["cpu_s_per_1m"] <= CPU_PER_1M_TARGET else "MISSED"
                print(f"  target: <= {CPU_PER_1M_TARGET} CPU-s per 1M at 10M: {verdict}")
            if args.spark:
                spark = row["spark"]
                assert isinstance(spark, dict)
                print(f"  local / spark wall: {local['wall_s'] / spark['wall_s']:.2f}")
            results.append(row)
            shutil.rmtree(events, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"results": results}, indent=2) + "\n")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
