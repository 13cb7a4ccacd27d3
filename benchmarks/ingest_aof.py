"""``pelengine ingest-aof`` of one AOF, as a user runs it (the console script in a child
process), on each store: the embedded store, which needs no Spark session, and
delta-spark (when its jars are installed), which starts one. Prints wall time and the
CPU-seconds of the child and everything it started (its JVM included), and saves JSON.

    python benchmarks/ingest_aof.py [--mb 10] [--out benchmarks/results/ingest_aof.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _resp(*argv: str) -> bytes:
    out = [b"*%d\r\n" % len(argv)]
    for a in argv:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def write_aof(path: Path, megabytes: float, seed: int = 7) -> int:
    """An AOF of about ``megabytes``: streams with groups, XADDs with explicit IDs,
    deliveries, acks and claims, as a server propagates them; returns its commands."""
    rng = random.Random(seed)
    target = int(megabytes * 1024 * 1024)
    written = commands = 0
    with open(path, "wb") as fh:
        for k in range(20):
            chunk = _resp("XGROUP", "CREATE", f"orders:{k}", "g", "$", "MKSTREAM")
            fh.write(chunk)
            written += len(chunk)
            commands += 1
        n = 0
        while written < target:
            n += 1
            key = f"orders:{rng.randrange(20)}"
            entry = f"{1_700_000_000_000 + n}-0"
            batch = [_resp("XADD", key, entry, "order", str(n), "body", "x" * rng.randint(8, 80))]
            if rng.random() < 0.8:
                batch.append(
                    _resp(
                        "XCLAIM",
                        key,
                        "g",
                        f"c{rng.randrange(8)}",
                        "0",
                        entry,
                        "TIME",
                        str(1_700_000_000_000 + n),
                        "RETRYCOUNT",
                        "1",
                        "FORCE",
                        "JUSTID",
                    )
                )
            if rng.random() < 0.6:
                batch.append(_resp("XACK", key, "g", entry))
            for chunk in batch:
                fh.write(chunk)
                written += len(chunk)
                commands += 1
    return commands


def run(pelengine: str, aof: Path, events: Path, store: str) -> dict[str, float | int | str]:
    """One ``ingest-aof`` child; its CPU-seconds and those of every process it started.

    The child's own (and what it reaped) come from its rusage; its descendants (the JVM of
    a Spark session, which the CLI leaves with ``os._exit`` and never reaps, and that
    JVM's Python workers) are sampled every 0.1 s (user + system of each, the last value
    seen), so a descendant's final 0.1 s may be missed."""
    import psutil

    env = dict(os.environ, PELENGINE_STORE=store)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    child = subprocess.Popen(
        [pelengine, "ingest-aof", str(aof), "--events", str(events), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[int, float] = {}
    parent = psutil.Process(child.pid)
    while child.poll() is None:
        try:
            for proc in parent.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    t = proc.cpu_times()
                    seen[proc.pid] = max(seen.get(proc.pid, 0.0), t.user + t.system)
        except psutil.Error:
            pass
        time.sleep(0.1)
    out, err = child.communicate()
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if child.returncode != 0:
        sys.exit(f"ingest-aof on {store} failed ({child.returncode}):\n{err}")
    report = json.loads(out)
    own = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "store": store,
        "spark_session": report.get("spark_session"),
        "commands": report["appended"],
        "wall_s": round(wall, 2),
        "cpu_s": round(own + sum(seen.values()), 2),
        "cpu_descendants_s": round(sum(seen.values()), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=10.0, help="AOF size in MB (default 10)")
    parser.add_argument("--out", default="benchmarks/results/ingest_aof.json")
    args = parser.parse_args()
    pelengine = str(Path(sys.executable).with_name("pelengine"))
    stores = ["embedded"]
    have_jars = (
        subprocess.run(
            [
                sys.executable,
                str(Path(__file__).resolve().parents[1] / "jars" / "fetch.py"),
                "--check",
            ],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )
    if have_jars:
        stores.append("delta-spark")
    work = Path(tempfile.mkdtemp(prefix="pelengine-ingest-bench-"))
    try:
        aof = work / "appendonly.aof"
        commands = write_aof(aof, args.mb)
        size = aof.stat().st_size
        print(f"AOF: {size / 1e6:.1f} MB, {commands:,} commands ({aof})")
        results = []
        for store in stores:
            result = run(pelengine, aof, work / f"events-{store}", store)
            results.append(result)
            print(
                f"  {store:12s} spark session {str(result['spark_session']):5s} "
                f"wall {result['wall_s']:6.2f} s  CPU {result['cpu_s']:6.2f} s"
            )
        if not have_jars:
            print("  delta-spark: no jars (make jars): not measured")
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            json.dumps(
                {
                    "aof_bytes": size,
                    "commands": commands,
                    "cpu_count": os.cpu_count(),
                    "results": results,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"saved {out}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
