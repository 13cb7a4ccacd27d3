"""Prove a restructuring changed no table: digest every table of the same runs before and after.

A refactor or a speed-up must leave every table the job writes identical. This script
runs the CLI of one checkout over a fixed set of logs and digests each table (its rows
sorted, hashed), so that two checkouts -- the commit before a change and the one after --
can be compared table by table:

    python benchmarks/identical.py logs DIR            # once: write the logs (needs redis-server)
    python benchmarks/identical.py digest DIR OUT.json [--pelengine BIN] [--big]
    python benchmarks/identical.py compare A.json B.json

``logs`` writes, under DIR: ``scenarios`` (every step of the model's hand-traced scenarios
in tests/model/test_scenarios.py, one scenario after another with a FLUSHALL between
them); ``live/`` (seeded random workloads run on a live Redis 7.0 with an AOF and a
MONITOR capture: the events the client recorded, the appendonlydir, the capture and the
server's dump.rdb). ``digest`` runs, with the given checkout's ``pelengine`` command:
``generate`` (with and without faults, and 1M events with ``--big``), ``demo``, the
ingest commands over ``live/`` and ``reconstruct`` of each events table on both engines
(python, native) and a few option sets (profiles, ``--as-of-seq``, ``--split-groups``
with small stream nodes,
an incremental run in two nights). It writes one digest per table and run.

Digests are of the Delta tables' rows as delta-rs reads them (every column, rows sorted
by their text), so they do not depend on file layout or on which store wrote them.
The run record ``_runs`` and anything wall-clock (report text) is left out. The runs use
the embedded store unless ``PELENGINE_STORE`` says otherwise (the tables' rows do not
depend on the store; the suite holds the stores equal).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# tables whose rows hold wall-clock facts of the run itself, not of the log
VOLATILE_TABLES = {"_runs"}
# columns holding the wall-clock moment of the run that wrote the row (the AOF ingest's
# bookkeeping): left out of the digest, every other column of those rows is compared
VOLATILE_COLUMNS = ("ingested_at_ms",)
ENGINES = ("python", "native")
# list columns whose order carries no meaning
UNORDERED_LISTS = ("family_of",)


# ---------------------------------------------------------------------------- logs


def _write_events(path: Path, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    sys.path.insert(0, str(ROOT))
    from pelengine.runs.events import EVENTS_ARROW_SCHEMA, rows_to_batches

    batches = list(rows_to_batches(rows))
    table = pa.Table.from_batches(batches, schema=EVENTS_ARROW_SCHEMA)
    write_deltalake(str(path), table, mode="overwrite")


def scenario_rows() -> list[dict[str, Any]]:
    """Every scenario of the model tests as one command log: FLUSHALL before each, times
    moved on so that they never go back."""
    sys.path.insert(0, str(ROOT))
    from tests.model.test_scenarios import SHARED, VERSIONED  # type: ignore[import-not-found]

    rows: list[dict[str, Any]] = []
    seq = 0
    offset = 0
    for scenario in [*SHARED, *VERSIONED]:
        seq += 1
        rows.append(
            {"seq": seq, "ts_ms": offset + 1, "argv": ["FLUSHALL"], "db": 0, "source": "scenario"}
        )
        last = 0
        for step in scenario.steps:
            seq += 1
            last = max(last, step.ts)
            rows.append(
                {
                    "seq": seq,
                    "ts_ms": offset + step.ts,
                    "argv": step.argv,
                    "db": step.db,
                    "client": step.client,
                    "source": scenario.name,
                }
            )
        offset += last + 10_000
    return rows


def write_logs(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = scenario_rows()
    _write_events(out / "scenarios", rows)
    print(f"scenarios: {len(rows)} rows", flush=True)

    sys.path.insert(0, str(ROOT))
    from tests.redis_diff.aof_support import aof_dir, aof_server
    from tests.redis_diff.capture import SeqCounter
    from tests.redis_diff.monitor_capture import MonitorCapture
    from tests.redis_diff.server import REDIS_7_0, stop_server
    from tests.redis_diff.workload import run_workload

    live = out / "live"
    live.mkdir(exist_ok=True)
    server = aof_server(REDIS_7_0, timestamps=True)
    try:
        capture = MonitorCapture(server, live / "monitor.txt")
        counter = SeqCounter(1)
        records: list[dict[str, Any]] = []
        for db, seed in ((0, 1), (1, 2), (2, 3)):
            result = run_workload(server, seed, 1500, db=db, counter=counter, flush=False)
            records.extend(result.rows)
        capture.stop()
        client = server.client(0)
        client.execute_command("SAVE")
        shutil.copy(Path(server.workdir) / "dump.rdb", live / "dump.rdb")
        shutil.copytree(aof_dir(server), live / "appendonlydir")
    finally:
        stop_server(server)
    for row in records:
        row["argv"] = [a.decode() if isinstance(a, bytes) else a for a in row["argv"]]
    _write_events(live / "recorded", records)
    print(f"live: {len(records)} recorded rows, AOF, MONITOR and RDB", flush=True)


# ---------------------------------------------------------------------------- digests


def table_digest(path: Path) -> dict[str, Any]:
    import pyarrow as pa
    from deltalake import DeltaTable

    # delta-rs' own scan: it honours deletion vectors (delta-spark's merged tables)
    table = pa.table(DeltaTable(str(path)).scan())
    table = table.drop_columns([c for c in VOLATILE_COLUMNS if c in table.column_names])
    lines = sorted(
        json.dumps(_canonical(row), sort_keys=True, default=_plain) for row in table.to_pylist()
    )
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    return {"rows": len(lines), "columns": sorted(table.column_names), "sha256": digest}


def _canonical(row: dict[str, Any]) -> dict[str, Any]:
    """The state's ``family_of`` lists every (key, family) pair in the order a set gave it
    (the order means nothing, and differs from run to run): compared as a set."""
    for name in UNORDERED_LISTS:
        if isinstance(row.get(name), list):
            row[name] = sorted(
                row[name], key=lambda v: json.dumps(v, sort_keys=True, default=_plain)
            )
    return row


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return "b:" + value.hex()
    return str(value)


def root_digests(root: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for log in sorted(root.rglob("_delta_log")):
        table = log.parent
        name = str(table.relative_to(root))
        if name in VOLATILE_TABLES or name.endswith("/_runs"):
            continue
        found[name] = table_digest(table)
    return found


class Runner:
    def __init__(self, pelengine: str, work: Path) -> None:
        self.pelengine = pelengine
        self.work = work
        self.results: dict[str, Any] = {}

    def cli(self, *args: str, ok: tuple[int, ...] = (0,)) -> None:
        t0 = time.monotonic()
        env = {**os.environ, "PELENGINE_STORE": os.environ.get("PELENGINE_STORE", "embedded")}
        proc = subprocess.run(
            [self.pelengine, *args],
            capture_output=True,
            text=True,
            check=False,
            env=env,
            # not the caller's folder: Spark's Python workers put their working folder
            # first on sys.path, and a checkout there would shadow the one measured
            cwd=self.work,
        )
        if proc.returncode not in ok:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
            raise SystemExit(f"identical: {' '.join(args[:3])} exited {proc.returncode}")
        print(f"  {' '.join(args[:1])} ... {time.monotonic() - t0:.1f} s", flush=True)

    def run(self, name: str, events: Path, *options: str) -> None:
        for engine in ENGINES:
            out = self.work / f"{name}-{engine}"
            shutil.rmtree(out, ignore_errors=True)
            print(f"{name} [{engine}]", flush=True)
            self.cli(
                "reconstruct",
                "--events",
                str(events),
                "--out",
                str(out),
                "--engine",
                engine,
                *options,
            )
            self.results[f"{name}/{engine}"] = root_digests(out)

    def nights(self, name: str, first: Path, second: Path) -> None:
        """An incremental run over ``first``, then a night after ``second``'s rows were
        appended (both engines)."""
        for engine in ENGINES:
            out = self.work / f"{name}-{engine}"
            events = self.work / f"{name}-events-{engine}"
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(events, ignore_errors=True)
            shutil.copytree(first, events)
            for night in (1, 2):
                if night == 2:
                    _append(events, second)
                print(f"{name} [{engine}] night {night}", flush=True)
                self.cli(
                    "reconstruct", "--events", str(events), "--out", str(out),
                    "--engine", engine, "--incremental",
                )  # fmt: skip
            self.results[f"{name}/{engine}"] = root_digests(out)


def _append(events: Path, more: Path) -> None:
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(str(events), DeltaTable(str(more)).to_pyarrow_table(), mode="append")


def digest_all(logs: Path, out_json: Path, pelengine: str, big: bool) -> None:
    work = Path(os.environ.get("IDENTICAL_WORK", "/tmp/pelengine-identical")) / out_json.stem
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    r = Runner(pelengine, work)
    t0 = time.monotonic()

    gen = work / "gen-faults"
    r.cli("generate", "--out", str(gen), "--events", "30000", "--keys", "40", "--seed", "11")
    r.results["generated/faults"] = root_digests(gen)
    r.run("gen-faults", gen)
    r.run("gen-faults-asof", gen, "--as-of-seq", "17000")
    r.run(
        "gen-faults-split",
        gen,
        "--split-groups",
        "2",
        "--stream-node-max-entries",
        "7",
        "--stream-node-max-bytes",
        "300",
    )
    clean = work / "gen-clean"
    r.cli(
        "generate",
        "--out",
        str(clean),
        "--events",
        "20000",
        "--keys",
        "25",
        "--seed",
        "5",
        "--no-faults",
    )
    r.run("gen-clean", clean, "--redis-version", "7.4")
    later = work / "gen-later"
    r.cli("generate", "--out", str(later), "--events", "5000", "--keys", "40", "--seed", "12")
    r.nights("gen-nights", gen, later)

    r.run("scenarios", logs / "scenarios")
    r.run("scenarios-valkey8", logs / "scenarios", "--redis-version", "valkey-8.1")
    live = logs / "live"
    r.run("live-recorded", live / "recorded")
    for kind, args in (
        ("aof", ["ingest-aof", str(live / "appendonlydir")]),
        (
            "monitor",
            [
                "ingest-monitor",
                str(live / "monitor.txt"),
                "--ids-from-aof",
                str(live / "appendonlydir"),
            ],
        ),
        ("rdb", ["ingest-rdb", str(live / "dump.rdb")]),
    ):
        events = work / f"ingested-{kind}"
        shutil.rmtree(events, ignore_errors=True)
        r.cli(args[0], "--events", str(events), *args[1:], ok=(0, 1))
        r.results[f"ingested/{kind}"] = root_digests(events)
        r.run(f"live-{kind}", events)

    demo = work / "demo"
    print("demo", flush=True)
    r.cli("demo", "--dir", str(demo))
    r.results["demo"] = root_digests(demo)

    if big:
        big_events = work / "gen-1m"
        r.cli(
            "generate",
            "--out",
            str(big_events),
            "--events",
            "1000000",
            "--keys",
            "500",
            "--seed",
            "3",
        )
        r.run("gen-1m", big_events)
    out_json.write_text(json.dumps(r.results, indent=1, sort_keys=True))
    print(
        f"identical: {sum(len(v) for v in r.results.values())} tables digested in "
        f"{time.monotonic() - t0:.0f} s -> {out_json}",
        flush=True,
    )


def compare(a_path: Path, b_path: Path) -> int:
    a = json.loads(a_path.read_text())
    b = json.loads(b_path.read_text())
    differ = 0
    same = 0
    for run in sorted(set(a) | set(b)):
        ta, tb = a.get(run, {}), b.get(run, {})
        for table in sorted(set(ta) | set(tb)):
            if ta.get(table) == tb.get(table):
                same += 1
                continue
            differ += 1
            print(f"DIFFER {run} {table}: {ta.get(table)} != {tb.get(table)}")
    # the engines must agree with each other too
    for run in sorted(b):
        if run.endswith("/python"):
            other = run[: -len("python")] + "native"
            if other in b and b[run] != b[other]:
                differ += 1
                print(f"ENGINES DIFFER {run[: -len('/python')]}")
    print(f"identical: {same} tables identical, {differ} differ")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("logs")
    p.add_argument("dir", type=Path)
    p = sub.add_parser("digest")
    p.add_argument("logs", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--pelengine", default=str(ROOT / ".venv" / "bin" / "pelengine"))
    p.add_argument("--big", action="store_true", help="also a generated log of 1M events")
    p = sub.add_parser("compare")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "logs":
        write_logs(args.dir)
        return 0
    if args.cmd == "digest":
        digest_all(args.logs, args.out, args.pelengine, args.big)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    raise SystemExit(main())
