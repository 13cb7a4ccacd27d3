"""Incremental nightly runs equal one full run; re-runs are no-ops; late rows are found.

A random log (``pelengine.generate``: blocking reads, RENAMEs, SETIDs, faults) is
split into 1-6 nightly batches at random points, always including a point right
after a read that left its client blocked and one right after an
``XGROUP SETID``. Each batch is appended to the events table and
``reconstruct --incremental`` runs; at the end every table (the state's output
and ``rejected_events``) must equal what one full run over the whole table gives.
"""

from __future__ import annotations

import os
import pickle
import random
import zlib
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

from pelengine.engine.udf import StateFormatError, load_state
from pelengine.generate import generate_events
from pelengine.model import Replayer
from pelengine.runs.full import run_reconstruct
from pelengine.runs.incremental import StateMismatchError
from pelengine.schemas import EVENTS_SCHEMA, OUTPUT_TABLES, STATE_TABLE_SCHEMA
from pelengine.settings import Settings
from pelengine.storage import read_table, table_version, write_table

pytestmark = pytest.mark.spark

TABLES = (*OUTPUT_TABLES, "rejected_events", "_state")
SEEDS = [int(s) for s in os.environ.get("PELENGINE_INCREMENTAL_SEEDS", "23").split(",")]


def _with_blocking(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """``rows`` with readers that block (the generator's reads never wait): two clients
    block on an empty group early on, and later writes serve them; seqs renumbered."""
    rng = random.Random(seed)
    first = rng.randint(len(rows) // 5, len(rows) // 3)
    second = rng.randint(len(rows) // 2, len(rows) - 1)
    waits = [
        (["XADD", "bk", "*", "f", "v"], "w"),
        (["XGROUP", "CREATE", "bk", "bg", "$"], "w"),
        (
            ["XREADGROUP", "GROUP", "bg", "c1", "COUNT", "10", "BLOCK", "0", "STREAMS", "bk", ">"],
            "b1",
        ),
        (["XREADGROUP", "GROUP", "bg", "c2", "BLOCK", "900000000", "STREAMS", "bk", ">"], "b2"),
    ]
    serves = [(["XADD", "bk", "*", "f", "v"], "w"), (["XADD", "bk", "*", "f", "w"], "w")]
    out: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        for argv, client in waits if i == first else serves if i == second else []:
            out.append({**row, "argv": argv, "client": client, "db": 0, "source": "t"})
        out.append(dict(row))
    for n, row in enumerate(out, start=1):
        if row["seq"] is not None:
            row["seq"] = n
    return out


def _blocked_and_setid_points(rows: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """Positions right after a read that left a client blocked / after an XGROUP SETID."""
    replayer = Replayer("7.0")
    blocked, setid = [], []
    for i, r in enumerate(rows, start=1):
        argv = r["argv"]
        if r["seq"] is None or r["ts_ms"] is None or not argv or not argv[0]:
            continue
        if any(a is None for a in argv):
            continue
        replayer.apply(r["seq"], r["ts_ms"], argv, r["db"] or 0, r["client"])
        name = argv[0].upper()
        if name == "XREADGROUP" and replayer.blocked_clients():
            blocked.append(i)
        if name == "XGROUP" and len(argv) > 1 and argv[1].upper() == "SETID":
            setid.append(i)
    return blocked, setid


def _split(rows: list[dict[str, Any]], seed: int) -> list[int]:
    rng = random.Random(seed)
    blocked, setid = _blocked_and_setid_points(rows)
    assert blocked and setid, "the workload must block a reader and move a group"
    nights = rng.randint(1, 6)
    points = {rng.choice(blocked), rng.choice(setid)} if nights > 2 else {rng.choice(blocked)}
    while len(points) < nights - 1:
        points.add(rng.randint(1, len(rows) - 1))
    return sorted(points)[: nights - 1] + [len(rows)]


def _versions(spark: SparkSession, out: Path) -> dict[str, int | None]:
    return {name: table_version(spark, str(out / name)) for name in TABLES}


def assert_tables_equal(spark: SparkSession, a: Path, b: Path) -> None:
    for name in (*OUTPUT_TABLES, "rejected_events"):
        left = read_table(spark, str(a / name))
        right = read_table(spark, str(b / name))
        assert_df_equality(left, right, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_nightly_batches_equal_one_full_run(spark: SparkSession, tmp_path: Path, seed: int) -> None:
    rows = _with_blocking(list(generate_events(1500, 6, seed=seed)), seed)
    cuts = _split(rows, seed)
    events, inc, full = tmp_path / "events", tmp_path / "inc", tmp_path / "full"
    options = Settings(incremental=True)
    modes, replayed = [], []
    start = 0
    for cut in cuts:
        batch = spark.createDataFrame(rows[start:cut], EVENTS_SCHEMA)
        write_table(batch, str(events), "append" if start else "overwrite")
        start = cut
        report = run_reconstruct(spark, str(events), str(inc), options)
        modes.append(report["incremental"]["mode"])
        replayed.append(
            (report["incremental"]["families_replayed"], report["incremental"]["families_total"])
        )
    print(f"seed {seed}: nights at {cuts}, modes {modes}, families replayed/total {replayed}")
    assert modes[0] == "full" and all(m == "incremental" for m in modes[1:]), modes
    if len(cuts) > 1:
        assert any(n < total for n, total in replayed[1:]), "every family replayed every night"

    before = _versions(spark, inc)
    again = run_reconstruct(spark, str(events), str(inc), options)
    assert again["incremental"]["mode"] == "up-to-date"
    assert _versions(spark, inc) == before, "re-running a night moved a Delta version"

    run_reconstruct(spark, str(events), str(full), Settings())
    assert_tables_equal(spark, inc, full)


def test_late_rows_recompute_their_family_and_are_reported(
    spark: SparkSession, tmp_path: Path
) -> None:
    rows = list(generate_events(800, 6, seed=9))
    adds = [r["seq"] for r in rows if r["seq"] is not None and r["argv"] and r["argv"][0] == "XADD"]
    # keep one XADD out of the first night: arriving later, at its old seq, it is late
    hole = adds[len(adds) // 2]
    late = [r for r in rows if r["seq"] == hole]
    first = [r for r in rows if r["seq"] != hole]
    events, inc, full = tmp_path / "events", tmp_path / "inc", tmp_path / "full"
    write_table(spark.createDataFrame(first, EVENTS_SCHEMA), str(events), "overwrite")
    run_reconstruct(spark, str(events), str(inc), Settings(incremental=True))
    write_table(spark.createDataFrame(late, EVENTS_SCHEMA), str(events), "append")
    report = run_reconstruct(spark, str(events), str(inc), Settings(incremental=True))
    assert report["incremental"]["mode"] == "full (history changed)"
    changed = report["incremental"]["families_with_changed_history"]
    print(f"late row {late[0]['argv']} -> changed families {changed}")
    assert changed, "the report must name the family the late row reached"
    run_reconstruct(spark, str(events), str(full), Settings())
    assert_tables_equal(spark, inc, full)
    assert table_version(spark, str(events)) == 1


def test_family_map_keeps_saved_names_and_merges_tied_families(spark: SparkSession) -> None:
    from pelengine.pipeline.route import family_map

    rows = [
        (1, 1, ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "c", "b", ">", ">"], 0, None, None),
        (2, 2, ["RENAME", "d", "aa"], 0, None, None),
        (3, 3, ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "x", "y", ">", ">"], 0, None, None),
        (4, 4, ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "q", "m", ">", ">"], 0, None, None),
    ]
    valid = spark.createDataFrame(rows, EVENTS_SCHEMA)
    prior = {(0, "a"): "a", (0, "b"): "a", (0, "p"): "p", (0, "q"): "p"}  # tied before
    saved = {(0, "a"), (0, "c"), (0, "d"), (0, "m"), (0, "p")}  # c, d, m: on their own
    renamed: dict[tuple[int, str], str] = {}
    got = family_map(spark, valid, prior, saved, renamed)
    assert {k: got[(0, k)] for k in ("a", "b", "c", "d", "aa", "x", "y", "m", "p", "q")} == {
        "a": "a",
        "b": "a",
        "c": "a",  # tied to a's family: merged into it
        "d": "d",  # a saved family keeps its name although "aa" sorts first
        "aa": "d",
        "x": "x",  # new keys tied among themselves: the smallest key
        "y": "x",
        "m": "m",  # m (the component's smallest key, its root) merges p's family
        "p": "m",
        "q": "m",
    }
    assert renamed == {(0, "c"): "a", (0, "p"): "m"}


def test_entries_closed_on_an_earlier_night_continue_their_row(
    spark: SparkSession, tmp_path: Path
) -> None:
    """delivery_counts continues from the previous table: 1-1, acked on night 1, is
    delivered again on night 2 (SETID back) after its key was renamed, and FORCE-claimed
    on night 3 before its group is destroyed and re-created. Night 2 stops after writing
    delivery_counts (as if killed) and the events grow before the run that completes it:
    that run must continue from night 1's rows, not from the interrupted run's."""
    nights = [
        [
            ["XADD", "s", "1-1", "f", "v"],
            ["XADD", "s", "2-1", "f", "v"],
            ["XGROUP", "CREATE", "s", "g", "0"],
            ["XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">"],
            ["XACK", "s", "g", "1-1"],
            ["XADD", "other", "1-1", "f", "v"],
            ["XGROUP", "CREATE", "other", "h", "0"],
            ["XREADGROUP", "GROUP", "h", "z", "STREAMS", "other", ">"],
        ],
        [
            ["XGROUP", "SETID", "s", "g", "0"],
            ["RENAME", "s", "t"],
            ["XREADGROUP", "GROUP", "g", "b", "COUNT", "1", "STREAMS", "t", ">"],
            ["XACK", "t", "g", "1-1"],
        ],
        [
            ["XCLAIM", "t", "g", "c", "0", "1-1", "FORCE"],
            ["XGROUP", "DESTROY", "t", "g"],
            ["XGROUP", "CREATE", "t", "g", "0"],
            ["XREADGROUP", "GROUP", "g", "d", "STREAMS", "t", ">"],
        ],
    ]
    rows, seq = [], 0
    for night in nights:
        batch = []
        for argv in night:
            seq += 1
            batch.append({"seq": seq, "ts_ms": 1000 + seq, "argv": argv, "db": 0, "source": "t"})
        rows.append(batch)
    events, inc, full = tmp_path / "events", tmp_path / "inc", tmp_path / "full"
    options = Settings(incremental=True)

    def append(batch: list[dict[str, Any]]) -> None:
        mode = "overwrite" if table_version(spark, str(events)) is None else "append"
        write_table(spark.createDataFrame(batch, EVENTS_SCHEMA), str(events), mode)

    class KilledError(Exception):
        pass

    def kill_before_groups(message: str) -> None:
        if message.startswith("writing groups"):
            raise KilledError

    append(rows[0])
    run_reconstruct(spark, str(events), str(inc), options)
    append(rows[1])
    with pytest.raises(KilledError):
        run_reconstruct(spark, str(events), str(inc), options, kill_before_groups)
    append(rows[2])
    report = run_reconstruct(spark, str(events), str(inc), options)
    assert report["incremental"]["mode"] == "incremental"
    got = {
        (r["key"], r["group_created_seq"], r["id"]): (
            r["status"],
            r["deliveries"],
            r["owner_names"],
            r["first_delivery_ms"],
            r["last_delivery_ms"],
        )
        for r in read_table(spark, str(inc / "delivery_counts")).collect()
    }
    assert got == {  # by hand
        ("t", 3, "1-1"): ("group_destroyed", 3, ["a", "b", "c"], 1004, 1013),
        ("t", 3, "2-1"): ("group_destroyed", 1, ["a"], 1004, 1004),
        ("t", 15, "1-1"): ("pending", 1, ["d"], 1016, 1016),
        ("t", 15, "2-1"): ("pending", 1, ["d"], 1016, 1016),
        ("other", 7, "1-1"): ("pending", 1, ["z"], 1008, 1008),
    }
    run_reconstruct(spark, str(events), str(full), Settings())
    assert_tables_equal(spark, inc, full)

    # a state saved by the version before spilling (format 1) is refused, saying what to do
    rows_now = read_table(spark, str(inc / "_state")).collect()
    old_run = pickle.dumps((1, {}), protocol=5)
    old = [r.asDict() | ({"state_blob": old_run} if r["kind"] == "run" else {}) for r in rows_now]
    write_table(spark.createDataFrame(old, STATE_TABLE_SCHEMA), str(inc / "_state"), "overwrite")
    with pytest.raises(StateMismatchError, match=r"format 1, .* reads format 2 .*new --out"):
        run_reconstruct(spark, str(events), str(inc), options)


def test_a_family_model_of_another_format_is_refused_clearly() -> None:
    blob = zlib.compress(pickle.dumps((1, Replayer("7.0"), 0, 0)))
    with pytest.raises(StateFormatError, match=r"format 1, .* reads format 2: rebuild"):
        load_state(blob)
