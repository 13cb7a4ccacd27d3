"""Python worker memory of one hot stream: does it follow the PEL or the history?

Builds ONE stream of ``--events`` events (default 20,000,000) with Spark SQL from
``spark.range`` (one row of cycles, exploded; no Python generator), writes it as
the events table, and runs the reconstruct job (``run_reconstruct``, driver
settings from ``--conf``, default conf/bench.yaml) while a sampler records,
every ``--interval`` s (0.5), the RSS of every Python process under the JVM
(the UDF workers: the whole replay of the stream runs in one task, in one of
them; with the embedded Delta source, reads and writes run in such workers too)
and of the JVM. Python worker reuse is off unless ``--reuse-workers``: each
task gets its own process, so the replay worker's RSS is the replay's alone.
Writes the replay worker's peak RSS and its RSS over time (against the MB it
read from the JVM, which grows with the events it consumed), the peak of any
worker, every sample (with the job's progress lines as markers), the final PEL
and the history sizes (``delivery_counts``, ``ownership_changes``,
``pel_history`` rows) to ``--json`` (default
benchmarks/results/hot-stream-<N>-<ts>.json). ``--series 1M,5M,20M`` runs
several sizes one after the other in one session (RSS against history).

The mix, per cycle of ``--count`` + 2 x ``--groups`` + 1 events:

* ``--count`` x ``XADD hot MAXLEN ~ <maxlen> <ms>-0 f v`` (explicit increasing
  IDs, the ms of the ID = the event's ``ts_ms``; one event per ms);
* per group: ``XREADGROUP GROUP g<j> c<cycle mod 8> COUNT <count> STREAMS hot >``
  (the entries just added) and ``XACK`` of what that group read ``--ack-lag``
  cycles earlier, except a straggler (entry 0 of every 5th cycle);
* one slot turning over five jobs: ``XAUTOCLAIM`` of idle stragglers for g0, then
  g1 (to a rescuer), ``XACK`` of the stragglers ``--straggler-lag`` cycles old
  for g0, then g1, and an ``XCLAIM`` stealing a recent pending entry.

The PEL stays at about groups x count x ack-lag + the stragglers alive (a few
hundred); the history (delivery_counts, ownership_changes) grows with the events.
Not a test: ``make bench-hot`` (BENCH_ARGS="--events 1000000").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

START_MS = 1_700_000_000_000
KEY = "hot"
WORKERS = 8  # consumer names per group
SLOT_KINDS = 5  # claim-slot rotation


def parse_size(text: str) -> int:
    """``1M`` -> 1_000_000, ``300k`` -> 300_000, ``2500`` -> 2500."""
    text = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def label(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def add_workload_args(parser: argparse.ArgumentParser) -> None:
    """The options of the hot-stream workload and its run (shared with many_groups.py)."""
    parser.add_argument("--count", type=int, default=10, help="entries per cycle and per read")
    parser.add_argument("--maxlen", type=int, default=10_000)
    parser.add_argument("--ack-lag", type=int, default=10, help="cycles before an ack")
    parser.add_argument("--straggler-lag", type=int, default=200, help="cycles, multiple of 5")
    parser.add_argument("--profile", default="7.0")
    parser.add_argument("--conf", default="conf/bench.yaml", help="conf overlay (driver memory)")
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir)")


def save_json(result: dict[str, Any], path: str) -> None:
    """Write a benchmark's result as JSON (creating the directory) and say where."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1, default=str)
    print(f"written {path}")


