"""CPU of the Python side of the replay alone: the grouped Arrow UDF, in-process.

Generates ``--events`` events (``pelengine.synth``, default 300k over ``--keys``
8 keys), routes them in this process the way the job does (``make_router``; keys
tied by RENAME or a multi-stream XREADGROUP share a family, FLUSHDB/FLUSHALL reach
every family as fan-out rows), cuts each family's rows, in seq order, into Arrow
batches of ``--batch-rows`` (Spark's ``maxRecordsPerBatch``, 10,000) with the
columns the job's replay reads, and feeds them through
``one_family(make_replay_function(...))``
(no Spark: the function is called as the worker calls it). Measured with
``time.process_time()``: the replay (reading batches, the model, writing output
batches) and, apart, the router. The output is digested (rows per table and a sha
of the sorted rows) so that two versions of the code can be held to the same
output. Before the timed replay the worker's GC settings are applied (what the UDF
does in a Spark worker), unless ``--default-gc``.

The process keeps every output batch until the digest is made: its max RSS is not
the replay's (``benchmarks/hot_stream.py`` measures a worker's memory).

Prints the figures and saves them as JSON (``--json``, default
benchmarks/results/replay-udf-<N>-<ts>.json). ``--repeat`` runs the replay several
times and keeps the fastest.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa


def input_schema() -> pa.Schema:
    """The input columns of the job's replay (``pelengine.schemas.REPLAY_INPUT_SCHEMA``)."""
    from pelengine.engine.udf import _arrow_schema
    from pelengine.schemas import REPLAY_INPUT_SCHEMA

    return _arrow_schema(REPLAY_INPUT_SCHEMA)


def parse_size(text: str) -> int:
    text = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def events(n: int, keys: int, seed: int) -> list[dict[str, Any]]:
    """The generated log as the job replays it: rows with an argv, one per seq."""
    from pelengine.synth import generate_events

    seen: set[int] = set()
    rows = []
    for row in generate_events(n, keys, seed):
        if not row["argv"] or row["seq"] in seen:
            continue
        seen.add(row["seq"])
        if row["db"] is None:  # the job gives it the db the client SELECTed; 0 here
            row["db"] = 0
        rows.append(row)
    return rows


def route(
    rows: list[dict[str, Any]], profile: str, batch_rows: int
) -> tuple[dict[tuple[int, str], list[pa.RecordBatch]], float]:
    """Per (db, family): the replay's input batches; and the router's CPU seconds."""
    from pelengine.engine.udf import make_router
    from pelengine.model.routing import SCOPE_ALL, SCOPE_DB, SCOPE_KEYS, linked_keys

    parent: dict[tuple[int, str], tuple[int, str]] = {}

    def find(k: tuple[int, str]) -> tuple[int, str]:
        while parent.setdefault(k, k) != k:
            k = parent[k]
        return k

    for row in rows:
        links = linked_keys(row["argv"])
        for other in links[1:]:
            a, b = find((row["db"], links[0])), find((row["db"], other))
            if a != b:
                parent[max(a, b)] = min(a, b)
    family_of = {k: find(k)[1] for k in parent}

    names = ("seq", "ts_ms", "argv", "db", "client")
    table = pa.Table.from_pylist(
        [{c: r.get(c) for c in names} for r in rows],
        schema=pa.schema([input_schema().field(c) for c in names]),
    )
    from pelengine.settings import Settings

    router = make_router(Settings(profile=profile), family_of)
    start = time.process_time()
    routed = pa.Table.from_batches(list(router(iter(table.to_batches(max_chunksize=batch_rows)))))
    router_s = time.process_time() - start

    per_family: dict[tuple[int, str], list[dict[str, Any]]] = {}
    fanned: list[tuple[str, dict[str, Any]]] = []
    for row in routed.to_pylist():
        if row["scope"] == SCOPE_KEYS:
            for fam in row["families"]:
                per_family.setdefault((row["db"], fam), []).append(row | {"fanout": False})
        elif row["scope"] in (SCOPE_DB, SCOPE_ALL):
            fanned.append((row["scope"], row))
    for scope, row in fanned:
        for db, fam in per_family:
            if scope == SCOPE_ALL or db == row["db"]:
                per_family[(db, fam)].append(row | {"db": db, "fanout": True})
    batches: dict[tuple[int, str], list[pa.RecordBatch]] = {}
    for (db, fam), fam_rows in sorted(per_family.items()):
        fam_rows.sort(key=lambda r: r["seq"])
        cols = {
            "seq": [r["seq"] for r in fam_rows],
            "ts_ms": [r["ts_ms"] for r in fam_rows],
            "argv": [r["argv"] for r in fam_rows],
            "db": [db] * len(fam_rows),
            "client": [r["client"] for r in fam_rows],
            "fanout": [r["fanout"] for r in fam_rows],
            "family": [fam] * len(fam_rows),
            "marker": [False] * len(fam_rows),
            "exec_unit": [None] * len(fam_rows),
            "unit": [None] * len(fam_rows),
            "lead": [True] * len(fam_rows),
            "silent": [False] * len(fam_rows),
        }
        t = pa.Table.from_pydict(cols, schema=input_schema())
        batches[(db, fam)] = t.to_batches(max_chunksize=batch_rows)
    return batches, router_s


