"""Incremental nightly runs equal one full run; re-runs are no-ops; late rows are found.

A random log (``pelengine.synth``: blocking reads, RENAMEs, SETIDs, faults) is
split into 1-6 nightly batches at random points, always including a point right
after a read that left its client blocked and one right after an
``XGROUP SETID``. Each batch is appended to the events table and
``reconstruct --incremental`` runs; at the end every table (the state's output
and ``rejected_events``) must equal what one full run over the whole table gives.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from pelengine import storage
from pelengine.engine.python.state import dump_state, load_state, saved_states
from pelengine.engine.udf import _arrow_schema
from pelengine.model import Replayer
from pelengine.model.persist import StateVersionError, dump
from pelengine.pipeline.reconstruct import reconstruct
from pelengine.runs.full import run_reconstruct
from pelengine.runs.incremental import StateMismatchError
from pelengine.schemas import (
    EVENTS_SCHEMA,
    OUTPUT_TABLES,
    REPLAY_TABLE_SCHEMAS,
    SAVED_STATE_TYPE,
    STATE_TABLE_SCHEMA,
)
from pelengine.settings import Settings
from pelengine.storage import read_table, table_version, write_table
from pelengine.synth import generate_events
from tests.delta_rs import delta_rs_table
from tests.frames import assert_same_rows

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
    """The tables of two output roots hold the same rows (read by delta-rs: no Spark job)."""
    for name in (*OUTPUT_TABLES, "rejected_events"):
        assert_same_rows(delta_rs_table(a / name), delta_rs_table(b / name), what=name)


def assert_equals_full_run(spark: SparkSession, events: Path | storage.Table, out: Path) -> None:
    """The tables of the output root ``out`` hold the rows of one full run over ``events``
    (a path, or a table by name): the pipeline's tables, collected, not written (a full
    run's writes are the business of the run tests)."""
    ref = events if isinstance(events, storage.Table) else str(events)
    result = reconstruct(spark, read_table(spark, ref), Settings())
    tables = {**result.tables, "rejected_events": result.rejected}
    try:
        for name in (*OUTPUT_TABLES, "rejected_events"):
            assert_same_rows(tables[name].toArrow(), delta_rs_table(out / name), what=name)
    finally:
        result.unpersist()


@pytest.mark.stores  # on both stores (make test)
@pytest.mark.parametrize("seed", SEEDS)
def test_nightly_batches_equal_one_full_run(spark: SparkSession, tmp_path: Path, seed: int) -> None:
    rows = _with_blocking(list(generate_events(1500, 6, seed=seed)), seed)
    cuts = _split(rows, seed)
    events, inc = tmp_path / "events", tmp_path / "inc"
    settings = Settings(incremental=True)
    modes, replayed = [], []
    start = 0
    for cut in cuts:
        batch = spark.createDataFrame(rows[start:cut], EVENTS_SCHEMA)
        write_table(batch, str(events), "append" if start else "overwrite")
        start = cut
        report = run_reconstruct(spark, str(events), str(inc), settings)
        modes.append(report["incremental"]["mode"])
        replayed.append(
            (report["incremental"]["families_replayed"], report["incremental"]["families_total"])
        )
    print(f"seed {seed}: nights at {cuts}, modes {modes}, families replayed/total {replayed}")
    assert modes[0] == "full" and all(m == "incremental" for m in modes[1:]), modes
    if len(cuts) > 1:
        assert any(n < total for n, total in replayed[1:]), "every family replayed every night"

    before = _versions(spark, inc)
    again = run_reconstruct(spark, str(events), str(inc), settings)
    assert again["incremental"]["mode"] == "up-to-date"
    assert _versions(spark, inc) == before, "re-running a night moved a Delta version"

    assert_equals_full_run(spark, events, inc)


