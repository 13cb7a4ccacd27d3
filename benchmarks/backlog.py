"""A consumer group's backlog: one stream whose group is handed N entries (XREADGROUP in
batches of 100) and then acknowledges them oldest first, the way a consumer that fell
behind catches up. The replay's CPU-seconds per 1k events at each size: a replay that is
linear in the log gives the same figure at every size (the ratio of the largest size's
figure to the smallest's is ~1); one whose cost per acknowledgement grows with the PEL
shows it here (before the native core's delivery records took O(1) removals, 200k
entries took 143 s of replay: a ratio of ~50).

The log goes through ``reconstruct_local`` in this process (no JVM), so the figure is the
engine's and the local pipeline's, not Spark's. Prints a table and saves JSON.

    python benchmarks/backlog.py [--series 50k,100k,200k,400k] [--engine auto]
        [--out benchmarks/results/backlog.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: the largest size's CPU-seconds per 1k events over the smallest's: linear is ~1
FLAT_TARGET = 1.5


def size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if text[-1:] in "km" else text) * scale)


def backlog_log(entries: int):  # noqa: ANN201 (a pyarrow Table; imported late)
    """XGROUP CREATE, ``entries`` XADDs, XREADGROUP COUNT 100 until all are pending, then
    an XACK of each, oldest first."""
    import pyarrow as pa

    from pelengine.runs.events import EVENTS_ARROW_SCHEMA

    argvs: list[list[str]] = [["XGROUP", "CREATE", "k", "g", "$", "MKSTREAM"]]
    argvs += [["XADD", "k", f"{n}-0", "f", "v"] for n in range(1, entries + 1)]
    read = ["XREADGROUP", "GROUP", "g", "c", "COUNT", "100", "STREAMS", "k", ">"]
    argvs += [read] * ((entries + 99) // 100)
    argvs += [["XACK", "k", "g", f"{n}-0"] for n in range(1, entries + 1)]
    n = len(argvs)
    return pa.table(
        {
            "seq": list(range(1, n + 1)),
            "ts_ms": [1_700_000_000_000 + i for i in range(n)],
            "argv": argvs,
            "db": [0] * n,
            "client": ["10.0.0.1:5000"] * n,
            "source": ["bench"] * n,
        },
        schema=EVENTS_ARROW_SCHEMA,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", default="50k,100k,200k,400k", help="PEL sizes")
    parser.add_argument("--engine", default="auto", choices=("auto", "native", "python"))
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/backlog.json"))
    args = parser.parse_args()

    from pelengine.local.reconstruct import reconstruct_local
    from pelengine.settings import Settings

    settings = Settings(engine=args.engine)
    results = []
    print(f"backlog: one group's PEL acknowledged oldest first, engine {args.engine}")
    print(f"{'entries':>9} {'events':>9} {'wall s':>8} {'CPU s':>8} {'CPU s/1k ev':>12}")
    for entries in [size(s) for s in args.series.split(",")]:
        events = backlog_log(entries)
        wall, cpu = time.monotonic(), time.process_time()
        result = reconstruct_local(events, settings)
        wall, cpu = time.monotonic() - wall, time.process_time() - cpu
        applied = result.report["events"]["applied"]
        assert applied == events.num_rows, f"{applied} of {events.num_rows} events applied"
        assert result.tables["pel"].num_rows == 0, "every entry was acknowledged"
        row = {
            "entries": entries,
            "events": events.num_rows,
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "cpu_s_per_1k_events": round(1000 * cpu / events.num_rows, 5),
            "timings_s": result.report.get("timings_s"),
        }
        results.append(row)
        print(
            f"{entries:>9,} {events.num_rows:>9,} {wall:>8.2f} {cpu:>8.2f} "
            f"{row['cpu_s_per_1k_events']:>12.4f}",
            flush=True,
        )
    ratio = results[-1]["cpu_s_per_1k_events"] / results[0]["cpu_s_per_1k_events"]
    verdict = "ok" if ratio <= FLAT_TARGET else "NO"
    print(
        f"CPU-s per 1k events, {results[-1]['entries']:,} entries over "
        f"{results[0]['entries']:,}: {ratio:.2f} (target <= {FLAT_TARGET}: {verdict})"
    )
    summary = {"engine": args.engine, "ratio": round(ratio, 3), "target": FLAT_TARGET}
    Path(args.out).write_text(json.dumps({**summary, "results": results}, indent=2) + "\n")
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