def replay_all(
    batches: dict[tuple[int, str], list[pa.RecordBatch]], profile: str, engine: str = "python"
) -> tuple[float, list[pa.RecordBatch]]:
    """Every family through the replay function of ``engine``: (CPU seconds, output batches)."""
    from pelengine.engine.udf import make_replay_function, one_family
    from pelengine.settings import Settings

    fn = one_family(
        make_replay_function(Settings(profile=profile), 1_800_000_000_000, 10**12, engine=engine)
    )
    out: list[pa.RecordBatch] = []
    start = time.process_time()
    for (db, fam), fam_batches in batches.items():
        key = (pa.scalar(db, pa.int32()), pa.scalar(fam, pa.string()))
        it: Iterator[pa.RecordBatch] = iter(fam_batches)
        out.extend(fn(key, it))
    return time.process_time() - start, out


def table_rows(out: list[pa.RecordBatch]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(table, row) of the replay's packed output (each table's batches as Arrow IPC).
    A checkout from before the packing is measured with its own copy of this script: its
    digest (the non-null columns of each row) is the same, so the two compare."""
    from pelengine.engine import udf
    from pelengine.schemas import REPLAY_TABLE_SCHEMAS

    for batch in out:
        tables = batch.column("table").to_pylist()
        for i, table in enumerate(tables):
            schema = udf._arrow_schema(REPLAY_TABLE_SCHEMAS[table])
            for inner in udf.unpack_payloads(batch.column("payload").slice(i, 1), schema):
                for row in inner.to_pylist():
                    yield table, row


def digest(out: list[pa.RecordBatch]) -> dict[str, dict[str, Any]]:
    """Rows and a sha of the sorted rows, per output table (columns that are not null)."""
    per: dict[str, list[str]] = {}
    for table, row in table_rows(out):
        shown = {k: v for k, v in row.items() if v is not None}
        per.setdefault(table, []).append(json.dumps(shown, sort_keys=True, default=str))
    return {
        t: {"rows": len(r), "sha": hashlib.sha256("\n".join(sorted(r)).encode()).hexdigest()[:16]}
        for t, r in sorted(per.items())
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--events", default="300k")
    p.add_argument("--keys", type=int, default=8)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--profile", default="7.0")
    p.add_argument(
        "--engine",
        default="python",
        choices=("python", "native"),
        help="the replay engine measured (native: pelengine_native, Rust)",
    )
    p.add_argument("--batch-rows", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--default-gc", action="store_true", help="leave the GC as Python sets it")
    p.add_argument("--tag", default="")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    n = parse_size(args.events)

    import pelengine.engine.udf as udf

    t0 = time.process_time()
    rows = events(n, args.keys, args.seed)
    gen_s = time.process_time() - t0
    batches, router_s = route(rows, args.profile, args.batch_rows)
    n_in = sum(b.num_rows for bs in batches.values() for b in bs)
    del rows
    gc.collect()

    tuned = False
    # what a Spark worker running the Python engine does (the engine's own module; a
    # checkout from before the engines shared one interface had it in udf)
    try:
        from pelengine.engine.python.worker_gc import tune_worker_gc
    except ImportError:
        tune_worker_gc = getattr(udf, "tune_worker_gc", None)
    if not args.default_gc and tune_worker_gc is not None:
        tune_worker_gc()
        tuned = True
    runs = []
    out: list[pa.RecordBatch] = []
    for _ in range(args.repeat):
        out = []
        gc.collect()
        cpu_s, out = replay_all(batches, args.profile, args.engine)
        runs.append(cpu_s)
    best = min(runs)
    tables = digest(out)
    result = {
        "tag": args.tag,
        "pelengine": os.path.dirname(os.path.dirname(os.path.abspath(udf.__file__))),
        "options": vars(args),
        "events": n,
        "replayed_rows": n_in,
        "families": len(batches),
        "gc_tuned": tuned,
        "generate_s": round(gen_s, 2),
        "router_cpu_s": round(router_s, 3),
        "router_cpu_s_per_1m": round(router_s * 1e6 / n, 2),
        "replay_cpu_s": [round(r, 3) for r in runs],
        "replay_cpu_s_per_1m_events": round(best * 1e6 / n, 2),
        "engine": args.engine,
        "events_per_cpu_s": round(n_in / best) if best else None,
        "output_rows": sum(d["rows"] for d in tables.values()),
        "output_batches": len(out),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "tables": tables,
    }
    print(
        f"{n:,} events ({n_in:,} replayed rows, {len(batches)} families): "
        f"{args.engine} replay {best:.2f} CPU-s = {result['replay_cpu_s_per_1m_events']} per 1M "
        f"events ({result['events_per_cpu_s']:,} replayed rows per CPU-s) "
        f"(runs {result['replay_cpu_s']}); router {router_s:.2f} CPU-s "
        f"= {result['router_cpu_s_per_1m']} per 1M; gc tuned: {tuned}; "
        f"max RSS {result['max_rss_mb']} MB"
    )
    for t, d in tables.items():
        print(f"  {t:20s} {d['rows']:>9,} rows  sha {d['sha']}")
    path = args.json or os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "results",
        f"replay-udf-{args.engine}-{args.events}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        f"{'-' + args.tag if args.tag else ''}.json",
    )
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