def hot_stream_events(spark: Any, n_events: int, args: argparse.Namespace) -> Any:
    """The events DataFrame (contract columns) of one hot stream, about ``n_events`` rows."""
    from pyspark.sql import functions as F

    k, groups = args.count, args.groups
    per_cycle = k + 2 * groups + 1
    n_cycles = max(1, (n_events - groups) // per_cycle + 1)
    c = F.col("id")

    def entry(cycle: Any, r: int) -> Any:
        """The ID of entry ``r`` of ``cycle`` (its XADD's seq, as ms)."""
        seq = F.lit(groups) + cycle * per_cycle + r
        return F.concat((F.lit(START_MS) + seq).cast("string"), F.lit("-0"))

    def lits(*words: str) -> list[Any]:
        return [F.lit(w) for w in words]

    slots: list[Any] = []
    for r in range(k):
        trim = lits("XADD", KEY, "MAXLEN", "~", str(args.maxlen))
        slots.append(F.array(*trim, entry(c, r), *lits("f", "v")))
    consumer = F.concat(F.lit("c"), (c % WORKERS).cast("string"))
    for j in range(groups):
        slots.append(
            F.array(
                *lits("XREADGROUP", "GROUP", f"g{j}"),
                consumer,
                *lits("COUNT", str(k), "STREAMS", KEY, ">"),
            )
        )
    read = c - args.ack_lag  # the cycle whose entries are acked now
    straggles = (read % SLOT_KINDS) == 0
    ids = [F.when(~straggles, entry(read, 0)), *(entry(read, r) for r in range(1, k))]
    acked = F.filter(F.array(*ids), lambda x: x.isNotNull())
    for j in range(groups):
        slots.append(F.when(read >= 0, F.concat(F.array(*lits("XACK", KEY, f"g{j}")), acked)))
    idle_ms = (args.straggler_lag // 2) * per_cycle
    turn = c % SLOT_KINDS
    old = c - args.straggler_lag - turn  # a straggler cycle (multiple of SLOT_KINDS)
    slot = (
        F.when(
            turn < 2,
            F.array(
                F.lit("XAUTOCLAIM"),
                F.lit(KEY),
                F.concat(F.lit("g"), (turn % groups).cast("string")),
                F.lit("rescuer"),
                F.lit(str(idle_ms)),
                *lits("0-0", "COUNT", "4"),
            ),
        )
        .when(
            (turn < 4) & (old >= 0),
            F.array(
                F.lit("XACK"),
                F.lit(KEY),
                F.concat(F.lit("g"), ((turn - 2) % groups).cast("string")),
                entry(old, 0),
            ),
        )
        .when(
            (turn == 4) & (c >= 2),
            F.array(
                *lits("XCLAIM", KEY),
                F.concat(F.lit("g"), (F.floor(c / SLOT_KINDS) % groups).cast("string")),
                F.lit("thief"),
                F.lit(str(per_cycle)),
                entry(c - 2, 1),
            ),
        )
    )
    slots.append(slot)
    rows = (
        spark.range(0, n_cycles, numPartitions=max(1, n_cycles // 200_000))
        .select(c.alias("cycle"), F.posexplode(F.array(*slots)).alias("pos", "argv"))
        .filter(F.col("argv").isNotNull())
        .select(
            (F.lit(groups) + F.col("cycle") * per_cycle + F.col("pos")).alias("seq"),
            "argv",
        )
    )
    creates = spark.createDataFrame(
        [(j, ["XGROUP", "CREATE", KEY, f"g{j}", "0", "MKSTREAM"]) for j in range(groups)],
        "seq long, argv array<string>",
    )
    return (
        creates.unionByName(rows)
        .filter(F.col("seq") < n_events + groups)
        .select(
            "seq",
            (F.lit(START_MS) + F.col("seq")).alias("ts_ms"),
            "argv",
            F.lit(0).cast("int").alias("db"),
            F.lit(None).cast("string").alias("client"),
            F.lit("hot").alias("source"),
        )
    )


class RssSampler:
    """Every ``interval`` s: the RSS of each Python process under the JVM(s) started by
    this driver, and of the JVM; per process also its peak, CPU time and bytes read
    (``read_chars``: what it received, from the JVM's socket for a UDF worker)."""

    def __init__(self, interval: float) -> None:
        import psutil

        self.psutil = psutil
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self.marks: list[tuple[float, str]] = []
        # pid -> first/last seen, peak RSS, CPU seconds, MB read; and its RSS over time
        self.procs: dict[int, dict[str, Any]] = {}
        self.series: dict[int, list[tuple[float, float, float]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.t0 = time.monotonic()

    def mark(self, message: str) -> None:
        self.marks.append((round(time.monotonic() - self.t0, 2), message))

    def _jvms(self) -> list[Any]:
        me = self.psutil.Process()
        return [p for p in me.children(recursive=True) if p.name().startswith("java")]

    def _run(self) -> None:
        ps = self.psutil
        while not self._stop.wait(self.interval):
            now = round(time.monotonic() - self.t0, 2)
            workers: list[tuple[int, int, int]] = []
            jvm_rss = 0
            for jvm in self._jvms():
                try:
                    jvm_rss += jvm.memory_info().rss
                    children = jvm.children(recursive=True)
                except (ps.NoSuchProcess, ps.AccessDenied):
                    continue
                for child in children:
                    try:
                        if "python" not in child.name():
                            continue
                        rss = child.memory_info().rss
                        io = child.io_counters() if hasattr(child, "io_counters") else None
                        cpu = child.cpu_times()
                        cmd = " ".join(child.cmdline()[1:4])
                    except (ps.NoSuchProcess, ps.AccessDenied):
                        continue
                    read = io.read_chars if io else 0
                    workers.append((child.pid, rss, read))
                    info = self.procs.setdefault(
                        child.pid, {"first_t": now, "peak_rss_mb": 0.0, "cmd": cmd}
                    )
                    info["last_t"] = now
                    info["peak_rss_mb"] = max(info["peak_rss_mb"], round(rss / 2**20, 1))
                    info["cpu_s"] = round(cpu.user + cpu.system, 1)
                    info["read_mb"] = round(read / 2**20, 1)
                    self.series.setdefault(child.pid, []).append(
                        (now, round(rss / 2**20, 1), round(read / 2**20, 1))
                    )
            top = max(workers, key=lambda w: w[1], default=(None, 0, 0))
            self.samples.append(
                {
                    "t": now,
                    "workers": len(workers),
                    "max_worker_rss_mb": round(top[1] / 2**20, 1),
                    "max_worker_pid": top[0],
                    "max_worker_read_mb": round(top[2] / 2**20, 1),
                    "sum_worker_rss_mb": round(sum(w[1] for w in workers) / 2**20, 1),
                    "jvm_rss_mb": round(jvm_rss / 2**20, 1),
                }
            )

    def __enter__(self) -> RssSampler:
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_one(spark: Any, n_events: int, work: str, args: argparse.Namespace) -> dict[str, Any]:
    from pelengine.runs.full import run_reconstruct
    from pelengine.settings import Settings
    from pelengine.storage import read_table, table_row_count, write_table

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    events = os.path.join(work, f"events-{label(n_events)}")
    out = os.path.join(work, f"out-{label(n_events)}")
    shutil.rmtree(out, ignore_errors=True)
    t = time.monotonic()
    if not os.path.exists(events):
        say(f"generating one stream of {n_events:,} events (Spark SQL)")
        write_table(hot_stream_events(spark, n_events, args), events, "overwrite")
    n_rows = table_row_count(spark, events)
    generate_s = round(time.monotonic() - t, 1)
    say(f"{n_rows:,} events in {generate_s} s; reconstructing")
    with RssSampler(args.interval) as sampler:

        def progress(message: str) -> None:
            sampler.mark(message)
            say("  " + message)

        t = time.monotonic()
        report = run_reconstruct(spark, events, out, Settings(profile=args.profile), progress)
        took = round(time.monotonic() - t, 1)
    samples = sampler.samples
    peak = max(samples, key=lambda s: s["max_worker_rss_mb"], default=None)
    # the replay worker: of the processes alive while the replay ran (between the
    # progress lines "replaying ..." and "writing pel"; the grouped UDF runs the whole
    # stream in one task), the one that used the most CPU
    start = next((t for t, m in sampler.marks if m.startswith("replaying")), 0.0)
    end = next((t for t, m in sampler.marks if m.startswith("writing pel")), float("inf"))
    during = {
        pid: info
        for pid, info in sampler.procs.items()
        if info["first_t"] <= end and info["last_t"] >= start
    }
    replay_pid = max(during, key=lambda p: during[p].get("cpu_s", 0), default=None)
    replay = sampler.procs.get(replay_pid, {}) if replay_pid is not None else {}
    replay_series = sampler.series.get(replay_pid, []) if replay_pid is not None else []
    # events consumed, estimated from the MB read (the input is read as it is replayed)
    top_read = max((r for _, _, r in replay_series), default=0.0) or 1.0
    step = max(1, len(replay_series) // 20)
    rss_vs_events = [
        {"t": t_, "rss_mb": rss, "events_est": int(n_rows * r / top_read)}
        for t_, rss, r in replay_series[::step] + replay_series[-1:]
    ]
    rows = report["output"]["rows"]
    pel = read_table(spark, os.path.join(out, "pel"))
    from pyspark.sql import functions as F

    pel_by_group = {r["group"]: r["count"] for r in pel.groupBy("group").count().collect()}
    dc = read_table(spark, os.path.join(out, "delivery_counts"))
    statuses = {r["status"]: r["count"] for r in dc.groupBy("status").count().collect()}
    redelivered = dc.filter(F.col("deliveries") > 1).count()
    figures = {
        "events": n_rows,
        "generate_s": generate_s,
        "reconstruct_s": took,
        "timings_s": report.get("timings_s"),
        "replay_worker_peak_rss_mb": replay.get("peak_rss_mb"),
        "replay_worker": {"pid": replay_pid, **replay},
        # (t, RSS MB, MB read from the JVM: grows with the events consumed)
        "replay_worker_rss": replay_series,
        "replay_worker_rss_vs_events": rss_vs_events,
        "peak_worker_rss_mb": peak["max_worker_rss_mb"] if peak else None,
        "peak_worker_rss_at_s": peak["t"] if peak else None,
        "peak_sum_worker_rss_mb": max((s["sum_worker_rss_mb"] for s in samples), default=None),
        "peak_jvm_rss_mb": max((s["jvm_rss_mb"] for s in samples), default=None),
        "final_pel": rows.get("pel"),
        "final_pel_by_group": pel_by_group,
        "delivery_counts_rows": rows.get("delivery_counts"),
        "delivery_counts_by_status": statuses,
        "delivered_more_than_once": redelivered,
        "ownership_changes_rows": rows.get("ownership_changes"),
        "pel_history_rows": rows.get("pel_history"),
        "stream_length": read_table(spark, os.path.join(out, "streams")).first()["length"],
        "events_by_command": report["events"].get("by_command"),
        "events_failed": report["events"].get("failed"),
        "marks": sampler.marks,
        "processes": sampler.procs,
        "samples": samples,
    }
    say(
        f"{label(n_events)}: replay worker peak RSS {figures['replay_worker_peak_rss_mb']} MB "
        f"(any Python worker: {figures['peak_worker_rss_mb']} MB), "
        f"PEL {figures['final_pel']}, delivery_counts {figures['delivery_counts_rows']:,}, "
        f"ownership_changes {figures['ownership_changes_rows']:,}, {took} s"
    )
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", default="20M", help="events (1M, 300k, ...)")
    parser.add_argument("--series", default=None, help="several sizes, e.g. 1M,5M,20M")
    parser.add_argument("--groups", type=int, default=2)
    add_workload_args(parser)
    parser.add_argument("--interval", type=float, default=0.5, help="RSS sampling period (s)")
    parser.add_argument("--keep", action="store_true", help="keep the output tables")
    parser.add_argument("--tag", default="", help="a note stored in the JSON (e.g. 'baseline')")
    parser.add_argument(
        "--reuse-workers",
        action="store_true",
        help="keep Spark's Python worker reuse (default off here: one process per task, so "
        "the replay's RSS is not mixed with what earlier tasks left in the same process)",
    )
    parser.add_argument("--json", default=None, help="default benchmarks/results/hot-stream-...")
    args = parser.parse_args()
    if args.straggler_lag % SLOT_KINDS:
        parser.error(f"--straggler-lag must be a multiple of {SLOT_KINDS}")
    sizes = [parse_size(s) for s in (args.series or args.events).split(",")]

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from dataclasses import replace

    import pelengine
    from pelengine.session import build_session
    from pelengine.settings import load_config

    work = args.dir or tempfile.mkdtemp(prefix="pelengine-hot-")
    os.makedirs(work, exist_ok=True)
    t = time.monotonic()
    config = load_config([args.conf] if args.conf else [])
    if not args.reuse_workers:
        extra = {**config.spark.conf, "spark.python.worker.reuse": "false"}
        config = replace(config, spark=replace(config.spark, conf=extra))
    spark = build_session(config, print)
    result: dict[str, Any] = {
        "tag": args.tag,
        "pelengine": os.path.dirname(pelengine.__file__),
        "session_start_s": round(time.monotonic() - t, 1),
        "options": {k: v for k, v in vars(args).items() if k not in ("json",)},
        "cores": os.cpu_count(),
        "runs": {},
    }
    for n in sizes:
        result["runs"][label(n)] = run_one(spark, n, work, args)
    summary = {
        name: {
            k: run[k]
            for k in (
                "events",
                "replay_worker_peak_rss_mb",
                "peak_worker_rss_mb",
                "final_pel",
                "delivery_counts_rows",
                "ownership_changes_rows",
                "reconstruct_s",
            )
        }
        for name, run in result["runs"].items()
    }
    result["summary"] = summary
    print(json.dumps(summary, indent=2))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.json or os.path.join(
        "benchmarks", "results", f"hot-stream-{'-'.join(summary)}-{stamp}.json"
    )
    save_json(result, path)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