def test_late_rows_recompute_their_family_and_are_reported(
    spark: SparkSession, tmp_path: Path
) -> None:
    rows = list(generate_events(800, 6, seed=9))
    adds = [r["seq"] for r in rows if r["seq"] is not None and r["argv"] and r["argv"][0] == "XADD"]
    # keep one XADD out of the first night: arriving later, at its old seq, it is late
    hole = adds[len(adds) // 2]
    late = [r for r in rows if r["seq"] == hole]
    first = [r for r in rows if r["seq"] != hole]
    events, inc = tmp_path / "events", tmp_path / "inc"
    write_table(spark.createDataFrame(first, EVENTS_SCHEMA), str(events), "overwrite")
    run_reconstruct(spark, str(events), str(inc), Settings(incremental=True))
    write_table(spark.createDataFrame(late, EVENTS_SCHEMA), str(events), "append")
    report = run_reconstruct(spark, str(events), str(inc), Settings(incremental=True))
    assert report["incremental"]["mode"] == "full (history changed)"
    changed = report["incremental"]["families_with_changed_history"]
    print(f"late row {late[0]['argv']} -> changed families {changed}")
    assert changed, "the report must name the family the late row reached"
    assert_equals_full_run(spark, events, inc)
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
    events, inc = tmp_path / "events", tmp_path / "inc"
    settings = Settings(incremental=True)

    def append(batch: list[dict[str, Any]]) -> None:
        mode = "overwrite" if table_version(spark, str(events)) is None else "append"
        write_table(spark.createDataFrame(batch, EVENTS_SCHEMA), str(events), mode)

    class KilledError(Exception):
        pass

    def kill_before_groups(message: str) -> None:
        if message.startswith("writing groups"):
            raise KilledError

    append(rows[0])
    run_reconstruct(spark, str(events), str(inc), settings)
    append(rows[1])
    with pytest.raises(KilledError):
        run_reconstruct(spark, str(events), str(inc), settings, kill_before_groups)
    append(rows[2])
    report = run_reconstruct(spark, str(events), str(inc), settings)
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
    assert_equals_full_run(spark, events, inc)

    # the run row carries what crosses families as typed columns
    state_path = str(inc / "_state")
    rows_now = read_table(spark, state_path).collect()
    (run,) = [r for r in rows_now if r["kind"] == "run"]
    assert run["state_version"] == 3 and run["state"] is None and run["select_db"] == 0
    assert run["delivery_counts_version"] == table_version(spark, str(inc / "delivery_counts"))
    assert (0, "t", "s") in [(f["db"], f["key"], f["family"]) for f in run["family_of"]]
    families = {r["family"]: r for r in rows_now if r["kind"] == "family"}
    assert sorted(families) == ["other", "s"]
    assert {k["key"] for k in families["s"]["state"]["keys"]} == {"t"}

    # family models of another schema version are refused, naming both versions
    newer = [r.asDict() | ({"state_version": 7} if r["kind"] == "family" else {}) for r in rows_now]
    write_table(spark.createDataFrame(newer, STATE_TABLE_SCHEMA), state_path, "overwrite")
    _state_of_record(spark, inc)
    with pytest.raises(StateMismatchError, match=r"schema version 7, .* reads state schema "):
        run_reconstruct(spark, str(events), str(inc), settings)
    # a state pickled by an older pelengine (a state_blob, no version) is refused too
    old = spark.createDataFrame(
        [("run", None, None, 5, b"x", 1, 1), ("family", 0, "s", 3, b"x", 1, 1)],
        "kind string, db int, family string, applied_seq long, state_blob binary, "
        "agg_n long, agg_x long",
    )
    write_table(old, state_path, "overwrite", overwrite_schema=True)
    _state_of_record(spark, inc)
    with pytest.raises(StateMismatchError, match=r"older pelengine .*version 3 .*new --out"):
        run_reconstruct(spark, str(events), str(inc), settings)


def _state_of_record(spark: SparkSession, out: Path) -> None:
    """Make the state's latest version the one the run record names (a night reads the
    state the newest ``_runs`` row names, not a version written after it)."""
    run = storage.newest_run(spark, str(out))
    assert run is not None
    report = json.loads(run["report"])
    report["tables"] = {**run["tables"], "_state": table_version(spark, str(out / "_state"))}
    storage.record_run(spark, str(out), report)


def _waiting_model() -> Replayer:
    """A model with what only a mid-run model holds: IDs at 2^64-1, readers blocked
    (with and without a deadline), a MULTI left open, a key of another type."""
    top = "18446744073709551615"
    r = Replayer("7.4", spill_closed_records=True)
    rows = [
        (["XADD", "s", f"{top}-{top}", "f", "v"], "w"),
        (["XGROUP", "CREATE", "s", "g", "0"], "w"),
        (["XREADGROUP", "GROUP", "g", "a", "STREAMS", "s", ">"], "ra"),
        (["XGROUP", "CREATE", "e", "g", "$", "MKSTREAM"], "w"),
        (["XREADGROUP", "GROUP", "g", "b", "BLOCK", "0", "STREAMS", "e", ">"], "rb"),
        (["XREADGROUP", "GROUP", "g", "c", "BLOCK", "50", "STREAMS", "e", ">"], "rc"),
        (["SET", "x", "1"], "w"),
        (["MULTI"], "m"),
        (["XADD", "e", "*", "f", "v"], "m"),
    ]
    for seq, (argv, client) in enumerate(rows, start=1):
        r.apply(seq, 1000 + seq, argv, 0, client)
    r.drain_changes()
    r.drain_pel_history()
    return r


def test_a_family_model_goes_through_arrow_unchanged() -> None:
    """The ``state`` column's Arrow form (as the replay emits it, and reads it back from
    the next night's seed rows among the events) holds the model exactly."""
    model, other = _waiting_model(), Replayer("7.0")
    assert model.blocked_clients() and model._units and model._ready
    row = {"db": 0, "family": "s", "applied_seq": 9, **dump_state(model)}
    row |= {"agg_n": 9, "agg_x": 123}
    emitted = pa.RecordBatch.from_pylist([row], schema=_arrow_schema(REPLAY_TABLE_SCHEMAS["state"]))
    (back,) = emitted.to_pylist()
    seed_schema = _arrow_schema(
        StructType([StructField("seq", LongType()), StructField("state", SAVED_STATE_TYPE)])
    )
    seeds = [{k: back[k] for k in ("state_version", "state", "agg_n", "agg_x")}]
    seeds.append({**dump_state(other), "agg_n": 1, "agg_x": 2})
    batch = pa.RecordBatch.from_pylist(
        [{"seq": 1}, {"seq": 2, "state": seeds[0]}, {"seq": 3}, {"seq": 4, "state": seeds[1]}],
        schema=seed_schema,
    )
    states = saved_states(batch)
    assert [s is None for s in states] == [True, False, True, False]
    first, second = states[1], states[3]
    assert first is not None and second is not None
    loaded, agg_n, agg_x = load_state(first)
    assert (agg_n, agg_x) == (9, 123)
    want = dump(model)
    want["state"]["model"][0].update(applied=0, ignored=0, failed=0)  # a new run counts anew
    want["state"]["counts"] = []
    assert dump(loaded) == want
    assert load_state(second)[1:] == (1, 2)
    assert saved_states(batch.slice(2)) == states[2:]
    assert saved_states(batch.select(["seq"])) == [None] * 4


def test_a_family_model_of_another_version_is_refused_clearly() -> None:
    saved = {**dump(Replayer("7.0")), "agg_n": 0, "agg_x": 0}
    saved["state_version"] = 7
    with pytest.raises(StateVersionError, match=r"version 7 is not supported .*reads version 3"):
        load_state(saved)
